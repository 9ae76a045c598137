/*
 * control_test.c — the control socket's bookkeeping of clients that left:
 * every closed pipe ends its watch and cancels its runs, however many close
 * before the loop handles them.
 */
#include <criterion/criterion.h>

#include "unit_stubs.h"

static void
streams_init(void)
{
	TAILQ_INIT(&sv.sv_streams);
	TAILQ_INIT(&sv.sv_contexts);
	TAILQ_INIT(&sv.sv_parked);
	log_init("control_test", LOG_ERR);
}

/* A run of a ctl client on pipe id, with no context (nothing to cancel at a proxy). */
static void
ctl_run_on(uint32_t id)
{
	struct stream *s = xcalloc(1, sizeof(*s));

	s->st_ctl = true;
	s->st_pipe.id = id;
	s->st_fd = s->st_spill_fd = -1;
	TAILQ_INSERT_TAIL(&sv.sv_streams, s, st_link);
}

Test(control, every_client_gone_in_one_turn_has_its_runs_ended, .init = streams_init)
{
	enum { N = 200 };

	for (uint32_t id = 1; id <= N; id++)
		ctl_run_on(id);
	for (uint32_t id = 1; id <= N; id++)
		control_pipe_gone(id); /* all before the loop's turn */
	control_pipe_events();
	int left = 0;
	struct stream *s;
	TAILQ_FOREACH(s, &sv.sv_streams, st_link)
		left++;
	cr_assert_eq(left, 0, "%d of %d runs of departed clients are still open", left, N);
}

Test(control, watchers_of_departed_clients_are_removed, .init = streams_init)
{
	for (uint32_t id = 1; id <= 20; id++) {
		sv.sv_watchers.w[sv.sv_watchers.n].pipe.id = id;
		sv.sv_watchers.w[sv.sv_watchers.n++].req = id;
	}
	for (uint32_t id = 100; id < 200; id++)
		control_pipe_gone(id); /* others first: the watchers' ids come past 64 */
	for (uint32_t id = 1; id <= 20; id++)
		control_pipe_gone(id);
	control_pipe_events();
	cr_assert_eq(sv.sv_watchers.n, 0, "%zu watcher slots leaked", sv.sv_watchers.n);
}
