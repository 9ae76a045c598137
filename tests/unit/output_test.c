/*
 * output_test.c — kernel iopub messages to E2B's NDJSON events: the MIME key
 * mapping of results, E2B's text/plain clean-up (ANSI colours, one pair of
 * quotes), each iopub type's line, and the shape of every line (one JSON
 * object, one '\n', ASCII only).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strcasestr, strptime, timegm, memmem when built without the       \
                       Makefile flags */
#endif
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "../../proxy/proxy.h"
#include "shapes.h"

/* ---- helpers ---- */

static json_t *
parse(const char *s)
{
	json_error_t e;
	json_t *j = json_loads(s, JSON_DECODE_ANY, &e);

	cr_assert_not_null(j, "bad JSON in test: %s: %s", s, e.text);
	return j;
}

/* Checks b holds whole NDJSON lines, each one ASCII JSON object; returns them. */
static json_t *
lines_of(const struct buf *b)
{
	json_t *arr = json_array();
	size_t n = buf_pending(b), start = 0;
	const char *p = buf_head(b);

	cr_assert(n > 0, "no output");
	cr_assert_eq(p[n - 1], '\n', "output does not end with a newline");
	for (size_t i = 0; i < n; i++) {
		cr_assert_lt((unsigned char)p[i], 0x80, "byte %zu (%#x) is not ASCII", i,
		             (unsigned char)p[i]);
		if (p[i] != '\n')
			continue;
		cr_assert_gt(i, start, "empty line at byte %zu", i);
		json_error_t e;
		json_t *j = json_loadb(p + start, i - start, 0, &e);
		cr_assert_not_null(j, "line is not JSON: %.*s (%s)", (int)(i - start),
		                   p + start, e.text);
		cr_assert(json_is_object(j), "line is not an object: %.*s",
		          (int)(i - start), p + start);
		json_array_append_new(arr, j);
		start = i + 1;
	}
	return arr;
}

/* Runs one iopub message and returns its single line as an object. */
static json_t *
one_line_as(const char *type, const char *content, bool display_is_result)
{
	struct buf b = {0};
	json_t *c = parse(content);

	cr_assert(output_iopub(&b, type, c, display_is_result), "%s produced no line",
	          type);
	json_t *lines = lines_of(&b);
	cr_assert_eq(json_array_size(lines), 1, "%s produced %zu lines", type,
	             json_array_size(lines));
	json_t *line = json_incref(json_array_get(lines, 0));
	json_decref(lines);
	json_decref(c);
	buf_free(&b);
	return line;
}

static json_t *
one_line(const char *type, const char *content)
{
	return one_line_as(type, content, false);
}

static const char *
str_of(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	cr_assert_not_null(s, "no string '%s'", key);
	return s;
}

/* The text/plain of a result after output_result's clean-up. */
static char *
plain(const char *text)
{
	json_t *data = json_pack("{s:s}", "text/plain", text);
	json_t *r = output_result(data, true);
	char *s = strdup(str_of(r, "text"));

	json_decref(r);
	json_decref(data);
	return s;
}

/* ---- output_result ---- */

