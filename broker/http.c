/*
 * http.c — the HTTP transport on libmicrohttpd: routing, body limits, JSON
 * parsing, auth and responses; what a request does is request.c's. MHD runs in
 * external-epoll mode inside the broker's loop; requests that wait (context
 * start, restart, delete) are suspended and answered with http_complete().
 */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <sodium.h>

#include "broker.h"

#define CT_TEXT "text/plain; charset=utf-8"
#define CT_JSON "application/json"

struct MHD_Response *
http_text(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		fatal("out of memory");
	s = xrealloc(s, n + 2);
	s[n++] = '\n';
	struct MHD_Response *r = MHD_create_response_from_buffer(n, s, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CT_TEXT);
	return r;
}

struct MHD_Response *
http_json(json_t *j)
{
	/* 12 digits: 46.979, not 46.978999999999999 */
	char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_ENSURE_ASCII |
				       JSON_REAL_PRECISION(12));
	struct MHD_Response *r;

	json_decref(j);
	if (!s)
		fatal("out of memory");
	r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CT_JSON);
	return r;
}

static enum MHD_Result
respond(struct request *rq, unsigned status, struct MHD_Response *r)
{
	enum MHD_Result ret = MHD_queue_response(rq->rq_conn, status, r);

	rq->rq_code = status;
	MHD_destroy_response(r);
	return ret;
}

/* Answers a request now, or after resuming it if it was suspended. */
void
http_complete(struct request *rq, unsigned status, struct MHD_Response *resp)
{
	if (!rq->rq_suspended) {
		respond(rq, status, resp);
		return;
	}
	if (rq->rq_resp)
		MHD_destroy_response(rq->rq_resp);
	rq->rq_resp = resp;
	rq->rq_status = status;
	rq->rq_suspended = false;
	MHD_resume_connection(rq->rq_conn);
	sv.sv_lc.lc_mhd_kick = true;
}

static json_t *
parse_body(struct request *rq, char *err, size_t errsz)
{
	json_error_t jerr;
	json_t *j;

	if (rq->rq_body.b_len == 0) {
		snprintf(err, errsz, "a JSON body is required");
		return NULL;
	}
	j = json_loadb(buf_head(&rq->rq_body), buf_pending(&rq->rq_body),
		       JSON_REJECT_DUPLICATES, &jerr);
	if (!j)
		snprintf(err, errsz, "invalid JSON body: %s (line %d, column %d)", jerr.text,
			 jerr.line, jerr.column);
	else if (!json_is_object(j)) {
		snprintf(err, errsz, "the body must be a JSON object");
		json_decref(j);
		j = NULL;
	}
	return j;
}

void
http_suspend(struct request *rq)
{
	rq->rq_suspended = true;
	MHD_suspend_connection(rq->rq_conn);
}

static enum MHD_Result
do_execute(struct request *rq)
{
	char err[1024];
	json_t *body;

	if (!(body = parse_body(rq, err, sizeof(err))))
		return respond(rq, 400, http_text("%s", err));
	request_execute(rq, body);
	json_decref(body);
	return MHD_YES;
}

static enum MHD_Result
do_create(struct request *rq)
{
	char err[1024];
	const char *language = NULL, *cwd = NULL;
	json_t *body = NULL;

	if (rq->rq_body.b_len) {
		if (!(body = parse_body(rq, err, sizeof(err))))
			return respond(rq, 400, http_text("%s", err));
		if (request_opt_string(body, "language", &language, err, sizeof(err)) < 0 ||
		    request_opt_string(body, "cwd", &cwd, err, sizeof(err)) < 0) {
			json_decref(body);
			return respond(rq, 400, http_text("%s", err));
		}
	}
	request_create(rq, language, cwd);
	json_decref(body);
	return MHD_YES;
}

