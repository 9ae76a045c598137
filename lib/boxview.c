/*
 * boxview.c — what a box shows of the host, by path: the system read-only
 * at its own paths, and the workspace at BOX_HOME. The proxy builds its
 * boxes' roots from it (boxroot.c); a tenant's path (a context's cwd) is
 * resolved in that view by boxpath.c, never on the host.
 */
#include <string.h>

#include "lib.h"

/* Shown read-only at their own paths (with /bin, /sbin, /lib* as the host has them). */
const char *const boxview_system[] = {"/usr", "/etc", NULL};

static bool
below(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return !strncmp(path, dir, n) && (path[n] == '/' || !path[n]);
}

bool
boxview_is_system(const char *path)
{
	for (const char *const *s = boxview_system; *s; s++)
		if (below(path, *s))
			return true;
	return false;
}
