/*
 * request.c — the request layer: execute, create, restart, interrupt, delete
 * and drain, the same for an HTTP client and a sandcellctl client. The
 * transports (http.c, control.c) only parse their own framing into the
 * arguments below; validation, the drain and queue checks and the answer
 * happen here, so the two front ends cannot drift apart.
 *
 * Ownership: a request belongs to its transport until it is handed to a
 * request_* call; from then on exactly one completion answers it,
 * request_done(), now or when its context replies. request_done() frees a
 * ctl request at once; an HTTP one is freed by MHD's completion callback
 * (it must outlive the response), both through request_free().
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "broker.h"

/* Optional string member of a JSON body: absent and null are the same. */
int
request_opt_string(json_t *body, const char *key, const char **out, char *err, size_t errsz)
{
	json_t *v = json_object_get(body, key);

	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v)) {
		snprintf(err, errsz, "'%s' must be a string", key);
		return -1;
	}
	*out = json_string_value(v);
	return 0;
}

static int
language_check(const char *in, char *lang, size_t langsz, char *err, size_t errsz)
{
	if (lang_normalise(in, lang, langsz) < 0 || !kcache_find(lang)) {
		char *avail = kspec_languages();
		snprintf(err, errsz, "unknown language '%.64s'; available: %s", in, avail);
		free(avail);
		return -1;
	}
	return 0;
}

/*
 * Validates an execute body into an EXECUTE message. Returns 0, or an HTTP
 * status with err set. A language is checked against installed kernelspecs.
 */
int
request_validate_execute(json_t *body, struct msg *m, const char **ctx_id, char *lang,
			 size_t langsz, char *err, size_t errsz)
{
	json_t *code = json_object_get(body, "code"), *env, *to, *v;
	const char *language, *policy, *k;

	msg_init(m, MSG_EXECUTE);
	lang[0] = '\0';
	if (!json_is_object(body))
		return snprintf(err, errsz, "the body must be a JSON object"), 400;
	if (!code)
		return snprintf(err, errsz, "'code' is required"), 400;
	if (!json_is_string(code))
		return snprintf(err, errsz, "'code' must be a string"), 400;
	if (json_string_length(code) > PROTO_MAX_BIG)
		return snprintf(err, errsz, "'code' is too long"), 413;
	if (request_opt_string(body, "context_id", ctx_id, err, errsz) < 0 ||
	    request_opt_string(body, "language", &language, err, errsz) < 0 ||
	    request_opt_string(body, "on_disconnect", &policy, err, errsz) < 0)
		return 400;
	if (*ctx_id && language)
		return snprintf(err, errsz, "'context_id' and 'language' cannot both be set"),
		       400;
	if (policy && strcmp(policy, "interrupt") && strcmp(policy, "continue"))
		return snprintf(err, errsz,
				"'on_disconnect' must be \"interrupt\" or \"continue\""),
		       400;
	to = json_object_get(body, "timeout");
	if (to && !json_is_null(to)) {
		double t = json_number_value(to);
		if (!json_is_number(to) || !(t > 0))
			return snprintf(err, errsz,
					"'timeout' must be a number of seconds, > 0"),
			       400;
		if (t > 604800)
			return snprintf(err, errsz,
					"'timeout' must be at most 604800 seconds (7 days)"),
			       400;
		msg_set_u64(m, F_TIMEOUT, (uint64_t)(t * 1000 + 0.5) ? (uint64_t)(t * 1000 + 0.5) : 1);
	}
	/* everything must fit one IPC frame to the proxy */
	size_t total = json_string_length(code);
	env = json_object_get(body, "env_vars");
	if (env && !json_is_null(env)) {
		if (!json_is_object(env))
			return snprintf(err, errsz, "'env_vars' must be an object of strings"),
			       400;
		if (json_object_size(env) > PROTO_MAX_ENV)
			return snprintf(err, errsz, "'env_vars' has too many entries"), 400;
		json_object_foreach(env, k, v)
		{
			if (!env_key_valid(k)) {
				snprintf(err, errsz, "env var name '%.64s' is not valid", k);
				goto bad;
			}
			if (!json_is_string(v)) {
				snprintf(err, errsz, "env var '%s' must be a string", k);
				goto bad;
			}
			if (strlen(json_string_value(v)) != json_string_length(v) ||
			    json_string_length(v) > PROTO_MAX_ENVVAL) {
				snprintf(err, errsz, "env var '%s' has a NUL byte or is too long",
					 k);
				goto bad;
			}
			msg_add_env(m, k, json_string_value(v));
			total += strlen(k) + json_string_length(v) + 16;
		}
	}
	if (total > PROTO_MAX_BIG) {
		snprintf(err, errsz, "code and env_vars together are over %u bytes",
			 PROTO_MAX_BIG);
		msg_free(m);
		return 413;
	}
	if (language && language_check(language, lang, langsz, err, errsz) < 0)
		goto bad;
	msg_set_str(m, F_CODE, json_string_value(code), json_string_length(code));
	msg_set_u64(m, F_POLICY,
		    policy && !strcmp(policy, "continue") ? POLICY_CONTINUE : POLICY_INTERRUPT);
	return 0;
bad:
	msg_free(m);
	return 400;
}

void
request_free(struct request *rq)
{
	waiter_forget(rq);
	if (rq->rq_resp)
		MHD_destroy_response(rq->rq_resp);
	buf_free(&rq->rq_body);
	free(rq);
}

/*
 * The one completion of a request: an HTTP one gets a JSON or plain-text
 * response (now, or resumed if it waited), a sandcellctl one an OK/FAIL reply
 * and END. Takes json. rq must not be used after it.
 */
