/*
 * admission_test.c — a vanished client never blocks, delays or leaks into the
 * next request. Clients really disconnect (libcurl gives up and closes its
 * socket); the kernel is a real ipykernel.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"

/*
 * No warm pool: its refills would compete for the CPU with the timings here.
 * No second interrupt: an interrupt that was lost shows (the code runs on,
 * and the kernel is restarted after the grace) instead of being retried.
 */
HARNESS_SHARED_BROKER("--env", "SC_GLOBAL=from-broker", "--pool", "0", "--interrupt-retry",
		      "60");

#define URL test_url()

/* A fresh context per test: a test's leftovers never slow the next one. */
static char *
fresh(void)
{
	char *id = context_new(URL, "python", "/tmp");

	cr_assert_not_null(id, "context creation failed");
	return id;
}

static json_t *
exec_body(const char *ctx, const char *code, const char *extra_json, long timeout_ms,
	  long *status)
{
	return execute_code(URL, ctx, code, extra_json, timeout_ms, status);
}

static bool
client_gave_up(json_t *l)
{
	return l && line_of(l, "_client_timeout", 0);
}

/* POST /execute from a raw client that closes its connection after usec. */
static void
post_and_leave(const char *ctx, const char *code, useconds_t usec)
{
	json_t *body = json_pack("{s:s, s:s}", "code", code, "context_id", ctx);
	char *js = json_dumps(body, JSON_COMPACT), *req;
	int fd;

	cr_assert(asprintf(&req,
			   "POST /execute HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
			   "Content-Length: %zu\r\n\r\n%s",
			   strlen(js), js) > 0);
	cr_assert((fd = tcp_connect(URL)) >= 0);
	cr_assert(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
	if (usec)
		usleep(usec);
	close(fd);
	free(req);
	free(js);
	json_decref(body);
}

/* How fast it is, make bench measures: BENCH=latency, POST /execute print('hello'). */
Test(admission, baseline_print_gives_its_stdout, .timeout = 60)
{
	char *id = fresh();
	json_t *l = run(URL, id, "print('hello')");
	char *out = stdout_of(l);

	cr_assert_str_eq(out, "hello\n");
	cr_assert_null(line_of(l, "error", 0), "%s: %s", error_name(l), error_value(l));
	cr_assert_not_null(line_of(l, "end_of_execution", 0));
	free(out);
	json_decref(l);
	free(id);
}

Test(admission, disconnect_with_interrupt_frees_context_at_once, .timeout = 60)
{
	char *id = fresh();
	long st;
	json_t *l = exec_body(id, "import time\nwoke_at = time.time() + 15\ntime.sleep(15)", NULL,
			      2000, &st);

	cr_assert(client_gave_up(l));
	json_decref(l);
	l = run(URL, id, "import time\nprint('hello', time.time() < woke_at)");
	char *out = stdout_of(l);
	/* it ran while the abandoned sleep would still have gone on: interrupted */
	cr_assert_str_eq(out, "hello True\n");
	free(out);
	json_decref(l);
	/* state kept: the interrupt did not restart the kernel */
	json_decref(run(URL, id, "kept = 3"));
	l = run(URL, id, "kept");
	cr_assert_str_eq(result_text(l), "3");
	json_decref(l);
	free(id);
}

Test(admission, disconnect_with_continue_lets_it_finish, .timeout = 60)
{
	char *id = fresh();
	long st;
	json_t *l = exec_body(id, "import time\ntime.sleep(4)\nfinished = time.time()",
			      "{\"on_disconnect\":\"continue\"}", 1000, &st);

	cr_assert(client_gave_up(l));
	json_decref(l);
	cr_assert_eq(wait_metric(URL, "sandcell_client_disconnects_total", 1, 5000), 0);
	l = run(URL, id, "import time\nprint('hello', time.time() >= finished)");
	char *out = stdout_of(l);
	/* the abandoned code ran to its end, and the next one only after it */
	cr_assert_str_eq(out, "hello True\n");
	free(out);
	json_decref(l);
	free(id);
}

Test(admission, request_right_after_disconnect_runs, .timeout = 60)
{
	char *id = fresh();
	long st;

	for (int i = 0; i < 3; i++) {
		json_t *l = exec_body(id, "import time\ntime.sleep(15)", NULL, 1000, &st);
		cr_assert(client_gave_up(l));
		json_decref(l);
		/* no pause: this reaches the proxy right behind the cancel */
		l = run(URL, id, "print('next')");
		cr_assert_not_null(l);
		char *out = stdout_of(l);
		cr_assert_str_eq(out, "next\n", "round %d", i);
		cr_assert_not_null(line_of(l, "end_of_execution", 0));
		cr_assert_null(line_of(l, "error", 0), "round %d: the next request was not aborted",
			       i);
		free(out);
		json_decref(l);
	}
	free(id);
}

Test(admission, no_cascade_after_abandoned_retries, .timeout = 120)
{
	char *id = fresh();
	double t0 = 0;
	long st;

	for (int i = 0; i < 3; i++) {
		json_t *l = exec_body(id, "import time\ntime.sleep(30)", NULL, 2000, &st);
		cr_assert(client_gave_up(l));
		json_decref(l);
		t0 = ms_now();
	}
	json_t *l = run(URL, id, "print('hello')");
	double waited = ms_since(t0);
	char *out = stdout_of(l);
	cr_assert_str_eq(out, "hello\n");
	/* an abandoned sleep left running (in the kernel or queued) would hold it back
	 * until 24 s or more after the last client left */
	cr_assert(waited < 15000, "the next execution waited %.0f ms", waited);
	free(out);
	json_decref(l);
	free(id);
}

Test(admission, env_of_a_running_request_never_leaks, .timeout = 60)
{
	char *id = fresh();
	struct bg a = {.ctx = id,
		       .code = "import os, time\nseen = os.environ.get('FOO')\ntime.sleep(2)\n"
			       "print(os.environ.get('FOO'))",
		       .extra = "{\"env_vars\":{\"FOO\":\"a\"}}",
		       .timeout_ms = 30000};

	bg_start(&a);
	cr_assert_eq(wait_context_int(URL, id, "queue", 1, 10000), 0);
	json_t *b = run(URL, id, "import os\nprint(os.environ.get('FOO'))");
	bg_join(&a);
	char *outa = stdout_of(a.lines), *outb = stdout_of(b);
	cr_assert_str_eq(outa, "a\n");
	cr_assert_str_eq(outb, "None\n", "B ran with A's env vars");
	free(outa);
	free(outb);
	json_decref(a.lines);
	json_decref(b);
	free(id);
}

Test(admission, env_restored_after_a_disconnect, .timeout = 60)
{
	char *id = fresh();
	long st;
	json_t *l = exec_body(id, "import time\ntime.sleep(15)", "{\"env_vars\":{\"FOO\":\"a\"}}",
			      1500, &st);

	cr_assert(client_gave_up(l));
	json_decref(l);
	expect_stdout(URL, id, "import os\nprint(os.environ.get('FOO'))", "None\n");
	free(id);
}

Test(admission, global_env_is_what_a_request_value_restores_to, .timeout = 60)
{
	char *id = fresh();
	long st;
	json_t *l = exec_body(id, "import os\nprint(os.environ['SC_GLOBAL'])",
			      "{\"env_vars\":{\"SC_GLOBAL\":\"per-request\"}}", 30000, &st);
	char *out = stdout_of(l);

	cr_assert_str_eq(out, "per-request\n");
	free(out);
	json_decref(l);
	expect_stdout(URL, id, "import os\nprint(os.environ['SC_GLOBAL'])",
		      "from-broker\n");
	free(id);
}

Test(admission, env_values_arrive_byte_exact, .timeout = 60)
{
	char *id = fresh();
	const char *value = "it's \"q\" \\ back\\slash\nnew line $HOME ${X} `id` \xc3\xa9 \xe2\x98\xba";
	json_t *body = json_pack("{s:s, s:s, s:{s:s}}", "context_id", id, "code",
				 "import os\nos.environ['V']", "env_vars", "V", value);
	char *s = json_dumps(body, 0);
	long st;
	json_t *l = execute(URL, s, &st, 30000);

	cr_assert_not_null(l);
	/* compare in the kernel: repr() of the value must match ours exactly */
	json_decref(l);
	json_decref(body);
	free(s);
	body = json_pack("{s:s, s:s, s:{s:s}}", "context_id", id, "code",
			 "import os, sys\nsys.stdout.write(os.environ['V'])", "env_vars", "V",
			 value);
	s = json_dumps(body, 0);
	l = execute(URL, s, &st, 30000);
	char *out = stdout_of(l);
	cr_assert_str_eq(out, value);
	free(out);
	free(s);
	json_decref(body);
	json_decref(l);
	free(id);
}

Test(admission, env_key_that_is_not_a_name_is_400, .timeout = 30)
{
	struct resp r;

	cr_assert_eq(http(URL, "POST", "/execute",
			  "{\"code\":\"1\",\"env_vars\":{\"A=B\":\"x\"}}", &r, 10), 0);
	cr_assert_eq(r.r_status, 400);
	resp_free(&r);
}

/*
 * Where a file the context's code writes under name shows here (its
 * workspace), the file gone; and that the code's writes do show there, so
 * that a file's absence means the code never ran.
 */
static void
workspace_file(const char *id, const char *name, char *path, size_t size)
{
	char *ws = context_host_cwd(URL, id), code[256];
	struct stat st;

	cr_assert_not_null(ws);
	snprintf(path, size, "%s/%s", ws, name);
	free(ws);
	unlink(path);
	snprintf(code, sizeof(code), "open('%s', 'w').write('seen')", name);
	json_decref(run(URL, id, code));
	cr_assert_eq(stat(path, &st), 0, "what the code writes is not at %s", path);
	cr_assert_eq(unlink(path), 0);
}

/* Code that runs until a file named go is in its cwd (told_to), 30 s at most. */
static void
until_told(char *code, size_t size, const char *go)
{
	snprintf(code, size,
		 "import os, time\nfor _ in range(600):\n"
		 "    if os.path.exists('%s'): break\n    time.sleep(0.05)",
		 go);
}

/* Tells the code until_told gave it to stop: makes the file at path. */
static void
told_to(const char *path)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "%s", path);
	fclose(f);
}

