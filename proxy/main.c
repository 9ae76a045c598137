/*
 * main.c — sandcell-proxy: start-up, the dispatch of the broker's requests
 * (whose link is ipc.c's), and the event loop over the kernel's sockets
 * (zmtp.c), the link to the broker (its eventfd) and a signalfd.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>
#include <sodium.h>

#include "proxy.h"

static struct proxy px;

static void write_state_file(struct proxy *p);

/*
 * A pooled proxy becomes a context (or a live one is renamed after a restart
 * took this proxy from the pool): new id, cwd applied in the kernel, state
 * file rewritten so a restarted broker finds it under its context id.
 */
static void
claim(struct proxy *p, struct msg *m)
{
	bool moved = strcmp(m->m_cwd.s, p->px_cwd) != 0;

	if (!uuid_valid(m->m_id.s) || m->m_cwd.s[0] != '/') {
		ipc_reply(p, MSG_FAIL, m->m_req, "bad claim");
		return;
	}
	free(p->px_ctx);
	p->px_ctx = xstrdup(m->m_id.s);
	free(p->px_cwd);
	p->px_cwd = xstrdup(m->m_cwd.s); /* kernels restarted later start there */
	p->px_default = m->m_flags & FLAG_DEFAULT;
	p->px_pooled = false;
	if (moved) {
		char *cd = envset_chdir(p->px_ks->ks_lang, p->px_cwd);
		/* the shell channel is ordered: every unit runs after this */
		if (cd && kernel_execute(p, cd, true, NULL) < 0)
			log_warn("context %s: could not change the kernel's directory", p->px_ctx);
		free(cd);
	}
	write_state_file(p);
	log_info("proxy %s now serves context %s (cwd %s)", p->px_id, p->px_ctx, p->px_cwd);
	ipc_reply(p, MSG_OK, m->m_req, NULL);
}

static void
handle_ipc(struct proxy *p, struct msg *m)
{
	switch (m->m_type) {
	case MSG_EXECUTE:
		admit_push(p, m);
		break;
	case MSG_CANCEL:
		admit_cancel(p, m->m_stream);
		break;
	case MSG_INTERRUPT:
		admit_interrupt(p);
		ipc_reply(p, MSG_OK, m->m_req, p->px_run ? "interrupted" : "nothing running");
		break;
	case MSG_RESTART:
		if (p->px_restart_pending)
			ipc_reply(p, MSG_OK, p->px_restart_req, "superseded by a later restart");
		p->px_restart_req = m->m_req;
		p->px_restart_pending = true;
		free(p->px_dead_reason);
		p->px_dead_reason = NULL;
		admit_fail_all(p, "ContextRestarted", "restart requested");
		kernel_restart(p, "restart requested");
		if (p->px_kstate == KS_DEAD) {
			ipc_reply(p, MSG_FAIL, m->m_req,
			      p->px_dead_reason ? p->px_dead_reason : "kernel could not be started");
			p->px_restart_pending = false;
		}
		break;
	case MSG_SHUTDOWN:
		ipc_reply(p, MSG_OK, m->m_req, "shutting down");
		p->px_quit = p->px_shutdown = true;
		break;
	case MSG_INFO:
		ipc_reply(p, MSG_OK, m->m_req, NULL);
		break;
	case MSG_CLAIM:
		claim(p, m);
		break;
	default:
		log_warn("context %s: unexpected %s from broker, dropped", p->px_id,
			 msg_type_name(m->m_type));
	}
}

static void
drain_ipc(struct proxy *p)
{
	for (;;) {
		struct msg m;
		int e = chan_next(&p->px_link, &m);
		if (e == CHAN_EMPTY)
			return;
		if (e > 0) {
			ipc_link_event(p, e);
			continue;
		}
		if (e < 0) {
			log_warn("context %s: bad frame from broker dropped: %s", p->px_id,
				 proto_strerror(e));
			continue;
		}
		handle_ipc(p, &m);
		msg_free(&m);
	}
}

/*
 * Reads what a kernel socket holds, at most 256 messages a turn; stops if
 * handling closed or replaced a socket. Returns whether it may hold more
 * (the loop comes back without sleeping).
 */
