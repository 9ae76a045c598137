/*
 * link.c — the nng pair link to one proxy: dial it, queue and flush messages
 * without blocking, and dispatch what the proxy sends (output to its stream,
 * state to the context, replies to waiters).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>

#include "broker.h"

static void
link_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct proxy_link *pl = arg; /* lives until its socket is closed */
	uint64_t one = 1;

	if (ev == NNG_PIPE_EV_ADD_PRE) {
		uint64_t uid;
		if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) != 0 ||
		    uid != (uint64_t)geteuid())
			nng_pipe_close(p); /* not our proxy */
		return;
	}
	__atomic_store_n(&pl->pl_pipe_lost, 1, __ATOMIC_SEQ_CST);
	if (write(sv.sv_io.io_wakefd, &one, sizeof(one)) < 0)
		log_warn("eventfd: %s", strerror(errno));
}

/* A link to the proxy named slot, serving c; dialing goes on in the background. */
int
link_open(struct context *c, const char *slot)
{
	char *url = xasprintf("ipc://%s/ctx/%s/proxy.sock", sv.sv_cf.cf_run_dir, slot);
	int e;

	c->c_pl = xcalloc(1, sizeof(*c->c_pl));
	snprintf(c->c_pl->pl_slot, sizeof(c->c_pl->pl_slot), "%s", slot);
	c->c_pl->pl_pidfd = c->c_pl->pl_rfd = c->c_pl->pl_sfd = -1;
	c->c_pl->pl_recv.mr_fd = -1;
	c->c_pl->pl_state = KS_STARTING;
	if ((e = nng_pair0_open(&c->c_pl->pl_sock)))
		goto out;
	nng_socket_set_size(c->c_pl->pl_sock, NNG_OPT_RECVMAXSZ, PROTO_MAX_FRAME);
	nng_socket_set_int(c->c_pl->pl_sock, NNG_OPT_SENDBUF, 1024);
	nng_socket_set_int(c->c_pl->pl_sock, NNG_OPT_RECVBUF, 1024);
	nng_socket_set_ms(c->c_pl->pl_sock, NNG_OPT_RECONNMINT, 5);
	nng_socket_set_ms(c->c_pl->pl_sock, NNG_OPT_RECONNMAXT, 100);
	nng_pipe_notify(c->c_pl->pl_sock, NNG_PIPE_EV_ADD_PRE, link_pipe_event, c->c_pl);
	nng_pipe_notify(c->c_pl->pl_sock, NNG_PIPE_EV_REM_POST, link_pipe_event, c->c_pl);
	if ((e = nng_dial(c->c_pl->pl_sock, url, NULL, NNG_FLAG_NONBLOCK)) ||
	    (e = mrecv_open(&c->c_pl->pl_recv, c->c_pl->pl_sock)) ||
	    (e = nng_socket_get_int(c->c_pl->pl_sock, NNG_OPT_SENDFD, &c->c_pl->pl_sfd)))
		goto out;
	c->c_pl->pl_rfd = c->c_pl->pl_recv.mr_fd;
	c->c_pl->pl_ev_recv = (struct evsrc){EV_CTX_RECV, c};
	c->c_pl->pl_ev_send = (struct evsrc){EV_CTX_SEND, c};
	server_watch(c->c_pl->pl_rfd, EPOLLIN, &c->c_pl->pl_ev_recv);
out:
	if (e)
		log_err("context %s: connect %s: %s", c->c_id, url, nng_strerror(e));
	free(url);
	return e ? -EIO : 0;
}

/*
 * nng < 1.6 never closes the two pipes behind a pair0 socket's poll fds
 * (NNG_OPT_RECVFD, _SENDFD; fixed by nng PR 1640): 4 fds per context. After
 * nng_close nothing in nng uses them, so we close every fd on those pipes,
 * found by inode (the write ends are nng's own).
 */
static void
link_close_poll_pipes(int rfd, int sfd)
{
#if NNG_MAJOR_VERSION == 1 && NNG_MINOR_VERSION < 6
	struct stat want[2], st;
	int n = 0;
	DIR *d;
	struct dirent *de;

	if (rfd >= 0 && fstat(rfd, &want[n]) == 0 && S_ISFIFO(want[n].st_mode))
		n++;
	if (sfd >= 0 && fstat(sfd, &want[n]) == 0 && S_ISFIFO(want[n].st_mode))
		n++;
	if (!n || !(d = opendir("/proc/self/fd")))
		return;
	while ((de = readdir(d))) {
		int fd = atoi(de->d_name);
		if (de->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) < 0)
			continue;
		for (int i = 0; i < n; i++)
			if (st.st_ino == want[i].st_ino && st.st_dev == want[i].st_dev &&
			    S_ISFIFO(st.st_mode))
				close(fd);
	}
	closedir(d);
#else
	(void)rfd;
	(void)sfd;
#endif
}

/* Stops watching, closes the socket (and the poll pipes nng leaves), frees pl. */
void
link_close(struct proxy_link *pl)
{
	if (!pl)
		return;
	if (pl->pl_rfd >= 0)
		server_unwatch(pl->pl_rfd);
	if (pl->pl_sfd_watched)
		server_unwatch(pl->pl_sfd);
	if (pl->pl_pidfd >= 0) {
		server_unwatch(pl->pl_pidfd);
		close(pl->pl_pidfd);
	}
	nng_close(pl->pl_sock); /* waits for pipe callbacks: pl stays valid until here */
	mrecv_close(&pl->pl_recv); /* and for its receive's */
	link_close_poll_pipes(-1, pl->pl_sfd);
	msgq_free(&pl->pl_outq);
	free(pl);
}

