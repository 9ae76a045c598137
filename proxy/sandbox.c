/*
 * sandbox.c — the box a kernel runs in. The proxy clones the box's init with
 * new PID, mount, IPC and UTS namespaces (the network namespace is the
 * proxy's own, boxnet.c); the init makes the box's root (boxroot.c), drops
 * to an unprivileged uid with no capabilities, sets no_new_privs and the
 * seccomp filter (filter.c), then forks the kernel. The init stays as PID 1
 * (reaps orphans; when it dies the kernel ends every process of the box) and
 * reports the kernel's wait status over a socket the proxy holds.
 *
 * Not root: the box gets a user namespace too, in which the proxy maps its
 * own uid and gid to BOX_USERNS_UID (the only ones an unprivileged process may
 * map). The init has all capabilities in that namespace for the mounts, then
 * drops them like a root proxy's does; on the host the kernel is the proxy's
 * uid, kept from the server by the PID namespace and its own root.
 *
 * Between clone and exec only raw system calls run: the proxy has nng
 * threads, so a lock or glibc's thread list may be in any state.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <unistd.h>

#include "proxy.h"

#define SB_UID_DEFAULT_FIRST 61184 /* systemd's DynamicUser range */
#define SB_UID_DEFAULT_LAST 65519

/* The directory of a file path. */
static char *
dir_of(const char *path)
{
	const char *s = strrchr(path, '/');

	return s && s != path ? xstrndup(path, s - path) : xstrdup("/");
}

static void
bind_add(struct box *bx, char *path, bool writable)
{
	if (path && *path == '/' && bx->bx_nbinds < BOX_MAX_BINDS)
		bx->bx_binds[bx->bx_nbinds++] = (struct box_bind){path, writable};
	else
		free(path);
}

/*
 * Beyond the system and the workspace, the box shows the kernel what it is
 * started from, read-only at the host's paths: its kernelspec, the start-up
 * profile, and its program when that lives outside the system (Deno from
 * npm, in a source tree), and Deno's, which every kernel has on its PATH;
 * and a copy of its own dir (boxroot.c).
 */
static void
sandbox_binds(struct proxy *px)
{
	struct box *bx = &px->px_box;
	const char *prog = px->px_ks ? px->px_ks->ks_argv[0] : NULL;
	char *deno;

	bx->bx_kdir = px->px_kdir;
	if (px->px_envd) { /* envd's agent (envd.c), and nothing of a kernel's */
		bind_add(bx, dir_of(px->px_envd), false);
		return;
	}
	deno = px->px_deno ? dir_of(px->px_deno) : NULL;
	bind_add(bx, xstrdup(px->px_ks->ks_dir), false);
	if (px->px_py_startup)
		bind_add(bx, dir_of(px->px_py_startup), false);
	if (prog && prog[0] == '/') {
		char *dir = dir_of(prog);
		if (deno && !strcmp(deno, dir)) { /* the kernel is Deno */
			free(deno);
			deno = NULL;
		}
		bind_add(bx, dir, false);
	}
	bind_add(bx, deno, false);
}

/*
 * What the kernel sees at BOX_HOME and BOX_KDIR, and its Landlock rules:
 * the box's view; without namespaces, the host's paths (nons_init).
 */
static const char *view_home = BOX_HOME, *view_tmp = "/tmp";
static const char *view_kdir; /* without namespaces: the kernel's own dir, a host path */
static const struct landlock_rule *view_rules = landlock_box;

/* A path of the box's view (a cwd the broker checked in it) where this box shows it. */
static const char *
view_path(const char *path, char *out, size_t outsz)
{
	size_t n = view_kdir ? strlen(view_kdir) : 0;

	/* its own dir (a Deno kernel starts there) is the host's path already,
	 * which may well be under /tmp (a run dir's) */
	if (n && !strncmp(path, view_kdir, n) && (!path[n] || path[n] == '/'))
		return path;
	n = strlen(BOX_HOME);
	if (!strncmp(path, BOX_HOME, n) && (!path[n] || path[n] == '/') &&
	    snprintf(out, outsz, "%s%s", view_home, path + n) < (int)outsz)
		return out;
	if (!strncmp(path, "/tmp", 4) && (!path[4] || path[4] == '/') &&
	    snprintf(out, outsz, "%s%s", view_tmp, path + 4) < (int)outsz)
		return out;
	n = strlen(BOX_ROOT); /* without namespaces, the workspace's BOX_ROOT_DIR */
	if (strcmp(view_home, BOX_HOME) && !strncmp(path, BOX_ROOT, n) &&
	    (!path[n] || path[n] == '/') &&
	    snprintf(out, outsz, "%s/" BOX_ROOT_DIR "%s", view_home, path + n) <
	        (int)outsz)
		return out;
	return path;
}

