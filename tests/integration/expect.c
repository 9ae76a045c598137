/*
 * expect.c — assertions the suites share (criterion: not linked into the
 * benchmarks or the soak, which use the harness without it).
 */
#include <stdlib.h>

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
