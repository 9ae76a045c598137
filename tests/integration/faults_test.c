/*
 * faults_test.c — what a fault does not touch is not lost: kernel death,
 * proxy death, broker restart, graceful drain, memory limits, a kernel that
 * ignores SIGINT. Real processes are killed with real signals.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* no warm pool: restarts here go through the proxy, the path under test */
/* short interrupt grace: a kernel that ignores SIGINT is restarted after 1 s */
HARNESS_SHARED_BROKER("--no-default-context", "--env", "SC_GLOBAL=g", "--pool", "0",
		      "--interrupt-grace", "1");

#define URL test_url()

/* A private broker of one test, stopped even when an assertion fails. */
static struct broker priv;

static void
priv_stop(void)
{
	cr_expect_eq(broker_stop(&priv), 0, "sanitizer report in the broker log");
}

/* Code that prints once it runs: the test waits for that line, not a while. */
static const char *
started_code(const char *then)
{
	static char code[1024];

	snprintf(code, sizeof(code), "print('started', flush=True)\n%s", then);
	return code;
}

/*
 * Sends sig to the kernel of a fresh context (cwd /tmp, x set) while code runs
 * there, and checks that the execution ended with KernelDied naming why,
 * within max_ms, and that the context then runs on a fresh kernel with its
 * cwd and global env. Returns the context id.
 */
static char *
kernel_fault_mid_execution(int sig, const char *code, const char *why, double max_ms)
{
	char *id = context_new(URL, "python", "/tmp");
	struct bg b = {.base = URL};

	cr_assert_not_null(id);
	b.ctx = id;
	b.code = started_code(code);
	json_decref(run(URL, id, "x = 1"));
	pid_t kpid = context_pid(URL, id, "kernel_pid");
	cr_assert(kpid > 0);
	bg_start(&b);
	cr_assert_eq(bg_wait_stdout(&b, 10000), 0, "the code never started");
	double t0 = ms_now();
	kill(kpid, sig);
	bg_join(&b);
	double ended = ms_since(t0);
	cr_assert_str_eq(error_name(b.lines), "KernelDied");
	cr_assert(strstr(error_value(b.lines), why), "%s", error_value(b.lines));
	cr_assert_not_null(line_of(b.lines, "end_of_execution", 0));
	cr_assert(ended < max_ms, "stream ended %.0f ms after signal %d", ended, sig);
	json_decref(b.lines);

	/* same id, fresh kernel, cwd and global env re-applied */
	expect_stdout(URL, id,
		      "import os\nprint(os.getcwd(), os.environ['SC_GLOBAL'], 'x' in globals())",
		      "/tmp g False\n");
	cr_assert_neq(context_pid(URL, id, "kernel_pid"), kpid);
	cr_assert(kill(kpid, 0) < 0, "the old kernel %d was left behind", (int)kpid);
	return id;
}

/* Its death is seen at once: the heartbeat would find it only after 20 s. */
Test(faults, kernel_killed_mid_execution, .timeout = 90)
{
	free(kernel_fault_mid_execution(
	    SIGKILL, "import time\nprint('start', flush=True)\ntime.sleep(30)", "signal 9", 15000));
}

/*
 * A stopped kernel keeps its sockets open but stops answering heartbeats: it
 * is declared dead after 20 s without a pong (checked every 2 s).
 */
Test(faults, kernel_that_stops_answering_heartbeats_is_replaced, .timeout = 90)
{
	free(kernel_fault_mid_execution(SIGSTOP, "import time\ntime.sleep(120)", "heartbeat",
					40000));
}

Test(faults, kernel_exits_by_itself, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL);
	json_t *l = run(URL, id, "import os\nos._exit(3)");

	cr_assert_str_eq(error_name(l), "KernelDied");
	cr_assert(strstr(error_value(l), "status 3"), "%s", error_value(l));
	json_decref(l);
	expect_stdout(URL, id, "print('back')", "back\n");
	free(id);
}

