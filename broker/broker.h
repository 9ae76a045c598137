/*
 * broker.h — sandcell-broker: terminates HTTP (libmicrohttpd, driven from our
 * own epoll loop), owns the table of contexts, spawns and supervises one
 * sandcell-proxy per context, and streams proxy output to clients as NDJSON.
 * It never talks to a kernel.
 */
#ifndef SANDCELL_BROKER_H
#define SANDCELL_BROKER_H

#include <sys/queue.h>
#include <sys/types.h>

#include <jansson.h>
#include <microhttpd.h>

#include "../proto/proto.h"

#define KEEPALIVE_MS 1000
#define TICK_MS 250
#define MAX_LANG 64

/* What an epoll event belongs to. */
enum ev_kind {
	EV_MHD,
	EV_SIGNAL,
	EV_WAKE,
	EV_CTX_RECV,
	EV_CTX_SEND,
	EV_CTX_PIDFD,
	EV_HANGUP,
	EV_CTL
};

struct evsrc {
	enum ev_kind ev_kind;
	void *ev_obj;
};

struct context;
struct request;

/* What a waiting request's reply completes. */
enum { OP_NONE, OP_RESTART, OP_DELETE, OP_INTERRUPT, OP_CREATE };

/* One /execute response: NDJSON from the proxy, relayed as it arrives. */
struct stream {
	TAILQ_ENTRY(stream) st_link;     /* server's list */
	TAILQ_ENTRY(stream) st_ctx_link; /* its context's list */
	uint64_t st_id;
	struct context *st_ctx;
	struct MHD_Connection *st_conn;
	struct buf st_buf;
	struct evsrc st_ev;
	int st_fd;            /* the client's socket, watched while suspended */
	bool st_final;        /* the proxy ended the stream */
	bool st_suspended;
	bool st_gone;         /* the client went away */
	bool st_cancel_sent;
	uint64_t st_last_out; /* ms of the last byte handed to MHD */
	uint64_t st_started;
};
TAILQ_HEAD(streamq, stream);

/* An HTTP request in progress (MHD's con_cls). */
struct request {
	TAILQ_ENTRY(request) rq_link; /* a context's waiters */
	struct MHD_Connection *rq_conn;
	struct buf rq_body;
	bool rq_too_big;
	bool rq_suspended;
	struct stream *rq_stream;
	struct context *rq_ctx;  /* waiting on this context */
	uint64_t rq_req;         /* waiting for the reply with this id; 0 = ready */
	int rq_op;               /* OP_*: what the reply completes */
	uint64_t rq_deadline;    /* answer 504 if the proxy is silent until then */
	struct MHD_Response *rq_resp; /* prepared while suspended */
	unsigned rq_status;
};
TAILQ_HEAD(requestq, request);

struct context {
	TAILQ_ENTRY(context) c_link;
	char c_id[37];
	char *c_lang, *c_kernel, *c_cwd; /* language, kernelspec name, cwd */
	bool c_default;
	pid_t c_pid;          /* proxy */
	bool c_child;         /* spawned by this broker: reaped via SIGCHLD */
	uint64_t c_kpid;
	enum kstate c_state;
	bool c_ready;         /* kernel has been ready once: creation answered */
	bool c_deleting;
	volatile int c_pipe_lost; /* set on nng's thread when the pipe closes */
	uint64_t c_respawn_window;
	int c_respawns;
	char *c_error;        /* why the kernel is dead, if it is */
	uint64_t c_created;
	uint64_t c_queue, c_count;
	nng_socket c_sock;
	int c_rfd, c_sfd;
	int c_pidfd;          /* adopted proxies: readable when it exits; else -1 */
	bool c_sfd_watched;
	struct evsrc c_ev_recv, c_ev_send, c_ev_pidfd;
	struct {
		nng_msg **q;
		size_t n, cap;
	} c_outq;
	struct streamq c_streams;
	int c_nstreams;
	struct requestq c_waiters;
};
TAILQ_HEAD(contextq, context);

struct server {
	struct MHD_Daemon *sv_mhd;
	int sv_epfd, sv_sigfd, sv_wakefd;
	struct evsrc sv_ev_mhd, sv_ev_sig, sv_ev_wake, sv_ev_ctl;
	const char *sv_listen, *sv_run_dir, *sv_cwd, *sv_proxy_bin;
	char *sv_env_file;
	const char *sv_log_level;
	size_t sv_max_body;
	int sv_max_queue;
	int sv_max_contexts;
	unsigned sv_conn_timeout;
	bool sv_no_default;
	bool sv_keep_contexts;  /* proxies outlive a stop (restart path) */
	const char *sv_kernel_memory, *sv_kernel_cpu, *sv_kernel_cgroup;
	unsigned sv_grace;      /* seconds running executions get on SIGTERM */
	bool sv_draining;
	uint64_t sv_drain_until;
	uint64_t sv_watchdog_ms; /* systemd watchdog interval / 2; 0 = none */
	uint64_t sv_watchdog_at;
	struct contextq sv_contexts;
	struct streamq sv_streams;
	uint64_t sv_next_stream, sv_next_req;
	bool sv_mhd_kick, sv_quit;
	uint64_t sv_started;
	nng_socket sv_ctl;
	int sv_ctl_fd;
	json_t *sv_genv; /* global env vars */
};
extern struct server sv;

/* main.c */
void server_watch(int fd, uint32_t events, struct evsrc *ev);
void server_unwatch(int fd);
void server_notify(const char *state);

/* http.c */
int http_start(void);
void http_stop(void);
struct MHD_Response *http_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
struct MHD_Response *http_json(json_t *j);
void http_complete(struct request *rq, unsigned status, struct MHD_Response *resp);
int http_validate_execute(json_t *body, struct msg *m, const char **ctx_id,
			  char *lang, size_t langsz, char *err, size_t errsz);

/* stream.c */
struct stream *stream_open(struct context *c, struct MHD_Connection *conn);
struct MHD_Response *stream_response(struct stream *s);
void stream_output(struct stream *s, const char *data, size_t len, bool final);
void stream_fail(struct stream *s, const char *name, const char *value);
void stream_hangup(struct stream *s);
void stream_closed(struct stream *s);
void stream_tick(uint64_t now);
void stream_fail_all(const char *name, const char *value);
struct stream *stream_find(struct context *c, uint64_t id);

/* context.c */
struct context *context_find(const char *id);
struct context *context_default(const char *lang);
int context_create(const char *lang, const char *cwd, bool is_default, struct context **out,
		   char *err, size_t errsz);
void context_send(struct context *c, struct msg *m);
void context_request(struct context *c, struct request *rq, enum msg_type t, int op);
void context_recv(struct context *c);
void context_flush(struct context *c);
void context_reaped(pid_t pid, int status);
void context_pipe_events(void);
void context_wait_ready(struct context *c, struct request *rq);
void context_forget_waiter(struct request *rq);
void context_shutdown_all(void);
void context_tick(uint64_t now);
void context_adopt_all(void);
void context_pidfd(struct context *c);
void context_detach_all(void);
json_t *context_json(struct context *c, bool live);
const char *kstate_name(enum kstate s);

/* control.c */
int control_start(void);
void control_recv(void);
void control_stop(void);

#endif
