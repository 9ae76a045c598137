/*
 * chan.c — the broker<->proxy link over an nng_stream (ipc://) with our own
 * framing: the bytes nng's ipc transport puts on the wire for a pair0 socket
 * (an 8-byte handshake each way, then a type byte 1 and a 64-bit big-endian
 * length before each message), so a broker still re-attaches to proxies of an
 * older version and they to it. Why not the pair0 socket itself: it passes
 * each message through more of nng's threads than a stream does.
 *
 * nng is used as it documents its streams: one receive and one send under
 * way at a time. The receive is on an aio whose callback runs on nng's
 * thread: it notes how it ended and wakes the loop (ch_in's eventfd,
 * which is ch_fd); the loop cuts whole frames out of the bytes (chan_rx_take),
 * queues them in ch_in and starts the next receive. Only the peer's handshake
 * is read on the callback, so that what waited for it goes without the loop.
 *
 * Sending, the loop first writes on its own thread (chan_tx_now): a send on
 * cn_txw, an aio with no callback, then nng_aio_cancel and nng_aio_wait. A
 * stream send completes as soon as one byte is sent (nng_stream_send(3str)),
 * so the cancel either finds it done (the socket had room, the usual case:
 * no thread of nng's woken, the wait returns at once) or aborts it with
 * nothing sent (NNG_ECANCELED); either way the wait is over at once and the
 * loop never blocks on a slow peer. What is left goes on cn_tx, whose
 * callback drops what was written from the queue and writes what waits, so
 * a queue drains without the loop (chan_flush). The price, against reading
 * nng's socket on the loop (which relied on what nng does not document): two
 * more thread wakes per message received (nng's poller, then the callback);
 * a round trip 34 -> 102 us of CPU (make bench BENCH=ipc), broker and proxy
 * 270 -> 440 us per x=1 execution (BENCH=goals; medians on a busy 2-core VM)
 * when every write also woke a callback; writing on the loop saves ~26 of
 * ~307 us per x=1 (docs/PERFORMANCE.md, interleaved windows).
 *
 * Threads: the loop attaches and frees a connection (chan_next) and alone
 * uses cn_txw; its receive buffer is the callback's until the handshake is
 * in, then the loop's while no receive is under way; ch_mu guards the rest.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto.h"

#define CHAN_HEAD 9          /* type byte, 64-bit length */
#define CHAN_BUF (64u << 10) /* receive buffer; a bigger frame gets its own */
#define CHAN_IOV 4           /* pieces per write: nng_aio_set_iov takes four */
#define CHAN_BACKOFF_MIN 5   /* ms before dialing again, doubling to ... */
#define CHAN_BACKOFF_MAX 100

/* "\0SP\0", the protocol (pair0 = 0x10), two reserved bytes */
static const uint8_t chan_hello[8] = {0, 'S', 'P', 0, 0, 0x10, 0, 0};

struct chan_conn {
	struct chan *cn_ch;
	nng_stream *cn_s;
	nng_aio *cn_rx, *cn_tx; /* cn_tx: the callback's writes */
	nng_aio *cn_txw;        /* the loop's writes: no callback (chan_tx_now) */
	/* guarded by ch_mu */
	bool cn_dead;    /* a receive or send failed: the loop drops it */
	bool cn_shook;   /* the peer's handshake came: frames may go (a refused
	                  * connection never gets one, and loses nothing) */
	bool cn_sending; /* a write is under way, with cn_tx_frames frames */
	size_t cn_tx_frames;
	size_t cn_hello_off; /* bytes of our handshake written */
	size_t cn_off;       /* bytes of the queue's first frame written */
	bool cn_got;         /* cn_rx ended (cn_got_e, cn_got_n bytes): the loop's turn */
	int cn_got_e;
	size_t cn_got_n;
	/* the receive's: its callback's before the handshake, else the loop's
	 * while cn_rx is not under way */
	uint8_t *cn_buf; /* received, not parsed: cn_buf[cn_start .. cn_end) */
	size_t cn_start, cn_end;
	nng_msg *cn_big; /* a frame bigger than cn_buf, received into its own */
	size_t cn_big_got;
};

void
chan_wake(struct chan *ch)
{
	mrecv_wake(&ch->ch_in);
}

