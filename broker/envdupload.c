/*
 * envdupload.c — envd's POST /files, streamed (docs/ENVD.md): the body is
 * taken from MHD as it arrives (inflated as it comes when gzip, parted by
 * MHD's post processor when multipart) and each file's bytes sent on to the
 * agent in ENVD_CHUNK pieces (envdfile.c's transfers: wopen, wdata {off},
 * wend). The agent acknowledges each; once ENVD_WINDOW bytes wait
 * unacknowledged the connection is suspended with the rest of MHD's input
 * left unprocessed, until an acknowledgement resumes it. A file past
 * --max-file-size is 413 and its transfer cancelled (the agent removes its
 * temporary file); the body's rest is read and dropped, as http.c does past
 * --max-body.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "http.h"

static void up_in(struct xfer *x, struct msg *m);
static void up_lost(struct xfer *x, const char *code, const char *why);

#define ENVDUPLOAD_MAX_FILES 256

struct upload {
	struct http_request *u_hr;
	struct context *u_c;
	struct xfer *u_files[ENVDUPLOAD_MAX_FILES];
	size_t u_nfiles, u_ndone;
	struct buf u_pending; /* the current file's bytes not yet sent */
	uint64_t u_size;      /* the current file's bytes so far */
	uint64_t u_inflight;  /* sent and not acknowledged, over all its files */
	const char *u_path;   /* the query's path */
	struct MHD_PostProcessor *u_pp;
	char *u_part; /* the part told with no bytes yet, and its path */
	bool u_part_empty;
	z_stream u_z;
	bool u_gzip, u_zend;
	bool u_waiting;    /* suspended: the window is full */
	int u_fd;          /* the client's socket, watched until the body is in (up_watch) */
	struct evsrc u_ev;
	bool u_watched;
	bool u_body_in;    /* the whole body came */
	bool u_answered;   /* its response is queued */
	unsigned u_status; /* failed: the status, with u_fail the answer */
	json_t *u_meta;    /* X-Metadata-* as {key: value}, or NULL */
	struct MHD_Response *u_fail;
};

static void
up_unwatch(struct upload *u)
{
	if (u->u_watched)
		server_unwatch(u->u_fd);
	u->u_watched = false;
}

static void
up_resume(struct upload *u)
{
	if (!u->u_waiting)
		return;
	u->u_waiting = false;
	MHD_resume_connection(u->u_hr->hr_conn);
	server_kick();
}

/* The upload fails with status and its answer; its files' transfers end. */
static void
up_fail(struct upload *u, unsigned status, struct MHD_Response *r)
{
	if (u->u_status) {
		MHD_destroy_response(r);
		return;
	}
	u->u_status = status;
	u->u_fail = r;
	for (size_t i = 0; i < u->u_nfiles; i++)
		envdfile_close(u->u_files[i]);
	buf_free(&u->u_pending);
	if (u->u_body_in && !u->u_answered) { /* it waits for the agent: answered now */
		u->u_answered = true;
		u->u_fail = NULL;
		respond_complete(u->u_hr, status, r);
	}
	up_resume(u); /* the rest of the body is read and dropped */
}

static void
up_fail_code(struct upload *u, const char *code, const char *msg)
{
	unsigned st;
	struct MHD_Response *r = respond_json(connect_error(false, code, &st, msg));

	up_fail(u, st, r);
}

static void
up_too_big(struct upload *u)
{
	char msg[128];

	snprintf(msg, sizeof(msg), "the file is over --max-file-size (%" PRIu64 " bytes)",
	         cf->cf_max_file_size);
	up_fail(u, 413,
	        respond_json(json_pack("{s:s, s:i}", "message", msg, "code", 413)));
}

static struct xfer *
up_current(struct upload *u)
{
	return u->u_nfiles ? u->u_files[u->u_nfiles - 1] : NULL;
}

