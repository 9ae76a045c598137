/*
 * timeout_probe.c — not a test of sandcell's: a test binary whose one test
 * times out while its broker keeps a context running (--keep-contexts), as a
 * hung test's would. faults_test runs it and checks that its runner's sweep
 * (sweep.c) left nothing of it on the machine. It writes its broker's run
 * dir, its context's id and the context's uid to $SANDCELL_PROBE_OUT first.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"

HARNESS_SHARED_BROKER("--no-default-context", "--pool", "0");

static struct broker kept;

Test(probe, times_out_with_a_kept_context_running, .timeout = 15)
{
	const char *args[] = {"--keep-contexts", "--no-default-context", "--pool", "0", NULL};
	const char *out = getenv("SANDCELL_PROBE_OUT");
	FILE *f;

	cr_assert_not_null(out);
	cr_assert_eq(broker_start(&kept, args), 0);
	char *id = context_new(kept.b_url, "python", NULL);
	cr_assert_not_null(id);
	char *uid = run_stdout(kept.b_url, id, "import os; print(os.getuid())");
	cr_assert_not_null(f = fopen(out, "w"));
	fprintf(f, "%s %s %s", kept.b_run_dir, id, uid ? uid : "0\n");
	fclose(f);
	pause(); /* the scenario: a test that hangs until its timeout */
}
