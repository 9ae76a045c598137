/*
 * waiter.c — requests waiting on a context: for its kernel to be ready
 * (create) or for the proxy's reply (restart, interrupt, delete), each with a
 * deadline after which it is answered 504.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contextdef.h"

#define WAIT_REPLY_MS 10000
#define WAIT_START_MS 90000

static uint64_t next_req = 1;

static void
waiter_add(struct context *c, struct request *rq, uint64_t req, int op, uint64_t wait_ms)
{
	rq->rq_ctx = c;
	rq->rq_req = req;
	rq->rq_op = op;
	rq->rq_deadline = now_ms() + wait_ms;
	TAILQ_INSERT_TAIL(&c->c_waiters, rq, rq_link);
}

/* The id of a request to a proxy, whose reply names it (rq_req). */
uint64_t
waiter_next_req(void)
{
	return next_req++;
}

void
waiter_wait_ready(struct context *c, struct request *rq)
{
	if (c->c_ready) {
		answer_done(rq, 200, context_json(c, false), NULL);
		return;
	}
	waiter_add(c, rq, 0, OP_CREATE, WAIT_START_MS);
}

void
waiter_request(struct context *c, struct request *rq, enum msg_type t, int op)
{
	struct msg m;
	uint64_t req = waiter_next_req();

	if (op == OP_DELETE)
		log_info("context %s: delete requested", c->c_id);
	waiter_add(c, rq, req, op, op == OP_RESTART ? WAIT_START_MS : WAIT_REPLY_MS);
	msg_init(&m, t);
	msg_set_u64(&m, F_REQ, req);
	link_send(c, &m);
	msg_free(&m);
}

/* m (an envd operation) to c's proxy; its reply goes to rq->rq_reply. */
void
waiter_send(struct context *c, struct request *rq, struct msg *m)
{
	uint64_t req = waiter_next_req();

	waiter_add(c, rq, req, OP_ENVD, WAIT_REPLY_MS);
	msg_set_u64(m, F_REQ, req);
	link_send(c, m);
}

void
waiter_answer_ready(struct context *c)
{
	struct request *rq, *next;

	for (rq = TAILQ_FIRST(&c->c_waiters); rq; rq = next) {
		next = TAILQ_NEXT(rq, rq_link);
		if (rq->rq_op != OP_CREATE)
			continue;
		if (c->c_ready)
			answer_done(rq, 200, context_json(c, false), NULL);
		else
			answer_done(rq, 500, NULL, "context %s could not start: %s", c->c_id,
				     c->c_error ? c->c_error : "unknown error");
	}
}

void
waiter_reply(struct context *c, struct msg *m)
{
	struct request *rq;

	TAILQ_FOREACH(rq, &c->c_waiters, rq_link)
		if (rq->rq_req == m->m_req)
			break;
	if (!rq)
		return; /* its client left */
	if (rq->rq_op == OP_ENVD) {
		answer_drop(rq);
		rq->rq_reply(rq, m);
		return;
	}
	if (m->m_type == MSG_FAIL) {
		answer_done(rq, 500, NULL, "%s", m->m_text.s);
		return;
	}
	switch (rq->rq_op) {
	case OP_RESTART:
		log_info("context %s: restarted", c->c_id);
		answer_done(rq, 200, json_null(), NULL);
		break;
	case OP_INTERRUPT:
		answer_done(rq, 200, json_null(), NULL);
		break;
	case OP_DELETE:
		answer_done(rq, 200, json_null(), NULL);
		context_delete(c);
		break;
	}
}

/* Requests whose proxy never answered. */
void
waiter_tick(uint64_t now)
{
	struct context *c;
	struct request *rq, *next;

	CONTEXT_FOREACH(c)
		for (rq = TAILQ_FIRST(&c->c_waiters); rq; rq = next) {
			next = TAILQ_NEXT(rq, rq_link);
			if (now < rq->rq_deadline)
				continue;
			if (rq->rq_op == OP_ENVD) { /* envd's error, in its form */
				char why[64];
				struct msg m;
				snprintf(why, sizeof(why), "the envd agent did not answer within %d s",
					 WAIT_REPLY_MS / 1000);
				msg_init(&m, MSG_FAIL);
				msg_set_str(&m, F_OUTCOME, "deadline_exceeded", 17);
				msg_set_str(&m, F_TEXT, why, strlen(why));
				answer_drop(rq);
				rq->rq_reply(rq, &m);
				msg_free(&m);
				continue;
			}
			answer_done(rq, 504, NULL, "context %s did not answer in time", c->c_id);
		}
}
