/*
 * envdfile.c — envd's /files, streamed with bounded memory (docs/ENVD.md):
 * each file is a transfer, a stream of the envd context's (stream.c's
 * tables, so that a lost proxy ends it and a client's leaving CANCELs it)
 * whose events the agent sends (envd/file.c). Uploads are envdupload.c's;
 * downloads are here: a file's bytes come as the agent reads them, at most
 * ENVD_WINDOW ahead of what the client took (the agent's credit, topped up
 * by "more"), and go out through MHD_create_response_from_callback, with
 * the file's size at open as Content-Length, or deflated as they go (zlib)
 * when the client takes gzip.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "http.h"

struct download {
	struct http_request *d_hr;
	struct xfer d_x;
	struct buf d_buf;       /* bytes from the agent the client did not take */
	uint64_t d_size, d_got; /* the file's size at open; bytes from the agent */
	uint64_t d_untold;      /* taken, not yet told to the agent ("more") */
	bool d_started, d_eof, d_broken, d_suspended, d_gzip, d_zdone;
	int d_refs; /* the request's and its response's */
	z_stream d_z;
};

static void xfer_in(struct stream *s, struct msg *m);

static char *
xfer_end(const char *name, const char *value, size_t *len)
{
	(void)name;
	*len = strlen(value);
	return xstrdup(value);
}

static const struct stream_kind xfer_kind = {
    .sk_ctype = "application/octet-stream",
    .sk_keepalive = "",
    .sk_end = xfer_end,
    .sk_in = xfer_in,
};

static void xfer_lost(struct stream *s, const char *data, size_t len, bool final);

static const struct stream_ops xfer_ops = {
    .so_chunk = xfer_lost,
    .so_client = "envd file",
};

/* An operation of transfer x for the agent (its data: bytes, or none). */
void
envdfile_send(struct xfer *x, const char *op, json_t *args, const char *data, size_t len)
{
	char *s = json_dumps(args, JSON_COMPACT);
	struct msg m;

	json_decref(args);
	msg_init(&m, MSG_ENVD);
	msg_set_u64(&m, F_REQ, waiter_next_req());
	msg_set_str(&m, F_TEXT, op, strlen(op));
	msg_set_str(&m, F_CODE, s, strlen(s));
	msg_set_u64(&m, F_STREAM, x->x_s->st_id);
	if (data)
		msg_set_str(&m, F_DATA, data, len);
	free(s);
	x->x_since = now_ms();
	link_send(x->x_s->st_ctx, &m);
	msg_free(&m);
}

void
envdfile_open(struct xfer *x, struct context *c, const char *op, const char *path,
              json_t *meta, void (*in)(struct xfer *, struct msg *),
              void (*lost)(struct xfer *, const char *, const char *))
{
	x->x_in = in;
	x->x_lost = lost;
	x->x_since = now_ms();
	x->x_s = stream_open_as(c, &xfer_kind);
	x->x_s->st_ops = &xfer_ops;
	x->x_s->st_client = x;
	json_t *args = json_pack("{s:s}", "path", path);
	if (meta) /* an upload's X-Metadata-* (checked: envdupload.c) */
		json_object_set(args, "metadata", meta);
	envdfile_send(x, op, args, NULL, 0);
}

/* Its stream ends: the agent is told (CANCEL) unless it ended it. */
void
envdfile_close(struct xfer *x)
{
	if (!x->x_s)
		return;
	stream_closed(x->x_s);
	x->x_s = NULL;
}

/* A number an event carries (its data, decimal), or -1. */
int64_t
envdfile_number(const struct msg *m)
{
	char num[24];
	char *end;

	if (!m->m_data.len || m->m_data.len >= sizeof(num))
		return -1;
	memcpy(num, m->m_data.s, m->m_data.len);
	num[m->m_data.len] = '\0';
	unsigned long long v = strtoull(num, &end, 10);
	return *end || num[0] == '-' || v > INT64_MAX ? -1 : (int64_t)v;
}

/* ---- downloads ---- */

static void
down_unref(struct download *d)
{
	if (--d->d_refs)
		return;
	if (d->d_gzip)
		deflateEnd(&d->d_z);
	buf_free(&d->d_buf);
	free(d);
}

static void
down_wake(struct download *d)
{
	if (!d->d_suspended)
		return;
	d->d_suspended = false;
	MHD_resume_connection(d->d_hr->hr_conn);
	server_kick();
}

