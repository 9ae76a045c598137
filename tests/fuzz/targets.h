/*
 * targets.h — what each fuzz target does with one input, shared by the
 * libFuzzer drivers (tests/fuzz/fuzz_*.c) and the corpus replay that make test
 * runs (tests/unit/fuzz_replay_test.c), so the two cannot drift apart. Besides
 * the sanitizers, each target checks invariants the rest of sandcell relies
 * on; a broken one aborts, which a fuzzer records and the replay test fails.
 */
#ifndef SANDCELL_FUZZ_TARGETS_H
#define SANDCELL_FUZZ_TARGETS_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../../broker/broker.h"
#include "../../proxy/proxy.h"

/* The input being replayed, named when a check fails (the replay test sets it). */
static const char *fuzz_input;

#define FUZZ_CHECK(cond)                                                                 \
	do {                                                                             \
		if (!(cond)) {                                                           \
			fprintf(stderr, "%s:%d: fuzz invariant broken: %s%s%s\n",        \
			        __FILE__, __LINE__, #cond, fuzz_input ? ", input " : "", \
			        fuzz_input ? fuzz_input : "");                           \
			abort();                                                         \
		}                                                                        \
	} while (0)

#define FUZZ_KEY "sandcell-fuzz-key" /* the fixed HMAC key of the wire seeds */
#define FUZZ_MAX_FRAMES ZMTP_MAX_FRAMES /* as many as wire_recv keeps */

/* ---- msg: the IPC codec ---- */

static const size_t fuzz_msg_u64[] = {
    offsetof(struct msg, m_stream),  offsetof(struct msg, m_req),
    offsetof(struct msg, m_timeout), offsetof(struct msg, m_policy),
    offsetof(struct msg, m_final),   offsetof(struct msg, m_pid),
    offsetof(struct msg, m_kpid),    offsetof(struct msg, m_state),
    offsetof(struct msg, m_queue),   offsetof(struct msg, m_count),
    offsetof(struct msg, m_wait),    offsetof(struct msg, m_run),
    offsetof(struct msg, m_flags),   offsetof(struct msg, m_refused),
};

static const struct {
	size_t off, max;
} fuzz_msg_str[] = {
    {offsetof(struct msg, m_code), PROTO_MAX_BIG},
    {offsetof(struct msg, m_data), PROTO_MAX_BIG},
    {offsetof(struct msg, m_text), PROTO_MAX_TEXT},
    {offsetof(struct msg, m_id), PROTO_MAX_NAME},
    {offsetof(struct msg, m_lang), PROTO_MAX_NAME},
    {offsetof(struct msg, m_cwd), PROTO_MAX_NAME},
    {offsetof(struct msg, m_outcome), 64},
};

#define FUZZ_NELEM(a) (sizeof(a) / sizeof((a)[0]))
/* every field is in one list (env aside): a new field must be added above */
_Static_assert(FUZZ_NELEM(fuzz_msg_u64) + FUZZ_NELEM(fuzz_msg_str) + 1 == F_FIELD_MAX,
               "a field of struct msg is missing from fuzz_msg_u64 or fuzz_msg_str");
#define FUZZ_U64(m, i) (*(const uint64_t *)((const char *)(m) + fuzz_msg_u64[i]))
#define FUZZ_STR(m, i) ((const struct pstr *)((const char *)(m) + fuzz_msg_str[i].off))

/* A decoded string is a NUL-terminated copy within its limit, or absent. */
static inline void
fuzz_pstr_sane(const struct pstr *p, size_t max)
{
	FUZZ_CHECK(p->s || p->len == 0);
	if (p->s) {
		FUZZ_CHECK(p->len <= max);
		FUZZ_CHECK(p->s[p->len] == '\0');
	}
}

static inline bool
fuzz_pstr_equal(const struct pstr *a, const struct pstr *b)
{
	if (!a->s || !b->s)
		return !a->s && !b->s;
	return a->len == b->len && !memcmp(a->s, b->s, a->len);
}

