/*
 * boxview.c — what a box shows of the host, by path: the system read-only
 * at its own paths, the workspace at BOX_HOME and its BOX_ROOT_DIR at
 * BOX_ROOT. The proxy builds its boxes' roots from it (boxroot.c); a
 * tenant's path (a context's cwd) is resolved in that view by boxpath.c,
 * never on the host.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/*
 * The workspace's BOX_ROOT_DIR (home: a descriptor of the workspace), which a
 * box shows at BOX_ROOT: made if absent (0700, uid's), never followed if a
 * link. An O_PATH descriptor of it, or -ENOTDIR when the tenant put
 * something else there (its box then has an empty read-only BOX_ROOT), or
 * -errno. Inside the workspace, it is within the workspace's size bound and
 * kept with it. Called by a box's init (root, or root of its user namespace).
 */
int
boxview_root_open(int home, uid_t uid, gid_t gid)
{
	struct stat st;
	int fd, made = mkdirat(home, BOX_ROOT_DIR, 0700) == 0, e;

	if (!made && errno != EEXIST)
		return -errno;
	if ((fd = openat(home, BOX_ROOT_DIR,
	                 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return errno == ELOOP ? -ENOTDIR : -errno;
	/* made by us: the tenant's (one swapped in meanwhile was theirs anyway) */
	if (fstat(fd, &st) < 0 ||
	    (made && st.st_uid != uid && fchown(fd, uid, gid) < 0)) {
		e = errno;
		close(fd);
		return -e;
	}
	return fd;
}
