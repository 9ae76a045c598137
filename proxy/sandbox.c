/*
 * sandbox.c — the box a kernel runs in. The proxy clones the box's init with
 * new PID, mount, IPC and UTS namespaces (and a network namespace with
 * --network none): it hides the run dir, gives the box a private /tmp and its
 * own /proc, drops to an unprivileged uid with no capabilities, sets
 * no_new_privs and a seccomp filter, then forks the kernel. The init stays as
 * PID 1 (reaps orphans; when it dies the kernel ends every process of the box)
 * and reports the kernel's wait status over a socket the proxy holds.
 *
 * Not root: the box gets a user namespace too, in which the proxy maps its
 * own uid and gid to SB_USERNS_UID (the only ones an unprivileged process may
 * map). The init has all capabilities in that namespace for the mounts, then
 * drops them like a root proxy's does; on the host the kernel is the proxy's
 * uid, kept from the server by the PID namespace and the hidden run dir.
 *
 * Between clone and exec only raw system calls run: the proxy has nng and
 * libzmq threads, so a lock or glibc's thread list may be in any state.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
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

#define SB_MAX_PATHS 8
#define SB_UID_DEFAULT_FIRST 61184 /* systemd's DynamicUser range */
#define SB_UID_DEFAULT_LAST 65519
#define SB_USERNS_UID 1000 /* the kernel's uid inside its user namespace */

static int
write_str(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), rc = 0;

	if (fd < 0 || write(fd, value, strlen(value)) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	return rc;
}

/*
 * Where this controller's per-context cgroups go: "sandcell" under the v1
 * hierarchy of that controller, or under the v2 root with the controller
 * enabled for its children. NULL when neither is usable.
 */
static char *
cgroup_base(const char *controller)
{
	char *v1 = xasprintf("/sys/fs/cgroup/%s", controller), *base, buf[256] = "";
	struct stat st;
	int fd;

	if (stat(v1, &st) == 0 && S_ISDIR(st.st_mode)) {
		base = xasprintf("%s/sandcell", v1);
		free(v1);
		if (mkdir(base, 0755) < 0 && errno != EEXIST) {
			free(base);
			return NULL;
		}
		return base;
	}
	free(v1);
	if ((fd = open("/sys/fs/cgroup/cgroup.controllers", O_RDONLY | O_CLOEXEC)) < 0)
		return NULL;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	if (!strstr(buf, controller))
		return NULL;
	char *enable = xasprintf("+%s", controller);
	base = xstrdup("/sys/fs/cgroup/sandcell");
	if (write_str("/sys/fs/cgroup/cgroup.subtree_control", enable) < 0 ||
	    (mkdir(base, 0755) < 0 && errno != EEXIST) ||
	    write_str("/sys/fs/cgroup/sandcell/cgroup.subtree_control", enable) < 0) {
		free(base);
		base = NULL;
	}
	free(enable);
	return base;
}

static void
add_path(char **v, int *n, const char *p)
{
	if (p && *p == '/' && *n < SB_MAX_PATHS)
		v[(*n)++] = xstrdup(p);
}

/* The directory of a file path (the Python start-up file's). */
static char *
dir_of(const char *path)
{
	const char *s = strrchr(path, '/');

	return s && s != path ? xstrndup(path, s - path) : xstrdup("/");
}

