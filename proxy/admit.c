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

void
unit_free(struct unit *u)
{
	for (size_t i = 0; i < u->u_nenv; i++) {
		free(u->u_env[i].e_key.s);
		free(u->u_env[i].e_val.s);
	}
	free(u->u_env);
	free(u->u_code);
	free(u->u_notice);
	buf_free(&u->u_out);
	free(u);
}

int
admit_depth(struct proxy *px)
{
	int n = px->px_run ? 1 : 0;
	struct unit *u;

	TAILQ_FOREACH(u, &px->px_queue, u_link)
		n++;
	return n;
}

/*
 * Hands pending output to the broker, at most OUTPUT_CHUNK per message (a
 * line may span messages: the broker only concatenates), so neither side
 * ever holds a huge frame; an outcome closes the stream.
 */
/* The message's data is the unit's buffer itself (packed from there, not copied first). */
static void
data_borrow(struct msg *m, struct unit *u, size_t len)
{
	m->m_data = (struct pstr){(char *)buf_head(&u->u_out), len};
	m->m_has |= FB(F_DATA);
}

static void
unit_send(struct proxy *px, struct unit *u, const char *outcome)
{
	struct msg m;

	while (buf_pending(&u->u_out) > OUTPUT_CHUNK) {
		msg_init(&m, MSG_OUTPUT);
		msg_set_u64(&m, F_STREAM, u->u_stream);
		data_borrow(&m, u, OUTPUT_CHUNK);
		ipc_send(px, &m);
		m.m_data.s = NULL; /* not the message's to free */
		msg_free(&m);
		buf_consume(&u->u_out, OUTPUT_CHUNK);
	}
	if (!buf_pending(&u->u_out) && !outcome)
		return;
	msg_init(&m, MSG_OUTPUT);
	msg_set_u64(&m, F_STREAM, u->u_stream);
	data_borrow(&m, u, buf_pending(&u->u_out));
	if (outcome) {
		uint64_t now = now_ms(), start = u->u_started_at ? u->u_started_at : now;
		msg_set_u64(&m, F_FINAL, 1);
		msg_set_str(&m, F_OUTCOME, outcome, strlen(outcome));
		msg_set_u64(&m, F_WAIT, start - u->u_queued_at);
		msg_set_u64(&m, F_RUN, now - start);
	}
	ipc_send(px, &m);
	m.m_data.s = NULL;
	msg_free(&m);
	buf_consume(&u->u_out, buf_pending(&u->u_out));
}

/* The metrics' name for how a unit ended. */
static const char *
outcome_of(struct unit *u, const char *error_name)
{
	static const struct {
		const char *name, *outcome;
	} map[] = {
		{"TimeoutError", "timeout"},       {"KernelDied", "kernel_died"},
		{"ContextRestarted", "restarted"}, {"ContextDeleted", "deleted"},
		{"ExecutionAborted", "aborted"},
	};

	if (!error_name)
		return u->u_interrupt_at ? "interrupted" : u->u_errored ? "error" : "ok";
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (!strcmp(map[i].name, error_name))
			return map[i].outcome;
	return "error";
}

/* Ends the unit's stream (with an error line first if name is set). */
static void
unit_end(struct proxy *px, struct unit *u, const char *name, const char *value)
{
	if (u->u_detached)
		return;
	if (name)
		output_error(&u->u_out, name, value, "");
	output_end(&u->u_out);
	unit_send(px, u, outcome_of(u, name));
	u->u_detached = true;
}

void
admit_push(struct proxy *px, struct msg *m)
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
	TAILQ_INSERT_TAIL(&px->px_queue, u, u_link);
	if (px->px_kstate == KS_DEAD && px->px_dead_reason) {
		TAILQ_REMOVE(&px->px_queue, u, u_link);
		unit_end(px, u, "KernelDied", px->px_dead_reason);
		unit_free(u);
		return;
	}
	admit_next(px);
}

