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

#include "../proto/proto.h"

#define KEEPALIVE_MS 1000
/* a transfer waiting this long on a silent envd agent ends (504; docs/ENVD.md) */
#define ENVD_STALL_MS 10000
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
#define CT_JSON "application/json"
#define MHD_PASSES 4 /* MHD_run again at most this often per wake when it has more to do */
#define POOL_BACKOFF_MS 10000 /* no pool refill after a warm kernel failed to start */
#define POOL_YIELD_MS 5000    /* ... nor while a context a client asked for starts (pool_yield) */
#define POOL_CLAIM_GRACE_MS 200 /* ... nor this soon after a claim: the rest of a burst first */
#define MAX_LANG 64
#define MAX_POOL 8 /* --pool entries */

/*
 * A watched fd's event source (server_watch): the loop calls ev_fn with
 * ev_arg and the epoll events, so it names no module; the module that
 * watches the fd sets both.
 */
struct evsrc {
	void (*ev_fn)(void *arg, uint32_t events);
	void *ev_arg;
};

struct context;
struct context_counts;
struct request;
struct stream;
struct hstream; /* the HTTP side of a stream: respond.c */
struct pending; /* a connection not yet handed to MHD: accept.c */
struct http_request; /* an HTTP request: http.h */
TAILQ_HEAD(pendq, pending);

/* What a waiting request's reply completes. */
enum { OP_NONE, OP_RESTART, OP_DELETE, OP_INTERRUPT, OP_CREATE, OP_ENVD };

/*
 * A stream's client side, filled in by its transport (respond.c for HTTP,
 * control.c for sandcellctl): stream.c calls these and nothing else of either.
 */
struct stream_ops {
	/* output as it comes (final: the last; the stream is freed after it);
	 * NULL: output is queued in the stream and pulled (stream_take) */
	void (*so_chunk)(struct stream *s, const char *data, size_t len, bool final);
	/* queued output, the end, or a keepalive waits for the client */
	void (*so_wake)(struct stream *s);
	const char *so_client; /* what listings call a connected client */
	bool so_keepalive;     /* quiet streams get keepalive lines */
};

/*
 * A stream that is not an execution's NDJSON (envd's Connect streams,
 * connect.c): its content type and keepalive bytes, its end for an error,
 * and what turns a proxy's OUTPUT into its bytes (relay.c calls it). Its
 * streams count in no execution metric and emit no execution event.
 */
struct stream_kind {
	const char *sk_ctype;
	const char *sk_keepalive;
	size_t sk_keepalive_len;
	/* the bytes that end it with an error (name: value); caller frees */
	char *(*sk_end)(const char *name, const char *value, size_t *len);
	void (*sk_in)(struct stream *s, struct msg *m);
};

/*
 * One execution's output: NDJSON from the proxy, relayed as it arrives to the
 * client of either transport (st_ops, with its own state in st_client).
 */
struct stream {
	TAILQ_ENTRY(stream) st_link;     /* server's list */
	TAILQ_ENTRY(stream) st_ctx_link; /* its context's list */
	uint64_t st_id;
	struct context *st_ctx;
	const struct stream_ops *st_ops; /* NULL until its request hands it over */
	void *st_client;      /* the transport's (respond.c's hstream, control.c's run) */
	struct buf st_buf;
	bool st_final;        /* the proxy ended the stream */
	bool st_gone;         /* the client went away */
	bool st_cancel_sent;
	bool st_recorded;     /* counted in the metrics and logged */
	uint64_t st_last_out; /* ms of the last byte handed to the client */
	uint64_t st_started;
	uint64_t st_bytes;    /* NDJSON bytes from the proxy */
	char st_code_head[81]; /* first line of the code, for operators */
	int st_spill_fd;      /* a slow client's backlog, in an unlinked file; or -1 */
	uint64_t st_spill_w, st_spill_r;
	bool st_overflow;     /* over --stream-cap or spill failed: output no longer taken */
	bool st_midline;      /* what is queued ends inside a line */
	char *st_end;         /* error and end lines, queued once the line is complete */
	size_t st_end_len;
	struct buf st_tail;   /* bytes queued after the spill file's (when it is open) */
	const struct stream_kind *st_kind; /* NULL: an execution's NDJSON */
	bool st_heard;                     /* an envd stream: its first event came */
};
TAILQ_HEAD(streamq, stream);

/*
 * A request's transport, filled in by http.c and control.c: how the request
 * layer answers it, knowing neither.
 */
