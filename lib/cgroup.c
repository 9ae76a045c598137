/*
 * cgroup.c — where the boxes' cgroups go (proxy/limits.c makes them), and
 * whether they can be made here at all: a container's /sys/fs/cgroup is
 * often read-only, and then a box gets no cgroup limit (broker/box.c says so
 * at start and turns the limits to what rlimits give).
 */
#include <errno.h>
#include <fcntl.h>
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
