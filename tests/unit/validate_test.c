/*
 * validate_test.c — validation of /execute bodies (validate_execute) into an
 * EXECUTE message, with the status and an error that names the problem for
 * every rejection; and the name checks it relies on: lang_normalise,
 * env_key_valid, uuid_valid.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strcasestr, strptime, timegm, memmem when built without the       \
                       Makefile flags */
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../broker/broker.h"

#define LANGSZ (MAX_LANG + 1) /* what request_execute passes */

struct verdict {
	int status;
	struct msg m;
	const char *ctx_id;
	char lang[LANGSZ];
	char err[1024];
	json_t *body; /* ctx_id points into it */
};

/* Validates a body given as JSON text (NUL escapes allowed, any top level). */
static void
validate_json(struct verdict *v, json_t *body)
{
	memset(v, 0, sizeof(*v));
	memset(v->lang, 'X', sizeof(v->lang));
	v->ctx_id = "sentinel";
	v->body = body;
	v->status = validate_execute(body, &v->m, &v->ctx_id, v->lang,
	                                  sizeof(v->lang), v->err, sizeof(v->err));
}

static void
validate(struct verdict *v, const char *text)
{
	json_error_t e;
	json_t *body = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);

	cr_assert_not_null(body, "bad JSON in test: %s: %s", text, e.text);
	validate_json(v, body);
}

static void
verdict_free(struct verdict *v)
{
	msg_free(&v->m);
	json_decref(v->body);
}

static bool
has_env(const struct msg *m, const char *k, const char *val)
{
	for (size_t i = 0; i < m->m_nenv; i++)
		if (!strcmp(m->m_env[i].e_key.s, k))
			return !strcmp(m->m_env[i].e_val.s, val);
	return false;
}

/* ---- accepted bodies ---- */

Test(validate, code_alone_gives_an_execute_with_the_interrupt_policy)
{
	struct verdict v;

	validate(&v, "{\"code\":\"print(1)\"}");
	cr_assert_eq(v.status, 0, "%s", v.err);
	cr_assert_eq(v.m.m_type, MSG_EXECUTE);
	cr_assert_str_eq(v.m.m_code.s, "print(1)");
	cr_assert_eq(v.m.m_code.len, 8);
	cr_assert_eq(v.m.m_has, FB(F_CODE) | FB(F_POLICY),
	             "no env, no timeout, no stream yet");
	cr_assert_eq(v.m.m_policy, POLICY_INTERRUPT);
	cr_assert_null(v.ctx_id);
	cr_assert_str_eq(v.lang, "", "no language asked for");
	verdict_free(&v);
}

