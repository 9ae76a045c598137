/*
 * admit_test.c — the admission queue alone: admit.c and unit.c linked with
 * nothing of the kernel or the link but the calls they make, which this
 * file stands in for (what was sent to the kernel, what the broker got).
 * It pins the order units run in, what a cancel and a lost kernel do to
 * them, and when an interrupt is sent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../proxy/proxy.h"

/* ---- the kernel and the link, as admit.c sees them ---- */

static struct {
	enum kstate state;
	const char *dead_reason;
	char *code[16]; /* the execute_requests sent, in order */
	int ncode;
	int interrupts, restarts;
	struct msg out[16]; /* what the broker got, in order */
	int nout;
} k = {.state = KS_IDLE};

int
kernel_execute(const char *code, bool silent, char msgid[40])
{
	(void)silent;
	cr_assert_lt(k.ncode, 16);
	k.code[k.ncode] = strdup(code);
	if (msgid)
		snprintf(msgid, 40, "msg-%d", k.ncode);
	k.ncode++;
	return 0;
}

int
kernel_probe(char msgid[40])
{
	snprintf(msgid, 40, "probe");
	return 0;
}

int
kernel_abort(void)
{
	return -1; /* no abort signal: the interrupt is sent */
}

long long
kernel_runnable_us(void)
{
	return -1;
}

void
kernel_interrupt(void)
{
	k.interrupts++;
}

void
kernel_restart(const char *why)
{
	(void)why;
	k.restarts++;
}

void
kernel_iopub_reconnect(void)
{
}

enum kstate
kernel_state(void)
{
	return k.state;
}

bool
kernel_can_run(void)
{
	return k.state == KS_IDLE;
}

void
kernel_set_busy(bool busy)
{
	k.state = busy ? KS_BUSY : KS_IDLE;
}

const char *
kernel_dead_reason(void)
{
	return k.dead_reason;
}

uint64_t
kernel_iopub_at(void)
{
	return now_ms();
}

char *
kconfig_take_notice(void)
{
	return NULL; /* the kernel started as it was asked to (Deno's configuration) */
}

void
ipc_send(struct msg *m)
{
	cr_assert_lt(k.nout, 16);
	struct msg *c = &k.out[k.nout++];
	msg_init(c, m->m_type);
	c->m_stream = m->m_stream;
	c->m_final = m->m_final;
	if (m->m_outcome.s)
		msg_set_str(c, F_OUTCOME, m->m_outcome.s, m->m_outcome.len);
}

/* ---- helpers ---- */

static struct kspec ks = {.ks_name = "python3", .ks_lang = "python"};
static struct proxy px = {.px_id = "00000000-0000-4000-8000-000000000000", .px_ks = &ks,
			  .px_interrupt_retry_ms = INTERRUPT_RETRY_MS,
			  .px_interrupt_grace_ms = INTERRUPT_GRACE_MS};

static void
setup(void)
{
	admit_init(&px);
}

static void
push(uint64_t stream, const char *code)
{
	struct msg m;

	msg_init(&m, MSG_EXECUTE);
	msg_set_u64(&m, F_STREAM, stream);
	msg_set_str(&m, F_CODE, code, strlen(code));
	admit_push(&m);
	msg_free(&m);
}

/* A message from the kernel about the execute_request sent n-th. */
static void
from_kernel(void (*on)(struct jmsg *), int n, const char *type, const char *content)
{
	char parent[40];
	struct jmsg jm = {.jm_type = type, .jm_parent_id = parent};

	snprintf(parent, sizeof(parent), "msg-%d", n);
	jm.jm_content = json_loads(content, 0, NULL);
	jm.jm_meta = json_object();
	on(&jm);
	json_decref(jm.jm_content);
	json_decref(jm.jm_meta);
}

/* The n-th request's reply and idle: its unit is complete. */
static void
complete(int n)
{
	from_kernel(admit_on_reply, n, "execute_reply", "{\"status\": \"ok\"}");
	from_kernel(admit_on_iopub, n, "status", "{\"execution_state\": \"idle\"}");
}

