/*
 * contextdef.h — struct context, private to the modules that own its parts:
 *   context.c   the table and the lifecycle: c_link, identity (id, language,
 *               kernelspec, cwd, default), its kind (c_pooled, c_envd: given
 *               to context_new; a claim clears c_pooled), c_created,
 *               c_deleting; frees everything at the end
 *   pool.c      which warm proxy to hand out (c_pooled, c_ready, c_created),
 *               a new context's c_egress handed over and c_iso leased
 *               (boxuid_lease, workspace_own fill it)
 *   link.c      c_pl, the context's proxy link (linkdef.h)
 *   supervise.c the proxy's life: c_respawn_*, c_error when it is lost; an
 *               adopted context's c_ready, c_egress and c_iso (egress_adopt,
 *               boxuid_adopt fill them)
 *   relay.c     what the proxy reports: c_ready, c_error, c_deleting for one
 *               that never started
 *   stream.c    c_streams, c_nstreams, c_count: its executions
 *   waiter.c    c_waiters: requests waiting on it; answer.c takes one off
 *               (answer_drop)
 * Every other file sees struct context opaque, through context.c's
 * accessors (broker.h: context_id, context_lang, context_ready, ...) and the
 * parts handed out whole (context_iso: boxuid.c's, context_egress: egress.c's).
 */
#ifndef SANDCELL_CONTEXTDEF_H
#define SANDCELL_CONTEXTDEF_H

#include "broker.h"

struct context {
	TAILQ_ENTRY(context) c_link;
	char c_id[37];
	char *c_lang, *c_kernel, *c_cwd; /* language, kernelspec name, cwd */
	bool c_default;
	bool c_envd; /* the envd context (envd.c): its box runs envd's agent; hidden */
	struct proxy_link *c_pl; /* its proxy; a restart from the pool swaps it */
	bool c_pooled;           /* a warm proxy with no context yet: not listed */
	bool c_ready;            /* kernel has been ready once: creation answered */
	bool c_deleting;
	uint64_t c_respawn_window;
	int c_respawns;
	char *c_error; /* why the kernel is dead, if it is */
	uint64_t c_created;
	uint64_t c_count;
	struct streamq c_streams;
	int c_nstreams;
	struct requestq c_waiters;
	struct ctxiso c_iso; /* --isolation context: its own uids and workspace */
	struct egress_lists c_egress; /* its own network rules; a warm proxy has none */
};
TAILQ_HEAD(contextq, context);

#endif
