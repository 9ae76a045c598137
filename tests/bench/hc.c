/*
 * hc.c — the benchmarks' HTTP client: POST /execute over one reused libcurl
 * connection, reading the NDJSON stream without keeping it (only the first
 * bytes of each line are looked at), so that the client costs little next to
 * what it measures; and parallel context creation and deletion.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void
hc_line(struct hc *h)
{
	const char *p = h->hc_head;
	size_t n = h->hc_headlen;

	if (memmem(p, n, "\"type\":\"stdout\"", 15))
		h->hc_lines_stdout++;
	else if (memmem(p, n, "\"type\":\"result\"", 15))
		h->hc_lines_result++;
	else if (memmem(p, n, "\"type\":\"error\"", 14))
		h->hc_lines_error++;
	else if (memmem(p, n, "\"type\":\"end_of_execution\"", 25))
		h->hc_end = true;
	h->hc_headlen = 0;
}

static size_t
hc_write(char *p, size_t sz, size_t nm, void *arg)
{
	struct hc *h = arg;
	size_t len = sz * nm, off = 0;

	h->hc_bytes += len;
	while (off < len) {
		const char *nl = memchr(p + off, '\n', len - off);
		size_t seg = nl ? (size_t)(nl - (p + off)) : len - off;
		size_t room = sizeof(h->hc_head) - h->hc_headlen;
		memcpy(h->hc_head + h->hc_headlen, p + off, seg < room ? seg : room);
		h->hc_headlen += seg < room ? seg : room;
		off += seg;
		if (nl) {
			hc_line(h);
			off++;
		}
	}
	return len;
}

int
hc_init(struct hc *h, const char *base)
{
	memset(h, 0, sizeof(*h));
	if (!(h->hc_curl = curl_easy_init()))
		return -1;
	snprintf(h->hc_url, sizeof(h->hc_url), "%s/execute", base);
	h->hc_hdr = curl_slist_append(NULL, "Content-Type: application/json");
	curl_easy_setopt(h->hc_curl, CURLOPT_URL, h->hc_url);
	curl_easy_setopt(h->hc_curl, CURLOPT_HTTPHEADER, h->hc_hdr);
	curl_easy_setopt(h->hc_curl, CURLOPT_TIMEOUT_MS, 300000L);
	curl_easy_setopt(h->hc_curl, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(h->hc_curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h->hc_curl, CURLOPT_WRITEFUNCTION, hc_write);
	curl_easy_setopt(h->hc_curl, CURLOPT_WRITEDATA, h);
	return 0;
}

void
hc_free(struct hc *h)
{
	if (h->hc_curl)
		curl_easy_cleanup(h->hc_curl);
	curl_slist_free_all(h->hc_hdr);
	memset(h, 0, sizeof(*h));
}

int
hc_exec(struct hc *h, const char *body, double *ms)
{
	long st = 0;
	double t0 = ms_now();
	CURLcode e;

	h->hc_headlen = h->hc_bytes = 0;
	h->hc_lines_stdout = h->hc_lines_result = h->hc_lines_error = 0;
	h->hc_end = false;
	curl_easy_setopt(h->hc_curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(h->hc_curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	e = curl_easy_perform(h->hc_curl);
	if (ms)
		*ms = ms_since(t0);
	curl_easy_getinfo(h->hc_curl, CURLINFO_RESPONSE_CODE, &st);
	if (e != CURLE_OK || st != 200)
		return st ? -(int)st : -1;
	return h->hc_end && !h->hc_lines_error ? 0 : -2;
}

char *
hc_body(const char *code, const char *ctx)
{
	json_t *b = json_pack("{s:s}", "code", code);
	char *s;

	if (ctx)
		json_object_set_new(b, "context_id", json_string(ctx));
	s = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	return s;
}

static json_t *
hc_get_json(const char *base, const char *path)
{
	struct resp r;
	json_t *j = NULL;

	if (http(base, "GET", path, NULL, &r, 10) == 0 && r.r_status == 200)
		j = json_loads(r.r_body, 0, NULL);
	resp_free(&r);
	return j;
}

char *
hc_default_context(const char *base)
{
	json_t *list = hc_get_json(base, "/contexts"), *c;
	char *id = NULL;
	size_t i;

	json_array_foreach(list, i, c)
	{
		char path[128];
		const char *cid = json_string_value(json_object_get(c, "id"));
		snprintf(path, sizeof(path), "/contexts/%s", cid ? cid : "");
		json_t *live = hc_get_json(base, path);
		if (json_is_true(json_object_get(live, "default")) &&
		    !strcmp(json_string_value(json_object_get(live, "language")),
		            "python"))
			id = strdup(cid);
		json_decref(live);
		if (id)
			break;
	}
	json_decref(list);
	return id;
}

static pid_t
hc_pid(const char *base, const char *ctx, const char *field)
{
	char path[128];
	json_t *j;
	pid_t pid;

	snprintf(path, sizeof(path), "/contexts/%s", ctx);
	j = hc_get_json(base, path);
	pid = (pid_t)json_integer_value(json_object_get(j, field));
	json_decref(j);
	return pid;
}

pid_t
hc_proxy_pid(const char *base, const char *ctx)
{
	return hc_pid(base, ctx, "proxy_pid");
}

pid_t
hc_kernel_pid(const char *base, const char *ctx)
{
	return hc_pid(base, ctx, "kernel_pid");
}

struct hc_par {
	const char *p_base, *p_lang;
	int p_n, p_next;
	char **p_ids;
	double *p_ms;
	bool p_delete;
	pthread_mutex_t p_lock;
};

static void *
hc_par_worker(void *arg)
{
	struct hc_par *p = arg;

	for (;;) {
		pthread_mutex_lock(&p->p_lock);
		int i = p->p_next < p->p_n ? p->p_next++ : -1;
		pthread_mutex_unlock(&p->p_lock);
		if (i < 0)
			return NULL;
		if (p->p_delete) {
			char path[128];
			struct resp r;
			if (!p->p_ids[i])
				continue;
			snprintf(path, sizeof(path), "/contexts/%s", p->p_ids[i]);
			http(p->p_base, "DELETE", path, NULL, &r, 60);
			resp_free(&r);
		} else {
			double t0 = ms_now();
			p->p_ids[i] = context_new(p->p_base, p->p_lang, NULL);
			if (p->p_ms)
				p->p_ms[i] = ms_since(t0);
		}
	}
}

static void
hc_parallel(struct hc_par *p, int conc)
{
	pthread_t t[64];

	if (conc > 64)
		conc = 64;
	pthread_mutex_init(&p->p_lock, NULL);
	for (int i = 0; i < conc; i++)
		pthread_create(&t[i], NULL, hc_par_worker, p);
	for (int i = 0; i < conc; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&p->p_lock);
}

/* POST /contexts of lang n times, conc at once; ids[i] NULL where one failed. */
int
hc_create_lang(const char *base, const char *lang, int n, int conc, char **ids,
               double *ms)
{
	struct hc_par p = {
	    .p_base = base, .p_lang = lang, .p_n = n, .p_ids = ids, .p_ms = ms};
	int ok = 0;

	hc_parallel(&p, conc);
	for (int i = 0; i < n; i++)
		ok += ids[i] != NULL;
	return ok;
}

int
hc_create_parallel(const char *base, int n, int conc, char **ids, double *ms)
{
	return hc_create_lang(base, "python", n, conc, ids, ms);
}

/* DELETE /contexts/{id} for each, 8 at once; frees the ids. */
void
hc_delete_all(const char *base, char **ids, int n)
{
	struct hc_par p = {.p_base = base, .p_n = n, .p_ids = ids, .p_delete = true};

	hc_parallel(&p, 8);
	for (int i = 0; i < n; i++) {
		free(ids[i]);
		ids[i] = NULL;
	}
}
