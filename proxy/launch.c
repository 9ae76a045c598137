/*
 * launch.c — what a kernel is started with: its environment, its argv with
 * the kernelspec's placeholders filled in and resolved on PATH (and the
 * interpreters told to read nothing of the workspace as they start), the
 * IPython profile, the connection file, and the start of an unboxed one.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <sodium.h>

#include "proxy.h"

extern char **environ;

/* This launch's ipc socket names, less "-N"; and launches so far, which name them. */
static char kchan[PATH_MAX];
static unsigned klaunches;

/*
 * `python -m MOD ARGS`, safely: with -m the cwd (the workspace) is first on
 * sys.path as the interpreter starts, so a module there named like one the
 * kernel imports (ipykernel_launcher, IPython, zmq) would run in its place.
 * With -c the cwd comes first only once site has run, and this takes it off
 * before anything is imported (sys is built in); -s keeps the user's
 * site-packages (in HOME, the workspace) out too. IPython puts the cwd back
 * for the user's imports.
 */
#define SAFE_RUN_MODULE                                                                  \
	"import sys; del sys.path[0]; import runpy; "                                    \
	"m = sys.argv.pop(1); sys.argv[0] = m; "                                         \
	"runpy.run_module(m, run_name='__main__', alter_sys=True)"

static void
env_put(char ***v, size_t *n, size_t *cap, char *kv)
{
	size_t kl = strcspn(kv, "=");

	for (size_t i = 0; i < *n; i++)
		if (!strncmp((*v)[i], kv, kl) && (*v)[i][kl] == '=') {
			free((*v)[i]);
			(*v)[i] = kv;
			return;
		}
	if (*n + 2 > *cap)
		*v = xrealloc(*v, (*cap *= 2) * sizeof(**v));
	(*v)[(*n)++] = kv;
}

/* HOME: the workspace in a box, a dir of the kernel's own otherwise. */
static char *
home_of(const struct proxy *px)
{
	return px->px_box.bx_on ? xstrdup(sandbox_home(px)) : xasprintf("%s/home", px->px_kdir);
}

/*
 * What a kernel is started with: the allowlisted part of environ (kenv.c),
 * overridden by the kernelspec's env, then the tenant's package places, then
 * ours, then the global env (--env, --env-file).
 */
