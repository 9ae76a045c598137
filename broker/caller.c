/*
 * caller.c — which callers the HTTP API answers. A web page the operator
 * opens must not be one: a browser sends a cross-origin "simple" POST
 * (text/plain, a form) without asking, and after DNS rebinding it sends it
 * to this server under the page's own name. So a request is refused (403)
 * when its Origin is not one --allowed-origin lists, or its Host is neither
 * loopback, an IP literal nor an --allowed-host name; a body must say it is
 * JSON (415), which no simple request can. CORS preflights (OPTIONS) are
 * answered for the listed origins only, and their requests' answers carry
 * Access-Control-Allow-Origin. Clients that are not browsers send no Origin.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http.h"

#define CALLER_MAX 64    /* names in each list */
#define NAME_MAX_LEN 253 /* a DNS name's text */

/* What a browser may send to this API: E2B's SDK sends all of these. */
#define ALLOW_HEADERS                                                                    \
	"Content-Type, X-Access-Token, Authorization, E2B-Traffic-Access-Token, "        \
	"E2b-Sandbox-Id, E2b-Sandbox-Port"

/* --allowed-origin, --allowed-host: each list, "*" for any */
static char *origins[CALLER_MAX], *hosts[CALLER_MAX];
static size_t norigins, nhosts;
static bool any_origin, any_host;

static bool
listed(char *const *v, size_t n, const char *s, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(v[i]) == len && !strncasecmp(v[i], s, len))
			return true;
	return false;
}

/* scheme://host[:port], as a browser serializes an origin: no path, no slash */
static bool
origin_valid(const char *o)
{
	const char *p = o, *sep = strstr(o, "://");

	if (!sep || sep == o)
		return false;
	for (; p < sep; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (p > o && ((*p >= '0' && *p <= '9') || strchr("+.-", *p)))))
			return false;
	for (p = sep + 3; *p; p++)
		if (*p <= ' ' || *p >= 0x7f || strchr("/?#@\\", *p))
			return false;
	return p > sep + 3;
}