Test(output_result, every_known_mime_type_goes_under_its_e2b_key)
{
	static const struct {
		const char *mime, *key, *value;
	} cases[] = {
	    {"text/plain", "text", "\"42\""},
	    {"text/html", "html", "\"<b>'bold'</b>\""},
	    {"text/markdown", "markdown", "\"# title\""},
	    {"image/svg+xml", "svg", "\"<svg/>\""},
	    {"image/png", "png", "\"iVBORw0KGgo=\""},
	    {"image/jpeg", "jpeg", "\"/9j/4AAQ\""},
	    {"application/pdf", "pdf", "\"JVBERi0=\""},
	    {"text/latex", "latex", "\"$x^2$\""},
	    {"application/json", "json", "{\"a\":[1,2,{\"b\":null}]}"},
	    {"application/javascript", "javascript", "\"console.log(1)\""},
	    {"e2b/data", "data", "{\"rows\":[[1,2]]}"},
	    {"e2b/chart", "chart", "{\"type\":\"line\",\"elements\":[]}"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *val = parse(cases[i].value);
		json_t *data = json_object();
		json_object_set(data, cases[i].mime, val);
		json_t *r = output_result(data, false);
		cr_assert_str_eq(str_of(r, "type"), "result");
		cr_assert(json_equal(json_object_get(r, cases[i].key), val), "%s -> %s",
		          cases[i].mime, cases[i].key);
		cr_assert_null(json_object_get(r, cases[i].mime), "%s kept its MIME name",
		               cases[i].mime);
		cr_assert_null(json_object_get(r, "extra"), "%s went to extra",
		               cases[i].mime);
		cr_assert_eq(json_object_size(r), 3, "%s: type, key, is_main_result",
		             cases[i].mime);
		json_decref(r);
		json_decref(data);
		json_decref(val);
	}
}

Test(output_result, all_mime_types_at_once_map_side_by_side)
{
	json_t *data =
	    parse("{\"text/plain\":\"'t'\",\"text/html\":\"<p/>\",\"image/png\":\"AA==\","
	          "\"application/json\":{\"k\":1},\"e2b/chart\":{}}");
	json_t *r = output_result(data, true);

	cr_assert_str_eq(str_of(r, "text"), "t");
	cr_assert_str_eq(str_of(r, "html"), "<p/>");
	cr_assert_str_eq(str_of(r, "png"), "AA==");
	cr_assert(json_equal(json_object_get(r, "json"),
	                     json_object_get(data, "application/json")));
	cr_assert(json_is_object(json_object_get(r, "chart")));
	cr_assert_eq(json_object_size(r), 7);
	json_decref(r);
	json_decref(data);
}

Test(output_result, unknown_mime_types_go_under_extra_by_their_mime_name)
{
	json_t *data =
	    parse("{\"text/plain\":\"x\",\"application/vnd.custom+json\":{\"a\":1},"
	          "\"text/x-foo\":\"bar\",\"TEXT/HTML\":\"case matters\"}");
	json_t *r = output_result(data, true);
	json_t *extra = json_object_get(r, "extra");

	cr_assert(json_is_object(extra));
	cr_assert_eq(json_object_size(extra), 3);
	cr_assert(json_equal(json_object_get(extra, "application/vnd.custom+json"),
	                     json_object_get(data, "application/vnd.custom+json")));
	cr_assert_str_eq(str_of(extra, "text/x-foo"), "bar");
	cr_assert_str_eq(str_of(extra, "TEXT/HTML"), "case matters");
	cr_assert_null(json_object_get(r, "html"));
	cr_assert_str_eq(str_of(r, "text"), "x");
	json_decref(r);
	json_decref(data);
}

Test(output_result, is_main_result_follows_the_flag_and_an_empty_bundle_still_has_it)
{
	json_t *data = json_object();
	json_t *r = output_result(data, true);

	cr_assert(json_is_true(json_object_get(r, "is_main_result")));
	cr_assert_eq(json_object_size(r), 2, "only type and is_main_result");
	json_decref(r);
	r = output_result(data, false);
	cr_assert(json_is_false(json_object_get(r, "is_main_result")));
	json_decref(r);
	json_decref(data);
}

Test(output_result, text_plain_loses_one_pair_of_matching_surrounding_quotes)
{
	static const struct {
		const char *name, *in, *want;
	} cases[] = {
	    {"single quotes", "'abc'", "abc"},
	    {"double quotes", "\"abc\"", "abc"},
	    {"mismatched quotes", "'abc\"", "'abc\""},
	    {"mismatched the other way", "\"abc'", "\"abc'"},
	    {"a lone single quote", "'", "'"},
	    {"a lone double quote", "\"", "\""},
	    {"two single quotes", "''", ""},
	    {"two double quotes", "\"\"", ""},
	    {"only one pair goes", "''abc''", "'abc'"},
	    {"quotes inside stay", "'it's'", "it's"},
	    {"leading quote only", "'abc", "'abc"},
	    {"trailing quote only", "abc'", "abc'"},
	    {"no quotes", "abc", "abc"},
	    {"empty", "", ""},
	    {"quotes with spaces around", " 'abc' ", " 'abc' "},
	    {"newline inside", "'a\nb'", "a\nb"},
	    {"unicode inside", "'h\xc3\xa9llo'", "h\xc3\xa9llo"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = plain(cases[i].in);
		cr_expect_str_eq(got, cases[i].want, "%s: '%s' gave '%s'", cases[i].name,
		                 cases[i].in, got);
		free(got);
	}
}

Test(output_result, text_plain_loses_ansi_colour_codes_before_quotes_are_stripped)
{
	static const struct {
		const char *name, *in, *want;
	} cases[] = {
	    {"red", "\x1b[31mred\x1b[0m", "red"},
	    {"bold green, quoted", "\x1b[1;32m'ok'\x1b[0m", "ok"},
	    {"deno number", "\x1b[33m42\x1b[39m", "42"},
	    {"256 colours", "\x1b[38;5;208morange\x1b[0m", "orange"},
	    {"cursor move", "a\x1b[2Kb", "ab"},
	    {"no codes", "plain", "plain"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = plain(cases[i].in);
		cr_expect_str_eq(got, cases[i].want, "%s", cases[i].name);
		free(got);
	}
}

Test(output_result, other_mime_types_keep_their_ansi_codes_and_quotes)
{
	json_t *data = json_pack("{s:s, s:s}", "text/html", "'\x1b[31mx\x1b[0m'",
	                         "text/markdown", "\"md\"");
	json_t *r = output_result(data, false);

	cr_assert_str_eq(str_of(r, "html"), "'\x1b[31mx\x1b[0m'");
	cr_assert_str_eq(str_of(r, "markdown"), "\"md\"");
	json_decref(r);
	json_decref(data);
}

Test(output_strip_ansi, removes_csi_sequences_and_keeps_everything_else)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
	    {"", ""},
	    {"\x1b[0m", ""},
	    {"a\x1b[1;31;40mb\x1b[0mc", "abc"},
	    {"unterminated \x1b[12;", "unterminated "},
	    {"ends with ESC [\x1b[", "ends with ESC ["},
	    {"lone \x1b escape", "lone \x1b escape"},
	    {"trailing ESC \x1b", "trailing ESC \x1b"},
	    {"h\xc3\xa9llo \x1b[4m\xe2\x98\x83\x1b[24m", "h\xc3\xa9llo \xe2\x98\x83"},
	    {"[31m no ESC", "[31m no ESC"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = output_strip_ansi(cases[i].in);
		cr_expect_str_eq(got, cases[i].want, "case %zu", i);
		free(got);
	}
}

/* ---- output_iopub ---- */

Test(output_iopub, stream_stdout_and_stderr_become_lines_with_a_utc_microsecond_timestamp)
{
	static const struct {
		const char *name, *want;
	} cases[] = {
	    {"stdout", "stdout"},
	    {"stderr", "stderr"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char content[128];
		snprintf(content, sizeof(content),
		         "{\"name\":\"%s\",\"text\":\"hi\\n\\u00e9\"}", cases[i].name);
		time_t before = time(NULL);
		json_t *l = one_line("stream", content);
		time_t after = time(NULL);
		cr_assert_str_eq(str_of(l, "type"), cases[i].want);
		cr_assert_str_eq(str_of(l, "text"), "hi\n\xc3\xa9");
		const char *ts = str_of(l, "timestamp");
		cr_assert(is_iso_utc_us(ts), "timestamp '%s'", ts);
		struct tm tm = {0};
		cr_assert_not_null(strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm));
		time_t t = timegm(&tm);
		cr_assert(t >= before - 1 && t <= after + 1,
		          "timestamp %s is not now (UTC)", ts);
		cr_assert_eq(json_object_size(l), 3);
		json_decref(l);
	}
}

/* 2.5 MiB of "é" (2 bytes each, so a cut at 1 MiB could split one) */
Test(output_iopub, a_huge_stream_text_becomes_bounded_lines_cut_between_characters)
{
	size_t n = (5u << 19) / 2 * 2 + 1;
	char *text = malloc(n + 1);
	for (size_t i = 0; i + 1 < n; i += 2)
		memcpy(text + i, "\xc3\xa9", 2);
	text[n - 1] = 'x'; /* odd length: the 1 MiB mark falls inside a character */
	text[n] = '\0';
	json_t *c = json_pack("{s:s, s:s%}", "name", "stdout", "text", text, n);
	struct buf b = {0};

	cr_assert(output_iopub(&b, "stream", c, false));
	json_t *lines = lines_of(&b);
	cr_assert_eq(json_array_size(lines), 3, "%zu lines", json_array_size(lines));
	struct buf all = {0};
	json_t *l;
	size_t i;
	json_array_foreach(lines, i, l)
	{
		json_t *t = json_object_get(l, "text");
		cr_assert_str_eq(str_of(l, "type"), "stdout");
		cr_assert_leq(json_string_length(t), OUTPUT_LINE_TEXT);
		buf_append(&all, json_string_value(t), json_string_length(t));
	}
	cr_assert_eq(buf_pending(&all), n);
	cr_assert(!memcmp(buf_head(&all), text, n), "the lines do not add up to the text");
	buf_free(&all);
	buf_free(&b);
	json_decref(lines);
	json_decref(c);
	free(text);
}

Test(output_iopub, a_stream_without_a_name_or_string_text_produces_nothing)
{
	static const char *contents[] = {
	    "{\"text\":\"x\"}",
	    "{\"name\":\"stdout\"}",
	    "{\"name\":\"stdout\",\"text\":5}",
	    "{\"name\":7,\"text\":\"x\"}",
	    "{}",
	};

	for (size_t i = 0; i < sizeof(contents) / sizeof(contents[0]); i++) {
		struct buf b = {0};
		json_t *c = parse(contents[i]);
		cr_expect_not(output_iopub(&b, "stream", c, false), "%s", contents[i]);
		cr_expect_not(output_iopub(&b, "stream", c, true), "%s", contents[i]);
		cr_expect_eq(buf_pending(&b), 0, "%s wrote output", contents[i]);
		json_decref(c);
		buf_free(&b);
	}
}

Test(output_iopub, execute_result_is_the_main_result_and_display_data_is_not)
{
	json_t *l = one_line("execute_result",
	                     "{\"execution_count\":1,\"data\":{\"text/plain\":\"'abc'\"},"
	                     "\"metadata\":{}}");

	cr_assert_str_eq(str_of(l, "type"), "result");
	cr_assert_str_eq(str_of(l, "text"), "abc");
	cr_assert(json_is_true(json_object_get(l, "is_main_result")));
	json_decref(l);

	l = one_line("display_data", "{\"data\":{\"image/png\":\"AA==\",\"text/plain\":"
	                             "\"<Figure>\"},\"metadata\":{}}");
	cr_assert_str_eq(str_of(l, "type"), "result");
	cr_assert_str_eq(str_of(l, "png"), "AA==");
	cr_assert_str_eq(str_of(l, "text"), "<Figure>");
	cr_assert(json_is_false(json_object_get(l, "is_main_result")));
	json_decref(l);
}

Test(output_iopub,
     display_data_with_text_is_the_main_result_for_kernels_that_display_values)
{
	/* IRkernel shows a value as display_data; the proxy passes display_is_result */
	static const struct {
		const char *type, *content;
		bool display_is_result, want_main;
	} cases[] = {
	    {"display_data", "{\"data\":{\"text/plain\":\"[1] 2\"}}", true, true},
	    {"display_data", "{\"data\":{\"text/plain\":\"[1] 2\"}}", false, false},
	    {"display_data", "{\"data\":{\"image/png\":\"AA==\"}}", true, false},
	    {"display_data", "{\"data\":{}}", true, false},
	    {"execute_result", "{\"data\":{\"image/png\":\"AA==\"}}", true, true},
	    {"execute_result", "{\"data\":{\"image/png\":\"AA==\"}}", false, true},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *l = one_line_as(cases[i].type, cases[i].content,
		                        cases[i].display_is_result);
		cr_expect_eq(json_is_true(json_object_get(l, "is_main_result")),
		             cases[i].want_main, "%s %s display_is_result=%d",
		             cases[i].type, cases[i].content, cases[i].display_is_result);
		json_decref(l);
	}
}

Test(output_iopub, a_result_without_a_data_object_produces_nothing)
{
	static const char *contents[] = {"{}", "{\"data\":\"x\"}", "{\"data\":null}",
	                                 "{\"data\":[]}"};

	for (size_t i = 0; i < sizeof(contents) / sizeof(contents[0]); i++) {
		struct buf b = {0};
		json_t *c = parse(contents[i]);
		for (int flag = 0; flag < 2; flag++) {
			cr_expect_not(output_iopub(&b, "execute_result", c, flag), "%s",
			              contents[i]);
			cr_expect_not(output_iopub(&b, "display_data", c, flag), "%s",
			              contents[i]);
		}
		cr_expect_eq(buf_pending(&b), 0);
		json_decref(c);
		buf_free(&b);
	}
}

Test(output_iopub, error_joins_traceback_lines_with_newlines)
{
	json_t *l =
	    one_line("error", "{\"ename\":\"ValueError\",\"evalue\":\"bad \\\"v\\\"\","
	                      "\"traceback\":[\"Traceback:\",\"  line 1\","
	                      "\"\\u001b[31mValueError\\u001b[0m: bad\"]}");

	cr_assert_str_eq(str_of(l, "type"), "error");
	cr_assert_str_eq(str_of(l, "name"), "ValueError");
	cr_assert_str_eq(str_of(l, "value"), "bad \"v\"");
	cr_assert_str_eq(str_of(l, "traceback"),
	                 "Traceback:\n  line 1\n\x1b[31mValueError\x1b[0m: bad");
	cr_assert_eq(json_object_size(l), 4);
	json_decref(l);
}

Test(output_iopub, error_fields_that_are_missing_get_defaults)
{
	static const struct {
		const char *content, *name, *value, *traceback;
	} cases[] = {
	    {"{}", "Error", "", ""},
	    {"{\"ename\":5,\"evalue\":null,\"traceback\":\"not a list\"}", "Error", "",
	     ""},
	    {"{\"ename\":\"E\",\"traceback\":[]}", "E", "", ""},
	    {"{\"ename\":\"E\",\"traceback\":[\"one\"]}", "E", "", "one"},
	    {"{\"ename\":\"E\",\"traceback\":[\"a\",5,null,\"b\"]}", "E", "", "a\nb"},
	    {"{\"ename\":\"E\",\"traceback\":[\"a\",\"\",\"b\"]}", "E", "", "a\n\nb"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *l = one_line("error", cases[i].content);
		cr_expect_str_eq(str_of(l, "name"), cases[i].name, "%s",
		                 cases[i].content);
		cr_expect_str_eq(str_of(l, "value"), cases[i].value, "%s",
		                 cases[i].content);
		cr_expect_str_eq(str_of(l, "traceback"), cases[i].traceback, "%s",
		                 cases[i].content);
		json_decref(l);
	}
}

/*
 * Regression (was a bug in proxy/output.c:144, join_traceback): the separator is decided by
 * "b.b_len != 0", so leading empty traceback lines vanish along with their
 * newline: ["", "x"] joins to "x" instead of "\nx" (what "\n".join gives).
 * Under the sanitizer build the same input also aborts (see buf_append below).
 *
 */
Test(output_iopub, error_traceback_keeps_leading_empty_lines)
{
	json_t *l = one_line("error", "{\"ename\":\"E\",\"traceback\":[\"\",\"x\"]}");

	cr_expect_str_eq(str_of(l, "traceback"), "\nx");
	json_decref(l);
	l = one_line("error", "{\"ename\":\"E\",\"traceback\":[\"\",\"\",\"x\"]}");
	cr_expect_str_eq(str_of(l, "traceback"), "\n\nx");
	json_decref(l);
}

/*
 * Regression (was a bug in proto/util.c:282, buf_append): appending zero bytes to a buffer that
 * has never held data calls memcpy(NULL, p, 0), which is undefined; the
 * sanitizer build (make test-asan, -fno-sanitize-recover) aborts on it.
 * output.c:146 reaches it whenever a kernel's traceback starts with "", so
 * such an error aborts a sanitizer-built proxy. Passes in the normal build;
 * fails under UBSan.
 */
Test(output_lines, appending_nothing_to_an_empty_buffer_is_defined)
{
	struct buf b = {0};

	buf_append(&b, "", 0);
	cr_assert_eq(buf_pending(&b), 0);
	buf_free(&b);
}

Test(output_iopub, execute_input_becomes_number_of_executions)
{
	json_t *l = one_line("execute_input", "{\"code\":\"1+1\",\"execution_count\":7}");

	cr_assert_str_eq(str_of(l, "type"), "number_of_executions");
	cr_assert_eq(json_integer_value(json_object_get(l, "execution_count")), 7);
	cr_assert_eq(json_object_size(l), 2);
	json_decref(l);
}

Test(output_iopub, execute_input_without_an_integer_count_produces_nothing)
{
	static const char *contents[] = {"{\"code\":\"x\"}", "{\"execution_count\":null}",
	                                 "{\"execution_count\":\"7\"}",
	                                 "{\"execution_count\":7.5}"};

	for (size_t i = 0; i < sizeof(contents) / sizeof(contents[0]); i++) {
		struct buf b = {0};
		json_t *c = parse(contents[i]);
		cr_expect_not(output_iopub(&b, "execute_input", c, false), "%s",
		              contents[i]);
		cr_expect_eq(buf_pending(&b), 0);
		json_decref(c);
		buf_free(&b);
	}
}

Test(output_iopub, other_iopub_types_produce_nothing)
{
	static const char *types[] = {"status",
	                              "clear_output",
	                              "comm_open",
	                              "comm_msg",
	                              "update_display_data",
	                              "execute_reply",
	                              "Stream",
	                              ""};
	json_t *c =
	    parse("{\"name\":\"stdout\",\"text\":\"x\",\"data\":{},\"execution_state\":"
	          "\"idle\",\"execution_count\":1}");

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		struct buf b = {0};
		cr_expect_not(output_iopub(&b, types[i], c, false), "'%s'", types[i]);
		cr_expect_not(output_iopub(&b, types[i], c, true), "'%s'", types[i]);
		cr_expect_eq(buf_pending(&b), 0, "'%s' wrote output", types[i]);
		buf_free(&b);
	}
	json_decref(c);
}

/* ---- the shape of every line ---- */

Test(output_lines, every_line_is_one_ascii_json_object_and_non_ascii_is_u_escaped)
{
	/* é, ☃, 𝄞 (outside the BMP), a control character, U+2028 */
	static const char text[] =
	    "h\xc3\xa9llo \xe2\x98\x83 \xf0\x9d\x84\x9e \x01 \xe2\x80\xa8 end";
	struct buf b = {0};
	json_t *tb = json_pack("[s, s]", text, "line 2");
	json_t *contents[] = {
	    json_pack("{s:s, s:s}", "name", "stdout", "text", text),
	    json_pack("{s:s, s:s}", "name", "stderr", "text", "multi\nline\noutput\n"),
	    json_pack("{s:{s:s, s:s, s:s}}", "data", "text/plain", text, "text/html",
	              text, "x/unknown", text),
	    json_pack("{s:{s:s}}", "data", "text/plain", text),
	    json_pack("{s:s, s:s, s:O}", "ename", "E\xc3\xa9", "evalue", text,
	              "traceback", tb),
	    json_pack("{s:I}", "execution_count", (json_int_t)3),
	};
	const char *types[] = {"stream",         "stream", "display_data",
	                       "execute_result", "error",  "execute_input"};
	size_t n = sizeof(types) / sizeof(types[0]);

	for (size_t i = 0; i < n; i++) {
		cr_assert_not_null(contents[i]);
		cr_assert(output_iopub(&b, types[i], contents[i], false), "%s", types[i]);
	}
	output_error(&b, "N\xc3\xa9", text, "t\nb");
	output_end(&b);

	json_t *lines = lines_of(&b);
	cr_assert_eq(json_array_size(lines), n + 2, "one line per event");
	/* ASCII on the wire, the same text after decoding */
	char *wire = strndup(buf_head(&b), buf_pending(&b));
	static const char *escapes[] = {"h\\u00e9llo", "\\u2603", "\\ud834\\udd1e",
	                                "\\u0001", "\\u2028"};
	for (size_t i = 0; i < sizeof(escapes) / sizeof(escapes[0]); i++)
		cr_assert_not_null(strcasestr(wire, escapes[i]), "no %s on the wire",
		                   escapes[i]);
	free(wire);
	cr_assert_str_eq(str_of(json_array_get(lines, 0), "text"), text);
	cr_assert_str_eq(str_of(json_array_get(lines, 1), "text"),
	                 "multi\nline\noutput\n");
	cr_assert_str_eq(str_of(json_array_get(lines, 2), "html"), text);
	cr_assert_str_eq(
	    str_of(json_object_get(json_array_get(lines, 2), "extra"), "x/unknown"),
	    text);
	cr_assert_str_eq(str_of(json_array_get(lines, 3), "text"), text);
	cr_assert_str_eq(str_of(json_array_get(lines, 4), "name"), "E\xc3\xa9");
	cr_assert_str_eq(
	    str_of(json_array_get(lines, 4), "traceback"),
	    "h\xc3\xa9llo \xe2\x98\x83 \xf0\x9d\x84\x9e \x01 \xe2\x80\xa8 end\nline 2");
	cr_assert_str_eq(str_of(json_array_get(lines, 6), "name"), "N\xc3\xa9");
	cr_assert_str_eq(str_of(json_array_get(lines, 6), "traceback"), "t\nb");
	cr_assert_str_eq(str_of(json_array_get(lines, 7), "type"), "end_of_execution");

	for (size_t i = 0; i < n; i++)
		json_decref(contents[i]);
	json_decref(tb);
	json_decref(lines);
	buf_free(&b);
}

Test(output_lines, output_error_writes_an_error_line_and_a_null_traceback_is_empty)
{
	struct buf b = {0};

	output_error(&b, "KernelDied", "kernel exited with status 1", NULL);
	json_t *lines = lines_of(&b);
	json_t *l = json_array_get(lines, 0);
	cr_assert_eq(json_array_size(lines), 1);
	cr_assert_str_eq(str_of(l, "type"), "error");
	cr_assert_str_eq(str_of(l, "name"), "KernelDied");
	cr_assert_str_eq(str_of(l, "value"), "kernel exited with status 1");
	cr_assert_str_eq(str_of(l, "traceback"), "");
	json_decref(lines);
	buf_free(&b);
}

Test(output_lines, output_end_is_exactly_the_end_of_execution_line)
{
	static const char want[] = "{\"type\":\"end_of_execution\"}\n";
	struct buf b = {0};

	output_end(&b);
	cr_assert_eq(buf_pending(&b), sizeof(want) - 1);
	cr_assert(!memcmp(buf_head(&b), want, sizeof(want) - 1));
	buf_free(&b);
}

Test(output_lines, lines_append_in_order_after_what_the_buffer_already_holds)
{
	struct buf b = {0};
	json_t *c = parse("{\"name\":\"stdout\",\"text\":\"one\"}");

	buf_append(&b, "{\"type\":\"earlier\"}\n", 19);
	cr_assert(output_iopub(&b, "stream", c, false));
	output_end(&b);
	json_t *lines = lines_of(&b);
	cr_assert_eq(json_array_size(lines), 3);
	cr_assert_str_eq(str_of(json_array_get(lines, 0), "type"), "earlier");
	cr_assert_str_eq(str_of(json_array_get(lines, 1), "text"), "one");
	cr_assert_str_eq(str_of(json_array_get(lines, 2), "type"), "end_of_execution");
	json_decref(lines);
	json_decref(c);
	buf_free(&b);
}

/* ---- NUL characters and odd shapes (found by fuzzing) ---- */

static json_t *
one_line_nul(const char *type, const char *content)
{
	struct buf b = {0};
	json_t *c = json_loads(content, JSON_ALLOW_NUL, NULL);

	cr_assert_not_null(c);
	cr_assert(output_iopub(&b, type, c, false));
	json_t *l = json_loadb(buf_head(&b), buf_pending(&b) - 1, JSON_ALLOW_NUL, NULL);
	cr_assert_not_null(l, "%.*s", (int)buf_pending(&b), buf_head(&b));
	json_decref(c);
	buf_free(&b);
	return l;
}

Test(output_nul, result_text_keeps_nul_and_loses_its_quotes)
{
	json_t *l = one_line_nul("execute_result", "{\"data\": {\"text/plain\": \"'a\\u0000b'\"}}");
	json_t *t = json_object_get(l, "text");

	cr_assert_eq(json_string_length(t), 3);
	cr_assert_eq(memcmp(json_string_value(t), "a\0b", 3), 0);
	json_decref(l);
}

Test(output_nul, error_name_value_and_traceback_keep_nul)
{
	json_t *l = one_line_nul("error", "{\"ename\": \"E\\u0000F\", \"evalue\": \"v\\u0000w\","
					  " \"traceback\": [\"\", \"a\\u0000b\"]}");

	cr_assert_eq(json_string_length(json_object_get(l, "name")), 3);
	cr_assert_eq(json_string_length(json_object_get(l, "value")), 3);
	cr_assert_eq(json_string_length(json_object_get(l, "traceback")), 4);
	cr_assert_eq(memcmp(json_string_value(json_object_get(l, "traceback")), "\na\0b", 4), 0);
	json_decref(l);
}

Test(output_nul, a_text_plain_that_is_not_text_goes_under_extra)
{
	json_t *data = parse("{\"text/plain\": [\"a\", 1]}");
	json_t *r = output_result(data, true);

	cr_assert_null(json_object_get(r, "text"));
	cr_assert(json_is_array(json_object_get(json_object_get(r, "extra"), "text/plain")));
	json_decref(r);
	json_decref(data);
}

/* ---- the line encoder against jansson's own ---- */

/* One random code point's UTF-8: mostly ASCII (controls, quotes and
 * backslashes included), then 2-, 3- and 4-byte characters. */
static size_t
random_utf8(unsigned char *o, unsigned *seed)
{
	unsigned r = rand_r(seed) % 100;
	uint32_t cp;

	if (r < 60)
		cp = rand_r(seed) % 0x80;
	else if (r < 75)
		cp = 0x80 + rand_r(seed) % (0x800 - 0x80);
	else if (r < 90) {
		do
			cp = 0x800 + rand_r(seed) % (0x10000 - 0x800);
		while (cp >= 0xd800 && cp < 0xe000);
	} else
		cp = 0x10000 + rand_r(seed) % (0x110000 - 0x10000);
	if (cp < 0x80) {
		o[0] = cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = 0xc0 | cp >> 6, o[1] = 0x80 | (cp & 0x3f);
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = 0xe0 | cp >> 12, o[1] = 0x80 | (cp >> 6 & 0x3f), o[2] = 0x80 | (cp & 0x3f);
		return 3;
	}
	o[0] = 0xf0 | cp >> 18, o[1] = 0x80 | (cp >> 12 & 0x3f), o[2] = 0x80 | (cp >> 6 & 0x3f);
	o[3] = 0x80 | (cp & 0x3f);
	return 4;
}

static json_t *
random_string(unsigned *seed)
{
	unsigned char s[256];
	size_t n = 0, want = rand_r(seed) % 48;

	while (n < want)
		n += random_utf8(s + n, seed);
	return json_stringn((const char *)s, n);
}

/* Objects, arrays, strings and every scalar jansson has, nested a little. */
static json_t *
random_value(unsigned *seed, int depth)
{
	switch (rand_r(seed) % (depth < 3 ? 9 : 7)) {
	case 0: return json_integer((json_int_t)rand_r(seed) - RAND_MAX / 2);
	case 1: return json_real((double)rand_r(seed) / 7.0 - 1e5);
	case 2: return json_true();
	case 3: return json_false();
	case 4: return json_null();
	case 5:
	case 6: return random_string(seed);
	case 7: {
		json_t *a = json_array();
		for (int i = rand_r(seed) % 5; i > 0; i--)
			json_array_append_new(a, random_value(seed, depth + 1));
		return a;
	}
	default: {
		json_t *o = json_object();
		for (int i = rand_r(seed) % 5; i > 0; i--) {
			json_t *k = random_string(seed);
			json_object_setn_new(o, json_string_value(k), json_string_length(k),
			                     random_value(seed, depth + 1));
			json_decref(k);
		}
		return o;
	}
	}
}

Test(output_lines, lines_are_byte_for_byte_what_jansson_writes)
{
	unsigned seed = 7;

	for (int i = 0; i < 5000; i++) {
		json_t *v = json_pack("{s:s, s:o}", "type", "result", "v", random_value(&seed, 0));
		char *want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
		struct buf b = {0};
		cr_assert_not_null(want);
		output_line(&b, json_incref(v));
		cr_assert_eq(buf_pending(&b), strlen(want) + 1, "length differs for %s", want);
		cr_assert_eq(memcmp(buf_head(&b), want, strlen(want)), 0,
		             "\n ours: %.*s\n jansson: %s", (int)buf_pending(&b), buf_head(&b),
		             want);
		cr_assert_eq(buf_head(&b)[strlen(want)], '\n');
		free(want);
		buf_free(&b);
		json_decref(v);
	}
}

Test(output_lines, strings_with_nul_and_every_escape_are_encoded_like_jansson)
{
	static const char s[] = "\0a\"b\\c\b\f\n\r\t\x01\x1f\x7f/\xc2\x80\xe2\x80\xa8\xef\xbf\xbf"
	                        "\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf";
	json_t *v = json_stringn(s, sizeof(s) - 1);
	char *want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
	struct buf b = {0};

	cr_assert_not_null(v);
	output_json_string(&b, s, sizeof(s) - 1);
	cr_assert_eq(buf_pending(&b), strlen(want));
	cr_assert_eq(memcmp(buf_head(&b), want, strlen(want)), 0, "\n ours: %.*s\n jansson: %s",
	             (int)buf_pending(&b), buf_head(&b), want);
	free(want);
	buf_free(&b);
	json_decref(v);
}