static enum MHD_Result
do_languages(struct request *rq)
{
	struct kspec **v;
	size_t n;
	json_t *a = json_array();

	kspec_list(&v, &n);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:s, s:s}", "language", v[i]->ks_lang,
						   "kernelspec", v[i]->ks_name));
	kspec_list_free(v, n);
	return respond(rq, 200, http_json(a));
}

static enum MHD_Result
do_list(struct request *rq)
{
	json_t *a = json_array();
	struct context *c;

	TAILQ_FOREACH(c, &sv.sv_tb.tb_contexts, c_link)
		if (context_listed(c))
			json_array_append_new(a, context_json(c, false));
	return respond(rq, 200, http_json(a));
}

/* Bounded label values for the metrics: path templates and known methods. */
static const char *
endpoint_of(const char *url)
{
	static const char *const fixed[] = {"/health", "/ready", "/execute", "/languages",
					    "/metrics", "/contexts", "/openapi.json"};
	const char *rest;

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (!strcmp(url, fixed[i]))
			return fixed[i];
	if (strncmp(url, "/contexts/", 10))
		return "other";
	rest = url + 10 + strcspn(url + 10, "/");
	if (!*rest)
		return "/contexts/{id}";
	if (!strcmp(rest, "/restart"))
		return "/contexts/{id}/restart";
	if (!strcmp(rest, "/interrupt"))
		return "/contexts/{id}/interrupt";
	return "other";
}

static const char *
method_of(const char *m)
{
	static const char *const known[] = {"GET", "POST", "DELETE", "PUT", "HEAD", "PATCH"};

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(m, known[i]))
			return known[i];
	return "other";
}

static enum MHD_Result
do_metrics(struct request *rq)
{
	size_t len;
	char *text = metrics_render(&len);
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);

	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	return respond(rq, 200, r);
}

/* The OpenAPI document of this API (openapi.c). */
static enum MHD_Result
do_openapi(struct request *rq)
{
	size_t len;
	const char *doc = openapi_json(&len);
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, (void *)doc, MHD_RESPMEM_PERSISTENT);

	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CT_JSON);
	return respond(rq, 200, r);
}

/*
 * A client's string as it may be echoed in an answer: printable ASCII, other
 * bytes as \xHH, cut with "..." to fit out. Returns out.
 */
const char *
http_quote(const char *s, char *out, size_t outsz)
{
	size_t n = 0;

	for (; *s && n + 4 < outsz; s++) {
		unsigned char ch = *s;
		if (ch >= 0x20 && ch < 0x7f && ch != '\\')
			out[n++] = ch;
		else
			n += snprintf(out + n, outsz - n, "\\x%02x", ch);
	}
	if (*s && outsz >= 4)
		strcpy(out + (n + 4 <= outsz ? n : outsz - 4), "...");
	else if (outsz)
		out[n < outsz ? n : outsz - 1] = '\0';
	return out;
}

static int
hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')
		return (ch | 0x20) - 'a' + 10;
	return -1;
}

/*
 * Decodes %HH once, in place; returns the new length. An encoded '/' or NUL
 * stays encoded (it would split or cut an id) and sets *bad.
 */
size_t
http_unescape(char *s, bool *bad)
{
	char *r = s, *w = s;

	*bad = false;
	while (*r) {
		int hi, lo;
		if (r[0] != '%' || (hi = hexval(r[1])) < 0 || (lo = hexval(r[2])) < 0) {
			*w++ = *r++;
			continue;
		}
		char ch = (char)(hi << 4 | lo);
		if (ch == '/' || ch == '\0') {
			*bad = true;
			memmove(w, r, 3);
			w += 3;
		} else {
			*w++ = ch;
		}
		r += 3;
	}
	*w = '\0';
	return w - s;
}

static struct conn *conn_of(struct MHD_Connection *c);

