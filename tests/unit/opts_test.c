/*
 * opts_test.c — a table of options (lib/opts.c): defaults first, then the
 * environment, then the command line; each type stored in its field; a bad
 * value refused with exit status 2; --help printed from the table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include "../../proto/proto.h"

static const char *s_name;
static bool s_on = true, s_flag, s_given;
static uint64_t s_size;
static unsigned s_secs;
static char s_ms[24];
static char *s_count_text;
static int s_seen;

static int
seen(const char *val, const char *origin)
{
	(void)val, (void)origin;
	s_seen++;
	return 0;
}

static const struct opt table[] = {
    {"name", "NAME", OPT_STRING, OPT_DST(s_name), .o_default = "dflt", .o_help = "a name"},
    {"no-thing", NULL, OPT_SWITCH, OPT_DST(s_on), OPT_OFF, .o_help = "turns it off"},
    {"flag", NULL, OPT_SWITCH, OPT_DST(s_flag), .o_help = "turns it on"},
    {"size", "SIZE", OPT_SIZE, OPT_DST(s_size), OPT_ZERO, 1u << 20, 1ull << 30, "a size",
     .o_given = &s_given, .o_default = "2M", .o_help = "a size"},
    {"secs", "DURATION", OPT_SECONDS, OPT_DST(s_secs), 0, 1, 3600, "seconds", .o_default = "1m",
     .o_help = "whole seconds"},
    {"ms", "DURATION", OPT_MS, OPT_DST(s_ms), OPT_DIGITS, 1, 60000, "ms", .o_shown = "worked out",
     .o_help = "milliseconds, as digits"},
    {"count", "N", OPT_COUNT, OPT_DST(s_count_text), OPT_XDIGITS, 0, 10, "a count",
     .o_default = "3", .o_help = "a count, as allocated digits"},
    {"each", "X", OPT_FUNC, .o_fn = seen, .o_help = "counted"},
};

static struct optset set = {
    .os_prog = "opts_test",
    .os_prefix = "OPTS_TEST",
    .os_usage = "usage: opts_test [options]\n",
    .os_opts = table,
    .os_n = sizeof(table) / sizeof(table[0]),
};

static int
parse(char **argv)
{
	char **operands;
	int argc = 0;

	while (argv[argc])
		argc++;
	return opts_parse(&set, argc, argv, &operands);
}

Test(opts, defaults_apply_when_nothing_is_given)
{
	char *argv[] = {"opts_test", NULL};

	cr_assert_eq(parse(argv), 0);
	cr_assert_str_eq(s_name, "dflt");
	cr_assert(s_on && !s_flag && !s_given);
	cr_assert_eq(s_size, 2u << 20);
	cr_assert_eq(s_secs, 60);
	cr_assert_str_eq(s_ms, "", "a shown default is not applied");
	cr_assert_str_eq(s_count_text, "3");
}

Test(opts, each_type_lands_in_its_field_and_operands_are_left)
{
	char *argv[] = {"opts_test", "--name", "n", "--no-thing", "--flag", "--size=0",
			"--secs", "90s", "--ms", "1.5s", "--count", "10", "--each", "a",
			"--each=b", "op1", "op2", NULL};
	char **operands;
	int argc = sizeof(argv) / sizeof(argv[0]) - 1;

	cr_assert_eq(opts_parse(&set, argc, argv, &operands), 2);
	cr_assert_str_eq(operands[0], "op1");
	cr_assert_str_eq(s_name, "n");
	cr_assert(!s_on && s_flag);
	cr_assert(s_given && s_size == 0, "0 is allowed under the minimum (OPT_ZERO)");
	cr_assert_eq(s_secs, 90);
	cr_assert_str_eq(s_ms, "1500");
	cr_assert_str_eq(s_count_text, "10");
	cr_assert_eq(s_seen, 2);
}

Test(opts, a_variable_is_read_and_the_command_line_wins)
{
	char *argv[] = {"opts_test", "--secs", "5", NULL};

	setenv("OPTS_TEST_SECS", "7", 1);
	setenv("OPTS_TEST_NAME", "from-env", 1);
	setenv("OPTS_TEST_FLAG", "yes", 1);
	cr_assert_eq(parse(argv), 0);
	cr_assert_eq(s_secs, 5);
	cr_assert_str_eq(s_name, "from-env");
	cr_assert(s_flag);
}

Test(opts, a_value_under_the_minimum_exits_2, .exit_code = 2,
     .init = cr_redirect_stderr)
{
	char *argv[] = {"opts_test", "--size", "4K", NULL};

	parse(argv);
}

Test(opts, a_bad_variable_exits_2, .exit_code = 2, .init = cr_redirect_stderr)
{
	char *argv[] = {"opts_test", NULL};

	setenv("OPTS_TEST_COUNT", "11", 1);
	parse(argv);
}

/* --help (stderr, exit 2): each option, its variable, help and default, from the table */
Test(opts, help_is_made_from_the_table)
{
	char out[8192];
	size_t n = 0;
	ssize_t r;
	pid_t pid;
	int pfd[2], st;

	cr_assert_eq(pipe(pfd), 0);
	if ((pid = fork()) == 0) {
		char *argv[] = {"opts_test", "--help", NULL};
		dup2(pfd[1], 2);
		parse(argv);
		_exit(0);
	}
	close(pfd[1]);
	while ((r = read(pfd[0], out + n, sizeof(out) - 1 - n)) > 0)
		n += r;
	out[n] = '\0';
	waitpid(pid, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	cr_assert(strstr(out, "usage: opts_test [options]\n"), "%s", out);
	cr_assert(strstr(out, "  --size SIZE                     OPTS_TEST_SIZE\n"
			      "        a size\n"
			      "        default: 2M\n"),
		  "%s", out);
	cr_assert(strstr(out, "        default: worked out\n"), "%s", out);
	cr_assert(strstr(out, "  --flag                          OPTS_TEST_FLAG\n"), "%s", out);
}
