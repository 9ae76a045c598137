/*
 * limits.c — per-kernel resource limits: RLIMIT_CPU for CPU time; for memory
 * RLIMIT_DATA (an allocation over it fails) unless the kernel has a memory
 * cgroup (--cgroup, or the sandbox's): then it gets a cgroup of its own (v2 memory.max, or
 * v1 memory.limit_in_bytes) so that going over the limit kills that kernel
 * alone, with its children, and the death is reported as out of memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proxy.h"

static int
write_file(const char *dir, const char *name, const char *value)
{
	char *path = xasprintf("%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC), rc = 0;

	if (fd < 0 || write(fd, value, strlen(value)) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	free(path);
	return rc;
}

/* Creates the kernel's cgroup and sets its memory limit (parent side). */
int
limits_prepare(struct proxy *px)
{
	char *limit;
	bool v2;
	int rc;

	if (!px->px_cgroup_parent || px->px_cgroup || !strcmp(px->px_cgroup_parent, "systemd"))
		return 0; /* systemd mode: systemd-run makes the scope (kernel.c) */
	px->px_cgroup = xasprintf("%s/sandcell-%s", px->px_cgroup_parent, px->px_id);
	if (mkdir(px->px_cgroup, 0755) < 0 && errno != EEXIST) {
		rc = -errno;
		log_err("context %s: cgroup %s: %s", px->px_id, px->px_cgroup, strerror(errno));
		free(px->px_cgroup);
		px->px_cgroup = NULL;
		return rc;
	}
	if (!px->px_mem_limit)
		return 0;
	limit = xasprintf("%llu", (unsigned long long)px->px_mem_limit);
	v2 = write_file(px->px_cgroup, "memory.max", limit) == 0;
	rc = v2 ? 0 : write_file(px->px_cgroup, "memory.limit_in_bytes", limit);
	if (v2)
		write_file(px->px_cgroup, "memory.swap.max", "0");
	free(limit);
	if (rc < 0)
		log_err("context %s: cgroup %s: cannot set a memory limit: %s", px->px_id,
			px->px_cgroup, strerror(-rc));
	return rc;
}

/* In the forked child, before exec: only async-signal-safe calls. */
void
limits_apply_child(struct proxy *px, const char *procs_path)
{
	/* a memory cgroup is the limit when there is one: V8 (Deno) reserves
	 * address space at start and dies under RLIMIT_DATA */
	if (px->px_mem_limit && !px->px_cgroup) {
		struct rlimit rl = {px->px_mem_limit, px->px_mem_limit};
		setrlimit(RLIMIT_DATA, &rl);
	}
	if (px->px_cpu_limit) {
		struct rlimit rl = {px->px_cpu_limit, px->px_cpu_limit + 5};
		setrlimit(RLIMIT_CPU, &rl);
	}
	if (procs_path) {
		char num[24], *p = num + sizeof(num);
		pid_t pid = getpid();
		*--p = '\0';
		do
			*--p = '0' + pid % 10;
		while ((pid /= 10));
		int fd = open(procs_path, O_WRONLY);
		if (fd >= 0) {
			if (write(fd, p, strlen(p)) < 0)
				_exit(125);
			close(fd);
		}
	}
}

/* The "oom_kill N" count in a cgroup file, or -1 if the file is not there. */
static long long
oom_kills(const char *dir, const char *file)
{
	char *path = xasprintf("%s/%s", dir, file), buf[256];
	FILE *f = fopen(path, "r");
	long long n = -1, v;

	while (f && fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "oom_kill %lld", &v) == 1)
			n = v;
	if (f)
		fclose(f);
	free(path);
	return n;
}

/* Did the cgroup's OOM killer act since the last call? (v2 memory.events, v1 oom_control) */
bool
limits_oom_killed(struct proxy *px)
{
	long long n;

	if (!px->px_cgroup)
		return false;
	if ((n = oom_kills(px->px_cgroup, "memory.events")) < 0)
		n = oom_kills(px->px_cgroup, "memory.oom_control");
	if (n <= (long long)px->px_oom_seen)
		return false;
	px->px_oom_seen = n;
	return true;
}

void
limits_cleanup(struct proxy *px)
{
	if (px->px_cgroup && rmdir(px->px_cgroup) < 0 && errno != ENOENT)
		log_warn("context %s: rmdir %s: %s", px->px_id, px->px_cgroup, strerror(errno));
}
