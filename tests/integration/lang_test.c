/*
 * lang_test.c — every language sandcell installs, through the same HTTP path:
 * python (ipykernel), javascript and typescript (Deno), r (IRkernel), bash and
 * java (the wrapper kernels in proxy/jupyter). One table row per language.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define GLOBAL_VALUE "g l\"o'b$al \xc3\xa9"
#ifndef LANG_BROKER_ARGS /* lang_isolated_test.c runs these again with its own */
#define LANG_BROKER_ARGS "--no-default-context"
#endif
HARNESS_SHARED_BROKER(LANG_BROKER_ARGS, "--env", "SC_GLOBAL=" GLOBAL_VALUE);

#define URL test_url()

struct lang_case {
	const char *lang;
	const char *set_state, *print_state; /* prints 42 */
	const char *hello;                   /* prints hi */
	const char *fail, *error_name, *error_says;
	const char *print_env, *print_env_or_unset; /* V, then "unset" when absent */
	const char *print_cwd;
	const char *result, *result_text; /* a value shown as a result (NULL: none) */
	const char *long_running;
};

static const struct lang_case cases[] = {
	{"python", "x = 41", "print(x + 1)", "print('hi')", "1/0", "ZeroDivisionError",
	 "division by zero", "import os; print(os.environ['V'])",
	 "import os; print(os.environ.get('V', 'unset'))", "import os; print(os.getcwd())",
	 "6*7", "42", "import time; time.sleep(30)"},
	{"javascript", "var x = 41;", "console.log(x + 1)", "console.log('hi')",
	 "throw new TypeError('boom')", "TypeError", "boom", "console.log(Deno.env.get('V'))",
	 "console.log(Deno.env.get('V') ?? 'unset')", "console.log(Deno.cwd())", "6*7", "42",
	 "let t = Date.now(); while (Date.now() - t < 30000) {}"},
	{"typescript", "var x: number = 41;", "const y: number = x + 1; console.log(y)",
	 "const s: string = 'hi'; console.log(s)", "throw new TypeError('boom')", "TypeError",
	 "boom", "console.log(Deno.env.get('V'))",
	 "console.log(Deno.env.get('V') ?? 'unset')", "console.log(Deno.cwd())",
	 "const n: number = 6; n * 7", "42",
	 "const t: number = Date.now(); while (Date.now() - t < 30000) {}"},
	{"r", "x <- 41", "cat(x + 1, '\\n', sep = '')", "cat('hi\\n')", "stop('boom')", "ERROR",
	 "boom", "cat(Sys.getenv('V'), '\\n', sep = '')",
	 "cat(Sys.getenv('V', unset = 'unset'), '\\n', sep = '')",
	 "cat(getwd(), '\\n', sep = '')", "6*7", "[1] 42", "Sys.sleep(30)"},
	{"bash", "x=41", "echo $((x + 1))", "echo hi", "f() { return 3; }; f", "ExitStatus",
	 "exit status 3", "printf '%s\\n' \"$V\"", "echo \"${V-unset}\"", "pwd", NULL, NULL,
	 "sleep 30"},
	{"java", "int x = 41;", "System.out.println(x + 1)", "System.out.println(\"hi\")",
	 "throw new IllegalStateException(\"boom\")", "IllegalStateException", "boom",
	 "System.out.println(System.getenv(\"V\"))",
	 "System.out.println(Objects.toString(System.getenv(\"V\"), \"unset\"))",
	 "System.out.println(System.getProperty(\"user.dir\"))", "6*7", "42",
	 "long t = System.currentTimeMillis();\n"
	 "while (System.currentTimeMillis() - t < 30000) {}"},
};

/* Parameters are indexes: criterion re-executes the binary for each test,
 * so pointers into the parent's memory would not survive. */
static int case_index[] = {0, 1, 2, 3, 4, 5};

ParameterizedTestParameters(lang, behaves)
{
	return cr_make_param_array(int, case_index, sizeof(cases) / sizeof(cases[0]));
}

/* POST /execute with env_vars env (borrowed; NULL: none). */
static json_t *
exec_with(const char *ctx, const char *code, json_t *env)
{
	json_t *body = json_pack("{s:s, s:s}", "code", code, "context_id", ctx);
	if (env)
		json_object_set(body, "env_vars", env);
	char *s = json_dumps(body, 0);
	long st;
	json_t *l = execute(URL, s, &st, 60000);
	free(s);
	json_decref(body);
	return l;
}

static json_t *
exec_env(const char *ctx, const char *code, const char *k, const char *v)
{
	json_t *env = k ? json_pack("{s:s}", k, v) : NULL;
	json_t *l = exec_with(ctx, code, env);

	json_decref(env);
	return l;
}

