/*
 * proto.h — the IPC message schema and its msgpack codec: the only interface
 * the broker, the proxies and sandcellctl speak to each other. Helpers they
 * share otherwise (logging, buffers, kernelspecs) are in lib/lib.h.
 */
#ifndef SANDCELL_PROTO_H
#define SANDCELL_PROTO_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "../lib/lib.h"

#define SANDCELL_VERSION "0.1.0"

/*
 * Every IPC message type, as one enum (the imsg model). A frame is the msgpack
 * array [type, {field-id: value, ...}]; which fields a type allows and requires
 * is the schema table in proto.c.
 */
enum msg_type {
	MSG_NONE = 0,
	/* broker -> proxy */
	MSG_EXECUTE,   /* stream, code; env, timeout_ms, policy */
	MSG_CANCEL,    /* stream: its client went away */
	MSG_INTERRUPT, /* req: interrupt the running unit */
	MSG_RESTART,   /* req: fresh kernel, same context */
	MSG_SHUTDOWN,  /* req: stop kernel and proxy */
	MSG_INFO,      /* req: live state */
	/* proxy -> broker */
	MSG_HELLO,  /* id, lang, cwd, pid, kpid, state: sent on every (re)connect */
	MSG_OUTPUT, /* stream, data (NDJSON lines); final when the stream ends */
	MSG_STATE,  /* state, kpid, queue, count: kernel state changed */
	/* replies, both ways and to sandcellctl */
	MSG_OK,   /* req; text */
	MSG_FAIL, /* req, text */
	MSG_END,  /* req: no more replies to this request */
	/* sandcellctl -> broker; replies: OK/FAIL ... END (run: OUTPUT ... END) */
	CTL_STATUS,    /* req */
	CTL_CONTEXTS,  /* req */
	CTL_EXECUTIONS, /* req */
	CTL_CANCEL,    /* req, stream */
	CTL_INTERRUPT, /* req, id */
	CTL_RESTART,   /* req, id */
	CTL_CREATE,    /* req, lang; cwd */
	CTL_DELETE,    /* req, id */
	CTL_DRAIN,     /* req */
	CTL_UNDRAIN,   /* req */
	CTL_WATCH,     /* req: OK(data) per event until the client leaves */
	CTL_RUN,       /* req, id, code */
	/* broker -> proxy (new types go last: numbers never change, so a broker
	 * can re-attach to proxies of an older version) */
	MSG_CLAIM, /* req, id, cwd; flags: a pooled proxy becomes this context */
	/* sandcellctl -> broker, later additions */
	CTL_STOP_ENDS,  /* req: the broker's next stop ends every context */
	CTL_STOP_KEEPS, /* req: contexts outlive the broker's next stop */
	/* proxy -> broker */
	MSG_STATS, /* count: kernel output no execution owned, dropped since the last STATS */
	/* sandcellctl -> broker */
	CTL_ACK, /* count: replies received; the broker sends a client at most CTL_WINDOW unacked */
	/* broker -> an envd proxy, which hands it to its agent (docs/ENVD.md);
	 * answered OK (data) or FAIL (text, outcome: a Connect error code) */
	MSG_ENVD, /* req, text: the operation; code: its JSON arguments; data: a file's bytes;
		   * stream: the stream a process's events go to (MSG_OUTPUT) */
	MSG_TYPE_MAX
};

/* Field ids on the wire. */
enum msg_field {
	F_STREAM = 0,
	F_REQ,
	F_CODE,
	F_ENV,
	F_TIMEOUT,
	F_POLICY,
	F_DATA,
	F_FINAL,
	F_TEXT,
	F_ID,
	F_LANG,
	F_CWD,
	F_PID,
	F_KPID,
	F_STATE,
	F_QUEUE,
	F_COUNT,
	F_OUTCOME, /* how a stream ended: ok, error, timeout, kernel_died, ... */
	F_WAIT,    /* ms a unit waited in the queue */
	F_RUN,     /* ms it ran */
	F_FLAGS,   /* CLAIM: FLAG_DEFAULT */
	F_REFUSED, /* STATS: connections the box's egress rules refused since the last STATS */
	F_FIELD_MAX
};
#define FB(f) (1u << (f))

