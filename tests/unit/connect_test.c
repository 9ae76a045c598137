/*
 * connect_test.c — broker/connect.c: a StartRequest's envelope and fields
 * checked; the agent's process events rebuilt as Connect envelopes (and
 * what is not an event refused); an error's end of stream; selectors,
 * signals, the process list and EntryInfo from the agent's word.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../broker/broker.h"

/* stream.c stands in: what connect.c hands a stream is kept here. */
static struct buf got;
static bool got_final;

void
stream_output(struct stream *s, const char *data, size_t len, struct msg *final)
{
	(void)s;
	buf_append(&got, data, len);
	got_final = final != NULL;
}

static void
reset(void)
{
	buf_free(&got);
	got_final = false;
}

TestSuite(connect, .init = reset, .fini = reset);

/* One envelope around text. */
static char *
wrap(unsigned flags, const char *text, size_t *len)
{
	size_t n = strlen(text);
	char *b = malloc(n + 5);

	b[0] = (char)flags;
	b[1] = (char)(n >> 24);
	b[2] = (char)(n >> 16);
	b[3] = (char)(n >> 8);
	b[4] = (char)n;
	memcpy(b + 5, text, n);
	*len = n + 5;
	return b;
}

/* The envelopes in got: [[flags, json], ...]. */
static json_t *
envelopes(void)
{
	const unsigned char *p = (const unsigned char *)buf_head(&got);
	size_t len = buf_pending(&got);
	json_t *out = json_array();

	while (len >= 5) {
		size_t n =
		    (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
		cr_assert_leq(n, len - 5);
		json_t *j = json_loadb((const char *)p + 5, n, 0, NULL);
		cr_assert_not_null(j);
		json_array_append_new(out, json_pack("[i, o]", (int)p[0], j));
		p += 5 + n;
		len -= 5 + n;
	}
	cr_assert_eq(len, 0);
	return out;
}

static int
start(const char *text, json_t **args, const char **code)
{
	char err[256];
	size_t n;
	char *b = wrap(0, text, &n);
	int rc = connect_start_args(b, n, args, code, err, sizeof(err));

	free(b);
	return rc;
}

Test(connect, a_start_request_becomes_the_agents_arguments)
{
	json_t *a;
	const char *code;

	cr_assert_eq(
	    start("{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-c\",\"ls\"],\"envs\":"
	          "{\"A\":\"1\"},\"cwd\":\"/tmp\"},\"tag\":\"t\",\"stdin\":true,"
	          "\"someFutureField\":1}",
	          &a, &code),
	    0);
	cr_assert_str_eq(json_string_value(json_object_get(a, "cmd")), "/bin/bash");
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(a, "args"), 1)),
	                 "ls");
	cr_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(a, "envs"), "A")), "1");
	cr_assert_str_eq(json_string_value(json_object_get(a, "cwd")), "/tmp");
	cr_assert_str_eq(json_string_value(json_object_get(a, "tag")), "t");
	cr_assert(json_is_true(json_object_get(a, "stdin")));
	json_decref(a);
}

Test(connect, what_a_start_request_must_not_be)
{
	static const char *const bad[] = {
	    "{}",
	    "{\"process\":{\"cmd\":\"\"}}",
	    "{\"process\":{\"cmd\":7}}",
	    "{\"process\":{\"cmd\":\"x\",\"args\":\"-c\"}}",
	    "{\"process\":{\"cmd\":\"x\",\"args\":[1]}}",
	    "{\"process\":{\"cmd\":\"x\",\"args\":[\"a\\u0000b\"]}}",
	    "{\"process\":{\"cmd\":\"x\",\"envs\":{\"BAD-NAME\":\"v\"}}}",
	    "{\"process\":{\"cmd\":\"x\",\"envs\":{\"A\":1}}}",
	    "{\"process\":{\"cmd\":\"x\",\"cwd\":5}}",
	    "[1]",
	};
	json_t *a;
	const char *code;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(start(bad[i], &a, &code), -1, "%s", bad[i]);
		cr_expect_str_eq(code, "invalid_argument", "%s", bad[i]);
		cr_expect_null(a);
	}
	/* a PTY needs its size, within bounds */
	cr_assert_eq(
	    start("{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"cols\":80}}}", &a,
	          &code),
	    -1);
	cr_assert_str_eq(code, "invalid_argument");
	cr_assert_eq(start("{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"cols\":80,"
	                   "\"rows\":99999}}}",
	                   &a, &code),
	             -1);
	cr_assert_eq(start("{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"cols\":80,"
	                   "\"rows\":24}}}",
	                   &a, &code),
	             0);
	cr_assert_eq(
	    json_integer_value(json_object_get(json_object_get(a, "pty"), "rows")), 24);
	json_decref(a);
}

