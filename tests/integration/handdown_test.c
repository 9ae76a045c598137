/*
 * handdown_test.c — what the broker hands down into a box: no descriptor of
 * its own (its log above all), no variable of its environment but those on
 * the kernels' allowlist, and no access token, rotated or not. In every
 * language, and in a Python kernel forked from the template and a cold one.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "harness.h"

#define SECRET_KEY "sc-aws-secret-never-in-a-kernel"
#define SECRET_URL "postgres://sc:db-secret-never-in-a-kernel@db/x"
#define PASSED "sc-passed-on-by-name"
#define FORGED "sandcell-broker[1] info: forged-by-a-kernel"

/*
 * The broker's environment holds secrets, and names one variable to pass on
 * (SANDCELL_ENV_PASS, read as --env-pass): set in the runner before the
 * shared broker starts (hooks.c), and in each test's worker alike.
 */
__attribute__((constructor)) static void
secrets(void)
{
	setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY, 1);
	setenv("DATABASE_URL", SECRET_URL, 1);
	setenv("SC_PASSED", PASSED, 1);
	setenv("SANDCELL_ENV_PASS", "SC_PASSED", 1);
}

HARNESS_SHARED_BROKER("--no-default-context", "--pool", "python=0");

#define URL test_url()

static struct broker priv;

static void
priv_stop(void)
{
	broker_stop(&priv);
}

/* The shared broker, for its log (harness.c names it after its run dir). */
static struct broker
shared(void)
{
	struct broker b = {0};

	snprintf(b.b_log, sizeof(b.b_log), "%s.log", test_run_dir());
	return b;
}

struct lang {
	const char *l_name;
	const char *l_getenv; /* prints the variable %s, or "unset" */
};

static const struct lang langs[] = {
    {"python", "import os; print(os.environ.get('%s', 'unset'))\n"},
    {"javascript", "console.log(Deno.env.get('%s') ?? 'unset');\n"},
    {"typescript", "console.log(Deno.env.get('%s') ?? 'unset');\n"},
    {"r", "cat(Sys.getenv('%s', unset = 'unset'), '\\n', sep = '')\n"},
    {"bash", "echo \"${%s-unset}\"\n"},
    {"java", "System.out.println(Objects.toString(System.getenv(\"%s\"), \"unset\"));\n"},
};
static int lang_index[] = {0, 1, 2, 3, 4, 5};

static long long
ppid_of(pid_t pid)
{
	return proc_stat_field(pid, 4);
}

/* Whether a mount id is one of pid's mount namespace (its mountinfo's first field). */
static bool
mount_of(pid_t pid, long id)
{
	char path[64], line[4096];
	bool yes = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)pid);
	if (!(f = fopen(path, "r")))
		return false;
	while (!yes && fgets(line, sizeof(line), f))
		yes = atol(line) == id;
	fclose(f);
	return yes;
}

static long
fd_mnt_id(pid_t pid, const char *fd)
{
	char path[300], line[256];
	long id = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%s", (int)pid, fd);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "mnt_id:", 7))
			id = atol(line + 7);
	fclose(f);
	return id;
}

/* Whether a process holds a descriptor of this pipe (or file). */
static bool
holds(pid_t pid, const struct stat *want)
{
	char dir[64], path[PATH_MAX];
	struct dirent *de;
	struct stat st;
	bool yes = false;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	if (!(d = opendir(dir)))
		return false;
	while (!yes && (de = readdir(d))) {
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		yes = de->d_name[0] != '.' && stat(path, &st) == 0 &&
		      st.st_dev == want->st_dev && st.st_ino == want->st_ino;
	}
	closedir(d);
	return yes;
}

/*
 * Every descriptor of a box's process, seen from the host: none is the
 * broker's log or the proxy's stderr; each that names a path is on one of
 * the box's own mounts (a host file handed down is not); the rest are
 * pipes, sockets and anonymous inodes. stdin is /dev/null; with init, fds 1
 * and 2 are the proxy's pipe, and 3 its socket. How many of fds 0-3 it has.
 */