/* Decoder errors (negative). */
enum proto_err {
	PROTO_OK = 0,
	PROTO_ETRUNC = -1,   /* frame ends inside a value */
	PROTO_ETYPE = -2,    /* a value has the wrong msgpack type */
	PROTO_EMISSING = -3, /* a required field is absent */
	PROTO_ESIZE = -4,    /* a field or frame is over its limit */
	PROTO_EUNKNOWN = -5, /* unknown message type or field for the type */
	PROTO_EDUP = -6,     /* a field appears twice */
	PROTO_ETRAIL = -7,   /* bytes after the frame */
	PROTO_ENOMEM = -8,
};

enum policy { POLICY_INTERRUPT = 0, POLICY_CONTINUE = 1 };
#define FLAG_DEFAULT 1u
enum kstate { KS_STARTING = 0, KS_IDLE, KS_BUSY, KS_DEAD };

/*
 * Replies the broker sends a sandcellctl client before it acknowledges them
 * (CTL_ACK). nng's polyamorous pair1 queues two messages per pipe and drops
 * what does not fit, so without a window a burst (OUTPUT, OK, END) lost its
 * end and the client waited for ever.
 */
#define CTL_WINDOW 2
#define PROTO_MAX_FRAME (80u << 20) /* whole frame */
#define PROTO_MAX_BIG (64u << 20)   /* code, data */
/* envd's /files, streamed (docs/ENVD.md): a chunk, and the bytes in flight
 * each way per transfer (unacknowledged upload bytes, a download's credit) */
#define ENVD_CHUNK (256u << 10)
#define ENVD_WINDOW (4u * ENVD_CHUNK)
/* a file's user metadata (X-Metadata-KEY: user.e2b.KEY xattrs), as envd bounds
 * it: a key's bytes (XATTR_NAME_MAX less "user.e2b."), and all names with
 * their values */
#define ENVD_META_KEY_MAX 246
#define ENVD_META_MAX 4096
#define PROTO_MAX_TEXT (64u << 10)  /* error text */
#define PROTO_MAX_NAME 4096u        /* id, lang, cwd */
#define PROTO_MAX_ENV 1024u         /* env entries */
#define PROTO_MAX_ENVKEY ENV_KEY_MAX
#define PROTO_MAX_ENVVAL (128u << 10)

/* A decoded string: a NUL-terminated copy owned by its msg; len excludes NUL. */
struct pstr {
	char *s;
	size_t len;
};

struct penv {
	struct pstr e_key, e_val;
};

struct msg {
	enum msg_type m_type;
	uint32_t m_has; /* FB(field) for each field present */
	uint64_t m_stream, m_req, m_timeout, m_policy, m_final;
	uint64_t m_pid, m_kpid, m_state, m_queue, m_count, m_wait, m_run, m_flags, m_refused;
	struct pstr m_code, m_data, m_text, m_id, m_lang, m_cwd, m_outcome;
	struct penv *m_env;
	size_t m_nenv;
};

/* proto.c */
const char *proto_strerror(int err);
const char *msg_type_name(enum msg_type t);
void msg_init(struct msg *m, enum msg_type t);
void msg_free(struct msg *m);
int msg_set_str(struct msg *m, enum msg_field f, const char *s, size_t len);
int msg_add_env(struct msg *m, const char *k, const char *v);
void msg_set_u64(struct msg *m, enum msg_field f, uint64_t v);
int msg_encode(const struct msg *m, void **buf, size_t *len);
int msg_decode(const void *buf, size_t len, struct msg *m);
int msg_pack(const struct msg *m, nng_msg **out);
int msg_pack_at(const struct msg *m, size_t room, nng_msg **out); /* room bytes first */
int msg_send(nng_socket s, const struct msg *m, int flags);
int msg_recv(nng_socket s, struct msg *m, int flags);

/* msgq.c: messages waiting for a socket that would block, sent in order, never blocking. */
struct msgq {
	nng_msg **mq_q;
	size_t mq_head, mq_n, mq_cap; /* waiting: mq_q[mq_head .. mq_head + mq_n) */
	nng_aio *mq_aio; /* one for every send: nng_sendmsg allocates one per call */
};
void msgq_push(struct msgq *q, nng_msg *nm);
int msgq_flush(struct msgq *q, nng_socket s);
int msgq_flush_max(struct msgq *q, nng_socket s, size_t max, size_t *sent);
size_t msgq_head_len(const struct msgq *q);
void msgq_clear(struct msgq *q);
void msgq_free(struct msgq *q); /* msgq_clear, and the memory of q itself */