static bool
drain_kernel(struct proxy *p, struct zmtp **sockp, const char *name)
{
	bool iopub = sockp == &p->px_iopub;
	unsigned gen = p->px_zgen;

	for (int i = 0; i < 256 && *sockp && p->px_zgen == gen; i++) {
		struct jmsg jm;
		int e;
		if (sockp == &p->px_hb) { /* any echo is a pong */
			const struct wire_frame *f;
			size_t n;
			if ((e = zmtp_recv(*sockp, &f, &n)) == -EAGAIN)
				return false;
			p->px_hb_ok = now_ms();
			continue;
		}
		if ((e = wire_recv(*sockp, p->px_key, &jm)) == -EAGAIN)
			return false;
		if (iopub)
			p->px_iopub_at = now_ms();
		if (e < 0) {
			char why[64];
			if (e == -E2BIG)
				snprintf(why, sizeof(why), "over %d frames or %llu MiB",
					 ZMTP_MAX_FRAMES, (unsigned long long)(ZMTP_MAX_BYTES >> 20));
			else
				snprintf(why, sizeof(why), "%s",
					 e == -EPERM ? "bad signature" : strerror(-e));
			log_limited(&p->px_klog, now_ms(), LOG_WARN,
				    "context %s: %s message from kernel dropped: %s", p->px_id, name,
				    why);
			if (iopub && e == -E2BIG)
				admit_output_lost(p);
			continue;
		}
		if (iopub)
			kernel_on_iopub(p, &jm);
		else if (sockp == &p->px_stdin)
			kernel_on_stdin(p, &jm);
		else if (sockp == &p->px_shell)
			kernel_on_shell(p, &jm);
		/* control: interrupt_reply, read only to keep the socket empty */
		jmsg_free(&jm);
		/*
		 * Hand output on as it fills chunks, the message freed first: a
		 * flood never piles up here, and a big message is held at most
		 * twice (its NDJSON and the chunks made of it).
		 */
		if (iopub && p->px_run && buf_pending(&p->px_run->u_out) >= OUTPUT_CHUNK)
			admit_flush(p);
	}
	return *sockp && p->px_zgen == gen;
}

static void
reap(struct proxy *p)
{
	struct signalfd_siginfo si;
	int status;
	pid_t pid;

	while (read(p->px_sigfd, &si, sizeof(si)) == sizeof(si))
		if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
			log_info("context %s: signal %d, stopping", p->px_id, si.ssi_signo);
			p->px_quit = true;
		}
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (pid == p->px_kpid)
			kernel_reaped(p, status);
		else
			boxnet_reaped(&p->px_box, pid, status);
}

static int
load_env_file(struct proxy *p, const char *path)
{
	json_error_t jerr;
	json_t *o = json_load_file(path, 0, &jerr), *v;
	const char *k;

	if (!json_is_object(o)) {
		log_err("env file %s: %s", path, jerr.text);
		json_decref(o);
		return -1;
	}
	p->px_genv = xcalloc(json_object_size(o) + 1, sizeof(*p->px_genv));
	json_object_foreach(o, k, v)
	{
		if (!json_is_string(v) || !env_key_valid(k))
			continue;
		struct penv *e = &p->px_genv[p->px_ngenv++];
		e->e_key.s = xstrdup(k);
		e->e_key.len = strlen(k);
		e->e_val.s = xstrdup(json_string_value(v));
		e->e_val.len = strlen(e->e_val.s);
	}
	json_decref(o);
	return 0;
}

static void
write_state_file(struct proxy *p)
{
	char *path = xasprintf("%s/state.json", p->px_dir);
	char *tmp = xasprintf("%s.tmp", path);
	json_t *o = json_pack("{s:s?, s:s, s:s, s:s, s:s, s:i, s:b, s:o}", "id",
			      p->px_pooled ? NULL : p->px_ctx, "slot", p->px_id, "language",
			      p->px_lang, "kernel", p->px_ks->ks_name, "cwd", p->px_cwd, "pid",
			      (int)getpid(), "default", p->px_default, "sandbox",
			      sandbox_json(&p->px_box));

	/* without it a restarted broker cannot re-attach this proxy: say so */
	if (json_dump_file(o, tmp, JSON_COMPACT) < 0)
		log_err("state file %s: write failed", tmp);
	else if (rename(tmp, path) < 0) {
		log_err("state file: rename %s to %s: %s", tmp, path, strerror(errno));
		unlink(tmp);
	}
	json_decref(o);
	free(tmp);
	free(path);
}

