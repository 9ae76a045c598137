/*
 * ipc.c — the proxy's link to its broker: the nng pair listener (peer uid
 * checked), the non-blocking send queue, and the messages the proxy sends on
 * its own (hello, state, replies).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>

#include "proxy.h"

void
ipc_flush(struct proxy *p)
{
	int e = msgq_flush(&p->px_outq, p->px_ipc);

	if (e)
		log_warn("context %s: send to broker: %s", p->px_id, nng_strerror(e));
}

/* Queues a message for the broker; order is kept, nothing blocks. */
void
ipc_send(struct proxy *p, struct msg *m)
{
	nng_msg *nm;

	if (msg_pack(m, &nm)) {
		log_err("context %s: cannot encode %s", p->px_id, msg_type_name(m->m_type));
		return;
	}
	msgq_push(&p->px_outq, nm);
	ipc_flush(p);
}

static void
ipc_fill_state(struct proxy *p, struct msg *m)
{
	msg_set_u64(m, F_STATE, p->px_kstate);
	msg_set_u64(m, F_KPID, p->px_kshown > 0 ? (uint64_t)p->px_kshown
				: p->px_kpid > 0 ? (uint64_t)p->px_kpid : 0);
	msg_set_u64(m, F_QUEUE, admit_depth(p));
	msg_set_u64(m, F_COUNT, p->px_count);
}

void
ipc_state(struct proxy *p, const char *text)
{
	struct msg m;

	msg_init(&m, MSG_STATE);
	ipc_fill_state(p, &m);
	if (text)
		msg_set_str(&m, F_TEXT, text, strlen(text));
	ipc_send(p, &m);
	msg_free(&m);
}

static void
ipc_hello(struct proxy *p)
{
	struct msg m;

	msg_init(&m, MSG_HELLO);
	msg_set_str(&m, F_ID, p->px_ctx, strlen(p->px_ctx));
	msg_set_str(&m, F_LANG, p->px_lang, strlen(p->px_lang));
	msg_set_str(&m, F_CWD, p->px_cwd, strlen(p->px_cwd));
	msg_set_u64(&m, F_PID, getpid());
	ipc_fill_state(p, &m);
	if (p->px_dead_reason)
		msg_set_str(&m, F_TEXT, p->px_dead_reason, strlen(p->px_dead_reason));
	ipc_send(p, &m);
	msg_free(&m);
}

void
ipc_reply(struct proxy *p, enum msg_type t, uint64_t req, const char *text)
{
	struct msg m;

	msg_init(&m, t);
	msg_set_u64(&m, F_REQ, req);
	if (text)
		msg_set_str(&m, F_TEXT, text, strlen(text));
	if (t == MSG_OK) {
		ipc_fill_state(p, &m);
		msg_set_u64(&m, F_PID, getpid());
	}
	ipc_send(p, &m);
	msg_free(&m);
}

/* nng pipe callbacks run on nng's threads: they only flag and wake the loop. */
static void
ipc_pipe_event(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
	struct proxy *p = arg;
	uint64_t one = 1;

	if (ev == NNG_PIPE_EV_ADD_PRE) {
		uint64_t uid;
		if (nng_pipe_get_uint64(pipe, NNG_OPT_IPC_PEER_UID, &uid) != 0 ||
		    uid != (uint64_t)geteuid()) {
			log_warn("context %s: refused ipc peer with uid %llu", p->px_id,
				 (unsigned long long)uid);
			nng_pipe_close(pipe);
		}
		return;
	}
	if (ev == NNG_PIPE_EV_ADD_POST)
		p->px_pipe_added = 1;
	else
		p->px_pipe_removed = 1;
	if (write(p->px_evfd, &one, sizeof(one)) < 0)
		log_warn("context %s: eventfd: %s", p->px_id, strerror(errno));
}

void
ipc_pipe_events(struct proxy *p)
{
	uint64_t v;

	if (read(p->px_evfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warn("context %s: eventfd: %s", p->px_id, strerror(errno));
	if (__atomic_exchange_n(&p->px_pipe_removed, 0, __ATOMIC_SEQ_CST)) {
		log_info("context %s: broker disconnected; its streams are dropped", p->px_id);
		msgq_clear(&p->px_outq);
		admit_detach_all(p);
	}
	if (__atomic_exchange_n(&p->px_pipe_added, 0, __ATOMIC_SEQ_CST)) {
		log_info("context %s: broker connected", p->px_id);
		ipc_hello(p);
	}
}

void
ipc_listen(struct proxy *p)
{
	nng_listener l;
	char *url = xasprintf("ipc://%s/proxy.sock", p->px_dir);
	char *path = url + strlen("ipc://");
	int e, fd;

	if ((e = nng_pair0_open(&p->px_ipc)))
		fatal("nng_pair0_open: %s", nng_strerror(e));
	nng_socket_set_size(p->px_ipc, NNG_OPT_RECVMAXSZ, PROTO_MAX_FRAME);
	nng_socket_set_int(p->px_ipc, NNG_OPT_SENDBUF, 1024);
	nng_socket_set_int(p->px_ipc, NNG_OPT_RECVBUF, 1024);
	nng_pipe_notify(p->px_ipc, NNG_PIPE_EV_ADD_PRE, ipc_pipe_event, p);
	nng_pipe_notify(p->px_ipc, NNG_PIPE_EV_ADD_POST, ipc_pipe_event, p);
	nng_pipe_notify(p->px_ipc, NNG_PIPE_EV_REM_POST, ipc_pipe_event, p);
	unlink(path); /* a stale socket of a dead proxy of this id */
	if ((e = nng_listener_create(&l, p->px_ipc, url)) ||
	    (e = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600)) ||
	    (e = nng_listener_start(l, 0)))
		fatal("context %s: listen %s: %s", p->px_id, url, nng_strerror(e));
	if ((e = mrecv_open(&p->px_recv, p->px_ipc)))
		fatal("nng receive: %s", nng_strerror(e));
	p->px_ipc_fd = p->px_recv.mr_fd;
	if ((e = nng_socket_get_int(p->px_ipc, NNG_OPT_SENDFD, &fd)))
		fatal("nng send fd: %s", nng_strerror(e));
	p->px_ipc_sendfd = fd;
	free(url);
}
