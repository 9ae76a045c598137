/*
 * stream.c — /execute responses. Output from the proxy is buffered per stream
 * and handed to MHD as chunks. With nothing to send the connection is
 * suspended, and while suspended its socket is watched for hang-up (EPOLLRDHUP)
 * so a vanished client is noticed at once, not at the next write; keepalive
 * lines are the second line of defence. A vanished client means CANCEL.
 */
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include "broker.h"

static const char keepalive[] = "{\"type\":\"keepalive\"}\n";

struct stream *
stream_open(struct context *c, struct MHD_Connection *conn)
{
	struct stream *s = xcalloc(1, sizeof(*s));
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

	s->st_id = sv.sv_next_stream++;
	s->st_ctx = c;
	s->st_conn = conn;
	s->st_fd = ci ? ci->connect_fd : -1;
	s->st_ev = (struct evsrc){EV_HANGUP, s};
	s->st_started = s->st_last_out = now_ms();
	TAILQ_INSERT_TAIL(&sv.sv_streams, s, st_link);
	TAILQ_INSERT_TAIL(&c->c_streams, s, st_ctx_link);
	c->c_nstreams++;
	return s;
}

static void
unwatch(struct stream *s)
{
	if (s->st_suspended) {
		server_unwatch(s->st_fd);
		s->st_suspended = false;
		MHD_resume_connection(s->st_conn);
		sv.sv_mhd_kick = true;
	}
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
	context_send(s->st_ctx, &m);
	msg_free(&m);
	log_info("stream %llu: client went away after %llu ms; cancel sent to context %s",
		 (unsigned long long)s->st_id, (unsigned long long)(now_ms() - s->st_started),
		 s->st_ctx->c_id);
}

static ssize_t
reader(void *cls, uint64_t pos, char *out, size_t max)
{
	struct stream *s = cls;
	size_t n = buf_pending(&s->st_buf);

	(void)pos;
	if (s->st_gone)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	if (n) {
		if (n > max)
			n = max;
		memcpy(out, buf_head(&s->st_buf), n);
		buf_consume(&s->st_buf, n);
		s->st_last_out = now_ms();
		return n;
	}
	if (s->st_final)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* nothing to send: park the connection and watch for the client leaving */
	MHD_suspend_connection(s->st_conn);
	s->st_suspended = true;
	if (s->st_fd >= 0)
		server_watch(s->st_fd, EPOLLRDHUP, &s->st_ev);
	return 0;
}

struct MHD_Response *
stream_response(struct stream *s)
{
	struct MHD_Response *r =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, reader, s, NULL);

	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(r, "X-Accel-Buffering", "no");
	return r;
}

void
stream_output(struct stream *s, const char *data, size_t len, bool final)
{
	if (s->st_gone)
		return;
	buf_append(&s->st_buf, data, len);
	if (final)
		s->st_final = true;
	unwatch(s);
}

/* Ends a stream from the broker's side (its proxy is lost). */
void
stream_fail(struct stream *s, const char *name, const char *value)
{
	json_t *e = json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", name, "value",
			      value, "traceback", "");
	char *line = json_dumps(e, JSON_COMPACT | JSON_ENSURE_ASCII);
	static const char end[] = "{\"type\":\"end_of_execution\"}\n";

	json_decref(e);
	if (s->st_final || s->st_gone) {
		free(line);
		return;
	}
	buf_append(&s->st_buf, line, strlen(line));
	buf_append(&s->st_buf, "\n", 1);
	free(line);
	stream_output(s, end, sizeof(end) - 1, true);
}

void
stream_fail_all(const char *name, const char *value)
{
	struct stream *s;

	TAILQ_FOREACH(s, &sv.sv_streams, st_link)
		stream_fail(s, name, value);
}

/* EPOLLRDHUP on a parked connection. */
void
stream_hangup(struct stream *s)
{
	s->st_gone = true;
	cancel(s);
	unwatch(s); /* resumed, MHD reads the error and closes */
}

/* MHD finished the request, whatever the reason. */
void
stream_closed(struct stream *s)
{
	if (s->st_suspended) {
		server_unwatch(s->st_fd);
		s->st_suspended = false;
	}
	if (!s->st_final)
		cancel(s);
	TAILQ_REMOVE(&sv.sv_streams, s, st_link);
	if (s->st_ctx) {
		TAILQ_REMOVE(&s->st_ctx->c_streams, s, st_ctx_link);
		s->st_ctx->c_nstreams--;
	}
	buf_free(&s->st_buf);
	free(s);
}

/* Keepalive lines for quiet streams: they also surface a dead peer. */
void
stream_tick(uint64_t now)
{
	struct stream *s;

	TAILQ_FOREACH(s, &sv.sv_streams, st_link)
		if (!s->st_final && !s->st_gone && now - s->st_last_out >= KEEPALIVE_MS &&
		    buf_pending(&s->st_buf) == 0) {
			s->st_last_out = now;
			stream_output(s, keepalive, sizeof(keepalive) - 1, false);
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
