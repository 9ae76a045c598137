/*
 * envd_test.c — envd's API on --envd-listen (docs/ENVD.md), over HTTP with
 * libcurl as the SDKs speak it: /health, /files both ways (multipart and
 * octet-stream), filesystem.Filesystem's unary calls in Connect's JSON, its
 * errors, and that its files are the contexts' files and nothing beyond
 * what a kernel can reach.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include <curl/curl.h>
#include <zlib.h>

#include "harness.h"
#include "../../lib/lib.h"

static char envd_at[32] = "127.0.0.1:49983", envd_url[64];

/* envd's port: a free one, chosen before the shared broker starts, and the
 * same in criterion's workers (they inherit the environment) */
__attribute__((constructor)) static void
pick_port(void)
{
	const char *had = getenv("SANDCELL_TEST_ENVD_PORT");
	int port = had ? atoi(had) : free_port();
	char num[16];

	snprintf(num, sizeof(num), "%d", port);
	setenv("SANDCELL_TEST_ENVD_PORT", num, 1);

	snprintf(envd_at, sizeof(envd_at), "127.0.0.1:%d", port);
	snprintf(envd_url, sizeof(envd_url), "http://127.0.0.1:%d", port);
}

HARNESS_SHARED_BROKER("--envd-listen", envd_at, "--max-body", "1M", "--max-file-size",
                      "2M", "--env", "SANDCELL_TEST_GLOBAL=everywhere");

#define URL test_url()

/* One request to envd: body of len bytes as ctype (or none), the answer in r. */
static void
envd(const char *method, const char *path, const char *ctype, const char *body,
     size_t len, struct resp *r)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	struct sink s = {0};
	char url[1024], head[160];
	char *ct = NULL;

	memset(r, 0, sizeof(*r));
	snprintf(url, sizeof(url), "%s%s", envd_url, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (ctype) {
		snprintf(head, sizeof(head), "Content-Type: %s", ctype);
		h = curl_slist_append(h, head);
	}
	h = curl_slist_append(h, "Expect:");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)len);
	}
	cr_assert_eq(curl_easy_perform(c), CURLE_OK, "%s %s: no answer", method, path);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->r_status);
	curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
	if (ct)
		snprintf(r->r_ctype, sizeof(r->r_ctype), "%s", ct);
	r->r_body = s.data ? s.data : strdup("");
	r->r_len = s.len;
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
}

/* A Connect unary call of service: its status and its JSON answer. */
static json_t *
rpc_of(const char *service, const char *method, const char *body, long *status)
{
	char path[128];
	struct resp r;
	json_t *j;

	snprintf(path, sizeof(path), "/%s/%s", service, method);
	envd("POST", path, "application/json", body, strlen(body), &r);
	*status = r.r_status;
	j = json_loadb(r.r_body, r.r_len, 0, NULL);
	cr_assert_not_null(j, "%s: not JSON: %s", method, r.r_body);
	resp_free(&r);
	return j;
}

static json_t *
rpc(const char *method, const char *body, long *status)
{
	return rpc_of("filesystem.Filesystem", method, body, status);
}

/* A file's bytes as GET /files gives them (NUL-terminated), or NULL with the status. */
static char *
read_file(const char *path, long *status)
{
	char q[1024];
	struct resp r;
	char *e = curl_easy_escape(NULL, path, 0);

	snprintf(q, sizeof(q), "/files?path=%s", e);
	curl_free(e);
	envd("GET", q, NULL, NULL, 0, &r);
	*status = r.r_status;
	if (r.r_status != 200) {
		resp_free(&r);
		return NULL;
	}
	return r.r_body;
}

/* An upload of one file with raw octet-stream: the status. */
static long
write_raw(const char *path, const char *data)
{
	char q[1024];
	struct resp r;
	char *e = curl_easy_escape(NULL, path, 0);
	long st;

	snprintf(q, sizeof(q), "/files?path=%s", e);
	curl_free(e);
	envd("POST", q, "application/octet-stream", data, strlen(data), &r);
	st = r.r_status;
	resp_free(&r);
	return st;
}

static bool
envd_up(void *arg)
{
	struct resp r;

	(void)arg;
	envd("GET", "/health", NULL, NULL, 0, &r);
	resp_free(&r);
	return r.r_status == 204;
}

static void
up(void)
{
	cr_assert_eq(wait_until(envd_up, NULL, 30000), 0,
	             "envd's /health never said 204");
}

static const char *
code_of(json_t *j)
{
	const char *c = json_string_value(json_object_get(j, "code"));
	return c ? c : "(none)";
}

Test(envd, health_is_204_and_the_code_api_is_untouched)
{
	struct resp r;

	up();
	envd("GET", "/health", NULL, NULL, 0, &r);
	cr_assert_eq(r.r_status, 204);
	cr_assert_eq(r.r_len, 0);
	resp_free(&r);
	/* the code listener still answers as itself */
	http(URL, "GET", "/health", NULL, &r, 10);
	cr_assert_eq(r.r_status, 200);
	cr_assert_str_eq(r.r_body, "\"OK\"");
	resp_free(&r);
}

/* GET on base with one extra header; the answer in r. */
static void
get_with(const char *base, const char *path, const char *header, struct resp *r)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = curl_slist_append(NULL, header);
	struct sink s = {0};
	char url[512];

	memset(r, 0, sizeof(*r));
	snprintf(url, sizeof(url), "%s%s", base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	cr_assert_eq(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->r_status);
	r->r_body = s.data ? s.data : strdup("");
	r->r_len = s.len;
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
}

/* One URL: the code listener serves envd's API for whoever names its port. */
Test(envd, the_code_url_serves_envd_for_its_port_and_paths)
{
	struct resp r;

	up();
	cr_assert_eq(write_raw("oneurl.txt", "through one URL"), 200);
	get_with(URL, "/health", "E2b-Sandbox-Port: 49983", &r);
	cr_assert_eq(r.r_status, 204, "/health as envd's: %ld", r.r_status);
	resp_free(&r);
	get_with(URL, "/health", "E2b-Sandbox-Port: 49999", &r);
	cr_assert_eq(r.r_status, 200);
	resp_free(&r);
	get_with(URL, "/files?path=%2Fhome%2Fuser%2Foneurl.txt",
	         "E2b-Sandbox-Port: 49983", &r);
	cr_assert_eq(r.r_status, 200);
	cr_assert_str_eq(r.r_body, "through one URL");
	resp_free(&r);
	/* envd's paths need no header; the code API's stay its own */
	get_with(URL, "/files?path=oneurl.txt", "X-Nothing: 1", &r);
	cr_assert_eq(r.r_status, 200);
	resp_free(&r);
	get_with(URL, "/languages", "E2b-Sandbox-Port: 49999", &r);
	cr_assert_eq(r.r_status, 200);
	resp_free(&r);
	/* a path's encoded '/' is still refused */
	get_with(URL, "/contexts%2Fx", "X-Nothing: 1", &r);
	cr_assert_eq(r.r_status, 400);
	resp_free(&r);
}

Test(envd, multipart_write_then_read_round_trip)
{
	const char *body =
	    "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; "
	    "filename=\"rt/one.csv\"\r\nContent-Type: application/octet-stream\r\n\r\n"
	    "a,b\n1,2\n\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; "
	    "filename=\"rt/two.txt\"\r\n\r\nsecond\r\n--XyZ--\r\n";
	struct resp r;
	long st;
	char *got;

	up();
	envd("POST", "/files", "multipart/form-data; boundary=XyZ", body, strlen(body),
	     &r);
	cr_assert_eq(r.r_status, 200, "upload: %ld %s", r.r_status, r.r_body);
	json_t *a = json_loads(r.r_body, 0, NULL);
	cr_assert(json_is_array(a) && json_array_size(a) == 2, "EntryInfo[]: %s",
	          r.r_body);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(a, 0), "path")),
	                 "/home/user/rt/one.csv");
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(a, 1), "type")),
	                 "file");
	json_decref(a);
	resp_free(&r);
	got = read_file("rt/one.csv", &st);
	cr_assert_eq(st, 200);
	cr_assert_str_eq(got, "a,b\n1,2\n");
	free(got);
	got = read_file("/home/user/rt/two.txt", &st);
	cr_assert_str_eq(got, "second");
	free(got);
}

