/*
 * unit_stubs.h — the few symbols the proxy and broker mains define and their
 * modules call. A unit test links every module but neither main, so it
 * includes this once to satisfy the linker; none of the stubs is ever reached
 * by the code the unit tests drive.
 */
#ifndef SANDCELL_UNIT_STUBS_H
#define SANDCELL_UNIT_STUBS_H

#include "../../broker/broker.h"
#include "../../proxy/proxy.h"

struct server sv;

void
server_watch(int fd, uint32_t events, struct evsrc *ev)
{
	(void)fd;
	(void)events;
	(void)ev;
}

void
server_unwatch(int fd)
{
	(void)fd;
}

void
proxy_send(struct proxy *px, struct msg *m)
{
	(void)px;
	(void)m;
}

void
proxy_state(struct proxy *px, const char *text)
{
	(void)px;
	(void)text;
}

#endif
