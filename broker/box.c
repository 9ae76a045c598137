/*
 * box.c — the broker's side of the kernels' sandbox (built by each proxy,
 * proxy/sandbox.c): can this machine build it, the shared workspace, what the
 * proxies are told, and what an operator sees of a context's box.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker.h"

#define BOX_USERNS_UID 1000 /* proxy/sandbox.c's SB_USERNS_UID */

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
 * Whether an unprivileged user namespace works here as the box needs it: a
 * child unshares it with the box's other namespaces and mounts a /proc of
 * its own (refused where /proc is partly masked, as in most containers).
 * 0, or -errno with what failed in *what.
 */
static int
userns_works(const char **what)
{
	static const char *const steps[] = {
		"unshare(CLONE_NEWUSER)", "unshare of the box's namespaces in it", "fork",
		"mount --make-rprivate /", "mount proc"};
	int res[2] = {0, 0}, p[2], status;
	pid_t pid;

	*what = "pipe";
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	if ((pid = fork()) == 0) {
		int step = 0;
		pid_t k;
		close(p[0]);
		int ns = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
		if (unshare(CLONE_NEWUSER) < 0 || (step = 1, unshare(ns)) < 0 ||
		    (step = 2, k = fork()) < 0) {
			res[0] = step;
			res[1] = errno;
		} else if (k == 0) { /* PID 1 of the new namespace */
			unsigned long fl = MS_NOSUID | MS_NODEV | MS_NOEXEC;
			if ((step = 3, mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) < 0 ||
			    (step = 4, mount("proc", "/proc", "proc", fl, NULL)) < 0) {
				res[0] = step;
				res[1] = errno;
			}
			if (write(p[1], res, sizeof(res)) != sizeof(res))
				_exit(1);
			_exit(0);
		} else {
			waitpid(k, &status, 0);
			_exit(0);
		}
		if (write(p[1], res, sizeof(res)) != sizeof(res))
			_exit(1);
		_exit(0);
	}
	close(p[1]);
	if (pid < 0 || read(p[0], res, sizeof(res)) != sizeof(res)) {
		res[0] = 2;
		res[1] = pid < 0 ? errno : EIO;
	}
	close(p[0]);
	if (pid > 0)
		waitpid(pid, &status, 0);
	*what = steps[res[0]];
	return -res[1];
}

/* --kernel-pids 0, when the cgroups cannot give one: the value lib/opts.c allocated, replaced. */
static void
no_pids_limit(void)
{
	free((char *)sv.sv_cf.cf_kernel_pids);
	sv.sv_cf.cf_kernel_pids = xstrdup("0");
}

/*
 * Whether kernels can be boxed here: root or a user namespace, namespaces,
 * seccomp. On failure err says what is missing. Limits the cgroups cannot give are turned off
 * with a warning (pids) rather than refused.
 */
int
box_check(char *err, size_t errsz)
{
	const char *what;
	int status, rc;
	pid_t pid;

	if (geteuid() != 0 && (rc = userns_works(&what)) < 0) {
		snprintf(err, errsz, "not root, and no user namespace for the box here (%s: %s); "
				     "run the broker as root, allow unprivileged user namespaces "
				     "(sysctl user.max_user_namespaces; in a container, a seccomp "
				     "profile that allows them and an unmasked /proc), or pass "
				     "--no-sandbox to run kernels unboxed",
			 what, strerror(-rc));
		return -EPERM;
	}
	if (geteuid() != 0 && (sv.sv_cf.cf_isolated || sv.sv_cf.cf_kernel_user)) {
		snprintf(err, errsz, "%s needs root (a uid of its own per kernel); not root, "
				     "the box has a user namespace with the broker's uid only",
			 sv.sv_cf.cf_isolated ? "--isolation context" : "--kernel-user");
		return -EPERM;
	}
	if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0) {
		snprintf(err, errsz, "the kernel has no seccomp filters (%s); pass --no-sandbox "
				     "to run kernels unboxed", strerror(errno));
		return -ENOTSUP;
	}
	if ((pid = fork()) == 0)
		_exit(unshare((geteuid() ? CLONE_NEWUSER : 0) | CLONE_NEWNS | CLONE_NEWPID |
			      CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET) < 0
			  ? errno
			  : 0);
	if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		snprintf(err, errsz, "cannot create namespaces (unshare: %s); pass --no-sandbox "
				     "to run kernels unboxed",
			 pid > 0 && WIFEXITED(status) ? strerror(WEXITSTATUS(status)) : "failed");
		return -ENOTSUP;
	}
	if (geteuid() != 0) {
		log_info("sandbox: not root: a user namespace per context; kernels run as uid "
			 "%u inside it, which is the broker's uid %u on the host",
			 BOX_USERNS_UID, (unsigned)geteuid());
		log_warn("sandbox: not root: no cgroups of ours: no process limit per context%s",
			 sv.sv_cf.cf_kernel_memory && !sv.sv_cf.cf_kernel_cgroup
				 ? "; --kernel-memory is RLIMIT_DATA (Deno cannot start under it)"
				 : sv.sv_cf.cf_kernel_memory ? "" : " and no memory limit");
		no_pids_limit();
		return 0;
	}
	if (sv.sv_cf.cf_kernel_pids && strcmp(sv.sv_cf.cf_kernel_pids, "0") && !has_controller("pids")) {
		log_warn("sandbox: no pids cgroup controller: no process limit per context");
		no_pids_limit();
	}
	if (sv.sv_cf.cf_kernel_memory && !sv.sv_cf.cf_kernel_cgroup && !has_controller("memory"))
		log_warn("sandbox: no memory cgroup controller: --kernel-memory is RLIMIT_DATA "
			 "(Deno cannot start under it)");
	return 0;
}

