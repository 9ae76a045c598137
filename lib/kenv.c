/*
 * kenv.c — what a kernel takes of the environment sandcell was started with:
 * an allowlist, never the rest (a broker started with cloud keys or a
 * database URL in its environment hands them to no kernel). The few
 * variables every kernel needs from the host (PATH, the locale, the time
 * zone), and the names the operator lists (--env-pass: a proxy, a package
 * mirror). One list for the proxy's kernels (proxy/launch.c) and the
 * Python template they are forked from (broker/template.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib.h"

/* Names (NAME=) and prefixes (NAME_) taken from the host's environment. */
static const char *const kenv_base[] = {
    "PATH=", "LANG=", "LANGUAGE=", "LC_", "TZ=", NULL};

/* Whether name (n bytes) is one of list, a comma-separated list of names. */
static bool
listed(const char *name, size_t n, const char *list)
{
	for (const char *p = list; p && *p;) {
		size_t len = strcspn(p, ",");
		if (len == n && !strncmp(p, name, n))
			return true;
		p += len + (p[len] == ',');
	}
	return false;
}

/* Whether kv (NAME=VALUE, from the host's environment) goes to kernels; pass:
 * --env-pass's. */
bool
kenv_passes(const char *kv, const char *pass)
{
	const char *eq = strchr(kv, '=');

	if (!eq)
		return false;
	for (const char *const *b = kenv_base; *b; b++)
		if (!strncmp(kv, *b, strlen(*b)))
			return true;
	return listed(kv, eq - kv, pass);
}

/*
 * Adds the names of spec (separated by commas or spaces) to *list, a
 * comma-separated list (allocated; NULL: empty). 0, or -EINVAL with *bad set
 * to the first name that is not a variable's (caller frees).
 */
int
kenv_pass_add(char **list, const char *spec, char **bad)
{
	char *copy = xstrdup(spec), *save, *name, *out = xstrdup(*list ? *list : "");

	*bad = NULL;
	for (name = strtok_r(copy, ", \t", &save); name;
	     name = strtok_r(NULL, ", \t", &save)) {
		if (!env_key_valid(name)) {
			*bad = xstrdup(name);
			break;
		}
		if (listed(name, strlen(name), out))
			continue;
		char *more = xasprintf("%s%s%s", out, *out ? "," : "", name);
		free(out);
		out = more;
	}
	free(copy);
	if (*bad) {
		free(out);
		return -EINVAL;
	}
	free(*list);
	*list = out;
	return 0;
}
