/*
 * loop.c — the proxy's event loop: one epoll over the kernel's sockets
 * (zmtp.c, each watched by its connection's fd while it has one), the link
 * to the broker (its eventfd), a signalfd, the pipe of the boxes' stdout and
 * stderr (kout.c) and the pidfd of a box forked from the template. Each wake reads iopub before shell (a reply must not
 * overtake its output), then the broker's messages, then ticks the timers.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proxy.h"

/* What the loop's epoll reports, as its data. */
enum { W_IPC, W_SIG, W_BOX, W_KOUT, W_DNS, W_KERNEL };

static struct proxy *px;
static int ep = -1, sigfd = -1;

static void
watch(int op, int fd, int what)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = what};

	if (epoll_ctl(ep, op, fd, &ev) < 0 && op != EPOLL_CTL_DEL)
		fatal("epoll_ctl: %s", strerror(errno));
}

/* The kernel's sockets, each watched by its connection's fd while it has one. */
static struct zwatch {
	const char *zw_name;
	const struct zmtp *zw_z; /* watched: this connection, fd and events */
	unsigned zw_conns, zw_ev;
	int zw_fd;               /* -1: none */
	bool zw_pending;         /* may hold messages: read before sleeping */
} zw[KSOCK_N] = {{"iopub", NULL, 0, 0, -1, false},   {"shell", NULL, 0, 0, -1, false},
		 {"stdin", NULL, 0, 0, -1, false},   {"control", NULL, 0, 0, -1, false},
		 {"heartbeat", NULL, 0, 0, -1, false}};

static void
drain_broker(void)
{
	for (;;) {
		struct msg m;
		int e = ipc_next(&m);
		if (e == CHAN_EMPTY)
			return;
		if (e > 0) {
			if (e == CHAN_DOWN)
				admit_detach_all(); /* every stream is gone with the broker */
			ipc_link_event(e, kernel_dead_reason());
			continue;
		}
		if (e < 0) {
			log_warn("context %s: bad frame from broker dropped: %s", px->px_id,
				 proto_strerror(e));
			continue;
		}
		dispatch_msg(&m);
		msg_free(&m);
	}
}

/*
 * Reads what a kernel socket holds, at most 256 messages a turn; stops if
 * handling closed or replaced a socket. Returns whether it may hold more
 * (the loop comes back without sleeping).
 */
static bool
drain_kernel(enum ksock i)
{
	unsigned gen = kernel_gen();

	for (int n = 0; n < 256 && kernel_sock(i) && kernel_gen() == gen; n++) {
		struct jmsg jm;
		int e = kernel_recv(i, &jm);
		if (e == -EAGAIN)
			return false;
		if (i == KSOCK_IOPUB && e == -E2BIG)
			admit_output_lost();
		if (e)
			continue;
		kernel_on_msg(i, &jm);
		jmsg_free(&jm);
		/*
		 * Hand output on as it fills chunks, the message freed first: a
		 * flood never piles up here, and a big message is held at most
		 * twice (its NDJSON and the chunks made of it).
		 */
		if (i == KSOCK_IOPUB && admit_output_full())
			admit_flush();
	}
	return kernel_sock(i) && kernel_gen() == gen;
}

static void
reap(void)
{
	struct signalfd_siginfo si;
	int status;
	pid_t pid;

	while (read(sigfd, &si, sizeof(si)) == sizeof(si))
		if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
			log_info("context %s: signal %d, stopping", px->px_id, si.ssi_signo);
			dispatch_stop();
		}
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (!kernel_reap(pid, status))
			boxnet_reaped(&px->px_box, pid, status);
}

/*
 * A connection made or lost since the last turn (a start, a restart, a
 * kernel that closed one) changes the fds: every old one out before any new
 * one in, since a new fd may have an old one's number (or the box pidfd's:
 * box_sync puts that in again after the kernel's generation moved).
 */
static void
zwatch_sync(unsigned *gen, bool rest)
{
	bool moved = *gen != kernel_gen();

	for (int i = 0; i < KSOCK_N && !moved; i++) {
		const struct zmtp *z = kernel_sock(i);
		moved = z != zw[i].zw_z || (z && (z->z_conns != zw[i].zw_conns ||
						  zmtp_fd(z) != zw[i].zw_fd));
	}
	if (moved) {
		kernel_gen_bump();
		*gen = kernel_gen();
		for (int i = 0; i < KSOCK_N; i++) {
			if (zw[i].zw_fd >= 0)
				watch(EPOLL_CTL_DEL, zw[i].zw_fd, 0);
			zw[i].zw_fd = -1;
			zw[i].zw_ev = 0;
			zw[i].zw_z = kernel_sock(i);
			zw[i].zw_conns = zw[i].zw_z ? zw[i].zw_z->z_conns : 0;
			zw[i].zw_pending = zw[i].zw_z != NULL;
		}
	}
	for (int i = 0; i < KSOCK_N; i++) {
		const struct zmtp *z = zw[i].zw_z;
		int fd = z ? zmtp_fd(z) : -1;
		unsigned ev = fd >= 0 ? zmtp_events(z) : 0;
		if (rest && i == KSOCK_IOPUB && zmtp_up(z))
			ev &= ~(unsigned)EPOLLIN;
		if (ev == zw[i].zw_ev)
			continue;
		struct epoll_event e = {.events = ev, .data.u32 = W_KERNEL + i};
		if (epoll_ctl(ep, zw[i].zw_fd < 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &e) < 0)
			fatal("epoll_ctl kernel %s: %s", zw[i].zw_name, strerror(errno));
		zw[i].zw_fd = fd;
		zw[i].zw_ev = ev;
	}
}

