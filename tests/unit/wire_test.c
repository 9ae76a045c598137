/*
 * wire_test.c — the Jupyter wire protocol: HMAC-SHA256 signing against known
 * vectors, locating the <IDS|MSG> delimiter after any identity frames,
 * verification and parsing, and a real ZeroMQ round trip over inproc://.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strcasestr, strptime, timegm, memmem when built without the       \
                       Makefile flags */
#endif
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>
#include <zmq.h>

#include "../../proxy/proxy.h"

#define DELIM "<IDS|MSG>"
#define KEY "sandcell-test-key"
#define HDR "{\"msg_id\":\"h-1\",\"msg_type\":\"status\"}"
#define PARENT "{\"msg_id\":\"p-1\"}"
#define META "{}"
#define CONTENT "{\"execution_state\":\"idle\"}"

/*
 * HMAC-SHA256 of HDR|PARENT|META|CONTENT under KEY, computed with:
 *   /usr/bin/python3 -c 'import hmac,hashlib; k=b"sandcell-test-key";
 *     p=[b"{\"msg_id\":\"h-1\",\"msg_type\":\"status\"}", b"{\"msg_id\":\"p-1\"}",
 *        b"{}", b"{\"execution_state\":\"idle\"}"];
 *     print(hmac.new(k, b"".join(p), hashlib.sha256).hexdigest())'
 */
#define SIG "457ce78f815cc1da93a2287b740fbc9f19c2328bb50208bc911e29199becb47b"

static struct wire_frame
wf(const char *s)
{
	return (struct wire_frame){s, strlen(s)};
}

/* A message: nids identity frames, the delimiter, sig and four parts. */
struct wmsg {
	struct wire_frame f[16];
	size_t n;
	char sig[65];
};

static void
wmsg_build(struct wmsg *w, const char *key, size_t nids, const char *hdr,
           const char *parent, const char *meta, const char *content)
{
	static const char *ids[] = {"identity-0", "kernel.abc.status", ""};
	struct wire_frame parts[4] = {wf(hdr), wf(parent), wf(meta), wf(content)};

	w->n = 0;
	for (size_t i = 0; i < nids; i++)
		w->f[w->n++] = wf(ids[i % 3]);
	w->f[w->n++] = wf(DELIM);
	wire_sign(key, parts, w->sig);
	w->f[w->n++] = wf(w->sig);
	for (int i = 0; i < 4; i++)
		w->f[w->n++] = parts[i];
}

static void
assert_jmsg_empty(const struct jmsg *jm)
{
	cr_assert_null(jm->jm_header);
	cr_assert_null(jm->jm_parent);
	cr_assert_null(jm->jm_meta);
	cr_assert_null(jm->jm_content);
	cr_assert_null(jm->jm_type);
}

/* ---- wire_sign ---- */

Test(wire_sign, signature_is_hmac_sha256_hex_of_the_four_parts)
{
	struct wire_frame parts[4] = {wf(HDR), wf(PARENT), wf(META), wf(CONTENT)};
	char hex[65];

	cr_assert_eq(wire_sign(KEY, parts, hex), 0);
	cr_assert_str_eq(hex, SIG);
}

Test(wire_sign, signature_covers_the_concatenation_wherever_the_parts_split)
{
	/*
	 * python3 -c 'import hmac,hashlib; print(hmac.new(b"key",
	 *   b"The quick brown fox jumps over the lazy dog", hashlib.sha256).hexdigest())'
	 */
	static const char want[] =
	    "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8";
	static const char *splits[][4] = {
	    {"The quick brown fox jumps over the lazy dog", "", "", ""},
	    {"The quick ", "brown fox ", "jumps over ", "the lazy dog"},
	    {"", "", "", "The quick brown fox jumps over the lazy dog"},
	    {"T", "he quick brown fox jumps over the lazy do", "", "g"},
	};

	for (size_t i = 0; i < sizeof(splits) / sizeof(splits[0]); i++) {
		struct wire_frame parts[4];
		char hex[65];
		for (int j = 0; j < 4; j++)
			parts[j] = wf(splits[i][j]);
		wire_sign("key", parts, hex);
		cr_assert_str_eq(hex, want, "split %zu", i);
	}
}

