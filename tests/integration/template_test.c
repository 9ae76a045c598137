/*
 * template_test.c — Python kernels forked from the template (broker/template.c,
 * proxy/template.c, proxy/boxlib.c, proxy/python/sandcell_template.py): a
 * forked kernel is a fresh kernel in a box of its own, exactly as a cold one
 * (namespaces, uid, cwd, env); a restart gives a fresh one; the template's
 * death and a proxy's are survived. A kernel is known to be forked by the
 * data stack it has at start: a cold kernel has not imported pandas.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* no pool: every context below is forked when it is created */
HARNESS_SHARED_BROKER("--pool", "python=0", "--env", "TPL_GLOBAL=from-broker");

#define URL test_url()

static struct broker priv;
static bool priv_up;

static void
priv_stop(void)
{
	if (priv_up)
		cr_assert_eq(broker_stop(&priv), 0, "a sanitizer report in its log");
	priv_up = false;
}

static bool
is_forked(const char *base, const char *id)
{
	char *out = run_stdout(base, id, "import sys; print('pandas' in sys.modules)");
	bool yes = out && !strcmp(out, "True\n");

	free(out);
	return yes;
}

struct newctx {
	const char *base;
	char *id;
};

/* A new context whose kernel was forked (the template may still be starting). */
static bool
forked_ctx_cond(void *arg)
{
	struct newctx *n = arg;
	char path[128];
	struct resp r;

	n->id = context_new(n->base, "python", NULL);
	if (n->id && is_forked(n->base, n->id))
		return true;
	if (n->id) {
		snprintf(path, sizeof(path), "/contexts/%s", n->id);
		if (http(n->base, "DELETE", path, NULL, &r, 30) == 0)
			resp_free(&r);
		free(n->id);
		n->id = NULL;
	}
	return false;
}

static char *
forked_context(const char *base)
{
	struct newctx n = {base, NULL};

	cr_assert_eq(wait_until(forked_ctx_cond, &n, 90000), 0,
		     "no context was forked from the template");
	return n.id;
}

/* argv is exactly {a[0], a[1]}. */
static bool
has_args(const char *argv, size_t n, const void *arg)
{
	const char *const *a = arg;
	size_t l0 = strlen(a[0]) + 1;

	return n == l0 + strlen(a[1]) + 1 && !strcmp(argv, a[0]) && !strcmp(argv + l0, a[1]);
}

/* The host pid of a process whose argv is exactly {a0, a1}, or 0. */
static pid_t
pid_with_args(const char *a0, const char *a1)
{
	const char *a[2] = {a0, a1};

	return pid_where(has_args, a);
}

/* The kernel (host pid) has run for at least 3 s: the template's HOT_AGE is 2. */
static bool
older_than_3s(void *arg)
{
	double t = proc_started_s(*(pid_t *)arg);

	return t > 0 && boot_now_s() - t >= 3;
}

static void
wait_started(const char *base, const char *id)
{
	pid_t k = context_pid(base, id, "kernel_pid");

	cr_assert_gt(k, 0);
	cr_assert_eq(wait_until(older_than_3s, &k, 30000), 0, "kernel %d did not age", (int)k);
}

struct logcond {
	const struct broker *b;
	const char *text;
};

static bool
log_says(void *arg)
{
	struct logcond *lc = arg;
	char *log = broker_log(lc->b);
	bool yes = log && strstr(log, lc->text);

	free(log);
	return yes;
}

#define HOT_LINE "ahead as they start"

static json_t *
box_of(const char *base, const char *id)
{
	json_t *j = context_get(base, id);

	cr_assert_not_null(j);
	return j;
}

