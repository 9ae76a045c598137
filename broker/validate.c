/*
 * validate.c — what a request's body must be: an /execute body becomes the
 * EXECUTE message for the proxy, or a status and an error naming the first
 * thing wrong. Both transports' requests pass here (request.c), so an HTTP
 * client and sandcellctl are held to the same rules.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"

/* Optional string member of a JSON body: absent and null are the same. */
int
validate_opt_string(json_t *body, const char *key, const char **out, char *err,
                    size_t errsz)
{
	json_t *v = json_object_get(body, key);

	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v)) {
		snprintf(err, errsz, "'%s' must be a string", key);
		return -1;
	}
	*out = json_string_value(v);
	return 0;
}

int
validate_language(const char *in, char *lang, size_t langsz, char *err, size_t errsz)
{
	if (lang_normalise(in, lang, langsz) < 0 || !kcache_find(lang)) {
		char *avail = kspec_languages();
		snprintf(err, errsz, "unknown language '%.64s'; available: %s", in,
		         avail);
		free(avail);
		return -1;
	}
	return 0;
}

/* env_vars, if any, into m's env entries; *total grows by their size. */
static int
env_add(json_t *env, struct msg *m, size_t *total, char *err, size_t errsz)
{
	const char *k;
	json_t *v;

	if (!env || json_is_null(env))
		return 0;
	if (!json_is_object(env))
		return snprintf(err, errsz, "'env_vars' must be an object of strings"),
		       -1;
	if (json_object_size(env) > PROTO_MAX_ENV)
		return snprintf(err, errsz, "'env_vars' has too many entries"), -1;
	json_object_foreach(env, k, v)
	{
		if (!env_key_valid(k))
			return snprintf(err, errsz, "env var name '%.64s' is not valid",
			                k),
			       -1;
		if (!json_is_string(v))
			return snprintf(err, errsz, "env var '%s' must be a string", k),
			       -1;
		if (strlen(json_string_value(v)) != json_string_length(v) ||
		    json_string_length(v) > PROTO_MAX_ENVVAL)
			return snprintf(err, errsz,
			                "env var '%s' has a NUL byte or is too long", k),
			       -1;
		msg_add_env(m, k, json_string_value(v));
		*total += strlen(k) + json_string_length(v) + 16;
	}
	return 0;
}

/*
 * Validates an execute body into an EXECUTE message. Returns 0, or an HTTP
 * status with err set. A language is checked against installed kernelspecs.
 */
int
validate_execute(json_t *body, struct msg *m, const char **ctx_id, char *lang,
                 size_t langsz, char *err, size_t errsz)
{
	json_t *code = json_object_get(body, "code"), *to;
	const char *language, *policy;

	msg_init(m, MSG_EXECUTE);
	lang[0] = '\0';
	if (!json_is_object(body))
		return snprintf(err, errsz, "the body must be a JSON object"), 400;
	if (!code)
		return snprintf(err, errsz, "'code' is required"), 400;
	if (!json_is_string(code))
		return snprintf(err, errsz, "'code' must be a string"), 400;
	if (json_string_length(code) > PROTO_MAX_BIG)
		return snprintf(err, errsz, "'code' is too long"), 413;
	if (validate_opt_string(body, "context_id", ctx_id, err, errsz) < 0 ||
	    validate_opt_string(body, "language", &language, err, errsz) < 0 ||
	    validate_opt_string(body, "on_disconnect", &policy, err, errsz) < 0)
		return 400;
	if (*ctx_id && language)
		return snprintf(err, errsz,
		                "'context_id' and 'language' cannot both be set"),
		       400;
	if (policy && strcmp(policy, "interrupt") && strcmp(policy, "continue"))
		return snprintf(err, errsz,
		                "'on_disconnect' must be \"interrupt\" or \"continue\""),
		       400;
	to = json_object_get(body, "timeout");
	if (to && !json_is_null(to)) {
		double t = json_number_value(to);
		if (!json_is_number(to) || !(t > 0))
			return snprintf(err, errsz,
			                "'timeout' must be a number of seconds, > 0"),
			       400;
		if (t > 604800)
			return snprintf(
			           err, errsz,
			           "'timeout' must be at most 604800 seconds (7 days)"),
			       400;
		msg_set_u64(m, F_TIMEOUT,
		            (uint64_t)(t * 1000 + 0.5) ? (uint64_t)(t * 1000 + 0.5) : 1);
	}
	/* everything must fit one IPC frame to the proxy */
	size_t total = json_string_length(code);
	if (env_add(json_object_get(body, "env_vars"), m, &total, err, errsz) < 0)
		goto bad;
	if (total > PROTO_MAX_BIG) {
		snprintf(err, errsz, "code and env_vars together are over %u bytes",
		         PROTO_MAX_BIG);
		msg_free(m);
		return 413;
	}
	if (language && validate_language(language, lang, langsz, err, errsz) < 0)
		goto bad;
	msg_set_str(m, F_CODE, json_string_value(code), json_string_length(code));
	msg_set_u64(m, F_POLICY,
	            policy && !strcmp(policy, "continue") ? POLICY_CONTINUE
	                                                  : POLICY_INTERRUPT);
	return 0;
bad:
	msg_free(m);
	return 400;
}
