/*
 * api.c — the code API's routes: one table (http_routes[]) of method, path
 * and what serves it, from which api_route() dispatches a request after
 * http.c's checks (a CORS preflight and envd's API go their own ways there)
 * and api_endpoint() names a path's template for the metrics; the
 * endpoints' own answers (/health, /ready, /metrics, /openapi.json,
 * /languages, the contexts' list and JSON) and the bodies of /execute and
 * POST /contexts; what a request does is request.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

static json_t *
parse_body(struct http_request *hr, char *err, size_t errsz)
{
	json_error_t jerr;
	json_t *j;

	if (hr->hr_body.b_len == 0) {
		snprintf(err, errsz, "a JSON body is required");
		return NULL;
	}
	j = json_loadb(buf_head(&hr->hr_body), buf_pending(&hr->hr_body),
	               JSON_REJECT_DUPLICATES, &jerr);
	if (!j)
		snprintf(err, errsz, "invalid JSON body: %s (line %d, column %d)",
		         jerr.text, jerr.line, jerr.column);
	else if (!json_is_object(j)) {
		snprintf(err, errsz, "the body must be a JSON object");
		json_decref(j);
		j = NULL;
	}
	return j;
}

static enum MHD_Result
do_execute(struct http_request *hr, struct context *ctx, const char *id)
{
	char err[1024];
	json_t *body;

	(void)ctx, (void)id;
	if (!(body = parse_body(hr, err, sizeof(err))))
		return respond_now(hr, 400, respond_text("%s", err));
	request_execute(&hr->hr_rq, body);
	json_decref(body);
	return MHD_YES;
}

static enum MHD_Result
do_create(struct http_request *hr, struct context *ctx, const char *id)
{
	char err[1024];
	const char *language = NULL, *cwd = NULL;
	struct egress_lists net = {0};
	json_t *body = NULL;

	(void)ctx, (void)id;
	if (hr->hr_body.b_len) {
		if (!(body = parse_body(hr, err, sizeof(err))))
			return respond_now(hr, 400, respond_text("%s", err));
		if (validate_opt_string(body, "language", &language, err, sizeof(err)) <
		        0 ||
		    validate_opt_string(body, "cwd", &cwd, err, sizeof(err)) < 0 ||
		    egress_context(body, &net, err, sizeof(err)) < 0) {
			json_decref(body);
			return respond_now(hr, 400, respond_text("%s", err));
		}
	}
	request_create(&hr->hr_rq, language, cwd, &net);
	egress_free(&net);
	json_decref(body);
	return MHD_YES;
}

static enum MHD_Result
do_languages(struct http_request *hr, struct context *ctx, const char *id)
{
	struct kspec **v;
	size_t n;
	json_t *a = json_array();

	(void)ctx, (void)id;
	kspec_list(&v, &n);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a,
		                      json_pack("{s:s, s:s}", "language", v[i]->ks_lang,
		                                "kernelspec", v[i]->ks_name));
	kspec_list_free(v, n);
	return respond_now(hr, 200, respond_json(a));
}

static enum MHD_Result
do_list(struct http_request *hr, struct context *ctx, const char *id)
{
	(void)ctx, (void)id;
	return respond_now(hr, 200, respond_json(context_list_json(false)));
}

static enum MHD_Result
do_metrics(struct http_request *hr, struct context *ctx, const char *id)
{
	size_t len;
	struct context_counts cc;

	(void)ctx, (void)id;
	context_count(&cc, NULL);
	char *text = metrics_render(&cc, stream_count(), box_missing(), &len);
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);

	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
	                        "text/plain; version=0.0.4; charset=utf-8");
	return respond_now(hr, 200, r);
}

/* The OpenAPI document of this API (openapi.c). */
static enum MHD_Result
do_openapi(struct http_request *hr, struct context *ctx, const char *id)
{
	size_t len;
	const char *doc = openapi_json(&len);
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(len, (void *)doc, MHD_RESPMEM_PERSISTENT);

	(void)ctx, (void)id;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CT_JSON);
	return respond_now(hr, 200, r);
}

/*
 * Readiness, for a load balancer or a Kubernetes readiness probe: 503 while
 * draining or while a default context's kernel is not answering (starting at
 * start-up, restarting after a crash); 200 otherwise. A default context a
 * client deleted does not hold it back: the next /execute starts it again.
 * Its 200 says the sandbox's level and what it lacks here (box.c).
 */
static enum MHD_Result
do_ready(struct http_request *hr, struct context *ctx, const char *id)
{
	struct context *c;

	(void)ctx, (void)id;
	if (lifecycle_draining())
		return respond_now(hr, 503, respond_text("not ready: draining"));
	CONTEXT_FOREACH(c)
	{
		if (!context_is_default(c) || !context_listed(c))
			continue;
		const char *state = context_state(c);
		if (!context_ready(c) || (strcmp(state, "idle") && strcmp(state, "busy")))
			return respond_now(
			    hr, 503,
			    respond_text("not ready: the default %s context is %s",
			                 context_lang(c), state));
	}
	/* and how far kernels are boxed here: an operator's first question about a
	 * deployment */
	return respond_now(hr, 200,
	                   respond_json(json_pack("{s:s, s:o}", "status", "OK", "sandbox",
	                                          box_level_json())));
}

