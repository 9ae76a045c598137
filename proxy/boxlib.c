/*
 * boxlib.c — the box for kernels forked from the template: the entry points
 * of libsandcell-box.so, which the template (proxy/python/sandcell_template.py)
 * loads with ctypes: boxlib_fork makes a box and its kernel for each request
 * from the steps below, which run sandbox.c's, filter.c's and limits.c's own
 * steps, so a forked kernel's box is the cold one's: one implementation. Not
 * linked into the proxy.
 *
 * The template forks B straight into a new PID namespace (boxlib_newpid
 * before the fork, boxlib_ownpid after), where B is PID 1; B leaves for the
 * box's other namespaces (boxlib_unshare), says hello to the proxy with its
 * pidfd, waits while the proxy joins it to the context's cgroups, builds
 * the box and drops every privilege (boxlib_init), then forks the kernel
 * (boxlib_kernel) and becomes its init (boxlib_wait): it executes sandcell-init
 * (init.c), so that the box does not keep a copy of the template's pages.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <linux/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proxy.h"

long boxlib_hot_fill(void); /* hotpages.c */

/* The box of this fork: one per process (each request is a fork of its own). */
static struct box bx = {.bx_on = true, .bx_sock = -1, .bx_pidfd = -1, .bx_initfd = -1,
			.bx_out = -1};
static char *bx_cwd; /* the kernel's */

/*
 * The seccomp filter (bx.bx_prog), the same for every box: compiled once
 * in the template (boxlib_template), inherited by each fork. Compiled in B,
 * libseccomp's ~1300 allocations took chunks from the template's free lists
 * all over its heap, and each page they wrote was a copy-on-write fault
 * (~660 per box). Its -errno until then, or when it could not be compiled.
 */
static int filter_rc = -EAGAIN;

/* What the proxy computed of the box (template.c's box_json). */
static int
parse(const char *conf)
{
	json_t *o = json_loads(conf, 0, NULL), *groups, *binds, *b;
	json_int_t uid = -1, gid = -1, mem = 0, cpu = 0, tmp = 0, nproc = 0;
	const char *ws = NULL, *hide = NULL, *id = NULL, *cwd = NULL, *kdir = NULL;
	int cg = 0, rc = -EINVAL;
	size_t i;

	if (!o || json_unpack(o, "{s:s, s:s, s:s, s:s, s:o, s:s, s:I, s:I, s:I, s:o, s:I, s:I, s:b, s:I}",
			      "id", &id, "cwd", &cwd, "workspace", &ws, "kdir", &kdir, "binds", &binds,
			      "hide",
			      &hide, "tmp_size",
			      &tmp, "uid", &uid, "gid", &gid, "groups", &groups, "memory", &mem,
			      "cpu", &cpu, "cgroup", &cg, "nproc", &nproc) < 0)
		goto out;
	/* never root, never unboxed: the proxy's sandbox_init checked, so do we */
	if (uid <= 0 || gid <= 0 || uid >= (json_int_t)UINT32_MAX || gid >= (json_int_t)UINT32_MAX ||
	    *ws != '/' || *kdir != '/' || *cwd != '/' || !json_is_array(binds) || !json_is_array(groups) ||
	    json_array_size(binds) > BOX_MAX_BINDS || json_array_size(groups) > 64)
		goto out;
	bx.bx_id = xstrdup(id);
	bx.bx_workspace = xstrdup(ws);
	bx.bx_kdir = xstrdup(kdir);
	bx.bx_hide = *hide ? xstrdup(hide) : NULL;
	bx.bx_tmp_size = tmp;
	bx.bx_uid = uid;
	bx.bx_gid = gid;
	bx.bx_mem = mem;
	bx.bx_cpu = cpu;
	bx.bx_nproc = nproc > 0 ? (uint64_t)nproc : 0;
	bx.bx_cg_mem = cg ? xstrdup("(the proxy's)") : NULL; /* limits.c: a cgroup, no RLIMIT_DATA */
	json_array_foreach(binds, i, b)
	{
		const char *path = json_string_value(json_object_get(b, "path"));
		if (!path || *path != '/')
			goto out;
		bx.bx_binds[bx.bx_nbinds++] =
			(struct box_bind){xstrdup(path), json_is_true(json_object_get(b, "write"))};
	}
	json_array_foreach(groups, i, b)
	{
		if (!json_is_integer(b))
			goto out;
		bx.bx_groups[bx.bx_ngroups++] = json_integer_value(b);
	}
	bx_cwd = xstrdup(cwd);
	rc = filter_rc;
out:
	json_decref(o);
	return rc;
}

