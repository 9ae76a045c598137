/*
 * expect.c — assertions the suites share (criterion: not linked into the
 * benchmarks or the soak, which use the harness without it).
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "harness.h"

/* code, run in context id (NULL: the default), prints exactly want on stdout. */
void
expect_stdout(const char *base, const char *id, const char *code, const char *want)
{
	char *out = run_stdout(base, id, code);

	cr_assert_str_eq(out, want, "%s printed '%s', not '%s'", code, out, want);
	free(out);
}

/* A python execution in id prints 42: its kernel answers (restarted, if a cell ended it). */
static const char *expect_url;

static bool
answers(void *arg)
{
	char *out = run_stdout(expect_url, arg, "print(6*7)");
	bool ok = out && !strcmp(out, "42\n");

	free(out);
	return ok;
}

/*
 * Each of cells run in context id, beside busy, a neighbour printing lines
 * 0..lines-1 then "done" every 0.25 s: no cell ends the broker (pid broker),
 * id's proxy, the neighbour's proxy or kernel, /health stays 200, id answers
 * again after each (a fork bomb's box restarted: its processes may hold its
 * uid's for a while), and the neighbour runs to its end, never restarted.
 */
void
expect_cells_kill_only_their_own(const char *base, pid_t broker, const char *id,
				 const char *busy, const char *const *cells, size_t ncells,
				 int lines)
{
	pid_t proxy = context_pid(base, id, "proxy_pid");
	pid_t nproxy = context_pid(base, busy, "proxy_pid");
	pid_t nkernel = context_pid(base, busy, "kernel_pid");
	char code[160], end[32];
	struct bg b = {.base = base, .ctx = busy, .code = code, .timeout_ms = 200000};

	snprintf(code, sizeof(code),
		 "import time\nfor i in range(%d):\n    print(i, flush=True)\n"
		 "    time.sleep(0.25)\nprint('done')",
		 lines);
	snprintf(end, sizeof(end), "\n%d\ndone\n", lines - 1);
	expect_url = base;
	cr_assert(broker > 0 && proxy > 0 && nproxy > 0 && nkernel > 0);
	bg_start(&b);
	cr_assert_eq(bg_wait_stdout(&b, 30000), 0, "the busy neighbour started");
	for (size_t i = 0; i < ncells; i++) {
		struct resp r;
		json_decref(run(base, id, cells[i])); /* its own kernel may die of it */
		cr_assert_eq(kill(broker, 0), 0, "cell %zu ended the broker", i);
		cr_assert_eq(kill(proxy, 0), 0, "cell %zu ended its proxy", i);
		cr_assert_eq(kill(nproxy, 0), 0, "cell %zu ended the neighbour's proxy", i);
		cr_assert_eq(kill(nkernel, 0), 0, "cell %zu ended the neighbour's kernel", i);
		cr_assert_eq(http(base, "GET", "/health", NULL, &r, 5), 0);
		cr_assert_eq(r.r_status, 200, "cell %zu: /health %ld", i, r.r_status);
		resp_free(&r);
		if (strstr(cells[i], ":|:"))
			cr_assert_eq(context_post(base, id, "restart", 60), 200);
		cr_assert_eq(wait_until(answers, (void *)id, 60000), 0,
			     "cell %zu: its context answers again", i);
	}
	bg_join(&b);
	char *out = stdout_of(b.lines);
	cr_assert(strstr(out, end), "the busy neighbour ran to its end: %s",
		  out + (strlen(out) > 200 ? strlen(out) - 200 : 0));
	cr_assert_str_eq(error_name(b.lines), "(none)");
	cr_assert_eq(context_pid(base, busy, "kernel_pid"), nkernel, "the neighbour restarted");
	free(out);
	json_decref(b.lines);
}