Test(envd, a_file_is_the_contexts_file_both_ways)
{
	long st;
	char *got, *out;
	json_t *l;

	up();
	cr_assert_eq(write_raw("shared.csv", "x,y\n3,4\n"), 200);
	l = run(URL, NULL,
	        "print(open('shared.csv').read(), end='')\n"
	        "open('/home/user/from_ctx.txt', 'w').write('written by a context')");
	cr_assert_not_null(l);
	out = stdout_of(l);
	cr_assert_str_eq(out, "x,y\n3,4\n", "the context read: %s", out);
	free(out);
	json_decref(l);
	got = read_file("from_ctx.txt", &st);
	cr_assert_eq(st, 200);
	cr_assert_str_eq(got, "written by a context");
	free(got);
	/* both written as the contexts' uid: the same owner on the host, not root */
	char a[256], b[256];
	struct stat sa, sb;
	snprintf(a, sizeof(a), "%s.work/shared.csv", test_run_dir());
	snprintf(b, sizeof(b), "%s.work/from_ctx.txt", test_run_dir());
	cr_assert_eq(stat(a, &sa), 0, "no %s", a);
	cr_assert_eq(stat(b, &sb), 0, "no %s", b);
	cr_assert_eq(sa.st_uid, sb.st_uid, "envd's file is uid %u, the context's %u",
	             (unsigned)sa.st_uid, (unsigned)sb.st_uid);
	cr_assert_neq(sa.st_uid, 0);
}

/*
 * E2B's code runs as root, with cwd /root: in a box /root is the tenant's own
 * directory, the workspace's .root (inside its bound, kept with it). A
 * context made with cwd /root runs there, what it writes there another
 * context reads, and envd, and it is there after a restart and on the host.
 */
Test(envd, root_is_the_tenants_directory_for_contexts_and_envd, .timeout = 120)
{
	long st;
	char *id, *out, host[256];
	json_t *l, *j;
	struct stat sb;

	up();
	id = context_new(URL, "python", "/root");
	cr_assert_not_null(id, "a context with cwd /root was refused");
	l = run(URL, id,
	        "import os\nprint(os.getcwd())\n"
	        "open('note.txt', 'w').write('root note')");
	cr_assert_not_null(l);
	out = stdout_of(l);
	cr_assert_str_eq(out, "/root\n", "%s", out);
	free(out);
	json_decref(l);
	/* another context (the default one, cwd /home/user) reads it at /root */
	l = run(URL, NULL, "print(open('/root/note.txt').read(), end='')");
	cr_assert_not_null(l);
	out = stdout_of(l);
	cr_assert_str_eq(out, "root note", "%s", out);
	free(out);
	json_decref(l);
	/* envd: Stat, read, and a write a context reads */
	j = rpc("Stat", "{\"path\":\"/root/note.txt\"}", &st);
	cr_assert_eq(st, 200, "Stat /root/note.txt: %ld %s", st, code_of(j));
	cr_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(j, "entry"), "path")),
	    "/root/note.txt");
	cr_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(j, "entry"), "size")), "9");
	json_decref(j);
	char *got = read_file("/root/note.txt", &st);
	cr_assert_eq(st, 200);
	cr_assert_str_eq(got, "root note");
	free(got);
	cr_assert_eq(write_raw("/root/from_envd.txt", "from envd"), 200);
	/* kept across a restart, and on the host in the workspace */
	cr_assert_eq(context_post(URL, id, "restart", 60), 200);
	l = run(URL, id, "import os\nprint(os.getcwd(), open('from_envd.txt').read())");
	cr_assert_not_null(l);
	out = stdout_of(l);
	cr_assert_str_eq(out, "/root from envd\n", "%s", out);
	free(out);
	json_decref(l);
	snprintf(host, sizeof(host), "%s.work/.root/note.txt", test_run_dir());
	cr_assert_eq(stat(host, &sb), 0, "no %s", host);
	cr_assert_neq(sb.st_uid, 0, "/root's file is root's on the host");
	context_delete(URL, id);
	free(id);
}

Test(envd, filesystem_calls_in_connect_json)
{
	long st;
	json_t *j, *e;

	up();
	cr_assert_eq(write_raw("fs/a.txt", "12345"), 200);
	j = rpc("Stat", "{\"path\":\"fs/a.txt\",\"someFutureField\":1}", &st);
	cr_assert_eq(st, 200);
	e = json_object_get(j, "entry");
	cr_assert_str_eq(json_string_value(json_object_get(e, "type")), "FILE_TYPE_FILE");
	cr_assert_str_eq(json_string_value(json_object_get(e, "size")),
	                 "5"); /* int64: a string */
	cr_assert_str_eq(json_string_value(json_object_get(e, "path")),
	                 "/home/user/fs/a.txt");
	cr_assert(json_is_string(json_object_get(e, "modifiedTime")));
	json_decref(j);
	j = rpc("MakeDir", "{\"path\":\"fs/sub/deeper\"}", &st);
	cr_assert_eq(st, 200);
	json_decref(j);
	j = rpc("MakeDir", "{\"path\":\"fs/sub\"}", &st);
	cr_assert_eq(st, 409);
	cr_assert_str_eq(code_of(j), "already_exists");
	json_decref(j);
	j = rpc("Move", "{\"source\":\"fs/a.txt\",\"destination\":\"fs/sub/b.txt\"}",
	        &st);
	cr_assert_eq(st, 200);
	cr_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(j, "entry"), "name")),
	    "b.txt");
	json_decref(j);
	j = rpc("ListDir", "{\"path\":\"fs\",\"depth\":2}", &st);
	cr_assert_eq(st, 200);
	size_t i, n = 0;
	json_t *v;
	json_array_foreach(json_object_get(j, "entries"), i, v) n++;
	cr_assert_eq(n, 3, "fs/sub, fs/sub/deeper, fs/sub/b.txt: %zu", n);
	json_decref(j);
	j = rpc("ListDir", "{\"path\":\"fs\"}", &st); /* depth 1 */
	cr_assert_eq(json_array_size(json_object_get(j, "entries")), 1);
	json_decref(j);
	j = rpc("Remove", "{\"path\":\"fs\"}", &st);
	cr_assert_eq(st, 200);
	json_decref(j);
	j = rpc("Stat", "{\"path\":\"fs\"}", &st);
	cr_assert_eq(st, 404);
	cr_assert_str_eq(code_of(j), "not_found");
	json_decref(j);
}

Test(envd, bad_input_gets_envds_answers)
{
	struct resp r;
	long st;
	json_t *j;

	up();
	cr_assert_null(read_file("no/such/file", &st));
	cr_assert_eq(st, 404);
	cr_assert_null(
	    read_file("/home/user", &st)); /* a directory where a file is needed */
	cr_assert_eq(st, 400);
	j = rpc("Stat", "{}", &st);
	cr_assert_eq(st, 400);
	cr_assert_str_eq(code_of(j), "invalid_argument");
	json_decref(j);
	j = rpc("Stat", "{\"path\":7}", &st);
	cr_assert_str_eq(code_of(j), "invalid_argument");
	json_decref(j);
	j = rpc("WatchDirNope", "{}", &st);
	cr_assert_eq(st, 501);
	cr_assert_str_eq(code_of(j), "unimplemented");
	json_decref(j);
	envd("POST", "/filesystem.Filesystem/Stat", "text/plain", "{}", 2, &r);
	cr_assert_eq(r.r_status, 415);
	resp_free(&r);
	envd("POST", "/filesystem.Filesystem/Stat", "application/json", "[1", 2, &r);
	cr_assert_eq(r.r_status, 400);
	resp_free(&r);
	envd("GET", "/files?path=x&username=mallory", NULL, NULL, 0, &r);
	cr_assert_eq(r.r_status, 401);
	resp_free(&r);
	/* a file over --max-file-size (2M here), its size said: refused at once */
	size_t big = (2u << 20) + 4096;
	char *b = malloc(big + 1);
	memset(b, 'x', big);
	b[big] = '\0';
	envd("POST", "/files?path=big.bin", "application/octet-stream", b, big, &r);
	cr_assert_eq(r.r_status, 413);
	resp_free(&r);
	free(b);
	cr_assert_null(read_file("big.bin", &st));
	cr_assert_eq(st, 404);
}

