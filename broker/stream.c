/*
 * stream.c — one execution's output on its way to a client, whichever
 * transport it came by (the stream's st_ops: respond.c for /execute,
 * control.c for sandcellctl run). The proxy's NDJSON is queued per stream,
 * in memory or past STREAM_MEM_MAX in a spill file, and its client's side
 * is woken to take it (stream_take), or is handed each chunk as it comes.
 * A client that is gone (stream_gone, stream_closed) means CANCEL to the
 * proxy; keepalive lines surface a dead peer.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "contextdef.h"

static const char keepalive[] = "{\"type\":\"keepalive\"}\n";

/* Stream ids never repeat across broker restarts: proxies outlive us. */
static uint64_t next_stream;
/* Every stream, open or ending, oldest first (stream_next walks it). */
static struct streamq streams = TAILQ_HEAD_INITIALIZER(streams);

static struct stream *
open_stream(struct context *c, const char *code, const struct stream_kind *k)
{
	struct stream *s = xcalloc(1, sizeof(*s));
	size_t n = strcspn(code, "\n");

	if (!next_stream)
		next_stream = (uint64_t)time(NULL) << 20;
	s->st_id = next_stream++;
	s->st_ctx = c;
	s->st_spill_fd = -1;
	s->st_started = s->st_last_out = now_ms();
	snprintf(s->st_code_head, sizeof(s->st_code_head), "%.*s", (int)(n < 80 ? n : 80), code);
	TAILQ_INSERT_TAIL(&streams, s, st_link);
	TAILQ_INSERT_TAIL(&c->c_streams, s, st_ctx_link);
	c->c_nstreams++;
	s->st_kind = k;
	if (!k)
		events_emitf("{s:s, s:I, s:s}", "event", "execution_started", "stream",
		             (json_int_t)s->st_id, "context", c->c_id);
	return s;
}

/* Its client's side (st_ops) is set by the transport the request came by. */
struct stream *
stream_open(struct context *c, const char *code)
{
	return open_stream(c, code, NULL);
}

/* A stream of another kind than an execution's (envd's: connect.c). */
struct stream *
stream_open_as(struct context *c, const struct stream_kind *k)
{
	return open_stream(c, "", k);
}

/* Its keepalive: an NDJSON line, or its kind's. */
static void
keepalive_into(struct stream *s, struct buf *b)
{
	if (s->st_kind)
		buf_append(b, s->st_kind->sk_keepalive, s->st_kind->sk_keepalive_len);
	else
		buf_append(b, keepalive, sizeof(keepalive) - 1);
}

/* The stream after s in the order they opened; the first if s is NULL. */
struct stream *
stream_next(const struct stream *s)
{
	return s ? TAILQ_NEXT(s, st_link) : TAILQ_FIRST(&streams);
}

/* How many streams there are, open or ending (metrics). */
size_t
stream_count(void)
{
	const struct stream *s;
	size_t n = 0;

	TAILQ_FOREACH(s, &streams, st_link)
		n++;
	return n;
}

