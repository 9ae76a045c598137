/*
 * core_test.c — the request path end to end: real broker, real proxies, real
 * ipykernel, over HTTP with libcurl.
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "harness.h"

HARNESS_SHARED_BROKER("--max-body", "1048576", "--log-level", "info");

#define URL test_url()

Test(core, health_answers_ok, .timeout = 10)
{
	struct resp r;

	cr_assert_eq(http(URL, "GET", "/health", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200);
	cr_assert_str_eq(r.r_body, "\"OK\"");
	resp_free(&r);
}

Test(core, result_of_last_expression, .timeout = 30)
{
	json_t *l = run(URL, NULL, "1+1");

	cr_assert_not_null(l);
	cr_assert_str_eq(result_text(l), "2");
	cr_assert(json_is_true(json_object_get(line_of(l, "result", 0), "is_main_result")));
	/* every stream ends with end_of_execution, last */
	json_t *last = json_array_get(l, json_array_size(l) - 1);
	cr_assert_str_eq(json_string_value(json_object_get(last, "type")), "end_of_execution");
	json_decref(l);
}

Test(core, state_persists_across_calls, .timeout = 30)
{
	json_decref(run(URL, NULL, "sc_state = 41"));
	json_t *l = run(URL, NULL, "sc_state + 1");

	cr_assert_str_eq(result_text(l), "42");
	json_decref(l);
}

Test(core, string_result_has_quotes_stripped, .timeout = 30)
{
	json_t *l = run(URL, NULL, "'abc'");

	cr_assert_str_eq(result_text(l), "abc");
	json_decref(l);
}

Test(core, zero_division_gives_named_error_with_traceback, .timeout = 30)
{
	json_t *l = run(URL, NULL, "1/0");
	json_t *e = line_of(l, "error", 0);

	cr_assert_not_null(e);
	cr_assert_str_eq(json_string_value(json_object_get(e, "name")), "ZeroDivisionError");
	cr_assert_str_eq(json_string_value(json_object_get(e, "value")), "division by zero");
	cr_assert(strstr(json_string_value(json_object_get(e, "traceback")), "1/0") ||
		  strstr(json_string_value(json_object_get(e, "traceback")), "ZeroDivision"));
	cr_assert_not_null(line_of(l, "end_of_execution", 0));
	json_decref(l);
}

static bool
three_stdout_lines(void *arg)
{
	return __atomic_load_n(&((struct bg *)arg)->stdout_seen, __ATOMIC_SEQ_CST) >= 3;
}

/*
 * The code ends only once the test has seen its three lines (a file in the
 * workspace says so; 30 s at most): output held until the end never arrives
 * while it runs.
 */
Test(core, stdout_streams_live_before_the_end, .timeout = 60)
{
	char flag[512], code[1024];
	struct bg b = {.code = code};

	/* in the workspace: the kernel's cwd, <run dir>.work on the host */
	snprintf(flag, sizeof(flag), "%s.work/sandcell-streamed-%d", test_run_dir(),
		 (int)getpid());
	unlink(flag);
	snprintf(code, sizeof(code),
		 "import os, time\nfor i in range(3):\n    print(i)\n    time.sleep(0.5)\n"
		 "for _ in range(600):\n    if os.path.exists('%s'): break\n    time.sleep(0.05)\n",
		 strrchr(flag, '/') + 1);
	bg_start(&b);
	int live = wait_until(three_stdout_lines, &b, 15000);
	FILE *f = fopen(flag, "w");
	if (f)
		fclose(f);
	bg_join(&b);
	unlink(flag);
	json_t *l = b.lines;
	cr_assert_eq(live, 0, "the stdout lines did not arrive while the code ran");
	cr_assert_not_null(line_of(l, "end_of_execution", 0));
	cr_assert_null(line_of(l, "error", 0), "%s: %s", error_name(l), error_value(l));
	cr_assert_eq(count_of(l, "stdout"), 3, "each print is its own line");
	char *out = stdout_of(l);
	cr_assert_str_eq(out, "0\n1\n2\n");
	free(out);
	const char *ts = json_string_value(json_object_get(line_of(l, "stdout", 0), "timestamp"));
	cr_assert(ts && strlen(ts) == 27 && ts[26] == 'Z', "timestamp %s", ts ? ts : "-");
	json_decref(l);
}

Test(core, stderr_is_its_own_event, .timeout = 30)
{
	json_t *l = run(URL, NULL, "import sys; print('oops', file=sys.stderr)");
	json_t *e = line_of(l, "stderr", 0);

	cr_assert_not_null(e);
	cr_assert_str_eq(json_string_value(json_object_get(e, "text")), "oops\n");
	json_decref(l);
}

Test(core, display_html_gives_html_result, .timeout = 30)
{
	json_t *l = run(URL, NULL,
			"from IPython.display import HTML, display\ndisplay(HTML('<b>x</b>'))");
	json_t *r = line_of(l, "result", 0);

	cr_assert_not_null(r);
	cr_assert_str_eq(json_string_value(json_object_get(r, "html")), "<b>x</b>");
	cr_assert(json_is_false(json_object_get(r, "is_main_result")));
	json_decref(l);
}

