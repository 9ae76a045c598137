/*
 * keeper.c — a context that must come through an attack with its state: a
 * variable set first and checked last. Suites only (it asserts with
 * criterion; the benchmarks and the soak link the harness without it).
 */
#include <stdlib.h>

#include <criterion/criterion.h>

#include "harness.h"

char *
keeper_new(const char *base)
{
	char *id = context_new(base, "python", NULL);

	cr_assert_not_null(id);
	json_decref(run(base, id, "kept = 'intact'"));
	return id;
}

void
keeper_check(const char *base, const char *id)
{
	char *out = run_stdout(base, id, "print(kept)");

	cr_assert_str_eq(out, "intact\n", "context %s lost its state", id);
	free(out);
}