/* On any thread: the connection is done; the loop drops it. */
static void
chan_fail(struct chan_conn *cn, const char *why, bool loud)
{
	struct chan *ch = cn->cn_ch;

	if (loud)
		log_warn("%s: connection dropped: %s", ch->ch_url, why);
	pthread_mutex_lock(&ch->ch_mu);
	if (!cn->cn_dead)
		ch->ch_why = why;
	cn->cn_dead = true;
	pthread_mutex_unlock(&ch->ch_mu);
	chan_wake(ch);
}

/* Under ch_mu: the next write on aio (our handshake's rest, then frames). */
static bool
chan_tx_prepare(struct chan_conn *cn, nng_aio *aio)
{
	struct msgq *q = &cn->cn_ch->ch_outq;
	nng_iov iov[CHAN_IOV];
	unsigned n = 0;

	if (cn->cn_dead || cn->cn_sending)
		return false;
	if (cn->cn_hello_off < sizeof(chan_hello))
		iov[n++] = (nng_iov){(void *)(chan_hello + cn->cn_hello_off),
				     sizeof(chan_hello) - cn->cn_hello_off};
	cn->cn_tx_frames = 0;
	for (size_t i = 0; cn->cn_shook && i < q->mq_n && n < CHAN_IOV; i++) {
		nng_msg *nm = q->mq_q[q->mq_head + i];
		size_t off = i ? 0 : cn->cn_off;
		iov[n++] = (nng_iov){(uint8_t *)nng_msg_body(nm) + off, nng_msg_len(nm) - off};
		cn->cn_tx_frames++;
	}
	if (!n)
		return false;
	if (nng_aio_set_iov(aio, n, iov))
		fatal("%s: nng_aio_set_iov: %u pieces refused", cn->cn_ch->ch_url, n);
	cn->cn_sending = true;
	return true;
}

/* Writes what waits on cn_tx, unless a write is under way: its callback goes on. */
static void
chan_tx(struct chan_conn *cn)
{
	struct chan *ch = cn->cn_ch;
	bool send;

	pthread_mutex_lock(&ch->ch_mu);
	send = chan_tx_prepare(cn, cn->cn_tx);
	pthread_mutex_unlock(&ch->ch_mu);
	if (send)
		nng_stream_send(cn->cn_s, cn->cn_tx);
}

/* Under ch_mu: n bytes of the write under way were written; they leave the queue. */
static void
chan_tx_wrote(struct chan_conn *cn, size_t n)
{
	struct msgq *q = &cn->cn_ch->ch_outq;

	cn->cn_sending = false;
	if (cn->cn_hello_off < sizeof(chan_hello)) {
		size_t h = sizeof(chan_hello) - cn->cn_hello_off;
		h = h < n ? h : n;
		cn->cn_hello_off += h;
		n -= h;
	}
	for (size_t i = 0; n && i < cn->cn_tx_frames; i++) {
		nng_msg *nm = q->mq_q[q->mq_head];
		size_t left = nng_msg_len(nm) - cn->cn_off;
		if (n < left) {
			cn->cn_off += n;
			break;
		}
		n -= left;
		cn->cn_off = 0;
		nng_msg_free(nm);
		q->mq_head++;
		if (!--q->mq_n)
			q->mq_head = 0;
	}
}

/* On nng's thread: what was written leaves the queue; the rest goes next. */
static void
chan_tx_cb(void *arg)
{
	struct chan_conn *cn = arg;
	struct chan *ch = cn->cn_ch;
	int e = nng_aio_result(cn->cn_tx);
	bool more;

	pthread_mutex_lock(&ch->ch_mu);
	chan_tx_wrote(cn, nng_aio_count(cn->cn_tx));
	more = !e && chan_tx_prepare(cn, cn->cn_tx);
	pthread_mutex_unlock(&ch->ch_mu);
	if (e)
		chan_fail(cn, nng_strerror(e), false);
	if (more)
		nng_stream_send(cn->cn_s, cn->cn_tx);
}

/*
 * On the loop: writes what waits on the loop's own thread as far as the
 * socket takes it at once, and hands the rest to cn_tx (see the top). Not on
 * a callback: nng_aio_wait may not run there.
 */