/* Whether path is dir or below it. */
static bool
inside(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

/*
 * What the box hides (the run dir: sockets, connection files, state) and what
 * it shows again at the same paths (the kernel's own files, its kernelspec,
 * the workspace). Built before each clone: the cwd may have changed.
 */
void
sandbox_paths(struct proxy *px)
{
	for (int i = 0; i < px->px_sb_ncover; i++)
		free(px->px_sb_cover[i]);
	for (int i = 0; i < px->px_sb_nkeep; i++)
		free(px->px_sb_keep[i]);
	px->px_sb_ncover = px->px_sb_nkeep = 0;
	add_path(px->px_sb_cover, &px->px_sb_ncover, px->px_run_dir);
	char *kroot = xasprintf("%s.kernels", px->px_run_dir);
	add_path(px->px_sb_cover, &px->px_sb_ncover, kroot);
	free(kroot);
	add_path(px->px_sb_keep, &px->px_sb_nkeep, px->px_kdir);
	add_path(px->px_sb_keep, &px->px_sb_nkeep, px->px_mplcache);
	add_path(px->px_sb_keep, &px->px_sb_nkeep, px->px_ks->ks_dir);
	if (px->px_py_startup) {
		char *d = dir_of(px->px_py_startup);
		add_path(px->px_sb_keep, &px->px_sb_nkeep, d);
		free(d);
	}
	/*
	 * The kernel's program, when the box would hide it: Deno from npm lives
	 * in the source tree, which may be under /tmp. Never a whole temporary
	 * dir, nor anything holding the run dir.
	 */
	if (px->px_ks->ks_argv[0] && px->px_ks->ks_argv[0][0] == '/') {
		char *d = dir_of(px->px_ks->ks_argv[0]);
		if (strcmp(d, "/") && strcmp(d, "/tmp") && strcmp(d, "/var/tmp") &&
		    strcmp(d, "/dev/shm") && !inside(d, px->px_sb_cover[0]) &&
		    !inside(d, px->px_sb_cover[1]) && !inside(px->px_sb_cover[0], d))
			add_path(px->px_sb_keep, &px->px_sb_nkeep, d);
		free(d);
	}
	/*
	 * A cwd of /tmp is the box's own /tmp; any other is shown as it is, unless
	 * that would show the run dir again (a cwd in it, or above it in /tmp).
	 */
	const char *cwd = px->px_cwd;
	bool in_run = inside(cwd, px->px_sb_cover[0]) || inside(cwd, px->px_sb_cover[1]);
	if (in_run)
		log_warn("context %s: cwd %s is in the run dir: not shown in the box", px->px_id,
			 cwd);
	else if (strcmp(cwd, "/tmp") && !inside(px->px_sb_cover[0], cwd))
		add_path(px->px_sb_keep, &px->px_sb_nkeep, cwd);
}

int
sandbox_init(struct proxy *px)
{
	int rc;

	px->px_sb_sock = px->px_kpidfd = -1;
	if (!px->px_sandbox)
		return 0;
	if (geteuid() != 0) {
		if (px->px_kuid != (uid_t)-1 || px->px_sb_isolated) {
			log_err("context %s: a uid per kernel or --kernel-user needs root",
				px->px_id);
			return -EPERM;
		}
		/* the kernel's files stay ours: on the host it is our uid */
		px->px_sb_userns = true;
		px->px_sb_inuid = SB_USERNS_UID;
		px->px_sb_pids = 0; /* no cgroup of ours to limit it with */
	} else if (px->px_kuid == (uid_t)-1) {
		if (!px->px_sb_uid_first)
			px->px_sb_uid_first = SB_UID_DEFAULT_FIRST;
		if (!px->px_sb_uid_last)
			px->px_sb_uid_last = SB_UID_DEFAULT_LAST;
		/* the broker gives a uid of its own to each context (--isolation context) */
		px->px_kuid = px->px_sb_uid_first;
		px->px_kgid = px->px_kuid;
		px->px_kngroups = 0;
	}
	if (!px->px_sb_userns && (px->px_kuid == 0 || px->px_kuid == geteuid())) {
		log_err("context %s: kernels never run as root or as the proxy's uid",
			px->px_id);
		return -EPERM;
	}
	if ((rc = filter_build(px)) < 0) {
		log_err("context %s: seccomp filter: %s", px->px_id, strerror(-rc));
		return rc;
	}
	if (px->px_sb_pids) {
		char *base = cgroup_base("pids");
		if (!base) {
			log_err("context %s: no pids cgroup controller for the process limit",
				px->px_id);
			return -ENOTSUP;
		}
		px->px_sb_pids_cg = xasprintf("%s/%s", base, px->px_id);
		free(base);
		char *max = xasprintf("%llu", (unsigned long long)px->px_sb_pids);
		char *file = xasprintf("%s/pids.max", px->px_sb_pids_cg);
		rc = 0;
		if (mkdir(px->px_sb_pids_cg, 0755) < 0 && errno != EEXIST)
			rc = -errno;
		else if ((rc = write_str(file, max)) < 0)
			rmdir(px->px_sb_pids_cg);
		free(max);
		free(file);
		if (rc < 0) {
			log_err("context %s: cgroup %s: %s", px->px_id, px->px_sb_pids_cg,
				strerror(-rc));
			free(px->px_sb_pids_cg);
			px->px_sb_pids_cg = NULL;
			return rc;
		}
	}
	/* systemd-run cannot run inside the box: the sandbox's cgroups do its job */
	if (px->px_cgroup_parent && !strcmp(px->px_cgroup_parent, "systemd"))
		px->px_cgroup_parent = NULL;
	/* memory: a cgroup of its own (RLIMIT_DATA kills V8 at start-up) */
	/* (not root: no cgroup of ours to make one in, RLIMIT_DATA) */
	if (px->px_mem_limit && !px->px_cgroup_parent && !px->px_sb_userns) {
		if (!(px->px_cgroup_parent = cgroup_base("memory")))
			log_warn("context %s: no memory cgroup controller: the memory limit is "
				 "RLIMIT_DATA (Deno cannot start under it)",
				 px->px_id);
	}
	if (!px->px_sb_tmp_size)
		px->px_sb_tmp_size = 512ull << 20;
	px->px_sb_tmp_opts = xasprintf("mode=1777,size=%llu",
				       (unsigned long long)px->px_sb_tmp_size);
	log_info("context %s: sandbox: uid %u%s, isolation %s, network %s, pids %llu, "
		 "memory %llu, tmp %llu",
		 px->px_id, (unsigned)(px->px_sb_userns ? px->px_sb_inuid : px->px_kuid),
		 px->px_sb_userns ? " in a user namespace" : "",
		 px->px_sb_isolated ? "context" : "shared",
		 px->px_sb_net_none ? "none" : "host", (unsigned long long)px->px_sb_pids,
		 (unsigned long long)px->px_mem_limit, (unsigned long long)px->px_sb_tmp_size);
	return 0;
}

/* mkdir -p with raw calls only (in the box's init, before the uid drop). */
static void
sb_mkdirs(const char *path)
{
	char tmp[PATH_MAX];
	size_t n = strlen(path);

	if (n >= sizeof(tmp))
		return;
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(tmp, 0711);
			*p = '/';
		}
	mkdir(tmp, 0711);
}