Test(connect, only_one_uncompressed_envelope_is_a_request)
{
	char err[256];
	const char *code;
	json_t *a;
	size_t n;
	char *b = wrap(1, "{\"process\":{\"cmd\":\"x\"}}", &n); /* compressed */

	cr_assert_eq(connect_start_args(b, n, &a, &code, err, sizeof(err)), -1);
	cr_assert_eq(connect_start_args(b, 3, &a, &code, err, sizeof(err)), -1);
	b[0] = 0;
	cr_assert_eq(connect_start_args(b, n - 1, &a, &code, err, sizeof(err)),
	             -1); /* short */
	cr_assert_eq(connect_start_args(b, n, &a, &code, err, sizeof(err)), 0);
	json_decref(a);
	free(b);
}

/* An agent's event on a stream, through the kind's sk_in. */
static void
event(const char *kind, const char *data, size_t len, bool final)
{
	struct msg m;

	msg_init(&m, MSG_OUTPUT);
	msg_set_u64(&m, F_STREAM, 1);
	msg_set_str(&m, F_OUTCOME, kind, strlen(kind));
	msg_set_str(&m, F_DATA, data, len);
	if (final)
		msg_set_u64(&m, F_FINAL, 1);
	connect_process.sk_in(NULL, &m);
	msg_free(&m);
}

Test(connect, a_commands_events_become_envelopes)
{
	json_t *e;

	event("start", "42", 2, false);
	event("stdout", "hi\n\0\xff", 5, false); /* any bytes: base64 */
	event("end", "exit 3", 6, true);
	e = envelopes();
	cr_assert_eq(json_array_size(e), 4);
	cr_assert_eq(
	    json_integer_value(json_object_get(
	        json_object_get(
	            json_object_get(json_array_get(json_array_get(e, 0), 1), "event"),
	            "start"),
	        "pid")),
	    42);
	cr_assert_str_eq(
	    json_string_value(json_object_get(
	        json_object_get(
	            json_object_get(json_array_get(json_array_get(e, 1), 1), "event"),
	            "data"),
	        "stdout")),
	    "aGkKAP8=");
	json_t *end = json_object_get(
	    json_object_get(json_array_get(json_array_get(e, 2), 1), "event"), "end");
	cr_assert_eq(json_integer_value(json_object_get(end, "exitCode")), 3);
	cr_assert(json_is_true(json_object_get(end, "exited")));
	cr_assert_eq(json_integer_value(json_array_get(json_array_get(e, 3), 0)), 2);
	cr_assert(got_final);
	json_decref(e);
}

Test(connect, a_killed_command_ends_with_its_signal)
{
	json_t *e, *end;

	event("end", "signal 9", 8, true);
	e = envelopes();
	end = json_object_get(
	    json_object_get(json_array_get(json_array_get(e, 0), 1), "event"), "end");
	cr_assert_eq(json_integer_value(json_object_get(end, "exitCode")), -1);
	cr_assert(json_is_false(json_object_get(end, "exited")));
	cr_assert_str_eq(json_string_value(json_object_get(end, "status")),
	                 "signal: Killed");
	json_decref(e);
}

/* What the agent must not say: each ends the stream with an internal error. */
Test(connect, what_is_not_an_event_ends_the_stream)
{
	static const struct {
		const char *kind, *data;
		bool final;
	} bad[] = {
	    {"start", "-1", false},    {"start", "12x", false},  {"start", "", false},
	    {"end", "exit 300", true}, {"end", "exit 1", false}, {"end", "oops", true},
	    {"stdout", "x", true},     {"whatever", "x", false},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		reset();
		event(bad[i].kind, bad[i].data, strlen(bad[i].data), bad[i].final);
		json_t *e = envelopes();
		json_t *last = json_array_get(e, json_array_size(e) - 1);
		cr_expect_eq(json_integer_value(json_array_get(last, 0)), 2, "%s %s",
		             bad[i].kind, bad[i].data);
		cr_expect_str_eq(
		    json_string_value(json_object_get(
		        json_object_get(json_array_get(last, 1), "error"), "code")),
		    "internal", "%s %s", bad[i].kind, bad[i].data);
		cr_expect(got_final, "%s %s", bad[i].kind, bad[i].data);
		json_decref(e);
	}
}

Test(connect, a_start_that_failed_ends_with_its_code_or_internal)
{
	json_t *e, *err;

	event("not_found", "start 'x': No such file", 23, true);
	e = envelopes();
	err = json_object_get(json_array_get(json_array_get(e, 0), 1), "error");
	cr_assert_str_eq(json_string_value(json_object_get(err, "code")), "not_found");
	json_decref(e);
	reset();
	event("already_exists", "x", 1, true); /* not a code a start fails with */
	e = envelopes();
	err = json_object_get(json_array_get(json_array_get(e, 0), 1), "error");
	cr_assert_str_eq(json_string_value(json_object_get(err, "code")), "internal");
	json_decref(e);
}

