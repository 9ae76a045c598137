/*
 * envd.c — a sandcell-proxy whose spec names envd's agent: its box runs it
 * (envd/agent.c) instead of a kernel (docs/ENVD.md). The box is the one a
 * context's kernel gets (sandbox.c: the contexts' uid, view, limits and
 * network); the agent connects to an abstract socket of the proxy's network
 * namespace, which only the box shares, and the proxy relays the broker's
 * MSG_ENVD (and CANCEL) to it and its OK / FAIL / OUTPUT back, never
 * waiting on it. What the agent says is a tenant's word: the decoder checks
 * each frame, which must answer a request it was sent or belong to a stream
 * it was given, and the broker checks the rest.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>

#include "proxy.h"

#define ENVD_CONNECT_MS 10000

static struct {
	struct proxy *px;
	struct kproc proc;
	int fd;             /* the agent's connection (non-blocking), or -1 */
	int ep;             /* the loop's epoll */
	struct buf in, out; /* bytes from the agent not yet a whole frame; bytes for it */
	enum kstate state;
} e = {.fd = -1, .ep = -1, .state = KS_STARTING};

static void
status(struct msg *m)
{
	msg_set_u64(m, F_STATE, e.state);
	msg_set_u64(m, F_KPID,
	            (uint64_t)(e.proc.kp_shown ? e.proc.kp_shown : e.proc.kp_pid));
}

/*
 * The agent's environment, which its commands inherit: a context's (HOME,
 * the tenant's package places, the global env), never the proxy's own.
 */
static char **
agent_env(const struct proxy *px)
{
	char **pk = packages_env(BOX_HOME, NULL), **v;
	size_t n = 0, k = 0;

	while (pk[n])
		n++;
	v = xcalloc(n + px->px_ngenv + 4, sizeof(*v));
	v[k++] = xstrdup("HOME=" BOX_HOME);
	v[k++] = xstrdup("USER=user");
	v[k++] = xstrdup("LANG=C.UTF-8");
	for (size_t i = 0; i < n; i++)
		v[k++] = pk[i];
	free(pk);
	for (size_t i = 0; i < px->px_ngenv; i++)
		v[k++] =
		    xasprintf("%s=%s", px->px_genv[i].e_key.s, px->px_genv[i].e_val.s);
	return v;
}

