/*
 * kernel.c — one Jupyter kernel's life: spawn in its own session with
 * PR_SET_PDEATHSIG (what it is started with is launch.c's), ZeroMQ sockets,
 * the kernel_info handshake (which also beats the iopub slow-joiner race),
 * interrupts, heartbeat, death and restart.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <grp.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <sodium.h>

#include "proxy.h"

#define HB_EVERY_MS 2000
#define MAX_START_FAILURES 3

/*
 * A connection to one of the kernel's sockets, made before the kernel binds
 * (zmtp.c tries again until it can): nothing it says at start-up is lost.
 * Both DEALERs carry the session as identity: the kernel's input_request,
 * sent to the shell client's, must reach our stdin socket.
 */
static struct zmtp *
zsock(struct proxy *px, enum zmtp_type type, const char *endpoint)
{
	px->px_zgen++;
	return zmtp_open(type, endpoint, type == ZMTP_DEALER ? px->px_session : NULL);
}

static void
close_sockets(struct proxy *px)
{
	struct zmtp **socks[5] = {&px->px_shell, &px->px_iopub, &px->px_control, &px->px_hb,
				  &px->px_stdin};

	for (int i = 0; i < 5; i++) {
		zmtp_close(*socks[i]);
		*socks[i] = NULL;
	}
	px->px_zgen++;
	/* ipc sockets by path (an unboxed kernel's; a box's are abstract) */
	for (int i = 1; px->px_kchan[0] == '/' && i <= 5; i++) {
		char *p = xasprintf("%s-%d", px->px_kchan, i);
		unlink(p); /* kernels leave their ipc files behind */
		free(p);
	}
}

