/*
 * kernel.c — one Jupyter kernel's life: spawn in its own session with
 * PR_SET_PDEATHSIG (what it is started with is launch.c's), ZeroMQ sockets,
 * the kernel_info handshake (which also beats the iopub slow-joiner race),
 * interrupts, heartbeat, death and restart. What happens to it goes up
 * through the hook kernel_init was given (enum kernel_event): this file
 * calls no module above it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>

#include "proxy.h"

#define HB_EVERY_MS 2000
#define MAX_START_FAILURES 3

static const struct proxy *px; /* the configuration */
static struct box *box;        /* the box the kernel runs in (px's) */
static kernel_event_fn *tell;  /* its user's: dispatch.c */

/* The kernel connection: one kernel at a time, restarted in place. */
static struct {
	struct zmtp *k_sock[KSOCK_N];
	unsigned k_gen;      /* bumped for every socket made: the loop watches the new ones */
	char k_key[65];
	char k_session[37];
	char k_kinfo_id[40];
	struct kproc k_proc;
	enum kstate k_state;
	uint64_t k_started_at, k_kinfo_at;
	uint64_t k_hb_sent, k_hb_ok;
	uint64_t k_iopub_at; /* last message of any kind on iopub */
	int k_start_failures;
	bool k_kinfo_reply, k_iopub_seen;
	bool k_iopub_rejoin; /* a fresh iopub SUB: no unit starts until a status shows it joined */
	bool k_start_wait;   /* the kernel waits for a start slot */
	bool k_no_respawn;   /* the proxy is stopping: a kernel that dies stays dead */
	char *k_dead_reason;
	struct loglimit k_log; /* warnings a kernel can cause at will (what it sends) */
} k = {.k_log = {.ll_what = "warnings about the kernel's messages"}};

void
kernel_init(const struct proxy *p, struct box *bx, kernel_event_fn *on)
{
	px = p;
	box = bx;
	tell = on;
}

/* The kernel process itself (operators, signals): in a box, not its init; 0 if none. */
pid_t
kernel_pid_shown(void)
{
	return k.k_proc.kp_shown > 0 ? k.k_proc.kp_shown : k.k_proc.kp_pid;
}

/*
 * A connection to one of the kernel's sockets, made before the kernel binds
 * (zmtp.c tries again until it can): nothing it says at start-up is lost.
 * Both DEALERs carry the session as identity: the kernel's input_request,
 * sent to the shell client's, must reach our stdin socket.
 */
static struct zmtp *
zsock(enum zmtp_type type, const char *endpoint)
{
	k.k_gen++;
	return zmtp_open(type, endpoint, type == ZMTP_DEALER ? k.k_session : NULL);
}

static void
close_sockets(void)
{
	struct zmtp **socks[5] = {&k.k_sock[KSOCK_SHELL], &k.k_sock[KSOCK_IOPUB], &k.k_sock[KSOCK_CONTROL], &k.k_sock[KSOCK_HB],
				  &k.k_sock[KSOCK_STDIN]};

	for (int i = 0; i < 5; i++) {
		zmtp_close(*socks[i]);
		*socks[i] = NULL;
	}
	k.k_gen++;
	launch_unlink_sockets();
}