Test(wire_sign, keys_longer_than_a_block_and_empty_keys_sign_like_python_hmac)
{
	/* python3 -c '...hmac.new(b"k"*100, <HDR|PARENT|META|CONTENT>, sha256)...' */
	static const char long_key_sig[] =
	    "c525fb6970666047e70047a0533311a9a56a1ac2931a57e6d988f19e96eeaad6";
	/* python3 -c '...hmac.new(b"", b"", hashlib.sha256).hexdigest()' */
	static const char empty_sig[] =
	    "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad";
	struct wire_frame parts[4] = {wf(HDR), wf(PARENT), wf(META), wf(CONTENT)};
	struct wire_frame empty[4] = {wf(""), wf(""), wf(""), wf("")};
	char key[101], hex[65];

	memset(key, 'k', 100);
	key[100] = '\0';
	wire_sign(key, parts, hex);
	cr_assert_str_eq(hex, long_key_sig);
	wire_sign("", empty, hex);
	cr_assert_str_eq(hex, empty_sig);
}

/* ---- wire_parse ---- */

Test(wire_parse, finds_the_delimiter_after_zero_one_or_three_identity_frames)
{
	static const size_t nids[] = {0, 1, 3};

	for (size_t i = 0; i < sizeof(nids) / sizeof(nids[0]); i++) {
		struct wmsg w;
		struct jmsg jm;
		wmsg_build(&w, KEY, nids[i], HDR, PARENT, META, CONTENT);
		cr_assert_eq(wire_parse(KEY, w.f, w.n, &jm), 0, "%zu identity frames",
		             nids[i]);
		cr_assert_str_eq(jm.jm_type, "status");
		cr_assert_str_eq(jm.jm_parent_id, "p-1");
		cr_assert_str_eq(
		    json_string_value(json_object_get(jm.jm_content, "execution_state")),
		    "idle");
		cr_assert(json_is_object(jm.jm_meta));
		cr_assert_eq(json_object_size(jm.jm_meta), 0);
		jmsg_free(&jm);
		assert_jmsg_empty(&jm);
	}
}

Test(wire_parse, extra_buffer_frames_after_the_content_are_accepted)
{
	struct wmsg w;
	struct jmsg jm;

	wmsg_build(&w, KEY, 1, HDR, PARENT, META, CONTENT);
	w.f[w.n++] = wf("binary buffer 1");
	w.f[w.n++] = wf("");
	cr_assert_eq(wire_parse(KEY, w.f, w.n, &jm), 0);
	cr_assert_str_eq(jm.jm_type, "status");
	jmsg_free(&jm);
}

Test(wire_parse, a_frame_that_only_starts_like_the_delimiter_is_an_identity)
{
	struct wmsg w;
	struct jmsg jm;

	wmsg_build(&w, KEY, 0, HDR, PARENT, META, CONTENT);
	memmove(&w.f[2], &w.f[0], w.n * sizeof(w.f[0]));
	w.f[0] = wf(DELIM "x");
	w.f[1] = wf("<IDS|MSG");
	w.n += 2;
	cr_assert_eq(wire_parse(KEY, w.f, w.n, &jm), 0);
	cr_assert_str_eq(jm.jm_type, "status");
	jmsg_free(&jm);
}

Test(wire_parse, any_change_to_a_signed_part_or_the_signature_is_refused)
{
	static const struct {
		const char *name;
		size_t idx; /* frame index with no identity frames */
		const char *val;
	} cases[] = {
	    {"header", 2, "{\"msg_id\":\"h-1\",\"msg_type\":\"statuz\"}"},
	    {"parent", 3, "{\"msg_id\":\"p-2\"}"},
	    {"metadata", 4, "{\"x\":1}"},
	    {"content", 5, "{\"execution_state\":\"busy\"}"},
	    {"content with a trailing space", 5, CONTENT " "},
	    {"signature, one hex digit", 1,
	     "557ce78f815cc1da93a2287b740fbc9f19c2328bb50208bc911e29199becb47b"},
	    {"signature in upper case", 1,
	     "457CE78F815CC1DA93A2287B740FBC9F19C2328BB50208BC911E29199BECB47B"},
	    {"signature one char short", 1,
	     "457ce78f815cc1da93a2287b740fbc9f19c2328bb50208bc911e29199becb47"},
	    {"signature one char long", 1,
	     "457ce78f815cc1da93a2287b740fbc9f19c2328bb50208bc911e29199becb47b0"},
	    {"signature empty", 1, ""},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct wmsg w;
		struct jmsg jm;
		wmsg_build(&w, KEY, 0, HDR, PARENT, META, CONTENT);
		cr_assert_str_eq(w.sig, SIG);
		w.f[cases[i].idx] = wf(cases[i].val);
		cr_expect_eq(wire_parse(KEY, w.f, w.n, &jm), -EPERM, "tampered %s",
		             cases[i].name);
		assert_jmsg_empty(&jm);
	}
}

