/*
 * seeds.c — writes the fuzz seed corpora: tests/fuzz/corpus/msg (frames of
 * every message type from msg_encode, plus broken ones), .../http (/execute
 * bodies, valid and not), .../wire (signed kernel messages, plus broken
 * ones) and .../zmtp (a kernel's ZMTP streams, whole and broken). Deterministic; `tests/fuzz/run.sh seeds` rebuilds and reruns it.
 * Which fields a type takes is probed from the decoder, so seeds follow the
 * schema in proto.c without a copy of it here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "targets.h"

static const char *out_dir;
static int nfiles;

/*
 * A seed's name says what it is: "bad-..." is rejected (msg: by msg_decode;
 * http: as JSON or by validate_execute; wire: by wire_parse under the
 * key; zmtp: no message cut out of it), anything else accepted. Checked here so a seed cannot silently stop
 * testing what its name claims.
 */
static void
expect(const char *sub, const char *name, const uint8_t *data, size_t len)
{
	bool bad = !strncmp(name, "bad-", 4);
	bool ok;

	if (!strcmp(sub, "msg")) {
		struct msg m;
		ok = msg_decode(data, len, &m) == 0;
		msg_free(&m);
	} else if (!strcmp(sub, "http")) {
		const uint8_t *nul = memchr(data, '\0', len);
		const char *body = nul ? (const char *)nul + 1 : (const char *)data;
		size_t blen = nul ? len - (size_t)(nul - data) - 1 : len;
		char err[1024], lang[MAX_LANG + 1];
		const char *ctx = NULL;
		json_error_t jerr;
		struct msg m;
		json_t *j = json_loadb(body, blen, JSON_REJECT_DUPLICATES, &jerr);
		ok = j && validate_execute(j, &m, &ctx, lang, sizeof(lang), err,
		                                sizeof(err)) == 0;
		if (ok)
			msg_free(&m);
		json_decref(j);
	} else if (!strcmp(sub, "zmtp")) {
		ok = fuzz_zmtp_cut(data, len) > 0;
	} else {
		struct wire_frame f[FUZZ_MAX_FRAMES];
		size_t n = fuzz_wire_split(data, len, f, FUZZ_MAX_FRAMES);
		struct jmsg jm;
		ok = wire_parse(FUZZ_KEY, f, n, &jm) == 0;
		if (ok)
			jmsg_free(&jm);
	}
	if (ok == bad)
		fatal("seed %s/%s is %s but named as if it were not", sub, name,
		      ok ? "accepted" : "rejected");
}