static int
check_fds(pid_t pid, pid_t proxy, const char *log, bool init, const char *who)
{
	char dir[64], path[PATH_MAX], target[PATH_MAX];
	struct stat lg, perr, st, out = {0};
	struct dirent *de;
	int n = 0;
	DIR *d;

	cr_assert_eq(stat(log, &lg), 0, "%s: the broker's log %s", who, log);
	snprintf(path, sizeof(path), "/proc/%d/fd/2", (int)proxy);
	cr_assert_eq(stat(path, &perr), 0, "%s: the proxy's stderr", who);
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	cr_assert_not_null(d = opendir(dir), "%s: %s", who, dir);
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		ssize_t len = readlink(path, target, sizeof(target) - 1);
		if (len < 0 || stat(path, &st) < 0)
			continue; /* closed meanwhile */
		target[len] = '\0';
		int fd = atoi(de->d_name);
		n += fd <= 3;
		cr_expect(!(st.st_dev == lg.st_dev && st.st_ino == lg.st_ino),
		          "%s: fd %d is the broker's log (%s)", who, fd, target);
		cr_expect(!(st.st_dev == perr.st_dev && st.st_ino == perr.st_ino),
		          "%s: fd %d is the proxy's stderr (%s)", who, fd, target);
		if (target[0] == '/')
			cr_expect(mount_of(pid, fd_mnt_id(pid, de->d_name)),
			          "%s: fd %d, %s, is a file of no mount of its box", who,
			          fd, target);
		else
			cr_expect(!strncmp(target, "pipe:", 5) ||
			              !strncmp(target, "socket:", 7) ||
			              !strncmp(target, "anon_inode:", 11),
			          "%s: fd %d is %s", who, fd, target);
		if (fd == 0)
			cr_expect(S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3),
			          "%s: stdin is %s, not /dev/null", who, target);
		if (init && (fd == 1 || fd == 2)) {
			cr_expect(S_ISFIFO(st.st_mode), "%s: fd %d is %s, not a pipe",
			          who, fd, target);
			if (fd == 1)
				out = st;
			else
				cr_expect(st.st_ino == out.st_ino,
				          "%s: stdout and stderr differ", who);
			cr_expect(holds(proxy, &st),
			          "%s: fd %d, %s, is not the proxy's pipe", who, fd,
			          target);
		}
		if (init && fd == 3)
			cr_expect(!strncmp(target, "socket:", 7), "%s: fd 3 is %s", who,
			          target);
		/* beyond what it was given, the init's own watch on its children */
		if (init)
			cr_expect(fd <= 3 || !strcmp(target, "anon_inode:[signalfd]"),
			          "%s: fd %d (%s) is more than the box gives", who, fd,
			          target);
	}
	closedir(d);
	return n;
}

/* A context's kernel and its box's init hold only what the box gives. */
static void
box_fds_only(const char *base, const char *id, const char *log, const char *who)
{
	pid_t kernel = context_pid(base, id, "kernel_pid");
	pid_t proxy = context_pid(base, id, "proxy_pid");
	char what[128];

	cr_assert(kernel > 0 && proxy > 0, "%s: no kernel", who);
	snprintf(what, sizeof(what), "%s's kernel", who);
	cr_expect_gt(check_fds(kernel, proxy, log, false, what), 2);
	snprintf(what, sizeof(what), "%s's box init", who);
	cr_expect_eq(check_fds((pid_t)ppid_of(kernel), proxy, log, true, what), 4);
}