Test(admission, queued_request_whose_client_left_never_runs, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL); /* its cwd in sight: the workspace */
	char name[64], path[512], code[1024], go[64], gopath[512], acode[256];
	struct bg a = {.ctx = id, .code = acode, .timeout_ms = 30000};
	long st;

	snprintf(name, sizeof(name), "sandcell-never-%d", (int)getpid());
	workspace_file(id, name, path, sizeof(path));
	snprintf(code, sizeof(code), "open('%s', 'w').write('ran')", name);
	/* a runs until the queued request's client has left */
	snprintf(go, sizeof(go), "sandcell-go-%d", (int)getpid());
	workspace_file(id, go, gopath, sizeof(gopath));
	until_told(acode, sizeof(acode), go);
	bg_start(&a);
	cr_assert_eq(wait_context_int(URL, id, "queue", 1, 10000), 0);
	json_t *l = exec_body(id, code, NULL, 1000, &st); /* queued behind a, then gone */
	cr_assert(client_gave_up(l));
	json_decref(l);
	told_to(gopath);
	bg_join(&a);
	unlink(gopath);
	json_decref(a.lines);
	l = run(URL, id, "1"); /* the queue is drained */
	json_decref(l);
	struct stat sb;
	cr_assert(stat(path, &sb) < 0, "the cancelled request ran");
	free(id);
}

