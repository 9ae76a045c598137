/*
 * request.c — the request layer: execute, create, restart, interrupt, delete
 * and drain, the same for an HTTP client and a sandcellctl client. The
 * transports only parse their own framing into the arguments below and hand
 * over a request that carries its own operations (struct request_ops);
 * validation (validate.c), the drain and queue checks and the answer happen
 * here, so the two front ends cannot drift apart.
 *
 * From a request_* call on, exactly one answer_done() (answer.c) answers the
 * request: now, when its context replies (waiter.c), or through its stream.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "broker.h"

static int
create_status(int rc)
{
	/* ENOSPC: no room for its workspace's bound (bounds.c) until a context goes */
	return rc == -EAGAIN			 ? 429
	       : rc == -ENOENT || rc == -EINVAL ? 400
	       : rc == -ENOSPC			 ? 507
						 : 500;
}

/* The context an execution names, or the default of its language (created on first use). */
static int
execute_context(const char *ctx_id, char *lang, size_t langsz, struct context **out, char *err,
		size_t errsz)
{
	const struct kspec *ks;
	int rc;

	if (ctx_id) {
		if (!(*out = context_find(ctx_id))) {
			snprintf(err, errsz, "context '%.64s' not found", ctx_id);
			return 404;
		}
		return 0;
	}
	if (!lang[0])
		snprintf(lang, langsz, "python");
	if ((ks = kcache_find(lang))) /* the default is per language */
		snprintf(lang, langsz, "%s", ks->ks_lang);
	if (!(*out = context_default(lang)) &&
	    (rc = pool_create(lang, workspace_default_cwd(), true, NULL, out, err, errsz)) < 0)
		return create_status(rc);
	return 0;
}

/*
 * An execution: body is the /execute JSON (borrowed). On success its stream
 * is open and the EXECUTE is on its way to the proxy; the stream answers the
 * request (an HTTP response parked until the first output, or OUTPUT lines
 * and the end to a ctl client).
 */
void
request_execute(struct request *rq, json_t *body)
{
	char err[1024], lang[MAX_LANG + 1];
	const char *ctx_id = NULL;
	struct context *c;
	struct stream *s;
	struct msg m;
	int st;

	if (lifecycle_draining()) {
		answer_done(rq, 503, NULL,
			     "the server is draining before a stop; not accepting new executions");
		return;
	}
	st = validate_execute(body, &m, &ctx_id, lang, sizeof(lang), err, sizeof(err));
	if (st) {
		answer_done(rq, st, NULL, "%s", err);
		return;
	}
	if ((st = execute_context(ctx_id, lang, sizeof(lang), &c, err, sizeof(err)))) {
		msg_free(&m);
		answer_done(rq, st, NULL, "%s", err);
		return;
	}
	if (context_proxyless(c)) {
		msg_free(&m);
		answer_done(rq, 503, NULL, "context %s cannot run code: %s; delete it",
			     context_id(c), context_error(c) ? context_error(c) : "it has no proxy");
		return;
	}
	if (context_queue(c) > cf->cf_max_queue) {
		msg_free(&m);
		answer_done(rq, 429, NULL, "context %s has %d executions waiting (limit %d)",
			     context_id(c), context_queue(c) - 1, cf->cf_max_queue);
		return;
	}
	s = stream_open(c, m.m_code.s);
	msg_set_u64(&m, F_STREAM, s->st_id);
	link_send(c, &m);
	msg_free(&m);
	rq->rq_ops->ro_stream(rq, s); /* the stream answers it from here */
}

/*
 * A new context; answered once its kernel is ready. language and cwd may be
 * NULL; net, its own egress rules, becomes the context's (the caller frees
 * what is left of it).
 */
void
request_create(struct request *rq, const char *language, const char *cwd,
	       struct egress_lists *net)
{
	char err[1024], why[256], lang[MAX_LANG + 1];
	struct context *c;
	int rc;

	if (lifecycle_draining()) {
		answer_done(rq, 503, NULL,
			     "the server is draining before a stop; not creating contexts");
		return;
	}
	if (validate_language(language ? language : "python", lang, sizeof(lang), err,
			   sizeof(err)) < 0) {
		answer_done(rq, 400, NULL, "%s", err);
		return;
	}
	/* as the kernel's uid; under --isolation context once it has one (boxuid_lease, workspace_own) */
	if (cwd && !boxuid_isolates() && cwd_usable(boxuid_kernel(NULL), workspace_of(NULL), cwd, err, sizeof(err)) < 0) {
		answer_done(rq, 400, NULL, "%s", err);
		return;
	}
	if (!cwd && cwd_check(workspace_of(NULL), (uid_t)-1, why, sizeof(why)) < 0) {
		/* checked at start; gone or closed since: not the client's fault */
		answer_done(rq, 500, NULL,
			     "the server's workspace '%.256s' (--cwd) cannot be used: %s",
			     workspace_of(NULL), why);
		return;
	}
	if (!cwd)
		cwd = workspace_default_cwd();
	if ((rc = pool_create(lang, cwd, false, net, &c, err, sizeof(err))) < 0) {
		answer_done(rq, create_status(rc), NULL, "%s", err);
		return;
	}
	answer_wait(rq);
	waiter_wait_ready(c, rq);
}

/* Restart, interrupt or delete (OP_*) of the context named id. */
void
request_context(struct request *rq, const char *id, int op)
{
	struct context *c = context_find(id);

	if (!c) {
		answer_done(rq, 404, NULL, "context '%.64s' not found", id);
		return;
	}
	if (context_proxyless(c)) {
		/* nobody to ask: a delete is done at once, the rest cannot be */
		if (op == OP_DELETE) {
			context_delete(c);
			context_end(c, CTX_DELETED, NULL);
			answer_done(rq, 200, json_null(), NULL);
		} else {
			answer_done(rq, 503, NULL, "context %s has no proxy: %s; delete it",
				     id, context_error(c) ? context_error(c) : "it is not running");
		}
		return;
	}
	if (op == OP_RESTART && pool_restart(c)) {
		answer_done(rq, 200, json_null(), NULL);
		return;
	}
	answer_wait(rq);
	waiter_request(c, rq,
			op == OP_INTERRUPT ? MSG_INTERRUPT
			: op == OP_RESTART ? MSG_RESTART
					   : MSG_SHUTDOWN,
			op);
}

/* Drain (new executions and contexts get 503) or accept again. */
void
request_drain(struct request *rq, bool drain)
{
	if (lifecycle_drain(drain) < 0) {
		answer_done(rq, 409, NULL, "the server is stopping");
		return;
	}
	log_info("%s by the operator", drain ? "draining" : "accepting again");
	events_emitf("{s:s}", "event", drain ? "drain" : "undrain");
	answer_done(rq, 200, NULL, "%s", drain ? "draining" : "accepting");
}