struct request_ops {
	/* the one answer: json (taken) or text; a ctl request is freed by it */
	void (*ro_complete)(struct request *rq, unsigned status, json_t *json, const char *text);
	/* the answer comes later: the request waits on its context */
	void (*ro_suspend)(struct request *rq);
	/* the stream s answers it from now on (a ctl request is freed) */
	void (*ro_stream)(struct request *rq, struct stream *s);
};

/*
 * A request of either transport, embedded first in the transport's own
 * (http.c's struct http_request, control.c's). Who frees it: see answer.c.
 */
struct request {
	TAILQ_ENTRY(request) rq_link; /* a context's waiters */
	const struct request_ops *rq_ops;
	struct context *rq_ctx;  /* waiting on this context */
	uint64_t rq_req;         /* waiting for the reply with this id; 0 = ready */
	int rq_op;               /* OP_*: what the reply completes */
	uint64_t rq_deadline;    /* answer 504 if the proxy is silent until then */
	/* OP_ENVD: the proxy's reply goes here (envd.c), not to answer_done */
	void (*rq_reply)(struct request *rq, struct msg *m);
};
TAILQ_HEAD(requestq, request);

/* A context's proxy link: linkdef.h, private to the modules that keep it. */
struct proxy_link;

/* A context's own egress rules (egress.c): canonical comma lists of CIDRs, or NULL. */
struct egress_lists {
	char *el_allow, *el_deny; /* allow_out, deny_out */
};

/*
 * A context's isolation under --isolation context: its own uids, their
 * leases and its workspace (all 0, -1, NULL when it shares the kernels').
 * boxuid.c leases the uids, workspace.c makes the workspace, context.c
 * releases them with the context; the rest read it (context_iso).
 */
struct ctxiso {
	unsigned ci_uid;      /* its kernels' uid; 0 = shared */
	int ci_uid_lease;     /* the descriptor holding ci_uid's lease (uidlease.c), or -1 */
	unsigned ci_net_uid;  /* ... and its network's (boxnet.c); 0 = shared */
	int ci_net_lease;
	char *ci_workspace;   /* its own workspace on the host, or NULL */
};

/* struct context: contextdef.h, private to the modules that own its parts. */

/* --pool LANG=N: N warm proxies of that language's kernelspec. */
struct pool_spec {
	char ps_want[MAX_LANG + 1];
	int ps_size;
};

/*
 * Settings: from flags and the environment (options.c), completed at start
 * (config.c); config.c's alone, everyone else reads them through cf.
 */
struct server_config {
	const char *cf_listen, *cf_run_dir, *cf_cwd, *cf_proxy_bin;
	const char *cf_envd_listen; /* envd's API (envd.c); NULL: off */
	const char *cf_envd_bin;    /* its agent, beside the proxy (sandcell-envd) */
	char *cf_env_file;
	const char *cf_log_level;
	size_t cf_max_body;
	uint64_t cf_max_file_size; /* envd's uploads, a file's bytes (413 above) */
	int cf_max_queue;
	int cf_max_contexts;
	char cf_max_starting[24]; /* kernels starting at once, for the proxies; "0": any */
	unsigned cf_conn_timeout;
	bool cf_no_default;
	bool cf_keep_contexts;  /* proxies outlive a stop: the start value (lifecycle.c keeps it) */
	const char *cf_kernel_memory, *cf_kernel_cpu, *cf_kernel_cgroup;
	const char *cf_python_startup;
	const char *cf_kernel_user;
	uid_t cf_kernel_uid;    /* --kernel-user's uid (0: none) */
	bool cf_sandbox;        /* kernels in boxes (off: --no-sandbox) */
	bool cf_template;       /* Python kernels forked from a template (off: --no-template) */
	bool cf_isolated;       /* --isolation context */
	const char *cf_uid_range, *cf_kernel_network, *cf_kernel_pids, *cf_kernel_tmp;
	uint64_t cf_workspace_size; /* a workspace's size bound (wsdisk.c); 0: none */
	bool cf_workspace_size_set; /* given (--workspace-size), not the default */
	uint64_t cf_total_memory, cf_total_pids, cf_total_workspace; /* all contexts' (bounds.c) */
	bool cf_total_memory_set, cf_total_pids_set, cf_total_workspace_set;
	struct pool_spec cf_pool[MAX_POOL]; /* --pool */
	size_t cf_npool;
	unsigned char cf_token_hash[32]; /* BLAKE2b of the access token */
	bool cf_token;
	const char *cf_token_file; /* --access-token-file: hidden in every box */
	unsigned cf_max_conns;
	unsigned cf_header_timeout; /* s a connection gets to send a request head */
	unsigned cf_body_timeout;   /* s a request's body gets, from its head's end */
	uint64_t cf_stream_cap;     /* bytes a stream may hold for a slow client */
	const char *cf_spill_dir;
	unsigned cf_grace;      /* seconds running executions get on SIGTERM */
	char cf_interrupt_retry[24], cf_interrupt_grace[24]; /* ms, for the proxies; "" = default */
	char cf_heartbeat_timeout[24]; /* ms, for the proxies; "" = default */
	json_t *cf_genv;        /* global env vars */
	char *cf_env_pass;      /* --env-pass: names, comma-separated (lib/kenv.c); NULL: none */
};