/*
 * mrecv.c: incoming messages, taken by an nng aio callback (on nng's thread) and
 * handed to a loop through an eventfd, readable from a put (or mrecv_wake)
 * until the loop's next take of the queue: no pollable pipe, no aio made and
 * freed per message, no receive that finds nothing. A loop that stops taking
 * before NNG_EAGAIN calls mrecv_wake to come back for the rest. mrecv_open
 * feeds it from a socket; a chan's loop feeds it the frames it cut from its
 * stream (mrecv_init with no resume hook, mrecv_put without a wake).
 */
#define MRECV_MAX 1024
struct mrecv {
	nng_socket mr_sock; /* mrecv_open's socket, and its receive */
	nng_aio *mr_aio;
	void (*mr_resume)(void *); /* receives again after a pause, or NULL */
	void *mr_resume_arg;
	int mr_fd; /* eventfd, for the loop's epoll */
	pthread_mutex_t mr_mu;
	bool mr_woken; /* mr_fd was written and not read since: guarded by mr_mu */
	nng_msg **mr_q; /* what the callback received: guarded by mr_mu */
	size_t mr_n, mr_cap;
	bool mr_paused; /* MRECV_MAX wait: receiving resumes when the loop takes them */
	nng_msg **mr_batch; /* what the loop took and has not decoded yet */
	size_t mr_bn, mr_bat, mr_bcap;
};
int mrecv_open(struct mrecv *r, nng_socket s); /* 0 or an nng error */
int mrecv_init(struct mrecv *r, void (*resume)(void *), void *arg);
/* On the receiving thread: queue nm, wake the loop if it was idle (and wake:
 * false when the receiver is the loop itself, which takes it next). */
void mrecv_put(struct mrecv *r, nng_msg *nm, bool wake);
/* On any thread: the loop comes to mrecv_next (once, however many wakes). */
void mrecv_wake(struct mrecv *r);
/* After a receive's puts: true when the loop fell behind; the receiver then
 * stops, and r's resume hook starts it again once the loop has taken them. */
bool mrecv_full(struct mrecv *r);
/* Like msg_recv with NNG_FLAG_NONBLOCK: 0, NNG_EAGAIN, or a PROTO_ error. */
int mrecv_next(struct mrecv *r, struct msg *m);
void mrecv_close(struct mrecv *r); /* after nng_close of its socket */

/*
 * The broker<->proxy link: one nng_stream over ipc:// at a time, framed as
 * nng's ipc transport frames a pair0 socket's messages, so either end still
 * talks to a peer of an older version, whose link was a pair0 socket. The
 * proxy listens and takes one peer at a time; the broker dials and dials
 * again (5 ms, doubling to 100 ms) until a connection holds. See chan.c.
 */
enum chan_ev {
	CHAN_MSG = 0,  /* *m is a message */
	CHAN_EMPTY = 1, /* nothing more for now: the fd is polled again */
	CHAN_UP,       /* a peer is attached; what is sent goes to it */
	CHAN_DOWN,     /* the peer is gone (ch_why): its messages came before this */
};
struct chan_conn;
struct chan {
	char *ch_url;
	bool ch_listen; /* the proxy's end: one peer at a time; nothing held for the next */
	nng_stream_listener *ch_listener;
	nng_stream_dialer *ch_dialer;
	nng_aio *ch_aio; /* the accept or dial, or the pause before the next */
	bool ch_pausing;
	nng_duration ch_backoff;
	struct mrecv ch_in; /* what came */
	int ch_fd; /* the fd the loop polls: ch_in's eventfd, which nng's
		    * callbacks write (see chan.c) */
	pthread_mutex_t ch_mu; /* guards what follows, and each chan_conn's state */
	nng_stream *ch_pending; /* accepted or dialed: the loop attaches it (chan_next) */
	struct chan_conn *ch_cur; /* the attached connection, set by the loop */
	struct msgq ch_outq;  /* frames waiting to be written, in order */
	const char *ch_why;   /* why the last connection ended */
	bool ch_told;         /* a second peer's refusal was logged for this one */
};
int chan_listen(struct chan *ch, const char *url); /* 0 or an nng error */
int chan_dial(struct chan *ch, const char *url);
/* On the loop: 0 (CHAN_MSG) with *m, another chan_ev, or a PROTO_ error (a bad frame, dropped). */
int chan_next(struct chan *ch, struct msg *m);
/* On any thread: ch_fd is readable until the loop's next chan_next. A loop
 * that stops taking before CHAN_EMPTY calls it: messages already read wait
 * in ch->ch_in, which nothing else would wake it for. */
