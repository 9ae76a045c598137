/*
 * ipc.c — the proxy's link to its broker: the listening chan (proto/chan.c:
 * peer uid checked, one broker at a time), and the messages the proxy sends
 * on its own (hello, state, replies).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy.h"

/* Queues a message for the broker; order is kept, nothing blocks. */
void
ipc_send(struct proxy *p, struct msg *m)
{
	if (chan_send(&p->px_link, m))
		log_err("context %s: cannot encode %s", p->px_id, msg_type_name(m->m_type));
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

/* A broker attached (CHAN_UP) or went away (CHAN_DOWN). */
void
ipc_link_event(struct proxy *p, int ev)
{
	if (ev == CHAN_DOWN) {
		log_info("context %s: broker disconnected (%s); its streams are dropped", p->px_id,
			 p->px_link.ch_why);
		admit_detach_all(p);
	} else if (ev == CHAN_UP) {
		log_info("context %s: broker connected", p->px_id);
		ipc_hello(p);
	}
}

void
ipc_listen(struct proxy *p)
{
	char *url = xasprintf("ipc://%s/proxy.sock", p->px_dir);
	int e;

	unlink(url + strlen("ipc://")); /* a stale socket of a dead proxy of this id */
	if ((e = chan_listen(&p->px_link, url)))
		fatal("context %s: listen %s: %s", p->px_id, url, nng_strerror(e));
	p->px_ipc_fd = p->px_link.ch_fd;
	free(url);
}