/* sandcell-proxy's options: the broker's, in its own words (supervise.c). */
static const char *opt_env_file, *opt_kernel, *opt_kuser;
static unsigned long opt_uid;
static int opt_level = LOG_INFO;

static void usage(void) __attribute__((noreturn));

static int
opt_uid_range(const char *range, const char *origin)
{
	unsigned a, b;

	(void)origin;
	if (sscanf(range, "%u-%u", &a, &b) != 2 || !a || a > b)
		usage();
	px.px_box.bx_uid_first = a;
	px.px_box.bx_uid_last = b;
	return 0;
}

static int
opt_isolation(const char *mode, const char *origin)
{
	(void)origin;
	if (strcmp(mode, "shared") && strcmp(mode, "context"))
		usage();
	px.px_box.bx_isolated = !strcmp(mode, "context");
	return 0;
}

static int
opt_network(const char *mode, const char *origin)
{
	(void)origin;
	if (strcmp(mode, "outbound") && strcmp(mode, "none"))
		usage();
	px.px_box.bx_net = strcmp(mode, "none") ? BOX_NET_OUTBOUND : BOX_NET_NONE;
	return 0;
}

static int
opt_template_wait(const char *ms, const char *origin)
{
	uint64_t v;
	int rc;

	if ((rc = parse_count(ms, 0, UINT32_MAX, &v)) < 0)
		parse_fail("sandcell-proxy", origin, ms, rc, "milliseconds");
	px.px_template_until = now_ms() + v;
	return 0;
}

static int
opt_log_level(const char *name, const char *origin)
{
	(void)origin;
	if ((opt_level = parse_level(name)) < 0)
		usage();
	return 0;
}