void chan_wake(struct chan *ch);
/* Queues m; order is kept, nothing blocks. No peer: the listener drops it, the dialer keeps it. */
int chan_send(struct chan *ch, const struct msg *m);
bool chan_up(struct chan *ch);
void chan_flush(struct chan *ch, int ms); /* waits up to ms for the queue to be written */
void chan_close(struct chan *ch);

/* pipe.c: messages over a plain stream socket (the envd proxy and its agent), blocking. */
int pipe_send(int fd, const struct msg *m);
int pipe_recv(int fd, struct msg *m);
/* ... and without blocking, for a loop: frames into and out of buffers */
int pipe_frame_out(const struct msg *m, struct buf *out);
int pipe_frame_in(struct buf *in, struct msg *m);

/* rd.c: the bounded msgpack reader proto.c and spec.c share; PROTO_ errors */
struct rd {
	const uint8_t *p, *end;
};
int rd_bytes(struct rd *r, size_t n, const uint8_t **out);
int rd_be(struct rd *r, size_t n, uint64_t *v);
int rd_uint(struct rd *r, uint64_t *v);
int rd_bool(struct rd *r, bool *v);
int rd_str(struct rd *r, size_t max, const char **s, size_t *len);
int rd_map(struct rd *r, uint64_t *n);

/*
 * spec.c: the context spec, what the broker tells a proxy about its context
 * (broker/spawn.c fills it, proxy/main.c applies it). One msgpack map
 * {field number: value}, the number a field's index in spec.c's table; the
 * proxy reads it at start from its --spec-fd. A setting is a member here and
 * a line in that table. Strings are NUL-free; NULL, 0 and false are not sent.
 */
#define SPEC_MAX_BYTES (1u << 20)
struct spec {
	const char *sp_language, *sp_kernel, *sp_cwd; /* a kernelspec by name, or NULL */
	const char *sp_env_file, *sp_env_pass;        /* the global env (JSON); names passed */
	bool sp_default, sp_pooled;                   /* the default context; no context until CLAIM */
	const char *sp_python_startup, *sp_kernel_user;
	uint64_t sp_memory, sp_cpu; /* bytes, CPU seconds; 0: none */
	const char *sp_cgroup, *sp_cgroup_group;
	bool sp_sandbox, sp_no_namespaces, sp_isolated, sp_outbound;
	uint64_t sp_uid_first, sp_uid_last; /* the uids boxes may lease */
	uint64_t sp_uid, sp_net_uid, sp_uplink; /* the kernel's, the netns owner's; the uplink's pid */
	const char *sp_egress_allow, *sp_egress_deny;    /* the server's lists (CIDR,...) */
	const char *sp_context_allow, *sp_context_deny; /* the context's allow_out, deny_out */
	uint64_t sp_pids, sp_tmp_size;
	bool sp_own_workspace;
	uint64_t sp_workspace_size;
	const char *sp_workspace, *sp_hide;
	uint64_t sp_interrupt_retry, sp_interrupt_grace, sp_heartbeat_timeout; /* ms; 0: default */
	const char *sp_envd, *sp_template; /* envd's agent; the template's socket */
	uint64_t sp_template_wait, sp_max_starting; /* ms; kernels starting at once (0: any) */
};
/* *buf (malloc'd, the caller's) holds s encoded; PROTO_ESIZE (a field out of its
 * bounds, which the proxy would refuse) or PROTO_ENOMEM */
int spec_encode(const struct spec *s, void **buf, size_t *len);
/* s from buf, every field checked against its bounds; 0 or a PROTO_ error */
int spec_decode(const void *buf, size_t len, struct spec *s);
/* *buf (malloc'd, the caller's): fd's bytes from its start to its end, at
 * most SPEC_MAX_BYTES (else -EFBIG); 0 or -errno */
int spec_read(int fd, char **buf, size_t *len);
/* The table itself, for the test that round-trips every field */
enum spec_kind { SK_STR, SK_U64, SK_BOOL };
struct spec_field {
	const char *sf_name;
	enum spec_kind sf_kind;
	size_t sf_off;           /* in struct spec */
	uint64_t sf_min, sf_max; /* a number's bounds; a string's longest */
	bool sf_req;             /* a spec without it is refused */
};
const struct spec_field *spec_fields(size_t *n);
void spec_free(struct spec *s);

#endif
