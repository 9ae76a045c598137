/*
 * gzip.c — gzip on envd's /files (docs/ENVD.md): an upload sent with
 * Content-Encoding: gzip is inflated, never past the body limit (a small
 * body that inflates to more is 413, as a large one); a download is
 * deflated for a client whose Accept-Encoding takes gzip (zlib).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "broker.h"

#define GZIP_WINDOW (15 + 16) /* zlib's gzip wrapper */

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

/*
 * The body as sent, inflated when its Content-Encoding is gzip: 0; -EFBIG
 * past max bytes; -EINVAL when it is not gzip; -ENOTSUP for an encoding
 * other than gzip or identity.
 */
int
gzip_body(struct MHD_Connection *c, struct buf *body, size_t max)
{
	const char *enc =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
	z_stream z = {0};
	struct buf out = {0};
	char chunk[64 << 10];
	int rc = 0, zr;

	if (!enc || !*enc || !strcasecmp(enc, "identity"))
		return 0;
	if (strcasecmp(enc, "gzip"))
		return -ENOTSUP;
	if (inflateInit2(&z, GZIP_WINDOW) != Z_OK)
		return -ENOMEM;
	z.next_in = (Bytef *)(body->b_data ? buf_head(body) : "");
	z.avail_in = (uInt)buf_pending(body);
	do {
		z.next_out = (Bytef *)chunk;
		z.avail_out = sizeof(chunk);
		zr = inflate(&z, Z_NO_FLUSH);
		if (zr != Z_OK && zr != Z_STREAM_END) {
			rc = -EINVAL;
			break;
		}
		size_t n = sizeof(chunk) - z.avail_out;
		if (buf_pending(&out) + n > max) {
			rc = -EFBIG;
			break;
		}
		buf_append(&out, chunk, n);
	} while (zr != Z_STREAM_END && (z.avail_in || !z.avail_out));
	if (!rc && zr != Z_STREAM_END)
		rc = -EINVAL; /* cut short */
	inflateEnd(&z);
	if (rc) {
		buf_free(&out);
		return rc;
	}
	buf_free(body);
	*body = out;
	return 0;
}

/* A file's bytes as the response: gzip when the client takes it. */
struct MHD_Response *
gzip_response(struct MHD_Connection *c, const char *data, size_t len)
{
	const char *accept =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept-Encoding");
	struct MHD_Response *r = NULL;
	z_stream z = {0};

	if (takes_gzip(accept) &&
	    deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, GZIP_WINDOW, 8,
	                 Z_DEFAULT_STRATEGY) == Z_OK) {
		uLong cap = deflateBound(&z, len);
		char *out = xmalloc(cap ? cap : 1);
		z.next_in = (Bytef *)data;
		z.avail_in = (uInt)len;
		z.next_out = (Bytef *)out;
		z.avail_out = (uInt)cap;
		if (deflate(&z, Z_FINISH) == Z_STREAM_END) {
			r = MHD_create_response_from_buffer(z.total_out, out,
			                                    MHD_RESPMEM_MUST_FREE);
			MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING,
			                        "gzip");
		} else {
			free(out);
		}
		deflateEnd(&z);
	}
	if (!r)
		r = MHD_create_response_from_buffer(len, (void *)data,
		                                    MHD_RESPMEM_MUST_COPY);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
	                        "application/octet-stream");
	MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Accept-Encoding");
	return r;
}
