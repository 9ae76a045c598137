/*
 * ctl_test.c — operator tooling against a running broker: every sandcellctl
 * command (tables, --json parsed back, exit status on failure), /metrics
 * checked by promtool, counters that move with their events.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

HARNESS_SHARED_BROKER("--log-level", "info");

#define URL test_url()

/* Runs sandcellctl against the shared broker; returns its exit status. */
static int
ctl(char **out, const char *fmt, ...)
{
	char args[4096], cmd[4500];
	va_list ap;
	const char *bin = getenv("SANDCELL_BIN");

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s/sandcellctl --run-dir '%s' %s 2>&1", bin ? bin : "bin",
		 test_run_dir(), args);
	FILE *p = popen(cmd, "r");
	size_t cap = 1 << 16, len = 0, n;
	char *buf = malloc(cap);
	while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
		len += n;
		if (len + 1 == cap)
			buf = realloc(buf, cap *= 2);
	}
	buf[len] = '\0';
	int st = pclose(p);
	if (out)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

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
	char *id = context_new(URL, "python", NULL), *out;
	struct bg a = {.ctx = id, .code = "import time\ntime.sleep(3)"};
	struct bg q = {.ctx = id, .code = "print('queued one')"};

	bg_start(&a);
	usleep(400000);
	bg_start(&q);
	usleep(300000);
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
	bg_join(&a);
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
	usleep(700000);
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
	cr_assert(strstr(out, "no such context"), "%s", out);
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

Test(ctl, drain_refuses_executions_until_undrain, .timeout = 60)
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

Test(ctl, watch_prints_live_events, .timeout = 60)
{
	const char *bin = getenv("SANDCELL_BIN");
	char cmd[512], line[1024];
	int fds[2];

	cr_assert_eq(pipe(fds), 0);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		snprintf(cmd, sizeof(cmd), "%s/sandcellctl", bin ? bin : "bin");
		execl(cmd, cmd, "--run-dir", test_run_dir(), "--json", "watch", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	usleep(300000);
	char *id = context_new(URL, "python", NULL);
	json_decref(run(URL, id, "1"));
	usleep(200000);
	kill(pid, SIGINT);
	waitpid(pid, NULL, 0);
	FILE *f = fdopen(fds[0], "r");
	bool created = false, started = false, ended = false;
	/* --json watch: one JSON event per line */
	while (fgets(line, sizeof(line), f)) {
		json_t *ev = json_loads(line, 0, NULL);
		const char *name = json_string_value(json_object_get(ev, "event"));
		cr_assert_not_null(name, "not an event: %s", line);
		created |= !strcmp(name, "context_created");
		started |= !strcmp(name, "execution_started");
		ended |= !strcmp(name, "execution_ended");
		json_decref(ev);
	}
	fclose(f);
	cr_assert(created && started && ended, "created %d started %d ended %d", created,
		  started, ended);
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
	json_decref(execute(URL, body, &st, 500)); /* a client that leaves */
	usleep(300000);
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

	pid_t proxy = context_pid(URL, id, "proxy_pid");
	cr_assert(proxy > 0);
	kill(proxy, SIGKILL);
	usleep(500000);
	json_decref(run(URL, id, "1"));
	char *after = scrape();
	cr_assert(metric(after, "sandcell_proxy_restarts_total") >
		  metric(before, "sandcell_proxy_restarts_total"));
	free(before);
	free(after);
	free(id);
}