/* Gone before its response head went out (the broker parks it a few ms). */
Test(admission, client_gone_before_the_response_head_is_cancelled, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL);
	char name[64], path[512], code[1024], req[2048];
	json_t *body;
	char *js;
	int fd;

	snprintf(name, sizeof(name), "sandcell-parked-%d", (int)getpid());
	workspace_file(id, name, path, sizeof(path));
	snprintf(code, sizeof(code), "import time\ntime.sleep(2)\nopen('%s', 'w').write('ran')",
		 name);
	body = json_pack("{s:s, s:s}", "code", code, "context_id", id);
	js = json_dumps(body, JSON_COMPACT);
	snprintf(req, sizeof(req),
		 "POST /execute HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
		 "Content-Length: %zu\r\n\r\n%s",
		 strlen(js), js);
	free(js);
	json_decref(body);
	double cancels = metric_value(URL, "sandcell_cancels_total");
	cr_assert((fd = tcp_connect(URL)) >= 0);
	cr_assert(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
	/* the broker has it (sent on to the kernel), no response head yet (parked) */
	cr_assert_eq(wait_context_int(URL, id, "queue", 1, 5000), 0);
	close(fd);
	cr_assert_eq(wait_metric(URL, "sandcell_cancels_total", cancels + 1, 5000), 0,
		     "the broker never cancelled it");

	pid_t kpid = context_pid(URL, id, "kernel_pid");
	json_t *l = run(URL, id, "print('next')"); /* the sleep was interrupted */
	char *out = stdout_of(l);
	cr_assert_str_eq(out, "next\n");
	/* no retry here: the first interrupt stopped it, no restart was needed */
	cr_assert_eq(context_pid(URL, id, "kernel_pid"), kpid, "the kernel was restarted");
	free(out);
	json_decref(l);
	/* units run in order: had it not been interrupted, the file would be there */
	struct stat sb;
	cr_assert(stat(path, &sb) < 0, "the abandoned execution ran to its end");
	free(id);
}

