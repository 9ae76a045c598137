/*
 * proto_test.c — the IPC codec. Every message type survives a round trip with
 * all its fields; frames built by msgpack-c's own packer decode; every
 * malformed frame is rejected with its exact code, quickly, without a large
 * allocation and without crashing, whatever bytes arrive.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strcasestr, strptime, timegm, memmem when built without the       \
                       Makefile flags */
#endif
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <msgpack.h>
#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>

#include "../../proto/proto.h"

/* ---- the schema as the tests expect it (mirrors the table in proto.c) ---- */

enum kind { K_U64, K_STR, K_ENV };

static const struct {
	enum kind kind;
	size_t off, max;
} fld[F_FIELD_MAX] = {
    [F_STREAM] = {K_U64, offsetof(struct msg, m_stream), 0},
    [F_REQ] = {K_U64, offsetof(struct msg, m_req), 0},
    [F_CODE] = {K_STR, offsetof(struct msg, m_code), PROTO_MAX_BIG},
    [F_ENV] = {K_ENV, 0, PROTO_MAX_ENV},
    [F_TIMEOUT] = {K_U64, offsetof(struct msg, m_timeout), 0},
    [F_POLICY] = {K_U64, offsetof(struct msg, m_policy), 0},
    [F_DATA] = {K_STR, offsetof(struct msg, m_data), PROTO_MAX_BIG},
    [F_FINAL] = {K_U64, offsetof(struct msg, m_final), 0},
    [F_TEXT] = {K_STR, offsetof(struct msg, m_text), PROTO_MAX_TEXT},
    [F_ID] = {K_STR, offsetof(struct msg, m_id), PROTO_MAX_NAME},
    [F_LANG] = {K_STR, offsetof(struct msg, m_lang), PROTO_MAX_NAME},
    [F_CWD] = {K_STR, offsetof(struct msg, m_cwd), PROTO_MAX_NAME},
    [F_PID] = {K_U64, offsetof(struct msg, m_pid), 0},
    [F_KPID] = {K_U64, offsetof(struct msg, m_kpid), 0},
    [F_STATE] = {K_U64, offsetof(struct msg, m_state), 0},
    [F_QUEUE] = {K_U64, offsetof(struct msg, m_queue), 0},
    [F_COUNT] = {K_U64, offsetof(struct msg, m_count), 0},
    [F_OUTCOME] = {K_STR, offsetof(struct msg, m_outcome), 64},
    [F_WAIT] = {K_U64, offsetof(struct msg, m_wait), 0},
    [F_RUN] = {K_U64, offsetof(struct msg, m_run), 0},
    [F_FLAGS] = {K_U64, offsetof(struct msg, m_flags), 0},
    [F_REFUSED] = {K_U64, offsetof(struct msg, m_refused), 0},
};

#define KSTAT (FB(F_STATE) | FB(F_KPID) | FB(F_QUEUE) | FB(F_COUNT))

static const struct {
	enum msg_type t;
	const char *name;
	uint32_t req, opt;
} types[] = {
    {MSG_EXECUTE, "EXECUTE", FB(F_STREAM) | FB(F_CODE),
     FB(F_ENV) | FB(F_TIMEOUT) | FB(F_POLICY)},
    {MSG_CANCEL, "CANCEL", FB(F_STREAM), 0},
    {MSG_INTERRUPT, "INTERRUPT", FB(F_REQ), 0},
    {MSG_RESTART, "RESTART", FB(F_REQ), 0},
    {MSG_SHUTDOWN, "SHUTDOWN", FB(F_REQ), 0},
    {MSG_INFO, "INFO", FB(F_REQ), 0},
    {MSG_HELLO, "HELLO", FB(F_ID) | FB(F_LANG) | FB(F_CWD) | FB(F_PID) | FB(F_STATE),
     KSTAT | FB(F_TEXT)},
    {MSG_OUTPUT, "OUTPUT", FB(F_STREAM) | FB(F_DATA),
     FB(F_FINAL) | FB(F_OUTCOME) | FB(F_WAIT) | FB(F_RUN)},
    {MSG_STATE, "STATE", FB(F_STATE), KSTAT | FB(F_TEXT)},
    {MSG_OK, "OK", FB(F_REQ), FB(F_TEXT) | FB(F_DATA) | KSTAT | FB(F_PID)},
    {MSG_FAIL, "FAIL", FB(F_REQ) | FB(F_TEXT), 0},
    {MSG_END, "END", FB(F_REQ), 0},
    {CTL_STATUS, "CTL_STATUS", FB(F_REQ), 0},
    {CTL_CONTEXTS, "CTL_CONTEXTS", FB(F_REQ), 0},
    {CTL_EXECUTIONS, "CTL_EXECUTIONS", FB(F_REQ), 0},
    {CTL_CANCEL, "CTL_CANCEL", FB(F_REQ) | FB(F_STREAM), 0},
    {CTL_INTERRUPT, "CTL_INTERRUPT", FB(F_REQ) | FB(F_ID), 0},
    {CTL_RESTART, "CTL_RESTART", FB(F_REQ) | FB(F_ID), 0},
    {CTL_CREATE, "CTL_CREATE", FB(F_REQ) | FB(F_LANG), FB(F_CWD)},
    {CTL_DELETE, "CTL_DELETE", FB(F_REQ) | FB(F_ID), 0},
    {CTL_DRAIN, "CTL_DRAIN", FB(F_REQ), 0},
    {CTL_UNDRAIN, "CTL_UNDRAIN", FB(F_REQ), 0},
    {CTL_WATCH, "CTL_WATCH", FB(F_REQ), 0},
    {CTL_RUN, "CTL_RUN", FB(F_REQ) | FB(F_ID) | FB(F_CODE), 0},
    {MSG_CLAIM, "CLAIM", FB(F_REQ) | FB(F_ID) | FB(F_CWD), FB(F_FLAGS)},
    {CTL_STOP_ENDS, "CTL_STOP_ENDS", FB(F_REQ), 0},
    {CTL_STOP_KEEPS, "CTL_STOP_KEEPS", FB(F_REQ), 0},
    {MSG_STATS, "STATS", FB(F_COUNT), FB(F_REFUSED)},
    {CTL_ACK, "CTL_ACK", FB(F_COUNT), 0},
};
#define NTYPES (sizeof(types) / sizeof(types[0]))

static const int all_errors[] = {PROTO_ETRUNC, PROTO_ETYPE,    PROTO_EMISSING,
                                 PROTO_ESIZE,  PROTO_EUNKNOWN, PROTO_EDUP,
                                 PROTO_ETRAIL, PROTO_ENOMEM};
#define NERR (sizeof(all_errors) / sizeof(all_errors[0]))

/* ---- helpers ---- */

static uint64_t *
u64_at(struct msg *m, int f)
{
	return (uint64_t *)((char *)m + fld[f].off);
}

static struct pstr *
str_at(struct msg *m, int f)
{
	return (struct pstr *)((char *)m + fld[f].off);
}

/* Decodes from an exactly-sized heap copy, so a sanitizer sees any over-read. */
static int
decode_exact(const void *b, size_t n, struct msg *m)
{
	void *copy = malloc(n ? n : 1);
	int e;

	cr_assert_not_null(copy);
	if (n)
		memcpy(copy, b, n);
	e = msg_decode(copy, n, m);
	free(copy);
	return e;
}

static bool
is_proto_error(int e)
{
	for (size_t i = 0; i < sizeof(all_errors) / sizeof(all_errors[0]); i++)
		if (e == all_errors[i])
			return true;
	return false;
}

/* A rejected frame leaves nothing behind in the msg. */
static void
assert_left_empty(const struct msg *m, const char *what)
{
	cr_assert_eq(m->m_type, MSG_NONE, "%s: m_type left as %d", what, m->m_type);
	cr_assert_eq(m->m_has, 0u, "%s: m_has left as %#x", what, m->m_has);
	cr_assert_null(m->m_env, "%s: env left allocated", what);
	cr_assert_null(m->m_code.s, "%s: code left allocated", what);
	cr_assert_null(m->m_text.s, "%s: text left allocated", what);
}

