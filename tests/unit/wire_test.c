/*
 * wire_test.c — the Jupyter wire protocol: HMAC-SHA256 signing against known
 * vectors, locating the <IDS|MSG> delimiter after any identity frames,
 * verification and parsing; and zmtp.c, the proxy's own ZMTP connection,
 * against libzmq's ROUTER, PUB and REP over ipc:// (as kernels bind them), a
 * peer that speaks no ZMTP, and bytes fed in pieces.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strcasestr, strptime, timegm, memmem when built without the       \
                       Makefile flags */
#endif
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <zmq.h>

#include "../../proxy/proxy.h"
#include "shapes.h"

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

/* wire.c keeps the last key's HMAC state: a new key must replace it. */
Test(wire_sign, signing_under_one_key_then_another_and_back_gives_each_its_own)
{
	struct wire_frame parts[4] = {wf(HDR), wf(PARENT), wf(META), wf(CONTENT)};
	char hex[65], other[65];

	for (int i = 0; i < 3; i++) {
		wire_sign(KEY, parts, hex);
		cr_assert_str_eq(hex, SIG, "round %d", i);
		wire_sign("another-key", parts, other);
		cr_assert_str_neq(other, SIG, "round %d", i);
		wire_sign("sandcell-test-ke", parts, other); /* a prefix of KEY */
		cr_assert_str_neq(other, SIG, "round %d", i);
	}
}

/* ---- wire_build ---- */

/* The header is printed, not packed: it must still be the JSON jansson made. */
Test(wire_build, a_request_parses_back_with_its_header_fields_and_signature)
{
	struct wire_out wo;
	struct jmsg jm;
	struct wire_frame f[8];
	char msgid[40];

	cr_assert_eq(wire_build(KEY, "0f1e2d3c-sess", "execute_request",
	                        json_pack("{s:s}", "code", "print(\"a\\\\b\")"), msgid,
	                        &wo),
	             0);
	f[0] = wf("identity");
	for (int i = 0; i < 6; i++)
		f[1 + i] = wo.wo_frames[i];
	cr_assert_eq(wire_parse(KEY, f, 7, &jm), 0, "its signature or JSON is refused");
	cr_assert_str_eq(jm.jm_type, "execute_request");
	jmsg_free(&jm);
	json_error_t err;
	json_t *h = json_loadb(wo.wo_frames[2].wf_data, wo.wo_frames[2].wf_len, 0, &err);
	cr_assert_not_null(h, "header is not JSON: %s", err.text);
	cr_assert_str_eq(json_string_value(json_object_get(h, "msg_id")), msgid);
	cr_assert_str_eq(json_string_value(json_object_get(h, "session")),
	                 "0f1e2d3c-sess");
	cr_assert_str_eq(json_string_value(json_object_get(h, "msg_type")),
	                 "execute_request");
	cr_assert_str_eq(json_string_value(json_object_get(h, "username")), "sandcell");
	cr_assert_str_eq(json_string_value(json_object_get(h, "version")), "5.3");
	cr_assert_eq(strlen(json_string_value(json_object_get(h, "date"))), 27);
	json_decref(h);
	json_t *c = json_loadb(wo.wo_frames[5].wf_data, wo.wo_frames[5].wf_len, 0, &err);
	cr_assert_str_eq(json_string_value(json_object_get(c, "code")),
	                 "print(\"a\\\\b\")");
	json_decref(c);
	char hex[65];
	wire_sign(KEY, &wo.wo_frames[2], hex);
	cr_assert_eq(wo.wo_frames[1].wf_len, 64);
	cr_assert(!memcmp(wo.wo_frames[1].wf_data, hex, 64), "signature does not verify");
	wire_out_free(&wo);
}

