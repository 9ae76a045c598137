/*
 * link.c — the port through which the broker's core reaches its proxies:
 * open a link to one, send it a message, close the link, start its process,
 * signal it, see that it has exited. What each does is a struct link_ops set
 * once at start (link_use): main.c sets the real ones (chanlink.c's chan over
 * IPC, spawn.c's processes), the core's unit test (tests/unit/brokercore_test.c) a
 * fake proxy. The state every port shares (struct proxy_link, linkdef.h) is
 * opened and closed here.
 */
#include <stdio.h>
#include <stdlib.h>

#include "contextdef.h"
#include "linkdef.h"

static const struct link_ops *ops;

/* The port's operations from now on (main.c's, or a test's). */
void
link_use(const struct link_ops *o)
{
	ops = o;
}

/* A link to the proxy named slot, serving c; dialing goes on in the background. */
int
link_open(struct context *c, const char *slot)
{
	c->c_pl = xcalloc(1, sizeof(*c->c_pl));
	snprintf(c->c_pl->pl_slot, sizeof(c->c_pl->pl_slot), "%s", slot);
	c->c_pl->pl_pidfd = -1;
	c->c_pl->pl_state = KS_STARTING;
	return ops->lo_dial(c);
}

/* Stops watching, closes the connection, frees pl. */
void
link_close(struct proxy_link *pl)
{
	if (!pl)
		return;
	ops->lo_hangup(pl);
	free(pl);
}

void
link_send(struct context *c, struct msg *m)
{
	ops->lo_send(c, m);
}

/* Starts c's proxy (its link is open): our child, starting. */
int
link_spawn(struct context *c)
{
	pid_t pid;
	int e;

	if ((e = ops->lo_spawn(c, &pid)) < 0)
		return e;
	c->c_pl->pl_pid = pid;
	c->c_pl->pl_child = true;
	c->c_pl->pl_state = KS_STARTING;
	return 0;
}

/* Sends signal sig to pl's proxy, if it runs. */
void
link_signal(const struct proxy_link *pl, int sig)
{
	if (pl->pl_pid > 0)
		ops->lo_signal(pl, sig);
}

/*
 * Whether pl's proxy has exited (our child: reaped); wait: until it has
 * (a child only). Its pl_pid is 0 once it has.
 */
bool
link_exited(struct proxy_link *pl, bool wait)
{
	if (pl->pl_pid > 0 && ops->lo_exited(pl, wait))
		pl->pl_pid = 0;
	return pl->pl_pid <= 0;
}
