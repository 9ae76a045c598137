/*
 * respond.c — how an HTTP request is answered (respond_ops, which http.c
 * gives each one): a response now, or once its suspended connection is
 * resumed; and an execution's output as a response. An /execute is parked
 * (suspended) until its first output or PARK_MS: a stream that has ended by
 * then goes out whole (head and body in one write), else as a chunked
 * response that MHD pulls through reader(), which suspends the connection
 * whenever nothing waits. While suspended past its park, the client's socket
 * is watched for hang-up (EPOLLRDHUP), so a vanished client is noticed at
 * once, not at the next write. A client that only shut its write side after
 * its request (nc -N) still reads: see respond_hangup().
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "http.h"

#define CT_TEXT "text/plain; charset=utf-8"

/* The HTTP side of one stream (its st_client). */
struct hstream {
	struct stream *hs_s;
	struct MHD_Connection *hs_conn;
	int hs_fd; /* the client's socket, watched while suspended past its park */
	struct evsrc hs_ev;
	bool hs_suspended;
	bool hs_watched;    /* hs_fd is in the loop's epoll set (watch_hangup) */
	bool hs_halfclosed; /* the client shut its write side: maybe still reading */
	struct http_request *hs_rq; /* parked before its response: see respond_stream() */
	uint64_t hs_park_until;
	TAILQ_ENTRY(hstream) hs_park_link;
};
TAILQ_HEAD(hstreamq, hstream);

/* By hs_park_until: PARK_MS after each request. */
static struct hstreamq parked = TAILQ_HEAD_INITIALIZER(parked);

struct MHD_Response *
respond_text(const char *fmt, ...)
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
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(n, s, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CT_TEXT);
	return r;
}

struct MHD_Response *
respond_json(json_t *j)
{
	/* 12 digits: 46.979, not 46.978999999999999 */
	char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_ENSURE_ASCII |
	                            JSON_REAL_PRECISION(12));
	struct MHD_Response *r;

	json_decref(j);
	if (!s)
		fatal("out of memory");
	r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	return r;
}

enum MHD_Result
respond_now(struct http_request *hr, unsigned status, struct MHD_Response *r)
{
	enum MHD_Result ret;

	caller_cors(hr->hr_conn, r, status == 204);
	ret = MHD_queue_response(hr->hr_conn, status, r);

	hr->hr_code = status;
	MHD_destroy_response(r);
	return ret;
}

/* Answers a request now, or after resuming it if it was suspended. */
void
respond_complete(struct http_request *hr, unsigned status, struct MHD_Response *resp)
{
	if (!hr->hr_suspended) {
		respond_now(hr, status, resp);
		return;
	}
	if (hr->hr_resp)
		MHD_destroy_response(hr->hr_resp);
	hr->hr_resp = resp;
	hr->hr_status = status;
	hr->hr_suspended = false;
	MHD_resume_connection(hr->hr_conn);
	server_kick();
}

void
respond_suspend(struct http_request *hr)
{
	hr->hr_suspended = true;
	MHD_suspend_connection(hr->hr_conn);
}

/* While suspended: its end (EPOLLRDHUP), or once half-closed only a reset or
 * a full hang-up (EPOLLERR, EPOLLHUP: always reported). */
static void
watch_hangup(struct hstream *hs)
{
	if (hs->hs_fd < 0)
		return;
	server_watch(hs->hs_fd, hs->hs_halfclosed ? 0 : EPOLLRDHUP, &hs->hs_ev);
	hs->hs_watched = true;
}

static void
unwatch_hangup(struct hstream *hs)
{
	if (hs->hs_watched)
		server_unwatch(hs->hs_fd);
	hs->hs_watched = false;
}

static ssize_t
reader(void *cls, uint64_t pos, char *out, size_t max)
{
	struct hstream *hs = cls;
	struct stream *s = hs->hs_s;
	size_t n;

	(void)pos;
	if (s->st_gone)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	if ((n = stream_take(s, out, max)))
		return n;
	if (s->st_final)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* nothing to send: park the connection and watch for the client leaving */
	MHD_suspend_connection(hs->hs_conn);
	hs->hs_suspended = true;
	watch_hangup(hs);
	return 0;
}

/* An execution's NDJSON, or its kind's content type. */
static struct MHD_Response *
ndjson(struct MHD_Response *r, const struct stream *s)
{
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
	                        s->st_kind ? s->st_kind->sk_ctype
	                                   : "application/x-ndjson");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(r, "X-Accel-Buffering", "no");
	return r;
}

static struct MHD_Response *
streamed(struct hstream *hs)
{
	return ndjson(MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, RESPONSE_BLOCK,
	                                                reader, hs, NULL),
	              hs->hs_s);
}

/* A stream that ended before its response went out, as one body. */
static struct MHD_Response *
whole(struct stream *s)
{
	size_t n;
	char *body = stream_take_all(s, &n);

	return ndjson(MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE), s);
}

/*
 * Something for the client (output, the end, a keepalive, its hang-up): a
 * suspended connection is resumed. One parked before its response gets it
 * now: the whole stream in one response when it has already ended (a short
 * execution), else the streamed one.
 */