/* Its HOME, as the kernel sees it. */
const char *
sandbox_home(const struct proxy *px)
{
	return px->px_box.bx_on && px->px_box.bx_nons ? px->px_box.bx_workspace : BOX_HOME;
}

/* Its own dir, as the kernel sees it (unboxed: the host's). */
const char *
sandbox_kdir(const struct proxy *px)
{
	return px->px_box.bx_on && !px->px_box.bx_nons ? BOX_KDIR : px->px_kdir;
}

/*
 * A box without namespaces (the container refuses them): the kernel sees
 * the host's filesystem through Landlock's rules alone (lib/landlock.c), its
 * /tmp in its own dir, the container's network. Root only (its uid is one
 * of the range), and no Landlock is no box that keeps neighbours apart:
 * said, and the box goes on with its uid, seccomp and rlimits.
 */
static int
nons_init(struct proxy *px)
{
	struct box *bx = &px->px_box;
	const char *reads[BOX_MAX_BINDS + 1];
	int n = 0, rc;

	/* not root, the kernel is our uid: only the scoping keeps its signals from us */
	if (geteuid() != 0 && landlock_abi() < 6) {
		log_err("context %s: a box without namespaces needs root, or Landlock's scoping "
			"(ABI 6; here %d)", px->px_id, landlock_abi());
		return -EPERM;
	}
	/* its channels would listen on the container's loopback, its output for any to read */
	if (px->px_ks->ks_tcp && bx->bx_isolated) {
		log_err("context %s: kernel %s speaks TCP only, which no box without namespaces "
			"keeps from other tenants (--isolation context)", px->px_id, px->px_ks->ks_name);
		return -EPERM;
	}
	char *tmp = xasprintf("%s/tmp", px->px_kdir);
	if ((rc = mkdir_p(tmp, 0700)) < 0) {
		free(tmp);
		return rc;
	}
	view_tmp = tmp;
	view_kdir = px->px_kdir;
	for (int i = 0; i < bx->bx_nbinds; i++)
		reads[n++] = bx->bx_binds[i].bb_path;
	reads[n] = NULL;
	view_home = bx->bx_workspace;
	int home = open(bx->bx_workspace, O_PATH | O_DIRECTORY | O_CLOEXEC), root;
	if (home >= 0 && (root = boxview_root_open(home, bx->bx_uid, bx->bx_gid)) >= 0)
		close(root); /* BOX_ROOT, at the host's path (view_path) */
	if (home >= 0)
		close(home);
	view_rules = landlock_host(bx->bx_workspace, px->px_kdir, reads);
	bx->bx_ws_size = 0;      /* its filesystem would need a mount */
	bx->bx_net_ready = true; /* the container's network */
	if (landlock_abi() < 6)
		log_warn("context %s: no Landlock scoping here (ABI %d): its kernel can signal "
			 "every process of its uid and reach abstract sockets", px->px_id,
			 landlock_abi());
	return 0;
}

