/*
 * parse_test.c — operator numbers (lib/parse.c) and flags from the
 * environment (lib/optenv.c): units are understood, everything else is
 * refused whole, and a flag given on the command line beats its variable.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "unit_stubs.h"

static const struct {
	const char *in;
	uint64_t want;
} sizes_ok[] = {
    {"0", 0},
    {"16", 16},
    {"16M", 16ull << 20},
    {"16m", 16ull << 20},
    {"4G", 4ull << 30},
    {"4GiB", 4ull << 30},
    {"512KiB", 512ull << 10},
    {"2k", 2048},
    {"1T", 1ull << 40},
    {"100B", 100},
    {"18446744073709551615", UINT64_MAX},
};

static const struct {
	const char *in;
	int rc;
} sizes_bad[] = {
    {"", -EINVAL},       {"-1", -EINVAL},     {" 16", -EINVAL},   {"+16", -EINVAL},
    {"16X", -EINVAL},    {"16 M", -EINVAL},   {"16MM", -EINVAL},  {"0x10", -EINVAL},
    {"1.5G", -EINVAL},   {"M", -EINVAL},      {"16M ", -EINVAL},
    {"18446744073709551616", -ERANGE},        {"17179869184G", -ERANGE},
};

Test(parse, sizes_take_binary_units)
{
	for (size_t i = 0; i < sizeof(sizes_ok) / sizeof(sizes_ok[0]); i++) {
		uint64_t v = 1234;
		cr_expect_eq(parse_size(sizes_ok[i].in, UINT64_MAX, &v), 0, "'%s' refused",
			     sizes_ok[i].in);
		cr_expect_eq(v, sizes_ok[i].want, "'%s' gave %llu", sizes_ok[i].in,
			     (unsigned long long)v);
	}
}

Test(parse, garbage_sizes_are_refused_whole)
{
	for (size_t i = 0; i < sizeof(sizes_bad) / sizeof(sizes_bad[0]); i++) {
		uint64_t v = 1234;
		cr_expect_eq(parse_size(sizes_bad[i].in, UINT64_MAX, &v), sizes_bad[i].rc,
			     "'%s' not refused as expected", sizes_bad[i].in);
		cr_expect_eq(v, 1234, "'%s' wrote a value though refused", sizes_bad[i].in);
	}
}

Test(parse, size_over_the_maximum_is_out_of_range)
{
	uint64_t v;

	cr_expect_eq(parse_size("64M", 64u << 20, &v), 0);
	cr_expect_eq(parse_size("65M", 64u << 20, &v), -ERANGE);
	cr_expect_eq(parse_size("67108865", 64u << 20, &v), -ERANGE);
}

Test(parse, durations_take_time_units_and_bare_numbers_are_seconds)
{
	static const struct {
		const char *in;
		uint64_t ms;
	} ok[] = {{"30", 30000}, {"30s", 30000}, {"250ms", 250}, {"2m", 120000},
		  {"1h", 3600000}, {"0", 0}, {"1.5s", 1500}, {"0.25", 250}, {"0.5h", 1800000}};
	static const char *const bad[] = {"", "-5", "5x", "5S", "5 s", "s", "5sec", "5ms5",
					  "1.", ".5", "0.0001s", "1.5ms", "1e3", "1.2.3"};
	uint64_t v;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		cr_expect_eq(parse_duration(ok[i].in, UINT64_MAX, &v), 0, "'%s' refused",
			     ok[i].in);
		cr_expect_eq(v, ok[i].ms, "'%s' gave %llu ms", ok[i].in, (unsigned long long)v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(parse_duration(bad[i], UINT64_MAX, &v), -EINVAL, "'%s' accepted",
			     bad[i]);
	cr_expect_eq(parse_duration("18446744073709551615h", UINT64_MAX, &v), -ERANGE);
	cr_expect_eq(parse_duration("2h", 3600000, &v), -ERANGE);
}

Test(parse, seconds_refuse_a_fraction_rather_than_round_it)
{
	uint64_t v;

	cr_expect_eq(parse_seconds("2m", 3600, &v), 0);
	cr_expect_eq(v, 120);
	cr_expect_eq(parse_seconds("3000ms", 3600, &v), 0);
	cr_expect_eq(v, 3);
	cr_expect_eq(parse_seconds("1500ms", 3600, &v), -EDOM);
	cr_expect_eq(parse_seconds("1.5", 3600, &v), -EDOM);
	cr_expect_eq(parse_seconds("2h", 3600, &v), -ERANGE);
}

Test(parse, counts_are_plain_integers_in_range)
{
	uint64_t v;

	cr_expect_eq(parse_count("64", 0, 64, &v), 0);
	cr_expect_eq(v, 64);
	cr_expect_eq(parse_count("65", 0, 64, &v), -ERANGE);
	cr_expect_eq(parse_count("0", 1, 64, &v), -ERANGE);
	cr_expect_eq(parse_count("4k", 0, 1u << 20, &v), -EINVAL);
	cr_expect_eq(parse_count("", 0, 64, &v), -EINVAL);
	cr_expect_eq(parse_count("-0", 0, 64, &v), -EINVAL);
}

/* ---- optenv ---- */

