/*
 * box.c — what the kernels' sandbox (built by each proxy, proxy/sandbox.c)
 * can be on this machine: the capabilities probed at start (box_check), what
 * it lacks here and its level (GET /ready's "sandbox", /metrics'
 * sandcell_sandbox_missing), and what a stop releases. The uids boxes run as
 * are boxuid.c's, the workspaces workspace.c's, what a proxy is told of its
 * box spawn.c's, the peer check peer.c's.
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
#include <linux/capability.h>
#include <unistd.h>

#include "broker.h"

/*
 * What the box lacks here, each with what would give it (the next level):
 * found by box_check, logged at start, shown in GET /ready. The box is
 * "full" when nothing is missing.
 */
#define BOX_MAX_MISSING 12
static struct lack {
	const char *l_what, *l_how;
} missing[BOX_MAX_MISSING];
static size_t nmissing;
static bool own_userns; /* boxns.c: the broker's own user namespace */

static void
lack(const char *what, const char *how)
{
	if (nmissing < BOX_MAX_MISSING)
		missing[nmissing++] = (struct lack){what, how};
	log_warn("sandbox: %s (for it: %s)", what, how);
}

/* The same for a part found missing elsewhere (bounds.c's, through config.c). */
void
box_lack(const char *what, const char *how)
{
	lack(what, how);
}

/* Whether the broker runs in a user namespace of its own (boxns.c). */
bool
box_own_userns(void)
{
	return own_userns;
}

/* How many parts the box lacks here (sandcell_sandbox_missing). */
size_t
box_missing(void)
{
	return cf->cf_sandbox ? nmissing : 0;
}

/* The sandbox's level and what it lacks: GET /ready's "sandbox". */
json_t *
box_level_json(void)
{
	json_t *m = json_array();

	for (size_t i = 0; cf->cf_sandbox && i < nmissing; i++)
		json_array_append_new(m, json_pack("{s:s, s:s}", "what", missing[i].l_what, "how",
						   missing[i].l_how));
	return json_pack("{s:s, s:b, s:b, s:i, s:o, s:o, s:o}", "level",
			 !cf->cf_sandbox ? "off"
			 : nmissing	     ? "reduced"
					     : "full",
			 "own_user_namespace", own_userns, "namespaces", !boxnons_on(),
			 "landlock_abi", landlock_abi(), "missing", m, "egress", egress_json(),
			 "all_contexts", bounds_json());
}

/*
 * Whether a child can make the box's namespaces here (not root: in a user
 * namespace) and mount a /proc of its own in them, which the kernel refuses
 * where /proc is partly masked, as in a container's defaults. 0, 1 when all
 * but /proc works, or -errno with what failed in *what.
 */