/* The agent, started in its box: 0 with e.fd its connection, or -errno. */
static int
envd_spawn(struct proxy *px)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	unsigned char rnd[16];
	char name[64], *argv[3], **envp;
	struct ucred uc;
	socklen_t len = sizeof(uc);
	int rc;

	randombytes_buf(rnd, sizeof(rnd));
	memcpy(name, "sandcell-envd-", 14);
	sodium_bin2hex(name + 14, sizeof(name) - 14, rnd, sizeof(rnd));
	memcpy(sa.sun_path + 1, name, strlen(name));
	argv[0] = px->px_envd;
	argv[1] = name;
	argv[2] = NULL;
	envp = agent_env(px);
	rc = limits_prepare(&px->px_box);
	if (rc == 0)
		rc = sandbox_spawn(&px->px_box, BOX_HOME, px->px_envd, argv, envp,
		                   &e.proc);
	for (size_t i = 0; envp[i]; i++)
		free(envp[i]);
	free(envp);
	if (rc < 0)
		return rc;
	/* the agent listens, we connect (Landlock's scoping lets a box's process
	 * take a connection from outside, never make one out): until it does */
	for (int waited = 0;; waited += 10) {
		if ((e.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
			return -errno;
		if (connect(e.fd, (struct sockaddr *)&sa,
		            offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name)) ==
		    0)
			break;
		close(e.fd);
		e.fd = -1;
		if (waited >= ENVD_CONNECT_MS)
			return -ETIMEDOUT;
		poll(NULL, 0, 10);
	}
	/* the box's own uid (in a user namespace, ours) */
	uid_t want = px->px_box.bx_userns ? geteuid() : px->px_box.bx_uid;
	if (getsockopt(e.fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0 || uc.uid != want) {
		log_err("context %s: the envd agent's connection is not the box's uid",
		        px->px_id);
		close(e.fd);
		e.fd = -1;
		return -EPERM;
	}
	return 0;
}

/* Ids the agent may answer: requests sent and not answered, streams not ended. */
struct idset {
	uint64_t *is_v;
	size_t is_n, is_cap;
};

static struct idset pending, streams;

static void
idset_add(struct idset *set, uint64_t id)
{
	if (set->is_n == set->is_cap) {
		set->is_cap = set->is_cap ? 2 * set->is_cap : 16;
		set->is_v = xrealloc(set->is_v, set->is_cap * sizeof(*set->is_v));
	}
	set->is_v[set->is_n++] = id;
}

/* Whether id was in set; it is no longer. */
static bool
idset_take(struct idset *set, uint64_t id)
{
	for (size_t i = 0; i < set->is_n; i++)
		if (set->is_v[i] == id) {
			set->is_v[i] = set->is_v[--set->is_n];
			return true;
		}
	return false;
}

static bool
idset_has(const struct idset *set, uint64_t id)
{
	for (size_t i = 0; i < set->is_n; i++)
		if (set->is_v[i] == id)
			return true;
	return false;
}

/* The agent is gone or broke the protocol: what waits on it fails; the proxy ends. */
static void
agent_lost(const char *why)
{
	log_err("context %s: the envd agent: %s", e.px->px_id, why);
	for (size_t i = 0; i < pending.is_n; i++)
		ipc_reply(MSG_FAIL, pending.is_v[i], "the envd agent failed");
	pending.is_n = 0;
	e.state = KS_DEAD;
	if (e.fd >= 0)
		close(e.fd);
	e.fd = -1;
	buf_free(&e.in);
	buf_free(&e.out);
}

/* What waits for the agent, written as far as its socket takes it. */
static void
agent_flush(void)
{
	while (e.fd >= 0 && buf_pending(&e.out)) {
		ssize_t w = write(e.fd, buf_head(&e.out), buf_pending(&e.out));
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;
		if (w <= 0) {
			agent_lost(w < 0 ? strerror(errno) : "closed");
			return;
		}
		buf_consume(&e.out, (size_t)w);
	}
	struct epoll_event ev = {.events = EPOLLIN | (buf_pending(&e.out) ? EPOLLOUT : 0),
	                         .data.fd = e.fd};
	if (e.fd >= 0)
		epoll_ctl(e.ep, EPOLL_CTL_MOD, e.fd, &ev);
}

/* A request (or a CANCEL) for the agent: queued, never waited for. */
static void
envd_relay(struct msg *m)
{
	if (e.fd < 0) {
		if (m->m_type == MSG_ENVD)
			ipc_reply(MSG_FAIL, m->m_req, "the envd agent is not running");
		return;
	}
	/* a stream's request is answered by its events, others by OK or FAIL */
	bool stream = m->m_type == MSG_ENVD && (m->m_has & FB(F_STREAM));
	/* a transfer's later steps (file.c's more, wdata, wend) open no stream */
	const char *op = m->m_text.s ? m->m_text.s : "";
	bool opens = m->m_type == MSG_ENVD &&
	             !(stream && (!strcmp(op, "more") || !strcmp(op, "wdata") ||
	                          !strcmp(op, "wend")));
	if (opens)
		idset_add(stream ? &streams : &pending, stream ? m->m_stream : m->m_req);
	if (pipe_frame_out(m, &e.out) < 0 && opens) {
		idset_take(stream ? &streams : &pending, stream ? m->m_stream : m->m_req);
		if (!stream)
			ipc_reply(MSG_FAIL, m->m_req, "the request does not encode");
	}
	agent_flush();
}

/*
 * What the agent said: each frame must answer a request it was sent (OK,
 * FAIL) or belong to a stream it was given (OUTPUT); anything else ends it.
 */
static void
agent_read(void)
{
	char chunk[64 << 10];
	ssize_t r;
	struct msg m;
	int rc;

	while ((r = read(e.fd, chunk, sizeof(chunk))) > 0)
		buf_append(&e.in, chunk, (size_t)r);
	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
		agent_lost(r == 0 ? "closed" : strerror(errno));
		return;
	}
	while ((rc = pipe_frame_in(&e.in, &m)) == 0) {
		bool ok = false;
		if (m.m_type == MSG_OK || m.m_type == MSG_FAIL)
			ok = idset_take(&pending, m.m_req);
		else if (m.m_type == MSG_OUTPUT && idset_has(&streams, m.m_stream)) {
			ok = true;
			if (m.m_final)
				idset_take(&streams, m.m_stream);
		}
		if (ok)
			ipc_send(&m);
		msg_free(&m);
		if (!ok) {
			agent_lost("a frame that answers nothing it was asked");
			return;
		}
	}
	if (rc != -EAGAIN)
		agent_lost(strerror(-rc));
}

