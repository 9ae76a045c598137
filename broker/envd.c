/*
 * envd.c — envd's API (E2B's in-sandbox daemon) on the --envd-listen
 * listener (docs/ENVD.md): GET /health, GET and POST /files, and
 * filesystem.Filesystem's unary calls in Connect's JSON. Each operation goes
 * as a MSG_ENVD to the envd context, a hidden context whose proxy runs
 * envd's agent in a box like a context's (proxy/envd.c, envd/agent.c); the
 * agent's answer is checked here and rebuilt in proto3's JSON mapping.
 * http.c hands a request here after its own checks (token, limits) when it
 * came through the envd listener.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "http.h"

#define CT_JSON "application/json"
/* What an envd request is doing (its http_request's hr_envd). */
struct envd_call {
	const char *ec_op; /* the agent's operation */
	bool ec_rpc;       /* Connect's error form, else /files' */
};

/* Off though --envd-listen names an address (envd_wanted, envd_turn_off). */
static bool off;

/* What serves a route. */
enum envd_kind { EK_HEALTH, EK_FILES, EK_FS, EK_PROCESS, EK_STREAM, EK_LATER };

/*
 * envd's routes, with the agent's operation for each: what this listener
 * serves, and docs/envd-openapi.json's paths (tests/api/openapi_test.py
 * checks that the two are the same). Another method of a Connect service
 * is unimplemented, another path not_found.
 */
static const struct envd_path {
	const char *ep_path;
	enum envd_kind ep_kind;
	const char *ep_op;
} envd_paths[] = {
    {"/health", EK_HEALTH, NULL},
    {"/files", EK_FILES, NULL},
    {"/filesystem.Filesystem/Stat", EK_FS, "stat"},
    {"/filesystem.Filesystem/ListDir", EK_FS, "list"},
    {"/filesystem.Filesystem/MakeDir", EK_FS, "mkdir"},
    {"/filesystem.Filesystem/Move", EK_FS, "move"},
    {"/filesystem.Filesystem/Remove", EK_FS, "remove"},
    {"/filesystem.Filesystem/CreateWatcher", EK_FS, "wcreate"},
    {"/filesystem.Filesystem/GetWatcherEvents", EK_FS, "wevents"},
    {"/filesystem.Filesystem/RemoveWatcher", EK_FS, "wremove"},
    {"/filesystem.Filesystem/WatchDir", EK_STREAM, "watch"},
    {"/process.Process/Start", EK_STREAM, "start"},
    {"/process.Process/Connect", EK_STREAM, "connect"},
    {"/process.Process/StreamInput", EK_LATER, NULL},
    {"/process.Process/List", EK_PROCESS, "plist"},
    {"/process.Process/SendSignal", EK_PROCESS, "signal"},
    {"/process.Process/SendInput", EK_PROCESS, "input"},
    {"/process.Process/CloseStdin", EK_PROCESS, "close_stdin"},
    {"/process.Process/Update", EK_PROCESS, "resize"},
};

static enum MHD_Result
fail_now(struct http_request *hr, bool rpc, const char *code, const char *msg)
{
	unsigned st;
	struct MHD_Response *r = respond_json(connect_error(rpc, code, &st, msg));

	return respond_now(hr, st, r);
}

static void
fail_later(struct http_request *hr, bool rpc, const char *code, const char *msg)
{
	unsigned st;
	struct MHD_Response *r = respond_json(connect_error(rpc, code, &st, msg));

	respond_complete(hr, st, r);
}