/*
 * In the template, before it forks B: B is born PID 1 of a new PID namespace
 * (unshare(CLONE_NEWPID) changes only where our next child goes). One fork
 * for the box instead of two: an intermediate process would copy, then tear
 * down, the template's page tables, the largest cost of a fork. 0 or -errno.
 */
static int
boxlib_newpid(void)
{
	return unshare(CLONE_NEWPID) < 0 ? -errno : 0;
}

/*
 * Whether we cannot go back to our own PID namespace after boxlib_newpid
 * (boxlib_template tried): setns needs CAP_SYS_ADMIN over the namespace's
 * owner, which the broker's own user namespace in a container (broker/
 * boxns.c) is not. Then an intermediate makes B (fork_through).
 */
static bool no_way_back;

/*
 * B, PID 1 of a new PID namespace, forked by an intermediate that unshares
 * it in our place and exits at once: B comes back to us, the subreaper, to
 * be reaped. It costs one more fork of the template's pages. B's pid here,
 * 0 in B, or -errno.
 */
static pid_t
fork_through(void)
{
	int p[2];
	pid_t i, b = -1;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	if ((i = fork()) == 0) {
		close(p[0]);
		if (unshare(CLONE_NEWPID) < 0 || (b = fork()) < 0)
			b = -errno;
		if (b == 0) {
			close(p[1]);
			return 0;
		}
		_exit(write(p[1], &b, sizeof(b)) == sizeof(b) ? 0 : 1);
	}
	close(p[1]);
	if (i < 0) {
		b = -errno;
		close(p[0]);
		return b;
	}
	if (read(p[0], &b, sizeof(b)) != sizeof(b))
		b = -EIO;
	close(p[0]);
	waitpid(i, NULL, 0);
	return b;
}

/*
 * In the template, right after that fork: our children go to our own PID
 * namespace again (ownfd: /proc/self/ns/pid, opened at start), so that the
 * next boxlib_newpid can make another one. 0 or -errno.
 */
static int
boxlib_ownpid(int ownfd)
{
	return setns(ownfd, CLONE_NEWPID) < 0 ? -errno : 0;
}

/*
 * In B, forked from the template as PID 1 of its PID namespace: the box's
 * other namespaces and, with --network none, the proxy's network namespace.
 * 0 or -errno.
 */
static int
boxlib_unshare(const char *conf, int netfd)
{
	int rc;

	if ((rc = parse(conf)) < 0)
		return rc;
	if (getpid() != 1) /* never a box whose PID namespace is the template's */
		return -EINVAL;
	if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) < 0)
		return -errno;
	if (netfd >= 0 && setns(netfd, CLONE_NEWNET) < 0)
		return -errno;
	return 0;
}

/*
 * In B: what /proc/PID/cmdline and environ show of the kernel (which inherits
 * our memory map) is the cold start's argv and env, not the template's: a
 * copy of them, NUL-separated, becomes those areas (PR_SET_MM_MAP, which
 * needs no capability; the rest of the map is passed on as it is).
 */
static int
boxlib_show(const char *args, size_t alen, const char *env, size_t elen)
{
	struct prctl_mm_map mm = {.exe_fd = (__u32)-1};
	unsigned long long f[52] = {0};
	char buf[2048], *p;
	ssize_t n;
	int fd, i;

	if (!alen || !elen)
		return -EINVAL;
	if ((fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC)) < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0 || !(p = strrchr((buf[n] = '\0', buf), ')')))
		return -EIO;
	/* fields from 3 (state) on; the numbers stat(5) gives them */
	for (i = 3, p += 2; i <= 51 && *p; i++) {
		f[i] = strtoull(p, &p, 10);
		while (*p == ' ')
			p++;
		if (i == 3) /* the state letter */
			p++, f[3] = 0;
	}
	if (i <= 51)
		return -EIO;
	char *m = mmap(NULL, alen + elen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	memcpy(m, args, alen);
	memcpy(m + alen, env, elen);
	mm.start_code = f[26];
	mm.end_code = f[27];
	mm.start_stack = f[28];
	mm.start_data = f[45];
	mm.end_data = f[46];
	mm.start_brk = f[47];
	mm.brk = (unsigned long)syscall(SYS_brk, 0);
	mm.arg_start = (unsigned long)m;
	mm.arg_end = mm.arg_start + alen;
	mm.env_start = mm.arg_end;
	mm.env_end = mm.env_start + elen;
	if (prctl(PR_SET_MM, PR_SET_MM_MAP, (unsigned long)&mm, sizeof(mm), 0) < 0)
		return -errno;
	return 0;
}