static int
unit_start(struct proxy *px, struct unit *u)
{
	char *set = NULL;
	int rc;

	if (u->u_notice && !u->u_detached)
		output_stderr(&u->u_out, u->u_notice);
	if (u->u_nenv) {
		if (!(set = envset_set(px->px_ks->ks_lang, u->u_env, u->u_nenv))) {
			unit_end(px, u, "EnvVarsUnsupported",
				 "per-request env vars are not supported for this language");
			return -1;
		}
		rc = kernel_execute(px, set, true, NULL);
		free(set);
		if (rc < 0)
			goto fail;
	}
	if ((rc = kernel_execute(px, u->u_code, false, u->u_msgid)) < 0)
		goto fail;
	u->u_started_at = now_ms();
	u->u_hold_until = u->u_started_at + OUTPUT_HOLD_MS;
	return 0;
fail:
	unit_end(px, u, "ExecutionFailed", "could not send the code to the kernel");
	return -1;
}

void
admit_next(struct proxy *px)
{
	struct unit *u;

	while (!px->px_run && px->px_kstate == KS_IDLE && !px->px_iopub_rejoin &&
	       (u = TAILQ_FIRST(&px->px_queue))) {
		TAILQ_REMOVE(&px->px_queue, u, u_link);
		if (u->u_deadline && now_ms() >= u->u_deadline) {
			unit_end(px, u, "TimeoutError", "execution timed out while queued");
			unit_free(u);
			continue;
		}
		if (unit_start(px, u) < 0) {
			unit_free(u);
			continue;
		}
		px->px_run = u;
		px->px_kstate = KS_BUSY;
	}
}

/*
 * Reply and idle are both in (and, for kernels that publish after idle, the
 * idle of a silent fence execution sent behind them, which lets callbacks the
 * unit scheduled run first; Deno attributes their output to the fence, so it
 * is routed to the unit too): restore env, end the stream, admit the next.
 */
static void
maybe_complete(struct proxy *px, struct unit *u)
{
	if (!u->u_replied || !u->u_idle)
		return;
	/* the abort listener has yet to run: not once the next unit has started */
	if (u->u_abort_at && !u->u_aborted)
		return;
	if (px->px_ks->ks_fence && !u->u_fenced) {
		if (!u->u_fence[0] && kernel_execute(px, px->px_ks->ks_fence, true, u->u_fence) < 0)
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
			kernel_execute(px, restore, true, NULL);
		free(restore);
	}
	unit_end(px, u, NULL, NULL);
	px->px_run = NULL;
	px->px_kstate = KS_IDLE;
	unit_free(u);
	admit_next(px);
}

/*
 * The kernel's interrupt, or its abort signal first when it has one (Deno):
 * there the interrupt terminates running code but freezes code that awaits
 * (no callback runs again until the next request), and the signal's listener
 * ends what awaits. Which to send after the signal is abort_tick's.
 */
static void
send_interrupt(struct proxy *px, struct unit *u)
{
	if (u->u_abort_at)
		return;
	if (kernel_abort(px) == 0) {
		u->u_abort_at = u->u_cpu_at = now_ms();
		u->u_cpu_ms = kernel_cpu_ms(px);
		return;
	}
	kernel_interrupt(px);
}

/*
 * Interrupts a unit, but not before its code has started (execute_input):
 * ipykernel ignores a SIGINT that comes before its execute handler runs, and
 * one in the handler's preamble ends the request with no reply at all (see
 * admit_on_probe). execute_input sends a deferred interrupt; the retry a
 * second later sends it regardless (a kernel that never publishes it).
 */
static void
interrupt_unit(struct proxy *px, struct unit *u)
{
	uint64_t now = now_ms();

	if (!u->u_interrupt_at)
		u->u_interrupt_at = now;
	u->u_reinterrupt_at = now;
	if (u->u_ran || u->u_interrupts++ > 0)
		send_interrupt(px, u);
}

/*
 * After the abort signal, the kernel gets its interrupt only while its
 * listener has not run and it keeps computing (its CPU time says so): the
 * listener cannot run then, and runs after the interrupt, which leaves code
 * that awaited before the computation for it to collect. An interrupt while
 * the code awaits would freeze it before the listener ran; one sent late
 * (the kernel reads it when it will) would hit the next execution. At most
 * one interrupt per retry period, none once the code has finished.
 */
