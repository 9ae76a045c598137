/*
 * chan_test.c — the broker<->proxy link (proto/chan.c): messages cross it
 * whole and in order both ways, big ones too, through a receive paused by a
 * backlog; it speaks a pair0 socket's wire format either way (peers of an
 * older version); the listener takes one peer at a time; a bad frame is
 * dropped alone, a bad length or handshake drops only that connection, and
 * the dialer comes back after the listener's restart. Each end receives on
 * its loop's thread when it can tell its socket apart, and on nng's callbacks
 * when it cannot; the same messages cross either way.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>

#include "../../proto/proto.h"

static char dir[] = "/tmp/chan-test.XXXXXX", url[96];

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
	for (int i = 0; i < 500; i++) {
		int e = chan_next(ch, m);
		if (e != CHAN_EMPTY)
			return e;
		struct pollfd p = {.fd = ch->ch_fd, .events = POLLIN};
		poll(&p, 1, 10);
	}
	return CHAN_EMPTY;
}

/* Whether ch's connection goes direct within 2 s (nng's thread hands it over). */
static bool
direct_within(struct chan *ch)
{
	for (int i = 0; i < 200; i++) {
		if (chan_direct(ch))
			return true;
		usleep(10000);
	}
	return false;
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

static void
messages_both_ways(bool direct)
{
	struct chan l, d;
	struct msg m;
	const int n = MRECV_MAX + 700; /* past the backlog that pauses receiving */

	/* the dialer first: it keeps what it sends until the listener is there */
	cr_assert_eq(chan_dial(&d, url), 0);
	send_cancel(&d, 0);
	usleep(30000);
	cr_assert_eq(chan_listen(&l, url), 0);
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	expect_cancel(&l, 0);
	cr_assert_eq(direct_within(&l), direct); /* once the handshake is in */
	for (int i = 1; i < n; i++)
		send_cancel(&d, i);
	/* a frame bigger than the receive buffer, between small ones */
	struct msg big;
	size_t blen = 3u << 20;
	char *data = malloc(blen);
	for (size_t i = 0; i < blen; i++)
		data[i] = 'a' + i % 26;
	msg_init(&big, MSG_OUTPUT);
	msg_set_u64(&big, F_STREAM, 5);
	msg_set_str(&big, F_DATA, data, blen);
	cr_assert_eq(chan_send(&l, &big), 0);
	send_cancel(&l, 6);
	msg_free(&big);
	usleep(100000); /* the backlog builds up: the receive pauses */
	for (int i = 1; i < n; i++)
		expect_cancel(&l, i);
	cr_assert_eq(next_of(&d, &m), CHAN_MSG);
	cr_assert_eq(m.m_type, MSG_OUTPUT);
	cr_assert_eq(m.m_data.len, blen);
	cr_assert_eq(memcmp(m.m_data.s, data, blen), 0);
	msg_free(&m);
	expect_cancel(&d, 6);
	cr_assert_eq(direct_within(&d), direct);
	expect_idle(&l);
	expect_idle(&d);
	free(data);
	chan_close(&d);
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	chan_close(&l);
}

Test(chan, messages_arrive_whole_and_in_order_both_ways)
{
	messages_both_ways(true);
}

Test(chan, messages_arrive_whole_and_in_order_on_nngs_callbacks_too)
{
	chan_callbacks_only = true;
	messages_both_ways(false);
}

/*
 * The dialer's socket has a twin: another live connection of this process to
 * the same path and peer (here the test's own listener takes both). It cannot
 * tell which is nng's, so it receives on nng's callbacks, and nothing is lost.
 */
Test(chan, a_socket_that_cannot_be_told_apart_is_received_on_callbacks)
{
	uint8_t hello[] = {0, 'S', 'P', 0, 0, 0x10, 0, 0};
	uint8_t frame[] = {1, 0, 0, 0, 0, 0, 0, 0, 5, 0x92, MSG_CANCEL, 0x81, F_STREAM, 7};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	uint8_t got[sizeof(hello) + sizeof(frame)];
	struct chan d;
	struct msg m;
	size_t n = 0;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", url + strlen("ipc://"));
	int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(lfd, 4), 0);
	int twin = raw_connect(), twin_peer = accept(lfd, NULL, NULL);
	cr_assert_eq(chan_dial(&d, url), 0);
	send_cancel(&d, 6);
	int fd = accept(lfd, NULL, NULL);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, hello, sizeof(hello)), (ssize_t)sizeof(hello));
	cr_assert_eq(write(fd, frame, sizeof(frame)), (ssize_t)sizeof(frame));
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	expect_cancel(&d, 7);
	while (n < sizeof(got)) { /* our handshake, then what was queued */
		struct pollfd p = {.fd = fd, .events = POLLIN};
		cr_assert_eq(poll(&p, 1, 5000), 1, "the dialer's frame never came");
		ssize_t k = read(fd, got + n, sizeof(got) - n);
		cr_assert_gt(k, 0);
		n += (size_t)k;
	}
	cr_assert_eq(memcmp(got, hello, sizeof(hello)), 0);
	cr_assert_eq(got[sizeof(hello) + 11], 0x81); /* one field: the stream, 6 */
	cr_assert_eq(got[sizeof(hello) + 13], 6);
	cr_assert_not(chan_direct(&d));
	chan_close(&d);
	close(fd);
	close(twin);
	close(twin_peer);
	close(lfd);
}