/* Two messages are equal field by field; aborts on the first difference. */
static inline void
fuzz_msg_equal(const struct msg *a, const struct msg *b)
{
	FUZZ_CHECK(a->m_type == b->m_type);
	FUZZ_CHECK(a->m_has == b->m_has);
	for (size_t i = 0; i < FUZZ_NELEM(fuzz_msg_u64); i++)
		FUZZ_CHECK(FUZZ_U64(a, i) == FUZZ_U64(b, i));
	for (size_t i = 0; i < FUZZ_NELEM(fuzz_msg_str); i++)
		FUZZ_CHECK(fuzz_pstr_equal(FUZZ_STR(a, i), FUZZ_STR(b, i)));
	FUZZ_CHECK(a->m_nenv == b->m_nenv);
	for (size_t i = 0; i < a->m_nenv; i++) {
		FUZZ_CHECK(fuzz_pstr_equal(&a->m_env[i].e_key, &b->m_env[i].e_key));
		FUZZ_CHECK(fuzz_pstr_equal(&a->m_env[i].e_val, &b->m_env[i].e_val));
	}
}

/* A message that owns nothing (what a failed decode or validation leaves). */
static inline bool
fuzz_msg_owns_nothing(const struct msg *m)
{
	for (size_t i = 0; i < FUZZ_NELEM(fuzz_msg_str); i++)
		if (FUZZ_STR(m, i)->s)
			return false;
	return !m->m_env && m->m_nenv == 0;
}

/*
 * encode(m) decodes to m again, and that encoding is a fixed point: the
 * encoder's output is canonical, so a frame re-encoded is never longer than
 * one the decoder accepted. Returns the encoding's length.
 */
static inline size_t
fuzz_msg_roundtrip(const struct msg *m)
{
	void *enc = NULL, *enc2 = NULL;
	size_t len = 0, len2 = 0;
	struct msg b;

	FUZZ_CHECK(msg_encode(m, &enc, &len) == 0);
	FUZZ_CHECK(msg_decode(enc, len, &b) == 0);
	fuzz_msg_equal(m, &b);
	FUZZ_CHECK(msg_encode(&b, &enc2, &len2) == 0);
	FUZZ_CHECK(len2 == len && !memcmp(enc, enc2, len));
	msg_free(&b);
	free(enc);
	free(enc2);
	return len;
}

/* msg_decode on the input; what decodes must survive an encode round trip. */
static inline int
fuzz_msg_one(const uint8_t *data, size_t size)
{
	struct msg m;
	int e = msg_decode(data, size, &m);

	FUZZ_CHECK(proto_strerror(e) != NULL);
	if (e) {
		FUZZ_CHECK(e >= PROTO_ENOMEM && e < 0);
		FUZZ_CHECK(m.m_type == MSG_NONE && m.m_has == 0 &&
		           fuzz_msg_owns_nothing(&m));
		msg_free(&m);
		return 0;
	}
	FUZZ_CHECK(strcmp(msg_type_name(m.m_type), "?") != 0);
	for (size_t i = 0; i < FUZZ_NELEM(fuzz_msg_str); i++)
		fuzz_pstr_sane(FUZZ_STR(&m, i), fuzz_msg_str[i].max);
	FUZZ_CHECK(m.m_nenv <= PROTO_MAX_ENV);
	FUZZ_CHECK((m.m_nenv == 0) || (m.m_has & FB(F_ENV)));
	for (size_t i = 0; i < m.m_nenv; i++) {
		fuzz_pstr_sane(&m.m_env[i].e_key, PROTO_MAX_ENVKEY);
		fuzz_pstr_sane(&m.m_env[i].e_val, PROTO_MAX_ENVVAL);
	}
	FUZZ_CHECK(fuzz_msg_roundtrip(&m) <= size);
	msg_free(&m);
	return 0;
}

/* ---- http: /execute validation and the name checks ---- */

/*
 * A deterministic kernelspec world for language lookups: JUPYTER_PATH holds one
 * fake python3 kernelspec, HOME is empty. (kspec.c also always reads
 * /usr/local/share/jupyter and /usr/share/jupyter; those cannot be turned off.)
 */
static char fuzz_http_dir[64];

static inline void
fuzz_http_cleanup(void)
{
	if (fuzz_http_dir[0])
		rm_rf(fuzz_http_dir);
	fuzz_http_dir[0] = '\0';
}