static void
put(const char *sub, const char *name, const void *data, size_t len)
{
	char path[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", out_dir, sub);
	if (mkdir_p(path, 0755) < 0)
		fatal("mkdir %s: %s", path, strerror(errno));
	snprintf(path, sizeof(path), "%s/%s/%s", out_dir, sub, name);
	if (!(f = fopen(path, "wb")) || fwrite(data, 1, len, f) != len || fclose(f) != 0)
		fatal("write %s: %s", path, strerror(errno));
	expect(sub, name, data, len);
	nfiles++;
}

/* ---- msg ---- */

static const char *const field_name[] = {
    "stream", "req",   "code",  "env",     "timeout", "policy", "data",
    "final",  "text",  "id",    "lang",    "cwd",     "pid",    "kpid",
    "state",  "queue", "count", "outcome", "wait",    "run",    "flags",
    "refused",
};
_Static_assert(sizeof(field_name) / sizeof(field_name[0]) == F_FIELD_MAX,
               "a field has no name in seeds.c");

/* A plausible value for each field. */
static void
set_field(struct msg *m, enum msg_field f)
{
	switch (f) {
	case F_STREAM:
		msg_set_u64(m, f, 1);
		break;
	case F_REQ:
		msg_set_u64(m, f, 7);
		break;
	case F_TIMEOUT:
		msg_set_u64(m, f, 30000);
		break;
	case F_POLICY:
		msg_set_u64(m, f, POLICY_CONTINUE);
		break;
	case F_FINAL:
		msg_set_u64(m, f, 1);
		break;
	case F_PID:
		msg_set_u64(m, f, 4242);
		break;
	case F_KPID:
		msg_set_u64(m, f, 4243);
		break;
	case F_STATE:
		msg_set_u64(m, f, KS_IDLE);
		break;
	case F_QUEUE:
		msg_set_u64(m, f, 2);
		break;
	case F_COUNT:
		msg_set_u64(m, f, 3);
		break;
	case F_WAIT:
		msg_set_u64(m, f, 12);
		break;
	case F_RUN:
		msg_set_u64(m, f, 250);
		break;
	case F_FLAGS:
		msg_set_u64(m, f, 1);
		break;
	case F_REFUSED:
		msg_set_u64(m, f, 5);
		break;
	case F_CODE: {
		static const char c[] = "import os\nprint(os.getcwd())\n6*7";
		msg_set_str(m, f, c, sizeof(c) - 1);
		break;
	}
	case F_DATA: {
		static const char d[] = "{\"type\":\"stdout\",\"text\":\"0\\n\"}\n";
		msg_set_str(m, f, d, sizeof(d) - 1);
		break;
	}
	case F_TEXT:
		msg_set_str(m, f, "kernel python3: idle", 20);
		break;
	case F_ID:
		msg_set_str(m, f, "0f8fad5b-d9cb-469f-a165-70867728950e", 36);
		break;
	case F_LANG:
		msg_set_str(m, f, "python", 6);
		break;
	case F_CWD:
		msg_set_str(m, f, "/home/user", 10);
		break;
	case F_OUTCOME:
		msg_set_str(m, f, "ok", 2);
		break;
	case F_ENV:
		msg_add_env(m, "FOO", "bar");
		msg_add_env(m, "EMPTY", "");
		msg_add_env(m, "QUOTES", "it's \"quoted\"\n\\ \xc3\xa9");
		break;
	case F_FIELD_MAX:
		break;
	}
}

static int
encode_decode(const struct msg *m)
{
	struct msg d;
	void *buf;
	size_t len;
	int e;

	if (msg_encode(m, &buf, &len))
		fatal("msg_encode failed");
	e = msg_decode(buf, len, &d);
	msg_free(&d);
	free(buf);
	return e;
}

static void
put_msg(const char *name, const struct msg *m)
{
	void *buf;
	size_t len;

	if (msg_encode(m, &buf, &len))
		fatal("msg_encode failed");
	put("msg", name, buf, len);
	free(buf);
}

/* Fields type t takes (probed: a field it does not take is "unknown"). */
static uint32_t
allowed_fields(enum msg_type t)
{
	uint32_t ok = 0;

	for (int f = 0; f < F_FIELD_MAX; f++) {
		struct msg m;
		msg_init(&m, t);
		set_field(&m, f);
		if (encode_decode(&m) != PROTO_EUNKNOWN)
			ok |= FB(f);
		msg_free(&m);
	}
	return ok;
}

static void
build(struct msg *m, enum msg_type t, uint32_t fields)
{
	msg_init(m, t);
	for (int f = 0; f < F_FIELD_MAX; f++)
		if (fields & FB(f))
			set_field(m, f);
}

/* Frames derived from a valid one by a single defect. */
static void
put_broken(const char *type, const uint8_t *b, size_t len)
{
	char name[128];
	uint8_t *x = xmalloc(len + 8);

	snprintf(name, sizeof(name), "bad-%s-truncated", type);
	put("msg", name, b, len - 1);
	memcpy(x, b, len);
	x[len] = 0xc0;
	snprintf(name, sizeof(name), "bad-%s-trailing-byte", type);
	put("msg", name, x, len + 1);
	memcpy(x, b, len);
	x[1] = 0x7f;
	snprintf(name, sizeof(name), "bad-%s-unknown-type", type);
	put("msg", name, x, len);
	x[1] = 0x00;
	snprintf(name, sizeof(name), "bad-%s-type-none", type);
	put("msg", name, x, len);
	free(x);
}

static void
seeds_msg(void)
{
	char name[128];

	for (int t = MSG_NONE + 1; t < MSG_TYPE_MAX; t++) {
		uint32_t ok = allowed_fields(t), req = 0;
		struct msg m;
		char lower[64];
		size_t i;

		for (i = 0; msg_type_name(t)[i] && i < sizeof(lower) - 1; i++)
			lower[i] =
			    msg_type_name(t)[i] >= 'A' && msg_type_name(t)[i] <= 'Z'
			        ? msg_type_name(t)[i] - 'A' + 'a'
			        : msg_type_name(t)[i];
		lower[i] = '\0';
		for (int f = 0; f < F_FIELD_MAX; f++) {
			if (!(ok & FB(f)))
				continue;
			build(&m, t, ok & ~FB(f));
			if (encode_decode(&m) == PROTO_EMISSING)
				req |= FB(f);
			msg_free(&m);
		}
		build(&m, t, req);
		snprintf(name, sizeof(name), "%s-required", lower);
		put_msg(name, &m);
		msg_free(&m);
		if (ok != req) {
			build(&m, t, ok);
			snprintf(name, sizeof(name), "%s-all-fields", lower);
			put_msg(name, &m);
			msg_free(&m);
		}
		/* the first type's full frame also gets the single-defect variants */
		if (t == MSG_EXECUTE || t == MSG_HELLO || t == MSG_OUTPUT) {
			void *buf;
			size_t len;
			build(&m, t, ok);
			msg_encode(&m, &buf, &len);
			put_broken(lower, buf, len);
			free(buf);
			msg_free(&m);
		}
		/* one field out of the type's schema */
		for (int f = 0; f < F_FIELD_MAX; f++) {
			if (ok & FB(f))
				continue;
			build(&m, t, req | FB(f));
			snprintf(name, sizeof(name), "bad-%s-with-%s", lower,
			         field_name[f]);
			put_msg(name, &m);
			msg_free(&m);
			break;
		}
	}

	/* edge values: every uint and str width, empty strings, NUL inside code */
	struct msg m;
	static const uint64_t u[] = {
	    0,      0x7f,    0x80,        0xff,           0x100,
	    0xffff, 0x10000, 0xffffffffu, 0x100000000ull, UINT64_MAX};
	for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++) {
		msg_init(&m, MSG_STATE);
		msg_set_u64(&m, F_STATE, u[i]);
		msg_set_u64(&m, F_KPID, u[i]);
		msg_set_u64(&m, F_COUNT, u[i]);
		snprintf(name, sizeof(name), "state-u64-%llx", (unsigned long long)u[i]);
		put_msg(name, &m);
		msg_free(&m);
	}
	static const size_t widths[] = {0, 31, 32, 255, 256, 1000};
	char *big = xmalloc(1001);
	for (size_t i = 0; i < 1000; i++)
		big[i] = "abcdefghij\n\"\\\t"[i % 14];
	for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++) {
		msg_init(&m, MSG_EXECUTE);
		msg_set_u64(&m, F_STREAM, 9);
		msg_set_str(&m, F_CODE, big, widths[i]);
		snprintf(name, sizeof(name), "execute-code-len-%zu", widths[i]);
		put_msg(name, &m);
		msg_free(&m);
	}
	free(big);
	msg_init(&m, MSG_EXECUTE);
	msg_set_u64(&m, F_STREAM, 3);
	msg_set_str(&m, F_CODE, "a\0b", 3);
	m.m_has |= FB(F_ENV); /* an empty env map */
	put_msg("execute-nul-in-code-empty-env", &m);
	msg_free(&m);
	msg_init(&m, MSG_OUTPUT);
	msg_set_u64(&m, F_STREAM, 3);
	msg_set_str(&m, F_DATA, "", 0);
	msg_set_str(&m, F_OUTCOME, "kernel_died", 11);
	msg_set_u64(&m, F_FINAL, 1);
	put_msg("output-final-empty-data", &m);
	msg_free(&m);

	/* hand-made frames: non-canonical widths the decoder accepts, lies it must not */
	static const struct {
		const char *name;
		const char *bytes;
		size_t len;
	} raw[] = {
#define RAW(n, b) {n, b, sizeof(b) - 1}
	    RAW("cancel-uint64-width-stream", "\x92\x02\x81\x00\xcf\0\0\0\0\0\0\0\x05"),
	    RAW("cancel-map16-header", "\x92\x02\xde\x00\x01\x00\x05"),
	    RAW("cancel-map32-header", "\x92\x02\xdf\x00\x00\x00\x01\x00\x05"),
	    RAW("execute-str32-code", "\x92\x01\x82\x00\x01\x02\xdb\0\0\0\x02hi"),
	    RAW("execute-str16-env",
	        "\x92\x01\x83\x00\x01\x02\xa1x\x03\x81\xda\0\x01K\xd9\x01V"),
	    RAW("bad-empty", ""),
	    RAW("bad-array3", "\x93\x02\x81\x00\x05"),
	    RAW("bad-map32-count-lie", "\x92\x02\xdf\xff\xff\xff\xff\x00\x05"),
	    RAW("bad-str32-length-lie", "\x92\x01\x82\x00\x01\x02\xdb\xff\xff\xff\xff"),
	    RAW("bad-env-count-lie",
	        "\x92\x01\x83\x00\x01\x02\xa0\x03\xdf\x00\x01\x00\x00"),
	    RAW("bad-duplicate-field", "\x92\x02\x82\x00\x05\x00\x06"),
	    RAW("bad-signed-int", "\x92\x02\x81\x00\xd0\x05"),
	    RAW("bad-negative-fixint", "\x92\x02\x81\x00\xff"),
	    RAW("bad-field-id-huge",
	        "\x92\x02\x81\xcf\xff\xff\xff\xff\xff\xff\xff\xff\x05"),
	    RAW("bad-type-huge", "\x92\xcf\xff\xff\xff\xff\xff\xff\xff\xff\x80"),
	    RAW("bad-bin-for-str", "\x92\x01\x82\x00\x01\x02\xc4\x02hi"),
	    RAW("bad-nil-value", "\x92\x02\x81\x00\xc0"),
	    RAW("bad-outcome-too-long",
	        "\x92\x08\x83\x00\x01\x06\xa0\x11\xd9\x41"
	        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
#undef RAW
	};
	for (size_t i = 0; i < sizeof(raw) / sizeof(raw[0]); i++)
		put("msg", raw[i].name, raw[i].bytes, raw[i].len);
}

