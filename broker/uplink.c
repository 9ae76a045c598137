/*
 * uplink.c — the broker's side of the boxes' shared way out: one
 * `sandcell-proxy --uplink-serve` (proxy/uplink.c) per broker, whose network
 * namespace every root box is linked to (proxy/boxlink.c), and whose one
 * pasta serves them all. Started before any context, waited for until its
 * namespace and rules are set (its fd 3 says so), given to each proxy as
 * --uplink PID. If it ends, contexts made before it ended have no way out
 * (said), and another is started for the contexts to come; if none can be
 * started, new boxes get a pasta of their own, as without it.
 *
 * It does not die with the broker: a broker stopped under --keep-contexts
 * leaves it to the kept boxes, and the next broker of the run dir adopts it
 * (<run dir>/uplink.pid, checked against the process). A stop that ends the
 * contexts ends it too.
 *
 * Only for a root broker's boxes with outbound network; a rootless broker's
 * boxes keep a pasta each (their namespaces are in user namespaces of their
 * own, which the broker cannot link).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker.h"

#define UPLINK_READY_MS 5000 /* its namespace, pasta and rules: ~50 ms */
#define UPLINK_BACKOFF_MS 5000

static pid_t pid;
static unsigned net_uid; /* the boxes' shared network uid (boxuid.c's): pasta's */
static bool adopted;     /* a broker's before us: not our child */
static uint64_t respawn_at;
static uint64_t since; /* when the uplink in use started or was adopted (now_ms) */

static char *
pid_file(void)
{
	return xasprintf("%s/uplink.pid", cf->cf_run_dir);
}

/* The uplink a broker of this run dir left (its pid file), if it still runs; 0: none. */
static pid_t
left(void)
{
	char *path = pid_file(), cmd[4096], *want;
	int fd, p = 0;
	ssize_t n = 0;
	FILE *f = fopen(path, "re");
	struct stat st;

	free(path);
	if (!f)
		return 0;
	if (fscanf(f, "%d", &p) != 1)
		p = 0;
	fclose(f);
	path = xasprintf("/proc/%d/cmdline", p);
	if (p > 0 && (fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, cmd, sizeof(cmd) - 1);
		close(fd);
	}
	free(path);
	path = xasprintf("/proc/%d", p);
	want = xasprintf("%c--run-dir%c%s%c", 0, 0, cf->cf_run_dir, 0);
	bool ours = n > 0 && stat(path, &st) == 0 && st.st_uid == 0 &&
	            memmem(cmd, (size_t)n, "\0--uplink-serve\0", 16) &&
	            memmem(cmd, (size_t)n, want, strlen(cf->cf_run_dir) + 12);
	free(path);
	free(want);
	return ours ? p : 0;
}

/* Whether this broker's boxes go out through an uplink. */
static bool
wanted(void)
{
	return cf->cf_sandbox && geteuid() == 0 && !boxnons_on() &&
	       !strcmp(cf->cf_kernel_network, "outbound");
}

static void
spawn(void)
{
	char uid[16];
	int ready[2];
	char c;
	sigset_t none;
	pid_t p;

	respawn_at = 0;
	snprintf(uid, sizeof(uid), "%u", net_uid);
	if (pipe2(ready, O_CLOEXEC) < 0 || (p = fork()) < 0) {
		log_err("uplink: %s: boxes get a pasta each", strerror(errno));
		return;
	}
	if (p == 0) {
		const char *argv[] = {
		    cf->cf_proxy_bin, "--uplink-serve",      "--run-dir",
		    cf->cf_run_dir,   "--net-uid",           uid,
		    "--log-level",         cf->cf_log_level, NULL};
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		setsid();
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (fd >= 0)
			dup2(fd, 0);
		dup2(2, 1);
		dup2(ready[1], 3);
		syscall(SYS_close_range, 4, ~0U, 0);
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	close(ready[1]);
	struct pollfd pf = {.fd = ready[0], .events = POLLIN};
	if (poll(&pf, 1, UPLINK_READY_MS) == 1 && read(ready[0], &c, 1) == 1) {
		char *path = pid_file();
		FILE *f = fopen(path, "we");
		pid = p;
		adopted = false;
		since = now_ms();
		bool ok = f && fprintf(f, "%d\n", (int)p) > 0;
		if (f && fclose(f) != 0)
			ok = false;
		if (!ok)
			log_warn("uplink: %s: a broker restarted under --keep-contexts "
			         "would not "
			         "find it",
			         path);
		free(path);
		log_info("uplink: the boxes' way out (pid %d, one pasta for all)",
		         (int)p);
	} else {
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
		respawn_at = now_ms() + UPLINK_BACKOFF_MS;
		log_err("uplink: did not start (its log says why): new boxes get a pasta "
		        "each");
	}
	close(ready[0]);
}

/* At start, before any context; uid: the boxes' shared network uid. */
void
uplink_start(unsigned uid)
{
	if (!wanted() || !(net_uid = uid))
		return;
	if ((pid = left())) {
		adopted = true;
		since = now_ms();
		log_info("uplink: the one a broker before us left (pid %d), adopted",
		         (int)pid);
		return;
	}
	spawn();
}

/* The uplink's pid for a proxy's --uplink; 0: none. */
pid_t
uplink_pid(void)
{
	return pid;
}

/*
 * When the uplink in use came (now_ms); 0: none yet. A warm box older
 * than it was linked to one that ended (pool.c does not hand it out).
 */
uint64_t
uplink_since(void)
{
	return since;
}

/* Whether p was the uplink; if so, another is started after a pause. */
bool
uplink_reaped(pid_t p, int status)
{
	if (!pid || p != pid)
		return false;
	pid = 0;
	if (lifecycle_quitting())
		return true;
	respawn_at = now_ms() + UPLINK_BACKOFF_MS;
	log_err(
	    "uplink: pid %d ended (status %d): the boxes made before have no way out; "
	    "new boxes get a pasta each until another uplink starts",
	    (int)p, status);
	return true;
}

void
uplink_tick(uint64_t now)
{
	if (pid && adopted && kill(pid, 0) < 0) {
		log_err("uplink: pid %d (adopted) ended: the boxes made before have no "
		        "way out",
		        (int)pid);
		pid = 0;
		respawn_at = now;
	}
	if (!pid && respawn_at && now >= respawn_at && !lifecycle_stopping())
		spawn();
}

/* A stop that ended the contexts: the uplink too. */
void
uplink_stop(void)
{
	char *path = pid_file();

	if (pid > 0) {
		kill(pid, SIGKILL);
		if (!adopted)
			waitpid(pid, NULL, 0);
		pid = 0;
	}
	unlink(path);
	free(path);
}
