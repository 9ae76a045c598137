/*
 * ports_test.c — lib/ports.c: the five loopback ports of a Deno kernel's
 * channels are never the same twice in one set. Ports chosen one by one and
 * given back at once repeat in about one set in 1,400 (then the kernel cannot
 * bind its channels and its start fails, which for a kernel started with its
 * Deno configuration meant a start without it).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>

#include "../../lib/lib.h"

#define SETS 20000 /* ~14 sets with a repeat, chosen one by one */

Test(ports, each_set_of_five_is_distinct)
{
	int ports[5], repeats = 0;

	/* a network namespace of its own where we may: the machine's ports are others' */
	if (unshare(CLONE_NEWNET) == 0 && system("ip link set lo up 2>/dev/null") != 0)
		cr_skip_test("a network namespace without loopback (no ip(8))");
	for (int s = 0; s < SETS; s++) {
		cr_assert_eq(ports_free(ports, 5), 0, "set %d", s);
		bool repeat = false;
		for (int i = 0; i < 5; i++) {
			cr_assert(ports[i] > 0 && ports[i] < 65536, "port %d", ports[i]);
			for (int j = 0; j < i; j++)
				repeat |= ports[i] == ports[j];
		}
		repeats += repeat;
	}
	cr_expect_eq(repeats, 0, "%d sets of %d repeat a port", repeats, SETS);
}

Test(ports, more_than_it_can_hold_is_einval)
{
	int ports[32];

	cr_expect_eq(ports_free(ports, 32), -EINVAL);
}