/*
 * Whether iopub may rest (not wake the loop) for now: a unit's first
 * OUTPUT_HOLD_MS, before its reply, on a kernel whose iopub waits for the
 * proxy rather than drop (px_iopub_waits). What it publishes meanwhile
 * (busy, execute_input, the first output) is held that long anyway, and is
 * read at the loop's next wake for anything (iopub is read first on every
 * wake, so a reply never overtakes its output), at the latest when the hold
 * ends. An `x=1` then wakes the loop at most three times (request, reply,
 * idle; two when the idle is in by the reply) rather than four. Not while
 * an interrupt waits for execute_input. *until: when the hold ends.
 */
static bool
iopub_rest(uint64_t now, uint64_t *until)
{
	*until = admit_hold_until();
	return px->px_iopub_waits && now < *until;
}

/*
 * The pidfd of a box forked from the template, which is not our child (no
 * SIGCHLD): watched while there is one. Never taken out by number: closing
 * it took it out of the epoll, and its number may be a new socket's now. A
 * new kernel (new sockets, a new generation) may have a new pidfd under the
 * old one's number: it goes in again (after zwatch_sync's removals).
 */
static void
box_sync(int *fd, unsigned *gen)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = W_BOX};

	if (px->px_box.bx_pidfd == *fd && kernel_gen() == *gen)
		return;
	*fd = px->px_box.bx_pidfd;
	*gen = kernel_gen();
	if (*fd >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, *fd, &ev) < 0 && errno != EEXIST)
		fatal("epoll_ctl: %s", strerror(errno));
}

/* How long the loop may sleep: the first timer due, 0 when a socket may hold more. */
static long
sleep_ms(uint64_t now, bool rest, uint64_t until)
{
	long wait = admit_wait(now), kw = kernel_state() == KS_STARTING ? 50 : 500;

	if (wait < 0 || wait > kw)
		wait = kw;
	for (int i = 0; i < KSOCK_N; i++) {
		long zt = kernel_sock(i) ? zmtp_wait(kernel_sock(i), now) : -1;
		if (zt >= 0 && zt < wait)
			wait = zt;
	}
	if (rest && (long)(until - now) < wait)
		wait = (long)(until - now);
	return wait;
}

/* What woke the loop: which of the broker, the signals, the box; kernel sockets pending. */
static void
woken(struct epoll_event *evs, int n, bool *ipc, bool *sig, bool *box, bool *out, bool *dns)
{
	for (int i = 0; i < n; i++) {
		uint32_t w = evs[i].data.u32;
		if (w == W_IPC)
			*ipc = true;
		else if (w == W_SIG)
			*sig = true;
		else if (w == W_BOX)
			*box = true;
		else if (w == W_KOUT)
			*out = true;
		else if (w == W_DNS)
			*dns = true;
		else if (w >= W_KERNEL && w < W_KERNEL + KSOCK_N) {
			struct zmtp *z = kernel_sock(w - W_KERNEL);
			if (z && z == zw[w - W_KERNEL].zw_z && (evs[i].events & ~EPOLLIN))
				zmtp_flush(z); /* connected, room to write, or an error */
			zw[w - W_KERNEL].zw_pending = true;
		}
	}
}

/* Runs until the proxy stops (dispatch_stop); sig is the proxy's signalfd. */
void
loop_run(struct proxy *p, int sig)
{
	unsigned gen = kernel_gen() - 1, box_gen = gen;
	int box_fd = -1;

	px = p;
	sigfd = sig;
	if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		fatal("epoll_create1: %s", strerror(errno));
	watch(EPOLL_CTL_ADD, ipc_fd(), W_IPC);
	watch(EPOLL_CTL_ADD, sigfd, W_SIG);
	watch(EPOLL_CTL_ADD, kout_fd(), W_KOUT);
	int dnsfd[6], ndns = boxdns_fds(dnsfd, 6);
	for (int i = 0; i < ndns; i++)
		watch(EPOLL_CTL_ADD, dnsfd[i], W_DNS);
	while (!dispatch_quit()) {
		struct epoll_event evs[8];
		bool ipc = false, sig = false, box = false, out = false, dns = false;
		uint64_t now = now_ms(), until;
		bool rest = iopub_rest(now, &until);
		long wait = sleep_ms(now, rest, until);
		int n;

		zwatch_sync(&gen, rest);
		box_sync(&box_fd, &box_gen);
		for (int i = 0; i < KSOCK_N; i++)
			if (zw[i].zw_pending && kernel_sock(i))
				wait = 0;
		if ((n = epoll_wait(ep, evs, 8, (int)wait)) < 0 && errno != EINTR)
			fatal("epoll_wait: %s", strerror(errno));
		woken(evs, n, &ipc, &sig, &box, &out, &dns);
		if (rest && n > 0)
			zw[KSOCK_IOPUB].zw_pending = true; /* iopub first, whatever woke us */
		if (out)
			kout_drain(now);
		if (dns)
			boxdns_drain();
		if (sig)
			reap();
		if (box)
			kernel_box_ended();
		for (int i = 0; i < KSOCK_N; i++)
			if (zw[i].zw_pending)
				zw[i].zw_pending = kernel_sock(i) && drain_kernel(i);
		if (ipc)
			drain_broker();
		now = now_ms();
		for (int i = 0; i < KSOCK_N; i++)
			if (kernel_sock(i))
				zmtp_tick(kernel_sock(i), now);
		admit_tick(now);
		kernel_tick(now);
		kout_tick(now);
		admit_flush();
		boxfw_tick(&px->px_box, now, kernel_state() != KS_IDLE);
		memtrim_tick(now);
	}
	close(ep);
}