static int
namespaces_work(const char **what)
{
	static const char *const steps[] = {"unshare(CLONE_NEWUSER)", "unshare of the box's namespaces",
					    "fork", "mount --make-rprivate /", "mount proc"};
	int res[2] = {0, 0}, p[2], status;
	pid_t pid;

	*what = "pipe";
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	if ((pid = fork()) == 0) {
		int step = 0;
		pid_t k;
		close(p[0]);
		int ns = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET;
		if ((geteuid() != 0 && unshare(CLONE_NEWUSER) < 0) || (step = 1, unshare(ns)) < 0 ||
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
			_exit(write(p[1], res, sizeof(res)) == sizeof(res) ? 0 : 1);
		} else {
			waitpid(k, &status, 0);
			_exit(0);
		}
		_exit(write(p[1], res, sizeof(res)) == sizeof(res) ? 0 : 1);
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
	return res[0] == 4 ? 1 : -res[1];
}

static bool memory_cgroup = true; /* a box's memory limit can be a cgroup here */
static bool no_way_out;            /* outbound asked, but boxes cannot have it here */

/* Whether a memory cgroup can hold a context's limit (box_check said). */
bool
box_memory_cgroup(void)
{
	return memory_cgroup;
}

/* The limits: where no cgroup can hold them, what rlimits give instead (limits.c). */
static void
check_cgroups(void)
{
	if (geteuid() != 0) {
		lack("cgroups of our own: no memory limit per context by default (--kernel-memory "
		     "is RLIMIT_DATA, under which Deno cannot start); a box's processes are limited "
		     "by RLIMIT_NPROC in its user namespace",
		     "run the broker as root");
		memory_cgroup = false;
		return;
	}
	if (cf->cf_kernel_pids && strcmp(cf->cf_kernel_pids, "0") && !cgroup_usable("pids"))
		lack("a pids cgroup per context: its processes are limited by RLIMIT_NPROC of "
		     "its kernels' uid instead",
		     "a writable /sys/fs/cgroup with the pids controller");
	if (!cgroup_usable("memory")) {
		memory_cgroup = false;
		lack("a memory cgroup per context: no memory limit by default; --kernel-memory is "
		     "RLIMIT_DATA (Deno cannot start under it)",
		     "a writable /sys/fs/cgroup with the memory controller");
	}
}

/*
 * The way out of the boxes' network: pasta needs /dev/net/tun. Without it,
 * loopback only (said once here, not per context). Without CAP_MKNOD (in a
 * user namespace of our own, or a container's defaults) no node of pasta's
 * uid's own can be made (boxnet.c): the container's is used, made usable by
 * that uid as Debian's default mode (0666) is.
 */
static void
check_network(void)
{
	struct stat st;

	if (strcmp(cf->cf_kernel_network, "outbound") || boxnons_on())
		return;
	if (stat("/dev/net/tun", &st) < 0 || !S_ISCHR(st.st_mode)) {
		lack("outbound network: there is no /dev/net/tun, so contexts have loopback only",
		     "the tun device (podman, docker: --device /dev/net/tun)");
		no_way_out = true;
		return;
	}
	/* never a way out without the egress rules (egress.c) */
	const char *why = egress_probe();
	if (why) {
		static char what[384];
		snprintf(what, sizeof(what),
			 "outbound network: nftables cannot set the boxes' egress rules here (%s), "
			 "so contexts have loopback only", why);
		lack(what, "nftables in the kernel (nf_tables, nft_reject_inet)");
		no_way_out = true;
		return;
	}
	if ((own_userns || !boxns_has_cap(CAP_MKNOD)) && (st.st_mode & 0006) != 0006) {
		if (chmod("/dev/net/tun", 0666) == 0)
			log_info("sandbox: /dev/net/tun made 0666 (Debian's default) for pasta, "
				 "which opens it as the boxes' network uid");
		else
			lack("outbound network: /dev/net/tun is not open to the boxes' network uid",
			     "a /dev/net/tun of mode 0666");
	}
}

/*
 * Whether kernels can be boxed here, and how far: the broker's own user
 * namespace where root lacks what a root box uses (boxns.c), then namespaces,
 * seccomp, cgroups, /proc, the network. On failure err says what is
 * missing; what only weakens the box is said (lack) and the box goes on
 * without it.
 */
int
box_check(char *err, size_t errsz)
{
	const char *what;
	int rc;

	if ((rc = boxns_probe(&what)) < 0 && boxns_has_cap(CAP_SETUID) &&
	    boxns_has_cap(CAP_SETGID)) {
		boxnons_start(what, -rc, lack);
		rc = 1;
	}
	if (rc < 0) {
		snprintf(err, errsz, "root without the capabilities a box needs (CAP_SYS_ADMIN and "
				     "others), and no user namespace of the "
				     "broker's own to box kernels from (%s: %s); keep the "
				     "container's default capabilities, allow user namespaces in its "
				     "seccomp profile, or pass --no-sandbox to run kernels unboxed",
			 what, strerror(-rc));
		return -EPERM;
	}
	if (rc == 0) {
		if ((rc = boxns_enter(&what)) < 0)
			fatal("sandbox: the broker's own user namespace: %s: %s", what, strerror(-rc));
		own_userns = true;
		log_info("sandbox: root without every capability a box needs (CAP_SYS_ADMIN, "
			 "CAP_NET_ADMIN, CAP_SYS_PTRACE...: a container's defaults): the broker "
			 "runs in a user namespace of its own, which maps the container's uids to "
			 "themselves, and makes the boxes from there");
	}
	if (geteuid() != 0 && (cf->cf_isolated || cf->cf_kernel_user)) {
		snprintf(err, errsz, "%s needs root (a uid of its own per kernel); not root, "
				     "the box has a user namespace with the broker's uid only",
			 cf->cf_isolated ? "--isolation context" : "--kernel-user");
		return -EPERM;
	}
	if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0) {
		snprintf(err, errsz, "the kernel has no seccomp filters (%s); pass --no-sandbox "
				     "to run kernels unboxed",
			 strerror(errno));
		return -ENOTSUP;
	}
	if (!boxnons_on() && (rc = namespaces_work(&what)) < 0) {
		/* not root: without namespaces only Landlock's scoping keeps the
		 * kernels, our uid, from signalling us (boxnons.c) */
		if (geteuid() != 0 && landlock_abi() >= 6) {
			boxnons_start(what, -rc, lack);
			peerbox_on(); /* the control socket's path is in the kernels' reach */
		} else {
			snprintf(err, errsz,
				 "%s, and cannot make the box's namespaces (%s: %s); %s, or "
				 "pass --no-sandbox to run kernels unboxed",
				 geteuid() ? "not root" : "root", what, strerror(-rc),
				 geteuid() ? "run the broker as root, allow unprivileged user "
					     "namespaces (sysctl user.max_user_namespaces; in a "
					     "container, a seccomp profile that allows them), or run "
					     "on Linux 6.12 or later (Landlock ABI 6), where kernels "
					     "are boxed without namespaces"
					   : "allow namespaces in the container's seccomp profile");
			return -ENOTSUP;
		}
	}
	if (!boxnons_on() && rc == 1)
		lack("a /proc of the box's own (this /proc is partly masked): a box shows this one, "
		     "with every process that is not the box's when it starts hidden",
		     "an unmasked /proc (podman: --security-opt systempaths=unconfined; "
		     "Kubernetes: procMount: Unmasked)");
	if (geteuid() != 0 && boxnons_on()) {
		lack("a uid per kernel: kernels are the broker's uid, kept from its files, "
		     "memory and signals by Landlock alone; the broker's API cannot tell their "
		     "connections from a client's (use --access-token where it listens on more "
		     "than loopback)",
		     "run the broker as root");
	} else if (geteuid() != 0) {
		log_info("sandbox: not root: a user namespace per context; kernels run as uid "
			 "%u inside it, which is the broker's uid %u on the host",
			 BOX_USERNS_UID, (unsigned)geteuid());
		lack("a uid per kernel: kernels are the broker's uid outside their box",
		     "run the broker as root");
	}
	check_cgroups();
	check_network();
	return 0;
}

/* After box_check: whether --kernel-network outbound cannot be had here (config.c: none). */
bool
box_no_way_out(void)
{
	return no_way_out;
}

/*
 * A stop that ended every context: the shared uids are no longer ours, nor
 * the parent cgroup (the shared workspace's mount is workspace_release's).
 */
void
box_release(void)
{
	boxuid_release();
	bounds_release();
}
