/*
 * http.c — the HTTP transport on libmicrohttpd: connections, body limits,
 * auth, then the route (api.c's table, or envd.c's); what a request does is
 * request.c's, which answers through respond_ops (respond.c: responses,
 * suspended requests, an execution's streamed output). MHD runs in
 * external-epoll mode inside the broker's loop.
 */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <sodium.h>

#include "http.h"

/* HTTP connections MHD has, for the connection limit and the header timeout. */
static struct connq conns = TAILQ_HEAD_INITIALIZER(conns);
static struct MHD_Daemon *mhd; /* the HTTP library, driven from the loop (http_run) */
static struct evsrc ev_mhd;
static uint64_t mhd_log_at; /* rate limit of MHD's messages at warn level */
static unsigned mhd_log_n;

/* Bounded label values for the metrics: known methods (paths: api_endpoint). */
static const char *
method_of(const char *m)
{
	static const char *const known[] = {"GET", "POST", "DELETE", "PUT", "HEAD", "PATCH"};

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(m, known[i]))
			return known[i];
	return "other";
}

static struct conn *conn_of(struct MHD_Connection *c);

/* MHD's unescaper for the path and query arguments: see frame_unescape. */
static size_t
unescape(void *cls, struct MHD_Connection *c, char *s)
{
	struct conn *cn = conn_of(c);
	bool bad;
	/* a query's value may be a path (envd's), its %2F a '/'; a path with one is
	 * refused below all the same (the last string MHD unescapes is the path) */
	size_t n = frame_unescape_path(s, &bad);

	(void)cls;
	if (bad && cn)
		cn->cn_bad_at = s; /* refused in on_request if s is the path */
	return n;
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
	return sodium_memcmp(h, cf->cf_token_hash, sizeof(h)) ? "invalid access token" : NULL;
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
	struct http_request *hr = *con_cls;

	(void)cls;
	(void)version;
	if (!hr) {
		const char *cl =
			MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
		const char *refused;
		char why[512];
		struct conn *cn = conn_of(conn);
		hr = xcalloc(1, sizeof(*hr));
		hr->hr_rq.rq_ops = &respond_ops;
		hr->hr_conn = conn;
		hr->hr_endpoint = api_endpoint(url);
		hr->hr_method = method_of(method);
		hr->hr_envd_port = cn && cn->cn_envd;
		*con_cls = hr;
		if (cn)
			cn->cn_in_request = true;
		if ((refused = framing_refusal(conn))) {
			struct MHD_Response *r = respond_text("%s", refused);
			MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
			return respond_now(hr, 400, r);
		}
		if (accept_conns() > cf->cf_max_conns)
			return respond_now(hr, 503,
				       respond_text("too many connections (limit %u); try again",
						 cf->cf_max_conns));
		/* a web page's, or one by a rebound name: before the token, the body */
		if ((refused = caller_refusal(conn, why, sizeof(why))))
			return respond_now(hr, 403, respond_text("%s", refused));
		/* probes carry no token: /health and /ready say nothing else */
		/* nor do preflights, which browsers send without credentials */
		if (cf->cf_token && strcmp(hr->hr_endpoint, "/health") &&
		    !caller_preflight(conn, method) &&
		    strcmp(hr->hr_endpoint, "/ready") &&
		    (refused = token_refusal(conn)))
			return respond_now(hr, 401, respond_text("%s", refused));
		if (cn && cn->cn_bad_at == url)
			return respond_now(hr, 400, respond_text("the path has an encoded '/' or NUL "
							  "(%%2F, %%00): not allowed"));
		/* envd's bodies are also files and Connect's envelopes (envd.c) */
		if ((refused = hr->hr_envd_port || envd_asked(conn, url)
				       ? envd_body_refusal(conn, why, sizeof(why))
				       : caller_body_refusal(conn, why, sizeof(why))))
			return respond_now(hr, 415, respond_text("%s", refused));
		/* an upload's body streams to the agent, bounded by --max-file-size
		 * (envdfile.c), not held here: its head is routed now */
		if ((hr->hr_envd_port || envd_asked(conn, url)) &&
		    envd_upload_asked(url, method)) {
			hr->hr_stream_body = true;
			if (cn && (MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
							       "Transfer-Encoding") ||
				   (cl && strtoull(cl, NULL, 10) > 0))) {
				cn->cn_body_by = now_ms() + cf->cf_body_timeout * 1000ull;
				cn->cn_hr = hr;
			}
			return envd_route(hr, url, method);
		}
		if (cl && strtoull(cl, NULL, 10) > cf->cf_max_body)
			return respond_now(hr, 413,
				       respond_text("request body over the limit of %zu bytes",
						 cf->cf_max_body));
		if (cn && (MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding") ||
			   (cl && strtoull(cl, NULL, 10) > 0))) {
			cn->cn_body_by = now_ms() + cf->cf_body_timeout * 1000ull;
			cn->cn_hr = hr;
		}
		return MHD_YES;
	}
	struct conn *cn = conn_of(conn);
	if (cn && !*upload_size)
		cn->cn_body_by = 0; /* the body is in */
	if (hr->hr_resp) {
		struct MHD_Response *r = hr->hr_resp;
		hr->hr_resp = NULL;
		return respond_now(hr, hr->hr_status, r);
	}
	if (hr->hr_upload) {
		/* a streamed upload: --body-timeout counts from its last bytes, so
		 * a large file's body is bounded by its progress, not its total time */
		if (cn && *upload_size && cn->cn_body_by)
			cn->cn_body_by = now_ms() + cf->cf_body_timeout * 1000ull;
		return envdupload_body(hr, upload, upload_size);
	}
	if (hr->hr_stream_body) { /* answered at its head: its body is dropped */
		*upload_size = 0;
		return MHD_YES;
	}
	if (*upload_size) {
		if (hr->hr_body.b_len + *upload_size > cf->cf_max_body)
			hr->hr_too_big = true;
		else
			buf_append(&hr->hr_body, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (hr->hr_suspended || hr->hr_stream)
		return MHD_YES;
	if (hr->hr_too_big)
		return respond_now(hr, 413, respond_text("request body over the limit of %zu bytes",
						    cf->cf_max_body));
	/* a CORS preflight of a listed origin (caller_refusal let it in) */
	if (caller_preflight(hr->hr_conn, method))
		return respond_now(
		    hr, 204,
		    MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT));
	/* envd's port, or its API through this one (one URL for the whole sandbox) */
	if (hr->hr_envd_port || envd_asked(hr->hr_conn, url))
		return envd_route(hr, url, method);
	return api_route(hr, url, method); /* the code API's */
}