static void
chan_tx_now(struct chan_conn *cn)
{
	struct chan *ch = cn->cn_ch;
	bool send, more;
	int e;

	pthread_mutex_lock(&ch->ch_mu);
	send = chan_tx_prepare(cn, cn->cn_txw);
	pthread_mutex_unlock(&ch->ch_mu);
	if (!send)
		return;
	nng_stream_send(cn->cn_s, cn->cn_txw);
	nng_aio_cancel(cn->cn_txw); /* no room: nothing was sent, cn_tx waits for it */
	nng_aio_wait(cn->cn_txw);
	e = nng_aio_result(cn->cn_txw);
	pthread_mutex_lock(&ch->ch_mu);
	chan_tx_wrote(cn, nng_aio_count(cn->cn_txw));
	more = (!e || e == NNG_ECANCELED) && chan_tx_prepare(cn, cn->cn_tx);
	pthread_mutex_unlock(&ch->ch_mu);
	if (e && e != NNG_ECANCELED)
		chan_fail(cn, nng_strerror(e), false);
	if (more)
		nng_stream_send(cn->cn_s, cn->cn_tx);
}

/* The next receive, into a big frame's rest or cn_buf's room (see Threads above). */
static void
chan_rx_start(struct chan_conn *cn)
{
	nng_iov iov;

	if (cn->cn_big)
		iov = (nng_iov){(uint8_t *)nng_msg_body(cn->cn_big) + cn->cn_big_got,
				nng_msg_len(cn->cn_big) - cn->cn_big_got};
	else
		iov = (nng_iov){cn->cn_buf + cn->cn_end, CHAN_BUF - cn->cn_end};
	nng_aio_set_iov(cn->cn_rx, 1, &iov);
	nng_stream_recv(cn->cn_s, cn->cn_rx);
}

/*
 * On nng's thread, before the peer's handshake is in: checks it, and lets
 * what waited for it go, without the loop (a proxy's last replies, chan_flush).
 * Returns whether the loop takes the receiving from here.
 */
static bool
chan_rx_shake(struct chan_conn *cn, size_t n)
{
	struct chan *ch = cn->cn_ch;

	if ((cn->cn_end += n) < sizeof(chan_hello)) {
		chan_rx_start(cn); /* the rest of it */
		return false;
	}
	/* byte 5 is the peer's protocol: pair0's own peer is pair0 */
	if (memcmp(cn->cn_buf, chan_hello, sizeof(chan_hello))) {
		chan_fail(cn, "not a sandcell peer (bad handshake)", true);
		return false;
	}
	cn->cn_start = sizeof(chan_hello);
	pthread_mutex_lock(&ch->ch_mu);
	cn->cn_shook = true;
	ch->ch_backoff = CHAN_BACKOFF_MIN; /* a connection held: redial fast */
	pthread_mutex_unlock(&ch->ch_mu);
	chan_tx(cn);
	return true;
}

/* On nng's thread: a receive ended; the loop takes it from here. */
static void
chan_rx_cb(void *arg)
{
	struct chan_conn *cn = arg;
	struct chan *ch = cn->cn_ch;
	int e = nng_aio_result(cn->cn_rx);
	size_t n = nng_aio_count(cn->cn_rx);

	if (!e && !cn->cn_shook) { /* set by this callback alone */
		if (!chan_rx_shake(cn, n))
			return;
		n = 0; /* the bytes after the handshake are in cn_buf already */
	}
	pthread_mutex_lock(&ch->ch_mu);
	cn->cn_got = true;
	cn->cn_got_e = e;
	cn->cn_got_n = n;
	pthread_mutex_unlock(&ch->ch_mu);
	chan_wake(ch);
}

