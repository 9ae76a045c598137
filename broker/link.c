/*
 * link.c — the link to one proxy (a chan, proto/chan.c): dial it, queue
 * messages without blocking, and dispatch what the proxy sends (output to its
 * stream, state to the context, replies to waiters).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "broker.h"

/* A link to the proxy named slot, serving c; dialing goes on in the background. */
int
link_open(struct context *c, const char *slot)
{
	char *url = xasprintf("ipc://%s/ctx/%s/proxy.sock", sv.sv_cf.cf_run_dir, slot);
	int e;

	c->c_pl = xcalloc(1, sizeof(*c->c_pl));
	snprintf(c->c_pl->pl_slot, sizeof(c->c_pl->pl_slot), "%s", slot);
	c->c_pl->pl_pidfd = -1;
	c->c_pl->pl_state = KS_STARTING;
	if ((e = chan_dial(&c->c_pl->pl_chan, url)))
		goto out;
	c->c_pl->pl_ev_recv = (struct evsrc){EV_CTX_RECV, c};
	server_watch(c->c_pl->pl_chan.ch_fd, EPOLLIN, &c->c_pl->pl_ev_recv);
out:
	if (e)
		log_err("context %s: connect %s: %s", c->c_id, url, nng_strerror(e));
	free(url);
	return e ? -EIO : 0;
}

/* Stops watching, closes the connection, frees pl. */
void
link_close(struct proxy_link *pl)
{
	if (!pl)
		return;
	server_forget(&pl->pl_ev_recv);
	server_forget(&pl->pl_ev_pidfd);
	if (pl->pl_ev_recv.ev_obj)
		server_unwatch(pl->pl_chan.ch_fd);
	if (pl->pl_pidfd >= 0) {
		server_unwatch(pl->pl_pidfd);
		close(pl->pl_pidfd);
	}
	chan_close(&pl->pl_chan);
	free(pl);
}

void
link_send(struct context *c, struct msg *m)
{
	if (chan_send(&c->c_pl->pl_chan, m))
		fatal("context %s: cannot encode %s", c->c_id, msg_type_name(m->m_type));
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
	struct proxy_link *pl = c->c_pl;

	for (int i = 0; i < 1024; i++) {
		struct msg m;
		int e = chan_next(&pl->pl_chan, &m);
		if (e == CHAN_EMPTY)
			return;
		if (e == CHAN_UP)
			continue; /* the proxy says HELLO */
		if (e == CHAN_DOWN) {
			log_debug("context %s: proxy link down: %s", c->c_id, pl->pl_chan.ch_why);
			/* a context being deleted: its proxy is done with us */
			if (c->c_deleting && !pl->pl_child && pl->pl_pidfd < 0) {
				context_free(c);
				return;
			}
			continue;
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
	/* more than a turn's share: the rest comes at the next turn, after the
	 * other contexts' (the socket may be empty, all of it read) */
	chan_wake(&pl->pl_chan);
}