Test(wire_parse, a_message_signed_with_another_key_is_refused)
{
	struct wmsg w;
	struct jmsg jm;

	wmsg_build(&w, "other-key", 1, HDR, PARENT, META, CONTENT);
	cr_assert_eq(wire_parse(KEY, w.f, w.n, &jm), -EPERM);
}

Test(wire_parse, missing_delimiter_or_too_few_frames_is_a_bad_message)
{
	struct wmsg w;
	struct jmsg jm;

	wmsg_build(&w, KEY, 1, HDR, PARENT, META, CONTENT);
	cr_assert_eq(wire_parse(KEY, w.f, 0, &jm), -EBADMSG, "no frames");
	/* every frame but the delimiter */
	struct wire_frame nodelim[8];
	size_t n = 0;
	for (size_t i = 0; i < w.n; i++)
		if (i != 1)
			nodelim[n++] = w.f[i];
	cr_assert_eq(wire_parse(KEY, nodelim, n, &jm), -EBADMSG, "no delimiter");
	cr_assert_eq(wire_parse("", nodelim, n, &jm), -EBADMSG, "no delimiter, no key");
	/* the delimiter followed by fewer than signature + four parts */
	for (size_t keep = 1; keep < w.n; keep++) {
		cr_expect_eq(wire_parse(KEY, w.f, keep, &jm), -EBADMSG,
		             "%zu of %zu frames", keep, w.n);
		cr_expect_eq(wire_parse("", w.f, keep, &jm), -EBADMSG,
		             "%zu frames, no key", keep);
	}
}

Test(wire_parse, invalid_or_non_object_json_in_any_part_is_invalid)
{
	static const char *bad[] = {
	    "",
	    "{",
	    "{\"a\":}",
	    "not json",
	    "[]",
	    "\"string\"",
	    "1",
	    "null",
	    "true",
	    "{\"a\":1} {}",
	};

	for (size_t part = 0; part < 4; part++)
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			const char *p[4] = {HDR, PARENT, META, CONTENT};
			struct wmsg w;
			struct jmsg jm;
			p[part] = bad[i];
			wmsg_build(&w, KEY, 1, p[0], p[1], p[2], p[3]);
			cr_expect_eq(wire_parse(KEY, w.f, w.n, &jm), -EINVAL,
			             "part %zu = '%s'", part, bad[i]);
			assert_jmsg_empty(&jm);
		}
}

/* Kernel output may hold NUL characters; they must reach the user. */
Test(wire_parse, nul_characters_in_content_are_kept)
{
	struct wmsg w;
	struct jmsg jm;

	wmsg_build(&w, KEY, 1, HDR, PARENT, META, "{\"text\":\"a\\u0000b\"}");
	cr_assert_eq(wire_parse(KEY, w.f, w.n, &jm), 0);
	json_t *t = json_object_get(jm.jm_content, "text");
	cr_assert_eq(json_string_length(t), 3);
	cr_assert_eq(memcmp(json_string_value(t), "a\0b", 3), 0);
	jmsg_free(&jm);
}

Test(wire_parse, a_header_without_a_string_msg_type_is_invalid)
{
	static const char *hdrs[] = {
	    "{}",
	    "{\"msg_id\":\"h\"}",
	    "{\"msg_type\":null}",
	    "{\"msg_type\":5}",
	    "{\"msg_type\":[\"status\"]}",
	};

	for (size_t i = 0; i < sizeof(hdrs) / sizeof(hdrs[0]); i++) {
		struct wmsg w;
		struct jmsg jm;
		wmsg_build(&w, KEY, 0, hdrs[i], PARENT, META, CONTENT);
		cr_expect_eq(wire_parse(KEY, w.f, w.n, &jm), -EINVAL, "header %s",
		             hdrs[i]);
		assert_jmsg_empty(&jm);
	}
}

Test(wire_parse, an_empty_key_skips_the_signature_check)
{
	static const char *sigs[] = {
	    "", "garbage", SIG,
	    "0000000000000000000000000000000000000000000000000000000000000000"};

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct wmsg w;
		struct jmsg jm;
		wmsg_build(&w, "", 0, HDR, PARENT, META, CONTENT);
		w.f[1] = wf(sigs[i]);
		cr_assert_eq(wire_parse("", w.f, w.n, &jm), 0, "signature '%s'", sigs[i]);
		cr_assert_str_eq(jm.jm_type, "status");
		jmsg_free(&jm);
	}
}

