/*
 * envdstream.c — envd's server streams begun (docs/ENVD.md): Start and
 * Connect (a process's events), WatchDir (a directory's changes). The
 * request's envelope is checked (connect.c), the agent asked (MSG_ENVD with
 * the stream's id), and the answer is a stream of connect.c's kind, which
 * the agent's events feed (relay.c → its sk_in) until its end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

/* A streaming call's answer before any event: 200, one end-of-stream envelope. */
enum MHD_Result
envdstream_error(struct http_request *hr, const char *code, const char *message)
{
	size_t n;
	char *body = connect_error_body(code, message, &n);
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);

	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
	                        connect_process.sk_ctype);
	return respond_now(hr, 200, r);
}

/*
 * envd's server streams: op start (a new process), connect (a running one),
 * watch (a directory's changes). The request's envelope checked, the agent
 * asked, and the answer a stream of its kind, which the agent's events feed.
 */
enum MHD_Result
envdstream_open(struct http_request *hr, struct context *c, const char *op)
{
	const char *ct = MHD_lookup_connection_value(hr->hr_conn, MHD_HEADER_KIND,
	                                             MHD_HTTP_HEADER_CONTENT_TYPE);
	const char *body = hr->hr_body.b_data ? buf_head(&hr->hr_body) : "", *code;
	size_t len = buf_pending(&hr->hr_body);
	bool watch = !strcmp(op, "watch");
	char err[256], *s;
	json_t *args;
	struct msg m;
	int rc;

	if (!ct || strncasecmp(ct, "application/connect+json", 24))
		return respond_now(hr, 415,
		                   respond_text("streaming calls take "
		                                "application/connect+json"));
	rc = watch ? connect_watch_args(body, len, &args, &code, err, sizeof(err))
	     : !strcmp(op, "start")
	         ? connect_start_args(body, len, &args, &code, err, sizeof(err))
	         : connect_connect_args(body, len, &args, &code, err, sizeof(err));
	if (rc < 0)
		return envdstream_error(hr, code, err);
	struct stream *st = stream_open_as(c, watch ? &connect_watch : &connect_process);
	s = json_dumps(args, JSON_COMPACT);
	json_decref(args);
	msg_init(&m, MSG_ENVD);
	msg_set_u64(&m, F_REQ, waiter_next_req());
	msg_set_str(&m, F_TEXT, op, strlen(op));
	msg_set_str(&m, F_CODE, s, strlen(s));
	msg_set_u64(&m, F_STREAM, st->st_id);
	free(s);
	link_send(c, &m);
	msg_free(&m);
	respond_stream(hr, st);
	return MHD_YES;
}

/*
 * Streams whose agent never began them (no start event, nor an error)
 * within ENVD_STALL_MS: a stopped or stuck agent. Each ends with
 * deadline_exceeded and the agent is told (CANCEL). Once begun, a stream
 * may be quiet for as long as its command is (keepalives hold it).
 */
void
envdstream_tick(uint64_t now)
{
	struct stream *s, *next;
	char why[64];

	snprintf(why, sizeof(why), "the envd agent did not answer within %d s",
	         ENVD_STALL_MS / 1000);
	for (s = stream_next(NULL); s; s = next) {
		next = stream_next(s);
		if ((s->st_kind != &connect_process && s->st_kind != &connect_watch) ||
		    s->st_heard || s->st_final || s->st_gone ||
		    now - s->st_started < ENVD_STALL_MS)
			continue;
		log_warn("envd: stream %llu: %s; it ends", (unsigned long long)s->st_id,
		         why);
		stream_expire(s, "deadline_exceeded", why);
	}
}