/*
 * Whether the broker can tell a context's connections from its clients': it
 * looks up a connection to itself made here (peer.c), which must name our
 * own uid. Without it (no sock_diag here) no connection is refused as a
 * context's, and the log says that contexts can reach the API.
 */
static bool
peer_lookup_works(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), c = -1, s = -1;
	uid_t uid = (uid_t)-1;
	bool ok = false;

	if (l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 1) == 0 &&
	    getsockname(l, (struct sockaddr *)&a, &al) == 0 &&
	    (c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
	    connect(c, (struct sockaddr *)&a, sizeof(a)) == 0 && (s = accept(l, NULL, NULL)) >= 0)
		ok = peer_uid(s, &uid) == PEER_UID && uid == geteuid();
	if (s >= 0)
		close(s);
	if (c >= 0)
		close(c);
	if (l >= 0)
		close(l);
	return ok;
}

/* --kernel-uid-range, A-B. */
static void
uid_range(unsigned *a, unsigned *b)
{
	*a = *b = 0;
	sscanf(sv.sv_cf.cf_uid_range, "%u-%u", a, b);
}

/* Whether boxes run kernels as uids of the range on the host (root's boxes). */
static bool
boxes_use_the_range(void)
{
	return sv.sv_cf.cf_sandbox && geteuid() == 0;
}

/*
 * Whether the kernels' uids on the host are their own: root's boxes (the
 * range, or --kernel-user), or --kernel-user without the sandbox. Otherwise
 * they are the broker's uid and nothing tells their connections apart.
 */
static bool
kernels_have_own_uids(void)
{
	return boxes_use_the_range() || sv.sv_cf.cf_kernel_uid;
}

/* At start: whether box_peer_is_context can work here; the log says if not. */
void
box_peer_check(void)
{
	sv.sv_cf.cf_peer_check = false;
	if (!kernels_have_own_uids()) {
		if (!sv.sv_cf.cf_sandbox)
			return; /* the log already says what --no-sandbox gives away */
		log_warn("kernels run as the broker's uid on the host: code in a context can "
			 "reach this server's API over the network%s",
			 sv.sv_cf.cf_token ? " (the access token still guards it)"
					   : "; set --access-token, or --kernel-network none");
		return;
	}
	if (!(sv.sv_cf.cf_peer_check = peer_lookup_works()))
		log_warn("cannot look up the owners of local connections (NETLINK_SOCK_DIAG): "
			 "code in a context can reach this server's API over the network%s",
			 sv.sv_cf.cf_token ? " (the access token still guards it)"
					   : "; set --access-token, or --kernel-network none");
}

/*
 * Whether an accepted HTTP connection comes from code in a context: kernels
 * share the host's network by default, and through the API one context could
 * run code in another, read its output or delete it. A connection from this
 * machine whose owner cannot be named (its client closed before we looked)
 * is not taken on trust either.
 */
