/*
 * template.c — the Python template (proxy/python/sandcell_template.py): one
 * long-lived process for the Python kernelspec that has imported ipykernel
 * and the data stack, from which the proxies have their kernels forked
 * (proxy/template.c). The broker starts it with a minimal environment, tells
 * the proxies of that kernelspec its socket (--template), and starts it again
 * when it dies; meanwhile the proxies start their kernels cold. Only with the
 * sandbox as root (a rootless box starts cold), and not with --no-template.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker.h"

#define TPL_MAX_OPTIONS 8 /* the kernelspec's interpreter options it takes */

/* The template's state: this file's alone. */
static struct {
	char *tp_kernel;  /* the kernelspec it serves; NULL: no template */
	char *tp_sock;    /* <run dir>/template-<kernel>.sock */
	/* python, its options, the script, libsandcell-box.so, the socket */
	char *tp_argv[5 + TPL_MAX_OPTIONS];
	char **tp_env;
	pid_t tp_pid;
	uint64_t tp_started_at, tp_respawn_at, tp_backoff;
} tp;

/*
 * How long the pool and the default contexts wait for a starting template
 * (ready in 1-4 s here; 11.7 s once at a load of 9 on 2 CPUs, when 10 s made
 * the first warm kernels cold). A client's own request never waits on it;
 * the default contexts do, at start-up only.
 */
#define TPL_READY_WAIT_MS 30000
#define TPL_BACKOFF_MIN_MS 500
#define TPL_BACKOFF_MAX_MS 30000

extern char **environ;


/* A file beside the broker (build tree or installed), or in dir. */
static char *
find_file(const char *dir, const char *const *rel, size_t n)
{
	char exe[PATH_MAX], path[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (dir) {
		char *p = xasprintf("%s/%s", dir, strrchr(rel[0], '/') + 1);
		if (access(p, R_OK) == 0)
			return p;
		free(p);
	}
	if (len <= 0)
		return NULL;
	exe[len] = '\0';
	*strrchr(exe, '/') = '\0';
	for (size_t i = 0; i < n; i++) {
		char *p = xasprintf("%s/%s", exe, rel[i]);
		bool ok = realpath(p, path) && access(path, R_OK) == 0;
		free(p);
		if (ok)
			return xstrdup(path);
	}
	return NULL;
}

/*
 * The template's environment: PATH, and what a kernel's interpreter and data
 * stack pin at start (locale, PYTHON*, thread counts...) as the broker's
 * environment gives them to kernels (the template refuses a kernel whose
 * values differ): of those only what the kernels' allowlist (lib/kenv.c, with
 * --env-pass) takes, as proxy/launch.c does. Never the broker's secrets.
 */
static char **
template_env(void)
{
	/* proxy/python/sandcell_template.py's PINNED, and PATH */
	static const char *const pinned[] = {"PATH=", "PYTHON", "LANG", "LC_", "OPENBLAS",
					     "OMP_", "MKL_", "GOTO", "NUMEXPR", "NUMPY", "NPY_",
					     "PANDAS", "PYDEVD", "TMPDIR", "TZ", "JPY_", "USER",
					     "IPYTHON_", "TRAITLETS"};
	char **v = xcalloc(100, sizeof(*v));
	int n = 0;

	for (char **e = environ; *e && n < 95; e++) {
		/* ours below, as proxy/launch.c gives them to every boxed kernel */
		if (!strncmp(*e, "JPY_PARENT_PID=", 15) ||
		    !strncmp(*e, "PYDEVD_DISABLE_FILE_VALIDATION=", 31) ||
		    !kenv_passes(*e, cf->cf_env_pass))
			continue;
		for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++)
			if (!strncmp(*e, pinned[i], strlen(pinned[i]))) {
				v[n++] = xstrdup(*e);
				break;
			}
	}
	if (!getenv("LANG") && !getenv("LC_ALL"))
		v[n++] = xstrdup("LANG=C.UTF-8");
	v[n++] = xstrdup("PYDEVD_DISABLE_FILE_VALIDATION=1");
	v[n++] = xstrdup("JPY_PARENT_PID=1"); /* read as ipykernel is imported */
	v[n++] = xasprintf("SANDCELL_TEMPLATE=%s", tp.tp_kernel);
	return v;
}