char **
launch_env(const struct proxy *px)
{
	size_t n = 0, cap = 64;
	char **v = xmalloc(cap * sizeof(*v)), *home = home_of(px);
	bool box = px->px_box.bx_on;
	char *ours[] = {
		xasprintf("HOME=%s", home),
		/* the profile is sandcell's, beside the connection file: not in the workspace */
		xasprintf("IPYTHONDIR=%s/ipython", sandbox_kdir(px)),
		/* without namespaces the host's /tmp is everyone's: the kernel's is in its dir */
		px->px_box.bx_nons ? xasprintf("TMPDIR=%s/tmp", px->px_kdir) : NULL,
		px->px_box.bx_nons ? xasprintf("JUPYTER_RUNTIME_DIR=%s/tmp/.jupyter", px->px_kdir)
		: box ? xstrdup("JUPYTER_RUNTIME_DIR=/tmp/.jupyter")
		    : xasprintf("JUPYTER_RUNTIME_DIR=%s/.jupyter-runtime", home),
		xasprintf("PWD=%s", px->px_cwd),
		xstrdup("PYDEVD_DISABLE_FILE_VALIDATION=1"),
		/* unboxed, one font cache for every kernel; boxed, the workspace's */
		box ? NULL : xasprintf("MPLCONFIGDIR=%s/cache/matplotlib", px->px_run_dir),
		/* in a box the kernel's parent is its init, PID 1: "1" turns
		 * ipykernel's parent poller off (PR_SET_PDEATHSIG does its job) */
		xasprintf("JPY_PARENT_PID=%d", box ? 1 : (int)getpid()),
		NULL,
	};

	/* built, not inherited: of ours only what every kernel needs and --env-pass names */
	for (char **e = environ; *e; e++)
		if (kenv_passes(*e, px->px_env_pass))
			env_put(&v, &n, &cap, xstrdup(*e));
	for (char **e = px->px_ks->ks_env; *e; e++)
		env_put(&v, &n, &cap, xstrdup(*e));
	/* the tenant's package places (packages.c), PATH's ahead of the system's */
	const char *path = NULL;
	for (size_t i = 0; i < n; i++)
		if (!strncmp(v[i], "PATH=", 5))
			path = v[i] + 5;
	char **pk = packages_env(home, path);
	for (char **e = pk; *e; e++) {
		/* Deno's own program last (`deno add`, `deno install`): it shadows nothing */
		if (!strncmp(*e, "PATH=", 5) && px->px_deno) {
			char *dir = xstrndup(px->px_deno, strrchr(px->px_deno, '/') - px->px_deno);
			char *p = xasprintf("%s:%s", *e, *dir ? dir : "/");
			free(dir);
			free(*e);
			*e = p;
		}
		env_put(&v, &n, &cap, *e);
	}
	free(pk);
	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		if (ours[i])
			env_put(&v, &n, &cap, ours[i]);
	if (!getenv("LANG") && !getenv("LC_ALL")) /* R and bash need it for UTF-8 */
		env_put(&v, &n, &cap, xstrdup("LANG=C.UTF-8"));
	for (size_t i = 0; i < px->px_ngenv; i++)
		env_put(&v, &n, &cap, xasprintf("%s=%s", px->px_genv[i].e_key.s, px->px_genv[i].e_val.s));
	if (px->px_ngenv && !strcmp(px->px_ks->ks_lang, "java")) {
		/* their names: the Java kernel sets them as system properties too */
		struct buf names = {0};
		buf_append(&names, "SANDCELL_GLOBAL_ENV=", 20);
		for (size_t i = 0; i < px->px_ngenv; i++) {
			if (i)
				buf_append(&names, ",", 1);
			buf_append(&names, px->px_genv[i].e_key.s, px->px_genv[i].e_key.len);
		}
		buf_append(&names, "", 1);
		env_put(&v, &n, &cap, names.b_data);
	}
	v[n] = NULL;
	free(home);
	return v;
}

