/*
 * callers_test.c — only the callers the operator meant: what a web page in
 * the operator's browser sends unasked (a cross-origin "simple" POST of text
 * or a form, or one by a rebound name) is refused and runs nothing; loopback,
 * IP addresses and listed names are served; listed origins get CORS; and a
 * body that trickles is cut at its deadline, freeing its connection's place.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

HARNESS_SHARED_BROKER("--log-level", "info");

#define URL test_url()

struct answer {
	long a_status;
	struct sink a_head, a_body;
};

static void
answer_free(struct answer *a)
{
	free(a->a_head.data);
	free(a->a_body.data);
}

/* The value of a response header (its first), or "" (in out). */
static const char *
header_of(const struct answer *a, const char *name, char *out, size_t outsz)
{
	const char *h = a->a_head.data ? a->a_head.data : "";
	size_t n = strlen(name);

	out[0] = '\0';
	for (const char *l = h; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncasecmp(l, name, n) && l[n] == ':') {
			l += n + 1 + strspn(l + n + 1, " ");
			snprintf(out, outsz, "%.*s", (int)strcspn(l, "\r\n"), l);
			break;
		}
	return out;
}

/* One request with exactly these extra headers (NULL-terminated) and body. */
static int
ask(const char *base, const char *method, const char *path, const char *const *headers,
    const char *body, struct answer *a)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	char url[512];
	CURLcode e;

	memset(a, 0, sizeof(*a));
	for (; headers && *headers; headers++)
		h = curl_slist_append(h, *headers);
	snprintf(url, sizeof(url), "%s%s", base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &a->a_head);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &a->a_body);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	e = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->a_status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	if (!a->a_body.data)
		a->a_body.data = strdup("");
	return e == CURLE_OK ? 0 : -1;
}

static long long
executions_of(const char *base, const char *id)
{
	json_t *c = context_get(base, id);
	long long n = c ? json_integer_value(json_object_get(c, "executions")) : -1;

	json_decref(c);
	return n;
}

/* Whether code in context id finds the marker file named. */
static bool
marker_exists(const char *base, const char *id, const char *name)
{
	char code[256];
	json_t *lines;
	char *out;
	bool yes;

	snprintf(code, sizeof(code), "import os\nprint(os.path.exists('/home/user/%s'))",
	         name);
	lines = run(base, id, code);
	cr_assert_not_null(lines, "the check's own execution failed");
	out = stdout_of(lines);
	yes = !strcmp(out, "True\n");
	cr_assert(yes || !strcmp(out, "False\n"), "the check printed '%s'", out);
	free(out);
	json_decref(lines);
	return yes;
}