/* ---- http ---- */

static void
append_str(struct buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

static void
seeds_http(void)
{
	static const struct {
		const char *name, *body;
	} bodies[] = {
	    {"minimal", "{\"code\": \"print(1)\"}"},
	    {"full",
	     "{\"code\": \"x = 41\\nx + 1\", \"language\": \" Python \", "
	     "\"env_vars\": {\"A\": \"1\", \"B_2\": \"\", \"_c\": \"it's\\n\\\"q\\\"\"}, "
	     "\"timeout\": 1.5, \"on_disconnect\": \"continue\"}"},
	    {"context-id", "{\"code\": \"1\", \"context_id\": "
	                   "\"0f8fad5b-d9cb-469f-a165-70867728950e\", \"on_disconnect\": "
	                   "\"interrupt\"}"},
	    {"nulls",
	     "{\"code\": \"\", \"context_id\": null, \"language\": null, \"env_vars\": "
	     "null, \"timeout\": null, \"on_disconnect\": null}"},
	    {"unknown-keys",
	     "{\"code\": \"1\", \"extra\": [1, {\"a\": null}], \"x\": true}"},
	    {"bad-both-context-and-language",
	     "{\"code\": \"1\", \"context_id\": \"abc\", \"language\": \"python\"}"},
	    {"bad-lang-js-not-installed", "{\"code\": \"1\", \"language\": \"JS\"}"},
	    {"bad-lang-ts-not-installed", "{\"code\": \"1\", \"language\": \"ts\"}"},
	    {"lang-kernelspec-name", "{\"code\": \"1\", \"language\": \"python3\"}"},
	    {"bad-lang-unknown", "{\"code\": \"1\", \"language\": \"cobol\"}"},
	    {"lang-blank", "{\"code\": \"1\", \"language\": \" \\t\\n\"}"},
	    {"bad-lang-path", "{\"code\": \"1\", \"language\": \"../../etc/passwd\"}"},
	    {"bad-lang-dot", "{\"code\": \"1\", \"language\": \".hidden\"}"},
	    {"bad-lang-65",
	     "{\"code\": \"1\", \"language\": "
	     "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}"},
	    {"bad-lang-number", "{\"code\": \"1\", \"language\": 3}"},
	    {"timeout-max", "{\"code\": \"1\", \"timeout\": 604800}"},
	    {"timeout-tiny", "{\"code\": \"1\", \"timeout\": 1e-9}"},
	    {"bad-timeout-over", "{\"code\": \"1\", \"timeout\": 604800.0001}"},
	    {"bad-timeout-zero", "{\"code\": \"1\", \"timeout\": 0}"},
	    {"bad-timeout-negative", "{\"code\": \"1\", \"timeout\": -1}"},
	    {"bad-timeout-string", "{\"code\": \"1\", \"timeout\": \"5\"}"},
	    {"bad-timeout-bool", "{\"code\": \"1\", \"timeout\": true}"},
	    {"bad-timeout-huge-real",
	     "{\"code\": \"1\", \"timeout\": 1.7976931348623157e308}"},
	    {"bad-timeout-overflow-real", "{\"code\": \"1\", \"timeout\": 1e400}"},
	    {"bad-timeout-huge-int",
	     "{\"code\": \"1\", \"timeout\": 123456789012345678901234567890}"},
	    {"bad-timeout-int64-max",
	     "{\"code\": \"1\", \"timeout\": 9223372036854775807}"},
	    {"bad-timeout-negative-zero", "{\"code\": \"1\", \"timeout\": -0.0}"},
	    {"bad-policy", "{\"code\": \"1\", \"on_disconnect\": \"kill\"}"},
	    {"bad-policy-number", "{\"code\": \"1\", \"on_disconnect\": 1}"},
	    {"bad-code-missing", "{\"language\": \"python\"}"},
	    {"bad-code-number", "{\"code\": 42}"},
	    {"bad-code-null", "{\"code\": null}"},
	    {"code-unicode-escapes",
	     "{\"code\": \"print('\\u00e9\\u4e2d\\ud83d\\ude00 \\\"\\\\ \\/')\"}"},
	    {"code-raw-utf8",
	     "{\"code\": \"print('\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80')\"}"},
	    {"bad-code-nul-escape", "{\"code\": \"a\\u0000b\"}"},
	    {"bad-code-lone-surrogate", "{\"code\": \"\\ud800\"}"},
	    {"bad-code-invalid-utf8", "{\"code\": \"\xff\xfe\"}"},
	    {"bad-code-overlong-utf8", "{\"code\": \"\xc0\xaf\"}"},
	    {"bad-duplicate-key", "{\"code\": \"a\", \"code\": \"b\"}"},
	    {"bad-duplicate-env-key",
	     "{\"code\": \"a\", \"env_vars\": {\"A\": \"1\", \"A\": \"2\"}}"},
	    {"bad-env-array", "{\"code\": \"1\", \"env_vars\": [\"A=1\"]}"},
	    {"bad-env-number-value", "{\"code\": \"1\", \"env_vars\": {\"A\": 1}}"},
	    {"bad-env-null-value", "{\"code\": \"1\", \"env_vars\": {\"A\": null}}"},
	    {"bad-env-key-digit", "{\"code\": \"1\", \"env_vars\": {\"1A\": \"x\"}}"},
	    {"bad-env-key-dash", "{\"code\": \"1\", \"env_vars\": {\"A-B\": \"x\"}}"},
	    {"bad-env-key-empty", "{\"code\": \"1\", \"env_vars\": {\"\": \"x\"}}"},
	    {"bad-env-key-equals", "{\"code\": \"1\", \"env_vars\": {\"A=B\": \"x\"}}"},
	    {"bad-env-key-quote",
	     "{\"code\": \"1\", \"env_vars\": {\"A'); import os; ('\": \"x\"}}"},
	    {"bad-env-key-unicode",
	     "{\"code\": \"1\", \"env_vars\": {\"\\u00c9T\\u00c9\": \"x\"}}"},
	    {"bad-env-key-nul",
	     "{\"code\": \"1\", \"env_vars\": {\"A\\u0000B\": \"x\"}}"},
	    {"bad-env-value-nul",
	     "{\"code\": \"1\", \"env_vars\": {\"A\": \"x\\u0000y\"}}"},
	    {"env-value-unicode",
	     "{\"code\": \"1\", \"env_vars\": {\"A\": \"\\ud83d\\ude00 $'x' "
	     "`id` \\\\x00\"}}"},
	    {"bad-array-top", "[{\"code\": \"1\"}]"},
	    {"bad-string-top", "\"code\""},
	    {"bad-empty", ""},
	    {"bad-whitespace", " \r\n\t"},
	    {"bad-trailing-garbage", "{\"code\": \"1\"} x"},
	    {"bad-two-objects", "{\"code\": \"1\"}{\"code\": \"2\"}"},
	    {"bad-bom", "\xef\xbb\xbf{\"code\": \"1\"}"},
	    {"bad-unterminated", "{\"code\": \"1"},
	    {"bad-single-quotes", "{'code': '1'}"},
	    {"bad-comment", "{\"code\": \"1\" /* c */}"},
	    {"bad-nan", "{\"code\": \"1\", \"timeout\": NaN}"},
	    /* a name, NUL, then a body */
	    {"split-lang", "Python\0{\"code\": \"1\", \"language\": \"python\"}"},
	    {"split-uuid", "0f8fad5b-d9cb-469f-a165-70867728950e\0{\"code\": \"1\"}"},
	    {"split-uuid-upper",
	     "0F8FAD5B-D9CB-469F-A165-70867728950E\0{\"code\": \"\"}"},
	    {"split-env-key",
	     "MY_VAR_2\0{\"code\": \"1\", \"env_vars\": {\"MY_VAR_2\": \"v\"}}"},
	    {"split-js", " js \0{\"code\": \"1\"}"},
	    {"split-lang-dot", "c++.x_y-z\0{\"code\": \"1\"}"},
	};
	char name[128];

	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		const char *b = bodies[i].body;
		size_t len = strlen(b);
		if (!strncmp(bodies[i].name, "split-", 6))
			len += 1 + strlen(b + len + 1); /* the part after the NUL */
		put("http", bodies[i].name, b, len);
	}

	/* generated ones: nesting at jansson's depth limit and past it, long keys */
	struct buf b = {0};
	for (int depth = 2047; depth <= 2049; depth += 2) {
		b.b_off = b.b_len = 0;
		append_str(&b, "{\"code\": \"1\", \"extra\": ");
		for (int i = 0; i < depth; i++)
			append_str(&b, "[");
		for (int i = 0; i < depth; i++)
			append_str(&b, "]");
		append_str(&b, "}");
		snprintf(name, sizeof(name), "%snesting-%d", depth > 2048 ? "bad-" : "",
		         depth);
		put("http", name, buf_head(&b), buf_pending(&b));
	}
	for (size_t klen = PROTO_MAX_ENVKEY; klen <= PROTO_MAX_ENVKEY + 1; klen++) {
		b.b_off = b.b_len = 0;
		append_str(&b, "{\"code\": \"1\", \"env_vars\": {\"");
		for (size_t i = 0; i < klen; i++)
			buf_append(&b, i % 2 ? "K" : "_", 1);
		append_str(&b, "\": \"v\"}}");
		snprintf(name, sizeof(name), "%senv-key-%zu",
		         klen > PROTO_MAX_ENVKEY ? "bad-" : "", klen);
		put("http", name, buf_head(&b), buf_pending(&b));
	}
	b.b_off = b.b_len = 0;
	append_str(&b, "{\"code\": \"1\", \"env_vars\": {");
	for (int i = 0; i < 200; i++) {
		char kv[32];
		int n =
		    snprintf(kv, sizeof(kv), "%s\"V%d\": \"%d\"", i ? ", " : "", i, i);
		buf_append(&b, kv, n);
	}
	append_str(&b, "}}");
	put("http", "env-200-entries", buf_head(&b), buf_pending(&b));
	buf_free(&b);
}

