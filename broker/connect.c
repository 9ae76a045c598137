/*
 * connect.c — envd's messages in proto3's JSON (docs/ENVD.md): EntryInfo
 * rebuilt from the agent's entries, and Connect's streaming framing for
 * process.Process: a request's one envelope read and its StartRequest checked
 * into the agent's arguments; the agent's process events (MSG_OUTPUT:
 * start, stdout, stderr, end, or a Connect code) rebuilt as checked
 * envelopes of StartResponse, then the end-of-stream envelope; the
 * messages of its unary calls. Each envelope is a flags byte (2: the end of
 * the stream), a 32-bit big-endian length and that much JSON.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "broker.h"

#define CONNECT_END 0x02
#define CONNECT_MAX_ARGS 4096
#define CONNECT_MAX_ENVS 1024
#define CONNECT_MAX_TTY 10000 /* columns or rows of a PTY */

/* A string field of the agent's entry, or NULL. */
static const char *
str_of(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v)
	           ? json_string_value(v)
	           : NULL;
}

/* Whether s is printable ASCII (envd's metadata keys and values). */
static bool
printable(const char *s)
{
	for (; *s; s++)
		if (*s < 0x20 || *s > 0x7e)
			return false;
	return true;
}

/* The agent's word on a file's metadata, kept only if it is of envd's form
 * ({key: printable ASCII}, bounded as an upload's): else none is shown. */
static json_t *
connect_metadata(json_t *a)
{
	const char *k;
	json_t *v;
	size_t total = 0;

	if (!json_is_object(a) || !json_object_size(a))
		return NULL;
	json_object_foreach(a, k, v)
	{
		const char *s = json_string_value(v);
		if (!s || !*k || strlen(k) > ENVD_META_KEY_MAX || !printable(k) ||
		    !printable(s))
			return NULL;
		total += strlen("user.e2b.") + strlen(k) + strlen(s);
	}
	return total <= ENVD_META_MAX ? json_deep_copy(a) : NULL;
}

/* The agent's entry as envd's EntryInfo (proto3 JSON), or NULL if it is not one. */
json_t *
connect_entry(json_t *a)
{
	const char *name = str_of(a, "name"), *path = str_of(a, "path"),
	           *type = str_of(a, "type");
	const char *perm = str_of(a, "permissions"), *owner = str_of(a, "owner");
	const char *group = str_of(a, "group"), *target = str_of(a, "symlink_target");
	json_t *size = json_object_get(a, "size"), *mode = json_object_get(a, "mode");
	json_t *ms = json_object_get(a, "mtime_s"), *mns = json_object_get(a, "mtime_ns");
	char num[24], when[64];
	struct tm tm;
	time_t t;
	json_t *md;

	if (!name || !path || !type || !perm || !owner || !group ||
	    !json_is_integer(size) || !json_is_integer(mode) || !json_is_integer(ms) ||
	    !json_is_integer(mns) || json_integer_value(mode) < 0 ||
	    json_integer_value(mode) > 07777 || json_integer_value(mns) < 0 ||
	    json_integer_value(mns) > 999999999)
		return NULL;
	t = (time_t)json_integer_value(ms);
	if (!gmtime_r(&t, &tm))
		return NULL;
	size_t n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + n, sizeof(when) - n, ".%09dZ", (int)json_integer_value(mns));
	snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(size));
	json_t *e = json_pack(
	    "{s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:s, s:s}", "name", name, "type",
	    !strcmp(type, "dir")       ? "FILE_TYPE_DIRECTORY"
	    : !strcmp(type, "symlink") ? "FILE_TYPE_SYMLINK"
	                               : "FILE_TYPE_FILE",
	    "path", path, "size", num, "mode", (int)json_integer_value(mode),
	    "permissions", perm, "owner", owner, "group", group, "modifiedTime", when);
	if (target)
		json_object_set_new(e, "symlinkTarget", json_string(target));
	if ((md = connect_metadata(json_object_get(a, "metadata"))))
		json_object_set_new(e, "metadata", md);
	return e;
}

