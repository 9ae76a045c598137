/*
 * broker.h — sandcell-broker: terminates HTTP (libmicrohttpd, driven from our
 * own epoll loop), owns the table of contexts, spawns and supervises one
 * sandcell-proxy per context, and streams proxy output to clients as NDJSON.
 * It never talks to a kernel.
 */
#ifndef SANDCELL_BROKER_H
#define SANDCELL_BROKER_H

#include <sys/epoll.h>
#include <sys/queue.h>
#include <sys/types.h>

#include <jansson.h>
#include <microhttpd.h>

#include "../proto/proto.h"

#define KEEPALIVE_MS 1000
/*
 * An /execute waits this long for its first output before its response head
 * goes out: an execution that ends meanwhile (the proxy holds a unit's first
 * 20 ms of output) is answered with one response in one write.
 */
#define PARK_MS 20
#define STREAM_MEM_MAX (256u << 10) /* per stream in memory; past it, to disk */
/*
 * The buffer MHD allocates (and clears) with each streamed response. Chunked
 * (HTTP/1.1) responses are written through the connection's own memory
 * instead, so only HTTP/1.0 clients use it, in blocks of this size; a larger
 * one cost every waiting connection 8 KiB for nothing.
 */
#define RESPONSE_BLOCK 1024
/* MHD's memory per connection: request head (so the header limit, ~half of
 * it) and the write buffer. Most of it is touched, so it is what each waiting
 * client costs. */
#define HTTP_CONN_MEMORY (12u << 10)
#define TICK_MS 250
#define MHD_PASSES 4 /* MHD_run again at most this often per wake when it has more to do */
#define POOL_BACKOFF_MS 10000 /* no pool refill after a warm kernel failed to start */
#define POOL_YIELD_MS 5000    /* ... nor while a context a client asked for starts (pool_yield) */
#define POOL_CLAIM_GRACE_MS 200 /* ... nor this soon after a claim: the rest of a burst first */
#define MAX_LANG 64

/* What an epoll event belongs to. */
enum ev_kind {
	EV_MHD,
	EV_SIGNAL,
	EV_WAKE,
	EV_CTX_RECV,
	EV_CTX_PIDFD,
	EV_HANGUP,
	EV_CTL,
	EV_LISTEN,
	EV_PENDING
};

struct evsrc {
	enum ev_kind ev_kind;
	void *ev_obj;
};

struct context;
struct request;
struct pending; /* a connection not yet handed to MHD: accept.c */
TAILQ_HEAD(pendq, pending);

/* An HTTP connection, for the connection limit and the header timeout. */
struct conn {
	TAILQ_ENTRY(conn) cn_link;
	int cn_fd;
	bool cn_in_request; /* its request head has arrived; MHD's timeout rules */
	uint64_t cn_since;  /* connected, or its last response ended */
	const char *cn_bad_at; /* the string of this request that had %2F or %00 */
};
TAILQ_HEAD(connq, conn);

/* What a waiting request's reply completes. */
enum { OP_NONE, OP_RESTART, OP_DELETE, OP_INTERRUPT, OP_CREATE };

/*
 * One execution's output: NDJSON from the proxy, relayed as it arrives to an
 * HTTP client (/execute) or to a sandcellctl client (run).
 */
struct stream {
	TAILQ_ENTRY(stream) st_link;     /* server's list */
	TAILQ_ENTRY(stream) st_ctx_link; /* its context's list */
	uint64_t st_id;
	struct context *st_ctx;
	struct MHD_Connection *st_conn;
	struct buf st_buf;
	struct evsrc st_ev;
	int st_fd;            /* the client's socket, watched while suspended past its park */
	bool st_final;        /* the proxy ended the stream */
	bool st_suspended;
	bool st_watched;      /* st_fd is in the loop's epoll set (watch_hangup) */
	bool st_gone;         /* the client went away */
	bool st_halfclosed;   /* the client shut its write side: maybe still reading */
	bool st_cancel_sent;
	bool st_recorded;     /* counted in the metrics and logged */
	uint64_t st_last_out; /* ms of the last byte handed to MHD */
	uint64_t st_started;
	uint64_t st_bytes;    /* NDJSON bytes from the proxy */
	char st_code_head[81]; /* first line of the code, for operators */
	bool st_ctl;          /* a sandcellctl run: output goes to st_pipe */
	nng_pipe st_pipe;
	uint64_t st_req;      /* the ctl request it answers */
	bool st_errored;      /* ctl run: an error line went by */
	int st_spill_fd;      /* a slow client's backlog, in an unlinked file; or -1 */
	uint64_t st_spill_w, st_spill_r;
	bool st_overflow;     /* over --stream-cap or spill failed: output no longer taken */
	bool st_midline;      /* what is queued ends inside a line */
	char *st_end;         /* error and end lines, queued once the line is complete */
	struct buf st_tail;   /* bytes queued after the spill file's (when it is open) */
	struct request *st_rq; /* parked before its response: see stream_park() */
	uint64_t st_park_until;
	TAILQ_ENTRY(stream) st_park_link; /* tb_parked, while st_rq is set */
};
TAILQ_HEAD(streamq, stream);

