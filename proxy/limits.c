/*
 * limits.c — what a box may use: processes (pids.max) and memory in a cgroup
 * of its own, CPU time as RLIMIT_CPU. On cgroup v2 one cgroup holds both
 * controllers (a process is in one cgroup of the one hierarchy); on v1 each
 * controller's hierarchy has one. Where no pids cgroup can be made (a
 * container's read-only /sys/fs/cgroup, or not root) the process limit is
 * RLIMIT_NPROC of the kernel's uid. A kernel over its memory is killed alone,
 * with its children, and its death is told as out of memory. Without a
 * memory cgroup (not root, no controller) the memory limit is RLIMIT_DATA,
 * under which V8 cannot start. Unboxed kernels get a memory cgroup under
 * the spec's cgroup directory, or none.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proxy.h"

/* The box's cgroup of controller (made if new, listed in bx_cg), or NULL. */
static char *
box_cgroup(struct box *bx, const char *controller)
{
	char *base, *dir;

	if (!strcmp(controller, "memory") && bx->bx_cg_parent)
		dir = xasprintf("%s/sandcell-%s", bx->bx_cg_parent, bx->bx_id);
	else if ((base = cgroup_parent(controller, bx->bx_cg_group))) {
		dir = xasprintf("%s/%s", base, bx->bx_id);
		free(base);
	} else {
		log_err("context %s: no %s cgroup controller for the box's limit", bx->bx_id,
			controller);
		return NULL;
	}
	for (int i = 0; i < 2; i++)
		if (bx->bx_cg[i] && !strcmp(bx->bx_cg[i], dir)) {
			free(dir);
			return bx->bx_cg[i]; /* v2: one cgroup for both */
		}
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		log_err("context %s: cgroup %s: %s", bx->bx_id, dir, strerror(errno));
		free(dir);
		return NULL;
	}
	bx->bx_cg[bx->bx_cg[0] ? 1 : 0] = dir;
	return dir;
}

/*
 * The box's cgroups, made before its first kernel starts (parent side): the
 * process limit for a root box, the memory limit where a cgroup can hold it.
 */
int
limits_prepare(struct box *bx)
{
	bool own = bx->bx_on && !bx->bx_userns; /* root's box: cgroups of its own */
	char num[24], *dir;
	int rc;

	if (bx->bx_cg[0])
		return 0; /* made for an earlier kernel */
	/* probed once per proxy: a kernel's restart finds bx_nproc set (the broker said so at start) */
	if (own && bx->bx_pids && !bx->bx_nproc && !cgroup_usable("pids"))
		bx->bx_nproc = bx->bx_pids;
	if (own && bx->bx_pids && !bx->bx_nproc) {
		if (!(dir = box_cgroup(bx, "pids")))
			return -ENOTSUP;
		snprintf(num, sizeof(num), "%llu", (unsigned long long)bx->bx_pids);
		if ((rc = write_in_dir(dir, "pids.max", num)) < 0) {
			log_err("context %s: cgroup %s: pids.max: %s", bx->bx_id, dir, strerror(-rc));
			return rc;
		}
	}
	if (!bx->bx_mem || !(own || (bx->bx_cg_parent && strcmp(bx->bx_cg_parent, "systemd"))))
		return 0; /* RLIMIT_DATA (limits_apply_child), or systemd's scope (kernel.c) */
	if (!(dir = box_cgroup(bx, "memory"))) {
		log_warn("context %s: the memory limit is RLIMIT_DATA (Deno cannot start under it)",
			 bx->bx_id);
		return 0;
	}
	snprintf(num, sizeof(num), "%llu", (unsigned long long)bx->bx_mem);
	/* no swap beyond it: where the machine has swap, it would page instead of stopping */
	if ((rc = write_in_dir(dir, "memory.max", num)) == 0)
		write_in_dir(dir, "memory.swap.max", "0");
	else if ((rc = write_in_dir(dir, "memory.limit_in_bytes", num)) == 0)
		write_in_dir(dir, "memory.memsw.limit_in_bytes", num); /* absent without swap accounting */
	if (rc < 0) {
		log_err("context %s: cgroup %s: cannot set a memory limit: %s", bx->bx_id, dir,
			strerror(-rc));
		return rc;
	}
	bx->bx_cg_mem = dir;
	return 0;
}

/* pid into the box's cgroups; raw calls only (also in a forked child, for itself). */
int
limits_join(const struct box *bx, pid_t pid)
{
	char path[PATH_MAX], num[24], *p = num + sizeof(num);

	*--p = '\0';
	do
		*--p = '0' + pid % 10;
	while ((pid /= 10));
	for (int i = 0; i < 2 && bx->bx_cg[i]; i++) {
		size_t n = strlen(bx->bx_cg[i]);
		if (n + sizeof("/cgroup.procs") > sizeof(path))
			return -ENAMETOOLONG;
		memcpy(path, bx->bx_cg[i], n);
		memcpy(path + n, "/cgroup.procs", sizeof("/cgroup.procs"));
		int rc = write_text(path, p);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* In the kernel's process (or its box's init), before exec: the rlimits. */
void
limits_apply_child(const struct box *bx)
{
	/* a memory cgroup is the limit when there is one: V8 (Deno) reserves
	 * address space at start and dies under RLIMIT_DATA */
	if (bx->bx_mem && !bx->bx_cg_mem) {
		struct rlimit rl = {bx->bx_mem, bx->bx_mem};
		setrlimit(RLIMIT_DATA, &rl);
	}
	if (bx->bx_cpu) {
		struct rlimit rl = {bx->bx_cpu, bx->bx_cpu + 5};
		setrlimit(RLIMIT_CPU, &rl);
	}
	/* no pids cgroup: the processes of its uid (of its user namespace, if any) */
	if (bx->bx_nproc) {
		struct rlimit rl = {bx->bx_nproc, bx->bx_nproc};
		setrlimit(RLIMIT_NPROC, &rl);
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
limits_oom_killed(struct box *bx)
{
	long long n;

	if (!bx->bx_cg_mem)
		return false;
	if ((n = oom_kills(bx->bx_cg_mem, "memory.events")) < 0)
		n = oom_kills(bx->bx_cg_mem, "memory.oom_control");
	if (n <= (long long)bx->bx_oom_seen)
		return false;
	bx->bx_oom_seen = n;
	return true;
}

void
limits_cleanup(struct box *bx)
{
	for (int i = 0; i < 2 && bx->bx_cg[i]; i++)
		if (rmdir(bx->bx_cg[i]) < 0 && errno != ENOENT)
			log_warn("context %s: rmdir %s: %s", bx->bx_id, bx->bx_cg[i],
				 strerror(errno));
}