/* Why the kernel could not be started: logged, and kept as k_dead_reason. */
static void __attribute__((format(printf, 1, 2)))
start_failed(const char *fmt, ...)
{
	char why[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	free(k.k_dead_reason);
	k.k_dead_reason = xasprintf("kernel %s could not be started: %s",
				       px->px_ks->ks_name, why);
	log_err("context %s: %s", px->px_id, k.k_dead_reason);
}

/* The kernel's process, in its box or not: 0 with k_proc set, or -errno. */
static int
spawn(const char *exe, char **argv, char **envp)
{
	const char *dir = kconfig_start_dir(px, box); /* its cwd, or its own dir (Deno) */
	int rc;

	if (!box->bx_on)
		return launch_unboxed(px, dir, exe, argv, envp, &k.k_proc);
	/* forked from the template when there is one; cold otherwise */
	if (template_spawn(px, box, exe, argv, envp, &k.k_proc) == 0)
		return 0;
	if ((rc = sandbox_spawn(box, dir, exe, argv, envp, &k.k_proc)) < 0)
		start_failed("the sandbox did not start it: %s", strerror(-rc));
	return rc;
}

static int
kernel_launch(void)
{
	char conn[PATH_MAX], ep[5][EP_MAX], *exe = NULL;
	char **argv = NULL, **envp = NULL;
	unsigned char key[32];
	int ports[5], rc;

	randombytes_buf(key, sizeof(key));
	sodium_bin2hex(k.k_key, sizeof(k.k_key), key, sizeof(key));
	uuid_v4(k.k_session);
	snprintf(conn, sizeof(conn), "%s/kernel.json", px->px_kdir);
	if ((rc = launch_connection_file(px, k.k_key, conn, ports, ep)) < 0) {
		start_failed("write %s: %s", conn, strerror(-rc));
		return rc;
	}
	k.k_sock[KSOCK_SHELL] = zsock(ZMTP_DEALER, ep[0]);
	k.k_sock[KSOCK_IOPUB] = zsock(ZMTP_SUB, ep[1]);
	k.k_sock[KSOCK_CONTROL] = zsock(ZMTP_DEALER, ep[3]);
	k.k_sock[KSOCK_HB] = zsock(ZMTP_REQ, ep[4]);
	k.k_sock[KSOCK_STDIN] = zsock(ZMTP_DEALER, ep[2]);
	if ((rc = launch_dirs(px)) < 0) {
		start_failed("its files in %s: %s", px->px_kdir, strerror(-rc));
		goto err;
	}
	/* the kernel's own dir is BOX_KDIR in its box */
	argv = launch_argv(px, box->bx_on && !box->bx_nons ? BOX_KDIR "/kernel.json" : conn);
	exe = launch_which(argv[0]);
	envp = launch_env(px);
	if ((rc = limits_prepare(box)) < 0) {
		start_failed("its cgroup: %s", strerror(-rc));
		goto err;
	}
	if ((rc = spawn(exe, argv, envp)) < 0)
		goto err;
	k.k_state = KS_STARTING;
	k.k_started_at = now_ms();
	k.k_kinfo_reply = k.k_iopub_seen = k.k_iopub_rejoin = false;
	k.k_hb_sent = k.k_hb_ok = k.k_started_at;
	log_info("context %s: kernel %s started%s, pid %d", px->px_id, px->px_ks->ks_name,
		 box->bx_pidfd >= 0 ? " from the template" : "",
		 (int)(k.k_proc.kp_shown ? k.k_proc.kp_shown : k.k_proc.kp_pid));
	if ((rc = kernel_probe(k.k_kinfo_id)) < 0) {
		/* without it the kernel is never found ready */
		log_err("kernel %s: send kernel_info_request: %s", px->px_ks->ks_name,
			strerror(-rc));
		kernel_stop();
		goto out;
	}
	k.k_kinfo_at = now_ms();
	goto out;
err:
	close_sockets();
out:
	launch_free_strv(argv);
	launch_free_strv(envp);
	free(exe);
	return rc;
}

/*
 * Starts the kernel when a start slot is free (startgate.c); until then it
 * is starting, and kernel_tick tries again. On failure it is dead, and
 * k_dead_reason says why.
 */
int
kernel_start(void)
{
	int rc;

	k.k_state = KS_STARTING;
	if (!startgate_take(px)) {
		if (!k.k_start_wait)
			log_info("context %s: kernel %s waits for a start slot (%d start at once)",
				 px->px_id, px->px_ks->ks_name, px->px_max_starting);
		k.k_start_wait = true;
		return 0;
	}
	k.k_start_wait = false;
	if ((rc = kernel_launch()) < 0) {
		startgate_give();
		k.k_state = KS_DEAD;
	}
	return rc;
}

/* Kills the kernel's whole session and reaps it. */
void
kernel_stop(void)
{
	startgate_give();
	k.k_start_wait = false;
	if (box->bx_pidfd >= 0) {
		template_kill(box); /* not our child: its pidfd, no waitpid */
		k.k_proc.kp_pid = 0;
	} else if (k.k_proc.kp_pid > 0) {
		sandbox_end(box, k.k_proc.kp_pid);
		k.k_proc.kp_pid = 0;
	}
	sandbox_reaped(box);
	k.k_proc.kp_shown = 0;
	close_sockets();
	char *conn = xasprintf("%s/kernel.json", px->px_kdir);
	unlink(conn);
	free(conn);
	k.k_state = KS_DEAD;
}

/*
 * iopub went silent after a reply: its connection is made again (the loop
 * sees its fd change and watches the new one).
 */
void
kernel_iopub_reconnect(void)
{
	if (!k.k_sock[KSOCK_IOPUB])
		return;
	zmtp_reconnect(k.k_sock[KSOCK_IOPUB]);
	log_warn("context %s: iopub connected again", px->px_id);
	/*
	 * Slow joiner: what the kernel publishes before the new subscription is in
	 * place is lost, so the next unit waits for a status on it (kernel_info is
	 * asked until one comes, as at start).
	 */
	k.k_iopub_rejoin = true;
	kernel_probe(k.k_kinfo_id);
	k.k_kinfo_at = now_ms();
}

void
kernel_interrupt(void)
{
	if (k.k_proc.kp_pid <= 0)
		return;
	if (px->px_ks->ks_interrupt_msg)
		wire_send(k.k_sock[KSOCK_CONTROL], k.k_key, k.k_session, "interrupt_request",
			  json_object(), NULL);
	else if (killpg(k.k_proc.kp_pid, SIGINT) < 0) /* the box's init ignores it */
		kill(k.k_proc.kp_pid, SIGINT);
	log_info("context %s: interrupt sent (%s)", px->px_id,
		 px->px_ks->ks_interrupt_msg ? "message" : "SIGINT");
}

/*
 * Sends the kernel's abort signal (ks_abort_signal), which ends what the
 * running code awaits, to the kernel process alone (its group holds the
 * code's own children, which the signal is not for), and only once its
 * listener is there: a kernel that does not catch it gets none. -1 if
 * none was sent.
 */
int
kernel_abort(void)
{
	int sig = px->px_ks->ks_abort_signal;
	pid_t pid = kernel_pid_shown();

	if (!sig || !procinfo_catches(pid, sig))
		return -1;
	if (kill(pid, sig) < 0) {
		log_warn("context %s: kill %d SIG%s: %s", px->px_id, (int)pid, sigabbrev_np(sig),
			 strerror(errno));
		return -1;
	}
	log_info("context %s: abort signal sent (SIG%s)", px->px_id, sigabbrev_np(sig));
	return 0;
}

/* How long the kernel's threads have been runnable, in us; -1 if unknown. */
long long
kernel_runnable_us(void)
{
	return procinfo_runnable_us(kernel_pid_shown());
}

/*
 * IRkernel catches an interrupt only while it polls and while the code runs:
 * one in between (right after execute_input, or while it replies) reaches
 * R's top level, and a non-interactive R halts. This option is R's last
 * resort for an interrupt no handler took: it resumes instead, so the kernel
 * lives and admit.c's retry interrupts the code once it runs. Shell is
 * ordered: it is in place before the first unit.
 */
#define R_INTERRUPT_GUARD "options(interrupt = function() invokeRestart(\"resume\"))"

static void
set_ready(void)
{
	if (k.k_state != KS_STARTING || !k.k_kinfo_reply || !k.k_iopub_seen)
		return;
	/* its code may want the network at once: not ready before the box's way out is */
	if (!boxnet_ready(box, k.k_started_at))
		return;
	k.k_state = KS_IDLE;
	k.k_start_failures = 0;
	k.k_hb_sent = k.k_hb_ok = now_ms(); /* start-up time is not silence */
	if (!strcmp(px->px_ks->ks_lang, "r") &&
	    kernel_execute(R_INTERRUPT_GUARD, true, NULL) < 0)
		log_warn("context %s: could not send R's interrupt guard", px->px_id);
	char *first[3];
	kconfig_first_units(px, first); /* to its cwd, deno install: before any unit */
	for (int i = 0; first[i]; i++) {
		if (kernel_execute(first[i], true, NULL) < 0)
			log_warn("context %s: could not send the kernel's first units", px->px_id);
		free(first[i]);
	}
	/* the fence once before the first unit too: what it installs (Deno's abort
	 * listener) is there when the first unit runs */
	if (px->px_ks->ks_fence && kernel_execute(px->px_ks->ks_fence, true, NULL) < 0)
		log_warn("context %s: could not send the kernel's fence", px->px_id);
	log_info("context %s: kernel %s ready in %llu ms", px->px_id, px->px_ks->ks_name,
		 (unsigned long long)(now_ms() - k.k_started_at));
	startgate_give(); /* after the line: the log never shows more starting than slots */
	tell(KEV_READY, NULL, NULL);
}

/* A message answering another client's request (another session) is not ours. */
static bool
foreign(struct jmsg *jm)
{
	const char *s = jm->jm_session;

	if (!s || !*s || !strcmp(s, k.k_session))
		return false;
	log_limited(&k.k_log, now_ms(), LOG_WARN,
		    "context %s: %s message of another session dropped", px->px_id, jm->jm_type);
	return true;
}

static void
kernel_on_shell(struct jmsg *jm)
{
	if (foreign(jm))
		return;
	if (!strcmp(jm->jm_type, "kernel_info_reply")) {
		k.k_kinfo_reply = true;
		set_ready();
		tell(KEV_INFO, NULL, jm);
	} else if (!strcmp(jm->jm_type, "execute_reply")) {
		tell(KEV_REPLY, NULL, jm);
	}
}

static void
kernel_on_iopub(struct jmsg *jm)
{
	if (foreign(jm))
		return;
	if (!strcmp(jm->jm_type, "status")) {
		k.k_iopub_seen = true;
		set_ready();
		if (k.k_iopub_rejoin) {
			k.k_iopub_rejoin = false;
			tell(KEV_JOINED, NULL, NULL);
		}
	}
	tell(KEV_IOPUB, NULL, jm);
}

/*
 * Nobody can type into a context: a kernel that asks for input anyway
 * (IRkernel's readline() ignores allow_stdin) gets an empty line at once,
 * as R's readline() returns in non-interactive use, instead of waiting
 * forever.
 */
static void
kernel_on_stdin(struct jmsg *jm)
{
	int rc;

	if (strcmp(jm->jm_type, "input_request"))
		return;
	log_debug("context %s: input_request answered with an empty line", px->px_id);
	if ((rc = wire_send(k.k_sock[KSOCK_STDIN], k.k_key, k.k_session, "input_reply",
			    json_pack("{s:s}", "value", ""), NULL)) < 0)
		log_warn("context %s: send input_reply: %s", px->px_id, strerror(-rc));
}

static char *
describe_status(int status)
{
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && limits_oom_killed(box))
		return xasprintf("kernel was killed: out of memory (limit %llu MB)",
				 (unsigned long long)(box->bx_mem >> 20));
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
		return xasprintf("kernel was killed: CPU time limit of %llu s reached",
				 (unsigned long long)box->bx_cpu);
	if (WIFSIGNALED(status))
		return xasprintf("kernel was killed by signal %d (%s)", WTERMSIG(status),
				 strsignal(WTERMSIG(status)));
	return xasprintf("kernel exited with status %d", WEXITSTATUS(status));
}

