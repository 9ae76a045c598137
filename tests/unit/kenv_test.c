/*
 * kenv_test.c — what a kernel takes of the environment sandcell started
 * with: PATH, the locale and TZ, and the names --env-pass lists; never
 * another variable, nor a name that merely starts like a listed one.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>

#include "../../lib/lib.h"

Test(kenv, only_the_base_and_the_listed_names_pass)
{
	static const struct {
		const char *kv, *pass;
		bool passes;
	} cases[] = {
	    {"PATH=/usr/bin", NULL, true},
	    {"LANG=C.UTF-8", NULL, true},
	    {"LC_ALL=C", NULL, true},
	    {"TZ=UTC", NULL, true},
	    {"AWS_SECRET_ACCESS_KEY=x", NULL, false},
	    {"DATABASE_URL=x", "", false},
	    {"PATHX=x", NULL, false},
	    {"HTTPS_PROXY=http://p", "HTTPS_PROXY", true},
	    {"HTTPS_PROXY=http://p", "A,HTTPS_PROXY,B", true},
	    {"HTTPS_PROX=x", "HTTPS_PROXY", false},
	    {"HTTPS_PROXY_X=x", "HTTPS_PROXY", false},
	    {"SANDCELL_ACCESS_TOKEN=t", NULL, false},
	    {"NOEQUALS", "NOEQUALS", false},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_expect_eq(kenv_passes(cases[i].kv, cases[i].pass), cases[i].passes,
		             "%s with %s", cases[i].kv,
		             cases[i].pass ? cases[i].pass : "(none)");
}

Test(kenv, names_are_added_once_and_checked)
{
	char *list = NULL, *bad = NULL;

	cr_assert_eq(kenv_pass_add(&list, "A, B C", &bad), 0);
	cr_assert_eq(kenv_pass_add(&list, "B,D", &bad), 0);
	cr_expect_str_eq(list, "A,B,C,D");
	cr_expect_eq(kenv_pass_add(&list, "E 1X", &bad), -EINVAL);
	cr_expect_str_eq(bad, "1X");
	cr_expect_str_eq(list, "A,B,C,D", "a refused spec changes nothing");
	free(bad);
	free(list);
}