static void
wake(struct stream *s)
{
	struct hstream *hs = s->st_client;

	if (!hs->hs_suspended)
		return;
	unwatch_hangup(hs);
	hs->hs_suspended = false;
	if (hs->hs_rq) {
		struct http_request *hr = hs->hs_rq;
		hs->hs_rq = NULL;
		TAILQ_REMOVE(&parked, hs, hs_park_link);
		respond_complete(hr, 200, stream_whole(s) ? whole(s) : streamed(hs));
		return;
	}
	MHD_resume_connection(hs->hs_conn);
	server_kick();
}

static const struct stream_ops http_stream_ops = {
    .so_wake = wake,
    .so_client = "connected",
    .so_keepalive = true,
};

static void respond_hangup(void *arg, uint32_t events);

/*
 * The request is in and sent on; its response waits for the first output,
 * unless executions are ahead of it in its context: then it cannot end
 * within PARK_MS, and its streamed response starts at once.
 */
void
respond_stream(struct http_request *hr, struct stream *s)
{
	struct hstream *hs = xcalloc(1, sizeof(*hs));
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(hr->hr_conn, MHD_CONNECTION_INFO_CONNECTION_FD);

	hs->hs_s = s;
	hs->hs_conn = hr->hr_conn;
	hs->hs_fd = ci ? ci->connect_fd : -1;
	hs->hs_ev = (struct evsrc){respond_hangup, hs};
	s->st_ops = &http_stream_ops;
	s->st_client = hs;
	hr->hr_stream = s;
	if (s->st_ctx && !stream_running(s)) {
		respond_complete(hr, 200, streamed(hs));
		return;
	}
	hs->hs_rq = hr;
	hs->hs_park_until = now_ms() + PARK_MS;
	TAILQ_INSERT_TAIL(&parked, hs, hs_park_link);
	respond_suspend(hr);
	/* Not watched for a hangup while parked: most executions end within
	 * PARK_MS, and their client's socket is then never added to the epoll
	 * set and taken out again (two syscalls per request). A client gone
	 * meanwhile is found when the park ends, at most PARK_MS later: the
	 * streamed response's first wait watches its socket, whose hangup is
	 * then reported at once. */
	hs->hs_suspended = true;
}

/*
 * The client's end on a suspended connection. EPOLLRDHUP alone is a FIN: a
 * client that closed, or one that only shut its write side and still reads.
 * TCP tells them apart only when we write: a closed socket answers with a
 * reset (EPOLLERR, EPOLLHUP). So a keepalive goes out at once as the probe,
 * and only a reset or a failed write means gone; a half-closed client is
 * served to the end.
 */
static void
respond_hangup(void *arg, uint32_t events)
{
	struct hstream *hs = arg;

	if (!(events & (EPOLLERR | EPOLLHUP)) && !hs->hs_halfclosed) {
		hs->hs_halfclosed = true;
		log_debug("stream %llu: the client shut its write side; probing it",
		          (unsigned long long)hs->hs_s->st_id);
		stream_probe(hs->hs_s);
		wake(hs->hs_s); /* MHD writes: a reset, or a write error, if it is gone */
		return;
	}
	if (!(events & (EPOLLERR | EPOLLHUP)))
		return; /* half-closed and still there */
	stream_gone(hs->hs_s);
	wake(hs->hs_s); /* resumed, reader() ends it with an error and MHD closes */
}

/* MHD finished the request of stream s, whatever the reason. */
void
respond_closed(struct stream *s)
{
	struct hstream *hs = s->st_client;

	if (hs->hs_suspended) {
		unwatch_hangup(hs);
		hs->hs_suspended = false;
	}
	if (hs->hs_rq)
		TAILQ_REMOVE(&parked, hs, hs_park_link);
	stream_closed(s);
	free(hs);
}

/* Parked past PARK_MS without output: the streamed response starts. */
void
respond_park_due(uint64_t now)
{
	struct hstream *hs;

	while ((hs = TAILQ_FIRST(&parked)) && now >= hs->hs_park_until)
		wake(hs->hs_s);
}

long
respond_park_wait(uint64_t now)
{
	struct hstream *hs = TAILQ_FIRST(&parked);

	if (!hs)
		return -1;
	return hs->hs_park_until > now ? (long)(hs->hs_park_until - now) : 0;
}

/* The request layer's answers to an HTTP request (struct request_ops). */
static void
ops_complete(struct request *rq, unsigned status, json_t *json, const char *text)
{
	respond_complete((struct http_request *)rq, status,
	                 json ? respond_json(json)
	                      : respond_text("%s", text ? text : ""));
}

static void
ops_suspend(struct request *rq)
{
	respond_suspend((struct http_request *)rq);
}

static void
ops_stream(struct request *rq, struct stream *s)
{
	respond_stream((struct http_request *)rq, s);
}

const struct request_ops respond_ops = {
    .ro_complete = ops_complete,
    .ro_suspend = ops_suspend,
    .ro_stream = ops_stream,
};
