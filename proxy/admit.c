/*
 * admit.c — the context's admission queue and output routing. Units run one at
 * a time: the next is sent to the kernel only when the previous one's
 * execute_reply and iopub idle have both arrived and its env restore has been
 * sent, so no unit sees another's env vars or is aborted by its error or
 * interrupt. A cancelled unit is detached at once: its output is discarded and
 * nothing waits on its client.
 */
#include <string.h>

#include "proxy.h"

static const struct proxy *px;
static struct {
	struct unitq a_queue; /* waiting, in order */
	struct unit *a_run;   /* sent to the kernel; NULL = none */
	uint64_t a_count;     /* executions run */
	uint64_t a_dropped;   /* output no unit owned, not yet reported (MSG_STATS) */
} adm = {.a_queue = TAILQ_HEAD_INITIALIZER(adm.a_queue)};

static void interrupt_unit(struct unit *u);

void
admit_init(const struct proxy *p)
{
	px = p;
}

int
admit_depth(void)
{
	int n = adm.a_run ? 1 : 0;
	struct unit *u;

	TAILQ_FOREACH(u, &adm.a_queue, u_link)
		n++;
	return n;
}

void
admit_push(struct msg *m)
{
	struct unit *u = xcalloc(1, sizeof(*u));
	uint64_t now = now_ms();

	u->u_stream = m->m_stream;
	u->u_code = m->m_code.s;
	m->m_code.s = NULL;
	u->u_env = m->m_env;
	u->u_nenv = m->m_nenv;
	m->m_env = NULL;
	m->m_nenv = 0;
	u->u_policy = m->m_policy == POLICY_CONTINUE ? POLICY_CONTINUE : POLICY_INTERRUPT;
	u->u_queued_at = now;
	if ((m->m_has & FB(F_TIMEOUT)) && m->m_timeout)
		u->u_deadline = now + m->m_timeout;
	TAILQ_INSERT_TAIL(&adm.a_queue, u, u_link);
	if (kernel_state() == KS_DEAD && kernel_dead_reason()) {
		TAILQ_REMOVE(&adm.a_queue, u, u_link);
		unit_end(u, "KernelDied", kernel_dead_reason());
		unit_free(u);
		return;
	}
	admit_next();
}

static int
unit_start(struct unit *u)
{
	char *set = NULL;
	int rc;

	if (u->u_notice && !u->u_detached)
		output_stderr(&u->u_out, u->u_notice);
	char *kn = kconfig_take_notice(); /* how the kernel started, for the first unit */
	if (kn && !u->u_detached)
		output_stderr(&u->u_out, kn);
	free(kn);
	if (u->u_nenv) {
		if (!(set = envset_set(px->px_ks->ks_lang, u->u_env, u->u_nenv))) {
			unit_end(u, "EnvVarsUnsupported",
				 "per-request env vars are not supported for this language");
			return -1;
		}
		rc = kernel_execute(set, true, NULL);
		free(set);
		if (rc < 0)
			goto fail;
	}
	if ((rc = kernel_execute(u->u_code, false, u->u_msgid)) < 0)
		goto fail;
	u->u_started_at = now_ms();
	u->u_hold_until = u->u_started_at + OUTPUT_HOLD_MS;
	return 0;
fail:
	unit_end(u, "ExecutionFailed", "could not send the code to the kernel");
	return -1;
}

void
admit_next(void)
{
	struct unit *u;

	while (!adm.a_run && kernel_can_run() &&
	       (u = TAILQ_FIRST(&adm.a_queue))) {
		TAILQ_REMOVE(&adm.a_queue, u, u_link);
		if (u->u_deadline && now_ms() >= u->u_deadline) {
			unit_end(u, "TimeoutError", "execution timed out while queued");
			unit_free(u);
			continue;
		}
		if (unit_start(u) < 0) {
			unit_free(u);
			continue;
		}
		adm.a_run = u;
		kernel_set_busy(true);
		if (u->u_interrupt_asked)
			interrupt_unit(u); /* sent once its code has started */
	}
}

/*
 * Reply and idle are both in (and, for kernels that publish after idle, the
 * idle of a silent fence execution sent behind them, which lets callbacks the
 * unit scheduled run first; Deno attributes their output to the fence, so it
 * is routed to the unit too): restore env, end the stream, admit the next.
 */