/*
 * A request of either transport: an HTTP one (MHD's con_cls) or a
 * sandcellctl one (rq_ctl). Who frees it: see request.c.
 */
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
	unsigned rq_code;        /* the status answered, for the metrics */
	const char *rq_endpoint; /* path template, for the metrics */
	const char *rq_method;
	bool rq_ctl;             /* from sandcellctl: answered on rq_pipe */
	nng_pipe rq_pipe;
	uint64_t rq_ctl_req;
};
TAILQ_HEAD(requestq, request);

/*
 * The connection to one proxy process and what it reports. Its events point at
 * the context it serves (pl_ev_*.ev_obj), which a restart from the warm pool
 * changes without touching epoll: the evsrc addresses stay put.
 */
struct proxy_link {
	char pl_slot[37];    /* the proxy's name: ctx/<slot>/proxy.sock */
	struct chan pl_chan; /* its ch_fd is watched (pl_ev_recv) */
	int pl_pidfd;        /* adopted proxies: readable when it exits; else -1 */
	struct evsrc pl_ev_recv, pl_ev_pidfd;
	pid_t pl_pid;
	bool pl_child;       /* spawned by this broker: reaped via SIGCHLD */
	uint64_t pl_kpid;
	enum kstate pl_state;
};

struct context {
	TAILQ_ENTRY(context) c_link;
	char c_id[37];
	char *c_lang, *c_kernel, *c_cwd; /* language, kernelspec name, cwd */
	bool c_default;
	struct proxy_link *c_pl; /* its proxy; a restart from the pool swaps it */
	bool c_pooled;        /* a warm proxy with no context yet: not listed */
	bool c_ready;         /* kernel has been ready once: creation answered */
	bool c_deleting;
	uint64_t c_respawn_window;
	int c_respawns;
	char *c_error;        /* why the kernel is dead, if it is */
	uint64_t c_created;
	uint64_t c_count;
	struct streamq c_streams;
	int c_nstreams;
	struct requestq c_waiters;
	unsigned c_uid;       /* --isolation context: its kernels' uid; 0 = shared */
	int c_uid_lease;      /* the descriptor holding c_uid's lease (uidlease.c), or -1 */
	unsigned c_net_uid;   /* ... and its network's (boxnet.c); 0 = shared */
	int c_net_lease;
	char *c_workspace;    /* its own workspace on the host (--isolation context), or NULL */
};
TAILQ_HEAD(contextq, context);

/* A sandcellctl client (control.c). */
struct ctl_peer;
TAILQ_HEAD(ctlpeerq, ctl_peer);

/* --pool LANG=N: N warm proxies of that language's kernelspec. */
struct pool_spec {
	char ps_want[MAX_LANG + 1];
	int ps_size;
	uint64_t ps_retry_at; /* back off after a pooled proxy failed */
};