static void
sb_fdpath(char out[32], int fd)
{
	char digits[12], *d = digits + sizeof(digits);
	const char *pre = "/proc/self/fd/";
	size_t i = 0;

	*--d = '\0';
	do
		*--d = '0' + fd % 10;
	while ((fd /= 10));
	while (*pre)
		out[i++] = *pre++;
	while (*d)
		out[i++] = *d++;
	out[i] = '\0';
}

/* Loopback up in a fresh network namespace (its only interface). */
static int
loopback_up(void)
{
	struct ifreq ifr = {0};
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = -1;

	if (s < 0)
		return -1;
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
		rc = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	close(s);
	return rc;
}

/*
 * --network none (and a TCP kernel under --isolation context, below): the
 * proxy itself moves to a network namespace of its own
 * with only loopback, before any thread exists; its kernels inherit it. The
 * broker link is a Unix socket by path (not scoped by network namespaces),
 * and the proxy reaches TCP kernels (Deno) on that loopback, which nothing
 * outside the box's namespace can reach.
 */
int
sandbox_network(struct proxy *px)
{
	if (!px->px_sandbox)
		return 0;
	/*
	 * A TCP kernel (Deno) listens on the host's loopback, where any other
	 * context can subscribe to its output (no key is needed to read). Under
	 * --isolation context the contexts are not one tenant's: its box gets a
	 * network of its own, whatever --network says.
	 */
	if (px->px_sb_isolated && px->px_ks->ks_tcp && !px->px_sb_net_none) {
		log_info("context %s: a TCP kernel under --isolation context: a network "
			 "namespace of its own, loopback only",
			 px->px_id);
		px->px_sb_net_none = true;
	}
	if (!px->px_sb_net_none)
		return 0;
	if (unshare(CLONE_NEWNET) < 0 || loopback_up() < 0) {
		int rc = -errno;
		log_err("context %s: a network namespace of its own: %s", px->px_id,
			strerror(errno));
		return rc;
	}
	return 0;
}

