/*
 * boxview.c — what a box shows of the host, by path: the system read-only
 * at its own paths, and the workspace at BOX_HOME. The proxy builds its
 * boxes' roots from it (boxroot.c); the broker checks a context's cwd, a
 * path of that view, against it.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
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

/* Whether a component of path is "." or "..". */
static bool
climbs(const char *path)
{
	for (const char *p = path; (p = strchr(p, '/')); p++)
		if (p[1] == '.' && (!p[2] || p[2] == '/' || (p[2] == '.' && (!p[3] || p[3] == '/'))))
			return true;
	return false;
}

bool
boxview_is_system(const char *path)
{
	for (const char *const *s = boxview_system; *s; s++)
		if (below(path, *s))
			return true;
	return false;
}

/*
 * Where path (absolute, in a box) is on the host: below BOX_HOME, the
 * workspace; a system part, itself; /tmp, none (the box's own, empty when a
 * kernel starts: *out is ""). -ENOENT for a path the box does not show,
 * -EINVAL for one that is not absolute or climbs with "..".
 */
int
boxview_host_path(const char *workspace, const char *path, char *out, size_t outsz)
{
	if (path[0] != '/' || climbs(path))
		return -EINVAL;
	if (below(path, BOX_HOME))
		return snprintf(out, outsz, "%s%s", workspace, path + strlen(BOX_HOME)) < (int)outsz
			       ? 0
			       : -ENAMETOOLONG;
	if (!strcmp(path, "/tmp")) {
		*out = '\0';
		return 0;
	}
	if (boxview_is_system(path))
		return snprintf(out, outsz, "%s", path) < (int)outsz ? 0 : -ENAMETOOLONG;
	return -ENOENT;
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