struct stream *
stream_by_id(uint64_t id)
{
	struct stream *s;

	TAILQ_FOREACH(s, &streams, st_link)
		if (s->st_id == id)
			return s;
	return NULL;
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

/* Something for the client: output, the end, a keepalive, its hang-up. */
static void
wake(struct stream *s)
{
	if (s->st_ops && s->st_ops->so_wake)
		s->st_ops->so_wake(s);
}

/* Counts and logs a stream once, however it ended. */
static void
record(struct stream *s, const char *outcome, uint64_t wait_ms, uint64_t run_ms)
{
	if (s->st_recorded)
		return;
	s->st_recorded = true;
	if (s->st_kind)
		return; /* not an execution */
	if (s->st_ctx && strcmp(outcome, "cancelled"))
		s->st_ctx->c_count++;
	metrics_execution(s, s->st_ctx ? s->st_ctx->c_id : "-", outcome, wait_ms, run_ms);
	events_emitf("{s:s, s:I, s:s, s:s}", "event", "execution_ended", "stream",
	             (json_int_t)s->st_id, "context", s->st_ctx ? s->st_ctx->c_id : "",
	             "outcome", outcome);
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
		s->st_spill_fd = open(cf->cf_spill_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
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

/* The bytes that end s with an error (NUL-terminated; *len without it). */
static char *
end_bytes(struct stream *s, const char *name, const char *value, size_t *len)
{
	size_t n;
	char *b;

	if (s->st_kind) {
		b = s->st_kind->sk_end(name, value, &n);
	} else {
		json_t *e = json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", name,
				      "value", value, "traceback", "");
		char *line = json_dumps(e, JSON_COMPACT | JSON_ENSURE_ASCII);
		json_decref(e);
		b = xasprintf("%s\n{\"type\":\"end_of_execution\"}\n", line);
		n = strlen(b);
		free(line);
	}
	*len = n;
	return b;
}

/* Where bytes go that must not wait on the disk: after the spill, if any. */
static struct buf *
tail_of(struct stream *s)
{
	return s->st_spill_fd >= 0 ? &s->st_tail : &s->st_buf;
}

static void
stream_free(struct stream *s)
{
	TAILQ_REMOVE(&streams, s, st_link);
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
	buf_append(tail_of(s), s->st_end, s->st_end_len);
	s->st_final = true;
	stream_detach(s);
	wake(s);
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
	log_warn("stream %llu: %s: %s", (unsigned long long)s->st_id, name, value);
	record(s, "output_limit", 0, now_ms() - s->st_started);
	cancel(s);
	s->st_overflow = true;
	s->st_end = end_bytes(s, name, value, &s->st_end_len);
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
	if (s->st_ops && s->st_ops->so_chunk) {
		s->st_ops->so_chunk(s, data, len, s->st_final);
		if (s->st_final)
			stream_free(s);
		return;
	}
	if (backlog(s) + len > cf->cf_stream_cap) {
		snprintf(why, sizeof(why),
			 "the client read too slowly: over %llu bytes of output were waiting",
			 (unsigned long long)cf->cf_stream_cap);
		s->st_final = false;
		stop(s, "OutputLimitExceeded", why);
	} else if ((e = queue_bytes(s, data, len, &what)) < 0) {
		snprintf(why, sizeof(why),
			 "the client read too slowly and its backlog of %llu bytes could not "
			 "be kept: %s the spill dir %s: %s",
			 (unsigned long long)(backlog(s) + len), what, cf->cf_spill_dir,
			 strerror(-e));
		s->st_final = false;
		stop(s, "OutputSpillFailed", why);
	} else {
		if (len && !s->st_kind) /* a kind's bytes come whole */
			s->st_midline = data[len - 1] != '\n';
		wake(s);
		return;
	}
	if (s->st_midline && len)
		finish_line(s, data, len);
}

/* Ends a stream from the broker's side (its proxy is lost, the server stops). */
void
stream_fail(struct stream *s, const char *name, const char *value, const char *outcome)
{
	struct msg fin;
	size_t len;

	if (!s->st_final && !s->st_gone) {
		char *b = end_bytes(s, name, value, &len);
		msg_init(&fin, MSG_OUTPUT);
		msg_set_str(&fin, F_OUTCOME, outcome, strlen(outcome));
		msg_set_u64(&fin, F_RUN, now_ms() - s->st_started);
		stream_output(s, b, len, &fin);
		msg_free(&fin);
		free(b);
	}
}

void
stream_fail_all(const char *name, const char *value, const char *outcome)
{
	struct stream *s, *next;

	for (s = TAILQ_FIRST(&streams); s; s = next) {
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

/* Its peer never began it in time: it is told (CANCEL), the client reads why
 * (name: an envd stream's Connect code). */
void
stream_expire(struct stream *s, const char *name, const char *why)
{
	cancel(s);
	if (!s->st_final && !s->st_gone) {
		s->st_recorded = true; /* counted as cancelled already */
		stream_fail(s, name, why, "timeout");
	}
}

/* The client's side is done with it, whatever the reason (its request
 * ended, a ctl client left). */
void
stream_closed(struct stream *s)
{
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

/*
 * Up to max of the bytes waiting for the client, or 0 when none wait (then
 * st_final says whether more come).
 */
size_t
stream_take(struct stream *s, char *out, size_t max)
{
	size_t n;

	unspill(s);
	if ((n = buf_pending(&s->st_buf)) > max)
		n = max;
	if (n) {
		memcpy(out, buf_head(&s->st_buf), n);
		buf_consume(&s->st_buf, n);
		s->st_last_out = now_ms();
		metrics_count(M_BYTES, n);
	}
	return n;
}

/* Whether it ended before its client took anything, all of it in memory. */
bool
stream_whole(const struct stream *s)
{
	return s->st_final && !s->st_gone && s->st_spill_fd < 0;
}

/* All of a whole stream's bytes (stream_whole), in one allocation. */
char *
stream_take_all(struct stream *s, size_t *len)
{
	size_t n = buf_pending(&s->st_buf);
	char *body = xmalloc(n ? n : 1);

	*len = stream_take(s, body, n);
	return body;
}

/* Its client may be gone: a keepalive is the probe, unless bytes wait. */
void
stream_probe(struct stream *s)
{
	if (backlog(s) == 0)
		keepalive_into(s, &s->st_buf);
}

/* Its client is gone: the proxy is told (CANCEL); its transport ends it. */
void
stream_gone(struct stream *s)
{
	s->st_gone = true;
	metrics_count(M_DISCONNECT, 1);
	log_info("stream %llu: client went away after %llu ms; cancel sent to context %s",
		 (unsigned long long)s->st_id, (unsigned long long)(now_ms() - s->st_started),
		 s->st_ctx ? s->st_ctx->c_id : "-");
	cancel(s);
}

/* Keepalive lines for quiet streams: they also surface a dead peer. */
void
stream_tick(uint64_t now)
{
	struct stream *s;

	TAILQ_FOREACH(s, &streams, st_link)
		if (s->st_ops && s->st_ops->so_keepalive && !s->st_final && !s->st_gone &&
		    now >= s->st_last_out + KEEPALIVE_MS && backlog(s) == 0) {
			s->st_last_out = now;
			keepalive_into(s, &s->st_buf);
			wake(s);
		}
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

/* Whether s is the execution its context runs (the first of its list). */
bool
stream_running(const struct stream *s)
{
	return s->st_ctx && TAILQ_FIRST(&s->st_ctx->c_streams) == s;
}