/* In the kernel's language: the two secrets unset, the passed one there. */
static void
env_is_the_allowlist(const char *base, const char *id, const struct lang *l)
{
	char code[1024], environ_path[64], buf[65536];
	int n = 0, fd;

	n += snprintf(code + n, sizeof(code) - n, l->l_getenv, "AWS_SECRET_ACCESS_KEY");
	n += snprintf(code + n, sizeof(code) - n, l->l_getenv, "DATABASE_URL");
	snprintf(code + n, sizeof(code) - n, l->l_getenv, "SC_PASSED");
	char *out = run_stdout(base, id, code);
	cr_expect_str_eq(out, "unset\nunset\n" PASSED "\n", "%s: %s", l->l_name, out);
	free(out);
	/* what its /proc/self/environ shows (a forked kernel's: the one it was given) */
	snprintf(environ_path, sizeof(environ_path), "/proc/%d/environ",
	         (int)context_pid(base, id, "kernel_pid"));
	cr_assert((fd = open(environ_path, O_RDONLY)) >= 0, "%s: %s", l->l_name,
	          environ_path);
	ssize_t got = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	cr_assert_gt(got, 0);
	for (ssize_t i = 0; i < got; i++)
		buf[i] = buf[i] ? buf[i] : '\n';
	buf[got] = '\0';
	cr_expect_null(strstr(buf, "secret-never"), "%s: its environ: %s", l->l_name,
	               buf);
	cr_expect_null(strstr(buf, "SANDCELL_"), "%s: its environ: %s", l->l_name, buf);
	cr_expect_not_null(strstr(buf, "SC_PASSED=" PASSED "\n"), "%s: its environ: %s",
	                   l->l_name, buf);
}

static bool
is_forked(const char *base, const char *id)
{
	char *out = run_stdout(base, id, "import sys; print('pandas' in sys.modules)");
	bool yes = out && !strcmp(out, "True\n");

	free(out);
	return yes;
}

static bool
forked_cond(void *arg)
{
	char **id = arg;

	if ((*id = context_new(URL, "python", NULL)) && is_forked(URL, *id))
		return true;
	if (*id)
		context_delete(URL, *id);
	free(*id);
	*id = NULL;
	return false;
}

/* A python context of the shared broker, forked (its template may still be starting). */
static char *
forked(void)
{
	char *id = NULL;

	cr_assert_eq(wait_until(forked_cond, &id, 90000), 0, "no kernel was forked");
	return id;
}

ParameterizedTestParameters(handdown, a_kernel_gets_only_what_its_box_gives)
{
	return cr_make_param_array(int, lang_index, sizeof(langs) / sizeof(langs[0]));
}

/*
 * In each language (a Python kernel forked from the shared broker's
 * template): the kernel's and its init's descriptors, its environment.
 */
ParameterizedTest(int *li, handdown, a_kernel_gets_only_what_its_box_gives,
                  .timeout = 180)
{
	const struct lang *l = &langs[*li];
	struct broker b = shared();
	char *id =
	    strcmp(l->l_name, "python") ? context_new(URL, l->l_name, NULL) : forked();

	cr_assert_not_null(id, "%s: no context", l->l_name);
	box_fds_only(URL, id, b.b_log, l->l_name);
	env_is_the_allowlist(URL, id, l);
	context_delete(URL, id);
	free(id);
}

/*
 * Python code that writes a forged log line to every file, pipe and device
 * it holds (ipykernel's copies of its first stdout and stderr too).
 */
static const char write_everywhere[] =
    "import os, stat\n"
    "n = 0\n"
    "for f in os.listdir('/proc/self/fd'):\n"
    "    try:\n"
    "        m = os.fstat(int(f)).st_mode\n"
    "        if stat.S_ISREG(m) or stat.S_ISFIFO(m) or stat.S_ISCHR(m):\n"
    "            os.write(int(f), b'\\n" FORGED "\\n')\n"
    "            n += 1\n"
    "    except OSError:\n"
    "        pass\n"
    "print('wrote', n > 0)\n";

struct logcond {
	const struct broker *lc_b;
	const char *lc_text;
};

static bool
log_says(void *arg)
{
	struct logcond *lc = arg;
	char *log = broker_log(lc->lc_b);
	bool yes = strstr(log, lc->lc_text) != NULL;

	free(log);
	return yes;
}

/* No line of the log is the kernel's: its text only ever follows our prefix, escaped. */
static void
no_forged_line(const struct broker *b, const char *who)
{
	struct logcond seen = {b, "kernel output: " FORGED};
	char *log;

	cr_expect_eq(wait_until(log_says, &seen, 20000), 0,
	             "%s: the proxy did not log what the kernel wrote", who);
	log = broker_log(b);
	cr_expect(strncmp(log, FORGED, strlen(FORGED)) && !strstr(log, "\n" FORGED),
	          "%s: the kernel wrote a line of the broker's log", who);
	free(log);
}