/* nc -N: the request, then shutdown(SHUT_WR); the client still reads. */
Test(admission, a_client_that_shuts_its_write_side_gets_the_whole_output, .timeout = 60)
{
	char *id = fresh();
	static const char *const versions[] = {"1.1", "1.0"};

	for (int v = 0; v < 2; v++) {
		int fd = raw_execute(URL, id, "import time\nprint('a')\ntime.sleep(1.5)\nprint('b')",
				     versions[v], "");
		cr_assert_geq(fd, 0);
		cr_assert_eq(shutdown(fd, SHUT_WR), 0);
		struct timeval tv = {30, 0};
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		char out[16384];
		size_t n = 0;
		ssize_t k;
		while (n < sizeof(out) - 1 && (k = read(fd, out + n, sizeof(out) - 1 - n)) > 0)
			n += k;
		out[n] = '\0';
		close(fd);
		cr_expect(strstr(out, "\"text\":\"a\\n\"") && strstr(out, "\"text\":\"b\\n\"") &&
			      strstr(out, "end_of_execution") && !strstr(out, "\"error\""),
			  "HTTP/%s: %s", versions[v], out);
	}
	free(id);
}

/* Half-closed, then gone for good: the next keepalive finds out, and it is cancelled. */
Test(admission, a_half_closed_client_that_then_closes_is_cancelled, .timeout = 90)
{
	char *id = fresh();
	int fd = raw_execute(URL, id, "import time\ntime.sleep(30)", "1.1", "");
	cr_assert_geq(fd, 0);

	cr_assert_eq(shutdown(fd, SHUT_WR), 0);
	usleep(200000); /* the scenario: it still reads for a while, then leaves */
	close(fd);
	double t0 = ms_now();
	json_t *l = run(URL, id, "print('next')");
	char *out = stdout_of(l);
	cr_assert_str_eq(out, "next\n");
	/* a keepalive a second (KEEPALIVE_MS) meets the closed socket; not noticed, the sleep
	 * holds the next execution back until about 30 s after the close */
	cr_assert(ms_since(t0) < 15000, "the next execution waited %.0f ms", ms_since(t0));
	free(out);
	json_decref(l);
	free(id);
}

Test(admission, timeout_interrupts_and_names_the_error, .timeout = 60)
{
	char *id = fresh();
	long st;
	json_decref(run(URL, id, "kept = 'state'"));
	double t0 = ms_now();
	json_t *l = exec_body(id, "import time\ntime.sleep(30)", "{\"timeout\":1.5}", 30000, &st);
	double took = ms_since(t0);
	json_t *e = line_of(l, "error", 0);

	cr_assert_not_null(e);
	cr_assert_str_eq(json_string_value(json_object_get(e, "name")), "TimeoutError");
	cr_assert_not_null(line_of(l, "end_of_execution", 0));
	cr_assert_eq(count_of(l, "error"), 1, "no KeyboardInterrupt after the timeout");
	/* not before its 1.5 s; without the timeout the sleep runs 30 s */
	cr_assert(took > 1400 && took < 15000, "ended after %.0f ms", took);
	json_decref(l);
	l = run(URL, id, "print('after', kept)");
	char *out = stdout_of(l);
	cr_assert_str_eq(out, "after state\n", "a timeout interrupts; it does not restart");
	free(out);
	json_decref(l);
	free(id);
}

