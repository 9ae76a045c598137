/*
 * proxy.h — sandcell-proxy: one process per context. It owns the context's
 * kernel (spawn, wire protocol, interrupts, restarts), the admission queue of
 * execution units, and the routing of kernel output to broker streams.
 */
#ifndef SANDCELL_PROXY_H
#define SANDCELL_PROXY_H

#include <limits.h>
#include <sys/queue.h>
#include <sys/types.h>
#include <linux/filter.h>

#include <jansson.h>

#include "../proto/proto.h"

#define KINFO_RESEND_MS 100
#define KERNEL_START_MS 60000
/* defaults of the spec's interrupt_retry and interrupt_grace (the broker's --interrupt-*) */
#define INTERRUPT_RETRY_MS 1000
#define HB_DEAD_MS 20000 /* an idle kernel silent on its heartbeat this long is dead */
#define INTERRUPT_GRACE_MS 3000
#define MAX_RESUBMIT 3
#define OUTPUT_CHUNK (1u << 20) /* most NDJSON bytes in one OUTPUT message */
#define OUTPUT_LINE_TEXT (1u << 20) /* most bytes of stream text in one NDJSON line */
#define IOPUB_QUIET_MS 5000 /* reply in, idle missing, iopub silent: output lost */
/*
 * A kernel sent its abort signal (Deno: kspec.c) gets its interrupt only when
 * its listener did not run and it computes: looked at every ABORT_CHECK_MS, its
 * threads were runnable ABORT_BUSY_PCT % of the time (on a CPU or waiting for
 * one: a loaded machine does not hide it) each time for ABORT_COMPUTE_MS (a
 * cell's transpiling or the listener's collection takes less). Its unit ends only
 * once the listener said it ran, or ABORT_ACK_MS after the reply and idle.
 */
#define ABORT_CHECK_MS 50
#define ABORT_BUSY_PCT 40
#define ABORT_COMPUTE_MS 150
#define ABORT_ACK_MS 1000
/*
 * Output of a unit's first milliseconds is held (up to OUTPUT_CHUNK) so that
 * a short execution reaches the broker as one message and its client as one
 * response; after that, output is handed on as it comes. As long as the
 * broker parks a request (its PARK_MS): output that came sooner would end the
 * park, and an execution of 10 to 20 ms would cost two messages and a
 * streamed response where one of each does, with no output seen earlier.
 */
#define OUTPUT_HOLD_MS 20
/* a kernel message of more is skipped as it streams past (zmtp.c) */
#define ZMTP_MAX_BYTES (64ULL << 20)
#define ZMTP_MAX_FRAMES 64

/* One execution unit: [set env] + code + [restore env]. */
struct unit {
	TAILQ_ENTRY(unit) u_link;
	uint64_t u_stream;
	char *u_code;
	struct penv *u_env;
	size_t u_nenv;
	int u_policy;
	uint64_t u_deadline;    /* ms, monotonic; 0 = none */
	uint64_t u_queued_at;
	uint64_t u_started_at;
	uint64_t u_interrupt_at; /* first interrupt sent; 0 = none */
	uint64_t u_reinterrupt_at;
	uint64_t u_abort_at;     /* the kernel's abort signal sent; 0 = none */
	bool u_aborted;          /* ... and its listener said it ran */
	uint64_t u_run_at;       /* the kernel's runnable time (u_run_us) last read then */
	long long u_run_us;
	uint64_t u_busy_since;   /* it has computed since then; 0 = it does not */
	uint64_t u_terminated_at; /* the interrupt sent after the abort signal; 0 = none */
	char *u_notice;          /* said on stderr before it runs (the state it lost) */
	char u_msgid[40];   /* msg_id of the code's execute_request */
	bool u_replied, u_idle;
	uint64_t u_replied_at;
	char u_fence[40];   /* kernel_info_request sent after reply+idle (ks_barrier) */
	bool u_fenced;      /* the fence's idle arrived: no late output can follow */
	bool u_errored;     /* an error line was sent on the stream */
	bool u_detached;    /* stream ended or cancelled: output is discarded */
	bool u_ran;         /* execute_input seen: the code started */
	uint64_t u_hold_until; /* output waits until then (OUTPUT_HOLD_MS) */
	int u_interrupts;   /* interrupt_unit calls */
	bool u_interrupt_asked; /* interrupted while queued behind one being stopped */
	char u_probe[40];   /* kernel_info_request sent after an idle with no reply */
	int u_resubmits;
	struct buf u_out;   /* NDJSON not yet handed to the broker */
};
TAILQ_HEAD(unitq, unit);