/* Mounts of the box, in its init: private /tmp, run dir hidden, own /proc. */
static int
sb_mounts(struct proxy *px)
{
	int keep_fd[SB_MAX_PATHS];
	struct stat a, b;
	char fdp[32];

	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return -1;
	for (int i = 0; i < px->px_sb_nkeep; i++)
		keep_fd[i] = open(px->px_sb_keep[i], O_PATH | O_CLOEXEC | O_DIRECTORY);
	if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, px->px_sb_tmp_opts) < 0)
		return -1;
	if (stat("/dev/shm", &a) == 0 &&
	    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, px->px_sb_tmp_opts) < 0)
		return -1;
	if (stat("/var/tmp", &a) == 0 &&
	    mount("/tmp", "/var/tmp", NULL, MS_BIND, NULL) < 0)
		return -1;
	for (int i = 0; i < px->px_sb_ncover; i++)
		if (stat(px->px_sb_cover[i], &a) == 0 &&
		    mount("tmpfs", px->px_sb_cover[i], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  "mode=0711,size=64k") < 0)
			return -1;
	/* the kernel's own paths, wherever a cover or /tmp hid them */
	for (int i = 0; i < px->px_sb_nkeep; i++) {
		if (keep_fd[i] < 0)
			continue;
		if (fstat(keep_fd[i], &a) == 0 && stat(px->px_sb_keep[i], &b) == 0 &&
		    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
			continue;
		sb_mkdirs(px->px_sb_keep[i]);
		sb_fdpath(fdp, keep_fd[i]);
		if (mount(fdp, px->px_sb_keep[i], NULL, MS_BIND | MS_REC, NULL) < 0)
			return -1;
	}
	for (int i = 0; i < px->px_sb_ncover; i++)
		if (stat(px->px_sb_cover[i], &a) == 0)
			mount(NULL, px->px_sb_cover[i], NULL,
			      MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	for (int i = 0; i < px->px_sb_nkeep; i++)
		if (keep_fd[i] >= 0)
			close(keep_fd[i]);
	/* the box's processes only */
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return -1;
	return 0;
}

/* No way back: no capabilities, the kernel's uid, no_new_privs, the filter. */
static int
sb_drop(struct proxy *px)
{
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2] = {{0}};

	for (int c = 0; c < 64; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return -1;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return -1;
	/* raw calls: glibc's set*id would signal threads this child does not have */
	if (px->px_sb_userns) {
		/* setgroups is denied in the namespace; the one mapped uid, no caps */
		uid_t in = px->px_sb_inuid;
		if (syscall(SYS_setresgid, in, in, in) < 0 ||
		    syscall(SYS_setresuid, in, in, in) < 0)
			return -1;
	} else if (syscall(SYS_setgroups, px->px_kngroups, px->px_kgroups) < 0 ||
		   syscall(SYS_setresgid, px->px_kgid, px->px_kgid, px->px_kgid) < 0 ||
		   syscall(SYS_setresuid, px->px_kuid, px->px_kuid, px->px_kuid) < 0) {
		return -1;
	}
	if (syscall(SYS_setresuid, 0, 0, 0) == 0)
		return -1;
	if (syscall(SYS_capset, &hdr, data) < 0)
		return -1;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &px->px_sb_prog) < 0)
		return -1;
	return 0;
}

/*
 * The box's steps once its cgroups hold it, in its init (cold, or forked from
 * the template, boxlib.c): mounts, host name, limits, privileges. 0, or the
 * init's exit code: 120 mounts, 122 privileges.
 */