/* Whole frames of cn_buf go to ch_in; NULL, or why the peer must be dropped. */
static const char *
chan_parse(struct chan_conn *cn)
{
	struct chan *ch = cn->cn_ch;

	while (cn->cn_end - cn->cn_start >= CHAN_HEAD) {
		const uint8_t *h = cn->cn_buf + cn->cn_start;
		size_t have = cn->cn_end - cn->cn_start - CHAN_HEAD;
		uint64_t len = 0;
		nng_msg *nm;
		if (h[0] != 1)
			return "bad frame type";
		for (int i = 1; i < CHAN_HEAD; i++)
			len = len << 8 | h[i];
		if (len > PROTO_MAX_FRAME)
			return "frame over the size limit";
		if (len > have && CHAN_HEAD + len <= CHAN_BUF)
			break; /* its rest comes into cn_buf */
		if (nng_msg_alloc(&nm, len))
			return "out of memory";
		size_t take = len < have ? len : have;
		memcpy(nng_msg_body(nm), h + CHAN_HEAD, take);
		cn->cn_start += CHAN_HEAD + take;
		if (take < len) { /* a big one: its rest is received into it */
			cn->cn_big = nm;
			cn->cn_big_got = take;
			break;
		}
		mrecv_put(&ch->ch_in, nm, false); /* the loop takes it next */
	}
	if (cn->cn_start == cn->cn_end) {
		cn->cn_start = cn->cn_end = 0;
	} else if (cn->cn_start) {
		memmove(cn->cn_buf, cn->cn_buf + cn->cn_start, cn->cn_end - cn->cn_start);
		cn->cn_end -= cn->cn_start;
		cn->cn_start = 0;
	}
	return NULL;
}

/*
 * On the loop: a receive that ended is cut into whole frames (ch_in), and
 * the next one starts; or the connection is done. Returns false when no
 * receive had ended.
 */
static bool
chan_rx_take(struct chan_conn *cn)
{
	struct chan *ch = cn->cn_ch;
	const char *why;
	bool got;
	size_t n;
	int e;

	pthread_mutex_lock(&ch->ch_mu);
	got = cn->cn_got;
	cn->cn_got = false;
	e = cn->cn_got_e;
	n = cn->cn_got_n;
	pthread_mutex_unlock(&ch->ch_mu);
	if (!got)
		return false;
	if (e) {
		chan_fail(cn, e == NNG_ECONNSHUT ? "closed by the peer" : nng_strerror(e), false);
		return true;
	}
	if (cn->cn_big) {
		if ((cn->cn_big_got += n) == nng_msg_len(cn->cn_big)) {
			mrecv_put(&ch->ch_in, cn->cn_big, false);
			cn->cn_big = NULL;
		}
	} else {
		cn->cn_end += n;
	}
	if (!cn->cn_big && (why = chan_parse(cn))) {
		chan_fail(cn, why, true);
		return true;
	}
	chan_rx_start(cn);
	return true;
}

static void
chan_conn_free(struct chan_conn *cn)
{
	nng_aio_stop(cn->cn_rx); /* no callback runs, nor starts anything, after */
	nng_aio_stop(cn->cn_tx);
	nng_aio_stop(cn->cn_txw);
	nng_aio_free(cn->cn_rx);
	nng_aio_free(cn->cn_tx);
	nng_aio_free(cn->cn_txw);
	nng_stream_free(cn->cn_s);
	if (cn->cn_big)
		nng_msg_free(cn->cn_big);
	free(cn->cn_buf);
	free(cn);
}

/* Accepts or dials again after the backoff; the dialer's backoff doubles. */
static void
chan_again(struct chan *ch, nng_duration ms)
{
	ch->ch_pausing = true;
	nng_sleep_aio(ms, ch->ch_aio);
}

static void
chan_start(struct chan *ch)
{
	ch->ch_pausing = false;
	if (ch->ch_listen)
		nng_stream_listener_accept(ch->ch_listener, ch->ch_aio);
	else
		nng_stream_dialer_dial(ch->ch_dialer, ch->ch_aio);
}

/* Under ch_mu: the dialer's next wait. */
static nng_duration
chan_backoff(struct chan *ch)
{
	nng_duration ms = ch->ch_backoff;

	ch->ch_backoff = ms * 2 > CHAN_BACKOFF_MAX ? CHAN_BACKOFF_MAX : ms * 2;
	return ms;
}