Test(core, matplotlib_figure_gives_png, .timeout = 60)
{
	json_t *l = run(URL, NULL,
			"import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\n"
			"plt.show()");
	json_t *r = line_of(l, "result", 0);

	cr_assert_not_null(r, "no result line");
	const char *png = json_string_value(json_object_get(r, "png"));
	cr_assert(png && strncmp(png, "iVBORw0KGgo", 11) == 0, "png is base64 PNG");
	json_decref(l);
}

Test(core, execution_count_increments, .timeout = 30)
{
	json_t *a = run(URL, NULL, "None");
	json_t *b = run(URL, NULL, "None");
	json_int_t na = json_integer_value(
		json_object_get(line_of(a, "number_of_executions", 0), "execution_count"));
	json_int_t nb = json_integer_value(
		json_object_get(line_of(b, "number_of_executions", 0), "execution_count"));

	cr_assert(na > 0);
	cr_assert_eq(nb, na + 1);
	json_decref(a);
	json_decref(b);
}

Test(core, unicode_survives_the_round_trip, .timeout = 30)
{
	json_t *l = run(URL, NULL, "print('h\\u00e9llo \\u263a \\U0001F600')");
	char *out = stdout_of(l);

	cr_assert_str_eq(out, "h\xc3\xa9llo \xe2\x98\xba \xf0\x9f\x98\x80\n");
	free(out);
	json_decref(l);
}

Test(core, two_contexts_are_independent, .timeout = 60)
{
	char *a = context_new(URL, "python", NULL), *b = context_new(URL, "python", NULL);

	cr_assert(a && b && strcmp(a, b));
	json_decref(run(URL, a, "v = 'in a'"));
	json_t *l = run(URL, b, "'v' in globals()");
	cr_assert_str_eq(result_text(l), "False");
	json_decref(l);
	l = run(URL, a, "v");
	cr_assert_str_eq(result_text(l), "in a");
	json_decref(l);
	free(a);
	free(b);
}

Test(core, context_gets_its_cwd, .timeout = 60)
{
	char *id = context_new(URL, NULL, "/tmp");
	json_t *l = run(URL, id, "import os; os.getcwd()");

	cr_assert_str_eq(result_text(l), "/tmp");
	json_decref(l);
	free(id);
}

Test(core, list_contexts_shows_created_ones, .timeout = 60)
{
	char *id = context_new(URL, "Python ", "/tmp");
	struct resp r;

	cr_assert_not_null(id);
	cr_assert_eq(http(URL, "GET", "/contexts", NULL, &r, 5), 0);
	json_t *a = json_loads(r.r_body, 0, NULL);
	size_t i;
	json_t *c;
	bool found = false;
	json_array_foreach(a, i, c)
	{
		if (!strcmp(json_string_value(json_object_get(c, "id")), id)) {
			found = true;
			cr_assert_str_eq(json_string_value(json_object_get(c, "language")),
					 "python");
			cr_assert_str_eq(json_string_value(json_object_get(c, "cwd")), "/tmp");
		}
	}
	cr_assert(found);
	json_decref(a);
	resp_free(&r);
	free(id);
}

/* How many lines of the file at path contain needle. */
static int
lines_with(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	if (f)
		fclose(f);
	return n;
}

/* Waits until the log holds n lines with needle (a warm kernel), or 60 s. */
static bool
log_reaches(const char *path, const char *needle, int n)
{
	for (int i = 0; i < 600; i++) {
		if (lines_with(path, needle) >= n)
			return true;
		usleep(100000);
	}
	return false;
}

static struct broker order_broker; /* stopped by fini, even when an assertion fails */

static void
order_broker_stop(void)
{
	if (order_broker.b_pid > 0)
		cr_assert_eq(broker_stop(&order_broker), 0, "a sanitizer report in its log");
}

/*
 * GET /contexts lists contexts in the order they were handed out, as E2B
 * does: one claimed from the warm pool is listed as new, not where its kernel
 * was started (A pooled, R cold, B pooled: A, R, B; not A, B, R).
 */
Test(core, contexts_are_listed_in_the_order_they_were_created, .timeout = 120,
     .fini = order_broker_stop)
{
	static const char warm[] = "pool: a python3 kernel is warm";
	const char *args[] = {"--no-default-context", "--pool", "python=1", "--log-level", "info",
			      NULL};
	struct broker *b = &order_broker;
	char *ids[3], created[128];
	struct resp r;

	cr_assert_eq(broker_start(b, args), 0);
	cr_assert(log_reaches(b->b_log, warm, 1), "no warm kernel");
	ids[0] = context_new(b->b_url, "python", NULL);
	cr_assert(log_reaches(b->b_log, warm, 2), "the pool was not refilled");
	ids[1] = context_new(b->b_url, "bash", NULL); /* never pooled */
	ids[2] = context_new(b->b_url, "python", NULL);
	for (int i = 0; i < 3; i++)
		cr_assert_not_null(ids[i]);
	for (int i = 0; i < 3; i += 2) {
		snprintf(created, sizeof(created), "context %s: created from the warm pool", ids[i]);
		cr_assert_eq(lines_with(b->b_log, created), 1, "%s was not pooled", ids[i]);
	}

	cr_assert_eq(http(b->b_url, "GET", "/contexts", NULL, &r, 5), 0);
	json_t *a = json_loads(r.r_body, 0, NULL);
	cr_assert_eq(json_array_size(a), 3, "%s", r.r_body);
	for (size_t i = 0; i < 3; i++)
		cr_expect_str_eq(json_string_value(json_object_get(json_array_get(a, i), "id")),
				 ids[i], "position %zu: %s", i, r.r_body);
	json_decref(a);
	resp_free(&r);
	for (int i = 0; i < 3; i++)
		free(ids[i]);
	cr_assert_eq(broker_stop(b), 0, "sanitizer report in the broker log");
}

