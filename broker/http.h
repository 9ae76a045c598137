/*
 * http.h — the broker's HTTP transport (libmicrohttpd): its request and the
 * calls that take MHD's types, for the files that speak HTTP alone (http.c,
 * api.c, accept.c, caller.c, respond.c, gzip.c and envd's: envd*.c). The
 * rest of the broker sees neither MHD nor a struct http_request's insides (broker.h).
 */
#ifndef SANDCELL_HTTP_H
#define SANDCELL_HTTP_H

#include <microhttpd.h>

#include "broker.h"

/* An HTTP request (MHD's con_cls): the request layer's part first. */
struct http_request {
	struct request hr_rq;
	struct MHD_Connection *hr_conn;
	struct buf hr_body;
	bool hr_too_big;
	bool hr_suspended;
	struct stream *hr_stream;
	struct MHD_Response *hr_resp; /* prepared while suspended */
	unsigned hr_status;
	unsigned hr_code;        /* the status answered, for the metrics */
	const char *hr_endpoint; /* path template, for the metrics */
	const char *hr_method;
	bool hr_envd_port;       /* came through --envd-listen: envd.c's routes */
	void *hr_envd;           /* envd.c's state of the request */
	bool hr_stream_body;          /* envd's upload: its body is not held here */
	struct upload *hr_upload;     /* envdfile.c's: POST /files, its body streamed */
	struct download *hr_download; /* envdfile.c's: GET /files, its bytes streamed */
};

/* An HTTP connection, for the connection limit and the header timeout. */
struct conn {
	TAILQ_ENTRY(conn) cn_link;
	int cn_fd;
	bool cn_in_request; /* its request head has arrived; MHD's timeout rules */
	uint64_t cn_since;  /* connected, or its last response ended */
	const char *cn_bad_at; /* the string of this request that had %2F or %00 */
	uint64_t cn_body_by;   /* ms its request's body must be in by (--body-timeout); 0: none due */
	struct http_request *cn_hr; /* that request, answered 408 past it */
	bool cn_envd;          /* came through --envd-listen (envd.c) */
};
TAILQ_HEAD(connq, conn);

/* caller.c */
const char *caller_refusal(struct MHD_Connection *conn, char *why, size_t whysz);
const char *caller_body_refusal(struct MHD_Connection *conn, char *why, size_t whysz);
bool caller_preflight(struct MHD_Connection *conn, const char *method);
void caller_cors(struct MHD_Connection *conn, struct MHD_Response *r, bool preflight);

/* accept.c */
void accept_hand_to(struct MHD_Daemon *d);

/* respond.c */
extern const struct request_ops respond_ops;
struct MHD_Response *respond_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
struct MHD_Response *respond_json(json_t *j);
enum MHD_Result respond_now(struct http_request *hr, unsigned status, struct MHD_Response *r);
void respond_complete(struct http_request *hr, unsigned status, struct MHD_Response *resp);
void respond_suspend(struct http_request *hr);
void respond_stream(struct http_request *hr, struct stream *s);

/* envdstream.c */
enum MHD_Result envdstream_open(struct http_request *hr, struct context *c, const char *op);
enum MHD_Result envdstream_error(struct http_request *hr, const char *code, const char *message);

/* api.c: the code API's routes */
enum MHD_Result api_route(struct http_request *hr, const char *url, const char *method);
const char *api_endpoint(const char *url);

/* envd.c */
enum MHD_Result envd_route(struct http_request *hr, const char *url, const char *method);
bool envd_asked(struct MHD_Connection *conn, const char *url);
const char *envd_body_refusal(struct MHD_Connection *conn, char *why, size_t whysz);
void envd_free(struct http_request *hr);

/* gzip.c: gzip on envd's /files */
bool gzip_takes(struct MHD_Connection *c);
#define GZIP_WINDOW (15 + 16) /* zlib's windowBits for its gzip wrapper */

/* envdfile.c */
enum MHD_Result envdfile_read(struct http_request *hr, struct context *c, const char *path);
void envdfile_free(struct http_request *hr);

/* envdupload.c */
enum MHD_Result envdupload_start(struct http_request *hr, struct context *c, const char *path);
enum MHD_Result envdupload_body(struct http_request *hr, const char *data, size_t *size);
void envdupload_free(struct http_request *hr);

#endif
