/*
 * ipc.c — (8) what one broker↔proxy hop costs: a message echoed between two
 * processes, each waiting in poll() the way the broker's and the proxy's
 * event loops do, over nng pair0 on ipc:// (sandcell's transport: nng's
 * notification fds, nonblocking nng_recvmsg/nng_sendmsg) and, for scale, over
 * a plain AF_UNIX SOCK_SEQPACKET pair, and over nng's own stream layer on
 * the same ipc:// (nng_stream: no SP protocol and pipe above the socket; a
 * receive completes into an eventfd the loop polls, a send is written in
 * place). Wall time per round trip and the CPU both processes spend on it,
 * all threads counted.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>

#include "../../proto/proto.h"
#include "bench.h"

#define IPC_WARMUP 500
#define IPC_RUNS 20000
#define IPC_MSG 64 /* about an EXECUTE of x=1 */

struct end {
	nng_socket e_nng;
	int e_rfd;  /* nng's receive notification fd, or the socket */
	int e_fd;   /* SOCK_SEQPACKET socket, or -1 */
	nng_stream *e_stream;       /* nng_stream, or NULL */
	nng_aio *e_rx, *e_tx;       /* its receive (completes into e_rfd) and send */
	struct chan *e_chan;        /* sandcell's link (proto/chan.c), or NULL */
};

/* On nng's thread: a stream receive is done, the loop's eventfd says so. */
static void
stream_rx_cb(void *arg)
{
	uint64_t one = 1;

	if (write(((struct end *)arg)->e_rfd, &one, sizeof(one)) < 0)
		return;
}

static int
stream_rx_start(struct end *e, char *buf)
{
	nng_iov iov = {buf, IPC_MSG};

	nng_aio_set_iov(e->e_rx, 1, &iov);
	nng_stream_recv(e->e_stream, e->e_rx);
	return 0;
}

static int
end_recv(struct end *e, char *buf)
{
	while (e->e_chan) {
		struct msg m;
		int rv = chan_next(e->e_chan, &m);
		if (rv == CHAN_UP)
			continue;
		if (rv == CHAN_EMPTY) {
			struct pollfd p = {e->e_chan->ch_fd, POLLIN, 0};
			if (poll(&p, 1, 10000) <= 0)
				return -1;
			continue;
		}
		if (rv != CHAN_MSG || m.m_data.len != IPC_MSG)
			return -1;
		memcpy(buf, m.m_data.s, IPC_MSG);
		msg_free(&m);
		return 0;
	}
	for (;;) {
		struct pollfd p = {e->e_rfd, POLLIN, 0};
		if (poll(&p, 1, 10000) <= 0)
			return -1;
		if (e->e_fd >= 0)
			return recv(e->e_fd, buf, IPC_MSG, 0) == IPC_MSG ? 0 : -1;
		if (e->e_stream) { /* 64 bytes come whole on a local socket */
			uint64_t v;
			if (read(e->e_rfd, &v, sizeof(v)) < 0 || nng_aio_result(e->e_rx) ||
			    nng_aio_count(e->e_rx) != IPC_MSG)
				return -1;
			return stream_rx_start(e, buf);
		}
		nng_msg *m;
		int rv = nng_recvmsg(e->e_nng, &m, NNG_FLAG_NONBLOCK);
		if (rv == NNG_EAGAIN)
			continue;
		if (rv)
			return -1;
		memcpy(buf, nng_msg_body(m), IPC_MSG);
		nng_msg_free(m);
		return 0;
	}
}