Test(faults, queued_units_fail_with_the_kernel, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL);
	struct bg a = {.base = URL, .ctx = id, .code = "import time\ntime.sleep(30)"};
	struct bg q = {.base = URL, .ctx = id, .code = "print('queued')"};

	bg_start(&a);
	cr_assert_eq(wait_context_int(URL, id, "queue", 1, 10000), 0);
	bg_start(&q);
	cr_assert_eq(wait_context_int(URL, id, "queue", 2, 10000), 0);
	kill(context_pid(URL, id, "kernel_pid"), SIGKILL);
	bg_join(&a);
	bg_join(&q);
	cr_assert_str_eq(error_name(a.lines), "KernelDied");
	cr_assert_str_eq(error_name(q.lines), "KernelDied");
	cr_assert_eq(count_of(q.lines, "stdout"), 0);
	json_decref(a.lines);
	json_decref(q.lines);
	free(id);
}

Test(faults, proxy_killed_while_another_context_streams, .timeout = 90)
{
	char *victim = context_new(URL, "python", NULL), *other = context_new(URL, "python", NULL);
	struct bg v = {.base = URL, .ctx = victim};
	/* the other prints half its lines, then the rest once the victim's end is seen
	 * (proxy-lost-go in its cwd, 30 s at most) */
	struct bg o = {.base = URL,
		       .ctx = other,
		       .code = "import os, time\nfor i in range(10):\n    print(i, flush=True)\n"
			       "for _ in range(600):\n"
			       "    if os.path.exists('proxy-lost-go'): break\n    time.sleep(0.05)\n"
			       "for i in range(10, 20):\n    print(i, flush=True)"};
	char *ws = context_host_cwd(URL, other), go[300];
	cr_assert_not_null(ws);
	snprintf(go, sizeof(go), "%s/proxy-lost-go", ws);
	free(ws);
	unlink(go);

	v.code = started_code("import time\ntime.sleep(30)");
	json_decref(run(URL, victim, "lost = 1"));
	pid_t ppid = context_pid(URL, victim, "proxy_pid");
	cr_assert(ppid > 0);
	/* its own session: a terminal's Ctrl-C reaches the broker alone */
	cr_assert_eq(proc_stat_field(ppid, 6), ppid); /* session */
	bg_start(&v);
	bg_start(&o);
	cr_assert_eq(bg_wait_stdout(&v, 10000), 0, "the victim's code never started");
	cr_assert_eq(wait_context_int(URL, other, "queue", 1, 10000), 0);
	double t0 = ms_now();
	kill(ppid, SIGKILL);
	bg_join(&v);
	double noticed = ms_since(t0);
	FILE *g = fopen(go, "w");
	cr_assert_not_null(g, "%s", go);
	fclose(g);
	bg_join(&o);
	unlink(go);

	cr_assert_str_eq(error_name(v.lines), "ContextLost");
	cr_assert(strstr(error_value(v.lines), "state is lost"), "%s", error_value(v.lines));
	/* not noticed, the stream stays open until the client gives up (60 s) */
	cr_assert(noticed < 15000, "noticed after %.0f ms", noticed);
	/* the other context's stream is complete and in order */
	char *out = stdout_of(o.lines), want[128] = "";
	for (int i = 0; i < 20; i++)
		snprintf(want + strlen(want), sizeof(want) - strlen(want), "%d\n", i);
	cr_assert_str_eq(out, want);
	cr_assert_null(line_of(o.lines, "error", 0));
	free(out);
	json_decref(v.lines);
	json_decref(o.lines);

	/* respawned under the same id, with a fresh kernel */
	expect_stdout(URL, victim, "print('lost' in globals())", "False\n");
	pid_t respawned = context_pid(URL, victim, "proxy_pid");
	cr_assert_neq(respawned, ppid);
	cr_assert_eq(proc_stat_field(respawned, 6), respawned);
	free(victim);
	free(other);
}

/*
 * A proxy that keeps dying is not restarted for ever; its context then
 * answers at once: /execute, restart and interrupt fail with 503 naming why,
 * and delete removes it.
 */
static bool
context_dead(const char *id)
{
	json_t *j = context_get(URL, id);
	bool dead = j && !strcmp(json_string_value(json_object_get(j, "state")) ?: "", "dead");

	json_decref(j);
	return dead;
}