static void
on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
	     enum MHD_RequestTerminationCode toe)
{
	struct http_request *hr = *con_cls;

	(void)cls;
	(void)toe;
	if (!hr)
		return;
	struct conn *cn = conn_of(conn);
	if (cn) { /* the next request head must come within the header timeout */
		cn->cn_in_request = false;
		cn->cn_since = now_ms();
		cn->cn_bad_at = NULL;
		cn->cn_body_by = 0;
		cn->cn_hr = NULL;
	}
	if (hr->hr_code)
		metrics_http(hr->hr_endpoint, hr->hr_method, hr->hr_code);
	if (hr->hr_stream)
		respond_closed(hr->hr_stream);
	answer_drop(&hr->hr_rq); /* its client left while it waited */
	envd_free(hr);
	if (hr->hr_resp)
		MHD_destroy_response(hr->hr_resp);
	buf_free(&hr->hr_body);
	free(hr);
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
		cn->cn_envd = accept_is_envd(cn->cn_fd);
		TAILQ_INSERT_TAIL(&conns, cn, cn_link);
		accept_conn_started();
		*socket_context = cn;
	} else if (cn) {
		TAILQ_REMOVE(&conns, cn, cn_link);
		accept_conn_ended();
		free(cn);
		*socket_context = NULL;
	}
}

/*
 * A connection that does not deliver a request head in time (a slowloris
 * trickling bytes, or one that never sends) is shut down; MHD then closes it.
 * So is one whose request's body is not in by its deadline, however it
 * trickles (MHD's own timeout is idle time), after a 408: MHD cannot queue
 * an answer while a body comes, nor call us for a connection that sends
 * nothing, so the 408 is written on its socket, which MHD does not write
 * to then (accept_answer).
 */