static void
assert_msgs_equal(const struct msg *a, const struct msg *b, const char *what)
{
	cr_assert_eq(a->m_type, b->m_type, "%s: type %d != %d", what, a->m_type,
	             b->m_type);
	cr_assert_eq(a->m_has, b->m_has, "%s: fields %#x != %#x", what, a->m_has,
	             b->m_has);
	for (int f = 0; f < F_FIELD_MAX; f++) {
		if (!(a->m_has & FB(f)))
			continue;
		switch (fld[f].kind) {
		case K_U64:
			cr_assert_eq(*u64_at((struct msg *)a, f),
			             *u64_at((struct msg *)b, f),
			             "%s: field %d: %llu != %llu", what, f,
			             (unsigned long long)*u64_at((struct msg *)a, f),
			             (unsigned long long)*u64_at((struct msg *)b, f));
			break;
		case K_STR: {
			const struct pstr *x = str_at((struct msg *)a, f);
			const struct pstr *y = str_at((struct msg *)b, f);
			cr_assert_eq(x->len, y->len, "%s: field %d: length %zu != %zu",
			             what, f, x->len, y->len);
			cr_assert(x->len == 0 || !memcmp(x->s, y->s, x->len),
			          "%s: field %d: bytes differ", what, f);
			cr_assert_eq(y->s[y->len], '\0',
			             "%s: field %d: not NUL-terminated", what, f);
			break;
		}
		case K_ENV:
			cr_assert_eq(a->m_nenv, b->m_nenv, "%s: env count %zu != %zu",
			             what, a->m_nenv, b->m_nenv);
			for (size_t i = 0; i < a->m_nenv; i++) {
				cr_assert_str_eq(a->m_env[i].e_key.s, b->m_env[i].e_key.s,
				                 "%s: env key %zu", what, i);
				cr_assert_eq(a->m_env[i].e_key.len,
				             b->m_env[i].e_key.len);
				cr_assert_str_eq(a->m_env[i].e_val.s, b->m_env[i].e_val.s,
				                 "%s: env value %zu (key %s)", what, i,
				                 a->m_env[i].e_key.s);
				cr_assert_eq(a->m_env[i].e_val.len,
				             b->m_env[i].e_val.len);
			}
			break;
		}
	}
}

/* Encodes m, decodes it back, compares; also checks re-encoding is byte-identical. */
static void
assert_round_trip(const struct msg *m, const char *what)
{
	void *buf, *buf2;
	size_t len, len2;
	struct msg d;
	int e;

	cr_assert_eq(msg_encode(m, &buf, &len), 0, "%s: encode failed", what);
	e = decode_exact(buf, len, &d);
	cr_assert_eq(e, 0, "%s: decode failed: %s", what, proto_strerror(e));
	assert_msgs_equal(m, &d, what);
	cr_assert_eq(msg_encode(&d, &buf2, &len2), 0);
	cr_assert_eq(len, len2, "%s: re-encoding changed the length", what);
	cr_assert(!memcmp(buf, buf2, len), "%s: re-encoding changed the bytes", what);
	free(buf);
	free(buf2);
	msg_free(&d);
}