#define BX px.px_box
#define KERNEL_MS 1, 86400000, "milliseconds from 1 to 86400000"
static const struct opt options[] = {
    {"run-dir", "DIR", OPT_STRING, OPT_DST(px.px_run_dir), .o_help = "the broker's run dir"},
    {"id", "UUID", OPT_STRING, OPT_DST(px.px_id), .o_help = "this proxy's name"},
    {"language", "LANG", OPT_STRING, OPT_DST(px.px_lang), .o_help = "the context's language"},
    {"cwd", "DIR", OPT_STRING, OPT_DST(px.px_cwd), .o_help = "the context's cwd"},
    {"kernel", "NAME", OPT_STRING, OPT_DST(opt_kernel), .o_help = "a kernelspec by name"},
    {"env-file", "FILE", OPT_STRING, OPT_DST(opt_env_file), .o_help = "the global env (JSON)"},
    {"log-level", "LEVEL", OPT_FUNC, .o_fn = opt_log_level, .o_help = "error, warn, info, debug"},
    {"default", NULL, OPT_SWITCH, OPT_DST(px.px_default),
     .o_help = "the broker's default context for its language"},
    {"pooled", NULL, OPT_SWITCH, OPT_DST(px.px_pooled), .o_help = "no context until CLAIM"},
    {"python-startup", "FILE", OPT_STRING, OPT_DST(px.px_py_startup),
     .o_help = "run in every IPython kernel at start"},
    {"kernel-user", "USER", OPT_STRING, OPT_DST(opt_kuser), .o_help = "run the kernel as USER"},
    {"memory", "SIZE", OPT_SIZE, OPT_DST(BX.bx_mem), .o_max = UINT64_MAX,
     .o_expect = "a size such as 4G", .o_help = "memory limit; 0: none"},
    {"cpu", "SECONDS", OPT_SECONDS, OPT_DST(BX.bx_cpu), .o_max = UINT32_MAX,
     .o_expect = "a CPU time such as 600 or 2h", .o_help = "CPU-time limit; 0: none"},
    {"cgroup", "DIR", OPT_STRING, OPT_DST(BX.bx_cg_parent), .o_help = "memory cgroup parent"},
    {"sandbox", NULL, OPT_SWITCH, OPT_DST(BX.bx_on), .o_help = "the kernel runs boxed"},
    {"uid-range", "A-B", OPT_FUNC, .o_fn = opt_uid_range, .o_help = "uids the box may lease"},
    {"isolation", "shared|context", OPT_FUNC, .o_fn = opt_isolation, .o_help = "(the broker's)"},
    {"network", "outbound|none", OPT_FUNC, .o_fn = opt_network, .o_help = "the box's network"},
    {"pids", "N", OPT_COUNT, OPT_DST(BX.bx_pids), .o_max = UINT64_MAX, .o_expect = "a count",
     .o_help = "pids.max; 0: none"},
    {"tmp-size", "BYTES", OPT_COUNT, OPT_DST(BX.bx_tmp_size), .o_max = UINT64_MAX,
     .o_expect = "a number of bytes", .o_help = "the box's /tmp"},
    {"uid", "UID", OPT_COUNT, OPT_DST(opt_uid), .o_max = UINT32_MAX, .o_expect = "a uid",
     .o_help = "the kernel's uid (--isolation context)"},
    {"own-workspace", NULL, OPT_SWITCH, OPT_DST(BX.bx_own_ws), .o_help = "this context's own"},
    {"workspace-size", "BYTES", OPT_COUNT, OPT_DST(BX.bx_ws_size), .o_max = UINT64_MAX,
     .o_expect = "a number of bytes", .o_help = "the workspace's size bound; 0: none"},
    {"workspace", "DIR", OPT_STRING, OPT_DST(BX.bx_workspace),
     .o_help = "the host directory shown at " BOX_HOME},
    {"net-uid", "UID", OPT_COUNT, OPT_DST(BX.bx_net_uid), .o_max = UINT32_MAX,
     .o_expect = "a uid", .o_help = "owns the network namespace and runs pasta"},
    {"hide", "FILE", OPT_STRING, OPT_DST(BX.bx_hide), .o_help = "a host file the box covers"},
    {"interrupt-retry", "MS", OPT_COUNT, OPT_DST(px.px_interrupt_retry_ms), 0, KERNEL_MS,
     .o_help = "an interrupt unanswered this long is sent again"},
    {"interrupt-grace", "MS", OPT_COUNT, OPT_DST(px.px_interrupt_grace_ms), 0, KERNEL_MS,
     .o_help = "a kernel still running this long after the first interrupt is restarted"},
    {"heartbeat-timeout", "MS", OPT_COUNT, OPT_DST(px.px_hb_dead_ms), 0, KERNEL_MS,
     .o_help = "an idle kernel silent this long is dead"},
    {"template", "SOCKET", OPT_STRING, OPT_DST(px.px_template), .o_help = "fork from it"},
    {"template-wait", "MS", OPT_FUNC, .o_fn = opt_template_wait,
     .o_help = "the template is starting: wait this long for it"},
    {"max-starting", "N", OPT_COUNT, OPT_DST(px.px_max_starting), .o_max = 1000000,
     .o_expect = "a count from 0 to 1000000", .o_help = "kernels starting at once; 0: any"},
};
#undef KERNEL_MS
#undef BX

static struct optset optset = {
    .os_prog = "sandcell-proxy",
    .os_usage = "usage: sandcell-proxy --run-dir DIR --id UUID --language LANG --cwd DIR "
		"[options]\n",
    .os_opts = options,
    .os_n = sizeof(options) / sizeof(options[0]),
};

static void
usage(void)
{
	opts_usage(&optset);
}

/* What the loop's epoll reports, as its data. */
enum { W_IPC, W_SIG, W_BOX, W_KERNEL };

static void
watch(int ep, int op, int fd, int what)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = what};

	if (epoll_ctl(ep, op, fd, &ev) < 0 && op != EPOLL_CTL_DEL)
		fatal("epoll_ctl: %s", strerror(errno));
}

/* The kernel's sockets, each watched by its connection's fd while it has one. */
struct zwatch {
	struct zmtp **zw_sockp;
	const char *zw_name;
	const struct zmtp *zw_z; /* watched: this connection, fd and events */
	unsigned zw_conns, zw_ev;
	int zw_fd;               /* -1: none */
	bool zw_pending;         /* may hold messages: read before sleeping */
};

/*
 * A connection made or lost since the last turn (a start, a restart, a
 * kernel that closed one) changes the fds: every old one out before any new
 * one in, since a new fd may have an old one's number (or the box pidfd's:
 * box_sync puts that in again after px_zgen moved).
 */
