/*
 * kspec.c — Jupyter kernelspec discovery and language names. A kernelspec is
 * found by directory name or by its "language", searching the Jupyter data
 * dirs in their documented order; the first match wins.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "lib.h"

/*
 * Deno's fence. Deno stamps all output with the last request it received, so
 * a timer or promise of a finished execution would print into the next one.
 * The fence numbers executions: it sets the next one's number as the
 * AsyncLocalStorage store (top-level code runs in it, timers and promises
 * inherit it). Console output of a callback whose number is neither the
 * current execution's nor, during the fence, the one just ended is not
 * printed but counted; the next fence reports the count in a message marked
 * "sandcell_late" (the proxy drops it and adds the count to its metric).
 *
 * It also lets an interrupt end an execution that awaits. Deno's interrupt
 * terminates the JavaScript that runs; one that comes while the code awaits
 * leaves the isolate terminating, so no callback runs again and the await
 * never ends. So the proxy first sends KSPEC_DENO_ABORT_SIGNAL (SIGURG,
 * ignored by default: harmless to a kernel with no listener yet), whose
 * listener runs as soon as no code does: it marks the execution aborted (a
 * timer it sets from then on throws), clears the timers it set, says so
 * ("sandcell_aborted", stamped with whatever request came last) and collects
 * garbage. An await that nothing can resume any more is collected, and Deno
 * ends its execution with an error ("Promise was collected"), the state
 * kept. An await something else still holds (a fetch, a promise kept in a
 * variable) is not: that kernel is restarted. Code that computes runs no
 * listener; the proxy interrupts it (admit.c), and the code after an await
 * that Deno's interrupt drops is collected when the listener runs next.
 * An interrupt that lands while the listener runs (its collection is
 * compute, and under load the proxy sees a busy kernel and interrupts it)
 * ends Deno's signal loop with it: no listener would run again, and every
 * later abort would end in a restart. So each fence arms the listener anew
 * (removing the last one unbinds the signal, adding it binds it and starts a
 * loop), which costs a bind per execution.
 */
#define KSPEC_DENO_FENCE \
	"(globalThis[Symbol.for('sandcell')] ?" "?= (() => {\n" \
	"  const s = { gen: 0, grace: 0, dropped: 0, aborted: -1, next() {} };\n" \
	"  try {\n" \
	"    const { AsyncLocalStorage } = process.getBuiltinModule('node:async_hooks');\n" \
	"    const als = new AsyncLocalStorage();\n" \
	"    for (const name of ['log', 'info', 'debug', 'dir', 'table', 'warn', 'error', 'trace']) {\n" \
	"      const print = console[name];\n" \
	"      console[name] = function (...args) {\n" \
	"        const g = als.getStore() ?? 0;\n" \
	"        if (g === s.gen || g === s.grace) return print.apply(this, args);\n" \
	"        s.dropped++;\n" \
	"      };\n" \
	"    }\n" \
	"    s.next = () => {\n" \
	"      Deno.removeSignalListener('SIGURG', s.abort);\n" \
	"      Deno.addSignalListener('SIGURG', s.abort);\n" \
	"      const dropped = s.dropped;\n" \
	"      s.dropped = 0;\n" \
	"      s.grace = s.gen;\n" \
	"      als.enterWith(++s.gen);\n" \
	"      if (dropped) Promise.resolve(Deno.jupyter.broadcast('stream', { name: 'stdout', text: '' },\n" \
	"        { metadata: { sandcell_late: true, sandcell_dropped: dropped } })).catch(() => {});\n" \
	"    };\n" \
	"    const timers = new Map(), clear = clearTimeout;\n" \
	"    const track = (set, once) => function (f, ...args) {\n" \
	"      const g = als.getStore() ?? 0;\n" \
	"      if (g === s.aborted)\n" \
	"        throw Object.assign(new Error('execution interrupted'),\n" \
	"          { name: 'KeyboardInterrupt' });\n" \
	"      if (typeof f !== 'function') return set(f, ...args);\n" \
	"      const id = set(function (...a) {\n" \
	"        if (once) timers.delete(id);\n" \
	"        return f.apply(this, a);\n" \
	"      }, ...args);\n" \
	"      timers.set(id, g);\n" \
	"      return id;\n" \
	"    };\n" \
	"    globalThis.setTimeout = track(setTimeout, true);\n" \
	"    globalThis.setInterval = track(setInterval, false);\n" \
	"    globalThis.clearTimeout = globalThis.clearInterval = (id) => {\n" \
	"      timers.delete(id);\n" \
	"      clear(id);\n" \
	"    };\n" \
	"    s.abort = () => {\n" \
	"      s.aborted = s.gen;\n" \
	"      for (const [id, g] of timers) if (g === s.gen) { timers.delete(id); clear(id); }\n" \
	"      Promise.resolve(Deno.jupyter.broadcast('stream', { name: 'stdout', text: '' },\n" \
	"        { metadata: { sandcell_aborted: true } })).catch(() => {});\n" \
	"      globalThis.gc?.();\n" \
	"    };\n" \
	"  } catch { /* no async context here: output stays unmarked */ }\n" \
	"  return s;\n" \
	"})()).next();\n" \
	"await new Promise((r) => setTimeout(r, 0));\n" \
	"globalThis[Symbol.for('sandcell')].grace = -1;"
