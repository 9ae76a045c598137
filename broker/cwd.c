/*
 * cwd.c — whether kernels can start in a directory: an absolute path to a
 * directory that the uid kernels run as (boxuid_kernel(): the sandbox's, or
 * --kernel-user's) can enter. The check runs in a child that takes that
 * uid's ids, so the kernel's own rules (modes, ACLs, groups) decide, not a
 * copy; a request naming one it cannot enter is refused before any kernel is
 * started for it. A boxed context's cwd is a path of its box, resolved there
 * (lib/boxpath.c), never on the host: the answer tells nothing of the host.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker.h"

/* The ids a kernel of uid runs with, taken in a child (as_kernel). */
struct ids {
	uid_t i_uid; /* (uid_t)-1: ours */
	gid_t i_gid, i_groups[256];
	int i_ngroups;
	char i_who[96]; /* for errors: "user nobody" */
};

static void
ids_of(uid_t uid, struct ids *id)
{
	struct passwd *pw;

	id->i_uid = uid;
	id->i_gid = uid;
	id->i_ngroups = 0;
	snprintf(id->i_who, sizeof(id->i_who), "the kernels' uid %u", (unsigned)uid);
	if (uid == (uid_t)-1)
		snprintf(id->i_who, sizeof(id->i_who), "the kernels' user");
	else if ((pw = getpwuid(uid))) { /* an account's groups count (--kernel-user) */
		id->i_ngroups = sizeof(id->i_groups) / sizeof(id->i_groups[0]);
		id->i_gid = pw->pw_gid;
		if (getgrouplist(pw->pw_name, pw->pw_gid, id->i_groups, &id->i_ngroups) <
		    0)
			id->i_ngroups = 0;
		snprintf(id->i_who, sizeof(id->i_who), "user %s", pw->pw_name);
	}
}

/*
 * fn(arg) run in a child that took id's ids as the proxy starts a kernel
 * (groups, gid, uid): 0, or the errno it gave (positive), or -EPERM / -EIO
 * with err saying the check itself failed.
 */