/* A parsed, verified Jupyter message (wire.c). */
struct cJSON;
struct jmsg {
	struct cJSON *jm_header, *jm_parent; /* cJSON trees (wire.c says why) */
	json_t *jm_meta, *jm_content;
	const char *jm_type;      /* header.msg_type */
	const char *jm_parent_id; /* parent_header.msg_id or "" */
	const char *jm_session;   /* parent_header.session or NULL */
};

struct wire_frame {
	const void *wf_data;
	size_t wf_len;
};

/* A message's frames as wire_build makes them: six strings it owns. */
struct wire_out {
	char *wo_part[4]; /* header, parent header, metadata, content (JSON) */
	char wo_head[384]; /* wo_part[0]'s room; 1 and 2 are "{}": only 3 is allocated */
	char wo_hmac[65];
	struct wire_frame wo_frames[6];
};

/* One connection to a kernel's socket (zmtp.c). */
enum zmtp_type { ZMTP_DEALER, ZMTP_SUB, ZMTP_REQ };

struct zbuf {
	unsigned char *zb_data;
	size_t zb_off, zb_len, zb_cap; /* bytes [off, len) are held */
};

struct zmtp {
	enum zmtp_type z_type;
	int z_fd, z_state;
	unsigned z_ivl;      /* ms before the next try to connect */
	unsigned z_conns;    /* connections made: each a new fd for the loop */
	uint64_t z_retry_at;
	char *z_ep;          /* NULL: fed by zmtp_feed (tests, fuzzing) */
	char z_id[64];
	size_t z_idlen;
	struct zbuf z_out, z_in;
	struct zbuf z_pend;  /* sent before the handshake was done: written after it */
	/* the message being cut out of z_in: its frames at offsets from zb_off */
	size_t z_cur, z_nframes;
	uint64_t z_msg_bytes;
	size_t z_foff[ZMTP_MAX_FRAMES];
	struct wire_frame z_frames[ZMTP_MAX_FRAMES];
	uint64_t z_skip;     /* bytes of a dropped frame still to pass */
	bool z_skipping, z_skip_more, z_dropping, z_quiet, z_have;
	bool z_drained;      /* the last read got less than it asked: the socket was empty */
};

/*
 * The box a kernel runs in: what it is made of, and its live parts. Built by
 * sandbox.c (namespaces, uid, privileges, the init), boxroot.c (the
 * filesystem it sees), boxnet.c (its network), limits.c (its cgroups and
 * rlimits) and filter.c (its seccomp filter); boxlib.c builds the same box
 * for kernels forked from the template.
 */
#define BOX_MAX_BINDS 12
struct box_bind {
	char *bb_path;  /* host path, shown at the same path in the box */
	bool bb_write;  /* read-write (else read-only) */
};
enum box_net { BOX_NET_OUTBOUND, BOX_NET_NONE };
/* where its traffic may go (boxfw.c): the server's lists and the context's */
enum boxfw_list { BOXFW_ALLOW, BOXFW_DENY, BOXFW_CTX_ALLOW, BOXFW_CTX_DENY, BOXFW_NLISTS };
struct boxfw {
	struct cidr *fw_list[BOXFW_NLISTS];
	size_t fw_n[BOXFW_NLISTS];
	bool fw_on; /* the rules are set */
};
struct box {
	const char *bx_id;    /* the context's (or pooled proxy's): for log lines */
	bool bx_on;           /* the spec's sandbox; else kernels run unboxed */
	bool bx_isolated;     /* --isolation context: a uid of its own */
	bool bx_userns;       /* not root: a user namespace maps the kernel's uid */
	bool bx_nons;         /* no namespaces here (a container's seccomp profile): the
			       * kernel sees the host's paths, through Landlock's rules */
	uid_t bx_uid;         /* the kernel's, on the host; -1: ours (unboxed) */
	gid_t bx_gid;
	gid_t bx_groups[64];
	int bx_ngroups;
	uid_t bx_inuid;       /* in its user namespace (bx_userns) */
	uid_t bx_uid_first, bx_uid_last;