/* The agent's OK for an operation, as the HTTP answer. */
static void
answer_ok(struct http_request *hr, struct envd_call *ec, struct msg *m)
{
	json_t *a = NULL, *out = NULL;

	a = json_loadb(m->m_data.s, m->m_data.len, 0, NULL);
	if (!strcmp(ec->ec_op, "remove") || !strcmp(ec->ec_op, "signal") ||
	    !strcmp(ec->ec_op, "input") || !strcmp(ec->ec_op, "close_stdin") ||
	    !strcmp(ec->ec_op, "resize") || !strcmp(ec->ec_op, "wremove")) {
		out = json_object();
	} else if (!strcmp(ec->ec_op, "wcreate") || !strcmp(ec->ec_op, "wevents")) {
		out = connect_watcher(ec->ec_op, a);
	} else if (!strcmp(ec->ec_op, "plist")) {
		out = connect_list(a);
	} else if (!strcmp(ec->ec_op, "list") && json_is_array(a)) {
		size_t i;
		json_t *v, *entries = json_array();
		json_array_foreach(a, i, v)
		{
			json_t *e = connect_entry(v);
			if (!e) { /* one bad entry: the answer is not the agent's to shape
				   */
				json_decref(entries);
				entries = NULL;
				break;
			}
			json_array_append_new(entries, e);
		}
		if (entries)
			out = json_pack("{s:o}", "entries", entries);
	} else if (strcmp(ec->ec_op, "list") && strcmp(ec->ec_op, "plist") &&
	           ec->ec_op[0] != 'w') {
		json_t *e = connect_entry(a);
		if (e)
			out = json_pack("{s:o}", "entry", e);
	}
	json_decref(a);
	if (!out) {
		log_warn("envd: the agent's answer to %s is not what it must be",
		         ec->ec_op);
		fail_later(hr, ec->ec_rpc, "internal",
		           "the envd agent's answer is malformed");
		return;
	}
	respond_complete(hr, 200, respond_json(out));
}

/* The proxy's reply to a MSG_ENVD (waiter.c calls it through rq_reply). */
static void
envd_reply(struct request *rq, struct msg *m)
{
	struct http_request *hr = (struct http_request *)rq;
	struct envd_call *ec = hr->hr_envd;

	if (m->m_type == MSG_FAIL) {
		const char *code =
		    (m->m_has & FB(F_OUTCOME)) ? m->m_outcome.s : "internal";
		fail_later(hr, ec->ec_rpc, code, m->m_text.s);
		return;
	}
	answer_ok(hr, ec, m);
}

/* One operation to the agent; its reply completes the request (envd_reply). */
static void
send_op(struct http_request *hr, const char *op, json_t *args, const struct buf *data)
{
	struct envd_call *ec = hr->hr_envd;
	char *s = json_dumps(args, JSON_COMPACT);
	struct msg m;

	json_decref(args);
	ec->ec_op = op;
	msg_init(&m, MSG_ENVD);
	msg_set_str(&m, F_TEXT, op, strlen(op));
	msg_set_str(&m, F_CODE, s, strlen(s));
	if (data)
		msg_set_str(&m, F_DATA, data->b_data ? buf_head(data) : "",
		            buf_pending(data));
	free(s);
	hr->hr_rq.rq_reply = envd_reply;
	waiter_send(context_envd(), &hr->hr_rq, &m);
	msg_free(&m);
	if (!hr->hr_suspended)
		answer_wait(&hr->hr_rq);
}

/* The request's query argument k, or NULL. */
static const char *
arg(struct http_request *hr, const char *k)
{
	return MHD_lookup_connection_value(hr->hr_conn, MHD_GET_ARGUMENT_KIND, k);
}

/* envd's users: "user", and "root", which is the same tenant here (docs/ENVD.md). */
static bool
user_known(const char *u)
{
	return !u || !strcmp(u, "user") || !strcmp(u, "root");
}