static void
maybe_complete(struct unit *u)
{
	if (!u->u_replied || !u->u_idle)
		return;
	/* the abort listener has yet to run: not once the next unit has started */
	if (u->u_abort_at && !u->u_aborted)
		return;
	if (px->px_ks->ks_fence && !u->u_fenced) {
		if (!u->u_fence[0] && kernel_execute(px->px_ks->ks_fence, true, u->u_fence) < 0)
			u->u_fenced = true;
		if (!u->u_fenced)
			return;
	}
	if (u->u_interrupt_at && !u->u_errored && !u->u_detached)
		/* the kernel stopped without saying why (Deno): say it */
		output_error(&u->u_out, "KeyboardInterrupt", "execution interrupted", "");
	if (u->u_nenv) {
		char *restore = envset_restore(px->px_ks->ks_lang, u->u_env, u->u_nenv);
		if (restore)
			kernel_execute(restore, true, NULL);
		free(restore);
	}
	unit_end(u, NULL, NULL);
	adm.a_run = NULL;
	kernel_set_busy(false);
	unit_free(u);
	admit_next();
}

/*
 * The kernel's interrupt, or its abort signal first when it has one (Deno):
 * there the interrupt terminates running code but freezes code that awaits
 * (no callback runs again until the next request), and the signal's listener
 * ends what awaits. Which to send after the signal is abort_tick's.
 */
static void
send_interrupt(struct unit *u)
{
	if (u->u_abort_at)
		return;
	if (kernel_abort() == 0) {
		u->u_abort_at = u->u_run_at = now_ms();
		u->u_run_us = kernel_runnable_us();
		return;
	}
	kernel_interrupt();
}

/*
 * Interrupts a unit, but not before its code has started (execute_input):
 * ipykernel ignores a SIGINT that comes before its execute handler runs, and
 * one in the handler's preamble ends the request with no reply at all (see
 * admit_on_probe). execute_input sends a deferred interrupt; the retry a
 * second later sends it regardless (a kernel that never publishes it).
 */
static void
interrupt_unit(struct unit *u)
{
	uint64_t now = now_ms();

	if (!u->u_interrupt_at)
		u->u_interrupt_at = now;
	u->u_reinterrupt_at = now;
	if (u->u_ran || u->u_interrupts++ > 0)
		send_interrupt(u);
}

/*
 * After the abort signal, the kernel gets its interrupt only while its
 * listener has not run and it keeps computing (its runnable time says so): the
 * listener cannot run then, and runs after the interrupt, which leaves code
 * that awaited before the computation for it to collect. An interrupt while
 * the code awaits would freeze it before the listener ran; one sent late
 * (the kernel reads it when it will) would hit the next execution. At most
 * one interrupt per retry period, none once the code has finished.
 */
static void
abort_tick(struct unit *u, uint64_t now)
{
	if ((u->u_replied && u->u_idle) || u->u_aborted || now < u->u_run_at + ABORT_CHECK_MS)
		return;
	long long run = kernel_runnable_us();
	bool busy = run < 0 || u->u_run_us < 0 ||
		    (run - u->u_run_us) * 100 >= (long long)(now - u->u_run_at) * 1000 * ABORT_BUSY_PCT;
	if (!busy)
		u->u_busy_since = 0;
	else if (!u->u_busy_since)
		u->u_busy_since = u->u_run_at;
	u->u_run_us = run;
	u->u_run_at = now;
	if (u->u_busy_since && now >= u->u_busy_since + ABORT_COMPUTE_MS &&
	    (!u->u_terminated_at || now >= u->u_terminated_at + px->px_interrupt_retry_ms)) {
		kernel_interrupt();
		u->u_terminated_at = now;
	}
}

void
admit_on_reply(struct jmsg *jm)
{
	struct unit *u = adm.a_run;
	const char *status;

	if (!u || strcmp(jm->jm_parent_id, u->u_msgid))
		return;
	status = json_string_value(json_object_get(jm->jm_content, "status"));
	if (status && (!strcmp(status, "aborted") || !strcmp(status, "abort")) && !u->u_ran) {
		/* the kernel refused a unit that never ran: send it again */
		if (++u->u_resubmits <= MAX_RESUBMIT &&
		    kernel_execute(u->u_code, false, u->u_msgid) == 0) {
			log_info("context %s: stream %llu aborted by the kernel, resubmitted",
				 px->px_id, (unsigned long long)u->u_stream);
			return;
		}
		unit_end(u, "ExecutionAborted",
			 "the kernel aborted this execution before it ran");
		u->u_idle = true;
	}
	u->u_replied = true;
	u->u_replied_at = now_ms();
	maybe_complete(u);
}

