/*
 * core_test.c — the request path end to end: real broker, real proxies, real
 * ipykernel, over HTTP with libcurl.
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

Test(core, stdout_streams_live_before_the_end, .timeout = 30)
{
	json_t *l = run(URL, NULL,
			"import time\nfor i in range(3):\n    print(i)\n    time.sleep(0.5)\n");

	cr_assert_eq(count_of(l, "stdout"), 3, "each print is its own line");
	char *out = stdout_of(l);
	cr_assert_str_eq(out, "0\n1\n2\n");
	free(out);
	double first = json_real_value(json_object_get(line_of(l, "stdout", 0), "_ms"));
	double end = json_real_value(json_object_get(line_of(l, "end_of_execution", 0), "_ms"));
	/* the first line arrives while the code still sleeps, not with the end */
	cr_assert(end - first > 700, "first stdout at %.0f ms, end at %.0f ms", first, end);
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
		broker_stop(&order_broker);
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

Test(core, language_gets_a_default_context_on_first_use, .timeout = 60)
{
	long st;
	json_t *l = execute(URL, "{\"code\":\"lang_default = 5\",\"language\":\" PYTHON\"}",
			    &st, 30000);

	cr_assert_not_null(l, "status %ld", st);
	json_decref(l);
	l = execute(URL, "{\"code\":\"lang_default\",\"language\":\"python\"}", &st, 30000);
	cr_assert_str_eq(result_text(l), "5", "same default context for the language");
	json_decref(l);
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

struct body {
	char *p;
	size_t n;
};

static size_t
collect(char *p, size_t sz, size_t n, void *arg)
{
	struct body *b = arg;
	char *np = realloc(b->p, b->n + sz * n + 1);

	if (!np)
		return 0;
	memcpy(np + b->n, p, sz * n);
	b->p = np;
	b->n += sz * n;
	b->p[b->n] = '\0';
	return sz * n;
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
	struct body b = {0};
	char url[512];
	json_t *j = json_pack("{s:s}", "code", code);
	char *js = json_dumps(j, 0);
	long st = 0;

	snprintf(url, sizeof(url), "%s/execute", URL);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTP_VERSION, http_version);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, js);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	cr_assert_eq(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, len);
	cr_assert_eq(st, 200);
	cr_assert_not_null(b.p);
	curl_easy_cleanup(c);
	free(js);
	json_decref(j);
	*n = b.n;
	return b.p;
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
