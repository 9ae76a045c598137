/*
 * cwd.c — whether kernels can start in a directory: an absolute path to a
 * directory that the uid kernels run as (box_kernel_uid(): the sandbox's, or
 * --kernel-user's) can enter. The check runs in a child that takes that
 * uid's ids, so the kernel's own rules (modes, ACLs, groups) decide, not a
 * copy; a request naming one it cannot enter is refused before any kernel is
 * started for it.
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

/*
 * 0, or a negative errno with err saying why dir cannot be the cwd of a kernel
 * running as uid ((uid_t)-1: as we do).
 */
int
cwd_check(const char *dir, uid_t uid, char *err, size_t errsz)
{
	gid_t groups[256], gid = uid;
	char who[96];
	int ngroups = 0, status, e, fd;
	struct passwd *pw;
	struct stat st;
	pid_t pid;

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
	if ((pw = getpwuid(uid))) { /* an account's groups count (--kernel-user) */
		ngroups = sizeof(groups) / sizeof(groups[0]);
		gid = pw->pw_gid;
		if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &ngroups) < 0)
			ngroups = 0;
		snprintf(who, sizeof(who), "user %s", pw->pw_name);
	} else {
		snprintf(who, sizeof(who), "the kernels' uid %u", (unsigned)uid);
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
	if ((pid = fork()) < 0) {
		e = errno;
		close(fd);
		return snprintf(err, errsz, "fork: %s", strerror(e)), -e;
	}
	if (pid == 0) { /* as the proxy starts a kernel: groups, gid, uid, then chdir */
		if (setgroups(ngroups, groups) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
			_exit(255);
		_exit(fchdir(fd) < 0 ? errno : 0);
	}
	close(fd);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return snprintf(err, errsz, "waitpid: %s", strerror(errno)), -EIO;
	if (!WIFEXITED(status) || WEXITSTATUS(status) == 255)
		return snprintf(err, errsz, "could not take the ids of uid %u to check it",
				(unsigned)uid),
		       -EPERM;
	if ((e = WEXITSTATUS(status)))
		return snprintf(err, errsz, "%s cannot enter it: %s", who, strerror(e)), -e;
	return 0;
}

/*
 * Whether cwd, as a client gave it, can be a context's whose kernels run as
 * uid with workspace (box_kernel_uid(), box_workspace_of()): boxed, a path of
 * the box's view (lib/boxview.c) that uid can enter; unboxed, a host
 * directory it can enter. err says why not.
 */
int
cwd_usable(uid_t uid, const char *workspace, const char *cwd, char *err, size_t errsz)
{
	char host[PATH_MAX], why[320];
	int rc;

	if (!sv.sv_cf.cf_sandbox)
		rc = cwd_check(cwd, uid, why, sizeof(why));
	else if ((rc = boxview_host_path(workspace, cwd, host, sizeof(host))) == -ENOENT)
		snprintf(why, sizeof(why),
			 "not in the context's box, which shows %s (the workspace), /tmp, "
			 "/usr and /etc",
			 BOX_HOME);
	else if (rc == -EINVAL)
		snprintf(why, sizeof(why), "not an absolute path free of . and ..");
	else if (rc < 0)
		snprintf(why, sizeof(why), "%s", strerror(-rc));
	else if (*host) /* (the box's /tmp is its own: always there) */
		rc = cwd_check(host, uid, why, sizeof(why));
	if (rc < 0)
		snprintf(err, errsz, "cwd '%.256s' cannot be used: %s", cwd, why);
	return rc;
}