void
request_done(struct request *rq, unsigned status, json_t *json, const char *fmt, ...)
{
	char *text = NULL;
	va_list ap;

	waiter_forget(rq);
	if (!json && fmt) {
		va_start(ap, fmt);
		if (vasprintf(&text, fmt, ap) < 0)
			fatal("out of memory");
		va_end(ap);
	}
	if (rq->rq_ctl) {
		control_reply(rq, status, json, text);
		request_free(rq);
	} else {
		http_complete(rq, status, json ? http_json(json) : http_text("%s", text ? text : ""));
	}
	free(text);
}

/* The request waits for its context: an HTTP connection is suspended meanwhile. */
static void
request_wait(struct request *rq)
{
	if (!rq->rq_ctl)
		http_suspend(rq);
}

static int
create_status(int rc)
{
	return rc == -EAGAIN ? 429 : rc == -ENOENT || rc == -EINVAL ? 400 : 500;
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
	    (rc = context_create(lang, box_default_cwd(), true, out, err, errsz)) < 0)
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

	if (sv.sv_lc.lc_draining) {
		request_done(rq, 503, NULL,
			     "the server is draining before a stop; not accepting new executions");
		return;
	}
	st = request_validate_execute(body, &m, &ctx_id, lang, sizeof(lang), err, sizeof(err));
	if (st) {
		request_done(rq, st, NULL, "%s", err);
		return;
	}
	if ((st = execute_context(ctx_id, lang, sizeof(lang), &c, err, sizeof(err)))) {
		msg_free(&m);
		request_done(rq, st, NULL, "%s", err);
		return;
	}
	if (context_proxyless(c)) {
		msg_free(&m);
		request_done(rq, 503, NULL, "context %s cannot run code: %s; delete it", c->c_id,
			     c->c_error ? c->c_error : "it has no proxy");
		return;
	}
	if (c->c_nstreams > sv.sv_cf.cf_max_queue) {
		msg_free(&m);
		request_done(rq, 429, NULL, "context %s has %d executions waiting (limit %d)",
			     c->c_id, c->c_nstreams - 1, sv.sv_cf.cf_max_queue);
		return;
	}
	s = rq->rq_ctl ? stream_open_ctl(c, rq->rq_pipe, rq->rq_ctl_req, m.m_code.s)
		       : stream_open(c, rq->rq_conn, m.m_code.s);
	msg_set_u64(&m, F_STREAM, s->st_id);
	link_send(c, &m);
	msg_free(&m);
	if (rq->rq_ctl) {
		request_free(rq); /* the stream answers the ctl client when it ends */
		return;
	}
	rq->rq_stream = s;
	stream_park(s, rq);
}

/* A new context; answered once its kernel is ready. language and cwd may be NULL. */
void
request_create(struct request *rq, const char *language, const char *cwd)
{
	char err[1024], why[256], lang[MAX_LANG + 1];
	struct context *c;
	int rc;

	if (sv.sv_lc.lc_draining) {
		request_done(rq, 503, NULL,
			     "the server is draining before a stop; not creating contexts");
		return;
	}
	if (language_check(language ? language : "python", lang, sizeof(lang), err,
			   sizeof(err)) < 0) {
		request_done(rq, 400, NULL, "%s", err);
		return;
	}
	/* as the kernel's uid; under --isolation context once it has one (box_isolate) */
	if (cwd && !box_isolates() && cwd_usable(NULL, cwd, err, sizeof(err)) < 0) {
		request_done(rq, 400, NULL, "%s", err);
		return;
	}
	if (!cwd && cwd_check(box_workspace_of(NULL), (uid_t)-1, why, sizeof(why)) < 0) {
		/* checked at start; gone or closed since: not the client's fault */
		request_done(rq, 500, NULL,
			     "the server's workspace '%.256s' (--cwd) cannot be used: %s",
			     box_workspace_of(NULL), why);
		return;
	}
	if (!cwd)
		cwd = box_default_cwd();
	if ((rc = context_create(lang, cwd, false, &c, err, sizeof(err))) < 0) {
		request_done(rq, create_status(rc), NULL, "%s", err);
		return;
	}
	request_wait(rq);
	waiter_wait_ready(c, rq);
}

/* Restart, interrupt or delete (OP_*) of the context named id. */
void
request_context(struct request *rq, const char *id, int op)
{
	struct context *c = context_find(id);

	if (!c) {
		request_done(rq, 404, NULL, "context '%.64s' not found", id);
		return;
	}
	if (context_proxyless(c)) {
		/* nobody to ask: a delete is done at once, the rest cannot be */
		if (op == OP_DELETE) {
			context_delete(c);
			context_free(c);
			request_done(rq, 200, json_null(), NULL);
		} else {
			request_done(rq, 503, NULL, "context %s has no proxy: %s; delete it",
				     id, c->c_error ? c->c_error : "it is not running");
		}
		return;
	}
	if (op == OP_RESTART && pool_restart(c)) {
		request_done(rq, 200, json_null(), NULL);
		return;
	}
	request_wait(rq);
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
	if (!drain && sv.sv_lc.lc_stopping) {
		request_done(rq, 409, NULL, "the server is stopping");
		return;
	}
	sv.sv_lc.lc_draining = drain;
	log_info("%s by the operator", drain ? "draining" : "accepting again");
	control_event(json_pack("{s:s}", "event", drain ? "drain" : "undrain"));
	request_done(rq, 200, NULL, "%s", drain ? "draining" : "accepting");
}
