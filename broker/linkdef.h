/*
 * linkdef.h — struct proxy_link: the connection to one proxy process and what
 * it reports. Private to the modules that keep it: link.c (opens and closes
 * it), chanlink.c and spawn.c (the real link and processes behind link.c's
 * port), supervise.c (a proxy's life: pid, pidfd, respawn), relay.c (what
 * the proxy reports: kernel state and pid; its chan's frames), context.c
 * (the views that show it: context_state, context_json, context_swap).
 * Everything else asks context.c (context_pid, context_kstate).
 */
#ifndef SANDCELL_LINKDEF_H
#define SANDCELL_LINKDEF_H

#include "broker.h"

/*
 * Its events point at the context it serves (pl_ev_*.ev_arg), which a restart
 * from the warm pool changes without touching epoll: the evsrc addresses stay
 * put.
 */
struct proxy_link {
	char pl_slot[37];    /* the proxy's name: ctx/<slot>/proxy.sock */
	struct chan pl_chan; /* its ch_fd is watched (pl_ev_recv) */
	int pl_pidfd;        /* adopted proxies: readable when it exits; else -1 */
	struct evsrc pl_ev_recv, pl_ev_pidfd;
	pid_t pl_pid;
	bool pl_child; /* spawned by this broker: reaped via SIGCHLD */
	uint64_t pl_kpid;
	enum kstate pl_state;
};

#endif