Test(wire_build, a_session_or_type_json_would_need_to_escape_is_refused)
{
	struct wire_out wo;

	cr_assert_eq(wire_build(KEY, "a\"b", "execute_request", json_object(), NULL, &wo),
	             -EINVAL);
	cr_assert_eq(wire_build(KEY, "s", "x\\y", json_object(), NULL, &wo), -EINVAL);
	cr_assert_eq(
	    wire_build(KEY, "s", "kernel_info_request", json_object(), NULL, &wo), 0);
	wire_out_free(&wo);
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

Test(wire_parse, the_parent_session_is_read_and_headers_may_end_in_whitespace)
{
	struct wmsg w;
	struct jmsg jm;

	wmsg_build(&w, KEY, 1, HDR " \n", "{\"msg_id\":\"p-1\",\"session\":\"s-9\"}\t", META,
	           CONTENT);
	cr_assert_eq(wire_parse(KEY, w.f, w.n, &jm), 0);
	cr_assert_str_eq(jm.jm_type, "status");
	cr_assert_str_eq(jm.jm_parent_id, "p-1");
	cr_assert_str_eq(jm.jm_session, "s-9");
	jmsg_free(&jm);
	wmsg_build(&w, KEY, 1, HDR, PARENT, META, CONTENT);
	cr_assert_eq(wire_parse(KEY, w.f, w.n, &jm), 0);
	cr_assert_null(jm.jm_session, "no session in the parent");
	jmsg_free(&jm);
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

/* ---- zmtp: the proxy's connection to a kernel's socket ---- */

static char tdir[64];
static int tn;

/* The test's directory goes with its worker process. */
static void
tdir_remove(void)
{
	char cmd[100];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tdir);
}

/* An ipc:// endpoint in a directory of this test's own. */
static const char *
endpoint(void)
{
	static char ep[128];

	if (!tdir[0]) {
		snprintf(tdir, sizeof(tdir), "/tmp/sandcell-zmtp-XXXXXX");
		cr_assert_not_null(mkdtemp(tdir));
		atexit(tdir_remove);
	}
	snprintf(ep, sizeof(ep), "ipc://%s/k-%d", tdir, ++tn);
	return ep;
}

struct kpeer {
	void *ctx, *s;
};

/* The kernel's side: a libzmq socket bound at ep. */
static void
kpeer_open(struct kpeer *k, int type, const char *ep)
{
	int linger = 0;

	k->ctx = zmq_ctx_new();
	k->s = zmq_socket(k->ctx, type);
	cr_assert(k->ctx && k->s);
	zmq_setsockopt(k->s, ZMQ_LINGER, &linger, sizeof(linger));
	cr_assert_eq(zmq_bind(k->s, ep), 0, "bind %s: %s", ep, zmq_strerror(errno));
}

static void
kpeer_close(struct kpeer *k)
{
	zmq_close(k->s);
	zmq_ctx_term(k->ctx);
}

/*
 * Runs the connection as the proxy's loop would, for up to ms; reads only
 * the handshake (what follows is for zmtp_recv).
 */
static void
pump(struct zmtp *z, int ms)
{
	const struct wire_frame *f;
	size_t n;

	struct pollfd p = {zmtp_fd(z), 0, 0};
	long wait = zmtp_wait(z, now_ms());

	p.events = (zmtp_events(z) & EPOLLIN ? POLLIN : 0) | (zmtp_events(z) & EPOLLOUT ? POLLOUT : 0);
	if (wait >= 0 && wait < ms)
		ms = (int)wait;
	if (p.fd >= 0 && poll(&p, 1, ms) > 0) {
		if (p.revents & ~POLLIN)
			zmtp_flush(z);
		if ((p.revents & POLLIN) && !zmtp_up(z))
			cr_assert_eq(zmtp_recv(z, &f, &n), -EAGAIN, "a message before READY");
	} else if (p.fd < 0) {
		usleep(ms * 1000);
	}
	zmtp_tick(z, now_ms());
}

/* The next message on z within 3 s (0), or what zmtp_recv said other than EAGAIN. */
static int
zrecv(struct zmtp *z, const struct wire_frame **f, size_t *n)
{
	uint64_t until = now_ms() + 3000;
	int rc;

	while ((rc = zmtp_recv(z, f, n)) == -EAGAIN && now_ms() < until)
		pump(z, 10);
	return rc;
}

/* A message from the kernel's socket within 3 s, while z is run. */
static int
krecv(struct kpeer *k, struct zmtp *z, zmq_msg_t *parts, int max)
{
	uint64_t until = now_ms() + 3000;
	int n = 0;

	while (now_ms() < until) {
		zmq_msg_init(&parts[n]);
		if (zmq_msg_recv(&parts[n], k->s, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&parts[n]);
			cr_assert_eq(n, 0, "a message arrived in part");
			pump(z, 10);
			continue;
		}
		if (!zmq_msg_more(&parts[n++]) || n == max)
			return n;
	}
	return n;
}

static void
kparts_close(zmq_msg_t *parts, int n)
{
	for (int i = 0; i < n; i++)
		zmq_msg_close(&parts[i]);
}

static void
ksend(struct kpeer *k, const char **frames, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cr_assert_geq(zmq_send(k->s, frames[i], strlen(frames[i]),
		                       i + 1 < n ? ZMQ_SNDMORE : 0),
		              0);
}

Test(zmtp, a_dealer_reaches_a_router_under_its_identity_and_gets_the_reply)
{
	const char *ep = endpoint();
	struct kpeer k;
	struct zmtp *z;
	zmq_msg_t parts[16];
	const struct wire_frame *f;
	struct jmsg jm;
	char msgid[40];
	size_t n;

	kpeer_open(&k, ZMQ_ROUTER, ep);
	z = zmtp_open(ZMTP_DEALER, ep, "session-1");
	cr_assert_eq(wire_send(z, KEY, "session-1", "execute_request",
	                       json_pack("{s:s}", "code", "x=1"), msgid),
	             0);
	int np = krecv(&k, z, parts, 16);
	cr_assert_eq(np, 7, "identity and six frames, got %d", np);
	cr_assert_eq(zmq_msg_size(&parts[0]), 9);
	cr_assert(!memcmp(zmq_msg_data(&parts[0]), "session-1", 9), "the identity is ours");
	struct wire_frame wfs[6];
	for (int i = 0; i < 6; i++)
		wfs[i] = (struct wire_frame){zmq_msg_data(&parts[i + 1]), zmq_msg_size(&parts[i + 1])};
	cr_assert_eq(wire_parse(KEY, wfs, 6, &jm), 0);
	cr_assert_str_eq(jm.jm_type, "execute_request");
	cr_assert_str_eq(json_string_value(json_object_get(jm.jm_content, "code")), "x=1");
	cr_assert(uuid_valid(msgid), "msgid '%s' is not a uuid", msgid);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(jm.jm_header, "msg_id")), msgid);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(jm.jm_header, "session")),
	                 "session-1");
	const char *date = cJSON_GetStringValue(cJSON_GetObjectItem(jm.jm_header, "date"));
	cr_assert(date && is_iso_utc_us(date), "date '%s'", date ? date : "(none)");
	jmsg_free(&jm);
	kparts_close(parts, np);

	const char *reply[] = {"session-1", DELIM, SIG, HDR, PARENT, META, CONTENT};
	ksend(&k, reply, 7);
	cr_assert_eq(zrecv(z, &f, &n), 0);
	cr_assert_eq(n, 6, "the router took the identity off");
	cr_assert_eq(wire_parse(KEY, f, n, &jm), 0);
	cr_assert_str_eq(jm.jm_type, "status");
	jmsg_free(&jm);
	cr_assert_eq(zmtp_recv(z, &f, &n), -EAGAIN, "one message was sent");
	zmtp_close(z);
	kpeer_close(&k);
}