static void
check_stdout(json_t *l, const char *want, const char *what, const char *lang)
{
	char *out = stdout_of(l);
	cr_expect_str_eq(out, want, "%s: %s: got '%s'", lang, what, out);
	if (line_of(l, "error", 0))
		cr_log_error("%s: %s: unexpected error %s", lang, what,
			     json_string_value(json_object_get(line_of(l, "error", 0), "value")));
	free(out);
}

ParameterizedTest(int *ci, lang, behaves, .timeout = 120)
{
	const struct lang_case *c = &cases[*ci];
	const char *value = "it's \"q\" \\ back\\slash\nnew line $HOME ${X} `id` \xc3\xa9 \xe2\x98\xba";
	char *id = context_new(URL, c->lang, "/tmp");
	char *want;
	json_t *l;

	cr_assert_not_null(id, "%s: no context", c->lang);

	json_decref(run(URL, id, c->set_state));
	l = run(URL, id, c->print_state);
	check_stdout(l, "42\n", "state persists", c->lang);
	json_decref(l);

	l = run(URL, id, c->hello);
	check_stdout(l, "hi\n", "stdout", c->lang);
	cr_expect_eq(count_of(l, "number_of_executions"), 1, "%s: %d number_of_executions lines",
		     c->lang, count_of(l, "number_of_executions"));
	json_decref(l);

	l = run(URL, id, c->fail);
	json_t *e = line_of(l, "error", 0);
	cr_expect_not_null(e, "%s: no error line", c->lang);
	if (e) {
		cr_expect_str_eq(json_string_value(json_object_get(e, "name")), c->error_name,
				 "%s: error name", c->lang);
		cr_expect(strstr(json_string_value(json_object_get(e, "value")), c->error_says),
			  "%s: error value '%s'", c->lang,
			  json_string_value(json_object_get(e, "value")));
	}
	cr_expect_not_null(line_of(l, "end_of_execution", 0));
	json_decref(l);

	l = exec_env(id, c->print_env, "V", value);
	want = malloc(strlen(value) + 2);
	sprintf(want, "%s\n", value);
	check_stdout(l, want, "env var byte-exact", c->lang);
	free(want);
	json_decref(l);
	l = exec_env(id, c->print_env_or_unset, NULL, NULL);
	check_stdout(l, "unset\n", "env var restored", c->lang);
	json_decref(l);

	l = run(URL, id, c->print_cwd);
	check_stdout(l, "/tmp\n", "cwd", c->lang);
	json_decref(l);

	if (c->result) {
		l = run(URL, id, c->result);
		cr_expect_str_eq(result_text(l), c->result_text, "%s: result", c->lang);
		cr_expect(json_is_true(json_object_get(line_of(l, "result", 0), "is_main_result")),
			  "%s: the value is the main result", c->lang);
		json_decref(l);
	}

	/* interrupt ends a long-running execution; the context lives on */
	struct bg b = {.ctx = id, .code = c->long_running};
	bg_start(&b);
	/* running: the proxy holds the interrupt until the code has started */
	cr_expect_eq(wait_context_int(URL, id, "queue", 1, 10000), 0, "%s: never ran", c->lang);
	double t0 = ms_now();
	cr_expect(context_post(URL, id, "interrupt", 10) > 0);
	bg_join(&b);
	/* it ends the code, which would run 30 s */
	cr_expect(ms_since(t0) < 15000, "%s: ended %.0f ms after the interrupt", c->lang,
		  ms_since(t0));
	cr_expect_not_null(line_of(b.lines, "error", 0), "%s: interrupted without an error",
			   c->lang);
	cr_expect_not_null(line_of(b.lines, "end_of_execution", 0));
	json_decref(b.lines);
	l = run(URL, id, c->hello);
	check_stdout(l, "hi\n", "works after the interrupt", c->lang);
	json_decref(l);
	free(id);
}

Test(lang, names_are_normalised, .timeout = 60)
{
	char *js = context_new(URL, " JS ", NULL), *ts = context_new(URL, "ts", NULL);
	struct resp r;

	cr_assert_not_null(js);
	cr_assert_not_null(ts);
	cr_assert_eq(http(URL, "GET", "/contexts", NULL, &r, 5), 0);
	cr_assert(strstr(r.r_body, "\"javascript\"") && strstr(r.r_body, "\"typescript\""),
		  "%s", r.r_body);
	resp_free(&r);
	free(js);
	free(ts);
}

Test(lang, any_kernelspec_by_name, .timeout = 60)
{
	char *id = context_new(URL, "ir", NULL); /* IRkernel's kernelspec name */

	cr_assert_not_null(id);
	expect_stdout(URL, id, "cat(R.version$language, '\\n')", "R \n");
	free(id);
}