	/* what it sees (boxroot.c) */
	char *bx_workspace;   /* host directory shown at BOX_HOME */
	bool bx_own_ws;       /* ... this context's own (--isolation context) */
	const char *bx_kdir;  /* the kernel's own dir: a copy of it at BOX_KDIR, in a tmpfs */
	struct box_bind bx_binds[BOX_MAX_BINDS]; /* the kernel's own files, its program */
	int bx_nbinds;
	char *bx_hide;        /* a host file covered with an empty one (the token), or NULL */
	uint64_t bx_tmp_size; /* /tmp, /var/tmp, /dev/shm: tmpfs of this size */
	uint64_t bx_ws_size;  /* the workspace's size bound (lib/wsdisk.c; the proxy makes an
			       * own one's filesystem, the broker the shared one's); 0: none */

	/* its network (boxnet.c) */
	enum box_net bx_net;
	uid_t bx_net_uid;     /* owns the network namespace and runs pasta (root) */
	pid_t bx_net_holder;  /* holds the namespace while the proxy lives; 0: none */
	pid_t bx_pasta;       /* pasta, the namespace's way out; 0: none */
	pid_t bx_uplink;      /* the broker's uplink (uplink.c), the way out instead; 0: none */
	bool bx_net_ready;    /* the way out is set up (or known not to come) */
	struct boxfw bx_fw;   /* its egress rules (boxfw.c) */

	/* its limits (limits.c) */
	uint64_t bx_pids;     /* pids.max; 0: none */
	uint64_t bx_nproc;    /* RLIMIT_NPROC, where no pids cgroup holds bx_pids; 0: none */
	uint64_t bx_mem;      /* bytes; 0: none */
	uint64_t bx_cpu;      /* seconds of CPU per kernel; 0: none */
	char *bx_cg_parent;   /* the spec's cgroup: where the memory cgroup goes (unboxed) */
	char *bx_cg_group;    /* the spec's cgroup_group: the parent of its cgroups, under sandcell's */
	char *bx_cg[2];       /* its cgroup dirs: one on v2, pids and memory on v1 */
	char *bx_cg_mem;      /* the one of them with the memory limit, or NULL */
	unsigned long long bx_oom_seen;

	/* its init (sandbox.c, boxlib.c) */
	struct sock_fprog bx_prog; /* the seccomp filter (filter.c) */
	int bx_sock;          /* the init's status reports; -1: none */
	int bx_pidfd;         /* an init forked from the template; -1: none */
	char *bx_init;        /* boxlib.c: sandcell-init, which a forked init runs */
	int bx_initfd;        /* ... opened by that init before its mounts; -1: none */
	int bx_out;           /* its stdout and stderr: the proxy's pipe (kout.c); -1: none */
};

/*
 * The proxy's configuration: what it serves and how, set at start and
 * read-only after it, but for what a CLAIM changes (px_ctx, px_cwd,
 * px_default, px_pooled: dispatch.c's claim). Its parts keep their own
 * state: the box (px_box, sandbox.c and its helpers), the start gate
 * (startgate.c), the kernel connection (kernel.c), the admission queue
 * (admit.c), the link to the broker (ipc.c), the loop (loop.c).
 */
struct proxy {
	char *px_id;       /* the proxy's own name: its dir and socket in the run dir */
	char *px_ctx;      /* the context it serves (px_id unless it came from the pool) */
	bool px_pooled;    /* started ahead of time; no context until CLAIM */
	char *px_lang, *px_cwd, *px_dir, *px_run_dir;
	char *px_kdir;     /* the kernel's files: connection file, IPython profile */
	struct kspec *px_ks;
	char *px_deno;     /* Deno's program, on every kernel's PATH (`deno add`), or NULL */
	struct penv *px_genv; /* global env: applied at spawn */
	size_t px_ngenv;
	const char *px_env_pass; /* our variables the kernel gets (lib/kenv.c); NULL: none */
	bool px_default; /* the broker's default context for its language */
	const char *px_py_startup; /* run in every IPython kernel at start */
	bool px_display_is_result; /* IRkernel shows values as display_data */
	bool px_iopub_waits; /* ipykernel under the profile: its iopub waits for us (NODROP) */
	uint64_t px_interrupt_retry_ms; /* an interrupt unanswered this long is sent again */
	uint64_t px_interrupt_grace_ms; /* ... and this long after the first, a restart */
	uint64_t px_hb_dead_ms; /* an idle kernel silent this long is dead */
	const char *px_template; /* the template's socket (the spec's template), or NULL */
	char *px_envd; /* the spec's envd: the agent its box runs instead of a kernel (envd.c), or NULL */
	uint64_t px_template_until; /* ... which is starting: waited for until then (ms) */
	int px_max_starting;    /* kernels starting at once (0: any) */