Test(zmtp, empty_buffers_are_shed_and_the_next_messages_pass_both_ways)
{
	const char *ep = endpoint();
	const char *reply[] = {"session-1", DELIM, SIG, HDR, PARENT, META, CONTENT};
	struct kpeer k;
	struct zmtp *z;
	zmq_msg_t parts[16];
	const struct wire_frame *f;
	char msgid[40];
	size_t n;

	kpeer_open(&k, ZMQ_ROUTER, ep);
	z = zmtp_open(ZMTP_DEALER, ep, "session-1");
	for (int round = 0; round < 2; round++) {
		cr_assert_eq(wire_send(z, KEY, "session-1", "execute_request",
		                       json_pack("{s:s}", "code", "x=1"), msgid),
		             0);
		int np = krecv(&k, z, parts, 16);
		cr_assert_eq(np, 7, "round %d: identity and six frames, got %d", round, np);
		kparts_close(parts, np);
		ksend(&k, reply, 7);
		cr_assert_eq(zrecv(z, &f, &n), 0, "round %d: the reply", round);
		cr_assert_eq(n, 6);
		zmtp_shed(z); /* a message handed out: what holds it stays */
		cr_assert_not_null(z->z_in.zb_data);
		cr_assert_eq(f[1].wf_len, strlen(SIG));
		cr_assert(!memcmp(f[1].wf_data, SIG, strlen(SIG)), "the message held is intact");
		cr_assert_eq(zmtp_recv(z, &f, &n), -EAGAIN);
		zmtp_shed(z);
		cr_assert_null(z->z_in.zb_data, "round %d: the empty input buffer is freed", round);
		cr_assert_null(z->z_out.zb_data, "round %d: the empty output buffer is freed", round);
	}
	zmtp_close(z);
	kpeer_close(&k);
}