Test(callers, a_web_pages_simple_posts_are_refused_and_run_nothing, .timeout = 180)
{
	char *id = context_new(URL, "python", NULL);
	char host[96];
	struct {
		const char *name, *ctype, *origin, *host;
		long want;
		const char *says;
	} cases[] = {
	    {"text/plain from a foreign origin", "Content-Type: text/plain",
	     "Origin: http://evil.example", NULL, 403, "Origin"},
	    {"a form from a foreign origin",
	     "Content-Type: application/x-www-form-urlencoded",
	     "Origin: http://evil.example", NULL, 403, "Origin"},
	    {"a sandboxed page's (Origin: null)", "Content-Type: application/json",
	     "Origin: null", NULL, 403, "Origin"},
	    {"after DNS rebinding", "Content-Type: text/plain",
	     "Origin: http://evil.example:49999", host, 403, "Host"},
	    {"JSON by a rebound name, no Origin", "Content-Type: application/json", NULL,
	     host, 403, "Host"},
	    {"text/plain with no Origin", "Content-Type: text/plain", NULL, NULL, 415,
	     "application/json"},
	    {"a form with no Origin", "Content-Type: application/x-www-form-urlencoded",
	     NULL, NULL, 415, "application/json"},
	    {"no Content-Type", "Content-Type:", NULL, NULL, 415, "application/json"},
	    {"JSON's name inside another type", "Content-Type: application/jsonx", NULL,
	     NULL, 415, "application/json"},
	};

	cr_assert_not_null(id);
	snprintf(host, sizeof(host), "Host: evil.example:%s", strrchr(URL, ':') + 1);
	long long before = executions_of(URL, id);
	cr_assert_geq(before, 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char marker[32], body[256];
		const char *headers[4] = {cases[i].ctype};
		int n = 1;
		struct answer a;

		if (cases[i].origin)
			headers[n++] = cases[i].origin;
		if (cases[i].host)
			headers[n++] = cases[i].host;
		snprintf(marker, sizeof(marker), "door-%zu", i);
		snprintf(body, sizeof(body),
		         "{\"context_id\":\"%s\",\"code\":\"open('/home/user/"
		         "%s','w').write('ran')\"}",
		         id, marker);
		cr_assert_eq(ask(URL, "POST", "/execute", headers, body, &a), 0,
		             "%s: no answer", cases[i].name);
		cr_expect_eq(a.a_status, cases[i].want, "%s: %ld, not %ld: %s",
		             cases[i].name, a.a_status, cases[i].want, a.a_body.data);
		cr_expect(strstr(a.a_body.data, cases[i].says),
		          "%s: the answer does not say %s: %s", cases[i].name,
		          cases[i].says, a.a_body.data);
		answer_free(&a);
		/* an execution the server took would have run before this one */
		cr_expect(!marker_exists(URL, id, marker), "%s: its code ran",
		          cases[i].name);
	}
	/* only the checks ran */
	cr_expect_eq(executions_of(URL, id),
	             before + (long long)(sizeof(cases) / sizeof(cases[0])));

	/* no context is made by a form either */
	json_t *all = NULL;
	struct resp r;
	cr_assert_eq(http(URL, "GET", "/contexts", NULL, &r, 10), 0);
	size_t contexts = json_array_size(all = json_loads(r.r_body, 0, NULL));
	json_decref(all);
	resp_free(&r);
	struct answer a;
	const char *form[] = {"Content-Type: application/x-www-form-urlencoded", NULL};
	cr_assert_eq(ask(URL, "POST", "/contexts", form, "{\"language\":\"python\"}", &a),
	             0);
	cr_expect_eq(a.a_status, 415, "POST /contexts as a form: %ld %s", a.a_status,
	             a.a_body.data);
	answer_free(&a);
	cr_assert_eq(http(URL, "GET", "/contexts", NULL, &r, 10), 0);
	cr_expect_eq(json_array_size(all = json_loads(r.r_body, 0, NULL)), contexts,
	             "a context was made: %s", r.r_body);
	json_decref(all);
	resp_free(&r);
	free(id);
}

/* The refusal comes before the body is read: the head alone is answered. */
Test(callers, a_refused_request_is_answered_before_its_body, .timeout = 30)
{
	static const char *const heads[] = {
	    "POST /execute HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 100000\r\n\r\n",
	    "POST /execute HTTP/1.1\r\nHost: localhost\r\nOrigin: http://evil.example\r\n"
	    "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
	};
	static const char *const want[] = {"HTTP/1.1 415 ", "HTTP/1.1 403 "};

	for (size_t i = 0; i < 2; i++) {
		int fd = tcp_connect(URL);
		char out[1024] = "";
		struct pollfd p = {.fd = fd, .events = POLLIN};

		cr_assert(fd >= 0);
		cr_assert_eq(write(fd, heads[i], strlen(heads[i])),
		             (ssize_t)strlen(heads[i]));
		cr_assert_eq(poll(&p, 1, 10000), 1, "no answer to a head alone");
		cr_assert_gt(read(fd, out, sizeof(out) - 1), 0);
		cr_expect(!strncmp(out, want[i], strlen(want[i])), "%s", out);
		close(fd);
	}
}

Test(callers, loopback_names_and_ip_addresses_are_served, .timeout = 120)
{
	const char *port = strrchr(URL, ':') + 1;
	const char *hosts[] = {"localhost", "LocalHost.", "app.localhost", "127.0.0.1",
	                       "[::1]",     "10.1.2.3",   "[fd00::5]"};
	char *id = context_new(URL, "python", NULL);

	cr_assert_not_null(id);
	for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
		char host[96], body[256],
		    ctype[] = "Content-Type: application/json; charset=utf-8";
		const char *headers[] = {host, ctype, NULL};
		struct answer a;

		snprintf(host, sizeof(host), "Host: %s:%s", hosts[i], port);
		snprintf(body, sizeof(body),
		         "{\"context_id\":\"%s\",\"code\":\"print(%zu)\"}", id, i);
		cr_assert_eq(ask(URL, "POST", "/execute", headers, body, &a), 0);
		cr_expect_eq(a.a_status, 200, "%s: %ld %s", host, a.a_status,
		             a.a_body.data);
		char want[32];
		snprintf(want, sizeof(want), "\"text\":\"%zu\\n\"", i);
		cr_expect(strstr(a.a_body.data, want), "%s: %s", host, a.a_body.data);
		answer_free(&a);
	}
	free(id);
}

/* A private broker of one test, stopped even when an assertion fails. */
static struct broker priv;

