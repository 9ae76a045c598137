/*
 * ctl_test.c — operator tooling against a running broker: every sandcellctl
 * command (tables, --json parsed back, exit status on failure), /metrics
 * checked by promtool, counters that move with their events.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* a queue of one per context: run_obeys_max_queue needs no broker of its own */
HARNESS_SHARED_BROKER("--log-level", "info", "--max-queue", "1");

#define URL test_url()

/* sandcellctl against the shared broker; its exit status. */
#define ctl(out, ...) ctl_run(NULL, out, __VA_ARGS__)

static json_t *
ctl_json(const char *what)
{
	char *out;
	int rc = ctl(&out, "--json %s", what);
	json_t *j = json_loads(out, JSON_DECODE_ANY, NULL);

	cr_assert_eq(rc, 0, "sandcellctl %s: %s", what, out);
	cr_assert_not_null(j, "sandcellctl --json %s is not JSON: %s", what, out);
	free(out);
	return j;
}

static json_t *
find_context(json_t *a, const char *id)
{
	size_t i;
	json_t *c;

	json_array_foreach(a, i, c)
		if (!strcmp(json_string_value(json_object_get(c, "id")), id))
			return c;
	return NULL;
}

Test(ctl, status_in_json_and_as_a_table, .timeout = 30)
{
	json_t *j = ctl_json("status");
	char *out;

	cr_assert_str_eq(json_string_value(json_object_get(j, "version")), "0.1.0");
	cr_assert(json_integer_value(json_object_get(j, "contexts")) >= 1);
	cr_assert(json_is_false(json_object_get(j, "draining")));
	json_decref(j);
	cr_assert_eq(ctl(&out, "status"), 0);
	cr_assert(strstr(out, "uptime_seconds") && strstr(out, "contexts"), "%s", out);
	free(out);
}

Test(ctl, contexts_show_live_state, .timeout = 60)
{
	char *id = context_new(URL, "python", "/tmp"), *out;

	json_decref(run(URL, id, "1"));
	json_t *a = ctl_json("contexts");
	json_t *c = find_context(a, id);
	cr_assert_not_null(c);
	cr_assert_str_eq(json_string_value(json_object_get(c, "language")), "python");
	cr_assert_str_eq(json_string_value(json_object_get(c, "state")), "idle");
	cr_assert_str_eq(json_string_value(json_object_get(c, "cwd")), "/tmp");
	cr_assert_eq(json_integer_value(json_object_get(c, "executions")), 1);
	cr_assert(json_integer_value(json_object_get(c, "kernel_pid")) > 0);
	cr_assert(json_integer_value(json_object_get(c, "proxy_pid")) > 0);
	cr_assert(json_integer_value(json_object_get(c, "kernel_rss_bytes")) > 1 << 20);
	json_t *box = json_object_get(c, "sandbox");
	cr_assert(json_is_true(json_object_get(box, "enabled")), "no sandbox shown");
	char uid[32];
	snprintf(uid, sizeof(uid), "  %lld  ", (long long)json_integer_value(json_object_get(box, "uid")));
	json_decref(a);
	cr_assert_eq(ctl(&out, "contexts"), 0);
	cr_assert(strstr(out, id) && strstr(out, "LANGUAGE"), "%s", out);
	cr_assert(strstr(out, "shared") && strstr(out, uid), "no box in: %s", out);
	free(out);
	/* the same live state over HTTP */
	char path[128];
	struct resp r;
	snprintf(path, sizeof(path), "/contexts/%s", id);
	cr_assert_eq(http(URL, "GET", path, NULL, &r, 5), 0);
	json_t *h = json_loads(r.r_body, 0, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(h, "state")), "idle");
	cr_assert_eq(json_integer_value(json_object_get(h, "executions")), 1);
	json_decref(h);
	resp_free(&r);
	free(id);
}

