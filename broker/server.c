/*
 * server.c — the loop's epoll: the registration of file descriptors with it,
 * so modules watch their fds without depending on main.c, and the wait that
 * hands each ready one to its event source's handler (main.c's loop calls
 * it). Its fd and the batch being handled are its own.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "broker.h"

#define SERVER_BATCH 64 /* events one epoll_wait returns at most */

static int epfd = -1;
static struct epoll_event *batch; /* what epoll_wait returned, handled in turn */
static int batch_n;
static bool kicked; /* MHD has work: the next wait is none (server_kick) */

/* At start, before anything is watched. */
void
server_open(void)
{
	if ((epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		fatal("epoll_create1: %s", strerror(errno));
}

void
server_watch(int fd, uint32_t events, struct evsrc *ev)
{
	struct epoll_event e = {.events = events, .data.ptr = ev};

	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e) < 0 &&
	    (errno != EEXIST || epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &e) < 0))
		log_warn("epoll_ctl add fd %d: %s", fd, strerror(errno));
}

void
server_unwatch(int fd)
{
	epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* MHD has work no fd will show (a connection handed to it, a response resumed). */
void
server_kick(void)
{
	kicked = true;
}

/* MHD runs now (main.c's loop): the kicks so far are answered. */
void
server_kicked(void)
{
	kicked = false;
}

/*
 * Waits up to wait ms (none if kicked) and calls the handler of each event
 * source that is ready.
 */
void
server_wait(long wait)
{
	struct epoll_event evs[SERVER_BATCH];
	int n = epoll_wait(epfd, evs, SERVER_BATCH, kicked ? 0 : (int)wait);

	if (n < 0 && errno != EINTR)
		fatal("epoll_wait: %s", strerror(errno));
	batch = evs;
	batch_n = n > 0 ? n : 0;
	for (int i = 0; i < batch_n; i++) {
		struct evsrc *ev = evs[i].data.ptr;
		/* NULL: its object was freed by an earlier one (server_forget) */
		if (ev)
			ev->ev_fn(ev->ev_arg, evs[i].events);
	}
	batch_n = 0;
	batch = NULL;
}

/*
 * ev is about to be freed: an event of the batch being handled that points
 * at it is dropped (a proxy's link and pidfd can be ready together, and the
 * first one's handler may free the context).
 */
void
server_forget(struct evsrc *ev)
{
	for (int i = 0; i < batch_n; i++)
		if (batch[i].data.ptr == ev)
			batch[i].data.ptr = NULL;
}

/* sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET. */
void
server_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t n;
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@') || (n = strlen(path)) >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, path, n);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0'; /* abstract namespace */
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
		   offsetof(struct sockaddr_un, sun_path) + n) < 0)
		log_warn("sd_notify %s: %s", state, strerror(errno));
	close(fd);
}