/* On nng's thread: an accept, a dial, or a pause ended. */
static void
chan_conn_cb(void *arg)
{
	struct chan *ch = arg;
	int e = nng_aio_result(ch->ch_aio);
	nng_stream *s;
	uint64_t uid = 0, pid = 0;
	bool take;

	if (e == NNG_ECLOSED || e == NNG_ECANCELED)
		return; /* chan_close */
	if (ch->ch_pausing) {
		chan_start(ch);
		return;
	}
	if (e) {
		pthread_mutex_lock(&ch->ch_mu);
		nng_duration ms = ch->ch_listen ? CHAN_BACKOFF_MAX : chan_backoff(ch);
		pthread_mutex_unlock(&ch->ch_mu);
		if (ch->ch_listen)
			log_warn("%s: accept: %s", ch->ch_url, nng_strerror(e));
		chan_again(ch, ms);
		return;
	}
	s = nng_aio_get_output(ch->ch_aio, 0);
	if (nng_stream_get_uint64(s, NNG_OPT_IPC_PEER_UID, &uid) != 0 ||
	    uid != (uint64_t)geteuid()) {
		log_warn("%s: refused ipc peer with uid %llu", ch->ch_url, (unsigned long long)uid);
		take = false;
	} else if (nng_stream_get_uint64(s, NNG_OPT_IPC_PEER_PID, &pid) != 0 ||
		   peerbox_boxed(pid)) {
		log_warn("%s: refused ipc peer in a box (pid %llu)", ch->ch_url,
			 (unsigned long long)pid);
		take = false;
	} else {
		pthread_mutex_lock(&ch->ch_mu);
		/* one peer at a time: a second is closed while the first lives */
		take = !ch->ch_pending && (!ch->ch_cur || ch->ch_cur->cn_dead);
		bool say = !take && !ch->ch_told; /* once per peer: a second one retries */
		if (take)
			ch->ch_pending = s;
		else
			ch->ch_told = true;
		pthread_mutex_unlock(&ch->ch_mu);
		if (say)
			log_warn("%s: a second peer refused: one at a time", ch->ch_url);
	}
	if (!take) {
		nng_stream_free(s);
		if (!ch->ch_listen) {
			pthread_mutex_lock(&ch->ch_mu);
			nng_duration ms = chan_backoff(ch);
			pthread_mutex_unlock(&ch->ch_mu);
			chan_again(ch, ms);
			return;
		}
	}
	if (ch->ch_listen)
		nng_stream_listener_accept(ch->ch_listener, ch->ch_aio);
	if (take)
		chan_wake(ch); /* last: the dialer's aio is the loop's again from here */
}

static int
chan_init(struct chan *ch, const char *url, bool listen)
{
	int e;

	memset(ch, 0, sizeof(*ch));
	ch->ch_fd = -1;
	ch->ch_url = xstrdup(url);
	ch->ch_listen = listen;
	ch->ch_backoff = CHAN_BACKOFF_MIN;
	pthread_mutex_init(&ch->ch_mu, NULL);
	/* no resume hook: the loop starts each receive itself, once it took the last */
	if ((e = mrecv_init(&ch->ch_in, NULL, NULL)))
		return e;
	ch->ch_fd = ch->ch_in.mr_fd;
	return nng_aio_alloc(&ch->ch_aio, chan_conn_cb, ch);
}

int
chan_listen(struct chan *ch, const char *url)
{
	int e;

	if ((e = chan_init(ch, url, true)) ||
	    (e = nng_stream_listener_alloc(&ch->ch_listener, url)) ||
	    (e = nng_stream_listener_set_int(ch->ch_listener, NNG_OPT_IPC_PERMISSIONS, 0600)) ||
	    (e = nng_stream_listener_listen(ch->ch_listener)))
		return e;
	chan_start(ch);
	return 0;
}

int
chan_dial(struct chan *ch, const char *url)
{
	int e;

	if ((e = chan_init(ch, url, false)) ||
	    (e = nng_stream_dialer_alloc(&ch->ch_dialer, url)))
		return e;
	chan_start(ch);
	return 0;
}

/* The pending stream becomes the connection (under ch_mu; the loop's). */
static struct chan_conn *
chan_attach(struct chan *ch)
{
	struct chan_conn *cn = xcalloc(1, sizeof(*cn));

	cn->cn_ch = ch;
	cn->cn_s = ch->ch_pending;
	ch->ch_pending = NULL;
	cn->cn_buf = xmalloc(CHAN_BUF);
	if (nng_aio_alloc(&cn->cn_rx, chan_rx_cb, cn) ||
	    nng_aio_alloc(&cn->cn_tx, chan_tx_cb, cn) ||
	    nng_aio_alloc(&cn->cn_txw, NULL, NULL))
		fatal("%s: nng_aio_alloc: out of memory", ch->ch_url);
	ch->ch_cur = cn;
	ch->ch_why = NULL;
	ch->ch_told = false;
	return cn;
}

