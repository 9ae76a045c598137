/*
 * sweep.c — a test binary leaves nothing behind. Each run dir a test makes is
 * listed in the runner's directory of logs; once every test has run, the
 * runner kills whatever still runs from one (a timed-out test's worker is
 * killed before its fixtures run, and a broker it started with
 * --keep-contexts leaves its proxies), then removes the contexts' cgroups,
 * the uid leases naming the run dir, and the run dir and its workspace.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "harness.h"

static const char *
list_path(char *buf, size_t len)
{
	const char *logs = getenv("SANDCELL_TEST_LOGS");

	if (!logs || snprintf(buf, len, "%s/run-dirs", logs) >= (int)len)
		return NULL;
	return buf;
}

static void
track(const char *what)
{
	char path[PATH_MAX];
	FILE *f;

	if (!list_path(path, sizeof(path)) || !(f = fopen(path, "a")))
		return; /* outside a test binary's runner: nothing sweeps */
	fprintf(f, "%s\n", what);
	fclose(f);
}

void
harness_track(const char *run_dir)
{
	track(run_dir);
}

void
harness_track_netns(const char *name)
{
	char line[64];

	snprintf(line, sizeof(line), "netns:%s", name);
	track(line);
}

/* Whether an argument of pid names something in dir. */
static bool
runs_from(pid_t pid, const char *dir)
{
	char buf[8192];
	size_t n = proc_cmdline(pid, buf, sizeof(buf));

	for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
		if (strstr(buf + i, dir))
			return true;
	return false;
}

/* SIGKILLs what runs from dir until nothing does (or 10 s); how many it killed. */
static int
kill_all_from(const char *dir)
{
	int killed = 0, left = 1;

	for (double t0 = ms_now(); left && ms_since(t0) < 10000; usleep(20000)) {
		DIR *d = opendir("/proc");
		struct dirent *de;
		left = 0;
		while (d && (de = readdir(d))) {
			pid_t pid = atoi(de->d_name);
			if (pid <= 1 || pid == getpid() || !runs_from(pid, dir))
				continue;
			if (proc_stat_field(pid, 3) == 'Z')
				continue; /* dead, its parent's to reap */
			left++;
			killed += kill(pid, SIGKILL) == 0;
		}
		if (d)
			closedir(d);
	}
	return killed;
}

/* rmdir, waiting a moment for its processes to leave it: 1 removed, 0 not there, -1 not removed. */
static int
remove_cgroup(const char *path)
{
	int rc = -1;

	for (double t0 = ms_now(); ms_since(t0) < 5000; usleep(20000))
		if ((rc = rmdir(path)) == 0 || errno == ENOENT)
			break;
	if (rc == 0)
		return 1;
	if (errno == ENOENT)
		return 0;
	fprintf(stderr, "sweep: could not remove %s: %s\n", path, strerror(errno));
	return -1;
}

/*
 * The cgroups a context's box was given (proxy/sandbox.c, proxy/limits.c), v1
 * and v2: under its broker's parent (broker/bounds.c), or sandcell's itself.
 */
static int
remove_cgroups(const char *id)
{
	static const char *const where[] = {"/sys/fs/cgroup/pids/sandcell/%s%s",
					    "/sys/fs/cgroup/memory/sandcell/%s%s",
					    "/sys/fs/cgroup/sandcell/%s%s",
					    "/sys/fs/cgroup/sandcell/sandcell-%s%s"};
	int removed = 0;

	for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		char path[PATH_MAX];
		glob_t g;
		snprintf(path, sizeof(path), where[i], "", id);
		removed += remove_cgroup(path) > 0;
		snprintf(path, sizeof(path), where[i], "broker-*/", id);
		if (glob(path, 0, NULL, &g) == 0)
			for (size_t k = 0; k < g.gl_pathc; k++)
				removed += remove_cgroup(g.gl_pathv[k]) > 0;
		globfree(&g);
	}
	return removed;
}

/* The parent cgroups of a broker on run dir (broker/bounds.c names them), once empty. */
static int
remove_broker_cgroups(const char *dir)
{
	static const char *const where[] = {"/sys/fs/cgroup/pids/sandcell",
					    "/sys/fs/cgroup/memory/sandcell", "/sys/fs/cgroup/sandcell"};
	unsigned long long h = 0xcbf29ce484222325ull;
	int removed = 0;

	for (const char *p = dir; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/broker-%016llx", where[i], h);
		removed += rmdir(path) == 0;
	}
	return removed;
}

