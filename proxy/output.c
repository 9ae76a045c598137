/*
 * output.c — kernel iopub messages to E2B's NDJSON events. The proxy formats
 * each line once, here; the broker forwards the bytes untouched.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "proxy.h"

static const struct {
	const char *mime, *key;
} mime_keys[] = {
	{"text/plain", "text"},
	{"text/html", "html"},
	{"text/markdown", "markdown"},
	{"image/svg+xml", "svg"},
	{"image/png", "png"},
	{"image/jpeg", "jpeg"},
	{"application/pdf", "pdf"},
	{"text/latex", "latex"},
	{"application/json", "json"},
	{"application/javascript", "javascript"},
	{"e2b/data", "data"},
	{"e2b/chart", "chart"},
};

/* The same over n bytes that may hold NUL; the result's length in *len. */
static char *
strip_ansi_n(const char *s, size_t n, size_t *len)
{
	size_t j = 0;
	char *o = xmalloc(n + 1);

	for (size_t i = 0; i < n; i++) {
		if (s[i] == 0x1b && i + 1 < n && s[i + 1] == '[') {
			i += 2;
			while (i < n && !(s[i] >= 0x40 && s[i] <= 0x7e))
				i++;
			continue;
		}
		o[j++] = s[i];
	}
	o[j] = '\0';
	*len = j;
	return o;
}

/* Drops ANSI escape sequences (CSI ... final byte), as Deno colours values. */
char *
output_strip_ansi(const char *s)
{
	size_t len;

	return strip_ansi_n(s, strlen(s), &len);
}

static json_t *
plain_text(json_t *str)
{
	size_t n;
	char *t = strip_ansi_n(json_string_value(str), json_string_length(str), &n);
	json_t *v;

	/* E2B strips one pair of surrounding quotes: 'abc' -> abc */
	if (n >= 2 && (t[0] == '\'' || t[0] == '"') && t[n - 1] == t[0])
		v = json_stringn(t + 1, n - 2);
	else
		v = json_stringn(t, n);
	free(t);
	return v;
}

/* A MIME bundle as E2B's "result" event. */
json_t *
output_result(json_t *data, bool is_main)
{
	json_t *r = json_pack("{s:s}", "type", "result");
	json_t *extra = NULL, *val;
	const char *mime;

	json_object_foreach(data, mime, val)
	{
		size_t i;
		for (i = 0; i < sizeof(mime_keys) / sizeof(mime_keys[0]); i++)
			if (!strcmp(mime, mime_keys[i].mime))
				break;
		/* unknown types, and a text/plain that is not text, go under extra */
		if (i == sizeof(mime_keys) / sizeof(mime_keys[0]) ||
		    (i == 0 && !json_is_string(val))) {
			if (!extra)
				extra = json_object();
			json_object_set(extra, mime, val);
		} else if (i == 0) {
			json_object_set_new(r, "text", plain_text(val));
		} else {
			json_object_set(r, mime_keys[i].key, val);
		}
	}
	if (extra)
		json_object_set_new(r, "extra", extra);
	json_object_set_new(r, "is_main_result", json_boolean(is_main));
	return r;
}

/* Bytes that go into a JSON string as they are: ASCII from space on but " and \. */
static bool
plain_byte(unsigned char c)
{
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/*
 * s (valid UTF-8: jansson checked it) as a JSON string of ASCII only, the
 * bytes json_dumps(JSON_ENSURE_ASCII) gives, without its per-character UTF-8
 * walk: runs of plain bytes are copied whole. Output is most of what a flood
 * or an image costs the proxy, so this is its hot path.
 */
void
output_json_string(struct buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *p = (const unsigned char *)s, *end = p + n;

	buf_append(b, "\"", 1);
	while (p < end) {
		const unsigned char *run = p;
		while (p < end && plain_byte(*p))
			p++;
		if (p > run)
			buf_append(b, run, p - run);
		if (p == end)
			break;
		char esc[12];
		size_t len = 0;
		uint32_t cp = *p++;
		if (cp >= 0x80) { /* a UTF-8 sequence: 2 to 4 bytes */
			int more = cp >= 0xf0 ? 3 : cp >= 0xe0 ? 2 : 1;
			cp &= 0x3f >> more;
			for (; more > 0 && p < end; more--)
				cp = cp << 6 | (*p++ & 0x3f);
		}
		switch (cp) {
		case '"': len = 2, memcpy(esc, "\\\"", 2); break;
		case '\\': len = 2, memcpy(esc, "\\\\", 2); break;
		case '\b': len = 2, memcpy(esc, "\\b", 2); break;
		case '\f': len = 2, memcpy(esc, "\\f", 2); break;
		case '\n': len = 2, memcpy(esc, "\\n", 2); break;
		case '\r': len = 2, memcpy(esc, "\\r", 2); break;
		case '\t': len = 2, memcpy(esc, "\\t", 2); break;
		default:
			if (cp >= 0x10000) { /* a surrogate pair */
				uint32_t v = cp - 0x10000, hi = 0xd800 | v >> 10, lo = 0xdc00 | (v & 0x3ff);
				for (int k = 0; k < 2; k++, hi = lo) {
					esc[len++] = '\\', esc[len++] = 'u';
					for (int sh = 12; sh >= 0; sh -= 4)
						esc[len++] = hex[hi >> sh & 0xf];
				}
			} else {
				esc[len++] = '\\', esc[len++] = 'u';
				for (int sh = 12; sh >= 0; sh -= 4)
					esc[len++] = hex[cp >> sh & 0xf];
			}
		}
		buf_append(b, esc, len);
	}
	buf_append(b, "\"", 1);
}

/* obj compactly; strings by output_json_string, other scalars by jansson. */
static void
dump(struct buf *b, json_t *obj)
{
	const char *key;
	json_t *v;
	size_t i, klen;

	switch (json_typeof(obj)) {
	case JSON_OBJECT:
		buf_append(b, "{", 1);
		i = 0;
		json_object_keylen_foreach(obj, key, klen, v)
		{
			if (i++)
				buf_append(b, ",", 1);
			output_json_string(b, key, klen);
			buf_append(b, ":", 1);
			dump(b, v);
		}
		buf_append(b, "}", 1);
		break;
	case JSON_ARRAY:
		buf_append(b, "[", 1);
		json_array_foreach(obj, i, v)
		{
			if (i)
				buf_append(b, ",", 1);
			dump(b, v);
		}
		buf_append(b, "]", 1);
		break;
	case JSON_STRING:
		output_json_string(b, json_string_value(obj), json_string_length(obj));
		break;
	default: {
		char *t = json_dumps(obj, JSON_COMPACT | JSON_ENCODE_ANY);
		if (t)
			buf_append(b, t, strlen(t));
		free(t);
	}
	}
}

/* Appends obj as one NDJSON line and releases it. */
void
output_line(struct buf *b, json_t *obj)
{
	if (obj) {
		dump(b, obj);
		buf_append(b, "\n", 1);
	}
	json_decref(obj);
}

void
output_error(struct buf *b, const char *name, const char *value, const char *tb)
{
	output_line(b, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", name,
				 "value", value, "traceback", tb ? tb : ""));
}