/* A listener l and a dialer d linked, l receiving on its loop, stream 0 taken. */
static void
linked_direct(struct chan *l, struct chan *d)
{
	struct msg m;

	cr_assert_eq(chan_listen(l, url), 0);
	cr_assert_eq(chan_dial(d, url), 0);
	send_cancel(d, 0);
	cr_assert_eq(next_of(l, &m), CHAN_UP);
	cr_assert_eq(next_of(d, &m), CHAN_UP);
	expect_cancel(l, 0);
	cr_assert(direct_within(l));
}

/*
 * Received on the loop: a read that got less than it asked for emptied the
 * socket, so the next call reads nothing (the loop's fd says when more
 * came); the call after it reads what came meanwhile: nothing is lost.
 */
Test(chan, after_a_direct_read_that_emptied_the_socket_the_next_call_reads_nothing)
{
	struct chan l, d;
	struct msg m;

	linked_direct(&l, &d);
	send_cancel(&d, 1);
	expect_cancel(&l, 1); /* read in place, a short read */
	send_cancel(&d, 2);
	struct pollfd p = {.fd = l.ch_fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 5000), 1, "the next message is in the socket");
	cr_assert_eq(chan_next(&l, &m), CHAN_EMPTY,
	             "no read right after one that emptied it");
	cr_assert_eq(chan_next(&l, &m), CHAN_MSG, "the next call reads it");
	cr_assert_eq(m.m_type, MSG_CANCEL);
	cr_assert_eq(m.m_stream, 2);
	msg_free(&m);
	expect_idle(&l);
	chan_close(&d);
	chan_close(&l);
}

/*
 * One read brings many messages; a loop that takes only part of them (the
 * broker's turn for one context) leaves the rest queued with the socket
 * empty, so nothing would wake it for them: chan_wake does.
 */
Test(chan, a_loop_that_stops_taking_is_woken_for_the_rest_by_chan_wake)
{
	struct chan l, d;
	const int n = 100; /* few enough for the socket to hold them all unread */

	linked_direct(&l, &d);
	for (int i = 1; i <= n; i++)
		send_cancel(&d, i);
	chan_flush(&d, 5000);
	struct pollfd p = {.fd = l.ch_fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 5000), 1);
	for (int i = 1; i <= 10; i++) /* one read took them all; ten are taken */
		expect_cancel(&l, i);
	cr_assert_eq(poll(&p, 1, 0), 0, "the rest wait, and the socket is empty");
	chan_wake(&l);
	cr_assert_eq(poll(&p, 1, 0), 1, "chan_wake makes the loop come back");
	for (int i = 11; i <= n; i++)
		expect_cancel(&l, i);
	expect_idle(&l);
	chan_close(&d);
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
	usleep(200000);
	send_cancel(&d1, 1);
	expect_cancel(&l, 1);
	send_cancel(&l, 2);
	expect_cancel(&d1, 2);
	/* the first leaves: the second comes in, with what it kept */
	chan_close(&d1);
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	int e = CHAN_EMPTY, e2 = CHAN_EMPTY;
	for (int i = 0; i < 500 && e == CHAN_EMPTY; i++) { /* d2's loop attaches and redials */
		while ((e2 = chan_next(&d2, &m)) != CHAN_EMPTY)
			;
		e = chan_next(&l, &m);
		usleep(10000);
	}
	cr_assert_eq(e, CHAN_UP);
	cr_assert(chan_up(&d2) || next_of(&d2, &m) == CHAN_UP);
	expect_cancel(&l, 99);
	chan_close(&d2);
	chan_close(&l);
}

Test(chan, a_bad_frame_is_dropped_alone_a_bad_length_drops_the_connection)
{
	struct chan l, d;
	struct msg m;
	/* handshake; a frame that does not decode; a good one */
	uint8_t head[] = {0, 'S', 'P', 0, 0, 0x10, 0, 0};
	uint8_t junk[] = {1, 0, 0, 0, 0, 0, 0, 0, 3, 0x92, MSG_CANCEL, 0x80};
	uint8_t good[] = {1, 0, 0, 0, 0, 0, 0, 0, 5, 0x92, MSG_CANCEL, 0x81, F_STREAM, 7};
	uint8_t liar[] = {1, 0, 0, 0, 0, 0x10, 0, 0, 0}; /* 1 TiB */

	cr_assert_eq(chan_listen(&l, url), 0);
	int fd = raw_connect();
	cr_assert_eq(write(fd, head, sizeof(head)), (ssize_t)sizeof(head));
	cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	cr_assert_eq(write(fd, good, sizeof(good)), (ssize_t)sizeof(good));
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&l, &m), PROTO_EMISSING);
	expect_cancel(&l, 7);
	cr_assert_eq(write(fd, liar, sizeof(liar)), (ssize_t)sizeof(liar));
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	cr_assert_str_eq(l.ch_why, "frame over the size limit");
	cr_assert(closed_within(fd));
	close(fd);

	/* not our handshake: dropped before any frame */
	fd = raw_connect();
	cr_assert_eq(write(fd, "GET / HTTP/1.1\r\n\r\n", 18), 18);
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&l, &m), CHAN_DOWN);
	cr_assert_str_eq(l.ch_why, "not a sandcell peer (bad handshake)");
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
	cr_assert_eq(chan_listen(&l, url), 0);
	cr_assert_eq(next_of(&l, &m), CHAN_UP);
	cr_assert_eq(next_of(&d, &m), CHAN_UP);
	expect_cancel(&l, 1);
	chan_close(&d);
	chan_close(&l);
}