/* A forked and a cold Python kernel write to every descriptor they have. */
Test(handdown, a_kernel_writing_to_every_descriptor_forges_no_log_line, .fini = priv_stop,
     .timeout = 240)
{
	struct broker b = shared();
	const char *cold[] = {
	    "--no-default-context", "--pool",    "python=0", "--no-template",
	    "--env-pass",           "SC_PASSED", NULL};
	char *id = forked();

	cr_assert_not_null(id);
	char *out = run_stdout(URL, id, write_everywhere);
	cr_expect(out && strstr(out, "wrote True\n"), "%s", out);
	free(out);
	no_forged_line(&b, "a forked kernel");
	free(id);

	cr_assert_eq(broker_start(&priv, cold), 0);
	cr_assert_not_null(id = context_new(priv.b_url, "python", NULL));
	box_fds_only(priv.b_url, id, priv.b_log, "a cold python");
	env_is_the_allowlist(priv.b_url, id, &langs[0]);
	out = run_stdout(priv.b_url, id, write_everywhere);
	cr_expect(out && strstr(out, "wrote True\n"), "%s",
	          out); /* and what went to iopub */
	free(out);
	no_forged_line(&priv, "a cold kernel");
	free(id);
}

/*
 * A kernel that floods its stdout and stderr (R's system() writes there)
 * finishes, and the broker's log grows by a few lines, not by the flood.
 */
Test(handdown, a_kernel_flooding_its_output_grows_no_log, .timeout = 180)
{
	struct broker b = shared();
	char *id = context_new(URL, "r", NULL);
	struct stat before, after;

	cr_assert_not_null(id);
	cr_assert_eq(stat(b.b_log, &before), 0);
	char *out =
	    run_stdout(URL, id,
	               "system(\"head -c 20000000 /dev/zero | tr '\\\\0' x >&2\")\n"
	               "system(\"yes '" FORGED "' | head -n 100000\")\n"
	               "cat('flooded\\n')\n");
	cr_expect_str_eq(out, "flooded\n");
	free(out);
	no_forged_line(&b, "a flooding kernel");
	cr_assert_eq(stat(b.b_log, &after), 0);
	cr_expect_lt(after.st_size - before.st_size, 64 << 10,
	             "the log grew by %lld bytes",
	             (long long)(after.st_size - before.st_size));
	context_delete(URL, id);
	free(id);
}

/* and, as patterns that match them but not their own text, STEM "[x]" */
#define TOKEN_OLD_STEM "sc-token-old-never-in-a-bo"
#define TOKEN_OLD TOKEN_OLD_STEM "x"
#define TOKEN_NEW_STEM "sc-token-new-never-in-a-bo"
#define TOKEN_NEW TOKEN_NEW_STEM "x"

/* A token file of mode 0644 (as a careless operator leaves it) in dir, made here. */
static void
token_in(const char *dir, const char *token, char path[256])
{
	int fd;

	snprintf(path, 256, "%s/token", dir);
	cr_assert(mkdir(dir, 0755) == 0 || errno == EEXIST, "%s: %s", dir,
	          strerror(errno));
	cr_assert((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) >= 0);
	cr_assert_eq(write(fd, token, strlen(token)), (ssize_t)strlen(token));
	close(fd);
}

/* The usual rotation: a new file beside it, renamed over it. */
static void
rotate(const char *dir, const char *path)
{
	char tmp[256];
	int fd;

	snprintf(tmp, sizeof(tmp), "%s/token.new", dir);
	cr_assert((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644)) >= 0);
	cr_assert_eq(write(fd, TOKEN_NEW, strlen(TOKEN_NEW)), (ssize_t)strlen(TOKEN_NEW));
	close(fd);
	cr_assert_eq(rename(tmp, path), 0);
}