/* Settings: from flags and the environment at start-up, read-only after. */
struct server_config {
	const char *cf_listen, *cf_run_dir, *cf_cwd, *cf_proxy_bin;
	char *cf_env_file;
	const char *cf_log_level;
	size_t cf_max_body;
	int cf_max_queue;
	int cf_max_contexts;
	char cf_max_starting[24]; /* kernels starting at once, for the proxies; "0": any */
	unsigned cf_conn_timeout;
	bool cf_no_default;
	bool cf_keep_contexts;  /* proxies outlive a stop (restart path) */
	const char *cf_kernel_memory, *cf_kernel_cpu, *cf_kernel_cgroup;
	const char *cf_python_startup;
	const char *cf_kernel_user;
	uid_t cf_kernel_uid;    /* --kernel-user's uid (0: none) */
	bool cf_peer_check;     /* connections from contexts are refused (box.c) */
	bool cf_sandbox;        /* kernels in boxes (off: --no-sandbox) */
	bool cf_template;       /* Python kernels forked from a template (off: --no-template) */
	bool cf_isolated;       /* --isolation context */
	const char *cf_uid_range, *cf_kernel_network, *cf_kernel_pids, *cf_kernel_tmp;
	uint64_t cf_workspace_size; /* a workspace's size bound (wsdisk.c); 0: none */
	bool cf_workspace_size_set; /* given (--workspace-size), not the default */
	struct pool_spec cf_pool[8]; /* --pool (each one's ps_retry_at is pool.c's) */
	size_t cf_npool;
	unsigned char cf_token_hash[32]; /* BLAKE2b of the access token */
	bool cf_token;
	const char *cf_token_file; /* --access-token-file: hidden in every box */
	unsigned cf_max_conns;
	unsigned cf_header_timeout; /* s a connection gets to send a request head */
	uint64_t cf_stream_cap;     /* bytes a stream may hold for a slow client */
	const char *cf_spill_dir;
	unsigned cf_grace;      /* seconds running executions get on SIGTERM */
	char cf_interrupt_retry[24], cf_interrupt_grace[24]; /* ms, for the proxies; "" = default */
	char cf_heartbeat_timeout[24]; /* ms, for the proxies; "" = default */
	uint64_t cf_watchdog_ms; /* systemd watchdog interval / 2; 0 = none */
	json_t *cf_genv;        /* global env vars */
};

/* What the event loop watches: its fds and their event sources. */
struct server_handles {
	struct MHD_Daemon *io_mhd;
	int io_epfd, io_sigfd, io_wakefd;
	struct evsrc io_ev_mhd, io_ev_sig, io_ev_wake, io_ev_ctl;
	nng_socket io_ctl;
	int io_ctl_fd;
	int io_listen_fd;           /* ours: MHD gets connections from accept.c */
	struct evsrc io_ev_listen;
	uint64_t io_mhd_log_at;     /* rate limit of MHD's messages at warn level */
	unsigned io_mhd_log_n;
	struct epoll_event *io_batch; /* what epoll_wait returned, handled in turn */
	int io_batch_n;
};

/* What the broker holds; the loop's thread alone touches them. */
struct server_tables {
	struct contextq tb_contexts;
	struct streamq tb_streams;
	struct streamq tb_parked; /* by st_park_until: PARK_MS after each request */
	struct connq tb_conns;
	unsigned tb_nconns;
	struct pendq tb_pending;    /* accepted, request line not yet seen */
	unsigned tb_npending;
	unsigned tb_npending_ctx; /* of them, from code in a context (accept.c) */
	uint64_t tb_next_stream, tb_next_req;
	struct kspec **tb_kspecs; /* kernelspecs as last read (kcache_find) */
	size_t tb_nkspecs;
	uint64_t tb_kspecs_at;
	struct {
		struct {
			nng_pipe pipe;
			uint64_t req;
		} w[32];
		size_t n;
	} tb_watchers; /* sandcellctl watch clients */
	struct ctlpeerq tb_ctl_peers; /* ctl clients with replies unacked or waiting */
};

/* The warm pool's state (its sizes are cf_pool). */
struct server_pool {
	uint64_t po_backoff; /* no refill before this (a warm kernel failed) */
	uint64_t po_claimed; /* when a warm kernel was last handed out (ms) */
	bool po_kick;        /* refill the pool once this round's responses are out */
};

/* Where the broker is in its life. */
struct server_lifecycle {
	bool lc_draining;       /* new executions get 503 */
	bool lc_stopping;       /* SIGTERM: stop once drained */
	uint64_t lc_drain_until;
	uint64_t lc_watchdog_at;
	bool lc_mhd_kick, lc_quit;
	uint64_t lc_started;
};