Test(template, a_forked_kernel_is_fresh_and_boxed, .timeout = 180)
{
	char *a = forked_context(URL), *b = forked_context(URL), *out;

	json_decref(run(URL, a, "secret = 42"));
	out = run_stdout(URL, b, "print('secret' in globals())");
	cr_assert_str_eq(out, "False\n", "a neighbour's variable is visible");
	free(out);

	/* namespaces of its own: not the host's, not the neighbour's */
	const char *ns = "import os\nfor n in ('pid', 'mnt', 'ipc', 'uts'):\n"
			 "    print(os.stat('/proc/self/ns/' + n).st_ino)";
	char *na = run_stdout(URL, a, ns), *nb = run_stdout(URL, b, ns);
	cr_assert_not_null(na);
	cr_assert_not_null(nb);
	unsigned long ia[4], ib[4];
	cr_assert_eq(sscanf(na, "%lu %lu %lu %lu", &ia[0], &ia[1], &ia[2], &ia[3]), 4, "%s", na);
	cr_assert_eq(sscanf(nb, "%lu %lu %lu %lu", &ib[0], &ib[1], &ib[2], &ib[3]), 4, "%s", nb);
	const char *names[4] = {"pid", "mnt", "ipc", "uts"};
	for (int i = 0; i < 4; i++) {
		char p[64];
		struct stat st;
		snprintf(p, sizeof(p), "/proc/self/ns/%s", names[i]);
		cr_assert_eq(stat(p, &st), 0);
		cr_assert_neq(ia[i], ib[i], "two contexts share a %s namespace", names[i]);
		cr_assert_neq(ia[i], (unsigned long)st.st_ino, "the host's %s namespace", names[i]);
	}
	free(na);
	free(nb);

	/* only its box in its process list, its init as parent */
	out = run_stdout(URL, a, "import os\nps = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
			     "print(os.getppid(), ps == [1, os.getpid()])");
	cr_assert_str_eq(out, "1 True\n");
	free(out);

	/* the box's uid, no privileges, its cwd */
	json_t *j = box_of(URL, a);
	json_int_t uid = json_integer_value(json_object_get(json_object_get(j, "sandbox"), "uid"));
	const char *cwd = json_string_value(json_object_get(j, "cwd"));
	cr_assert(uid > 0 && uid != (json_int_t)geteuid(), "uid %lld", (long long)uid);
	char want[512];
	snprintf(want, sizeof(want), "%lld %s NoNewPrivs:\t1 Seccomp:\t2 CapEff:\t0000000000000000\n",
		 (long long)uid, cwd);
	out = run_stdout(URL, a, "import os\ns = open('/proc/self/status').read().splitlines()\n"
			     "f = {l.split(':')[0]: l for l in s}\n"
			     "print(os.getuid(), os.getcwd(), f['NoNewPrivs'], f['Seccomp'], f['CapEff'])");
	cr_assert_str_eq(out, want);
	free(out);
	json_decref(j);
	/* the filter is the cold box's (compiled once in the template): clone3 and
	 * unshare(0), which succeeds unfiltered, are refused */
	out = run_stdout(URL, a, "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
			     "r = libc.syscall(435, 0, 0)\ne = ctypes.get_errno()\n"
			     "print(r, errno.errorcode[e], libc.unshare(0), "
			     "errno.errorcode[ctypes.get_errno()])");
	cr_assert_str_eq(out, "-1 ENOSYS -1 EPERM\n", "%s", out);
	free(out);

	/* the cold start's env: the broker's --env, the box's HOME, not the template's;
	 * the cwd importable once the kernel has started (not while it starts) */
	out = run_stdout(URL, a, "import os, sys\n"
			     "print(os.environ.get('TPL_GLOBAL'), 'SANDCELL_TEMPLATE' in os.environ,\n"
			     "      os.environ['HOME'] == '/home/user', os.environ['PWD'] == os.getcwd(),\n"
			     "      sys.argv[0].endswith('ipykernel_launcher.py'), sys.path[0] in ('', os.getcwd()))");
	cr_assert_str_eq(out, "from-broker False True True True True\n", "%s", out);
	free(out);
	/* and what /proc shows of it (ps, a child reading its parent's environ) */
	out = run_stdout(URL, a, "a = open('/proc/self/cmdline').read().split(chr(0))\n"
			     "e = open('/proc/self/environ').read().split(chr(0))\n"
			     "print(a[1:3], 'TPL_GLOBAL=from-broker' in e,\n"
			     "      any(v.startswith('SANDCELL_TEMPLATE=') for v in e))");
	cr_assert_str_eq(out, "['-s', '-c'] True False\n", "%s", out);
	free(out);
	/* its random state is its own */
	const char *rnd = "import numpy, random\nprint(numpy.random.randint(1 << 30), random.getrandbits(30))";
	na = run_stdout(URL, a, rnd);
	nb = run_stdout(URL, b, rnd);
	cr_assert_str_neq(na, nb, "two forked kernels drew the same random numbers");
	free(na);
	free(nb);
	free(a);
	free(b);
}

/*
 * What the interpreter and the kernel app were given: sys.path, the env, the
 * flags, and the app's command line and config as traitlets parsed them (a
 * fork sets what `-f FILE` parses to without traitlets' parser:
 * parse_quickly in sandcell_template.py). Paths in the broker's run dir,
 * the connection file, and the kernel's uid (two brokers lease two, as in
 * MPLCONFIGDIR's cache/matplotlib-UID) are named alike so that two brokers
 * compare; the
 * variables that a broker started in a test has and the shared one not
 * (criterion's BXFI_ and GMON_, the harness's SANDCELL_TEST_) are left out.
 */
struct broker_url_dir {
	const char *url, *run_dir;
};

static char *
interpreter_of(const struct broker_url_dir *b, const char *id)
{
	char code[2048];

	snprintf(code, sizeof(code),
		 "import os, sys, json\n"
		 "from ipykernel.kernelapp import IPKernelApp\n"
		 "app = IPKernelApp.instance()\n"
		 "e = dict(os.environ)\n"
		 "for k in list(e):\n"
		 "    if k in ('HOME', 'IPYTHONDIR', 'JUPYTER_RUNTIME_DIR') or\\\n"
		 "       k.startswith(('BXFI_', 'GMON_', 'SANDCELL_TEST_')): e.pop(k)\n"
		 "s = json.dumps([sys.path, sorted(e.items()), sys.argv[0], sys.flags.optimize,\n"
		 "                sys.getdefaultencoding(), sys.stdout.encoding, app.argv,\n"
		 "                repr(app.cli_config), app.extra_args, repr(app.config)])\n"
		 "print(s.replace(app.connection_file, 'CF').replace('%s', 'RUN')\n"
		 "       .replace('-%%d' %% os.getuid(), '-UID'))",
		 b->run_dir);
	return run_stdout(b->url, id, code);
}

/*
 * A broker of the test's own with the shared broker's options but every
 * kernel cold, a context on it (*c) and a forked one on the shared broker
 * (*f), each having run one execution (is_forked()); where each is.
 */
static void
cold_and_forked(char **c, char **f, struct broker_url_dir *cold, struct broker_url_dir *fork)
{
	const char *args[] = {"--no-template", "--no-default-context", "--pool", "python=0",
			      "--env", "TPL_GLOBAL=from-broker", NULL};

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	*c = context_new(priv.b_url, "python", NULL);
	*f = forked_context(URL);
	cr_assert_not_null(*c);
	cr_assert(!is_forked(priv.b_url, *c), "a --no-template kernel has pandas imported");
	*cold = (struct broker_url_dir){priv.b_url, priv.b_run_dir};
	*fork = (struct broker_url_dir){URL, test_run_dir()};
}