static const struct option opts[] = {
    {"max-body", required_argument, NULL, 'b'},
    {"keep-contexts", no_argument, NULL, 'k'},
    {"listen", required_argument, NULL, 'l'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void
clear_env(void)
{
	unsetenv("SCT_MAX_BODY");
	unsetenv("SCT_KEEP_CONTEXTS");
	unsetenv("SCT_LISTEN");
	unsetenv("SCT_HELP");
}

Test(optenv, variables_become_flags_and_flags_win, .init = clear_env)
{
	char *argv[] = {"prog", "--listen", "127.0.0.1:1", NULL};
	struct optenv oe;
	const char *listen = NULL, *body = NULL, *body_from = NULL, *listen_from = NULL;
	bool keep = false;
	int c, li;

	setenv("SCT_MAX_BODY", "2M", 1);
	setenv("SCT_LISTEN", "0.0.0.0:2", 1);
	setenv("SCT_KEEP_CONTEXTS", "yes", 1);
	setenv("SCT_HELP", "1", 1); /* not a setting: ignored */
	cr_assert_eq(optenv_build(&oe, "SCT", opts, 3, argv), 0);
	optind = 1;
	while ((li = -1, c = getopt_long(oe.oe_argc, oe.oe_argv, "h", opts, &li)) != -1) {
		const char *from = optenv_origin(&oe, opts, li, optind);
		switch (c) {
		case 'b': body = optarg, body_from = from; break;
		case 'k': keep = true; break;
		case 'l': listen = optarg, listen_from = from; break;
		default: cr_assert_fail("unexpected option %c", c);
		}
	}
	cr_expect_str_eq(body, "2M");
	cr_expect_str_eq(body_from, "SCT_MAX_BODY");
	cr_expect(keep);
	cr_expect_str_eq(listen, "127.0.0.1:1", "the flag did not win over SCT_LISTEN");
	cr_expect_str_eq(listen_from, "--listen");
	optenv_free(&oe);
	clear_env();
}

Test(optenv, a_switch_that_is_off_or_garbage, .init = clear_env)
{
	char *argv[] = {"prog", NULL};
	struct optenv oe;

	setenv("SCT_KEEP_CONTEXTS", "no", 1);
	cr_assert_eq(optenv_build(&oe, "SCT", opts, 1, argv), 0);
	cr_expect_eq(oe.oe_argc, 1, "an off switch still became a flag");
	optenv_free(&oe);
	setenv("SCT_KEEP_CONTEXTS", "perhaps", 1);
	cr_expect_eq(optenv_build(&oe, "SCT", opts, 1, argv), -EINVAL);
	clear_env();
}