Test(core, restart_clears_state_keeps_id_and_cwd, .timeout = 90)
{
	char *id = context_new(URL, "python", "/tmp");

	json_decref(run(URL, id, "kept = 1"));
	cr_assert_eq(context_post(URL, id, "restart", 60), 200);
	json_t *l = run(URL, id, "'kept' in globals()");
	cr_assert_str_eq(result_text(l), "False");
	json_decref(l);
	l = run(URL, id, "import os; os.getcwd()");
	cr_assert_str_eq(result_text(l), "/tmp");
	json_decref(l);
	free(id);
}

Test(core, delete_makes_the_id_unknown, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL);
	struct resp r;
	char path[128], body[128];
	long st;

	snprintf(path, sizeof(path), "/contexts/%s", id);
	cr_assert_eq(http(URL, "DELETE", path, NULL, &r, 10), 0);
	cr_assert_eq(r.r_status, 200);
	resp_free(&r);
	snprintf(body, sizeof(body), "{\"code\":\"1\",\"context_id\":\"%s\"}", id);
	cr_assert_null(execute(URL, body, &st, 10000));
	cr_assert_eq(st, 404);
	cr_assert_eq(http(URL, "POST", "/contexts/x/restart", NULL, &r, 10), 0);
	cr_assert_eq(r.r_status, 404);
	resp_free(&r);
	free(id);
}

/* Bad input: a clear status and message, and nothing else disturbed. */
static const struct {
	const char *name, *body;
	long status;
	const char *says;
} bad_inputs[] = {
	{"malformed json", "{\"code\": ", 400, "invalid JSON"},
	{"not an object", "[1,2]", 400, "object"},
	{"code missing", "{}", 400, "'code' is required"},
	{"code not a string", "{\"code\": 5}", 400, "'code' must be a string"},
	{"env not an object", "{\"code\":\"1\",\"env_vars\":[1]}", 400, "env_vars"},
	{"env value not a string", "{\"code\":\"1\",\"env_vars\":{\"A\":1}}", 400, "'A'"},
	{"env key invalid", "{\"code\":\"1\",\"env_vars\":{\"1A\":\"x\"}}", 400, "1A"},
	{"both context and language",
	 "{\"code\":\"1\",\"context_id\":\"x\",\"language\":\"python\"}", 400, "both"},
	{"unknown context", "{\"code\":\"1\",\"context_id\":\"nope\"}", 404, "not found"},
	{"unknown language", "{\"code\":\"1\",\"language\":\"cobol-ish\"}", 400, "python"},
	{"duplicate keys", "{\"code\":\"1\",\"code\":\"2\"}", 400, "duplicate"},
	{"timeout not a number", "{\"code\":\"1\",\"timeout\":\"5\"}", 400, "timeout"},
};

Test(core, bad_inputs_get_clear_errors, .timeout = 60)
{
	json_decref(run(URL, NULL, "survivor = 7"));
	for (size_t i = 0; i < sizeof(bad_inputs) / sizeof(bad_inputs[0]); i++) {
		struct resp r;
		cr_assert_eq(http(URL, "POST", "/execute", bad_inputs[i].body, &r, 10), 0);
		cr_expect_eq(r.r_status, bad_inputs[i].status, "%s: status %ld (%s)",
			     bad_inputs[i].name, r.r_status, r.r_body);
		cr_expect(strstr(r.r_body, bad_inputs[i].says), "%s: '%s' lacks '%s'",
			  bad_inputs[i].name, r.r_body, bad_inputs[i].says);
		cr_expect(strstr(r.r_ctype, "text/plain"), "%s: %s", bad_inputs[i].name,
			  r.r_ctype);
		resp_free(&r);
	}
	json_t *l = run(URL, NULL, "survivor");
	cr_assert_str_eq(result_text(l), "7", "state survives bad requests");
	json_decref(l);
}

Test(core, body_over_the_limit_is_413, .timeout = 30)
{
	size_t n = 2u << 20; /* the shared broker allows 1 MiB */
	char *big = malloc(n + 32);
	struct resp r;

	strcpy(big, "{\"code\":\"");
	memset(big + 9, 'x', n);
	strcpy(big + 9 + n, "\"}");
	cr_assert_eq(http(URL, "POST", "/execute", big, &r, 20), 0);
	cr_assert_eq(r.r_status, 413);
	cr_assert(strstr(r.r_body, "limit"));
	resp_free(&r);
	free(big);
	json_t *l = run(URL, NULL, "2*3");
	cr_assert_str_eq(result_text(l), "6");
	json_decref(l);
}

