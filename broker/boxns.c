/*
 * boxns.c — root without the capabilities a root box needs, as a
 * container's defaults leave it (podman's and Docker's keep CAP_SETUID and
 * CAP_SETGID, not CAP_SYS_ADMIN, CAP_NET_ADMIN or CAP_SYS_PTRACE): before it
 * has a thread, the broker moves into a user namespace of its own that maps
 * every uid and gid the container has to itself. There it holds the
 * capabilities the boxes' namespaces need, over namespaces it makes; files,
 * processes and sockets keep their ids, and nothing of the container's own
 * (its mounts, network, devices, /proc) comes under its power that was not.
 * The kernels' uids of --kernel-uid-range stay theirs, the broker stays
 * root: box.c goes on as on a machine.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/capability.h>
#include <unistd.h>

#include "broker.h"

/* Whether this process has capability cap in its effective set. */
bool
boxns_has_cap(int cap)
{
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2] = {{0}};

	if (syscall(SYS_capget, &hdr, data) < 0)
		return false;
	return data[cap / 32].effective & (1u << (cap % 32));
}

/*
 * What a root box uses, measured in containers: namespaces and mounts, the
 * box's loopback, the network namespace of pasta's uid (opened through
 * /proc), the kernels' uids and their workspace, the run dir, dropping
 * capabilities, signalling kernels.
 */
static const int root_box_caps[] = {
    CAP_SYS_ADMIN, CAP_NET_ADMIN,    CAP_SYS_PTRACE, CAP_SETUID,  CAP_SETGID,
    CAP_CHOWN,     CAP_DAC_OVERRIDE, CAP_FOWNER,     CAP_SETPCAP, CAP_KILL};

/* Whether root here holds every capability a root box uses. */
bool
boxns_root_suffices(void)
{
	for (size_t i = 0; i < sizeof(root_box_caps) / sizeof(root_box_caps[0]); i++)
		if (!boxns_has_cap(root_box_caps[i]))
			return false;
	return geteuid() == 0;
}

/*
 * The identity map of every id of file (/proc/self/uid_map or gid_map): for
 * each line "first outside count" of ours, "first first count". 0, or -errno.
 */
static int
identity_map(const char *file, char *out, size_t outsz)
{
	FILE *f = fopen(file, "re");
	unsigned long first, outside, count;
	size_t n = 0;
	int rc = 0;

	if (!f)
		return -errno;
	*out = '\0';
	while (rc == 0 && fscanf(f, "%lu %lu %lu", &first, &outside, &count) == 3) {
		int w =
		    snprintf(out + n, outsz - n, "%lu %lu %lu\n", first, first, count);
		if (w < 0 || (size_t)w >= outsz - n)
			rc = -E2BIG;
		else
			n += w;
	}
	fclose(f);
	return rc < 0 ? rc : n ? 0 : -ENOENT;
}

static int
write_map(pid_t pid, const char *name, const char *map)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	return write_text(path, map);
}

/* The steps of boxns_enter and boxns_probe, as their failures name them. */
enum step { S_MAPS, S_PIPE, S_FORK, S_UNSHARE, S_UID_MAP, S_GID_MAP, S_BOX_NS, S_PROBE };
static const char *const step_names[] = {"read the container's uid and gid maps",
                                         "pipe",
                                         "fork",
                                         "unshare(CLONE_NEWUSER)",
                                         "write uid_map",
                                         "write gid_map",
                                         "unshare of the box's namespaces in it",
                                         "the probe"};

/*
 * This process into a user namespace of its own with the identity maps: a
 * child left in ours writes them (only a process of the parent namespace
 * with CAP_SETUID and CAP_SETGID may map more than its own id). 0, or -errno
 * with the step that failed in *step. Single-threaded callers only.
 */
static int
enter(enum step *step)
{
	char uids[4096], gids[4096];
	int go[2], res = 0, rc, status;
	pid_t self = getpid(), helper;

	*step = S_MAPS;
	if ((rc = identity_map("/proc/self/uid_map", uids, sizeof(uids))) < 0 ||
	    (rc = identity_map("/proc/self/gid_map", gids, sizeof(gids))) < 0)
		return rc;
	*step = S_PIPE;
	if (pipe2(go, O_CLOEXEC) < 0)
		return -errno;
	if ((helper = fork()) == 0) {
		char c;
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(0);
		/* exit code: 0, or the errno of the map that failed (| 0x80: gid_map's)
		 */
		if ((rc = write_map(self, "uid_map", uids)) < 0)
			_exit(-rc & 0x7f);
		if ((rc = write_map(self, "gid_map", gids)) < 0)
			_exit(0x80 | (-rc & 0x7f));
		_exit(0);
	}
	close(go[0]);
	if (helper < 0) {
		rc = -errno;
		close(go[1]);
		*step = S_FORK;
		return rc;
	}
	*step = S_UNSHARE;
	if (unshare(CLONE_NEWUSER) < 0)
		res = -errno;
	else if (write(go[1], "g", 1) != 1)
		res = -EPIPE;
	close(go[1]);
	if (waitpid(helper, &status, 0) < 0 && !res)
		res = -errno;
	if (res < 0)
		return res;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		int e = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
		*step = e & 0x80 ? S_GID_MAP : S_UID_MAP;
		return -(e & 0x7f ? e & 0x7f : EIO);
	}
	return 0;
}

/*
 * Whether the broker should box its kernels from a user namespace of its
 * own (boxns_enter): root without every capability a root box uses. 0 yes;
 * 1 no (not root, or root suffices); or -errno with what is missing in *what: CAP_SETUID
 * and CAP_SETGID, or a user namespace in which a child can make the boxes'
 * namespaces (the container's seccomp profile may refuse them).
 */
int
boxns_probe(const char **what)
{
	int p[2], res[2] = {S_PROBE, -EIO}, status;
	enum step step;
	pid_t pid;

	*what = "";
	if (geteuid() != 0 || boxns_root_suffices())
		return 1;
	if (!boxns_has_cap(CAP_SETUID) || !boxns_has_cap(CAP_SETGID)) {
		*what = "CAP_SETUID and CAP_SETGID, to map the kernels' uids";
		return -EPERM;
	}
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	if ((pid = fork()) == 0) {
		close(p[0]);
		res[1] = enter(&step);
		res[0] = step;
		if (res[1] == 0 && unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC |
		                           CLONE_NEWUTS | CLONE_NEWNET) < 0) {
			res[0] = S_BOX_NS;
			res[1] = -errno;
		}
		_exit(write(p[1], res, sizeof(res)) == sizeof(res) ? 0 : 1);
	}
	close(p[1]);
	if (pid < 0 || read(p[0], res, sizeof(res)) != sizeof(res))
		res[0] = S_PROBE, res[1] = pid < 0 ? -errno : -EIO;
	close(p[0]);
	if (pid > 0)
		waitpid(pid, &status, 0);
	*what = step_names[res[0]];
	return res[1];
}

/* The broker into its own user namespace, after boxns_probe said yes: 0, or -errno with
 * *what. */
int
boxns_enter(const char **what)
{
	enum step step;
	int rc = enter(&step);

	*what = step_names[step];
	return rc;
}