static void
spawn(void)
{
	sigset_t none;
	pid_t pid;

	sigemptyset(&none);
	unlink(tp.tp_sock); /* its socket appears when it is ready (template_starting) */
	if ((pid = fork()) < 0) {
		log_err("template: fork: %s", strerror(errno));
		tp.tp_respawn_at = now_ms() + TPL_BACKOFF_MAX_MS;
		return;
	}
	if (pid == 0) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		setsid();
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* it serves this broker only */
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (fd >= 0)
			dup2(fd, 0);
		dup2(2, 1);
		syscall(SYS_close_range, 3, ~0U, 0);
		execve(tp.tp_argv[0], tp.tp_argv, tp.tp_env);
		_exit(127);
	}
	tp.tp_pid = pid;
	tp.tp_started_at = now_ms();
	tp.tp_respawn_at = 0;
	log_info("template: %s kernels are forked from a template (pid %d, %s)", tp.tp_kernel,
		 (int)pid, tp.tp_sock);
}

void
template_start(void)
{
	static const char *const script[] = {"../proxy/python/sandcell_template.py",
					     "../share/sandcell/sandcell_template.py"};
	static const char *const lib[] = {"libsandcell-box.so", "../lib/sandcell/libsandcell-box.so"};
	const struct kspec *ks;
	char *dir = NULL;

	if (!cf->cf_template) {
		log_info("template: off (--no-template): every kernel starts cold");
		return;
	}
	if (!cf->cf_sandbox || geteuid() != 0 || boxnons_on()) {
		log_info("template: off (%s): every kernel starts cold",
			 !cf->cf_sandbox ? "--no-sandbox"
			 : geteuid()	      ? "not root: the boxes are rootless"
					      : "no namespaces here: the boxes have none");
		return;
	}
	if (!(ks = kcache_find("python")))
		return;
	char **a = ks->ks_argv;
	int no = kspec_python_module(a) - 1; /* the interpreter's options */
	if (no < 0 || no > TPL_MAX_OPTIONS || strcmp(a[no + 2], "ipykernel_launcher") ||
	    !a[no + 3] || strcmp(a[no + 3], "-f") || !a[no + 4] ||
	    strcmp(a[no + 4], "{connection_file}") || a[no + 5]) {
		log_info("template: off: kernelspec %s is not python [-X and -W options] -m "
			 "ipykernel_launcher -f {connection_file}; its kernels start cold",
			 ks->ks_name);
		return;
	}
	if (cf->cf_python_startup) {
		dir = xstrdup(cf->cf_python_startup);
		*strrchr(dir, '/') = '\0';
	}
	tp.tp_kernel = xstrdup(ks->ks_name);
	/* the kernelspec's interpreter options are the template's: its kernels are its forks */
	for (int i = 0; i < no; i++)
		tp.tp_argv[1 + i] = xstrdup(a[1 + i]);
	tp.tp_argv[1 + no] = find_file(dir, script, 2);
	tp.tp_argv[2 + no] = find_file(NULL, lib, 2);
	free(dir);
	if (!tp.tp_argv[1 + no] || !tp.tp_argv[2 + no]) {
		log_warn("template: off: %s not found; every kernel starts cold",
			 tp.tp_argv[1 + no] ? "libsandcell-box.so" : "sandcell_template.py");
		free(tp.tp_kernel);
		tp.tp_kernel = NULL;
		return;
	}
	/* the interpreter the kernelspec names, on the broker's PATH as a proxy finds it */
	if (strchr(a[0], '/')) {
		tp.tp_argv[0] = xstrdup(a[0]);
	} else {
		const char *path = getenv("PATH");
		char *copy = xstrdup(path ? path : "/usr/local/bin:/usr/bin:/bin"), *save, *d;
		for (d = strtok_r(copy, ":", &save); d && !tp.tp_argv[0]; d = strtok_r(NULL, ":", &save)) {
			char *p = xasprintf("%s/%s", *d ? d : ".", a[0]);
			if (access(p, X_OK) == 0)
				tp.tp_argv[0] = p;
			else
				free(p);
		}
		free(copy);
		if (!tp.tp_argv[0])
			tp.tp_argv[0] = xstrdup(a[0]);
	}
	tp.tp_sock = xasprintf("%s/template-%s.sock", cf->cf_run_dir, tp.tp_kernel);
	tp.tp_argv[3 + no] = tp.tp_sock;
	tp.tp_env = template_env();
	tp.tp_backoff = TPL_BACKOFF_MIN_MS;
	spawn();
}