void
link_flush(struct context *c)
{
	struct proxy_link *pl = c->c_pl;
	int e = msgq_flush(&pl->pl_outq, pl->pl_sock);

	if (e)
		log_warn("context %s: send: %s", c->c_id, nng_strerror(e));
	/* the send fd is readable while sending would not block: watch it only
	 * while something waits, or the loop would spin */
	if (pl->pl_outq.mq_n && !pl->pl_sfd_watched) {
		server_watch(pl->pl_sfd, EPOLLIN, &pl->pl_ev_send);
		pl->pl_sfd_watched = true;
	} else if (!pl->pl_outq.mq_n && pl->pl_sfd_watched) {
		server_unwatch(pl->pl_sfd);
		pl->pl_sfd_watched = false;
	}
}

void
link_send(struct context *c, struct msg *m)
{
	nng_msg *nm;

	if (msg_pack(m, &nm))
		fatal("context %s: cannot encode %s", c->c_id, msg_type_name(m->m_type));
	msgq_push(&c->c_pl->pl_outq, nm);
	link_flush(c);
}

static void
link_on_state(struct context *c, struct msg *m)
{
	if (m->m_type == MSG_STATE && c->c_ready && m->m_state == KS_STARTING) {
		metrics_count(M_KERNEL_RESTART, 1);
		control_event(json_pack("{s:s, s:s, s:s}", "event", "kernel_restarted", "context",
					c->c_id, "why", m->m_text.s ? m->m_text.s : ""));
	}
	c->c_pl->pl_state = m->m_state;
	if (m->m_has & FB(F_KPID))
		c->c_pl->pl_kpid = m->m_kpid;
	free(c->c_error);
	c->c_error = NULL;
	if (c->c_pl->pl_state == KS_DEAD && (m->m_has & FB(F_TEXT)))
		c->c_error = xstrdup(m->m_text.s);
	if (!c->c_ready && (c->c_pl->pl_state == KS_IDLE || c->c_pl->pl_state == KS_BUSY) &&
	    c->c_pooled) {
		c->c_ready = true;
		log_info("pool: a %s kernel is warm (proxy %d, %llu ms)", c->c_kernel,
			 (int)c->c_pl->pl_pid, (unsigned long long)(now_ms() - c->c_created));
	} else if (!c->c_ready && (c->c_pl->pl_state == KS_IDLE || c->c_pl->pl_state == KS_BUSY)) {
		c->c_ready = true;
		log_info("context %s: ready in %llu ms", c->c_id,
			 (unsigned long long)(now_ms() - c->c_created));
		control_event(json_pack("{s:s, s:s, s:s}", "event", "context_ready", "context",
					c->c_id, "language", c->c_lang));
		waiter_answer_ready(c);
		sv.sv_po.po_kick = true; /* the pool may have waited for it (pool_yield) */
	} else if (!c->c_ready && c->c_pl->pl_state == KS_DEAD) {
		if (c->c_pooled)
			sv.sv_po.po_backoff = now_ms() + POOL_BACKOFF_MS;
		waiter_answer_ready(c);
		c->c_deleting = true; /* a context that never started is not kept */
		struct msg sd;
		msg_init(&sd, MSG_SHUTDOWN);
		msg_set_u64(&sd, F_REQ, sv.sv_tb.tb_next_req++);
		link_send(c, &sd);
		msg_free(&sd);
	}
}

void
link_recv(struct context *c)
{
	for (int i = 0; i < 1024; i++) {
		struct msg m;
		int e = mrecv_next(&c->c_pl->pl_recv, &m);
		if (e == NNG_EAGAIN)
			return;
		if (e > 0) {
			log_warn("context %s: receive: %s", c->c_id, nng_strerror(e));
			return;
		}
		if (e < 0) {
			log_warn("context %s: bad frame from proxy dropped: %s", c->c_id,
				 proto_strerror(e));
			continue;
		}
		struct stream *s;
		switch (m.m_type) {
		case MSG_OUTPUT:
			if ((s = stream_find(c, m.m_stream)))
				stream_output(s, m.m_data.s, m.m_data.len, m.m_final ? &m : NULL);
			break;
		case MSG_HELLO:
		case MSG_STATE:
			link_on_state(c, &m);
			break;
		case MSG_STATS:
			metrics_count(M_OUTPUT_DROPPED, m.m_count);
			break;
		case MSG_OK:
		case MSG_FAIL:
			waiter_reply(c, &m);
			break;
		default:
			log_warn("context %s: unexpected %s from proxy, dropped", c->c_id,
				 msg_type_name(m.m_type));
		}
		msg_free(&m);
	}
}

/* Pipe removals of a context being deleted: its proxy is done with us. */
void
link_pipe_events(void)
{
	struct context *c, *next;

	for (c = TAILQ_FIRST(&sv.sv_tb.tb_contexts); c; c = next) {
		next = TAILQ_NEXT(c, c_link);
		if (__atomic_exchange_n(&c->c_pl->pl_pipe_lost, 0, __ATOMIC_SEQ_CST) &&
		    c->c_deleting && !c->c_pl->pl_child && c->c_pl->pl_pidfd < 0)
			context_free(c);
	}
}