static char *
filled(size_t n, char c)
{
	char *s = malloc(n + 1);

	cr_assert_not_null(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

enum variant { V_EMPTY, V_MIXED, V_MAX };
static const char *variant_name[] = {"empty", "mixed", "max"};

/* Code with quotes, backslashes, tabs, UTF-8 and an embedded NUL. */
static const char code_mixed[] = "print(\"h\xc3\xa9llo \xe2\x98\x83\")\n"
                                 "# 'single' \"double\" \\ \t\r\n\0after-nul";

static const char *env_mixed[][2] = {
    {"PLAIN", "value"},
    {"EMPTY", ""},
    {"UNICODE",
     "h\xc3\xa9llo w\xc3\xb6rld \xe2\x98\x83 \xf0\x9d\x84\x9e \xe6\x97\xa5\xe6\x9c\xac"},
    {"QUOTES", "it's \"quoted\" `back` \\ {\"json\": [1]}"},
    {"NEWLINES", "line1\nline2\r\nline3\n"},
    {"_UNDER_9", "=;&|$(x) %s %n"},
};

static const uint64_t u64_mixed[] = {0x7f,           0x80,    0xff,       0x100,
                                     0xffff,         0x10000, 0xffffffff, 0x100000000ull,
                                     UINT64_MAX - 1, 1,       0,          UINT64_MAX};

/* Sets every field in mask on m, with values chosen by the variant. */
static void
fill(struct msg *m, enum msg_type t, uint32_t mask, enum variant v)
{
	msg_init(m, t);
	for (int f = 0; f < F_FIELD_MAX; f++) {
		if (!(mask & FB(f)))
			continue;
		switch (fld[f].kind) {
		case K_U64:
			msg_set_u64(m, f,
			            v == V_EMPTY ? 0
			            : v == V_MAX ? UINT64_MAX
			                         : u64_mixed[f % 12]);
			break;
		case K_STR:
			if (v == V_EMPTY) {
				msg_set_str(m, f, "", 0);
			} else if (v == V_MIXED) {
				if (f == F_CODE)
					msg_set_str(m, f, code_mixed,
					            sizeof(code_mixed) - 1);
				else {
					char s[128];
					int n = snprintf(
					    s, sizeof(s),
					    "field %d: '\xc3\xa9' \"q\"\n\t\\ end", f);
					msg_set_str(m, f, s, n);
				}
			} else {
				/* names and text at their limit; code and data at 1 MiB
				 */
				size_t n =
				    fld[f].max < (1u << 20) ? fld[f].max : 1u << 20;
				char *s = filled(n, 'a' + f);
				msg_set_str(m, f, s, n);
				free(s);
			}
			break;
		case K_ENV:
			if (v == V_EMPTY) {
				msg_add_env(m, "", "");
			} else if (v == V_MIXED) {
				for (size_t i = 0;
				     i < sizeof(env_mixed) / sizeof(env_mixed[0]); i++)
					msg_add_env(m, env_mixed[i][0], env_mixed[i][1]);
			} else {
				char *k = filled(PROTO_MAX_ENVKEY, 'K');
				char *val = filled(PROTO_MAX_ENVVAL, 'v');
				msg_add_env(m, k, val);
				msg_add_env(m, "SECOND", val);
				free(k);
				free(val);
			}
			break;
		}
	}
}

static void
encode_full(enum msg_type t, enum variant v, void **buf, size_t *len)
{
	struct msg m;

	for (size_t i = 0; i < NTYPES; i++)
		if (types[i].t == t)
			fill(&m, t, types[i].req | types[i].opt, v);
	cr_assert_eq(msg_encode(&m, buf, len), 0);
	msg_free(&m);
}

/* Lowers the address-space limit to what the process maps now plus headroom,
 * so a decoder that trusted a declared size would fail to allocate instead of
 * silently succeeding. Skipped under ASan, which needs its huge shadow map. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#endif

static void
limit_address_space(size_t headroom)
{
#ifndef UNDER_ASAN
	struct rlimit rl;
	long pages = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	cr_assert_not_null(f);
	cr_assert_eq(fscanf(f, "%ld", &pages), 1);
	fclose(f);
	cr_assert_eq(getrlimit(RLIMIT_AS, &rl), 0);
	rl.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + headroom;
	cr_assert_eq(setrlimit(RLIMIT_AS, &rl), 0);
#else
	(void)headroom;
#endif
}

/* ---- the schema itself ---- */

Test(proto_schema, every_type_has_its_name_and_out_of_range_types_print_as_question_mark)
{
	for (size_t i = 0; i < NTYPES; i++)
		cr_assert_str_eq(msg_type_name(types[i].t), types[i].name);
	cr_assert_str_eq(msg_type_name(MSG_NONE), "?");
	cr_assert_str_eq(msg_type_name(MSG_TYPE_MAX), "?");
	cr_assert_str_eq(msg_type_name((enum msg_type) - 1), "?");
	cr_assert_eq(NTYPES, (size_t)MSG_TYPE_MAX - 1,
	             "the test table misses a message type");
}

Test(proto_schema, every_error_code_has_its_own_message)
{
	size_t n = sizeof(all_errors) / sizeof(all_errors[0]);

	cr_assert_str_eq(proto_strerror(PROTO_OK), "ok");
	cr_assert_str_eq(proto_strerror(-99), "unknown error");
	for (size_t i = 0; i < n; i++) {
		cr_assert_str_neq(proto_strerror(all_errors[i]), "unknown error");
		for (size_t j = 0; j < i; j++)
			cr_assert_str_neq(proto_strerror(all_errors[i]),
			                  proto_strerror(all_errors[j]));
	}
}

/* ---- round trips ---- */

Test(proto_round_trip, every_type_round_trips_with_all_allowed_fields)
{
	for (size_t i = 0; i < NTYPES; i++)
		for (int v = V_EMPTY; v <= V_MAX; v++) {
			char what[64];
			struct msg m;
			snprintf(what, sizeof(what), "%s/%s", types[i].name,
			         variant_name[v]);
			fill(&m, types[i].t, types[i].req | types[i].opt, v);
			assert_round_trip(&m, what);
			msg_free(&m);
		}
}

Test(proto_round_trip, every_type_round_trips_with_only_its_required_fields)
{
	for (size_t i = 0; i < NTYPES; i++) {
		struct msg m;
		fill(&m, types[i].t, types[i].req, V_MIXED);
		assert_round_trip(&m, types[i].name);
		msg_free(&m);
	}
}

Test(proto_round_trip, env_keeps_unicode_quotes_newlines_empty_values_and_order)
{
	struct msg m, d;
	void *buf;
	size_t len;
	size_t n = sizeof(env_mixed) / sizeof(env_mixed[0]);

	fill(&m, MSG_EXECUTE, FB(F_STREAM) | FB(F_CODE) | FB(F_ENV), V_MIXED);
	cr_assert_eq(msg_encode(&m, &buf, &len), 0);
	cr_assert_eq(decode_exact(buf, len, &d), 0);
	cr_assert_eq(d.m_nenv, n);
	for (size_t i = 0; i < n; i++) {
		cr_assert_str_eq(d.m_env[i].e_key.s, env_mixed[i][0]);
		cr_assert_str_eq(d.m_env[i].e_val.s, env_mixed[i][1]);
		cr_assert_eq(d.m_env[i].e_val.len, strlen(env_mixed[i][1]));
	}
	free(buf);
	msg_free(&m);
	msg_free(&d);
}

Test(proto_round_trip, code_keeps_an_embedded_nul_and_its_length)
{
	struct msg m, d;
	void *buf;
	size_t len;

	fill(&m, MSG_EXECUTE, FB(F_STREAM) | FB(F_CODE), V_MIXED);
	cr_assert_eq(msg_encode(&m, &buf, &len), 0);
	cr_assert_eq(decode_exact(buf, len, &d), 0);
	cr_assert_eq(d.m_code.len, sizeof(code_mixed) - 1);
	cr_assert(!memcmp(d.m_code.s, code_mixed, sizeof(code_mixed) - 1));
	cr_assert_str_eq(d.m_code.s + strlen(d.m_code.s) + 1, "after-nul");
	free(buf);
	msg_free(&m);
	msg_free(&d);
}

Test(proto_round_trip, strings_round_trip_across_every_msgpack_str_width)
{
	/* fixstr, str8, str16 and str32 boundaries */
	static const size_t lens[] = {0,   1,     31,    32,    255,
	                              256, 65535, 65536, 65537, 1u << 20};

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		char what[64];
		char *s = filled(lens[i], 'x');
		struct msg m;
		msg_init(&m, MSG_OUTPUT);
		msg_set_u64(&m, F_STREAM, 7);
		msg_set_str(&m, F_DATA, s, lens[i]);
		snprintf(what, sizeof(what), "data of %zu bytes", lens[i]);
		assert_round_trip(&m, what);
		msg_free(&m);
		free(s);
	}
}

Test(proto_round_trip, u64_values_round_trip_across_every_msgpack_uint_width)
{
	for (size_t i = 0; i < sizeof(u64_mixed) / sizeof(u64_mixed[0]); i++) {
		char what[64];
		struct msg m;
		msg_init(&m, MSG_CANCEL);
		msg_set_u64(&m, F_STREAM, u64_mixed[i]);
		snprintf(what, sizeof(what), "stream %llu",
		         (unsigned long long)u64_mixed[i]);
		assert_round_trip(&m, what);
		msg_free(&m);
	}
}

Test(proto_round_trip, env_of_exactly_max_entries_round_trips)
{
	struct msg m;
	char k[32];

	msg_init(&m, MSG_EXECUTE);
	msg_set_u64(&m, F_STREAM, 1);
	msg_set_str(&m, F_CODE, "x", 1);
	for (unsigned i = 0; i < PROTO_MAX_ENV; i++) {
		snprintf(k, sizeof(k), "K%u", i);
		msg_add_env(&m, k, i % 2 ? "" : k);
	}
	assert_round_trip(&m, "1024 env entries");
	msg_free(&m);
}

Test(proto_round_trip, code_of_exactly_proto_max_big_round_trips)
{
	char *s = filled(PROTO_MAX_BIG, 'c');
	struct msg m;

	msg_init(&m, MSG_EXECUTE);
	msg_set_u64(&m, F_STREAM, 1);
	msg_set_str(&m, F_CODE, s, PROTO_MAX_BIG);
	free(s);
	assert_round_trip(&m, "64 MiB code");
	msg_free(&m);
}

Test(proto_round_trip, setting_a_string_twice_keeps_the_last_value)
{
	struct msg m, d;
	void *buf;
	size_t len;

	msg_init(&m, MSG_FAIL);
	msg_set_u64(&m, F_REQ, 3);
	msg_set_str(&m, F_TEXT, "first", 5);
	msg_set_str(&m, F_TEXT, "second", 6);
	cr_assert_eq(msg_encode(&m, &buf, &len), 0);
	cr_assert_eq(decode_exact(buf, len, &d), 0);
	cr_assert_str_eq(d.m_text.s, "second");
	free(buf);
	msg_free(&m);
	msg_free(&d);
}

/* ---- what msgpack-c produces, and what it reads of ours ---- */

static void
pk_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str_with_body(pk, s, strlen(s));
}

Test(proto_msgpack_c, decodes_any_uint_width_and_signed_packers_from_msgpack_c)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct msg m;
	char cwd[41];

	memset(cwd, 'd', 40);
	cwd[40] = '\0';
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_int(&pk, MSG_HELLO); /* signed packer, positive value */
	msgpack_pack_map(&pk, 9);
	msgpack_pack_fix_uint8(&pk, F_ID);
	pk_str(&pk, "ctx");
	msgpack_pack_fix_uint16(&pk, F_LANG);
	msgpack_pack_v4raw(&pk, 6); /* old-spec raw: fixstr */
	msgpack_pack_v4raw_body(&pk, "python", 6);
	msgpack_pack_fix_uint32(&pk, F_CWD);
	msgpack_pack_v4raw(&pk, 40); /* old-spec raw: str16 for 40 bytes */
	msgpack_pack_v4raw_body(&pk, cwd, 40);
	msgpack_pack_fix_uint64(&pk, F_PID);
	msgpack_pack_fix_uint64(&pk, 5);
	msgpack_pack_int64(&pk, F_STATE);
	msgpack_pack_int8(&pk, KS_IDLE);
	msgpack_pack_long_long(&pk, F_KPID);
	msgpack_pack_unsigned_long_long(&pk, UINT64_MAX);
	msgpack_pack_uint16(&pk, F_QUEUE);
	msgpack_pack_fix_uint16(&pk, 65535);
	msgpack_pack_unsigned_int(&pk, F_COUNT);
	msgpack_pack_fix_uint32(&pk, 0);
	msgpack_pack_uint8(&pk, F_TEXT);
	msgpack_pack_str(&pk, 3); /* str8 or fixstr: the packer's choice */
	msgpack_pack_str_body(&pk, "a\nb", 3);

	cr_assert_eq(decode_exact(sb.data, sb.size, &m), 0);
	cr_assert_eq(m.m_type, MSG_HELLO);
	cr_assert_str_eq(m.m_id.s, "ctx");
	cr_assert_str_eq(m.m_lang.s, "python");
	cr_assert_str_eq(m.m_cwd.s, cwd);
	cr_assert_eq(m.m_pid, 5);
	cr_assert_eq(m.m_state, KS_IDLE);
	cr_assert_eq(m.m_kpid, UINT64_MAX);
	cr_assert_eq(m.m_queue, 65535);
	cr_assert_eq(m.m_count, 0);
	cr_assert_str_eq(m.m_text.s, "a\nb");
	msg_free(&m);
	msgpack_sbuffer_destroy(&sb);
}

