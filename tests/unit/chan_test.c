/*
 * chan_test.c — the broker<->proxy link (proto/chan.c): messages cross it
 * whole and in order both ways, big ones too, and however the bytes are cut;
 * it speaks a pair0 socket's wire format either way (peers of an older
 * version); the listener takes one peer at a time, of our uid; a bad frame is
 * dropped alone, a bad length, a frame over the limit or a bad handshake
 * drops only that connection, as does a peer that leaves mid-frame; the
 * dialer comes back after the listener's restart or a refused handshake; what
 * was sent before chan_flush and chan_close arrives; the loop's fd is quiet
 * once everything is taken.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/sockios.h>
#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>

#include "../../proto/proto.h"

static char dir[] = "/tmp/chan-test.XXXXXX", url[96];
static const uint8_t hello[] = {0, 'S', 'P', 0, 0, 0x10, 0, 0};

static void
setup(void)
{
	cr_assert_not_null(mkdtemp(dir));
	snprintf(url, sizeof(url), "ipc://%s/s.sock", dir);
}

static void
teardown(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		return;
}

TestSuite(chan, .init = setup, .fini = teardown, .timeout = 60);

/* The next event of ch other than CHAN_EMPTY, waiting up to 5 s for one. */
static int
next_of(struct chan *ch, struct msg *m)
{
	for (uint64_t end = now_ms() + 5000; now_ms() < end;) {
		int e = chan_next(ch, m);
		if (e != CHAN_EMPTY)
			return e;
		struct pollfd p = {.fd = ch->ch_fd, .events = POLLIN};
		poll(&p, 1, 10);
	}
	return CHAN_EMPTY;
}

/*
 * Waits up to 5 s until both ends' receives have ended with bytes their loops
 * have not taken: neither receives again until its loop does, so whatever its
 * peer writes from then on waits in the socket.
 */
static bool
both_waiting(struct chan *a, struct chan *b)
{
	struct pollfd p[2] = {{.fd = a->ch_fd, .events = POLLIN},
			      {.fd = b->ch_fd, .events = POLLIN}};
	int ready = 0;

	for (uint64_t end = now_ms() + 5000; ready < 2 && now_ms() < end;) {
		if (poll(p, 2, 10) <= 0)
			continue;
		for (int i = 0; i < 2; i++)
			if (p[i].revents & POLLIN) { /* then the other alone */
				p[i].fd = -1;
				ready++;
			}
	}
	return ready == 2;
}

/* The dialer's next pause before it dials again (chan.c's ch_backoff, under ch_mu). */
static nng_duration
backoff_of(struct chan *ch)
{
	pthread_mutex_lock(&ch->ch_mu);
	nng_duration ms = ch->ch_backoff;
	pthread_mutex_unlock(&ch->ch_mu);
	return ms;
}

static void
send_cancel(struct chan *ch, uint64_t stream)
{
	struct msg m;

	msg_init(&m, MSG_CANCEL);
	msg_set_u64(&m, F_STREAM, stream);
	cr_assert_eq(chan_send(ch, &m), 0);
}

static void
expect_cancel(struct chan *ch, uint64_t stream)
{
	struct msg m;

	cr_assert_eq(next_of(ch, &m), CHAN_MSG, "message %llu missing", (unsigned long long)stream);
	cr_assert_eq(m.m_type, MSG_CANCEL);
	cr_assert_eq(m.m_stream, stream, "got %llu, want %llu", (unsigned long long)m.m_stream,
		     (unsigned long long)stream);
	msg_free(&m);
}

/* m as it goes on the wire: the frame header, then its msgpack. */
static uint8_t *
frame_of(const struct msg *m, size_t *len)
{
	void *body;
	size_t n;
	uint8_t *f;

	cr_assert_eq(msg_encode(m, &body, &n), 0);
	f = malloc(9 + n);
	f[0] = 1;
	for (int i = 8; i >= 1; i--)
		f[i] = (uint8_t)(n >> (8 * (8 - i)));
	memcpy(f + 9, body, n);
	free(body);
	*len = 9 + n;
	return f;
}

static uint8_t *
cancel_frame(uint64_t stream, size_t *len)
{
	struct msg m;
	uint8_t *f;

	msg_init(&m, MSG_CANCEL);
	msg_set_u64(&m, F_STREAM, stream);
	f = frame_of(&m, len);
	msg_free(&m);
	return f;
}