Test(lang, languages_are_listed, .timeout = 30)
{
	struct resp r;

	cr_assert_eq(http(URL, "GET", "/languages", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200);
	for (const char *l = "python\0javascript\0typescript\0r\0bash\0java\0"; *l;
	     l += strlen(l) + 1) {
		char q[32];
		snprintf(q, sizeof(q), "\"%s\"", l);
		cr_expect(strstr(r.r_body, q), "%s missing from %s", l, r.r_body);
	}
	resp_free(&r);
}

Test(lang, deno_output_after_idle_stays_with_its_execution, .timeout = 60)
{
	char *id = context_new(URL, "javascript", NULL);

	for (int i = 0; i < 20; i++) {
		char code[160];
		snprintf(code, sizeof(code),
			 "setTimeout(() => console.log('late %d'), 0); "
			 "Promise.resolve().then(() => console.log('micro %d')); %d",
			 i, i, i);
		json_t *l = run(URL, id, code);
		char *out = stdout_of(l), want[64];
		snprintf(want, sizeof(want), "micro %d\nlate %d\n", i, i);
		cr_assert_str_eq(out, want, "run %d", i);
		char num[16];
		snprintf(num, sizeof(num), "%d", i);
		cr_assert_str_eq(result_text(l), num, "run %d: result", i);
		free(out);
		json_decref(l);
	}
	free(id);
}

Test(lang, bash_last_argument_is_the_users, .timeout = 60)
{
	char *id = context_new(URL, "bash", NULL);

	cr_assert_not_null(id);
	json_decref(run(URL, id, "echo hi"));
	/* $_ after echo hi */
	expect_stdout(URL, id, "echo \"$_\"", "hi\n");
	/* the env set and restore around a request leave it alone */
	json_decref(exec_env(id, "echo there", "V", "x"));
	/* $_ after echo there with env_vars */
	expect_stdout(URL, id, "echo \"$_\"", "there\n");
	free(id);
}

/*
 * Output a thread or timer makes after its execution ended belongs to no
 * later execution: neither one that is running when it comes, nor quick
 * ones in a row. It is dropped and counted.
 */
struct late_case {
	const char *lang;
	/* prints "started"; prints "late i" at 0.5 s, 1 s, ... 3 s, then makes late-done */
	const char *start;
	const char *wait; /* waits for late-done (30 s at most), removes it, prints "next" */
	const char *next; /* prints "next" */
};

static const struct late_case late_cases[] = {
	{"python",
	 "import threading, time\n"
	 "def spam():\n"
	 "    for i in range(6):\n"
	 "        time.sleep(0.5)\n"
	 "        print('late', i)\n"
	 "    open('late-done', 'w').close()\n"
	 "threading.Thread(target=spam, daemon=True).start()\n"
	 "print('started')",
	 "import os, time\n"
	 "for _ in range(600):\n"
	 "    if os.path.exists('late-done'): break\n"
	 "    time.sleep(0.05)\n"
	 "os.remove('late-done')\nprint('next')",
	 "print('next')"},
	{"javascript",
	 "for (let i = 0; i < 6; i++) setTimeout(() => { console.log('late', i); "
	 "if (i == 5) Deno.writeTextFileSync('late-done', ''); }, 500 * (i + 1));\n"
	 "console.log('started')",
	 "for (let i = 0; i < 600; i++) { try { Deno.statSync('late-done'); break; } "
	 "catch { await new Promise((r) => setTimeout(r, 50)); } }\n"
	 "Deno.removeSync('late-done'); console.log('next')",
	 "console.log('next')"},
	{"typescript",
	 "for (let i: number = 0; i < 6; i++) setTimeout(() => { console.log('late', i); "
	 "if (i == 5) Deno.writeTextFileSync('late-done', ''); }, 500 * (i + 1));\n"
	 "console.log('started')",
	 "for (let i: number = 0; i < 600; i++) { try { Deno.statSync('late-done'); break; } "
	 "catch { await new Promise((r) => setTimeout(r, 50)); } }\n"
	 "Deno.removeSync('late-done'); console.log('next')",
	 "console.log('next')"},
};

static int late_index[] = {0, 1, 2};

ParameterizedTestParameters(lang, late_output_goes_to_no_later_execution)
{
	return cr_make_param_array(int, late_index, sizeof(late_cases) / sizeof(late_cases[0]));
}

static void
expect_only_next(json_t *l, const char *lang, const char *what)
{
	char *out = stdout_of(l);
	cr_expect_str_eq(out, "next\n", "%s: %s: got '%s'", lang, what, out);
	free(out);
}

ParameterizedTest(int *ci, lang, late_output_goes_to_no_later_execution, .timeout = 120)
{
	const struct late_case *c = &late_cases[*ci];
	char *id = context_new(URL, c->lang, NULL);
	json_t *l;

	cr_assert_not_null(id, "%s: no context", c->lang);
	double dropped = metric_value(URL, "sandcell_output_dropped_total");
	cr_assert(dropped >= 0, "no sandcell_output_dropped_total in /metrics");

	/* the late lines come while the next execution runs */
	l = run(URL, id, c->start);
	char *out = stdout_of(l);
	cr_expect_str_eq(out, "started\n", "%s: got '%s'", c->lang, out);
	free(out);
	json_decref(l);
	l = run(URL, id, c->wait);
	expect_only_next(l, c->lang, "an execution running when they come");
	json_decref(l);

	/* ... and between and during short ones, until the last has come */
	char *ws = context_host_cwd(URL, id), done[300];
	cr_assert_not_null(ws);
	snprintf(done, sizeof(done), "%s/late-done", ws);
	free(ws);
	json_decref(run(URL, id, c->start));
	double t0 = ms_now();
	while (access(done, F_OK) != 0) {
		cr_assert(ms_since(t0) < 30000, "%s: the late lines never ended", c->lang);
		l = run(URL, id, c->next);
		expect_only_next(l, c->lang, "short executions in a row");
		json_decref(l);
	}
	unlink(done);

	wait_metric(URL, "sandcell_output_dropped_total", dropped + 1, 10000);
	double now = metric_value(URL, "sandcell_output_dropped_total");
	cr_expect(now > dropped, "%s: sandcell_output_dropped_total stayed at %.0f", c->lang, now);
	free(id);
}

static bool
file_exists(void *path)
{
	return access(path, F_OK) == 0;
}

Test(lang, bash_background_output_goes_to_no_later_execution, .timeout = 60)
{
	char *id = context_new(URL, "bash", NULL);
	json_t *l;

	cr_assert_not_null(id);
	char done[300], code[400];
	double dropped = metric_value(URL, "sandcell_output_dropped_total");
	/* a file in the context's cwd (its workspace) says when the job has printed */
	char *ws = context_host_cwd(URL, id);
	cr_assert_not_null(ws);
	snprintf(done, sizeof(done), "%s/late-done.%d", ws, (int)getpid());
	free(ws);
	snprintf(code, sizeof(code),
		 "(sleep 0.3; echo late; echo late-err >&2; touch late-done.%d) & echo started",
		 (int)getpid());
	l = run(URL, id, code);
	char *out = stdout_of(l);
	cr_expect_str_eq(out, "started\n");
	free(out);
	json_decref(l);
	cr_assert_eq(wait_until(file_exists, done, 10000), 0, "the background job never printed");
	unlink(done);
	/* it printed while no execution ran: the next one does not get it */
	l = run(URL, id, "echo next");
	out = stdout_of(l);
	cr_expect_str_eq(out, "next\n", "got '%s'", out);
	cr_expect_null(line_of(l, "stderr", 0), "the late stderr came with the next execution");
	free(out);
	json_decref(l);
	cr_expect_eq(wait_metric(URL, "sandcell_output_dropped_total", dropped + 1, 10000), 0,
		     "sandcell_output_dropped_total stayed at %.0f",
		     metric_value(URL, "sandcell_output_dropped_total"));
	free(id);
}

/*
 * env_vars override what was there, whatever set it: the kernel's environment
 * (PATH, HOME), --env (SC_GLOBAL), user code (W); afterwards each is exactly
 * as before, value or absence.
 */
struct env_case {
	const char *lang;
	const char *print; /* PATH|HOME|SC_GLOBAL|W, "unset" for an absent one */
	const char *set_w; /* user code that sets W=mine (NULL: W stays absent) */
};

static const struct env_case env_cases[] = {
	{"python",
	 "import os; print('|'.join(os.environ.get(k, 'unset') for k in "
	 "('PATH', 'HOME', 'SC_GLOBAL', 'W')))",
	 "import os; os.environ['W'] = 'mine'"},
	{"javascript",
	 "console.log(['PATH', 'HOME', 'SC_GLOBAL', 'W'].map((k) => Deno.env.get(k) ?? "
	 "'unset').join('|'))",
	 "Deno.env.set('W', 'mine')"},
	{"typescript",
	 "const ks: string[] = ['PATH', 'HOME', 'SC_GLOBAL', 'W']; "
	 "console.log(ks.map((k: string) => Deno.env.get(k) ?? 'unset').join('|'))",
	 "Deno.env.set('W', 'mine')"},
	{"r",
	 "cat(paste(Sys.getenv(c('PATH', 'HOME', 'SC_GLOBAL', 'W'), unset = 'unset'), "
	 "collapse = '|'), '\\n', sep = '')",
	 "Sys.setenv(W = 'mine')"},
	{"bash", "echo \"${PATH-unset}|${HOME-unset}|${SC_GLOBAL-unset}|${W-unset}\"",
	 "W=mine"},
	{"java",
	 "System.out.println(String.join(\"|\", Stream.of(\"PATH\", \"HOME\", \"SC_GLOBAL\", "
	 "\"W\").map(k -> Objects.toString(System.getenv(k), \"unset\")).toList()))",
	 NULL},
};

ParameterizedTestParameters(lang, env_vars_leave_every_variable_as_it_was)
{
	static int idx[] = {0, 1, 2, 3, 4, 5};
	return cr_make_param_array(int, idx, sizeof(env_cases) / sizeof(env_cases[0]));
}

ParameterizedTest(int *ci, lang, env_vars_leave_every_variable_as_it_was, .timeout = 120)
{
	const struct env_case *c = &env_cases[*ci];
	char *id = context_new(URL, c->lang, "/tmp");
	char *before, *during, *after, want[256];
	json_t *env, *l;

	cr_assert_not_null(id, "%s: no context", c->lang);
	if (c->set_w)
		json_decref(run(URL, id, c->set_w));
	l = run(URL, id, c->print);
	before = stdout_of(l);
	json_decref(l);
	cr_assert(strncmp(before, "unset|", 6) && !strstr(before, "|unset|"),
		  "%s: PATH or HOME absent from the start: %s", c->lang, before);
	snprintf(want, sizeof(want), "|%s|%s\n", GLOBAL_VALUE, c->set_w ? "mine" : "unset");
	cr_assert(strstr(before, want), "%s: before: %s", c->lang, before);

	env = json_pack("{s:s, s:s, s:s, s:s}", "PATH", "/usr/bin:/bin", "HOME", "/tmp",
			"SC_GLOBAL", "req", "W", "req");
	l = exec_with(id, c->print, env);
	during = stdout_of(l);
	cr_expect_str_eq(during, "/usr/bin:/bin|/tmp|req|req\n", "%s: during", c->lang);
	json_decref(l);
	json_decref(env);

	l = run(URL, id, c->print);
	after = stdout_of(l);
	cr_expect_str_eq(after, before, "%s: after the request", c->lang);
	json_decref(l);
	free(before);
	free(during);
	free(after);
	free(id);
}

/* E2B sets env vars in Java as system properties too: per request and global. */
Test(lang, java_env_vars_are_system_properties, .timeout = 120)
{
	const char *value = "it's \"q\" \\ back\\slash\nnew line \xc3\xa9 \xe2\x98\xba";
	const char *print = "System.out.println(Stream.of(\"V\", \"W\", \"SC_GLOBAL\")"
			    ".map(k -> Objects.toString(System.getProperty(k), \"unset\"))"
			    ".collect(Collectors.joining(\"|\")))";
	char *id = context_new(URL, "java", "/tmp");
	char *out, *want;
	json_t *env, *l;

	cr_assert_not_null(id);
	json_decref(run(URL, id, "System.setProperty(\"W\", \"mine\");"));
	l = run(URL, id, print);
	check_stdout(l, "unset|mine|" GLOBAL_VALUE "\n", "before", "java");
	json_decref(l);

	env = json_pack("{s:s, s:s}", "V", value, "W", "req");
	l = exec_with(id, "System.out.println(System.getProperty(\"V\") + \"|\" + "
			  "System.getProperty(\"W\") + \"|\" + System.getenv(\"V\"))",
		      env);
	json_decref(env);
	out = stdout_of(l);
	want = malloc(2 * strlen(value) + 16);
	sprintf(want, "%s|req|%s\n", value, value);
	cr_expect_str_eq(out, want, "during: %s", out);
	free(want);
	free(out);
	json_decref(l);

	l = run(URL, id, print);
	check_stdout(l, "unset|mine|" GLOBAL_VALUE "\n", "after", "java");
	json_decref(l);

	/* a JVM started anew (System.exit) has the global ones as properties too */
	json_decref(run(URL, id, "System.exit(0);"));
	l = run(URL, id, "System.out.println(System.getProperty(\"SC_GLOBAL\") + \"|\" + "
			 "System.getenv(\"SANDCELL_GLOBAL_ENV\"))");
	check_stdout(l, GLOBAL_VALUE "|null\n", "after System.exit", "java");
	json_decref(l);
	free(id);
}

/*
 * bash's specials keep their magic after a request overrode them: RANDOM
 * random, SECONDS counting, LINENO the line, PWD where bash is; and a PATH
 * override does not leave bash unable to find commands.
 */
Test(lang, bash_specials_survive_env_vars, .timeout = 120)
{
	char *id = context_new(URL, "bash", "/tmp");
	json_t *env, *l;

	cr_assert_not_null(id);
	env = json_pack("{s:s, s:s, s:s, s:s, s:s}", "RANDOM", "7", "SECONDS", "100", "LINENO",
			"5", "PWD", "/var", "PATH", "/nonexistent");
	l = exec_with(id, "echo $SECONDS; cd /usr", env);
	json_decref(env);
	/*
	 * bash counts SECONDS on from an assignment by the wall clock's whole
	 * seconds: read a few ms after it is set, it is 101 when a second
	 * boundary fell in between (`SECONDS=100; sleep 0.3; echo $SECONDS`
	 * gives 101 three times in ten), never 102 so soon, and not overridden
	 * it counts from the context's start.
	 */
	char *out = stdout_of(l);
	cr_expect(out && (!strcmp(out, "100\n") || !strcmp(out, "101\n")),
		  "bash: SECONDS overridden: got '%s'", out);
	free(out);
	json_decref(l);

	l = run(URL, id, "declare -p RANDOM SECONDS LINENO | cut -c1-11; "
			 "a=$RANDOM b=$RANDOM c=$RANDOM; "
			 "[[ $a != \"$b\" || $b != \"$c\" ]] && echo random\n"
			 "\n"
			 "echo line $LINENO; echo \"$PWD\"; ls -d /");
	check_stdout(l,
		      "declare -i \ndeclare -i \ndeclare -- \nrandom\nline 3\n/usr\n/\n",
		      "after", "bash");
	json_decref(l);

	/* SECONDS counts on from its value before the request, not from 100 */
	l = run(URL, id, "s=$SECONDS; (( s < 100 )) && echo small; sleep 1.2; "
			 "echo $(( SECONDS - s >= 1 ))");
	check_stdout(l, "small\n1\n", "SECONDS counting", "bash");
	json_decref(l);
	free(id);
}

/* A request that ends its bash (exit) leaves the new bash's variables alone:
 * nothing was saved there, so nothing is restored over them. */
Test(lang, bash_exit_under_env_vars_keeps_the_new_bash_env, .timeout = 120)
{
	char *id = context_new(URL, "bash", "/tmp");
	json_t *env, *l;

	cr_assert_not_null(id);
	env = json_pack("{s:s, s:s}", "PATH", "/nonexistent", "SC_GLOBAL", "req");
	l = exec_with(id, "exit 3", env);
	json_decref(env);
	cr_expect_not_null(line_of(l, "error", 0), "exit gave no error");
	json_decref(l);
	l = run(URL, id, "echo \"${SC_GLOBAL-unset}\"; ls -d /");
	check_stdout(l, GLOBAL_VALUE "\n/\n", "after exit", "bash");
	json_decref(l);
	free(id);
}

/*
 * Output made after its execution is over goes to no later one. start runs
 * first and leaves something (a thread, a task) waiting on an event; release,
 * the next execution, sets it, waits for that something to finish and prints
 * "next True": the late output is made while release runs, and must not be
 * in its answer.
 */
static void
late_output_goes_to_no_later_execution(const char *start, const char *release)
{
	char *id = context_new(URL, "python", NULL);
	json_t *l;

	cr_assert_not_null(id);
	json_decref(run(URL, id, start));
	l = run(URL, id, release);
	char *out = stdout_of(l);
	cr_expect_str_eq(out, "next True\n", "the late output came with the next execution");
	cr_expect_null(line_of(l, "result", 0), "the late display came with the next execution");
	free(out);
	json_decref(l);
	free(id);
}

/* display() from a thread belongs to the execution that started the thread. */
Test(lang, python_thread_display_goes_to_no_later_execution, .timeout = 60)
{
	late_output_goes_to_no_later_execution(
	    "import threading\n"
	    "from IPython.display import display\n"
	    "ev = threading.Event()\n"
	    "def show():\n"
	    "    ev.wait()\n"
	    "    display({'late': 1}, raw=True)\n"
	    "    display('late')\n"
	    "t = threading.Thread(target=show, daemon=True)\n"
	    "t.start()",
	    "ev.set()\nt.join()\nprint('next', not t.is_alive())");
}

/*
 * An asyncio task belongs to the execution that created it: what it prints
 * or displays once that execution is over goes to no later one, even while
 * the later one awaits on the same loop (the task runs in its context).
 */
Test(lang, python_task_output_goes_to_no_later_execution, .timeout = 60)
{
	late_output_goes_to_no_later_execution(
	    "import asyncio\n"
	    "from IPython.display import display\n"
	    "ev = asyncio.Event()\n"
	    "async def show():\n"
	    "    await ev.wait()\n"
	    "    print('late')\n"
	    "    display({'late': 1}, raw=True)\n"
	    "    display('late')\n"
	    "task = asyncio.ensure_future(show())",
	    "ev.set()\nawait task\nprint('next', task.done())");
}

/*
 * Deno's interrupt stops running code but not an await: the proxy makes it
 * stop both. A client that leaves while its code awaits costs the execution
 * queued behind it nothing (it runs, in the same kernel, and sees the state);
 * an interrupt ends an awaiting execution with an interrupt error at once.
 */
struct deno_case {
	const char *lang;
	const char *set_v; /* %d: sets v to it */
	const char *print_v;
};

static const struct deno_case deno_cases[] = {
	{"javascript", "var v = %d;", "console.log(v)"},
	{"typescript", "var v: number = %d;", "const w: number = v; console.log(w)"},
};

ParameterizedTestParameters(lang,
			    deno_interrupt_after_a_disconnect_costs_the_next_execution_nothing)
{
	static int idx[] = {0, 1};
	return cr_make_param_array(int, idx, sizeof(deno_cases) / sizeof(deno_cases[0]));
}

struct arrived {
	const char *id;
	struct bg *b;
};

/* The execution is in the broker's queue, or its client has already left. */
static bool
arrived(void *arg)
{
	struct arrived *a = arg;
	json_t *j = context_get(URL, a->id);
	bool in = json_integer_value(json_object_get(j, "queue")) >= 1;

	json_decref(j);
	return in || __atomic_load_n(&a->b->done, __ATOMIC_SEQ_CST);
}

static void
set_v(const struct deno_case *c, const char *id, int v)
{
	char code[64];

	snprintf(code, sizeof(code), c->set_v, v);
	json_t *l = run(URL, id, code);
	cr_assert_str_eq(error_name(l), "(none)", "%s: set v: %s", c->lang, error_value(l));
	json_decref(l);
}

ParameterizedTest(int *ci, lang, deno_interrupt_after_a_disconnect_costs_the_next_execution_nothing,
		  .timeout = 120)
{
	const struct deno_case *c = &deno_cases[*ci];
	char *id = context_new(URL, c->lang, NULL);
	int rounds = 30, lost = 0, restarts = 0;

	cr_assert_not_null(id, "%s: no context", c->lang);
	pid_t kpid = context_pid(URL, id, "kernel_pid");
	double t0 = ms_now();
	for (int i = 0; i < rounds; i++) {
		/* the client leaves 1 to 50 ms after its request */
		struct bg a = {.ctx = id, .code = "await new Promise((r) => setTimeout(r, 5000))",
			       .timeout_ms = 1 + i * 49 / (rounds - 1)};
		struct bg q = {.ctx = id, .code = c->print_v, .timeout_ms = 30000};
		struct arrived arr = {id, &a};
		char want[16];

		set_v(c, id, 100 + i);
		bg_start(&a);
		cr_assert_eq(wait_until(arrived, &arr, 10000), 0, "%s: round %d: never queued",
			     c->lang, i);
		bg_start(&q);
		bg_join(&a);
		bg_join(&q);
		snprintf(want, sizeof(want), "%d\n", 100 + i);
		char *out = stdout_of(q.lines);
		if (strcmp(out, want)) {
			lost++;
			cr_log_error("%s: round %d (left after %ld ms): the next execution "
				     "got '%s', %s: %s", c->lang, i, a.timeout_ms, out,
				     error_name(q.lines), error_value(q.lines));
		}
		free(out);
		pid_t now = context_pid(URL, id, "kernel_pid");
		if (now != kpid) {
			restarts++;
			kpid = now;
		}
		json_decref(a.lines);
		json_decref(q.lines);
	}
	cr_expect_eq(lost, 0, "%s: %d of %d next executions did not see the state", c->lang, lost,
		     rounds);
	cr_expect_eq(restarts, 0, "%s: the kernel was restarted in %d of %d rounds", c->lang,
		     restarts, rounds);
	cr_log_info("%s: %d rounds in %.0f ms", c->lang, rounds, ms_since(t0));
	free(id);
}

ParameterizedTestParameters(lang, deno_interrupt_ends_an_awaiting_execution_and_keeps_state)
{
	static int idx[] = {0, 1};
	return cr_make_param_array(int, idx, sizeof(deno_cases) / sizeof(deno_cases[0]));
}

/*
 * A POST interrupt ends what awaits or computes with KeyboardInterrupt, and
 * the kernel keeps its state. One the kernel does not act on ends in a
 * restart after the interrupt grace (3 s): another pid, the state lost, both
 * checked.
 */
ParameterizedTest(int *ci, lang, deno_interrupt_ends_an_awaiting_execution_and_keeps_state,
		  .timeout = 120)
{
	/* each prints "started" once it awaits (or computes) */
	static const char *const awaiting[] = {
	    "console.log('started'); await new Promise((r) => setTimeout(r, 30000))",
	    "console.log('started'); await new Promise(() => {})",
	    "for (let i = 0; ; i++) { if (i == 1) console.log('started'); "
	    "await new Promise((r) => setTimeout(r, 10)); }",
	    "try { console.log('started'); await new Promise((r) => setTimeout(r, 30000)); } "
	    "catch { console.log('caught'); }",
	    "await new Promise((r) => setTimeout(r, 1)); console.log('started'); "
	    "let t = Date.now(); while (Date.now() - t < 30000) {}",
	};
	const struct deno_case *c = &deno_cases[*ci];
	char *id = context_new(URL, c->lang, NULL);

	cr_assert_not_null(id, "%s: no context", c->lang);
	pid_t kpid = context_pid(URL, id, "kernel_pid");
	for (size_t i = 0; i < sizeof(awaiting) / sizeof(awaiting[0]); i++) {
		struct bg b = {.ctx = id, .code = awaiting[i]};
		char want[16];

		set_v(c, id, 200 + (int)i);
		bg_start(&b);
		cr_assert_eq(bg_wait_stdout(&b, 10000), 0, "%s: case %zu never started", c->lang, i);
		double t0 = ms_now();
		cr_assert_eq(context_post(URL, id, "interrupt", 10), 200);
		bg_join(&b);
		double took = ms_since(t0);
		/* it ends what would run 30 s or for ever; how fast: make bench BENCH=cancel */
		cr_expect(took < 15000, "%s: case %zu: ended %.0f ms after the interrupt", c->lang,
			  i, took);
		cr_expect_str_eq(error_name(b.lines), "KeyboardInterrupt", "%s: case %zu: %s",
				 c->lang, i, error_value(b.lines));
		json_decref(b.lines);
		json_t *l = run(URL, id, c->print_v);
		char *out = stdout_of(l);
		snprintf(want, sizeof(want), "%d\n", 200 + (int)i);
		cr_expect_str_eq(out, want, "%s: case %zu: the state after the interrupt: %s",
				 c->lang, i, error_value(l));
		free(out);
		json_decref(l);
		cr_expect_eq(context_pid(URL, id, "kernel_pid"), kpid,
			     "%s: case %zu: the kernel was restarted", c->lang, i);
		kpid = context_pid(URL, id, "kernel_pid");
	}
	free(id);
}

/*
 * The abort listener is armed anew before each execution: one that is gone
 * (an interrupt that landed while it ran ends Deno's signal loop with it;
 * here the code removes it itself) costs that execution at most, never the
 * later ones their state.
 */
ParameterizedTestParameters(lang, deno_abort_listener_gone_is_armed_again)
{
	static int idx[] = {0, 1};
	return cr_make_param_array(int, idx, sizeof(deno_cases) / sizeof(deno_cases[0]));
}

ParameterizedTest(int *ci, lang, deno_abort_listener_gone_is_armed_again, .timeout = 120)
{
	const struct deno_case *c = &deno_cases[*ci];
	char *id = context_new(URL, c->lang, NULL);

	cr_assert_not_null(id, "%s: no context", c->lang);
	set_v(c, id, 300);
	json_t *l = run(URL, id,
			"Deno.removeSignalListener('SIGURG', globalThis[Symbol.for('sandcell')].abort)");
	cr_assert_str_eq(error_name(l), "(none)", "%s: remove: %s", c->lang, error_value(l));
	json_decref(l);
	pid_t kpid = context_pid(URL, id, "kernel_pid");
	struct bg b = {.ctx = id,
		       .code = "console.log('started'); await new Promise((r) => setTimeout(r, 30000))"};
	bg_start(&b);
	cr_assert_eq(bg_wait_stdout(&b, 10000), 0, "%s: never started", c->lang);
	cr_assert_eq(context_post(URL, id, "interrupt", 10), 200);
	bg_join(&b);
	cr_expect_str_eq(error_name(b.lines), "KeyboardInterrupt", "%s: %s", c->lang,
			 error_value(b.lines));
	json_decref(b.lines);
	l = run(URL, id, c->print_v);
	char *out = stdout_of(l);
	cr_expect_str_eq(out, "300\n", "%s: the state after the interrupt: %s", c->lang,
			 error_value(l));
	free(out);
	json_decref(l);
	cr_expect_eq(context_pid(URL, id, "kernel_pid"), kpid, "%s: the kernel was restarted",
		     c->lang);
	free(id);
}

#include "lang_packages.c"