/* One envelope of json (taken) appended to b. */
static void
envelope(struct buf *b, unsigned flags, json_t *json)
{
	/* a text JSON cannot carry (not UTF-8) ends the stream instead */
	if (!json) {
		flags = CONNECT_END;
		json = json_pack("{s:{s:s, s:s}}", "error", "code", "internal", "message",
		                 "the envd agent's text is not UTF-8");
	}
	char *s = json_dumps(json, JSON_COMPACT | JSON_ENSURE_ASCII);
	size_t n = strlen(s);
	unsigned char head[5] = {flags, n >> 24, n >> 16, n >> 8, n};

	json_decref(json);
	buf_append(b, head, 5);
	buf_append(b, s, n);
	free(s);
}

/* The end of a stream: {} or {"error": {code, message}}. */
static void
end_envelope(struct buf *b, const char *code, const char *message)
{
	envelope(
	    b, CONNECT_END,
	    code ? json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message)
	         : json_object());
}

/* A stream's end with an error, for stream.c (name is a Connect code here). */
static char *
end_error(const char *name, const char *value, size_t *len)
{
	struct buf b = {0};
	static const char *const known[] = {
	    "resource_exhausted", "unavailable",         "internal",
	    "canceled",           "invalid_argument",    "not_found",
	    "permission_denied",  "failed_precondition", "deadline_exceeded"};
	const char *code = "unavailable"; /* the server is stopping, its proxy was lost */

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(name, known[i]))
			code = name;
	if (!strcmp(name, "OutputLimitExceeded") || !strcmp(name, "OutputSpillFailed"))
		code = "resource_exhausted";
	end_envelope(&b, code, value);
	*len = buf_pending(&b);
	buf_append(&b, "", 1);
	return b.b_data;
}

static bool
digits(const struct pstr *p, long long *v)
{
	char *end;

	if (!p->len || p->len > 20)
		return false;
	errno = 0;
	*v = strtoll(p->s, &end, 10);
	return !errno && end == p->s + p->len;
}

/* What an event became (Connect envelopes) to the stream, and its end when final. */
static void
send_envelopes(struct stream *s, struct buf *b, bool final)
{
	struct msg fin;

	msg_init(&fin, MSG_OUTPUT);
	msg_set_str(&fin, F_OUTCOME, "ok", 2);
	stream_output(s, buf_head(b), buf_pending(b), final ? &fin : NULL);
	msg_free(&fin);
	buf_free(b);
}

/* An event of the agent's for the stream s, as envelopes (stream.c's sk_in). */
static void
process_in(struct stream *s, struct msg *m)
{
	const char *kind = (m->m_has & FB(F_OUTCOME)) ? m->m_outcome.s : "";
	struct buf b = {0};
	long long v;
	bool final = m->m_final;

	if (!strcmp(kind, "start") && digits(&m->m_data, &v) && v > 0 && !final) {
		envelope(
		    &b, 0,
		    json_pack("{s:{s:{s:I}}}", "event", "start", "pid", (json_int_t)v));
	} else if ((!strcmp(kind, "stdout") || !strcmp(kind, "stderr") ||
	            !strcmp(kind, "pty")) &&
	           !final) {
		size_t n = sodium_base64_encoded_len(m->m_data.len,
		                                     sodium_base64_VARIANT_ORIGINAL);
		char *b64 = xmalloc(n);
		sodium_bin2base64(b64, n, (const unsigned char *)m->m_data.s,
		                  m->m_data.len, sodium_base64_VARIANT_ORIGINAL);
		envelope(&b, 0, json_pack("{s:{s:{s:s}}}", "event", "data", kind, b64));
		free(b64);
	} else if (!strcmp(kind, "end") && final) {
		int code;
		char status[64];
		if (sscanf(m->m_data.s, "exit %d", &code) == 1 && code >= 0 &&
		    code < 256) {
			snprintf(status, sizeof(status), "exit status %d", code);
			envelope(&b, 0,
			         json_pack("{s:{s:{s:i, s:b, s:s}}}", "event", "end",
			                   "exitCode", code, "exited", 1, "status",
			                   status));
		} else if (sscanf(m->m_data.s, "signal %d", &code) == 1 && code > 0 &&
		           code < 65) {
			snprintf(status, sizeof(status), "signal: %s", strsignal(code));
			envelope(&b, 0,
			         json_pack("{s:{s:{s:i, s:b, s:s}}}", "event", "end",
			                   "exitCode", -1, "exited", 0, "status",
			                   status));
		} else {
			end_envelope(&b, "internal", "the envd agent's end is malformed");
		}
		if (buf_pending(&b) && b.b_data[0] == 0)
			end_envelope(&b, NULL, NULL);
	} else if (final && strcmp(kind, "end") && strcmp(kind, "detached")) {
		/* a start that failed: its code, if it is one a start can fail with */
		static const char *const codes[] = {
		    "not_found", "invalid_argument", "permission_denied",
		    "resource_exhausted", "unimplemented"};
		bool known = false;
		for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
			known |= !strcmp(kind, codes[i]);
		end_envelope(&b, known ? kind : "internal", m->m_data.s);
	} else if (!strcmp(kind, "detached")) {
		return; /* its client left before: nothing is sent */
	} else {
		log_warn("envd: process event '%.32s' is not what it must be", kind);
		end_envelope(&b, "internal", "the envd agent's event is malformed");
		final = true;
	}
	send_envelopes(s, &b, final);
}