Test(template, a_cold_start_and_a_fork_see_the_same_interpreter, .fini = priv_stop,
     .timeout = 180)
{
	char *c, *f;
	struct broker_url_dir cold, fork;
	cold_and_forked(&c, &f, &cold, &fork);
	char *oc = interpreter_of(&cold, c), *of = interpreter_of(&fork, f);
	cr_assert_not_null(oc);
	cr_assert(strstr(oc, "-f\", \"CF\"") && strstr(oc, "'connection_file': 'CF'"),
		  "the cold kernel's app: %s", oc);
	cr_assert_str_eq(of, oc);
	free(oc);
	free(of);
	free(c);
	free(f);
}

/*
 * The kernel's IPython shell as a Python program sees it: bound to its own
 * kernel, session and iopub socket, the app's config and log in every
 * configurable, its dirs, __main__, builtins, prompts, hooks and exit
 * hooks (how many), and what input() does. Its first line: whether it is
 * the template's shell (sandcell_kshell.py), the rest to compare between a
 * cold and a forked kernel (addresses, the kernel's dirs and the run dir
 * masked).
 */
static char *
shell_of(const struct broker_url_dir *b, const char *id)
{
	char code[4096];

	snprintf(code, sizeof(code),
		 "import atexit, builtins, json, os, re, sys\n"
		 "from IPython import get_ipython, display\n"
		 "from ipykernel.kernelapp import IPKernelApp\n"
		 "app, sh = IPKernelApp.instance(), get_ipython()\n"
		 "k, ks = app.kernel, sys.modules.get('sandcell_kshell')\n"
		 "print(bool(ks and ks.SHELL and ks.SHELL[0] is sh))\n"
		 "cs = list(sh.configurables) + list(sh.display_formatter.formatters.values())\n"
		 "cs += [sh.history_manager, sh.display_pub, sh.displayhook, sh.Completer,\n"
		 "       sh.InteractiveTB, sh.SyntaxTB, sh.payload_manager, sh.alias_manager]\n"
		 "try:\n"
		 "    input('?')\n"
		 "    inp = 'answered'\n"
		 "except BaseException as e:\n"
		 "    inp = type(e).__name__\n"
		 "def traits(c):\n"
		 "    return sorted((n, repr(getattr(c, n))) for n in c.trait_names(config=True))\n"
		 "s = json.dumps({'kernel': [sh.kernel is k, sh.parent is k, k.shell is sh],\n"
		 "  'bound': [sh.displayhook.session is k.session, sh.display_pub.session is k.session,\n"
		 "            sh.displayhook.pub_socket is k.iopub_socket,\n"
		 "            sh.display_pub.pub_socket is k.iopub_socket, repr(sh.displayhook.topic)],\n"
		 "  'config': [c.config is app.config for c in cs],\n"
		 "  'log': [c.log is app.log for c in cs if hasattr(c, 'log')],\n"
		 "  'traits': [[type(c).__name__, traits(c)] for c in cs],\n"
		 "  'magics': sorted(sh.magics_manager.lsmagic()['line']),\n"
		 "  'dirs': [sh.profile_dir.location, sh.ipython_dir, sh.home_dir, sh.starting_dir,\n"
		 "           str(sh.db.root), sh.stdin_encoding, [str(d) for d in sh.user_ns['_dh']],\n"
		 "           sh.logger.home_dir, os.getcwd()],\n"
		 "  'main': [sys.modules['__main__'] is sh.user_module,\n"
		 "           sh._orig_sys_modules_main_mod.__name__,\n"
		 "           {n: type(v).__name__ for n, v in sh._orig_sys_module_state.items()}],\n"
		 "  'builtins': [builtins.__IPYTHON__, builtins.display is display.display,\n"
		 "               builtins.get_ipython() is sh],\n"
		 "  'sys': [sys.ps1, sys.ps2, sys.ps3, repr(sh.sys_excepthook), repr(sys.excepthook)],\n"
		 "  'count': sh.execution_count, 'input': inp, 'atexit': atexit._ncallbacks(),\n"
		 "  'ns': sorted(sh.user_ns)}, sort_keys=True)\n"
		 "for v in ('HOME', 'IPYTHONDIR'): s = s.replace(os.environ[v], v)\n"
		 "s = s.replace(os.getcwd(), 'CWD').replace('%s', 'RUN').replace(k.ident, 'ID')\n"
		 "s = re.sub('0x[0-9a-f]+', '0x', s)\n"
		 /* a formatter made with numpy imported has a printer for its float64
		  * (as float's): numpy is imported in the template, not yet in a
		  * cold kernel's start */
		 "print(s.replace(\", <class 'numpy.float64'>: <function \"\n"
		 "      \"PlainTextFormatter._type_printers_default.<locals>.<lambda> at 0x>\", ''))",
		 b->run_dir);
	return run_stdout(b->url, id, code);
}

Test(template, a_forked_kernel_takes_the_templates_shell_bound_as_a_cold_ones, .fini = priv_stop,
     .timeout = 180)
{
	char *c, *f;
	struct broker_url_dir cold, fork;
	cold_and_forked(&c, &f, &cold, &fork);
	char *oc = shell_of(&cold, c), *of = shell_of(&fork, f);
	cr_assert_not_null(oc);
	cr_assert_not_null(of);
	cr_assert(!strncmp(oc, "False\n", 6), "a cold kernel: %s", oc);
	cr_assert(!strncmp(of, "True\n", 5), "the forked kernel built its own shell: %s", of);
	cr_assert(strstr(oc, "\"kernel\": [true, true, true]") &&
		      strstr(oc, "\"bound\": [true, true, true, true,") && !strstr(oc, "false"),
		  "the cold kernel's shell: %s", oc);
	cr_assert_str_eq(of + 5, oc + 6);
	free(oc);
	free(of);
	free(c);
	free(f);
}

/*
 * A python3 kernelspec with interpreter options before -m, as Debian 13's
 * (-Xfrozen_modules=off), in a dir of its own put first on JUPYTER_PATH for
 * the broker started here; the dir, to remove.
 */