/* An OUTPUT of n bytes, 'a' to 'z' over and over: *data is its payload. */
static struct msg
output_of(size_t n, char **data)
{
	struct msg m;

	*data = malloc(n);
	for (size_t i = 0; i < n; i++)
		(*data)[i] = 'a' + i % 26;
	msg_init(&m, MSG_OUTPUT);
	msg_set_u64(&m, F_STREAM, 5);
	msg_set_str(&m, F_DATA, *data, n);
	return m;
}

static void
expect_output(struct chan *ch, const char *data, size_t n)
{
	struct msg m;

	cr_assert_eq(next_of(ch, &m), CHAN_MSG);
	cr_assert_eq(m.m_type, MSG_OUTPUT);
	cr_assert_eq(m.m_data.len, n);
	cr_assert_eq(memcmp(m.m_data.s, data, n), 0);
	msg_free(&m);
}

/* A raw connection to the listener's socket path. */
static int
raw_connect(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", url + strlen("ipc://"));
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* A raw listener on the socket path, for a chan that dials. */
static int
raw_listen(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", url + strlen("ipc://"));
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(fd, 4), 0);
	return fd;
}

static void
write_all(int fd, const void *b, size_t n)
{
	cr_assert_eq(write(fd, b, n), (ssize_t)n);
}

/* Reads exactly n bytes within 5 s. */
static void
read_all(int fd, void *b, size_t n)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		cr_assert_eq(poll(&p, 1, 5000), 1, "%zu of %zu bytes came", got, n);
		ssize_t k = read(fd, (uint8_t *)b + got, n - got);
		cr_assert_gt(k, 0, "closed after %zu of %zu bytes", got, n);
		got += (size_t)k;
	}
}

/* Reads until the peer closes (true) or 5 s pass (false). */
static bool
closed_within(int fd)
{
	char b[256];

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 5000) != 1)
			return false;
		ssize_t n = read(fd, b, sizeof(b));
		if (n <= 0)
			return true;
	}
}

/* All taken: chan_next has nothing, and the loop's fd is quiet (a wake left
 * behind, an eventfd never read, would have the loop spin). */
static void
expect_idle(struct chan *ch)
{
	struct msg m;
	struct pollfd p = {.fd = ch->ch_fd, .events = POLLIN};

	cr_assert_eq(chan_next(ch, &m), CHAN_EMPTY);
	cr_assert_eq(poll(&p, 1, 0), 0, "nothing is left, yet the loop's fd is readable");
}

/*
 * Turns of ch's loop, nothing but CHAN_EMPTY coming, until its raw peer fd
 * has something to read (what ch sent), or 5 s pass.
 */
static void
turn_until_sent(struct chan *ch, int fd)
{
	struct msg m;
	struct pollfd p[2] = {{.fd = ch->ch_fd, .events = POLLIN}, {.fd = fd, .events = POLLIN}};

	for (uint64_t end = now_ms() + 5000; now_ms() < end;) {
		cr_assert_eq(chan_next(ch, &m), CHAN_EMPTY);
		if (poll(p, 2, 10) > 0 && (p[1].revents & POLLIN))
			return;
	}
	cr_assert_fail("nothing was sent in 5 s");
}

/* Bytes written on fd that its peer has not read yet. */
static int
unread(int fd)
{
	int queued;

	cr_assert_eq(ioctl(fd, SIOCOUTQ, &queued), 0);
	return queued;
}

/*
 * What a raw peer wrote on fd (less than a frame) is all received by ch,
 * nothing whole coming of it. Before the peer's handshake is in, nng's
 * callback receives (chan.c): until none of it is left unread. After it, the
 * loop starts each receive: until then, each one ends (ch's fd readable) and
 * chan_next has nothing.
 */
static void
taken_unheard(struct chan *ch, int fd, bool shook)
{
	struct msg m;

	for (uint64_t end = now_ms() + 5000; !shook && unread(fd);) {
		cr_assert_lt(now_ms(), end, "%d bytes still unread after 5 s", unread(fd));
		poll(NULL, 0, 1);
	}
	do {
		struct pollfd p = {.fd = ch->ch_fd, .events = POLLIN};
		cr_assert(!shook || poll(&p, 1, 5000) == 1, "what was written did not come in 5 s");
		cr_assert_eq(chan_next(ch, &m), CHAN_EMPTY, "a message before its frame's end");
	} while (unread(fd));
}