bool
box_peer_is_context(int fd)
{
	unsigned a, b;
	uid_t uid;

	if (!sv.sv_cf.cf_peer_check)
		return false;
	switch (peer_uid(fd, &uid)) {
	case PEER_REMOTE: return false;
	case PEER_UNKNOWN: return true;
	}
	if (uid == geteuid())
		return false;
	if (sv.sv_cf.cf_kernel_uid && uid == sv.sv_cf.cf_kernel_uid)
		return true;
	uid_range(&a, &b);
	return boxes_use_the_range() && uid >= a && uid <= b;
}

/*
 * The kernels' uid in shared isolation, as root: the one this broker held
 * before a restart (its kept contexts run as it) if it can lease it again,
 * else the first uid of --kernel-uid-range it can lease (uidlease.c); kept
 * for the broker's life.
 */
static unsigned shared_uid, shared_net_uid;
static int shared_lease = -1, shared_net_lease = -1; /* held for the broker's life */

/* Whether uid is one of ours already (a context's, or the shared ones). */
static bool
ours(unsigned uid)
{
	struct context *o;

	if (uid == shared_uid || uid == shared_net_uid)
		return true;
	TAILQ_FOREACH(o, &sv.sv_tb.tb_contexts, c_link)
		if (o->c_uid == uid || o->c_net_uid == uid)
			return true;
	return false;
}

/*
 * A uid of the range for role ("" a kernel's, "net" a network's): the one
 * that role had before a restart (our kept contexts use it), else the first
 * no context of ours uses and that we can lease; its lease in *fd (-1 when
 * leases cannot be kept here). 0 when none is free.
 */
static unsigned
lease_one(const char *role, bool again, int *fd)
{
	unsigned a, b, u;

	uid_range(&a, &b);
	*fd = -1;
	if (again && (u = uid_lease_ours(a, b, role, fd)))
		return u;
	for (u = a; u <= b; u++)
		if (!ours(u) && (*fd = uid_lease(u, role)) != -EBUSY)
			return u;
	return 0;
}

/*
 * The uid kernels run as with shared isolation: the one our kept contexts run
 * as, else the first of --kernel-uid-range this broker can lease
 * (uidlease.c); kept for the broker's life.
 */
unsigned
box_uid(void)
{
	unsigned a, b;

	if (shared_uid)
		return shared_uid;
	uid_range(&a, &b);
	if (!boxes_use_the_range())
		return a;
	if (!(shared_uid = lease_one("", true, &shared_lease)))
		fatal("no uid of --kernel-uid-range %s is free: other brokers or processes "
		      "hold them all",
		      sv.sv_cf.cf_uid_range);
	log_info("sandbox: kernels run as uid %u%s", shared_uid,
		 shared_lease >= 0 ? ", leased for this broker's life" : "");
	return shared_uid;
}

/*
 * The uid that owns the boxes' network namespaces and runs pasta (boxnet.c):
 * of the range, so that the broker takes pasta's connections for a
 * context's, and never a kernel's, so that no kernel has a capability over
 * the network it sits in. Shared: one for the broker's life.
 */
static unsigned
box_net_uid(void)
{
	if (shared_net_uid || !boxes_use_the_range())
		return shared_net_uid;
	box_uid(); /* the kernels' first: after a restart, theirs is taken again */
	if (!(shared_net_uid = lease_one("net", true, &shared_net_lease)))
		fatal("no uid of --kernel-uid-range %s is free for the boxes' network",
		      sv.sv_cf.cf_uid_range);
	return shared_net_uid;
}

/*
 * The uid a context's kernel runs as on the host (NULL: a shared context's),
 * or (uid_t)-1 when it is ours: no sandbox, or a rootless one, whose user
 * namespace maps the kernel to our uid.
 */
uid_t
box_kernel_uid(const struct context *c)
{
	if (sv.sv_cf.cf_kernel_user)
		return sv.sv_cf.cf_kernel_uid;
	if (!boxes_use_the_range())
		return (uid_t)-1;
	return c && c->c_uid ? c->c_uid : box_uid();
}

/*
 * A stop that ended every context: the shared uids are no longer ours, nor
 * is the shared workspace's mount (its image stays, with what it holds).
 */