static char *
broker_with_options_kernelspec(const char *const *args)
{
	char dir[] = "/tmp/sandcell-ks.XXXXXX", path[256], jp[4096];
	const char *old = getenv("JUPYTER_PATH");

	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(chmod(dir, 0755), 0);
	snprintf(path, sizeof(path), "%s/kernels", dir);
	cr_assert_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/kernels/python3", dir);
	cr_assert_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/kernels/python3/kernel.json", dir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("{\"argv\": [\"/usr/bin/python3\", \"-Xfrozen_modules=off\", \"-W\", "
	      "\"ignore::DeprecationWarning\", \"-m\", \"ipykernel_launcher\", \"-f\", "
	      "\"{connection_file}\"], \"display_name\": \"Python 3\", \"language\": "
	      "\"python\"}\n",
	      f);
	fclose(f);
	snprintf(jp, sizeof(jp), "%s%s%s", dir, old ? ":" : "", old ? old : "");
	setenv("JUPYTER_PATH", jp, 1);
	int rc = broker_start(&priv, args);
	if (old)
		setenv("JUPYTER_PATH", old, 1);
	cr_assert_eq(rc, 0);
	priv_up = true;
	return strdup(dir);
}

static const char options_seen[] = "import sys; print(sys._xoptions.get('frozen_modules'), "
				   "'ignore::DeprecationWarning' in sys.warnoptions)";

/*
 * Such a kernelspec is forked from a template started with its options: its
 * kernels have pandas imported (forked) and the options set.
 */
Test(template, a_kernelspec_with_interpreter_options_is_forked_with_them, .fini = priv_stop,
     .timeout = 180)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};
	char *dir = broker_with_options_kernelspec(args), cmd[300];
	char *log = broker_log(&priv);

	cr_expect(strstr(log, "kernels are forked from a template"), "the template is off: %s",
		  log);
	free(log);
	char *id = forked_context(priv.b_url);
	char *out = run_stdout(priv.b_url, id, options_seen);
	cr_assert_str_eq(out, "off True\n");
	free(out);
	free(id);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_expect_eq(system(cmd), 0);
	free(dir);
}

/*
 * Started cold, such a kernelspec's module is run safely too: an
 * ipykernel_launcher.py in the workspace does not stand in for ipykernel's.
 */
Test(template, a_kernelspec_with_interpreter_options_starts_cold_without_the_workspace,
     .fini = priv_stop, .timeout = 180)
{
	const char *args[] = {"--no-template", "--no-default-context", "--pool", "python=0",
			      NULL};
	char *dir = broker_with_options_kernelspec(args), path[400];

	snprintf(path, sizeof(path), "%s.work/ipykernel_launcher.py", priv.b_run_dir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	fputs("raise SystemExit('the workspace ran as the kernel')\n", f);
	fclose(f);
	char *id = context_new(priv.b_url, "python", NULL);
	cr_assert_not_null(id, "the planted launcher ran: no context");
	char *out = run_stdout(priv.b_url, id, options_seen);
	cr_assert_str_eq(out, "off True\n");
	free(out);
	free(id);
	unlink(path);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	cr_expect_eq(system(path), 0);
	free(dir);
}

Test(template, isolation_context_gives_each_forked_kernel_its_uid, .fini = priv_stop,
     .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--isolation", "context", NULL};

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	char *a = forked_context(priv.b_url), *b = forked_context(priv.b_url);
	json_t *ja = box_of(priv.b_url, a), *jb = box_of(priv.b_url, b);
	json_int_t ua = json_integer_value(json_object_get(json_object_get(ja, "sandbox"), "uid"));
	json_int_t ub = json_integer_value(json_object_get(json_object_get(jb, "sandbox"), "uid"));
	cr_assert(ua > 0 && ub > 0 && ua != ub, "uids %lld %lld", (long long)ua, (long long)ub);
	char want[512], *out = run_stdout(priv.b_url, a, "import os; print(os.getuid(), os.getcwd())");
	snprintf(want, sizeof(want), "%lld %s\n", (long long)ua,
		 json_string_value(json_object_get(ja, "cwd")));
	cr_assert_str_eq(out, want);
	free(out);
	snprintf(want, sizeof(want), "%lld\n", (long long)ub);
	out = run_stdout(priv.b_url, b, "import os; print(os.getuid())");
	cr_assert_str_eq(out, want);
	free(out);
	/* another tenant's started kernels never say what a new kernel copies */
	wait_started(priv.b_url, a);
	wait_started(priv.b_url, b);
	char *c = forked_context(priv.b_url);
	struct logcond lc = {&priv, HOT_LINE};
	cr_expect_not(log_says(&lc), "a kernel of one uid copied pages after another uid's");
	json_decref(ja);
	json_decref(jb);
	free(a);
	free(b);
	free(c);
}

/*
 * Once a kernel has started, the template lists the pages it copied and the
 * next kernels copy them at once (hotpages.c); they are still fresh.
 */
Test(template, kernels_forked_after_one_started_copy_its_pages_ahead, .fini = priv_stop,
     .timeout = 180)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};
	struct logcond lc = {&priv, HOT_LINE};

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	char *a = forked_context(priv.b_url), *out;
	free(run_stdout(priv.b_url, a, "hot_probe = 1"));
	cr_expect_not(log_says(&lc), "pages listed before any kernel had started");
	wait_started(priv.b_url, a);
	char *b = forked_context(priv.b_url);
	cr_assert(log_says(&lc), "the template listed no pages after a kernel had started");
	out = run_stdout(priv.b_url, b,
			 "print('hot_probe' in globals(), 'pandas' in __import__('sys').modules)");
	cr_expect_str_eq(out, "False True\n");
	free(out);
	free(a);
	free(b);
}