Test(proto_msgpack_c, decodes_an_env_map_packed_by_msgpack_c_with_str8_values)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct msg m;
	char val[201];

	memset(val, 'v', 200);
	val[200] = '\0';
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_uint32(&pk, MSG_EXECUTE);
	msgpack_pack_map(&pk, 3);
	msgpack_pack_uint32(&pk, F_STREAM);
	msgpack_pack_uint64(&pk, 300);
	msgpack_pack_uint32(&pk, F_CODE);
	pk_str(&pk, "1+1");
	msgpack_pack_uint32(&pk, F_ENV);
	msgpack_pack_map(&pk, 2);
	pk_str(&pk, "A");
	pk_str(&pk, val);
	pk_str(&pk, "B");
	pk_str(&pk, "\xe2\x98\x83");

	cr_assert_eq(decode_exact(sb.data, sb.size, &m), 0);
	cr_assert_eq(m.m_stream, 300);
	cr_assert_str_eq(m.m_code.s, "1+1");
	cr_assert_eq(m.m_nenv, 2);
	cr_assert_str_eq(m.m_env[0].e_val.s, val);
	cr_assert_str_eq(m.m_env[1].e_val.s, "\xe2\x98\x83");
	msg_free(&m);
	msgpack_sbuffer_destroy(&sb);
}

Test(proto_msgpack_c, decodes_map16_and_map32_headers_holding_few_entries)
{
	static const uint8_t map16[] = {0x92, MSG_CANCEL, 0xde, 0x00,
	                                0x01, F_STREAM,   0x05};
	static const uint8_t map32[] = {0x92, MSG_CANCEL, 0xdf,     0x00, 0x00,
	                                0x00, 0x01,       F_STREAM, 0x06};
	static const uint8_t str32[] = {0x92, MSG_FAIL, 0x82, F_REQ, 0x01, F_TEXT, 0xdb,
	                                0x00, 0x00,     0x00, 0x02,  'o',  'k'};
	struct msg m;

	cr_assert_eq(decode_exact(map16, sizeof(map16), &m), 0);
	cr_assert_eq(m.m_stream, 5);
	msg_free(&m);
	cr_assert_eq(decode_exact(map32, sizeof(map32), &m), 0);
	cr_assert_eq(m.m_stream, 6);
	msg_free(&m);
	cr_assert_eq(decode_exact(str32, sizeof(str32), &m), 0);
	cr_assert_str_eq(m.m_text.s, "ok");
	msg_free(&m);
}

