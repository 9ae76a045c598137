/*
 * chan.c — the broker<->proxy link over an nng_stream (ipc://) with our own
 * framing: the bytes nng's ipc transport puts on the wire for a pair0 socket
 * (an 8-byte handshake each way, then a type byte 1 and a 64-bit big-endian
 * length before each message), so a broker still re-attaches to proxies of an
 * older version and they to it. Why not the pair0 socket itself: each of its
 * messages crosses two or three of nng's threads; a stream receive is one
 * poller wake and one completion callback, and a send is written in place.
 *
 * Receiving, two ways. A connection starts on nng's callbacks: each read is
 * one poller wake and one completion callback, and the messages reach the
 * loop through ch_in's eventfd. Once the peer's handshake is in, it goes
 * direct when it can: the loop polls the connection's own socket (added to
 * ch_fd, the epoll set it polls) and, when it is readable, receives on nng's
 * stream in place; a receive that finds bytes completes in the caller, with
 * no thread hand-off, so a message costs the loop one wake, as a plain socket
 * would. nng does not give out the socket, so chan_stream_fd finds it by
 * what it is; when two sockets fit, the connection stays on the callbacks.
 * (The handshake is on the callbacks so that what the dialer queued goes out
 * without the loop's help, as it always did.) Sending is the same in both:
 * written in place (chan_tx).
 *
 * Threads: nng's callbacks only move bytes and queue whole messages (ch_in);
 * a connection is attached and dropped on the loop's thread, in chan_next, so
 * the loop sees a connection's messages, then its end, then the next one.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto.h"

#define CHAN_HEAD 9          /* type byte, 64-bit length */
#define CHAN_BUF (64u << 10) /* receive buffer; a bigger frame gets its own */
#define CHAN_IOV 8           /* frames written per send */
#define CHAN_BACKOFF_MIN 5   /* ms before dialing again, doubling to ... */
#define CHAN_BACKOFF_MAX 100

/* "\0SP\0", the protocol (pair0 = 0x10), two reserved bytes */
static const uint8_t chan_hello[8] = {0, 'S', 'P', 0, 0, 0x10, 0, 0};

