/*
 * bounds.c — what all of one broker's contexts may take together, so that
 * no number of them takes the machine: memory and processes in a parent
 * cgroup over every box's (its limit holds them all, whatever each one's
 * is), and the workspaces' size bounds, whose sum never passes a total (a
 * context whose bound does not fit in what is left is refused: 507).
 *
 * The parent cgroup is <cgroup_base>/broker-<hash of the run dir>: the same
 * for a broker restarted on its run dir (its kept contexts' boxes are in it),
 * another for another broker's. Each proxy makes its box's cgroups under it
 * (--cgroup-group, proxy/limits.c). Where no memory cgroup can be made (not
 * root, a container's read-only /sys/fs/cgroup) there is no such bound:
 * said at start and in GET /ready.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker.h"

static char group[32];      /* the parent cgroup's name; "" when there is none */
static uint64_t mem_total;  /* its memory limit, bytes; 0: none */
static uint64_t pids_total; /* its pids.max; 0: none */
static uint64_t ws_total;   /* the sum of the workspaces' bounds; 0: none */

/* The parent cgroup's name, for the proxies (--cgroup-group); NULL when there is none. */
const char *
bounds_group(void)
{
	return group[0] ? group : NULL;
}

/* Processes the machine can have: the least of pid_max and threads-max; 0 unknown. */
static uint64_t
machine_pids(void)
{
	static const char *const files[] = {"/proc/sys/kernel/pid_max",
	                                    "/proc/sys/kernel/threads-max"};
	uint64_t least = 0;

	for (size_t i = 0; i < 2; i++) {
		FILE *f = fopen(files[i], "re");
		unsigned long long v;
		if (f && fscanf(f, "%llu", &v) == 1 && v && (!least || v < least))
			least = v;
		if (f)
			fclose(f);
	}
	return least;
}

/* A name of the run dir's own: FNV-1a of its path. */
static void
name_group(void)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *p = cf->cf_run_dir; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	snprintf(group, sizeof(group), "broker-%016llx", (unsigned long long)h);
}

/* One limit on the parent cgroup of controller: 0, or -errno. */
static int
set_limit(const char *controller, const char *const files[2], uint64_t value)
{
	char *dir = cgroup_parent(controller, group), num[24];
	int rc = -ENOTSUP;

	if (!dir)
		return rc;
	snprintf(num, sizeof(num), "%llu", (unsigned long long)value);
	for (int i = 0; i < 2 && rc < 0 && files[i]; i++)
		rc = write_in_dir(dir, files[i], num);
	if (rc < 0)
		log_err("sandbox: cgroup %s: cannot bound all contexts together: %s", dir,
		        strerror(-rc));
	free(dir);
	return rc;
}

/*
 * At start, once the box is checked (box_check): the parent cgroup of the
 * boxes' and its limits. Memory: --total-memory, by default three quarters
 * of the machine's (the rest for the broker, its proxies and the system).
 * Processes: --total-pids, by default half of what the machine can have.
 * memory_cgroup: whether the boxes get memory cgroups here (box.c). NULL,
 * or what is missing for it, with in *how what would give it (box_lack).
 */
const char *
bounds_settle(bool memory_cgroup, const char **how)
{
	static const char *const mem_files[2] = {"memory.max", "memory.limit_in_bytes"};
	static const char *const pids_files[2] = {"pids.max", NULL};
	bool mem_off = cf->cf_total_memory_set && !cf->cf_total_memory;

	const char *lacks = NULL;

	if (!cf->cf_sandbox)
		return NULL;
	if (geteuid() != 0 || !memory_cgroup) {
		if (mem_off)
			return NULL;
		*how = geteuid() ? "run the broker as root"
				 : "a writable /sys/fs/cgroup with the memory controller";
		return "a memory bound on all contexts together (--total-memory): their sum may "
		       "take the machine's memory";
	}
	name_group();
	if (!mem_off) {
		uint64_t of = cgroup_machine_memory();
		mem_total = cf->cf_total_memory_set ? cf->cf_total_memory
		                                    : (of / 4 * 3) & ~((1ull << 20) - 1);
		if (set_limit("memory", mem_files, mem_total) < 0) {
			mem_total = 0;
			lacks = "a memory bound on all contexts together (--total-memory): their "
				"parent cgroup's limit could not be set";
			*how = "a writable /sys/fs/cgroup with the memory controller";
		} else {
			log_info("sandbox: all contexts together may use %llu MiB of "
			         "memory%s; "
			         "--total-memory changes it, 0 lifts it",
			         (unsigned long long)(mem_total >> 20),
			         cf->cf_total_memory_set
			             ? ""
			             : ", three quarters of the machine's");
		}
	}
	uint64_t pids = cf->cf_total_pids_set ? cf->cf_total_pids : machine_pids() / 2;
	if (pids && cgroup_usable("pids") && set_limit("pids", pids_files, pids) == 0)
		pids_total = pids;
	return lacks;
}