Test(proto_msgpack_c, our_frames_are_standard_msgpack_for_msgpack_c_unpacker)
{
	msgpack_unpacked u;
	size_t off = 0, len;
	void *buf;

	encode_full(MSG_EXECUTE, V_MIXED, &buf, &len);
	msgpack_unpacked_init(&u);
	cr_assert_eq(msgpack_unpack_next(&u, buf, len, &off), MSGPACK_UNPACK_SUCCESS);
	cr_assert_eq(off, len, "one frame is exactly one msgpack object");
	msgpack_object o = u.data;
	cr_assert_eq(o.type, MSGPACK_OBJECT_ARRAY);
	cr_assert_eq(o.via.array.size, 2);
	cr_assert_eq(o.via.array.ptr[0].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
	cr_assert_eq(o.via.array.ptr[0].via.u64, MSG_EXECUTE);
	msgpack_object map = o.via.array.ptr[1];
	cr_assert_eq(map.type, MSGPACK_OBJECT_MAP);
	cr_assert_eq(map.via.map.size, 5, "stream, code, env, timeout, policy");
	uint64_t prev = 0;
	for (uint32_t i = 0; i < map.via.map.size; i++) {
		msgpack_object_kv *kv = &map.via.map.ptr[i];
		cr_assert_eq(kv->key.type, MSGPACK_OBJECT_POSITIVE_INTEGER);
		cr_assert(i == 0 || kv->key.via.u64 > prev,
		          "fields are written in id order");
		prev = kv->key.via.u64;
		if (kv->key.via.u64 == F_CODE) {
			cr_assert_eq(kv->val.type, MSGPACK_OBJECT_STR);
			cr_assert_eq(kv->val.via.str.size, sizeof(code_mixed) - 1);
		}
		if (kv->key.via.u64 == F_ENV) {
			cr_assert_eq(kv->val.type, MSGPACK_OBJECT_MAP);
			cr_assert_eq(kv->val.via.map.size,
			             sizeof(env_mixed) / sizeof(env_mixed[0]));
		}
	}
	msgpack_unpacked_destroy(&u);
	free(buf);
}

/* ---- rejections ---- */

struct reject {
	const char *name;
	const uint8_t *b;
	size_t n;
	int want;
};
#define BYTES(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})
#define CANCEL_OK 0x92, MSG_CANCEL, 0x81, F_STREAM, 0x05
#define EXEC_HEAD 0x92, MSG_EXECUTE, 0x83, F_STREAM, 0x01, F_CODE, 0xa0, F_ENV

static const struct reject rejects[] = {
    /* the frame header */
    {"top level is a 3-array", BYTES(0x93, MSG_CANCEL, 0x81, F_STREAM, 0x05, 0xc0),
     PROTO_ETYPE},
    {"top level is a 1-array", BYTES(0x91, MSG_CANCEL), PROTO_ETYPE},
    {"top level is an empty array", BYTES(0x90), PROTO_ETYPE},
    {"top level is a map", BYTES(0x81, MSG_CANCEL, 0x80), PROTO_ETYPE},
    {"top level is a uint", BYTES(0x05), PROTO_ETYPE},
    {"top level is nil", BYTES(0xc0), PROTO_ETYPE},
    {"top level is a string", BYTES(0xa2, 'h', 'i'), PROTO_ETYPE},
    /* the type */
    {"type is a string", BYTES(0x92, 0xa1, '2', 0x81, F_STREAM, 0x05), PROTO_ETYPE},
    {"type is negative", BYTES(0x92, 0xff, 0x80), PROTO_ETYPE},
    {"type is nil", BYTES(0x92, 0xc0, 0x80), PROTO_ETYPE},
    {"type is a float", BYTES(0x92, 0xca, 0x40, 0x00, 0x00, 0x00, 0x80), PROTO_ETYPE},
    {"type is bin", BYTES(0x92, 0xc4, 0x01, 0x02, 0x80), PROTO_ETYPE},
    {"type is MSG_NONE", BYTES(0x92, MSG_NONE, 0x80), PROTO_EUNKNOWN},
    {"type is MSG_TYPE_MAX", BYTES(0x92, MSG_TYPE_MAX, 0x80), PROTO_EUNKNOWN},
    {"type is 255", BYTES(0x92, 0xcc, 0xff, 0x80), PROTO_EUNKNOWN},
    {"type is 2^32 + CANCEL (no 32-bit truncation)",
     BYTES(0x92, 0xcf, 0, 0, 0, 1, 0, 0, 0, MSG_CANCEL, 0x81, F_STREAM, 0x05),
     PROTO_EUNKNOWN},
    /* the field map */
    {"fields are an array", BYTES(0x92, MSG_CANCEL, 0x92, F_STREAM, 0x05), PROTO_ETYPE},
    {"fields are nil", BYTES(0x92, MSG_CANCEL, 0xc0), PROTO_ETYPE},
    {"fields are missing", BYTES(0x92, MSG_CANCEL), PROTO_ETRUNC},
    {"field id is a string", BYTES(0x92, MSG_CANCEL, 0x81, 0xa1, '0', 0x05), PROTO_ETYPE},
    {"field id is negative", BYTES(0x92, MSG_CANCEL, 0x81, 0xff, 0x05), PROTO_ETYPE},
    {"field id is F_FIELD_MAX", BYTES(0x92, MSG_CANCEL, 0x81, F_FIELD_MAX, 0x05),
     PROTO_EUNKNOWN},
    {"field id is 32", BYTES(0x92, MSG_CANCEL, 0x81, 0x20, 0x05), PROTO_EUNKNOWN},
    {"field id is 2^32 (no 32-bit truncation)",
     BYTES(0x92, MSG_CANCEL, 0x81, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0, 0x05), PROTO_EUNKNOWN},
    {"CANCEL with a code field",
     BYTES(0x92, MSG_CANCEL, 0x82, F_STREAM, 0x05, F_CODE, 0xa1, 'x'), PROTO_EUNKNOWN},
    {"duplicate stream", BYTES(0x92, MSG_CANCEL, 0x82, F_STREAM, 0x05, F_STREAM, 0x06),
     PROTO_EDUP},
    {"duplicate text",
     BYTES(0x92, MSG_FAIL, 0x83, F_REQ, 1, F_TEXT, 0xa1, 'a', F_TEXT, 0xa1, 'b'),
     PROTO_EDUP},
    /* value types */
    {"string where uint expected", BYTES(0x92, MSG_CANCEL, 0x81, F_STREAM, 0xa1, '5'),
     PROTO_ETYPE},
    {"uint where string expected", BYTES(0x92, MSG_FAIL, 0x82, F_REQ, 1, F_TEXT, 0x05),
     PROTO_ETYPE},
    {"bin where string expected",
     BYTES(0x92, MSG_FAIL, 0x82, F_REQ, 1, F_TEXT, 0xc4, 0x01, 'x'), PROTO_ETYPE},
    {"ext where string expected",
     BYTES(0x92, MSG_FAIL, 0x82, F_REQ, 1, F_TEXT, 0xd4, 0x01, 'x'), PROTO_ETYPE},
    {"nil value", BYTES(0x92, MSG_CANCEL, 0x81, F_STREAM, 0xc0), PROTO_ETYPE},
    {"true value", BYTES(0x92, MSG_CANCEL, 0x81, F_STREAM, 0xc3), PROTO_ETYPE},
    {"negative fixint value", BYTES(0x92, MSG_CANCEL, 0x81, F_STREAM, 0xe0), PROTO_ETYPE},
    {"int8 value", BYTES(0x92, MSG_CANCEL, 0x81, F_STREAM, 0xd0, 0x05), PROTO_ETYPE},
    {"float64 value",
     BYTES(0x92, MSG_CANCEL, 0x81, F_STREAM, 0xcb, 0x40, 0x14, 0, 0, 0, 0, 0, 0),
     PROTO_ETYPE},
    {"array value", BYTES(0x92, MSG_CANCEL, 0x81, F_STREAM, 0x91, 0x05), PROTO_ETYPE},
    {"env is a string", BYTES(EXEC_HEAD, 0xa1, 'x'), PROTO_ETYPE},
    {"env is an array", BYTES(EXEC_HEAD, 0x90), PROTO_ETYPE},
    {"env key is a uint", BYTES(EXEC_HEAD, 0x81, 0x01, 0xa0), PROTO_ETYPE},
    {"env key is bin", BYTES(EXEC_HEAD, 0x81, 0xc4, 0x01, 'K', 0xa0), PROTO_ETYPE},
    {"env value is bin", BYTES(EXEC_HEAD, 0x81, 0xa1, 'K', 0xc4, 0x00), PROTO_ETYPE},
    {"env value is nil", BYTES(EXEC_HEAD, 0x81, 0xa1, 'K', 0xc0), PROTO_ETYPE},
    /* required fields */
    {"CANCEL without stream", BYTES(0x92, MSG_CANCEL, 0x80), PROTO_EMISSING},
    {"FAIL without text", BYTES(0x92, MSG_FAIL, 0x81, F_REQ, 0x01), PROTO_EMISSING},
    {"FAIL without req", BYTES(0x92, MSG_FAIL, 0x81, F_TEXT, 0xa0), PROTO_EMISSING},
    {"EXECUTE without code", BYTES(0x92, MSG_EXECUTE, 0x81, F_STREAM, 0x01),
     PROTO_EMISSING},
    {"OUTPUT without data", BYTES(0x92, MSG_OUTPUT, 0x82, F_STREAM, 1, F_FINAL, 1),
     PROTO_EMISSING},
    /* trailing bytes */
    {"trailing nil", BYTES(CANCEL_OK, 0xc0), PROTO_ETRAIL},
    {"trailing zero byte", BYTES(CANCEL_OK, 0x00), PROTO_ETRAIL},
    {"two frames back to back", BYTES(CANCEL_OK, CANCEL_OK), PROTO_ETRAIL},
    /* truncation */
    {"only the array header", BYTES(0x92), PROTO_ETRUNC},
    {"uint16 type cut short", BYTES(0x92, 0xcd, 0x00), PROTO_ETRUNC},
    {"uint64 stream cut short", BYTES(0x92, MSG_CANCEL, 0x81, F_STREAM, 0xcf, 0, 0, 0),
     PROTO_ETRUNC},
    {"str8 length byte missing", BYTES(0x92, MSG_FAIL, 0x82, F_REQ, 1, F_TEXT, 0xd9),
     PROTO_ETRUNC},
    {"fixstr body cut short",
     BYTES(0x92, MSG_FAIL, 0x82, F_REQ, 1, F_TEXT, 0xa3, 'a', 'b'), PROTO_ETRUNC},
    {"fixmap claims 15 entries, holds 1", BYTES(0x92, MSG_CANCEL, 0x8f, F_STREAM, 0x05),
     PROTO_ETRUNC},
    {"map16 claims 65535 entries",
     BYTES(0x92, MSG_CANCEL, 0xde, 0xff, 0xff, F_STREAM, 0x05), PROTO_ETRUNC},
    {"map32 claims 2^32-1 entries in a 10-byte frame",
     BYTES(0x92, MSG_CANCEL, 0xdf, 0xff, 0xff, 0xff, 0xff, F_STREAM, 0x05, 0x00),
     PROTO_ETRUNC},
    {"env map32 claims 2^32-1 entries",
     BYTES(EXEC_HEAD, 0xdf, 0xff, 0xff, 0xff, 0xff, 0xa0, 0xa0), PROTO_ETRUNC},
    {"env map16 claims 1025 entries, holds 1",
     BYTES(EXEC_HEAD, 0xde, 0x04, 0x01, 0xa0, 0xa0), PROTO_ETRUNC},
    {"str32 code declares exactly PROTO_MAX_BIG, holds 3 bytes",
     BYTES(0x92, MSG_EXECUTE, 0x82, F_STREAM, 1, F_CODE, 0xdb, 0x04, 0x00, 0x00, 0x00,
           'a', 'b', 'c'),
     PROTO_ETRUNC},
    /* sizes over their limits, declared but not present */
    {"str32 code declares PROTO_MAX_BIG + 1",
     BYTES(0x92, MSG_EXECUTE, 0x82, F_STREAM, 1, F_CODE, 0xdb, 0x04, 0x00, 0x00, 0x01,
           'a', 'b', 'c'),
     PROTO_ESIZE},
    {"str32 code declares 2^32-1",
     BYTES(0x92, MSG_EXECUTE, 0x82, F_STREAM, 1, F_CODE, 0xdb, 0xff, 0xff, 0xff, 0xff,
           'a'),
     PROTO_ESIZE},
    {"str32 data declares PROTO_MAX_BIG + 1",
     BYTES(0x92, MSG_OUTPUT, 0x82, F_STREAM, 1, F_DATA, 0xdb, 0x04, 0x00, 0x00, 0x01,
           'a'),
     PROTO_ESIZE},
    {"text declares PROTO_MAX_TEXT + 1",
     BYTES(0x92, MSG_FAIL, 0x82, F_REQ, 1, F_TEXT, 0xdb, 0x00, 0x01, 0x00, 0x01, 'a'),
     PROTO_ESIZE},
    {"id declares PROTO_MAX_NAME + 1",
     BYTES(0x92, MSG_HELLO, 0x81, F_ID, 0xda, 0x10, 0x01, 'a'), PROTO_ESIZE},
    {"lang declares PROTO_MAX_NAME + 1",
     BYTES(0x92, MSG_HELLO, 0x81, F_LANG, 0xda, 0x10, 0x01, 'a'), PROTO_ESIZE},
    {"cwd declares PROTO_MAX_NAME + 1",
     BYTES(0x92, MSG_HELLO, 0x81, F_CWD, 0xda, 0x10, 0x01, 'a'), PROTO_ESIZE},
    {"env key declares PROTO_MAX_ENVKEY + 1",
     BYTES(EXEC_HEAD, 0x81, 0xda, 0x04, 0x01, 'K', 0xa0), PROTO_ESIZE},
    {"env value declares PROTO_MAX_ENVVAL + 1",
     BYTES(EXEC_HEAD, 0x81, 0xa1, 'K', 0xdb, 0x00, 0x02, 0x00, 0x01, 'v'), PROTO_ESIZE},
};

Test(proto_reject, every_malformed_frame_gets_its_exact_error_and_leaves_the_msg_empty)
{
	for (size_t i = 0; i < sizeof(rejects) / sizeof(rejects[0]); i++) {
		struct msg m;
		int e = decode_exact(rejects[i].b, rejects[i].n, &m);
		cr_expect_eq(e, rejects[i].want, "%s: got %d (%s), want %d (%s)",
		             rejects[i].name, e, proto_strerror(e), rejects[i].want,
		             proto_strerror(rejects[i].want));
		assert_left_empty(&m, rejects[i].name);
	}
}

Test(proto_reject, an_empty_frame_is_truncated)
{
	struct msg m;

	cr_assert_eq(msg_decode("", 0, &m), PROTO_ETRUNC);
	assert_left_empty(&m, "empty frame");
}

Test(proto_reject, every_field_outside_a_types_schema_is_unknown)
{
	for (size_t i = 0; i < NTYPES; i++) {
		uint32_t allowed = types[i].req | types[i].opt;
		for (int f = 0; f < F_FIELD_MAX; f++) {
			if (allowed & FB(f))
				continue;
			/* every required field, then the stray one */
			struct msg m, d;
			void *buf;
			size_t len;
			char what[64];
			fill(&m, types[i].t, types[i].req | FB(f), V_MIXED);
			cr_assert_eq(msg_encode(&m, &buf, &len), 0);
			snprintf(what, sizeof(what), "%s with field %d", types[i].name,
			         f);
			cr_expect_eq(decode_exact(buf, len, &d), PROTO_EUNKNOWN, "%s",
			             what);
			assert_left_empty(&d, what);
			free(buf);
			msg_free(&m);
		}
	}
}

Test(proto_reject, every_required_field_left_out_is_missing)
{
	for (size_t i = 0; i < NTYPES; i++)
		for (int f = 0; f < F_FIELD_MAX; f++) {
			if (!(types[i].req & FB(f)))
				continue;
			struct msg m, d;
			void *buf;
			size_t len;
			char what[64];
			fill(&m, types[i].t, (types[i].req | types[i].opt) & ~FB(f),
			     V_MIXED);
			cr_assert_eq(msg_encode(&m, &buf, &len), 0);
			snprintf(what, sizeof(what), "%s without field %d", types[i].name,
			         f);
			cr_expect_eq(decode_exact(buf, len, &d), PROTO_EMISSING, "%s",
			             what);
			assert_left_empty(&d, what);
			free(buf);
			msg_free(&m);
		}
}

Test(proto_reject, every_string_field_takes_its_limit_and_rejects_one_byte_more)
{
	static const struct {
		enum msg_type t;
		int f;
	} cases[] = {
	    {MSG_FAIL, F_TEXT},
	    {MSG_HELLO, F_ID},
	    {MSG_HELLO, F_LANG},
	    {MSG_HELLO, F_CWD},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t max = fld[cases[i].f].max;
		for (size_t n = max; n <= max + 1; n++) {
			struct msg m, d;
			void *buf;
			size_t len;
			char *s = filled(n, 's');
			fill(&m, cases[i].t, types[cases[i].t - 1].req, V_EMPTY);
			msg_set_str(&m, cases[i].f, s, n);
			cr_assert_eq(msg_encode(&m, &buf, &len), 0);
			int e = decode_exact(buf, len, &d);
			cr_expect_eq(e, n == max ? 0 : PROTO_ESIZE,
			             "field %d with %zu bytes: %s", cases[i].f, n,
			             proto_strerror(e));
			msg_free(&d);
			msg_free(&m);
			free(buf);
			free(s);
		}
	}
}

Test(proto_reject, env_key_and_value_take_their_limit_and_reject_one_byte_more)
{
	static const struct {
		size_t klen, vlen;
		int want;
	} cases[] = {
	    {PROTO_MAX_ENVKEY, 1, 0},
	    {PROTO_MAX_ENVKEY + 1, 1, PROTO_ESIZE},
	    {1, PROTO_MAX_ENVVAL, 0},
	    {1, PROTO_MAX_ENVVAL + 1, PROTO_ESIZE},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct msg m, d;
		void *buf;
		size_t len;
		char *k = filled(cases[i].klen, 'K'), *v = filled(cases[i].vlen, 'v');
		msg_init(&m, MSG_EXECUTE);
		msg_set_u64(&m, F_STREAM, 1);
		msg_set_str(&m, F_CODE, "", 0);
		msg_add_env(&m, k, v);
		cr_assert_eq(msg_encode(&m, &buf, &len), 0);
		cr_expect_eq(decode_exact(buf, len, &d), cases[i].want,
		             "key %zu, value %zu bytes", cases[i].klen, cases[i].vlen);
		msg_free(&d);
		msg_free(&m);
		free(buf);
		free(k);
		free(v);
	}
}

Test(proto_reject, env_over_max_entries_is_over_size)
{
	struct msg m, d;
	void *buf;
	size_t len;
	char k[32];

	msg_init(&m, MSG_EXECUTE);
	msg_set_u64(&m, F_STREAM, 1);
	msg_set_str(&m, F_CODE, "x", 1);
	for (unsigned i = 0; i < PROTO_MAX_ENV + 1; i++) {
		snprintf(k, sizeof(k), "K%u", i);
		msg_add_env(&m, k, "");
	}
	cr_assert_eq(msg_encode(&m, &buf, &len), 0);
	cr_assert_eq(decode_exact(buf, len, &d), PROTO_ESIZE);
	assert_left_empty(&d, "1025 env entries");
	free(buf);
	msg_free(&m);
}

Test(proto_reject, a_frame_over_proto_max_frame_is_over_size_before_any_byte_is_read)
{
	size_t n = (size_t)PROTO_MAX_FRAME + 1;
	uint8_t *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
	                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	struct msg m;

	cr_assert_neq(p, MAP_FAILED);
	memcpy(p, (const uint8_t[]){CANCEL_OK}, 5);
	cr_assert_eq(msg_decode(p, n, &m), PROTO_ESIZE);
	assert_left_empty(&m, "80 MiB + 1 frame");
	munmap(p, n);
}

Test(proto_reject, lying_size_headers_fail_fast_without_a_large_allocation)
{
	static const char *lies[] = {
	    "map32 claims 2^32-1 entries in a 10-byte frame",
	    "env map32 claims 2^32-1 entries",
	    "str32 code declares exactly PROTO_MAX_BIG, holds 3 bytes",
	    "str32 code declares PROTO_MAX_BIG + 1",
	    "str32 code declares 2^32-1",
	    "str32 data declares PROTO_MAX_BIG + 1",
	    "map16 claims 65535 entries",
	};

	/* 16 MiB of headroom: far below what believing any of these would take */
	limit_address_space(16u << 20);
#ifndef UNDER_ASAN
	void *probe = malloc(PROTO_MAX_BIG);
	cr_assert_null(probe, "the address-space guard does not hold");
#endif
	for (size_t l = 0; l < sizeof(lies) / sizeof(lies[0]); l++) {
		const struct reject *r = NULL;
		for (size_t i = 0; i < sizeof(rejects) / sizeof(rejects[0]); i++)
			if (!strcmp(rejects[i].name, lies[l]))
				r = &rejects[i];
		cr_assert_not_null(r, "no case named %s", lies[l]);
		struct msg m;
		uint64_t t0 = now_us();
		int e = msg_decode(r->b, r->n, &m);
		uint64_t dt = now_us() - t0;
		cr_expect(e == PROTO_ETRUNC || e == PROTO_ESIZE, "%s: got %s", r->name,
		          proto_strerror(e));
		cr_expect_eq(e, r->want, "%s", r->name);
		cr_expect_lt(dt, 50000, "%s: took %llu us", r->name,
		             (unsigned long long)dt);
	}
}

/* ---- robustness ---- */

Test(proto_robust, every_prefix_of_every_valid_frame_is_truncated)
{
	for (size_t i = 0; i < NTYPES; i++)
		for (int v = V_EMPTY; v <= V_MIXED; v++) {
			void *buf;
			size_t len;
			encode_full(types[i].t, v, &buf, &len);
			for (size_t n = 0; n < len; n++) {
				struct msg m;
				int e = decode_exact(buf, n, &m);
				cr_assert_eq(e, PROTO_ETRUNC,
				             "%s/%s: prefix %zu of %zu: got %s",
				             types[i].name, variant_name[v], n, len,
				             proto_strerror(e));
				assert_left_empty(&m, "prefix");
			}
			free(buf);
		}
}

/* A decode that succeeds yields a message the schema allows, which re-encodes. */
static void
assert_sane(int e, struct msg *m, const char *what)
{
	if (e != 0) {
		cr_assert(is_proto_error(e), "%s: unexpected return %d", what, e);
		cr_assert_neq(e, PROTO_ENOMEM, "%s: out of memory on a small frame",
		              what);
		assert_left_empty(m, what);
		return;
	}
	size_t i;
	for (i = 0; i < NTYPES && types[i].t != m->m_type; i++)
		;
	cr_assert_lt(i, NTYPES, "%s: decoded an unknown type %d", what, m->m_type);
	cr_assert_eq(m->m_has & types[i].req, types[i].req, "%s: required field missing",
	             what);
	cr_assert_eq(m->m_has & ~(types[i].req | types[i].opt), 0u, "%s: stray field",
	             what);
	assert_round_trip(m, what);
	msg_free(m);
}

Test(proto_robust, every_single_byte_change_of_valid_frames_is_handled)
{
	static const enum msg_type which[] = {MSG_EXECUTE, MSG_HELLO, MSG_OK, MSG_OUTPUT};

	for (size_t w = 0; w < sizeof(which) / sizeof(which[0]); w++) {
		void *buf;
		size_t len;
		encode_full(which[w], V_MIXED, &buf, &len);
		uint8_t *copy = malloc(len);
		for (size_t pos = 0; pos < len; pos++)
			for (int val = 0; val < 256; val++) {
				struct msg m;
				char what[64];
				memcpy(copy, buf, len);
				copy[pos] = (uint8_t)val;
				snprintf(what, sizeof(what), "%s byte %zu = %#x",
				         msg_type_name(which[w]), pos, val);
				assert_sane(msg_decode(copy, len, &m), &m, what);
			}
		free(copy);
		free(buf);
	}
}

static uint64_t
xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Appends one random value: often of a kind some field wants, sometimes junk. */
static void
random_value(uint64_t *seed, uint8_t *b, size_t *n, size_t cap)
{
	static const uint8_t junk[] = {0xc0, 0xc3, 0xc4, 0xcc, 0xcd, 0xce,
	                               0xcf, 0xd9, 0xda, 0xdb, 0xde, 0xdf,
	                               0xff, 0x92, 0x90, 0xe0, 0xd0, 0xcb};
	uint64_t r = xorshift(seed);

	if (*n + 16 > cap)
		return;
	switch (r % 6) {
	case 0: /* a positive fixint */
		b[(*n)++] = (r >> 8) & 0x7f;
		break;
	case 1: /* a short fixstr */
		b[(*n)++] = 0xa0 | ((r >> 8) % 5);
		for (unsigned i = 0; i < (r >> 8) % 5; i++)
			b[(*n)++] = 'a' + i;
		break;
	case 2: /* a one-entry env map */
		b[(*n)++] = 0x81;
		b[(*n)++] = 0xa1;
		b[(*n)++] = 'K';
		b[(*n)++] = 0xa0;
		break;
	case 3: /* a str32 header declaring a random length */
		b[(*n)++] = 0xdb;
		for (int i = 0; i < 4; i++)
			b[(*n)++] = (uint8_t)(r >> (16 + 8 * i));
		break;
	default: /* junk */
		b[(*n)++] = junk[(r >> 8) % sizeof(junk)];
		break;
	}
}

Test(proto_robust, ten_thousand_random_buffers_never_crash)
{
	uint64_t seed = 0x5eedc0ffee123457ull;
	int ok = 0, seen[NERR] = {0};

	for (int i = 0; i < 10000; i++) {
		size_t cap = 512, len = 0;
		uint8_t *b = malloc(cap);
		if (i % 2 == 0) {
			/* plain random bytes */
			len = xorshift(&seed) % (i % 10 == 0 ? cap : 48);
			for (size_t j = 0; j < len; j++)
				b[j] = (uint8_t)xorshift(&seed);
		} else if (i % 4 == 1) {
			/* a plausible frame: header, small map, random fields and values
			 */
			unsigned nf = xorshift(&seed) % 6;
			b[len++] = 0x92;
			b[len++] = xorshift(&seed) % (MSG_TYPE_MAX + 1);
			b[len++] = 0x80 | nf;
			for (unsigned f = 0; f < nf; f++) {
				b[len++] = xorshift(&seed) % (F_FIELD_MAX + 1);
				random_value(&seed, b, &len, cap);
			}
			if (xorshift(&seed) % 8 == 0)
				b[len++] = (uint8_t)xorshift(&seed);
			if (xorshift(&seed) % 8 == 0 && len)
				len -= 1 + xorshift(&seed) % len;
		} else {
			/* a valid frame of a random type, then up to three random bytes
			 * changed */
			void *enc;
			size_t i_t = xorshift(&seed) % NTYPES;
			struct msg v;
			fill(&v, types[i_t].t,
			     types[i_t].req | (types[i_t].opt & xorshift(&seed)),
			     xorshift(&seed) % 2 ? V_EMPTY : V_MIXED);
			cr_assert_eq(msg_encode(&v, &enc, &len), 0);
			msg_free(&v);
			cr_assert_leq(len, cap);
			memcpy(b, enc, len);
			free(enc);
			for (uint64_t k = xorshift(&seed) % 4; k > 0; k--)
				b[xorshift(&seed) % len] = (uint8_t)xorshift(&seed);
		}
		/* exact-size copy, so an over-read lands outside the allocation */
		uint8_t *exact = malloc(len ? len : 1);
		memcpy(exact, b, len);
		free(b);
		struct msg m;
		char what[32];
		snprintf(what, sizeof(what), "random buffer %d", i);
		int e = msg_decode(exact, len, &m);
		ok += e == 0;
		for (size_t k = 0; k < NERR; k++)
			seen[k] += e == all_errors[k];
		assert_sane(e, &m, what);
		free(exact);
	}
	cr_log_info("%d of 10000 random buffers decoded", ok);
	cr_assert_gt(ok, 0, "the generator never reached a valid frame");
	/* every rejection path but out-of-memory was exercised */
	for (size_t k = 0; k < NERR; k++)
		if (all_errors[k] != PROTO_ENOMEM)
			cr_expect_gt(seen[k], 0, "never hit %s",
			             proto_strerror(all_errors[k]));
}

/* ---- over nng ---- */

Test(proto_nng, msg_send_and_msg_recv_carry_a_message_over_inproc)
{
	nng_socket a, b;
	struct msg m, r;

	cr_assert_eq(nng_pair0_open(&a), 0);
	cr_assert_eq(nng_pair0_open(&b), 0);
	cr_assert_eq(nng_socket_set_ms(b, NNG_OPT_RECVTIMEO, 2000), 0);
	cr_assert_eq(nng_listen(b, "inproc://proto_test", NULL, 0), 0);
	cr_assert_eq(nng_dial(a, "inproc://proto_test", NULL, 0), 0);

	fill(&m, MSG_EXECUTE,
	     FB(F_STREAM) | FB(F_CODE) | FB(F_ENV) | FB(F_TIMEOUT) | FB(F_POLICY),
	     V_MIXED);
	cr_assert_eq(msg_send(a, &m, 0), 0);
	cr_assert_eq(msg_recv(b, &r, 0), 0);
	assert_msgs_equal(&m, &r, "over nng");
	msg_free(&r);
	msg_free(&m);

	/* a raw bad frame comes back as the decoder's (negative) error */
	cr_assert_eq(nng_send(a, (uint8_t[]){0x92, MSG_CANCEL, 0x80}, 3, 0), 0);
	cr_assert_eq(msg_recv(b, &r, 0), PROTO_EMISSING);
	/* nothing waiting: nng's (positive) error */
	cr_assert_eq(msg_recv(b, &r, NNG_FLAG_NONBLOCK), NNG_EAGAIN);
	nng_close(a);
	nng_close(b);
}

/* Waits up to 2 s for fd to be readable. */
static bool
readable_within(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 2000) == 1;
}