Test(admission, timeout_counts_queue_time, .timeout = 90)
{
	char *id = fresh();
	struct bg a = {.ctx = id, .code = "import time\ntime.sleep(30)", .timeout_ms = 60000};
	long st;

	bg_start(&a);
	cr_assert_eq(wait_context_int(URL, id, "queue", 1, 10000), 0);
	double t0 = ms_now();
	json_t *l = exec_body(id, "print('late')", "{\"timeout\":1}", 30000, &st);
	double took = ms_since(t0);
	cr_assert_eq(context_post(URL, id, "interrupt", 10), 200); /* a has done its part */
	bg_join(&a);
	json_t *e = line_of(l, "error", 0);
	cr_assert_not_null(e);
	cr_assert_str_eq(json_string_value(json_object_get(e, "name")), "TimeoutError");
	cr_assert_eq(count_of(l, "stdout"), 0, "it never ran");
	/* a timeout checked only once it reached the kernel would fire after a's 30 s */
	cr_assert(took < 15000, "ended after %.0f ms", took);
	json_decref(l);
	json_decref(a.lines);
	free(id);
}

Test(admission, interrupt_endpoint_stops_the_running_unit, .timeout = 60)
{
	char *id = fresh();
	struct bg a = {.ctx = id,
		       .code = "print('started', flush=True)\nimport time\ntime.sleep(30)",
		       .timeout_ms = 30000};

	bg_start(&a);
	cr_assert_eq(bg_wait_stdout(&a, 10000), 0, "the code never started");
	double t0 = ms_now();
	cr_assert_eq(context_post(URL, id, "interrupt", 10), 200);
	bg_join(&a);
	double took = ms_since(t0);
	json_t *e = line_of(a.lines, "error", 0);
	cr_assert_not_null(e);
	cr_assert_str_eq(json_string_value(json_object_get(e, "name")), "KeyboardInterrupt");
	/* a plain traceback that points at the user's line, not at IPython */
	const char *tb = json_string_value(json_object_get(e, "traceback"));
	cr_assert(tb && strstr(tb, "time.sleep(30)"), "traceback: %s", tb);
	cr_assert(!strstr(tb, "interactiveshell.py"), "traceback: %s", tb);
	cr_assert_not_null(line_of(a.lines, "end_of_execution", 0));
	/* it ended the sleep, which would have run 30 s */
	cr_assert(took < 15000, "ended %.0f ms after the interrupt", took);
	json_decref(a.lines);
	free(id);
}

/*
 * A SIGINT in ipykernel's execute handler before the code runs (here: in an
 * input transformer) ends the request with an idle and no execute_reply. The
 * unit must still end at once, and the kernel must not be restarted for it:
 * not noticed, the unit would hang until the interrupt grace restarted the
 * kernel (ContextRestarted, a new pid, the state lost), which is checked.
 */
Test(admission, interrupt_that_ends_a_request_without_a_reply, .timeout = 60)
{
	char *id = fresh();
	struct bg a = {.ctx = id, .code = "print('never')", .timeout_ms = 30000};

	/* the transformer says when it runs: the code's request is being handled */
	json_decref(run(URL, id, "kept = 'state'\nimport time\nget_ipython()."
				 "input_transformers_post.append(lambda lines: (print('transforming', "
				 "flush=True), time.sleep(1), lines)[2])"));
	pid_t kpid = context_pid(URL, id, "kernel_pid");
	bg_start(&a);
	/* in the transformer's sleep, execute_input is out */
	cr_assert_eq(bg_wait_stdout(&a, 10000), 0, "the transformer never ran");
	cr_assert_eq(context_post(URL, id, "interrupt", 10), 200);
	bg_join(&a);
	json_t *e = line_of(a.lines, "error", 0);
	cr_assert_not_null(e);
	cr_assert_str_eq(json_string_value(json_object_get(e, "name")), "KeyboardInterrupt");
	char *never = stdout_of(a.lines);
	cr_assert(!strstr(never, "never"), "the interrupted code ran: %s", never);
	free(never);
	json_decref(a.lines);

	json_t *l = run(URL, id, "print(kept)"); /* the transformer prints for it too */
	char *out = stdout_of(l);
	size_t n = strlen(out);
	cr_assert(n >= 6 && !strcmp(out + n - 6, "state\n"), "the kernel lost its state: %s", out);
	free(out);
	json_decref(l);
	cr_assert_eq(context_pid(URL, id, "kernel_pid"), kpid, "the kernel was restarted");
	free(id);
}

static struct broker priv;

static void
priv_stop(void)
{
	cr_expect_eq(broker_stop(&priv), 0, "sanitizer report in the broker log");
}

static void
priv_queue_of_one(void)
{
	static const char *const args[] = {"--max-queue", "1", "--pool", "0", NULL};

	cr_assert_eq(broker_start(&priv, args), 0);
}

