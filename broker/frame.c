/*
 * frame.c — an HTTP request's text, read without libmicrohttpd: whether bytes
 * can start a request line (accept.c), the path's escapes and how a client's
 * string is echoed (http.c), and where a request's body ends (RFC 9112 6):
 * at one Content-Length, or at the last chunk of a Transfer-Encoding of just
 * "chunked". A request that says it any other way is refused: what follows
 * it could be read as a next request by us and as its body by a proxy in
 * front (request smuggling), so its connection is closed after the 400.
 * Decided for accept.c (a connection's first head, as it came) and http.c
 * (each request's fields, as libmicrohttpd parsed them).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "broker.h"

#define METHOD_MAX 32     /* longer than any method a client sends */
#define BLANK_LINES_MAX 8 /* empty lines before a request line (RFC 9112 2.2) */

bool
frame_tchar(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') || (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static bool
is_name(const char *name, size_t len, const char *want)
{
	return len == strlen(want) && !strncasecmp(name, want, len);
}

/*
 * One field of a request head. Values are taken as MHD takes them (leading
 * spaces dropped, trailing ones kept), since it is MHD that reads the body:
 * "chunked " is not chunked to it, "5 " not a length.
 */
void
frame_field(struct frame *fr, const char *name, size_t namelen, const char *value,
            size_t valuelen)
{
	uint64_t len = 0;
	size_t i;

	if (fr->fr_why)
		return;
	for (i = 0; i < namelen && frame_tchar(name[i]); i++)
		;
	if (!namelen || i < namelen) {
		fr->fr_why =
		    "a header name with a space or a character not allowed in it "
		    "(RFC 9112 5.1)";
		return;
	}
	if (is_name(name, namelen, "Content-Length")) {
		for (i = 0; i < valuelen && value[i] >= '0' && value[i] <= '9'; i++)
			len = len > (UINT64_MAX - 9) / 10 ? UINT64_MAX
			                                  : len * 10 + (value[i] - '0');
		if (!valuelen || i < valuelen)
			fr->fr_why = "Content-Length must be one decimal number";
		else if (fr->fr_cl && len != fr->fr_len)
			fr->fr_why = "two Content-Length fields that differ";
		fr->fr_cl = true;
		fr->fr_len = len;
	} else if (is_name(name, namelen, "Transfer-Encoding")) {
		if (fr->fr_te || !is_name(value, valuelen, "chunked"))
			fr->fr_why =
			    "a Transfer-Encoding other than chunked: not supported";
		fr->fr_te = true;
	}
	if (!fr->fr_why && fr->fr_cl && fr->fr_te)
		fr->fr_why =
		    "both Content-Length and Transfer-Encoding: the body's end is "
		    "ambiguous";
}

/*
 * A request head as it came off the wire, b[0..n): 1 once it is complete and
 * well framed, -1 (the reason in *why) when it is not, 0 while it is not
 * whole. Only here are folded lines seen: MHD joins one to the field's name.
 * A request line without a version has no head to wait for (MHD refuses it).
 */
int
frame_head(const char *b, size_t n, const char **why)
{
	const char *p = b, *end = b + n, *eol, *sp, *colon, *v;
	struct frame fr = {0};
	size_t len;

	while (p < end && (*p == '\r' || *p == '\n'))
		p++;
	if (!(eol = memchr(p, '\n', end - p)))
		return 0;
	if (!(sp = memchr(p, ' ', eol - p)) || !memchr(sp + 1, ' ', eol - sp - 1))
		return 1;
	for (p = eol + 1; (eol = memchr(p, '\n', end - p)); p = eol + 1) {
		len = eol - p - (eol > p && eol[-1] == '\r');
		if (!len)
			return 1;
		if (*p == ' ' || *p == '\t') {
			*why =
			    "a header line that starts with a space or a tab (obs-fold, "
			    "RFC 9112 5.2)";
			return -1;
		}
		if (!(colon = memchr(p, ':', len)))
			continue; /* MHD's own 400 */
		for (v = colon + 1; v < p + len && (*v == ' ' || *v == '\t'); v++)
			;
		frame_field(&fr, p, colon - p, v, p + len - v);
		if ((*why = fr.fr_why))
			return -1;
	}
	return 0;
}

/*
 * Whether b[0..n) can start an HTTP request line: 1 once a method, a space
 * and the first byte of a target are seen, -1 when it cannot be one, 0 while
 * it may still become one.
 */
int
frame_request_line(const char *b, size_t n)
{
	size_t i = 0, m;

	while (i < n && (b[i] == '\r' || b[i] == '\n'))
		if (++i > BLANK_LINES_MAX * 2)
			return -1;
	for (m = i; m < n && frame_tchar(b[m]); m++)
		if (m - i >= METHOD_MAX)
			return -1;
	if (m == n)
		return 0;
	if (m == i || b[m] != ' ')
		return -1;
	if (++m == n)
		return 0;
	return b[m] > ' ' && b[m] < 0x7f ? 1 : -1;
}

/*
 * A client's string as it may be echoed in an answer: printable ASCII, other
 * bytes as \xHH, cut with "..." to fit out. Returns out.
 */
const char *
frame_quote(const char *s, char *out, size_t outsz)
{
	size_t n = 0;

	for (; *s && n + 4 < outsz; s++) {
		unsigned char ch = *s;
		if (ch >= 0x20 && ch < 0x7f && ch != '\\')
			out[n++] = ch;
		else
			n += snprintf(out + n, outsz - n, "\\x%02x", ch);
	}
	if (*s && outsz >= 4)
		strcpy(out + (n + 4 <= outsz ? n : outsz - 4), "...");
	else if (outsz)
		out[n < outsz ? n : outsz - 1] = '\0';
	return out;
}

static int
hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')
		return (ch | 0x20) - 'a' + 10;
	return -1;
}

static size_t unescape(char *s, bool *bad, bool slash_ok);

/*
 * Decodes %HH once, in place; returns the new length. An encoded '/' or NUL
 * stays encoded (it would split or cut an id) and sets *bad.
 */
size_t
frame_unescape(char *s, bool *bad)
{
	return unescape(s, bad, false);
}

/* The same, but an encoded '/' is one (query values carry paths: envd.c); *bad
 * still says it was there, so a path with one is refused all the same. */
size_t
frame_unescape_path(char *s, bool *bad)
{
	return unescape(s, bad, true);
}

static size_t
unescape(char *s, bool *bad, bool slash_ok)
{
	char *r = s, *w = s;

	*bad = false;
	while (*r) {
		int hi, lo;
		if (r[0] != '%' || (hi = hexval(r[1])) < 0 || (lo = hexval(r[2])) < 0) {
			*w++ = *r++;
			continue;
		}
		char ch = (char)(hi << 4 | lo);
		if (ch == '/' && slash_ok) {
			*bad = true;
			*w++ = ch;
		} else if (ch == '/' || ch == '\0') {
			*bad = true;
			memmove(w, r, 3);
			w += 3;
		} else {
			*w++ = ch;
		}
		r += 3;
	}
	*w = '\0';
	return w - s;
}