Test(validate, accepted_bodies_fill_the_message)
{
	static const struct {
		const char *name, *body;
		uint32_t has;
		uint64_t timeout_ms, policy;
		const char *ctx_id, *lang;
	} cases[] = {
	    {"empty code", "{\"code\":\"\"}", FB(F_CODE) | FB(F_POLICY), 0,
	     POLICY_INTERRUPT, NULL, ""},
	    {"context_id",
	     "{\"code\":\"x\",\"context_id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\"}",
	     FB(F_CODE) | FB(F_POLICY), 0, POLICY_INTERRUPT,
	     "0f8fad5b-d9cb-469f-a165-70867728950e", ""},
	    {"language normalised", "{\"code\":\"x\",\"language\":\"Python \"}",
	     FB(F_CODE) | FB(F_POLICY), 0, POLICY_INTERRUPT, NULL, "python"},
	    {"language by kernelspec name", "{\"code\":\"x\",\"language\":\"PYTHON3\"}",
	     FB(F_CODE) | FB(F_POLICY), 0, POLICY_INTERRUPT, NULL, "python3"},
	    {"timeout as an integer", "{\"code\":\"x\",\"timeout\":5}",
	     FB(F_CODE) | FB(F_POLICY) | FB(F_TIMEOUT), 5000, POLICY_INTERRUPT, NULL, ""},
	    {"timeout as a float", "{\"code\":\"x\",\"timeout\":1.5}",
	     FB(F_CODE) | FB(F_POLICY) | FB(F_TIMEOUT), 1500, POLICY_INTERRUPT, NULL, ""},
	    {"timeout rounds to the millisecond", "{\"code\":\"x\",\"timeout\":0.0016}",
	     FB(F_CODE) | FB(F_POLICY) | FB(F_TIMEOUT), 2, POLICY_INTERRUPT, NULL, ""},
	    {"a tiny timeout is one millisecond", "{\"code\":\"x\",\"timeout\":1e-9}",
	     FB(F_CODE) | FB(F_POLICY) | FB(F_TIMEOUT), 1, POLICY_INTERRUPT, NULL, ""},
	    {"timeout of seven days", "{\"code\":\"x\",\"timeout\":604800}",
	     FB(F_CODE) | FB(F_POLICY) | FB(F_TIMEOUT), 604800000, POLICY_INTERRUPT, NULL,
	     ""},
	    {"on_disconnect continue", "{\"code\":\"x\",\"on_disconnect\":\"continue\"}",
	     FB(F_CODE) | FB(F_POLICY), 0, POLICY_CONTINUE, NULL, ""},
	    {"on_disconnect interrupt",
	     "{\"code\":\"x\",\"on_disconnect\":\"interrupt\"}",
	     FB(F_CODE) | FB(F_POLICY), 0, POLICY_INTERRUPT, NULL, ""},
	    {"every optional member null",
	     "{\"code\":\"x\",\"context_id\":null,\"language\":null,\"env_vars\":null,"
	     "\"timeout\":null,\"on_disconnect\":null}",
	     FB(F_CODE) | FB(F_POLICY), 0, POLICY_INTERRUPT, NULL, ""},
	    {"null context_id with a language",
	     "{\"code\":\"x\",\"context_id\":null,\"language\":\"python\"}",
	     FB(F_CODE) | FB(F_POLICY), 0, POLICY_INTERRUPT, NULL, "python"},
	    {"context_id with a null language",
	     "{\"code\":\"x\",\"context_id\":\"c\",\"language\":null}",
	     FB(F_CODE) | FB(F_POLICY), 0, POLICY_INTERRUPT, "c", ""},
	    {"empty env_vars", "{\"code\":\"x\",\"env_vars\":{}}",
	     FB(F_CODE) | FB(F_POLICY), 0, POLICY_INTERRUPT, NULL, ""},
	    {"unknown members ignored", "{\"code\":\"x\",\"request_id\":7,\"extra\":{}}",
	     FB(F_CODE) | FB(F_POLICY), 0, POLICY_INTERRUPT, NULL, ""},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct verdict v;
		validate(&v, cases[i].body);
		cr_expect_eq(v.status, 0, "%s: %d %s", cases[i].name, v.status, v.err);
		if (v.status) {
			verdict_free(&v);
			continue;
		}
		cr_expect_eq(v.m.m_has, cases[i].has, "%s: fields %#x", cases[i].name,
		             v.m.m_has);
		cr_expect_eq(v.m.m_timeout, cases[i].timeout_ms, "%s: timeout %llu ms",
		             cases[i].name, (unsigned long long)v.m.m_timeout);
		cr_expect_eq(v.m.m_policy, cases[i].policy, "%s", cases[i].name);
		if (cases[i].ctx_id)
			cr_expect(v.ctx_id && !strcmp(v.ctx_id, cases[i].ctx_id),
			          "%s: context_id", cases[i].name);
		else
			cr_expect_null(v.ctx_id, "%s: context_id", cases[i].name);
		cr_expect_str_eq(v.lang, cases[i].lang, "%s: language", cases[i].name);
		verdict_free(&v);
	}
}

Test(validate, env_vars_become_env_entries_byte_for_byte)
{
	struct verdict v;

	validate(&v, "{\"code\":\"x\",\"env_vars\":{\"A\":\"1\",\"_B_2\":\"two words\","
	             "\"EMPTY\":\"\",\"UNI\":\"h\\u00e9llo \\u2603\",\"Q\":\"it's "
	             "\\\"q\\\"\\n\"}}");
	cr_assert_eq(v.status, 0, "%s", v.err);
	cr_assert(v.m.m_has & FB(F_ENV));
	cr_assert_eq(v.m.m_nenv, 5);
	cr_assert(has_env(&v.m, "A", "1"));
	cr_assert(has_env(&v.m, "_B_2", "two words"));
	cr_assert(has_env(&v.m, "EMPTY", ""));
	cr_assert(has_env(&v.m, "UNI", "h\xc3\xa9llo \xe2\x98\x83"));
	cr_assert(has_env(&v.m, "Q", "it's \"q\"\n"));
	verdict_free(&v);
}

