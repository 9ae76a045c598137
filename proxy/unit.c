/*
 * unit.c — one execution unit's way to its client: its output handed to the
 * broker in chunks, its end (an error line, the outcome the metrics count),
 * its memory. When it runs is admit.c's.
 */
#include <stdlib.h>
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

/* The message's data is the unit's buffer itself (packed from there, not copied first). */
static void
data_borrow(struct msg *m, struct unit *u, size_t len)
{
	m->m_data = (struct pstr){(char *)buf_head(&u->u_out), len};
	m->m_has |= FB(F_DATA);
}

/*
 * Hands pending output to the broker, at most OUTPUT_CHUNK per message (a
 * line may span messages: the broker only concatenates), so neither side
 * ever holds a huge frame; an outcome closes the stream.
 */
void
unit_send(struct unit *u, const char *outcome)
{
	struct msg m;

	while (buf_pending(&u->u_out) > OUTPUT_CHUNK) {
		msg_init(&m, MSG_OUTPUT);
		msg_set_u64(&m, F_STREAM, u->u_stream);
		data_borrow(&m, u, OUTPUT_CHUNK);
		ipc_send(&m);
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
	ipc_send(&m);
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
void
unit_end(struct unit *u, const char *name, const char *value)
{
	if (u->u_detached)
		return;
	if (name)
		output_error(&u->u_out, name, value, "");
	output_end(&u->u_out);
	unit_send(u, outcome_of(u, name));
	u->u_detached = true;
}
