/*
 * boxpath.c — a path a tenant names, resolved as its box would resolve it,
 * and never on the host: each step is looked up below the host directory the
 * box shows there (openat2 RESOLVE_BENEATH, no symbolic link followed by the
 * kernel), and a symbolic link's text is read and followed here, against the
 * box's root. ".." and an absolute link go where they go in the box; what the
 * box does not show is -ENOENT, whatever the host holds at that path. The
 * caller's credentials are the ones each lookup is checked against: call it
 * as the tenant's uid (a child that took its ids) to resolve as the tenant.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib.h"

#define BOXPATH_MAX_LINKS 40 /* the kernel's own bound (MAXSYMLINKS) */

static void
add(struct boxpath_view *v, const char *path, int fd)
{
	if (v->bv_n < BOXPATH_MAX_MOUNTS)
		v->bv_mounts[v->bv_n++] = (struct boxpath_mount){path, fd};
}

/* The workspace's BOX_ROOT_DIR, a directory beneath it and no link, or -1 (none yet). */
static int
root_of(int home)
{
	struct open_how how = {
	    .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd = syscall(SYS_openat2, home, BOX_ROOT_DIR, &how, sizeof(how));

	return fd < 0 ? -1 : fd;
}

/*
 * The view a box of this workspace shows a tenant's paths (boxview.c): the
 * workspace at BOX_HOME, its BOX_ROOT_DIR at BOX_ROOT (an empty directory
 * until a box made it), the system read-only at its own paths, and /tmp, the
 * box's own, empty when its kernel starts. workspace NULL: one not made yet
 * (an empty directory). 0, or -errno when a part cannot be opened.
 */
int
boxpath_view_open(struct boxpath_view *v, const char *workspace)
{
	int fd;

	v->bv_n = 0;
	if (workspace && (fd = open(workspace, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	add(v, BOX_HOME, workspace ? fd : -1);
	add(v, BOX_ROOT, workspace ? root_of(fd) : -1);
	add(v, "/tmp", -1);
	for (const char *const *s = boxview_system; *s; s++) {
		if ((fd = open(*s, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
			int e = errno;
			boxpath_view_close(v);
			return -e;
		}
		add(v, *s, fd);
	}
	return 0;
}

/*
 * The view of a live box: its whole root, rootfd (an O_PATH descriptor of
 * /proc/<a pid of the box>/root, opened by who may), taken over by v; its
 * own /tmp and mounts as they are now.
 */
void
boxpath_view_root(struct boxpath_view *v, int rootfd)
{
	v->bv_n = 0;
	add(v, "/", rootfd);
}

void
boxpath_view_close(struct boxpath_view *v)
{
	for (size_t i = 0; i < v->bv_n; i++)
		if (v->bv_mounts[i].bm_fd >= 0)
			close(v->bv_mounts[i].bm_fd);
	v->bv_n = 0;
}

/* Whether path (canonical) is dir or below it. */
static bool
below(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (!strcmp(dir, "/"))
		return true;
	return !strncmp(path, dir, n) && (path[n] == '/' || !path[n]);
}

/*
 * What the box shows at path (canonical, no symbolic link in it, "/" for the
 * root), not following a link there: *fd an O_PATH descriptor of the host's
 * file (-1 and *st a directory: one of the box's own), *st its status.
 */
static int
lookup(const struct boxpath_view *v, const char *path, int *fd, struct stat *st)
{
	const struct boxpath_mount *m = NULL;
	size_t best = 0;

	*fd = -1;
	for (size_t i = 0; i < v->bv_n; i++) {
		size_t n = strlen(v->bv_mounts[i].bm_path);
		if (below(path, v->bv_mounts[i].bm_path) && (!m || n > best))
			m = &v->bv_mounts[i], best = n;
	}
	if (m &&
	    m->bm_fd >= 0) { /* below a host directory: looked up there, beneath it */
		const char *rel = path + (strcmp(m->bm_path, "/") ? best : 0);
		struct open_how how = {
		    .flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
		    .resolve =
		        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
		};
		while (*rel == '/')
			rel++;
		if ((*fd = syscall(SYS_openat2, m->bm_fd, *rel ? rel : ".", &how,
		                   sizeof(how))) < 0)
			return errno == EXDEV || errno == ELOOP ? -ENOENT : -errno;
		if (fstat(*fd, st) < 0) {
			int e = errno;
			close(*fd);
			*fd = -1;
			return -e;
		}
		return 0;
	}
	/* a directory of the box's own: the root, /home, /tmp; or the way to a part */
	memset(st, 0, sizeof(*st));
	st->st_mode = S_IFDIR | 0755;
	if (m && !strcmp(path, m->bm_path))
		return 0;
	for (size_t i = 0; i < v->bv_n; i++)
		if (below(v->bv_mounts[i].bm_path, path) &&
		    (!m || below(v->bv_mounts[i].bm_path, m->bm_path)))
			return 0;
	return -ENOENT;
}

/* Drops cur's last component ("/" stays). */
static void
up(char *cur)
{
	char *s = strrchr(cur, '/');

	if (s == cur)
		cur[1] = '\0';
	else if (s)
		*s = '\0';
}

/*
 * path (absolute, in the box) resolved in view v as the box would, with the
 * caller's credentials. 0 and *fd an O_PATH descriptor of what it names (the
 * caller closes it), or -1: a directory of the box's own with nothing of the
 * host's (its root, /home, /tmp); real (if not NULL) its path in the box with
 * no link or "." or ".." in it. BOXPATH_NOFOLLOW: a link last is not followed.
 * Or -EINVAL (not absolute), -ENOENT (nothing there in the box), -ENOTDIR,
 * -ELOOP, -ENAMETOOLONG, -EACCES: what the box would answer.
 */
int
boxpath_open(const struct boxpath_view *v, const char *path, unsigned flags, int *fd,
             char *real, size_t realsz)
{
	char cur[PATH_MAX] = "/", rest[PATH_MAX], next[PATH_MAX], link[PATH_MAX];
	int links = 0, rc = 0, f = -1;
	bool stale =
	    true; /* f and st are not cur's (cur moved up, or nothing looked up) */
	struct stat st = {.st_mode = S_IFDIR};

	*fd = -1;
	if (path[0] != '/')
		return -EINVAL;
	if (snprintf(rest, sizeof(rest), "%s", path) >= (int)sizeof(rest))
		return -ENAMETOOLONG;
	for (char *p = rest; rc == 0;) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		char *end = strchrnul(p, '/');
		/* the last name; one followed by a slash must be a directory */
		bool last = !end[strspn(end, "/")], dir = *end == '/';
		if (*end)
			*end++ = '\0';
		if (!S_ISDIR(st.st_mode)) {
			rc = -ENOTDIR;
		} else if (!strcmp(p, ".") || !strcmp(p, "..")) {
			if (p[1])
				up(cur);
			stale = true;
			p = end;
		} else if (snprintf(next, sizeof(next), "%s%s%s", cur,
		                    strcmp(cur, "/") ? "/" : "",
		                    p) >= (int)sizeof(next)) {
			rc = -ENAMETOOLONG;
		} else {
			if (f >= 0)
				close(f);
			stale = false;
			if ((rc = lookup(v, next, &f, &st)) < 0)
				break;
			if (!S_ISLNK(st.st_mode) ||
			    (last && !dir && (flags & BOXPATH_NOFOLLOW))) {
				memcpy(cur, next, strlen(next) + 1);
				p = end;
				if (last && dir && !S_ISDIR(st.st_mode))
					rc = -ENOTDIR;
				continue;
			}
			/* a link: its text, then what followed it, from cur (or the root)
			 */
			ssize_t k = readlinkat(f, "", link, sizeof(link) - 1);
			if (k < 0) {
				rc = -errno;
				break;
			}
			link[k] = '\0';
			if (++links > BOXPATH_MAX_LINKS) {
				rc = -ELOOP;
				break;
			}
			if (snprintf(next, sizeof(next), "%s%s%s", link, dir ? "/" : "",
			             end) >= (int)sizeof(next)) {
				rc = -ENAMETOOLONG;
				break;
			}
			memcpy(rest, next, strlen(next) + 1);
			if (link[0] == '/')
				snprintf(cur, sizeof(cur), "/");
			stale = true;
			st.st_mode = S_IFDIR; /* cur is a directory */
			p = rest;
		}
	}
	if (rc == 0 && stale) {
		if (f >= 0)
			close(f);
		rc = lookup(v, cur, &f, &st);
	}
	if (rc == 0 && real && snprintf(real, realsz, "%s", cur) >= (int)realsz)
		rc = -ENAMETOOLONG;
	if (rc < 0) {
		if (f >= 0)
			close(f);
		return rc;
	}
	*fd = f;
	return 0;
}

/*
 * An O_PATH descriptor of boxpath_open's opened for reading or writing
 * (flags: O_RDONLY, O_WRONLY, O_RDWR, O_DIRECTORY, O_TRUNC; no O_CREAT: make
 * a file with openat(an O_PATH descriptor of its directory, its name,
 * O_CREAT | O_EXCL | O_NOFOLLOW)), the caller's credentials checked again.
 * The new descriptor, or -errno (-ELOOP for a link).
 */
int
boxpath_reopen(int fd, int flags)
{
	char p[32];
	int r;

	if (flags & O_CREAT)
		return -EINVAL;
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	return (r = open(p, flags | O_CLOEXEC)) < 0 ? -errno : r;
}