Test(zmtp, a_sub_subscribes_to_everything_a_pub_publishes)
{
	const char *ep = endpoint();
	struct kpeer k;
	struct zmtp *z;
	const struct wire_frame *f;
	const char *msg[] = {"kernel.1.status", DELIM, SIG, HDR, PARENT, META, CONTENT};
	size_t n;
	int rc = -EAGAIN;

	kpeer_open(&k, ZMQ_PUB, ep);
	z = zmtp_open(ZMTP_SUB, ep, NULL);
	/* a PUB drops what it publishes before the subscription is in */
	for (int i = 0; i < 300 && rc == -EAGAIN; i++) {
		ksend(&k, msg, 7);
		pump(z, 10);
		rc = zmtp_recv(z, &f, &n);
	}
	cr_assert_eq(rc, 0, "nothing published reached the SUB");
	cr_assert_eq(n, 7);
	cr_assert_eq(f[0].wf_len, strlen("kernel.1.status"));
	zmtp_close(z);
	kpeer_close(&k);
}

Test(zmtp, a_req_ping_comes_back_from_a_rep)
{
	const char *ep = endpoint();
	struct kpeer k;
	struct zmtp *z;
	zmq_msg_t parts[4];
	const struct wire_frame *f;
	size_t n;

	kpeer_open(&k, ZMQ_REP, ep);
	z = zmtp_open(ZMTP_REQ, ep, NULL);
	cr_assert_eq(zmtp_send(z, &(struct wire_frame){"ping", 4}, 1), 0);
	int np = krecv(&k, z, parts, 4);
	cr_assert_eq(np, 1, "the REP took the envelope off");
	cr_assert_eq(zmq_msg_size(&parts[0]), 4);
	cr_assert_eq(zmq_send(k.s, zmq_msg_data(&parts[0]), 4, 0), 4);
	kparts_close(parts, np);
	cr_assert_eq(zrecv(z, &f, &n), 0);
	cr_assert_eq(n, 2, "an empty delimiter, then the echo");
	cr_assert_eq(f[1].wf_len, 4);
	cr_assert(!memcmp(f[1].wf_data, "ping", 4));
	zmtp_close(z);
	kpeer_close(&k);
}

Test(zmtp, what_is_sent_before_the_kernel_binds_arrives_once_it_does)
{
	const char *ep = endpoint();
	struct kpeer k;
	struct zmtp *z;
	zmq_msg_t parts[16];

	z = zmtp_open(ZMTP_DEALER, ep, "session-1");
	cr_assert_eq(wire_send(z, KEY, "session-1", "kernel_info_request", json_object(), NULL),
	             0);
	for (int i = 0; i < 5; i++)
		pump(z, 10); /* refused: nothing is bound there yet */
	cr_assert_lt(zmtp_fd(z), 0, "connected to nothing");
	kpeer_open(&k, ZMQ_ROUTER, ep);
	int np = krecv(&k, z, parts, 16);
	cr_assert_eq(np, 7, "the request queued while down arrived (%d frames)", np);
	kparts_close(parts, np);
	zmtp_close(z);
	kpeer_close(&k);
}