struct writer {
	int w_fd;
	const uint8_t *w_buf;
	size_t w_len, w_piece; /* written w_piece bytes at a time (0: all at once) */
};

static void *
writer_run(void *arg)
{
	struct writer *w = arg;

	for (size_t off = 0; off < w->w_len;) {
		size_t n = w->w_len - off;
		if (w->w_piece && n > w->w_piece) {
			n = w->w_piece;
			usleep(50);
		}
		ssize_t k = write(w->w_fd, w->w_buf + off, n);
		if (k <= 0)
			break;
		off += (size_t)k;
	}
	return NULL;
}

Test(chan, messages_arrive_whole_and_in_order_both_ways)
{
	struct chan l, d;
	struct msg m;
	const int n = 6000; /* more than the receive buffer holds */

	/* the dialer first: it keeps what it sends until the listener is there */
	cr_assert_eq(chan_dial(&d, url), 0);
	send_cancel(&d, 0);
	/* its first try refused (no listener): its backoff doubled from 5 ms (chan.c) */
	for (uint64_t end = now_ms() + 5000; backoff_of(&d) <= 5 && now_ms() < end;)
		poll(NULL, 0, 1);
	cr_assert_gt(backoff_of(&d), 5, "the dialer never tried");
	cr_assert_eq(chan_listen(&l, url), 0);
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	expect_cancel(&l, 0);
	for (int i = 1; i < n; i++)
		send_cancel(&d, i);
	/* a frame bigger than the receive buffer, between small ones */
	char *data;
	size_t blen = 3u << 20;
	struct msg big = output_of(blen, &data);
	cr_assert_eq(chan_send(&l, &big), 0);
	send_cancel(&l, 6);
	msg_free(&big);
	/* a backlog builds up in the socket while neither loop takes */
	cr_assert(both_waiting(&l, &d), "nothing arrived at one end");
	for (int i = 1; i < n; i++)
		expect_cancel(&l, i);
	expect_output(&d, data, blen);
	expect_cancel(&d, 6);
	expect_idle(&l);
	expect_idle(&d);
	free(data);
	chan_close(&d);
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	cr_assert_str_eq(l.ch_why, "closed by the peer");
	chan_close(&l);
}

/*
 * A peer that writes a byte at a time, and a big frame in odd pieces: each
 * receive brings a part of a frame, or of a header; the frames come whole.
 */
Test(chan, a_frame_sent_in_many_small_pieces_arrives_whole)
{
	struct chan l;
	struct msg m;
	size_t n7, n8, nbig;
	uint8_t *f7 = cancel_frame(7, &n7), *f8 = cancel_frame(8, &n8);
	char *data;
	size_t blen = 200u << 10; /* over the 64 KiB receive buffer */
	struct msg big = output_of(blen, &data);
	uint8_t *fbig = frame_of(&big, &nbig);

	cr_assert_eq(chan_listen(&l, url), 0);
	int fd = raw_connect();
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	for (size_t i = 0; i < sizeof(hello); i++) {
		write_all(fd, hello + i, 1);
		taken_unheard(&l, fd, false);
	}
	for (size_t i = 0; i < n7; i++) {
		write_all(fd, f7 + i, 1);
		if (i + 1 < n7)
			taken_unheard(&l, fd, true);
	}
	expect_cancel(&l, 7);
	struct writer w = {fd, fbig, nbig, 997};
	pthread_t t;
	/* in a thread: the socket holds less */
	cr_assert_eq(pthread_create(&t, NULL, writer_run, &w), 0);
	expect_output(&l, data, blen);
	pthread_join(t, NULL);
	write_all(fd, f8, n8);
	expect_cancel(&l, 8);
	expect_idle(&l);
	close(fd);
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	chan_close(&l);
	msg_free(&big);
	free(data);
	free(fbig);
	free(f7);
	free(f8);
}