Test(envd, nothing_reaches_beyond_the_box)
{
	char q[1024], *host_file, *got;
	struct stat sb;
	long st;
	json_t *l;

	up();
	/* a context plants links to the host's secrets and to the run dir */
	snprintf(q, sizeof(q),
	         "import os\nos.symlink('/etc/shadow', 'to_shadow')\n"
	         "os.symlink('%s', 'to_run')\nos.symlink('/', 'to_root')\n",
	         test_run_dir());
	l = run(URL, NULL, q);
	cr_assert_not_null(l);
	json_decref(l);
	/* the box's /etc/shadow is not the tenant's to read */
	cr_assert_null(read_file("to_shadow", &st));
	cr_assert(st == 403 || st == 404, "to_shadow: %ld", st);
	/* the run dir is not in the box: nothing there, neither to read nor to write */
	snprintf(q, sizeof(q), "to_run/%s", "state.json");
	cr_assert_null(read_file(q, &st));
	cr_assert_eq(st, 404);
	snprintf(q, sizeof(q), "../../..%s/planted", test_run_dir());
	write_raw(q, "planted");
	host_file = NULL;
	cr_assert(asprintf(&host_file, "%s/planted", test_run_dir()) > 0);
	cr_assert_neq(stat(host_file, &sb), 0, "a write through .. reached the host's %s",
	              host_file);
	free(host_file);
	cr_assert(write_raw("to_root/etc/planted", "x") != 200,
	          "a write into the box's /etc");
	/* .. stays in the box: /home/user/../../etc/hostname is the box's */
	got = read_file("../../etc/hostname", &st);
	free(got);
	cr_assert_neq(stat("/etc/planted", &sb), 0);
}

/* ---- brokers of their own: envd's listener under other settings ---- */

static struct broker own;
static int own_envd_port;

static void
own_stop(void)
{
	if (own.b_pid > 0)
		broker_stop(&own);
}

/* GET url's status with headers h (NULL: none); 0 when nothing answers. */
static long
status_of(const char *url, const char *header)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = header ? curl_slist_append(NULL, header) : NULL;
	struct sink s = {0};
	long st = 0;

	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	free(s.data);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return st;
}

static bool
own_envd_up(void *arg)
{
	char url[96];

	(void)arg;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/health", own_envd_port);
	return status_of(url, NULL) == 204;
}

Test(envd_own, the_access_token_is_the_code_apis, .timeout = 90, .fini = own_stop)
{
	char at[32], url[128];
	const char *args[] = {
	    "--no-default-context", "--pool", "0", "--access-token", "s3cret",
	    "--envd-listen",        at,       NULL};

	own_envd_port = free_port();
	snprintf(at, sizeof(at), "127.0.0.1:%d", own_envd_port);
	cr_assert_eq(broker_start(&own, args), 0);
	/* /health needs none, as the code API's */
	cr_assert_eq(wait_until(own_envd_up, NULL, 30000), 0,
	             "envd's /health never said 204");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/files?path=%%2Fhome%%2Fuser",
	         own_envd_port);
	cr_assert_eq(status_of(url, NULL), 401);
	cr_assert_eq(status_of(url, "X-Access-Token: wrong"), 401);
	/* with it: envd's own answer (a directory where a file is needed) */
	cr_assert_eq(status_of(url, "X-Access-Token: s3cret"), 400);
}

Test(envd_own, isolation_context_leaves_the_listener_off, .timeout = 90, .fini = own_stop)
{
	char at[32], url[96];
	const char *args[] = {
	    "--no-default-context", "--isolation", "context", "--envd-listen", at, NULL};
	char *log;

	own_envd_port = free_port();
	snprintf(at, sizeof(at), "127.0.0.1:%d", own_envd_port);
	cr_assert_eq(broker_start(&own, args), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/health", own_envd_port);
	cr_assert_eq(status_of(url, NULL), 0, "something answers on envd's port");
	log = broker_log(&own);
	cr_assert(strstr(log, "envd: off (--isolation context"),
	          "the log does not say why");
	free(log);
}

/* The pid the log gave envd's agent last (its proxy says "envd agent started, pid N"). */
static pid_t
agent_pid(const struct broker *b)
{
	char *log = broker_log(b), *at = log, *last = NULL;
	pid_t pid = 0;

	while ((at = strstr(at, "envd agent started, pid ")))
		last = at++;
	if (last)
		pid = (pid_t)atoi(last + strlen("envd agent started, pid "));
	free(log);
	return pid;
}

static bool
agent_is_new(void *arg)
{
	pid_t old = *(pid_t *)arg, now = agent_pid(&own);

	return now > 0 && now != old && own_envd_up(NULL);
}

Test(envd_own, a_killed_agent_is_started_again, .timeout = 120, .fini = own_stop)
{
	char at[32], url[128];
	const char *args[] = {"--no-default-context", "--pool", "0",
	                      "--envd-listen",        at,       NULL};
	pid_t pid;

	own_envd_port = free_port();
	snprintf(at, sizeof(at), "127.0.0.1:%d", own_envd_port);
	cr_assert_eq(broker_start(&own, args), 0);
	cr_assert_eq(wait_until(own_envd_up, NULL, 30000), 0,
	             "envd's /health never said 204");
	cr_assert_gt(pid = agent_pid(&own), 1, "no agent pid in the log");
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(wait_until(agent_is_new, &pid, 30000), 0,
	             "no new agent after a kill");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/files?path=no-such",
	         own_envd_port);
	cr_assert_eq(status_of(url, NULL), 404, "the new agent does not answer");
}

/* Not root: the agent's box is a user namespace's, as a rootless broker's kernels' are.
 */
Test(envd_own, a_rootless_broker_serves_files_from_its_box, .timeout = 120,
     .fini = own_stop)
{
	char at[32], url[160];
	const char *args[] = {"--no-default-context", "--pool", "python=0",
	                      "--envd-listen",        at,       NULL};
	struct resp r;

	own_envd_port = free_port();
	snprintf(at, sizeof(at), "127.0.0.1:%d", own_envd_port);
	snprintf(envd_url, sizeof(envd_url), "http://127.0.0.1:%d", own_envd_port);
	cr_assert_eq(broker_start_as(&own, 60999, args), 0,
	             "a broker as uid 60999 did not start");
	cr_assert_eq(wait_until(own_envd_up, NULL, 30000), 0,
	             "envd's /health never said 204");
	cr_assert_eq(write_raw("rootless.txt", "from a rootless broker"), 200);
	envd("GET", "/files?path=rootless.txt", NULL, NULL, 0, &r);
	cr_assert_eq(r.r_status, 200);
	cr_assert_str_eq(r.r_body, "from a rootless broker");
	resp_free(&r);
	/* its files are the broker's uid's on the host (the box's uid 1000 inside) */
	snprintf(url, sizeof(url), "%s.work/rootless.txt", own.b_run_dir);
	struct stat sb;
	cr_assert_eq(stat(url, &sb), 0, "no %s", url);
	cr_assert_eq(sb.st_uid, 60999);
}

/* What a tenant can plant does not break a listing: a name that is not UTF-8
 * is left out, a directory it cannot read is listed but not entered. */
Test(envd, a_listing_survives_odd_names_and_closed_directories)
{
	char q[512];
	long st;
	json_t *l, *j;

	up();
	l = run(URL, NULL,
	        "import os\nos.makedirs('odd/open', exist_ok=True)\n"
	        "open(b'odd/bad\\xff', 'w').close()\n"
	        "os.symlink(b'/x\\xfe', b'odd/badlink')\n"
	        "os.makedirs('odd/closed/inner', exist_ok=True)\nos.chmod('odd/closed', "
	        "0)\n");
	cr_assert_not_null(l);
	cr_assert_null(line_of(l, "error", 0), "%s", error_value(l));
	json_decref(l);
	j = rpc("ListDir", "{\"path\":\"odd\",\"depth\":3}", &st);
	cr_assert_eq(st, 200, "ListDir: %ld", st);
	size_t i;
	json_t *v;
	int n = 0;
	json_array_foreach(json_object_get(j, "entries"), i, v)
	{
		const char *name = json_string_value(json_object_get(v, "name"));
		cr_assert(strcmp(name, "inner"), "listed inside a closed directory");
		n++;
	}
	cr_assert_eq(n, 3, "open, badlink, closed: %d", n);
	json_decref(j);
	snprintf(q, sizeof(q), "{\"path\":\"odd/badlink\"}");
	j = rpc("Stat", q, &st);
	cr_assert_eq(st, 200);
	cr_assert_null(json_object_get(json_object_get(j, "entry"), "symlinkTarget"));
	json_decref(j);
	l = run(URL, NULL, "import os\nos.chmod('odd/closed', 0o755)\n");
	json_decref(l);
}