Test(wire_parse, parent_id_is_empty_when_there_is_no_parent_msg_id)
{
	static const struct {
		const char *parent, *want;
	} cases[] = {
	    {"{}", ""},
	    {"{\"msg_id\":null}", ""},
	    {"{\"msg_id\":42}", ""},
	    {"{\"session\":\"s\"}", ""},
	    {"{\"msg_id\":\"\"}", ""},
	    {"{\"msg_id\":\"abc-123\",\"msg_type\":\"execute_request\"}", "abc-123"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct wmsg w;
		struct jmsg jm;
		wmsg_build(&w, KEY, 1, HDR, cases[i].parent, META, CONTENT);
		cr_assert_eq(wire_parse(KEY, w.f, w.n, &jm), 0, "parent %s",
		             cases[i].parent);
		cr_assert_not_null(jm.jm_parent_id);
		cr_assert_str_eq(jm.jm_parent_id, cases[i].want, "parent %s",
		                 cases[i].parent);
		jmsg_free(&jm);
	}
}

/* ---- over ZeroMQ ---- */

static bool
is_iso_utc_us(const char *s)
{
	/* 2026-11-29T10:00:00.123456Z */
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.ddddddZ";

	if (strlen(s) != sizeof(shape) - 1)
		return false;
	for (size_t i = 0; s[i]; i++)
		if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
			return false;
	return true;
}

struct zpair {
	void *ctx, *a, *b;
};

static void
zpair_open(struct zpair *z, int ta, int tb, const char *ep)
{
	int linger = 0;

	z->ctx = zmq_ctx_new();
	cr_assert_not_null(z->ctx);
	z->a = zmq_socket(z->ctx, ta);
	z->b = zmq_socket(z->ctx, tb);
	cr_assert(z->a && z->b);
	zmq_setsockopt(z->a, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(z->b, ZMQ_LINGER, &linger, sizeof(linger));
	cr_assert_eq(zmq_bind(z->b, ep), 0, "bind %s: %s", ep, zmq_strerror(errno));
	cr_assert_eq(zmq_connect(z->a, ep), 0, "connect %s: %s", ep, zmq_strerror(errno));
}

static void
zpair_close(struct zpair *z)
{
	zmq_close(z->a);
	zmq_close(z->b);
	zmq_ctx_term(z->ctx);
}

/* wire_recv never blocks for the first frame, so wait until one is there. */
static void
await_readable(void *sock)
{
	zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};

	cr_assert_eq(zmq_poll(&it, 1, 2000), 1, "nothing arrived within 2 s");
}

static void
assert_round_trip(int ta, int tb, const char *ep)
{
	struct zpair z;
	struct jmsg jm;
	char msgid[40] = "";
	json_t *content = json_pack(
	    "{s:s, s:b, s:{}, s:b, s:s}", "code", "print('h\xc3\xa9llo')\n", "silent", 0,
	    "user_expressions", "allow_stdin", 0, "note", "quotes \" ' and \\ and \n");
	json_t *expect = json_deep_copy(content);

	zpair_open(&z, ta, tb, ep);
	cr_assert_eq(wire_send(z.a, KEY, "session-1", "execute_request", content, msgid),
	             0);
	cr_assert(uuid_valid(msgid), "msgid '%s' is not a uuid", msgid);
	await_readable(z.b);
	cr_assert_eq(wire_recv(z.b, KEY, &jm), 0);
	cr_assert_str_eq(jm.jm_type, "execute_request");
	cr_assert_str_eq(jm.jm_parent_id, "");
	cr_assert(json_equal(jm.jm_content, expect), "content changed on the way");
	cr_assert_str_eq(json_string_value(json_object_get(jm.jm_header, "msg_id")),
	                 msgid);
	cr_assert_str_eq(json_string_value(json_object_get(jm.jm_header, "session")),
	                 "session-1");
	cr_assert_str_eq(json_string_value(json_object_get(jm.jm_header, "version")),
	                 "5.3");
	cr_assert_str_eq(json_string_value(json_object_get(jm.jm_header, "username")),
	                 "sandcell");
	const char *date = json_string_value(json_object_get(jm.jm_header, "date"));
	cr_assert(date && is_iso_utc_us(date), "date '%s'", date ? date : "(none)");
	cr_assert_eq(json_object_size(jm.jm_parent), 0);
	cr_assert_eq(json_object_size(jm.jm_meta), 0);
	jmsg_free(&jm);
	cr_assert_eq(wire_recv(z.b, KEY, &jm), -EAGAIN, "exactly one message was sent");
	json_decref(expect);
	zpair_close(&z);
}

Test(wire_zmq, pair_send_then_recv_gives_back_type_content_and_a_verified_header)
{
	assert_round_trip(ZMQ_PAIR, ZMQ_PAIR, "inproc://wire-pair");
}

Test(wire_zmq, dealer_to_router_recv_skips_the_routing_identity)
{
	assert_round_trip(ZMQ_DEALER, ZMQ_ROUTER, "inproc://wire-router");
}

Test(wire_zmq, recv_on_an_empty_socket_is_eagain)
{
	struct zpair z;
	struct jmsg jm;

	zpair_open(&z, ZMQ_DEALER, ZMQ_ROUTER, "inproc://wire-empty");
	cr_assert_eq(wire_recv(z.b, KEY, &jm), -EAGAIN);
	cr_assert_eq(wire_recv(z.a, KEY, &jm), -EAGAIN);
	assert_jmsg_empty(&jm);
	zpair_close(&z);
}

Test(wire_zmq, a_message_under_the_wrong_key_is_read_whole_and_refused)
{
	struct zpair z;
	struct jmsg jm;

	zpair_open(&z, ZMQ_PAIR, ZMQ_PAIR, "inproc://wire-key");
	cr_assert_eq(
	    wire_send(z.a, "sender-key", "s", "kernel_info_request", json_object(), NULL),
	    0);
	await_readable(z.b);
	cr_assert_eq(wire_recv(z.b, KEY, &jm), -EPERM);
	assert_jmsg_empty(&jm);
	cr_assert_eq(wire_recv(z.b, KEY, &jm), -EAGAIN,
	             "the refused message left frames behind");
	zpair_close(&z);
}

static void
send_frames(void *s, const char **frames, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cr_assert_geq(zmq_send(s, frames[i], strlen(frames[i]),
		                       i + 1 < n ? ZMQ_SNDMORE : 0),
		              0);
}

Test(wire_zmq, raw_frames_from_a_kernel_are_verified_and_parsed)
{
	struct zpair z;
	struct jmsg jm;
	const char *good[] = {"kernel.1.status", DELIM, SIG, HDR, PARENT, META, CONTENT};
	const char *badjson[] = {DELIM, "", "{", PARENT, META, CONTENT};

	zpair_open(&z, ZMQ_PAIR, ZMQ_PAIR, "inproc://wire-raw");
	send_frames(z.a, good, 7);
	await_readable(z.b);
	cr_assert_eq(wire_recv(z.b, KEY, &jm), 0);
	cr_assert_str_eq(jm.jm_type, "status");
	cr_assert_str_eq(jm.jm_parent_id, "p-1");
	jmsg_free(&jm);

	send_frames(z.a, badjson, 6);
	await_readable(z.b);
	cr_assert_eq(wire_recv(z.b, "", &jm), -EINVAL);
	cr_assert_eq(wire_recv(z.b, "", &jm), -EAGAIN);
	zpair_close(&z);
}

Test(wire_zmq, a_message_of_too_many_frames_is_dropped_whole)
{
	struct zpair z;
	struct jmsg jm;
	const char *frames[100];

	for (int i = 0; i < 94; i++)
		frames[i] = "id";
	frames[94] = DELIM;
	frames[95] = SIG;
	frames[96] = HDR;
	frames[97] = PARENT;
	frames[98] = META;
	frames[99] = CONTENT;
	zpair_open(&z, ZMQ_PAIR, ZMQ_PAIR, "inproc://wire-many");
	send_frames(z.a, frames, 100);
	await_readable(z.b);
	cr_assert_eq(wire_recv(z.b, KEY, &jm), -E2BIG);
	cr_assert_eq(wire_recv(z.b, KEY, &jm), -EAGAIN,
	             "frames of the dropped message remain");
	/* the socket still works afterwards */
	send_frames(z.a, frames + 94, 6);
	await_readable(z.b);
	cr_assert_eq(wire_recv(z.b, KEY, &jm), 0);
	jmsg_free(&jm);
	zpair_close(&z);
}
