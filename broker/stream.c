/*
 * stream.c — one execution's output on its way to a client. For /execute the
 * proxy's NDJSON is buffered per stream and handed to MHD as chunks; with
 * nothing to send the connection is suspended, and while suspended its socket
 * is watched for hang-up (EPOLLRDHUP) so a vanished client is noticed at once,
 * not at the next write; keepalive lines are the second line of defence. A
 * vanished client means CANCEL. A client that only shut its write side after
 * its request (nc -N) still reads: see stream_hangup(). For sandcellctl run
 * the output goes to the ctl client's pipe instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "broker.h"

static const char keepalive[] = "{\"type\":\"keepalive\"}\n";

static struct stream *
stream_new(struct context *c, const char *code)
{
	struct stream *s = xcalloc(1, sizeof(*s));
	size_t n = strcspn(code, "\n");

	s->st_id = sv.sv_tb.tb_next_stream++;
	s->st_ctx = c;
	s->st_fd = -1;
	s->st_spill_fd = -1;
	s->st_ev = (struct evsrc){EV_HANGUP, s};
	s->st_started = s->st_last_out = now_ms();
	snprintf(s->st_code_head, sizeof(s->st_code_head), "%.*s", (int)(n < 80 ? n : 80), code);
	TAILQ_INSERT_TAIL(&sv.sv_tb.tb_streams, s, st_link);
	TAILQ_INSERT_TAIL(&c->c_streams, s, st_ctx_link);
	c->c_nstreams++;
	control_event(json_pack("{s:s, s:I, s:s}", "event", "execution_started", "stream",
				(json_int_t)s->st_id, "context", c->c_id));
	return s;
}

struct stream *
stream_open(struct context *c, struct MHD_Connection *conn, const char *code)
{
	struct stream *s = stream_new(c, code);
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

	s->st_conn = conn;
	s->st_fd = ci ? ci->connect_fd : -1;
	return s;
}

struct stream *
stream_open_ctl(struct context *c, nng_pipe pipe, uint64_t req, const char *code)
{
	struct stream *s = stream_new(c, code);

	s->st_ctl = true;
	s->st_pipe = pipe;
	s->st_req = req;
	return s;
}

struct stream *
stream_by_id(uint64_t id)
{
	struct stream *s;

	TAILQ_FOREACH(s, &sv.sv_tb.tb_streams, st_link)
		if (s->st_id == id)
			return s;
	return NULL;
}

static struct MHD_Response *stream_response(struct stream *s);
static struct MHD_Response *stream_whole(struct stream *s);

/* While suspended: its end (EPOLLRDHUP), or once half-closed only a reset or
 * a full hang-up (EPOLLERR, EPOLLHUP: always reported). */
static void
watch_hangup(struct stream *s)
{
	if (s->st_fd < 0)
		return;
	server_watch(s->st_fd, s->st_halfclosed ? 0 : EPOLLRDHUP, &s->st_ev);
	s->st_watched = true;
}

static void
unwatch_hangup(struct stream *s)
{
	if (s->st_watched)
		server_unwatch(s->st_fd);
	s->st_watched = false;
}

/*
 * Something for the client (output, the end, a keepalive, its hangup): a
 * parked connection is resumed. One parked before its response gets it now:
 * the whole stream in one response when it has already ended (a short
 * execution: head and body leave in one write), else the streamed one.
 */
static void
unwatch(struct stream *s)
{
	if (!s->st_suspended)
		return;
	unwatch_hangup(s);
	s->st_suspended = false;
	if (s->st_rq) {
		struct request *rq = s->st_rq;
		s->st_rq = NULL;
		TAILQ_REMOVE(&sv.sv_tb.tb_parked, s, st_park_link);
		http_complete(rq, 200,
			      s->st_final && !s->st_gone && s->st_spill_fd < 0 ? stream_whole(s)
									  : stream_response(s));
		return;
	}
	MHD_resume_connection(s->st_conn);
	sv.sv_lc.lc_mhd_kick = true;
}