Test(template, restart_and_death_give_a_fresh_forked_kernel, .timeout = 180)
{
	char *id = forked_context(URL), *out;

	json_decref(run(URL, id, "x = 1\nimport subprocess\n"
				 "subprocess.Popen(['setsid', 'sleep', '4321.5'])"));
	pid_t k1 = context_pid(URL, id, "kernel_pid"), orphan = 0;
	cr_assert(k1 > 0);
	for (double t0 = ms_now(); !orphan && ms_since(t0) < 10000; usleep(20000))
		orphan = pid_with_args("sleep", "4321.5");
	cr_assert(orphan > 0, "the setsid child never ran");
	cr_assert_eq(context_post(URL, id, "restart", 60), 200);
	cr_assert_eq(wait_pid_gone(orphan, 10000), 0, "a setsid child outlived the restart");
	out = run_stdout(URL, id, "import sys; print('x' in globals(), 'pandas' in sys.modules)");
	cr_assert_str_eq(out, "False True\n", "%s", out);
	free(out);
	pid_t k2 = context_pid(URL, id, "kernel_pid");
	cr_assert(k2 > 0 && k2 != k1);
	cr_assert_eq(wait_pid_gone(k1, 10000), 0, "the old kernel outlived the restart");

	/* an interrupt reaches it */
	struct bg b = {.base = URL, .ctx = id,
		       .code = "import time\nprint('go', flush=True)\ntime.sleep(60)"};
	bg_start(&b);
	cr_assert_eq(bg_wait_stdout(&b, 20000), 0);
	double t0 = ms_now();
	cr_assert_eq(context_post(URL, id, "interrupt", 10), 200);
	bg_join(&b);
	cr_assert_str_eq(error_name(b.lines), "KeyboardInterrupt");
	/* it ends the sleep, which would run 60 s */
	cr_assert(ms_since(t0) < 30000, "ended %.0f ms after the interrupt", ms_since(t0));
	json_decref(b.lines);

	/* its death is seen, and the next kernel is forked too */
	json_decref(run(URL, id, "y = 2"));
	json_t *l = run(URL, id, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)");
	cr_assert_str_eq(error_name(l), "KernelDied");
	json_decref(l);
	cr_assert_eq(wait_context_str(URL, id, "state", "idle", 60000), 0);
	out = run_stdout(URL, id, "import sys; print('y' in globals(), 'pandas' in sys.modules)");
	cr_assert_str_eq(out, "False True\n", "%s", out);
	free(out);
	cr_assert_eq(wait_pid_gone(k2, 10000), 0);
	free(id);
}

/*
 * A forked box's init is sandcell-init (a few pages, not a fork of the
 * template): PID 1 and the kernel's parent, it reaps orphans, and the
 * kernel's exit status reaches the proxy. The kernel has its uid but cannot
 * reach into it: its exec left it non-dumpable.
 */
Test(template, a_forked_boxs_init_is_sandcell_init_out_of_the_kernels_reach, .timeout = 180)
{
	char *id = forked_context(URL), *out;
	const char *who = "import os\nprint(os.getppid(), open('/proc/1/comm').read().strip())";

	out = run_stdout(URL, id, who);
	cr_assert_str_eq(out, "1 sandcell-init\n", "%s", out);
	free(out);
	out = run_stdout(URL, id, init_probe_py);
	cr_assert_str_eq(out, "denied denied denied\n", "the kernel reaches into its init: %s", out);
	free(out);
	/* a grandchild whose parent is gone (it ends once it is the init's) is reaped */
	out = run_stdout(URL, id,
			 "import os, time\npid = os.fork()\nif pid == 0:\n"
			 "    if os.fork() == 0:\n"
			 "        for _ in range(1000):\n"
			 "            if os.getppid() == 1:\n                break\n"
			 "            time.sleep(0.01)\n"
			 "        os._exit(0)\n"
			 "    os._exit(0)\nos.waitpid(pid, 0)\nt0 = time.monotonic()\n"
			 "while time.monotonic() - t0 < 10:\n"
			 "    ps = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
			 "    if ps == [1, os.getpid()]:\n        break\n    time.sleep(0.05)\n"
			 "print(ps == [1, os.getpid()] or ps)");
	cr_assert_str_eq(out, "True\n", "an orphan was not reaped: %s", out);
	free(out);
	/* the kernel's exit status, as the init saw it, reaches the proxy */
	json_t *l = run(URL, id, "import os; os._exit(7)");
	cr_assert_str_eq(error_name(l), "KernelDied");
	cr_assert(strstr(error_value(l), "exited with status 7"), "%s", error_value(l));
	json_decref(l);
	cr_assert_eq(wait_context_str(URL, id, "state", "idle", 60000), 0);
	cr_assert(is_forked(URL, id), "the next kernel was not forked");
	out = run_stdout(URL, id, who);
	cr_assert_str_eq(out, "1 sandcell-init\n", "%s", out);
	free(out);
	free(id);
}

static bool
answers(void *arg)
{
	const char *base = arg;
	char *id = context_new(base, "python", NULL);
	bool ok = false;

	if (id) {
		char *out = run_stdout(base, id, "print(6 * 7)");
		ok = out && !strcmp(out, "42\n");
		free(out);
		free(id);
	}
	return ok;
}

Test(template, a_killed_template_is_survived, .fini = priv_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	free(forked_context(priv.b_url));
	pid_t t = template_pid(priv.b_run_dir);
	cr_assert(t > 0, "no template process");
	cr_assert_eq(kill(t, SIGKILL), 0);
	cr_assert_eq(wait_pid_gone(t, 10000), 0);
	/* creation keeps working meanwhile (cold), and forks again once it is back */
	cr_assert_eq(wait_until(answers, (void *)priv.b_url, 60000), 0, "no context answers");
	free(forked_context(priv.b_url));
	pid_t t2 = template_pid(priv.b_run_dir);
	cr_assert(t2 > 0 && t2 != t, "the template was not started again");
}

