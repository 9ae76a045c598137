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
 *
 * Waiting starts are served in the order they came (the queue below): a
 * start tries for a slot only when fewer than N starts that came before it
 * still wait, so none is passed over for long, however many come after it.
 * Its place is a file in the run dir's start-queue/, named by when it came
 * (CLOCK_MONOTONIC, which every process of the machine shares) and its pid,
 * and locked for as long as it waits. The file appears already locked (made
 * unnamed with O_TMPFILE, locked, then linked), so an unlocked one is of a
 * proxy that died: whoever sees it removes it. Where the queue cannot be
 * made (no O_TMPFILE), starts take free slots in no order, as before.
 *
 * The warm pool's starts queue behind every start a client waits for (their
 * names sort after), however early they came: a burst's creations are not
 * held up by the refills it set off.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proxy.h"

/* The slot this proxy holds and its place in the queue: one start at a time. */
static struct {
	int sg_slot_fd;   /* the start slot held; -1 = none */
	int sg_queue_fd;  /* its place in the start queue, held; -1 = none */
	bool sg_queue_none; /* the queue could not be made: slots in no order */
	char sg_queue_name[40], sg_queue_path[PATH_MAX + 56];
} sg = {.sg_slot_fd = -1, .sg_queue_fd = -1};

/* Takes a place at the queue's end: 0, or -errno (no queue for this start). */
static int
queue_join(const struct proxy *px)
{
	char dir[PATH_MAX], fdpath[64];
	struct timespec ts;
	int fd;

	snprintf(dir, sizeof(dir), "%s/start-queue", px->px_run_dir);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	if ((fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)) < 0)
		return -errno;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	/* a pool's start (1) after every start a client waits for (0) */
	snprintf(sg.sg_queue_name, sizeof(sg.sg_queue_name), "%d.%016llx.%d",
		 px->px_pooled ? 1 : 0,
		 (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec,
		 (int)getpid());
	snprintf(sg.sg_queue_path, sizeof(sg.sg_queue_path), "%s/%s", dir, sg.sg_queue_name);
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
	if (flock(fd, LOCK_EX | LOCK_NB) < 0 ||
	    linkat(AT_FDCWD, fdpath, AT_FDCWD, sg.sg_queue_path, AT_SYMLINK_FOLLOW) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	sg.sg_queue_fd = fd;
	return 0;
}

static void
queue_leave(void)
{
	if (sg.sg_queue_fd < 0)
		return;
	unlink(sg.sg_queue_path);
	close(sg.sg_queue_fd);
	sg.sg_queue_fd = -1;
}

/*
 * How many starts that came before ours still wait, counted up to enough
 * (a waiter far back opens no more than that many of the others' places);
 * the places of dead proxies met on the way are removed.
 */
static int
queue_ahead(const struct proxy *px, int enough)
{
	char dir[PATH_MAX];
	struct dirent *de;
	int ahead = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/start-queue", px->px_run_dir);
	if (!(d = opendir(dir)))
		return 0;
	while (ahead < enough && (de = readdir(d))) {
		if (de->d_name[0] == '.' || strcmp(de->d_name, sg.sg_queue_name) >= 0)
			continue;
		int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue; /* gone meanwhile */
		if (flock(fd, LOCK_SH | LOCK_NB) == 0)
			unlinkat(dirfd(d), de->d_name, 0); /* no one holds it: its proxy died */
		else
			ahead++;
		close(fd);
	}
	closedir(d);
	return ahead;
}

bool
startgate_take(const struct proxy *px)
{
	if (sg.sg_slot_fd >= 0 || px->px_max_starting <= 0)
		return true;
	if (sg.sg_queue_fd < 0 && !sg.sg_queue_none) {
		int e = queue_join(px);
		if (e < 0) {
			log_warn("context %s: start queue: %s; slots taken in no order", px->px_id,
				 strerror(-e));
			sg.sg_queue_none = true;
		}
	}
	if (sg.sg_queue_fd >= 0 && queue_ahead(px, px->px_max_starting) >= px->px_max_starting)
		return false;
	for (int k = 0; k < px->px_max_starting; k++) {
		char path[PATH_MAX];
		int fd;
		snprintf(path, sizeof(path), "%s/start-slot.%d", px->px_run_dir, k);
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0) {
			/* no gate rather than no kernel */
			log_warn("context %s: start slot %s: %s; starting without one", px->px_id,
				 path, strerror(errno));
			queue_leave();
			return true;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			sg.sg_slot_fd = fd;
			queue_leave();
			return true;
		}
		close(fd);
	}
	return false;
}

void
startgate_give(void)
{
	queue_leave();
	if (sg.sg_slot_fd < 0)
		return;
	flock(sg.sg_slot_fd, LOCK_UN); /* even if a child still holds a copy */
	close(sg.sg_slot_fd);
	sg.sg_slot_fd = -1;
}