Test(faults, context_whose_proxy_keeps_dying_answers_at_once, .timeout = 120)
{
	char *id = context_new(URL, "python", NULL);
	char path[256];
	struct resp r;
	long st;

	cr_assert_not_null(id);
	for (int kills = 0; !context_dead(id); kills++) {
		pid_t ppid = context_pid(URL, id, "proxy_pid");
		cr_assert(kills < 20, "the proxy is respawned without end");
		if (ppid > 0)
			kill(ppid, SIGKILL);
		/* respawned (a new pid), or given up */
		double t0 = ms_now();
		pid_t now;
		while ((now = context_pid(URL, id, "proxy_pid")) == ppid && !context_dead(id))
			cr_assert(ms_since(t0) < 20000, "proxy %d neither respawned nor given up",
				  (int)ppid);
	}
	double t0 = ms_now();
	char *body = NULL;
	cr_assert(asprintf(&body, "{\"code\":\"1\",\"context_id\":\"%s\"}", id) > 0);
	cr_assert_null(execute(URL, body, &st, 30000));
	free(body);
	cr_assert_eq(st, 503);
	/* not parked until the client gives up (30 s) */
	cr_assert(ms_since(t0) < 15000, "answered after %.0f ms", ms_since(t0));
	snprintf(path, sizeof(path), "/contexts/%s/restart", id);
	cr_assert_eq(http(URL, "POST", path, NULL, &r, 10), 0);
	cr_assert_eq(r.r_status, 503);
	cr_assert(strstr(r.r_body, "keeps dying"), "%s", r.r_body);
	resp_free(&r);
	snprintf(path, sizeof(path), "/contexts/%s", id);
	cr_assert_eq(http(URL, "DELETE", path, NULL, &r, 10), 0);
	cr_assert(r.r_status == 200 || r.r_status == 204, "delete: %ld %s", r.r_status, r.r_body);
	resp_free(&r);
	cr_assert_eq(http(URL, "GET", path, NULL, &r, 10), 0);
	cr_assert_eq(r.r_status, 404);
	resp_free(&r);
	free(id);
}

Test(faults, broker_restart_keeps_contexts_and_state, .fini = priv_stop, .timeout = 120)
{
	struct broker *b = &priv;
	const char *args[] = {"--no-default-context", NULL};

	cr_assert_eq(broker_start(b, args), 0);
	char *id = context_new(b->b_url, "python", "/tmp");
	cr_assert_not_null(id);
	json_decref(run(b->b_url, id, "survivor = 'still here'"));
	pid_t kpid = context_pid(b->b_url, id, "kernel_pid");

	/* a stream open at the moment of the crash ends on the client side */
	struct bg open = {.base = b->b_url, .ctx = id};
	open.code = started_code("import time\ntime.sleep(5)");
	bg_start(&open);
	cr_assert_eq(bg_wait_stdout(&open, 10000), 0, "the code never started");
	double t0 = ms_now();
	kill(b->b_pid, SIGKILL);
	waitpid(b->b_pid, NULL, 0);
	bg_join(&open);
	double ended = ms_since(t0);
	/* its connection was closed on it (a socket held open elsewhere would keep
	 * it waiting until it gives up, after 60 s) */
	cr_assert_null(line_of(open.lines, "_client_timeout", 0),
		       "the open stream outlived the broker");
	cr_assert_null(line_of(open.lines, "end_of_execution", 0),
		       "the code ended before the broker was killed");
	cr_assert(ended < 15000, "the open stream ended %.0f ms after the broker died", ended);
	json_decref(open.lines);

	cr_assert_eq(broker_restart(b, args), 0);
	struct resp r;
	cr_assert_eq(http(b->b_url, "GET", "/contexts", NULL, &r, 5), 0);
	cr_assert(strstr(r.r_body, id), "context listed after restart: %s", r.r_body);
	resp_free(&r);
	expect_stdout(b->b_url, id, "print(survivor)", "still here\n");
	cr_assert_eq(context_pid(b->b_url, id, "kernel_pid"), kpid, "the same kernel");
	free(id);
}

/*
 * Under systemd the port is sandcell.socket's: the broker serves on the
 * socket it is passed (LISTEN_FDS), not on --listen, and its kernels never
 * see it. While the broker is down (killed here, as in a crash or between
 * the two halves of a restart) the port stays held, so code left running in
 * a context cannot bind it; a request sent meanwhile waits in the backlog
 * and the next broker answers it.
 */