static int
as_kernel(const struct ids *id, int (*fn)(const void *), const void *arg, char *err,
          size_t errsz)
{
	int status;
	pid_t pid;

	if ((pid = fork()) < 0) {
		int e = errno;
		return snprintf(err, errsz, "fork: %s", strerror(e)), -e;
	}
	if (pid == 0) {
		if (id->i_uid != (uid_t)-1 &&
		    (setgroups(id->i_ngroups, id->i_groups) < 0 ||
		     setgid(id->i_gid) < 0 || setuid(id->i_uid) < 0))
			_exit(255);
		_exit(fn(arg));
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return snprintf(err, errsz, "waitpid: %s", strerror(errno)), -EIO;
	if (!WIFEXITED(status) || WEXITSTATUS(status) == 255)
		return snprintf(err, errsz,
		                "could not take the ids of uid %u to check it",
		                (unsigned)id->i_uid),
		       -EPERM;
	return WEXITSTATUS(status);
}

static int
enter(const void *fd)
{
	return fchdir(*(const int *)fd) < 0 ? errno : 0;
}

/*
 * 0, or a negative errno with err saying why dir (a host path: the
 * operator's, or a client's without the sandbox) cannot be the cwd of a
 * kernel running as uid ((uid_t)-1: as we do).
 */
int
cwd_check(const char *dir, uid_t uid, char *err, size_t errsz)
{
	struct ids id;
	struct stat st;
	int e, fd;

	if (dir[0] != '/')
		return snprintf(err, errsz, "not an absolute path"), -EINVAL;
	if (strlen(dir) >= PROTO_MAX_NAME)
		return snprintf(err, errsz, "longer than %u bytes", PROTO_MAX_NAME - 1),
		       -ENAMETOOLONG;
	if (stat(dir, &st) < 0) {
		e = errno;
		return snprintf(err, errsz, "%s", strerror(e)), -e;
	}
	if (!S_ISDIR(st.st_mode))
		return snprintf(err, errsz, "not a directory"), -ENOTDIR;
	if (uid == (uid_t)-1) {
		if (access(dir, X_OK) == 0)
			return 0;
		e = errno;
		return snprintf(err, errsz, "cannot enter it: %s", strerror(e)), -e;
	}
	/*
	 * The box shows the directory at its path on directories of its own:
	 * what the kernel needs is to enter the directory itself, reached here
	 * through a descriptor of ours, not through the host's parents.
	 */
	if ((fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
		e = errno;
		return snprintf(err, errsz, "%s", strerror(e)), -e;
	}
	ids_of(uid, &id);
	e = as_kernel(&id, enter, &fd, err, errsz);
	close(fd);
	if (e > 0)
		return snprintf(err, errsz, "%s cannot enter it: %s", id.i_who,
		                strerror(e)),
		       -e;
	return e;
}

struct in_box {
	const struct boxpath_view *ib_view;
	const char *ib_cwd;
};

/* In the child, as the kernel: the cwd resolved in its box's view, and entered. */
static int
enter_in_box(const void *arg)
{
	const struct in_box *ib = arg;
	struct stat st;
	int fd, rc;

	if ((rc = boxpath_open(ib->ib_view, ib->ib_cwd, 0, &fd, NULL, 0)) < 0)
		return -rc;
	if (fd < 0) /* a directory of the box's own (/tmp): open to all */
		return 0;
	rc = fstat(fd, &st) < 0 ? errno : !S_ISDIR(st.st_mode) ? ENOTDIR : enter(&fd);
	close(fd);
	return rc;
}

/*
 * Whether cwd, a path of the box's view, is a directory a kernel of uid can
 * enter in a box of workspace (NULL: one not made yet, empty): resolved as
 * that uid, in that view (lib/boxpath.c), never on the host. Whatever the
 * host holds, a path the box does not show reads the same.
 */
static int
cwd_in_box(uid_t uid, const char *workspace, const char *cwd, char *why, size_t whysz)
{
	struct boxpath_view v;
	struct ids id;
	int rc;

	if (strlen(cwd) >= PROTO_MAX_NAME)
		return snprintf(why, whysz, "longer than %u bytes", PROTO_MAX_NAME - 1),
		       -ENAMETOOLONG;
	if ((rc = boxpath_view_open(&v, workspace)) < 0)
		return snprintf(why, whysz, "the box's view: %s", strerror(-rc)), rc;
	ids_of(uid, &id);
	rc = as_kernel(&id, enter_in_box, &(struct in_box){&v, cwd}, why, whysz);
	boxpath_view_close(&v);
	if (rc <= 0)
		return rc;
	if (rc == ENOENT)
		snprintf(why, whysz,
		         "not in the context's box, which shows %s (the workspace), "
		         "/tmp, /usr "
		         "and /etc",
		         BOX_HOME);
	else if (rc == EINVAL)
		snprintf(why, whysz, "not an absolute path");
	else if (rc == ENOTDIR)
		snprintf(why, whysz, "not a directory");
	else if (rc == EACCES || rc == EPERM)
		snprintf(why, whysz, "%s cannot enter it: %s", id.i_who, strerror(rc));
	else
		snprintf(why, whysz, "%s", strerror(rc));
	return -rc;
}

/*
 * Whether cwd, as a client gave it, can be a context's whose kernels run as
 * uid with workspace (boxuid_kernel(), workspace_of(); NULL: a
 * context's own, not made yet): boxed, a path of the box's view that uid can
 * enter there (cwd_in_box); unboxed, a host directory it can enter. err says
 * why not.
 */
int
cwd_usable(uid_t uid, const char *workspace, const char *cwd, char *err, size_t errsz)
{
	char why[320];
	int rc;

	if (!cf->cf_sandbox)
		rc = cwd_check(cwd, uid, why, sizeof(why));
	else
		rc = cwd_in_box(uid, workspace, cwd, why, sizeof(why));
	if (rc < 0)
		snprintf(err, errsz, "cwd '%.256s' cannot be used: %s", cwd, why);
	return rc;
}