/* The final message of a stream, or NULL. */
static const struct msg *
final_of(uint64_t stream)
{
	for (int i = 0; i < k.nout; i++)
		if (k.out[i].m_stream == stream && k.out[i].m_final)
			return &k.out[i];
	return NULL;
}

static void
assert_outcome(uint64_t stream, const char *outcome)
{
	const struct msg *m = final_of(stream);

	cr_assert_not_null(m, "stream %llu did not end", (unsigned long long)stream);
	cr_assert_str_eq(m->m_outcome.s, outcome);
}

TestSuite(admit, .init = setup);

Test(admit, next_unit_waits_for_reply_and_idle)
{
	push(1, "a");
	push(2, "b");
	cr_assert_eq(k.ncode, 1, "the second unit was sent while the first ran");
	cr_assert_str_eq(k.code[0], "a");
	from_kernel(admit_on_reply, 0, "execute_reply", "{\"status\": \"ok\"}");
	cr_assert_eq(k.ncode, 1, "sent after the reply, before the idle");
	from_kernel(admit_on_iopub, 0, "status", "{\"execution_state\": \"idle\"}");
	cr_assert_eq(k.ncode, 2);
	cr_assert_str_eq(k.code[1], "b");
	assert_outcome(1, "ok");
	cr_assert_null(final_of(2));
	cr_assert_eq(admit_depth(), 1);
}

Test(admit, cancel_while_queued_never_runs)
{
	push(1, "a");
	push(2, "b");
	admit_cancel(2);
	complete(0);
	cr_assert_eq(k.ncode, 1, "a cancelled unit was sent to the kernel");
	cr_assert_null(final_of(2), "nobody waits on a cancelled stream");
	cr_assert_eq(admit_depth(), 0);
	cr_assert_eq(k.state, KS_IDLE);
}

Test(admit, dead_kernel_ends_a_new_unit_with_kernel_died)
{
	k.state = KS_DEAD;
	k.dead_reason = "kernel python3 could not be started: test";
	push(1, "a");
	cr_assert_eq(k.ncode, 0);
	assert_outcome(1, "kernel_died");
	cr_assert_eq(admit_depth(), 0);
}

Test(admit, lost_kernel_ends_running_and_queued_units)
{
	push(1, "a");
	push(2, "b");
	admit_fail_all("KernelDied", "kernel was killed by signal 9 (Killed)");
	assert_outcome(1, "kernel_died");
	assert_outcome(2, "kernel_died");
	cr_assert_eq(k.ncode, 1, "the queued unit ran on the lost kernel");
	cr_assert_eq(admit_depth(), 0);
}

Test(admit, interrupt_waits_for_the_code_to_start)
{
	push(1, "a");
	cr_assert(admit_interrupt());
	cr_assert_eq(k.interrupts, 0, "interrupted before execute_input");
	from_kernel(admit_on_iopub, 0, "execute_input", "{\"code\": \"a\"}");
	cr_assert_eq(k.interrupts, 1);
	complete(0);
	assert_outcome(1, "interrupted");
	cr_assert_not(admit_interrupt(), "an interrupt with nothing running");
}

/*
 * An interrupt that comes while the running unit has already ended for its
 * client and is being stopped (a timeout, a client gone) is meant for the
 * execution its client sees running: the next one, interrupted as it starts.
 */
Test(admit, an_interrupt_behind_a_unit_being_stopped_goes_to_the_next)
{
	push(1, "a");
	from_kernel(admit_on_iopub, 0, "execute_input", "{\"code\": \"a\"}");
	admit_cancel(1); /* its client left: it is interrupted (POLICY_INTERRUPT) */
	cr_assert_eq(k.interrupts, 1);
	push(2, "b");
	cr_assert(admit_interrupt());
	cr_assert_eq(k.interrupts, 1, "the unit being stopped was interrupted again");
	complete(0);
	cr_assert_eq(k.ncode, 2, "the next unit did not start");
	cr_assert_eq(k.interrupts, 1, "interrupted before its code started");
	from_kernel(admit_on_iopub, 1, "execute_input", "{\"code\": \"b\"}");
	cr_assert_eq(k.interrupts, 2, "the next unit was not interrupted");
	complete(1);
	assert_outcome(2, "interrupted");
}