Test(ctl, executions_lists_running_and_queued_and_cancel_ends_one, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL), *out, go[300];
	/* a runs until told (ctl-go in its cwd), 30 s at most */
	struct bg a = {.ctx = id,
		       .code = "import time\nimport os\nfor _ in range(600):\n"
			       "    if os.path.exists('ctl-go'): break\n    time.sleep(0.05)"};
	struct bg q = {.ctx = id, .code = "print('queued one')"};
	char *ws = context_host_cwd(URL, id);

	cr_assert_not_null(ws);
	snprintf(go, sizeof(go), "%s/ctl-go", ws);
	free(ws);

	bg_start(&a);
	cr_assert_eq(wait_context_int(URL, id, "queue", 1, 10000), 0);
	bg_start(&q);
	cr_assert_eq(wait_context_int(URL, id, "queue", 2, 10000), 0);
	json_t *ex = ctl_json("executions"), *e;
	size_t i;
	json_int_t queued = 0;
	int running = 0;
	json_array_foreach(ex, i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "context")), id))
			continue;
		if (!strcmp(json_string_value(json_object_get(e, "state")), "running")) {
			running++;
			cr_assert_str_eq(json_string_value(json_object_get(e, "code")), "import time");
		} else {
			queued = json_integer_value(json_object_get(e, "stream"));
			cr_assert_str_eq(json_string_value(json_object_get(e, "client")), "connected");
		}
	}
	cr_assert_eq(running, 1);
	cr_assert(queued > 0);
	json_decref(ex);
	cr_assert_eq(ctl(&out, "executions"), 0);
	cr_assert(strstr(out, "queued") && strstr(out, "running"), "%s", out);
	free(out);

	cr_assert_eq(ctl(&out, "cancel %lld", (long long)queued), 0, "%s", out);
	free(out);
	bg_join(&q);
	json_t *err = line_of(q.lines, "error", 0);
	cr_assert_not_null(err);
	cr_assert_str_eq(json_string_value(json_object_get(err, "name")), "ExecutionCancelled");
	cr_assert_eq(count_of(q.lines, "stdout"), 0, "the cancelled execution never ran");
	FILE *g = fopen(go, "w");
	cr_assert_not_null(g, "%s", go);
	fclose(g);
	bg_join(&a);
	unlink(go);
	json_decref(a.lines);
	json_decref(q.lines);
	cr_assert_eq(ctl(&out, "cancel 12345"), 1, "unknown stream fails");
	cr_assert(strstr(out, "no such execution"), "%s", out);
	free(out);
	free(id);
}

Test(ctl, interrupt_restart_create_delete, .timeout = 90)
{
	char *out;
	json_t *c = ctl_json("create python --cwd /tmp");
	const char *id = json_string_value(json_object_get(c, "id"));

	cr_assert_not_null(id);
	cr_assert_str_eq(json_string_value(json_object_get(c, "cwd")), "/tmp");
	json_decref(run(URL, id, "kept = 1"));

	struct bg b = {.ctx = id, .code = "import time\ntime.sleep(30)"};
	bg_start(&b);
	/* the proxy holds an interrupt until the code has started */
	cr_assert_eq(wait_context_int(URL, id, "queue", 1, 10000), 0);
	cr_assert_eq(ctl(&out, "interrupt %s", id), 0, "%s", out);
	free(out);
	bg_join(&b);
	cr_assert_str_eq(json_string_value(json_object_get(line_of(b.lines, "error", 0), "name")),
			 "KeyboardInterrupt");
	json_decref(b.lines);

	cr_assert_eq(ctl(&out, "restart %s", id), 0, "%s", out);
	free(out);
	json_t *l = run(URL, id, "print('kept' in globals())");
	char *s = stdout_of(l);
	cr_assert_str_eq(s, "False\n");
	free(s);
	json_decref(l);

	cr_assert_eq(ctl(&out, "delete %s", id), 0, "%s", out);
	free(out);
	json_t *a = ctl_json("contexts");
	cr_assert_null(find_context(a, id));
	json_decref(a);
	cr_assert_eq(ctl(&out, "delete %s", id), 1, "deleting twice fails");
	cr_assert(strstr(out, "not found"), "%s", out);
	free(out);
	cr_assert_eq(ctl(&out, "create klingon"), 1);
	cr_assert(strstr(out, "available"), "%s", out);
	free(out);
	json_decref(c);
}