/* Restarts after a death; gives up after repeated failures to start. */
static void
respawn(const char *why)
{
	bool was_starting = k.k_state == KS_STARTING;
	/* a start with its configuration ran nothing (kconfig.c): nothing is lost */
	bool config = was_starting && kconfig_start_failed(px, why);

	if (!config)
		tell(KEV_LOST, why, NULL);
	kernel_stop();
	if (k.k_no_respawn)
		return;
	if (!config && was_starting && ++k.k_start_failures >= MAX_START_FAILURES) {
		free(k.k_dead_reason);
		k.k_dead_reason = xasprintf("kernel failed to start: %s", why);
		log_err("context %s: %s", px->px_id, k.k_dead_reason);
		tell(KEV_STATE, k.k_dead_reason, NULL);
		return;
	}
	if (kernel_start() < 0) {
		tell(KEV_STATE, k.k_dead_reason, NULL);
		return;
	}
	tell(KEV_STATE, why, NULL);
}

static void
kernel_reaped(int status)
{
	char *why = describe_status(sandbox_status(box, status, k.k_proc.kp_shown));

	sandbox_reaped(box);
	k.k_proc.kp_shown = 0;
	log_warn("context %s: %s", px->px_id, why);
	k.k_proc.kp_pid = 0;
	respawn(why);
	free(why);
}