/* {"event":{"keepalive":{}}} in its envelope */
static const char keepalive[] = "\0\0\0\0\032{\"event\":{\"keepalive\":{}}}";

const struct stream_kind connect_process = {
    .sk_ctype = "application/connect+json",
    .sk_keepalive = keepalive,
    .sk_keepalive_len = sizeof(keepalive) - 1,
    .sk_end = end_error,
    .sk_in = process_in,
};

/* A whole response of one end-of-stream envelope: an error before any event. */
char *
connect_error_body(const char *code, const char *message, size_t *len)
{
	struct buf b = {0};

	end_envelope(&b, code, message);
	*len = buf_pending(&b);
	return b.b_data;
}

/* The request's one envelope's JSON object, or NULL with err. */
static json_t *
unwrap(const char *body, size_t len, char *err, size_t errsz)
{
	const unsigned char *p = (const unsigned char *)body;
	size_t n;
	json_t *j;

	if (len < 5) {
		snprintf(err, errsz, "the body is not a Connect envelope");
		return NULL;
	}
	n = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
	if (p[0] != 0 || n != len - 5) {
		snprintf(err, errsz,
		         "one uncompressed envelope is required (flags %u, %zu of %zu "
		         "bytes)",
		         p[0], n, len - 5);
		return NULL;
	}
	if (!(j = json_loadb(body + 5, n, 0, NULL)) || !json_is_object(j)) {
		json_decref(j);
		snprintf(err, errsz, "the envelope's message is not a JSON object");
		return NULL;
	}
	return j;
}

static bool
is_string_or_absent(json_t *v)
{
	return !v || json_is_null(v) || json_is_string(v);
}

/*
 * A StartRequest (in its envelope) as the agent's arguments: cmd, args,
 * envs, cwd, tag, stdin. 0, or -1 with err (invalid_argument, or
 * unimplemented for a PTY in *code).
 */