void
output_end(struct buf *b)
{
	static const char end[] = "{\"type\":\"end_of_execution\"}\n";

	buf_append(b, end, sizeof(end) - 1);
}

/* Traceback lines joined with newlines; NUL characters survive. */
static json_t *
join_traceback(json_t *tb)
{
	struct buf b = {0};
	size_t i;
	json_t *line;

	json_array_foreach(tb, i, line)
	{
		if (!json_is_string(line))
			continue;
		if (i > 0)
			buf_append(&b, "\n", 1);
		buf_append(&b, json_string_value(line), json_string_length(line));
	}
	json_t *s = json_stringn(b.b_data ? b.b_data : "", b.b_len);
	buf_free(&b);
	return s;
}

/*
 * A stream message as lines of at most OUTPUT_LINE_TEXT bytes of text each,
 * cut between UTF-8 characters: a kernel that sends 200 MB at once gives
 * its client 200 lines it can parse one by one, not one line of 200 MB.
 */
static void
stream_lines(struct buf *b, const char *type, const char *s, size_t n)
{
	char ts[64];
	size_t at = 0;

	iso_time(ts);
	do {
		size_t k = n - at > OUTPUT_LINE_TEXT ? OUTPUT_LINE_TEXT : n - at;
		while (at + k < n && k > 0 && ((unsigned char)s[at + k] & 0xc0) == 0x80)
			k--; /* s[at + k] continues a character: cut before it */
		buf_append(b, "{\"type\":\"", 9);
		buf_append(b, type, strlen(type));
		buf_append(b, "\",\"text\":", 9);
		output_json_string(b, s + at, k);
		buf_append(b, ",\"timestamp\":\"", 14);
		buf_append(b, ts, strlen(ts));
		buf_append(b, "\"}\n", 3);
		at += k;
	} while (at < n);
}

/* A line of the proxy's own on stderr. */
void
output_stderr(struct buf *b, const char *text)
{
	stream_lines(b, "stderr", text, strlen(text));
}

/*
 * Maps one iopub message; returns whether it produced a line. Kernels that
 * show values as display_data (IRkernel) have them marked as main results.
 */
bool
output_iopub(struct buf *b, const char *type, json_t *c, bool display_is_result)
{
	if (!strcmp(type, "stream")) {
		const char *name = json_string_value(json_object_get(c, "name"));
		json_t *text = json_object_get(c, "text");
		if (!name || !json_is_string(text))
			return false;
		stream_lines(b, strcmp(name, "stderr") ? "stdout" : "stderr",
			     json_string_value(text), json_string_length(text));
	} else if (!strcmp(type, "execute_result") || !strcmp(type, "display_data")) {
		json_t *data = json_object_get(c, "data");
		if (!json_is_object(data))
			return false;
		output_line(b, output_result(data, !strcmp(type, "execute_result") ||
						       (display_is_result &&
							json_object_get(data, "text/plain"))));
	} else if (!strcmp(type, "error")) {
		json_t *ename = json_object_get(c, "ename"), *evalue = json_object_get(c, "evalue");
		output_line(b, json_pack("{s:s, s:o, s:o, s:o}", "type", "error", "name",
					 json_is_string(ename) ? json_incref(ename)
							       : json_string("Error"),
					 "value",
					 json_is_string(evalue) ? json_incref(evalue) : json_string(""),
					 "traceback", join_traceback(json_object_get(c, "traceback"))));
	} else if (!strcmp(type, "execute_input")) {
		json_t *n = json_object_get(c, "execution_count");
		if (!json_is_integer(n))
			return false;
		output_line(b, json_pack("{s:s, s:I}", "type", "number_of_executions",
					 "execution_count", json_integer_value(n)));
	} else {
		return false;
	}
	return true;
}