Test(validate, the_message_encodes_and_decodes_once_a_stream_is_set)
{
	struct verdict v;
	struct msg d;
	void *buf;
	size_t len;

	validate(&v, "{\"code\":\"1+1\",\"env_vars\":{\"K\":\"v\"},\"timeout\":2,"
	             "\"on_disconnect\":\"continue\"}");
	cr_assert_eq(v.status, 0, "%s", v.err);
	msg_set_u64(&v.m, F_STREAM, 9);
	cr_assert_eq(msg_encode(&v.m, &buf, &len), 0);
	cr_assert_eq(msg_decode(buf, len, &d), 0);
	cr_assert_str_eq(d.m_code.s, "1+1");
	cr_assert_eq(d.m_timeout, 2000);
	cr_assert_eq(d.m_policy, POLICY_CONTINUE);
	cr_assert_eq(d.m_nenv, 1);
	free(buf);
	msg_free(&d);
	verdict_free(&v);
}

Test(validate, limits_are_inclusive)
{
	/* env value of exactly PROTO_MAX_ENVVAL and PROTO_MAX_ENV entries */
	json_t *body = json_pack("{s:s}", "code", "x");
	json_t *env = json_object();
	char *val = malloc(PROTO_MAX_ENVVAL + 1);
	struct verdict v;

	memset(val, 'v', PROTO_MAX_ENVVAL);
	val[PROTO_MAX_ENVVAL] = '\0';
	json_object_set_new(env, "BIG", json_string(val));
	for (unsigned i = 1; i < PROTO_MAX_ENV; i++) {
		char k[16];
		snprintf(k, sizeof(k), "K%u", i);
		json_object_set_new(env, k, json_string(""));
	}
	json_object_set_new(body, "env_vars", env);
	validate_json(&v, body);
	cr_assert_eq(v.status, 0, "%s", v.err);
	cr_assert_eq(v.m.m_nenv, PROTO_MAX_ENV);
	cr_assert(has_env(&v.m, "BIG", val));
	verdict_free(&v);
	free(val);
}

/* ---- rejected bodies ---- */

static void
assert_nothing_left(const struct verdict *v, const char *name)
{
	cr_expect_null(v->m.m_env, "%s: env left allocated", name);
	cr_expect_eq(v->m.m_nenv, 0, "%s", name);
	cr_expect_null(v->m.m_code.s, "%s: code left allocated", name);
}