struct gone {
	pid_t pids[2];
};

static bool
all_gone(void *arg)
{
	struct gone *g = arg;
	char path[64];

	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "/proc/%d", (int)g->pids[i]);
		if (access(path, F_OK) == 0)
			return false;
	}
	return true;
}

Test(template, a_killed_proxy_takes_its_forked_box_along, .timeout = 120)
{
	char *id = forked_context(URL);
	pid_t proxy = context_pid(URL, id, "proxy_pid"), kpid = context_pid(URL, id, "kernel_pid");
	char path[64], buf[4096];
	struct gone g = {{kpid, 0}};

	cr_assert(proxy > 0 && kpid > 0);
	/* the box's init: the kernel's parent, not the proxy's child */
	snprintf(path, sizeof(path), "/proc/%d/status", (int)kpid);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	while (fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "PPid: %d", &g.pids[1]) == 1)
			break;
	fclose(f);
	cr_assert(g.pids[1] > 1 && g.pids[1] != proxy, "init %d", (int)g.pids[1]);
	cr_assert_eq(kill(proxy, SIGKILL), 0);
	cr_assert_eq(wait_until(all_gone, &g, 10000), 0, "the box outlived its proxy");
	free(id);
}

/*
 * A respawned proxy talks to its own kernel, never to its predecessor's: a
 * forked box ends only once its init notices that its proxy is gone (here:
 * never, its init is stopped), and until then its kernel still listens. The
 * new kernel's channels are not the old one's, so the new proxy's handshake
 * cannot go to the old kernel and be lost (it waited for it 60 s).
 */
Test(template, a_respawned_proxy_starts_its_own_kernel_while_the_old_box_lingers,
     .timeout = 180)
{
	char *id = forked_context(URL);
	pid_t proxy = context_pid(URL, id, "proxy_pid"), kernel = context_pid(URL, id, "kernel_pid");
	cr_assert(proxy > 0 && kernel > 0);
	pid_t init = (pid_t)proc_stat_field(kernel, 4); /* the box's init */
	cr_assert(init > 1 && init != proxy, "init %d", (int)init);
	double before = metric_value(URL, "sandcell_proxy_restarts_total");

	cr_assert_eq(kill(init, SIGSTOP), 0); /* the old box cannot end: its kernel stays up */
	cr_assert_eq(kill(proxy, SIGKILL), 0);
	int respawned = wait_metric(URL, "sandcell_proxy_restarts_total", before + 1, 10000);
	json_t *l = respawned == 0 ? execute_code(URL, id, "41 + 1", NULL, 20000, NULL) : NULL;
	kill(init, SIGKILL); /* its PID namespace, the old kernel with it */
	cr_assert_eq(respawned, 0, "the proxy was not respawned");
	cr_assert_not_null(l, "the execution after the respawn did not end");
	cr_assert_str_eq(result_text(l), "42", "%s", error_value(l));
	cr_assert_eq(wait_pid_gone(kernel, 10000), 0, "the old kernel outlived its box");
	json_decref(l);
	free(id);
}

Test(template, broker_restart_reattaches_a_forked_kernel, .fini = priv_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	char *id = forked_context(priv.b_url);
	json_decref(run(priv.b_url, id, "survivor = 'still here'"));
	pid_t kpid = context_pid(priv.b_url, id, "kernel_pid");
	kill(priv.b_pid, SIGKILL);
	waitpid(priv.b_pid, NULL, 0);
	priv_up = false;
	cr_assert_eq(broker_restart(&priv, args), 0);
	priv_up = true;
	char *out = run_stdout(priv.b_url, id, "print(survivor)");
	cr_assert_str_eq(out, "still here\n");
	free(out);
	cr_assert_eq(context_pid(priv.b_url, id, "kernel_pid"), kpid, "the same kernel");
	free(id);
}

/*
 * A tenant that installs its own pandas (a module the template has imported)
 * gets it in its restarted kernel and in its new contexts: those start cold,
 * in their boxes, and the template imports nothing of the tenant's. Once it
 * is uninstalled, kernels are forked again.
 */
Test(template, a_tenants_package_shadowing_a_preloaded_one_starts_its_kernels_cold,
     .fini = priv_stop, .timeout = 300)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};
	char code[4096];

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	char *a = forked_context(priv.b_url), *out;
	snprintf(code, sizeof(code),
		 "%s"
		 "wheel('/tmp/wh', 'pandas', '99.0', 'SHADOW = \\'tenant\\'\\n')\n"
		 "!pip install -q --no-deps --no-index --find-links /tmp/wh pandas==99.0 >/dev/null 2>&1\n"
		 "import pandas\n"
		 "print(getattr(pandas, 'SHADOW', pandas.__file__))",
		 wheel_py);
	out = run_stdout(priv.b_url, a, code);
	cr_expect(out && strstr(out, "/usr/"), "the running kernel keeps the pandas it has: %s", out);
	free(out);
	cr_assert_eq(context_post(priv.b_url, a, "restart", 60), 200);
	out = run_stdout(priv.b_url, a, "import pandas\nprint(getattr(pandas, 'SHADOW', pandas.__file__))");
	cr_expect_str_eq(out, "tenant\n", "after a restart");
	free(out);
	char *b = context_new(priv.b_url, "python", NULL);
	cr_assert_not_null(b);
	cr_expect_not(is_forked(priv.b_url, b), "a new context was forked with the system's pandas");
	out = run_stdout(priv.b_url, b, "import pandas\nprint(getattr(pandas, 'SHADOW', pandas.__file__))");
	cr_expect_str_eq(out, "tenant\n", "a new context");
	free(out);
	struct logcond lc = {&priv, "a cold start: the tenant's packages shadow pandas"};
	cr_expect(log_says(&lc), "the log does not say why the kernel started cold");
	out = run_stdout(priv.b_url, b, "!pip uninstall -q -y pandas >/dev/null 2>&1\nprint('gone')");
	cr_expect_str_eq(out, "gone\n");
	free(out);
	char *c = forked_context(priv.b_url);
	free(a);
	free(b);
	free(c);
}