Test(connect, a_stream_cut_short_ends_with_resource_exhausted)
{
	size_t n;
	char *b = connect_process.sk_end("OutputLimitExceeded", "too slow", &n);

	buf_append(&got, b, n);
	free(b);
	json_t *e = envelopes();
	json_t *err = json_object_get(json_array_get(json_array_get(e, 0), 1), "error");
	cr_assert_str_eq(json_string_value(json_object_get(err, "code")),
	                 "resource_exhausted");
	json_decref(e);
}

Test(connect, selectors_signals_and_the_process_list)
{
	json_t *args = json_object(), *body, *l, *a;

	body = json_loads("{\"process\":{\"pid\":\"12\"}}", 0, NULL);
	cr_assert_eq(connect_selector(body, args), 0);
	cr_assert_eq(json_integer_value(json_object_get(args, "pid")), 12);
	json_decref(body);
	body = json_loads("{\"process\":{}}", 0, NULL);
	cr_assert_eq(connect_selector(body, args), -1);
	json_decref(body);
	json_decref(args);
	json_t *sig[3] = {json_string("SIGNAL_SIGKILL"), json_integer(15),
	                  json_integer(11)};
	cr_assert_eq(connect_signal(sig[0]), 9);
	cr_assert_eq(connect_signal(sig[1]), 15);
	cr_assert_eq(connect_signal(sig[2]), 0);
	for (int k = 0; k < 3; k++)
		json_decref(sig[k]);
	a = json_loads(
	    "[{\"pid\":3,\"cmd\":\"/bin/bash\",\"args\":[\"-c\",\"x\"],\"envs\":{},"
	    "\"cwd\":\"/tmp\",\"tag\":\"t\",\"stdin\":false}]",
	    0, NULL);
	l = connect_list(a);
	cr_assert_not_null(l);
	json_t *p = json_array_get(json_object_get(l, "processes"), 0);
	cr_assert_eq(json_integer_value(json_object_get(p, "pid")), 3);
	cr_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(p, "config"), "cwd")),
	    "/tmp");
	cr_assert_null(json_object_get(json_object_get(p, "config"), "stdin"));
	json_decref(l);
	json_decref(a);
	a = json_loads("[{\"pid\":\"3\",\"cmd\":\"x\",\"args\":[],\"envs\":{}}]", 0,
	               NULL);
	cr_assert_null(connect_list(a));
	json_decref(a);
}

Test(connect, an_entry_is_rebuilt_from_checked_fields)
{
	json_t *a =
	    json_loads("{\"name\":\"a\",\"path\":\"/home/user/a\",\"type\":\"dir\","
	               "\"size\":4096,\"mode\":493,\"permissions\":\"drwxr-xr-x\","
	               "\"owner\":\"u\",\"group\":\"g\",\"mtime_s\":0,\"mtime_ns\":5,"
	               "\"extra\":\"dropped\"}",
	               0, NULL);
	json_t *e = connect_entry(a);

	cr_assert_not_null(e);
	cr_assert_str_eq(json_string_value(json_object_get(e, "type")),
	                 "FILE_TYPE_DIRECTORY");
	cr_assert_str_eq(json_string_value(json_object_get(e, "size")), "4096");
	cr_assert_str_eq(json_string_value(json_object_get(e, "modifiedTime")),
	                 "1970-01-01T00:00:00.000000005Z");
	cr_assert_null(json_object_get(e, "extra"));
	json_decref(e);
	json_object_set_new(a, "mode",
	                    json_integer(070000)); /* more than permission bits */
	cr_assert_null(connect_entry(a));
	json_object_set_new(a, "mode", json_integer(493));
	json_object_set_new(a, "mtime_ns", json_integer(1000000000));
	cr_assert_null(connect_entry(a));
	json_decref(a);
}

/* An entry's metadata is shown only when it is of envd's form: printable ASCII,
 * bounded; else the entry goes without it. */
Test(connect, an_entrys_metadata_is_shown_only_when_well_formed)
{
	json_t *a =
	    json_loads("{\"name\":\"a\",\"path\":\"/home/user/a\",\"type\":\"file\","
	               "\"size\":1,\"mode\":420,\"permissions\":\"-rw-r--r--\","
	               "\"owner\":\"u\",\"group\":\"g\",\"mtime_s\":0,\"mtime_ns\":0,"
	               "\"metadata\":{\"owner\":\"alice\"}}",
	               0, NULL);
	json_t *e = connect_entry(a);
	char big[ENVD_META_MAX + 2];

	cr_assert_not_null(e);
	cr_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(e, "metadata"), "owner")),
	    "alice");
	json_decref(e);
	json_object_set_new(json_object_get(a, "metadata"), "bad",
	                    json_string("caf\xc3\xa9"));
	e = connect_entry(a);
	cr_assert_not_null(e, "a bad metadata value fails the entry");
	cr_assert_null(json_object_get(e, "metadata"));
	json_decref(e);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	json_object_set_new(a, "metadata", json_pack("{s:s}", "k", big));
	e = connect_entry(a);
	cr_assert_null(json_object_get(e, "metadata"), "metadata past ENVD_META_MAX");
	json_decref(e);
	json_object_set_new(a, "metadata", json_pack("{s:i}", "k", 1));
	e = connect_entry(a);
	cr_assert_null(json_object_get(e, "metadata"), "a value that is no string");
	json_decref(e);
	json_decref(a);
}