void
http_tick(uint64_t now)
{
	struct conn *cn;
	char why[128];

	accept_tick(now);
	TAILQ_FOREACH(cn, &conns, cn_link) {
		if (cn->cn_fd < 0)
			continue;
		if (!cn->cn_in_request &&
		    now > cn->cn_since + cf->cf_header_timeout * 1000ull) {
			shutdown(cn->cn_fd, SHUT_RDWR);
			cn->cn_fd = -1; /* once */
		} else if (cn->cn_body_by && now > cn->cn_body_by) {
			snprintf(why, sizeof(why), "the request body did not arrive within %us "
				 "(--body-timeout)", cf->cf_body_timeout);
			accept_answer(cn->cn_fd, "408 Request Timeout", why);
			shutdown(cn->cn_fd, SHUT_RD);
			if (cn->cn_hr)
				cn->cn_hr->hr_code = 408; /* for the metrics */
			cn->cn_fd = -1;
		}
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
	if (!mhd) {
		log_err("http: %s", line);
		return;
	}
	if (now >= mhd_log_at + 60000) {
		mhd_log_at = now;
		mhd_log_n = 0;
	}
	if (++mhd_log_n <= 20)
		log_warn("http: %s%s", line,
			 mhd_log_n == 20 ? " (more this minute at debug level)" : "");
	else
		log_debug("http: %s", line);
}

/* MHD's epoll fd is ready: nothing now, the loop runs MHD after each batch (http_run). */
static void
http_ready(void *arg, uint32_t events)
{
	(void)arg, (void)events;
}

int
http_start(void)
{
	unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
			 MHD_USE_TURBO | MHD_USE_NO_LISTEN_SOCKET;

	openapi_init();
	if (accept_listen(cf->cf_listen) < 0)
		return -1;
	if (envd_wanted() && accept_listen_envd(cf->cf_envd_listen) < 0) {
		/* the code API serves on: envd's port may be another broker's */
		log_err("envd: cannot listen on %s; envd's API is off", cf->cf_envd_listen);
		envd_turn_off();
	}
	mhd = MHD_start_daemon(
		flags, 0, NULL, NULL, on_request, NULL,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, /* first: it logs from here on */
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
		MHD_OPTION_CONNECTION_TIMEOUT, cf->cf_conn_timeout,
		/* headroom over our own limit, so that those over it hear why (503) */
		MHD_OPTION_CONNECTION_LIMIT, cf->cf_max_conns + 64,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONN_MEMORY,
		MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_END);
	if (!mhd) {
		log_err("http: the HTTP library did not start (see its messages above)");
		return -1;
	}
	accept_hand_to(mhd);
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(mhd, MHD_DAEMON_INFO_EPOLL_FD);
	ev_mhd = (struct evsrc){http_ready, NULL};
	server_watch(di->epoll_fd, EPOLLIN, &ev_mhd);
	return 0;
}

/* The loop's wait, shortened to when MHD wants to run next. */
long
http_wait(long wait)
{
	MHD_UNSIGNED_LONG_LONG mt;

	if (MHD_get_timeout(mhd, &mt) == MHD_YES && (long long)mt < wait)
		wait = (long)mt;
	return wait;
}

/* MHD wants to run again at once. */
static bool
http_due(void)
{
	MHD_UNSIGNED_LONG_LONG mt;

	return MHD_get_timeout(mhd, &mt) == MHD_YES && mt == 0;
}

/*
 * MHD's work, then up to passes more runs while its next steps want no wait
 * (a reply sent, then its keep-alive connection read again: two passes) rather
 * than each after an epoll_wait of the loop's that finds nothing.
 */
void
http_run(int passes)
{
	MHD_run(mhd);
	for (int i = 0; i < passes && http_due(); i++)
		MHD_run(mhd);
}

void
http_stop(void)
{
	accept_stop();
	if (mhd)
		MHD_stop_daemon(mhd);
	mhd = NULL;
}