/*
 * mrecv: what a peer sends arrives whole and in order through the aio
 * callback, the eventfd is readable while messages wait and not once they are
 * taken, and a backlog past MRECV_MAX pauses receiving (the sender's queue
 * fills) until the loop takes it, then resumes with nothing lost.
 */
Test(proto_nng, mrecv_hands_messages_over_in_order_and_pauses_when_full)
{
	nng_socket a, b;
	struct mrecv r;
	struct msg m;
	const int n = MRECV_MAX + 500;
	int got = 0, e;

	cr_assert_eq(nng_pair0_open(&a), 0);
	cr_assert_eq(nng_pair0_open(&b), 0);
	cr_assert_eq(nng_socket_set_int(a, NNG_OPT_SENDBUF, 0), 0);
	cr_assert_eq(nng_socket_set_ms(a, NNG_OPT_SENDTIMEO, 500), 0);
	cr_assert_eq(nng_listen(b, "inproc://mrecv_test", NULL, 0), 0);
	cr_assert_eq(nng_dial(a, "inproc://mrecv_test", NULL, 0), 0);
	cr_assert_eq(mrecv_open(&r, b), 0);
	cr_assert_eq(mrecv_next(&r, &m), NNG_EAGAIN, "nothing sent yet");

	int sent = 0;
	for (; sent < n; sent++) {
		struct msg s;
		msg_init(&s, MSG_CANCEL);
		msg_set_u64(&s, F_STREAM, sent);
		if (msg_send(a, &s, 0))
			break; /* the receiver paused: the send timed out */
	}
	cr_assert_lt(sent, n, "receiving never paused");
	cr_assert_geq(sent, MRECV_MAX, "paused early, after %d", sent);
	while (got < n) {
		cr_assert(readable_within(r.mr_fd), "eventfd silent after %d messages", got);
		while ((e = mrecv_next(&r, &m)) == 0) {
			cr_assert_eq(m.m_type, MSG_CANCEL);
			cr_assert_eq(m.m_stream, (uint64_t)got, "message %d out of order", got);
			got++;
			msg_free(&m);
		}
		cr_assert_eq(e, NNG_EAGAIN);
		for (; sent < n; sent++) { /* the rest, now that it receives again */
			struct msg s;
			msg_init(&s, MSG_CANCEL);
			msg_set_u64(&s, F_STREAM, sent);
			if (msg_send(a, &s, 0))
				break;
		}
	}
	struct pollfd p = {.fd = r.mr_fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 0), 0, "eventfd readable with nothing waiting");

	/* a bad frame comes back as the decoder's error; the next is fine */
	cr_assert_eq(nng_send(a, (uint8_t[]){0x92, MSG_CANCEL, 0x80}, 3, 0), 0);
	msg_init(&m, MSG_CANCEL);
	msg_set_u64(&m, F_STREAM, 7);
	cr_assert_eq(msg_send(a, &m, 0), 0);
	cr_assert(readable_within(r.mr_fd));
	while ((e = mrecv_next(&r, &m)) == NNG_EAGAIN)
		cr_assert(readable_within(r.mr_fd));
	cr_assert_eq(e, PROTO_EMISSING);
	while ((e = mrecv_next(&r, &m)) == NNG_EAGAIN)
		cr_assert(readable_within(r.mr_fd));
	cr_assert_eq(e, 0);
	cr_assert_eq(m.m_stream, 7);
	msg_free(&m);
	nng_close(a);
	nng_close(b);
	mrecv_close(&r);
}