/* ---- process.Process: Connect's server stream, and what a command can reach ---- */

/* A StartRequest for bash -c cmd, in its envelope (NUL-free JSON); *len its bytes. */
static char *
start_body(const char *cmd, size_t *len)
{
	json_t *j = json_pack("{s:{s:s, s:[s, s]}}", "process", "cmd", "/bin/bash",
	                      "args", "-c", cmd);
	char *s = json_dumps(j, JSON_COMPACT);
	size_t n = strlen(s);
	char *b = malloc(n + 5);

	json_decref(j);
	b[0] = 0;
	b[1] = (char)(n >> 24);
	b[2] = (char)(n >> 16);
	b[3] = (char)(n >> 8);
	b[4] = (char)n;
	memcpy(b + 5, s, n);
	free(s);
	*len = n + 5;
	return b;
}

/* The envelopes of a stream: each one's flags and JSON, in order (an array of [flags,
 * json]). */
static json_t *
envelopes(const char *p, size_t len)
{
	json_t *out = json_array();

	while (len >= 5) {
		const unsigned char *u = (const unsigned char *)p;
		size_t n =
		    (size_t)u[1] << 24 | (size_t)u[2] << 16 | (size_t)u[3] << 8 | u[4];
		cr_assert_leq(n, len - 5, "an envelope longer than the body");
		json_t *j = json_loadb(p + 5, n, 0, NULL);
		cr_assert_not_null(j, "an envelope that is not JSON");
		json_array_append_new(out, json_pack("[i, o]", (int)u[0], j));
		p += 5 + n;
		len -= 5 + n;
	}
	cr_assert_eq(len, 0, "bytes after the last envelope");
	return out;
}

static json_t *
run_command(const char *cmd, struct resp *r)
{
	size_t n;
	char *b = start_body(cmd, &n);

	envd("POST", "/process.Process/Start", "application/connect+json", b, n, r);
	free(b);
	cr_assert_eq(r->r_status, 200);
	cr_assert_str_eq(r->r_ctype, "application/connect+json");
	return envelopes(r->r_body, r->r_len);
}

/* The event's member (start, data, end) of envelope i, or NULL. */
static json_t *
event_at(json_t *envs, size_t i, const char *kind)
{
	return json_object_get(
	    json_object_get(json_array_get(json_array_get(envs, i), 1), "event"), kind);
}

Test(envd, start_streams_a_commands_events_in_envelopes)
{
	struct resp r;
	json_t *e;
	size_t n;
	char out[64] = "", err[64] = "";

	up();
	e = run_command("echo hi; echo oops >&2; exit 3", &r);
	n = json_array_size(e);
	cr_assert_geq(n, 5, "start, stdout, stderr, end, end of stream: %s", r.r_body);
	cr_assert_gt(json_integer_value(json_object_get(event_at(e, 0, "start"), "pid")),
	             0);
	for (size_t i = 1; i + 2 < n; i++) { /* bytes as base64 */
		json_t *d = event_at(e, i, "data");
		const char *o = json_string_value(json_object_get(d, "stdout"));
		const char *x = json_string_value(json_object_get(d, "stderr"));
		cr_assert(o || x, "envelope %zu is not data", i);
		strncat(o ? out : err, o ? o : x, 20);
	}
	cr_assert_str_eq(out, "aGkK");     /* "hi\n" */
	cr_assert_str_eq(err, "b29wcwo="); /* "oops\n" */
	json_t *end = event_at(e, n - 2, "end");
	cr_assert_eq(json_integer_value(json_object_get(end, "exitCode")), 3);
	cr_assert_str_eq(json_string_value(json_object_get(end, "status")),
	                 "exit status 3");
	/* the last: the end of the stream (flag 2), without an error */
	cr_assert_eq(json_integer_value(json_array_get(json_array_get(e, n - 1), 0)), 2);
	cr_assert_eq(json_object_size(json_array_get(json_array_get(e, n - 1), 1)), 0);
	json_decref(e);
	resp_free(&r);
}

Test(envd, a_start_that_cannot_start_ends_its_stream_with_the_code)
{
	struct resp r;
	json_t *e, *err;

	up();
	/* no such program: not_found, in the end of the stream, status 200 */
	static const char nocmd[] =
	    "\0\0\0\0\042{\"process\":{\"cmd\":\"/no/such/bin\"}}";
	envd("POST", "/process.Process/Start", "application/connect+json", nocmd,
	     sizeof(nocmd) - 1, &r);
	cr_assert_eq(r.r_status, 200);
	e = envelopes(r.r_body, r.r_len);
	cr_assert_eq(json_array_size(e), 1, "%s", r.r_body + 5);
	err = json_object_get(json_array_get(json_array_get(e, 0), 1), "error");
	cr_assert_str_eq(json_string_value(json_object_get(err, "code")), "not_found");
	json_decref(e);
	resp_free(&r);
	/* no envelope: invalid_argument */
	envd("POST", "/process.Process/Start", "application/connect+json", "{}", 2, &r);
	e = envelopes(r.r_body, r.r_len);
	err = json_object_get(json_array_get(json_array_get(e, 0), 1), "error");
	cr_assert_str_eq(json_string_value(json_object_get(err, "code")),
	                 "invalid_argument");
	json_decref(e);
	resp_free(&r);
}

Test(envd, a_command_runs_as_the_contexts_uid_in_their_workspace)
{
	struct resp r;
	json_t *e, *l;
	char *ctx_uid;

	up();
	e = run_command("echo \"$(id -u):$(pwd)\"", &r); /* one line, one write */
	const char *b64 =
	    json_string_value(json_object_get(event_at(e, 1, "data"), "stdout"));
	cr_assert_not_null(b64);
	l = run(URL, NULL,
	        "import os, base64\n"
	        "print(base64.b64encode(f'{os.getuid()}:{os.getcwd()}\\n'.encode())."
	        "decode(), end='')");
	ctx_uid = stdout_of(l);
	cr_assert_str_eq(b64, ctx_uid, "the command said %s, a context %s", b64, ctx_uid);
	free(ctx_uid);
	json_decref(l);
	json_decref(e);
	resp_free(&r);
}

static size_t
first_bytes_then_leave(char *p, size_t sz, size_t n, void *arg)
{
	(void)p;
	*(size_t *)arg += sz * n;
	return 0; /* curl aborts: the client is gone after its first bytes */
}

static bool
left_file_there(void *arg)
{
	long st;
	char *got = read_file((const char *)arg, &st);

	free(got);
	return st == 200;
}

Test(envd, a_command_outlives_the_client_that_started_it)
{
	size_t n, got = 0;
	/* it writes its file once told to (outlive-go.txt), after its client left */
	char *b = start_body("for i in $(seq 600); do [ -e outlive-go.txt ] && break; sleep 0.05; "
	                     "done; [ -e outlive-go.txt ] && echo done > outlived.txt",
	                     &n),
	     url[96];
	CURL *c = curl_easy_init();
	struct curl_slist *h =
	    curl_slist_append(NULL, "Content-Type: application/connect+json");

	up();
	snprintf(url, sizeof(url), "%s/process.Process/Start", envd_url);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, b);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)n);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, first_bytes_then_leave);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	cr_assert_eq(curl_easy_perform(c), CURLE_WRITE_ERROR);
	cr_assert_gt(got, 0, "no start event before leaving");
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(b);
	cr_assert_eq(write_raw("outlive-go.txt", "go"), 200);
	cr_assert_eq(wait_until(left_file_there, "outlived.txt", 20000), 0,
	             "the command did not run on after its client left");
}

static bool
no_sleeper_listed(void *arg)
{
	long st;
	json_t *j = rpc_of("process.Process", "List", "{}", &st);
	char *text = json_dumps(j, 0);
	bool none = text && strstr(text, (const char *)arg) == NULL;

	free(text);
	json_decref(j);
	return st == 200 && none;
}

/* bash -c cmd started, its client leaving after the start event: it runs on in the
 * background */
static void
start_and_leave(const char *cmd)
{
	size_t n, got = 0;
	char *b = start_body(cmd, &n), url[96];
	CURL *c = curl_easy_init();
	struct curl_slist *h =
	    curl_slist_append(NULL, "Content-Type: application/connect+json");

	snprintf(url, sizeof(url), "%s/process.Process/Start", envd_url);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, b);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)n);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, first_bytes_then_leave);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	curl_easy_perform(c);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(b);
	cr_assert_gt(got, 0, "%s: no start event", cmd);
}