/* What the client took is told to the agent, a chunk at a time. */
static void
down_took(struct download *d, size_t n)
{
	if (n)
		d->d_x.x_since = now_ms(); /* the agent has credit from here on */
	d->d_untold += n;
	if (d->d_untold >= ENVD_CHUNK && d->d_x.x_s) {
		envdfile_send(&d->d_x, "more",
		              json_pack("{s:I}", "n", (json_int_t)d->d_untold), NULL, 0);
		d->d_untold = 0;
	}
}

static ssize_t
down_reader(void *cls, uint64_t pos, char *out, size_t max)
{
	struct download *d = cls;
	size_t n = 0;

	(void)pos;
	if (d->d_broken)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	if (!d->d_gzip) {
		if ((n = buf_pending(&d->d_buf)) > max)
			n = max;
		memcpy(out, d->d_buf.b_data ? buf_head(&d->d_buf) : "", n);
		buf_consume(&d->d_buf, n);
		down_took(d, n);
		if (n)
			return (ssize_t)n;
	} else { /* as much as fits: small writes would wait on the peer's ACKs */
		size_t room = max;
		while (room && !d->d_zdone && (buf_pending(&d->d_buf) || d->d_eof)) {
			size_t in = buf_pending(&d->d_buf);
			d->d_z.next_in = (Bytef *)(in ? buf_head(&d->d_buf) : "");
			d->d_z.avail_in = (uInt)in;
			d->d_z.next_out = (Bytef *)(out + (max - room));
			d->d_z.avail_out = (uInt)room;
			int zr = deflate(&d->d_z, d->d_eof ? Z_FINISH : Z_NO_FLUSH);
			if (zr == Z_STREAM_ERROR)
				return MHD_CONTENT_READER_END_WITH_ERROR;
			d->d_zdone = zr == Z_STREAM_END;
			size_t took = in - d->d_z.avail_in,
			       made = room - d->d_z.avail_out;
			buf_consume(&d->d_buf, took);
			down_took(d, took);
			room -= made;
			if (!took && !made)
				break; /* zlib wants more input */
		}
		if ((n = max - room))
			return (ssize_t)n;
	}
	if (d->d_eof && (!d->d_gzip || d->d_zdone))
		return d->d_got == d->d_size ? MHD_CONTENT_READER_END_OF_STREAM
		                             : MHD_CONTENT_READER_END_WITH_ERROR;
	/* nothing yet: the agent's next bytes resume it */
	d->d_suspended = true;
	MHD_suspend_connection(d->d_hr->hr_conn);
	return 0;
}

static void
down_free_cb(void *cls)
{
	down_unref(cls);
}

/* The file opened: the response starts (its size known, unless deflated). */
static void
down_start(struct download *d, uint64_t size)
{
	struct MHD_Response *r;

	d->d_size = size;
	d->d_started = true;
	d->d_gzip = gzip_takes(d->d_hr->hr_conn) &&
	            deflateInit2(&d->d_z, Z_BEST_SPEED, Z_DEFLATED, GZIP_WINDOW, 8,
	                         Z_DEFAULT_STRATEGY) == Z_OK;
	r = MHD_create_response_from_callback(d->d_gzip ? MHD_SIZE_UNKNOWN : size,
	                                      64 << 10, down_reader, d, down_free_cb);
	d->d_refs++;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
	                        "application/octet-stream");
	if (d->d_gzip)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
	respond_complete(d->d_hr, 200, r);
}

static void
down_in(struct download *d, struct msg *m)
{
	const char *kind = m->m_outcome.s ? m->m_outcome.s : "";
	int64_t n;

	if (!d->d_started && !strcmp(kind, "size") && !m->m_final &&
	    (n = envdfile_number(m)) >= 0) {
		down_start(d, (uint64_t)n);
		return;
	}
	if (d->d_started && !strcmp(kind, "data") && !m->m_final &&
	    d->d_got + m->m_data.len <= d->d_size &&
	    buf_pending(&d->d_buf) + m->m_data.len <= ENVD_WINDOW + ENVD_CHUNK) {
		buf_append(&d->d_buf, m->m_data.s, m->m_data.len);
		d->d_got += m->m_data.len;
		down_wake(d);
		return;
	}
	if (d->d_started && !strcmp(kind, "end") && m->m_final &&
	    envdfile_number(m) >= 0) {
		d->d_eof = true; /* short of its size: the response ends with an error */
		down_wake(d);
		return;
	}
	if (!d->d_started && m->m_final && *kind && strcmp(kind, "end")) {
		unsigned st;
		struct MHD_Response *r = respond_json(connect_error(
		    false, kind, &st, m->m_data.len ? m->m_data.s : "the read failed"));
		respond_complete(d->d_hr, st, r);
		return;
	}
	log_warn("envd: the agent's answer to a read is not what it must be");
	if (!d->d_started)
		respond_complete(d->d_hr, 500,
		                 respond_json(connect_error(false, "internal", &(unsigned){0},
		                            "the envd agent's answer is malformed")));
	d->d_broken = true;
	envdfile_close(&d->d_x);
	down_wake(d);
}