Test(validate, every_bad_body_gets_its_status_and_an_error_naming_the_problem)
{
	static const struct {
		const char *name, *body;
		int status;
		const char *err; /* must appear in the error text */
	} cases[] = {
	    {"body is an array", "[]", 400, "JSON object"},
	    {"body is a string", "\"print(1)\"", 400, "JSON object"},
	    {"body is null", "null", 400, "JSON object"},
	    {"body is a number", "1", 400, "JSON object"},
	    {"code missing", "{}", 400, "'code' is required"},
	    {"code missing, others present", "{\"language\":\"python\"}", 400,
	     "'code' is required"},
	    {"code is null", "{\"code\":null}", 400, "'code'"},
	    {"code is a number", "{\"code\":5}", 400, "'code' must be a string"},
	    {"code is an array", "{\"code\":[\"x\"]}", 400, "'code' must be a string"},
	    {"code is an object", "{\"code\":{}}", 400, "'code' must be a string"},
	    {"context_id is a number", "{\"code\":\"x\",\"context_id\":5}", 400,
	     "'context_id' must be a string"},
	    {"context_id is an object", "{\"code\":\"x\",\"context_id\":{}}", 400,
	     "'context_id' must be a string"},
	    {"language is a number", "{\"code\":\"x\",\"language\":3}", 400,
	     "'language' must be a string"},
	    {"context_id and language",
	     "{\"code\":\"x\",\"context_id\":\"c\",\"language\":\"python\"}", 400,
	     "'context_id' and 'language' cannot both be set"},
	    {"env_vars is an array", "{\"code\":\"x\",\"env_vars\":[]}", 400,
	     "'env_vars' must be an object"},
	    {"env_vars is a string", "{\"code\":\"x\",\"env_vars\":\"A=1\"}", 400,
	     "'env_vars' must be an object"},
	    {"env value is a number", "{\"code\":\"x\",\"env_vars\":{\"A\":1}}", 400,
	     "env var 'A' must be a string"},
	    {"env value is null", "{\"code\":\"x\",\"env_vars\":{\"A\":null}}", 400,
	     "env var 'A' must be a string"},
	    {"env value is an object", "{\"code\":\"x\",\"env_vars\":{\"A\":{}}}", 400,
	     "env var 'A' must be a string"},
	    {"env value after a good one",
	     "{\"code\":\"x\",\"env_vars\":{\"OK\":\"1\",\"B\":true}}", 400,
	     "env var 'B' must be a string"},
	    {"env name starts with a digit",
	     "{\"code\":\"x\",\"env_vars\":{\"1A\":\"v\"}}", 400,
	     "env var name '1A' is not valid"},
	    {"env name with a dash", "{\"code\":\"x\",\"env_vars\":{\"A-B\":\"v\"}}", 400,
	     "env var name 'A-B' is not valid"},
	    {"env name empty", "{\"code\":\"x\",\"env_vars\":{\"\":\"v\"}}", 400,
	     "env var name '' is not valid"},
	    {"env name with a space", "{\"code\":\"x\",\"env_vars\":{\"A B\":\"v\"}}",
	     400, "env var name 'A B' is not valid"},
	    {"env name with =", "{\"code\":\"x\",\"env_vars\":{\"A=B\":\"v\"}}", 400,
	     "env var name 'A=B' is not valid"},
	    {"env name non-ASCII", "{\"code\":\"x\",\"env_vars\":{\"\\u00c9\":\"v\"}}",
	     400, "is not valid"},
	    {"env value with NUL", "{\"code\":\"x\",\"env_vars\":{\"A\":\"a\\u0000b\"}}",
	     400, "env var 'A' has a NUL byte"},
	    {"env value only NUL", "{\"code\":\"x\",\"env_vars\":{\"A\":\"\\u0000\"}}",
	     400, "env var 'A' has a NUL byte"},
	    {"timeout zero", "{\"code\":\"x\",\"timeout\":0}", 400,
	     "'timeout' must be a number"},
	    {"timeout zero float", "{\"code\":\"x\",\"timeout\":0.0}", 400,
	     "'timeout' must be a number"},
	    {"timeout negative", "{\"code\":\"x\",\"timeout\":-1}", 400,
	     "'timeout' must be a number"},
	    {"timeout negative float", "{\"code\":\"x\",\"timeout\":-0.5}", 400,
	     "'timeout' must be a number"},
	    {"timeout a string", "{\"code\":\"x\",\"timeout\":\"5\"}", 400,
	     "'timeout' must be a number"},
	    {"timeout a bool", "{\"code\":\"x\",\"timeout\":true}", 400,
	     "'timeout' must be a number"},
	    {"timeout an array", "{\"code\":\"x\",\"timeout\":[5]}", 400,
	     "'timeout' must be a number"},
	    {"timeout over seven days", "{\"code\":\"x\",\"timeout\":604801}", 400,
	     "'timeout'"},
	    {"timeout huge", "{\"code\":\"x\",\"timeout\":1e300}", 400, "'timeout'"},
	    {"on_disconnect other word", "{\"code\":\"x\",\"on_disconnect\":\"kill\"}",
	     400, "'on_disconnect' must be \"interrupt\" or \"continue\""},
	    {"on_disconnect empty", "{\"code\":\"x\",\"on_disconnect\":\"\"}", 400,
	     "'on_disconnect' must be"},
	    {"on_disconnect capitalised",
	     "{\"code\":\"x\",\"on_disconnect\":\"Continue\"}", 400,
	     "'on_disconnect' must be"},
	    {"on_disconnect a bool", "{\"code\":\"x\",\"on_disconnect\":true}", 400,
	     "'on_disconnect' must be a string"},
	    {"language unknown", "{\"code\":\"x\",\"language\":\"cobol\"}", 400,
	     "unknown language 'cobol'"},
	    {"language a path", "{\"code\":\"x\",\"language\":\"../x\"}", 400,
	     "unknown language '../x'"},
	    {"language with a slash", "{\"code\":\"x\",\"language\":\"a/b\"}", 400,
	     "unknown language 'a/b'"},
	    {"language after valid env",
	     "{\"code\":\"x\",\"env_vars\":{\"A\":\"1\"},\"language\":\"nope\"}", 400,
	     "unknown language 'nope'"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct verdict v;
		validate(&v, cases[i].body);
		cr_expect_eq(v.status, cases[i].status, "%s: status %d (%s)",
		             cases[i].name, v.status, v.err);
		cr_expect_not_null(strstr(v.err, cases[i].err),
		                   "%s: error '%s' lacks '%s'", cases[i].name, v.err,
		                   cases[i].err);
		assert_nothing_left(&v, cases[i].name);
		verdict_free(&v);
	}
}

Test(validate, an_unknown_language_lists_the_installed_ones_including_python)
{
	static const char *bodies[] = {
	    "{\"code\":\"x\",\"language\":\"cobol\"}",
	    "{\"code\":\"x\",\"language\":\"../etc\"}",
	    "{\"code\":\"x\",\"language\":\"" /* 65 characters: over the limit */
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
	};

	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		struct verdict v;
		validate(&v, bodies[i]);
		cr_assert_eq(v.status, 400, "%s", bodies[i]);
		const char *avail = strstr(v.err, "available: ");
		cr_assert_not_null(avail, "'%s' does not list the languages", v.err);
		cr_assert_not_null(strstr(avail, "python (python3)"),
		                   "'%s' does not offer python", v.err);
		verdict_free(&v);
	}
}