/* ---- wire ---- */

/* Appends one frame: 2-byte big-endian length, then the bytes (fuzz_wire_split). */
static void
frame(struct buf *b, const void *p, size_t len)
{
	uint8_t hdr[2] = {len >> 8, len & 0xff};

	if (len > 0xffff)
		fatal("seed frame too long");
	buf_append(b, hdr, 2);
	buf_append(b, p, len);
}

static void
frame_str(struct buf *b, const char *s)
{
	frame(b, s, strlen(s));
}

/*
 * One kernel message: identity frames (ids: strings each ended by a NUL, the
 * list by an empty one), the delimiter, the signature under key
 * (or sig verbatim when given) and header/parent/metadata/content.
 */
static void
put_wire(const char *name, const char *ids, const char *key, const char *sig,
         const char *type, const char *content)
{
	char hdr[512], hex[65];
	const char *parent = "{\"msg_id\": \"a1b2c3d4-0000-4000-8000-000000000001\", "
	                     "\"msg_type\": \"execute_request\"}";
	struct wire_frame parts[4];
	struct buf b = {0};

	snprintf(hdr, sizeof(hdr),
	         "{\"msg_id\": \"k-%s\", \"session\": \"s-1\", \"username\": \"kernel\", "
	         "\"date\": \"2026-01-02T03:04:05.678901Z\", \"msg_type\": \"%s\", "
	         "\"version\": \"5.3\"}",
	         name, type);
	parts[0] = (struct wire_frame){hdr, strlen(hdr)};
	parts[1] = (struct wire_frame){parent, strlen(parent)};
	parts[2] = (struct wire_frame){"{}", 2};
	parts[3] = (struct wire_frame){content, strlen(content)};
	if (ids)
		for (const char *p = ids; *p; p += strlen(p) + 1)
			frame_str(&b, p);
	frame_str(&b, "<IDS|MSG>");
	if (sig) {
		frame_str(&b, sig);
	} else {
		wire_sign(key, parts, hex);
		frame(&b, hex, 64);
	}
	for (int i = 0; i < 4; i++)
		frame(&b, parts[i].wf_data, parts[i].wf_len);
	put("wire", name, buf_head(&b), buf_pending(&b));
	buf_free(&b);
}