int
chan_next(struct chan *ch, struct msg *m)
{
	struct chan_conn *cn;

	for (;;) {
		int e = mrecv_next(&ch->ch_in, m);
		if (e != NNG_EAGAIN)
			return e;
		/* all taken: what the last receive got comes next, then the end */
		if ((cn = ch->ch_cur) && chan_rx_take(cn))
			continue;
		pthread_mutex_lock(&ch->ch_mu);
		if (cn && cn->cn_dead) {
			ch->ch_cur = NULL;
			pthread_mutex_unlock(&ch->ch_mu);
			chan_conn_free(cn);
			pthread_mutex_lock(&ch->ch_mu);
			nng_duration ms = ch->ch_listen ? 0 : chan_backoff(ch);
			if (ch->ch_listen) /* what was for that peer is not for the next */
				msgq_clear(&ch->ch_outq);
			pthread_mutex_unlock(&ch->ch_mu);
			if (!ch->ch_listen)
				chan_again(ch, ms);
			return CHAN_DOWN;
		}
		if (cn || !ch->ch_pending) {
			pthread_mutex_unlock(&ch->ch_mu);
			return CHAN_EMPTY;
		}
		cn = chan_attach(ch);
		pthread_mutex_unlock(&ch->ch_mu);
		chan_tx_now(cn); /* our handshake: frames wait for the peer's */
		chan_rx_start(cn);
		return CHAN_UP;
	}
}

int
chan_send(struct chan *ch, const struct msg *m)
{
	nng_msg *nm;
	struct chan_conn *cn;
	int e;

	if ((e = msg_pack_at(m, CHAN_HEAD, &nm)))
		return e;
	uint8_t *h = nng_msg_body(nm);
	uint64_t len = nng_msg_len(nm) - CHAN_HEAD;
	h[0] = 1;
	for (int i = CHAN_HEAD - 1; i >= 1; i--, len >>= 8)
		h[i] = len & 0xff;
	pthread_mutex_lock(&ch->ch_mu);
	cn = ch->ch_cur;
	if (ch->ch_listen && (!cn || cn->cn_dead)) {
		nng_msg_free(nm); /* no peer: the next one hears the state in its hello */
	} else {
		msgq_push(&ch->ch_outq, nm);
	}
	pthread_mutex_unlock(&ch->ch_mu);
	if (cn)
		chan_tx_now(cn); /* the loop's own: only it frees a connection */
	return 0;
}

bool
chan_up(struct chan *ch)
{
	bool up;

	pthread_mutex_lock(&ch->ch_mu);
	up = ch->ch_cur && !ch->ch_cur->cn_dead;
	pthread_mutex_unlock(&ch->ch_mu);
	return up;
}

void
chan_flush(struct chan *ch, int ms)
{
	for (; ms > 0; ms--) {
		pthread_mutex_lock(&ch->ch_mu);
		bool done = !ch->ch_outq.mq_n || !ch->ch_cur || ch->ch_cur->cn_dead;
		pthread_mutex_unlock(&ch->ch_mu);
		if (done)
			return;
		usleep(1000);
	}
}

void
chan_close(struct chan *ch)
{
	if (!ch->ch_url)
		return; /* never opened */
	if (ch->ch_aio)
		nng_aio_stop(ch->ch_aio); /* no accept, dial or pause from here */
	if (ch->ch_listener)
		nng_stream_listener_close(ch->ch_listener);
	if (ch->ch_cur)
		chan_conn_free(ch->ch_cur);
	if (ch->ch_pending)
		nng_stream_free(ch->ch_pending);
	nng_aio_free(ch->ch_aio);
	nng_stream_listener_free(ch->ch_listener);
	nng_stream_dialer_free(ch->ch_dialer);
	mrecv_close(&ch->ch_in); /* and ch_fd, its eventfd */
	msgq_free(&ch->ch_outq);
	pthread_mutex_destroy(&ch->ch_mu);
	free(ch->ch_url);
	memset(ch, 0, sizeof(*ch));
	ch->ch_in.mr_fd = ch->ch_fd = -1; /* not stdin: a stray read must fail, not block */
}