static void
zwatch_sync(struct proxy *p, int ep, struct zwatch *zw, int nzw, unsigned *gen, bool rest)
{
	bool moved = *gen != p->px_zgen;

	for (int i = 0; i < nzw && !moved; i++) {
		const struct zmtp *z = *zw[i].zw_sockp;
		moved = z != zw[i].zw_z || (z && (z->z_conns != zw[i].zw_conns ||
						  zmtp_fd(z) != zw[i].zw_fd));
	}
	if (moved) {
		p->px_zgen++;
		*gen = p->px_zgen;
		for (int i = 0; i < nzw; i++) {
			if (zw[i].zw_fd >= 0)
				watch(ep, EPOLL_CTL_DEL, zw[i].zw_fd, 0);
			zw[i].zw_fd = -1;
			zw[i].zw_ev = 0;
			zw[i].zw_z = *zw[i].zw_sockp;
			zw[i].zw_conns = zw[i].zw_z ? zw[i].zw_z->z_conns : 0;
			zw[i].zw_pending = zw[i].zw_z != NULL;
		}
	}
	for (int i = 0; i < nzw; i++) {
		const struct zmtp *z = zw[i].zw_z;
		int fd = z ? zmtp_fd(z) : -1;
		unsigned ev = fd >= 0 ? zmtp_events(z) : 0;
		if (rest && zw[i].zw_sockp == &p->px_iopub && zmtp_up(z))
			ev &= ~(unsigned)EPOLLIN;
		if (ev == zw[i].zw_ev)
			continue;
		struct epoll_event e = {.events = ev, .data.u32 = W_KERNEL + i};
		if (epoll_ctl(ep, zw[i].zw_fd < 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &e) < 0)
			fatal("epoll_ctl kernel %s: %s", zw[i].zw_name, strerror(errno));
		zw[i].zw_fd = fd;
		zw[i].zw_ev = ev;
	}
}

/*
 * Whether iopub may rest (not wake the loop) for now: a unit's first
 * OUTPUT_HOLD_MS, before its reply, on a kernel whose iopub waits for the
 * proxy rather than drop (px_iopub_waits). What it publishes meanwhile
 * (busy, execute_input, the first output) is held that long anyway, and is
 * read at the loop's next wake for anything (iopub is read first on every
 * wake, so a reply never overtakes its output), at the latest when the hold
 * ends. An `x=1` then wakes the loop at most three times (request, reply,
 * idle; two when the idle is in by the reply) rather than four. Not while
 * an interrupt waits for execute_input.
 */
static bool
iopub_rest(struct proxy *p, uint64_t now)
{
	const struct unit *u = p->px_run;

	return p->px_iopub_waits && u && !u->u_replied && !u->u_interrupt_at &&
	       now < u->u_hold_until;
}

/*
 * The pidfd of a box forked from the template, which is not our child (no
 * SIGCHLD): watched while there is one. Never taken out by number: closing
 * it took it out of the epoll, and its number may be a new socket's now. A
 * new kernel (new sockets, px_zgen) may have a new pidfd under the old
 * one's number: it goes in again (after zwatch_sync's removals).
 */
static void
box_sync(struct proxy *p, int ep, int *fd, unsigned *gen)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = W_BOX};

	if (p->px_box.bx_pidfd == *fd && p->px_zgen == *gen)
		return;
	*fd = p->px_box.bx_pidfd;
	*gen = p->px_zgen;
	if (*fd >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, *fd, &ev) < 0 && errno != EEXIST)
		fatal("epoll_ctl: %s", strerror(errno));
}