/* A message with its four parts given verbatim (for broken headers). */
static void
put_wire_parts(const char *name, const char *hdr, const char *parent, const char *meta,
               const char *content)
{
	struct wire_frame parts[4] = {{hdr, strlen(hdr)},
	                              {parent, strlen(parent)},
	                              {meta, strlen(meta)},
	                              {content, strlen(content)}};
	struct buf b = {0};
	char hex[65];

	frame_str(&b, "<IDS|MSG>");
	wire_sign(FUZZ_KEY, parts, hex);
	frame(&b, hex, 64);
	for (int i = 0; i < 4; i++)
		frame(&b, parts[i].wf_data, parts[i].wf_len);
	put("wire", name, buf_head(&b), buf_pending(&b));
	buf_free(&b);
}

static void
seeds_wire(void)
{
	static const char topic[] = "kernel.6f1c.status\0"; /* one identity frame */
	static const struct {
		const char *name, *type, *content;
	} ok[] = {
	    {"status-busy", "status", "{\"execution_state\": \"busy\"}"},
	    {"status-idle", "status", "{\"execution_state\": \"idle\"}"},
	    {"stream-stdout", "stream", "{\"name\": \"stdout\", \"text\": \"0\\n1\\n\"}"},
	    {"stream-stderr", "stream",
	     "{\"name\": \"stderr\", \"text\": \"\\u001b[31mwarn\\u001b[0m "
	     "\\u00e9\\n\"}"},
	    {"stream-empty", "stream", "{\"name\": \"stdout\", \"text\": \"\"}"},
	    {"execute-input", "execute_input",
	     "{\"code\": \"6*7\", \"execution_count\": 3}"},
	    {"execute-result-plain", "execute_result",
	     "{\"execution_count\": 3, \"data\": {\"text/plain\": \"42\"}, \"metadata\": "
	     "{}}"},
	    {"execute-result-quoted-ansi", "execute_result",
	     "{\"execution_count\": 4, \"data\": {\"text/plain\": "
	     "\"'\\u001b[32mhello\\u001b[39m'\"}, \"metadata\": {}}"},
	    {"execute-result-bundle", "execute_result",
	     "{\"execution_count\": 5, \"data\": {\"text/plain\": \"<Figure>\", "
	     "\"text/html\": \"<b>x</b>\", \"text/markdown\": \"**x**\", "
	     "\"image/svg+xml\": \"<svg/>\", \"image/png\": \"iVBORw0KGgo=\", "
	     "\"image/jpeg\": \"/9j/4AAQ\", \"application/pdf\": \"JVBERi0=\", "
	     "\"text/latex\": \"$x^2$\", \"application/json\": {\"a\": [1, 2.5, null]}, "
	     "\"application/javascript\": \"alert(1)\", \"e2b/data\": {\"k\": 1}, "
	     "\"e2b/chart\": {\"type\": \"line\"}, "
	     "\"application/vnd.custom+json\": {\"x\": 1}, \"text/csv\": \"a,b\\n1,2\"}, "
	     "\"metadata\": {\"image/png\": {\"width\": 10}}}"},
	    {"execute-result-plain-not-string", "execute_result",
	     "{\"execution_count\": 6, \"data\": {\"text/plain\": [\"a\", 1]}}"},
	    {"display-data", "display_data",
	     "{\"data\": {\"text/plain\": \"[1] 2\", \"image/png\": \"iVBORw0KGgo=\"}, "
	     "\"metadata\": {}, \"transient\": {}}"},
	    {"display-data-no-plain", "display_data",
	     "{\"data\": {\"text/html\": \"<i>y</i>\"}, \"metadata\": {}}"},
	    {"error", "error",
	     "{\"ename\": \"ZeroDivisionError\", \"evalue\": \"division by zero\", "
	     "\"traceback\": [\"\\u001b[0;31m---\\u001b[0m\", \"Traceback (most recent "
	     "call "
	     "last)\", 7, \"ZeroDivisionError: division by zero\"]}"},
	    {"error-no-fields", "error", "{}"},
	    {"error-traceback-not-array", "error",
	     "{\"ename\": \"E\", \"evalue\": \"v\", \"traceback\": \"tb\"}"},
	    {"execute-reply-ok", "execute_reply",
	     "{\"status\": \"ok\", \"execution_count\": 3, \"user_expressions\": {}}"},
	    {"execute-reply-error", "execute_reply",
	     "{\"status\": \"error\", \"ename\": \"NameError\", \"evalue\": \"x\", "
	     "\"traceback\": []}"},
	    {"kernel-info-reply", "kernel_info_reply",
	     "{\"status\": \"ok\", \"protocol_version\": \"5.3\", \"implementation\": "
	     "\"ipython\", \"language_info\": {\"name\": \"python\"}}"},
	    {"comm-open", "comm_open",
	     "{\"comm_id\": \"c1\", \"target_name\": \"t\", \"data\": {}}"},
	    {"clear-output", "clear_output", "{\"wait\": true}"},
	    {"stream-text-number", "stream", "{\"name\": \"stdout\", \"text\": 5}"},
	    {"stream-no-name", "stream", "{\"text\": \"x\"}"},
	    {"result-data-array", "execute_result", "{\"data\": [\"text/plain\"]}"},
	    {"input-count-string", "execute_input", "{\"execution_count\": \"3\"}"},
	    {"input-count-real", "execute_input", "{\"execution_count\": 3.0}"},
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		put_wire(ok[i].name, topic, FUZZ_KEY, NULL, ok[i].type, ok[i].content);
	/* identity frames: none, several (routers), and an empty one */
	put_wire("status-no-identity", NULL, FUZZ_KEY, NULL, "status",
	         "{\"execution_state\": \"starting\"}");
	put_wire("stream-two-identities", "id-0\0kernel.x.stream\0", FUZZ_KEY, NULL,
	         "stream", "{\"name\": \"stdout\", \"text\": \"z\"}");
	/* signature defects */
	put_wire("bad-sig-other-key", topic, "another-key", NULL, "status",
	         "{\"execution_state\": \"idle\"}");
	put_wire("bad-sig-empty", topic, FUZZ_KEY, "", "status",
	         "{\"execution_state\": \"idle\"}");
	put_wire("bad-sig-63", topic, FUZZ_KEY,
	         "457ce78f815cc1da93a2287b740fbc9f19c2328bb50208bc911e29199becb47",
	         "status", "{\"execution_state\": \"idle\"}");
	put_wire("bad-sig-uppercase", topic, FUZZ_KEY,
	         "457CE78F815CC1DA93A2287B740FBC9F19C2328BB50208BC911E29199BECB47B",
	         "status", "{\"execution_state\": \"idle\"}");
	/* header and part defects (validly signed) */
	static const char P[] = "{\"msg_id\": \"p-1\"}";
	put_wire_parts("bad-header-no-type", "{\"msg_id\": \"h\"}", P, "{}", "{}");
	put_wire_parts("bad-header-type-number", "{\"msg_type\": 1}", P, "{}", "{}");
	put_wire_parts("bad-header-array", "[\"msg_type\"]", P, "{}", "{}");
	put_wire_parts("bad-content-not-json", "{\"msg_type\": \"stream\"}", P, "{}",
	               "{\"name\":");
	put_wire_parts("stream-nul-escape", "{\"msg_type\": \"stream\"}", P, "{}",
	               "{\"name\": \"stdout\", \"text\": \"a\\u0000b\"}");
	put_wire_parts(
	    "result-nul-escape", "{\"msg_type\": \"execute_result\"}", P, "{}",
	    "{\"data\": {\"text/plain\": \"'a\\u0000b'\", \"x/y\": \"\\u0000\"}}");
	put_wire_parts("error-nul-escape", "{\"msg_type\": \"error\"}", P, "{}",
	               "{\"ename\": \"E\\u0000F\", \"evalue\": \"\\u0000\", "
	               "\"traceback\": [\"a\\u0000b\", \"\\u0000\"]}");
	put_wire_parts("type-nul-escape", "{\"msg_type\": \"stream\\u0000x\"}", P, "{}",
	               "{\"name\": \"stdout\", \"text\": \"t\"}");
	put_wire_parts("bad-content-invalid-utf8", "{\"msg_type\": \"stream\"}", P, "{}",
	               "{\"name\": \"stdout\", \"text\": \"\xff\"}");
	put_wire_parts("bad-meta-empty", "{\"msg_type\": \"status\"}", P, "", "{}");
	put_wire_parts("parent-empty", "{\"msg_type\": \"status\"}", "{}", "{}",
	               "{\"execution_state\": \"idle\"}");
	put_wire_parts("parent-id-number", "{\"msg_type\": \"status\"}",
	               "{\"msg_id\": 5}", "{}", "{\"execution_state\": \"idle\"}");
	/* framing defects */
	struct buf b = {0};
	frame_str(&b, "kernel.x.status");
	frame_str(&b, "{\"msg_type\": \"status\"}");
	put("wire", "bad-no-delimiter", buf_head(&b), buf_pending(&b));
	b.b_off = b.b_len = 0;
	frame_str(&b, "<IDS|MSG>");
	frame_str(&b, "0000000000000000000000000000000000000000000000000000000000000000");
	frame_str(&b, "{\"msg_type\": \"status\"}");
	frame_str(&b, "{}");
	frame_str(&b, "{}");
	put("wire", "bad-five-frames", buf_head(&b), buf_pending(&b));
	b.b_off = b.b_len = 0;
	frame_str(&b, "<IDS|MSG");
	put("wire", "bad-delimiter-short", buf_head(&b), buf_pending(&b));
	put("wire", "bad-empty", "", 0);
	put("wire", "bad-length-over", "\x00\x09<IDS|MSG>\xff\xff{}", 15);
	buf_free(&b);
}

/* ---- zmtp ---- */

/* A ZMTP frame: flags, a one- or eight-byte size, the body. */
static void
zframe(struct buf *b, unsigned flags, const void *p, size_t len, bool long_size)
{
	uint8_t h[9];
	size_t hl = 0;

	if (long_size || len > 255) {
		h[hl++] = flags | 2;
		for (int i = 7; i >= 0; i--)
			h[hl++] = (uint64_t)len >> (8 * i);
	} else {
		h[hl++] = flags;
		h[hl++] = len;
	}
	buf_append(b, h, hl);
	buf_append(b, p, len);
}

/* The piece size and socket type byte, a greeting and the kernel's READY. */
static void
zstart(struct buf *b, uint8_t lead, uint8_t minor, const char *mech, const char *type)
{
	uint8_t g[64] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, minor};
	char ready[64];
	int n = snprintf(ready, sizeof(ready), "%cREADY%cSocket-Type%c%c%c%c%s", 5, 11, 0, 0, 0,
	                 (int)strlen(type), type);

	buf_append(b, &lead, 1);
	memcpy(g + 12, mech, strlen(mech));
	buf_append(b, g, sizeof(g));
	zframe(b, 4, ready, n, false);
}