int
connect_start_args(const char *body, size_t len, json_t **args, const char **code,
                   char *err, size_t errsz)
{
	json_t *pty, *size = NULL;
	json_t *req = unwrap(body, len, err, errsz), *proc, *list, *envs, *v;
	const char *k;
	size_t i;

	*code = "invalid_argument";
	*args = NULL;
	if (!req)
		return -1;
	proc = json_object_get(req, "process");
	list = json_object_get(proc, "args");
	envs = json_object_get(proc, "envs");
	if (!json_is_object(proc) || !json_is_string(json_object_get(proc, "cmd")) ||
	    !json_string_length(json_object_get(proc, "cmd"))) {
		snprintf(err, errsz, "process.cmd: a non-empty string is required");
		goto bad;
	}
	pty = json_object_get(req, "pty");
	if (pty && !json_is_null(pty) && !(size = connect_pty_size(pty))) {
		snprintf(err, errsz, "pty.size: cols and rows from 1 to %d",
		         CONNECT_MAX_TTY);
		goto bad;
	}
	if ((list && !json_is_null(list) && !json_is_array(list)) ||
	    json_array_size(list) > CONNECT_MAX_ARGS ||
	    (envs && !json_is_null(envs) && !json_is_object(envs)) ||
	    json_object_size(envs) > CONNECT_MAX_ENVS ||
	    !is_string_or_absent(json_object_get(proc, "cwd")) ||
	    !is_string_or_absent(json_object_get(req, "tag"))) {
		snprintf(err, errsz,
		         "process: args a list, envs an object, cwd and tag strings");
		goto bad;
	}
	json_array_foreach(list, i,
	                   v) if (!json_is_string(v) ||
	                          strlen(json_string_value(v)) != json_string_length(v))
	{
		snprintf(err, errsz,
		         "process.args[%zu]: a string without NUL is required", i);
		goto bad;
	}
	json_object_foreach(envs, k,
	                    v) if (!env_key_valid(k) || !json_is_string(v) ||
	                           strlen(json_string_value(v)) != json_string_length(v))
	{
		snprintf(err, errsz, "process.envs: '%.64s' is not a NAME=string", k);
		goto bad;
	}
	*args = json_pack(
	    "{s:O, s:o, s:o, s:b}", "cmd", json_object_get(proc, "cmd"), "args",
	    list && json_is_array(list) ? json_incref(list) : json_array(), "envs",
	    envs && json_is_object(envs) ? json_incref(envs) : json_object(), "stdin",
	    json_is_true(json_object_get(req, "stdin")));
	if (json_is_string(json_object_get(proc, "cwd")) &&
	    json_string_length(json_object_get(proc, "cwd")))
		json_object_set(*args, "cwd", json_object_get(proc, "cwd"));
	if (json_is_string(json_object_get(req, "tag")))
		json_object_set(*args, "tag", json_object_get(req, "tag"));
	if (size)
		json_object_set_new(*args, "pty", size);
	json_decref(req);
	return 0;
bad:
	json_decref(size);
	json_decref(req);
	return -1;
}

/* A PTY's {"size": {"cols", "rows"}} as {"cols", "rows"}, or NULL. */
json_t *
connect_pty_size(json_t *pty)
{
	json_t *size = json_object_get(pty, "size");
	json_int_t cols = json_integer_value(json_object_get(size, "cols"));
	json_int_t rows = json_integer_value(json_object_get(size, "rows"));

	if (cols < 1 || rows < 1 || cols > CONNECT_MAX_TTY || rows > CONNECT_MAX_TTY)
		return NULL;
	return json_pack("{s:I, s:I}", "cols", cols, "rows", rows);
}

/* A ConnectRequest (in its envelope) as the agent's arguments: pid or tag. */
int
connect_connect_args(const char *body, size_t len, json_t **args, const char **code,
                     char *err, size_t errsz)
{
	json_t *req = unwrap(body, len, err, errsz);

	*code = "invalid_argument";
	*args = json_object();
	if (req && connect_selector(req, *args) == 0) {
		json_decref(req);
		return 0;
	}
	if (req)
		snprintf(err, errsz, "process: a pid or a tag is required");
	json_decref(req);
	json_decref(*args);
	*args = NULL;
	return -1;
}

/* A ProcessSelector ({"pid": n} or {"tag": s}) into args; -1 if there is none. */
int
connect_selector(json_t *body, json_t *args)
{
	json_t *sel = json_object_get(body, "process"),
	       *pid = json_object_get(sel, "pid");
	const char *tag = json_string_value(json_object_get(sel, "tag"));

	if (json_is_string(pid)) /* a uint32 may come as a string */
		pid = json_integer(strtoll(json_string_value(pid), NULL, 10));
	else
		json_incref(pid);
	if (json_is_integer(pid) && json_integer_value(pid) > 0 &&
	    json_integer_value(pid) <= INT32_MAX)
		json_object_set_new(args, "pid", pid);
	else if (tag)
		json_object_set_new(args, "tag", json_string(tag)), json_decref(pid);
	else {
		json_decref(pid);
		return -1;
	}
	return 0;
}