void
launch_free_strv(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

char *
launch_subst(const char *arg, const char *conn, const char *resdir)
{
	struct buf b = {0};
	const struct {
		const char *pat, *val;
	} subs[] = {{"{connection_file}", conn}, {"{resource_dir}", resdir}};

	while (*arg) {
		size_t i, nsubs = sizeof(subs) / sizeof(subs[0]);
		for (i = 0; i < nsubs; i++)
			if (!strncmp(arg, subs[i].pat, strlen(subs[i].pat)))
				break;
		if (i < nsubs) {
			buf_append(&b, subs[i].val, strlen(subs[i].val));
			arg += strlen(subs[i].pat);
		} else {
			buf_append(&b, arg++, 1);
		}
	}
	buf_append(&b, "", 1);
	return b.b_data;
}

/* Resolves argv[0] on PATH before fork, so the child only calls execve. */
char *
launch_which(const char *prog)
{
	const char *path = getenv("PATH");
	char *copy, *save, *dir;

	if (strchr(prog, '/'))
		return xstrdup(prog);
	copy = xstrdup(path ? path : "/usr/local/bin:/usr/bin:/bin");
	for (dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		char *p = xasprintf("%s/%s", *dir ? dir : ".", prog);
		if (access(p, X_OK) == 0) {
			free(copy);
			return p;
		}
		free(p);
	}
	free(copy);
	return xstrdup(prog);
}

/* The program's name without its directory. */
static const char *
base_of(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/*
 * The kernelspec's argv with its placeholders filled in and, for the
 * interpreters the project ships kernels for, the flags that keep what the
 * workspace holds from running as they start: Python's safe module run (and
 * -s), R's --no-init-file --no-environ --no-restore (.Rprofile, .Renviron,
 * .RData in the cwd or HOME). Under `--cgroup systemd` (unboxed), a
 * transient scope of its own under sandcell.slice comes first.
 */
char **
launch_argv(const struct proxy *px, const char *conn)
{
	char *const *ks = px->px_ks->ks_argv;
	int argc = 0, a = 0;
	char **argv;

	while (ks[argc])
		argc++;
	argv = xcalloc(argc + 20, sizeof(*argv));
	if (px->px_box.bx_cg_parent && !strcmp(px->px_box.bx_cg_parent, "systemd")) {
		/* systemd-run registers the scope and execs the kernel in place */
		argv[a++] = xstrdup("systemd-run");
		argv[a++] = xstrdup("--scope");
		argv[a++] = xstrdup("--quiet");
		argv[a++] = xstrdup("--collect");
		argv[a++] = xstrdup("--slice=sandcell.slice");
		argv[a++] = xasprintf("--unit=sandcell-kernel-%.8s-%d", px->px_id, (int)getpid());
		if (px->px_box.bx_mem) {
			argv[a++] = xstrdup("-p");
			argv[a++] = xasprintf("MemoryMax=%llu", (unsigned long long)px->px_box.bx_mem);
			argv[a++] = xstrdup("-p");
			argv[a++] = xstrdup("MemorySwapMax=0");
		}
		argv[a++] = xstrdup("--");
	}
	for (int i = 0; i < argc; i++) {
		argv[a++] = launch_subst(ks[i], conn, px->px_ks->ks_dir);
		if (i > 0)
			continue;
		const char *prog = base_of(ks[0]);
		int m = strncmp(prog, "python", 6) ? -1 : kspec_python_module(ks);
		if (m > 0) {
			/* -s, its -X and -W options, then -c in place of -m */
			argv[a++] = xstrdup("-s");
			while (++i < m)
				argv[a++] = launch_subst(ks[i], conn, px->px_ks->ks_dir);
			argv[a++] = xstrdup("-c");
			argv[a++] = xstrdup(SAFE_RUN_MODULE);
		} else if (!strncmp(prog, "python", 6)) {
			argv[a++] = xstrdup("-s");
		} else if (!strcmp(prog, "R")) {
			argv[a++] = xstrdup("--no-init-file");
			argv[a++] = xstrdup("--no-environ");
			argv[a++] = xstrdup("--no-restore");
		}
	}
	argv[a] = NULL;
	return argv;
}

/*
 * The IPython kernel's configuration: no history database at all, neither an
 * sqlite file (a kernel killed mid-write leaves the file to its successor,
 * which then prints "Session/line number was not unique" into the user's
 * output) nor one in memory (~0.6 MB of every idle kernel's own pages,
 * docs/PERFORMANCE.md); the session's In, Out, _i and %history keep working
 * from IPython's lists. And sandcell's start-up profile (rich results for
 * data work) run at start. Its dirs exist already: a box shows the profile
 * read-only.
 */
static int
ipython_profile(const struct proxy *px)
{
	static const char *const sub[] = {"startup", "security", "log", "pid", "db"};
	char *dir = xasprintf("%s/ipython/profile_default", px->px_kdir);
	char *path = xasprintf("%s/ipython_kernel_config.py", dir);
	struct buf cfg = {0};
	int fd, rc;

	buf_append(&cfg, "c.HistoryManager.hist_file = ':memory:'\n", 40);
	static const char nohist[] = "c.HistoryManager.enabled = False\n";
	buf_append(&cfg, nohist, sizeof(nohist) - 1);
	/* the cwd for the user's imports, once the kernel has started (launch_argv) */
	static const char cwd_path[] =
		"c.InteractiveShellApp.exec_lines = [\"__import__('sys').path.insert(0, '')\"]\n";
	buf_append(&cfg, cwd_path, sizeof(cwd_path) - 1);
	/*
	 * No nap after each execution: ipykernel sleeps 0.5 ms between flushing
	 * the output and sending the reply (Kernel._execute_sleep), so that a
	 * client that stops at the reply has the output. The proxy stops at the
	 * reply and iopub's idle, which follows the output on the same socket.
	 * The nap was 0.5 ms of every execution's latency and, with its timer's
	 * wake, ~10 % of a short one's kernel CPU (make bench BENCH=kcpu).
	 */
	static const char no_nap[] = "c.Kernel._execute_sleep = 0\n";
	buf_append(&cfg, no_nap, sizeof(no_nap) - 1);
	if (px->px_py_startup) {
		json_t *p = json_string(px->px_py_startup);
		char *lit = json_dumps(p, JSON_ENCODE_ANY);
		char *line = xasprintf("c.InteractiveShellApp.exec_files = [%s]\n", lit);
		buf_append(&cfg, line, strlen(line));
		free(line);
		free(lit);
		json_decref(p);
	}
	rc = mkdir_p(dir, 0700);
	for (size_t i = 0; rc == 0 && i < sizeof(sub) / sizeof(sub[0]); i++) {
		char *s = xasprintf("%s/%s", dir, sub[i]);
		rc = mkdir_p(s, 0700);
		free(s);
	}
	if (rc == 0 && (fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) >= 0) {
		if (write(fd, buf_head(&cfg), buf_pending(&cfg)) < 0)
			rc = -errno;
		close(fd);
	} else if (rc == 0) {
		rc = -errno;
	}
	buf_free(&cfg);
	free(path);
	free(dir);
	return rc;
}

/*
 * The kernel's own files before each start: its profile, and (unboxed) its
 * HOME; all of them its uid's. A box shows them read-only.
 */
int
launch_dirs(const struct proxy *px)
{
	const struct box *bx = &px->px_box;
	int rc;

	if (!bx->bx_on) {
		char *home = home_of(px);
		rc = mkdir_p(home, 0700);
		if (rc == 0) /* the kernel's own HOME: its places are made here, then chowned */
			packages_prepare(home);
		free(home);
		if (rc < 0)
			return rc;
	}
	if ((rc = ipython_profile(px)) < 0)
		return rc;
	if (bx->bx_uid != (uid_t)-1)
		chown_r(px->px_kdir, bx->bx_uid, bx->bx_gid);
	return 0;
}

/*
 * The connection file: ipc sockets, abstract in a box (names in the proxy's
 * network namespace, which only it and its box share; no file to fill or
 * find; in a box without namespaces, the host's, which Landlock scopes to
 * the kernel's domain) and by path in the kernel's dir otherwise; TCP on loopback for
 * kernels that speak nothing else (Deno). Named for this launch alone: a
 * box outlives its proxy until its init notices, and a kernel restarted
 * must not be mistaken for the one before it.
 */
int
launch_connection_file(const struct proxy *px, const char *key, const char *path, int ports[5],
		       char ep[5][EP_MAX])
{
	json_t *o;
	char ip[PATH_MAX];
	int rc, fd;
	char *s;

	klaunches++;
	if (px->px_ks->ks_tcp) {
		snprintf(ip, sizeof(ip), "127.0.0.1");
		kchan[0] = '\0';
		if (ports_free(ports, 5) < 0) /* distinct: the kernel binds each */
			return -EADDRNOTAVAIL;
		for (int i = 0; i < 5; i++)
			snprintf(ep[i], EP_MAX, "tcp://127.0.0.1:%d", ports[i]);
	} else {
		if (px->px_box.bx_on && !px->px_box.bx_nons)
			snprintf(kchan, sizeof(kchan), "@k%u", klaunches);
		else if (px->px_box.bx_on && landlock_abi() >= 6) {
			/* the host's names, out of every other Landlock domain's reach;
			 * unguessable, so that no neighbour binds one first */
			unsigned char r[12];
			char hex[2 * sizeof(r) + 1];
			randombytes_buf(r, sizeof(r));
			sodium_bin2hex(hex, sizeof(hex), r, sizeof(r));
			snprintf(kchan, sizeof(kchan), "@sandcell.%s.k%u", hex, klaunches);
		} else
			snprintf(kchan, sizeof(kchan), "%s/k%d.%u", px->px_kdir,
				 (int)getpid(), klaunches);
		snprintf(ip, sizeof(ip), "%s", kchan);
		for (int i = 0; i < 5; i++) {
			ports[i] = i + 1;
			snprintf(ep[i], EP_MAX, "ipc://%s-%d", ip, ports[i]);
		}
	}
	o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:s, s:s, s:s}", "shell_port",
		      ports[0], "iopub_port", ports[1], "stdin_port", ports[2], "control_port",
		      ports[3], "hb_port", ports[4], "ip", ip, "key", key, "transport",
		      px->px_ks->ks_tcp ? "tcp" : "ipc", "signature_scheme", "hmac-sha256",
		      "kernel_name", px->px_ks->ks_name);
	s = json_dumps(o, JSON_INDENT(1));
	json_decref(o);
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
	} else {
		uid_t uid = px->px_box.bx_uid;
		if (uid != (uid_t)-1 && fchown(fd, uid, px->px_box.bx_gid) < 0)
			log_warn("context %s: chown %s: %s", px->px_id, path, strerror(errno));
		size_t len = strlen(s);
		ssize_t n = write(fd, s, len);
		/* a short write is a full filesystem: say so, not EIO */
		rc = n == (ssize_t)len ? 0 : n < 0 ? -errno : -ENOSPC;
		if (close(fd) < 0 && !rc)
			rc = -errno;
	}
	free(s);
	return rc;
}