int
sandbox_init(struct proxy *px)
{
	struct box *bx = &px->px_box;
	int rc;

	bx->bx_id = px->px_id;
	bx->bx_sock = bx->bx_pidfd = bx->bx_initfd = -1;
	if (bx->bx_out < 0) /* kout_open's, before us */
		return -EBADF;
	if (!bx->bx_on)
		return 0;
	if (geteuid() != 0) {
		if (bx->bx_uid != (uid_t)-1 || bx->bx_isolated) {
			log_err("context %s: a uid per kernel or --kernel-user needs root", px->px_id);
			return -EPERM;
		}
		/* the kernel's files stay ours: on the host it is our uid */
		bx->bx_userns = !bx->bx_nons; /* without namespaces: our uid, no other */
		bx->bx_inuid = BOX_USERNS_UID;
		if (bx->bx_nons) {
			bx->bx_uid = geteuid();
			bx->bx_gid = getegid();
			bx->bx_ngroups = 0;
		}
		bx->bx_nproc = bx->bx_pids; /* no cgroup of ours to limit it with */
	} else if (bx->bx_uid == (uid_t)-1) {
		if (!bx->bx_uid_first)
			bx->bx_uid_first = SB_UID_DEFAULT_FIRST;
		if (!bx->bx_uid_last)
			bx->bx_uid_last = SB_UID_DEFAULT_LAST;
		bx->bx_uid = bx->bx_gid = bx->bx_uid_first;
		bx->bx_ngroups = 0;
	}
	if (!bx->bx_userns && (bx->bx_uid == 0 || (bx->bx_uid == geteuid() && geteuid() == 0))) {
		log_err("context %s: kernels never run as root or as the proxy's uid", px->px_id);
		return -EPERM;
	}
	if (!bx->bx_userns && !bx->bx_nons && (!bx->bx_net_uid || bx->bx_net_uid == bx->bx_uid)) {
		log_err("context %s: the box's network needs a uid of its own (the spec's net_uid), not "
			"the kernel's", px->px_id);
		return -EINVAL;
	}
	if (!bx->bx_workspace) {
		log_err("context %s: the box needs its workspace (the spec's workspace)", px->px_id);
		return -EINVAL;
	}
	if ((rc = filter_build(bx)) < 0) {
		log_err("context %s: seccomp filter: %s", px->px_id, strerror(-rc));
		return rc;
	}
	if (!bx->bx_tmp_size)
		bx->bx_tmp_size = 512ull << 20;
	/* its own workspace, a filesystem of its own (made once: a respawn finds it mounted) */
	if (bx->bx_own_ws && bx->bx_ws_size) {
		char err[512];
		if (wsdisk_mount(bx->bx_workspace, bx->bx_ws_size, err, sizeof(err)) < 0) {
			log_warn("context %s: workspace %s: no size bound: %s", px->px_id,
				 bx->bx_workspace, err);
			bx->bx_ws_size = 0;
		}
	}
	sandbox_binds(px);
	if (bx->bx_hide) {
		/* the broker refused a token file the view shows; these binds are ours */
		const char *dirs[BOX_MAX_BINDS], *part;
		for (int i = 0; i < bx->bx_nbinds; i++)
			dirs[i] = bx->bx_binds[i].bb_path;
		if ((part = boxview_shows(bx->bx_hide, bx->bx_workspace, dirs, bx->bx_nbinds))) {
			log_err("context %s: the box would show the access token file %s (in %s): "
				"put it where no box looks", px->px_id, bx->bx_hide, part);
			return -EPERM;
		}
	}
	if (bx->bx_nons && (rc = nons_init(px)) < 0)
		return rc;
	log_info("context %s: sandbox: uid %u%s, isolation %s, network %s, pids %llu, "
		 "memory %llu, tmp %llu, workspace %s",
		 px->px_id, (unsigned)(bx->bx_userns ? bx->bx_inuid : bx->bx_uid),
		 bx->bx_userns ? " in a user namespace" : "", bx->bx_isolated ? "context" : "shared",
		 bx->bx_net == BOX_NET_NONE ? "none" : "outbound",
		 (unsigned long long)bx->bx_pids, (unsigned long long)bx->bx_mem,
		 (unsigned long long)bx->bx_tmp_size, bx->bx_workspace);
	return 0;
}

/* No way back: no capabilities, the kernel's uid, no_new_privs, the filter. */
static int
sb_drop(const struct box *bx)
{
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2] = {{0}};

	/* not root without namespaces, there is no CAP_SETPCAP to drop the bounding
	 * set with: no_new_privs below keeps any capability of it from coming back */
	for (int c = 0; c < 64; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL &&
		    !(errno == EPERM && bx->bx_nons && geteuid() != 0))
			return -1;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return -1;
	/* raw calls: glibc's set*id would signal threads this child does not have */
	if (bx->bx_userns) {
		/* setgroups is denied in the namespace; the one mapped uid, no caps */
		uid_t in = bx->bx_inuid;
		if (syscall(SYS_setresgid, in, in, in) < 0 ||
		    syscall(SYS_setresuid, in, in, in) < 0)
			return -1;
	} else if (bx->bx_nons && geteuid() != 0) {
		; /* the kernel keeps our uid and gid; no supplementary group to drop */
	} else if (syscall(SYS_setgroups, bx->bx_ngroups, bx->bx_groups) < 0 ||
		   syscall(SYS_setresgid, bx->bx_gid, bx->bx_gid, bx->bx_gid) < 0 ||
		   syscall(SYS_setresuid, bx->bx_uid, bx->bx_uid, bx->bx_uid) < 0) {
		return -1;
	}
	if (syscall(SYS_setresuid, 0, 0, 0) == 0)
		return -1;
	if (syscall(SYS_capset, &hdr, data) < 0)
		return -1;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &bx->bx_prog) < 0)
		return -1;
	return 0;
}