static void
abort_tick(struct proxy *px, struct unit *u, uint64_t now)
{
	if ((u->u_replied && u->u_idle) || u->u_aborted || now < u->u_cpu_at + ABORT_CHECK_MS)
		return;
	long cpu = kernel_cpu_ms(px);
	bool busy = cpu < 0 || u->u_cpu_ms < 0 ||
		    (cpu - u->u_cpu_ms) * 100 >= (long)(now - u->u_cpu_at) * ABORT_BUSY_PCT;
	if (!busy)
		u->u_busy_since = 0;
	else if (!u->u_busy_since)
		u->u_busy_since = u->u_cpu_at;
	u->u_cpu_ms = cpu;
	u->u_cpu_at = now;
	if (u->u_busy_since && now >= u->u_busy_since + ABORT_COMPUTE_MS &&
	    (!u->u_terminated_at || now >= u->u_terminated_at + px->px_interrupt_retry_ms)) {
		kernel_interrupt(px);
		u->u_terminated_at = now;
	}
}

void
admit_on_reply(struct proxy *px, struct jmsg *jm)
{
	struct unit *u = px->px_run;
	const char *status;

	if (!u || strcmp(jm->jm_parent_id, u->u_msgid))
		return;
	status = json_string_value(json_object_get(jm->jm_content, "status"));
	if (status && (!strcmp(status, "aborted") || !strcmp(status, "abort")) && !u->u_ran) {
		/* the kernel refused a unit that never ran: send it again */
		if (++u->u_resubmits <= MAX_RESUBMIT &&
		    kernel_execute(px, u->u_code, false, u->u_msgid) == 0) {
			log_info("context %s: stream %llu aborted by the kernel, resubmitted",
				 px->px_id, (unsigned long long)u->u_stream);
			return;
		}
		unit_end(px, u, "ExecutionAborted",
			 "the kernel aborted this execution before it ran");
		u->u_idle = true;
	}
	u->u_replied = true;
	u->u_replied_at = now_ms();
	maybe_complete(px, u);
}

/*
 * The answer to the kernel_info_request sent when an interrupted unit's idle
 * came without its execute_reply. Shell is answered in order, so no reply
 * is still on its way: the interrupt ended the request before it replied.
 */
void
admit_on_probe(struct proxy *px, struct jmsg *jm)
{
	struct unit *u = px->px_run;

	if (!u || !u->u_probe[0] || u->u_replied || strcmp(jm->jm_parent_id, u->u_probe))
		return;
	log_info("context %s: stream %llu: interrupted before the kernel replied",
		 px->px_id, (unsigned long long)u->u_stream);
	u->u_replied = true;
	u->u_replied_at = now_ms();
	maybe_complete(px, u);
}

/*
 * Output is routed by its parent header only: output a kernel stamps with a
 * request no running unit sent (a thread or timer of a finished execution,
 * or no parent at all) belongs to no client, and is dropped and counted. A
 * kernel that drops late output itself reports how much in "sandcell_dropped"
 * (Deno's fence).
 */
static void
drop_output(struct proxy *px, struct jmsg *jm)
{
	static const char *const output[] = {"stream", "display_data", "update_display_data",
					     "execute_result", "error"};
	json_int_t n = json_integer_value(json_object_get(jm->jm_meta, "sandcell_dropped"));

	for (size_t i = 0; i < sizeof(output) / sizeof(output[0]); i++)
		if (!strcmp(jm->jm_type, output[i])) {
			px->px_dropped += n > 0 && n < INT32_MAX ? (uint64_t)n : 1;
			log_debug("context %s: %s for request '%s' dropped: no execution owns it",
				  px->px_id, jm->jm_type, jm->jm_parent_id);
			return;
		}
}