/*
 * The request is in and sent on; its response waits for the first output,
 * unless executions are ahead of it in its context: then it cannot end
 * within PARK_MS, and its streamed response starts at once.
 */
void
stream_park(struct stream *s, struct request *rq)
{
	if (s->st_ctx && s->st_ctx->c_nstreams > 1) {
		http_complete(rq, 200, stream_response(s));
		return;
	}
	s->st_rq = rq;
	s->st_park_until = now_ms() + PARK_MS;
	TAILQ_INSERT_TAIL(&sv.sv_tb.tb_parked, s, st_park_link);
	http_suspend(rq);
	/* Not watched for a hangup while parked: most executions end within
	 * PARK_MS, and their client's socket is then never added to the epoll
	 * set and taken out again (two syscalls per request). A client gone
	 * meanwhile is found when the park ends, at most PARK_MS later: the
	 * streamed response's first wait watches its socket, whose hangup is
	 * then reported at once. */
	s->st_suspended = true;
}

/*
 * The execution is over; only delivery to a slow client may remain. The
 * stream leaves its context's list then, so it holds no queue slot, is not
 * the context's "running" execution, and the next one can be answered whole.
 */
void
stream_detach(struct stream *s)
{
	if (!s->st_ctx)
		return;
	TAILQ_REMOVE(&s->st_ctx->c_streams, s, st_ctx_link);
	s->st_ctx->c_nstreams--;
	s->st_ctx = NULL;
}

/* Counts and logs a stream once, however it ended. */
static void
record(struct stream *s, const char *outcome, uint64_t wait_ms, uint64_t run_ms)
{
	if (s->st_recorded)
		return;
	s->st_recorded = true;
	if (s->st_ctx && strcmp(outcome, "cancelled"))
		s->st_ctx->c_count++;
	metrics_execution(s, outcome, wait_ms, run_ms);
	control_event(json_pack("{s:s, s:I, s:s, s:s}", "event", "execution_ended", "stream",
				(json_int_t)s->st_id, "context",
				s->st_ctx ? s->st_ctx->c_id : "", "outcome", outcome));
}

/* The client is gone: tell the proxy, once. */
static void
cancel(struct stream *s)
{
	struct msg m;

	if (s->st_final || s->st_cancel_sent || !s->st_ctx)
		return;
	s->st_cancel_sent = true;
	msg_init(&m, MSG_CANCEL);
	msg_set_u64(&m, F_STREAM, s->st_id);
	link_send(s->st_ctx, &m);
	msg_free(&m);
	metrics_count(M_CANCEL, 1);
	record(s, "cancelled", 0, now_ms() - s->st_started);
}

/* Bytes waiting for the client, in memory and on disk. */
static uint64_t
backlog(struct stream *s)
{
	return buf_pending(&s->st_buf) + (s->st_spill_w - s->st_spill_r);
}

static void
spill_close(struct stream *s)
{
	if (s->st_spill_fd >= 0)
		close(s->st_spill_fd);
	s->st_spill_fd = -1;
	s->st_spill_w = s->st_spill_r = 0;
}

/*
 * Queues bytes for the client. Up to STREAM_MEM_MAX stay in memory; past
 * that (a client reading slower than its code writes) they go to an unlinked
 * file, and keep going there until the file is drained, so order is kept and
 * the broker's memory does not grow with a slow reader. Returns 0, or a
 * negative errno with nothing of data queued (*what says what failed).
 */
static int
queue_bytes(struct stream *s, const char *data, size_t len, const char **what)
{
	uint64_t w = s->st_spill_w;

	if (s->st_spill_fd < 0 && buf_pending(&s->st_buf) + len <= STREAM_MEM_MAX) {
		buf_append(&s->st_buf, data, len);
		return 0;
	}
	if (s->st_spill_fd < 0) {
		s->st_spill_fd = open(sv.sv_cf.cf_spill_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (s->st_spill_fd < 0) {
			*what = "create a file in";
			return -errno;
		}
	}
	while (len) {
		ssize_t n = pwrite(s->st_spill_fd, data, len, w);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			*what = "write to";
			return n < 0 ? -errno : -ENOSPC;
		}
		w += n;
		data += n;
		len -= n;
	}
	s->st_spill_w = w;
	return 0;
}