/*
 * The answer to the kernel_info_request sent when an interrupted unit's idle
 * came without its execute_reply. Shell is answered in order, so no reply
 * is still on its way: the interrupt ended the request before it replied.
 */
void
admit_on_probe(struct jmsg *jm)
{
	struct unit *u = adm.a_run;

	if (!u || !u->u_probe[0] || u->u_replied || strcmp(jm->jm_parent_id, u->u_probe))
		return;
	log_info("context %s: stream %llu: interrupted before the kernel replied",
		 px->px_id, (unsigned long long)u->u_stream);
	u->u_replied = true;
	u->u_replied_at = now_ms();
	maybe_complete(u);
}

/*
 * Output is routed by its parent header only: output a kernel stamps with a
 * request no running unit sent (a thread or timer of a finished execution,
 * or no parent at all) belongs to no client, and is dropped and counted. A
 * kernel that drops late output itself reports how much in "sandcell_dropped"
 * (Deno's fence).
 */
static void
drop_output(struct jmsg *jm)
{
	static const char *const output[] = {"stream", "display_data", "update_display_data",
					     "execute_result", "error"};
	json_int_t n = json_integer_value(json_object_get(jm->jm_meta, "sandcell_dropped"));

	for (size_t i = 0; i < sizeof(output) / sizeof(output[0]); i++)
		if (!strcmp(jm->jm_type, output[i])) {
			adm.a_dropped += n > 0 && n < INT32_MAX ? (uint64_t)n : 1;
			log_debug("context %s: %s for request '%s' dropped: no execution owns it",
				  px->px_id, jm->jm_type, jm->jm_parent_id);
			return;
		}
}

void
admit_on_iopub(struct jmsg *jm)
{
	struct unit *u = adm.a_run;

	if (json_object_get(jm->jm_meta, "sandcell_aborted")) {
		/* the abort signal's listener ran (whatever request Deno stamped it with) */
		if (u && u->u_abort_at) {
			u->u_aborted = true;
			maybe_complete(u);
		}
		return;
	}
	bool fence = u && u->u_fence[0] && !strcmp(jm->jm_parent_id, u->u_fence);
	/* the kernel says it is an earlier execution's, whatever its header (Deno's fence) */
	bool late = json_is_true(json_object_get(jm->jm_meta, "sandcell_late"));
	if (!u || late || (!fence && strcmp(jm->jm_parent_id, u->u_msgid))) {
		drop_output(jm); /* kernel_info, env snippets, or a finished unit's */
		return;
	}
	if (fence) {
		const char *st =
			json_string_value(json_object_get(jm->jm_content, "execution_state"));
		if (!strcmp(jm->jm_type, "status") && st && !strcmp(st, "idle")) {
			u->u_fenced = true;
			maybe_complete(u);
		} else if (!u->u_detached && strcmp(jm->jm_type, "status") &&
			   strcmp(jm->jm_type, "execute_input")) {
			/* the fence's own execute_input is not the unit's (Deno sends one) */
			output_iopub(&u->u_out, jm->jm_type, jm->jm_content, false);
		}
		return;
	}
	if (!strcmp(jm->jm_type, "status")) {
		const char *st =
			json_string_value(json_object_get(jm->jm_content, "execution_state"));
		if (st && !strcmp(st, "idle")) {
			u->u_idle = true;
			/* an interrupt may have ended it with no reply: ask, on shell */
			if (!u->u_replied && u->u_interrupt_at && !u->u_probe[0] &&
			    kernel_probe(u->u_probe) < 0)
				u->u_probe[0] = '\0';
			maybe_complete(u);
		}
		return;
	}
	if (!strcmp(jm->jm_type, "execute_input") && !u->u_ran) {
		u->u_ran = true;
		adm.a_count++;
		if (u->u_interrupt_at)
			send_interrupt(u); /* deferred until the code started */
	}
	if (!strcmp(jm->jm_type, "error"))
		u->u_errored = true;
	if (!u->u_detached)
		output_iopub(&u->u_out, jm->jm_type, jm->jm_content, px->px_display_is_result);
}