/* The current file's pending bytes, a chunk at a time (all of them: last). */
static void
up_flush(struct upload *u, bool last)
{
	struct xfer *x = up_current(u);

	while (x && x->x_s &&
	       (buf_pending(&u->u_pending) >= ENVD_CHUNK ||
	        (last && buf_pending(&u->u_pending)))) {
		size_t n = buf_pending(&u->u_pending);
		if (n > ENVD_CHUNK)
			n = ENVD_CHUNK;
		envdfile_send(x, "wdata",
		              json_pack("{s:I}", "off", (json_int_t)x->x_sent),
		              buf_head(&u->u_pending), n);
		buf_consume(&u->u_pending, n);
		x->x_sent += n;
		u->u_inflight += n;
	}
}

/* The current file is whole: its pending bytes, then its end. */
static void
up_file_end(struct upload *u)
{
	struct xfer *x = up_current(u);

	if (!x || !x->x_s || u->u_status)
		return;
	up_flush(u, true);
	envdfile_send(x, "wend", json_object(), NULL, 0);
	x->x_wend = true;
}

/* A file's bytes (the body's, or a part's). */
static void
up_bytes(struct upload *u, const char *data, size_t len)
{
	if (u->u_status || !up_current(u))
		return;
	if (u->u_size + len > cf->cf_max_file_size) {
		up_too_big(u);
		return;
	}
	u->u_size += len;
	buf_append(&u->u_pending, data, len);
	up_flush(u, false);
}

/* The next file of the upload, to path. */
static int
up_file(struct upload *u, const char *path)
{
	struct xfer *x;

	up_file_end(u);
	if (u->u_nfiles == ENVDUPLOAD_MAX_FILES) {
		up_fail_code(u, "invalid_argument", "too many files in one upload");
		return -1;
	}
	if (!*path) {
		up_fail_code(u, "invalid_argument",
		             "a file has no path: give the path query parameter or "
		             "the part's filename");
		return -1;
	}
	x = xcalloc(1, sizeof(*x));
	x->x_up = u;
	u->u_files[u->u_nfiles++] = x;
	u->u_size = 0;
	envdfile_open(x, u->u_c, "wopen", path, u->u_meta, up_in, up_lost);
	return 0;
}

static enum MHD_Result
up_part(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
        const char *type, const char *enc, const char *data, uint64_t off, size_t size)
{
	struct upload *u = cls;

	(void)kind;
	(void)type;
	(void)enc;
	if (strcmp(key, "file"))
		return MHD_YES; /* envd reads the field "file" alone */
	/* the query's path for one file; a file's own name otherwise */
	const char *path = u->u_path && *u->u_path ? u->u_path : filename ? filename : "";
	/* a part begins at offset 0, perhaps told first with no bytes: once */
	if (off == 0 && !(u->u_part_empty && !strcmp(path, u->u_part)) &&
	    up_file(u, path) < 0)
		return MHD_NO;
	if (off == 0 && !size) {
		free(u->u_part);
		u->u_part = xstrdup(path);
	}
	u->u_part_empty = off == 0 && !size;
	up_bytes(u, data, size);
	return u->u_status ? MHD_NO : MHD_YES;
}

/* Plain bytes of the body: a part of the multipart body, or the file's. */
static void
up_plain(struct upload *u, const char *data, size_t len)
{
	if (!u->u_pp) {
		up_bytes(u, data, len);
		return;
	}
	if (MHD_post_process(u->u_pp, data, len) != MHD_YES && !u->u_status)
		up_fail_code(u, "invalid_argument", "the multipart body does not parse");
}

