/*
 * msgq.c — messages waiting for a socket that would block: sent in order
 * when the socket takes them, never blocking the loop that queued them.
 */
#include <stdlib.h>
#include <string.h>

#include "proto.h"

void
msgq_push(struct msgq *q, nng_msg *nm)
{
	if (q->mq_head + q->mq_n == q->mq_cap) {
		if (q->mq_head) { /* room at the front: move down (amortized) */
			memmove(q->mq_q, q->mq_q + q->mq_head, q->mq_n * sizeof(*q->mq_q));
			q->mq_head = 0;
		}
		if (q->mq_n == q->mq_cap) {
			q->mq_cap = q->mq_cap ? q->mq_cap * 2 : 16;
			q->mq_q = xrealloc(q->mq_q, q->mq_cap * sizeof(*q->mq_q));
		}
	}
	q->mq_q[q->mq_head + q->mq_n++] = nm;
}

/*
 * Sends what the socket takes without blocking, at most max messages (*sent
 * says how many left the queue); a message the socket refuses for any reason
 * but EAGAIN is dropped. Returns the last such error, or 0.
 */
int
msgq_flush_max(struct msgq *q, nng_socket s, size_t max, size_t *sent)
{
	size_t i = 0;
	int err = 0;

	if (sent)
		*sent = 0;
	if (q->mq_n && !q->mq_aio) {
		if ((err = nng_aio_alloc(&q->mq_aio, NULL, NULL)))
			return err;
		/* what nng_sendmsg(NNG_FLAG_NONBLOCK) does: fail rather than wait */
		nng_aio_set_timeout(q->mq_aio, NNG_DURATION_ZERO);
	}
	while (i < q->mq_n && i < max) {
		nng_msg *nm = q->mq_q[q->mq_head + i];
		nng_aio_set_msg(q->mq_aio, nm);
		nng_send_aio(s, q->mq_aio);
		nng_aio_wait(q->mq_aio);
		int e = nng_aio_result(q->mq_aio);
		if (e == NNG_ETIMEDOUT || e == NNG_EAGAIN)
			break; /* the message is still ours, and still queued */
		if (e) {
			nng_msg_free(nm);
			err = e;
		}
		i++;
	}
	q->mq_head += i;
	q->mq_n -= i;
	if (!q->mq_n)
		q->mq_head = 0;
	if (sent)
		*sent = i;
	return err;
}

int
msgq_flush(struct msgq *q, nng_socket s)
{
	return msgq_flush_max(q, s, SIZE_MAX, NULL);
}

/* The size of the next message to go, 0 when none waits. */
size_t
msgq_head_len(const struct msgq *q)
{
	return q->mq_n ? nng_msg_len(q->mq_q[q->mq_head]) : 0;
}

void
msgq_clear(struct msgq *q)
{
	for (size_t i = 0; i < q->mq_n; i++)
		nng_msg_free(q->mq_q[q->mq_head + i]);
	q->mq_n = q->mq_head = 0;
}

void
msgq_free(struct msgq *q)
{
	msgq_clear(q);
	if (q->mq_aio)
		nng_aio_free(q->mq_aio);
	free(q->mq_q);
	memset(q, 0, sizeof(*q));
}