static enum MHD_Result
do_health(struct http_request *hr, struct context *c, const char *id)
{
	(void)c, (void)id;
	return respond_now(hr, 200, respond_json(json_string("OK")));
}

static enum MHD_Result
do_context(struct http_request *hr, struct context *c, const char *id)
{
	(void)id;
	return respond_now(hr, 200, respond_json(context_json(c, true)));
}

static enum MHD_Result
do_delete(struct http_request *hr, struct context *c, const char *id)
{
	(void)c;
	request_context(&hr->hr_rq, id, OP_DELETE);
	return MHD_YES;
}

static enum MHD_Result
do_restart(struct http_request *hr, struct context *c, const char *id)
{
	(void)c;
	request_context(&hr->hr_rq, id, OP_RESTART);
	return MHD_YES;
}

static enum MHD_Result
do_interrupt(struct http_request *hr, struct context *c, const char *id)
{
	(void)c;
	request_context(&hr->hr_rq, id, OP_INTERRUPT);
	return MHD_YES;
}

/*
 * The code API: a method ("GET" serves HEAD too: MHD leaves the body out),
 * a path as docs/openapi.json writes it ("{id}" a context's id: a run of
 * anything but '/', the context looked up before the method is), and what
 * serves it. api_route() dispatches from it, the metrics' endpoint label is its
 * path, and tests/api/openapi_test.py checks that its method and path pairs
 * are the document's operations.
 */
static const struct http_route {
	const char *ht_method;
	const char *ht_path;
	enum MHD_Result (*ht_serve)(struct http_request *hr, struct context *c,
	                            const char *id);
} http_routes[] = {
    {"GET", "/health", do_health},
    {"GET", "/ready", do_ready},
    {"POST", "/execute", do_execute},
    {"GET", "/metrics", do_metrics},
    {"GET", "/openapi.json", do_openapi},
    {"GET", "/languages", do_languages},
    {"POST", "/contexts", do_create},
    {"GET", "/contexts", do_list},
    {"GET", "/contexts/{id}", do_context},
    {"DELETE", "/contexts/{id}", do_delete},
    {"POST", "/contexts/{id}/restart", do_restart},
    {"POST", "/contexts/{id}/interrupt", do_interrupt},
};
#define N_ROUTES (sizeof(http_routes) / sizeof(http_routes[0]))

enum http_match { HM_NONE, HM_ID, HM_PATH };

/*
 * url against a route's path: HM_PATH when it is that path, else HM_ID when
 * it matched up to and through the path's {id} (a context's id, then
 * something else), else HM_NONE. The id's span is *id, *idlen.
 */
static enum http_match
http_match(const char *path, const char *url, const char **id, size_t *idlen)
{
	bool bound = false;

	while (*path) {
		if (!strncmp(path, "{id}", 4)) {
			*id = url;
			*idlen = strcspn(url, "/");
			url += *idlen;
			path += 4;
			bound = true;
		} else if (*path++ != *url++)
			return bound ? HM_ID : HM_NONE;
	}
	return *url ? (bound ? HM_ID : HM_NONE) : HM_PATH;
}

/* The path template of url (the metrics' label: bounded), "other" if none. */
const char *
api_endpoint(const char *url)
{
	const char *id;
	size_t idlen;

	for (size_t i = 0; i < N_ROUTES; i++)
		if (http_match(http_routes[i].ht_path, url, &id, &idlen) == HM_PATH)
			return http_routes[i].ht_path;
	return "other";
}

enum MHD_Result
api_route(struct http_request *hr, const char *url, const char *method)
{
	const char *m = !strcmp(method, "HEAD") ? "GET" : method;
	const struct http_route *path = NULL, *hit = NULL;
	const char *idp = NULL;
	size_t idlen = 0;
	char id[64], quoted[96];
	struct context *c = NULL;

	for (size_t i = 0; i < N_ROUTES; i++) {
		enum http_match hm =
		    http_match(http_routes[i].ht_path, url, &idp, &idlen);
		if (hm == HM_NONE)
			continue;
		if (hm == HM_PATH && !path)
			path = &http_routes[i];
		if (hm == HM_PATH && !hit && !strcmp(m, http_routes[i].ht_method))
			hit = &http_routes[i];
	}
	/* under a context's id: that context first, whatever follows it */
	if (idp) {
		if (idlen >= sizeof(id))
			return respond_now(
			    hr, 404,
			    respond_text("no such context: its id is %zu "
			                 "bytes long; ids are 36 characters",
			                 idlen));
		snprintf(id, sizeof(id), "%.*s", (int)idlen, idp);
		if (!(c = context_find(id)))
			return respond_now(
			    hr, 404,
			    respond_text("context '%s' not found",
			                 frame_quote(id, quoted, sizeof(quoted))));
	}
	if (!path)
		return respond_now(hr, 404,
		                   respond_text("no such endpoint: %.128s", url));
	if (!hit)
		return respond_now(
		    hr, 405,
		    respond_text("method %.16s not allowed on %.128s", method, url));
	return hit->ht_serve(hr, c, idp ? id : NULL);
}