/*
 * With a warm pool, a kernel warmed before the tenant installed its own
 * pandas is not handed out: the restart after the install, and a new
 * context, have the tenant's pandas.
 */
Test(template, a_warm_kernel_older_than_the_tenants_packages_is_not_handed_out,
     .fini = priv_stop, .timeout = 300)
{
	const char *args[] = {"--no-default-context", "--pool", "python=1", NULL};
	const char *which = "import pandas\nprint(getattr(pandas, 'SHADOW', pandas.__file__))";
	char code[4096];

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	cr_assert_eq(wait_pool_ready(priv.b_run_dir, 1, 60000), 0);
	char *a = context_new(priv.b_url, "python", NULL), *b, *out;
	cr_assert_not_null(a);
	cr_assert_eq(wait_pool_ready(priv.b_run_dir, 1, 60000), 0, "the pool did not refill");
	snprintf(code, sizeof(code),
		 "%s"
		 "wheel('/tmp/wh', 'pandas', '99.0', 'SHADOW = \\'tenant\\'\\n')\n"
		 "!pip install -q --no-deps --no-index --find-links /tmp/wh pandas==99.0 >/dev/null 2>&1\n"
		 "print('installed')",
		 wheel_py);
	out = run_stdout(priv.b_url, a, code);
	cr_expect_str_eq(out, "installed\n");
	free(out);
	cr_assert_eq(context_post(priv.b_url, a, "restart", 60), 200);
	out = run_stdout(priv.b_url, a, which);
	cr_expect_str_eq(out, "tenant\n", "after a restart");
	free(out);
	cr_assert_not_null(b = context_new(priv.b_url, "python", NULL));
	out = run_stdout(priv.b_url, b, which);
	cr_expect_str_eq(out, "tenant\n", "a new context");
	free(out);
	struct logcond lc = {&priv, "is older than the tenant's packages"};
	cr_expect(log_says(&lc), "the log does not say a warm kernel was stopped");
	free(a);
	free(b);
}

/*
 * A warm Deno kernel started in its own dir, before `deno add` wrote a
 * deno.json, has not read it: a context in that directory, and its restart,
 * get a kernel started there instead, which imports bare.
 */
Test(template, a_warm_deno_kernel_is_not_handed_to_a_cwd_with_a_deno_config,
     .fini = priv_stop, .timeout = 300)
{
	const char *args[] = {"--no-default-context", "--pool", "javascript=1", NULL};
	const char *bare = "import isNumber from 'is-number';\nconsole.log(isNumber(5))";

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	cr_assert_eq(wait_pool_ready(priv.b_run_dir, 1, 60000), 0);
	char *sh = context_new(priv.b_url, "bash", NULL), *js, *out;
	cr_assert_not_null(sh);
	out = run_stdout(priv.b_url, sh,
			 "mkdir -p ~/dp && cd ~/dp && deno add npm:is-number >/dev/null 2>&1; "
			 "test -f deno.json && echo added");
	cr_expect_str_eq(out, "added\n");
	free(out);
	cr_assert_not_null(js = context_new(priv.b_url, "javascript", "/home/user/dp"));
	out = run_stdout(priv.b_url, js, bare);
	cr_expect_str_eq(out, "true\n", "a new context");
	free(out);
	cr_assert_eq(context_post(priv.b_url, js, "restart", 60), 200);
	out = run_stdout(priv.b_url, js, bare);
	cr_expect_str_eq(out, "true\n", "after a restart");
	free(out);
	struct logcond lc = {&priv, "reads as it starts: not a warm one"};
	cr_expect(log_says(&lc), "the log does not say the warm kernel was passed over");
	free(sh);
	free(js);
}

Test(template, kernel_network_none_puts_a_forked_kernel_in_its_proxys_namespace,
     .fini = priv_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", "--kernel-network",
			      "none", NULL};
	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	char *id = forked_context(priv.b_url);
	unsigned long px = proc_ns_ino(context_pid(priv.b_url, id, "proxy_pid"), "net"),
		      host = proc_ns_ino(getpid(), "net");
	cr_assert(px && host);
	cr_assert_neq(px, host, "the proxy is in the host's network namespace");
	char *out = run_stdout(priv.b_url, id, "import os, socket\n"
					   "print(os.stat('/proc/self/ns/net').st_ino,\n"
					   "      [n for _, n in socket.if_nameindex()])");
	char want[128];
	snprintf(want, sizeof(want), "%lu ['lo']\n", px);
	cr_assert_str_eq(out, want);
	free(out);
	free(id);
}

/*
 * The pool waits for a starting template: its first warm kernel, and so the
 * first context a client creates, is forked too, not a cold one.
 */
Test(template, the_first_pooled_kernel_is_forked, .fini = priv_stop, .timeout = 120)
{
	const char *args[] = {"--no-default-context", "--pool", "python=1", NULL};

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	cr_assert_eq(wait_pool_ready(priv.b_run_dir, 1, 60000), 0, "the pool never filled");
	char *id = context_new(priv.b_url, "python", NULL);
	cr_assert_not_null(id);
	cr_assert(is_forked(priv.b_url, id), "the first pooled kernel started cold");
	free(id);
}

/*
 * A forked kernel's startup takes the two modules the template loaded for
 * it (sandcell_packages.PRELOADED: the profile's code shared, not read
 * again in each kernel), and the profile is installed from them.
 */