Test(ctl, run_prints_the_stream_and_fails_on_error, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL), *out;

	cr_assert_eq(ctl(&out, "run %s 'print(6*7)'", id), 0, "%s", out);
	cr_assert_str_eq(out, "42\n");
	free(out);
	cr_assert_eq(ctl(&out, "run %s '1/0'", id), 1);
	cr_assert(strstr(out, "ZeroDivisionError"), "%s", out);
	free(out);
	cr_assert_eq(ctl(&out, "--json run %s 'print(1)'", id), 0);
	cr_assert(strstr(out, "{\"type\":\"stdout\",\"text\":\"1\\n\""), "%s", out);
	free(out);
	free(id);
}

/*
 * Every line of a run that prints in many small pieces arrives, and so does
 * its end: nng queues two messages per ctl client and drops what does not
 * fit, so the broker holds what the client has not acknowledged.
 */
Test(ctl, run_delivers_every_line_and_its_end, .timeout = 120)
{
	char *id = context_new(URL, "python", NULL), *out;

	for (int round = 0; round < 5; round++) {
		cr_assert_eq(ctl(&out, "run %s 'import time\nfor i in range(300):\n"
				       "    print(i, flush=True); time.sleep(0.0005)\n1/0'",
				 id),
			     1, "round %d: %s", round, out);
		char *p = out;
		for (int i = 0; i < 300; i++) {
			char want[16];
			int n = snprintf(want, sizeof(want), "%d\n", i);
			cr_assert(!strncmp(p, want, n), "round %d: line %d missing near: %.80s",
				  round, i, p);
			p += n;
		}
		cr_assert(strstr(p, "ZeroDivisionError"), "round %d: %s", round, p);
		free(out);
	}
	/* one line of 5 MiB: the proxy hands it on in 1 MiB messages */
	cr_assert_eq(ctl(&out, "run %s \"print('x' * (5 << 20))\"", id), 0);
	size_t n = strspn(out, "x");
	cr_assert_eq(n, (size_t)5 << 20, "%zu x of %d", n, 5 << 20);
	cr_assert_str_eq(out + n, "\n");
	free(out);
	free(id);
}

/* A drain test that fails leaves the shared broker accepting for the next. */
static void
undrain(void)
{
	ctl(NULL, "undrain");
}

Test(ctl, drain_refuses_executions_until_undrain, .fini = undrain, .timeout = 60)
{
	char *out;
	long st;

	cr_assert_eq(ctl(&out, "drain"), 0, "%s", out);
	free(out);
	json_t *j = ctl_json("status");
	cr_assert(json_is_true(json_object_get(j, "draining")));
	json_decref(j);
	cr_assert_null(execute(URL, "{\"code\":\"1\"}", &st, 5000));
	cr_assert_eq(st, 503);
	cr_assert_eq(ctl(&out, "undrain"), 0, "%s", out);
	free(out);
	json_t *l = execute(URL, "{\"code\":\"print('back')\"}", &st, 30000);
	cr_assert_not_null(l, "status %ld", st);
	json_decref(l);
}

Test(ctl, run_on_a_draining_broker_fails_like_execute, .fini = undrain, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL), *out;
	char path[] = "/tmp/sandcell-drained-XXXXXX";
	long st;
	int fd = mkstemp(path);

	cr_assert_not_null(id);
	close(fd);
	unlink(path);
	cr_assert_eq(ctl(&out, "drain"), 0, "%s", out);
	free(out);
	cr_assert_null(execute(URL, "{\"code\":\"1\"}", &st, 5000));
	cr_assert_eq(st, 503);
	cr_assert_eq(ctl(&out, "run %s \"open('%s', 'w')\"", id, path), 1,
		     "run on a draining broker: %s", out);
	cr_assert(strstr(out, "draining"), "%s", out);
	free(out);
	cr_assert_eq(ctl(&out, "undrain"), 0, "%s", out);
	free(out);
	json_t *l = run(URL, id, "print('back')"); /* whatever was sent would have run first */
	json_decref(l);
	cr_assert_neq(access(path, F_OK), 0, "the refused run never ran");
	free(id);
}