void
admit_cancel(uint64_t stream)
{
	struct unit *u;

	TAILQ_FOREACH(u, &adm.a_queue, u_link)
		if (u->u_stream == stream) {
			TAILQ_REMOVE(&adm.a_queue, u, u_link);
			log_info("context %s: stream %llu cancelled while queued; it never runs",
				 px->px_id, (unsigned long long)stream);
			unit_free(u);
			return;
		}
	u = adm.a_run;
	if (!u || u->u_stream != stream || u->u_detached)
		return;
	u->u_detached = true; /* the client is gone: drop its output from now on */
	buf_consume(&u->u_out, buf_pending(&u->u_out));
	log_info("context %s: stream %llu cancelled while running (%s)", px->px_id,
		 (unsigned long long)stream,
		 u->u_policy == POLICY_INTERRUPT ? "interrupt" : "continue");
	if (u->u_policy == POLICY_INTERRUPT)
		interrupt_unit(u);
}

/*
 * A kernel message too big to take (over 64 frames or ZMTP_MAX_BYTES) was
 * skipped on iopub: the running unit's output is missing, and says so.
 */
void
admit_output_lost(void)
{
	struct unit *u = adm.a_run;

	if (!u || u->u_detached)
		return;
	char *v = xasprintf("a kernel message over %llu MiB (or of over %d frames) was "
			    "dropped: output is missing",
			    (unsigned long long)(ZMTP_MAX_BYTES >> 20), ZMTP_MAX_FRAMES);
	output_error(&u->u_out, "OutputLost", v, "");
	free(v);
	u->u_errored = true;
}

/* The broker went away: every stream is gone with it. */
void
admit_detach_all(void)
{
	struct unit *u;

	while ((u = TAILQ_FIRST(&adm.a_queue))) {
		TAILQ_REMOVE(&adm.a_queue, u, u_link);
		unit_free(u);
	}
	if (adm.a_run)
		admit_cancel(adm.a_run->u_stream);
}

static void
fail_queued(const char *name, const char *value)
{
	struct unit *u;

	while ((u = TAILQ_FIRST(&adm.a_queue))) {
		TAILQ_REMOVE(&adm.a_queue, u, u_link);
		unit_end(u, name, value);
		unit_free(u);
	}
}

void
admit_fail_all(const char *name, const char *value)
{
	struct unit *u;

	if ((u = adm.a_run)) {
		unit_end(u, name, value);
		unit_free(u);
		adm.a_run = NULL;
	}
	fail_queued(name, value);
}

/* An INTERRUPT: false when nothing runs. */
bool
admit_interrupt(void)
{
	struct unit *u = adm.a_run, *next = TAILQ_FIRST(&adm.a_queue);

	if (!u)
		return false;
	/*
	 * The running unit has ended for its client (timed out, or its client
	 * left) and is already being stopped: the execution the client sees
	 * running is the next one, which waits on it. That one is interrupted
	 * as it starts, not the one whose interrupt is under way.
	 */
	if (u->u_detached && u->u_interrupt_at && next) {
		next->u_interrupt_asked = true;
		return true;
	}
	interrupt_unit(u);
	return true;
}

/*
 * The running unit did not stop after an interrupt: the kernel is restarted.
 * The units queued behind it still run, on the new kernel, and say first
 * on stderr that the state they may expect is gone, and whose code cost it.
 */
static void
restart_stuck(struct unit *u)
{
	char *notice = xasprintf("sandcell: the kernel was restarted before this code ran: "
				 "the execution ahead of it (stream %llu) did not stop after "
				 "an interrupt; the context's state (variables, imports) is "
				 "lost\n",
				 (unsigned long long)u->u_stream);
	struct unit *q;

	TAILQ_FOREACH(q, &adm.a_queue, u_link)
		if (!q->u_notice)
			q->u_notice = xstrdup(notice);
	free(notice);
	unit_end(u, "ContextRestarted",
		 "the kernel did not stop after an interrupt; it was restarted and its state "
		 "is lost");
	unit_free(u);
	adm.a_run = NULL;
	kernel_restart("the kernel did not stop after an interrupt");
}