/* Pings per death time: at least four, at most one every HB_EVERY_MS. */
static uint64_t
hb_every(void)
{
	uint64_t every = px->px_hb_dead_ms / 4;

	return every > HB_EVERY_MS ? HB_EVERY_MS : every < 50 ? 50 : every;
}

void
kernel_tick(uint64_t now)
{
	log_limit_flush(&k.k_log, now);
	if (k.k_start_wait) {
		/* the broker hears of it when it is ready (its pid too), or dead */
		if (kernel_start() < 0)
			tell(KEV_STATE, k.k_dead_reason, NULL);
		return;
	}
	if (k.k_state == KS_STARTING) {
		/* forward comparisons: a restart this tick stamps a time after now */
		if (now > k.k_started_at + KERNEL_START_MS) {
			respawn("kernel did not answer kernel_info in time");
			return;
		}
		set_ready(); /* when only the network was missing */
		if (k.k_state != KS_STARTING)
			return;
		/* slow joiner: ask again until iopub shows it is subscribed */
		if (k.k_kinfo_reply && !k.k_iopub_seen &&
		    now >= k.k_kinfo_at + KINFO_RESEND_MS) {
			kernel_probe(k.k_kinfo_id);
			k.k_kinfo_at = now;
		}
		return;
	}
	if (k.k_state == KS_DEAD || !k.k_sock[KSOCK_HB])
		return;
	if (k.k_iopub_rejoin && now >= k.k_kinfo_at + KINFO_RESEND_MS) {
		kernel_probe(k.k_kinfo_id);
		k.k_kinfo_at = now;
	}
	/*
	 * Heartbeat, once per period: the kernel's hb thread echoes even while
	 * code runs. Its pongs are read by the loop (kernel_on_pong).
	 */
	if (now < k.k_hb_sent + hb_every())
		return;
	if (now > k.k_hb_ok + px->px_hb_dead_ms) {
		/* the kernel itself, not its box's init */
		char state = procinfo_state(kernel_pid_shown());
		if (k.k_state == KS_BUSY && state && !strchr("TtZX", state)) {
			/*
			 * Busy and its process runs: IRkernel answers heartbeats only
			 * between requests. The code is alive; the unit's timeout, a
			 * cancel or the process's death ends it, not the heartbeat.
			 */
			log_debug("context %s: kernel busy, no heartbeat for %llu ms, process "
				  "state %c: alive", px->px_id,
				  (unsigned long long)(now - k.k_hb_ok), state);
			k.k_hb_ok = now;
		} else {
			log_warn("context %s: kernel missed heartbeats for %llu ms (%s, process "
				 "state %c)", px->px_id, (unsigned long long)(now - k.k_hb_ok),
				 k.k_state == KS_BUSY ? "busy" : "idle", state ? state : '?');
			respawn(state == 'T' || state == 't'
					? "kernel stopped answering heartbeats (its process is stopped)"
					: "kernel stopped answering heartbeats");
			return;
		}
	}
	zmtp_send(k.k_sock[KSOCK_HB], &(struct wire_frame){"ping", 4}, 1);
	k.k_hb_sent = now;
}

