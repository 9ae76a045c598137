/*
 * envset.c — per-request environment variables as code the kernel runs:
 * a snippet that sets them before a unit and one that restores the global
 * values (or removes the variable) after it. Values travel as JSON string
 * literals, which each target language reads back byte-exact.
 */
#include <string.h>

#include "proxy.h"

static char *
json_env(const struct penv *env, size_t n, const struct penv *genv, size_t ngenv,
	 bool globals_only)
{
	json_t *o = json_object();
	char *s;

	for (size_t i = 0; i < n; i++) {
		const char *v = env[i].e_val.s;
		if (globals_only) {
			v = NULL;
			for (size_t j = 0; j < ngenv; j++)
				if (!strcmp(genv[j].e_key.s, env[i].e_key.s))
					v = genv[j].e_val.s;
			if (!v)
				continue;
		}
		json_object_set_new(o, env[i].e_key.s, json_stringn(v, strlen(v)));
	}
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

static char *
json_unset_keys(const struct penv *env, size_t n, const struct penv *genv, size_t ngenv)
{
	json_t *a = json_array();
	char *s;

	for (size_t i = 0; i < n; i++) {
		bool global = false;
		for (size_t j = 0; j < ngenv; j++)
			global |= !strcmp(genv[j].e_key.s, env[i].e_key.s);
		if (!global)
			json_array_append_new(a, json_string(env[i].e_key.s));
	}
	s = json_dumps(a, JSON_COMPACT);
	json_decref(a);
	return s;
}

/* A JSON object of strings is a Python dict literal. */
static char *
python_set(const char *obj)
{
	return xasprintf("__import__('os').environ.update(%s)", obj);
}

static char *
python_restore(const char *obj, const char *unset)
{
	return xasprintf("__import__('os').environ.update(%s)\n"
			 "[__import__('os').environ.pop(k, None) for k in %s]",
			 obj, unset);
}

static const struct {
	const char *lang;
	char *(*set)(const char *obj);
	char *(*restore)(const char *obj, const char *unset);
} langs[] = {
	{"python", python_set, python_restore},
};

static int
lang_index(const char *lang)
{
	for (size_t i = 0; i < sizeof(langs) / sizeof(langs[0]); i++)
		if (!strcmp(langs[i].lang, lang))
			return i;
	return -1;
}

bool
envset_supported(const char *lang)
{
	return lang_index(lang) >= 0;
}

char *
envset_set(const char *lang, const struct penv *env, size_t n)
{
	int li = lang_index(lang);
	char *obj, *code;

	if (li < 0 || n == 0)
		return NULL;
	obj = json_env(env, n, NULL, 0, false);
	code = langs[li].set(obj);
	free(obj);
	return code;
}

char *
envset_restore(const char *lang, const struct penv *env, size_t n, const struct penv *genv,
	       size_t ngenv)
{
	int li = lang_index(lang);
	char *obj, *unset, *code;

	if (li < 0 || n == 0)
		return NULL;
	obj = json_env(env, n, genv, ngenv, true);
	unset = json_unset_keys(env, n, genv, ngenv);
	code = langs[li].restore(obj, unset);
	free(obj);
	free(unset);
	return code;
}
