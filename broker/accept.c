/*
 * accept.c — the HTTP listening socket. A new connection waits here until its
 * first request's head has come and is then handed to libmicrohttpd; bytes
 * that cannot start a request line (binary, TLS, a lone word) get a 400 at
 * once and the connection is closed, where MHD would close without a word or
 * wait for the header timeout, and so does a head whose framing is bad
 * (frame_head), which MHD would misread. One from code in a context
 * (peer_is_context) gets a 403 instead. A connection handed over keeps
 * its accept time until MHD reports it started (accept_since), whenever MHD
 * does: its header timeout runs from the accept.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"

#define CONTEXT_PENDING_MAX 32 /* connections from contexts waiting for their 403 */

struct pending {
	TAILQ_ENTRY(pending) pd_link;
	int pd_fd;
	struct sockaddr_storage pd_addr;
	socklen_t pd_addrlen;
	uint64_t pd_since;
	bool pd_context; /* from code in a context: answered 403 (peer_is_context) */
	struct evsrc pd_ev;
};

/* Accepted, request line not yet seen. */
static struct pendq pending = TAILQ_HEAD_INITIALIZER(pending);
static unsigned npending;
static unsigned nconns;        /* connections MHD has (accept_conn_started) */
static struct MHD_Daemon *mhd; /* which takes them (accept_hand_to) */
static unsigned npending_ctx; /* of them, from code in a context */
/* Handed to MHD, not yet reported started (on_connection): newest last. */
static struct pendq accept_handed = TAILQ_HEAD_INITIALIZER(accept_handed);
static int listen_fd = -1; /* ours: MHD gets connections from here */
static int envd_fd = -1;   /* --envd-listen's: the same, for envd.c's routes */
static unsigned short envd_port; /* its port, which tells its connections */
static struct evsrc ev_listen, ev_envd;
static const char *address; /* where listen_fd listens (accept_address) */

static void accept_ready(void *arg, uint32_t events);
static void accept_sniff(void *arg, uint32_t events);

/*
 * The connections held, for the connection limit: those MHD has (http.c
 * tells each start and end) and those waiting for their request line.
 */
unsigned
accept_conns(void)
{
	return nconns + npending;
}

void
accept_conn_started(void)
{
	nconns++;
}

void
accept_conn_ended(void)
{
	nconns--;
}

/* Where connections go once their request line is in: MHD (http.c, at start). */
void
accept_hand_to(struct MHD_Daemon *d)
{
	mhd = d;
}

static void
accept_watch(int fd)
{
	listen_fd = fd;
	ev_listen = (struct evsrc){accept_ready, NULL};
	server_watch(fd, EPOLLIN, &ev_listen);
}

/*
 * The listening socket systemd passed (sandcell.socket), or -1: systemd holds
 * the port while the broker restarts, so code left running in a context
 * (--keep-contexts) cannot bind it in between and answer our clients. The
 * protocol is sd_listen_fds(3)'s: LISTEN_PID is ours, LISTEN_FDS counts the
 * descriptors from 3. --listen then only names the address in the log, which
 * says the socket's own.
 */