void
admit_tick(uint64_t now)
{
	struct unit *u, *next;

	for (u = TAILQ_FIRST(&adm.a_queue); u; u = next) {
		next = TAILQ_NEXT(u, u_link);
		if (u->u_deadline && now >= u->u_deadline) {
			TAILQ_REMOVE(&adm.a_queue, u, u_link);
			unit_end(u, "TimeoutError", "execution timed out while queued");
			unit_free(u);
		}
	}
	if (!(u = adm.a_run))
		return;
	if (u->u_replied && now >= u->u_replied_at + IOPUB_QUIET_MS &&
	    now >= kernel_iopub_at() + IOPUB_QUIET_MS) {
		/*
		 * The reply came but iopub went silent before the idle (the kernel
		 * lost its output channel, or a hostile one never says idle): end the
		 * unit rather than wait forever.
		 */
		log_warn("context %s: stream %llu: iopub silent since the reply; ending it",
			 px->px_id, (unsigned long long)u->u_stream);
		if (!u->u_detached)
			output_error(&u->u_out, "OutputLost",
				     "the kernel's output channel went silent after its reply: "
				     "output is missing", "");
		u->u_errored = true;
		u->u_idle = u->u_fenced = true;
		kernel_iopub_reconnect();
		maybe_complete(u);
		return;
	}
	if (u->u_deadline && now >= u->u_deadline && !u->u_detached) {
		char *v = xasprintf("execution exceeded its timeout of %.3g s",
				    (u->u_deadline - u->u_queued_at) / 1000.0);
		unit_end(u, "TimeoutError", v);
		free(v);
		interrupt_unit(u);
	}
	if (u->u_replied && u->u_idle && u->u_abort_at && !u->u_aborted &&
	    now >= u->u_replied_at + ABORT_ACK_MS) {
		log_warn("context %s: stream %llu: the kernel's abort listener never said it ran",
			 px->px_id, (unsigned long long)u->u_stream);
		u->u_aborted = true;
		maybe_complete(u);
		return;
	}
	if (!u->u_interrupt_at)
		return;
	/* compare forwards: the interrupt may carry a later time than now */
	if (now >= u->u_interrupt_at + px->px_interrupt_grace_ms) {
		restart_stuck(u);
		return;
	}
	if (u->u_abort_at)
		abort_tick(u, now);
	else if (now >= u->u_reinterrupt_at + px->px_interrupt_retry_ms)
		interrupt_unit(u);
}

void
admit_flush(void)
{
	struct unit *u = adm.a_run;

	if (adm.a_dropped) {
		struct msg m;
		msg_init(&m, MSG_STATS);
		msg_set_u64(&m, F_COUNT, adm.a_dropped);
		ipc_send(&m);
		msg_free(&m);
		adm.a_dropped = 0;
	}
	if (!u || u->u_detached)
		return;
	if (now_ms() < u->u_hold_until && buf_pending(&u->u_out) < OUTPUT_CHUNK)
		return;
	unit_send(u, NULL);
}

/* The running unit's output fills a chunk: hand it on now (a flood never piles up). */
bool
admit_output_full(void)
{
	return adm.a_run && buf_pending(&adm.a_run->u_out) >= OUTPUT_CHUNK;
}

/*
 * Until when the running unit's output is held, before its reply and any
 * interrupt (iopub may rest until then: loop.c); 0 when it is not.
 */
uint64_t
admit_hold_until(void)
{
	const struct unit *u = adm.a_run;

	return u && !u->u_replied && !u->u_interrupt_at ? u->u_hold_until : 0;
}

uint64_t
admit_count(void)
{
	return adm.a_count;
}

static void
wait_min(long *w, uint64_t at, uint64_t now)
{
	long d = at > now ? (long)(at - now) : 0;

	if (*w < 0 || d < *w)
		*w = d;
}

/* Milliseconds until admit_tick has work, or -1. */
long
admit_wait(uint64_t now)
{
	long w = -1;
	struct unit *u;

	TAILQ_FOREACH(u, &adm.a_queue, u_link)
		if (u->u_deadline)
			wait_min(&w, u->u_deadline, now);
	if ((u = adm.a_run)) {
		if (u->u_deadline && !u->u_detached)
			wait_min(&w, u->u_deadline, now);
		bool done = u->u_replied && u->u_idle;
		if (u->u_interrupt_at) {
			if (!u->u_abort_at)
				wait_min(&w, u->u_reinterrupt_at + px->px_interrupt_retry_ms, now);
			else if (!done && !u->u_aborted)
				wait_min(&w, u->u_run_at + ABORT_CHECK_MS, now);
			wait_min(&w, u->u_interrupt_at + px->px_interrupt_grace_ms, now);
		}
		if (u->u_replied)
			wait_min(&w, u->u_replied_at + IOPUB_QUIET_MS, now);
		if (done && u->u_abort_at && !u->u_aborted)
			wait_min(&w, u->u_replied_at + ABORT_ACK_MS, now);
		if (buf_pending(&u->u_out) && !u->u_detached)
			wait_min(&w, u->u_hold_until, now);
	}
	return w;
}
