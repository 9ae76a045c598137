/*
 * startgate.c — at most --max-starting kernels of one broker start at once.
 *
 * A kernel's start is CPU work (ipykernel's, its copy-on-write faults): when
 * sixteen start together on two cores each gets an eighth of one and every
 * one of them is ready only when the last is. Held to a few at a time, the
 * first are ready in a fraction of that, the last no later, and the whole
 * burst costs less CPU (fewer switches between them).
 *
 * A start holds one of N slots from its launch until its kernel is ready,
 * stopped or dead: an exclusive flock on one of N files in the run dir
 * (start-slot.K). A proxy that waits tries again each turn of its loop,
 * which runs at least every 50 ms while its kernel is starting. The lock
 * goes with its open file, so a proxy that dies (kill -9) frees its slot;
 * the file is close-on-exec, and a box's init closes it with every other
 * descriptor of ours before its kernel runs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "proxy.h"

bool
startgate_take(struct proxy *px)
{
	if (px->px_slot_fd >= 0 || px->px_max_starting <= 0)
		return true;
	for (int k = 0; k < px->px_max_starting; k++) {
		char path[PATH_MAX];
		int fd;
		snprintf(path, sizeof(path), "%s/start-slot.%d", px->px_run_dir, k);
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0) {
			/* no gate rather than no kernel */
			log_warn("context %s: start slot %s: %s; starting without one", px->px_id,
				 path, strerror(errno));
			return true;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			px->px_slot_fd = fd;
			return true;
		}
		close(fd);
	}
	return false;
}

void
startgate_give(struct proxy *px)
{
	if (px->px_slot_fd < 0)
		return;
	flock(px->px_slot_fd, LOCK_UN); /* even if a child still holds a copy */
	close(px->px_slot_fd);
	px->px_slot_fd = -1;
}