	struct box px_box;      /* the sandbox (the kernel's pid is then the box's init) */
};

/* The kernel's processes, as a start made them (launch.c, sandbox.c, template.c). */
struct kproc {
	pid_t kp_pid;   /* ours to signal and reap: the kernel, or its box's init; 0: none */
	pid_t kp_shown; /* in a box, the kernel process itself (operators, signals); 0: none */
};

/* The kernel's sockets, in the order the loop reads them: a reply must not
 * overtake its output (iopub first). */
enum ksock { KSOCK_IOPUB, KSOCK_SHELL, KSOCK_STDIN, KSOCK_CONTROL, KSOCK_HB, KSOCK_N };

/*
 * What the kernel tells its user (dispatch.c), as nng's aio completions do:
 * kernel.c calls no module above it.
 */
enum kernel_event {
	KEV_READY,  /* started and answered: the broker hears, units may run */
	KEV_JOINED, /* iopub subscribed again after a reconnect: units may run */
	KEV_LOST,   /* it died or could not start: what ran or waited is lost (why) */
	KEV_STATE,  /* its state changed (why, or NULL): the broker hears */
	KEV_REPLY,  /* an execute_reply on shell (jm) */
	KEV_INFO,   /* a kernel_info_reply on shell (jm) */
	KEV_IOPUB,  /* a message on iopub (jm) */
};
typedef void kernel_event_fn(enum kernel_event ev, const char *why, struct jmsg *jm);

/* ipc.c: the link to the broker; status fills a message's state fields */
void ipc_listen(const struct proxy *px, void (*status)(struct msg *m));
int ipc_fd(void);
int ipc_next(struct msg *m);
void ipc_send(struct msg *m);
void ipc_state(const char *text);
void ipc_reply(enum msg_type t, uint64_t req, const char *text);
void ipc_link_event(int ev, const char *why);
void ipc_close(void);

/* limits.c */
int limits_prepare(struct box *bx);
int limits_join(const struct box *bx, pid_t pid);
void limits_apply_child(const struct box *bx);
bool limits_oom_killed(struct box *bx);
void limits_cleanup(struct box *bx);

/* launch.c */
#define EP_MAX (PATH_MAX + 32) /* a ZeroMQ endpoint: ipc:// and a path */
int launch_dirs(const struct proxy *px);
char **launch_argv(const struct proxy *px, const char *conn);
char **launch_env(const struct proxy *px);
void launch_free_strv(char **v);
char *launch_subst(const char *arg, const char *conn, const char *resdir);
char *launch_which(const char *prog);
int launch_connection_file(const struct proxy *px, const char *key, const char *path,
			   int ports[5], char ep[5][EP_MAX]);
void launch_unlink_sockets(void);
int launch_unboxed(const struct proxy *px, const char *dir, const char *exe, char **argv,
		   char **envp, struct kproc *kp);

/* packages.c: the tenant's places, below its HOME */
#define PACKAGES_RLIB "/.local/lib/R" /* R: R_LIBS_USER */
char **packages_env(const char *home, const char *path);
void packages_prepare(const char *home);

/* filter.c: clone with any of these flags is refused in a box */
#define SB_NS_FLAGS                                                                         \
	(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUSER | CLONE_NEWIPC |          \
	 CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_NEWTIME)
int filter_build(struct box *bx);

/* boxroot.c */
int boxroot_enter(const struct box *bx);