/* Why the kernel could not be started: logged, and kept as px_dead_reason. */
static void __attribute__((format(printf, 2, 3)))
start_failed(struct proxy *px, const char *fmt, ...)
{
	char why[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	free(px->px_dead_reason);
	px->px_dead_reason = xasprintf("kernel %s could not be started: %s",
				       px->px_ks->ks_name, why);
	log_err("context %s: %s", px->px_id, px->px_dead_reason);
}

/* The kernel's process, in its box or not: 0 with px_kpid set, or -errno. */
static int
spawn(struct proxy *px, const char *exe, char **argv, char **envp)
{
	int rc;

	if (!px->px_box.bx_on)
		return launch_unboxed(px, exe, argv, envp);
	/* forked from the template when there is one; cold otherwise */
	if (template_spawn(px, exe, argv, envp) == 0)
		return 0;
	if ((rc = sandbox_spawn(px, exe, argv, envp)) < 0)
		start_failed(px, "the sandbox did not start it: %s", strerror(-rc));
	return rc;
}

static int
kernel_launch(struct proxy *px)
{
	char conn[PATH_MAX], ep[5][EP_MAX], *exe = NULL;
	char **argv = NULL, **envp = NULL;
	unsigned char key[32];
	int ports[5], rc;

	randombytes_buf(key, sizeof(key));
	sodium_bin2hex(px->px_key, sizeof(px->px_key), key, sizeof(key));
	uuid_v4(px->px_session);
	snprintf(conn, sizeof(conn), "%s/kernel.json", px->px_kdir);
	if ((rc = launch_connection_file(px, conn, ports, ep)) < 0) {
		start_failed(px, "write %s: %s", conn, strerror(-rc));
		return rc;
	}
	px->px_shell = zsock(px, ZMTP_DEALER, ep[0]);
	px->px_iopub = zsock(px, ZMTP_SUB, ep[1]);
	px->px_control = zsock(px, ZMTP_DEALER, ep[3]);
	px->px_hb = zsock(px, ZMTP_REQ, ep[4]);
	px->px_stdin = zsock(px, ZMTP_DEALER, ep[2]);
	if ((rc = launch_dirs(px)) < 0) {
		start_failed(px, "its files in %s: %s", px->px_kdir, strerror(-rc));
		goto err;
	}
	/* the kernel's own dir is BOX_KDIR in its box */
	argv = launch_argv(px, px->px_box.bx_on ? BOX_KDIR "/kernel.json" : conn);
	exe = launch_which(argv[0]);
	envp = launch_env(px);
	if ((rc = limits_prepare(&px->px_box)) < 0) {
		start_failed(px, "its cgroup: %s", strerror(-rc));
		goto err;
	}
	if ((rc = spawn(px, exe, argv, envp)) < 0)
		goto err;
	px->px_kstate = KS_STARTING;
	px->px_kstarted_at = now_ms();
	px->px_kinfo_reply = px->px_iopub_seen = px->px_iopub_rejoin = false;
	px->px_hb_sent = px->px_hb_ok = px->px_kstarted_at;
	log_info("context %s: kernel %s started%s, pid %d", px->px_id, px->px_ks->ks_name,
		 px->px_box.bx_pidfd >= 0 ? " from the template" : "",
		 (int)(px->px_kshown ? px->px_kshown : px->px_kpid));
	if ((rc = kernel_probe(px, px->px_kinfo_id)) < 0) {
		/* without it the kernel is never found ready */
		log_err("kernel %s: send kernel_info_request: %s", px->px_ks->ks_name,
			strerror(-rc));
		kernel_stop(px);
		goto out;
	}
	px->px_kinfo_at = now_ms();
	goto out;
err:
	close_sockets(px);
out:
	launch_free_strv(argv);
	launch_free_strv(envp);
	free(exe);
	return rc;
}

/*
 * Starts the kernel when a start slot is free (startgate.c); until then it
 * is starting, and kernel_tick tries again.
 */
int
kernel_start(struct proxy *px)
{
	int rc;

	px->px_kstate = KS_STARTING;
	if (!startgate_take(px)) {
		if (!px->px_start_wait)
			log_info("context %s: kernel %s waits for a start slot (%d start at once)",
				 px->px_id, px->px_ks->ks_name, px->px_max_starting);
		px->px_start_wait = true;
		return 0;
	}
	px->px_start_wait = false;
	if ((rc = kernel_launch(px)) < 0)
		startgate_give(px);
	return rc;
}

/* Kills the kernel's whole session and reaps it. */
void
kernel_stop(struct proxy *px)
{
	startgate_give(px);
	px->px_start_wait = false;
	if (px->px_box.bx_pidfd >= 0) {
		template_kill(px); /* not our child: its pidfd, no waitpid */
		px->px_kpid = 0;
	} else if (px->px_kpid > 0) {
		killpg(px->px_kpid, SIGKILL);
		kill(px->px_kpid, SIGKILL);
		waitpid(px->px_kpid, NULL, 0);
		px->px_kpid = 0;
	}
	sandbox_reaped(px);
	close_sockets(px);
	char *conn = xasprintf("%s/kernel.json", px->px_kdir);
	unlink(conn);
	free(conn);
	px->px_kstate = KS_DEAD;
}

/*
 * iopub went silent after a reply: its connection is made again (the loop
 * sees its fd change and watches the new one).
 */
void
kernel_iopub_reconnect(struct proxy *px)
{
	if (!px->px_iopub)
		return;
	zmtp_reconnect(px->px_iopub);
	log_warn("context %s: iopub connected again", px->px_id);
	/*
	 * Slow joiner: what the kernel publishes before the new subscription is in
	 * place is lost, so the next unit waits for a status on it (kernel_info is
	 * asked until one comes, as at start).
	 */
	px->px_iopub_rejoin = true;
	kernel_probe(px, px->px_kinfo_id);
	px->px_kinfo_at = now_ms();
}

/* /proc/PID/FILE into buf (NUL-terminated); its length, or -1 if unreadable. */
static ssize_t
proc_read(pid_t pid, const char *file, char *buf, size_t size)
{
	char path[64];
	ssize_t n;
	int fd;

	if (pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return n;
}

/* /proc/PID/stat from its third field (the state) on, or NULL if unreadable. */
static const char *
proc_stat(pid_t pid, char *buf, size_t size)
{
	char *p;

	if (proc_read(pid, "stat", buf, size) < 0)
		return NULL;
	/* "pid (comm) S ...": comm may hold spaces and parentheses */
	if (!(p = strrchr(buf, ')')) || p[1] != ' ')
		return NULL;
	return p + 2;
}

/* The state letter of /proc/PID/stat (R, S, D, T, Z...), or 0 if unreadable. */
static char
proc_state(pid_t pid)
{
	char buf[512];
	const char *p = proc_stat(pid, buf, sizeof(buf));

	return p ? p[0] : 0;
}

void
kernel_interrupt(struct proxy *px)
{
	if (px->px_kpid <= 0)
		return;
	if (px->px_ks->ks_interrupt_msg)
		wire_send(px->px_control, px->px_key, px->px_session, "interrupt_request",
			  json_object(), NULL);
	else if (killpg(px->px_kpid, SIGINT) < 0) /* the box's init ignores it */
		kill(px->px_kpid, SIGINT);
	log_info("context %s: interrupt sent (%s)", px->px_id,
		 px->px_ks->ks_interrupt_msg ? "message" : "SIGINT");
}

/* The kernel process itself: in a box, not its init. */
static pid_t
kernel_pid(struct proxy *px)
{
	return px->px_kshown > 0 ? px->px_kshown : px->px_kpid;
}

/* Whether the process has a handler for sig (SigCgt of /proc/PID/status). */
static bool
proc_catches(pid_t pid, int sig)
{
	char buf[2048];
	const char *p;
	unsigned long long mask;

	if (proc_read(pid, "status", buf, sizeof(buf)) < 0 || !(p = strstr(buf, "\nSigCgt:")) ||
	    sscanf(p + 8, "%llx", &mask) != 1)
		return false;
	return mask >> (sig - 1) & 1;
}

/*
 * Sends the kernel's abort signal (ks_abort_signal), which ends what the
 * running code awaits, to the kernel process alone (its group holds the
 * code's own children, which the signal is not for), and only once its
 * listener is there: a kernel that does not catch it gets none. -1 if
 * none was sent.
 */
int
kernel_abort(struct proxy *px)
{
	int sig = px->px_ks->ks_abort_signal;
	pid_t pid = kernel_pid(px);

	if (!sig || !proc_catches(pid, sig))
		return -1;
	if (kill(pid, sig) < 0) {
		log_warn("context %s: kill %d SIG%s: %s", px->px_id, (int)pid, sigabbrev_np(sig),
			 strerror(errno));
		return -1;
	}
	log_info("context %s: abort signal sent (SIG%s)", px->px_id, sigabbrev_np(sig));
	return 0;
}

/* CPU time the kernel process has used (all its threads), in ms; -1 if unknown. */
long
kernel_cpu_ms(struct proxy *px)
{
	char buf[1024];
	const char *p = proc_stat(kernel_pid(px), buf, sizeof(buf));
	unsigned long long utime, stime;
	long hz = sysconf(_SC_CLK_TCK);

	/* from the state (field 3) on: utime and stime are fields 14 and 15 */
	if (!p || hz <= 0 ||
	    sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
		   &stime) != 2)
		return -1;
	return (long)((utime + stime) * 1000 / hz);
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
set_ready(struct proxy *px)
{
	if (px->px_kstate != KS_STARTING || !px->px_kinfo_reply || !px->px_iopub_seen)
		return;
	/* its code may want the network at once: not ready before the box's way out is */
	if (!boxnet_ready(&px->px_box, px->px_kstarted_at))
		return;
	px->px_kstate = KS_IDLE;
	px->px_start_failures = 0;
	px->px_hb_sent = px->px_hb_ok = now_ms(); /* start-up time is not silence */
	if (!strcmp(px->px_ks->ks_lang, "r") &&
	    kernel_execute(px, R_INTERRUPT_GUARD, true, NULL) < 0)
		log_warn("context %s: could not send R's interrupt guard", px->px_id);
	/* started in its own dir (launch_start_dir): to its cwd, before any unit */
	if (px->px_ks->ks_config_in_cwd) {
		char *cd = envset_chdir(px->px_ks->ks_lang, px->px_cwd);
		if (!cd || kernel_execute(px, cd, true, NULL) < 0)
			log_warn("context %s: could not move the kernel to %s", px->px_id, px->px_cwd);
		free(cd);
	}
	/* the fence once before the first unit too: what it installs (Deno's abort
	 * listener) is there when the first unit runs */
	if (px->px_ks->ks_fence && kernel_execute(px, px->px_ks->ks_fence, true, NULL) < 0)
		log_warn("context %s: could not send the kernel's fence", px->px_id);
	log_info("context %s: kernel %s ready in %llu ms", px->px_id, px->px_ks->ks_name,
		 (unsigned long long)(now_ms() - px->px_kstarted_at));
	startgate_give(px); /* after the line: the log never shows more starting than slots */
	ipc_state(px, NULL);
	if (px->px_restart_pending) {
		struct msg m;
		msg_init(&m, MSG_OK);
		msg_set_u64(&m, F_REQ, px->px_restart_req);
		ipc_send(px, &m);
		px->px_restart_pending = false;
	}
	admit_next(px);
}

/* A message answering another client's request (another session) is not ours. */
static bool
foreign(struct proxy *px, struct jmsg *jm)
{
	const char *s = jm->jm_session;

	if (!s || !*s || !strcmp(s, px->px_session))
		return false;
	log_limited(&px->px_klog, now_ms(), LOG_WARN,
		    "context %s: %s message of another session dropped", px->px_id, jm->jm_type);
	return true;
}

void
kernel_on_shell(struct proxy *px, struct jmsg *jm)
{
	if (foreign(px, jm))
		return;
	if (!strcmp(jm->jm_type, "kernel_info_reply")) {
		px->px_kinfo_reply = true;
		set_ready(px);
		admit_on_probe(px, jm);
	} else if (!strcmp(jm->jm_type, "execute_reply")) {
		admit_on_reply(px, jm);
	}
}

void
kernel_on_iopub(struct proxy *px, struct jmsg *jm)
{
	if (foreign(px, jm))
		return;
	if (!strcmp(jm->jm_type, "status")) {
		px->px_iopub_seen = true;
		set_ready(px);
		if (px->px_iopub_rejoin) {
			px->px_iopub_rejoin = false;
			admit_next(px);
		}
	}
	admit_on_iopub(px, jm);
}

/*
 * Nobody can type into a context: a kernel that asks for input anyway
 * (IRkernel's readline() ignores allow_stdin) gets an empty line at once,
 * as R's readline() returns in non-interactive use, instead of waiting
 * forever.
 */
void
kernel_on_stdin(struct proxy *px, struct jmsg *jm)
{
	int rc;

	if (strcmp(jm->jm_type, "input_request"))
		return;
	log_debug("context %s: input_request answered with an empty line", px->px_id);
	if ((rc = wire_send(px->px_stdin, px->px_key, px->px_session, "input_reply",
			    json_pack("{s:s}", "value", ""), NULL)) < 0)
		log_warn("context %s: send input_reply: %s", px->px_id, strerror(-rc));
}

static char *
describe_status(struct proxy *px, int status)
{
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && limits_oom_killed(&px->px_box))
		return xasprintf("kernel was killed: out of memory (limit %llu MB)",
				 (unsigned long long)(px->px_box.bx_mem >> 20));
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
		return xasprintf("kernel was killed: CPU time limit of %llu s reached",
				 (unsigned long long)px->px_box.bx_cpu);
	if (WIFSIGNALED(status))
		return xasprintf("kernel was killed by signal %d (%s)", WTERMSIG(status),
				 strsignal(WTERMSIG(status)));
	return xasprintf("kernel exited with status %d", WEXITSTATUS(status));
}

/* Restarts after a death; gives up after repeated failures to start. */
static void
respawn(struct proxy *px, const char *why)
{
	bool was_starting = px->px_kstate == KS_STARTING;

	admit_fail_all(px, "KernelDied", why);
	kernel_stop(px);
	if (px->px_quit)
		return;
	if (was_starting && ++px->px_start_failures >= MAX_START_FAILURES) {
		free(px->px_dead_reason);
		px->px_dead_reason = xasprintf("kernel failed to start: %s", why);
		log_err("context %s: %s", px->px_id, px->px_dead_reason);
		ipc_state(px, px->px_dead_reason);
		return;
	}
	if (kernel_start(px) < 0) {
		px->px_kstate = KS_DEAD;
		ipc_state(px, px->px_dead_reason);
		return;
	}
	ipc_state(px, why);
}

void
kernel_reaped(struct proxy *px, int status)
{
	char *why = describe_status(px, sandbox_status(px, status));

	sandbox_reaped(px);
	log_warn("context %s: %s", px->px_id, why);
	px->px_kpid = 0;
	respawn(px, why);
	free(why);
}

/* Pings per death time: at least four, at most one every HB_EVERY_MS. */
static uint64_t
hb_every(struct proxy *px)
{
	uint64_t every = px->px_hb_dead_ms / 4;

	return every > HB_EVERY_MS ? HB_EVERY_MS : every < 50 ? 50 : every;
}

void
kernel_tick(struct proxy *px, uint64_t now)
{
	if (px->px_start_wait) {
		/* the broker hears of it when it is ready (its pid too), or dead */
		if (kernel_start(px) < 0) {
			px->px_kstate = KS_DEAD;
			ipc_state(px, px->px_dead_reason);
		}
		return;
	}
	if (px->px_kstate == KS_STARTING) {
		/* forward comparisons: a restart this tick stamps a time after now */
		if (now > px->px_kstarted_at + KERNEL_START_MS) {
			respawn(px, "kernel did not answer kernel_info in time");
			return;
		}
		set_ready(px); /* when only the network was missing */
		if (px->px_kstate != KS_STARTING)
			return;
		/* slow joiner: ask again until iopub shows it is subscribed */
		if (px->px_kinfo_reply && !px->px_iopub_seen &&
		    now >= px->px_kinfo_at + KINFO_RESEND_MS) {
			kernel_probe(px, px->px_kinfo_id);
			px->px_kinfo_at = now;
		}
		return;
	}
	if (px->px_kstate == KS_DEAD || !px->px_hb)
		return;
	if (px->px_iopub_rejoin && now >= px->px_kinfo_at + KINFO_RESEND_MS) {
		kernel_probe(px, px->px_kinfo_id);
		px->px_kinfo_at = now;
	}
	/*
	 * Heartbeat, once per period: the kernel's hb thread echoes even while
	 * code runs. Its pongs are read by the loop (kernel_on_pong).
	 */
	if (now < px->px_hb_sent + hb_every(px))
		return;
	if (now > px->px_hb_ok + px->px_hb_dead_ms) {
		/* the kernel itself, not its box's init */
		char state = proc_state(kernel_pid(px));
		if (px->px_run && state && !strchr("TtZX", state)) {
			/*
			 * Busy and its process runs: IRkernel answers heartbeats only
			 * between requests. The code is alive; the unit's timeout, a
			 * cancel or the process's death ends it, not the heartbeat.
			 */
			log_debug("context %s: kernel busy, no heartbeat for %llu ms, process "
				  "state %c: alive", px->px_id,
				  (unsigned long long)(now - px->px_hb_ok), state);
			px->px_hb_ok = now;
		} else {
			log_warn("context %s: kernel missed heartbeats for %llu ms (%s, process "
				 "state %c)", px->px_id, (unsigned long long)(now - px->px_hb_ok),
				 px->px_run ? "busy" : "idle", state ? state : '?');
			respawn(px, state == 'T' || state == 't'
					? "kernel stopped answering heartbeats (its process is stopped)"
					: "kernel stopped answering heartbeats");
			return;
		}
	}
	zmtp_send(px->px_hb, &(struct wire_frame){"ping", 4}, 1);
	px->px_hb_sent = now;
}

int
kernel_execute(struct proxy *px, const char *code, bool silent, char msgid[40])
{
	json_t *c = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent",
			      silent, "store_history", !silent, "user_expressions",
			      "allow_stdin", 0, "stop_on_error", 0);

	if (!c)
		return -EINVAL; /* code is not valid UTF-8 */
	return wire_send(px->px_shell, px->px_key, px->px_session, "execute_request", c,
			 msgid);
}

int
kernel_probe(struct proxy *px, char msgid[40])
{
	return wire_send(px->px_shell, px->px_key, px->px_session, "kernel_info_request",
			 json_object(), msgid);
}

/* What becomes of the units is the caller's: queued ones run on the new kernel. */
void
kernel_restart(struct proxy *px, const char *why)
{
	log_info("context %s: restarting kernel (%s)", px->px_id, why);
	kernel_stop(px);
	px->px_start_failures = 0;
	if (kernel_start(px) < 0) {
		px->px_kstate = KS_DEAD;
		admit_fail_all(px, "KernelDied",
			       px->px_dead_reason ? px->px_dead_reason
						  : "kernel could not be started");
		ipc_state(px, px->px_dead_reason);
		return;
	}
	ipc_state(px, why);
}