Test(core, create_context_bad_input, .timeout = 30)
{
	struct resp r;

	cr_assert_eq(http(URL, "POST", "/contexts", "{\"language\":\"klingon\"}", &r, 10), 0);
	cr_assert_eq(r.r_status, 400);
	cr_assert(strstr(r.r_body, "available") && strstr(r.r_body, "python"), "%s",
		  r.r_body);
	resp_free(&r);
	cr_assert_eq(http(URL, "POST", "/contexts", "{\"cwd\":\"/no/such/dir\"}", &r, 10), 0);
	cr_assert_eq(r.r_status, 400);
	cr_assert(strstr(r.r_body, "cwd"));
	resp_free(&r);
	cr_assert_eq(http(URL, "POST", "/contexts", "{\"cwd\":5}", &r, 10), 0);
	cr_assert_eq(r.r_status, 400);
	resp_free(&r);
}

Test(core, unknown_paths_and_methods, .timeout = 30)
{
	struct resp r;

	cr_assert_eq(http(URL, "GET", "/nope", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 404);
	resp_free(&r);
	cr_assert_eq(http(URL, "GET", "/execute", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 405);
	resp_free(&r);
	cr_assert_eq(http(URL, "GET", "/contexts/../../etc/passwd", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 404);
	resp_free(&r);
}

/*
 * Request framing (RFC 9112 6.1, 6.3, 5.1, 5.2): a request whose body's end is
 * unclear gets a 400 and its connection is closed, so that the bytes after it
 * are never read as a request (request smuggling). Each is sent with a GET
 * pipelined behind it. later: also refused as a connection's second request,
 * which only MHD reads: there it joins a folded line to the field's name
 * unseen, and answers a Content-Length it cannot parse itself (and closes).
 */
#define SMUGGLED "GET /contexts HTTP/1.1\r\nHost: localhost\r\n\r\n"

static const struct {
	const char *name, *head, *says;
	bool later;
} bad_framing[] = {
    {"Content-Length and Transfer-Encoding",
     "POST /execute HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n"
     "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
     "Transfer-Encoding", true},
    {"Transfer-Encoding and Content-Length",
     "POST /execute HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n"
     "Content-Length: 5\r\n\r\n0\r\n\r\n",
     "Transfer-Encoding", true},
    {"two Content-Lengths that differ",
     "POST /execute HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
     "Content-Length: 5\r\n\r\n",
     "Content-Length", true},
    {"a Content-Length list",
     "POST /execute HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5, 6\r\n\r\n",
     "Content-Length", false},
    {"a Content-Length that is no number",
     "POST /execute HTTP/1.1\r\nHost: localhost\r\nContent-Length: abc\r\n\r\n", "Content-Length",
     false},
    {"Transfer-Encoding gzip",
     "POST /execute HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip\r\n\r\n",
     "Transfer-Encoding", true},
    {"Transfer-Encoding chunked, gzip",
     "POST /execute HTTP/1.1\r\nHost: localhost\r\n"
     "Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
     "Transfer-Encoding", true},
    {"Transfer-Encoding identity",
     "POST /execute HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: identity\r\n\r\n",
     "Transfer-Encoding", true},
    {"obs-fold with a space", "GET /health HTTP/1.1\r\nHost: localhost\r\nX-A: a\r\n b\r\n\r\n",
     "obs-fold", false},
    {"obs-fold with a tab", "GET /health HTTP/1.1\r\nHost: localhost\r\nX-A: a\r\n\tb\r\n\r\n",
     "obs-fold", false},
    {"whitespace before a colon", "GET /health HTTP/1.1\r\nHost : x\r\n\r\n",
     "header name", true},
};

/*
 * Sends req on a new connection and reads until the server closes it or 15 s
 * pass (a connection left open is cut by the header timeout only after 30 s);
 * what came back in out. Returns whether the server closed it.
 */
static bool
exchange(const char *req, char *out, size_t outsz)
{
	int fd = tcp_connect(URL);
	size_t n = 0, len = strlen(req);
	double t0 = ms_now();
	bool closed = false;

	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, req, len), (ssize_t)len);
	out[0] = '\0';
	while (!closed && ms_since(t0) < 15000) {
		struct pollfd p = {fd, POLLIN, 0};
		cr_assert_lt(n, outsz - 1, "more than %zu bytes came back: '%s'", n, out);
		if (poll(&p, 1, 15000 - (int)ms_since(t0)) <= 0)
			continue;
		ssize_t k = read(fd, out + n, outsz - 1 - n);
		cr_assert_geq(k, 0, "read: %s", strerror(errno));
		closed = k == 0;
		n += k;
		out[n] = '\0';
	}
	close(fd);
	return closed;
}

/* Status lines in what came back: how many responses. */
static int
responses_in(const char *out)
{
	int n = 0;

	for (const char *p = out; (p = strstr(p, "HTTP/1.1 ")); p++)
		n++;
	return n;
}

/* The body of the response at r, as much as its Content-Length says ("" if none). */
static const char *
body_of(const char *r, char *body, size_t bodysz)
{
	const char *cl = strstr(r, "\r\nContent-Length: "), *end = strstr(r, "\r\n\r\n");
	size_t len = cl ? strtoul(cl + 18, NULL, 10) : 0;

	body[0] = '\0';
	if (cl && end && cl < end && len < bodysz && strlen(end + 4) >= len)
		snprintf(body, bodysz, "%.*s", (int)len, end + 4);
	return body;
}

Test(core, bad_framing_is_400_and_the_connection_closed, .timeout = 120)
{
	char req[1024], out[8192], body[512];

	for (size_t i = 0; i < sizeof(bad_framing) / sizeof(bad_framing[0]); i++) {
		snprintf(req, sizeof(req), "%s%s", bad_framing[i].head, SMUGGLED);
		bool closed = exchange(req, out, sizeof(out));
		cr_expect(closed, "%s: the connection stayed open; came back: '%s'",
		          bad_framing[i].name, out);
		cr_expect_eq(responses_in(out), 1, "%s: %d responses: '%s'",
		             bad_framing[i].name, responses_in(out), out);
		cr_expect(!strncmp(out, "HTTP/1.1 400 ", 13), "%s: '%s'",
		          bad_framing[i].name, out);
		cr_expect(strstr(out, "\r\nContent-Type: text/plain"), "%s: '%s'",
		          bad_framing[i].name, out);
		cr_expect(strstr(body_of(out, body, sizeof(body)), bad_framing[i].says),
		          "%s: the answer does not name '%s': '%s'", bad_framing[i].name,
		          bad_framing[i].says, out);
	}
	struct resp r; /* other connections go on */
	cr_assert_eq(http(URL, "GET", "/health", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200);
	resp_free(&r);
}

Test(core, bad_framing_after_a_good_request_is_400_and_the_connection_closed,
     .timeout = 120)
{
	char req[1024], out[8192], body[512];

	for (size_t i = 0; i < sizeof(bad_framing) / sizeof(bad_framing[0]); i++) {
		if (!bad_framing[i].later)
			continue;
		snprintf(req, sizeof(req), "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n%s%s",
		         bad_framing[i].head, SMUGGLED);
		bool closed = exchange(req, out, sizeof(out));
		cr_expect(closed, "%s: the connection stayed open; came back: '%s'",
		          bad_framing[i].name, out);
		cr_expect_eq(responses_in(out), 2, "%s: %d responses: '%s'",
		             bad_framing[i].name, responses_in(out), out);
		const char *second = strstr(out + 1, "HTTP/1.1 ");
		cr_expect(!strncmp(out, "HTTP/1.1 200 ", 13) && second &&
		              !strncmp(second, "HTTP/1.1 400 ", 13),
		          "%s: '%s'", bad_framing[i].name, out);
		cr_expect(second && strstr(body_of(second, body, sizeof(body)),
		                           bad_framing[i].says),
		          "%s: the answer does not name '%s': '%s'", bad_framing[i].name,
		          bad_framing[i].says, out);
	}
}

/* The control: well-framed requests keep the connection for those after them. */
Test(core, pipelined_requests_after_well_framed_ones_are_answered, .timeout = 60)
{
	static const struct {
		const char *name, *head, *status;
	} good[] = {
	    {"no body", "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n", "200"},
	    {"a Content-Length",
	     "POST /health HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
	     "Content-Length: 5\r\n\r\nhello",
	     "405"},
	    {"chunked",
	     "POST /health HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
	     "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	     "405"},
	};
	char req[1024], out[8192], want[32];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		snprintf(
		    req, sizeof(req),
		    "%sGET /contexts HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
		    good[i].head);
		cr_expect(exchange(req, out, sizeof(out)),
		          "%s: open after Connection: close: '%s'", good[i].name, out);
		cr_expect_eq(responses_in(out), 2, "%s: %d responses: '%s'", good[i].name,
		             responses_in(out), out);
		snprintf(want, sizeof(want), "HTTP/1.1 %s ", good[i].status);
		const char *second = strstr(out + 1, "HTTP/1.1 ");
		cr_expect(!strncmp(out, want, strlen(want)) && second &&
		              !strncmp(second, "HTTP/1.1 200 ", 13),
		          "%s: '%s'", good[i].name, out);
	}
}

/* The ids of the listed contexts of a language. */
static json_t *
contexts_of(const char *language)
{
	struct resp r;
	json_t *all, *c, *ids = json_array();
	size_t i;

	cr_assert_eq(http(URL, "GET", "/contexts", NULL, &r, 5), 0);
	all = json_loads(r.r_body, 0, NULL);
	cr_assert_not_null(all, "%s", r.r_body);
	json_array_foreach(all, i, c)
		if (!strcmp(json_string_value(json_object_get(c, "language")), language))
			json_array_append(ids, json_object_get(c, "id"));
	json_decref(all);
	resp_free(&r);
	return ids;
}

/* bash has no default context at start-up (python and javascript do). */
Test(core, language_gets_a_default_context_on_first_use, .timeout = 60)
{
	long st;
	json_t *before = contexts_of("bash");

	cr_assert_eq(json_array_size(before), 0, "a bash context exists before its first use");
	json_decref(before);
	json_t *l = execute(URL, "{\"code\":\"lang_default=5\",\"language\":\" BASH\"}", &st,
			    60000);
	cr_assert_not_null(l, "status %ld", st);
	cr_assert_null(line_of(l, "error", 0));
	json_decref(l);
	json_t *after = contexts_of("bash");
	cr_assert_eq(json_array_size(after), 1, "the first use created one bash context");
	json_t *c = context_get(URL, json_string_value(json_array_get(after, 0)));
	cr_assert(json_is_true(json_object_get(c, "default")), "it is the default one");
	json_decref(c);
	l = execute(URL, "{\"code\":\"echo $lang_default\",\"language\":\"bash\"}", &st, 30000);
	char *out = stdout_of(l);
	cr_assert_str_eq(out, "5\n", "the same default context for the language");
	free(out);
	json_decref(l);
	json_t *again = contexts_of("bash");
	cr_assert(json_equal(again, after), "the second use created no other context");
	json_decref(again);
	json_decref(after);
}

Test(core, kernelspec_name_and_language_share_the_default_context, .timeout = 60)
{
	long st;
	json_t *l = execute(URL, "{\"code\":\"shared_default = 9\",\"language\":\"python\"}", &st,
			    30000);

	json_decref(l);
	l = execute(URL, "{\"code\":\"shared_default\",\"language\":\"python3\"}", &st, 30000);
	cr_assert_str_eq(result_text(l), "9");
	json_decref(l);
}

Test(core, output_with_nul_characters_is_delivered, .timeout = 30)
{
	json_t *l = run(URL, NULL, "print('a\\x00b')");
	json_t *s = line_of(l, "stdout", 0);

	cr_assert_not_null(s, "the line was dropped");
	cr_assert_eq(json_string_length(json_object_get(s, "text")), 4);
	cr_assert_eq(memcmp(json_string_value(json_object_get(s, "text")), "a\0b\n", 4), 0);
	json_decref(l);
}

/*
 * A Python kernel does not nap after each execution (ipykernel's 0.5 ms
 * Kernel._execute_sleep, off in the config the proxy writes) nor wait on its
 * sending thread to flush a stream that holds nothing (the profile's
 * quick_flush), and ending on the reply and iopub's idle loses nothing
 * without them: the last output of print, os.write to fd 1 and a thread's
 * print, in ten executions back to back, is each in its own execution's
 * response.
 */
Test(core, a_python_kernel_does_not_nap_and_loses_no_output, .timeout = 60)
{
	json_t *l = run(URL, NULL,
			"import sys\n"
			"(get_ipython().kernel._execute_sleep == 0,\n"
			" type(sys.stdout).flush.__name__ == 'quick_flush')");

	cr_assert_str_eq(result_text(l), "(True, True)",
			 "no nap after each execution, no wait on an empty flush: %s",
			 result_text(l));
	json_decref(l);
	for (int i = 0; i < 10; i++) {
		char code[512], want[128];
		snprintf(code, sizeof(code),
			 "import os, threading\n"
			 "print('p%d', flush=False)\n"
			 "os.write(1, b'w%d\\n')\n"
			 "t = threading.Thread(target=print, args=('t%d',)); t.start(); t.join()",
			 i, i, i);
		l = run(URL, NULL, code);
		char *out = stdout_of(l);
		cr_assert_not_null(out);
		for (int k = 0; k < 3; k++) {
			snprintf(want, sizeof(want), "%c%d\n", "pwt"[k], i);
			cr_expect(strstr(out, want), "execution %d lacks %s: %s", i, want, out);
		}
		free(out);
		json_decref(l);
	}
}

/*
 * POST /execute of code with libcurl as it comes off the wire, in the given
 * HTTP version: the body (caller frees), its size in *n, and the length the
 * response declared in *len (-1: none, a stream).
 */
static char *
post_raw(const char *code, long http_version, size_t *n, curl_off_t *len)
{
	CURL *c = curl_easy_init();
	struct sink b = {0};
	char url[512];
	json_t *j = json_pack("{s:s}", "code", code);
	char *js = json_dumps(j, 0);
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	long st = 0;

	snprintf(url, sizeof(url), "%s/execute", URL);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTP_VERSION, http_version);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, js);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	cr_assert_eq(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, len);
	cr_assert_eq(st, 200);
	cr_assert_not_null(b.data);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	free(js);
	json_decref(j);
	*n = b.len;
	return b.data;
}