/* MHD's unescaper for the path and query arguments: see http_unescape. */
static size_t
unescape(void *cls, struct MHD_Connection *c, char *s)
{
	struct conn *cn = conn_of(c);
	bool bad;
	size_t n = http_unescape(s, &bad);

	(void)cls;
	if (bad && cn)
		cn->cn_bad_at = s; /* refused in on_request if s is the path */
	return n;
}

/*
 * Readiness, for a load balancer or a Kubernetes readiness probe: 503 while
 * draining or while a default context's kernel is not answering (starting at
 * start-up, restarting after a crash); 200 otherwise. A default context a
 * client deleted does not hold it back: the next /execute starts it again.
 */
static enum MHD_Result
do_ready(struct request *rq)
{
	struct context *c;

	if (sv.sv_lc.lc_draining)
		return respond(rq, 503, http_text("not ready: draining"));
	TAILQ_FOREACH(c, &sv.sv_tb.tb_contexts, c_link) {
		if (!c->c_default || !context_listed(c))
			continue;
		const char *state = context_state(c);
		if (!c->c_ready || (strcmp(state, "idle") && strcmp(state, "busy")))
			return respond(rq, 503, http_text("not ready: the default %s context is %s",
							 c->c_lang, state));
	}
	return respond(rq, 200, http_json(json_string("OK")));
}

static enum MHD_Result
route(struct request *rq, const char *url, const char *method)
{
	/* HEAD is GET without the body (MHD leaves it out) */
	bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	bool post = !strcmp(method, "POST"), del = !strcmp(method, "DELETE");
	char id[64], quoted[96];
	const char *rest;
	struct context *c;

	if (!strcmp(url, "/health")) {
		if (!get)
			goto method;
		return respond(rq, 200, http_json(json_string("OK")));
	}
	if (!strcmp(url, "/ready")) {
		if (!get)
			goto method;
		return do_ready(rq);
	}
	if (!strcmp(url, "/execute")) {
		if (!post)
			goto method;
		return do_execute(rq);
	}
	if (!strcmp(url, "/metrics")) {
		if (!get)
			goto method;
		return do_metrics(rq);
	}
	if (!strcmp(url, "/openapi.json")) {
		if (!get)
			goto method;
		return do_openapi(rq);
	}
	if (!strcmp(url, "/languages")) {
		if (!get)
			goto method;
		return do_languages(rq);
	}
	if (!strcmp(url, "/contexts")) {
		if (post)
			return do_create(rq);
		if (get)
			return do_list(rq);
		goto method;
	}
	if (strncmp(url, "/contexts/", 10))
		return respond(rq, 404, http_text("no such endpoint: %.128s", url));
	rest = url + 10;
	size_t idlen = strcspn(rest, "/");
	if (idlen >= sizeof(id))
		return respond(rq, 404, http_text("no such context: its id is %zu bytes long; "
						  "ids are 36 characters", idlen));
	snprintf(id, sizeof(id), "%.*s", (int)idlen, rest);
	if (!(c = context_find(id)))
		return respond(rq, 404, http_text("context '%s' not found",
						  http_quote(id, quoted, sizeof(quoted))));
	rest += idlen;
	if (!*rest) {
		if (get)
			return respond(rq, 200, http_json(context_json(c, true)));
		if (!del)
			goto method;
		request_context(rq, id, OP_DELETE);
		return MHD_YES;
	}
	if (!strcmp(rest, "/restart") || !strcmp(rest, "/interrupt")) {
		if (!post)
			goto method;
		request_context(rq, id, rest[1] == 'r' ? OP_RESTART : OP_INTERRUPT);
		return MHD_YES;
	}
	return respond(rq, 404, http_text("no such endpoint: %.128s", url));
method:
	return respond(rq, 405, http_text("method %.16s not allowed on %.128s",
						   method, url));
}

/*
 * The access token, from X-Access-Token (what the E2B SDK sends) or
 * Authorization: Bearer. Hashes are compared, so the time taken says nothing
 * about the token. Returns NULL when allowed, else why not.
 */