static int
inherited_socket(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	bool ours = pid && fds && strtol(pid, NULL, 10) == getpid();
	bool one = ours && !strcmp(fds, "1");
	int type = 0, listening = 0;
	socklen_t len = sizeof(int);
	struct sockaddr_storage a;
	socklen_t alen = sizeof(a);
	char host[NI_MAXHOST], port[NI_MAXSERV];

	if (!ours)
		return -1;
	unsetenv("LISTEN_PID"); /* not for the proxies, nor their kernels */
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (!one)
		fatal("systemd passed several sockets (LISTEN_FDS); sandcell.socket has one");
	if (getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM ||
	    getsockopt(3, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 || !listening ||
	    getsockname(3, (struct sockaddr *)&a, &alen) < 0 ||
	    getnameinfo((struct sockaddr *)&a, alen, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV))
		fatal("the socket systemd passed (fd 3) is not a listening TCP socket");
	if (fcntl(3, F_SETFD, FD_CLOEXEC) < 0 ||
	    fcntl(3, F_SETFL, fcntl(3, F_GETFL) | O_NONBLOCK) < 0)
		fatal("the socket systemd passed: fcntl: %s", strerror(errno));
	address =
	    a.ss_family == AF_INET6 ? xasprintf("[%s]:%s", host, port) : xasprintf("%s:%s", host, port);
	log_info("listening on the socket systemd passed (%s)", address);
	return 3;
}

/*
 * host:port, [v6]:port, or systemd's socket: the listening socket, or -1
 * with the reason logged.
 */
static int
listen_on(const char *where)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	const char *colon = strrchr(where, ':');
	struct addrinfo *ai;
	char host[256];
	int fd = -1, one = 1, e;

	if (!colon || colon == where || (size_t)(colon - where) >= sizeof(host)) {
		log_err("--listen %s: expected HOST:PORT", where);
		return -1;
	}
	snprintf(host, sizeof(host), "%.*s", (int)(colon - where), where);
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	if ((e = getaddrinfo(host, colon + 1, &hints, &ai))) {
		log_err("--listen %s: %s", where, gai_strerror(e));
		return -1;
	}
	if ((fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
		log_err("listen on %s: socket: %s", where, strerror(errno));
		goto out;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
		log_err("listen on %s: %s", where, strerror(errno));
		close(fd);
		fd = -1;
	}
out:
	freeaddrinfo(ai);
	return fd;
}

int
accept_listen(const char *where)
{
	int fd = inherited_socket();

	if (fd < 0 && (fd = listen_on(where)) < 0)
		return -1;
	if (!address)
		address = where;
	accept_watch(fd);
	return fd;
}

/* Where the API listens: --listen's, or the socket systemd passed. */
const char *
accept_address(void)
{
	return address;
}

/* envd's listener (envd.c): its connections go to MHD as the others do. */
int
accept_listen_envd(const char *where)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if ((envd_fd = listen_on(where)) < 0)
		return -1;
	if (getsockname(envd_fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	envd_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						   : ((struct sockaddr_in *)&ss)->sin_port);
	ev_envd = (struct evsrc){accept_ready, NULL};
	server_watch(envd_fd, EPOLLIN, &ev_envd);
	return envd_fd;
}

/* Whether the connection fd came through envd's listener (its local port). */
bool
accept_is_envd(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (envd_fd < 0 || fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return false;
	return envd_port == ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
							   : ((struct sockaddr_in *)&ss)->sin_port);
}

/* Closes it with a FIN: bytes left unread would make the close a reset. */
static void
pending_close(struct pending *pd)
{
	char junk[4096];

	for (int i = 0; i < 16 && recv(pd->pd_fd, junk, sizeof(junk), MSG_DONTWAIT) > 0; i++)
		;
	server_unwatch(pd->pd_fd);
	close(pd->pd_fd);
	TAILQ_REMOVE(&pending, pd, pd_link);
	npending--;
	npending_ctx -= pd->pd_context;
	free(pd);
}

/*
 * Writes a whole answer, status ("400 Bad Request") and text, on a socket
 * that is then shut for writing; also for one MHD has (http_tick's 408),
 * which nothing else writes to while its request's body is coming.
 */
int
accept_answer(int fd, const char *status, const char *text)
{
	char head[640];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %s\r\nConnection: close\r\n"
			 "Content-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n\r\n%s\n",
			 status, strlen(text) + 1, text);
	int rc = 0;

	if (n < 0 || (size_t)n >= sizeof(head))
		return -EMSGSIZE;
	if (send(fd, head, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		rc = -errno;
	shutdown(fd, SHUT_WR);
	return rc;
}

/* Answers 400, saying why, and closes. */
static void
refuse(struct pending *pd, const char *why)
{
	int rc = accept_answer(pd->pd_fd, "400 Bad Request", why);

	if (rc < 0)
		log_debug("http: 400 to a malformed request: %s", strerror(-rc));
	metrics_http("other", "other", 400);
	pending_close(pd);
}

/* Counts a connection from code in a context, refused; the log says so once a
 * minute at most (the code may try in a loop). */
static void
context_refused(void)
{
	static uint64_t said_at;
	static unsigned n;
	uint64_t now = now_ms();

	n++;
	if (!said_at || now >= said_at + 60000) {
		log_warn("http: %u connection%s from code in a context refused", n,
			 n == 1 ? "" : "s");
		said_at = now;
		n = 0;
	}
	metrics_http("other", "other", 403);
}

/* Answers 403 and closes: code in a context called the API. */
static void
refuse_context(struct pending *pd)
{
	int rc;

	context_refused();
	if ((rc = accept_answer(pd->pd_fd, "403 Forbidden",
				"code running in a context cannot call this server's API")) < 0)
		log_debug("http: 403 to a context: %s", strerror(-rc));
	pending_close(pd);
}

static void
accept_from(int lfd)
{
	for (;;) {
		struct pending *pd = xcalloc(1, sizeof(*pd));
		pd->pd_addrlen = sizeof(pd->pd_addr);
		pd->pd_fd = accept4(lfd, (struct sockaddr *)&pd->pd_addr,
				    &pd->pd_addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (pd->pd_fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED)
				log_warn("http: accept: %s", strerror(errno));
			free(pd);
			return;
		}
		/* MHD's own limit: past it a connection is not even answered 503 */
		if (nconns + npending >= cf->cf_max_conns + 64) {
			close(pd->pd_fd);
			free(pd);
			continue;
		}
		pd->pd_since = now_ms();
		/*
		 * Refused once its request came, so that the answer is read; past a
		 * few waiting, at once: a context holding connections open must not
		 * take the places of the clients'.
		 */
		if ((pd->pd_context = peer_is_context(pd->pd_fd)) &&
		    npending_ctx >= CONTEXT_PENDING_MAX) {
			context_refused();
			close(pd->pd_fd);
			free(pd);
			continue;
		}
		npending_ctx += pd->pd_context;
		pd->pd_ev = (struct evsrc){accept_sniff, pd};
		TAILQ_INSERT_TAIL(&pending, pd, pd_link);
		npending++;
		/* edge-triggered: peeked bytes stay unread, only new ones wake us */
		server_watch(pd->pd_fd, EPOLLIN | EPOLLRDHUP | EPOLLET, &pd->pd_ev);
	}
}

/* New connections, on either listener: each waits in the pending list for its first bytes. */
static void
accept_ready(void *arg, uint32_t events)
{
	(void)arg, (void)events;
	accept_from(listen_fd);
	if (envd_fd >= 0)
		accept_from(envd_fd);
}

/* Bytes (or an end) on a pending connection: hand it to MHD, refuse it, or wait. */
static void
accept_sniff(void *arg, uint32_t events)
{
	struct pending *pd = arg;
	char b[HTTP_CONN_MEMORY]; /* a head MHD could hold */
	ssize_t n = recv(pd->pd_fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	bool ended = events & (EPOLLRDHUP | EPOLLHUP);
	const char *why = NULL;
	int verdict;

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	if (n <= 0) { /* gone before a byte: nothing to answer */
		pending_close(pd);
		return;
	}
	if (pd->pd_context) {
		refuse_context(pd);
		return;
	}
	verdict = frame_request_line(b, n);
	if (verdict < 0 || (verdict == 0 && ended)) {
		/* not HTTP, or it stopped sending halfway */
		refuse(pd, "not an HTTP request: expected a request line such as "
		           "'GET /health HTTP/1.1'");
		return;
	}
	if (verdict > 0 && (verdict = frame_head(b, n, &why)) < 0) {
		refuse(pd, why);
		return;
	}
	/* a head cut short, or over MHD's limit, is MHD's to answer */
	if (verdict == 0 && !ended && (size_t)n < sizeof(b))
		return;
	/* pd goes when MHD reports the connection started: before it returns, or later */
	int fd = pd->pd_fd;
	struct sockaddr_storage addr = pd->pd_addr;
	socklen_t addrlen = pd->pd_addrlen;
	server_unwatch(fd);
	TAILQ_REMOVE(&pending, pd, pd_link);
	npending--;
	TAILQ_INSERT_TAIL(&accept_handed, pd, pd_link);
	/* MHD owns the socket from here, and closes it if it cannot take it */
	if (MHD_add_connection(mhd, fd, (struct sockaddr *)&addr, addrlen) != MHD_YES) {
		log_warn("http: could not take a connection: %s", strerror(errno));
		accept_since(fd); /* forgets it */
	}
	server_kick();
}

/*
 * When the connection on fd, which MHD reports started, was accepted: its
 * header timeout runs from then, not from the hand-over. Now for one that
 * was not handed over here.
 */
uint64_t
accept_since(int fd)
{
	struct pending *pd;
	uint64_t since;

	TAILQ_FOREACH_REVERSE(pd, &accept_handed, pendq, pd_link)
		if (pd->pd_fd == fd)
			break;
	if (!pd)
		return now_ms();
	since = pd->pd_since;
	TAILQ_REMOVE(&accept_handed, pd, pd_link);
	free(pd);
	return since;
}

/* A connection that sent no request line within the header timeout is closed. */
void
accept_tick(uint64_t now)
{
	struct pending *pd, *next;

	for (pd = TAILQ_FIRST(&pending); pd; pd = next) {
		next = TAILQ_NEXT(pd, pd_link);
		if (now > pd->pd_since + cf->cf_header_timeout * 1000ull)
			pending_close(pd);
	}
	/* one MHD never reported: its fd may be another connection's by now */
	for (pd = TAILQ_FIRST(&accept_handed); pd; pd = next) {
		next = TAILQ_NEXT(pd, pd_link);
		if (now > pd->pd_since + cf->cf_header_timeout * 1000ull) {
			TAILQ_REMOVE(&accept_handed, pd, pd_link);
			free(pd);
		}
	}
}

void
accept_stop(void)
{
	struct pending *pd;

	mhd = NULL;
	if (listen_fd <= 0)
		return;
	while (!TAILQ_EMPTY(&pending))
		pending_close(TAILQ_FIRST(&pending));
	while ((pd = TAILQ_FIRST(&accept_handed))) {
		TAILQ_REMOVE(&accept_handed, pd, pd_link);
		free(pd);
	}
	server_unwatch(listen_fd);
	close(listen_fd);
	listen_fd = -1;
	if (envd_fd >= 0) {
		server_unwatch(envd_fd);
		close(envd_fd);
		envd_fd = -1;
	}
}