Test(admission, queue_limit_answers_429_and_changes_nothing, .init = priv_queue_of_one,
     .fini = priv_stop, .timeout = 90)
{
	char acode[256], go[300];
	/* a runs until the over-limit request was answered */
	until_told(acode, sizeof(acode) - 16, "sandcell-go-queue");
	strcat(acode, "\nprint('a')");
	struct bg a = {.base = priv.b_url, .code = acode, .timeout_ms = 30000};
	struct bg q = {.base = priv.b_url, .code = "print('queued')", .timeout_ms = 30000};
	struct resp r;

	/* the default context of this broker */
	cr_assert_eq(http(priv.b_url, "GET", "/contexts", NULL, &r, 5), 0);
	json_t *ctxs = json_loads(r.r_body, 0, NULL);
	const char *id = json_string_value(json_object_get(json_array_get(ctxs, 0), "id"));
	resp_free(&r);
	cr_assert_not_null(id);
	char *ws = context_host_cwd(priv.b_url, id);
	cr_assert_not_null(ws);
	snprintf(go, sizeof(go), "%s/sandcell-go-queue", ws);
	free(ws);
	unlink(go);
	a.ctx = q.ctx = id;
	bg_start(&a);
	cr_assert_eq(wait_context_int(priv.b_url, id, "queue", 1, 10000), 0);
	bg_start(&q);
	cr_assert_eq(wait_context_int(priv.b_url, id, "queue", 2, 10000), 0);
	long st;
	json_t *over = execute_code(priv.b_url, id, "print('over')", NULL, 5000, &st);
	cr_assert_null(over);
	cr_assert_eq(st, 429);
	told_to(go);
	bg_join(&a);
	unlink(go);
	bg_join(&q);
	char *oa = stdout_of(a.lines), *oq = stdout_of(q.lines);
	cr_assert_str_eq(oa, "a\n");
	cr_assert_str_eq(oq, "queued\n");
	free(oa);
	free(oq);
	json_decref(a.lines);
	json_decref(q.lines);
	json_decref(ctxs);
}

/*
 * A client that leaves 0-4 ms after its request, over and over: its output
 * never reaches the next client, whose own code always runs, alone, in every
 * language whose kernel takes an early interrupt.
 */
struct gone_case {
	const char *lang;
	const char *prev, *next; /* printf formats of an int: print PREV-i then wait 1 s; NEXT-i */
};

static const struct gone_case gone_cases[] = {
	{"python", "print('PREV-%d'); import time; time.sleep(1)", "print('NEXT-%d')"},
	{"javascript", "console.log('PREV-%d'); let t = Date.now(); while (Date.now() - t < 1000) {}",
	 "console.log('NEXT-%d')"},
	{"bash", "echo PREV-%d; sleep 1", "echo NEXT-%d"},
};

static int gone_index[] = {0, 1, 2};

ParameterizedTestParameters(admission, client_gone_within_ms_leaves_nothing_behind)
{
	return cr_make_param_array(int, gone_index, sizeof(gone_cases) / sizeof(gone_cases[0]));
}

ParameterizedTest(int *ci, admission, client_gone_within_ms_leaves_nothing_behind, .timeout = 240)
{
	const struct gone_case *c = &gone_cases[*ci];
	char *id = context_new(URL, c->lang, "/tmp");
	int wrong = 0;

	cr_assert_not_null(id, "%s: no context", c->lang);
	for (int i = 0; i < 30; i++) {
		char prev[256], next[128], want[32];
		snprintf(prev, sizeof(prev), c->prev, i);
		snprintf(next, sizeof(next), c->next, i);
		snprintf(want, sizeof(want), "NEXT-%d\n", i);
		post_and_leave(id, prev, (i % 5) * 1000);
		json_t *l = run(URL, id, next);
		char *out = stdout_of(l);
		json_t *e = line_of(l, "error", 0);
		if (strcmp(out, want) || e) {
			cr_log_error("%s: round %d: got '%s', error %s: %s", c->lang, i, out,
				     e ? json_string_value(json_object_get(e, "name")) : "none",
				     e ? json_string_value(json_object_get(e, "value")) : "");
			wrong++;
		}
		free(out);
		json_decref(l);
	}
	cr_assert_eq(wrong, 0, "%s: %d of 30 next executions got wrong output", c->lang, wrong);
	free(id);
}