void
box_release(void)
{
	uid_release(shared_uid, shared_lease);
	uid_release(shared_net_uid, shared_net_lease);
	shared_lease = shared_net_lease = -1;
	if (sv.sv_cf.cf_sandbox && !sv.sv_cf.cf_isolated && sv.sv_cf.cf_workspace_size)
		wsdisk_unmount(sv.sv_cf.cf_cwd, false);
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
	dir = xasprintf("%s.work", sv.sv_cf.cf_run_dir);
	if ((rc = mkdir_p(dir, 0755)) < 0)
		fatal("workspace %s: %s", dir, strerror(-rc));
	/* not root: the kernels are our uid on the host, the workspace is ours */
	if (geteuid() == 0 && !sv.sv_cf.cf_isolated) {
		struct stat st;
		unsigned uid = box_kernel_uid(NULL); /* --kernel-user's, or the one leased */
		/* another broker leased our last uid while we were down: said, not fixed */
		if (stat(dir, &st) == 0 && st.st_uid && st.st_uid != uid)
			log_warn("workspace %s: was uid %u's, now uid %u's; what is in it "
				 "stays uid %u's, which may be another broker's kernels' now",
				 dir, (unsigned)st.st_uid, uid, (unsigned)st.st_uid);
		if (chown(dir, uid, uid) < 0)
			fatal("workspace %s: chown: %s", dir, strerror(errno));
	}
	/* isolated: root's, or the context holding the first uid could rename the others' */
	if (sv.sv_cf.cf_isolated && (chown(dir, 0, 0) < 0 || chmod(dir, 0711) < 0))
		fatal("workspace %s: chown/chmod: %s", dir, strerror(errno));
	return dir;
}

/*
 * The workspace's size bound (lib/wsdisk.c): by default a quarter of the
 * space free where it is at start. Shared isolation: the server's workspace
 * gets its filesystem now; --isolation context: each context's, made by its
 * proxy (box_args). Root only; where it cannot be, said, and none.
 */
void
box_bound_workspace(void)
{
	struct server_config *cf = &sv.sv_cf;
	char err[512];
	int rc;

	if (!cf->cf_sandbox || (cf->cf_workspace_size_set && !cf->cf_workspace_size))
		return;
	if (geteuid() != 0) {
		if (cf->cf_workspace_size_set)
			log_warn("--workspace-size: a workspace has a size bound only when the "
				 "broker is root (a loop-mounted filesystem): none");
		cf->cf_workspace_size = 0;
		return;
	}
	if (!cf->cf_workspace_size_set)
		cf->cf_workspace_size = (wsdisk_free(cf->cf_cwd) / 4) & ~((1ull << 20) - 1);
	if (cf->cf_workspace_size < (16u << 20)) {
		log_warn("workspace %s: %llu MiB free, too little for a size bound of a quarter: "
			 "none", cf->cf_cwd, (unsigned long long)(wsdisk_free(cf->cf_cwd) >> 20));
		cf->cf_workspace_size = 0;
		return;
	}
	if (cf->cf_isolated) {
		log_info("sandbox: each context's workspace may hold %llu MiB (a filesystem of its "
			 "own); --workspace-size changes it, 0 lifts it",
			 (unsigned long long)(cf->cf_workspace_size >> 20));
		return;
	}
	if ((rc = wsdisk_mount(cf->cf_cwd, cf->cf_workspace_size, err, sizeof(err))) < 0) {
		log_warn("workspace %s: no size bound: %s", cf->cf_cwd, err);
		cf->cf_workspace_size = 0;
		return;
	}
	log_info("sandbox: the workspace %s may hold %llu MiB (a filesystem of its own, %s.img); "
		 "--workspace-size changes it, 0 lifts it",
		 cf->cf_cwd, (unsigned long long)(cf->cf_workspace_size >> 20), cf->cf_cwd);
}

/* Whether each context gets a uid of its own (box_isolate). */
bool
box_isolates(void)
{
	return sv.sv_cf.cf_sandbox && sv.sv_cf.cf_isolated && !sv.sv_cf.cf_kernel_user;
}

/*
 * --isolation context: two uids of the range no live context holds, its
 * kernels' and its network's, and a workspace of its own
 * (<workspace>/<id>, 0700, its uid's), which its box shows at BOX_HOME.
 * A cwd it was given is checked against that. The workspace root is 0711:
 * no context lists the others.
 */
