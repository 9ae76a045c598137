/*
 * gzip.c — whether a client takes gzip (Accept-Encoding), for envd's
 * /files downloads; envdfile.c deflates and inflates as bytes stream, with
 * zlib (docs/ENVD.md).
 */
#include <stdlib.h>
#include <string.h>

#include "http.h"

/* Whether an Accept-Encoding value takes gzip: named, and not with q=0. */
static bool
takes_gzip(const char *accept)
{
	const char *g = accept ? strcasestr(accept, "gzip") : NULL;

	if (!g)
		return false;
	g += 4 + strspn(g + 4, " ");
	if (*g != ';')
		return true;
	g += 1 + strspn(g + 1, " ");
	return strncmp(g, "q=", 2) || strtod(g + 2, NULL) > 0;
}

/* Whether the client takes a gzip answer (its Accept-Encoding). */
bool
gzip_takes(struct MHD_Connection *c)
{
	return takes_gzip(
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept-Encoding"));
}