/* HTTP/1.0 has no chunked encoding: the stream is the body, ended by close. */
Test(core, http_1_0_client_gets_the_whole_stream, .timeout = 60)
{
	size_t n;
	curl_off_t len;
	char *body = post_raw("print('y' * 300000)", CURL_HTTP_VERSION_1_0, &n, &len);
	json_t *lines = json_array();

	for (char *save = NULL, *l = strtok_r(body, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save))
		json_array_append_new(lines, json_loads(l, 0, NULL));
	char *out = stdout_of(lines);
	cr_assert_eq(strlen(out), 300001, "%zu of 300001 characters arrived", strlen(out));
	cr_assert_eq(count_of(lines, "end_of_execution"), 1);
	free(out);
	json_decref(lines);
	free(body);
}

/*
 * An execution that ends within the broker's park window is answered as one
 * response with a length; a longer one is streamed (chunked) as it runs. (A
 * busy machine may stretch 1 + 1 past the window: one try in ten must make it.)
 */
Test(core, short_execution_is_one_response_long_one_is_streamed, .timeout = 60)
{
	const char *codes[] = {"1 + 1", "import time\ntime.sleep(0.3)\n2 + 2"};
	const char *want[] = {"\"text\":\"2\"", "\"text\":\"4\""};
	int tries = 0;

	json_decref(run(URL, NULL, "0")); /* the default context is up */
	for (int i = 0; i < 2; i++) {
		size_t n;
		curl_off_t len = -1;
		char *body = post_raw(codes[i], CURL_HTTP_VERSION_1_1, &n, &len);

		cr_assert(strstr(body, want[i]), "%s", body);
		cr_assert(strstr(body, "{\"type\":\"end_of_execution\"}\n"));
		if (i == 1)
			cr_assert_eq(len, -1, "streamed, no length");
		else if (len != (curl_off_t)n && ++tries < 10)
			i--; /* again */
		else
			cr_assert_eq(len, (curl_off_t)n, "one response of %zu bytes", n);
		free(body);
	}
}