/* The hello: "i" with our pidfd; the proxy sees our pid in its namespace. */
static int
hello(int sock)
{
	int pidfd = syscall(SYS_pidfd_open, getpid(), 0), rc = 0;
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {"i", 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

	if (pidfd < 0)
		return -errno;
	memset(cbuf, 0, sizeof(cbuf));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &pidfd, sizeof(int));
	if (sendmsg(sock, &mh, MSG_NOSIGNAL) != 1)
		rc = -errno;
	close(pidfd);
	return rc;
}

/*
 * In B, PID 1 of the new namespaces: hello, wait for the proxy's go (it has
 * joined us to the context's cgroups), the box (sandbox_enter: mounts, limits,
 * uid, capabilities, no_new_privs, seccomp), then only fds 0-4 stay open:
 * sandbox_stdio's (/dev/null, the proxy's pipe out as 1 and 2, its socket as
 * 3), sandcell-init (opened before the mounts could hide it) as 4. Not one of
 * ours: our stdout and stderr are the broker's log. 0, or an exit code
 * (sb_init's).
 */
static int
boxlib_init(int sock, int out)
{
	int rc, fd = -1;
	char c;

	syscall(SYS_setsid);
	/* the template read the request with a timeout: blocking again */
	fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) & ~O_NONBLOCK);
	if (hello(sock) < 0)
		return 127;
	if (recv(sock, &c, 1, 0) != 1 || c != 'g') /* the proxy gave up on us */
		return 127;
	if (bx.bx_init && (fd = open(bx.bx_init, O_PATH | O_CLOEXEC)) >= 0) {
		/* above 3, which the dup2s below take */
		bx.bx_initfd = fcntl(fd, F_DUPFD_CLOEXEC, 4);
		close(fd);
	}
	if ((rc = sandbox_enter(&bx)))
		return rc;
	struct pollfd pf = {sock, POLLRDHUP, 0};
	if (poll(&pf, 1, 0) != 0)
		return 127;
	if (sandbox_stdio(out, sock) < 0)
		return 122;
	if (bx.bx_initfd >= 0 && bx.bx_initfd != 4) {
		if (dup3(bx.bx_initfd, 4, O_CLOEXEC) < 0)
			return 122;
		bx.bx_initfd = 4;
	}
	/* the template's own descriptors (its socket first) stay out of the box */
	syscall(SYS_close_range, bx.bx_initfd >= 0 ? 5 : 4, ~0U, 0);
	return 0;
}

/* In the kernel, forked from B: sandbox.c's kernel steps (Python's signals stay). */
static int
boxlib_kernel(void)
{
	/*
	 * An exec would make the kernel dumpable again after the uid change (as
	 * a cold one is): without it, its own /proc/self files (environ, fd...)
	 * would be root's and closed to it.
	 */
	if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
		return 122;
	if (bx.bx_initfd >= 0)
		close(bx.bx_initfd);
	return sandbox_kernel_child(bx_cwd, false);
}

/*
 * In B once the kernel runs: its init until it ends, or the proxy does. We
 * become sandcell-init when the kernel's uid (ours) cannot read it: the exec
 * then leaves us non-dumpable, as the uid change did, so the kernel cannot
 * reach into us. Otherwise (not found, or readable) we stay as we are.
 */
static void
boxlib_wait(int kid)
{
	char num[16], *argv[] = {"sandcell-init", num, NULL}, *envp[] = {NULL};
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGCHLD, SIG_DFL);
	if (bx.bx_initfd >= 0) {
		snprintf(num, sizeof(num), "%d", kid);
		if (faccessat(bx.bx_initfd, "", R_OK, AT_EMPTY_PATH) < 0 && errno == EACCES) {
			syscall(SYS_execveat, bx.bx_initfd, "", argv, envp, AT_EMPTY_PATH);
			dprintf(2, "sandcell-box warning: context %s: exec %s: %s\n", bx.bx_id,
				bx.bx_init, strerror(errno));
		} else {
			dprintf(2, "sandcell-box warning: context %s: %s is readable by uid %u "
				   "(it must be mode 0711, another's): the box's init stays a "
				   "fork of the template\n",
				bx.bx_id, bx.bx_init, (unsigned)getuid());
		}
	}
	boxinit_wait(kid, true);
}