/*
 * The box's steps once its cgroups hold it, in its init (cold, or forked from
 * the template, boxlib.c): its root, host name, limits, privileges. 0, or
 * the init's exit code: 120 its root, 122 privileges.
 */
int
sandbox_enter(const struct box *bx)
{
	if (!bx->bx_nons && boxroot_enter(bx) < 0)
		return 120;
	if (!bx->bx_nons)
		syscall(SYS_sethostname, "sandcell", 8);
	limits_apply_child(bx);
	if (sb_drop(bx) < 0)
		return 122;
	/*
	 * The kernel will have our uid: it must not reach into the init (open
	 * /proc/1/mem, take fd 3 with pidfd_getfd) and speak for it. A uid change
	 * from root made us non-dumpable; in a user namespace the uid on the host
	 * does not change, and nothing did.
	 */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return 122;
	return 0;
}

/*
 * The descriptors a box is given, and none other (its init's, which its
 * kernel inherits): stdin /dev/null (the box's), stdout and stderr out, the
 * proxy's pipe (kout.c), and sock, the init's socket to the proxy, as 3.
 * Nothing of the proxy's or the template's (their stderr is the broker's
 * log) is among them. The caller closes what is above. 0, or -1.
 */
int
sandbox_stdio(int out, int sock)
{
	int nul;

	if (out < 3 || sock < 3 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
		return -1;
	if ((nul = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0 || dup2(nul, 0) < 0)
		return -1;
	if (nul != 3)
		close(nul);
	return dup2(sock, 3) < 0 ? -1 : 0;
}

/*
 * The kernel's own steps in the box, after the init forked it (fd 3 is the
 * init's socket; 0-2 are sandbox_stdio's): the hello that tells the proxy its
 * pid, its cwd. Signals go back to their defaults
 * before an exec (the proxy ignored SIGPIPE); a kernel forked from the
 * template keeps the interpreter's. The tenant's package places are made
 * where missing. Last, the kernel's Landlock domain (lib/landlock.c), where
 * the kernel has Landlock. 0, or an exit code (122: its Landlock domain).
 */
int
sandbox_kernel_child(const char *cwd, bool reset_signals)
{
	sigset_t none;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	sigemptyset(&none);
	if (reset_signals)
		for (int s = 1; s < NSIG; s++)
			signal(s, SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* hello: the proxy learns our pid in its namespace (SO_PASSCRED) */
	if (send(3, "k", 1, 0) != 1)
		return 125;
	close(3);
	if (chdir(cwd) < 0)
		return 126;
	packages_prepare(view_home); /* as the kernel's uid, in its view */
	/* its Landlock domain, every process of the context's and no other's */
	int rc = landlock_enter(view_rules);
	return rc < 0 && rc != -ENOTSUP ? 122 : 0;
}

/*
 * The box's init (PID 1 inside). Exit codes before the kernel runs: 120
 * mounts, 122 privileges, 123 fork.
 */
static void __attribute__((noreturn))
sb_init(const struct box *bx, const char *dir, int go, int sock, const char *exe, char **argv,
	char **envp)
{
	char c;
	int rc;
	pid_t kid;

	syscall(SYS_setsid);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (read(go, &c, 1) != 1) /* the proxy died before letting us go */
		_exit(127);
	close(go);
	if ((rc = sandbox_enter(bx)))
		_exit(rc);
	/* without namespaces, a domain of the box's own holds the kernel's (boxinit.c) */
	boxinit_scoped = bx->bx_nons && landlock_scope(true) == 0;
	/* the uid change cleared PR_SET_PDEATHSIG: set it again, then make sure
	 * the proxy did not die in between (its end of sock would be closed) */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct pollfd pf = {sock, POLLRDHUP, 0};
	if (poll(&pf, 1, 0) != 0)
		_exit(127);
	/* the box's descriptors; the proxy's own (its stderr too) stay out */
	if (sandbox_stdio(bx->bx_out, sock) < 0)
		_exit(122);
	syscall(SYS_close_range, 4, ~0U, 0);
	kid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	if (kid < 0)
		_exit(123);
	if (kid == 0) {
		if ((rc = sandbox_kernel_child(dir, true)))
			_exit(rc);
		execve(exe, argv, envp);
		_exit(127);
	}
	boxinit_wait(kid, boxinit_scoped); /* it ends its domain when the proxy says (sandbox_end) */
}

/*
 * The pid a message was sent from, as the kernel translated it for us; with
 * fd, also a descriptor passed along (SCM_RIGHTS; -1 if none).
 */
pid_t
sandbox_recv(int sock, void *data, size_t len, ssize_t *got, int flags, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int))];
	struct iovec iov = {data, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *cm;
	pid_t pid = -1;

	if (fd)
		*fd = -1;
	*got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags);
	if (*got <= 0)
		return -1;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS) {
			struct ucred uc;
			memcpy(&uc, CMSG_DATA(cm), sizeof(uc));
			pid = uc.pid;
		} else if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			int n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int), f[4];
			memcpy(f, CMSG_DATA(cm), (n > 4 ? 4 : n) * sizeof(int));
			for (int i = 0; i < n && i < 4; i++) {
				if (fd && *fd < 0)
					*fd = f[i];
				else
					close(f[i]);
			}
		}
	}
	return pid;
}