int
sandbox_enter(struct proxy *px)
{
	if (sb_mounts(px) < 0)
		return 120;
	syscall(SYS_sethostname, "sandcell", 8);
	limits_apply_child(px, NULL);
	if (sb_drop(px) < 0)
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
 * The kernel's own steps in the box, after the init forked it (fd 3 is the
 * init's socket): stdin from /dev/null, stdout to the proxy's log, the hello
 * that tells the proxy its pid, its cwd. Signals go back to their defaults
 * before an exec (the proxy ignored SIGPIPE); a kernel forked from the
 * template keeps the interpreter's. 0, or an exit code.
 */
int
sandbox_kernel_child(struct proxy *px, bool reset_signals)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	sigset_t none;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	sigemptyset(&none);
	if (reset_signals)
		for (int s = 1; s < NSIG; s++)
			signal(s, SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (fd >= 0) {
		dup2(fd, 0);
		close(fd);
	}
	dup2(2, 1); /* kernel's own stdout is the proxy's log, not a stream */
	/* hello: the proxy learns our pid in its namespace (SO_PASSCRED) */
	if (send(3, "k", 1, 0) != 1)
		return 125;
	close(3);
	if (chdir(px->px_cwd) < 0)
		return 126;
	return 0;
}

/*
 * The box's init (PID 1 inside). Exit codes before the kernel runs: 120
 * mounts, 122 privileges, 123 fork.
 */
static void __attribute__((noreturn))
sb_init(struct proxy *px, int go, int sock, const char *exe, char **argv, char **envp)
{
	char c;
	int rc;
	pid_t kid;

	syscall(SYS_setsid);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (read(go, &c, 1) != 1) /* the proxy died before letting us go */
		_exit(127);
	close(go);
	if ((rc = sandbox_enter(px)))
		_exit(rc);
	/* the uid change cleared PR_SET_PDEATHSIG: set it again, then make sure
	 * the proxy did not die in between (its end of sock would be closed) */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct pollfd pf = {sock, POLLRDHUP, 0};
	if (poll(&pf, 1, 0) != 0)
		_exit(127);
	/* the proxy's own descriptors stay out of the box */
	if (dup2(sock, 3) < 0)
		_exit(122);
	syscall(SYS_close_range, 4, ~0U, 0);
	kid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	if (kid < 0)
		_exit(123);
	if (kid == 0) {
		if ((rc = sandbox_kernel_child(px, true)))
			_exit(rc);
		execve(exe, argv, envp);
		_exit(127);
	}
	boxinit_wait(kid, false);
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

static int
join_cgroup(const char *dir, pid_t pid)
{
	char *path = xasprintf("%s/cgroup.procs", dir), *num = xasprintf("%d", (int)pid);
	int rc = write_str(path, num);

	free(path);
	free(num);
	return rc;
}

/* Into the context's pids and memory cgroups (before the box runs anything). */
int
sandbox_join_cgroups(struct proxy *px, pid_t pid)
{
	int rc = 0;

	if (px->px_sb_pids_cg && (rc = join_cgroup(px->px_sb_pids_cg, pid)) < 0)
		return rc;
	if (px->px_cgroup)
		rc = join_cgroup(px->px_cgroup, pid);
	return rc;
}

/*
 * The box's user namespace: our uid and gid are its SB_USERNS_UID (the only
 * mapping an unprivileged process may write; setgroups must be denied first).
 */
static int
map_ids(struct proxy *px, pid_t pid)
{
	char path[64], map[64];
	int rc;

	snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)pid);
	if ((rc = write_str(path, "deny")) < 0)
		return rc;
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	snprintf(map, sizeof(map), "%u %u 1", (unsigned)px->px_sb_inuid, (unsigned)geteuid());
	if ((rc = write_str(path, map)) < 0)
		return rc;
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
	snprintf(map, sizeof(map), "%u %u 1", (unsigned)px->px_sb_inuid, (unsigned)getegid());
	return write_str(path, map);
}