Test(validate, code_over_proto_max_big_is_too_large)
{
	char *code = malloc(PROTO_MAX_BIG + 1);
	struct verdict v;

	memset(code, 'c', PROTO_MAX_BIG + 1);
	validate_json(&v, json_pack("{s:s#}", "code", code, (int)PROTO_MAX_BIG + 1));
	cr_assert_eq(v.status, 413, "%s", v.err);
	cr_assert_not_null(strstr(v.err, "'code' is too long"), "%s", v.err);
	verdict_free(&v);

	validate_json(&v, json_pack("{s:s#}", "code", code, (int)PROTO_MAX_BIG));
	cr_assert_eq(v.status, 0, "exactly PROTO_MAX_BIG is accepted: %s", v.err);
	cr_assert_eq(v.m.m_code.len, PROTO_MAX_BIG);
	verdict_free(&v);
	free(code);
}

Test(validate, env_over_its_limits_is_rejected_and_freed)
{
	json_t *body = json_pack("{s:s}", "code", "x");
	json_t *env = json_object();
	char *val = malloc(PROTO_MAX_ENVVAL + 2);
	struct verdict v;

	memset(val, 'v', PROTO_MAX_ENVVAL + 1);
	val[PROTO_MAX_ENVVAL + 1] = '\0';
	json_object_set_new(env, "A_OK", json_string("fine"));
	json_object_set_new(env, "BIG", json_string(val));
	json_object_set_new(body, "env_vars", env);
	validate_json(&v, body);
	cr_assert_eq(v.status, 400);
	cr_assert_not_null(strstr(v.err, "env var 'BIG'"), "%s", v.err);
	cr_assert_not_null(strstr(v.err, "too long"), "%s", v.err);
	assert_nothing_left(&v, "value too long");
	verdict_free(&v);
	free(val);

	body = json_pack("{s:s}", "code", "x");
	env = json_object();
	for (unsigned i = 0; i < PROTO_MAX_ENV + 1; i++) {
		char k[16];
		snprintf(k, sizeof(k), "K%u", i);
		json_object_set_new(env, k, json_string(""));
	}
	json_object_set_new(body, "env_vars", env);
	validate_json(&v, body);
	cr_assert_eq(v.status, 400);
	cr_assert_not_null(strstr(v.err, "'env_vars' has too many entries"), "%s", v.err);
	assert_nothing_left(&v, "too many entries");
	verdict_free(&v);
}