/* msgq: sends without blocking through its one aio; what the socket refuses stays queued. */
Test(proto_nng, msgq_keeps_what_a_full_socket_refuses)
{
	nng_socket a;
	struct msgq q = {0};

	cr_assert_eq(nng_pair0_open(&a), 0);
	cr_assert_eq(nng_socket_set_int(a, NNG_OPT_SENDBUF, 2), 0);
	for (int i = 0; i < 5; i++) {
		struct msg s;
		nng_msg *nm;
		msg_init(&s, MSG_CANCEL);
		msg_set_u64(&s, F_STREAM, i);
		cr_assert_eq(msg_pack(&s, &nm), 0);
		msgq_push(&q, nm);
	}
	/* no peer: two fit the socket's buffer, three wait */
	cr_assert_eq(msgq_flush(&q, a), 0);
	cr_assert_eq(q.mq_n, 3);
	nng_socket b;
	struct msg m;
	cr_assert_eq(nng_pair0_open(&b), 0);
	cr_assert_eq(nng_socket_set_ms(b, NNG_OPT_RECVTIMEO, 2000), 0);
	cr_assert_eq(nng_listen(b, "inproc://msgq_test", NULL, 0), 0);
	cr_assert_eq(nng_dial(a, "inproc://msgq_test", NULL, 0), 0);
	for (int i = 0; i < 5; i++) {
		msgq_flush(&q, a);
		cr_assert_eq(msg_recv(b, &m, 0), 0, "message %d", i);
		cr_assert_eq(m.m_stream, (uint64_t)i);
		msg_free(&m);
	}
	cr_assert_eq(q.mq_n, 0);
	msgq_free(&q);
	nng_close(a);
	nng_close(b);
}