/* A DEALER connected to a ROUTER that knows it (it said something first). */
static struct zmtp *
dealer_to_router(struct kpeer *k, const char *ep)
{
	struct zmtp *z;
	zmq_msg_t parts[4];

	kpeer_open(k, ZMQ_ROUTER, ep);
	z = zmtp_open(ZMTP_DEALER, ep, "session-1");
	cr_assert_eq(zmtp_send(z, &(struct wire_frame){"hello", 5}, 1), 0);
	kparts_close(parts, krecv(k, z, parts, 4));
	return z;
}

/* Sends n bytes of x as one frame after the routing identity. */
static void
ksend_big(struct kpeer *k, size_t n)
{
	char *big = malloc(n);

	cr_assert_not_null(big);
	memset(big, 'x', n);
	cr_assert_eq(zmq_send(k->s, "session-1", 9, ZMQ_SNDMORE), 9);
	cr_assert_eq(zmq_send(k->s, big, n, 0), (int)n);
	free(big);
}

Test(zmtp, a_message_over_the_limit_is_skipped_as_it_passes_and_the_next_arrives)
{
	const char *ep = endpoint();
	struct kpeer k;
	struct zmtp *z;
	const struct wire_frame *f;
	const char *good[] = {"session-1", DELIM, SIG, HDR, PARENT, META, CONTENT};
	size_t n, most = 0;
	int rc;

	z = dealer_to_router(&k, ep);
	ksend_big(&k, ZMTP_MAX_BYTES + 1);
	ksend(&k, good, 7);
	uint64_t until = now_ms() + 10000;
	while ((rc = zmtp_recv(z, &f, &n)) == -EAGAIN && now_ms() < until) {
		if (z->z_in.zb_cap > most)
			most = z->z_in.zb_cap;
		pump(z, 10);
	}
	cr_assert_eq(rc, -E2BIG, "the big message is reported dropped");
	cr_assert_lt(most, (size_t)1 << 20, "%zu bytes were held for a message skipped", most);
	cr_assert_eq(zrecv(z, &f, &n), 0, "the message after it arrives");
	cr_assert_eq(n, 6);
	cr_assert_eq(zmtp_fd(z) >= 0, true, "the connection was kept");
	cr_assert_eq(z->z_conns, 1);
	zmtp_close(z);
	kpeer_close(&k);
}