/* A signed status message as frames, with a topic first when given. */
static void
zstatus(struct buf *b, const char *topic, bool long_content)
{
	const char *parts[4] = {"{\"msg_id\": \"z-1\", \"msg_type\": \"status\"}",
	                        "{\"msg_id\": \"p-1\"}", "{}",
	                        "{\"execution_state\": \"idle\"}"};
	struct wire_frame wf[4];
	char hex[65];

	for (int i = 0; i < 4; i++)
		wf[i] = (struct wire_frame){parts[i], strlen(parts[i])};
	wire_sign(FUZZ_KEY, wf, hex);
	if (topic)
		zframe(b, 1, topic, strlen(topic), false);
	zframe(b, 1, "<IDS|MSG>", 9, false);
	zframe(b, 1, hex, 64, false);
	for (int i = 0; i < 4; i++)
		zframe(b, i < 3, parts[i], strlen(parts[i]), long_content && i == 3);
}

static void
seeds_zmtp(void)
{
	struct buf b = {0};

#define ZPUT(name) (put("zmtp", name, buf_head(&b), buf_pending(&b)), b.b_off = b.b_len = 0)
	zstart(&b, 0x3f, 1, "NULL", "ROUTER");
	zstatus(&b, NULL, false);
	ZPUT("dealer-status-whole");
	zstart(&b, 0x00, 1, "NULL", "ROUTER");
	zstatus(&b, NULL, true);
	zstatus(&b, NULL, false);
	ZPUT("dealer-two-a-byte-at-a-time");
	zstart(&b, 0x40 | 6, 1, "NULL", "PUB");
	zstatus(&b, "kernel.1.status", true);
	ZPUT("sub-topic-long-frame");
	zstart(&b, 0x80 | 3, 1, "NULL", "REP");
	zframe(&b, 1, "", 0, false);
	zframe(&b, 0, "ping", 4, false);
	ZPUT("req-pong");
	zstart(&b, 0x3f, 1, "NULL", "ROUTER");
	zframe(&b, 4, "\4PING\0\0\0\0", 9, false);
	zstatus(&b, NULL, false);
	ZPUT("ping-command-between-messages");
	zstart(&b, 0x3f, 0, "NULL", "ROUTER");
	for (int i = 0; i < 70; i++)
		zframe(&b, 1, "x", 1, false);
	zframe(&b, 0, "x", 1, false);
	zstatus(&b, NULL, false);
	ZPUT("too-many-frames-then-status");
	zstart(&b, 0x3f, 1, "NULL", "ROUTER");
	buf_append(&b, "\x02\x00\x00\x01\x00\x00\x00\x00\x00" "abc", 12); /* 2^40 bytes */
	ZPUT("bad-frame-of-a-terabyte-cut-short");
	zstart(&b, 0x3f, 1, "PLAIN", "ROUTER");
	zstatus(&b, NULL, false);
	ZPUT("bad-mechanism-plain");
	zstart(&b, 0x3f, 1, "NULL", "ROUTER");
	((uint8_t *)buf_head(&b))[1 + 10] = 2;
	zstatus(&b, NULL, false);
	ZPUT("bad-zmtp-2");
	zstart(&b, 0x3f, 1, "NULL", "ROUTER");
	b.b_len = 65; /* greeting only, then a message where READY belongs */
	zstatus(&b, NULL, false);
	ZPUT("bad-message-before-ready");
	zstart(&b, 0x3f, 1, "NULL", "ROUTER");
	buf_append(&b, "\x10\x01x", 3);
	zstatus(&b, NULL, false);
	ZPUT("bad-reserved-flag");
	buf_append(&b, "\x3fGET / HTTP/1.1\r\nHost: x\r\n\r\n", 28);
	ZPUT("bad-not-zmtp");
#undef ZPUT
	buf_free(&b);
}

int
main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	out_dir = argv[1];
	if (fuzz_http_init() < 0)
		fatal("kernelspec dir: %s", strerror(errno));
	seeds_msg();
	seeds_http();
	seeds_wire();
	seeds_zmtp();
	printf("seeds: %d files under %s\n", nfiles, out_dir);
	return 0;
}