static void
loop(struct proxy *p)
{
	/* iopub before shell: a reply must not overtake its output */
	struct zwatch zw[] = {{&p->px_iopub, "iopub", NULL, 0, 0, -1, false},
			      {&p->px_shell, "shell", NULL, 0, 0, -1, false},
			      {&p->px_stdin, "stdin", NULL, 0, 0, -1, false},
			      {&p->px_control, "control", NULL, 0, 0, -1, false},
			      {&p->px_hb, "heartbeat", NULL, 0, 0, -1, false}};
	const int nzw = sizeof(zw) / sizeof(zw[0]);
	unsigned gen = p->px_zgen - 1, box_gen = gen;
	int box_fd = -1;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0)
		fatal("epoll_create1: %s", strerror(errno));
	watch(ep, EPOLL_CTL_ADD, p->px_ipc_fd, W_IPC);
	watch(ep, EPOLL_CTL_ADD, p->px_sigfd, W_SIG);
	while (!p->px_quit) {
		struct epoll_event evs[8];
		bool ipc = false, sig = false, box = false;
		uint64_t now = now_ms();
		long wait = admit_wait(p, now), kw = p->px_kstate == KS_STARTING ? 50 : 500;
		int n;

		if (wait < 0 || wait > kw)
			wait = kw;
		for (int i = 0; i < nzw; i++) {
			long zt = *zw[i].zw_sockp ? zmtp_wait(*zw[i].zw_sockp, now) : -1;
			if (zt >= 0 && zt < wait)
				wait = zt;
		}
		bool rest = iopub_rest(p, now);
		if (rest && (long)(p->px_run->u_hold_until - now) < wait)
			wait = (long)(p->px_run->u_hold_until - now);
		zwatch_sync(p, ep, zw, nzw, &gen, rest);
		box_sync(p, ep, &box_fd, &box_gen);
		for (int i = 0; i < nzw; i++)
			if (zw[i].zw_pending && *zw[i].zw_sockp)
				wait = 0;
		if ((n = epoll_wait(ep, evs, 8, (int)wait)) < 0 && errno != EINTR)
			fatal("epoll_wait: %s", strerror(errno));
		for (int i = 0; i < n; i++) {
			uint32_t w = evs[i].data.u32;
			if (w == W_IPC)
				ipc = true;
			else if (w == W_SIG)
				sig = true;
			else if (w == W_BOX)
				box = true;
			else if (w >= W_KERNEL && w < W_KERNEL + (uint32_t)nzw) {
				struct zmtp *z = *zw[w - W_KERNEL].zw_sockp;
				if (z && z == zw[w - W_KERNEL].zw_z && (evs[i].events & ~EPOLLIN))
					zmtp_flush(z); /* connected, room to write, or an error */
				zw[w - W_KERNEL].zw_pending = true;
			}
		}
		if (rest && n > 0)
			zw[0].zw_pending = true; /* iopub (zw[0]) first, whatever woke us */
		if (sig)
			reap(p);
		if (box && p->px_box.bx_pidfd >= 0) {
			p->px_kpid = 0; /* not ours to kill or reap: it has ended */
			kernel_reaped(p, SIGKILL); /* the init's report, if any, says better */
		}
		for (int i = 0; i < nzw; i++)
			if (zw[i].zw_pending)
				zw[i].zw_pending = *zw[i].zw_sockp &&
						   drain_kernel(p, zw[i].zw_sockp, zw[i].zw_name);
		if (ipc)
			drain_ipc(p);
		now = now_ms();
		for (int i = 0; i < nzw; i++)
			if (*zw[i].zw_sockp)
				zmtp_tick(*zw[i].zw_sockp, now);
		admit_tick(p, now);
		kernel_tick(p, now);
		log_limit_flush(&p->px_klog, now);
		admit_flush(p);
	}
	close(ep);
}

/* The ids kernels run as: --kernel-user's, the broker's --uid for a box, or ours (-1). */
static void
kernel_ids(struct box *bx, const char *kuser, unsigned long uid)
{
	bx->bx_uid = (uid_t)-1;
	if (kuser) {
		struct passwd *pw = getpwnam(kuser);
		if (!pw)
			fatal("--kernel-user %s: no such user", kuser);
		bx->bx_uid = pw->pw_uid;
		bx->bx_gid = pw->pw_gid;
		bx->bx_ngroups = sizeof(bx->bx_groups) / sizeof(bx->bx_groups[0]);
		if (getgrouplist(kuser, pw->pw_gid, bx->bx_groups, &bx->bx_ngroups) < 0)
			bx->bx_ngroups = 0;
	} else if (uid) { /* a uid of its own, from the broker */
		bx->bx_uid = bx->bx_gid = uid;
		bx->bx_ngroups = 0;
	}
}

/*
 * The kernel's own files (connection file, IPython profile; ipc sockets when
 * unboxed): in a box, this context's dir, which its box shows read-only;
 * unboxed as another user, a dir of its own under <run dir>.kernels (0711),
 * outside the run dir (0700, ours); else the context's dir.
 */