static const char *
token_refusal(struct MHD_Connection *conn)
{
	const char *t = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Access-Token");
	const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
	unsigned char h[32];

	if (!t && auth && !strncasecmp(auth, "Bearer ", 7))
		t = auth + 7;
	if (!t || !*t)
		return "missing access token: send X-Access-Token or Authorization: Bearer";
	crypto_generichash(h, sizeof(h), (const unsigned char *)t, strlen(t), NULL, 0);
	return sodium_memcmp(h, sv.sv_cf.cf_token_hash, sizeof(h)) ? "invalid access token" : NULL;
}

static struct conn *
conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

static enum MHD_Result
frame_of(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
         const char *value, size_t value_size)
{
	(void)kind;
	frame_field(cls, key, key_size, value ? value : "", value ? value_size : 0);
	return MHD_YES;
}

/*
 * A request whose body's end is unclear (frame.c), before anything else is
 * answered: what follows it on the connection is not read as a request.
 */
static const char *
framing_refusal(struct MHD_Connection *conn)
{
	struct frame fr = {0};

	MHD_get_connection_values_n(conn, MHD_HEADER_KIND, frame_of, &fr);
	return fr.fr_why;
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
	   const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct request *rq = *con_cls;

	(void)cls;
	(void)version;
	if (!rq) {
		const char *cl =
			MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
		const char *refused;
		struct conn *cn = conn_of(conn);
		rq = xcalloc(1, sizeof(*rq));
		rq->rq_conn = conn;
		rq->rq_endpoint = endpoint_of(url);
		rq->rq_method = method_of(method);
		*con_cls = rq;
		if (cn)
			cn->cn_in_request = true;
		if ((refused = framing_refusal(conn))) {
			struct MHD_Response *r = http_text("%s", refused);
			MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
			return respond(rq, 400, r);
		}
		if (sv.sv_tb.tb_nconns + sv.sv_tb.tb_npending > sv.sv_cf.cf_max_conns)
			return respond(rq, 503,
				       http_text("too many connections (limit %u); try again",
						 sv.sv_cf.cf_max_conns));
		/* probes carry no token: /health and /ready say nothing else */
		if (sv.sv_cf.cf_token && strcmp(rq->rq_endpoint, "/health") &&
		    strcmp(rq->rq_endpoint, "/ready") &&
		    (refused = token_refusal(conn)))
			return respond(rq, 401, http_text("%s", refused));
		if (cn && cn->cn_bad_at == url)
			return respond(rq, 400, http_text("the path has an encoded '/' or NUL "
							  "(%%2F, %%00): not allowed"));
		if (cl && strtoull(cl, NULL, 10) > sv.sv_cf.cf_max_body)
			return respond(rq, 413,
				       http_text("request body over the limit of %zu bytes",
						 sv.sv_cf.cf_max_body));
		return MHD_YES;
	}
	if (rq->rq_resp) {
		struct MHD_Response *r = rq->rq_resp;
		rq->rq_resp = NULL;
		return respond(rq, rq->rq_status, r);
	}
	if (*upload_size) {
		if (rq->rq_body.b_len + *upload_size > sv.sv_cf.cf_max_body)
			rq->rq_too_big = true;
		else
			buf_append(&rq->rq_body, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (rq->rq_suspended || rq->rq_stream)
		return MHD_YES;
	if (rq->rq_too_big)
		return respond(rq, 413, http_text("request body over the limit of %zu bytes",
						    sv.sv_cf.cf_max_body));
	return route(rq, url, method);
}

static void
on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
	     enum MHD_RequestTerminationCode toe)
{
	struct request *rq = *con_cls;

	(void)cls;
	(void)toe;
	if (!rq)
		return;
	struct conn *cn = conn_of(conn);
	if (cn) { /* the next request head must come within the header timeout */
		cn->cn_in_request = false;
		cn->cn_since = now_ms();
		cn->cn_bad_at = NULL;
	}
	if (rq->rq_code)
		metrics_http(rq->rq_endpoint, rq->rq_method, rq->rq_code);
	if (rq->rq_stream)
		stream_closed(rq->rq_stream);
	request_free(rq);
	*con_cls = NULL;
}

static void
on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
	      enum MHD_ConnectionNotificationCode code)
{
	struct conn *cn = *socket_context;