struct chan_conn {
	struct chan *cn_ch;
	nng_stream *cn_s;
	int cn_fd; /* its socket, or -1: not certain, so always on cn_rx's callbacks */
	nng_aio *cn_rx, *cn_tx, *cn_txi, *cn_rxi; /* cn_txi, cn_rxi: in place, no callback */
	/* guarded by ch_mu */
	bool cn_dead;       /* a receive or send failed: the loop drops it */
	bool cn_direct;     /* received by the loop (cn_fd in ch_fd), no more on cn_rx */
	bool cn_shook;      /* the peer's handshake came: frames may go (a refused
			     * connection never gets one, and loses nothing) */
	bool cn_sending;    /* a write (cn_txi or cn_tx) is under way, of cn_tx_frames frames */
	size_t cn_tx_frames;
	size_t cn_hello_off; /* bytes of our handshake written */
	size_t cn_off;       /* bytes of the queue's first frame written */
	/* the receiver's alone (the loop's, or cn_rx's callback) */
	uint8_t *cn_buf;     /* received, not parsed: cn_buf[cn_start .. cn_end) */
	size_t cn_start, cn_end;
	nng_msg *cn_big;     /* a frame bigger than cn_buf, received into its own */
	size_t cn_big_got;
	bool cn_drained;     /* the loop's last direct read emptied the socket */
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

/* Under ch_mu: the next write on aio (our handshake's rest, then up to CHAN_IOV frames). */
static bool
chan_tx_prepare(struct chan_conn *cn, nng_aio *aio)
{
	struct msgq *q = &cn->cn_ch->ch_outq;
	nng_iov iov[CHAN_IOV + 1];
	unsigned n = 0;

	if (cn->cn_dead || cn->cn_sending)
		return false;
	if (cn->cn_hello_off < sizeof(chan_hello))
		iov[n++] = (nng_iov){(void *)(chan_hello + cn->cn_hello_off),
				     sizeof(chan_hello) - cn->cn_hello_off};
	cn->cn_tx_frames = 0;
	for (size_t i = 0; cn->cn_shook && i < q->mq_n && i < CHAN_IOV; i++) {
		nng_msg *nm = q->mq_q[q->mq_head + i];
		size_t off = i ? 0 : cn->cn_off;
		iov[n++] = (nng_iov){(uint8_t *)nng_msg_body(nm) + off, nng_msg_len(nm) - off};
		cn->cn_tx_frames++;
	}
	if (!n)
		return false;
	nng_aio_set_iov(aio, n, iov);
	cn->cn_sending = true;
	return true;
}

/*
 * A write of n bytes ended (e): they leave the queue. Returns whether more
 * waits, prepared on cn_tx, which the caller sends: it completes on nng's
 * thread (chan_tx_cb), when the socket has room again.
 */
static bool
chan_tx_done(struct chan_conn *cn, int e, size_t n)
{
	struct chan *ch = cn->cn_ch;
	struct msgq *q = &ch->ch_outq;
	bool more;

	pthread_mutex_lock(&ch->ch_mu);
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
	more = !e && chan_tx_prepare(cn, cn->cn_tx);
	pthread_mutex_unlock(&ch->ch_mu);
	if (e)
		chan_fail(cn, nng_strerror(e), false);
	return more;
}

/* On nng's thread: what was written leaves the queue; the rest goes next. */
static void
chan_tx_cb(void *arg)
{
	struct chan_conn *cn = arg;

	if (chan_tx_done(cn, nng_aio_result(cn->cn_tx), nng_aio_count(cn->cn_tx)))
		nng_stream_send(cn->cn_s, cn->cn_tx);
}

/*
 * On the loop: writes what waits in place, as a socket with room takes it at
 * once. cn_txi has no callback, so a write done in place costs no thread
 * hand-off; one that would block is cancelled (nng wrote nothing then) and
 * goes again on cn_tx, whose callback runs when the socket has room.
 */
static void
chan_tx(struct chan_conn *cn)
{
	struct chan *ch = cn->cn_ch;
	bool send;
	int e;

	pthread_mutex_lock(&ch->ch_mu);
	send = chan_tx_prepare(cn, cn->cn_txi);
	pthread_mutex_unlock(&ch->ch_mu);
	if (!send)
		return;
	nng_stream_send(cn->cn_s, cn->cn_txi);
	nng_aio_cancel(cn->cn_txi);
	nng_aio_wait(cn->cn_txi);
	if ((e = nng_aio_result(cn->cn_txi)) == NNG_ECANCELED)
		e = 0;
	if (chan_tx_done(cn, e, nng_aio_count(cn->cn_txi)))
		nng_stream_send(cn->cn_s, cn->cn_tx);
}

/* The next receive of aio: into a big frame's rest, or cn_buf's room; its size. */
static size_t
chan_rx_iov(struct chan_conn *cn, nng_aio *aio)
{
	nng_iov iov;

	if (cn->cn_big)
		iov = (nng_iov){(uint8_t *)nng_msg_body(cn->cn_big) + cn->cn_big_got,
				nng_msg_len(cn->cn_big) - cn->cn_big_got};
	else
		iov = (nng_iov){cn->cn_buf + cn->cn_end, CHAN_BUF - cn->cn_end};
	nng_aio_set_iov(aio, 1, &iov);
	return iov.iov_len;
}

static void
chan_rx_more(struct chan_conn *cn)
{
	chan_rx_iov(cn, cn->cn_rx);
	nng_stream_recv(cn->cn_s, cn->cn_rx);
}

/* Whole frames of cn_buf go to the loop; NULL, or why the peer must be dropped. */
static const char *
chan_parse(struct chan_conn *cn)
{
	struct chan *ch = cn->cn_ch;

	if (!cn->cn_shook) {
		bool send;
		if (cn->cn_end - cn->cn_start < sizeof(chan_hello))
			return NULL;
		/* byte 5 is the peer's protocol: pair0's own peer is pair0 */
		if (memcmp(cn->cn_buf + cn->cn_start, chan_hello, sizeof(chan_hello)))
			return "not a sandcell peer (bad handshake)";
		cn->cn_start += sizeof(chan_hello);
		pthread_mutex_lock(&ch->ch_mu);
		cn->cn_shook = true;
		ch->ch_backoff = CHAN_BACKOFF_MIN; /* a connection held: redial fast */
		send = chan_tx_prepare(cn, cn->cn_tx); /* what waited for it */
		pthread_mutex_unlock(&ch->ch_mu);
		if (send)
			nng_stream_send(cn->cn_s, cn->cn_tx);
	}
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
		mrecv_put(&ch->ch_in, nm, !cn->cn_direct); /* the receiver's own flag */
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
 * A receive ended (e, n bytes): whole frames go to ch_in. Returns whether the
 * connection lives on.
 */
static bool
chan_rx_got(struct chan_conn *cn, int e, size_t n)
{
	const char *why;

	if (e) {
		chan_fail(cn, e == NNG_ECONNSHUT ? "closed by the peer" : nng_strerror(e), false);
		return false;
	}
	if (cn->cn_big) {
		if ((cn->cn_big_got += n) == nng_msg_len(cn->cn_big)) {
			mrecv_put(&cn->cn_ch->ch_in, cn->cn_big, !cn->cn_direct);
			cn->cn_big = NULL;
		}
	} else {
		cn->cn_end += n;
	}
	if (!cn->cn_big && (why = chan_parse(cn))) {
		chan_fail(cn, why, true);
		return false;
	}
	return true;
}

/*
 * On nng's thread: parse what came; past the handshake, hand the receiving to
 * the loop if it can take it, else receive again unless the loop is behind.
 */
static void
chan_rx_cb(void *arg)
{
	struct chan_conn *cn = arg;
	struct chan *ch = cn->cn_ch;
	struct epoll_event ev = {.events = EPOLLIN};

	if (!chan_rx_got(cn, nng_aio_result(cn->cn_rx), nng_aio_count(cn->cn_rx)))
		return;
	if (cn->cn_shook && cn->cn_fd >= 0) {
		pthread_mutex_lock(&ch->ch_mu);
		cn->cn_direct = true; /* no receive is left on cn_rx: the loop's from here */
		pthread_mutex_unlock(&ch->ch_mu);
		if (epoll_ctl(ch->ch_fd, EPOLL_CTL_ADD, cn->cn_fd, &ev) < 0)
			chan_fail(cn, strerror(errno), true);
		return;
	}
	if (!mrecv_full(&ch->ch_in))
		chan_rx_more(cn);
}

/*
 * On the loop, a direct connection: receives what its socket holds, in
 * place. Returns false when the socket had nothing (nothing was done).
 * After a read that got less than it asked for, the socket was empty: the
 * next call says so without a poll(2) (bytes that came since keep the
 * socket readable in ch_fd, which wakes the loop again).
 */
static bool
chan_rx_direct(struct chan_conn *cn)
{
	struct pollfd p = {.fd = cn->cn_fd, .events = POLLIN};
	size_t want;
	int e;

	if (cn->cn_drained) {
		cn->cn_drained = false;
		return false;
	}
	if (poll(&p, 1, 0) != 1)
		return false;
	want = chan_rx_iov(cn, cn->cn_rxi);
	nng_stream_recv(cn->cn_s, cn->cn_rxi); /* readable: it reads now */
	nng_aio_cancel(cn->cn_rxi);
	nng_aio_wait(cn->cn_rxi);
	if ((e = nng_aio_result(cn->cn_rxi)) == NNG_ECANCELED)
		return false; /* nothing after all (a wake with no bytes) */
	cn->cn_drained = !e && nng_aio_count(cn->cn_rxi) < want;
	chan_rx_got(cn, e, nng_aio_count(cn->cn_rxi));
	return true;
}

/* On the loop (mrecv_next): the loop took what paused the receiving. */
static void
chan_resume(void *arg)
{
	struct chan *ch = arg;
	struct chan_conn *cn = ch->ch_cur; /* only the loop changes it */
	bool live;

	pthread_mutex_lock(&ch->ch_mu);
	live = cn && !cn->cn_dead;
	pthread_mutex_unlock(&ch->ch_mu);
	if (live && !cn->cn_direct)
		chan_rx_more(cn);
}

static void
chan_conn_free(struct chan_conn *cn)
{
	nng_stream_close(cn->cn_s); /* ends its receive and send */
	nng_aio_free(cn->cn_rx);    /* and waits for their callbacks */
	nng_aio_free(cn->cn_tx);
	nng_aio_free(cn->cn_txi);
	nng_aio_free(cn->cn_rxi);
	if (cn->cn_direct) /* set by the callback, which has returned */
		epoll_ctl(cn->cn_ch->ch_fd, EPOLL_CTL_DEL, cn->cn_fd, NULL);
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
	uint64_t uid = 0;
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
	if ((e = mrecv_init(&ch->ch_in, chan_resume, ch)))
		return e;
	struct epoll_event ev = {.events = EPOLLIN};
	if ((ch->ch_fd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    epoll_ctl(ch->ch_fd, EPOLL_CTL_ADD, ch->ch_in.mr_fd, &ev) < 0)
		return NNG_ENOMEM;
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

bool chan_callbacks_only;

/*
 * Whether fd is a live connection (a unix stream socket, neither end shut)
 * of peer pid at path (ours or the peer's).
 */
static bool
chan_fd_fits(int fd, uint64_t pid, const char *path, bool ours)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	struct sockaddr_un sa;
	struct ucred cr;
	struct stat st;
	socklen_t l;
	int v;

	if (fstat(fd, &st) || !S_ISSOCK(st.st_mode))
		return false;
	l = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) || v != AF_UNIX)
		return false;
	l = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) || v != SOCK_STREAM)
		return false;
	l = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) || v)
		return false;
	l = sizeof(cr);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) || (uint64_t)cr.pid != pid)
		return false;
	l = sizeof(sa);
	if ((ours ? getsockname : getpeername)(fd, (struct sockaddr *)&sa, &l) ||
	    l <= offsetof(struct sockaddr_un, sun_path))
		return false;
	if (strnlen(sa.sun_path, l - offsetof(struct sockaddr_un, sun_path)) != strlen(path) ||
	    memcmp(sa.sun_path, path, strlen(path)))
		return false;
	/* last: a dropped connection that nng has yet to close is shut */
	return poll(&p, 1, 0) >= 0 && !(p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/*
 * The socket under s, found by what it is, since nng does not say: this
 * process's one live unix stream connection whose peer is the pid nng names
 * and whose path is ours (the listener's end) or the one dialed. -1 unless
 * exactly one fits (a second live connection between the same two
 * processes: none is made, but nothing here relies on that).
 */
static int
chan_stream_fd(struct chan *ch, nng_stream *s)
{
	const char *path = ch->ch_url + strlen("ipc://");
	struct dirent *de;
	int found = -1, n = 0;
	uint64_t pid;
	DIR *d;

	if (chan_callbacks_only || strncmp(ch->ch_url, "ipc://", strlen("ipc://")) ||
	    nng_stream_get_uint64(s, NNG_OPT_IPC_PEER_PID, &pid) || !(d = opendir("/proc/self/fd")))
		return -1;
	while ((de = readdir(d))) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);
		if (*end || end == de->d_name || fd == dirfd(d))
			continue;
		if (chan_fd_fits((int)fd, pid, path, ch->ch_listen)) {
			found = (int)fd;
			n++;
		}
	}
	closedir(d);
	return n == 1 ? found : -1;
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
	    nng_aio_alloc(&cn->cn_tx, chan_tx_cb, cn) || nng_aio_alloc(&cn->cn_txi, NULL, NULL) ||
	    nng_aio_alloc(&cn->cn_rxi, NULL, NULL))
		fatal("%s: nng_aio_alloc: out of memory", ch->ch_url);
	if ((cn->cn_fd = chan_stream_fd(ch, cn->cn_s)) < 0)
		log_debug("%s: connection received on nng's callbacks", ch->ch_url);
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
		/* nothing queued: the dead connection's messages have all been taken */
		pthread_mutex_lock(&ch->ch_mu);
		if ((cn = ch->ch_cur) && cn->cn_dead) {
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
		if (cn) {
			bool direct = cn->cn_direct;
			pthread_mutex_unlock(&ch->ch_mu);
			if (direct && chan_rx_direct(cn))
				continue; /* frames, or its end */
			return CHAN_EMPTY;
		}
		if (!ch->ch_pending) {
			pthread_mutex_unlock(&ch->ch_mu);
			return CHAN_EMPTY;
		}
		cn = chan_attach(ch);
		pthread_mutex_unlock(&ch->ch_mu);
		chan_tx(cn); /* our handshake: frames wait for the peer's */
		chan_rx_more(cn);
		return CHAN_UP;
	}
}

bool
chan_direct(struct chan *ch)
{
	bool direct;

	pthread_mutex_lock(&ch->ch_mu);
	direct = ch->ch_cur && ch->ch_cur->cn_direct;
	pthread_mutex_unlock(&ch->ch_mu);
	return direct;
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
		chan_tx(cn); /* the loop's own: only it frees a connection */
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
	mrecv_close(&ch->ch_in);
	if (ch->ch_fd >= 0)
		close(ch->ch_fd);
	msgq_free(&ch->ch_outq);
	pthread_mutex_destroy(&ch->ch_mu);
	free(ch->ch_url);
	memset(ch, 0, sizeof(*ch));
	ch->ch_in.mr_fd = ch->ch_fd = -1; /* not stdin: a stray read must fail, not block */
}
