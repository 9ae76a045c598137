/*
 * frame_test.c — an HTTP request's text as frame.c reads it: what may start a
 * request line, the path's escapes and what is echoed of a client's string,
 * and where a request's body ends.
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../broker/broker.h"

/* ---- frame_unescape and frame_quote: paths and what is echoed of them ---- */

Test(frame_unescape, decodes_once_and_keeps_encoded_slash_and_nul)
{
	static const struct {
		const char *in, *out;
		bool bad;
	} cases[] = {
	    {"/contexts/abc", "/contexts/abc", false},
	    {"/a%20b", "/a b", false},
	    {"/%41%62%7e", "/Ab~", false},
	    {"/x%252f", "/x%2f", false}, /* once: %25 is '%', the rest is text */
	    {"/ctx%2frestart", "/ctx%2frestart", true},
	    {"/ctx%2Frestart", "/ctx%2Frestart", true},
	    {"/ctx%00/restart", "/ctx%00/restart", true},
	    {"/a%2", "/a%2", false},
	    {"/a%", "/a%", false},
	    {"/a%zz", "/a%zz", false},
	    {"%", "%", false},
	    {"", "", false},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char buf[64];
		bool bad = !cases[i].bad;
		snprintf(buf, sizeof(buf), "%s", cases[i].in);
		size_t n = frame_unescape(buf, &bad);
		cr_expect_str_eq(buf, cases[i].out, "'%s'", cases[i].in);
		cr_expect_eq(n, strlen(cases[i].out), "'%s'", cases[i].in);
		cr_expect_eq(bad, cases[i].bad, "'%s'", cases[i].in);
	}
}

/* query values: an encoded '/' is one, and said; NUL still stays encoded and is bad */
Test(frame_unescape, the_path_form_decodes_slash_but_not_nul)
{
	char buf[64];
	bool bad;

	snprintf(buf, sizeof(buf), "%%2Fhome%%2fuser%%2Fa%%20b.csv");
	cr_expect_eq(frame_unescape_path(buf, &bad), strlen("/home/user/a b.csv"));
	cr_expect_str_eq(buf, "/home/user/a b.csv");
	cr_expect(bad); /* it had one: a path with it is still refused */
	snprintf(buf, sizeof(buf), "a%%00b%%252F");
	frame_unescape_path(buf, &bad);
	cr_expect_str_eq(buf, "a%00b%2F"); /* once: %25 is '%' */
	cr_expect(bad);
}

Test(frame_quote, echoes_printable_ascii_escapes_the_rest_and_stays_bounded)
{
	char out[16];

	cr_expect_str_eq(frame_quote("abc-1", out, sizeof(out)), "abc-1");
	cr_expect_str_eq(frame_quote("a\x01\xff\\", out, sizeof(out)),
	                 "a\\x01\\xff\\x5c");
	cr_expect_str_eq(frame_quote("", out, sizeof(out)), "");
	frame_quote("0123456789abcdefghij", out, sizeof(out));
	cr_expect_eq(strlen(out), sizeof(out) - 1);
	cr_expect_str_eq(out + strlen(out) - 3, "...", "'%s' does not say it was cut",
	                 out);
	for (int i = 0; i < 256;
	     i++) { /* any byte, any cut: bounded, terminated, printable */
		char in[40], small[11];
		memset(in, i ? i : 1, sizeof(in) - 1);
		in[sizeof(in) - 1] = '\0';
		frame_quote(in + i % 7, small, sizeof(small));
		cr_assert_lt(strlen(small), sizeof(small));
		for (char *p = small; *p; p++)
			cr_assert(*p >= 0x20 && *p < 0x7f, "byte %d gave '%s'", i, small);
	}
}

/* ---- frame_request_line: what may start an HTTP request line ---- */

Test(frame_request_line, a_method_a_space_and_a_target_start_a_request_line)
{
	static const struct {
		const char *b;
		size_t n; /* 0: strlen */
		int want;
	} cases[] = {
	    {"GET /health HTTP/1.1\r\n", 0, 1},
	    {"POST /execute", 0, 1},
	    {"M-SEARCH *", 0, 1},
	    {"hello there\n", 0, 1}, /* MHD answers that one 400 itself */
	    {"\r\nGET /", 0, 1},     /* an empty line first is allowed */
	    {"", 0, 0},
	    {"G", 0, 0},
	    {"GET", 0, 0},
	    {"GET ", 0, 0},
	    {"\r\n", 0, 0},
	    {"GARBAGE\r\n\r\n", 0, -1},
	    {"GET\r\n", 0, -1},
	    {" / HTTP/1.1", 0, -1},
	    {"GET  /", 0, -1},
	    {"GET \x01", 0, -1},
	    {"GET \xff", 0, -1},
	    {"\0\0\0\r\n", 5, -1},
	    {"\x16\x03\x01\x02\x00", 5, -1}, /* TLS */
	    {"\x01\x02\x03 zz", 0, -1},
	    {"GET\t/", 0, -1},
	    {"\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n", 0, -1},
	    {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 0, -1}, /* 33: no method is that long */
	    {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 0, 0},   /* 32 */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = cases[i].n ? cases[i].n : strlen(cases[i].b);
		cr_expect_eq(frame_request_line(cases[i].b, n), cases[i].want,
		             "case %zu '%.*s'", i, (int)n, cases[i].b);
	}
}

