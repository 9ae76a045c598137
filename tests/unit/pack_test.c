/*
 * pack_test.c — msg_pack reports a frame it could not build (an append that
 * failed, out of memory) instead of handing on a truncated one. The test
 * binary's nng_msg_append stands in for nng's and fails on demand.
 */
#include <dlfcn.h>

#include <criterion/criterion.h>

#include "unit_stubs.h"

static int appends_left = -1; /* -1: never fail */

int
nng_msg_append(nng_msg *m, const void *data, size_t len)
{
	static int (*real)(nng_msg *, const void *, size_t);

	if (!real)
		real = (int (*)(nng_msg *, const void *, size_t))dlsym(RTLD_NEXT, "nng_msg_append");
	if (appends_left == 0)
		return NNG_ENOMEM;
	if (appends_left > 0)
		appends_left--;
	return real(m, data, len);
}

static void
execute_msg(struct msg *m)
{
	msg_init(m, MSG_EXECUTE);
	msg_set_u64(m, F_STREAM, 7);
	msg_set_str(m, F_CODE, "print(1)", 8);
	msg_add_env(m, "FOO", "bar");
}

Test(pack, a_whole_frame_decodes_back)
{
	struct msg m, d;
	nng_msg *nm;

	execute_msg(&m);
	cr_assert_eq(msg_pack(&m, &nm), 0);
	cr_assert_eq(msg_decode(nng_msg_body(nm), nng_msg_len(nm), &d), 0);
	cr_assert_str_eq(d.m_code.s, "print(1)");
	msg_free(&d);
	nng_msg_free(nm);
	msg_free(&m);
}

Test(pack, a_failed_append_is_an_error_at_every_point)
{
	struct msg m;
	nng_msg *nm;
	int n;

	execute_msg(&m);
	/* how many appends a whole frame takes */
	for (n = 1;; n++) {
		appends_left = n;
		int e = msg_pack(&m, &nm);
		appends_left = -1;
		if (e == 0) {
			nng_msg_free(nm);
			break;
		}
		cr_assert_null(nm, "a failed pack hands back no message");
	}
	cr_assert(n > 3, "the frame took only %d appends", n);
	for (int k = 0; k < n; k++) {
		appends_left = k;
		int e = msg_pack(&m, &nm);
		appends_left = -1;
		cr_assert_neq(e, 0, "append %d of %d failed, yet the pack succeeded", k + 1, n);
	}
	msg_free(&m);
}