/*
 * A workspace's size bound when none is given (workspace_bound): shared,
 * the one workspace's, a quarter of the space free; --isolation context,
 * the total (--total-workspace-size, by default half the space free at
 * start) shared by as many contexts as --max-contexts allows, so that the
 * total refuses none of them (a larger --workspace-size fits fewer).
 */
uint64_t
bounds_workspace_default(uint64_t free_bytes)
{
	if (!cf->cf_isolated)
		return (free_bytes / 4) & ~((1ull << 20) - 1);
	uint64_t total =
	    cf->cf_total_workspace_set ? cf->cf_total_workspace : free_bytes / 2;
	uint64_t each = (total / (uint64_t)cf->cf_max_contexts) & ~((1ull << 20) - 1);
	return each < (16u << 20) ? 16u << 20 : each;
}

/* Once the workspace's bound is settled (workspace_bound): the total of them all. */
void
bounds_workspaces(void)
{
	ws_total = 0;
	if (!cf->cf_sandbox || !cf->cf_workspace_size)
		return; /* no bound on one, none on all (box.c said why) */
	if (!cf->cf_isolated) {
		ws_total = cf->cf_workspace_size; /* one filesystem for them all */
		return;
	}
	if (cf->cf_total_workspace_set && !cf->cf_total_workspace) {
		log_warn("--total-workspace-size 0: the contexts' workspaces together "
		         "have no bound");
		return;
	}
	ws_total = cf->cf_total_workspace_set
	               ? cf->cf_total_workspace
	               : (wsdisk_free(cf->cf_cwd) / 2) & ~((1ull << 20) - 1);
	if (ws_total < cf->cf_workspace_size)
		log_warn(
		    "the contexts' workspaces may hold %llu MiB together, less than one "
		    "context's %llu MiB: every context will be refused",
		    (unsigned long long)(ws_total >> 20),
		    (unsigned long long)(cf->cf_workspace_size >> 20));
	log_info("sandbox: the contexts' workspaces may hold %llu MiB together (%llu "
	         "contexts of "
	         "%llu MiB); --total-workspace-size changes it, 0 lifts it",
	         (unsigned long long)(ws_total >> 20),
	         (unsigned long long)(ws_total / cf->cf_workspace_size),
	         (unsigned long long)(cf->cf_workspace_size >> 20));
}

/* The workspaces' bounds held now: one per context that has a workspace of its own. */
static uint64_t
ws_held(void)
{
	const struct context *c;
	uint64_t n = 0;

	if (!cf->cf_isolated)
		return ws_total;
	CONTEXT_FOREACH(c)
	n += context_iso(c)->ci_workspace != NULL;
	return n * cf->cf_workspace_size;
}

/*
 * Before a context gets a workspace of its own (workspace_own): whether its
 * bound fits in what the others leave of the total. -ENOSPC (507) if not:
 * a context deleted gives its share back.
 */
int
bounds_workspace_room(char *err, size_t errsz)
{
	uint64_t held = ws_held(), size = cf->cf_workspace_size;

	if (!ws_total || !cf->cf_isolated || held + size <= ws_total)
		return 0;
	snprintf(
	    err, errsz,
	    "no room for another workspace of %llu MiB: the contexts' workspaces may "
	    "hold "
	    "%llu MiB together (--total-workspace-size) and %llu MiB are held; delete a "
	    "context first",
	    (unsigned long long)(size >> 20), (unsigned long long)(ws_total >> 20),
	    (unsigned long long)(held >> 20));
	return -ENOSPC;
}

/* GET /ready's sandbox.all_contexts: the bounds on all contexts together (0: none). */
json_t *
bounds_json(void)
{
	return json_pack("{s:I, s:I, s:I, s:I}", "memory_bytes", (json_int_t)mem_total,
	                 "pids", (json_int_t)pids_total, "workspace_bytes",
	                 (json_int_t)ws_total, "workspace_bytes_held",
	                 (json_int_t)ws_held());
}

/* A stop that ended every context: the parent cgroups go (not while a box is in one). */
void
bounds_release(void)
{
	static const char *const controllers[] = {"memory", "pids"};

	if (!group[0])
		return;
	for (size_t i = 0; i < 2; i++) {
		char *base = cgroup_base(controllers[i]), *dir;
		if (!base)
			continue;
		dir = xasprintf("%s/%s", base, group);
		rmdir(dir); /* v2: one for both; the second finds it gone */
		free(dir);
		free(base);
	}
}