/* A Signal, by name or number: 9 or 15, else 0. */
int
connect_signal(json_t *v)
{
	const char *s = json_string_value(v);

	if (s)
		return !strcmp(s, "SIGNAL_SIGKILL")   ? 9
		       : !strcmp(s, "SIGNAL_SIGTERM") ? 15
		                                      : 0;
	return json_integer_value(v) == 9 || json_integer_value(v) == 15
	           ? (int)json_integer_value(v)
	           : 0;
}

/* The agent's process list as a ListResponse, or NULL if it is not one. */
json_t *
connect_list(json_t *a)
{
	json_t *out = json_array(), *v;
	size_t i;

	if (!json_is_array(a))
		goto bad;
	json_array_foreach(a, i, v)
	{
		json_t *pid = json_object_get(v, "pid"), *cfg;
		if (!json_is_integer(pid) || !json_is_string(json_object_get(v, "cmd")) ||
		    !json_is_array(json_object_get(v, "args")) ||
		    !json_is_object(json_object_get(v, "envs")))
			goto bad;
		cfg = json_pack("{s:O, s:O, s:O}", "cmd", json_object_get(v, "cmd"),
		                "args", json_object_get(v, "args"), "envs",
		                json_object_get(v, "envs"));
		if (json_is_string(json_object_get(v, "cwd")))
			json_object_set(cfg, "cwd", json_object_get(v, "cwd"));
		json_t *p = json_pack("{s:o, s:O}", "config", cfg, "pid", pid);
		if (json_is_string(json_object_get(v, "tag")))
			json_object_set(p, "tag", json_object_get(v, "tag"));
		json_array_append_new(out, p);
	}
	return json_pack("{s:o}", "processes", out);
bad:
	json_decref(out);
	return NULL;
}

/* The agent's change kinds and envd's EventType for each. */
static const char *const watch_types[][2] = {{"create", "EVENT_TYPE_CREATE"},
                                             {"write", "EVENT_TYPE_WRITE"},
                                             {"remove", "EVENT_TYPE_REMOVE"},
                                             {"rename", "EVENT_TYPE_RENAME"},
                                             {"chmod", "EVENT_TYPE_CHMOD"}};

/* WatchDir's events (stream.c's sk_in): start, then each change as a FilesystemEvent. */
static void
watch_in(struct stream *s, struct msg *m)
{
	const char *kind = (m->m_has & FB(F_OUTCOME)) ? m->m_outcome.s : "";
	struct buf b = {0};
	bool final = m->m_final, known = false;
	json_t *ev = NULL;

	if (!strcmp(kind, "detached"))
		return;
	for (size_t i = 0; i < sizeof(watch_types) / sizeof(watch_types[0]) && !final;
	     i++)
		if (!strcmp(kind, watch_types[i][0])) {
			/* the name, and after a NUL its entry (includeEntry) */
			size_t nl = strlen(m->m_data.s);
			json_t *a = nl < m->m_data.len
			                ? json_loadb(m->m_data.s + nl + 1,
			                             m->m_data.len - nl - 1, 0, NULL)
			                : NULL;
			json_t *entry = a ? connect_entry(a) : NULL;
			known = true;
			/* a name JSON cannot carry (not UTF-8) is left out */
			ev = json_pack("{s:{s:s, s:s}}", "filesystem", "name",
			               m->m_data.s, "type", watch_types[i][1]);
			if (ev && entry)
				json_object_set_new(json_object_get(ev, "filesystem"),
				                    "entry", entry);
			else
				json_decref(entry);
			json_decref(a);
		}
	if (!strcmp(kind, "start") && !final)
		envelope(&b, 0, json_pack("{s:{}}", "start"));
	else if (known && ev)
		envelope(&b, 0, ev);
	else if (known)
		return;
	else if (final &&
	         (!strcmp(kind, "not_found") || !strcmp(kind, "invalid_argument") ||
	          !strcmp(kind, "permission_denied") ||
	          !strcmp(kind, "resource_exhausted")))
		end_envelope(&b, kind, m->m_data.s);
	else {
		log_warn("envd: watch event '%.32s' is not what it must be", kind);
		end_envelope(&b, "internal", "the envd agent's event is malformed");
		final = true;
	}
	send_envelopes(s, &b, final);
}