int
kernel_execute(const char *code, bool silent, char msgid[40])
{
	json_t *c = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent",
			      silent, "store_history", !silent, "user_expressions",
			      "allow_stdin", 0, "stop_on_error", 0);

	if (!c)
		return -EINVAL; /* code is not valid UTF-8 */
	return wire_send(k.k_sock[KSOCK_SHELL], k.k_key, k.k_session, "execute_request", c,
			 msgid);
}

int
kernel_probe(char msgid[40])
{
	return wire_send(k.k_sock[KSOCK_SHELL], k.k_key, k.k_session, "kernel_info_request",
			 json_object(), msgid);
}

/* What becomes of the units is the caller's: queued ones run on the new kernel. */
void
kernel_restart(const char *why)
{
	log_info("context %s: restarting kernel (%s)", px->px_id, why);
	free(k.k_dead_reason); /* a restart is a new chance */
	k.k_dead_reason = NULL;
	kernel_stop();
	k.k_start_failures = 0;
	kconfig_reset(); /* the configuration is read again */
	if (kernel_start() < 0) {
		tell(KEV_LOST, k.k_dead_reason ? k.k_dead_reason : "kernel could not be started",
		     NULL);
		tell(KEV_STATE, k.k_dead_reason, NULL);
		return;
	}
	tell(KEV_STATE, why, NULL);
}

