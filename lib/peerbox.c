/*
 * peerbox.c — whether a Unix socket's peer of our own uid is in a box: where
 * kernels keep the broker's uid (not root, no namespaces: broker/boxnons.c),
 * the uid check of the control socket (broker/control.c) and of the proxies'
 * links (proto/chan.c) cannot tell a kernel from the broker, and the path of
 * those sockets is in a kernel's reach (Landlock does not rule a connect by
 * path). A box's process runs under one seccomp filter more than the broker
 * and its proxies (the box's, stacked on whatever the container gave us),
 * which it can never remove: a peer with more filters than this process is
 * refused. The broker's API does the same for a TCP connection of our uid
 * from this machine, whose owner it finds by its socket's inode
 * (peerbox_socket_boxed). Off unless a box without namespaces keeps our uid
 * (peerbox_on).
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib.h"

static bool on;

/* From now on, peers under more seccomp filters than this process are boxed. */
void
peerbox_on(void)
{
	on = true;
}

/* The Seccomp_filters count of /proc/PID/status (pid 0: our own), or -errno. */
static long
filters(unsigned long long pid)
{
	char path[64], line[256];
	long n = -ENOENT;
	FILE *f;

	if (pid)
		snprintf(path, sizeof(path), "/proc/%llu/status", pid);
	else
		snprintf(path, sizeof(path), "/proc/self/status");
	if (!(f = fopen(path, "re")))
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Seccomp_filters:", 16)) {
			n = strtol(line + 16, NULL, 10);
			break;
		}
	fclose(f);
	return n;
}

/*
 * Whether the peer pid (SO_PEERCRED's, at its connect) is in a box: true
 * when it runs under more seccomp filters than we do, or cannot be looked
 * at (gone, or in another PID namespace: 0). Always false while off.
 */
bool
peerbox_boxed(unsigned long long pid)
{
	long ours, theirs;

	if (!on)
		return false;
	if (!pid || (theirs = filters(pid)) < 0 || (ours = filters(0)) < 0)
		return true;
	return theirs > ours;
}

/* Whether the process pid holds the socket inode ino among its descriptors. */
static bool
holds(const char *pid, unsigned long long ino)
{
	char path[64], want[48], link[48];
	struct dirent *e;
	bool found = false;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%s/fd", pid);
	snprintf(want, sizeof(want), "socket:[%llu]", ino);
	if (!(d = opendir(path)))
		return false;
	while (!found && (e = readdir(d))) {
		char fd[64 + 256];
		ssize_t n;
		snprintf(fd, sizeof(fd), "%s/%s", path, e->d_name);
		if ((n = readlink(fd, link, sizeof(link) - 1)) > 0) {
			link[n] = 0;
			found = !strcmp(link, want);
		}
	}
	closedir(d);
	return found;
}

/*
 * Whether the TCP socket inode ino (a local client's, sock_diag's) belongs
 * to a process in a box: the first process other than us that holds it is
 * looked at as peerbox_boxed does. One nobody holds any more (it closed) is
 * not taken on trust. Always false while off.
 */
bool
peerbox_socket_boxed(unsigned long long ino)
{
	char self[24];
	struct dirent *e;
	bool boxed = true;
	DIR *d;

	if (!on)
		return false;
	if (!(d = opendir("/proc")))
		return true;
	snprintf(self, sizeof(self), "%d", (int)getpid());
	while ((e = readdir(d)))
		if (e->d_name[0] >= '1' && e->d_name[0] <= '9' && strcmp(e->d_name, self) &&
		    holds(e->d_name, ino)) {
			boxed = peerbox_boxed(strtoull(e->d_name, NULL, 10));
			break;
		}
	closedir(d);
	return boxed;
}
