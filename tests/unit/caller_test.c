/*
 * caller_test.c — which Host values name this server (caller.c): loopback
 * names, IP literals and listed names, with or without a port; and what
 * --allowed-origin and --allowed-host take.
 */
#include <stdio.h>

#include <criterion/criterion.h>

#include "../../broker/broker.h"

Test(caller_host, loopback_ip_literals_and_listed_names_only)
{
	static const struct {
		const char *host;
		bool ok;
	} cases[] = {
	    {"localhost", true},
	    {"localhost:49999", true},
	    {"LOCALHOST", true},
	    {"localhost.:49999", true},
	    {"app.localhost:3000", true},
	    {"127.0.0.1", true},
	    {"127.0.0.1:49999", true},
	    {"10.20.30.40:80", true},
	    {"[::1]", true},
	    {"[::1]:49999", true},
	    {"[fd00::1]:8080", true},
	    {"sandcell.test", true},
	    {"Sandcell.Test:49999", true},
	    {"", true},
	    {"evil.example", false},
	    {"evil.example:49999", false},
	    {"localhost.evil.example", false},
	    {"evillocalhost", false},
	    {"sandcell.test.evil.example", false},
	    {"x.sandcell.test", false},
	    {"::1", false},
	    {"[::1", false},
	    {"[::1]x", false},
	    {"[::1]:x", false},
	    {"localhost:x", false},
	    {"127.0.0.1:49999:1", false},
	    {"1.2.3", false},
	    {"[evil.example]", false},
	    {":49999", false},
	};

	cr_assert_eq(caller_host_option("sandcell.test", "--allowed-host"), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_expect_eq(caller_host_allowed(cases[i].host), cases[i].ok,
		             "Host '%s': %s", cases[i].host,
		             cases[i].ok ? "refused" : "taken");
}

Test(caller_host, star_takes_any_name)
{
	cr_assert_eq(caller_host_option("a.example, *", "SANDCELL_ALLOWED_HOST"), 0);
	cr_expect(caller_host_allowed("evil.example:49999"));
}

Test(caller_options, malformed_names_and_origins_are_refused)
{
	static const char *const bad_origins[] = {"http://app.example/",
	                                          "app.example",
	                                          "http://",
	                                          "http://a b",
	                                          "null",
	                                          "://x",
	                                          "1http://x"};
	static const char *const bad_hosts[] = {"a.example:80", "a/b", "a b c!"};

	for (size_t i = 0; i < sizeof(bad_origins) / sizeof(bad_origins[0]); i++)
		cr_expect_lt(caller_origin_option(bad_origins[i], "--allowed-origin"), 0,
		             "'%s'", bad_origins[i]);
	for (size_t i = 0; i < sizeof(bad_hosts) / sizeof(bad_hosts[0]); i++)
		cr_expect_lt(caller_host_option(bad_hosts[i], "--allowed-host"), 0,
		             "'%s'", bad_hosts[i]);
	cr_expect_eq(caller_origin_option("https://app.example,http://localhost:3000",
	                                  "--allowed-origin"),
	             0);
	cr_expect_eq(
	    caller_origin_option("chrome-extension://abcdef", "--allowed-origin"), 0);
}