/* The broker's messages; false once it asked us to stop. */
static bool
envd_from_broker(void)
{
	for (;;) {
		struct msg m;
		int ev = ipc_next(&m);
		if (ev == CHAN_EMPTY)
			return true;
		if (ev == CHAN_UP || ev == CHAN_DOWN) {
			ipc_link_event(ev, e.state == KS_DEAD
			                       ? "the envd agent is not running"
			                       : NULL);
			continue;
		}
		if (ev < 0)
			continue;
		bool stop = m.m_type == MSG_SHUTDOWN;
		if (m.m_type == MSG_ENVD || m.m_type == MSG_CANCEL)
			envd_relay(&m);
		else if (stop)
			ipc_reply(MSG_OK, m.m_req, NULL);
		else if (m.m_has & FB(F_REQ))
			ipc_reply(MSG_FAIL, m.m_req, "not an envd request");
		msg_free(&m);
		if (stop)
			return false;
	}
}

/* The agent's box ended (its init reaped): the proxy ends, and the broker starts another.
 */
static bool
envd_reap(void)
{
	int st;
	pid_t pid;
	bool gone = false;

	while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
		if (pid == e.proc.kp_pid) {
			st = sandbox_status(&e.px->px_box, st, e.proc.kp_shown);
			log_warn("context %s: the envd agent ended (status 0x%x)",
			         e.px->px_id, st);
			sandbox_reaped(&e.px->px_box);
			e.proc.kp_pid = 0;
			gone = true;
		}
	return !gone;
}

/* The proxy's life as envd's, after its box was made (main.c's start). */
void
envd_run(struct proxy *px, int sigfd)
{
	struct epoll_event ev = {.events = EPOLLIN}, got[4];
	int rc;
	bool run = true;

	e.px = px;
	e.ep = epoll_create1(EPOLL_CLOEXEC);
	/* not adopted by a next broker (no state file): it ends with ours */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	ipc_listen(px, status);
	if ((rc = envd_spawn(px)) < 0) {
		log_err("context %s: the envd agent did not start: %s", px->px_id,
		        strerror(-rc));
		e.state = KS_DEAD;
	} else {
		e.state = KS_IDLE;
		log_info("context %s: envd agent started, pid %d", px->px_id,
		         (int)(e.proc.kp_shown ? e.proc.kp_shown : e.proc.kp_pid));
		fcntl(e.fd, F_SETFL, fcntl(e.fd, F_GETFL) | O_NONBLOCK);
		ev.data.fd = e.fd;
		epoll_ctl(e.ep, EPOLL_CTL_ADD, e.fd, &ev);
	}
	ev.events = EPOLLIN;
	ev.data.fd = ipc_fd();
	epoll_ctl(e.ep, EPOLL_CTL_ADD, ipc_fd(), &ev);
	ev.data.fd = sigfd;
	epoll_ctl(e.ep, EPOLL_CTL_ADD, sigfd, &ev);
	int dnsfd[6], ndns = boxdns_fds(dnsfd, 6); /* a loopback resolver's relay */
	for (int i = 0; i < ndns; i++) {
		ev.data.fd = dnsfd[i];
		epoll_ctl(e.ep, EPOLL_CTL_ADD, dnsfd[i], &ev);
	}
	while (run) {
		int n = epoll_wait(e.ep, got, 4, -1);
		for (int i = 0; i < n && run; i++) {
			int fd = got[i].data.fd;
			if (fd == sigfd) {
				struct signalfd_siginfo si;
				while (read(sigfd, &si, sizeof(si)) == sizeof(si))
					if (si.ssi_signo == SIGTERM ||
					    si.ssi_signo == SIGINT)
						run = false;
				if (run && e.proc.kp_pid)
					run = envd_reap();
			} else if (fd == ipc_fd()) {
				run = envd_from_broker();
			} else if (fd != e.fd) {
				boxdns_drain();
			} else {
				if (got[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
					agent_read();
				if (e.fd >= 0 && (got[i].events & EPOLLOUT))
					agent_flush();
			}
		}
	}
	if (e.fd >= 0)
		close(e.fd);
	if (e.proc.kp_pid) {
		kill(e.proc.kp_pid, SIGKILL);
		waitpid(e.proc.kp_pid, NULL, 0);
		sandbox_reaped(&px->px_box);
	}
	close(e.ep);
}