static inline int
fuzz_http_init(void)
{
	static const char spec[] =
	    "{\"argv\": [\"python3\", \"-m\", \"ipykernel_launcher\", \"-f\", "
	    "\"{connection_file}\"], \"display_name\": \"Python 3 (fuzz)\", "
	    "\"language\": \"python\"}\n";
	char path[256];
	FILE *f;

	if (fuzz_http_dir[0])
		return 0;
	snprintf(fuzz_http_dir, sizeof(fuzz_http_dir), "/tmp/sandcell-fuzz-XXXXXX");
	if (!mkdtemp(fuzz_http_dir)) {
		fuzz_http_dir[0] = '\0';
		return -1;
	}
	snprintf(path, sizeof(path), "%s/jupyter/kernels/python3", fuzz_http_dir);
	if (mkdir_p(path, 0700) < 0)
		return -1;
	strcat(path, "/kernel.json");
	if (!(f = fopen(path, "w")))
		return -1;
	fputs(spec, f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/home", fuzz_http_dir);
	mkdir(path, 0700);
	setenv("HOME", path, 1);
	snprintf(path, sizeof(path), "%s/jupyter", fuzz_http_dir);
	setenv("JUPYTER_PATH", path, 1);
	unsetenv("JUPYTER_DATA_DIR");
	unsetenv("XDG_DATA_HOME");
	log_level_max = LOG_ERR; /* kernelspec warnings would flood the fuzzer */
	atexit(fuzz_http_cleanup);
	return 0;
}

static inline bool
fuzz_lang_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("_.+-", c);
}

/* lang_normalise, env_key_valid and uuid_valid on one C string. */
static inline void
fuzz_names(const char *s)
{
	char out[MAX_LANG + 1], again[MAX_LANG + 1], tiny[4];
	size_t n = strlen(s);

	if (lang_normalise(s, out, sizeof(out)) == 0) {
		size_t k = strlen(out);
		FUZZ_CHECK(k > 0 && k <= 64 && out[0] != '.');
		for (size_t i = 0; i < k; i++)
			FUZZ_CHECK(fuzz_lang_char(out[i]));
		/* a normalised name is its own normal form */
		FUZZ_CHECK(lang_normalise(out, again, sizeof(again)) == 0);
		FUZZ_CHECK(!strcmp(out, again));
	}
	memset(tiny, 'X', sizeof(tiny));
	if (lang_normalise(s, tiny, sizeof(tiny)) == 0)
		FUZZ_CHECK(memchr(tiny, '\0', sizeof(tiny)) != NULL);
	if (env_key_valid(s)) {
		/* it goes into kernel code: nothing but [A-Za-z_][A-Za-z0-9_]* */
		FUZZ_CHECK(n > 0 && n <= PROTO_MAX_ENVKEY &&
		           !(s[0] >= '0' && s[0] <= '9'));
		for (size_t i = 0; i < n; i++)
			FUZZ_CHECK((s[i] >= 'a' && s[i] <= 'z') ||
			           (s[i] >= 'A' && s[i] <= 'Z') ||
			           (s[i] >= '0' && s[i] <= '9') || s[i] == '_');
	}
	if (uuid_valid(s)) {
		FUZZ_CHECK(n == 36);
		for (size_t i = 0; i < n; i++)
			FUZZ_CHECK((i == 8 || i == 13 || i == 18 || i == 23)
			               ? s[i] == '-'
			               : (s[i] >= '0' && s[i] <= '9') ||
			                     (s[i] >= 'a' && s[i] <= 'f'));
	}
}

/*
 * What the broker accepts, the proxy must be able to decode: an accepted body
 * becomes an EXECUTE that survives the IPC codec; a rejected one leaves an
 * error text and a message that owns nothing (do_execute does not free it).
 */