void
admit_on_iopub(struct proxy *px, struct jmsg *jm)
{
	struct unit *u = px->px_run;

	if (json_object_get(jm->jm_meta, "sandcell_aborted")) {
		/* the abort signal's listener ran (whatever request Deno stamped it with) */
		if (u && u->u_abort_at) {
			u->u_aborted = true;
			maybe_complete(px, u);
		}
		return;
	}
	bool fence = u && u->u_fence[0] && !strcmp(jm->jm_parent_id, u->u_fence);
	/* the kernel says it is an earlier execution's, whatever its header (Deno's fence) */
	bool late = json_is_true(json_object_get(jm->jm_meta, "sandcell_late"));
	if (!u || late || (!fence && strcmp(jm->jm_parent_id, u->u_msgid))) {
		drop_output(px, jm); /* kernel_info, env snippets, or a finished unit's */
		return;
	}
	if (fence) {
		const char *st =
			json_string_value(json_object_get(jm->jm_content, "execution_state"));
		if (!strcmp(jm->jm_type, "status") && st && !strcmp(st, "idle")) {
			u->u_fenced = true;
			maybe_complete(px, u);
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
			    kernel_probe(px, u->u_probe) < 0)
				u->u_probe[0] = '\0';
			maybe_complete(px, u);
		}
		return;
	}
	if (!strcmp(jm->jm_type, "execute_input") && !u->u_ran) {
		u->u_ran = true;
		px->px_count++;
		if (u->u_interrupt_at)
			send_interrupt(px, u); /* deferred until the code started */
	}
	if (!strcmp(jm->jm_type, "error"))
		u->u_errored = true;
	if (!u->u_detached)
		output_iopub(&u->u_out, jm->jm_type, jm->jm_content, px->px_display_is_result);
}

void
admit_cancel(struct proxy *px, uint64_t stream)
{
	struct unit *u;

	TAILQ_FOREACH(u, &px->px_queue, u_link)
		if (u->u_stream == stream) {
			TAILQ_REMOVE(&px->px_queue, u, u_link);
			log_info("context %s: stream %llu cancelled while queued; it never runs",
				 px->px_id, (unsigned long long)stream);
			unit_free(u);
			return;
		}
	u = px->px_run;
	if (!u || u->u_stream != stream || u->u_detached)
		return;
	u->u_detached = true; /* the client is gone: drop its output from now on */
	buf_consume(&u->u_out, buf_pending(&u->u_out));
	log_info("context %s: stream %llu cancelled while running (%s)", px->px_id,
		 (unsigned long long)stream,
		 u->u_policy == POLICY_INTERRUPT ? "interrupt" : "continue");
	if (u->u_policy == POLICY_INTERRUPT)
		interrupt_unit(px, u);
}

/*
 * A kernel message too big to take (over 64 frames or ZMTP_MAX_BYTES) was
 * skipped on iopub: the running unit's output is missing, and says so.
 */
