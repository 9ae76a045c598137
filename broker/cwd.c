/*
 * cwd.c — whether kernels can start in a directory: an absolute path to a
 * directory that the user kernels run as (--kernel-user, else ours) can
 * enter. With --kernel-user the check runs in a child that takes that user's
 * ids, so the kernel's own rules (modes, ACLs, groups) decide, not a copy.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker.h"

/* 0, or a negative errno with err saying why dir cannot be a kernel's cwd. */
int
cwd_check(const char *dir, char *err, size_t errsz)
{
	gid_t groups[256];
	int ngroups = sizeof(groups) / sizeof(groups[0]), status, e;
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
	if (!sv.sv_kernel_user) {
		if (access(dir, X_OK) == 0)
			return 0;
		e = errno;
		return snprintf(err, errsz, "cannot enter it: %s", strerror(e)), -e;
	}
	if (!(pw = getpwnam(sv.sv_kernel_user)))
		return snprintf(err, errsz, "no user %s", sv.sv_kernel_user), -ENOENT;
	if (getgrouplist(sv.sv_kernel_user, pw->pw_gid, groups, &ngroups) < 0)
		ngroups = 0;
	if ((pid = fork()) < 0) {
		e = errno;
		return snprintf(err, errsz, "fork: %s", strerror(e)), -e;
	}
	if (pid == 0) { /* as the proxy starts a kernel: groups, gid, uid, then chdir */
		if (setgroups(ngroups, groups) < 0 || setgid(pw->pw_gid) < 0 ||
		    setuid(pw->pw_uid) < 0)
			_exit(255);
		_exit(chdir(dir) < 0 ? errno : 0);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return snprintf(err, errsz, "waitpid: %s", strerror(errno)), -EIO;
	if (!WIFEXITED(status) || WEXITSTATUS(status) == 255)
		return snprintf(err, errsz, "could not take the ids of user %s to check it",
				sv.sv_kernel_user),
		       -EPERM;
	if ((e = WEXITSTATUS(status)))
		return snprintf(err, errsz, "user %s cannot enter it: %s", sv.sv_kernel_user,
				strerror(e)),
		       -e;
	return 0;
}