static inline void
fuzz_execute_body(const char *body, size_t len)
{
	char err[1024], lang[MAX_LANG + 1];
	const char *ctx_id = NULL;
	json_error_t jerr;
	struct msg m;
	json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	int st;

	if (!j)
		return;
	err[0] = '\0';
	st = validate_execute(j, &m, &ctx_id, lang, sizeof(lang), err, sizeof(err));
	if (st) {
		FUZZ_CHECK(st == 400 || st == 413);
		FUZZ_CHECK(err[0] != '\0');
		FUZZ_CHECK(fuzz_msg_owns_nothing(&m));
		msg_free(&m);
		json_decref(j);
		return;
	}
	FUZZ_CHECK(m.m_type == MSG_EXECUTE);
	FUZZ_CHECK((m.m_has & (FB(F_CODE) | FB(F_POLICY))) ==
	           (FB(F_CODE) | FB(F_POLICY)));
	FUZZ_CHECK(m.m_code.len == json_string_length(json_object_get(j, "code")));
	FUZZ_CHECK(!(ctx_id && lang[0]));
	FUZZ_CHECK(strlen(lang) <= MAX_LANG);
	if (lang[0]) {
		char again[MAX_LANG + 1];
		FUZZ_CHECK(lang_normalise(lang, again, sizeof(again)) == 0);
		FUZZ_CHECK(!strcmp(lang, again));
	}
	if (m.m_has & FB(F_TIMEOUT))
		FUZZ_CHECK(m.m_timeout >= 1 && m.m_timeout <= 604800000u);
	for (size_t i = 0; i < m.m_nenv; i++) {
		FUZZ_CHECK(env_key_valid(m.m_env[i].e_key.s));
		FUZZ_CHECK(strlen(m.m_env[i].e_val.s) == m.m_env[i].e_val.len);
	}
	msg_set_u64(&m, F_STREAM, 1); /* what do_execute adds */
	fuzz_msg_roundtrip(&m);
	msg_free(&m);
	json_decref(j);
}

/*
 * The input up to its first NUL is a name (language, env var, context id) and
 * the rest a /execute body; without a NUL the whole input is both.
 */
static inline int
fuzz_http_one(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, '\0', size);
	size_t nlen = nul ? (size_t)(nul - data) : size;
	char *name = xstrndup((const char *)data, nlen);

	fuzz_names(name);
	free(name);
	if (nul)
		fuzz_execute_body((const char *)nul + 1, size - nlen - 1);
	else
		fuzz_execute_body((const char *)data, size);
	return 0;
}

/* ---- wire: Jupyter frames and their mapping to NDJSON ---- */

/*
 * Input layout: frames, each a 2-byte big-endian length then that many bytes;
 * a short last frame takes what is left. At most FUZZ_MAX_FRAMES frames.
 */
static inline size_t
fuzz_wire_split(const uint8_t *data, size_t size, struct wire_frame *f, size_t max)
{
	size_t n = 0, off = 0;

	while (off + 2 <= size && n < max) {
		size_t len = (size_t)data[off] << 8 | data[off + 1];
		off += 2;
		if (len > size - off)
			len = size - off;
		f[n++] = (struct wire_frame){data + off, len};
		off += len;
	}
	return n;
}

/* Every line output_* added since mark is one JSON object with a "type". */
static inline size_t
fuzz_ndjson_lines(const struct buf *b, size_t mark)
{
	size_t lines = 0, off = mark;

	while (off < b->b_len) {
		const char *start = b->b_data + off;
		const char *nl = memchr(start, '\n', b->b_len - off);
		json_error_t jerr;
		json_t *j;

		FUZZ_CHECK(nl != NULL);
		/* kernel output keeps NUL characters (wire_parse): \u0000 is allowed */
		j = json_loadb(start, nl - start, JSON_ALLOW_NUL, &jerr);
		FUZZ_CHECK(json_is_object(j));
		FUZZ_CHECK(json_is_string(json_object_get(j, "type")));
		json_decref(j);
		off += nl - start + 1;
		lines++;
	}
	return lines;
}

static inline void
fuzz_wire_output(const struct jmsg *jm)
{
	struct buf b = {0};
	json_t *data = json_object_get(jm->jm_content, "data");

	for (int dir = 0; dir < 2; dir++) {
		size_t mark = b.b_len;
		bool made = output_iopub(&b, jm->jm_type, jm->jm_content, dir);
		FUZZ_CHECK(fuzz_ndjson_lines(&b, mark) == (made ? 1u : 0u));
	}
	if (json_is_object(data)) {
		for (int is_main = 0; is_main < 2; is_main++) {
			json_t *r = output_result(data, is_main);
			FUZZ_CHECK(json_is_object(r));
			FUZZ_CHECK(json_is_true(json_object_get(r, "is_main_result")) ==
			           is_main);
			size_t mark = b.b_len;
			output_line(&b, r);
			FUZZ_CHECK(fuzz_ndjson_lines(&b, mark) == 1);
		}
	}
	buf_free(&b);
}