/* Lease files (broker/uidlease.c) that name dir: its brokers are gone. */
static int
remove_leases(const char *dir)
{
	DIR *d = opendir("/run/sandcell-uids");
	struct dirent *de;
	char real[PATH_MAX], path[PATH_MAX + 300], held[PATH_MAX + 1];
	int removed = 0;

	if (!realpath(dir, real))
		snprintf(real, sizeof(real), "%s", dir);
	while (d && (de = readdir(d))) {
		int fd;
		ssize_t n;
		snprintf(path, sizeof(path), "/run/sandcell-uids/%s", de->d_name);
		if (de->d_name[0] == '.' || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		n = read(fd, held, sizeof(held) - 1);
		close(fd);
		held[n > 0 ? n : 0] = '\0';
		if (!strcmp(held, real) && unlink(path) == 0)
			removed++;
	}
	if (d)
		closedir(d);
	return removed;
}

/* mountinfo's fifth field (the mount point), its \ooo escapes undone, into out. */
static bool
mount_point(const char *line, char *out, size_t len)
{
	const char *f = line;
	size_t k = 0;

	for (int i = 0; i < 4 && f; i++)
		f = strchr(f, ' ') ? strchr(f, ' ') + 1 : NULL;
	for (; f && *f && *f != ' ' && k + 1 < len; f++)
		if (f[0] == '\\' && f[1] && f[2] && f[3]) {
			out[k++] = (char)((f[1] - '0') * 64 + (f[2] - '0') * 8 + (f[3] - '0'));
			f += 3;
		} else {
			out[k++] = *f;
		}
	out[k] = '\0';
	return f && k;
}

int
harness_unmount_below(const char *dir)
{
	char line[PATH_MAX * 2], point[PATH_MAX], *points[256];
	size_t n = strlen(dir), np = 0;
	FILE *f = fopen("/proc/self/mountinfo", "r");
	int done = 0;

	while (f && np < 256 && fgets(line, sizeof(line), f))
		if (mount_point(line, point, sizeof(point)) && !strncmp(point, dir, n) &&
		    (!point[n] || point[n] == '/'))
			points[np++] = strdup(point);
	if (f)
		fclose(f);
	/* the deepest first: a context's workspace under the server's */
	for (size_t i = np; i-- > 0;) {
		done += umount2(points[i], MNT_DETACH) == 0;
		free(points[i]);
	}
	return done;
}

static void
sweep_one(const char *dir)
{
	char ctx[PATH_MAX + 8], cmd[PATH_MAX * 3 + 48];
	int procs, cgroups = 0, leases;
	struct dirent *de;
	DIR *d;

	procs = kill_all_from(dir);
	snprintf(ctx, sizeof(ctx), "%s/ctx", dir);
	if ((d = opendir(ctx))) {
		while ((de = readdir(d)))
			if (de->d_name[0] != '.')
				cgroups += remove_cgroups(de->d_name);
		closedir(d);
	}
	cgroups += remove_broker_cgroups(dir);
	leases = remove_leases(dir);
	snprintf(ctx, sizeof(ctx), "%s.work", dir);
	int mounts = harness_unmount_below(ctx);
	if (procs || cgroups || leases || mounts)
		fprintf(stderr, "sweep: %s was left: %d processes killed, %d cgroups, %d lease "
			"files and %d workspace mounts removed\n", dir, procs, cgroups, leases,
			mounts);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s.work' '%s.work.img'", dir, dir, dir);
	if (system(cmd) != 0)
		fprintf(stderr, "sweep: could not remove %s\n", dir);
}

void
harness_sweep(void)
{
	char path[PATH_MAX], line[PATH_MAX];
	FILE *f;

	if (!list_path(path, sizeof(path)) || !(f = fopen(path, "r")))
		return;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '/') {
			sweep_one(line);
		} else if (!strncmp(line, "netns:", 6)) { /* (quiet when already gone) */
			char cmd[128];
			snprintf(cmd, sizeof(cmd), "ip netns del '%.60s' 2>/dev/null", line + 6);
			if (system(cmd) == 0)
				fprintf(stderr, "sweep: network namespace %s was left\n", line + 6);
		}
	}
	fclose(f);
	unlink(path);
}