/* ---- frame_head: where a request's body ends, or why that is unclear ---- */

Test(frame_head, one_length_or_chunked_passes_anything_else_is_refused_naming_why)
{
	static const struct {
		const char *head;
		int want;
		const char *says; /* in the reason, when refused */
	} cases[] = {
	    {"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 1, NULL},
	    /* bare LFs, as MHD takes them */
	    {"\r\nGET / HTTP/1.1\nHost: x\n\n", 1, NULL},
	    {"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 1, NULL},
	    {"POST / HTTP/1.1\r\ncontent-length:5\r\n\r\n", 1, NULL},
	    {"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 05\r\n\r\n", 1,
	     NULL},
	    {"POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", 1, NULL},
	    /* no version, a line without a colon: MHD's to refuse */
	    {"GET /\r\n", 1, NULL},
	    {"GET / HTTP/1.1\r\nNo colon\r\n\r\n", 1, NULL},
	    {"GET / HTTP/1.1", 0, NULL},
	    {"GET / HTTP/1.1\r\nHost: x\r\n", 0, NULL},
	    {"GET / HTTP/1.1\r\nHost: x\r\n\r", 0, NULL},
	    {"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
	     -1, "both"},
	    {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
	     -1, "both"},
	    {"POST / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n", -1,
	     "differ"},
	    {"POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n", -1, "one decimal"},
	    {"POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", -1, "one decimal"},
	    {"POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", -1, "one decimal"},
	    {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", -1, "one decimal"},
	    {"POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", -1, "one decimal"},
	    {"POST / HTTP/1.1\r\nContent-Length: 5 \r\n\r\n", -1, "one decimal"},
	    {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", -1,
	     "other than chunked"},
	    {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", -1,
	     "other than"},
	    {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", -1,
	     "other than"},
	    {"POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", -1, "other than"},
	    {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked \r\n\r\n", -1, "other than"},
	    {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
	     "Transfer-Encoding: chunked\r\n\r\n",
	     -1, "other than"},
	    {"GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", -1, "obs-fold"},
	    {"GET / HTTP/1.1\r\nX-A: a\r\n\tb\r\n\r\n", -1, "obs-fold"},
	    {"GET / HTTP/1.1\r\n Host: x\r\n\r\n", -1, "obs-fold"},
	    {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", -1, "header name"},
	    {"GET / HTTP/1.1\r\n: x\r\n\r\n", -1, "header name"},
	    /* refused before the head ends */
	    {"GET / HTTP/1.1\r\nX-A: a\r\n b\r\n", -1, "obs-fold"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *why = NULL;
		int got = frame_head(cases[i].head, strlen(cases[i].head), &why);
		cr_expect_eq(got, cases[i].want, "case %zu '%s': %d (%s)", i,
		             cases[i].head, got, why ? why : "");
		if (cases[i].says)
			cr_expect(why && strstr(why, cases[i].says), "case %zu: '%s'", i,
			          why ? why : "(none)");
	}
}

/* Fields as MHD parsed them: the first reason found is the one given. */
Test(frame_field, the_first_reason_stays_and_a_huge_length_is_left_to_the_413)
{
	struct frame fr = {0};

	frame_field(&fr, "Host", 4, "x", 1);
	frame_field(&fr, "Content-Length", 14, "18446744073709551616", 20);
	cr_expect_null(fr.fr_why, "a length too large is a 413, not a framing error");
	fr = (struct frame){0};
	frame_field(&fr, "Transfer-Encoding", 17, "chunked", 7);
	frame_field(&fr, "content-length", 14, "3", 1);
	cr_expect(fr.fr_why && strstr(fr.fr_why, "both"), "%s", fr.fr_why);
	frame_field(&fr, "X", 1, "y", 1);
	cr_expect(strstr(fr.fr_why, "both"), "the first reason stays: %s", fr.fr_why);
}