/* Written on nng's threads, read on the loop's: under control.c's lock. */
struct server_mailbox {
	struct {
		uint32_t *ids;
		size_t n, cap;
	} mb_ctl_gone; /* ctl pipes closed */
};

/* The Python template (template.c). */
struct server_template {
	char *tp_kernel;  /* the kernelspec it serves; NULL: no template */
	char *tp_sock;    /* <run dir>/template-<kernel>.sock */
	char *tp_argv[5]; /* python, the script, libsandcell-box.so, the socket */
	char **tp_env;
	pid_t tp_pid;
	uint64_t tp_started_at, tp_respawn_at, tp_backoff;
	bool tp_defaults;  /* the default contexts of start-up are being made */
};

struct server {
	struct server_config sv_cf;
	struct server_handles sv_io;
	struct server_tables sv_tb;
	struct server_pool sv_po;
	struct server_lifecycle sv_lc;
	struct server_mailbox sv_mb;
	struct server_template sv_tp;
};
extern struct server sv;

/* server.c */
void server_watch(int fd, uint32_t events, struct evsrc *ev);
void server_unwatch(int fd);
void server_forget(struct evsrc *ev);
void server_notify(const char *state);

/* options.c */
void options_parse(int argc, char **argv);

/* config.c */
void config_settle(void);
uint64_t config_default_memory(uint64_t *of);
void config_token_set(const char *token);
int config_token_file(const char *path);
int config_pool_parse(const char *arg);
int config_env_put(const char *kv, const char *origin);
int config_env_file(const char *path);
void config_run_dir(void);
const char *config_default_cwd(void);
const char *config_python_startup(void);
const char *config_proxy_bin(void);

/* accept.c */
int accept_classify(const char *b, size_t n);
int accept_listen(const char *where);
void accept_ready(void);
void accept_sniff(struct pending *pd, uint32_t events);
uint64_t accept_since(int fd);
void accept_tick(uint64_t now);
void accept_stop(void);

/* cwd.c */
int cwd_check(const char *dir, uid_t uid, char *err, size_t errsz);
int cwd_usable(const struct context *c, const char *cwd, char *err, size_t errsz);

/* frame.c */
struct frame {
	const char *fr_why; /* the first thing wrong with its framing, or NULL */
	bool fr_cl, fr_te;  /* a Content-Length, a Transfer-Encoding seen */
	uint64_t fr_len;    /* the Content-Length */
};
bool frame_tchar(unsigned char ch);
void frame_field(struct frame *fr, const char *name, size_t namelen, const char *value,
                 size_t valuelen);
int frame_head(const char *b, size_t n, const char **why);

/* metrics.c */
enum metric {
	M_DISCONNECT,
	M_CANCEL,
	M_KERNEL_RESTART,
	M_PROXY_RESTART,
	M_BYTES,
	M_OUTPUT_DROPPED,
};
void metrics_http(const char *endpoint, const char *method, unsigned status);
void metrics_execution(struct stream *s, const char *outcome, uint64_t wait_ms,
		       uint64_t run_ms);
void metrics_count(enum metric m, uint64_t n);
char *metrics_render(size_t *len);

/* openapi.c */
void openapi_init(void);
const char *openapi_json(size_t *len);

/* request.c */
int request_opt_string(json_t *body, const char *key, const char **out, char *err,
		       size_t errsz);
int request_validate_execute(json_t *body, struct msg *m, const char **ctx_id, char *lang,
			     size_t langsz, char *err, size_t errsz);