void
admit_output_lost(struct proxy *px)
{
	struct unit *u = px->px_run;

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
admit_detach_all(struct proxy *px)
{
	struct unit *u;

	while ((u = TAILQ_FIRST(&px->px_queue))) {
		TAILQ_REMOVE(&px->px_queue, u, u_link);
		unit_free(u);
	}
	if (px->px_run)
		admit_cancel(px, px->px_run->u_stream);
}

static void
fail_queued(struct proxy *px, const char *name, const char *value)
{
	struct unit *u;

	while ((u = TAILQ_FIRST(&px->px_queue))) {
		TAILQ_REMOVE(&px->px_queue, u, u_link);
		unit_end(px, u, name, value);
		unit_free(u);
	}
}

void
admit_fail_all(struct proxy *px, const char *name, const char *value)
{
	struct unit *u;

	if ((u = px->px_run)) {
		unit_end(px, u, name, value);
		unit_free(u);
		px->px_run = NULL;
	}
	fail_queued(px, name, value);
}

void
admit_interrupt(struct proxy *px)
{
	if (px->px_run)
		interrupt_unit(px, px->px_run);
}

/*
 * The running unit did not stop after an interrupt: the kernel is restarted.
 * The units queued behind it still run, on the new kernel, and say first
 * on stderr that the state they may expect is gone, and whose code cost it.
 */
static void
restart_stuck(struct proxy *px, struct unit *u)
{
	char *notice = xasprintf("sandcell: the kernel was restarted before this code ran: "
				 "the execution ahead of it (stream %llu) did not stop after "
				 "an interrupt; the context's state (variables, imports) is "
				 "lost\n",
				 (unsigned long long)u->u_stream);
	struct unit *q;

	TAILQ_FOREACH(q, &px->px_queue, u_link)
		if (!q->u_notice)
			q->u_notice = xstrdup(notice);
	free(notice);
	unit_end(px, u, "ContextRestarted",
		 "the kernel did not stop after an interrupt; it was restarted and its state "
		 "is lost");
	unit_free(u);
	px->px_run = NULL;
	kernel_restart(px, "the kernel did not stop after an interrupt");
}

void
admit_tick(struct proxy *px, uint64_t now)
{
	struct unit *u, *next;

	for (u = TAILQ_FIRST(&px->px_queue); u; u = next) {
		next = TAILQ_NEXT(u, u_link);
		if (u->u_deadline && now >= u->u_deadline) {
			TAILQ_REMOVE(&px->px_queue, u, u_link);
			unit_end(px, u, "TimeoutError", "execution timed out while queued");
			unit_free(u);
		}
	}
	if (!(u = px->px_run))
		return;
	if (u->u_replied && now >= u->u_replied_at + IOPUB_QUIET_MS &&
	    now >= px->px_iopub_at + IOPUB_QUIET_MS) {
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
		kernel_iopub_reconnect(px);
		maybe_complete(px, u);
		return;
	}
	if (u->u_deadline && now >= u->u_deadline && !u->u_detached) {
		char *v = xasprintf("execution exceeded its timeout of %.3g s",
				    (u->u_deadline - u->u_queued_at) / 1000.0);
		unit_end(px, u, "TimeoutError", v);
		free(v);
		interrupt_unit(px, u);
	}
	if (u->u_replied && u->u_idle && u->u_abort_at && !u->u_aborted &&
	    now >= u->u_replied_at + ABORT_ACK_MS) {
		log_warn("context %s: stream %llu: the kernel's abort listener never said it ran",
			 px->px_id, (unsigned long long)u->u_stream);
		u->u_aborted = true;
		maybe_complete(px, u);
		return;
	}
	if (!u->u_interrupt_at)
		return;
	/* compare forwards: the interrupt may carry a later time than now */
	if (now >= u->u_interrupt_at + px->px_interrupt_grace_ms) {
		restart_stuck(px, u);
		return;
	}
	if (u->u_abort_at)
		abort_tick(px, u, now);
	else if (now >= u->u_reinterrupt_at + px->px_interrupt_retry_ms)
		interrupt_unit(px, u);
}

void
admit_flush(struct proxy *px)
{
	struct unit *u = px->px_run;

	if (px->px_dropped) {
		struct msg m;
		msg_init(&m, MSG_STATS);
		msg_set_u64(&m, F_COUNT, px->px_dropped);
		ipc_send(px, &m);
		msg_free(&m);
		px->px_dropped = 0;
	}
	if (!u || u->u_detached)
		return;
	if (now_ms() < u->u_hold_until && buf_pending(&u->u_out) < OUTPUT_CHUNK)
		return;
	unit_send(px, u, NULL);
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
admit_wait(struct proxy *px, uint64_t now)
{
	long w = -1;
	struct unit *u;

	TAILQ_FOREACH(u, &px->px_queue, u_link)
		if (u->u_deadline)
			wait_min(&w, u->u_deadline, now);
	if ((u = px->px_run)) {
		if (u->u_deadline && !u->u_detached)
			wait_min(&w, u->u_deadline, now);
		bool done = u->u_replied && u->u_idle;
		if (u->u_interrupt_at) {
			if (!u->u_abort_at)
				wait_min(&w, u->u_reinterrupt_at + px->px_interrupt_retry_ms, now);
			else if (!done && !u->u_aborted)
				wait_min(&w, u->u_cpu_at + ABORT_CHECK_MS, now);
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