/* filesystem.Filesystem's unary calls (the agent's op): Connect, JSON. */
static enum MHD_Result
do_rpc(struct http_request *hr, const char *op)
{
	const char *ct = MHD_lookup_connection_value(hr->hr_conn, MHD_HEADER_KIND,
	                                             MHD_HTTP_HEADER_CONTENT_TYPE);
	json_error_t jerr;
	json_t *body, *args;
	char msg[256];

	if (!ct || strncasecmp(ct, CT_JSON, strlen(CT_JSON)) ||
	    (ct[strlen(CT_JSON)] && ct[strlen(CT_JSON)] != ';')) {
		struct MHD_Response *r =
		    respond_text("unary calls take application/json");
		return respond_now(hr, 415, r);
	}
	body = hr->hr_body.b_len ? json_loadb(buf_head(&hr->hr_body),
	                                      buf_pending(&hr->hr_body), 0, &jerr)
	                         : json_object();
	if (!json_is_object(body)) {
		json_decref(body);
		return fail_now(hr, true, "invalid_argument",
		                "the body is not a JSON object");
	}
	/* proto3 JSON: camelCase or the proto's names; unknown fields ignored */
	args = json_object();
	if (!strcmp(op, "move")) {
		json_object_set(args, "source", json_object_get(body, "source"));
		json_object_set(args, "destination",
		                json_object_get(body, "destination"));
	} else if (!strcmp(op, "wevents") || !strcmp(op, "wremove")) {
		json_object_set(args, "id", json_object_get(body, "watcherId"));
	} else {
		json_object_set(args, "path", json_object_get(body, "path"));
	}
	if (!strcmp(op, "wcreate")) {
		json_object_set_new(
		    args, "recursive",
		    json_boolean(json_is_true(json_object_get(body, "recursive"))));
		json_object_set_new(
		    args, "entry",
		    json_boolean(json_is_true(json_object_get(body, "includeEntry"))));
	}
	if (!strcmp(op, "list")) {
		json_t *d = json_object_get(body, "depth");
		json_int_t depth = 1;
		if (json_is_integer(d))
			depth = json_integer_value(d);
		else if (json_is_string(d)) /* a uint32 may come as a string */
			depth = strtoll(json_string_value(d), NULL, 10);
		else if (d && !json_is_null(d))
			depth = -1;
		if (depth < 0 || depth > UINT32_MAX) {
			json_decref(body);
			json_decref(args);
			return fail_now(hr, true, "invalid_argument",
			                "depth: a uint32 is required");
		}
		json_object_set_new(args, "depth", json_integer(depth));
	}
	json_decref(body);
	json_t *v;
	const char *k;
	json_object_foreach(args, k, v)
	{
		if (strcmp(k, "depth") && strcmp(k, "recursive") && strcmp(k, "entry") &&
		    !json_is_string(v)) {
			snprintf(msg, sizeof(msg), "%s: a string is required", k);
			json_decref(args);
			return fail_now(hr, true, "invalid_argument", msg);
		}
	}
	send_op(hr, op, args, NULL);
	return MHD_YES;
}

/* process.Process's unary calls (the agent's op): List, SendSignal, SendInput,
 * CloseStdin, Update. */