void request_execute(struct request *rq, json_t *body);
void request_create(struct request *rq, const char *language, const char *cwd);
void request_context(struct request *rq, const char *id, int op);
void request_drain(struct request *rq, bool drain);
void request_done(struct request *rq, unsigned status, json_t *json, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void request_free(struct request *rq);

/* http.c */
int http_start(void);
void http_stop(void);
void http_tick(uint64_t now);
struct MHD_Response *http_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
struct MHD_Response *http_json(json_t *j);
size_t http_unescape(char *s, bool *bad);
const char *http_quote(const char *s, char *out, size_t outsz);
void http_complete(struct request *rq, unsigned status, struct MHD_Response *resp);
void http_suspend(struct request *rq);

/* stream.c */
struct stream *stream_open(struct context *c, struct MHD_Connection *conn, const char *code);
struct stream *stream_open_ctl(struct context *c, nng_pipe pipe, uint64_t req,
			       const char *code);
void stream_park(struct stream *s, struct request *rq);
void stream_park_due(uint64_t now);
long stream_park_wait(uint64_t now); /* ms until the next is due, or -1 */
void stream_output(struct stream *s, const char *data, size_t len, struct msg *final);
void stream_fail(struct stream *s, const char *name, const char *value, const char *outcome);
void stream_cancel(struct stream *s, const char *why);
void stream_detach(struct stream *s);
struct stream *stream_by_id(uint64_t id);
void stream_hangup(struct stream *s, uint32_t events);
void stream_closed(struct stream *s);
void stream_tick(uint64_t now);
void stream_fail_all(const char *name, const char *value, const char *outcome);
struct stream *stream_find(struct context *c, uint64_t id);

/* context.c */
const char *kstate_name(enum kstate s);
bool context_proxyless(const struct context *c);
const char *context_state(struct context *c);
struct context *context_find(const char *id);
bool context_listed(struct context *c);
struct context *context_default(const char *lang);
json_t *context_json(struct context *c, bool live);
struct context *context_new(const char *id, const char *lang, const char *kernel,
			    const char *cwd, bool is_default);
int context_create(const char *lang, const char *cwd, bool is_default, struct context **out,
		   char *err, size_t errsz);
void context_delete(struct context *c);
void context_free(struct context *c);
void context_detach_all(void);

/* link.c */
int link_open(struct context *c, const char *slot);
void link_close(struct proxy_link *pl);
void link_send(struct context *c, struct msg *m);
void link_recv(struct context *c);

/* supervise.c */
int supervise_spawn(struct context *c);
void supervise_reaped(pid_t pid, int status);
void supervise_pidfd(struct context *c);
void supervise_shutdown_all(void);
void supervise_adopt_all(void);

/* template.c */
void template_start(void);
const char *template_socket(const char *kernel);
bool template_starting(const char *kernel);
uint64_t template_wait_ms(const char *kernel);
bool template_reaped(pid_t pid, int status);
void template_tick(uint64_t now);
void template_stop(void);

/* pool.c */
struct context *pool_use(const char *kernel, const char *cwd, bool is_default);
bool pool_restart(struct context *c);
void pool_fill(void);

/* waiter.c */
void waiter_wait_ready(struct context *c, struct request *rq);
void waiter_request(struct context *c, struct request *rq, enum msg_type t, int op);
void waiter_answer_ready(struct context *c);
void waiter_reply(struct context *c, struct msg *m);
void waiter_forget(struct request *rq);
void waiter_tick(uint64_t now);

/* kcache.c */
const struct kspec *kcache_find(const char *want);

/* control.c */
int control_start(void);
void control_recv(void);
void control_stop(void);
void control_pipe_gone(uint32_t id);
void control_pipe_events(void);
void control_reply(struct request *rq, unsigned status, json_t *json, const char *text);
void control_stream_output(struct stream *s, const char *data, size_t len, bool final);
void control_event(json_t *ev);

/* box.c */
int box_check(char *err, size_t errsz);
void box_peer_check(void);
bool box_peer_is_context(int fd);
unsigned box_uid(void);
void box_release(void);
uid_t box_kernel_uid(const struct context *c);
const char *box_workspace_of(const struct context *c);
const char *box_default_cwd(void);
bool box_isolates(void);
const char *box_workspace(void);
void box_bound_workspace(void);
int box_isolate(struct context *c, char *err, size_t errsz);
void box_args(struct context *c, const char **argv, int *n);
json_t *box_json(const char *slot);

/* uidlease.c */
int uid_lease(unsigned uid, const char *role);
unsigned uid_lease_ours(unsigned a, unsigned b, const char *role, int *fd);
void uid_release(unsigned uid, int fd);

/* cpus.c: CPUs the affinity mask gives, or fewer by a cgroup's CPU quota
 * (*quota: that quota in CPUs, 0 if none); cpus_quota on given texts, for tests */
int cpus_usable(int *quota);
int cpus_quota(const char *proc_cgroup, const char *root);

/* peer.c */
enum { PEER_REMOTE, PEER_UID, PEER_UNKNOWN };
int peer_uid(int fd, uid_t *uid);

#endif
