/*
 * mrecv.c — the cross-thread receive queue: messages taken on nng's thread
 * (an aio callback) or by a chan's loop, handed to the proxy's or broker's
 * loop through an eventfd (proto.h says how it is woken and paused).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include "proto.h"

/* Under mr_mu: mr_fd is readable exactly while mr_woken is set. */
static void
mrecv_wake_locked(struct mrecv *r)
{
	uint64_t one = 1;

	if (r->mr_woken)
		return;
	r->mr_woken = true;
	if (write(r->mr_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("eventfd: %s", strerror(errno));
}

void
mrecv_wake(struct mrecv *r)
{
	pthread_mutex_lock(&r->mr_mu);
	mrecv_wake_locked(r);
	pthread_mutex_unlock(&r->mr_mu);
}

void
mrecv_put(struct mrecv *r, nng_msg *nm, bool wake)
{
	pthread_mutex_lock(&r->mr_mu);
	if (r->mr_n == r->mr_cap) {
		r->mr_cap = r->mr_cap ? r->mr_cap * 2 : 16;
		r->mr_q = xrealloc(r->mr_q, r->mr_cap * sizeof(*r->mr_q));
	}
	r->mr_q[r->mr_n++] = nm;
	if (wake)
		mrecv_wake_locked(r);
	pthread_mutex_unlock(&r->mr_mu);
}

/* Set in one step with the count: mrecv_take resumes only what did pause. */
bool
mrecv_full(struct mrecv *r)
{
	bool full;

	pthread_mutex_lock(&r->mr_mu);
	/* a loop that falls behind stops the receiving: the peer waits */
	full = r->mr_paused = r->mr_n >= MRECV_MAX;
	pthread_mutex_unlock(&r->mr_mu);
	return full;
}

static void
mrecv_resume_sock(void *arg)
{
	struct mrecv *r = arg;

	nng_recv_aio(r->mr_sock, r->mr_aio);
}

/* On nng's thread: keep the message, receive again unless the loop is behind. */
static void
mrecv_cb(void *arg)
{
	struct mrecv *r = arg;
	int e = nng_aio_result(r->mr_aio);

	if (e == NNG_ECLOSED || e == NNG_ECANCELED)
		return; /* the socket is closing: mrecv_close follows */
	if (!e) {
		mrecv_put(r, nng_aio_get_msg(r->mr_aio), true);
		if (mrecv_full(r))
			return;
	}
	nng_recv_aio(r->mr_sock, r->mr_aio);
}

int
mrecv_init(struct mrecv *r, void (*resume)(void *), void *arg)
{
	memset(r, 0, sizeof(*r));
	r->mr_resume = resume;
	r->mr_resume_arg = arg;
	pthread_mutex_init(&r->mr_mu, NULL);
	if ((r->mr_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		return NNG_ENOMEM;
	return 0;
}

int
mrecv_open(struct mrecv *r, nng_socket s)
{
	int e;

	if ((e = mrecv_init(r, mrecv_resume_sock, r)))
		return e;
	r->mr_sock = s;
	if ((e = nng_aio_alloc(&r->mr_aio, mrecv_cb, r)))
		return e;
	nng_recv_aio(s, r->mr_aio);
	return 0;
}

/*
 * Moves what the callback received to the loop's batch; the number moved.
 * The eventfd is cleared in the same step, and only when it was written (a
 * chan received on the loop never writes it): what is put after this takes
 * writes it again, so no wake is lost and none is left over.
 */
static size_t
mrecv_take(struct mrecv *r)
{
	nng_msg **q;
	size_t cap;
	bool resume;

	pthread_mutex_lock(&r->mr_mu);
	if (r->mr_woken) {
		uint64_t v;
		r->mr_woken = false;
		if (read(r->mr_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			log_warn("eventfd: %s", strerror(errno));
	}
	q = r->mr_q, cap = r->mr_cap;
	r->mr_q = r->mr_batch, r->mr_cap = r->mr_bcap;
	r->mr_batch = q, r->mr_bcap = cap;
	r->mr_bn = r->mr_n;
	r->mr_n = 0;
	resume = r->mr_paused;
	r->mr_paused = false;
	pthread_mutex_unlock(&r->mr_mu);
	r->mr_bat = 0;
	if (resume && r->mr_resume)
		r->mr_resume(r->mr_resume_arg);
	return r->mr_bn;
}

int
mrecv_next(struct mrecv *r, struct msg *m)
{
	nng_msg *nm;
	int e;

	if (r->mr_bat == r->mr_bn && !mrecv_take(r))
		return NNG_EAGAIN;
	nm = r->mr_batch[r->mr_bat++];
	e = msg_decode(nng_msg_body(nm), nng_msg_len(nm), m);
	nng_msg_free(nm);
	return e;
}

void
mrecv_close(struct mrecv *r)
{
	if (r->mr_aio)
		nng_aio_free(r->mr_aio); /* stops it and waits for its callback */
	r->mr_aio = NULL;
	for (size_t i = 0; i < r->mr_n; i++)
		nng_msg_free(r->mr_q[i]);
	for (size_t i = r->mr_bat; i < r->mr_bn; i++)
		nng_msg_free(r->mr_batch[i]);
	free(r->mr_q);
	free(r->mr_batch);
	if (r->mr_fd >= 0)
		close(r->mr_fd);
	pthread_mutex_destroy(&r->mr_mu);
	memset(r, 0, sizeof(*r));
	r->mr_fd = -1;
}
