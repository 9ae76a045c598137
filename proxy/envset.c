/*
 * envset.c — per-request environment variables as code the kernel runs: a
 * snippet that saves the current state of each variable (value or absence,
 * whatever set it: the kernel's environment, --env, earlier user code) in the
 * kernel and sets the request's value, and one that puts back exactly what it
 * saved. Values are quoted for each language so they arrive byte-exact: JSON
 * string literals for Python, JavaScript, R and Java (all four read them back
 * unchanged), ANSI-C $'...' quoting for bash.
 */
#include <stdio.h>
#include <string.h>

#include "proxy.h"

static void
puts_buf(struct buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

static void
json_quote(struct buf *b, const char *s)
{
	json_t *j = json_string(s); /* valid UTF-8: the broker checked it */
	char *q = json_dumps(j, JSON_ENCODE_ANY);

	puts_buf(b, q ? q : "\"\"");
	free(q);
	json_decref(j);
}

/* $'...' with every byte that is not plain printable ASCII as \xHH. */
static void
bash_quote(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	puts_buf(b, "$'");
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p >= 0x20 && *p < 0x7f && *p != '\\' && *p != '\'') {
			buf_append(b, p, 1);
		} else {
			char e[4] = {'\\', 'x', hex[*p >> 4], hex[*p & 15]};
			buf_append(b, e, 4);
		}
	}
	puts_buf(b, "'");
}

/*
 * One language: the snippet that saves and sets the pairs, and the one that
 * restores what the first saved. The shell channel is ordered and a context
 * runs one unit at a time, so one saved state per kernel is enough.
 */
struct lang_env {
	const char *lang;
	void (*set)(struct buf *b, const struct penv *env, size_t n);
	void (*restore)(struct buf *b, const struct penv *env, size_t n);
};

/* The saved state lives on the os module: nothing in the user's namespace. */
static void
python_set(struct buf *b, const struct penv *env, size_t n)
{
	puts_buf(b, "(lambda os, new: (setattr(os, '_sandcell_env', "
		    "{k: os.environ.get(k) for k in new}), os.environ.update(new)))"
		    "(__import__('os'), {");
	for (size_t i = 0; i < n; i++) {
		json_quote(b, env[i].e_key.s);
		puts_buf(b, ": ");
		json_quote(b, env[i].e_val.s);
		puts_buf(b, ", ");
	}
	puts_buf(b, "})\n");
}

static void
python_restore(struct buf *b, const struct penv *env, size_t n)
{
	(void)env, (void)n;
	puts_buf(b, "(lambda os: [os.environ.pop(k, None) if v is None else "
		    "os.environ.__setitem__(k, v) for k, v in "
		    "os.__dict__.pop('_sandcell_env', {}).items()])(__import__('os'))\n");
}

/* Deno: under a global symbol; Deno.env.get gives undefined for an absent one. */
static void
deno_set(struct buf *b, const struct penv *env, size_t n)
{
	puts_buf(b, "(() => { const saved = new Map(); for (const [k, v] of [");
	for (size_t i = 0; i < n; i++) {
		puts_buf(b, "[");
		json_quote(b, env[i].e_key.s);
		puts_buf(b, ", ");
		json_quote(b, env[i].e_val.s);
		puts_buf(b, "], ");
	}
	puts_buf(b, "]) { saved.set(k, Deno.env.get(k)); Deno.env.set(k, v); } "
		    "Reflect.set(globalThis, Symbol.for(\"sandcell.env\"), saved); })();\n");
}

static void
deno_restore(struct buf *b, const struct penv *env, size_t n)
{
	(void)env, (void)n;
	puts_buf(b, "(() => { const key = Symbol.for(\"sandcell.env\"); "
		    "const saved = Reflect.get(globalThis, key); "
		    "Reflect.deleteProperty(globalThis, key); "
		    "if (saved) for (const [k, v] of saved) { "
		    "if (v === undefined) Deno.env.delete(k); else Deno.env.set(k, v); } })();\n");
}

/*
 * R: in an option (NA for an absent variable). R accepts string literals as
 * argument names: c("K" = "v").
 */