/* The dialer's handshake goes at once; its queue only after the peer's. */
Test(chan, a_dialer_sends_its_queue_once_the_peers_handshake_came)
{
	struct chan d;
	struct msg m;
	uint8_t got[sizeof(hello)], b[64];
	size_t n5;
	uint8_t *f5 = cancel_frame(5, &n5);

	int lfd = raw_listen();
	cr_assert_eq(chan_dial(&d, url), 0);
	send_cancel(&d, 5);
	int fd = accept(lfd, NULL, NULL);
	cr_assert_geq(fd, 0);
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	read_all(fd, got, sizeof(got));
	cr_assert_eq(memcmp(got, hello, sizeof(hello)), 0);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 100), 0, "a frame went before the peer's handshake");
	write_all(fd, hello, sizeof(hello));
	turn_until_sent(&d, fd); /* the loop takes the handshake: the queue goes */
	cr_assert_leq(n5, sizeof(b));
	read_all(fd, b, n5);
	cr_assert_eq(memcmp(b, f5, n5), 0);
	chan_close(&d);
	cr_assert(closed_within(fd));
	close(fd);
	close(lfd);
	free(f5);
}

/*
 * One receive brings many messages; a loop that takes only part of them (the
 * broker's turn for one context) leaves the rest queued with nothing left to
 * come, so nothing would wake it for them: chan_wake does.
 */
Test(chan, a_loop_that_stops_taking_is_woken_for_the_rest_by_chan_wake)
{
	struct chan l;
	struct msg m;
	const int n = 100;
	uint8_t all[sizeof(hello) + 100 * 16];
	size_t len = sizeof(hello);

	memcpy(all, hello, sizeof(hello));
	for (int i = 1; i <= n; i++) {
		size_t k;
		uint8_t *f = cancel_frame(i, &k);
		cr_assert_leq(len + k, sizeof(all));
		memcpy(all + len, f, k);
		len += k;
		free(f);
	}
	cr_assert_eq(chan_listen(&l, url), 0);
	int fd = raw_connect();
	write_all(fd, all, len); /* all in the socket before the first receive */
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	for (int i = 1; i <= 10; i++)
		expect_cancel(&l, i);
	struct pollfd p = {.fd = l.ch_fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 50), 0, "the rest wait, and nothing more comes");
	chan_wake(&l);
	cr_assert_eq(poll(&p, 1, 0), 1, "chan_wake makes the loop come back");
	for (int i = 11; i <= n; i++)
		expect_cancel(&l, i);
	expect_idle(&l);
	close(fd);
	chan_close(&l);
}

/* An older broker or proxy had a pair0 socket: the wire is the same. */
Test(chan, speaks_to_a_pair0_socket_either_way)
{
	struct chan c;
	struct msg m;
	nng_socket s;

	cr_assert_eq(nng_pair0_open(&s), 0);
	cr_assert_eq(nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000), 0);
	cr_assert_eq(nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 5), 0);
	cr_assert_eq(chan_listen(&c, url), 0);
	cr_assert_eq(nng_dial(s, url, NULL, NNG_FLAG_NONBLOCK), 0);
	cr_assert_eq(next_of(&c, &m), CHAN_UP);
	send_cancel(&c, 1);
	cr_assert_eq(msg_recv(s, &m, 0), 0);
	cr_assert_eq(m.m_stream, 1);
	msg_free(&m);
	msg_init(&m, MSG_CANCEL);
	msg_set_u64(&m, F_STREAM, 2);
	cr_assert_eq(msg_send(s, &m, 0), 0);
	expect_cancel(&c, 2);
	nng_close(s);
	cr_assert_eq(next_of(&c, &m), CHAN_DOWN);
	chan_close(&c);

	cr_assert_eq(nng_pair0_open(&s), 0);
	cr_assert_eq(nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000), 0);
	cr_assert_eq(nng_listen(s, url, NULL, 0), 0);
	cr_assert_eq(chan_dial(&c, url), 0);
	send_cancel(&c, 3);
	cr_assert_eq(next_of(&c, &m), CHAN_UP);
	cr_assert_eq(msg_recv(s, &m, 0), 0);
	cr_assert_eq(m.m_stream, 3);
	msg_free(&m);
	msg_init(&m, MSG_CANCEL);
	msg_set_u64(&m, F_STREAM, 4);
	cr_assert_eq(msg_send(s, &m, 0), 0);
	expect_cancel(&c, 4);
	chan_close(&c);
	nng_close(s);
}

