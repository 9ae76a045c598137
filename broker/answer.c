/*
 * answer.c — a request's one answer, through the operations its transport
 * filled in (struct request_ops: http.c's, control.c's). Whoever completes a
 * request (the request layer, a waiter, a context that goes away) calls
 * answer_done() and knows nothing of HTTP or of the control socket.
 *
 * Ownership: a request belongs to its transport. answer_done() frees a ctl
 * request (its ro_complete does); an HTTP one is freed by MHD's completion
 * callback, as it must outlive the response, which first calls answer_drop().
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "contextdef.h"

/* rq no longer waits on its context (answered, or its client left). */
void
answer_drop(struct request *rq)
{
	if (!rq->rq_ctx)
		return;
	TAILQ_REMOVE(&rq->rq_ctx->c_waiters, rq, rq_link);
	rq->rq_ctx = NULL;
}

/* Takes json; otherwise fmt is the answer's text. rq must not be used after it. */
void
answer_done(struct request *rq, unsigned status, json_t *json, const char *fmt, ...)
{
	char *text = NULL;
	va_list ap;

	answer_drop(rq);
	if (!json && fmt) {
		va_start(ap, fmt);
		if (vasprintf(&text, fmt, ap) < 0)
			fatal("out of memory");
		va_end(ap);
	}
	rq->rq_ops->ro_complete(rq, status, json, text);
	free(text);
}

/* The answer comes later: an HTTP connection is suspended meanwhile. */
void
answer_wait(struct request *rq)
{
	rq->rq_ops->ro_suspend(rq);
}
