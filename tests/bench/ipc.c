/*
 * ipc.c — (8) what one broker↔proxy hop costs: a message echoed between two
 * processes, each waiting in poll() the way the broker's and the proxy's
 * event loops do, over nng pair0 on ipc:// (sandcell's transport: nng's
 * notification fds, nonblocking nng_recvmsg/nng_sendmsg) and, for scale, over
 * a plain AF_UNIX SOCK_SEQPACKET pair. Wall time per round trip and the CPU
 * both processes spend on it, all threads counted.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>

#include "bench.h"

#define IPC_WARMUP 500
#define IPC_RUNS 20000
#define IPC_MSG 64 /* about an EXECUTE of x=1 */

struct end {
	nng_socket e_nng;
	int e_rfd;  /* nng's receive notification fd, or the socket */
	int e_fd;   /* SOCK_SEQPACKET socket, or -1 */
};

static int
end_recv(struct end *e, char *buf)
{
	for (;;) {
		struct pollfd p = {e->e_rfd, POLLIN, 0};
		if (poll(&p, 1, 10000) <= 0)
			return -1;
		if (e->e_fd >= 0)
			return recv(e->e_fd, buf, IPC_MSG, 0) == IPC_MSG ? 0 : -1;
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
	if (e->e_fd >= 0)
		return send(e->e_fd, buf, IPC_MSG, 0) == IPC_MSG ? 0 : -1;
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

/*
 * The echoing peer: this program run again as `bench --ipc-echo URL|FD`, so
 * that its nng starts fresh (nng's threads do not survive a fork).
 */
int
ipc_echo_main(const char *where)
{
	struct end e = {0};
	char buf[IPC_MSG];

	if (!strncmp(where, "ipc://", 6)) {
		if (nng_end(&e, where, false) < 0)
			return 1;
	} else {
		e.e_fd = e.e_rfd = atoi(where);
	}
	while (end_recv(&e, buf) == 0 && end_send(&e, buf) == 0)
		;
	return 0;
}

static void
measure(const char *label, bool use_nng)
{
	char url[128], buf[IPC_MSG] = {0};
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
	if (use_nng && nng_end(&me, url, true) < 0) {
		table_note("ipc: nng listen %s failed", url);
		return;
	}
	if ((child = fork()) == 0) {
		char fd[16];
		snprintf(fd, sizeof(fd), "%d", sv[1]);
		if (!use_nng)
			close(sv[0]);
		execl("/proc/self/exe", "bench", "--ipc-echo", use_nng ? url : fd, (char *)NULL);
		_exit(127);
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
	if (use_nng)
		nng_close(me.e_nng);
	else
		close(sv[0]);
	kill(child, SIGTERM);
	waitpid(child, NULL, 0);
	if (use_nng)
		unlink(url + strlen("ipc://"));
}

void
ipc_bench(void)
{
	progress("ipc: %d echoes over nng pair0 (ipc://) and over a SOCK_SEQPACKET pair",
	         IPC_RUNS);
	measure("nng pair0 over ipc://", true);
	measure("AF_UNIX SOCK_SEQPACKET", false);
}