Test(connect, a_connect_request_names_its_process)
{
	char err[256];
	const char *code;
	json_t *a;
	size_t n;
	char *b = wrap(0, "{\"process\":{\"tag\":\"web\"}}", &n);

	cr_assert_eq(connect_connect_args(b, n, &a, &code, err, sizeof(err)), 0);
	cr_assert_str_eq(json_string_value(json_object_get(a, "tag")), "web");
	json_decref(a);
	free(b);
	b = wrap(0, "{\"process\":{}}", &n);
	cr_assert_eq(connect_connect_args(b, n, &a, &code, err, sizeof(err)), -1);
	cr_assert_str_eq(code, "invalid_argument");
	free(b);
}

static void
watch_event(const char *kind, const char *data, bool final)
{
	struct msg m;

	msg_init(&m, MSG_OUTPUT);
	msg_set_u64(&m, F_STREAM, 1);
	msg_set_str(&m, F_OUTCOME, kind, strlen(kind));
	msg_set_str(&m, F_DATA, data, strlen(data));
	if (final)
		msg_set_u64(&m, F_FINAL, 1);
	connect_watch.sk_in(NULL, &m);
	msg_free(&m);
}

Test(connect, a_watchs_events_become_watchdir_responses)
{
	json_t *e;

	watch_event("start", "", false);
	watch_event("create", "sub/a.txt", false);
	watch_event("write", "bad\xff", false); /* not UTF-8: left out */
	watch_event("remove", "sub/a.txt", false);
	e = envelopes();
	cr_assert_eq(json_array_size(e), 3);
	cr_assert_not_null(
	    json_object_get(json_array_get(json_array_get(e, 0), 1), "start"));
	json_t *fs =
	    json_object_get(json_array_get(json_array_get(e, 1), 1), "filesystem");
	cr_assert_str_eq(json_string_value(json_object_get(fs, "name")), "sub/a.txt");
	cr_assert_str_eq(json_string_value(json_object_get(fs, "type")),
	                 "EVENT_TYPE_CREATE");
	fs = json_object_get(json_array_get(json_array_get(e, 2), 1), "filesystem");
	cr_assert_str_eq(json_string_value(json_object_get(fs, "type")),
	                 "EVENT_TYPE_REMOVE");
	cr_assert_not(got_final);
	json_decref(e);
	/* its keepalive is WatchDirResponse's, not a process event's */
	cr_assert(memmem(connect_watch.sk_keepalive + 5,
	                 connect_watch.sk_keepalive_len - 5, "{\"keepalive\":{}}", 16));
	reset();
	watch_event("not_found", "watch 'x': No such file", true);
	e = envelopes();
	cr_assert_str_eq(
	    json_string_value(json_object_get(
	        json_object_get(json_array_get(json_array_get(e, 0), 1), "error"),
	        "code")),
	    "not_found");
	cr_assert(got_final);
	json_decref(e);
}

Test(connect, a_watch_event_may_carry_its_entry)
{
	static const char data[] =
	    "a.txt\0{\"name\":\"a.txt\",\"path\":\"/home/user/w/a.txt\","
	    "\"type\":\"file\",\"size\":5,\"mode\":420,\"permissions\":"
	    "\"-rw-r--r--\",\"owner\":\"u\",\"group\":\"g\",\"mtime_s\":1,"
	    "\"mtime_ns\":0}";
	struct msg m;
	json_t *e, *entry;

	msg_init(&m, MSG_OUTPUT);
	msg_set_u64(&m, F_STREAM, 1);
	msg_set_str(&m, F_OUTCOME, "write", 5);
	msg_set_str(&m, F_DATA, data, sizeof(data) - 1);
	connect_watch.sk_in(NULL, &m);
	msg_free(&m);
	e = envelopes();
	entry = json_object_get(
	    json_object_get(json_array_get(json_array_get(e, 0), 1), "filesystem"),
	    "entry");
	cr_assert_str_eq(json_string_value(json_object_get(entry, "path")),
	                 "/home/user/w/a.txt");
	cr_assert_str_eq(json_string_value(json_object_get(entry, "size")), "5");
	json_decref(e);
}