static void
r_set(struct buf *b, const struct penv *env, size_t n)
{
	puts_buf(b, "invisible(local({ new <- c(");
	for (size_t i = 0; i < n; i++) {
		json_quote(b, env[i].e_key.s);
		puts_buf(b, " = ");
		json_quote(b, env[i].e_val.s);
		if (i + 1 < n)
			puts_buf(b, ", ");
	}
	puts_buf(b, "); options(sandcell.env = Sys.getenv(names(new), unset = NA, names = TRUE)); "
		    "do.call(Sys.setenv, as.list(new)) }))\n");
}

static void
r_restore(struct buf *b, const struct penv *env, size_t n)
{
	(void)env, (void)n;
	puts_buf(b, "invisible(local({ saved <- getOption(\"sandcell.env\"); "
		    "options(sandcell.env = NULL); "
		    "for (k in names(saved)) if (is.na(saved[[k]])) Sys.unsetenv(k) else "
		    "do.call(Sys.setenv, structure(list(saved[[k]]), names = k)) }))\n");
}

/*
 * bash: ${K[@]@A} is the declare command that recreates K (attributes,
 * arrays, specials such as RANDOM with their magic), "" when K is unset. A
 * special is never unset (that would end its magic): it is assigned back,
 * SECONDS with the time the request took. Saved in __sandcell_env_<i>.
 */
static void
bash_set(struct buf *b, const struct penv *env, size_t n)
{
	char name[48];

	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "__sandcell_env_%zu=", i);
		puts_buf(b, name);
		puts_buf(b, "${");
		puts_buf(b, env[i].e_key.s); /* a valid name: checked by the broker */
		puts_buf(b, "[@]@A}\n");
		if (!strcmp(env[i].e_key.s, "SECONDS"))
			puts_buf(b, "__sandcell_env_t=$EPOCHSECONDS __sandcell_env_s=$SECONDS\n");
	}
	for (size_t i = 0; i < n; i++) {
		puts_buf(b, "export ");
		puts_buf(b, env[i].e_key.s);
		puts_buf(b, "=");
		bash_quote(b, env[i].e_val.s);
		puts_buf(b, "\n");
	}
}

/* Only what was saved: a bash started anew meanwhile (exit) saved nothing. */
static void
bash_restore(struct buf *b, const struct penv *env, size_t n)
{
	char name[48];

	for (size_t i = 0; i < n; i++) {
		const char *k = env[i].e_key.s;

		snprintf(name, sizeof(name), "__sandcell_env_%zu", i);
		puts_buf(b, "if [[ -v ");
		puts_buf(b, name);
		puts_buf(b, " ]]; then export -n ");
		puts_buf(b, k);
		puts_buf(b, "; if [[ -n $");
		puts_buf(b, name);
		puts_buf(b, " ]]; then eval \"${");
		puts_buf(b, name);
		puts_buf(b, "/#declare /declare -g }\"");
		if (!strcmp(k, "SECONDS"))
			puts_buf(b, "; SECONDS=$((__sandcell_env_s + EPOCHSECONDS - __sandcell_env_t))");
		if (!strcmp(k, "PWD")) /* a cd during the request: PWD names where bash is */
			puts_buf(b, "; [[ $PWD -ef . ]] || PWD=$(pwd -P)");
		puts_buf(b, "; else unset ");
		puts_buf(b, k);
		puts_buf(b, "; fi; unset ");
		puts_buf(b, name);
		puts_buf(b, "; fi\n");
	}
	puts_buf(b, "unset __sandcell_env_t __sandcell_env_s\n");
}

/*
 * Java: both System.getenv() and system properties (code written for E2B
 * reads System.getProperty). getenv() is an unmodifiable view of a map that
 * is not: its field "m" is reached by reflection (the JVM opens java.util for
 * it). Map.put and System.setProperty return the previous value, kept in a
 * JShell variable. A JSON string literal is a Java one too: jansson escapes
 * only control characters as \uXXXX, never newline or carriage return, which
 * a Java literal cannot hold.
 */
#define JAVA_ENV_MAP                                                                   \
	"var f = Class.forName(\"java.util.Collections$UnmodifiableMap\")"                 \
	".getDeclaredField(\"m\"); f.setAccessible(true); "                                \
	"@SuppressWarnings(\"unchecked\") "                                                \
	"var e = (java.util.Map<String, String>) f.get(System.getenv());"

