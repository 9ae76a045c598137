/*
 * ctlpeer_test.c — the control socket's bookkeeping of clients that left:
 * every closed pipe is handed to the loop and ends its watch, however many
 * close before the loop handles them.
 */
#include <criterion/criterion.h>

#include "../../broker/broker.h"

#define N 200

static bool seen[N + 1];
static int nseen;

/* What control.c does with each pipe reaped (ends its runs): here, counted. */
static void
reaped(uint32_t id, void *arg)
{
	(void)arg;
	cr_assert(id >= 1 && id <= N, "pipe %u was never closed", id);
	cr_expect(!seen[id], "pipe %u reaped twice", id);
	seen[id] = true;
	nseen++;
}

static void
quiet(void)
{
	log_init("ctlpeer_test", LOG_ERR);
}

Test(ctlpeer, every_client_gone_in_one_turn_is_reaped_once, .init = quiet)
{
	for (uint32_t id = 1; id <= N; id++)
		ctlpeer_gone(id); /* all before the loop's turn */
	ctlpeer_reap(reaped, NULL);
	cr_assert_eq(nseen, N, "%d of %d departed clients were reaped", nseen, N);
	ctlpeer_reap(reaped, NULL);
	cr_assert_eq(nseen, N, "a client was reaped in a later turn again");
}

Test(ctlpeer, watchers_of_departed_clients_are_removed, .init = quiet)
{
	for (uint32_t id = 1; id <= 20; id++)
		cr_assert_eq(ctlpeer_watch((nng_pipe){.id = id}, id), 0);
	cr_assert_eq(ctlpeer_watchers(), 20);
	for (uint32_t id = 100; id < 200; id++)
		ctlpeer_gone(id); /* others first: the watchers' ids come past 64 */
	for (uint32_t id = 1; id <= 20; id++)
		ctlpeer_gone(id);
	ctlpeer_reap(reaped, NULL);
	cr_assert_eq(ctlpeer_watchers(), 0, "%zu watcher slots leaked",
	             ctlpeer_watchers());
}