/* The pid List gives bash -c cmd, or 0 when it is not listed. */
static long long
pid_listed(const char *cmd)
{
	long st;
	json_t *j = rpc_of("process.Process", "List", "{}", &st), *v;
	long long pid = 0;
	size_t i;

	cr_assert_eq(st, 200, "List: %ld", st);
	json_array_foreach(json_object_get(j, "processes"), i, v)
	{
		json_t *args = json_object_get(json_object_get(v, "config"), "args");
		if (!strcmp(json_string_value(json_array_get(args, 1)) ?: "", cmd))
			pid = json_integer_value(json_object_get(v, "pid"));
	}
	json_decref(j);
	return pid;
}

Test(envd, list_and_kill_a_background_command)
{
	long st;
	json_t *j, *p;
	char body[128];

	up();
	start_and_leave("sleep 77");
	j = rpc_of("process.Process", "List", "{}", &st);
	cr_assert_eq(st, 200);
	p = NULL;
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(j, "processes"), i, v)
	{
		json_t *args = json_object_get(json_object_get(v, "config"), "args");
		if (!strcmp(json_string_value(json_array_get(args, 1)) ?: "", "sleep 77"))
			p = v;
	}
	cr_assert_not_null(p, "sleep 77 is not listed: %s", json_dumps(j, 0));
	snprintf(body, sizeof(body),
	         "{\"process\":{\"pid\":%lld},\"signal\":\"SIGNAL_SIGKILL\"}",
	         (long long)json_integer_value(json_object_get(p, "pid")));
	json_decref(j);
	j = rpc_of("process.Process", "SendSignal", body, &st);
	cr_assert_eq(st, 200, "SendSignal: %ld", st);
	json_decref(j);
	cr_assert_eq(wait_until(no_sleeper_listed, "sleep 77", 10000), 0,
	             "still listed after a kill");
	/* a pid that is not running: not_found */
	j = rpc_of("process.Process", "SendSignal", body, &st);
	cr_assert_eq(st, 404);
	cr_assert_str_eq(code_of(j), "not_found");
	json_decref(j);
}

Test(envd, a_commands_kill_minus_one_costs_no_context_anything)
{
	/* it runs until the kill is over (kill-done.txt, written after it), 30 s at most */
	struct bg busy = {.code = "import os, time\nprint('started', flush=True)\n"
	                          "for _ in range(600):\n"
	                          "    if os.path.exists('kill-done.txt'): break\n"
	                          "    time.sleep(0.05)\n"
	                          "print('still here', os.path.exists('kill-done.txt'))",
	                  .timeout_ms = 60000};
	struct resp r;
	json_t *e;
	char *out;

	up();
	bg_start(&busy);
	cr_assert_eq(bg_wait_stdout(&busy, 30000), 0, "the context's execution never started");
	e = run_command("kill -9 -1; echo not reached", &r);
	json_decref(e);
	resp_free(&r);
	up(); /* its agent may have been killed too */
	cr_assert_eq(write_raw("kill-done.txt", "done"), 200);
	bg_join(&busy);
	cr_assert_not_null(busy.lines, "the context's execution got no answer");
	out = stdout_of(busy.lines);
	cr_assert_str_eq(out, "started\nstill here True\n");
	free(out);
	json_decref(busy.lines);
	/* envd answers (at once where Landlock scopes a command's signals; else
	 * its agent, killed too, is started again) */
	up();
}

/* A command's kill -9 -1 ends its own processes: the agent, and a command
 * beside it, run on (each command has a Landlock domain of its own, ABI 6) */
Test(envd, a_commands_kill_minus_one_ends_only_that_command)
{
	struct resp r;
	json_t *e, *end;
	long long pid;
	long st;
	char body[128];

	if (landlock_abi() < 6)
		cr_skip_test("Landlock below ABI 6: kill -9 -1 ends the agent's box");
	up();
	start_and_leave("sleep 79");
	cr_assert_gt(pid = pid_listed("sleep 79"), 0, "sleep 79 is not listed");
	e = run_command("sleep 60 & kill -9 -1; echo reached", &r);
	end = event_at(e, json_array_size(e) - 2, "end");
	cr_assert_not_null(end, "the killing command's stream has no end: %.*s",
	                   (int)r.r_len, r.r_body);
	json_decref(e);
	resp_free(&r);
	cr_assert_eq(pid_listed("sleep 79"), pid,
	             "the background command beside it was ended (or the agent was)");
	cr_assert(envd_up(NULL), "the agent does not answer at once");
	snprintf(body, sizeof(body),
	         "{\"process\":{\"pid\":%lld},\"signal\":\"SIGNAL_SIGKILL\"}", pid);
	json_decref(rpc_of("process.Process", "SendSignal", body, &st));
	cr_assert_eq(st, 200, "the agent can still signal it: %ld", st);
}

/* A command's environment is a context's: the global env, HOME, the tenant's python
 * first. */
Test(envd, a_command_has_a_contexts_environment)
{
	struct resp r;
	json_t *e, *l;
	char *want;

	up();
	e = run_command("echo \"$SANDCELL_TEST_GLOBAL:$HOME:$(command -v python3)\"", &r);
	const char *b64 =
	    json_string_value(json_object_get(event_at(e, 1, "data"), "stdout"));
	cr_assert_not_null(b64);
	l = run(URL, NULL,
	        "import os, base64, shutil\n"
	        "v = f\"{os.environ['SANDCELL_TEST_GLOBAL']}:{os.environ['HOME']}:"
	        "{shutil.which('python3')}\\n\"\n"
	        "print(base64.b64encode(v.encode()).decode(), end='')");
	want = stdout_of(l);
	cr_assert_str_eq(b64, want, "the command said %s, a context %s", b64, want);
	free(want);
	json_decref(l);
	json_decref(e);
	resp_free(&r);
}

Test(envd, connect_to_a_process_that_does_not_run_is_not_found)
{
	static const char body[] = "\0\0\0\0\032{\"process\":{\"pid\":999999}}";
	struct resp r;
	json_t *e, *err;

	up();
	envd("POST", "/process.Process/Connect", "application/connect+json", body,
	     sizeof(body) - 1, &r);
	cr_assert_eq(r.r_status, 200);
	e = envelopes(r.r_body, r.r_len);
	cr_assert_eq(json_array_size(e), 1);
	cr_assert_eq(json_integer_value(json_array_get(json_array_get(e, 0), 0)), 2);
	err = json_object_get(json_array_get(json_array_get(e, 0), 1), "error");
	cr_assert_str_eq(json_string_value(json_object_get(err, "code")), "not_found");
	json_decref(e);
	resp_free(&r);
}

/* text gzipped (zlib's gzip wrapper); *len its bytes */
static char *
gzipped(const char *text, size_t n, size_t *len)
{
	z_stream z = {0};
	char *out;

	cr_assert_eq(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY),
	             Z_OK);
	out = malloc(deflateBound(&z, n));
	z.next_in = (Bytef *)text;
	z.avail_in = (uInt)n;
	z.next_out = (Bytef *)out;
	z.avail_out = (uInt)deflateBound(&z, n);
	cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
	*len = z.total_out;
	deflateEnd(&z);
	return out;
}

/* POST /files?path=P as gzipped octet-stream: the status. */
static long
write_gzipped(const char *path, const char *body, size_t n)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h =
	    curl_slist_append(NULL, "Content-Type: application/octet-stream");
	struct sink s = {0};
	char url[256];
	long st = 0;

	h = curl_slist_append(h, "Content-Encoding: gzip");
	snprintf(url, sizeof(url), "%s/files?path=%s", envd_url, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)n);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	cr_assert_eq(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	free(s.data);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return st;
}