/* boxnet.c */
int boxnet_start(struct box *bx);
int boxnet_owned(struct box *bx);
pid_t boxnet_pasta(uid_t uid, pid_t target, int alive);
int boxlink_attach(struct box *bx, pid_t uplink);
int boxlink_forwarding(const char *name);
int uplink_run(struct box *bx, const char *run_dir);
bool boxnet_ready(struct box *bx, uint64_t since);
bool boxnet_reaped(struct box *bx, pid_t pid, int status);

/* boxdns.c */
void boxdns_host(void);
void boxdns_box(const struct box *bx);
int boxdns_fds(int *fds, int max);
void boxdns_drain(void);

/* boxfw.c */
bool boxfw_resolver_ok(const struct box *bx, const struct cidr *c);
int boxfw_option(struct boxfw *fw, const char *list, enum boxfw_list which);
void boxfw_host(void);
int boxfw_apply(struct box *bx);
int64_t boxfw_refused(const struct box *bx);
char *boxfw_list_text(const struct box *bx, enum boxfw_list which);
void boxfw_tick(const struct box *bx, uint64_t now, bool busy);

/* hostnet.c */
void hostnet_keep(void);
bool hostnet_is(int fd);
int hostnet_enter(void);
void hostnet_leave(int here);
int hostnet_socket(int domain, int type, int protocol);

/* sandbox.c */
int sandbox_init(struct proxy *px);
const char *sandbox_home(const struct proxy *px);
const char *sandbox_kdir(const struct proxy *px);
int sandbox_enter(const struct box *bx);
int sandbox_kernel_child(const char *cwd, bool reset_signals);
int sandbox_stdio(int out, int sock);
pid_t sandbox_recv(int sock, void *data, size_t len, ssize_t *got, int flags, int *fd);
int sandbox_spawn(struct box *bx, const char *dir, const char *exe, char **argv, char **envp,
		  struct kproc *kp);
int sandbox_status(const struct box *bx, int status, pid_t shown);
void sandbox_end(struct box *bx, pid_t init);
void sandbox_reaped(struct box *bx);
void sandbox_cleanup(struct box *bx, bool gone);
json_t *sandbox_json(const struct box *bx);

/* envd.c: the proxy's life when its spec names envd's agent */
void envd_run(struct proxy *px, int sigfd);

/* boxinit.c */
extern bool boxinit_scoped;
void boxinit_wait(pid_t kid, bool watch) __attribute__((noreturn));

/* template.c */
int template_spawn(const struct proxy *px, struct box *bx, const char *exe, char **argv,
		   char **envp, struct kproc *kp);
void template_kill(const struct box *bx);

/* startgate.c: a start slot, taken in turn (true: held, or no gate) and given back
 * (with the place in the queue of a start that waited) */
bool startgate_take(const struct proxy *px);
void startgate_give(void);

/* kernel.c: the kernel connection (its state is kernel.c's own) */
void kernel_init(const struct proxy *px, struct box *bx, kernel_event_fn *on);
int kernel_start(void);
void kernel_stop(void);
void kernel_no_respawn(void);
void kernel_interrupt(void);
int kernel_abort(void);
long long kernel_runnable_us(void);
void kernel_restart(const char *why);
void kernel_iopub_reconnect(void);
bool kernel_reap(pid_t pid, int status);
void kernel_box_ended(void);
void kernel_tick(uint64_t now);
int kernel_recv(enum ksock i, struct jmsg *jm);
void kernel_on_msg(enum ksock i, struct jmsg *jm);
int kernel_execute(const char *code, bool silent, char msgid[40]);
int kernel_probe(char msgid[40]); /* a kernel_info_request on shell */
struct zmtp *kernel_sock(enum ksock i);
unsigned kernel_gen(void);
void kernel_gen_bump(void);
enum kstate kernel_state(void);
bool kernel_can_run(void);
void kernel_set_busy(bool busy);
pid_t kernel_pid_shown(void);
const char *kernel_dead_reason(void);
uint64_t kernel_iopub_at(void);

/* kconfig.c */
const char *kconfig_start_dir(const struct proxy *px, const struct box *bx);
void kconfig_first_units(const struct proxy *px, char *out[3]);
bool kconfig_start_failed(const struct proxy *px, const char *why);
void kconfig_reset(void);
char *kconfig_take_notice(void);