static int
end_send(struct end *e, const char *buf)
{
	if (e->e_chan) { /* an OUTPUT of IPC_MSG bytes: its frame is ~20 bytes more */
		struct msg m;
		int rv;
		msg_init(&m, MSG_OUTPUT);
		msg_set_u64(&m, F_STREAM, 1);
		msg_set_str(&m, F_DATA, buf, IPC_MSG);
		rv = chan_send(e->e_chan, &m);
		msg_free(&m);
		return rv ? -1 : 0;
	}
	if (e->e_fd >= 0)
		return send(e->e_fd, buf, IPC_MSG, 0) == IPC_MSG ? 0 : -1;
	if (e->e_stream) {
		nng_iov iov = {(void *)buf, IPC_MSG};
		nng_aio_set_iov(e->e_tx, 1, &iov);
		nng_stream_send(e->e_stream, e->e_tx);
		nng_aio_wait(e->e_tx); /* written in place when the socket has room */
		return nng_aio_result(e->e_tx) || nng_aio_count(e->e_tx) != IPC_MSG ? -1 : 0;
	}
	nng_msg *m;
	if (nng_msg_alloc(&m, 0) || nng_msg_append(m, buf, IPC_MSG))
		return -1;
	if (nng_sendmsg(e->e_nng, m, NNG_FLAG_NONBLOCK)) {
		nng_msg_free(m);
		return -1;
	}
	return 0;
}

static int
nng_end(struct end *e, const char *url, bool listen)
{
	int fd;

	e->e_fd = -1;
	if (nng_pair0_open(&e->e_nng))
		return -1;
	nng_socket_set_int(e->e_nng, NNG_OPT_SENDBUF, 1024);
	nng_socket_set_int(e->e_nng, NNG_OPT_RECVBUF, 1024);
	/* the dialer retries in the background until the listener is there */
	if ((listen ? nng_listen(e->e_nng, url, NULL, 0)
		    : nng_dial(e->e_nng, url, NULL, NNG_FLAG_NONBLOCK)) ||
	    nng_socket_get_int(e->e_nng, NNG_OPT_RECVFD, &fd))
		return -1;
	e->e_rfd = fd;
	return 0;
}

/* A stream end: accept (listen) or dial one connection; buf gets its receives. */
static int
stream_end(struct end *e, const char *url, bool listen, char *buf)
{
	static nng_stream_listener *l; /* the listener's end lives as long as the bench */
	nng_stream_dialer *d;
	nng_aio *a;
	int rv = -1;

	e->e_fd = -1;
	if ((e->e_rfd = eventfd(0, EFD_CLOEXEC)) < 0 || nng_aio_alloc(&a, NULL, NULL) ||
	    nng_aio_alloc(&e->e_rx, stream_rx_cb, e) || nng_aio_alloc(&e->e_tx, NULL, NULL))
		return -1;
	nng_aio_set_timeout(a, 10000);
	if (listen) {
		if (!nng_stream_listener_alloc(&l, url) && !nng_stream_listener_listen(l)) {
			nng_stream_listener_accept(l, a);
			rv = 0;
		}
	} else {
		for (int i = 0; i < 100; i++) { /* until the listener is there */
			if (nng_stream_dialer_alloc(&d, url))
				break;
			nng_stream_dialer_dial(d, a);
			nng_aio_wait(a);
			if (!nng_aio_result(a)) {
				rv = 0;
				break;
			}
			nng_stream_dialer_free(d);
			usleep(10000);
		}
	}
	if (!rv) {
		nng_aio_wait(a);
		if (nng_aio_result(a) || !(e->e_stream = nng_aio_get_output(a, 0)))
			rv = -1;
	}
	nng_aio_free(a);
	return rv ? -1 : stream_rx_start(e, buf);
}

/*
 * The echoing peer: this program run again as `bench --ipc-echo URL|FD`, so
 * that its nng starts fresh (nng's threads do not survive a fork).
 */
int
ipc_echo_main(const char *where)
{
	struct end e = {0};
	char buf[IPC_MSG];

	if (!strncmp(where, "chan:", 5)) {
		static struct chan ch;
		e.e_fd = -1;
		if (chan_dial(&ch, where + 5))
			return 1;
		e.e_chan = &ch;
	} else if (!strncmp(where, "stream:", 7)) {
		if (stream_end(&e, where + 7, false, buf) < 0)
			return 1;
	} else if (!strncmp(where, "ipc://", 6)) {
		if (nng_end(&e, where, false) < 0)
			return 1;
	} else {
		e.e_fd = e.e_rfd = atoi(where);
	}
	while (end_recv(&e, buf) == 0 && end_send(&e, buf) == 0)
		;
	return 0;
}

enum kind { K_NNG, K_SEQPACKET, K_STREAM, K_CHAN };