Test(chan, a_second_peer_is_refused_while_the_first_lives)
{
	struct chan l, d1, d2;
	struct msg m;

	cr_assert_eq(chan_listen(&l, url), 0);
	cr_assert_eq(chan_dial(&d1, url), 0);
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&d1, &m), CHAN_UP);
	int fd = raw_connect();
	cr_assert(closed_within(fd), "a second peer was kept");
	close(fd);
	cr_assert_eq(chan_dial(&d2, url), 0); /* keeps trying: every try is refused */
	send_cancel(&d2, 99);
	/* its try is taken up, and closed by the listener unheard: 99 is kept */
	cr_assert_eq(next_of(&d2, &m), CHAN_UP);
	cr_assert_eq(next_of(&d2, &m), CHAN_DOWN, "a second peer was kept");
	send_cancel(&d1, 1);
	expect_cancel(&l, 1);
	send_cancel(&l, 2);
	expect_cancel(&d1, 2);
	/* the first leaves: the second comes in, with what it kept */
	chan_close(&d1);
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	int e = CHAN_EMPTY, e2 = CHAN_EMPTY;
	/* d2's loop attaches and redials: each end's loop turns when its fd says so */
	for (uint64_t end = now_ms() + 5000; e == CHAN_EMPTY && now_ms() < end;) {
		while ((e2 = chan_next(&d2, &m)) != CHAN_EMPTY)
			;
		if ((e = chan_next(&l, &m)) != CHAN_EMPTY)
			break;
		struct pollfd p[2] = {{.fd = l.ch_fd, .events = POLLIN},
				      {.fd = d2.ch_fd, .events = POLLIN}};
		poll(p, 2, 10);
	}
	cr_assert_eq(e, CHAN_UP);
	cr_assert(chan_up(&d2) || next_of(&d2, &m) == CHAN_UP);
	expect_cancel(&l, 99);
	chan_close(&d2);
	chan_close(&l);
}

/* A peer of another uid (nobody, through a socket opened to it) is closed unheard. */
Test(chan, a_peer_of_another_uid_is_refused)
{
	struct chan l;
	struct msg m;
	int st;

	if (geteuid() != 0)
		cr_skip_test("needs root, to connect as another uid");
	cr_assert_eq(chan_listen(&l, url), 0);
	cr_assert_eq(chmod(dir, 0755), 0);
	cr_assert_eq(chmod(url + strlen("ipc://"), 0666), 0);
	pid_t pid = fork();
	if (pid == 0) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", url + strlen("ipc://"));
		if (setgid(65534) || setuid(65534))
			_exit(2);
		/* the refusal may come before the hello is written: EPIPE is it too */
		signal(SIGPIPE, SIG_IGN);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			_exit(3);
		if (write(fd, hello, sizeof(hello)) < 0)
			_exit(errno == EPIPE || errno == ECONNRESET ? 0 : 5);
		_exit(closed_within(fd) ? 0 : 4);
	}
	/* until the other uid's peer has been closed (its child then exits) */
	for (uint64_t end = now_ms() + 10000;;) {
		cr_assert_eq(chan_next(&l, &m), CHAN_EMPTY, "taken from another uid");
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			break;
		cr_assert_eq(w, 0);
		cr_assert_lt(now_ms(), end, "the other uid's peer is still open after 10 s");
		struct pollfd p = {.fd = l.ch_fd, .events = POLLIN};
		poll(&p, 1, 10);
	}
	cr_assert_eq(chan_next(&l, &m), CHAN_EMPTY, "taken from another uid");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the other uid's peer: %d", st);
	chan_close(&l);
}