#define KSPEC_DENO_ABORT_SIGNAL SIGURG
/* the listener's garbage collection needs V8's gc() */
#define KSPEC_DENO_ENV "DENO_V8_FLAGS=--expose-gc"

#define MAX_DIRS 32

/* Normalise a language name as E2B does; rejects names unfit for a path. */
int
lang_normalise(const char *in, char *out, size_t outsz)
{
	const char *e;
	size_t n;

	while (isspace((unsigned char)*in))
		in++;
	e = in + strlen(in);
	while (e > in && isspace((unsigned char)e[-1]))
		e--;
	n = e - in;
	if (n == 0)
		in = "python", n = 6;
	if (n >= outsz || n > 64)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < n; i++) {
		char c = tolower((unsigned char)in[i]);
		if (!isalnum((unsigned char)c) && !strchr("_.+-", c))
			return -EINVAL;
		if (i == 0 && c == '.')
			return -EINVAL;
		out[i] = c;
	}
	out[n] = '\0';
	const char *alias = !strcmp(out, "js") ? "javascript" : !strcmp(out, "ts") ? "typescript" : NULL;
	if (alias) {
		if (strlen(alias) >= outsz)
			return -ENAMETOOLONG;
		strcpy(out, alias);
	}
	return 0;
}

/*
 * The kernelspecs sandcell ships (bash, java, Deno), wherever these binaries
 * are: installed (PREFIX/bin beside PREFIX/share/sandcell/jupyter) or in the
 * source tree (bin/ beside proxy/jupyter and .deps/jupyter, or the sanitizer
 * build's build/asan/bin three levels down). The broker and its proxies sit in
 * one directory, so both resolve the same kernelspecs.
 */
static const char *const bundled[] = {"../share/sandcell/jupyter", "../proxy/jupyter",
				      "../.deps/jupyter", "../../../proxy/jupyter",
				      "../../../.deps/jupyter"};
#define N_BUNDLED (sizeof(bundled) / sizeof(bundled[0]))