Test(template, a_forked_kernels_startup_takes_the_modules_the_template_loaded,
     .fini = priv_stop, .timeout = 120)
{
	const char *args[] = {"--no-default-context", NULL};

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	char *id = forked_context(priv.b_url);
	char *out = run_stdout(priv.b_url, id,
			       "import sys\n"
			       "print(sorted(sys.modules['sandcell_packages'].PRELOADED),\n"
			       "      'e2b/data' in get_ipython().display_formatter.formatters)");
	cr_assert_not_null(out);
	cr_assert_str_eq(out, "[] True\n", "the startup left or lacked: %s", out);
	free(out);
	free(id);
}

/*
 * The default context, created as the broker starts (before its template has
 * imported anything), waits for the starting template as the pool does: its
 * kernel is forked, not a cold one.
 */
Test(template, the_default_context_is_forked, .fini = priv_stop, .timeout = 120)
{
	const char *args[] = {"--pool", "python=0", NULL};

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	cr_assert(is_forked(priv.b_url, NULL), "the default context's kernel started cold");
}

/*
 * A burst of creations larger than the pool: the pool is refilled only once
 * the contexts clients asked for, which were starting, are ready (a kernel
 * warmed meanwhile would take CPU from the ones they wait for).
 */
Test(template, the_pool_refills_after_the_creations_clients_wait_for, .fini = priv_stop,
     .timeout = 180)
{
	const char *args[] = {"--no-default-context", "--pool", "python=1", "--log-level", "debug",
			      NULL};
	pthread_t t[3];
	char *ids[3], *log, *refill, *first, needle[128];
	int pooled = 0;

	cr_assert_eq(broker_start(&priv, args), 0);
	priv_up = true;
	cr_assert_eq(wait_pool_ready(priv.b_run_dir, 1, 60000), 0, "the pool never filled");
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, context_new_thread, priv.b_url);
	for (int i = 0; i < 3; i++) {
		pthread_join(t[i], (void **)&ids[i]);
		cr_assert_not_null(ids[i]);
	}
	cr_assert_eq(wait_pool_ready(priv.b_run_dir, 1, 60000), 0, "the pool was not refilled");
	log = broker_log(&priv);
	first = strstr(log, "pool: warming a python3 kernel");
	cr_assert_not_null(first);
	refill = strstr(first + 1, "pool: warming a python3 kernel");
	cr_assert_not_null(refill, "no refill in the log");
	for (int i = 0; i < 3; i++) {
		snprintf(needle, sizeof(needle), "context %s: created from the warm pool", ids[i]);
		if (strstr(log, needle)) {
			pooled++;
			continue;
		}
		snprintf(needle, sizeof(needle), "context %s: created (python", ids[i]);
		char *created = strstr(log, needle);
		snprintf(needle, sizeof(needle), "context %s: ready in", ids[i]);
		char *ready = strstr(log, needle);
		cr_assert_not_null(created, "%s never created", ids[i]);
		cr_assert_not_null(ready, "%s never ready", ids[i]);
		/* (on a loaded machine a request may reach us after the refill began) */
		cr_expect(created > refill || ready < refill,
			  "the pool was refilled before %s was ready", ids[i]);
	}
	cr_expect_eq(pooled, 1, "one context of the three came from the pool");
	free(log);
	for (int i = 0; i < 3; i++)
		free(ids[i]);
}

/*
 * The template forks each box's init straight into a PID namespace of its
 * own and goes back to its own at once: two forked kernels are in two new
 * PID namespaces, and the template's next children go to the host's.
 */
Test(template, each_fork_gets_a_pid_namespace_and_the_template_keeps_its_own,
     .timeout = 180)
{
	char *a = forked_context(URL), *b = forked_context(URL);
	pid_t ka = context_pid(URL, a, "kernel_pid"), kb = context_pid(URL, b, "kernel_pid");
	pid_t tpl = template_pid(test_run_dir());
	unsigned long host = proc_ns_ino(getpid(), "pid");

	cr_assert_gt(ka, 0);
	cr_assert_gt(kb, 0);
	cr_assert_gt(tpl, 0, "no template");
	cr_assert_neq(proc_ns_ino(ka, "pid"), host, "a forked kernel in the host's PID namespace");
	cr_assert_neq(proc_ns_ino(kb, "pid"), host, "a forked kernel in the host's PID namespace");
	cr_assert_neq(proc_ns_ino(ka, "pid"), proc_ns_ino(kb, "pid"), "two kernels share a PID namespace");
	cr_assert_eq(proc_ns_ino(tpl, "pid"), host);
	cr_assert_eq(proc_ns_ino(tpl, "pid_for_children"), host,
		     "the template's next child would not be in its own PID namespace");
	char *ppid = run_stdout(URL, a, "import os; print(os.getppid())");
	cr_assert_str_eq(ppid, "1\n", "the kernel's parent is not its box's PID 1");
	free(ppid);
	free(a);
	free(b);
}

/*
 * The template's heap is in huge pages where the system allows it (THP not
 * "never", Linux 6.1+ for MADV_COLLAPSE): forking a box copies a page table
 * entry per 2 MiB of it. Its kernels are forked and fresh as ever.
 */
Test(template, the_templates_heap_is_in_huge_pages, .timeout = 180)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	char mode[128] = "";
	unsigned maj = 0, min = 0;
	struct utsname u;

	if (f) {
		if (!fgets(mode, sizeof(mode), f))
			mode[0] = '\0';
		fclose(f);
	}
	uname(&u);
	sscanf(u.release, "%u.%u", &maj, &min);
	if (!f || strstr(mode, "[never]") || maj < 6 || (maj == 6 && min < 1))
		cr_skip_test("no transparent huge pages or no MADV_COLLAPSE here (%s, %s)",
			     u.release, mode);
	char *id = forked_context(URL);
	pid_t tpl = template_pid(test_run_dir());
	cr_assert_gt(tpl, 0, "no template");
	cr_expect_gt(proc_huge_kb(tpl), 2048, "no huge page in the template");
	free(id);
}