/* The agent's answer to CreateWatcher ({"id"}) or GetWatcherEvents ([{name, type}])
 * as envd's, or NULL if it is not one. */
json_t *
connect_watcher(const char *op, json_t *a)
{
	json_t *events, *v;
	size_t i;

	if (!strcmp(op, "wcreate"))
		return json_is_string(json_object_get(a, "id"))
		           ? json_pack("{s:O}", "watcherId", json_object_get(a, "id"))
		           : NULL;
	if (!json_is_array(a))
		return NULL;
	events = json_array();
	json_array_foreach(a, i, v)
	{
		const char *name = json_string_value(json_object_get(v, "name"));
		const char *type = json_string_value(json_object_get(v, "type"));
		const char *as = NULL;
		for (size_t k = 0;
		     type && k < sizeof(watch_types) / sizeof(watch_types[0]); k++)
			if (!strcmp(type, watch_types[k][0]))
				as = watch_types[k][1];
		if (!name || !as) {
			json_decref(events);
			return NULL;
		}
		json_t *fe = json_pack("{s:s, s:s}", "name", name, "type", as);
		json_t *ent = json_object_get(v, "entry")
		                  ? connect_entry(json_object_get(v, "entry"))
		                  : NULL;
		if (ent) /* includeEntry */
			json_object_set_new(fe, "entry", ent);
		json_array_append_new(events, fe);
	}
	return json_pack("{s:o}", "events", events);
}

/* {"keepalive":{}} in its envelope: WatchDirResponse's */
static const char watch_keepalive[] = "\0\0\0\0\020{\"keepalive\":{}}";

const struct stream_kind connect_watch = {
    .sk_ctype = "application/connect+json",
    .sk_keepalive = watch_keepalive,
    .sk_keepalive_len = sizeof(watch_keepalive) - 1,
    .sk_end = end_error,
    .sk_in = watch_in,
};

/* A WatchDirRequest (in its envelope) as the agent's arguments: path, recursive. */
int
connect_watch_args(const char *body, size_t len, json_t **args, const char **code,
                   char *err, size_t errsz)
{
	json_t *req = unwrap(body, len, err, errsz), *path = json_object_get(req, "path");

	*code = "invalid_argument";
	*args = NULL;
	if (req && (!json_is_string(path) || !json_string_length(path) ||
	            strlen(json_string_value(path)) != json_string_length(path)))
		snprintf(err, errsz, "path: a non-empty string is required");
	else if (req)
		*args =
		    json_pack("{s:O, s:b, s:b}", "path", path, "recursive",
		              json_is_true(json_object_get(req, "recursive")), "entry",
		              json_is_true(json_object_get(req, "includeEntry")));
	json_decref(req);
	return *args ? 0 : -1;
}

/* Connect's codes and the HTTP status each maps to. */
static const struct {
	const char *code;
	unsigned status;
} codes[] = {
    {"canceled", 499},
    {"unknown", 500},
    {"invalid_argument", 400},
    {"deadline_exceeded", 504},
    {"not_found", 404},
    {"already_exists", 409},
    {"permission_denied", 403},
    {"resource_exhausted", 429},
    {"failed_precondition", 400},
    {"aborted", 409},
    {"out_of_range", 400},
    {"unimplemented", 501},
    {"internal", 500},
    {"unavailable", 503},
    {"data_loss", 500},
    {"unauthenticated", 401},
};

static unsigned
status_of(const char **code)
{
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (*code && !strcmp(*code, codes[i].code))
			return codes[i].status;
	*code = "internal"; /* an agent's word we do not know */
	return 500;
}

/* An error's body as envd gives it: Connect's {code, message}, or /files' {message,
 * code: status}; *status is its HTTP status. */
json_t *
connect_error(bool rpc, const char *code, unsigned *status, const char *msg)
{
	unsigned st = status_of(&code);

	/* /files: a full workspace is 507, as envd's */
	if (!rpc && !strcmp(code, "resource_exhausted"))
		st = 507;
	*status = st;
	if (rpc)
		return json_pack("{s:s, s:s}", "code", code, "message", msg);
	return json_pack("{s:s, s:i}", "message", msg, "code", (int)st);
}
