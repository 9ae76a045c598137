/*
 * server.c — the broker's one server struct and the registration of file
 * descriptors with its epoll loop (main.c waits on it), so modules watch
 * their fds without depending on main.c.
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

struct server sv;

void
server_watch(int fd, uint32_t events, struct evsrc *ev)
{
	struct epoll_event e = {.events = events, .data.ptr = ev};

	if (epoll_ctl(sv.sv_io.io_epfd, EPOLL_CTL_ADD, fd, &e) < 0 &&
	    (errno != EEXIST || epoll_ctl(sv.sv_io.io_epfd, EPOLL_CTL_MOD, fd, &e) < 0))
		log_warn("epoll_ctl add fd %d: %s", fd, strerror(errno));
}

void
server_unwatch(int fd)
{
	epoll_ctl(sv.sv_io.io_epfd, EPOLL_CTL_DEL, fd, NULL);
}

/*
 * ev is about to be freed: an event of the batch being handled that points
 * at it is dropped (a proxy's link and pidfd can be ready together, and the
 * first one's handler may free the context).
 */
void
server_forget(struct evsrc *ev)
{
	for (int i = 0; i < sv.sv_io.io_batch_n; i++)
		if (sv.sv_io.io_batch[i].data.ptr == ev)
			sv.sv_io.io_batch[i].data.ptr = NULL;
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