	(void)cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		cn = xcalloc(1, sizeof(*cn));
		cn->cn_fd = ci ? ci->connect_fd : -1;
		cn->cn_since = accept_since(cn->cn_fd); /* its header timeout's start */
		TAILQ_INSERT_TAIL(&sv.sv_tb.tb_conns, cn, cn_link);
		sv.sv_tb.tb_nconns++;
		*socket_context = cn;
	} else if (cn) {
		TAILQ_REMOVE(&sv.sv_tb.tb_conns, cn, cn_link);
		sv.sv_tb.tb_nconns--;
		free(cn);
		*socket_context = NULL;
	}
}

/*
 * A connection that does not deliver a request head in time (a slowloris
 * trickling bytes, or one that never sends) is shut down; MHD then closes it.
 */
void
http_tick(uint64_t now)
{
	struct conn *cn;

	accept_tick(now);
	TAILQ_FOREACH(cn, &sv.sv_tb.tb_conns, cn_link)
		if (!cn->cn_in_request && cn->cn_fd >= 0 &&
		    now > cn->cn_since + sv.sv_cf.cf_header_timeout * 1000ull) {
			shutdown(cn->cn_fd, SHUT_RDWR);
			cn->cn_fd = -1; /* once */
		}
}

/*
 * MHD's messages are its errors: at start-up they are ours (error); later at
 * warn, at most 20 a minute so that a flood of bad clients cannot flood the
 * log, the rest at debug.
 */
static void
mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	uint64_t now = now_ms();

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	if (!sv.sv_io.io_mhd) {
		log_err("http: %s", line);
		return;
	}
	if (now >= sv.sv_io.io_mhd_log_at + 60000) {
		sv.sv_io.io_mhd_log_at = now;
		sv.sv_io.io_mhd_log_n = 0;
	}
	if (++sv.sv_io.io_mhd_log_n <= 20)
		log_warn("http: %s%s", line,
			 sv.sv_io.io_mhd_log_n == 20 ? " (more this minute at debug level)" : "");
	else
		log_debug("http: %s", line);
}

int
http_start(void)
{
	unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
			 MHD_USE_TURBO | MHD_USE_NO_LISTEN_SOCKET;

	openapi_init();
	if (accept_listen(sv.sv_cf.cf_listen) < 0)
		return -1;
	sv.sv_io.io_mhd = MHD_start_daemon(
		flags, 0, NULL, NULL, on_request, NULL,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, /* first: it logs from here on */
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
		MHD_OPTION_CONNECTION_TIMEOUT, sv.sv_cf.cf_conn_timeout,
		/* headroom over our own limit, so that those over it hear why (503) */
		MHD_OPTION_CONNECTION_LIMIT, sv.sv_cf.cf_max_conns + 64,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONN_MEMORY,
		MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_END);
	if (!sv.sv_io.io_mhd) {
		log_err("http: the HTTP library did not start (see its messages above)");
		return -1;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(sv.sv_io.io_mhd, MHD_DAEMON_INFO_EPOLL_FD);
	sv.sv_io.io_ev_mhd = (struct evsrc){EV_MHD, NULL};
	server_watch(di->epoll_fd, EPOLLIN, &sv.sv_io.io_ev_mhd);
	return 0;
}

void
http_stop(void)
{
	accept_stop();
	if (sv.sv_io.io_mhd)
		MHD_stop_daemon(sv.sv_io.io_mhd);
	sv.sv_io.io_mhd = NULL;
}
