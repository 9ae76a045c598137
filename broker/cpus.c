/*
 * cpus.c — how many CPUs the broker and its kernels can keep busy:
 * --max-starting's default. The CPUs of the broker's affinity mask, or
 * fewer when a cgroup of it has a CPU quota (a container's CPU limit):
 * cgroup v2's cpu.max ("QUOTA PERIOD" or "max PERIOD"), v1's
 * cpu.cfs_quota_us over cpu.cfs_period_us (-1: none). The quota of every
 * cgroup from the broker's own up to the hierarchy's root bounds it; the
 * least counts, rounded up (1.5 CPUs: 2).
 *
 * /proc/self/cgroup names the cgroup from the hierarchy's root. In a
 * container without a cgroup namespace that path is the host's, and its
 * /sys/fs/cgroup shows the container's own cgroup as the root: when the
 * path is not there, the root's quota is the one read.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker.h"

/* The file's text (at most cap - 1 bytes), or "" when it cannot be read. */
static void
read_text(const char *path, char *out, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, out, cap - 1) : -1;

	out[n > 0 ? n : 0] = '\0';
	if (fd >= 0)
		close(fd);
}

static void
read_line(const char *path, char *out, size_t cap)
{
	read_text(path, out, cap);
	out[strcspn(out, "\n")] = '\0';
}

/* ceil(quota / period), or 0 for no quota (or text that is not one). */
static int
quota_cpus(const char *quota, const char *period)
{
	char *end;
	long long q = strtoll(quota, &end, 10), p;

	if (end == quota || *end || q <= 0)
		return 0; /* "max", -1, "" */
	p = strtoll(period, &end, 10);
	if (end == period || *end || p <= 0)
		return 0;
	long long n = q / p + (q % p != 0);
	return n > 1 << 20 ? 1 << 20 : (int)n;
}

/* The quota (in CPUs, 0: none) set on one cgroup directory. */
static int
dir_cpus(const char *dir, bool v2)
{
	char a[64], b[64];
	char *path;

	if (v2) {
		path = xasprintf("%s/cpu.max", dir);
		read_line(path, a, sizeof(a));
		free(path);
		char *sp = strchr(a, ' ');
		if (!sp)
			return 0;
		*sp = '\0';
		return quota_cpus(a, sp + 1);
	}
	path = xasprintf("%s/cpu.cfs_quota_us", dir);
	read_line(path, a, sizeof(a));
	free(path);
	path = xasprintf("%s/cpu.cfs_period_us", dir);
	read_line(path, b, sizeof(b));
	free(path);
	return quota_cpus(a, b);
}

/* The least quota from base + rel up to base (0: none). */
static int
walk_cpus(const char *base, const char *rel, bool v2)
{
	char *dir = xasprintf("%s%s", base, rel);
	size_t root = strlen(base);
	struct stat st;
	int least = 0;

	if (stat(dir, &st) != 0) /* the host's path, in a container: its root is ours */
		dir[root] = '\0';
	for (;;) {
		int n = dir_cpus(dir, v2);
		if (n > 0 && (!least || n < least))
			least = n;
		char *slash = strrchr(dir + root, '/');
		if (!slash)
			break;
		*slash = '\0';
	}
	free(dir);
	return least;
}

int
cpus_quota(const char *proc_cgroup, const char *root)
{
	char *text = xstrdup(proc_cgroup), *save = NULL, *line;
	int least = 0;

	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		/* ID:CONTROLLERS:PATH; v2's is "0::PATH" */
		char *c = strchr(line, ':'), *p = c ? strchr(c + 1, ':') : NULL, *base;
		bool v2;
		if (!p || p[1] != '/')
			continue;
		*p = '\0';
		v2 = c + 1 == p && strncmp(line, "0:", 2) == 0;
		if (v2) {
			/* the unified hierarchy at the root (not hybrid's .../unified, which has no cpu) */
			char *probe = xasprintf("%s/cgroup.controllers", root);
			bool unified = access(probe, F_OK) == 0;
			free(probe);
			if (!unified)
				continue;
			base = xstrdup(root);
		} else {
			char *ctl, *s2 = NULL;
			bool cpu = false;
			for (ctl = strtok_r(c + 1, ",", &s2); ctl; ctl = strtok_r(NULL, ",", &s2))
				cpu |= strcmp(ctl, "cpu") == 0;
			if (!cpu)
				continue;
			base = xasprintf("%s/cpu", root);
		}
		int n = walk_cpus(base, strcmp(p + 1, "/") == 0 ? "" : p + 1, v2);
		free(base);
		if (n > 0 && (!least || n < least))
			least = n;
	}
	free(text);
	return least;
}

int
cpus_usable(int *quota)
{
	cpu_set_t set;
	char text[4096];
	int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;

	read_text("/proc/self/cgroup", text, sizeof(text));
	*quota = cpus_quota(text, "/sys/fs/cgroup");
	return *quota > 0 && *quota < n ? *quota : n;
}