/* config.c's settings; no other file writes them (config.h) */
extern const struct server_config *const cf;

/* server.c: the loop's epoll */
void server_open(void);
void server_watch(int fd, uint32_t events, struct evsrc *ev);
void server_unwatch(int fd);
void server_forget(struct evsrc *ev);
void server_notify(const char *state);
void server_kick(void);
void server_kicked(void);
void server_wait(long wait);

/* lifecycle.c: where the broker is in its life */
void lifecycle_start(void);
double lifecycle_uptime(void);
bool lifecycle_draining(void);
int lifecycle_drain(bool on);
void lifecycle_stop(uint64_t grace_ms);
bool lifecycle_stopping(void);
bool lifecycle_grace_over(uint64_t now);
void lifecycle_quit(void);
bool lifecycle_quitting(void);
void lifecycle_defaults(bool making);
bool lifecycle_making_defaults(void);
void lifecycle_keep_contexts(bool keep);
bool lifecycle_keeps_contexts(void);

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

/* events.c */
void events_subscribe(void (*fn)(json_t *ev, void *arg), bool (*wants)(void *arg),
                      void *arg);
void events_emitf(const char *fmt, ...);

/* answer.c */
void answer_done(struct request *rq, unsigned status, json_t *json, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void answer_wait(struct request *rq);
void answer_drop(struct request *rq);

/* accept.c */
int accept_listen(const char *where);
const char *accept_address(void);
int accept_listen_envd(const char *where);
bool accept_is_envd(int fd);
int accept_answer(int fd, const char *status, const char *text);
uint64_t accept_since(int fd);
void accept_tick(uint64_t now);
unsigned accept_conns(void);
void accept_conn_started(void);
void accept_conn_ended(void);
void accept_stop(void);

/* caller.c */
int caller_origin_option(const char *val, const char *origin);
int caller_host_option(const char *val, const char *origin);
bool caller_host_allowed(const char *host);

/* cwd.c */
int cwd_check(const char *dir, uid_t uid, char *err, size_t errsz);
int cwd_usable(uid_t uid, const char *workspace, const char *cwd, char *err, size_t errsz);

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
int frame_request_line(const char *b, size_t n);
size_t frame_unescape(char *s, bool *bad);
size_t frame_unescape_path(char *s, bool *bad);
const char *frame_quote(const char *s, char *out, size_t outsz);

/* metrics.c */
enum metric {
	M_DISCONNECT,
	M_CANCEL,
	M_KERNEL_RESTART,
	M_PROXY_RESTART,
	M_BYTES,
	M_OUTPUT_DROPPED,
	M_EGRESS_REFUSED,
};
void metrics_http(const char *endpoint, const char *method, unsigned status);
void metrics_execution(const struct stream *s, const char *ctx_id, const char *outcome,
		       uint64_t wait_ms, uint64_t run_ms);
void metrics_count(enum metric m, uint64_t n);
char *metrics_render(const struct context_counts *cc, size_t streams, size_t box_missing,
		     size_t *len);

/* openapi.c */
void openapi_init(void);
const char *openapi_json(size_t *len);

/* validate.c */
int validate_opt_string(json_t *body, const char *key, const char **out, char *err,
			size_t errsz);
int validate_language(const char *in, char *lang, size_t langsz, char *err, size_t errsz);
int validate_execute(json_t *body, struct msg *m, const char **ctx_id, char *lang,
		     size_t langsz, char *err, size_t errsz);

/* request.c */
void request_execute(struct request *rq, json_t *body);
void request_create(struct request *rq, const char *language, const char *cwd,
		    struct egress_lists *net);
void request_context(struct request *rq, const char *id, int op);
void request_drain(struct request *rq, bool drain);

/* http.c (its transport's types and calls: http.h) */
int http_start(void);
void http_stop(void);
void http_tick(uint64_t now);
long http_wait(long wait);
void http_run(int passes);

/* respond.c */
void respond_closed(struct stream *s);
void respond_park_due(uint64_t now);
long respond_park_wait(uint64_t now); /* ms until the next is due, or -1 */

/* stream.c */
struct stream *stream_open(struct context *c, const char *code);
struct stream *stream_open_as(struct context *c, const struct stream_kind *k);
void stream_output(struct stream *s, const char *data, size_t len, struct msg *final);
size_t stream_take(struct stream *s, char *out, size_t max);
char *stream_take_all(struct stream *s, size_t *len);
bool stream_whole(const struct stream *s);
void stream_probe(struct stream *s);
void stream_gone(struct stream *s);
void stream_fail(struct stream *s, const char *name, const char *value, const char *outcome);
void stream_cancel(struct stream *s, const char *why);
void stream_expire(struct stream *s, const char *name, const char *why);
void stream_detach(struct stream *s);
struct stream *stream_next(const struct stream *s);
size_t stream_count(void);
struct stream *stream_by_id(uint64_t id);
void stream_closed(struct stream *s);
void stream_tick(uint64_t now);
void stream_fail_all(const char *name, const char *value, const char *outcome);
struct stream *stream_find(struct context *c, uint64_t id);
bool stream_running(const struct stream *s);

/* context.c: the table (static there), each context's life in it, and what the
 * modules owning no part of struct context (contextdef.h) may know of one */
/* Why what a context holds ends (context_fail, context_end). */
enum context_why {
	CTX_DELETED,   /* deleted, gone with its proxy, or never started (its c_error) */
	CTX_LOST,      /* its proxy was lost: it starts again, its state lost */
	CTX_RESTARTED, /* restarted from the warm pool */
};
struct context_states {
	const char *cs_lang, *cs_state; /* context_state's */
	int cs_n;
};
/* The contexts not being deleted, counted once for every listing. */
struct context_counts {
	int cc_listed;     /* contexts clients see (context_listed) */
	int cc_running;    /* contexts running an execution */
	int cc_queued;     /* executions waiting behind those */
	int cc_pooled;     /* warm proxies (of the kernelspec asked, if one was) */
	int cc_pool_ready; /* ... whose kernels are ready */
	int cc_pool_ready_of[MAX_POOL]; /* ... of each --pool entry's (cf_pool) */
	struct context_states cc_states[64]; /* by language and state */
	size_t cc_nstates;
};
/* What a new context is (context_new): a client's, a warm proxy's, envd's. */
enum context_kind { CONTEXT_CLIENT, CONTEXT_POOLED, CONTEXT_ENVD };
struct context *context_next(const struct context *c);
#define CONTEXT_FOREACH(c) for ((c) = context_next(NULL); (c); (c) = context_next(c))
bool context_proxyless(const struct context *c);
const char *context_state(const struct context *c);
bool context_listed(const struct context *c);
void context_count(struct context_counts *cc, const char *kernel);
struct context *context_envd(void);
struct context *context_find(const char *id);
struct context *context_default(const char *lang);
json_t *context_json(struct context *c, bool live);
json_t *context_list_json(bool operator);
struct context *context_new(const char *id, const char *lang, const char *kernel,
			    const char *cwd, bool is_default, enum context_kind kind);
void context_claim(struct context *c, const char *cwd, bool is_default);
void context_swap(struct context *x, struct context *p);
void context_delete(struct context *c);
void context_fail(struct context *c, enum context_why why, const char *detail);
void context_end(struct context *c, enum context_why why, const char *detail);
void context_detach_all(void);
/* what the modules that do not own it may know of a context */
const char *context_id(const struct context *c);
const char *context_lang(const struct context *c);
bool context_is_default(const struct context *c);
bool context_ready(const struct context *c);
const char *context_error(const struct context *c);
int context_queue(const struct context *c);
pid_t context_pid(const struct context *c);
enum kstate context_kstate(const struct context *c);
struct proxy_link *context_link(const struct context *c);
void context_spec(const struct context *c, struct spec *sp);
bool context_is_envd(const struct context *c);
const struct ctxiso *context_iso(const struct context *c);
const struct egress_lists *context_egress(const struct context *c);

/*
 * link.c: the port to the proxies. The core (request, stream, waiter, pool,
 * context, supervise, relay) reaches a proxy through these calls alone; what
 * they do is the ops set at start: main.c's (chanlink.c, spawn.c), or a unit
 * test's fake proxy (tests/unit/brokercore_test.c).
 */
struct link_ops {
	int (*lo_dial)(struct context *c); /* connect to c->c_pl's proxy (pl_slot); 0 or -EIO */
	void (*lo_hangup)(struct proxy_link *pl); /* stop watching, close (not free) */
	void (*lo_send)(struct context *c, struct msg *m); /* queue m to c's proxy */
	int (*lo_spawn)(struct context *c, pid_t *pid);    /* start c's proxy; 0 or -errno */
	void (*lo_signal)(const struct proxy_link *pl, int sig);
	bool (*lo_exited)(const struct proxy_link *pl, bool wait); /* reaped / gone */
};
void link_use(const struct link_ops *ops);
int link_open(struct context *c, const char *slot);
void link_close(struct proxy_link *pl);
void link_send(struct context *c, struct msg *m);
int link_spawn(struct context *c);
void link_signal(const struct proxy_link *pl, int sig);
bool link_exited(struct proxy_link *pl, bool wait);

/* chanlink.c: the real link (a chan over IPC) */
int chanlink_dial(struct context *c);
void chanlink_hangup(struct proxy_link *pl);
void chanlink_send(struct context *c, struct msg *m);

/* spawn.c: the real proxy processes */
int spawn_proxy(struct context *c, pid_t *pid);
void spawn_signal(const struct proxy_link *pl, int sig);
bool spawn_exited(const struct proxy_link *pl, bool wait);

/* relay.c */
void relay_msg(struct context *c, struct msg *m);
void relay_recv(struct context *c);

/* supervise.c */
void supervise_reaped(pid_t pid, int status);
void supervise_shutdown_all(void);
void supervise_adopt_all(void);

/* template.c */
void uplink_start(unsigned net_uid);
pid_t uplink_pid(void);
uint64_t uplink_since(void);
bool uplink_reaped(pid_t pid, int status);
void uplink_tick(uint64_t now);
void uplink_stop(void);
void template_start(void);
const char *template_socket(const char *kernel);
bool template_starting(const char *kernel);
uint64_t template_wait_ms(const char *kernel);
bool template_reaped(pid_t pid, int status);
void template_tick(uint64_t now);
void template_stop(void);

/* egress.c */
int egress_allow(const char *list, const char *origin);
int egress_deny(const char *list, const char *origin);
int egress_context(json_t *body, struct egress_lists *el, char *err, size_t errsz);
void egress_free(struct egress_lists *el);
bool egress_own(const struct egress_lists *el);
void egress_spec(const struct egress_lists *el, struct spec *sp);
json_t *egress_json(void);
const char *egress_probe(void);
void egress_adopt(struct egress_lists *el, json_t *net);
json_t *egress_context_json(const struct egress_lists *el);

/* pool.c */
int pool_create(const char *lang, const char *cwd, bool is_default,
		struct egress_lists *net, struct context **out, char *err, size_t errsz);
struct context *pool_use(const char *kernel, const char *cwd, bool is_default);
bool pool_restart(struct context *c);
void pool_fill(void);
void pool_kick(void);
void pool_back_off(uint64_t now);
bool pool_kicked(void);

/* waiter.c */
void waiter_wait_ready(struct context *c, struct request *rq);
void waiter_request(struct context *c, struct request *rq, enum msg_type t, int op);
void waiter_answer_ready(struct context *c);
void waiter_reply(struct context *c, struct msg *m);
uint64_t waiter_next_req(void);
void waiter_send(struct context *c, struct request *rq, struct msg *m);

/* connect.c: Connect's streams and process.Process's messages (envd.c's) */
extern const struct stream_kind connect_process, connect_watch;
json_t *connect_error(bool rpc, const char *code, unsigned *status, const char *msg);
json_t *connect_watcher(const char *op, json_t *a);
int connect_watch_args(const char *body, size_t len, json_t **args, const char **code,
		       char *err, size_t errsz);

/* envdstream.c: envd's server streams begun (Start, Connect, WatchDir) */
void envdstream_tick(uint64_t now);
char *connect_error_body(const char *code, const char *message, size_t *len);
int connect_start_args(const char *body, size_t len, json_t **args, const char **code,
		       char *err, size_t errsz);
int connect_selector(json_t *body, json_t *args);
int connect_connect_args(const char *body, size_t len, json_t **args, const char **code,
			 char *err, size_t errsz);
int connect_signal(json_t *v);
json_t *connect_pty_size(json_t *pty);
json_t *connect_list(json_t *a);
json_t *connect_entry(json_t *a);

/* envd.c: envd's API on its own listener (docs/ENVD.md) */
void envd_start(void);
bool envd_wanted(void);
void envd_turn_off(void);

bool envd_upload_asked(const char *url, const char *method);

/* envdfile.c: /files' transfers (a file's stream to the agent) and downloads */
/* One file on its way, either direction: its stream and its counts. */
struct xfer {
	struct stream *x_s; /* NULL once it ended */
	void (*x_in)(struct xfer *x, struct msg *m); /* the agent's event (its opener's) */
	/* it ended with a Connect code and why: its proxy was lost, or its agent
	 * stalled (envdfile_tick) */
	void (*x_lost)(struct xfer *x, const char *code, const char *why);
	struct upload *x_up;
	struct download *x_down;
	uint64_t x_sent, x_acked; /* an upload's bytes sent, acknowledged */
	bool x_wend;              /* an upload's end sent */
	uint64_t x_since; /* ms of the last word either way (or the client's take) */
	json_t *x_entry;          /* an upload's EntryInfo, once done */
};
void envdfile_send(struct xfer *x, const char *op, json_t *args, const char *data, size_t len);
void envdfile_open(struct xfer *x, struct context *c, const char *op, const char *path,
                   json_t *meta, void (*in)(struct xfer *, struct msg *),
                   void (*lost)(struct xfer *, const char *, const char *));
void envdfile_tick(uint64_t now);
void envdfile_close(struct xfer *x);
int64_t envdfile_number(const struct msg *m);

/* envdupload.c: POST /files, its body streamed to the agent */
struct upload;
void waiter_tick(uint64_t now);

/* kcache.c */
const struct kspec *kcache_find(const char *want);

/* control.c */
int control_start(void);
void control_stop(void);

/* ctlpeer.c */
void ctlpeer_init(nng_socket sock, uint64_t stream_cap);
void ctlpeer_send(nng_pipe p, struct msg *m);
void ctlpeer_reply(nng_pipe p, enum msg_type t, uint64_t req, json_t *data, const char *text);
void ctlpeer_ack(nng_pipe p, uint64_t count);
int ctlpeer_watch(nng_pipe p, uint64_t req);
size_t ctlpeer_watchers(void);
void ctlpeer_event(json_t *ev, void *arg);
bool ctlpeer_event_wanted(void *arg);
void ctlpeer_gone(uint32_t id);
void ctlpeer_reap(void (*fn)(uint32_t id, void *arg), void *arg);
void ctlpeer_stop(void);

/* bounds.c */
const char *bounds_group(void);
const char *bounds_settle(bool memory_cgroup, const char **how);
uint64_t bounds_workspace_default(uint64_t free_bytes);
void bounds_workspaces(void);
int bounds_workspace_room(char *err, size_t errsz);
json_t *bounds_json(void);
void bounds_release(void);

/* box.c */
int box_check(char *err, size_t errsz);
bool box_no_way_out(void);
void box_lack(const char *what, const char *how);
bool box_memory_cgroup(void);
bool box_own_userns(void);
size_t box_missing(void);
json_t *box_level_json(void);
void box_release(void);

/* boxuid.c */
void boxuid_range(unsigned *a, unsigned *b);
bool boxuid_ranged(void);
unsigned boxuid_shared(void);
unsigned boxuid_net(void);
uid_t boxuid_kernel(const struct ctxiso *iso);
bool boxuid_isolates(void);
int boxuid_lease(struct ctxiso *iso, char *err, size_t errsz);
void boxuid_adopt(struct ctxiso *iso, json_t *box, const char *id);
void boxuid_release(void);

/* boxnons.c */
bool boxnons_on(void);
void boxnons_start(const char *what, int err, void (*lack)(const char *what, const char *how));

/* boxns.c */
bool boxns_has_cap(int cap);
bool boxns_root_suffices(void);
int boxns_probe(const char **what);
int boxns_enter(const char **what);

/* workspace.c */
const char *workspace_shared(void);
uint64_t workspace_bound(void);
int workspace_own(struct ctxiso *iso, const char *id, const char *cwd, char *err,
		  size_t errsz);
const char *workspace_of(const struct context *c);
const char *workspace_default_cwd(void);
void workspace_release(void);

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
int peer_uid(int fd, uid_t *uid, unsigned long long *ino);
void peer_check(void);
bool peer_is_context(int fd);

#endif