Test(envd, gzip_both_ways_and_no_bomb_past_the_limit)
{
	static const char text[] = "gzipped both ways\n";
	size_t n;
	char *gz = gzipped(text, sizeof(text) - 1, &n), *big;
	CURL *c;
	struct sink s = {0};
	char url[256];
	char *ce = NULL;
	struct curl_header *hd;

	up();
	cr_assert_eq(write_gzipped("gz.txt", gz, n), 200);
	free(gz);
	/* read back asking for gzip: libcurl inflates what says Content-Encoding: gzip */
	c = curl_easy_init();
	snprintf(url, sizeof(url), "%s/files?path=gz.txt", envd_url);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "gzip");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	cr_assert_eq(curl_easy_perform(c), CURLE_OK);
	cr_assert_eq(curl_easy_header(c, "Content-Encoding", 0, CURLH_HEADER, -1, &hd),
	             CURLHE_OK);
	ce = hd->value;
	cr_assert_str_eq(ce, "gzip");
	cr_assert_eq(s.len, sizeof(text) - 1);
	cr_assert(!memcmp(s.data, text, s.len));
	free(s.data);
	curl_easy_cleanup(c);
	/* 4 MiB of zeros gzip to a few KiB: past --max-file-size (2M) once inflated */
	big = calloc(4u << 20, 1);
	gz = gzipped(big, 4u << 20, &n);
	cr_assert_lt(n, 64u << 10);
	cr_assert_eq(write_gzipped("bomb.bin", gz, n), 413);
	free(gz);
	free(big);
	cr_assert_eq(write_gzipped("bad.bin", "not gzip at all", 15), 400);
}

static bool
watcher_saw(void *arg)
{
	const char **want = arg; /* watcher id, then the name */
	char body[128], *text;
	long st;
	json_t *j;
	static char seen[4096];

	snprintf(body, sizeof(body), "{\"watcherId\":\"%s\"}", want[0]);
	j = rpc("GetWatcherEvents", body, &st);
	text = json_dumps(j, 0);
	if (text && strlen(seen) + strlen(text) < sizeof(seen))
		strcat(seen, text);
	free(text);
	json_decref(j);
	return st == 200 && strstr(seen, want[1]);
}

Test(envd, a_polling_watcher_keeps_changes_until_taken)
{
	long st;
	json_t *j;
	char body[128];

	up();
	j = rpc("MakeDir", "{\"path\":\"polled\"}", &st);
	json_decref(j);
	j = rpc("CreateWatcher", "{\"path\":\"polled\",\"recursive\":true}", &st);
	cr_assert_eq(st, 200);
	const char *id = json_string_value(json_object_get(j, "watcherId"));
	cr_assert_not_null(id);
	cr_assert_eq(write_raw("polled/seen.txt", "x"), 200);
	const char *want[2] = {
	    id, "{\"name\": \"seen.txt\", \"type\": \"EVENT_TYPE_CREATE\"}"};
	cr_assert_eq(wait_until(watcher_saw, want, 10000), 0,
	             "no create event for seen.txt");
	snprintf(body, sizeof(body), "{\"watcherId\":\"%s\"}", id);
	json_t *r = rpc("RemoveWatcher", body, &st);
	cr_assert_eq(st, 200);
	json_decref(r);
	r = rpc("GetWatcherEvents", body, &st);
	cr_assert_eq(st, 404);
	cr_assert_str_eq(code_of(r), "not_found");
	json_decref(r);
	json_decref(j);
	j = rpc("CreateWatcher", "{\"path\":\"no/such/dir\"}", &st);
	cr_assert_eq(st, 404);
	json_decref(j);
}

/* The code API's caller checks are envd's: a web page's Origin, a rebound Host, a form
 * body. */
Test(envd, envd_takes_the_code_apis_caller_checks)
{
	struct resp r;

	up();
	get_with(envd_url, "/files?path=x", "Origin: http://evil.example", &r);
	cr_assert_eq(r.r_status, 403, "a web page's request: %ld %s", r.r_status,
	             r.r_body);
	resp_free(&r);
	get_with(envd_url, "/files?path=x", "Host: evil.example", &r);
	cr_assert_eq(r.r_status, 403, "a rebound name: %ld %s", r.r_status, r.r_body);
	resp_free(&r);
	envd("POST", "/files?path=form.txt", "application/x-www-form-urlencoded", "a=1",
	     3, &r);
	cr_assert_eq(r.r_status, 415, "a form body: %ld", r.r_status);
	resp_free(&r);
}

/* ---- files of any size, streamed (envdfile.c, envd/file.c) ---- */

/* A process's /proc status field in KiB (VmRSS:, VmHWM:), or -1. */
static long
vm_kib(pid_t pid, const char *field)
{
	char path[64], line[256];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, strlen(field)))
			v = strtol(line + strlen(field), NULL, 10);
	fclose(f);
	return v;
}

/* The names ListDir gives for dir (depth 1), as one string "a b c " ("" when
 * empty); NULL when it fails (the directory is not there). */
static char *
names_in(const char *dir)
{
	char body[512];
	long st;
	json_t *j, *v;
	size_t i, n = 1;
	char *out;

	snprintf(body, sizeof(body), "{\"path\":\"%s\"}", dir);
	j = rpc("ListDir", body, &st);
	if (st != 200) {
		json_decref(j);
		return NULL;
	}
	json_array_foreach(json_object_get(j, "entries"), i, v) n +=
	    strlen(json_string_value(json_object_get(v, "name"))) + 1;
	out = calloc(1, n);
	json_array_foreach(json_object_get(j, "entries"), i, v)
	{
		strcat(out, json_string_value(json_object_get(v, "name")));
		strcat(out, " ");
	}
	json_decref(j);
	return out;
}

/* Whether ListDir of dir names what arg starts (NULL arg: whether it is empty). */
struct in_dir {
	const char *dir, *prefix;
};

static bool
dir_has(void *arg)
{
	struct in_dir *w = arg;
	char *names = names_in(w->dir);
	bool yes = names && (w->prefix ? strstr(names, w->prefix) != NULL : !*names);

	free(names);
	return yes;
}

/* Whether ListDir of dir names exactly what arg's prefix says ("a b "). */
static bool
dir_is(void *arg)
{
	struct in_dir *w = arg;
	char *names = names_in(w->dir);
	bool yes = names && !strcmp(names, w->prefix);

	free(names);
	return yes;
}

/* A transfer's bytes: made up as they go (xorshift), their CRC, the broker's
 * highest RSS seen meanwhile, and where to cut it (0: never). */
struct gen {
	uint64_t g_state, g_left, g_done, g_cut;
	uLong g_crc;
	pid_t g_broker;
	long g_rss_max;
};

static void
gen_sample(struct gen *g)
{
	long rss = vm_kib(g->g_broker, "VmRSS:");

	if (rss > g->g_rss_max)
		g->g_rss_max = rss;
}

static size_t
gen_read(char *out, size_t size, size_t n, void *arg)
{
	struct gen *g = arg;
	size_t len = size * n;

	if (len > g->g_left)
		len = g->g_left;
	len &= ~(size_t)7;
	if (!len && g->g_left) /* the last few bytes */
		len = g->g_left;
	for (size_t i = 0; i < len; i += 8) {
		g->g_state ^= g->g_state << 13;
		g->g_state ^= g->g_state >> 7;
		g->g_state ^= g->g_state << 17;
		memcpy(out + i, &g->g_state, len - i < 8 ? len - i : 8);
	}
	g->g_crc = crc32(g->g_crc, (const Bytef *)out, (uInt)len);
	if ((g->g_done + len) >> 22 != g->g_done >> 22) /* every 4 MiB */
		gen_sample(g);
	g->g_left -= len;
	g->g_done += len;
	return len;
}

static size_t
gen_write(char *data, size_t size, size_t n, void *arg)
{
	struct gen *g = arg;
	size_t len = size * n;

	g->g_crc = crc32(g->g_crc, (const Bytef *)data, (uInt)len);
	if ((g->g_done + len) >> 22 != g->g_done >> 22)
		gen_sample(g);
	g->g_done += len;
	if (g->g_cut && g->g_done >= g->g_cut)
		return 0; /* the client leaves mid-way */
	return len;
}

/* POST /files?path=P of g's bytes, raw, with their size said (or chunked: size
 * -1): the status. */
static long
upload_gen(const char *path, struct gen *g, curl_off_t size)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h =
	    curl_slist_append(NULL, "Content-Type: application/octet-stream");
	struct sink s = {0};
	char url[256];
	long st = 0;

	h = curl_slist_append(h, "Expect:");
	snprintf(url, sizeof(url), "%s/files?path=%s", envd_url, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POST, 1L);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, gen_read);
	curl_easy_setopt(c, CURLOPT_READDATA, g);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, size);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 300L);
	cr_assert_eq(curl_easy_perform(c), CURLE_OK, "upload of %s: no answer", path);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	free(s.data);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return st;
}

/* GET /files?path=P into g (its CRC, its count; cut at g_cut): the status, 0
 * when the client left; *length the Content-Length said (-1: none). */
