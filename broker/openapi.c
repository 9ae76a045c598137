/*
 * openapi.c — GET /openapi.json: the OpenAPI 3.1 document of the HTTP API.
 * It is written once, docs/openapi.json, and assembled into the binary as it
 * is (.incbin; the Makefile rebuilds this file when it changes), so a broker
 * never serves a document of another build or goes looking for a file.
 */
#include <stdio.h>
#include <string.h>

#include "broker.h"

/* the document's bytes, then a NUL (paths are the build's: make runs at the top) */
__asm__(".section .rodata\n"
	".global openapi_doc\n"
	"openapi_doc:\n"
	".incbin \"docs/openapi.json\"\n"
	".byte 0\n"
	".previous\n");
extern const char openapi_doc[];

static char *doc;
static size_t doc_len;

/*
 * Parses the document once, at start-up, with this build's version in
 * info.version. A document that is not JSON is a broken build: fatal.
 */
void
openapi_init(void)
{
	json_error_t err;
	json_t *j = json_loads(openapi_doc, 0, &err);

	if (!j || !json_is_object(json_object_get(j, "info")))
		fatal("the built-in OpenAPI document (docs/openapi.json) is broken: %s (line %d)",
		      j ? "no info object" : err.text, j ? 0 : err.line);
	json_object_set_new(json_object_get(j, "info"), "version", json_string(SANDCELL_VERSION));
	doc = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(j);
	if (!doc)
		fatal("out of memory");
	doc_len = strlen(doc);
}

/* The document as served; it lives as long as the broker. */
const char *
openapi_json(size_t *len)
{
	*len = doc_len;
	return doc;
}