/* Moves the next spilled bytes into memory once memory is empty. */
static void
unspill(struct stream *s)
{
	char chunk[64 << 10];
	ssize_t n;

	if (buf_pending(&s->st_buf))
		return;
	if (s->st_spill_fd >= 0) {
		n = pread(s->st_spill_fd, chunk, sizeof(chunk), s->st_spill_r);
		if (n > 0) {
			buf_append(&s->st_buf, chunk, n);
			s->st_spill_r += n;
		}
		if (n <= 0 || s->st_spill_r == s->st_spill_w)
			spill_close(s);
	}
	if (s->st_spill_fd < 0 && buf_pending(&s->st_tail)) {
		buf_append(&s->st_buf, buf_head(&s->st_tail), buf_pending(&s->st_tail));
		buf_free(&s->st_tail);
	}
}

/* Where bytes go that must not wait on the disk: after the spill, if any. */
static struct buf *
tail_of(struct stream *s)
{
	return s->st_spill_fd >= 0 ? &s->st_tail : &s->st_buf;
}

static ssize_t
reader(void *cls, uint64_t pos, char *out, size_t max)
{
	struct stream *s = cls;
	size_t n;

	(void)pos;
	if (s->st_gone)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	unspill(s);
	n = buf_pending(&s->st_buf);
	if (n) {
		if (n > max)
			n = max;
		memcpy(out, buf_head(&s->st_buf), n);
		buf_consume(&s->st_buf, n);
		s->st_last_out = now_ms();
		metrics_count(M_BYTES, n);
		return n;
	}
	if (s->st_final)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* nothing to send: park the connection and watch for the client leaving */
	MHD_suspend_connection(s->st_conn);
	s->st_suspended = true;
	watch_hangup(s);
	return 0;
}

static struct MHD_Response *
stream_headers(struct MHD_Response *r)
{
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(r, "X-Accel-Buffering", "no");
	return r;
}

static struct MHD_Response *
stream_response(struct stream *s)
{
	return stream_headers(
	    MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, RESPONSE_BLOCK, reader, s, NULL));
}

/* A stream that ended before its response went out, as one body. */
static struct MHD_Response *
stream_whole(struct stream *s)
{
	size_t n = buf_pending(&s->st_buf);
	char *body = xmalloc(n ? n : 1);

	memcpy(body, buf_head(&s->st_buf), n);
	buf_consume(&s->st_buf, n);
	s->st_last_out = now_ms();
	metrics_count(M_BYTES, n);
	return stream_headers(MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE));
}

static void
stream_free(struct stream *s)
{
	TAILQ_REMOVE(&sv.sv_tb.tb_streams, s, st_link);
	if (s->st_rq)
		TAILQ_REMOVE(&sv.sv_tb.tb_parked, s, st_park_link);
	if (s->st_ctx) {
		TAILQ_REMOVE(&s->st_ctx->c_streams, s, st_ctx_link);
		s->st_ctx->c_nstreams--;
	}
	buf_free(&s->st_buf);
	buf_free(&s->st_tail);
	free(s->st_end);
	spill_close(s);
	free(s);
}

/* The stream's end, queued in memory after everything before it. */
static void
end_now(struct stream *s)
{
	buf_append(tail_of(s), s->st_end, strlen(s->st_end));
	s->st_final = true;
	stream_detach(s);
	unwatch(s);
}

/*
 * After a stop, the rest of the line in progress (the proxy sends a line's
 * pieces together) is still queued, so the client gets whole lines only; the
 * end follows it.
 */