static size_t
bundled_dirs(char **dirs)
{
	char exe[PATH_MAX], real[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	size_t n = 0;

	if (len <= 0)
		return 0;
	exe[len] = '\0';
	*strrchr(exe, '/') = '\0';
	for (size_t i = 0; i < N_BUNDLED; i++) {
		char *p = xasprintf("%s/%s", exe, bundled[i]);
		if (realpath(p, real))
			dirs[n++] = xstrdup(real);
		free(p);
	}
	return n;
}

static size_t
data_dirs(char *dirs[MAX_DIRS])
{
	size_t n = 0;
	const char *jp = getenv("JUPYTER_PATH");
	const char *home = getenv("HOME");
	const char *xdg = getenv("XDG_DATA_HOME");
	const char *jdd = getenv("JUPYTER_DATA_DIR");

	if (jp && *jp) {
		char *copy = xstrdup(jp), *save, *tok;
		for (tok = strtok_r(copy, ":", &save); tok && n < MAX_DIRS - 3 - N_BUNDLED;
		     tok = strtok_r(NULL, ":", &save))
			if (*tok)
				dirs[n++] = xstrdup(tok);
		free(copy);
	}
	/* after $JUPYTER_PATH, which can override them */
	n += bundled_dirs(dirs + n);
	if (jdd && *jdd)
		dirs[n++] = xstrdup(jdd);
	else if (xdg && *xdg)
		dirs[n++] = xasprintf("%s/jupyter", xdg);
	else if (home && *home)
		dirs[n++] = xasprintf("%s/.local/share/jupyter", home);
	dirs[n++] = xstrdup("/usr/local/share/jupyter");
	dirs[n++] = xstrdup("/usr/share/jupyter");
	return n;
}

static char **
json_strv(json_t *arr)
{
	size_t n = json_array_size(arr), i;
	char **v = xcalloc(n + 1, sizeof(*v));

	for (i = 0; i < n; i++) {
		const char *s = json_string_value(json_array_get(arr, i));
		if (!s) {
			for (size_t j = 0; j < i; j++)
				free(v[j]);
			free(v);
			return NULL;
		}
		v[i] = xstrdup(s);
	}
	return v;
}

static struct kspec *
kspec_load(const char *dir, const char *name)
{
	char path[PATH_MAX], lang[128];
	json_error_t jerr;
	json_t *root, *env;
	struct kspec *ks;
	const char *key;
	json_t *val;
	size_t n = 0;

	snprintf(path, sizeof(path), "%s/kernel.json", dir);
	if (!(root = json_load_file(path, 0, &jerr)))
		return NULL;
	const char *l = json_string_value(json_object_get(root, "language"));
	json_t *argv = json_object_get(root, "argv");
	if (!l || !json_is_array(argv) || json_array_size(argv) == 0 ||
	    lang_normalise(l, lang, sizeof(lang)) < 0) {
		log_warn("kernelspec %s: no usable argv or language", path);
		json_decref(root);
		return NULL;
	}
	ks = xcalloc(1, sizeof(*ks));
	ks->ks_name = xstrdup(name);
	ks->ks_lang = xstrdup(lang);
	ks->ks_dir = xstrdup(dir);
	if (!(ks->ks_argv = json_strv(argv))) {
		kspec_free(ks);
		json_decref(root);
		return NULL;
	}
	env = json_object_get(root, "env");
	ks->ks_env = xcalloc(json_object_size(env) + 2, sizeof(char *)); /* + KSPEC_DENO_ENV */
	json_object_foreach(env, key, val)
	{
		if (json_is_string(val) && !strchr(key, '='))
			ks->ks_env[n++] = xasprintf("%s=%s", key, json_string_value(val));
	}
	const char *im = json_string_value(json_object_get(root, "interrupt_mode"));
	ks->ks_interrupt_msg = im && !strcmp(im, "message");
	json_t *meta = json_object_get(json_object_get(root, "metadata"), "sandcell");
	const char *tr = json_string_value(json_object_get(meta, "transport"));
	ks->ks_tcp = tr && !strcmp(tr, "tcp");
	/* Deno's kernel publishes some output after its idle status; a unit
	 * ends only after a fence that lets already-scheduled callbacks run */
	const char *base = strrchr(ks->ks_argv[0], '/');
	const char *fence = json_string_value(json_object_get(meta, "fence"));
	if (fence)
		ks->ks_fence = xstrdup(fence);
	else if (!strcmp(base ? base + 1 : ks->ks_argv[0], "deno")) {
		ks->ks_fence = xstrdup(KSPEC_DENO_FENCE);
		ks->ks_abort_signal = KSPEC_DENO_ABORT_SIGNAL;
		ks->ks_config_in_cwd = true;
		if (!json_object_get(env, "DENO_V8_FLAGS"))
			ks->ks_env[n++] = xstrdup(KSPEC_DENO_ENV);
	}
	json_decref(root);
	return ks;
}

void
kspec_free(struct kspec *ks)
{
	if (!ks)
		return;
	for (char **p = ks->ks_argv; p && *p; p++)
		free(*p);
	for (char **p = ks->ks_env; p && *p; p++)
		free(*p);
	free(ks->ks_argv);
	free(ks->ks_env);
	free(ks->ks_name);
	free(ks->ks_lang);
	free(ks->ks_dir);
	free(ks->ks_fence);
	free(ks);
}

void
kspec_list_free(struct kspec **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kspec_free(v[i]);
	free(v);
}

/* Every loadable kernelspec; a name found in an earlier dir hides later ones. */
int
kspec_list(struct kspec ***out, size_t *nout)
{
	char *dirs[MAX_DIRS];
	size_t nd = data_dirs(dirs), n = 0;
	struct kspec **v = NULL;

	for (size_t d = 0; d < nd; d++) {
		char *kdir = xasprintf("%s/kernels", dirs[d]);
		struct dirent **names;
		int k = scandir(kdir, &names, NULL, alphasort);
		for (int i = 0; i < k; i++) {
			const char *nm = names[i]->d_name;
			bool seen = nm[0] == '.';
			for (size_t j = 0; j < n && !seen; j++)
				seen = !strcmp(v[j]->ks_name, nm);
			if (!seen) {
				char *sd = xasprintf("%s/%s", kdir, nm);
				struct kspec *ks = kspec_load(sd, nm);
				free(sd);
				if (ks) {
					v = xrealloc(v, (n + 1) * sizeof(*v));
					v[n++] = ks;
				}
			}
			free(names[i]);
		}
		if (k >= 0)
			free(names);
		free(kdir);
		free(dirs[d]);
	}
	*out = v;
	*nout = n;
	return 0;
}

/* In a list: by kernelspec name first, then by language; -1 if neither. */
int
kspec_index(struct kspec *const *v, size_t n, const char *want)
{
	for (size_t i = 0; i < n; i++)
		if (!strcasecmp(v[i]->ks_name, want))
			return i;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i]->ks_lang, want))
			return i;
	return -1;
}