int
box_isolate(struct context *c, char *err, size_t errsz)
{
	if (!box_isolates())
		return 0;
	if (!(c->c_uid = lease_one("", false, &c->c_uid_lease)) ||
	    (boxes_use_the_range() && !(c->c_net_uid = lease_one("net", false, &c->c_net_lease)))) {
		snprintf(err, errsz, "no free uid in --kernel-uid-range %s", sv.sv_cf.cf_uid_range);
		return -EAGAIN;
	}
	/* its filesystem's image takes the host's disk as it fills: room for a full one */
	uint64_t room = wsdisk_free(sv.sv_cf.cf_cwd);
	if (room < sv.sv_cf.cf_workspace_size) {
		snprintf(err, errsz, "no room for another workspace of %llu MiB: %llu MiB free",
			 (unsigned long long)(sv.sv_cf.cf_workspace_size >> 20),
			 (unsigned long long)(room >> 20));
		return -ENOSPC;
	}
	char *ws = xasprintf("%s/%s", sv.sv_cf.cf_cwd, c->c_id);
	if (mkdir(ws, 0700) < 0 || chown(ws, c->c_uid, c->c_uid) < 0) {
		snprintf(err, errsz, "workspace %s: %s", ws, strerror(errno));
		free(ws);
		return -EIO;
	}
	c->c_workspace = ws;
	return cwd_usable(box_kernel_uid(c), box_workspace_of(c), c->c_cwd, err, errsz) < 0 ? -EINVAL : 0;
}

/* The workspace a context's box shows at BOX_HOME, on the host. */
const char *
box_workspace_of(const struct context *c)
{
	return c && c->c_workspace ? c->c_workspace : sv.sv_cf.cf_cwd;
}

/* A context's cwd when it was given none: the workspace, as its kernel sees it. */
const char *
box_default_cwd(void)
{
	return sv.sv_cf.cf_sandbox ? BOX_HOME : sv.sv_cf.cf_cwd;
}

/* The proxy's sandbox flags, appended to argv at *n. */
void
box_args(struct context *c, const char **argv, int *n)
{
	static char uid[16], net_uid[16];

	if (!sv.sv_cf.cf_sandbox)
		return;
	if (c->c_uid || (boxes_use_the_range() && !sv.sv_cf.cf_kernel_user)) {
		/* execv copies it at once */
		snprintf(uid, sizeof(uid), "%u", c->c_uid ? c->c_uid : box_uid());
		argv[(*n)++] = "--uid";
		argv[(*n)++] = uid;
	}
	if (boxes_use_the_range()) {
		snprintf(net_uid, sizeof(net_uid), "%u", c->c_net_uid ? c->c_net_uid : box_net_uid());
		argv[(*n)++] = "--net-uid";
		argv[(*n)++] = net_uid;
	}
	if (c->c_workspace)
		argv[(*n)++] = "--own-workspace";
	if (sv.sv_cf.cf_workspace_size) { /* an own one's (its proxy makes it), or shown */
		static char size[24];
		snprintf(size, sizeof(size), "%llu", (unsigned long long)sv.sv_cf.cf_workspace_size);
		argv[(*n)++] = "--workspace-size";
		argv[(*n)++] = size;
	}
	argv[(*n)++] = "--workspace";
	argv[(*n)++] = box_workspace_of(c);
	if (sv.sv_cf.cf_token_file) {
		argv[(*n)++] = "--hide";
		argv[(*n)++] = sv.sv_cf.cf_token_file;
	}
	argv[(*n)++] = "--sandbox";
	argv[(*n)++] = "--uid-range";
	argv[(*n)++] = sv.sv_cf.cf_uid_range;
	argv[(*n)++] = "--isolation";
	argv[(*n)++] = sv.sv_cf.cf_isolated ? "context" : "shared";
	argv[(*n)++] = "--network";
	argv[(*n)++] = sv.sv_cf.cf_kernel_network;
	argv[(*n)++] = "--pids";
	argv[(*n)++] = sv.sv_cf.cf_kernel_pids;
	argv[(*n)++] = "--tmp-size";
	argv[(*n)++] = sv.sv_cf.cf_kernel_tmp;
}

/* What the proxy of slot wrote of its box in its state file; NULL if nothing. */
json_t *
box_json(const char *slot)
{
	char *path = xasprintf("%s/ctx/%s/state.json", sv.sv_cf.cf_run_dir, slot);
	json_t *st = json_load_file(path, 0, NULL), *box = NULL;

	free(path);
	if (json_is_object(json_object_get(st, "sandbox")))
		box = json_incref(json_object_get(st, "sandbox"));
	json_decref(st);
	return box;
}