Test(zmtp, a_message_at_the_limit_arrives_whole)
{
	const char *ep = endpoint();
	struct kpeer k;
	struct zmtp *z;
	const struct wire_frame *f;
	size_t n;

	z = dealer_to_router(&k, ep);
	ksend_big(&k, ZMTP_MAX_BYTES);
	cr_assert_eq(zrecv(z, &f, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_eq(f[0].wf_len, ZMTP_MAX_BYTES);
	cr_assert_eq(((const char *)f[0].wf_data)[ZMTP_MAX_BYTES - 1], 'x');
	zmtp_close(z);
	kpeer_close(&k);
}

/*
 * A read that got less than it asked for emptied the socket, so the call
 * after it makes none (the loop's epoll says when more came); the call
 * after that reads what came meanwhile: nothing is lost to the skip.
 */
Test(zmtp, after_a_read_that_emptied_the_socket_the_next_call_reads_nothing_then_all_is_read)
{
	const char *ep = endpoint();
	struct kpeer k;
	struct zmtp *z;
	const struct wire_frame *f;
	size_t n;
	const char *first[] = {"session-1", "first"}, *second[] = {"session-1", "second"};

	z = dealer_to_router(&k, ep);
	ksend(&k, first, 2);
	cr_assert_eq(zrecv(z, &f, &n), 0);
	cr_assert(n == 1 && f[0].wf_len == 5 && !memcmp(f[0].wf_data, "first", 5));
	ksend(&k, second, 2);
	struct pollfd pfd = {.fd = zmtp_fd(z), .events = POLLIN};
	cr_assert_eq(poll(&pfd, 1, 3000), 1, "the second message is in the socket");
	cr_assert_eq(zmtp_recv(z, &f, &n), -EAGAIN, "no read right after one that emptied it");
	cr_assert_eq(zmtp_recv(z, &f, &n), 0, "the next call reads it");
	cr_assert(n == 1 && f[0].wf_len == 6 && !memcmp(f[0].wf_data, "second", 6));
	cr_assert_eq(zmtp_recv(z, &f, &n), -EAGAIN);
	zmtp_close(z);
	kpeer_close(&k);
}

Test(zmtp, a_message_of_too_many_frames_is_dropped_whole)
{
	const char *ep = endpoint();
	struct kpeer k;
	struct zmtp *z;
	const struct wire_frame *f;
	struct jmsg jm;
	const char *frames[101];
	size_t n;

	frames[0] = "session-1";
	for (int i = 1; i < 95; i++)
		frames[i] = "id";
	frames[95] = DELIM;
	frames[96] = SIG;
	frames[97] = HDR;
	frames[98] = PARENT;
	frames[99] = META;
	frames[100] = CONTENT;
	z = dealer_to_router(&k, ep);
	ksend(&k, frames, 101);
	cr_assert_eq(zrecv(z, &f, &n), -E2BIG);
	const char *ok[] = {"session-1", DELIM, SIG, HDR, PARENT, META, CONTENT};
	ksend(&k, ok, 7);
	cr_assert_eq(zrecv(z, &f, &n), 0, "the socket still works afterwards");
	cr_assert_eq(wire_parse(KEY, f, n, &jm), 0);
	jmsg_free(&jm);
	zmtp_close(z);
	kpeer_close(&k);
}

Test(zmtp, a_kernel_that_goes_away_and_comes_back_is_connected_again)
{
	const char *ep = endpoint();
	struct kpeer k;
	struct zmtp *z;
	zmq_msg_t parts[4];
	int np;

	kpeer_open(&k, ZMQ_ROUTER, ep);
	z = zmtp_open(ZMTP_DEALER, ep, "session-1");
	cr_assert_eq(zmtp_send(z, &(struct wire_frame){"one", 3}, 1), 0);
	kparts_close(parts, krecv(&k, z, parts, 4));
	kpeer_close(&k);
	for (int i = 0; i < 20 && zmtp_fd(z) >= 0; i++) {
		const struct wire_frame *f;
		size_t n;
		pump(z, 10);
		cr_assert_eq(zmtp_recv(z, &f, &n), -EAGAIN);
	}
	cr_assert_lt(zmtp_fd(z), 0, "the closed connection was noticed");
	kpeer_open(&k, ZMQ_ROUTER, ep);
	cr_assert_eq(zmtp_send(z, &(struct wire_frame){"two", 3}, 1), 0);
	np = krecv(&k, z, parts, 4);
	cr_assert_eq(np, 2, "identity and the message sent while down");
	cr_assert_eq(zmq_msg_size(&parts[1]), 3);
	cr_assert(!memcmp(zmq_msg_data(&parts[1]), "two", 3));
	kparts_close(parts, np);
	cr_assert_geq(z->z_conns, 2);
	zmtp_close(z);
	kpeer_close(&k);
}

Test(zmtp, a_peer_that_speaks_no_zmtp_is_dropped_and_tried_again)
{
	const char *ep = endpoint();
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), c;
	struct zmtp *z;
	char junk[100];

	memset(junk, 'H', sizeof(junk));
	snprintf(un.sun_path, sizeof(un.sun_path), "%s", ep + 6);
	cr_assert_eq(bind(l, (struct sockaddr *)&un, sizeof(un)), 0);
	cr_assert_eq(listen(l, 4), 0);
	z = zmtp_open(ZMTP_DEALER, ep, "session-1");
	cr_assert_geq(c = accept(l, NULL, NULL), 0);
	cr_assert_eq(write(c, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	for (int i = 0; i < 50 && z->z_conns < 2; i++) {
		const struct wire_frame *f;
		size_t n;
		pump(z, 10);
		cr_assert_eq(zmtp_recv(z, &f, &n), -EAGAIN, "junk made a message");
	}
	cr_assert_geq(z->z_conns, 2, "not connected again after the junk");
	close(c);
	close(l);
	zmtp_close(z);
}

/* A kernel's side of the stream: greeting, READY, then frames. */
static size_t
stream(unsigned char *out, const char *const *frames, size_t n, bool long_last)
{
	static const char ready[] = "\5READY\13Socket-Type\0\0\0\6ROUTER";
	size_t o = 0;

	memset(out, 0, 64);
	out[0] = 0xff, out[8] = 1, out[9] = 0x7f, out[10] = 3, out[11] = 1;
	memcpy(out + 12, "NULL", 4);
	o = 64;
	out[o++] = 4;
	out[o++] = sizeof(ready) - 1;
	memcpy(out + o, ready, sizeof(ready) - 1);
	o += sizeof(ready) - 1;
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(frames[i]);
		unsigned more = i + 1 < n;
		if (long_last && i + 1 == n) {
			out[o++] = 2 | more;
			for (int b = 7; b >= 0; b--)
				out[o++] = (uint64_t)len >> (8 * b);
		} else {
			out[o++] = more;
			out[o++] = len;
		}
		memcpy(out + o, frames[i], len);
		o += len;
	}
	return o;
}

Test(zmtp, a_stream_that_comes_a_byte_at_a_time_gives_the_same_message)
{
	const char *frames[] = {DELIM, SIG, HDR, PARENT, META, CONTENT};
	unsigned char s[1024];
	size_t len = stream(s, frames, 6, true), n;
	struct zmtp *z = zmtp_open_buffer(ZMTP_DEALER);
	const struct wire_frame *f;
	struct jmsg jm;

	for (size_t i = 0; i + 1 < len; i++) {
		cr_assert_eq(zmtp_feed(z, s + i, 1), 0);
		cr_assert_eq(zmtp_recv(z, &f, &n), -EAGAIN, "a message after %zu of %zu bytes", i + 1, len);
	}
	cr_assert_eq(zmtp_feed(z, s + len - 1, 1), 0);
	cr_assert_eq(zmtp_recv(z, &f, &n), 0);
	cr_assert_eq(n, 6);
	cr_assert_eq(wire_parse(KEY, f, n, &jm), 0);
	cr_assert_str_eq(jm.jm_type, "status");
	jmsg_free(&jm);
	cr_assert_eq(zmtp_recv(z, &f, &n), -EAGAIN);
	zmtp_close(z);
}

Test(zmtp, a_bad_greeting_or_handshake_ends_the_connection)
{
	const char *frames[] = {"x"};
	unsigned char s[256];
	const struct wire_frame *f;
	size_t len = stream(s, frames, 1, false), n;
	static const struct {
		size_t at;
		unsigned char v;
		const char *what;
	} breaks[] = {
	    {0, 0x00, "no signature"},  {9, 0x00, "ZMTP 1.0"},
	    {10, 2, "ZMTP 2"},          {12, 'P', "the PLAIN mechanism"},
	    {64, 0, "a message before READY"}, {67, 'X', "another command"},
	    {94, 0x80, "reserved flag bits"},
	};

	for (size_t i = 0; i < sizeof(breaks) / sizeof(breaks[0]); i++) {
		unsigned char b[256];
		struct zmtp *z = zmtp_open_buffer(ZMTP_DEALER);
		memcpy(b, s, len);
		b[breaks[i].at] = breaks[i].v;
		cr_assert_eq(zmtp_feed(z, b, len), 0);
		cr_assert_eq(zmtp_recv(z, &f, &n), -EAGAIN, "%s gave a message", breaks[i].what);
		cr_assert(!zmtp_up(z), "%s", breaks[i].what);
		cr_assert_eq(zmtp_recv(z, &f, &n), -EAGAIN);
		zmtp_close(z);
	}
	struct zmtp *z = zmtp_open_buffer(ZMTP_DEALER);
	cr_assert_eq(zmtp_feed(z, s, len), 0);
	cr_assert_eq(zmtp_recv(z, &f, &n), 0, "the stream unbroken is fine");
	zmtp_close(z);
}