/* GET /ready answers *arg (an HTTP status). */
static bool
ready_is(void *arg)
{
	struct resp r = {0};
	bool ok = http(URL, "GET", "/ready", NULL, &r, 5) == 0 && r.r_status == *(long *)arg;

	resp_free(&r);
	return ok;
}

static int
wait_ready(long status, long timeout_ms)
{
	return wait_until(ready_is, &status, timeout_ms);
}

Test(ctl, ready_is_503_while_draining_and_200_after_undrain, .fini = undrain, .timeout = 90)
{
	struct resp r;
	char *out;

	/* the default contexts (python; javascript with Deno) answer */
	cr_assert_eq(wait_ready(200, 30000), 0, "ready once the default contexts answer");
	cr_assert_eq(ctl(&out, "drain"), 0, "%s", out);
	free(out);
	cr_assert_eq(http(URL, "GET", "/ready", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 503, "not ready while draining: %s", r.r_body);
	cr_assert(strstr(r.r_body, "draining"), "%s", r.r_body);
	resp_free(&r);
	cr_assert_eq(http(URL, "GET", "/health", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200, "still alive while draining");
	resp_free(&r);
	cr_assert_eq(ctl(&out, "undrain"), 0, "%s", out);
	free(out);
	cr_assert_eq(http(URL, "GET", "/ready", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200, "ready again after undrain: %s", r.r_body);
	resp_free(&r);
}

Test(ctl, ready_is_503_while_the_default_kernel_restarts, .timeout = 90)
{
	cr_assert_eq(wait_ready(200, 30000), 0);
	/* the kernel's pid as the host sees it: inside its sandbox it is another */
	json_t *a = ctl_json("contexts"), *c;
	pid_t pid = 0;
	size_t i;
	json_array_foreach(a, i, c)
		if (json_is_true(json_object_get(c, "default")) &&
		    !strcmp(json_string_value(json_object_get(c, "language")), "python"))
			pid = json_integer_value(json_object_get(c, "kernel_pid"));
	json_decref(a);
	cr_assert(pid > 0, "no default python context");
	cr_assert_eq(kill(pid, SIGKILL), 0, "kill the default kernel %d", (int)pid);
	/* the restart takes ~0.5 s: readiness goes down, then comes back */
	cr_assert_eq(wait_ready(503, 10000), 0, "not ready while the default kernel restarts");
	cr_assert_eq(wait_ready(200, 30000), 0, "ready once the new kernel answers");
}

Test(ctl, run_obeys_max_queue, .timeout = 90)
{
	char *id = context_new(URL, "python", NULL), *out;
	struct bg a = {.ctx = id, .code = "import time\ntime.sleep(30)"};
	struct bg q = {.ctx = id, .code = "print('queued')"};

	cr_assert_not_null(id);
	bg_start(&a);
	cr_assert_eq(wait_context_int(URL, id, "queue", 1, 10000), 0);
	bg_start(&q);
	cr_assert_eq(wait_context_int(URL, id, "queue", 2, 10000), 0);
	cr_assert_eq(ctl(&out, "run %s 'print(1)'", id), 1,
		     "a run over --max-queue: %s", out);
	cr_assert(strstr(out, "executions waiting (limit 1)"), "%s", out);
	free(out);
	cr_assert_eq(ctl_executions(NULL, id, NULL), 2, "the refused run is not queued");
	cr_assert_eq(context_post(URL, id, "interrupt", 10), 200);
	bg_join(&a);
	bg_join(&q);
	char *s = stdout_of(q.lines);
	cr_assert_str_eq(s, "queued\n");
	free(s);
	json_decref(a.lines);
	json_decref(q.lines);
	free(id);
}

Test(ctl, watch_prints_live_events, .timeout = 60)
{
	const char *bin = getenv("SANDCELL_BIN");
	char cmd[512], line[1024];
	int fds[2];

	cr_assert_eq(pipe(fds), 0);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed or timed-out test ends it too */
		/* Ctrl-C in a terminal: a background job of a non-interactive
		 * shell (make test run so) would start it with SIGINT ignored */
		signal(SIGINT, SIG_DFL);
		dup2(fds[1], 1);
		close(fds[0]);
		snprintf(cmd, sizeof(cmd), "%s/sandcellctl", bin ? bin : "bin");
		execl(cmd, cmd, "--run-dir", test_run_dir(), "--json", "watch", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	FILE *f = fdopen(fds[0], "r");
	/* its first event says it is watching */
	cr_assert_not_null(fgets(line, sizeof(line), f));
	cr_assert(strstr(line, "\"watching\""), "%s", line);
	char *id = context_new(URL, "python", NULL);
	json_decref(run(URL, id, "1"));
	bool created = false, started = false, ended = false;
	/* --json watch: one JSON event per line; read until the execution's end */
	while (!(created && started && ended) && fgets(line, sizeof(line), f)) {
		json_t *ev = json_loads(line, 0, NULL);
		const char *name = json_string_value(json_object_get(ev, "event"));
		cr_assert_not_null(name, "not an event: %s", line);
		created |= !strcmp(name, "context_created");
		started |= !strcmp(name, "execution_started");
		ended |= !strcmp(name, "execution_ended");
		json_decref(ev);
	}
	kill(pid, SIGINT);
	int st = 0;
	int stopped = wait_pid_exit(pid, &st, 5000);
	if (stopped < 0)
		kill(pid, SIGKILL);
	fclose(f);
	cr_assert(created && started && ended, "created %d started %d ended %d", created,
		  started, ended);
	cr_assert_eq(stopped, 0, "sandcellctl watch did not end on Ctrl-C");
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT, "status 0x%x", st);
	free(id);
}

Test(ctl, no_broker_is_a_clear_failure, .timeout = 30)
{
	const char *bin = getenv("SANDCELL_BIN");
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "%s/sandcellctl --run-dir /nonexistent status 2>&1",
		 bin ? bin : "bin");
	FILE *p = popen(cmd, "r");
	char out[512] = "";
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	int st = pclose(p);
	cr_assert_eq(WEXITSTATUS(st), 1);
	cr_assert(strstr(out, "no broker"), "%s", out);
}

/* ---- stop ends contexts, restart keeps them (the unit's ExecStop) ---- */

static struct broker kept; /* a --keep-contexts broker, stopped by .fini */

static void
kept_stop(void)
{
	cr_assert_eq(broker_stop(&kept), 0, "a sanitizer report in its log");
}

/* Alive and not a zombie (an orphan's parent may be slow to reap it). */
static bool
alive(pid_t pid)
{
	char path[64], st[256];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r")))
		return false;
	bool ok = fgets(st, sizeof(st), f) && strrchr(st, ')') && strrchr(st, ')')[2] != 'Z';
	fclose(f);
	return ok;
}

static bool
gone_within(pid_t pid, int ms)
{
	for (int i = 0; i < ms / 50 && alive(pid); i++)
		usleep(50000);
	return !alive(pid);
}

/* sandcellctl against the private broker's run dir; its exit status. */
static int
kept_ctl(const char *args, char *out, size_t outsz)
{
	const char *bin = getenv("SANDCELL_BIN");
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "%s/sandcellctl --run-dir '%s' %s 2>&1", bin ? bin : "bin",
		 kept.b_run_dir, args);
	FILE *p = popen(cmd, "r");
	size_t n = fread(out, 1, outsz - 1, p);
	out[n] = '\0';
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void
sigterm_and_wait(pid_t *pid)
{
	kill(*pid, SIGTERM);
	cr_assert_eq(waitpid(*pid, NULL, 0), *pid);
	*pid = 0;
}

Test(ctl, stop_ends_every_context_and_restart_keeps_them, .timeout = 120, .fini = kept_stop)
{
	const char *args[] = {"--keep-contexts", "--no-default-context", "--pool", "0", NULL};
	char out[4096];

	cr_assert_eq(broker_start(&kept, args), 0);
	char *id = context_new(kept.b_url, "python", NULL);
	cr_assert_not_null(id);
	json_t *l = run(kept.b_url, id, "x = 41");
	json_decref(l);
	pid_t proxy = context_pid(kept.b_url, id, "proxy_pid");
	pid_t kernel = context_pid(kept.b_url, id, "kernel_pid");
	cr_assert(proxy > 0 && kernel > 0);

	/* restart: ExecStop says nothing, SIGTERM; the next broker re-attaches */
	cr_assert_eq(kept_ctl("stop-keeps-contexts", out, sizeof(out)), 0, "%s", out);
	sigterm_and_wait(&kept.b_pid);
	cr_assert(alive(proxy) && alive(kernel), "a restart's stop ended the context");
	cr_assert_eq(broker_restart(&kept, args), 0);
	l = run(kept.b_url, id, "x + 1");
	cr_assert_str_eq(result_text(l), "42", "the context lost its state across a restart");
	json_decref(l);

	/* stop: ExecStop's stop-ends-contexts, then SIGTERM ends them after the drain */
	cr_assert_eq(kept_ctl("stop-ends-contexts", out, sizeof(out)), 0, "%s", out);
	cr_assert_eq(kept_ctl("--json status", out, sizeof(out)), 0, "%s", out);
	cr_assert(strstr(out, "\"keep_contexts\": false"), "%s", out);
	sigterm_and_wait(&kept.b_pid);
	cr_expect(gone_within(proxy, 10000), "proxy %d outlived systemctl stop", (int)proxy);
	cr_expect(gone_within(kernel, 10000), "kernel %d outlived systemctl stop", (int)kernel);
	free(id);
}

static char *
scrape(void)
{
	struct resp r;

	cr_assert_eq(http(URL, "GET", "/metrics", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200);
	cr_assert(strstr(r.r_ctype, "text/plain"), "%s", r.r_ctype);
	return r.r_body;
}

static double
metric(const char *text, const char *series)
{
	const char *p = text;
	size_t n = strlen(series);

	while ((p = strstr(p, series))) {
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return atof(p + n + 1);
		p += n;
	}
	return -1;
}

Test(metrics, promtool_accepts_the_exposition, .timeout = 30)
{
	char *text = scrape(), path[] = "/tmp/sandcell-metrics-XXXXXX";
	int fd = mkstemp(path);

	cr_assert(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "promtool check metrics < %s 2>&1", path);
	FILE *p = popen(cmd, "r");
	char out[4096] = "";
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	int st = pclose(p);
	unlink(path);
	cr_assert_eq(WEXITSTATUS(st), 0, "promtool: %s", out);
	free(text);
}

Test(metrics, counters_move_with_their_events, .timeout = 90)
{
	char *id = context_new(URL, "python", NULL);
	char *before = scrape();
	long st;
	char body[256];

	json_decref(run(URL, id, "1"));
	json_decref(run(URL, id, "1/0"));
	snprintf(body, sizeof(body), "{\"code\":\"import time\\ntime.sleep(5)\",\"context_id\":\"%s\","
				     "\"timeout\":0.5}", id);
	json_decref(execute(URL, body, &st, 30000));
	snprintf(body, sizeof(body), "{\"code\":\"import time\\ntime.sleep(5)\",\"context_id\":\"%s\"}",
		 id);
	double cancels = metric(before, "sandcell_cancels_total");
	json_decref(execute(URL, body, &st, 500)); /* a client that leaves */
	cr_assert_eq(wait_metric(URL, "sandcell_cancels_total", cancels + 1, 5000), 0);
	json_decref(run(URL, id, "import os\nos._exit(1)")); /* kernel dies */
	json_decref(run(URL, id, "1"));
	char *after = scrape();

	static const char *const moved[] = {
		"sandcell_executions_total{outcome=\"ok\"}",
		"sandcell_executions_total{outcome=\"error\"}",
		"sandcell_executions_total{outcome=\"timeout\"}",
		"sandcell_executions_total{outcome=\"cancelled\"}",
		"sandcell_executions_total{outcome=\"kernel_died\"}",
		"sandcell_client_disconnects_total",
		"sandcell_cancels_total",
		"sandcell_kernel_restarts_total",
		"sandcell_streamed_bytes_total",
		"sandcell_execution_duration_seconds_count",
		"sandcell_http_requests_total{endpoint=\"/execute\",method=\"POST\",status=\"200\"}",
	};
	for (size_t i = 0; i < sizeof(moved) / sizeof(moved[0]); i++)
		cr_expect(metric(after, moved[i]) > metric(before, moved[i]), "%s: %g -> %g",
			  moved[i], metric(before, moved[i]), metric(after, moved[i]));
	cr_expect(metric(after, "sandcell_contexts{language=\"python\",state=\"idle\"}") >= 1);
	free(before);
	free(after);
	free(id);
}

Test(metrics, proxy_restarts_are_counted, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL);
	char *before = scrape();

	/*
	 * An execution sent the moment the respawn is counted must reach the new
	 * proxy (it once went down the dead proxy's pipe and hung): a few rounds,
	 * within the respawn limit of one context.
	 */
	for (int i = 1; i <= 4; i++) {
		pid_t proxy = context_pid(URL, id, "proxy_pid");
		cr_assert(proxy > 0);
		kill(proxy, SIGKILL);
		cr_assert_eq(wait_metric(URL, "sandcell_proxy_restarts_total",
					 metric(before, "sandcell_proxy_restarts_total") + i, 10000),
			     0);
		json_t *lines = execute_code(URL, id, "41 + 1", NULL, 20000, NULL);
		cr_assert(lines, "round %d: the execution after the respawn never ended", i);
		cr_assert_str_eq(result_text(lines), "42", "round %d", i);
		json_decref(lines);
	}
	char *after = scrape();
	cr_assert_eq(metric(after, "sandcell_proxy_restarts_total"),
		     metric(before, "sandcell_proxy_restarts_total") + 4);
	free(before);
	free(after);
	free(id);
}

/* The sandbox gauges say how kernels run: boxed and shared here, unboxed with --no-sandbox. */
Test(metrics, the_sandbox_gauges_say_how_kernels_run, .timeout = 60, .fini = kept_stop)
{
	const char *args[] = {"--no-default-context", "--pool", "0", "--no-sandbox", NULL};

	cr_assert_eq(metric_value(URL, "sandcell_sandbox_enabled"), 1);
	cr_assert_eq(metric_value(URL, "sandcell_sandbox_isolated"), 0);
	cr_assert_eq(broker_start(&kept, args), 0);
	cr_assert_eq(metric_value(kept.b_url, "sandcell_sandbox_enabled"), 0);
	cr_assert_eq(metric_value(kept.b_url, "sandcell_sandbox_isolated"), 0);
}

/* A watch (which has no timeout) ends, failing, when its broker stops. */
Test(ctl, watch_ends_when_the_broker_stops, .timeout = 60, .fini = kept_stop)
{
	const char *args[] = {"--no-default-context", "--pool", "0", NULL};
	const char *bin = getenv("SANDCELL_BIN");
	char cmd[512], line[1024];
	int fds[2], st;

	cr_assert_eq(broker_start(&kept, args), 0);
	cr_assert_eq(pipe(fds), 0);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(fds[1], 1);
		close(fds[0]);
		snprintf(cmd, sizeof(cmd), "%s/sandcellctl", bin ? bin : "bin");
		execl(cmd, cmd, "--run-dir", kept.b_run_dir, "--json", "watch", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	FILE *f = fdopen(fds[0], "r");
	cr_assert_not_null(fgets(line, sizeof(line), f));
	cr_assert(strstr(line, "\"watching\""), "%s", line);
	sigterm_and_wait(&kept.b_pid);
	cr_assert(gone_within(pid, 5000), "sandcellctl watch outlived its broker");
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
	fclose(f);
}