/* ---- start-up: kernels found beside the binary, numbers, the environment ---- */

static struct broker own; /* a test's private broker, stopped by its .fini */
static pid_t bare_pid;    /* one started without --listen */
static char bare_dir[64];

static void
own_stop(void)
{
	cr_assert_eq(broker_stop(&own), 0, "a sanitizer report in its log");
	if (bare_pid > 0) {
		/* SIGTERM first: a broker stops its contexts on its way out */
		kill(bare_pid, SIGTERM);
		for (int i = 0; i < 100 && waitpid(bare_pid, NULL, WNOHANG) != bare_pid; i++)
			usleep(50000);
		kill(bare_pid, SIGKILL);
		waitpid(bare_pid, NULL, 0);
	}
	if (bare_dir[0]) {
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", bare_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", bare_dir);
	}
}

Test(startup, bundled_kernels_are_found_without_jupyter_path, .timeout = 90, .fini = own_stop)
{
	const char *args[] = {"--no-default-context", NULL};
	struct resp r;

	unsetenv("JUPYTER_PATH"); /* as a service manager starts it */
	cr_assert_eq(broker_start(&own, args), 0);
	cr_assert_eq(http(own.b_url, "GET", "/languages", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200);
	for (const char *const *l = (const char *const[]){"\"bash\"", "\"java\"", "\"javascript\"",
							    NULL};
	     *l; l++)
		cr_expect(strstr(r.r_body, *l), "%s missing from %s", *l, r.r_body);
	resp_free(&r);
	json_t *lines = execute(own.b_url, "{\"code\":\"echo $((6*7))\",\"language\":\"bash\"}",
				NULL, 60000);
	char *out = stdout_of(lines);
	cr_expect_str_eq(out, "42\n");
	free(out);
	json_decref(lines);
}

/* Runs PROG with ARGS (and VAR=VALUE in its environment when given); its
 * exit status and what it said. */
static int
run_bad(const char *prog, const char *var, const char *args, char *out, size_t outsz)
{
	const char *bin = getenv("SANDCELL_BIN");
	char cmd[1200];

	/* a binary that wrongly takes the value runs, cheaply, until timeout(1) stops it */
	snprintf(cmd, sizeof(cmd), "timeout -k 2 3 env %s %s/%s --run-dir /tmp/sandcell-bad-%d %s %s 2>&1",
		 var ? var : "", bin ? bin : "bin", prog, (int)getpid(),
		 strcmp(prog, "sandcell-broker") ? ""
						  : "--listen 127.0.0.1:0 --no-default-context --pool 0",
		 args);
	FILE *p = popen(cmd, "r");
	size_t n = fread(out, 1, outsz - 1, p);
	out[n] = '\0';
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(startup, bad_numbers_exit_2_naming_the_flag_or_variable, .timeout = 120)
{
	static const struct {
		const char *prog, *var, *args, *named;
	} cases[] = {
	    {"sandcell-broker", NULL, "--max-body 16X", "--max-body"},
	    {"sandcell-broker", NULL, "--max-body 128M", "--max-body"},
	    {"sandcell-broker", NULL, "--kernel-memory 4", "--kernel-memory"},
	    {"sandcell-broker", NULL, "--kernel-memory -4G", "--kernel-memory"},
	    {"sandcell-broker", NULL, "--grace 10x", "--grace"},
	    {"sandcell-broker", NULL, "--conn-timeout ''", "--conn-timeout"},
	    {"sandcell-broker", NULL, "--header-timeout 99999999999999999999", "--header-timeout"},
	    {"sandcell-broker", NULL, "--max-queue 5k", "--max-queue"},
	    {"sandcell-broker", NULL, "--max-contexts 0", "--max-contexts"},
	    {"sandcell-broker", NULL, "--max-connections 1e3", "--max-connections"},
	    {"sandcell-broker", NULL, "--stream-cap 1Gb/s", "--stream-cap"},
	    {"sandcell-broker", NULL, "--kernel-cpu 1.5", "--kernel-cpu"},
	    {"sandcell-broker", NULL, "--pool python=lots", "--pool"},
	    {"sandcell-broker", NULL, "--interrupt-retry 1.5x", "--interrupt-retry"},
	    {"sandcell-broker", NULL, "--interrupt-grace 0", "--interrupt-grace"},
	    {"sandcell-broker", NULL, "--heartbeat-timeout 20x", "--heartbeat-timeout"},
	    {"sandcell-broker", "SANDCELL_MAX_BODY=16Q", "", "SANDCELL_MAX_BODY"},
	    {"sandcell-broker", "SANDCELL_GRACE=-1", "", "SANDCELL_GRACE"},
	    {"sandcell-broker", "SANDCELL_KEEP_CONTEXTS=maybe", "", "SANDCELL_KEEP_CONTEXTS"},
	    {"sandcell-proxy", NULL, "--spec-fd 3x", "--spec-fd"},
	    {"sandcell-proxy", NULL, "--uplink-serve --net-uid 10q", "--net-uid"},
	    {"sandcellctl", NULL, "--timeout 5x status", "--timeout"},
	    {"sandcellctl", NULL, "cancel 12abc", "cancel"},
	};
	char out[1024];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int st = run_bad(cases[i].prog, cases[i].var, cases[i].args, out, sizeof(out));
		cr_expect_eq(st, 2, "%s %s %s: exit %d, said: %s", cases[i].var ? cases[i].var : "",
			     cases[i].prog, cases[i].args, st, out);
		cr_expect(strstr(out, cases[i].named), "%s %s: '%s' not named in: %s",
			  cases[i].prog, cases[i].args, cases[i].named, out);
		cr_expect(strchr(out, '\n') == out + strlen(out) - 1, "not one line: %s", out);
	}
	snprintf(out, sizeof(out), "rm -rf /tmp/sandcell-bad-%d", (int)getpid());
	if (system(out) != 0)
		fprintf(stderr, "could not clean up: %s\n", out);
}

Test(startup, sizes_and_durations_take_units, .timeout = 60, .fini = own_stop)
{
	const char *args[] = {"--no-default-context", "--max-body", "2K", "--grace", "1m",
			      "--conn-timeout", "2m", NULL};
	char body[4096];
	struct resp r;

	cr_assert_eq(broker_start(&own, args), 0);
	/* 2K is 2048 bytes, not 2 */
	memset(body, ' ', 1000);
	memcpy(body, "{\"language\":\"python\"", 20);
	memcpy(body + 998, "}", 2);
	cr_assert_eq(http(own.b_url, "POST", "/contexts", body, &r, 60), 0);
	cr_assert_eq(r.r_status, 200, "1000 bytes under --max-body 2K: %ld %s", r.r_status,
		     r.r_body);
	resp_free(&r);
	memset(body, ' ', 3000);
	memcpy(body, "{\"code\":\"1\"", 11);
	memcpy(body + 2998, "}", 2);
	cr_assert_eq(http(own.b_url, "POST", "/execute", body, &r, 30), 0);
	cr_assert_eq(r.r_status, 413, "3000 bytes under --max-body 2K: %ld", r.r_status);
	resp_free(&r);
}

static int
health_on(int port)
{
	char url[64];
	struct resp r;
	long st = -1;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	if (http(url, "GET", "/health", NULL, &r, 2) == 0)
		st = r.r_status;
	resp_free(&r);
	return st;
}

Test(startup, listen_address_from_the_environment, .timeout = 60, .fini = own_stop)
{
	const char *bin = getenv("SANDCELL_BIN");
	char exe[512], listen[64];
	int port = free_port();

	snprintf(exe, sizeof(exe), "%s/sandcell-broker", bin ? bin : "bin");
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(bare_dir, sizeof(bare_dir), "/tmp/sandcell-test.XXXXXX");
	cr_assert_not_null(mkdtemp(bare_dir));
	if ((bare_pid = fork()) == 0) {
		setenv("SANDCELL_LISTEN", listen, 1);
		setenv("SANDCELL_RUN_DIR", bare_dir, 1);
		setenv("SANDCELL_NO_DEFAULT_CONTEXT", "yes", 1);
		execl(exe, exe, (char *)NULL);
		_exit(127);
	}
	int st = -1;
	for (int i = 0; i < 200 && (st = health_on(port)) != 200; i++) {
		cr_assert_neq(waitpid(bare_pid, NULL, WNOHANG), bare_pid, "the broker exited");
		usleep(50000);
	}
	cr_assert_eq(st, 200, "nothing answers on SANDCELL_LISTEN=%s", listen);
	struct stat sb;
	char lock[128];
	snprintf(lock, sizeof(lock), "%s/broker.lock", bare_dir);
	cr_expect_eq(stat(lock, &sb), 0, "SANDCELL_RUN_DIR not used");
}

Test(startup, a_flag_beats_its_variable, .timeout = 60, .fini = own_stop)
{
	const char *args[] = {"--no-default-context", NULL};
	char listen[64];
	int port = free_port();

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	setenv("SANDCELL_LISTEN", listen, 1); /* broker_start gives --listen too */
	cr_assert_eq(broker_start(&own, args), 0); /* waits on its --listen port */
	cr_expect_neq(health_on(port), 200, "the variable won over --listen");
}