/* Every route a kernel of a language may try: by path, through /proc, a search. */
static void
no_token_reached(const struct broker *b, const char *dir, const char *path)
{
	char code[4096];
	char *py = context_new(b->b_url, "python", NULL),
	     *sh = context_new(b->b_url, "bash", NULL);

	cr_assert(py && sh);
	snprintf(
	    code, sizeof(code),
	    "import os, glob\n"
	    "p, toks, found = '%s', ('" TOKEN_OLD "', '" TOKEN_NEW "'), []\n"
	    "for c in (p, '/proc/self/root' + p, '/proc/1/root' + p, '%s'):\n"
	    "    try:\n"
	    "        found.append('dir %%s' %% c if os.path.isdir(c) else "
	    "open(c).read())\n"
	    "    except OSError:\n"
	    "        pass\n"
	    "for f in glob.glob('/proc/[0-9]*/environ') + "
	    "glob.glob('/proc/[0-9]*/cmdline'):\n"
	    "    try:\n"
	    "        d = open(f, 'rb').read().decode('utf-8', 'replace')\n"
	    "        found += [f for t in toks if t in d]\n"
	    "    except OSError:\n"
	    "        pass\n"
	    "for f in glob.glob('/proc/[0-9]*/fd/*') + glob.glob('/proc/[0-9]*/cwd'):\n"
	    "    try:\n"
	    "        if '%s' in os.readlink(f): found.append(f)\n"
	    "    except OSError:\n"
	    "        pass\n"
	    "print(found)\n",
	    path, dir, dir);
	char *out = run_stdout(b->b_url, py, code);
	cr_expect_str_eq(out, "[]\n", "a python kernel found the token: %s", out);
	free(out);
	snprintf(code, sizeof(code),
	         "cat '%s' /proc/1/root'%s' 2>/dev/null; ls '%s' 2>/dev/null; "
	         /* (as patterns its own code, in /tmp, does not match) */
	         "grep -rls -e '" TOKEN_OLD_STEM "[x]' -e '" TOKEN_NEW_STEM
	         "[x]' /etc /home/user /tmp /run "
	         "/dev/shm; "
	         "echo end",
	         path, path, dir);
	out = run_stdout(b->b_url, sh, code);
	cr_expect_str_eq(out, "end\n", "a bash kernel found the token: %s", out);
	free(out);
	free(py);
	free(sh);
}

/*
 * An access token the box's view would show (under /etc) is refused at
 * start: no cover of the file survives its rotation. One where no box looks,
 * rotated the usual way under running kernels, is reached by none of them,
 * old or new, by any route.
 */
Test(handdown, a_rotated_token_is_out_of_every_kernels_reach, .fini = priv_stop,
     .timeout = 240)
{
	char etc[128], var[128], path[256], *log;
	const char *args[] = {"--no-default-context", "--pool", "python=0",
	                      "--access-token-file",  path,     NULL};

	snprintf(etc, sizeof(etc), "/etc/sandcell-test-token-%d", (int)getpid());
	token_in(etc, TOKEN_OLD, path);
	int rc = broker_start(&priv, args);
	if (rc == 0) { /* shown: what a kernel reads once it is rotated */
		harness_access_token(TOKEN_OLD);
		char *id = context_new(priv.b_url, "python", NULL), code[512];
		rotate(etc, path);
		snprintf(code, sizeof(code), "print(repr(open('%s').read()))", path);
		char *out = id ? run_stdout(priv.b_url, id, code) : NULL;
		harness_access_token(NULL);
		broker_stop(&priv);
		cr_expect_fail(
		    "a token file under /etc was taken; rotated, a kernel reads %s", out);
		free(out);
		free(id);
	} else {
		log = broker_log(&priv);
		cr_expect_eq(priv.b_exit, 2);
		cr_expect(strstr(log, path) && strstr(log, "where no box looks"),
		          "the refusal does not say why: %s", log);
		free(log);
	}
	unlink(path);
	rmdir(etc);

	snprintf(var, sizeof(var), "/var/lib/sandcell-test-token-%d", (int)getpid());
	token_in(var, TOKEN_OLD, path);
	cr_assert_eq(broker_start(&priv, args), 0);
	harness_access_token(TOKEN_OLD);
	no_token_reached(&priv, var, path);
	rotate(var, path);
	no_token_reached(&priv, var, path);
	harness_access_token(NULL);
	unlink(path);
	rmdir(var);
}
