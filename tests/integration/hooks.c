/*
 * hooks.c — the shared broker of an integration test binary, started in
 * criterion's runner before all tests and stopped after them; and the logs
 * of the brokers a test starts itself, shown when that test failed.
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <curl/curl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"

/* The shared broker: started in the runner before all tests, which inherit
 * its address through the environment (criterion re-executes each test). */
static struct broker shared;

/*
 * A test's own brokers log into the runner's directory of logs (made before
 * all tests, named in SANDCELL_TEST_LOGS), as SUITE.TEST.PID.N.log: each
 * test runs in a worker process of its own, which criterion's runner cannot
 * see into, and which a timeout kills before its fixtures' end.
 */
static bool
test_log_name(char *path, size_t len)
{
	static int n;
	const char *dir = getenv("SANDCELL_TEST_LOGS");
	const struct criterion_test *t = criterion_current_test;

	if (!dir || !t)
		return false; /* the runner's own: the shared broker */
	return snprintf(path, len, "%s/%s.%s.%d.%d.log", dir, t->category, t->name,
			(int)getpid(), n++) < (int)len;
}

__attribute__((constructor)) static void
hooks_init(void)
{
	harness_log_name = test_log_name;
}

static void
show_tail(const char *what, const char *path, int lines)
{
	char cmd[700];

	fprintf(stderr, "== %s: the last lines of its log (%s):\n", what, path);
	snprintf(cmd, sizeof(cmd), "tail -n %d '%s' >&2", lines, path);
	if (system(cmd) != 0)
		fprintf(stderr, "(could not show it)\n");
}

/* Shows the end of each log of a failed test; true when it had any. */
static bool
show_test_logs(const char *dir, const struct criterion_test *t)
{
	char pattern[512], what[300];
	glob_t g;
	bool any;

	snprintf(pattern, sizeof(pattern), "%s/%s.%s.*.log", dir, t->category, t->name);
	if (glob(pattern, 0, NULL, &g) != 0)
		return false;
	any = g.gl_pathc > 0;
	snprintf(what, sizeof(what), "%s::%s failed, a broker it started", t->category, t->name);
	for (size_t i = 0; i < g.gl_pathc; i++)
		show_tail(what, g.gl_pathv[i], 80);
	globfree(&g);
	return any;
}

/* After all tests: a failed test's logs are shown and kept, the others removed. */
static void
test_logs_end(struct criterion_global_stats *st)
{
	const char *dir = getenv("SANDCELL_TEST_LOGS");
	bool kept = getenv("SANDCELL_KEEP_LOGS") != NULL;
	char cmd[300];

	if (!dir)
		return;
	for (struct criterion_suite_stats *s = st->suites; s; s = s->next)
		for (struct criterion_test_stats *t = s->tests; t; t = t->next)
			if (t->test_status == CR_STATUS_FAILED || t->crashed || t->timed_out)
				kept |= show_test_logs(dir, t->test);
	if (kept) {
		fprintf(stderr, "== the test brokers' logs are kept in %s\n", dir);
		return;
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	struct broker *b = &shared;
	char pid[32], logs[64];

	(void)set;
	curl_global_init(CURL_GLOBAL_ALL);
	snprintf(logs, sizeof(logs), "/tmp/sandcell-test-logs.XXXXXX");
	if (mkdtemp(logs))
		setenv("SANDCELL_TEST_LOGS", logs, 1);
	if ((harness_broker_contained ? broker_start_contained(b, harness_broker_args)
				      : broker_start(b, harness_broker_args)) < 0) {
		fprintf(stderr, "harness: the shared broker did not start\n");
		exit(1);
	}
	snprintf(pid, sizeof(pid), "%d", (int)b->b_pid);
	setenv("SANDCELL_TEST_URL", b->b_url, 1);
	setenv("SANDCELL_TEST_RUN_DIR", b->b_run_dir, 1);
	setenv("SANDCELL_TEST_PID", pid, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *st)
{
	/* a failed run keeps the shared broker's log and shows its end */
	if (st->tests_failed || st->tests_crashed) {
		setenv("SANDCELL_KEEP_LOGS", "1", 1);
		show_tail("the shared broker", shared.b_log, 120);
	}
	int stopped = broker_stop(&shared);
	harness_sweep(); /* before the logs go: it lists the run dirs there */
	test_logs_end(st);
	if (stopped < 0)
		exit(1); /* a sanitizer report fails the run */
}