/*
 * Regression (was a bug in broker/http.c:147-150): a timeout over seven days is refused with
 * "'timeout' must be a number of seconds, > 0", which a value of 604801
 * satisfies; the message does not name the upper limit that was broken.
 *
 */
Test(validate, a_timeout_over_the_limit_is_told_the_limit)
{
	struct verdict v;

	validate(&v, "{\"code\":\"x\",\"timeout\":604801}");
	cr_assert_eq(v.status, 400);
	cr_expect(strstr(v.err, "604800") || strstr(v.err, "7 days") ||
	              strstr(v.err, "seven"),
	          "'%s' does not say what the limit is", v.err);
	verdict_free(&v);
}

/*
 * Regression (was a bug in broker/http.c:131-177 with proto/proto.h PROTO_MAX_FRAME): each field
 * is bounded but their sum is not. With --max-body above ~80 MiB (main.c sets
 * no upper bound), code of 64 MiB plus 160 env values of 128 KiB is accepted,
 * but its EXECUTE frame is over PROTO_MAX_FRAME: the proxy's nng socket
 * (NNG_OPT_RECVMAXSZ = PROTO_MAX_FRAME) will not take it and msg_decode
 * refuses it with PROTO_ESIZE, so the request's stream never gets an answer.
 *
 */
Test(validate, an_accepted_body_always_fits_in_one_frame)
{
	char *code = malloc(PROTO_MAX_BIG);
	char *val = malloc(PROTO_MAX_ENVVAL + 1);
	json_t *env = json_object();
	size_t envsz = 0;
	struct verdict v;
	struct msg d;
	void *buf;
	size_t len;

	memset(code, 'c', PROTO_MAX_BIG);
	memset(val, 'v', PROTO_MAX_ENVVAL);
	val[PROTO_MAX_ENVVAL] = '\0';
	for (int i = 0; i < 160; i++) {
		char k[16];
		snprintf(k, sizeof(k), "K%d", i);
		json_object_set_new(env, k, json_string(val));
		envsz += strlen(k) + PROTO_MAX_ENVVAL + 16; /* as validate.c counts an entry */
	}
	/* each field within its bound, their sum over the frame's: refused */
	validate_json(&v, json_pack("{s:s#, s:O}", "code", code, (int)PROTO_MAX_BIG,
	                            "env_vars", env));
	cr_assert_eq(v.status, 413, "code and env_vars over the frame: %d (%s)", v.status, v.err);
	cr_assert(strstr(v.err, "together"), "%s", v.err);
	verdict_free(&v);
	/* the most that is accepted (their sum at the bound) fits one frame */
	validate_json(&v, json_pack("{s:s#, s:o}", "code", code, (int)(PROTO_MAX_BIG - envsz),
	                            "env_vars", env));
	free(code);
	free(val);
	cr_assert_eq(v.status, 0, "the largest body accepted is refused: %s", v.err);
	msg_set_u64(&v.m, F_STREAM, 1);
	cr_assert_eq(msg_encode(&v.m, &buf, &len), 0);
	int e = msg_decode(buf, len, &d);
	cr_expect_eq(e, 0, "accepted, but the %zu-byte frame does not decode: %s", len,
	             proto_strerror(e));
	msg_free(&d);
	free(buf);
	verdict_free(&v);
}

/* ---- languages resolved against kernelspecs on JUPYTER_PATH ---- */

static char jdir[64];

static void
write_kernelspec(const char *name, const char *json)
{
	char *dir = xasprintf("%s/kernels/%s", jdir, name);
	char *path = xasprintf("%s/kernel.json", dir);

	cr_assert_eq(mkdir_p(dir, 0755), 0);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(json, f);
	fclose(f);
	free(path);
	free(dir);
}