static pid_t
recv_pid(int sock, void *data, size_t len, ssize_t *got, int flags)
{
	return sandbox_recv(sock, data, len, got, flags, NULL);
}

/*
 * The box's user namespace: our uid and gid are its BOX_USERNS_UID (the only
 * mapping an unprivileged process may write; setgroups must be denied first).
 */
static int
map_ids(const struct box *bx, pid_t pid)
{
	char path[64], map[64];
	int rc;

	snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)pid);
	if ((rc = write_text(path, "deny")) < 0)
		return rc;
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	snprintf(map, sizeof(map), "%u %u 1", (unsigned)bx->bx_inuid, (unsigned)geteuid());
	if ((rc = write_text(path, map)) < 0)
		return rc;
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
	snprintf(map, sizeof(map), "%u %u 1", (unsigned)bx->bx_inuid, (unsigned)getegid());
	return write_text(path, map);
}

/* The kernel's process in a new box, started in dir: 0 with *kp and the box's socket set. */
int
sandbox_spawn(struct box *bx, const char *dir, const char *exe, char **argv, char **envp,
	      struct kproc *kp)
{
	int go[2], sv[2], one = 1, rc;
	ssize_t got;
	char hello;
	pid_t pid;

	if (pipe2(go, O_CLOEXEC) < 0)
		return -errno;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		rc = -errno;
		close(go[0]);
		close(go[1]);
		return rc;
	}
	setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	/* without namespaces, a cwd in the box's view is the host's path it shows */
	char host[PATH_MAX];
	if (bx->bx_nons)
		dir = view_path(dir, host, sizeof(host));
	pid = syscall(SYS_clone,
		      SIGCHLD | (bx->bx_nons ? 0
					     : CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC |
						       CLONE_NEWUTS |
						       (bx->bx_userns ? CLONE_NEWUSER : 0)),
		      0, 0, 0, 0);
	if (pid == 0) {
		close(go[1]);
		close(sv[0]);
		sb_init(bx, dir, go[0], sv[1], exe, argv, envp);
	}
	rc = pid < 0 ? -errno : 0;
	close(go[0]);
	close(sv[1]);
	if (rc < 0) {
		log_err("context %s: clone the sandbox: %s", bx->bx_id, strerror(-rc));
		goto fail;
	}
	kp->kp_pid = pid;
	if (bx->bx_userns && (rc = map_ids(bx, pid)) < 0) {
		log_err("context %s: map the box's uid in its user namespace: %s", bx->bx_id,
			strerror(-rc));
		goto kill;
	}
	/* into its cgroups before it runs anything: a failure stops the kernel */
	if ((rc = limits_join(bx, pid)) < 0) {
		log_err("context %s: move the kernel into its cgroup: %s", bx->bx_id,
			strerror(-rc));
		goto kill;
	}
	if (write(go[1], "g", 1) != 1) {
		rc = -errno;
		goto kill;
	}
	close(go[1]);
	go[1] = -1;
	/* wait for the kernel's hello (a few ms of mounts); its exit says why not */
	struct pollfd pf = {sv[0], POLLIN, 0};
	if (poll(&pf, 1, 10000) <= 0 || (kp->kp_shown = recv_pid(sv[0], &hello, 1, &got, 0)) <= 0 ||
	    got != 1) {
		rc = -ECHILD;
		kp->kp_shown = 0;
		log_err("context %s: the sandbox did not start its kernel", bx->bx_id);
		goto kill;
	}
	bx->bx_sock = sv[0];
	return 0;