static bool
host_name_valid(const char *h)
{
	size_t n = strlen(h);

	if (!n || n > NAME_MAX_LEN)
		return false;
	for (const char *p = h; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_'))
			return false;
	return true;
}

/* One option value: names split at commas or spaces, each checked, into v. */
static int
add(const char *val, const char *origin, char **v, size_t *n, bool *any,
    bool (*valid)(const char *), const char *expect)
{
	char *copy = xstrdup(val), *save = NULL;
	int rc = 0;

	for (char *t = strtok_r(copy, ", \t\n", &save); t;
	     t = strtok_r(NULL, ", \t\n", &save)) {
		if (!strcmp(t, "*")) {
			*any = true;
			continue;
		}
		if (!valid(t)) {
			fprintf(stderr, "sandcell-broker: %s '%s': expected %s, or *\n",
			        origin, t, expect);
			rc = -1;
			break;
		}
		if (*n >= CALLER_MAX) {
			fprintf(stderr, "sandcell-broker: %s: more than %d names\n",
			        origin, CALLER_MAX);
			rc = -1;
			break;
		}
		if (!listed(v, *n, t, strlen(t)))
			v[(*n)++] = xstrdup(t);
	}
	free(copy);
	return rc;
}

int
caller_origin_option(const char *val, const char *origin)
{
	return add(
	    val, origin, origins, &norigins, &any_origin, origin_valid,
	    "an origin such as https://app.example.com or http://localhost:3000 (no "
	    "path, no trailing /)");
}

int
caller_host_option(const char *val, const char *origin)
{
	return add(val, origin, hosts, &nhosts, &any_host, host_name_valid,
	           "a host name such as sandcell.example.svc (no port)");
}

/*
 * Whether a Host header's value names this server for a caller the operator
 * meant: loopback by name (localhost, *.localhost: RFC 6761, never from DNS),
 * any IP literal (a rebinding page's Host is its own name), or a listed name;
 * a port is ignored.
 */
bool
caller_host_allowed(const char *host)
{
	char name[NAME_MAX_LEN + 2];
	unsigned char addr[16];
	const char *end, *colon;
	size_t len;

	if (any_host || !*host)
		return true; /* an empty or absent Host is no browser's */
	if (host[0] == '[') {
		if (!(end = strchr(host, ']')) ||
		    (size_t)(end - host - 1) >= sizeof(name))
			return false;
		snprintf(name, sizeof(name), "%.*s", (int)(end - host - 1), host + 1);
		colon = end + 1;
		return (!*colon || (colon[0] == ':' && strspn(colon + 1, "0123456789") ==
		                                           strlen(colon + 1))) &&
		       inet_pton(AF_INET6, name, addr) == 1;
	}
	len = (colon = strchr(host, ':')) ? (size_t)(colon - host) : strlen(host);
	if (colon && strspn(colon + 1, "0123456789") != strlen(colon + 1))
		return false;
	if (len && host[len - 1] == '.')
		len--; /* the root's dot: localhost. is localhost */
	if (!len || len >= sizeof(name))
		return false;
	snprintf(name, sizeof(name), "%.*s", (int)len, host);
	if (inet_pton(AF_INET, name, addr) == 1 || !strcasecmp(name, "localhost") ||
	    (len > 10 && !strcasecmp(name + len - 10, ".localhost")))
		return true;
	return listed(hosts, nhosts, name, len);
}

static bool
origin_allowed(const char *o)
{
	return any_origin || listed(origins, norigins, o, strlen(o));
}

/*
 * Why a request's caller is refused (403), or NULL. Asked before anything
 * else is read of it, its body included.
 */
const char *
caller_refusal(struct MHD_Connection *conn, char *why, size_t whysz)
{
	const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
	const char *o = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
	char quoted[96];

	if (host && !caller_host_allowed(host)) {
		snprintf(
		    why, whysz,
		    "Host '%s' is not this server's: a request must name it by a "
		    "loopback "
		    "name, an IP address or a name the server lists (--allowed-host)",
		    frame_quote(host, quoted, sizeof(quoted)));
		return why;
	}
	if (o && !origin_allowed(o)) {
		snprintf(why, whysz,
		         "Origin '%s' is not allowed: requests from web pages are "
		         "refused unless "
		         "the server lists their origin (--allowed-origin)",
		         frame_quote(o, quoted, sizeof(quoted)));
		return why;
	}
	return NULL;
}

/*
 * Why a request's body is refused (415), or NULL: one that carries a body
 * must say it is JSON (application/json, parameters allowed).
 */
const char *
caller_body_refusal(struct MHD_Connection *conn, char *why, size_t whysz)
{
	const char *cl =
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
	const char *te =
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
	const char *ct =
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
	const char *t = ct;
	char quoted[96];

	if (!te && (!cl || strtoull(cl, NULL, 10) == 0))
		return NULL;
	if (t) {
		t += strspn(t, " \t");
		if (!strncasecmp(t, CT_JSON, strlen(CT_JSON)) &&
		    strchr(" \t;", t[strlen(CT_JSON)]))
			return NULL; /* strchr finds the NUL too: the type alone */
	}
	snprintf(
	    why, whysz,
	    "a request body must be JSON sent with Content-Type: application/json (this "
	    "one's is %s%s%s)",
	    ct ? "'" : "", ct ? frame_quote(ct, quoted, sizeof(quoted)) : "not given",
	    ct ? "'" : "");
	return why;
}

/* Whether this request is a CORS preflight from a listed origin (to answer 204). */
bool
caller_preflight(struct MHD_Connection *conn, const char *method)
{
	return !strcmp(method, "OPTIONS") &&
	       MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
}

/* The CORS headers of an answer to a listed origin's request (none for others). */
void
caller_cors(struct MHD_Connection *conn, struct MHD_Response *r, bool preflight)
{
	const char *o = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");

	if (!o || !origin_allowed(o))
		return;
	MHD_add_response_header(r, "Access-Control-Allow-Origin", o);
	MHD_add_response_header(r, "Vary", "Origin");
	if (!preflight)
		return;
	MHD_add_response_header(r, "Access-Control-Allow-Methods",
	                        "GET, POST, DELETE, OPTIONS");
	MHD_add_response_header(r, "Access-Control-Allow-Headers", ALLOW_HEADERS);
	MHD_add_response_header(r, "Access-Control-Max-Age", "600");
}
