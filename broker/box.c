/*
 * box.c — the broker's side of the kernels' sandbox (built by each proxy,
 * proxy/sandbox.c): can this machine build it, the shared workspace, what the
 * proxies are told, and what an operator sees of a context's box.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker.h"

static bool
has_controller(const char *name)
{
	char *v1 = xasprintf("/sys/fs/cgroup/%s", name), buf[256] = "";
	struct stat st;
	bool ok = stat(v1, &st) == 0 && S_ISDIR(st.st_mode);
	int fd;

	free(v1);
	if (!ok && (fd = open("/sys/fs/cgroup/cgroup.controllers", O_RDONLY | O_CLOEXEC)) >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = '\0';
		ok = strstr(buf, name) != NULL;
		close(fd);
	}
	return ok;
}

/*
 * Whether kernels can be boxed here: root, namespaces, seccomp. On failure
 * err says what is missing. Limits the cgroups cannot give are turned off
 * with a warning (pids) rather than refused.
 */
int
box_check(char *err, size_t errsz)
{
	int status;
	pid_t pid;

	if (geteuid() != 0) {
		snprintf(err, errsz, "the sandbox needs root (it creates namespaces and cgroups "
				     "and runs kernels as unprivileged uids); run the broker as "
				     "root, or pass --no-sandbox to run kernels unboxed");
		return -EPERM;
	}
	if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0) {
		snprintf(err, errsz, "the kernel has no seccomp filters (%s); pass --no-sandbox "
				     "to run kernels unboxed", strerror(errno));
		return -ENOTSUP;
	}
	if ((pid = fork()) == 0)
		_exit(unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
			      CLONE_NEWNET) < 0
			  ? errno
			  : 0);
	if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		snprintf(err, errsz, "cannot create namespaces (unshare: %s); pass --no-sandbox "
				     "to run kernels unboxed",
			 pid > 0 && WIFEXITED(status) ? strerror(WEXITSTATUS(status)) : "failed");
		return -ENOTSUP;
	}
	if (sv.sv_kernel_pids && strcmp(sv.sv_kernel_pids, "0") && !has_controller("pids")) {
		log_warn("sandbox: no pids cgroup controller: no process limit per context");
		sv.sv_kernel_pids = "0";
	}
	if (sv.sv_kernel_memory && !sv.sv_kernel_cgroup && !has_controller("memory"))
		log_warn("sandbox: no memory cgroup controller: --kernel-memory is RLIMIT_DATA "
			 "(Deno cannot start under it)");
	return 0;
}

/* The first uid of --kernel-uid-range: the kernels' uid in shared isolation. */
unsigned
box_uid(void)
{
	unsigned a = 0, b = 0;

	sscanf(sv.sv_uid_range, "%u-%u", &a, &b);
	return a;
}

/*
 * The shared workspace, the contexts' default cwd: <run dir>.work, owned by
 * the kernels' uid (the broker's own home is no place for them).
 */
const char *
box_workspace(void)
{
	static char *dir;
	int rc;

	if (dir)
		return dir;
	dir = xasprintf("%s.work", sv.sv_run_dir);
	if ((rc = mkdir_p(dir, 0755)) < 0)
		fatal("workspace %s: %s", dir, strerror(-rc));
	if (!sv.sv_isolated && !sv.sv_kernel_user && chown(dir, box_uid(), box_uid()) < 0)
		fatal("workspace %s: chown: %s", dir, strerror(errno));
	if (sv.sv_isolated && chmod(dir, 01777) < 0)
		fatal("workspace %s: chmod: %s", dir, strerror(errno));
	return dir;
}

/* The proxy's sandbox flags, appended to argv at *n. */
void
box_args(const char **argv, int *n)
{
	if (!sv.sv_sandbox)
		return;
	argv[(*n)++] = "--sandbox";
	argv[(*n)++] = "--uid-range";
	argv[(*n)++] = sv.sv_uid_range;
	argv[(*n)++] = "--isolation";
	argv[(*n)++] = sv.sv_isolated ? "context" : "shared";
	argv[(*n)++] = "--network";
	argv[(*n)++] = sv.sv_kernel_network;
	argv[(*n)++] = "--pids";
	argv[(*n)++] = sv.sv_kernel_pids;
	argv[(*n)++] = "--tmp-size";
	argv[(*n)++] = sv.sv_kernel_tmp;
}

/* What the proxy of slot wrote of its box in its state file; NULL if nothing. */
json_t *
box_json(const char *slot)
{
	char *path = xasprintf("%s/ctx/%s/state.json", sv.sv_run_dir, slot);
	json_t *st = json_load_file(path, 0, NULL), *box = NULL;

	free(path);
	if (json_is_object(json_object_get(st, "sandbox")))
		box = json_incref(json_object_get(st, "sandbox"));
	json_decref(st);
	return box;
}
