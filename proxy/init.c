/*
 * init.c — sandcell-init: PID 1 of a box forked from the template. That box's
 * init is a fork of the Python template, ~10 MB of copied pages for the box's
 * whole life; once it has forked the kernel it executes this instead, which
 * holds a few pages and does what the init must (boxinit.c).
 *
 *     sandcell-init KERNEL_PID     (fd 3: the proxy's socket, 1 and 2: its pipe)
 *
 * The kernel has the init's uid, and an exec makes a process dumpable again:
 * the kernel could then open /proc/1/mem or take fd 3 (pidfd_getfd) and speak
 * for the init. This file is installed mode 0711, so the kernel's uid cannot
 * read it, and the kernel's exec leaves us non-dumpable from the start
 * (would_dump). boxlib.c checks that before the exec; we check the outcome.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "proxy.h"

static int
say(const char *msg)
{
	return write(2, msg, strlen(msg)) < 0 ? -1 : 0;
}

int
main(int argc, char **argv)
{
	char *end = NULL;
	long kid = argc == 2 ? strtol(argv[1], &end, 10) : 0;

	if (argc != 2 || *end || kid <= 1 || getpid() != 1) {
		say("usage: sandcell-init KERNEL_PID (run by the init of a box forked from "
		    "the template)\n");
		return 2;
	}
	/* an invariant, not peer input: a dumpable init is no init */
	if (prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) {
		say("sandcell-init error: dumpable after exec (readable by the kernel's uid?): "
		    "the box ends\n");
		return 122;
	}
	prctl(PR_SET_NAME, "sandcell-init", 0, 0, 0); /* not the fd number it was run from */
	boxinit_wait((pid_t)kid, true);
}