Test(chan, a_bad_frame_is_dropped_alone_a_bad_length_drops_the_connection)
{
	struct chan l, d;
	struct msg m;
	/* a frame that does not decode; a good one */
	uint8_t junk[] = {1, 0, 0, 0, 0, 0, 0, 0, 3, 0x92, MSG_CANCEL, 0x80};
	uint8_t good[] = {1, 0, 0, 0, 0, 0, 0, 0, 5, 0x92, MSG_CANCEL, 0x81, F_STREAM, 7};
	uint8_t liar[] = {1, 0, 0, 0, 0, 0x10, 0, 0, 0}; /* 1 TiB */

	cr_assert_eq(chan_listen(&l, url), 0);
	int fd = raw_connect();
	write_all(fd, hello, sizeof(hello));
	write_all(fd, junk, sizeof(junk));
	write_all(fd, good, sizeof(good));
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&l, &m), PROTO_EMISSING);
	expect_cancel(&l, 7);
	write_all(fd, liar, sizeof(liar));
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	cr_assert_str_eq(l.ch_why, "frame over the size limit");
	cr_assert(closed_within(fd));
	close(fd);

	/* not our handshake: dropped before any frame */
	fd = raw_connect();
	write_all(fd, "GET / HTTP/1.1\r\n\r\n", 18);
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	cr_assert_str_eq(l.ch_why, "not a sandcell peer (bad handshake)");
	close(fd);

	/* a frame of another type than pair0's */
	fd = raw_connect();
	write_all(fd, hello, sizeof(hello));
	good[0] = 2;
	write_all(fd, good, sizeof(good));
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	cr_assert_str_eq(l.ch_why, "bad frame type");
	close(fd);

	/* and the next peer is served */
	cr_assert_eq(chan_dial(&d, url), 0);
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	send_cancel(&d, 8);
	expect_cancel(&l, 8);
	chan_close(&d);
	chan_close(&l);
}

/* PROTO_MAX_FRAME bytes are a frame (these do not decode: dropped alone); more are not. */
Test(chan, a_frame_at_the_limit_is_taken_one_byte_over_drops_the_connection)
{
	struct chan l;
	struct msg m;
	size_t n = 9 + PROTO_MAX_FRAME;
	uint8_t *f = calloc(1, n);
	uint8_t over[] = {1, 0, 0, 0, 0, 0, 0, 0, 0};
	uint64_t len = PROTO_MAX_FRAME;
	struct writer w = {0};
	pthread_t t;

	f[0] = 1;
	for (int i = 8; i >= 1; i--, len >>= 8)
		f[i] = len & 0xff;
	cr_assert_eq(chan_listen(&l, url), 0);
	w.w_fd = raw_connect();
	write_all(w.w_fd, hello, sizeof(hello));
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	w.w_buf = f;
	w.w_len = n;
	/* in a thread: the socket holds less */
	cr_assert_eq(pthread_create(&t, NULL, writer_run, &w), 0);
	int e = next_of(&l, &m);
	cr_assert_lt(e, 0, "a frame of zeros decodes to nothing: got %d", e);
	pthread_join(t, NULL);
	size_t k;
	uint8_t *f9 = cancel_frame(9, &k);
	write_all(w.w_fd, f9, k);
	expect_cancel(&l, 9);
	len = PROTO_MAX_FRAME + 1;
	for (int i = 8; i >= 1; i--, len >>= 8)
		over[i] = len & 0xff;
	write_all(w.w_fd, over, sizeof(over));
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	cr_assert_str_eq(l.ch_why, "frame over the size limit");
	cr_assert(closed_within(w.w_fd));
	close(w.w_fd);
	chan_close(&l);
	free(f9);
	free(f);
}

/*
 * A peer gone mid-frame: what came whole is delivered, the part is not, and
 * the next peer is served.
 */
Test(chan, a_connection_dropped_mid_frame_delivers_only_whole_frames)
{
	struct chan l, d;
	struct msg m;
	size_t n7, n8, nbig;
	uint8_t *f7 = cancel_frame(7, &n7), *f8 = cancel_frame(8, &n8);
	char *data;
	struct msg big = output_of(100u << 10, &data); /* half of it fits the socket */
	uint8_t *fbig = frame_of(&big, &nbig), got[sizeof(hello)];

	cr_assert_eq(chan_listen(&l, url), 0);
	int fd = raw_connect();
	write_all(fd, hello, sizeof(hello));
	write_all(fd, f7, n7);
	write_all(fd, f8, n8 - 2); /* its last two bytes never come */
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	expect_cancel(&l, 7);
	read_all(fd, got, sizeof(got)); /* unread, it would make the close a reset */
	close(fd);
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	cr_assert_str_eq(l.ch_why, "closed by the peer");

	/* the same in a frame bigger than the receive buffer, and inside a header */
	for (int round = 0; round < 2; round++) {
		fd = raw_connect();
		write_all(fd, hello, sizeof(hello));
		cr_assert_eq(next_of(&l, &m), CHAN_UP);
		write_all(fd, fbig, round ? 5 : nbig / 2);
		taken_unheard(&l, fd, true);
		read_all(fd, got, sizeof(got));
		close(fd);
		cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
		cr_assert_str_eq(l.ch_why, "closed by the peer");
	}

	cr_assert_eq(chan_dial(&d, url), 0);
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	send_cancel(&d, 9);
	expect_cancel(&l, 9);
	chan_close(&d);
	chan_close(&l);
	msg_free(&big);
	free(data);
	free(fbig);
	free(f7);
	free(f8);
}

