/*
 * envset.c — per-request environment variables as code the kernel runs: a
 * snippet that sets them before a unit and one that restores the global values
 * (or removes the variable) after it. Values are quoted for each language so
 * they arrive byte-exact: JSON string literals for Python, JavaScript, R and
 * Java (all four read them back unchanged), ANSI-C $'...' quoting for bash.
 */
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

/* The global value of key, or NULL. */
static const char *
global_value(const char *key, const struct penv *genv, size_t ngenv)
{
	for (size_t j = 0; j < ngenv; j++)
		if (!strcmp(genv[j].e_key.s, key))
			return genv[j].e_val.s;
	return NULL;
}

/*
 * One language: how to set a list of pairs, and how to unset a list of keys.
 * restore = set(globals of the keys that have one) + unset(the others).
 */
struct lang_env {
	const char *lang;
	void (*set)(struct buf *b, const char *const *k, const char *const *v, size_t n);
	void (*unset)(struct buf *b, const char *const *k, size_t n);
};

static void
python_set(struct buf *b, const char *const *k, const char *const *v, size_t n)
{
	puts_buf(b, "__import__('os').environ.update({");
	for (size_t i = 0; i < n; i++) {
		json_quote(b, k[i]);
		puts_buf(b, ": ");
		json_quote(b, v[i]);
		puts_buf(b, ", ");
	}
	puts_buf(b, "})\n");
}

static void
python_unset(struct buf *b, const char *const *k, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		puts_buf(b, "__import__('os').environ.pop(");
		json_quote(b, k[i]);
		puts_buf(b, ", None)\n");
	}
}

static void
deno_set(struct buf *b, const char *const *k, const char *const *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		puts_buf(b, "Deno.env.set(");
		json_quote(b, k[i]);
		puts_buf(b, ", ");
		json_quote(b, v[i]);
		puts_buf(b, ");\n");
	}
}

static void
deno_unset(struct buf *b, const char *const *k, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		puts_buf(b, "Deno.env.delete(");
		json_quote(b, k[i]);
		puts_buf(b, ");\n");
	}
}

/* R accepts string literals as argument names: Sys.setenv("K" = "v"). */
static void
r_set(struct buf *b, const char *const *k, const char *const *v, size_t n)
{
	puts_buf(b, "invisible(Sys.setenv(");
	for (size_t i = 0; i < n; i++) {
		json_quote(b, k[i]);
		puts_buf(b, " = ");
		json_quote(b, v[i]);
		if (i + 1 < n)
			puts_buf(b, ", ");
	}
	puts_buf(b, "))\n");
}

static void
r_unset(struct buf *b, const char *const *k, size_t n)
{
	puts_buf(b, "invisible(Sys.unsetenv(c(");
	for (size_t i = 0; i < n; i++) {
		json_quote(b, k[i]);
		if (i + 1 < n)
			puts_buf(b, ", ");
	}
	puts_buf(b, ")))\n");
}

static void
bash_set(struct buf *b, const char *const *k, const char *const *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		puts_buf(b, "export ");
		puts_buf(b, k[i]); /* a valid name: checked by the broker */
		puts_buf(b, "=");
		bash_quote(b, v[i]);
		puts_buf(b, "\n");
	}
}

static void
bash_unset(struct buf *b, const char *const *k, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		puts_buf(b, "unset ");
		puts_buf(b, k[i]);
		puts_buf(b, "\n");
	}
}

/*
 * Java's System.getenv() is an unmodifiable view of a map that is not: its
 * field "m" is reached by reflection (the JVM opens java.util for it). A JSON
 * string literal is a Java one too: jansson escapes only control characters as
 * \uXXXX, never newline or carriage return, which a Java literal cannot hold.
 */
static void
java_env_begin(struct buf *b)
{
	puts_buf(b, "{ var f = Class.forName(\"java.util.Collections$UnmodifiableMap\")"
		    ".getDeclaredField(\"m\"); f.setAccessible(true); "
		    "@SuppressWarnings(\"unchecked\") "
		    "var e = (java.util.Map<String, String>) f.get(System.getenv());");
}

static void
java_set(struct buf *b, const char *const *k, const char *const *v, size_t n)
{
	java_env_begin(b);
	for (size_t i = 0; i < n; i++) {
		puts_buf(b, " e.put(");
		json_quote(b, k[i]);
		puts_buf(b, ", ");
		json_quote(b, v[i]);
		puts_buf(b, ");");
	}
	puts_buf(b, " }\n");
}

static void
java_unset(struct buf *b, const char *const *k, size_t n)
{
	java_env_begin(b);
	for (size_t i = 0; i < n; i++) {
		puts_buf(b, " e.remove(");
		json_quote(b, k[i]);
		puts_buf(b, ");");
	}
	puts_buf(b, " }\n");
}

static const struct lang_env langs[] = {
	{"python", python_set, python_unset},
	{"javascript", deno_set, deno_unset},
	{"typescript", deno_set, deno_unset},
	{"r", r_set, r_unset},
	{"bash", bash_set, bash_unset},
	{"java", java_set, java_unset},
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

bool
envset_supported(const char *lang)
{
	return lang_find(lang) != NULL;
}


char *
envset_set(const char *lang, const struct penv *env, size_t n)
{
	const struct lang_env *le = lang_find(lang);
	const char **k, **v;
	struct buf b = {0};

	if (!le || n == 0)
		return NULL;
	k = xcalloc(n, sizeof(*k));
	v = xcalloc(n, sizeof(*v));
	for (size_t i = 0; i < n; i++) {
		k[i] = env[i].e_key.s;
		v[i] = env[i].e_val.s;
	}
	le->set(&b, k, v, n);
	free(k);
	free(v);
	return finish(&b);
}

char *
envset_restore(const char *lang, const struct penv *env, size_t n, const struct penv *genv,
	       size_t ngenv)
{
	const struct lang_env *le = lang_find(lang);
	const char **sk, **sv, **uk;
	size_t ns = 0, nu = 0;
	struct buf b = {0};

	if (!le || n == 0)
		return NULL;
	sk = xcalloc(n, sizeof(*sk));
	sv = xcalloc(n, sizeof(*sv));
	uk = xcalloc(n, sizeof(*uk));
	for (size_t i = 0; i < n; i++) {
		const char *g = global_value(env[i].e_key.s, genv, ngenv);
		if (g) {
			sk[ns] = env[i].e_key.s;
			sv[ns++] = g;
		} else {
			uk[nu++] = env[i].e_key.s;
		}
	}
	if (ns)
		le->set(&b, sk, sv, ns);
	if (nu)
		le->unset(&b, uk, nu);
	free(sk);
	free(sv);
	free(uk);
	return finish(&b);
}
