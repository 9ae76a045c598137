/*
 * peerbox.c — whether a Unix socket's peer of our own uid is in a box: where
 * kernels keep the broker's uid (not root, no namespaces: broker/boxnons.c),
 * the uid check of the control socket (broker/control.c) and of the proxies'
 * links (proto/chan.c) cannot tell a kernel from the broker, and the path of
 * those sockets is in a kernel's reach (Landlock does not rule a connect by
 * path). A box's process runs under one seccomp filter more than the broker
 * and its proxies (the box's, stacked on whatever the container gave us),
 * which it can never remove: a peer with more filters than this process is
 * refused. Off unless a box without namespaces keeps our uid (peerbox_on).
 */
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