static void
priv_stop(void)
{
	cr_expect_eq(broker_stop(&priv), 0, "sanitizer report in the broker log");
}

Test(callers, listed_names_and_origins_are_served_and_get_cors, .fini = priv_stop,
     .timeout = 120)
{
	const char *args[] = {"--no-default-context",
	                      "--pool",
	                      "0",
	                      "--access-token",
	                      "s3cret",
	                      "--allowed-host",
	                      "sandcell.test",
	                      "--allowed-origin",
	                      "https://app.example, http://localhost:3000",
	                      NULL};
	char host[96], v[512];
	struct answer a;

	cr_assert_eq(broker_start(&priv, args), 0);
	snprintf(host, sizeof(host), "Host: sandcell.test:%d", priv.b_port);
	const char *by_name[] = {host, NULL};
	cr_assert_eq(ask(priv.b_url, "GET", "/health", by_name, NULL, &a), 0);
	cr_expect_eq(a.a_status, 200, "by a listed name: %ld %s", a.a_status,
	             a.a_body.data);
	answer_free(&a);
	const char *other[] = {"Host: sandcell.test.evil.example", NULL};
	cr_assert_eq(ask(priv.b_url, "GET", "/health", other, NULL, &a), 0);
	cr_expect_eq(a.a_status, 403, "by an unlisted name: %ld %s", a.a_status,
	             a.a_body.data);
	answer_free(&a);

	/* a listed origin's preflight, which carries no token, and its request */
	const char *preflight[] = {
	    "Origin: https://app.example", "Access-Control-Request-Method: POST",
	    "Access-Control-Request-Headers: content-type,x-access-token", NULL};
	cr_assert_eq(ask(priv.b_url, "OPTIONS", "/execute", preflight, NULL, &a), 0);
	cr_expect_eq(a.a_status, 204, "preflight: %ld %s", a.a_status, a.a_body.data);
	cr_expect_str_eq(header_of(&a, "Access-Control-Allow-Origin", v, sizeof(v)),
	                 "https://app.example");
	cr_expect(
	    strstr(header_of(&a, "Access-Control-Allow-Methods", v, sizeof(v)), "POST"),
	    "methods: %s", v);
	header_of(&a, "Access-Control-Allow-Headers", v, sizeof(v));
	cr_expect(strcasestr(v, "X-Access-Token") && strcasestr(v, "Content-Type") &&
	              strcasestr(v, "E2b-Sandbox-Id") &&
	              strcasestr(v, "E2B-Traffic-Access-Token"),
	          "headers: %s", v);
	answer_free(&a);
	const char *post[] = {"Origin: http://localhost:3000",
	                      "Content-Type: application/json", "X-Access-Token: s3cret",
	                      NULL};
	cr_assert_eq(
	    ask(priv.b_url, "POST", "/execute", post, "{\"code\":\"print(6*7)\"}", &a),
	    0);
	cr_expect_eq(a.a_status, 200, "%ld %s", a.a_status, a.a_body.data);
	cr_expect(strstr(a.a_body.data, "\"text\":\"42\\n\""), "%s", a.a_body.data);
	cr_expect_str_eq(header_of(&a, "Access-Control-Allow-Origin", v, sizeof(v)),
	                 "http://localhost:3000");
	answer_free(&a);
	/* the token is still asked of it */
	const char *no_token[] = {"Origin: https://app.example", NULL};
	cr_assert_eq(ask(priv.b_url, "GET", "/contexts", no_token, NULL, &a), 0);
	cr_expect_eq(a.a_status, 401, "%ld %s", a.a_status, a.a_body.data);
	answer_free(&a);

	/* a foreign origin's preflight: refused, and nothing a browser would take */
	const char *foreign[] = {"Origin: https://evil.example",
	                         "Access-Control-Request-Method: POST", NULL};
	cr_assert_eq(ask(priv.b_url, "OPTIONS", "/execute", foreign, NULL, &a), 0);
	cr_expect_eq(a.a_status, 403, "%ld %s", a.a_status, a.a_body.data);
	cr_expect_str_eq(header_of(&a, "Access-Control-Allow-Origin", v, sizeof(v)), "");
	answer_free(&a);
	/* nor does a request with no Origin get CORS headers */
	const char *plain[] = {"X-Access-Token: s3cret", NULL};
	cr_assert_eq(ask(priv.b_url, "GET", "/contexts", plain, NULL, &a), 0);
	cr_expect_eq(a.a_status, 200);
	cr_expect_str_eq(header_of(&a, "Access-Control-Allow-Origin", v, sizeof(v)), "");
	answer_free(&a);
}

