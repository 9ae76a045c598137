/*
 * cgroup.c — where the boxes' cgroups go (proxy/limits.c makes them), and
 * whether they can be made here at all: a container's /sys/fs/cgroup is
 * often read-only, and then a box gets no cgroup limit (broker/box.c says so
 * at start and turns the limits to what rlimits give).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib.h"

/*
 * Where this controller's per-box cgroups go: "sandcell" under the v1
 * hierarchy of that controller, or under the v2 root with the controller
 * enabled for its children (made if new). NULL when neither is usable.
 */
char *
cgroup_base(const char *controller)
{
	char *v1 = xasprintf("/sys/fs/cgroup/%s", controller), *base, buf[256] = "";
	struct stat st;
	int fd;

	if (stat(v1, &st) == 0 && S_ISDIR(st.st_mode)) {
		base = xasprintf("%s/sandcell", v1);
		free(v1);
		if (mkdir(base, 0755) < 0 && errno != EEXIST) {
			free(base);
			return NULL;
		}
		return base;
	}
	free(v1);
	if ((fd = open("/sys/fs/cgroup/cgroup.controllers", O_RDONLY | O_CLOEXEC)) < 0)
		return NULL;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	if (!strstr(buf, controller))
		return NULL;
	char *enable = xasprintf("+%s", controller);
	base = xstrdup("/sys/fs/cgroup/sandcell");
	if (write_in_dir("/sys/fs/cgroup", "cgroup.subtree_control", enable) < 0 ||
	    (mkdir(base, 0755) < 0 && errno != EEXIST) ||
	    write_in_dir(base, "cgroup.subtree_control", enable) < 0) {
		free(base);
		base = NULL;
	}
	free(enable);
	return base;
}

/* Whether a box's cgroup of controller can be made here: one made and removed. */
bool
cgroup_usable(const char *controller)
{
	char *base = cgroup_base(controller), *probe;
	bool ok;

	if (!base)
		return false;
	probe = xasprintf("%s/probe-%d", base, (int)getpid());
	ok = mkdir(probe, 0755) == 0 || errno == EEXIST;
	rmdir(probe);
	free(probe);
	free(base);
	return ok;
}

/*
 * The cgroup of controller that holds the per-box ones: group under
 * cgroup_base's (made if new, the controller enabled for its children on
 * v2), or cgroup_base's itself when group is NULL. NULL when it cannot be.
 */
char *
cgroup_parent(const char *controller, const char *group)
{
	char *base = cgroup_base(controller), *dir, *ctl, *enable;
	int rc = 0;

	if (!base || !group)
		return base;
	dir = xasprintf("%s/%s", base, group);
	free(base);
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		free(dir);
		return NULL;
	}
	ctl = xasprintf("%s/cgroup.subtree_control", dir); /* v2 only */
	enable = xasprintf("+%s", controller);
	if (access(ctl, F_OK) == 0)
		rc = write_in_dir(dir, "cgroup.subtree_control", enable);
	free(enable);
	free(ctl);
	if (rc < 0) {
		free(dir);
		return NULL;
	}
	return dir;
}

/* A limit file's number; 0 for none ("max", v1's "unlimited" near 2^63, unreadable). */
static uint64_t
limit_in(const char *dir, const char *file)
{
	char *path = xasprintf("%s/%s", dir, file), buf[32] = "";
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	unsigned long long v;

	if (fd >= 0)
		close(fd);
	free(path);
	buf[n > 0 ? n : 0] = '\0';
	if (sscanf(buf, "%llu", &v) != 1 || v >= (1ull << 62))
		return 0;
	return v;
}

/*
 * The memory limit this process is under: the least of its memory cgroup's
 * and its ancestors' (v2 memory.max, v1 memory.limit_in_bytes), as
 * /proc/self/cgroup names them (a container's root is its own cgroup); 0
 * for none.
 */
uint64_t
cgroup_memory_limit(void)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[512], path[PATH_MAX];
	uint64_t least = 0;

	while (f && fgets(line, sizeof(line), f)) {
		char *ctl = strchr(line, ':'), *rel = ctl ? strchr(ctl + 1, ':') : NULL;
		const char *file = "memory.limit_in_bytes",
		           *root = "/sys/fs/cgroup/memory";
		bool v1;
		if (!rel)
			continue;
		*rel++ = '\0';
		rel[strcspn(rel, "\n")] = '\0';
		v1 = !strcmp(ctl + 1, "memory") || strstr(ctl + 1, ",memory") ||
		     !strncmp(ctl + 1, "memory,", 7);
		if (!v1 && strcmp(ctl + 1, "")) /* another v1 controller's line */
			continue;
		if (!v1) {
			file = "memory.max";
			root = "/sys/fs/cgroup";
		}
		snprintf(path, sizeof(path), "%s%s", root, rel);
		for (;;) { /* and its ancestors', up to the hierarchy's root */
			uint64_t v = limit_in(path, file);
			char *end = strrchr(path, '/');
			if (v && (!least || v < least))
				least = v;
			if (!strcmp(path, root) || !end || end == path)
				break;
			*end = '\0';
		}
	}
	if (f)
		fclose(f);
	return least;
}