static void
java_set(struct buf *b, const struct penv *env, size_t n)
{
	puts_buf(b, "String[][] $sandcellEnv = {");
	for (size_t i = 0; i < n; i++) {
		puts_buf(b, "{");
		json_quote(b, env[i].e_key.s);
		puts_buf(b, ", ");
		json_quote(b, env[i].e_val.s);
		puts_buf(b, ", null, null}, ");
	}
	puts_buf(b, "};\n{ " JAVA_ENV_MAP " for (String[] s : $sandcellEnv) { "
		    "s[2] = e.put(s[0], s[1]); s[3] = System.setProperty(s[0], s[1]); } }\n");
}

static void
java_restore(struct buf *b, const struct penv *env, size_t n)
{
	(void)env, (void)n;
	puts_buf(b, "{ " JAVA_ENV_MAP " for (String[] s : $sandcellEnv) { "
		    "if (s[2] == null) e.remove(s[0]); else e.put(s[0], s[2]); "
		    "if (s[3] == null) System.clearProperty(s[0]); "
		    "else System.setProperty(s[0], s[3]); } }\n"
		    "$sandcellEnv = null;\n");
}

static const struct lang_env langs[] = {
	{"python", python_set, python_restore},
	{"javascript", deno_set, deno_restore},
	{"typescript", deno_set, deno_restore},
	{"r", r_set, r_restore},
	{"bash", bash_set, bash_restore},
	{"java", java_set, java_restore},
};

static const struct lang_env *
lang_find(const char *lang)
{
	for (size_t i = 0; i < sizeof(langs) / sizeof(langs[0]); i++)
		if (!strcmp(langs[i].lang, lang))
			return &langs[i];
	return NULL;
}

static char *
finish(struct buf *b)
{
	buf_append(b, "", 1);
	return b->b_data;
}

/* Changes the kernel's working directory (a pooled kernel claimed elsewhere). */
char *
envset_chdir(const char *lang, const char *dir)
{
	struct buf b = {0};

	if (!strcmp(lang, "python"))
		puts_buf(&b, "__import__('os').chdir(");
	else if (!strcmp(lang, "javascript") || !strcmp(lang, "typescript"))
		puts_buf(&b, "Deno.chdir(");
	else if (!strcmp(lang, "r"))
		puts_buf(&b, "invisible(setwd(");
	else if (!strcmp(lang, "bash"))
		puts_buf(&b, "cd -- ");
	else if (!strcmp(lang, "java")) /* the kernel moves the JVM there */
		puts_buf(&b, "System.setProperty(\"user.dir\", ");
	else
		return NULL;
	if (!strcmp(lang, "bash")) {
		bash_quote(&b, dir);
	} else {
		json_quote(&b, dir);
		if (!strcmp(lang, "r"))
			puts_buf(&b, "))");
		else
			puts_buf(&b, !strcmp(lang, "java") ? ");" : ")");
	}
	return finish(&b);
}

/*
 * Deno's `deno install` in dir, from the kernel (which then resolves from the
 * node_modules it made): what Deno asks for before it resolves from a
 * package.json. Its output goes nowhere: an import it could not make says
 * why itself ("Did you forget to run `deno install`?").
 */
char *
envset_deno_install(const char *dir)
{
	struct buf b = {0};

	puts_buf(&b, "try { await new Deno.Command(Deno.execPath(), { args: ['install', '--quiet'], "
		     "cwd: ");
	json_quote(&b, dir);
	puts_buf(&b, ", stdin: 'null', stdout: 'null', stderr: 'null' }).output(); } catch (_) {}");
	return finish(&b);
}

bool
envset_supported(const char *lang)
{
	return lang_find(lang) != NULL;
}


char *
envset_set(const char *lang, const struct penv *env, size_t n)
{
	const struct lang_env *le = lang_find(lang);
	struct buf b = {0};

	if (!le || n == 0)
		return NULL;
	le->set(&b, env, n);
	return finish(&b);
}

char *
envset_restore(const char *lang, const struct penv *env, size_t n)
{
	const struct lang_env *le = lang_find(lang);
	struct buf b = {0};

	if (!le || n == 0)
		return NULL;
	le->restore(&b, env, n);
	return finish(&b);
}