/* Takes what the window allows of the body's next bytes: how many. */
static size_t
up_take(struct upload *u, const char *data, size_t len)
{
	char out[64 << 10];
	size_t used = 0;

	if (!u->u_gzip) {
		while (used < len && !u->u_status && u->u_inflight < ENVD_WINDOW) {
			size_t n = len - used > sizeof(out) ? sizeof(out) : len - used;
			up_plain(u, data + used, n);
			used += n;
		}
		return u->u_status ? len : used;
	}
	u->u_z.next_in = (Bytef *)data;
	u->u_z.avail_in = (uInt)len;
	while (u->u_z.avail_in && !u->u_zend && !u->u_status &&
	       u->u_inflight < ENVD_WINDOW) {
		u->u_z.next_out = (Bytef *)out;
		u->u_z.avail_out = sizeof(out);
		int zr = inflate(&u->u_z, Z_NO_FLUSH);
		if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
			up_fail_code(u, "invalid_argument", "not gzip");
			break;
		}
		u->u_zend = zr == Z_STREAM_END;
		up_plain(u, out, sizeof(out) - u->u_z.avail_out);
	}
	/* past its end, or failed: the rest is dropped */
	return u->u_zend || u->u_status ? len : len - u->u_z.avail_in;
}

/* The whole body came: the last file's end, then the agent's answers. */
static enum MHD_Result
up_body_in(struct upload *u)
{
	struct http_request *hr = u->u_hr;

	up_unwatch(u); /* the body is in: a client that now shuts its side still reads */
	if (!u->u_status && u->u_gzip && !u->u_zend)
		up_fail_code(u, "invalid_argument", "not gzip (cut short)");
	if (!u->u_status && u->u_pp) {
		MHD_destroy_post_processor(u->u_pp); /* its last part's bytes */
		u->u_pp = NULL;
	}
	if (!u->u_status && !u->u_nfiles)
		up_fail_code(u, "invalid_argument", "no field 'file' in the upload");
	if (u->u_status) {
		struct MHD_Response *r = u->u_fail;
		u->u_fail = NULL;
		u->u_answered = true;
		return respond_now(hr, u->u_status, r);
	}
	u->u_body_in = true;
	up_file_end(u);
	respond_suspend(hr); /* until each file's done (xfer_in) */
	return MHD_YES;
}

/* Every file done: EntryInfo[] in the order they came. */
static void
up_done(struct upload *u)
{
	json_t *a = json_array();

	for (size_t i = 0; i < u->u_nfiles; i++) {
		json_t *e = u->u_files[i]->x_entry, *w;
		w = json_pack("{s:O, s:O, s:s}", "name", json_object_get(e, "name"),
		              "path", json_object_get(e, "path"), "type", "file");
		if (json_object_get(e, "metadata"))
			json_object_set(w, "metadata", json_object_get(e, "metadata"));
		json_array_append_new(a, w);
	}
	u->u_answered = true;
	respond_complete(u->u_hr, 200, respond_json(a));
}

/* An upload file's event: an acknowledgement, its end, or why it failed. */
static void
up_in(struct xfer *x, struct msg *m)
{
	struct upload *u = x->x_up;
	const char *kind = m->m_outcome.s ? m->m_outcome.s : "";
	int64_t n;

	if (!strcmp(kind, "ack") && !m->m_final && (n = envdfile_number(m)) >= 0 &&
	    (uint64_t)n >= x->x_acked && (uint64_t)n <= x->x_sent) {
		u->u_inflight -= (uint64_t)n - x->x_acked;
		x->x_acked = (uint64_t)n;
		if (u->u_inflight < ENVD_WINDOW)
			up_resume(u);
		return;
	}
	if (!strcmp(kind, "done") && m->m_final && x->x_acked == x->x_sent) {
		json_t *a = json_loadb(m->m_data.s, m->m_data.len, 0, NULL);
		x->x_entry = connect_entry(a);
		json_decref(a);
		if (x->x_entry) {
			if (++u->u_ndone == u->u_nfiles && u->u_body_in && !u->u_status)
				up_done(u);
			return;
		}
	}
	if (m->m_final && strcmp(kind, "done") && strcmp(kind, "ack") && *kind) {
		up_fail_code(u, kind, m->m_data.len ? m->m_data.s : "the write failed");
		return;
	}
	log_warn("envd: the agent's answer to an upload is not what it must be");
	up_fail_code(u, "internal", "the envd agent's answer is malformed");
}