/* Reads what came on fd until the server closes it or timeout_ms pass; true if closed. */
static bool
read_until_closed(int fd, char *out, size_t outsz, int timeout_ms)
{
	size_t n = 0;
	double t0 = ms_now();

	out[0] = '\0';
	for (;;) {
		int left = timeout_ms - (int)ms_since(t0);
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&p, 1, left) != 1)
			return false;
		ssize_t k = read(fd, out + n, outsz - 1 - n);
		if (k <= 0)
			return k == 0 || errno == ECONNRESET;
		n += k;
		out[n] = '\0';
	}
}

static bool
health_is_200(void *base)
{
	struct resp r;
	bool ok = http(base, "GET", "/health", NULL, &r, 5) == 0 && r.r_status == 200;

	resp_free(&r);
	return ok;
}

/*
 * With every connection taken by bodies that trickle a byte each 300 ms (so
 * the idle timeout never fires) or that stalled, each is answered 408 and
 * closed at --body-timeout, and /health is answered again while the
 * trickling clients would go on.
 */
Test(callers, a_trickling_body_is_cut_at_its_deadline, .fini = priv_stop, .timeout = 120)
{
	enum { N = 4 };
	const char *args[] = {
	    "--no-default-context", "--pool", "0", "--max-connections", "4",
	    "--body-timeout",       "3",      NULL};
	static const char head[] =
	    "POST /execute HTTP/1.1\r\nHost: localhost\r\n"
	    "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{";
	int fd[N];
	double t0[N];
	bool closed[N] = {false};
	char out[N][512];
	struct resp r;

	cr_assert_eq(broker_start(&priv, args), 0);
	for (int i = 0; i < N; i++) { /* each is taken, not answered (503) */
		struct pollfd p = {.events = POLLIN};
		cr_assert((p.fd = fd[i] = tcp_connect(priv.b_url)) >= 0);
		cr_assert_eq(write(fd[i], head, sizeof(head) - 1),
		             (ssize_t)sizeof(head) - 1);
		t0[i] = ms_now();
		cr_assert_eq(poll(&p, 1, 300), 0, "connection %d was answered at once",
		             i);
	}
	/* all places taken: the server says so */
	cr_assert_eq(http(priv.b_url, "GET", "/health", NULL, &r, 5), 0);
	cr_expect_eq(r.r_status, 503, "/health with every place taken: %ld", r.r_status);
	resp_free(&r);
	/* trickle (the last one stalls) for up to 20 s; each must be cut at 3 s,
	 * with slack for a loaded machine */
	double start = ms_now();
	int open = N;
	while (open && ms_since(start) < 20000) {
		for (int i = 0; i < N; i++) {
			if (closed[i])
				continue;
			if (i < N - 1) /* once cut, it fails: what it was told is read
			                  below */
				(void)!send(fd[i], " ", 1, MSG_NOSIGNAL);
			struct pollfd p = {.fd = fd[i], .events = POLLIN};
			if (poll(&p, 1, 0) == 1) {
				closed[i] = read_until_closed(fd[i], out[i],
				                              sizeof(out[i]), 5000);
				cr_expect(closed[i],
				          "connection %d answered but stayed open: %s", i,
				          out[i]);
				closed[i] = true;
				open--;
				double took = ms_since(t0[i]);
				cr_expect(took < 3000 + 4000,
				          "connection %d cut after %.0f ms", i, took);
				cr_expect(took > 3000 - 500,
				          "connection %d cut early: %.0f ms", i, took);
			}
		}
		usleep(300000);
	}
	cr_assert_eq(open, 0, "%d connections still open after %.0f ms", open,
	             ms_since(start));
	for (int i = 0; i < N; i++) {
		cr_expect(!strncmp(out[i], "HTTP/1.1 408 ", 13), "connection %d: '%s'", i,
		          out[i]);
		cr_expect(strstr(out[i], "--body-timeout"), "connection %d: '%s'", i,
		          out[i]);
		close(fd[i]);
	}
	cr_expect_eq(wait_until(health_is_200, priv.b_url, 5000), 0,
	             "/health is not 200 after the slow bodies were cut");
	cr_expect_geq(metric_value(priv.b_url,
	                           "sandcell_http_requests_total{endpoint=\"/execute\","
	                           "method=\"POST\",status=\"408\"}"),
	              N);
	/* and a body that comes in time is still taken */
	cr_assert_eq(http(priv.b_url, "POST", "/contexts", "{}", &r, 60), 0);
	cr_expect_eq(r.r_status, 200, "%ld %s", r.r_status, r.r_body);
	resp_free(&r);
}