static enum MHD_Result
do_process_rpc(struct http_request *hr, const char *op)
{
	const char *ct = MHD_lookup_connection_value(hr->hr_conn, MHD_HEADER_KIND,
	                                             MHD_HTTP_HEADER_CONTENT_TYPE);
	json_t *body, *args = json_object();
	struct buf data = {0};

	if (!ct || strncasecmp(ct, CT_JSON, strlen(CT_JSON))) {
		json_decref(args);
		return respond_now(hr, 415,
		                   respond_text("unary calls take application/json"));
	}
	body = hr->hr_body.b_len ? json_loadb(buf_head(&hr->hr_body),
	                                      buf_pending(&hr->hr_body), 0, NULL)
	                         : json_object();
	if (!json_is_object(body)) {
		json_decref(body);
		json_decref(args);
		return fail_now(hr, true, "invalid_argument",
		                "the body is not a JSON object");
	}
	if (!strcmp(op, "plist")) {
	} else if (connect_selector(body, args) < 0) {
		json_decref(body);
		json_decref(args);
		return fail_now(hr, true, "invalid_argument",
		                "process: a pid or a tag is required");
	} else if (!strcmp(op, "signal")) {
		int sig = connect_signal(json_object_get(body, "signal"));
		if (!sig) {
			json_decref(body);
			json_decref(args);
			return fail_now(hr, true, "invalid_argument",
			                "signal: SIGNAL_SIGKILL or SIGNAL_SIGTERM");
		}
		json_object_set_new(args, "signal", json_integer(sig));
	} else if (!strcmp(op, "input")) {
		json_t *input = json_object_get(body, "input");
		json_t *in = json_object_get(input, "stdin")
		                 ? json_object_get(input, "stdin")
		                 : json_object_get(input, "pty");
		const char *b64 = json_string_value(in);
		size_t n = b64 ? strlen(b64) : 0, got = 0;
		unsigned char *bin = xmalloc(n + 1);
		if (!b64 || sodium_base642bin(bin, n + 1, b64, n, NULL, &got, NULL,
		                              sodium_base64_VARIANT_ORIGINAL) < 0) {
			free(bin);
			json_decref(body);
			json_decref(args);
			return fail_now(
			    hr, true, "invalid_argument",
			    "input.stdin or input.pty: base64 bytes are required");
		}
		buf_append(&data, bin, got);
		free(bin);
	} else if (!strcmp(op, "resize")) { /* a PTY's size */
		json_t *size = connect_pty_size(json_object_get(body, "pty"));
		if (!size) {
			json_decref(body);
			json_decref(args);
			return fail_now(hr, true, "invalid_argument",
			                "pty.size: cols and rows are required");
		}
		json_object_update(args, size);
		json_decref(size);
	}
	json_decref(body);
	send_op(hr, op, args, buf_pending(&data) ? &data : NULL);
	buf_free(&data);
	return MHD_YES;
}

/*
 * Whether a request to the code listener is envd's: the port E2B's proxies
 * name (E2b-Sandbox-Port: 49983, envd's), or a path only envd has.
 */
bool
envd_asked(struct MHD_Connection *conn, const char *url)
{
	const char *port =
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Port");

	if (port)
		return !strcmp(port, "49983");
	return !strcmp(url, "/files") || !strncmp(url, "/filesystem.Filesystem/", 23) ||
	       !strncmp(url, "/process.Process/", 17);
}

/* Whether it is an upload (POST /files), whose body streams (envdfile.c). */
bool
envd_upload_asked(const char *url, const char *method)
{
	return !strcmp(url, "/files") && !strcmp(method, "POST");
}

/*
 * Why an envd request's body is refused (415), or NULL: besides JSON
 * (caller.c's rule), a file's bytes, a multipart upload and Connect's
 * envelopes. (A web page's cross-origin request was refused before this, by
 * its Origin.)
 */
const char *
envd_body_refusal(struct MHD_Connection *conn, char *why, size_t whysz)
{
	static const char *const types[] = {"application/octet-stream",
	                                    "multipart/form-data",
	                                    "application/connect+json"};
	const char *ct =
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");

	for (size_t i = 0; ct && i < sizeof(types) / sizeof(types[0]); i++) {
		size_t n = strlen(types[i]);
		const char *t = ct + strspn(ct, " \t");
		if (!strncasecmp(t, types[i], n) && strchr(" \t;", t[n]))
			return NULL; /* strchr finds the NUL too: the type alone */
	}
	return caller_body_refusal(conn, why, whysz);
}