static inline bool
fuzz_jmsg_empty(const struct jmsg *jm)
{
	return !jm->jm_header && !jm->jm_parent && !jm->jm_meta && !jm->jm_content &&
	       !jm->jm_type;
}

/*
 * wire_parse under the fixed key and without one (no verification). A message
 * the key accepts is one the empty key accepts too, with the same type.
 */
static inline int
fuzz_wire_one(const uint8_t *data, size_t size)
{
	struct wire_frame f[FUZZ_MAX_FRAMES];
	size_t n = fuzz_wire_split(data, size, f, FUZZ_MAX_FRAMES);
	struct jmsg signed_jm, open_jm;
	int rs = wire_parse(FUZZ_KEY, f, n, &signed_jm);
	int ro = wire_parse("", f, n, &open_jm);

	FUZZ_CHECK(rs <= 0 && ro <= 0);
	if (rs)
		FUZZ_CHECK(fuzz_jmsg_empty(&signed_jm));
	if (ro)
		FUZZ_CHECK(fuzz_jmsg_empty(&open_jm));
	if (rs == 0) {
		FUZZ_CHECK(ro == 0);
		FUZZ_CHECK(!strcmp(signed_jm.jm_type, open_jm.jm_type));
		jmsg_free(&signed_jm);
	}
	if (ro == 0) {
		FUZZ_CHECK(cJSON_IsObject(open_jm.jm_header) &&
		           cJSON_IsObject(open_jm.jm_parent) &&
		           json_is_object(open_jm.jm_meta) &&
		           json_is_object(open_jm.jm_content));
		FUZZ_CHECK(open_jm.jm_type && open_jm.jm_parent_id);
		fuzz_wire_output(&open_jm);
		jmsg_free(&open_jm);
		FUZZ_CHECK(fuzz_jmsg_empty(&open_jm));
	}
	return 0;
}

/* ---- zmtp: a kernel's byte stream, cut into messages ---- */

/*
 * Input layout: one byte, then the stream a kernel would send (greeting,
 * READY, frames). The byte's low six bits less one are the size of the pieces
 * the stream is fed in, less one (1 to 64 bytes), its top two the socket type.
 * Every message cut lies inside what was read, within the limits, and goes on
 * to wire_parse. Returns how many messages were cut.
 */
static inline size_t
fuzz_zmtp_cut(const uint8_t *data, size_t size)
{
	struct zmtp *z;
	size_t piece, fed = 0, msgs = 0;

	if (size < 1)
		return 0;
	piece = (data[0] & 0x3f) + 1;
	z = zmtp_open_buffer(data[0] >> 6 == 1 ? ZMTP_SUB : data[0] >> 6 == 2 ? ZMTP_REQ
	                                                                       : ZMTP_DEALER);
	data++, size--;
	while (fed < size) {
		size_t n = size - fed < piece ? size - fed : piece;
		const struct wire_frame *f;
		size_t nf;
		int rc;

		FUZZ_CHECK(zmtp_feed(z, data + fed, n) == 0);
		fed += n;
		while ((rc = zmtp_recv(z, &f, &nf)) != -EAGAIN) {
			const unsigned char *lo = z->z_in.zb_data + z->z_in.zb_off,
			                    *hi = z->z_in.zb_data + z->z_in.zb_len;
			uint64_t bytes = 0;
			struct jmsg jm;

			FUZZ_CHECK(rc == 0 || rc == -E2BIG);
			if (rc)
				continue;
			FUZZ_CHECK(zmtp_up(z));
			FUZZ_CHECK(nf >= 1 && nf <= ZMTP_MAX_FRAMES);
			for (size_t i = 0; i < nf; i++) {
				const unsigned char *p = f[i].wf_data;
				FUZZ_CHECK(p >= lo && p <= hi && f[i].wf_len <= (size_t)(hi - p));
				bytes += f[i].wf_len;
			}
			FUZZ_CHECK(bytes <= ZMTP_MAX_BYTES);
			if (wire_parse(FUZZ_KEY, f, nf, &jm) == 0)
				jmsg_free(&jm);
			msgs++;
		}
		FUZZ_CHECK(z->z_in.zb_len - z->z_in.zb_off <= fed);
	}
	zmtp_close(z);
	return msgs;
}

static inline int
fuzz_zmtp_one(const uint8_t *data, size_t size)
{
	fuzz_zmtp_cut(data, size);
	return 0;
}

#endif