/* The template's socket for kernels of this kernelspec, or NULL (cold). */
const char *
template_socket(const char *kernel)
{
	return tp.tp_kernel && !strcmp(tp.tp_kernel, kernel) ? tp.tp_sock : NULL;
}

/*
 * Whether kernels of this kernelspec should wait a little for the template:
 * it runs, has not bound its socket yet (it is importing), and started less
 * than TPL_READY_WAIT_MS ago. The pool waits (a kernel warmed now would be a
 * cold one, and stay so while it waits to be claimed); requests never do.
 */
bool
template_starting(const char *kernel)
{
	return template_socket(kernel) && tp.tp_pid > 0 &&
	       now_ms() < tp.tp_started_at + TPL_READY_WAIT_MS &&
	       access(tp.tp_sock, F_OK) < 0;
}

/*
 * How long a proxy may wait for a starting template (template_starting), in
 * ms: what is left of TPL_READY_WAIT_MS; 0 when it is not starting.
 */
uint64_t
template_wait_ms(const char *kernel)
{
	uint64_t now = now_ms(), until = tp.tp_started_at + TPL_READY_WAIT_MS;

	/* one reading of the clock: a second, later one could pass until */
	return template_starting(kernel) && now < until ? until - now : 0;
}

/* Whether pid was the template; if so, it starts again after a pause. */
bool
template_reaped(pid_t pid, int status)
{
	uint64_t now = now_ms();

	if (!tp.tp_pid || pid != tp.tp_pid)
		return false;
	tp.tp_pid = 0;
	if (lifecycle_quitting())
		return true;
	/* a template that lived a while is restarted at once; one that keeps
	 * dying, less and less often (kernels start cold meanwhile) */
	if (now > tp.tp_started_at + 60000)
		tp.tp_backoff = TPL_BACKOFF_MIN_MS;
	else if ((tp.tp_backoff *= 2) > TPL_BACKOFF_MAX_MS)
		tp.tp_backoff = TPL_BACKOFF_MAX_MS;
	tp.tp_respawn_at = now + tp.tp_backoff;
	if (WIFSIGNALED(status))
		log_warn("template: pid %d was killed by signal %d; kernels start cold until "
			 "it is back (in %llu ms)",
			 (int)pid, WTERMSIG(status), (unsigned long long)tp.tp_backoff);
	else
		log_warn("template: pid %d exited with status %d; kernels start cold until it "
			 "is back (in %llu ms)",
			 (int)pid, WEXITSTATUS(status), (unsigned long long)tp.tp_backoff);
	return true;
}

void
template_tick(uint64_t now)
{
	if (tp.tp_kernel && !tp.tp_pid && tp.tp_respawn_at && now >= tp.tp_respawn_at)
		spawn();
}

void
template_stop(void)
{
	if (tp.tp_pid > 0) {
		kill(tp.tp_pid, SIGKILL);
		waitpid(tp.tp_pid, NULL, 0);
		tp.tp_pid = 0;
	}
	if (tp.tp_sock)
		unlink(tp.tp_sock);
}