/* The agent's event on a download's transfer. */
static void
down_event(struct xfer *x, struct msg *m)
{
	down_in(x->x_down, m);
}

/* ---- both ---- */

/* The agent's event on a transfer's stream (relay.c, through the kind). */
static void
xfer_in(struct stream *s, struct msg *m)
{
	struct xfer *x = s->st_client;

	x->x_since = now_ms();
	if (m->m_final) { /* its stream ends with this event */
		s->st_final = true;
		envdfile_close(x);
	}
	if (!m->m_data.s)
		m->m_data.s = (char *)"";
	x->x_in(x, m);
}

/* The broker ended the stream (its proxy is lost): it is freed after this. */
static void
xfer_lost(struct stream *s, const char *data, size_t len, bool final)
{
	struct xfer *x = s->st_client;

	(void)data;
	(void)len;
	if (!final)
		return;
	x->x_s = NULL;
	x->x_lost(x, "unavailable", "the envd agent was lost");
}

/* Whether transfer x waits on its agent: a download with nothing for its
 * client (the agent has credit), an upload with bytes or its end
 * unacknowledged. */
static bool
xfer_waits(const struct xfer *x)
{
	const struct download *d = x->x_down;

	if (d)
		return !d->d_started ||
		       (!buf_pending(&d->d_buf) && !d->d_eof && !d->d_broken);
	return x->x_sent > x->x_acked || x->x_wend;
}

/*
 * Transfers whose agent said nothing for ENVD_STALL_MS while they waited on
 * it (stopped, or stuck in a system call) end: the agent is told (CANCEL),
 * the client answered 504 deadline_exceeded (a download already begun is
 * cut short), the stream freed. One at a time: ending an upload ends its
 * other files' transfers too.
 */
void
envdfile_tick(uint64_t now)
{
	struct stream *s;
	struct xfer *x;
	char why[96];

	snprintf(why, sizeof(why), "the envd agent did not answer within %d s",
	         ENVD_STALL_MS / 1000);
	for (;;) {
		x = NULL;
		for (s = stream_next(NULL); s; s = stream_next(s))
		if (s->st_kind == &xfer_kind && s->st_client && !s->st_final &&
		    xfer_waits(s->st_client) &&
		    now - ((struct xfer *)s->st_client)->x_since >= ENVD_STALL_MS) {
			x = s->st_client;
			break;
		}
		if (!x)
			return;
		log_warn("envd: stream %llu: %s; the transfer ends",
		         (unsigned long long)x->x_s->st_id, why);
		x->x_s->st_gone = true; /* the agent's fault, not a client's leaving */
		envdfile_close(x);
		x->x_lost(x, "deadline_exceeded", why);
	}
}

/* A download ended by its side (its proxy lost, its agent stalled): its
 * answer, if not begun, says why; else it is cut short. */
static void
down_lost(struct xfer *x, const char *code, const char *why)
{
	struct download *d = x->x_down;
	if (!d->d_started) {
		unsigned st;
		struct MHD_Response *r =
		    respond_json(connect_error(false, code, &st, why));
		respond_complete(d->d_hr, st, r);
	}
	d->d_broken = true;
	down_wake(d);
}

/* GET /files?path=: the agent opens it; its size starts the response. */
enum MHD_Result
envdfile_read(struct http_request *hr, struct context *c, const char *path)
{
	struct download *d = xcalloc(1, sizeof(*d));

	d->d_hr = hr;
	d->d_x.x_down = d;
	d->d_refs = 1;
	hr->hr_download = d;
	envdfile_open(&d->d_x, c, "read", path, NULL, down_event, down_lost);
	respond_suspend(hr);
	return MHD_YES;
}

/* The request ended (done, failed, or its client left): what it holds goes. */
void
envdfile_free(struct http_request *hr)
{
	struct download *d = hr->hr_download;

	if (d) {
		envdfile_close(&d->d_x);
		d->d_suspended = false;
		down_unref(d);
		hr->hr_download = NULL;
	}
}