static void
fake_kernels(void)
{
	snprintf(jdir, sizeof(jdir), "/tmp/sandcell-validate-test-XXXXXX");
	cr_assert_not_null(mkdtemp(jdir));
	write_kernelspec("deno",
	                 "{\"argv\":[\"/bin/true\"],\"language\":\"typescript\"}");
	write_kernelspec("node",
	                 "{\"argv\":[\"/bin/true\"],\"language\":\"JavaScript\"}");
	write_kernelspec("broken", "{\"argv\":[],\"language\":\"broken\"}");
	setenv("JUPYTER_PATH", jdir, 1);
	log_init("validate_test", LOG_ERR); /* the broken spec is expected */
}

static void
fake_kernels_remove(void)
{
	rm_rf(jdir);
}

Test(validate_language, aliases_resolve_to_installed_kernelspecs, .init = fake_kernels,
     .fini = fake_kernels_remove)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
	    {"js", "javascript"},           {"JS", "javascript"}, {"ts", "typescript"},
	    {" TypeScript ", "typescript"}, {"DENO", "deno"},     {"node", "node"},
	    {"python", "python"},           {"", "python"},       {"   ", "python"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char body[256];
		struct verdict v;
		snprintf(body, sizeof(body), "{\"code\":\"x\",\"language\":\"%s\"}",
		         cases[i].in);
		validate(&v, body);
		cr_expect_eq(v.status, 0, "'%s': %s", cases[i].in, v.err);
		cr_expect_str_eq(v.lang, cases[i].want, "'%s'", cases[i].in);
		verdict_free(&v);
	}
}

Test(validate_language, an_unusable_kernelspec_is_not_offered, .init = fake_kernels,
     .fini = fake_kernels_remove)
{
	struct verdict v;

	validate(&v, "{\"code\":\"x\",\"language\":\"broken\"}");
	cr_assert_eq(v.status, 400);
	cr_assert_not_null(strstr(v.err, "unknown language 'broken'"), "%s", v.err);
	cr_assert_not_null(strstr(v.err, "typescript (deno)"), "%s", v.err);
	cr_assert_not_null(strstr(v.err, "javascript (node)"), "%s", v.err);
	cr_assert_not_null(strstr(v.err, "python (python3)"), "%s", v.err);
	cr_assert_null(strstr(v.err, "(broken)"), "%s", v.err);
	verdict_free(&v);
}

/* ---- lang_normalise ---- */

Test(lang_normalise, names_are_trimmed_lowercased_and_aliased)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
	    {"python", "python"},
	    {"  PyThOn ", "python"},
	    {"", "python"},
	    {" \t\n", "python"},
	    {"js", "javascript"},
	    {"JS", "javascript"},
	    {" ts ", "typescript"},
	    {"R", "r"},
	    {"c++", "c++"},
	    {"python3.11", "python3.11"},
	    {"a_b-c", "a_b-c"},
	    {"jsx", "jsx"},
	    {"javascript", "javascript"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[LANGSZ];
		cr_expect_eq(lang_normalise(cases[i].in, out, sizeof(out)), 0, "'%s'",
		             cases[i].in);
		cr_expect_str_eq(out, cases[i].want, "'%s'", cases[i].in);
	}
}

Test(lang_normalise, names_unfit_for_a_path_are_rejected)
{
	static const struct {
		const char *in;
		int want;
	} cases[] = {
	    {"../x", -EINVAL},     {"a/b", -EINVAL},  {"/python", -EINVAL},
	    {".hidden", -EINVAL},  {".", -EINVAL},    {"..", -EINVAL},
	    {"a b", -EINVAL},      {"a\\b", -EINVAL}, {"py;rm", -EINVAL},
	    {"\xc3\xa9", -EINVAL}, {"a:b", -EINVAL},  {"a*", -EINVAL},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[LANGSZ];
		cr_expect_eq(lang_normalise(cases[i].in, out, sizeof(out)), cases[i].want,
		             "'%s'", cases[i].in);
	}
}

Test(lang_normalise, names_over_64_characters_or_the_buffer_are_too_long)
{
	char in[80], out[128];

	memset(in, 'a', 64);
	in[64] = '\0';
	cr_assert_eq(lang_normalise(in, out, sizeof(out)), 0, "64 characters fit");
	cr_assert_str_eq(out, in);
	in[64] = 'a';
	in[65] = '\0';
	cr_assert_eq(lang_normalise(in, out, sizeof(out)), -ENAMETOOLONG);
	cr_assert_eq(lang_normalise("python", out, 6), -ENAMETOOLONG,
	             "no room for the NUL");
	cr_assert_eq(lang_normalise("python", out, 7), 0);
	cr_assert_eq(lang_normalise("", out, 6), -ENAMETOOLONG,
	             "the default must fit too");
}