Test(chan, the_dialer_comes_back_after_the_listener_restarts)
{
	struct chan l, d;
	struct msg m;

	cr_assert_eq(chan_listen(&l, url), 0);
	cr_assert_eq(chan_dial(&d, url), 0);
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	chan_close(&l);
	cr_assert_eq(next_of(&d, &m), CHAN_DOWN);
	send_cancel(&d, 1); /* kept for the next connection */
	unlink(url + strlen("ipc://"));
	/* the dialer's tries fail until its backoff reaches its ceiling (100 ms, chan.c) */
	for (uint64_t end = now_ms() + 5000; backoff_of(&d) < 100 && now_ms() < end;)
		poll(NULL, 0, 5);
	cr_assert_eq(backoff_of(&d), 100, "the backoff stopped at %d ms", (int)backoff_of(&d));
	uint64_t t0 = now_ms();
	cr_assert_eq(chan_listen(&l, url), 0);
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_lt(now_ms() - t0, 1000, "redialed after %llu ms",
	             (unsigned long long)(now_ms() - t0));
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	expect_cancel(&l, 1);
	chan_close(&d);
	chan_close(&l);
}

/* A peer with a bad handshake: the dialer drops it and dials again, its queue kept. */
Test(chan, the_dialer_redials_after_a_bad_handshake_with_its_queue)
{
	struct chan d;
	struct msg m;
	uint8_t got[sizeof(hello)], b[64];
	size_t n5;
	uint8_t *f5 = cancel_frame(5, &n5);

	int lfd = raw_listen();
	cr_assert_eq(chan_dial(&d, url), 0);
	send_cancel(&d, 5);
	int fd = accept(lfd, NULL, NULL);
	write_all(fd, "\0SP\0\0\x11\0\0", 8); /* pair1's */
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	cr_assert_eq(next_of(&d, &m), CHAN_DOWN);
	cr_assert_str_eq(d.ch_why, "not a sandcell peer (bad handshake)");
	cr_assert(closed_within(fd));
	close(fd);
	fd = accept(lfd, NULL, NULL); /* it dials again */
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	write_all(fd, hello, sizeof(hello));
	read_all(fd, got, sizeof(got));
	cr_assert_eq(memcmp(got, hello, sizeof(hello)), 0);
	turn_until_sent(&d, fd); /* the loop takes the handshake: the queue goes */
	read_all(fd, b, n5);
	cr_assert_eq(memcmp(b, f5, n5), 0);
	chan_close(&d);
	close(fd);
	close(lfd);
	free(f5);
}

static void *
flush_and_close(void *arg)
{
	struct chan *l = arg;

	chan_flush(l, 5000);
	chan_close(l);
	return NULL;
}

/* What the proxy sends last (its reply to SHUTDOWN) is written before it closes. */
Test(chan, what_is_sent_before_chan_flush_and_chan_close_arrives)
{
	struct chan l, d;
	struct msg m;
	char *data;
	size_t blen = 4u << 20; /* far more than the socket holds */
	struct msg big = output_of(blen, &data);
	pthread_t t;

	cr_assert_eq(chan_listen(&l, url), 0);
	cr_assert_eq(chan_dial(&d, url), 0);
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	send_cancel(&d, 1);
	expect_cancel(&l, 1); /* the dialer's handshake is in */
	cr_assert_eq(chan_send(&l, &big), 0);
	send_cancel(&l, 2);
	/* the proxy's last steps, while the broker reads */
	cr_assert_eq(pthread_create(&t, NULL, flush_and_close, &l), 0);
	expect_output(&d, data, blen);
	expect_cancel(&d, 2);
	pthread_join(t, NULL);
	cr_assert_eq(next_of(&d, &m), CHAN_DOWN);
	chan_close(&d);
	msg_free(&big);
	free(data);
}
