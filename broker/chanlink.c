/*
 * chanlink.c — the real link to one proxy (link.c's port, set by main.c): a
 * chan (proto/chan.c) dialed over IPC to ctx/<slot>/proxy.sock and watched
 * by the loop, messages queued on it without blocking. What the proxy sends
 * is relay.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "linkdef.h"

/* The link's chan is readable: its frames are relay.c's. */
static void
chanlink_readable(void *c, uint32_t events)
{
	(void)events;
	relay_recv(c);
}

int
chanlink_dial(struct context *c)
{
	struct proxy_link *pl = context_link(c);
	char *url = xasprintf("ipc://%s/ctx/%s/proxy.sock", cf->cf_run_dir, pl->pl_slot);
	int e;

	if ((e = chan_dial(&pl->pl_chan, url)))
		goto out;
	pl->pl_ev_recv = (struct evsrc){chanlink_readable, c};
	server_watch(pl->pl_chan.ch_fd, EPOLLIN, &pl->pl_ev_recv);
out:
	if (e)
		log_err("context %s: connect %s: %s", context_id(c), url,
		        nng_strerror(e));
	free(url);
	return e ? -EIO : 0;
}

/* Stops watching pl and closes its connection (link_close frees it). */
void
chanlink_hangup(struct proxy_link *pl)
{
	server_forget(&pl->pl_ev_recv);
	server_forget(&pl->pl_ev_pidfd);
	if (pl->pl_ev_recv.ev_arg)
		server_unwatch(pl->pl_chan.ch_fd);
	if (pl->pl_pidfd >= 0) {
		server_unwatch(pl->pl_pidfd);
		close(pl->pl_pidfd);
	}
	chan_close(&pl->pl_chan);
}

void
chanlink_send(struct context *c, struct msg *m)
{
	if (chan_send(&context_link(c)->pl_chan, m))
		fatal("context %s: cannot encode %s", context_id(c),
		      msg_type_name(m->m_type));
}