Test(faults, a_passed_socket_keeps_the_port_across_a_restart, .fini = priv_stop,
     .timeout = 120)
{
	struct broker *b = &priv;
	const char *args[] = {"--no-default-context", "--pool", "0", NULL};
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char req[] = "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", buf[512];

	cr_assert(ls > 0 && bind(ls, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(ls, 64) == 0);
	cr_assert_eq(broker_start_on(b, ls, args), 0, "no broker on the passed socket");
	char *id = context_new(b->b_url, "python", "/tmp");
	cr_assert_not_null(id);
	char *out = run_stdout(b->b_url, id,
			       "import os\nprint(os.environ.get('LISTEN_FDS'), "
			       "os.environ.get('LISTEN_PID'))");
	cr_assert_str_eq(out, "None None\n", "the kernel saw systemd's variables");
	free(out);

	kill(b->b_pid, SIGKILL);
	waitpid(b->b_pid, NULL, 0);
	b->b_pid = 0;
	/* the broker is gone, the port is not free: a squatter cannot have it */
	int sq = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in held = {.sin_family = AF_INET, .sin_port = htons(b->b_port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	cr_assert(bind(sq, (struct sockaddr *)&held, sizeof(held)) < 0 && errno == EADDRINUSE,
		  "the port was free while the broker was down");
	close(sq);
	/* a client of that moment waits, and is answered after the restart */
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(connect(c, (struct sockaddr *)&held, sizeof(held)), 0);
	cr_assert_eq(send(c, req, strlen(req), 0), (ssize_t)strlen(req));
	cr_assert_eq(broker_restart(b, args), 0);
	struct timeval tv = {.tv_sec = 30};
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ssize_t n = recv(c, buf, sizeof(buf) - 1, MSG_WAITALL);
	cr_assert(n > 0, "the waiting client got no answer");
	buf[n] = '\0';
	cr_assert(!strncmp(buf, "HTTP/1.1 200", 12), "%s", buf);
	close(c);
	/* and the context lived through it */
	out = run_stdout(b->b_url, id, "print('here')");
	cr_assert_str_eq(out, "here\n");
	free(out);
	free(id);
	close(ls);
}

Test(faults, stale_context_dir_is_cleaned_not_trusted, .fini = priv_stop, .timeout = 60)
{
	struct broker *b = &priv;
	const char *args[] = {"--no-default-context", NULL};
	char dir[512], state[600];

	cr_assert_eq(broker_start(b, args), 0);
	cr_assert_eq(broker_stop(b), 0, "sanitizer report in the broker log");
	/* a dead proxy's leftovers: a state file naming a pid that is not ours */
	mkdir(b->b_run_dir, 0700);
	snprintf(dir, sizeof(dir), "%s/ctx", b->b_run_dir);
	mkdir(dir, 0700);
	snprintf(dir, sizeof(dir), "%s/ctx/0b5e3c7e-1d8a-4c0e-9f3a-2b6c4d8e0f1a", b->b_run_dir);
	mkdir(dir, 0700);
	snprintf(state, sizeof(state), "%s/state.json", dir);
	FILE *f = fopen(state, "w");
	fprintf(f, "{\"id\":\"0b5e3c7e-1d8a-4c0e-9f3a-2b6c4d8e0f1a\",\"language\":\"python\","
		   "\"cwd\":\"/\",\"pid\":1,\"default\":false}");
	fclose(f);
	cr_assert_eq(broker_restart(b, args), 0);
	struct resp r;
	cr_assert_eq(http(b->b_url, "GET", "/contexts", NULL, &r, 5), 0);
	cr_assert_str_eq(r.r_body, "[]");
	resp_free(&r);
	struct stat st;
	cr_assert(stat(dir, &st) < 0, "stale dir removed");
}

/*
 * The running execution goes on until the test has seen the drain (a file in
 * the workspace says so; 40 s at most), and the broker stops once it is over,
 * long before its grace of 60 s.
 */
Test(faults, sigterm_drains_running_executions, .fini = priv_stop, .timeout = 120)
{
	struct broker *b = &priv;
	const char *args[] = {"--grace", "60", NULL};
	char go[400], code[640];

	cr_assert_eq(broker_start(b, args), 0);
	/* the workspace: the kernel's cwd, <run dir>.work on the host */
	snprintf(go, sizeof(go), "%.300s.work/drained-go", b->b_run_dir);
	snprintf(code, sizeof(code),
		 "import os, time\nfor _ in range(800):\n    if os.path.exists('drained-go'): break\n"
		 "    time.sleep(0.05)\nprint('finished')");
	struct bg run1 = {.base = b->b_url};
	run1.code = started_code(code);
	bg_start(&run1);
	cr_assert_eq(bg_wait_stdout(&run1, 10000), 0, "the code never started");
	kill(b->b_pid, SIGTERM);
	cr_assert_eq(wait_metric(b->b_url, "sandcell_draining", 1, 15000), 0, "never draining");
	long st;
	json_t *refused = execute(b->b_url, "{\"code\":\"1\"}", &st, 5000);
	cr_assert_null(refused);
	cr_assert_eq(st, 503, "new executions are refused while draining");
	struct resp r;
	cr_assert_eq(http(b->b_url, "GET", "/ready", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 503, "not ready while draining: %s", r.r_body);
	resp_free(&r);
	FILE *f = fopen(go, "w");
	cr_assert_not_null(f, "%s: %s", go, strerror(errno));
	fclose(f);
	bg_join(&run1);
	char *out = stdout_of(run1.lines);
	cr_assert_str_eq(out, "started\nfinished\n", "the running execution completed");
	free(out);
	json_decref(run1.lines);
	int status = -1;
	/* not at the end of the grace, 60 s after SIGTERM */
	cr_assert_eq(wait_pid_exit(b->b_pid, &status, 20000), 0, "the broker stopped once drained");
	b->b_pid = 0;
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "a drained stop exits 0 (status 0x%x)", status);
}

/*
 * With SIGCHLD ignored (a starter may leave it so), the kernel reaps every
 * child itself and waitpid learns nothing: the broker took its sandbox
 * probe's end for a failure and refused to start. It takes SIGCHLD as its
 * own, starts, and sees a proxy die.
 */
Test(faults, a_broker_started_with_sigchld_ignored_starts_and_respawns_proxies,
     .fini = priv_stop, .timeout = 90)
{
	struct broker *b = &priv;
	const char *args[] = {"--no-default-context", "--pool", "0", NULL};

	signal(SIGCHLD, SIG_IGN); /* inherited by the broker */
	int started = broker_start(b, args);
	signal(SIGCHLD, SIG_DFL);
	cr_assert_eq(started, 0, "the broker did not start");
	char *id = context_new(b->b_url, "python", NULL);
	cr_assert_not_null(id);
	json_decref(run(b->b_url, id, "x = 1"));
	pid_t proxy = context_pid(b->b_url, id, "proxy_pid");
	cr_assert(proxy > 0);
	cr_assert_eq(kill(proxy, SIGKILL), 0);
	cr_assert_eq(wait_metric(b->b_url, "sandcell_proxy_restarts_total", 1, 10000), 0,
		     "the proxy's death was not seen");
	json_t *l = run(b->b_url, id, "41 + 1");
	cr_assert_str_eq(result_text(l), "42");
	json_decref(l);
	free(id);
}

/* Whether a process of this machine has an argument naming dir. */
static bool
something_runs_from(void *dir)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool found = false;

	while (d && !found && (de = readdir(d))) {
		char buf[8192];
		size_t n = proc_cmdline(atoi(de->d_name), buf, sizeof(buf));
		for (size_t i = 0; i < n && !found; i += strlen(buf + i) + 1)
			found = strstr(buf + i, dir) != NULL;
	}
	if (d)
		closedir(d);
	return found;
}

/*
 * A test that times out leaves nothing behind: its worker is killed before its
 * fixtures run, and a broker it started with --keep-contexts leaves its
 * context running. The runner's sweep (sweep.c) ends it, and removes its
 * cgroup, its uid's lease and its run dir.
 */
Test(faults, a_test_that_times_out_leaves_nothing_behind, .timeout = 120)
{
	char out[] = "/tmp/sandcell-probe.XXXXXX", exe[PATH_MAX], cmd[PATH_MAX + 300];
	char run_dir[256], id[64], path[600];
	unsigned uid = 0;
	int fd = mkstemp(out);
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	cr_assert(fd >= 0 && n > 0);
	close(fd);
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0'; /* the probe is built beside this binary */
	/* a runner of its own: not this worker's (criterion's BXFI_MAP), nor its broker's */
	snprintf(cmd, sizeof(cmd),
		 "env -u BXFI_MAP -u SANDCELL_TEST_URL -u SANDCELL_TEST_RUN_DIR -u SANDCELL_TEST_PID "
		 "-u SANDCELL_TEST_LOGS SANDCELL_PROBE_OUT=%s %s/timeout_probe --jobs 1 >/dev/null 2>&1",
		 out, exe);
	int st = system(cmd);
	FILE *f = fopen(out, "r");
	int got = f ? fscanf(f, "%255s %63s %u", run_dir, id, &uid) : 0;
	if (f)
		fclose(f);
	unlink(out);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "the probe's test did not fail (0x%x)", st);
	cr_assert_eq(got, 3, "the probe never had its context running");

	cr_assert(!something_runs_from(run_dir), "something still runs from %s", run_dir);
	cr_assert(access(run_dir, F_OK) != 0, "%s is left", run_dir);
	/* sandcell's own, or under its broker's parent (broker/bounds.c) */
	static const char *const cgs[] = {"/sys/fs/cgroup/pids/sandcell/%s%s",
					  "/sys/fs/cgroup/memory/sandcell/%s%s",
					  "/sys/fs/cgroup/sandcell/%s%s"};
	for (size_t i = 0; i < sizeof(cgs) / sizeof(cgs[0]); i++) {
		glob_t g;
		snprintf(path, sizeof(path), cgs[i], "", id);
		cr_assert(access(path, F_OK) != 0, "%s is left", path);
		snprintf(path, sizeof(path), cgs[i], "broker-*/", id);
		int left = glob(path, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
		cr_assert_eq(left, 0, "%s is left", left ? g.gl_pathv[0] : path);
		globfree(&g);
	}
	snprintf(path, sizeof(path), "/run/sandcell-uids/%u", uid);
	cr_assert(access(path, F_OK) != 0, "the lease of uid %u is left", uid);
}

Test(faults, sigterm_stops_at_the_grace_and_exits_0, .fini = priv_stop, .timeout = 90)
{
	struct broker *b = &priv;
	const char *args[] = {"--grace", "2", NULL};
	int status = -1;

	cr_assert_eq(broker_start(b, args), 0);
	struct bg run1 = {.base = b->b_url};
	run1.code = started_code("import time\ntime.sleep(60)");
	bg_start(&run1);
	cr_assert_eq(bg_wait_stdout(&run1, 10000), 0, "the code never started");
	double t0 = ms_now();
	kill(b->b_pid, SIGTERM);
	cr_assert_eq(wait_pid_exit(b->b_pid, &status, 20000), 0, "the broker never stopped");
	double took = ms_since(t0);
	b->b_pid = 0;
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "a stop at the end of the grace exits 0 (status 0x%x)", status);
	/* ignoring the grace, it would wait for the 60 s sleep */
	cr_assert(took >= 2000 && took < 15000, "stopped %.0f ms after SIGTERM, grace 2 s", took);
	bg_join(&run1);
	cr_assert_str_eq(error_name(run1.lines), "ServerStopping",
			 "the cut execution ends with an error line");
	json_decref(run1.lines);
}

Test(faults, memory_limit_kills_or_refuses_only_that_kernel, .fini = priv_stop, .timeout = 90)
{
	struct broker *b = &priv;
	const char *args[] = {"--no-default-context", "--kernel-memory", "209715200", NULL};

	cr_assert_eq(broker_start(b, args), 0);
	char *hog = context_new(b->b_url, "python", NULL);
	char *quiet = context_new(b->b_url, "python", NULL);
	cr_assert(hog && quiet);
	json_decref(run(b->b_url, quiet, "kept = 42"));
	json_t *l = run(b->b_url, hog, "x = bytearray(500 * 1024 * 1024)");
	const char *name = error_name(l);
	cr_assert(!strcmp(name, "MemoryError") || !strcmp(name, "KernelDied"),
		  "over the limit: %s", name);
	json_decref(l);
	/* the neighbour is untouched */
	expect_stdout(b->b_url, quiet, "print(kept)", "42\n");
	expect_stdout(b->b_url, hog, "print('alive')", "alive\n");
	free(hog);
	free(quiet);
}

/* With a cgroup the kernel over its limit is OOM-killed, alone. */
static char cgroup_dir[256];

static void
cgroup_stop(void)
{
	priv_stop();
	if (cgroup_dir[0])
		rmdir(cgroup_dir);
}

Test(faults, memory_limit_in_a_cgroup_kills_the_kernel_alone, .fini = cgroup_stop, .timeout = 90)
{
	struct broker *b = &priv;
	char *cg = cgroup_dir;
	size_t cgsz = sizeof(cgroup_dir);

	snprintf(cg, cgsz, "/sys/fs/cgroup/memory/sandcell-test-%d", (int)getpid());
	if (mkdir(cg, 0755) < 0) {
		snprintf(cg, cgsz, "/sys/fs/cgroup/sandcell-test-%d", (int)getpid());
		if (mkdir(cg, 0755) < 0) {
			cg[0] = '\0';
			cr_skip_test("no writable cgroup hierarchy here");
		}
	}
	const char *args[] = {"--no-default-context", "--kernel-memory", "209715200",
			      "--kernel-cgroup", cg, NULL};
	cr_assert_eq(broker_start(b, args), 0);
	char *hog = context_new(b->b_url, "python", NULL);
	/* bypass RLIMIT_DATA's refusal: touch memory page by page via mmap */
	json_t *l = run(b->b_url, hog,
			"import mmap\nm = mmap.mmap(-1, 600 * 1024 * 1024)\n"
			"for i in range(0, len(m), 4096): m[i] = 1");
	cr_assert_str_eq(error_name(l), "KernelDied", "%s", error_value(l));
	cr_assert(strstr(error_value(l), "out of memory"), "%s", error_value(l));
	json_decref(l);
	expect_stdout(b->b_url, hog, "print('alive')", "alive\n");
	free(hog);
}

/* b (a context of its own) runs code that ignores SIGINT and sleeps a minute; it has started. */
static void
sigint_ignorer_start(struct bg *b)
{
	b->code = started_code("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
			       "time.sleep(60)");
	bg_start(b);
	cr_assert_eq(bg_wait_stdout(b, 10000), 0, "the code never started");
}

Test(faults, kernel_ignoring_sigint_is_stopped_by_restart, .timeout = 90)
{
	char *id = context_new(URL, "python", NULL);
	struct bg b = {.base = URL, .ctx = id};

	sigint_ignorer_start(&b);
	double t0 = ms_now();
	cr_assert_eq(context_post(URL, id, "restart", 30), 200);
	bg_join(&b);
	/* a restart that waited for the code would take its 60 s */
	cr_assert(ms_since(t0) < 30000, "ended %.0f ms after the restart", ms_since(t0));
	cr_assert_str_eq(error_name(b.lines), "ContextRestarted");
	json_decref(b.lines);
	expect_stdout(URL, id, "print('fresh')", "fresh\n");
	free(id);
}

Test(faults, interrupt_of_a_kernel_ignoring_sigint_falls_back_to_restart, .timeout = 90)
{
	char *id = context_new(URL, "python", NULL);
	struct bg b = {.base = URL, .ctx = id};

	sigint_ignorer_start(&b);
	double t0 = ms_now();
	cr_assert(context_post(URL, id, "interrupt", 30) > 0);
	bg_join(&b);
	/* without the fallback the code sleeps on for 60 s */
	cr_assert(ms_since(t0) < 30000, "ended %.0f ms after the interrupt", ms_since(t0));
	cr_assert(strstr(error_value(b.lines), "restarted"), "%s", error_value(b.lines));
	json_decref(b.lines);
	free(id);
}