/*
 * The next message on one of the kernel's sockets: 0 with *jm, 1 for a
 * heartbeat's pong (nothing to hand on), -EAGAIN when it holds none, or
 * another -errno for a message dropped (logged; -E2BIG: over the limits).
 */
int
kernel_recv(enum ksock i, struct jmsg *jm)
{
	int e;

	if (i == KSOCK_HB) { /* any echo is a pong */
		const struct wire_frame *f;
		size_t n;
		if ((e = zmtp_recv(k.k_sock[i], &f, &n)) == -EAGAIN)
			return e;
		k.k_hb_ok = now_ms();
		return 1;
	}
	if ((e = wire_recv(k.k_sock[i], k.k_key, jm)) == -EAGAIN)
		return e;
	if (i == KSOCK_IOPUB)
		k.k_iopub_at = now_ms();
	if (e < 0) {
		static const char *const name[KSOCK_N] = {"iopub", "shell", "stdin", "control",
							  "heartbeat"};
		char why[64];
		if (e == -E2BIG)
			snprintf(why, sizeof(why), "over %d frames or %llu MiB", ZMTP_MAX_FRAMES,
				 (unsigned long long)(ZMTP_MAX_BYTES >> 20));
		else
			snprintf(why, sizeof(why), "%s", e == -EPERM ? "bad signature" : strerror(-e));
		log_limited(&k.k_log, now_ms(), LOG_WARN,
			    "context %s: %s message from kernel dropped: %s", px->px_id, name[i],
			    why);
	}
	return e;
}

/* A message kernel_recv gave: control's (interrupt_reply) is read only to keep it empty. */
void
kernel_on_msg(enum ksock i, struct jmsg *jm)
{
	if (i == KSOCK_IOPUB)
		kernel_on_iopub(jm);
	else if (i == KSOCK_STDIN)
		kernel_on_stdin(jm);
	else if (i == KSOCK_SHELL)
		kernel_on_shell(jm);
}

/* A child ended: true if it was the kernel (or its box's init). */
bool
kernel_reap(pid_t pid, int status)
{
	if (pid != k.k_proc.kp_pid)
		return false;
	kernel_reaped(status);
	return true;
}

/* The box forked from the template ended (its pidfd): not ours to kill or reap. */
void
kernel_box_ended(void)
{
	if (box->bx_pidfd < 0)
		return;
	k.k_proc.kp_pid = 0;
	kernel_reaped(SIGKILL); /* the init's report, if any, says better */
}

/* The proxy is stopping: a kernel that dies now is not started again. */
void
kernel_no_respawn(void)
{
	k.k_no_respawn = true;
}

struct zmtp *
kernel_sock(enum ksock i)
{
	return k.k_sock[i];
}

/* Bumped for every socket made or closed: a loop reading a socket stops when it moves. */
unsigned
kernel_gen(void)
{
	return k.k_gen;
}

void
kernel_gen_bump(void)
{
	k.k_gen++;
}

enum kstate
kernel_state(void)
{
	return k.k_state;
}

/* Idle, with iopub subscribed: the next unit may be sent. */
bool
kernel_can_run(void)
{
	return k.k_state == KS_IDLE && !k.k_iopub_rejoin;
}

/* A unit was sent (busy) or has ended (idle): admit.c's. */
void
kernel_set_busy(bool busy)
{
	k.k_state = busy ? KS_BUSY : KS_IDLE;
}

/* Why the kernel could not be started, or NULL. */
const char *
kernel_dead_reason(void)
{
	return k.k_dead_reason;
}

uint64_t
kernel_iopub_at(void)
{
	return k.k_iopub_at;
}