kill:
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	kp->kp_pid = 0;
fail:
	if (go[1] >= 0)
		close(go[1]);
	close(sv[0]);
	return rc < 0 ? rc : -EIO;
}

/*
 * The kernel's wait status from its box's: what the init reported, or, when
 * the init itself was killed (by the proxy, or SIGKILL from outside), its own.
 */
int
sandbox_status(const struct box *bx, int status, pid_t shown)
{
	int st;
	ssize_t got = -1;

	if (bx->bx_sock < 0)
		return status;
	do
		recv_pid(bx->bx_sock, &st, sizeof(st), &got, MSG_DONTWAIT);
	while (got > 0 && got != sizeof(st));
	if (got == sizeof(st))
		status = st;
	if (WIFEXITED(status) && !shown)
		log_warn("context %s: sandbox init exited with %d", bx->bx_id,
			 WEXITSTATUS(status));
	return status;
}

/*
 * The box of a kernel we started (init, our child) stopped and reaped. A box
 * without namespaces: its init ends every process of its Landlock domain
 * (boxinit.c), those a kill of its process group would miss (in a session
 * of their own), when our end of its socket shuts; its exit is waited for a
 * second. Any other box, or that one still there: killed, as its group.
 */
void
sandbox_end(struct box *bx, pid_t init)
{
	if (bx->bx_nons && bx->bx_sock >= 0 && landlock_abi() >= 6) {
		shutdown(bx->bx_sock, SHUT_RDWR);
		for (int i = 0; i < 100; i++) {
			if (waitpid(init, NULL, WNOHANG) == init)
				return;
			usleep(10000);
		}
	}
	killpg(init, SIGKILL);
	kill(init, SIGKILL);
	waitpid(init, NULL, 0);
}

/* The kernel's box ended: forget its socket. */
void
sandbox_reaped(struct box *bx)
{
	if (bx->bx_sock >= 0)
		close(bx->bx_sock);
	bx->bx_sock = -1;
	if (bx->bx_pidfd >= 0)
		close(bx->bx_pidfd);
	bx->bx_pidfd = -1;
}

/* The box's leftovers when the proxy ends; its own workspace goes with its context (gone). */
void
sandbox_cleanup(struct box *bx, bool gone)
{
	limits_cleanup(bx);
	/* an own workspace (--isolation context) is unmounted when we end (its image
	 * kept, as the broker's stop keeps the directory), gone with its context */
	if (bx->bx_own_ws) {
		wsdisk_unmount(bx->bx_workspace, gone);
		if (gone && rm_rf(bx->bx_workspace) < 0)
			log_warn("context %s: remove workspace %s", bx->bx_id, bx->bx_workspace);
	}
}

/* What GET /contexts/{id} shows of the box (state.json). */
json_t *
sandbox_json(const struct box *bx)
{
	if (!bx->bx_on)
		return json_pack("{s:b, s:I, s:I}", "enabled", 0, "memory_bytes",
				 (json_int_t)bx->bx_mem, "cpu_seconds", (json_int_t)bx->bx_cpu);
	return json_pack("{s:b, s:i, s:i, s:i, s:b, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I}",
			 "enabled",
			 1, "uid", (int)(bx->bx_userns ? bx->bx_inuid : bx->bx_uid), "host_uid",
			 (int)(bx->bx_userns ? geteuid() : bx->bx_uid), "net_uid",
			 (int)bx->bx_net_uid, "user_namespace",
			 bx->bx_userns, "isolation", bx->bx_isolated ? "context" : "shared",
			 "network", bx->bx_net == BOX_NET_NONE ? "none" : "outbound", "workspace",
			 bx->bx_workspace, "pids_max", (json_int_t)bx->bx_pids, "memory_bytes",
			 (json_int_t)bx->bx_mem, "cpu_seconds", (json_int_t)bx->bx_cpu, "tmp_bytes",
			 (json_int_t)bx->bx_tmp_size, "workspace_bytes", (json_int_t)bx->bx_ws_size);
}