int
sandbox_spawn(struct proxy *px, const char *exe, char **argv, char **envp)
{
	int go[2], sv[2], one = 1, rc;
	ssize_t got;
	char hello;
	pid_t pid;

	sandbox_paths(px);
	if (pipe2(go, O_CLOEXEC) < 0)
		return -errno;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		rc = -errno;
		close(go[0]);
		close(go[1]);
		return rc;
	}
	setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	pid = syscall(SYS_clone,
		      SIGCHLD | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS |
			      (px->px_sb_userns ? CLONE_NEWUSER : 0),
		      0, 0, 0, 0);
	if (pid == 0) {
		close(go[1]);
		close(sv[0]);
		sb_init(px, go[0], sv[1], exe, argv, envp);
	}
	rc = pid < 0 ? -errno : 0;
	close(go[0]);
	close(sv[1]);
	if (rc < 0) {
		log_err("context %s: clone the sandbox: %s", px->px_id, strerror(-rc));
		goto fail;
	}
	px->px_kpid = pid;
	if (px->px_sb_userns && (rc = map_ids(px, pid)) < 0) {
		log_err("context %s: map the box's uid in its user namespace: %s", px->px_id,
			strerror(-rc));
		goto kill;
	}
	/* into its cgroups before it runs anything: a failure stops the kernel */
	if ((rc = sandbox_join_cgroups(px, pid)) < 0) {
		log_err("context %s: move the kernel into its cgroup: %s", px->px_id,
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
	if (poll(&pf, 1, 10000) <= 0 || (px->px_kshown = recv_pid(sv[0], &hello, 1, &got, 0)) <= 0 ||
	    got != 1) {
		rc = -ECHILD;
		px->px_kshown = 0;
		log_err("context %s: the sandbox did not start its kernel", px->px_id);
		goto kill;
	}
	px->px_sb_sock = sv[0];
	return 0;
kill:
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	px->px_kpid = 0;
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
sandbox_status(struct proxy *px, int status)
{
	int st;
	ssize_t got = -1;

	if (px->px_sb_sock < 0)
		return status;
	do
		recv_pid(px->px_sb_sock, &st, sizeof(st), &got, MSG_DONTWAIT);
	while (got > 0 && got != sizeof(st));
	if (got == sizeof(st))
		status = st;
	if (WIFEXITED(status) && !px->px_kshown)
		log_warn("context %s: sandbox init exited with %d", px->px_id,
			 WEXITSTATUS(status));
	return status;
}

/* The kernel's box ended: forget its socket. */
void
sandbox_reaped(struct proxy *px)
{
	if (px->px_sb_sock >= 0)
		close(px->px_sb_sock);
	px->px_sb_sock = -1;
	if (px->px_kpidfd >= 0)
		close(px->px_kpidfd);
	px->px_kpidfd = -1;
	px->px_kshown = 0;
}

void
sandbox_cleanup(struct proxy *px)
{
	if (px->px_sb_pids_cg && rmdir(px->px_sb_pids_cg) < 0 && errno != ENOENT)
		log_warn("context %s: rmdir %s: %s", px->px_id, px->px_sb_pids_cg,
			 strerror(errno));
	/* an own workspace (--isolation context) ends with its context */
	if (px->px_sb_own_ws && px->px_shutdown && rm_rf(px->px_cwd) < 0)
		log_warn("context %s: remove workspace %s", px->px_id, px->px_cwd);
}

/* What GET /contexts/{id} shows of the box (state.json). */
json_t *
sandbox_json(struct proxy *px)
{
	if (!px->px_sandbox)
		return json_pack("{s:b, s:I, s:I}", "enabled", 0, "memory_bytes",
				 (json_int_t)px->px_mem_limit, "cpu_seconds",
				 (json_int_t)px->px_cpu_limit);
	return json_pack("{s:b, s:i, s:i, s:b, s:s, s:s, s:I, s:I, s:I, s:I}", "enabled", 1,
			 "uid", (int)(px->px_sb_userns ? px->px_sb_inuid : px->px_kuid),
			 "host_uid", (int)(px->px_sb_userns ? geteuid() : px->px_kuid),
			 "user_namespace", px->px_sb_userns, "isolation",
			 px->px_sb_isolated ? "context" : "shared",
			 "network", px->px_sb_net_none ? "none" : "host", "pids_max",
			 (json_int_t)px->px_sb_pids, "memory_bytes", (json_int_t)px->px_mem_limit,
			 "cpu_seconds", (json_int_t)px->px_cpu_limit, "tmp_bytes",
			 (json_int_t)px->px_sb_tmp_size);
}
