/*
 * hostnet.c — the proxy's own unix sockets, made in the network namespace it
 * started in (the host's), never in the one it and its boxes share
 * (boxnet.c). A unix socket belongs to the namespace it was made in, and
 * /proc/net/unix lists a namespace's sockets with their names: the link's
 * listening socket (the run dir's path and the context's id) and a
 * connection to the template's socket (its accepted end is made in the
 * connecting socket's namespace, with the template's path) would be named
 * to every box. Root only: a proxy that is not root has left the host's
 * user namespace and cannot go back; its link's socket stays in its boxes'.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proxy.h"

static int host = -1; /* the host's network namespace, kept from the start */

/* Before boxnet_start: the namespace we start in is kept for hostnet_enter. */
void
hostnet_keep(void)
{
	if (host < 0 && geteuid() == 0)
		host = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
}

/* Whether fd (a namespace's) is the host's network namespace; true if unknown. */
bool
hostnet_is(int fd)
{
	struct stat a, b;

	if (host < 0 || fstat(host, &a) < 0 || fstat(fd, &b) < 0)
		return true;
	return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/*
 * This thread into the host's network namespace, for sockets made there;
 * the fd of the one it was in (hostnet_leave goes back), or -errno.
 */
int
hostnet_enter(void)
{
	int here;

	if (host < 0)
		return -ENOTSUP;
	if ((here = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	if (setns(host, CLONE_NEWNET) < 0) {
		int rc = -errno;
		close(here);
		return rc;
	}
	return here;
}

/* Back where hostnet_enter left; a thread that cannot go back must not go on. */
void
hostnet_leave(int here)
{
	if (here < 0)
		return;
	if (setns(here, CLONE_NEWNET) < 0)
		fatal("cannot go back into the box's network namespace: %s",
		      strerror(errno));
	close(here);
}

/* socket(2) in the host's network namespace where we can, else here. */
int
hostnet_socket(int domain, int type, int protocol)
{
	int here = hostnet_enter(), s = socket(domain, type, protocol), e = errno;

	hostnet_leave(here);
	errno = e;
	return s;
}