/*
 * In the template, for one request: B and the kernel in one call, so that
 * neither runs Python between the forks (each Python step of B's copied
 * some of the template's pages: ~1300 faults per box). B is forked into a
 * new PID namespace (boxlib_newpid, then boxlib_ownpid for us; or
 * fork_through where we could not come back), leaves for
 * the box's other namespaces, shows the cold start's argv and env, says
 * hello and builds the box (boxlib_init), forks the kernel and becomes its
 * init (boxlib_wait). The kernel copies the template's hot pages
 * (hotpages.c) and takes its own steps (boxlib_kernel).
 *
 * Returns in two processes: here, B's pid or -errno (-EPROTO: we could not go
 * back to our own PID namespace, and must start again); in the kernel, 0.
 * The caller brackets the call as os.fork() does (PyOS_BeforeFork, then
 * PyOS_AfterFork_Parent here and PyOS_AfterFork_Child in the kernel). B
 * never returns: it exits with the code of the step that failed.
 */
int
boxlib_fork(int ownpid, const char *conf, int netfd, const char *args, size_t alen,
	    const char *env, size_t elen, int sock, int out)
{
	pid_t b, k;
	int rc;

	if (no_way_back) {
		if ((b = fork_through()) != 0)
			return b;
	} else {
		if ((rc = boxlib_newpid()) < 0)
			return rc;
		b = fork();
		if (b != 0) {
			rc = b < 0 ? -errno : b;
			return boxlib_ownpid(ownpid) < 0 ? -EPROTO : rc;
		}
	}
	signal(SIGCHLD, SIG_DFL);
	if ((rc = boxlib_unshare(conf, netfd)) < 0) {
		dprintf(2, "sandcell-template[%d] info: box namespaces: %s\n", (int)getpid(),
			strerror(-rc));
		_exit(120);
	}
	if ((rc = boxlib_show(args, alen, env, elen)) < 0)
		dprintf(2,
			"sandcell-template[%d] info: the kernel's /proc cmdline and environ: %s\n",
			(int)getpid(), strerror(-rc));
	if ((rc = boxlib_init(sock, out)))
		_exit(rc);
	if ((k = fork()) < 0)
		_exit(127);
	if (k) {
		boxlib_wait(k); /* never returns */
		_exit(127);
	}
	boxlib_hot_fill();
	if ((rc = boxlib_kernel()))
		_exit(rc);
	return 0;
}

/*
 * The template itself: orphaned inits come back to it, to be reaped. It
 * compiles the boxes' seccomp filter, and finds sandcell-init, beside this
 * library (build tree and install alike).
 */
int
boxlib_template(void)
{
	Dl_info di;
	struct stat st;

	if ((filter_rc = filter_build(&bx)) < 0)
		fprintf(stderr, "sandcell-template[%d] warn: seccomp filter: %s: boxes cannot "
				"be made here, kernels start cold\n",
			(int)getpid(), strerror(-filter_rc));

	if (dladdr((void *)boxlib_template, &di) && di.dli_fname && strrchr(di.dli_fname, '/')) {
		const char *slash = strrchr(di.dli_fname, '/');
		char *path = xasprintf("%.*s/sandcell-init", (int)(slash - di.dli_fname),
				       di.dli_fname);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && !(st.st_mode & S_IROTH))
			bx.bx_init = path;
		else {
			fprintf(stderr, "sandcell-template[%d] warn: %s: %s: boxes keep a fork "
					"of the template as their init\n",
				(int)getpid(), path,
				stat(path, &st) < 0 ? strerror(errno) : "readable by others (not 0711)");
			free(path);
		}
	}
	int own = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
	no_way_back = own >= 0 && setns(own, CLONE_NEWPID) < 0; /* a no-op where allowed */
	if (own >= 0)
		close(own);
	return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 ? -errno : 0;
}