static void
finish_line(struct stream *s, const char *data, size_t len)
{
	const char *nl = memchr(data, '\n', len);

	buf_append(tail_of(s), data, nl ? (size_t)(nl - data) + 1 : len);
	if (nl) {
		s->st_midline = false;
		end_now(s);
	}
}

/*
 * The client is too far behind (past --stream-cap), or its backlog could not
 * be kept (the spill dir failed): the execution is cancelled (its
 * on_disconnect policy applies) and the stream ends with name: value.
 */
static void
stop(struct stream *s, const char *name, const char *value)
{
	json_t *e = json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", name, "value",
			      value, "traceback", "");
	char *line = json_dumps(e, JSON_COMPACT | JSON_ENSURE_ASCII);

	json_decref(e);
	log_warn("stream %llu: %s: %s", (unsigned long long)s->st_id, name, value);
	record(s, "output_limit", 0, now_ms() - s->st_started);
	cancel(s);
	s->st_overflow = true;
	s->st_end = xasprintf("%s\n{\"type\":\"end_of_execution\"}\n", line);
	free(line);
	if (!s->st_midline)
		end_now(s);
}

/* Output from the proxy; final carries how the execution ended. */
void
stream_output(struct stream *s, const char *data, size_t len, struct msg *final)
{
	const char *what = NULL;
	char why[PATH_MAX + 256];
	int e;

	if (s->st_gone)
		return;
	if (s->st_overflow) {
		if (s->st_midline && len)
			finish_line(s, data, len);
		return;
	}
	s->st_bytes += len;
	if (final) {
		s->st_final = true;
		record(s, final->m_outcome.s ? final->m_outcome.s : "other", final->m_wait,
		       final->m_run);
		stream_detach(s);
	}
	if (s->st_ctl) {
		control_stream_output(s, data, len, s->st_final);
		if (s->st_final)
			stream_free(s);
		return;
	}
	if (backlog(s) + len > sv.sv_cf.cf_stream_cap) {
		snprintf(why, sizeof(why),
			 "the client read too slowly: over %llu bytes of output were waiting",
			 (unsigned long long)sv.sv_cf.cf_stream_cap);
		s->st_final = false;
		stop(s, "OutputLimitExceeded", why);
	} else if ((e = queue_bytes(s, data, len, &what)) < 0) {
		snprintf(why, sizeof(why),
			 "the client read too slowly and its backlog of %llu bytes could not "
			 "be kept: %s the spill dir %s: %s",
			 (unsigned long long)(backlog(s) + len), what, sv.sv_cf.cf_spill_dir,
			 strerror(-e));
		s->st_final = false;
		stop(s, "OutputSpillFailed", why);
	} else {
		if (len)
			s->st_midline = data[len - 1] != '\n';
		unwatch(s);
		return;
	}
	if (s->st_midline && len)
		finish_line(s, data, len);
}

/* Ends a stream from the broker's side (its proxy is lost, the server stops). */
void
stream_fail(struct stream *s, const char *name, const char *value, const char *outcome)
{
	json_t *e = json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", name, "value",
			      value, "traceback", "");
	char *line = json_dumps(e, JSON_COMPACT | JSON_ENSURE_ASCII);
	static const char end[] = "{\"type\":\"end_of_execution\"}\n";
	struct msg fin;
	struct buf b = {0};

	json_decref(e);
	if (!s->st_final && !s->st_gone) {
		buf_append(&b, line, strlen(line));
		buf_append(&b, "\n", 1);
		buf_append(&b, end, sizeof(end) - 1);
		msg_init(&fin, MSG_OUTPUT);
		msg_set_str(&fin, F_OUTCOME, outcome, strlen(outcome));
		msg_set_u64(&fin, F_RUN, now_ms() - s->st_started);
		stream_output(s, b.b_data, b.b_len, &fin);
		msg_free(&fin);
		buf_free(&b);
	}
	free(line);
}

