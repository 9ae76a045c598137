/*
 * boxnons.c — boxes without namespaces: root without the capabilities a box
 * needs where the container refuses every namespace, a user namespace of the
 * broker's own too (Docker's default seccomp profile, containerd's and
 * CRI-O's RuntimeDefault), or not root there with Landlock's scoping (the
 * restricted Pod Security Standard: kernels keep the broker's uid). box_check
 * finds it (boxns_probe fails with CAP_SETUID and CAP_SETGID held; not root,
 * namespaces_work fails); this file says what such a box lacks, and
 * what each missing part costs. The proxies make it (--no-namespaces,
 * proxy/sandbox.c), its Landlock rules are lib/landlock.c's.
 */
#include <string.h>
#include <unistd.h>

#include "broker.h"

static bool nons; /* none to be had here */

/* Whether the boxes are made without namespaces here (box_check said). */
bool
boxnons_on(void)
{
	return cf->cf_sandbox && nons;
}

/*
 * Root without the capabilities a box needs and without user namespaces (a
 * container's seccomp profile refuses them: Docker's, RuntimeDefault), or
 * not root there with Landlock's scoping (a restricted pod: the kernels keep
 * the broker's uid): the boxes are what is left, the kernels' uids of the
 * range (root), no_new_privs,
 * seccomp, rlimits and Landlock, each lack said with what it costs. Without
 * Landlock's scoping (ABI 6) too, they still start, saying loudly what that
 * costs: a uid of the range keeps the broker's files and processes out of
 * reach, which --no-sandbox (the other way to start here) would not.
 * Each missing part is said through lack (box.c's, which lists them).
 */
void
boxnons_start(const char *what, int err, void (*lack)(const char *what, const char *how))
{
	int abi = landlock_abi();

	nons = true;
	log_warn("sandbox: no namespaces here (%s: %s; a container's seccomp profile): kernels "
		 "are boxed without them, as %s with no_new_privs, seccomp, rlimits and "
		 "Landlock (ABI %d)", what, strerror(err),
		 geteuid() ? "the broker's uid" : "uids of --kernel-uid-range", abi);
	static const char how[] = "allow user namespaces in the container's seccomp profile "
				  "(docker run --security-opt seccomp=deploy/docker/seccomp.json), "
				  "or run it with podman's defaults";
	lack("a PID namespace of the box's own: kernels see the container's processes (they "
	     "signal only their own context's through Landlock)", how);
	lack("a /proc of the box's own: a kernel sees every process of the container", how);
	lack(strcmp(cf->cf_kernel_network, "none")
		 ? "a network of the box's own: kernels share the container's network and its "
		   "loopback (servers listening there are in their reach), with no egress rule "
		   "(--egress-deny, the default deny list and the host's addresses are not "
		   "applied)"
		 : "--kernel-network none: no network namespace can hold kernels off the "
		   "container's network, which they share, and its loopback",
	     how);
	lack("a root of the box's own: kernels see the container's filesystem through "
	     "Landlock's rules alone (the system read-only, the workspace and their own dir "
	     "writable), and their /tmp is in their own dir", how);
	if (abi < 2)
		lack("Landlock: no rule keeps a kernel from what its uid may read (the system, "
		     "files others left open to all), nor its signals from every process of "
		     "its uid: under --isolation shared, every context's",
		     "a kernel with Landlock ABI 2 or later (Linux 5.19, lsm=landlock)");
	else if (abi < 6)
		lack("Landlock's scoping (ABI 6): a kernel can signal every process of its "
		     "uid (under --isolation shared, every context's) and reach their abstract "
		     "sockets",
		     "Linux 6.12 or later");
}