/* The envd listener's requests, after http.c's checks. */
enum MHD_Result
envd_route(struct http_request *hr, const char *url, const char *method)
{
	bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	bool post = !strcmp(method, "POST");
	struct context *c = context_envd();
	bool ready = c && context_ready(c) && context_kstate(c) != KS_DEAD;
	bool rpc = !strncmp(url, "/filesystem.Filesystem/", 23) ||
	           !strncmp(url, "/process.Process/", 17);
	const struct envd_path *ep = NULL;

	for (size_t i = 0; i < sizeof(envd_paths) / sizeof(envd_paths[0]); i++)
		if (!strcmp(url, envd_paths[i].ep_path))
			ep = &envd_paths[i];
	if (ep && ep->ep_kind == EK_HEALTH) {
		if (!get)
			return respond_now(hr, 405, respond_text("GET /health"));
		/* ready when its agent is: what a client waits for */
		if (!ready)
			return respond_now(
			    hr, 503,
			    respond_text(c ? "envd is starting"
			                   : "envd is off here (docs/ENVD.md)"));
		return respond_now(
		    hr, 204,
		    MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT));
	}
	if (!ep && !rpc)
		return fail_now(hr, false, "not_found", "no such endpoint");
	if (!ready)
		return fail_now(hr, rpc, "unavailable",
		                "envd is not running (yet): try again");
	hr->hr_envd = xcalloc(1, sizeof(struct envd_call));
	((struct envd_call *)hr->hr_envd)->ec_rpc = rpc;
	if (rpc && !post)
		return respond_now(hr, 405, respond_text("Connect calls are POST"));
	if (!ep)
		return fail_now(hr, true, "unimplemented",
		                "this envd does not serve that method (docs/ENVD.md)");
	switch (ep->ep_kind) {
	case EK_STREAM:
		return envdstream_open(hr, c, ep->ep_op);
	case EK_LATER:
		return envdstream_error(
		    hr, "unimplemented",
		    "this envd does not serve that method yet (docs/ENVD.md)");
	case EK_PROCESS:
		return do_process_rpc(hr, ep->ep_op);
	case EK_FS:
		return do_rpc(hr, ep->ep_op);
	default:
		break;
	}
	if (!user_known(arg(hr, "username")))
		return fail_now(hr, false, "unauthenticated",
		                "no such user: envd knows 'user' and 'root'");
	if (get) {
		const char *path = arg(hr, "path");
		if (!path || !*path)
			return fail_now(hr, false, "invalid_argument",
			                "the path query parameter is required");
		return envdfile_read(hr, c, path);
	}
	if (post) /* http.c hands it here with its head alone: its body streams */
		return envdupload_start(hr, c, arg(hr, "path"));
	return respond_now(hr, 405, respond_text("GET or POST /files"));
}

/* An envd request's leftovers, as MHD ends it. */
void
envd_free(struct http_request *hr)
{
	struct envd_call *ec = hr->hr_envd;

	envdupload_free(hr);
	envdfile_free(hr);
	if (!ec)
		return;
	free(ec);
	hr->hr_envd = NULL;
}

/*
 * The envd context, as the broker starts: hidden (not listed, not counted),
 * its proxy started with --envd and the contexts' box flags; its proxy is
 * respawned as any context's when it dies (supervise.c).
 */
void
envd_start(void)
{
	struct context *c;

	if (!cf->cf_envd_listen || off)
		return;
	c = context_new(NULL, "envd", "envd", BOX_HOME, false, CONTEXT_ENVD);
	if (link_open(c, context_id(c)) < 0 || link_spawn(c) < 0) {
		log_err("envd: could not start its proxy; the envd listener answers 503");
		context_end(c, CTX_DELETED, NULL);
		return;
	}
	log_info("envd: listening on http://%s, agent's proxy pid %d",
	         cf->cf_envd_listen, (int)context_pid(c));
}

/*
 * Whether envd's listener opens: it needs the one sandbox of the contexts,
 * which --isolation context (a box per context) and --no-sandbox lack.
 */
bool
envd_wanted(void)
{
	if (!cf->cf_envd_listen || off)
		return false;
	if (cf->cf_isolated || !cf->cf_sandbox) {
		log_info("envd: off (%s: no single sandbox for its files)",
		         cf->cf_isolated ? "--isolation context" : "--no-sandbox");
		off = true;
		return false;
	}
	return true;
}

/* Its listener could not open (http.c): envd's API is off. */
void
envd_turn_off(void)
{
	off = true;
}
