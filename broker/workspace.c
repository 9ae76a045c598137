/*
 * workspace.c — where the contexts' files live on the host: the shared
 * workspace (<run dir>.work, owned by the kernels' uid), which every box
 * shows at BOX_HOME, and its size bound, a filesystem of its own
 * (lib/wsdisk.c), unmounted at the stop; a context's own workspace under
 * --isolation context (workspace_own), made with its uids (boxuid_lease);
 * which one a context's box shows (workspace_of), and the cwd a context
 * given none starts in (workspace_default_cwd).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker.h"

/*
 * The shared workspace, the contexts' default cwd: <run dir>.work, owned by
 * the kernels' uid (the broker's own home is no place for them).
 */
const char *
workspace_shared(void)
{
	static char *dir;
	int rc;

	if (dir)
		return dir;
	dir = xasprintf("%s.work", cf->cf_run_dir);
	if ((rc = mkdir_p(dir, 0755)) < 0)
		fatal("workspace %s: %s", dir, strerror(-rc));
	/* not root: the kernels are our uid on the host, the workspace is ours */
	if (geteuid() == 0 && !cf->cf_isolated) {
		struct stat st;
		unsigned uid = boxuid_kernel(NULL); /* --kernel-user's, or the one leased */
		/* another broker leased our last uid while we were down: said, not fixed */
		if (stat(dir, &st) == 0 && st.st_uid && st.st_uid != uid)
			log_warn("workspace %s: was uid %u's, now uid %u's; what is in it "
				 "stays uid %u's, which may be another broker's kernels' now",
				 dir, (unsigned)st.st_uid, uid, (unsigned)st.st_uid);
		if (chown(dir, uid, uid) < 0)
			fatal("workspace %s: chown: %s", dir, strerror(errno));
	}
	/* isolated: root's, or the context holding the first uid could rename the others' */
	if (cf->cf_isolated && (chown(dir, 0, 0) < 0 || chmod(dir, 0711) < 0))
		fatal("workspace %s: chown/chmod: %s", dir, strerror(errno));
	return dir;
}

/*
 * The workspace's size bound (lib/wsdisk.c): by default a quarter of the
 * space free where it is at start. Shared isolation: the server's workspace
 * gets its filesystem now; --isolation context: each context's, made by its
 * proxy (spawn.c's spawn_box). Root only; where it cannot be, said, and none.
 */
uint64_t
workspace_bound(void)
{
	uint64_t size = cf->cf_workspace_size;
	char err[512];
	int rc;

	if (!cf->cf_sandbox || (cf->cf_workspace_size_set && !size))
		return size;
	if (geteuid() != 0) {
		if (cf->cf_workspace_size_set)
			log_warn("--workspace-size: a workspace has a size bound only when the "
				 "broker is root (a loop-mounted filesystem): none");
		return 0;
	}
	if (box_own_userns() || boxnons_on()) { /* ext4 is mounted by init's user namespace alone */
		box_lack("a size bound on the workspace: a loop-mounted filesystem cannot be mounted "
		     "from a user namespace",
		     "root with every capability a box uses (podman: --cap-add "
		     "SYS_ADMIN,NET_ADMIN,SYS_PTRACE) and loop devices");
		return 0;
	}
	if (!cf->cf_workspace_size_set)
		size = bounds_workspace_default(wsdisk_free(cf->cf_cwd));
	if (size < (16u << 20)) {
		log_warn("workspace %s: %llu MiB free, too little for a size bound: none", cf->cf_cwd, (unsigned long long)(wsdisk_free(cf->cf_cwd) >> 20));
		return 0;
	}
	if (cf->cf_isolated) {
		log_info("sandbox: each context's workspace may hold %llu MiB (a filesystem of its "
			 "own); --workspace-size changes it, 0 lifts it",
			 (unsigned long long)(size >> 20));
		return size;
	}
	if ((rc = wsdisk_mount(cf->cf_cwd, size, err, sizeof(err))) < 0) {
		log_warn("workspace %s: no size bound: %s", cf->cf_cwd, err);
		box_lack("a size bound on the workspace (its filesystem could not be mounted)",
		     "loop devices (/dev/loop-control)");
		return 0;
	}
	log_info("sandbox: the workspace %s may hold %llu MiB (a filesystem of its own, %s.img); "
		 "--workspace-size changes it, 0 lifts it",
		 cf->cf_cwd, (unsigned long long)(size >> 20), cf->cf_cwd);
	return size;
}

/*
 * --isolation context: the own workspace of context id (<workspace>/<id>,
 * 0700, its uid's, which boxuid_lease put in iso; iso->ci_workspace once
 * made), which its box shows at BOX_HOME, if its bound fits the total and
 * the disk. A cwd it was given is checked first,
 * against a box whose workspace is still empty, as its own will be. The
 * workspace root is 0711: no context lists the others.
 */
int
workspace_own(struct ctxiso *iso, const char *id, const char *cwd, char *err,
              size_t errsz)
{
	int rc = bounds_workspace_room(err, errsz); /* its bound within the total */
	if (rc < 0)
		return rc;
	/* its filesystem's image takes the host's disk as it fills: room for a full one */
	uint64_t room = wsdisk_free(cf->cf_cwd);
	if (room < cf->cf_workspace_size) {
		snprintf(err, errsz, "no room for another workspace of %llu MiB: %llu MiB free",
			 (unsigned long long)(cf->cf_workspace_size >> 20),
			 (unsigned long long)(room >> 20));
		return -ENOSPC;
	}
	/* its cwd, in a box whose workspace is not made yet: a refusal leaves nothing */
	if (cwd_usable(boxuid_kernel(iso), NULL, cwd, err, errsz) < 0)
		return -EINVAL;
	char *ws = xasprintf("%s/%s", cf->cf_cwd, id);
	if (mkdir(ws, 0700) < 0 || chown(ws, iso->ci_uid, iso->ci_uid) < 0) {
		int e = errno;
		snprintf(err, errsz, "workspace %s: %s", ws, strerror(e));
		if (e != EEXIST) /* made here: not left behind */
			rmdir(ws);
		free(ws);
		return -EIO;
	}
	iso->ci_workspace = ws;
	return 0;
}

/* The workspace a context's box shows at BOX_HOME, on the host. */
const char *
workspace_of(const struct context *c)
{
	const char *own = c ? context_iso(c)->ci_workspace : NULL;

	return own ? own : cf->cf_cwd;
}

/* A context's cwd when it was given none: the workspace, as its kernel sees it. */
const char *
workspace_default_cwd(void)
{
	return cf->cf_sandbox ? BOX_HOME : cf->cf_cwd;
}

/*
 * A stop that ended every context: the shared workspace's mount is no longer
 * ours (its image stays, with what it holds).
 */
void
workspace_release(void)
{
	if (cf->cf_sandbox && !cf->cf_isolated && cf->cf_workspace_size)
		wsdisk_unmount(cf->cf_cwd, false);
}