/* procinfo.c */
char procinfo_state(pid_t pid);
bool procinfo_catches(pid_t pid, int sig);
long long procinfo_runnable_us(pid_t pid);

/* admit.c: the admission queue (its state is admit.c's own) */
void admit_init(const struct proxy *px);
void admit_push(struct msg *m);
void admit_cancel(uint64_t stream);
void admit_next(void);
void admit_tick(uint64_t now);
void admit_fail_all(const char *name, const char *value);
void admit_detach_all(void);
void admit_on_reply(struct jmsg *jm);
void admit_on_probe(struct jmsg *jm);
void admit_on_iopub(struct jmsg *jm);
void admit_output_lost(void);
bool admit_output_full(void);
uint64_t admit_hold_until(void);
void admit_flush(void);
bool admit_interrupt(void);
long admit_wait(uint64_t now);
int admit_depth(void);
uint64_t admit_count(void);

/* unit.c */
void unit_send(struct unit *u, const char *outcome);
void unit_end(struct unit *u, const char *name, const char *value);
void unit_free(struct unit *u);

/* dispatch.c: the broker's requests and the kernel's events */
void dispatch_init(struct proxy *px);
void dispatch_msg(struct msg *m);
void dispatch_stop(void);
bool dispatch_quit(void);
bool dispatch_gone(void);

/* nftctr.c: a named nftables counter's packets, over netlink */
int64_t nftctr_packets(const char *table, const char *name);

/* memtrim.c: the free heap back to the system once the context is quiet */
void memtrim_tick(uint64_t now);

/* kout.c: a box's stdout and stderr, read and logged as lines of ours */
int kout_open(const char *id);
int kout_fd(void);
int kout_box_fd(void);
void kout_drain(uint64_t now);
void kout_tick(uint64_t now);

/* loop.c */
void loop_run(struct proxy *px, int sigfd);

/* statefile.c */
void statefile_write(const struct proxy *px);

/* wire.c */
int wire_sign(const char *key, const struct wire_frame parts[4], char hex[65]);
int wire_parse(const char *key, const struct wire_frame *f, size_t n, struct jmsg *jm);
int wire_build(const char *key, const char *session, const char *type, json_t *content,
	       char msgid[40], struct wire_out *wo);
void wire_out_free(struct wire_out *wo);
int wire_send(struct zmtp *z, const char *key, const char *session, const char *type,
	      json_t *content, char msgid[40]);
int wire_recv(struct zmtp *z, const char *key, struct jmsg *jm);
void jmsg_free(struct jmsg *jm);

/* zmtp.c */
struct zmtp *zmtp_open(enum zmtp_type type, const char *ep, const char *id);
struct zmtp *zmtp_open_buffer(enum zmtp_type type);
void zmtp_close(struct zmtp *z);
void zmtp_shed(struct zmtp *z);
void zmtp_reconnect(struct zmtp *z);
bool zmtp_up(const struct zmtp *z);
int zmtp_fd(const struct zmtp *z);
unsigned zmtp_events(const struct zmtp *z);
long zmtp_wait(const struct zmtp *z, uint64_t now);
void zmtp_tick(struct zmtp *z, uint64_t now);
void zmtp_flush(struct zmtp *z);
int zmtp_send(struct zmtp *z, const struct wire_frame *f, size_t n);
int zmtp_recv(struct zmtp *z, const struct wire_frame **f, size_t *n);
int zmtp_feed(struct zmtp *z, const void *p, size_t n);

/* output.c */
json_t *output_result(json_t *data, bool is_main);
char *output_strip_ansi(const char *s);
void output_line(struct buf *b, json_t *obj);
void output_json_string(struct buf *b, const char *s, size_t n);
void output_error(struct buf *b, const char *name, const char *value, const char *tb);
void output_stderr(struct buf *b, const char *text);
void output_end(struct buf *b);
bool output_iopub(struct buf *b, const char *type, json_t *content, bool display_is_result);

/* envset.c */
char *envset_set(const char *lang, const struct penv *env, size_t n);
char *envset_restore(const char *lang, const struct penv *env, size_t n);
char *envset_chdir(const char *lang, const char *dir);
char *envset_deno_install(const char *dir);
bool envset_supported(const char *lang);

#endif