static void
kernel_dir(struct proxy *p, bool other_user)
{
	int c;

	if (p->px_box.bx_on) {
		p->px_kdir = xasprintf("%s/kernel", p->px_dir);
	} else if (other_user) {
		char *root = xasprintf("%s.kernels", p->px_run_dir);
		mkdir_p(root, 0711);
		chmod(root, 0711);
		p->px_kdir = xasprintf("%s/%s", root, p->px_id);
		free(root);
	} else {
		p->px_kdir = xstrdup(p->px_dir);
	}
	if ((c = mkdir_p(p->px_kdir, 0700)) < 0)
		fatal("context %s: kernel dir: %s", p->px_id, strerror(-c));
}

int
main(int argc, char **argv)
{
	char **operands;
	char lang[128];
	int c;

	px.px_interrupt_retry_ms = INTERRUPT_RETRY_MS;
	px.px_interrupt_grace_ms = INTERRUPT_GRACE_MS;
	px.px_hb_dead_ms = HB_DEAD_MS;
	px.px_slot_fd = -1;
	px.px_queue_fd = -1;
	if (opts_parse(&optset, argc, argv, &operands) || !px.px_run_dir || !px.px_id ||
	    !px.px_lang || !px.px_cwd || !uuid_valid(px.px_id))
		usage();
	const char *env_file = opt_env_file, *kernel = opt_kernel, *kuser = opt_kuser;
	unsigned long uid_arg = opt_uid;
	log_init("sandcell-proxy", opt_level);
	if ((px.px_sigfd = signal_fd()) < 0)
		fatal("signalfd: %s", strerror(errno));
	px.px_ctx = xstrdup(px.px_id);
	px.px_cwd = xstrdup(px.px_cwd);
	if (sodium_init() < 0)
		fatal("sodium_init failed");
	if (lang_normalise(kernel ? kernel : px.px_lang, lang, sizeof(lang)) < 0 ||
	    kspec_find(lang, &px.px_ks) < 0)
		fatal("context %s: no kernelspec '%s'", px.px_id, kernel ? kernel : px.px_lang);
	if (lang_normalise(px.px_lang, lang, sizeof(lang)) < 0)
		fatal("context %s: bad language '%s'", px.px_id, px.px_lang);
	px.px_lang = lang;
	px.px_display_is_result = !strcmp(px.px_ks->ks_lang, "r");
	px.px_klog.ll_what = "warnings about the kernel's messages";
	/* the profile, which sets NODROP, runs in ipykernel's Python kernels */
	for (char **a = px.px_ks->ks_argv; *a && !px.px_iopub_waits; a++)
		px.px_iopub_waits = px.px_py_startup && !strcmp(px.px_ks->ks_lang, "python") &&
				    strstr(*a, "ipykernel");
	if (env_file && load_env_file(&px, env_file) < 0)
		exit(1);
	TAILQ_INIT(&px.px_queue);
	px.px_dir = xasprintf("%s/ctx/%s", px.px_run_dir, px.px_id);
	if ((c = mkdir_p(px.px_dir, 0700)) < 0)
		fatal("mkdir %s: %s", px.px_dir, strerror(-c));
	kernel_ids(&px.px_box, kuser, uid_arg);
	kernel_dir(&px, kuser != NULL);
	if ((c = sandbox_init(&px)) < 0)
		fatal("context %s: cannot build the sandbox: %s", px.px_id, strerror(-c));
	if (boxnet_start(&px.px_box) < 0) /* while no thread exists */
		exit(1);

	/*
	 * Output passes through in buffers of about a MiB: mapped, not taken from
	 * the heap, so a flood's memory goes back to the system when it has
	 * passed (glibc's adaptive threshold would keep up to 32 MiB ones).
	 */
	mallopt(M_MMAP_THRESHOLD, 256 << 10);

	ipc_listen(&px);
	write_state_file(&px);
	/* on failure, stay: the broker hears why (HELLO) and shuts us down */
	if (kernel_start(&px) < 0)
		px.px_kstate = KS_DEAD;
	loop(&px);

	admit_fail_all(&px, "ContextDeleted", "the context was shut down");
	kernel_stop(&px);
	sandbox_cleanup(&px);
	chan_flush(&px.px_link, 500); /* the last replies leave: written, they arrive */
	chan_close(&px.px_link);
	if (strcmp(px.px_kdir, px.px_dir))
		rm_rf(px.px_kdir);
	rm_rf(px.px_dir);
	log_info("context %s: proxy stopped", px.px_id);
	return 0;
}