/*
 * Regression (was a bug in proto/kspec.c:46-49, lang_normalise): the js/ts aliases are expanded
 * with snprintf after the size check was made against the short name, so a
 * buffer that fits "js" but not "javascript" gets a silently truncated name
 * and a success return. No caller passes a buffer that small today (65 and 128
 * bytes), so this is latent.
 */
Test(lang_normalise, an_alias_that_does_not_fit_is_rejected_not_truncated)
{
	char out[64];

	/* "js" fits in 3 bytes, "javascript" does not */
	int e = lang_normalise("js", out, 3);
	cr_expect_eq(e, -ENAMETOOLONG, "returned %d with '%s'", e, e == 0 ? out : "");
	e = lang_normalise("ts", out, 10);
	cr_expect_eq(e, -ENAMETOOLONG, "returned %d with '%s'", e, e == 0 ? out : "");
}

/* ---- env_key_valid and uuid_valid ---- */

Test(env_key_valid, portable_names_only)
{
	static const struct {
		const char *k;
		bool want;
	} cases[] = {
	    {"A", true},
	    {"_", true},
	    {"a", true},
	    {"PATH", true},
	    {"A1", true},
	    {"_1", true},
	    {"lower_case_9", true},
	    {"", false},
	    {"1A", false},
	    {"9", false},
	    {"A-B", false},
	    {"A B", false},
	    {"A=B", false},
	    {"A.B", false},
	    {"\xc3\x89", false},
	    {"A\n", false},
	    {"$A", false},
	    {" A", false},
	    {"A\t", false},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_expect_eq(env_key_valid(cases[i].k), cases[i].want, "'%s'",
		             cases[i].k);
}

Test(env_key_valid, names_up_to_proto_max_envkey_are_valid)
{
	char k[PROTO_MAX_ENVKEY + 2];

	memset(k, 'K', PROTO_MAX_ENVKEY);
	k[PROTO_MAX_ENVKEY] = '\0';
	cr_assert(env_key_valid(k));
	k[PROTO_MAX_ENVKEY] = 'K';
	k[PROTO_MAX_ENVKEY + 1] = '\0';
	cr_assert_not(env_key_valid(k));
}

Test(uuid_valid, only_lower_case_8_4_4_4_12_hex)
{
	static const struct {
		const char *s;
		bool want;
	} cases[] = {
	    {"0f8fad5b-d9cb-469f-a165-70867728950e", true},
	    {"00000000-0000-0000-0000-000000000000", true},
	    {"0F8FAD5B-D9CB-469F-A165-70867728950E", false},
	    {"0f8fad5b-d9cb-469f-a165-70867728950", false},
	    {"0f8fad5b-d9cb-469f-a165-70867728950e0", false},
	    {"0f8fad5bd9cb-469f-a165-70867728950e0", false},
	    {"0f8fad5b-d9cb-469f-a165_70867728950e", false},
	    {"{0f8fad5b-d9cb-469f-a165-70867728950e}", false},
	    {"0f8fad5g-d9cb-469f-a165-70867728950e", false},
	    {"0f8fad5b-d9cb-469f-a165-70867728950e\n", false},
	    {"../../../../../../../../../etc/passw", false},
	    {"", false},
	    {"-", false},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_expect_eq(uuid_valid(cases[i].s), cases[i].want, "'%s'", cases[i].s);
}

Test(uuid_valid, every_minted_uuid_is_valid_version_4_and_distinct)
{
	char prev[37] = "";

	for (int i = 0; i < 1000; i++) {
		char id[37];
		uuid_v4(id);
		cr_assert(uuid_valid(id), "'%s'", id);
		cr_assert_eq(id[14], '4', "version nibble in '%s'", id);
		cr_assert(strchr("89ab", id[19]), "variant nibble in '%s'", id);
		cr_assert_str_neq(id, prev);
		memcpy(prev, id, sizeof(id));
	}
}
