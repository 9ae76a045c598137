/*
 * boxview.c — what a box shows of the host, by path: the system read-only
 * at its own paths, and the workspace at BOX_HOME. The proxy builds its
 * boxes' roots from it (boxroot.c); a tenant's path (a context's cwd) is
 * resolved in that view by boxpath.c, never on the host.
 */
#include <limits.h>
#include <stdlib.h>
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

/* The host's links into /usr (or its directories), shown read-only as the system is. */
static const char *const boxview_links[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
					    NULL};

/* Which of the view's parts, as path names them, holds path; NULL if none. */
static const char *
part_of(const char *path, const char *workspace, const char *const *dirs, size_t ndirs)
{
	char real[PATH_MAX];

	for (const char *const *s = boxview_system; *s; s++)
		if (below(path, *s))
			return *s;
	for (const char *const *s = boxview_links; *s; s++)
		if (below(path, *s))
			return *s;
	if (workspace && (below(path, workspace) ||
			  (realpath(workspace, real) && below(path, real))))
		return workspace;
	for (size_t i = 0; i < ndirs; i++)
		if (dirs[i] && (below(path, dirs[i]) || (realpath(dirs[i], real) && below(path, real))))
			return dirs[i];
	return NULL;
}

/*
 * The part of a box's view (the system, the workspace, or one of dirs: what
 * a box binds for its kernel) that shows the host file path, by its name or
 * its real path; NULL if none does. A secret there (the access token) would
 * be in reach of every kernel, whatever covers the file: a rename over it
 * (a rotation) puts a new file in the cover's place.
 */
const char *
boxview_shows(const char *path, const char *workspace, const char *const *dirs, size_t ndirs)
{
	char real[PATH_MAX];
	const char *part = part_of(path, workspace, dirs, ndirs);

	if (!part && realpath(path, real))
		part = part_of(real, workspace, dirs, ndirs);
	return part;
}