/* One X-Metadata-KEY header into {key: value} (the first of a key kept). */
static enum MHD_Result
up_meta_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	json_t *meta = cls;
	char k[ENVD_META_KEY_MAX + 1];
	size_t n;

	(void)kind;
	if (strncasecmp(key, "X-Metadata-", 11))
		return MHD_YES;
	if (!(n = strlen(key + 11)) || n > ENVD_META_KEY_MAX) {
		json_object_set_new(meta, "", json_null()); /* marks it refused */
		return MHD_NO;
	}
	for (size_t i = 0; i <= n; i++)
		k[i] = (char)tolower((unsigned char)key[11 + i]);
	for (const char *p = value; *p; p++)
		if (*p < 0x20 || *p > 0x7e) {
			json_object_set_new(meta, "", json_null());
			return MHD_NO;
		}
	if (!json_object_get(meta, k))
		json_object_set_new(meta, k, json_string(value));
	return MHD_YES;
}

/*
 * An upload's X-Metadata-* headers as {key: value} in *meta (NULL: none),
 * as envd takes them: keys lowercased, printable ASCII, a key at most
 * ENVD_META_KEY_MAX bytes, all keys (with their "user.e2b.") and values at
 * most ENVD_META_MAX. -1 when they are not (400).
 */
static int
up_meta(struct MHD_Connection *conn, json_t **meta)
{
	json_t *m = json_object(), *v;
	const char *k;
	size_t total = 0;

	MHD_get_connection_values(conn, MHD_HEADER_KIND, up_meta_header, m);
	json_object_foreach(m, k, v) total +=
	    strlen("user.e2b.") + strlen(k) + json_string_length(v);
	if (json_object_get(m, "") || total > ENVD_META_MAX) {
		json_decref(m);
		return -1;
	}
	*meta = json_object_size(m) ? m : (json_decref(m), NULL);
	return 0;
}

static void envdupload_hangup(void *arg, uint32_t events);

/*
 * POST /files, as its head came (http.c calls it before any of the body):
 * the body's form; its bytes come to envdfile_body.
 */