/*
 * An unboxed kernel (--no-sandbox), started in dir: our child in a session
 * of its own, in its memory cgroup (limits.c) and, with --kernel-user, as
 * that user. Only async-signal-safe calls between fork and exec.
 */
int
launch_unboxed(const struct proxy *px, const char *dir, const char *exe, char **argv,
	       char **envp, struct kproc *kp)
{
	const struct box *bx = &px->px_box;
	pid_t parent = getpid(), pid;
	sigset_t none;

	sigemptyset(&none);
	if ((pid = fork()) < 0)
		return -errno;
	if (pid == 0) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		setsid();
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		signal(SIGPIPE, SIG_DFL); /* ignored in the proxy, not in kernels */
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (limits_join(bx, getpid()) < 0)
			_exit(125);
		limits_apply_child(bx);
		/* --kernel-user: drop to it for good (groups were looked up before fork) */
		if (bx->bx_uid != (uid_t)-1 &&
		    (setgroups(bx->bx_ngroups, bx->bx_groups) < 0 || setgid(bx->bx_gid) < 0 ||
		     setuid(bx->bx_uid) < 0 || setuid(0) == 0))
			_exit(124);
		if (fd >= 0)
			dup2(fd, 0);
		/* our pipe (kout.c), not our stderr: the broker's log */
		dup2(bx->bx_out, 1);
		dup2(bx->bx_out, 2);
		if (chdir(dir) < 0)
			_exit(126);
		execve(exe, argv, envp);
		_exit(127);
	}
	kp->kp_pid = pid;
	return 0;
}

/* The ipc files of the last launch (an unboxed kernel's; a box's are abstract). */
void
launch_unlink_sockets(void)
{
	for (int i = 1; kchan[0] == '/' && i <= 5; i++) {
		char *p = xasprintf("%s-%d", kchan, i);
		unlink(p); /* kernels leave their ipc files behind */
		free(p);
	}
}