static void
measure(const char *label, enum kind kind)
{
	bool use_nng = kind != K_SEQPACKET;
	char url[128], arg[160], buf[IPC_MSG] = {0};
	double v[IPC_RUNS], cpu;
	struct end me = {0};
	struct stats st;
	int sv[2] = {-1, -1}, n = 0;
	pid_t child;

	snprintf(url, sizeof(url), "ipc:///tmp/sandcell-bench-ipc.%d", (int)getpid());
	if (!use_nng && socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0) {
		table_note("ipc: socketpair: %s", strerror(errno));
		return;
	}
	if (kind == K_NNG && nng_end(&me, url, true) < 0) {
		table_note("ipc: nng listen %s failed", url);
		return;
	}
	snprintf(arg, sizeof(arg), kind == K_STREAM ? "stream:%s" : kind == K_CHAN ? "chan:%s" : "%s",
		 url);
	static struct chan ch;
	if (kind == K_CHAN) {
		if (chan_listen(&ch, url)) {
			table_note("ipc: chan listen %s failed", url);
			return;
		}
		me = (struct end){.e_fd = -1, .e_chan = &ch};
	}
	if (kind == K_SEQPACKET)
		snprintf(arg, sizeof(arg), "%d", sv[1]);
	if ((child = fork()) == 0) {
		if (!use_nng)
			close(sv[0]);
		execl("/proc/self/exe", "bench", "--ipc-echo", arg, (char *)NULL);
		_exit(127);
	}
	if (kind == K_STREAM && stream_end(&me, url, true, buf) < 0) {
		table_note("ipc: nng stream over %s failed", url);
		goto out;
	}
	if (kind == K_CHAN) { /* the listener sends only to an attached peer */
		struct msg m;
		int rv = CHAN_EMPTY;
		for (int i = 0; i < 1000 && rv != CHAN_UP; i++) {
			struct pollfd p = {ch.ch_fd, POLLIN, 0};
			poll(&p, 1, 10);
			rv = chan_next(&ch, &m);
		}
		if (rv != CHAN_UP) {
			table_note("ipc: no peer on %s", url);
			goto out;
		}
	}
	if (!use_nng) {
		close(sv[1]);
		me = (struct end){.e_rfd = sv[0], .e_fd = sv[0]};
	}
	for (int i = 0; i < IPC_WARMUP; i++)
		if (end_send(&me, buf) < 0 || end_recv(&me, buf) < 0)
			goto out;
	cpu = -(self_cpu_ms() + cpu_ms(child));
	for (int i = 0; i < IPC_RUNS; i++) {
		double t0 = ms_now();
		if (end_send(&me, buf) < 0 || end_recv(&me, buf) < 0)
			break;
		v[n++] = ms_since(t0) * 1000;
	}
	cpu += self_cpu_ms() + cpu_ms(child);
	stats_of(v, n, &st);
	table_add("8 ipc", fmt("%s, round trip of %d bytes (%d runs)", label, IPC_MSG, n),
	          fmt("%.0f us", st.st_p50), fmt("%.0f us", st.st_p99), NULL, NULL);
	table_detail("CPU/round trip, both processes: %.0f us", cpu * 1000 / (n ? n : 1));
out:
	if (kind == K_NNG)
		nng_close(me.e_nng);
	else if (kind == K_STREAM && me.e_stream)
		nng_stream_close(me.e_stream);
	else if (kind == K_SEQPACKET)
		close(sv[0]);
	else if (kind == K_CHAN)
		chan_close(&ch);
	kill(child, SIGTERM);
	waitpid(child, NULL, 0);
	if (use_nng)
		unlink(url + strlen("ipc://"));
}

void
ipc_bench(void)
{
	progress("ipc: %d echoes over nng pair0 (ipc://), a SOCK_SEQPACKET pair and an "
	         "nng_stream (ipc://)",
	         IPC_RUNS);
	measure("nng pair0 over ipc://", K_NNG);
	measure("AF_UNIX SOCK_SEQPACKET", K_SEQPACKET);
	measure("nng_stream over ipc://", K_STREAM);
	measure("sandcell's link (proto/chan.c: nng_stream, framed)", K_CHAN);
}