enum MHD_Result
envdupload_start(struct http_request *hr, struct context *c, const char *path)
{
	struct MHD_Connection *conn = hr->hr_conn;
	const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                             MHD_HTTP_HEADER_CONTENT_TYPE);
	const char *enc = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                              MHD_HTTP_HEADER_CONTENT_ENCODING);
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                             MHD_HTTP_HEADER_CONTENT_LENGTH);
	struct upload *u = xcalloc(1, sizeof(*u));
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	unsigned st;

	u->u_hr = hr;
	u->u_fd = ci ? ci->connect_fd : -1;
	u->u_ev = (struct evsrc){envdupload_hangup, u};
	/*
	 * The client's leaving mid-body is ours to see: MHD misses it while the
	 * connection is suspended (the window full), and its edge-triggered
	 * epoll can miss an end that came with the last bytes (a short read
	 * leaves the end unread, and no new edge comes): the upload would wait,
	 * its files half-written, until the body's deadline.
	 */
	if (u->u_fd >= 0) {
		server_watch(u->u_fd, EPOLLRDHUP, &u->u_ev);
		u->u_watched = true;
	}
	u->u_c = c;
	u->u_path = path;
	hr->hr_upload = u;
	if (up_meta(conn, &u->u_meta) < 0)
		return respond_now(
		    hr, 400,
		    respond_json(connect_error(
		        false, "invalid_argument", &st,
		        "X-Metadata-*: keys of 1 to 246 bytes and values of printable "
		        "ASCII, at most 4096 bytes in all")));
	if (enc && *enc && strcasecmp(enc, "identity")) {
		if (strcasecmp(enc, "gzip"))
			return respond_now(
			    hr, 400,
			    respond_json(connect_error(false, "invalid_argument", &st,
			               "Content-Encoding: gzip or identity")));
		if (inflateInit2(&u->u_z, GZIP_WINDOW) != Z_OK)
			return respond_now(
			    hr, 500, respond_json(connect_error(false, "internal", &st, "out of memory")));
		u->u_gzip = true;
	}
	if (ct && !strncasecmp(ct, "application/octet-stream", 24)) {
		if (!path || !*path)
			return respond_now(
			    hr, 400,
			    respond_json(connect_error(false, "invalid_argument", &st,
			               "the path query parameter is required with "
			               "application/octet-stream")));
		/* its size is said: refused before its bytes */
		if (!u->u_gzip && cl &&
		    strtoull(cl, NULL, 10) > cf->cf_max_file_size) {
			up_too_big(u);
			u->u_answered = true;
			struct MHD_Response *r = u->u_fail;
			u->u_fail = NULL;
			return respond_now(hr, 413, r);
		}
		up_file(u, path);
	} else if (ct && !strncasecmp(ct, "multipart/form-data", 19)) {
		if (!(u->u_pp = MHD_create_post_processor(conn, 64 << 10, up_part, u)))
			return respond_now(
			    hr, 400,
			    respond_json(connect_error(false, "invalid_argument", &st,
			               "the multipart body does not parse")));
	} else {
		return respond_now(hr, 400,
		                   respond_json(connect_error(false, "invalid_argument", &st,
		                              "the body must be multipart/form-data or "
		                              "application/octet-stream")));
	}
	return MHD_YES;
}

/* An upload's body as MHD hands it over; its end when *size is 0. */
enum MHD_Result
envdupload_body(struct http_request *hr, const char *data, size_t *size)
{
	struct upload *u = hr->hr_upload;

	if (u->u_answered) {
		*size = 0;
		return MHD_YES;
	}
	if (!*size)
		return u->u_body_in ? MHD_YES : up_body_in(u);
	*size -= up_take(u, data, *size);
	if (*size) { /* the window is full: the rest waits in MHD until an ack */
		u->u_waiting = true;
		MHD_suspend_connection(hr->hr_conn);
	}
	return MHD_YES;
}

/* Its proxy is lost, or its agent stalled: the upload fails. */
static void
up_lost(struct xfer *x, const char *code, const char *why)
{
	up_fail_code(x->x_up, code, why);
}

/* The request ended (done, failed, or its client left): what it holds goes. */
void
envdupload_free(struct http_request *hr)
{
	struct upload *u = hr->hr_upload;

	if (!u)
		return;
	up_unwatch(u);
	for (size_t i = 0; i < u->u_nfiles; i++) {
		envdfile_close(u->u_files[i]);
		json_decref(u->u_files[i]->x_entry);
		free(u->u_files[i]);
	}
	if (u->u_pp)
		MHD_destroy_post_processor(u->u_pp);
	if (u->u_gzip)
		inflateEnd(&u->u_z);
	if (u->u_fail)
		MHD_destroy_response(u->u_fail);
	json_decref(u->u_meta);
	buf_free(&u->u_pending);
	free(u->u_part);
	free(u);
	hr->hr_upload = NULL;
}

/*
 * The client shut its side (or reset) before its body was whole: the rest
 * cannot come. The upload fails, its files' transfers end (CANCEL: the
 * agent leaves nothing of them), and the socket is shut so that MHD, woken
 * by it, ends the request (as http.c does for a body past its deadline).
 */
static void
envdupload_hangup(void *arg, uint32_t events)
{
	struct upload *u = arg;

	(void)events;
	up_unwatch(u);
	up_fail_code(u, "canceled", "the client left before its body was whole");
	shutdown(u->u_fd, SHUT_RDWR);
}