/* From the data dirs, as kspec_index; want is already normalised. */
int
kspec_find(const char *want, struct kspec **out)
{
	struct kspec **v;
	size_t n;
	int hit;

	kspec_list(&v, &n);
	if ((hit = kspec_index(v, n, want)) < 0) {
		kspec_list_free(v, n);
		return -ENOENT;
	}
	*out = v[hit];
	v[hit] = NULL;
	kspec_list_free(v, n);
	return 0;
}

/* Whether dir (an fd, or a host path if fd is AT_FDCWD) holds one of names. */
static bool
config_in(int fd, const char *dir, bool *install)
{
	static const char *const names[] = {"deno.json", "deno.jsonc", "package.json"};
	char p[PATH_MAX + 16];
	bool found = false;
	struct stat st;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "%s%s%s", dir, *dir ? "/" : "", names[i]);
		if (fstatat(fd, p, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
			continue;
		found = true;
		if (!strcmp(names[i], "package.json")) {
			snprintf(p, sizeof(p), "%s%snode_modules", dir, *dir ? "/" : "");
			*install = fstatat(fd, p, &st, AT_SYMLINK_NOFOLLOW) < 0;
		}
	}
	return found;
}

/*
 * Deno reads a configuration (deno.json, deno.jsonc, package.json) from its
 * cwd and the cwd's parents as it starts, and exits on a broken one (a
 * kernelspec's ks_config_in_cwd). Whether cwd or a parent of it holds one,
 * seen from the host (lstat: nothing is read); in a box (workspace not NULL:
 * the host dir shown at BOX_HOME), cwd is resolved in the box's view
 * (boxpath.c: a tenant's links never lead out of it) and only the
 * workspace's part of the path looked at, nothing else there being the
 * tenant's. *install: the nearest package.json has no node_modules beside
 * it, which Deno wants made (`deno install`) before it resolves from it.
 */