static long
download_gen(const char *path, struct gen *g, curl_off_t *length)
{
	CURL *c = curl_easy_init();
	char url[256];
	long st = 0;
	CURLcode rc;

	snprintf(url, sizeof(url), "%s/files?path=%s", envd_url, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, gen_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, g);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 300L);
	rc = curl_easy_perform(c);
	if (rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	else
		cr_assert(g->g_cut && rc == CURLE_WRITE_ERROR, "download of %s: %s", path,
		          curl_easy_strerror(rc));
	if (length)
		curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, length);
	curl_easy_cleanup(c);
	return st;
}

/* An own broker (defaults, --max-file-size 1G) whose envd_url is this test's. */
static void
own_envd(const char *const *more)
{
	char at[32];
	const char *args[16] = {"--no-default-context", "--pool", "0", "--envd-listen",
	                        at};
	size_t n = 5;

	for (size_t i = 0; more && more[i] && n < 15; i++)
		args[n++] = more[i];
	own_envd_port = free_port();
	snprintf(at, sizeof(at), "127.0.0.1:%d", own_envd_port);
	snprintf(envd_url, sizeof(envd_url), "http://127.0.0.1:%d", own_envd_port);
	cr_assert_eq(broker_start(&own, args), 0);
	cr_assert_eq(wait_until(own_envd_up, NULL, 30000), 0,
	             "envd's /health never said 204");
}

#define BIG (100ull << 20)
#define RSS_SLACK_KIB (32l << 10) /* a bounded window, not the file */

Test(envd_own, a_100_mib_file_goes_up_and_down_in_bounded_memory, .timeout = 600,
     .fini = own_stop)
{
	struct gen up = {.g_state = 0x9e3779b97f4a7c15ull, .g_left = BIG};
	struct gen down = {0};
	curl_off_t length = -1;
	long rss0, hwm0;

	own_envd(NULL);
	up.g_broker = down.g_broker = own.b_pid;
	rss0 = vm_kib(own.b_pid, "VmRSS:");
	hwm0 = vm_kib(own.b_pid, "VmHWM:");
	cr_assert_eq(upload_gen("big/data.bin", &up, (curl_off_t)BIG), 200);
	cr_assert_eq(up.g_done, BIG);
	cr_assert_eq(download_gen("big/data.bin", &down, &length), 200);
	cr_assert_eq(length, (curl_off_t)BIG, "Content-Length: the file's size");
	cr_assert_eq(down.g_done, BIG, "the whole file came back");
	cr_assert_eq(down.g_crc, up.g_crc, "the same bytes came back");
	/* the broker held a window of each, never the file */
	cr_assert_lt(up.g_rss_max - rss0, RSS_SLACK_KIB, "upload: RSS %ld KiB -> %ld KiB",
	             rss0, up.g_rss_max);
	cr_assert_lt(down.g_rss_max - rss0, RSS_SLACK_KIB,
	             "download: RSS %ld KiB -> %ld KiB", rss0, down.g_rss_max);
	cr_assert_lt(vm_kib(own.b_pid, "VmHWM:") - hwm0, RSS_SLACK_KIB,
	             "peak RSS %ld KiB -> %ld KiB", hwm0, vm_kib(own.b_pid, "VmHWM:"));
	/* clients that leave mid-way end the agent's reads: more of them than it
	 * has transfers at once (16), and the next download is whole */
	for (int i = 0; i < 20; i++) {
		struct gen cut = {.g_cut = 1u << 20, .g_broker = own.b_pid};
		cr_assert_eq(download_gen("big/data.bin", &cut, NULL), 0);
	}
	memset(&down, 0, sizeof(down));
	down.g_broker = own.b_pid;
	cr_assert_eq(download_gen("big/data.bin", &down, NULL), 200);
	cr_assert_eq(down.g_crc, up.g_crc);
	cr_assert_lt(vm_kib(own.b_pid, "VmHWM:") - hwm0, RSS_SLACK_KIB,
	             "peak RSS %ld KiB -> %ld KiB after the cut downloads", hwm0,
	             vm_kib(own.b_pid, "VmHWM:"));
}

Test(envd_own, a_full_workspace_is_507_and_leaves_nothing, .timeout = 180,
     .fini = own_stop)
{
	const char *more[] = {"--workspace-size", "16M", NULL};
	struct gen g = {.g_state = 7, .g_left = 24u << 20};
	struct in_dir empty = {"full", NULL};

	own_envd(more);
	cr_assert_eq(upload_gen("full/big.bin", &g, (curl_off_t)(24u << 20)), 507);
	cr_assert_eq(wait_until(dir_has, &empty, 10000), 0,
	             "the workspace holds what a failed upload wrote");
}

/* A process's field of /proc/PID/status or /proc/PID/io ("PPid:", "wchar:"), or -1. */
static long long
proc_field(pid_t pid, const char *file, const char *field)
{
	char path[64], line[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, strlen(field)))
			v = strtoll(line + strlen(field), NULL, 10);
	fclose(f);
	return v;
}

/* The envd agent a broker runs: a sandcell-envd whose ancestors hold broker; or 0. */
static pid_t
agent_under(pid_t broker)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	while (d && !found && (e = readdir(d))) {
		pid_t pid = (pid_t)atoi(e->d_name), up = pid;
		char path[64], comm[32] = "";
		FILE *f;
		snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
		if (pid <= 0 || !(f = fopen(path, "r")))
			continue;
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		fclose(f);
		if (strcmp(comm, "sandcell-envd\n"))
			continue;
		for (int i = 0; i < 8 && up > 1 && !found; i++)
			if ((up = (pid_t)proc_field(up, "status", "PPid:")) == broker)
				found = pid;
	}
	if (d)
		closedir(d);
	return found;
}

/* Whether the agent (arg: its pid and the bytes it had written) wrote 512 KiB
 * more. */
struct wrote {
	pid_t w_pid;
	long long w_from;
};

static bool
agent_wrote(void *arg)
{
	struct wrote *w = arg;

	return proc_field(w->w_pid, "io", "wchar:") >= w->w_from + (512 << 10);
}

/* Half an upload of path (2 MiB said, 1 MiB sent) to at (envd's host:port) on
 * a connection left open: its fd, once agent (its pid) wrote some of it. */
static int
half_upload_to(const char *at, pid_t agent, const char *path)
{
	static char chunk[64 << 10];
	char head[512], url[64];
	struct wrote w = {agent, proc_field(agent, "io", "wchar:")};
	int fd;

	snprintf(url, sizeof(url), "http://%s", at);
	fd = tcp_connect(url);
	cr_assert_geq(fd, 0);
	cr_assert_geq(w.w_from, 0, "no /proc/%d/io", (int)agent);
	snprintf(head, sizeof(head),
	         "POST /files?path=%s HTTP/1.1\r\nHost: %s\r\n"
	         "Content-Type: application/octet-stream\r\nContent-Length: %u\r\n\r\n",
	         path, at, 2u << 20);
	cr_assert_eq(write(fd, head, strlen(head)), (ssize_t)strlen(head));
	memset(chunk, 'c', sizeof(chunk));
	for (int i = 0; i < 16; i++) /* 1 MiB of 2: the agent has chunks of it */
		cr_assert_eq(write(fd, chunk, sizeof(chunk)), (ssize_t)sizeof(chunk));
	cr_assert_eq(wait_until(agent_wrote, &w, 10000), 0,
	             "the upload's bytes never reached the agent while it came");
	return fd;
}

static int
half_upload(const char *path)
{
	pid_t agent = agent_under(test_broker_pid());

	cr_assert_gt(agent, 0, "no envd agent under the broker");
	return half_upload_to(envd_at, agent, path);
}

/* An upload whose client leaves mid-body: a new file is gone, one that was
 * there is as it was (its temporary file gone). */
Test(envd, a_cut_upload_leaves_no_file_and_no_temp_file)
{
	struct in_dir only_old = {"cut", "old.bin "};
	long st;
	char *got;

	up();
	close(half_upload("cut/new.bin"));
	cr_assert_eq(write_raw("cut/old.bin", "old"), 200);
	close(half_upload("cut/old.bin"));
	cr_assert_eq(wait_until(dir_is, &only_old, 10000), 0,
	             "a cut upload left something behind: %s", names_in("cut"));
	got = read_file("cut/old.bin", &st);
	cr_assert_str_eq(got, "old");
	free(got);
}

