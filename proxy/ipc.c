/*
 * ipc.c — the proxy's link to its broker: the listening chan (proto/chan.c:
 * peer uid checked, one broker at a time), and the messages the proxy sends
 * on its own (hello, state, replies). What the state says comes from the
 * status hook its user gives: the link knows nothing of kernels or units.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy.h"

static struct chan to_broker;
static const struct proxy *px;
static void (*status)(struct msg *m);

/* Queues a message for the broker; order is kept, nothing blocks. */
void
ipc_send(struct msg *m)
{
	if (chan_send(&to_broker, m))
		log_err("context %s: cannot encode %s", px->px_id, msg_type_name(m->m_type));
}

void
ipc_state(const char *text)
{
	struct msg m;

	msg_init(&m, MSG_STATE);
	status(&m);
	if (text)
		msg_set_str(&m, F_TEXT, text, strlen(text));
	ipc_send(&m);
	msg_free(&m);
}

static void
ipc_hello(const char *why)
{
	struct msg m;

	msg_init(&m, MSG_HELLO);
	msg_set_str(&m, F_ID, px->px_ctx, strlen(px->px_ctx));
	msg_set_str(&m, F_LANG, px->px_lang, strlen(px->px_lang));
	msg_set_str(&m, F_CWD, px->px_cwd, strlen(px->px_cwd));
	msg_set_u64(&m, F_PID, getpid());
	status(&m);
	if (why)
		msg_set_str(&m, F_TEXT, why, strlen(why));
	ipc_send(&m);
	msg_free(&m);
}

void
ipc_reply(enum msg_type t, uint64_t req, const char *text)
{
	struct msg m;

	msg_init(&m, t);
	msg_set_u64(&m, F_REQ, req);
	if (text)
		msg_set_str(&m, F_TEXT, text, strlen(text));
	if (t == MSG_OK) {
		status(&m);
		msg_set_u64(&m, F_PID, getpid());
	}
	ipc_send(&m);
	msg_free(&m);
}

/* A broker attached (CHAN_UP: hello, with why the kernel is dead if it is) or went away. */
void
ipc_link_event(int ev, const char *why)
{
	if (ev == CHAN_DOWN) {
		log_info("context %s: broker disconnected (%s); its streams are dropped", px->px_id,
			 to_broker.ch_why);
	} else if (ev == CHAN_UP) {
		log_info("context %s: broker connected", px->px_id);
		ipc_hello(why);
	}
}

/* The next message or link event from the broker (chan_next's codes). */
int
ipc_next(struct msg *m)
{
	return chan_next(&to_broker, m);
}

/* The link's eventfd, for the loop's epoll. */
int
ipc_fd(void)
{
	return to_broker.ch_fd;
}

void
ipc_listen(const struct proxy *p, void (*fill)(struct msg *m))
{
	char *url = xasprintf("ipc://%s/proxy.sock", p->px_dir);
	int e;

	px = p;
	status = fill;
	unlink(url + strlen("ipc://")); /* a stale socket of a dead proxy of this id */
	/* made in the host's network namespace (nng binds it in this thread): no box lists it */
	int here = hostnet_enter();
	e = chan_listen(&to_broker, url);
	hostnet_leave(here);
	if (e)
		fatal("context %s: listen %s: %s", px->px_id, url, nng_strerror(e));
	free(url);
}

/* The last replies leave (written, they arrive), then the link closes. */
void
ipc_close(void)
{
	chan_flush(&to_broker, 500);
	chan_close(&to_broker);
}