bool
kspec_cwd_config(const char *workspace, const char *cwd, bool *install)
{
	char dir[PATH_MAX];
	struct boxpath_view v;
	bool found = false;
	int fd;

	*install = false;
	if (cwd[0] != '/')
		return false;
	if (!workspace) {
		if (snprintf(dir, sizeof(dir), "%s", cwd) >= (int)sizeof(dir))
			return false;
	} else if (boxpath_view_open(&v, workspace) < 0) {
		return false;
	} else if (boxpath_open(&v, cwd, 0, &fd, dir, sizeof(dir)) < 0) {
		boxpath_view_close(&v);
		return false;
	} else if (fd >= 0) {
		close(fd);
	}
	for (;;) { /* the cwd, then each parent */
		if (!workspace) {
			found = config_in(AT_FDCWD, dir[0] ? dir : "/", install);
		} else if (!strncmp(dir, BOX_HOME, strlen(BOX_HOME)) &&
			   (!dir[strlen(BOX_HOME)] || dir[strlen(BOX_HOME)] == '/') &&
			   boxpath_open(&v, dir, 0, &fd, NULL, 0) == 0 && fd >= 0) {
			found = config_in(fd, "", install);
			close(fd);
		}
		if (found || !dir[0] || !strcmp(dir, "/"))
			break;
		*strrchr(dir, '/') = '\0';
	}
	if (workspace)
		boxpath_view_close(&v);
	return found;
}

/*
 * The program of the first kernelspec whose argv[0] is an absolute path
 * named base (Deno's, for the other kernels' PATH), or NULL (caller frees).
 */
char *
kspec_program(const char *base)
{
	struct kspec **v;
	char *path = NULL;
	size_t n;

	kspec_list(&v, &n);
	for (size_t i = 0; i < n && !path; i++) {
		const char *a0 = v[i]->ks_argv[0], *s = strrchr(a0, '/');
		if (a0[0] == '/' && !strcmp(s + 1, base))
			path = xstrdup(a0);
	}
	kspec_list_free(v, n);
	return path;
}

/* "python (python3), r (ir)": what errors and listings show. */
char *
kspec_languages(void)
{
	struct kspec **v;
	size_t n;
	struct buf b = {0};

	kspec_list(&v, &n);
	for (size_t i = 0; i < n; i++) {
		char *s = xasprintf("%s%s (%s)", i ? ", " : "", v[i]->ks_lang, v[i]->ks_name);
		buf_append(&b, s, strlen(s));
		free(s);
	}
	buf_append(&b, "", 1);
	kspec_list_free(v, n);
	return b.b_data;
}

/*
 * Where "-m" is in a kernelspec's argv that runs a Python module, after the
 * interpreter and its -X and -W options only (Debian 13's python3 says
 * -Xfrozen_modules=off), each in one word or two; -1 for any other argv.
 * launch.c runs that module so that nothing in the cwd stands in for it, and
 * the Python template takes those options as its own (sandcell_template.py's
 * interpreter_options() reads a fork's request by the same rule).
 */
int
kspec_python_module(char *const *argv)
{
	int i = 1;

	if (!argv[0])
		return -1;
	while (argv[i] && (!strncmp(argv[i], "-X", 2) || !strncmp(argv[i], "-W", 2))) {
		if (argv[i][2]) {
			i++;
		} else if (argv[i + 1]) {
			i += 2;
		} else {
			return -1;
		}
	}
	return argv[i] && !strcmp(argv[i], "-m") && argv[i + 1] ? i : -1;
}
