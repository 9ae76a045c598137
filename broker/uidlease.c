/*
 * uidlease.c — a uid of --kernel-uid-range is one broker's at a time. Brokers
 * on one machine share the host's uids, and each hides only its own run dir
 * from its kernels: two that gave their kernels the same uid would let code
 * in a context of one reach the files of the other's. systemd hands the
 * same default range to its DynamicUser services, which must not share a
 * uid with a kernel either.
 *
 * A uid is leased through a file, UIDLEASE_DIR/<uid>, locked (flock) for as
 * long as a context may run as it, with the run dir of the broker holding
 * it written inside, and what it is for when it is not a kernel's (a box's
 * network: "<run dir> net"). A uid is free for this broker when no live broker
 * locks its file and either the file names our run dir (our own kept
 * contexts, from before a restart) or no process on the machine runs as
 * that uid (a broker that died may have left kernels behind; another
 * program may use it).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker.h"

#define UIDLEASE_DIR "/run/sandcell-uids"

/* Whether a process of this machine (as far as /proc shows) has uid among its ids. */
static bool
uid_in_use(unsigned uid)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool used = false;

	if (!d)
		return true; /* cannot tell: not free */
	while (!used && (de = readdir(d))) {
		char path[300], line[256];
		unsigned r, e, s, f;
		FILE *fp;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/status", de->d_name);
		if (!(fp = fopen(path, "re")))
			continue; /* gone */
		while (fgets(line, sizeof(line), fp))
			if (sscanf(line, "Uid: %u %u %u %u", &r, &e, &s, &f) == 4) {
				used = r == uid || e == uid || s == uid || f == uid;
				break;
			}
		fclose(fp);
	}
	closedir(d);
	return used;
}

/* Leases cannot be kept here (a read-only /run): said once, then uids go unleased. */
static int
no_leases(int err)
{
	static bool said;

	if (!said)
		log_warn("uid leases: %s: %s; a uid of --kernel-uid-range is taken without one, "
			 "so another broker on this machine could hand out the same uids",
			 UIDLEASE_DIR, strerror(err));
	said = true;
	return -ENOTSUP;
}

/* The run dir a lease file names ("" if none). */
static void
holder_of(int fd, char held[PATH_MAX + 1])
{
	ssize_t n = pread(fd, held, PATH_MAX, 0);

	held[n > 0 ? n : 0] = '\0';
}

/* Our run dir and the role, as lease files name them. */
static void
run_dir_of_ours(char mine[PATH_MAX + 8], const char *role)
{
	char dir[PATH_MAX];

	if (!realpath(cf->cf_run_dir, dir))
		snprintf(dir, PATH_MAX, "%s", cf->cf_run_dir);
	snprintf(mine, PATH_MAX + 8, "%s%s%s", dir, *role ? " " : "", role);
}

/*
 * Leases uid for this broker: returns the descriptor that holds the lease
 * (close it to end the lease), -EBUSY when the uid is another's, or
 * -ENOTSUP when leases cannot be kept on this machine (the uid may be
 * taken: in a container with its own user namespace no other broker
 * shares its uids).
 */
int
uid_lease(unsigned uid, const char *role)
{
	char path[64], held[PATH_MAX + 1], mine[PATH_MAX + 8];
	int fd;

	run_dir_of_ours(mine, role);
	if (mkdir(UIDLEASE_DIR, 0700) < 0 && errno != EEXIST)
		return no_leases(errno);
	snprintf(path, sizeof(path), UIDLEASE_DIR "/%u", uid);
	for (;;) {
		struct stat held_st, path_st;
		if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
			return no_leases(errno);
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int err = errno;
			close(fd);
			return err == EWOULDBLOCK ? -EBUSY : no_leases(err);
		}
		/* the file its last holder removed as it let go (uid_release): open it again */
		if (fstat(fd, &held_st) == 0 && stat(path, &path_st) == 0 &&
		    held_st.st_ino == path_st.st_ino && held_st.st_dev == path_st.st_dev)
			break;
		close(fd);
	}
	holder_of(fd, held);
	if (strcmp(held, mine) && uid_in_use(uid)) {
		close(fd);
		return -EBUSY;
	}
	if (ftruncate(fd, 0) < 0 || pwrite(fd, mine, strlen(mine), 0) != (ssize_t)strlen(mine)) {
		int err = errno;
		close(fd);
		return no_leases(err);
	}
	return fd;
}

/*
 * The lowest uid of [a, b] whose lease file names our run dir, leased again
 * (*fd), or 0: after a restart, the uid our kept contexts run as comes
 * before a lower one that has become free meanwhile.
 */
unsigned
uid_lease_ours(unsigned a, unsigned b, const char *role, int *fd)
{
	char mine[PATH_MAX + 8], held[PATH_MAX + 1], path[300];
	DIR *d = opendir(UIDLEASE_DIR);
	struct dirent *de;
	unsigned best = 0, u;

	if (!d)
		return 0;
	run_dir_of_ours(mine, role);
	while ((de = readdir(d))) {
		int f;
		if (sscanf(de->d_name, "%u", &u) != 1 || u < a || u > b || (best && u > best))
			continue;
		snprintf(path, sizeof(path), UIDLEASE_DIR "/%s", de->d_name);
		if ((f = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
			continue;
		holder_of(f, held);
		close(f);
		if (!strcmp(held, mine))
			best = u;
	}
	closedir(d);
	if (best && (*fd = uid_lease(best, role)) == -EBUSY)
		best = 0;
	return best;
}

/*
 * Ends the lease fd holds on uid for good: no context of ours runs as it any
 * more (deleted, or all ended at a stop), so its file goes, while still
 * locked. A lease kept across a restart is only closed: its file names our
 * run dir for the next broker.
 */
void
uid_release(unsigned uid, int fd)
{
	char path[64];

	if (fd < 0)
		return;
	snprintf(path, sizeof(path), UIDLEASE_DIR "/%u", uid);
	unlink(path);
	close(fd);
}