/* envd's uploads are bounded by --max-file-size (2M here), not --max-body (1M) */
Test(envd, uploads_are_bounded_by_max_file_size_not_max_body)
{
	struct gen g = {.g_state = 3, .g_left = 1536u << 10}, back = {0};
	struct in_dir empty = {"bound", NULL};

	up();
	cr_assert_eq(upload_gen("bound/ok.bin", &g, (curl_off_t)(1536u << 10)), 200);
	cr_assert_eq(download_gen("bound/ok.bin", &back, NULL), 200);
	cr_assert_eq(back.g_crc, g.g_crc);
	long st;
	json_decref(rpc("Remove", "{\"path\":\"bound/ok.bin\"}", &st));
	cr_assert_eq(st, 200);
	/* chunked: no size said, refused once its bytes pass the bound */
	struct gen big = {.g_state = 5, .g_left = 3u << 20};
	cr_assert_eq(upload_gen("bound/big.bin", &big, -1), 413);
	cr_assert_eq(wait_until(dir_has, &empty, 10000), 0,
	             "an upload past --max-file-size left something behind");
}

/* A name in dir (on the host) that starts with prefix, or NULL (caller frees);
 * never "." or "..". */
static char *
host_entry(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char *found = NULL;

	while (d && !found && (e = readdir(d)))
		if (!strncmp(e->d_name, prefix, strlen(prefix)) &&
		    strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			found = strdup(e->d_name);
	if (d)
		closedir(d);
	return found;
}

/* The agent killed mid-upload: no part of the new file, the old one whole, and
 * no temporary name, on the host's workspace as in the box. */
Test(envd_own, a_killed_agent_leaves_no_partial_file, .timeout = 120, .fini = own_stop)
{
	char at[32], dir[256], *left;
	pid_t agent;
	int fd1, fd2;
	long st;

	own_envd(NULL);
	snprintf(at, sizeof(at), "127.0.0.1:%d", own_envd_port);
	cr_assert_eq(write_raw("killed/old.bin", "old"), 200);
	cr_assert_gt(agent = agent_under(own.b_pid), 0, "no envd agent under the broker");
	fd1 = half_upload_to(at, agent, "killed/new.bin");
	fd2 = half_upload_to(at, agent, "killed/old.bin");
	cr_assert_eq(kill(agent, SIGKILL), 0);
	cr_assert_eq(wait_until(agent_is_new, &agent, 30000), 0,
	             "no new agent after a kill");
	close(fd1);
	close(fd2);
	snprintf(dir, sizeof(dir), "%s.work/killed", own.b_run_dir);
	left = host_entry(dir, "new");
	cr_assert_null(left, "a killed upload left %s/%s", dir, left);
	left = host_entry(dir, ".");
	cr_assert_null(left, "a killed upload left a temporary file %s/%s", dir, left);
	char *got = read_file("killed/old.bin", &st);
	cr_assert_str_eq(got ? got : "(none)", "old", "the old file is not whole: %ld",
	                 st);
	free(got);
}

/* A read, a write, a call and a command's start whose agent stopped
 * (SIGSTOP) end within a bound (ENVD_STALL_MS, 10 s; 10 s for a call), 504
 * or deadline_exceeded, and the broker keeps no state of them; the agent,
 * let go, answers again. */
Test(envd_own, a_stopped_agent_never_hangs_a_transfer, .timeout = 180, .fini = own_stop)
{
	struct gen g = {.g_state = 11, .g_left = 2u << 20}, back = {0};
	pid_t agent;
	long st;
	struct resp r;
	time_t t0;

	own_envd(NULL);
	cr_assert_eq(upload_gen("stall.bin", &g, (curl_off_t)(2u << 20)), 200);
	cr_assert_gt(agent = agent_under(own.b_pid), 0, "no envd agent under the broker");
	cr_assert_eq(kill(agent, SIGSTOP), 0);
	t0 = time(NULL);
	envd("GET", "/files?path=stall.bin", NULL, NULL, 0, &r);
	cr_assert_eq(r.r_status, 504, "a read of a stopped agent: %ld %s", r.r_status,
	             r.r_body);
	cr_assert(strstr(r.r_body, "did not answer"), "%s", r.r_body);
	resp_free(&r);
	struct gen g2 = {.g_state = 12, .g_left = 2u << 20};
	cr_assert_eq(upload_gen("stall2.bin", &g2, (curl_off_t)(2u << 20)), 504,
	             "a write to a stopped agent");
	json_decref(rpc("Stat", "{\"path\":\"stall.bin\"}", &st));
	cr_assert_eq(st, 504, "a call to a stopped agent: %ld", st);
	json_t *e = run_command("echo never", &r),
	       *last = json_array_get(e, json_array_size(e) - 1);
	cr_assert_eq(json_integer_value(json_array_get(last, 0)), 2, "no end of stream");
	cr_assert_str_eq(code_of(json_object_get(json_array_get(last, 1), "error")),
	                 "deadline_exceeded", "a Start to a stopped agent: %.*s",
	                 (int)r.r_len, r.r_body);
	json_decref(e);
	resp_free(&r);
	cr_assert_lt(time(NULL) - t0, 80, "four stalls took %lds",
	             (long)(time(NULL) - t0));
	cr_assert_eq(metric_value(own.b_url, "sandcell_streams_open"), 0,
	             "the broker holds the stalled transfers' streams");
	kill(agent, SIGCONT);
	cr_assert_eq(download_gen("stall.bin", &back, NULL), 200, "the agent let go");
	cr_assert_eq(back.g_crc, g.g_crc);
}

/* POST /files?path=P, raw, with extra headers (NULL-ended): the status, the
 * answer's JSON in *out (or NULL). */
static long
write_with(const char *path, const char *data, const char *const *headers, json_t **out)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h =
	    curl_slist_append(NULL, "Content-Type: application/octet-stream");
	struct sink s = {0};
	char url[256];
	long st = 0;

	for (; headers && *headers; headers++)
		h = curl_slist_append(h, *headers);
	snprintf(url, sizeof(url), "%s/files?path=%s", envd_url, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, data);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	cr_assert_eq(curl_easy_perform(c), CURLE_OK, "upload of %s: no answer", path);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	*out = s.data ? json_loadb(s.data, s.len, 0, NULL) : NULL;
	free(s.data);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return st;
}

/* X-Metadata-* headers of an upload are the file's metadata (user.e2b.*
 * xattrs), shown by the upload's answer, Stat and ListDir; keys lowercased,
 * an upload without them clears them, one not of envd's form is 400 and
 * writes nothing. */
Test(envd, an_uploads_metadata_shows_in_its_entries)
{
	const char *meta[] = {"X-Metadata-Owner: Alice", "X-Metadata-kind: csv",
	                      "X-Metadata-kind: second", NULL};
	const char *bad[] = {"X-Metadata-city: Z\xc3\xbcrich", NULL};
	json_t *j, *want = json_pack("{s:s, s:s}", "owner", "Alice", "kind", "csv");
	long st;

	up();
	cr_assert_eq(write_with("meta/a.txt", "a,b\n", meta, &j), 200);
	cr_assert(json_equal(json_object_get(json_array_get(j, 0), "metadata"), want),
	          "the upload's answer: %s", json_dumps(j, 0));
	json_decref(j);
	j = rpc("Stat", "{\"path\":\"meta/a.txt\"}", &st);
	cr_assert_eq(st, 200);
	cr_assert(
	    json_equal(json_object_get(json_object_get(j, "entry"), "metadata"), want),
	    "Stat: %s", json_dumps(j, 0));
	json_decref(j);
	j = rpc("ListDir", "{\"path\":\"meta\"}", &st);
	cr_assert_eq(st, 200);
	cr_assert(
	    json_equal(json_object_get(json_array_get(json_object_get(j, "entries"), 0),
	                               "metadata"),
	               want),
	    "ListDir: %s", json_dumps(j, 0));
	json_decref(j);
	cr_assert_eq(write_with("meta/a.txt", "again\n", NULL, &j), 200);
	json_decref(j);
	j = rpc("Stat", "{\"path\":\"meta/a.txt\"}", &st);
	cr_assert_null(json_object_get(json_object_get(j, "entry"), "metadata"),
	               "an upload without metadata kept the old: %s", json_dumps(j, 0));
	json_decref(j);
	cr_assert_eq(write_with("meta/bad.txt", "x", bad, &j), 400);
	json_decref(j);
	j = rpc("Stat", "{\"path\":\"meta/bad.txt\"}", &st);
	cr_assert_eq(st, 404, "a refused upload wrote its file");
	json_decref(j);
	json_decref(want);
}