void
stream_fail_all(const char *name, const char *value, const char *outcome)
{
	struct stream *s, *next;

	for (s = TAILQ_FIRST(&sv.sv_tb.tb_streams); s; s = next) {
		next = TAILQ_NEXT(s, st_link);
		stream_fail(s, name, value, outcome); /* may free a ctl stream */
	}
}

/* An operator cancelled it: the kernel is told, the client reads why. */
void
stream_cancel(struct stream *s, const char *why)
{
	cancel(s);
	if (!s->st_final && !s->st_gone) {
		s->st_recorded = true; /* counted as cancelled already */
		stream_fail(s, "ExecutionCancelled", why, "cancelled");
	}
}

/*
 * The client's end on a suspended connection. EPOLLRDHUP alone is a FIN: a
 * client that closed, or one that only shut its write side and still reads.
 * TCP tells them apart only when we write: a closed socket answers with a
 * reset (EPOLLERR, EPOLLHUP). So a keepalive goes out at once as the probe,
 * and only a reset or a failed write means gone; a half-closed client is
 * served to the end.
 */
void
stream_hangup(struct stream *s, uint32_t events)
{
	if (!(events & (EPOLLERR | EPOLLHUP)) && !s->st_halfclosed) {
		s->st_halfclosed = true;
		log_debug("stream %llu: the client shut its write side; probing it",
			  (unsigned long long)s->st_id);
		if (backlog(s) == 0)
			buf_append(&s->st_buf, keepalive, sizeof(keepalive) - 1);
		unwatch(s); /* MHD writes: a reset, or a write error, if it is gone */
		return;
	}
	if (!(events & (EPOLLERR | EPOLLHUP)))
		return; /* half-closed and still there */
	s->st_gone = true;
	metrics_count(M_DISCONNECT, 1);
	log_info("stream %llu: client went away after %llu ms; cancel sent to context %s",
		 (unsigned long long)s->st_id, (unsigned long long)(now_ms() - s->st_started),
		 s->st_ctx ? s->st_ctx->c_id : "-");
	cancel(s);
	unwatch(s); /* resumed, MHD reads the error and closes */
}

/* MHD finished the request, whatever the reason (or a ctl client left). */
void
stream_closed(struct stream *s)
{
	if (s->st_suspended) {
		unwatch_hangup(s);
		s->st_suspended = false;
	}
	if (!s->st_final) {
		if (!s->st_gone) {
			metrics_count(M_DISCONNECT, 1);
			log_info("stream %llu: client went away after %llu ms", 
				 (unsigned long long)s->st_id,
				 (unsigned long long)(now_ms() - s->st_started));
		}
		cancel(s);
	}
	stream_free(s);
}

/* Keepalive lines for quiet streams: they also surface a dead peer. */
void
stream_tick(uint64_t now)
{
	struct stream *s;

	TAILQ_FOREACH(s, &sv.sv_tb.tb_streams, st_link)
		if (!s->st_ctl && !s->st_final && !s->st_gone &&
		    now >= s->st_last_out + KEEPALIVE_MS && backlog(s) == 0) {
			s->st_last_out = now;
			buf_append(&s->st_buf, keepalive, sizeof(keepalive) - 1);
			unwatch(s);
		}
}

/* Parked past PARK_MS without output: the streamed response starts. */
void
stream_park_due(uint64_t now)
{
	struct stream *s;

	while ((s = TAILQ_FIRST(&sv.sv_tb.tb_parked)) && now >= s->st_park_until)
		unwatch(s);
}

long
stream_park_wait(uint64_t now)
{
	struct stream *s = TAILQ_FIRST(&sv.sv_tb.tb_parked);

	if (!s)
		return -1;
	return s->st_park_until > now ? (long)(s->st_park_until - now) : 0;
}

struct stream *
stream_find(struct context *c, uint64_t id)
{
	struct stream *s;

	TAILQ_FOREACH(s, &c->c_streams, st_ctx_link)
		if (s->st_id == id)
			return s;
	return NULL;
}
