/*
 * link.c — the link to one proxy (a chan, proto/chan.c): dial it, queue
 * messages without blocking, close it. What the proxy sends is relay.c's.
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
