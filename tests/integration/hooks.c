/*
 * hooks.c — the shared broker of an integration test binary, started in
 * criterion's runner before all tests and stopped after them.
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

/* The shared broker: started in the runner before all tests, which inherit
 * its address through the environment (criterion re-executes each test). */
static struct broker shared;

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	struct broker *b = &shared;
	char pid[32];

	(void)set;
	curl_global_init(CURL_GLOBAL_ALL);
	if (broker_start(b, harness_broker_args) < 0) {
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
		char cmd[300];
		setenv("SANDCELL_KEEP_LOGS", "1", 1);
		fprintf(stderr, "== the last lines of the shared broker's log (%s):\n",
			shared.b_log);
		snprintf(cmd, sizeof(cmd), "tail -n 120 '%s' >&2", shared.b_log);
		if (system(cmd) != 0)
			fprintf(stderr, "(could not show it)\n");
	}
	if (broker_stop(&shared) < 0)
		exit(1); /* a sanitizer report fails the run */
}

