/*
 * harness.c — start/stop real brokers and talk HTTP to them with libcurl.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <sched.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <unistd.h>

#include <curl/curl.h>

#include "harness.h"

double
ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double
ms_since(double t0)
{
	return ms_now() - t0;
}

/*
 * A port to listen on, below the ephemeral range: one bind(0) handed out is
 * in that range, where any connection made before the broker binds it (a
 * Deno kernel's, a client's) may take it as its own local port.
 */
int
free_port(void)
{
	static unsigned seed;
	int lo = 32768, hi = 60999;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

	if (f) {
		if (fscanf(f, "%d %d", &lo, &hi) != 2)
			lo = 32768;
		fclose(f);
	}
	if (!seed)
		seed = (unsigned)getpid() ^ (unsigned)ms_now();
	for (int i = 0; i < 200; i++) {
		int port = lo > 12000 ? 10000 + (int)(rand_r(&seed) % (unsigned)(lo - 10000))
				      : 0;
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
		socklen_t len = sizeof(a);
		int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		    getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
			close(fd);
			return ntohs(a.sin_port);
		}
		close(fd);
	}
	return -1;
}

/*
 * A test that writes to a socket the broker has closed (it answered 431 and
 * hung up, say) gets EPIPE, not a SIGPIPE that kills the test process.
 */
__attribute__((constructor)) static void
ignore_sigpipe(void)
{
	signal(SIGPIPE, SIG_IGN);
}

int
tcp_connect(const char *url)
{
	int port = atoi(strrchr(url, ':') + 1), fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int
raw_execute(const char *url, const char *id, const char *code, const char *version,
	    const char *headers)
{
	json_t *body = json_pack("{s:s, s:s}", "code", code, "context_id", id);
	char *js = json_dumps(body, JSON_COMPACT), *req = NULL;
	int fd;

	if (asprintf(&req,
		     "POST /execute HTTP/%s\r\nHost: localhost\r\nContent-Type: application/json\r\n"
		     "%sContent-Length: %zu\r\n\r\n%s",
		     version, headers, strlen(js), js) < 0)
		req = NULL;
	free(js);
	json_decref(body);
	if (!req || (fd = tcp_connect(url)) < 0) {
		free(req);
		return -1;
	}
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
		close(fd);
		fd = -1;
	}
	free(req);
	return fd;
}

int
proc_fd_count(pid_t pid)
{
	char path[64];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if (!(d = opendir(path)))
		return -1;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* A "Name: N kB" line of /proc/PID/<file>, in KiB; -1 if unreadable. */
static long
proc_kb(pid_t pid, const char *file, const char *format)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, format, &kb) == 1)
			break;
	fclose(f);
	return kb;
}

size_t
proc_cmdline(pid_t pid, char *buf, size_t size)
{
	char path[64];
	ssize_t n = -1;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, buf, size - 1);
		close(fd);
	}
	n = n < 0 ? 0 : n;
	buf[n] = '\0';
	return (size_t)n;
}

long
proc_rss_kb(pid_t pid)
{
	return proc_kb(pid, "status", "VmRSS: %ld kB");
}

long
proc_pss_kb(pid_t pid)
{
	return proc_kb(pid, "smaps_rollup", "Pss: %ld kB");
}

/* Its own pages (Private_Clean + Private_Dirty of smaps_rollup), KiB; -1 if unreadable. */
long
proc_uss_kb(pid_t pid)
{
	long clean = proc_kb(pid, "smaps_rollup", "Private_Clean: %ld kB"),
	     dirty = proc_kb(pid, "smaps_rollup", "Private_Dirty: %ld kB");

	return clean < 0 || dirty < 0 ? -1 : clean + dirty;
}

unsigned long
proc_ns_ino(pid_t pid, const char *which)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, which);
	return stat(path, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

long
proc_huge_kb(pid_t pid)
{
	return proc_kb(pid, "smaps_rollup", "AnonHugePages: %ld kB");
}

/* The code's stdout (run in context id); the caller frees. */
char *
run_stdout(const char *base, const char *id, const char *code)
{
	json_t *l = run(base, id, code);
	char *out = stdout_of(l);

	json_decref(l);
	return out;
}

const char init_probe_py[] =
    "import ctypes, errno, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def why(e):\n"
    "    return 'denied' if e in (errno.EACCES, errno.EPERM) else errno.errorcode.get(e, str(e))\n"
    "try:\n"
    "    os.close(os.open('/proc/1/mem', os.O_RDWR))\n"
    "    mem = 'opened'\n"
    "except OSError as e:\n"
    "    mem = why(e.errno)\n"
    "fd = libc.syscall(438, os.pidfd_open(1), 3, 0)  # pidfd_getfd\n"
    "took = 'took' if fd >= 0 else why(ctypes.get_errno())\n"
    "r = libc.ptrace(16, 1, 0, 0)  # PTRACE_ATTACH\n"
    "attached = 'attached' if r == 0 else why(ctypes.get_errno())\n"
    "print(mem, took, attached)\n";

const char wheel_py[] =
    "import base64, hashlib, os, zipfile\n"
    "def wheel(d, name, version, body, pad=0):\n"
    "    info = '%s-%s.dist-info/' % (name, version)\n"
    "    files = {name + '/__init__.py': body.encode(),\n"
    "             info + 'METADATA': ('Metadata-Version: 2.1\\nName: %s\\nVersion: %s\\n'\n"
    "                                 % (name, version)).encode(),\n"
    "             info + 'WHEEL': b'Wheel-Version: 1.0\\nGenerator: sandcell-test\\n'\n"
    "                             b'Root-Is-Purelib: true\\nTag: py3-none-any\\n'}\n"
    "    if pad:\n"
    "        files[name + '/pad.bin'] = os.urandom(pad)\n"
    "    os.makedirs(d, exist_ok=True)\n"
    "    path = os.path.join(d, '%s-%s-py3-none-any.whl' % (name, version))\n"
    "    record = []\n"
    "    with zipfile.ZipFile(path, 'w') as z:\n"
    "        for n, data in files.items():\n"
    "            z.writestr(n, data)\n"
    "            h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=')\n"
    "            record.append('%s,sha256=%s,%d' % (n, h.decode(), len(data)))\n"
    "        record.append(info + 'RECORD,,')\n"
    "        z.writestr(info + 'RECORD', '\\n'.join(record) + '\\n')\n"
    "    return path\n";

size_t
sink_write(char *p, size_t sz, size_t n, void *arg)
{
	struct sink *s = arg;

	s->data = realloc(s->data, s->len + sz * n + 1);
	memcpy(s->data + s->len, p, sz * n);
	s->len += sz * n;
	s->data[s->len] = '\0';
	return sz * n;
}

static char access_token[256]; /* harness_access_token's: sent with every request */

void
harness_access_token(const char *token)
{
	snprintf(access_token, sizeof(access_token), "%s", token ? token : "");
}

static struct curl_slist *
json_headers(void)
{
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	char line[300];

	if (access_token[0]) {
		snprintf(line, sizeof(line), "X-Access-Token: %s", access_token);
		h = curl_slist_append(h, line);
	}
	return h;
}

int
http(const char *base, const char *method, const char *path, const char *body,
     struct resp *r, long timeout_s)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = json_headers();
	struct sink s = {0};
	char url[1024];
	char *ct = NULL;
	CURLcode e;

	memset(r, 0, sizeof(*r));
	snprintf(url, sizeof(url), "%s%s", base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	e = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->r_status);
	curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
	if (ct)
		snprintf(r->r_ctype, sizeof(r->r_ctype), "%s", ct);
	r->r_body = s.data ? s.data : strdup("");
	r->r_len = s.len;
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return e == CURLE_OK ? 0 : -1;
}

void
resp_free(struct resp *r)
{
	free(r->r_body);
	r->r_body = NULL;
}

struct ndjson {
	char *partial;
	size_t plen;
	json_t *lines;
	double t0;
	int *stdout_seen; /* stdout lines so far, read by another thread; or NULL */
};

static size_t
ndjson_write(char *p, size_t sz, size_t n, void *arg)
{
	struct ndjson *nd = arg;
	size_t len = sz * n;

	nd->partial = realloc(nd->partial, nd->plen + len + 1);
	memcpy(nd->partial + nd->plen, p, len);
	nd->plen += len;
	char *start = nd->partial, *nl;
	while ((nl = memchr(start, '\n', nd->plen - (start - nd->partial)))) {
		json_error_t jerr;
		json_t *j = json_loadb(start, nl - start, JSON_ALLOW_NUL, &jerr);
		if (!j) /* a line that is not JSON fails the test that reads it */
			j = json_pack("{s:s, s:s%}", "type", "_invalid", "raw", start,
				      (size_t)(nl - start));
		const char *t = json_string_value(json_object_get(j, "type"));
		if (t && !strcmp(t, "keepalive")) {
			json_decref(j);
		} else {
			json_object_set_new(j, "_ms", json_real(ms_since(nd->t0)));
			if (nd->stdout_seen && t && !strcmp(t, "stdout"))
				__atomic_add_fetch(nd->stdout_seen, 1, __ATOMIC_SEQ_CST);
			json_array_append_new(nd->lines, j);
		}
		start = nl + 1;
	}
	nd->plen -= start - nd->partial;
	memmove(nd->partial, start, nd->plen);
	return len;
}

static json_t *
execute_counted(const char *base, const char *body_json, long *status, long timeout_ms,
		int *stdout_seen)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = json_headers();
	struct ndjson nd = {.lines = json_array(), .t0 = ms_now(), .stdout_seen = stdout_seen};
	char url[512];
	long st = 0;

	snprintf(url, sizeof(url), "%s/execute", base);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body_json);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body_json));
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, ndjson_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &nd);
	CURLcode e = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	if (status)
		*status = st;
	if (e == CURLE_OPERATION_TIMEDOUT && st == 200) {
		/* the client gave up: what it saw so far, marked */
		json_array_append_new(nd.lines, json_pack("{s:s}", "type", "_client_timeout"));
	} else if (e != CURLE_OK || st != 200) {
		if (e != CURLE_OK)
			fprintf(stderr, "execute: %s\n", curl_easy_strerror(e));
		json_decref(nd.lines);
		nd.lines = NULL;
	}
	free(nd.partial);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return nd.lines;
}

json_t *
execute(const char *base, const char *body_json, long *status, long timeout_ms)
{
	return execute_counted(base, body_json, status, timeout_ms, NULL);
}

static json_t *
execute_code_counted(const char *base, const char *ctx, const char *code,
		     const char *extra_json, long timeout_ms, long *status, int *stdout_seen)
{
	json_t *body = json_pack("{s:s}", "code", code);
	char *s;
	json_t *lines;

	if (ctx)
		json_object_set_new(body, "context_id", json_string(ctx));
	if (extra_json) {
		json_t *x = json_loads(extra_json, 0, NULL);
		json_object_update(body, x);
		json_decref(x);
	}
	s = json_dumps(body, 0);
	lines = execute_counted(base, s, status, timeout_ms, stdout_seen);
	free(s);
	json_decref(body);
	return lines;
}

json_t *
execute_code(const char *base, const char *ctx, const char *code, const char *extra_json,
	     long timeout_ms, long *status)
{
	return execute_code_counted(base, ctx, code, extra_json, timeout_ms, status, NULL);
}

json_t *
run(const char *base, const char *ctx, const char *code)
{
	return execute_code(base, ctx, code, NULL, 60000, NULL);
}

static void *
bg_main(void *arg)
{
	struct bg *b = arg;
	double t0 = ms_now();

	b->lines = execute_code_counted(b->base ? b->base : test_url(), b->ctx, b->code, b->extra,
					b->timeout_ms ? b->timeout_ms : 60000, NULL,
					&b->stdout_seen);
	b->took = ms_since(t0);
	__atomic_store_n(&b->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

void
bg_start(struct bg *b)
{
	pthread_create(&b->t, NULL, bg_main, b);
}

void
bg_join(struct bg *b)
{
	pthread_join(b->t, NULL);
}

static bool
bg_has_stdout(void *arg)
{
	return __atomic_load_n(&((struct bg *)arg)->stdout_seen, __ATOMIC_SEQ_CST) > 0;
}

int
bg_wait_stdout(struct bg *b, long timeout_ms)
{
	return wait_until(bg_has_stdout, b, timeout_ms);
}

pid_t
context_pid(const char *base, const char *id, const char *which)
{
	char path[128];
	struct resp r;
	pid_t pid = 0;

	snprintf(path, sizeof(path), "/contexts/%s", id);
	if (http(base, "GET", path, NULL, &r, 5) == 0 && r.r_status == 200) {
		json_t *j = json_loads(r.r_body, 0, NULL);
		pid = (pid_t)json_integer_value(json_object_get(j, which));
		json_decref(j);
	}
	resp_free(&r);
	return pid;
}

long
context_post(const char *base, const char *id, const char *action, long timeout_s)
{
	char path[160];
	struct resp r;
	long st = -1;

	snprintf(path, sizeof(path), "/contexts/%s/%s", id, action);
	if (http(base, "POST", path, NULL, &r, timeout_s) == 0)
		st = r.r_status;
	resp_free(&r);
	return st;
}

json_t *
line_of(json_t *lines, const char *type, int nth)
{
	size_t i;
	json_t *l;

	json_array_foreach(lines, i, l)
	{
		const char *t = json_string_value(json_object_get(l, "type"));
		if (t && !strcmp(t, type) && nth-- == 0)
			return l;
	}
	return NULL;
}

int
count_of(json_t *lines, const char *type)
{
	int n = 0;

	while (line_of(lines, type, n))
		n++;
	return n;
}

char *
stdout_of(json_t *lines)
{
	size_t i, len = 0;
	json_t *l;
	char *out = calloc(1, 1);

	json_array_foreach(lines, i, l)
	{
		const char *t = json_string_value(json_object_get(l, "type"));
		const char *text = json_string_value(json_object_get(l, "text"));
		if (t && text && !strcmp(t, "stdout")) {
			out = realloc(out, len + strlen(text) + 1);
			strcpy(out + len, text);
			len += strlen(text);
		}
	}
	return out;
}

const char *
result_text(json_t *lines)
{
	json_t *r = line_of(lines, "result", 0);

	return r ? json_string_value(json_object_get(r, "text")) : NULL;
}

char *
context_new(const char *base, const char *language, const char *cwd)
{
	json_t *body = json_object();
	struct resp r;
	char *s, *id = NULL;

	if (language)
		json_object_set_new(body, "language", json_string(language));
	if (cwd)
		json_object_set_new(body, "cwd", json_string(cwd));
	s = json_dumps(body, 0);
	if (http(base, "POST", "/contexts", s, &r, 60) == 0 && r.r_status == 200) {
		json_t *j = json_loads(r.r_body, 0, NULL);
		const char *v = json_string_value(json_object_get(j, "id"));
		id = v ? strdup(v) : NULL;
		json_decref(j);
	}
	resp_free(&r);
	free(s);
	json_decref(body);
	return id;
}

char *
context_new_network(const char *base, const char *language, const char *network,
                    long *status)
{
	char *body = NULL, *id = NULL;
	struct resp r;

	*status = 0;
	if (asprintf(&body, "{\"language\": \"%s\", \"network\": %s}", language,
	             network) < 0)
		return NULL;
	if (http(base, "POST", "/contexts", body, &r, 60) == 0) {
		*status = r.r_status;
		json_t *j = r.r_status == 200 ? json_loads(r.r_body, 0, NULL) : NULL;
		const char *v = json_string_value(json_object_get(j, "id"));
		id = v ? strdup(v) : NULL;
		json_decref(j);
	}
	resp_free(&r);
	free(body);
	return id;
}

void *
context_new_thread(void *base)
{
	return context_new(base, "python", NULL);
}

int
broker_start(struct broker *b, const char *const *extra)
{
	return broker_start_as(b, 0, extra);
}

bool (*harness_log_name)(char *path, size_t len);

/* A broker not started yet: its port (0: a free one), URL, run dir and log. */
static int
broker_prepare(struct broker *b, int port)
{
	memset(b, 0, sizeof(*b));
	b->b_port = port ? port : free_port();
	snprintf(b->b_url, sizeof(b->b_url), "http://127.0.0.1:%d", b->b_port);
	snprintf(b->b_host, sizeof(b->b_host), "127.0.0.1");
	snprintf(b->b_run_dir, sizeof(b->b_run_dir), "/tmp/sandcell-test.XXXXXX");
	if (!mkdtemp(b->b_run_dir))
		return -1;
	harness_track(b->b_run_dir);
	b->b_test_log = harness_log_name && harness_log_name(b->b_log, sizeof(b->b_log));
	if (!b->b_test_log)
		snprintf(b->b_log, sizeof(b->b_log), "%s.log", b->b_run_dir);
	return 0;
}

int
broker_start_on(struct broker *b, int listen_fd, const char *const *extra)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);

	if (listen_fd <= 0 || getsockname(listen_fd, (struct sockaddr *)&a, &len) < 0 ||
	    broker_prepare(b, ntohs(a.sin_port)) < 0)
		return -1;
	b->b_listen_fd = listen_fd;
	return broker_restart(b, extra);
}

int
broker_start_listening(struct broker *b, const char *host, const char *const *extra)
{
	if (broker_prepare(b, 0) < 0)
		return -1;
	snprintf(b->b_host, sizeof(b->b_host), "%s", host);
	return broker_restart(b, extra);
}

int
broker_start_as(struct broker *b, uid_t uid, const char *const *extra)
{
	if (broker_prepare(b, 0) < 0)
		return -1;
	b->b_uid = uid;
	if (uid && chown(b->b_run_dir, uid, uid) < 0)
		return -1;
	return broker_restart(b, extra);
}

__attribute__((weak)) const bool harness_broker_contained = false;

int
broker_start_contained(struct broker *b, const char *const *extra)
{
	if (broker_prepare(b, 0) < 0)
		return -1;
	b->b_contained = true;
	b->b_docker = harness_broker_docker;
	return broker_restart(b, extra);
}

int
broker_start_docker(struct broker *b, const int *caps, const char *const *extra)
{
	if (broker_prepare(b, 0) < 0)
		return -1;
	b->b_contained = b->b_docker = true;
	b->b_caps = caps;
	return broker_restart(b, extra);
}

int
broker_start_restricted(struct broker *b, uid_t uid, const char *const *extra)
{
	static const int none[] = {-1};

	if (broker_prepare(b, 0) < 0)
		return -1;
	b->b_contained = b->b_docker = true;
	b->b_caps = none;
	b->b_uid = uid;
	if (chown(b->b_run_dir, uid, uid) < 0)
		return -1;
	return broker_restart(b, extra);
}

__attribute__((weak)) const bool harness_broker_docker = false;

/* podman's default capabilities (containers.conf, 4.x) */
static const int podman_caps[] = {CAP_CHOWN,	    CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID,
				  CAP_KILL,	    CAP_NET_BIND_SERVICE, CAP_SETFCAP, CAP_SETGID,
				  CAP_SETPCAP,	    CAP_SETUID,	      CAP_SYS_CHROOT, -1};
/* Docker's (moby's oci/caps/defaults.go) */
static const int docker_caps[] = {CAP_CHOWN,	    CAP_DAC_OVERRIDE, CAP_FSETID, CAP_FOWNER,
				  CAP_MKNOD,	    CAP_NET_RAW,      CAP_SETGID, CAP_SETUID,
				  CAP_SETFCAP,	    CAP_SETPCAP,      CAP_NET_BIND_SERVICE,
				  CAP_SYS_CHROOT,   CAP_KILL,	      CAP_AUDIT_WRITE, -1};

static int contain(const int *kept);

int
broker_contain(void)
{
	return contain(podman_caps);
}

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#else
#error "broker_contain_docker: the seccomp filter's architecture"
#endif

int
broker_contain_docker(const int *caps)
{
#define NEW_NS                                                                            \
	(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |        \
	 CLONE_NEWNET | CLONE_NEWCGROUP)
#define REFUSE(nr, err)                                                                   \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1),                                   \
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err))
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		REFUSE(__NR_unshare, EPERM),
		REFUSE(__NR_setns, EPERM),
		REFUSE(__NR_clone3, ENOSYS),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, NEW_NS, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof(f) / sizeof(f[0]), f};

	if (contain(caps ? caps : docker_caps) < 0)
		return -1;
	/* as root with CAP_SYS_ADMIN still: no no_new_privs needed, as Docker sets none */
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

static int
contain(const int *kept)
{

	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("/dev/null", "/proc/keys", NULL, MS_BIND, NULL) < 0 ||
	    mount("tmpfs", "/sys/fs/cgroup", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k") < 0 ||
	    mount("tmpfs", "/dev/net", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=4k") < 0)
		return -1;
	for (int c = 0; c <= CAP_LAST_CAP; c++) {
		bool keep = false;
		for (size_t i = 0; kept[i] >= 0; i++)
			keep = keep || kept[i] == c;
		if (!keep && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0)
			return -1;
	}
	return 0; /* the exec leaves root the bounding set as its capabilities */
}

/*
 * SANDCELL_ENV_PASS for a test's broker: the variables its caller set, and
 * this machine's way to the internet (a proxy, the CA of a TLS-inspecting
 * one, package indexes) where the environment has them, as an operator
 * passes them on (--env-pass): kernels get no other of the broker's
 * variables. Made before the fork; the child sets it.
 */
static const char *
env_pass(char *buf, size_t len)
{
	static const char *const net[] = {
	    "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY", "https_proxy", "http_proxy",
	    "no_proxy", "all_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
	    "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "DENO_CERT", "DENO_TLS_CA_STORE", "PIP_CERT",
	    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_DEFAULT_TIMEOUT",
	    "PIP_DISABLE_PIP_VERSION_CHECK", "NPM_CONFIG_REGISTRY"};
	const char *given = getenv("SANDCELL_ENV_PASS");
	size_t n = snprintf(buf, len, "%s", given ? given : "");

	for (size_t i = 0; i < sizeof(net) / sizeof(net[0]) && n < len; i++)
		if (getenv(net[i]))
			n += snprintf(buf + n, len - n, "%s%s", n ? "," : "", net[i]);
	return buf;
}

int
broker_bounce(struct broker *b, const char *const *extra)
{
	kill(b->b_pid, SIGTERM);
	waitpid(b->b_pid, NULL, 0);
	b->b_pid = 0;
	return broker_restart(b, extra);
}

int
broker_restart(struct broker *b, const char *const *extra)
{
	const char *bin = getenv("SANDCELL_BIN");
	char exe[512], listen[64];
	const char *argv[64];
	int n = 0;
	bool want_default = true;

	snprintf(exe, sizeof(exe), "%s/sandcell-broker", bin ? bin : "bin");
	snprintf(listen, sizeof(listen), "%s:%d", b->b_host[0] ? b->b_host : "127.0.0.1", b->b_port);
	b->b_exit = -1;
	argv[n++] = exe;
	argv[n++] = "--listen";
	argv[n++] = listen;
	argv[n++] = "--run-dir";
	argv[n++] = b->b_run_dir;
	/* envd's fixed default port is not for many brokers at once: a test that
	 * wants envd names its own (envd_test.c; the last flag wins) */
	argv[n++] = "--envd-listen";
	argv[n++] = "none";
	for (; extra && *extra && n < 60; extra++) {
		if (!strcmp(*extra, "--no-default-context"))
			want_default = false;
		argv[n++] = *extra;
	}
	argv[n] = NULL;
	char pass[1024];
	env_pass(pass, sizeof(pass));
	fflush(NULL);
	if ((b->b_pid = fork()) == 0) {
		FILE *log = fopen(b->b_log, "a");
		setenv("SANDCELL_ENV_PASS", pass, 1);
		/* a test that dies (timeout, crash) takes its broker with it */
		prctl(PR_SET_PDEATHSIG, SIGINT);
		if (log)
			dup2(fileno(log), 2);
		if (b->b_listen_fd > 0) { /* as systemd passes sandcell.socket */
			char pid[16];
			if (b->b_listen_fd == 3 ? fcntl(3, F_SETFD, 0) < 0
						: dup2(b->b_listen_fd, 3) < 0)
				_exit(126);
			snprintf(pid, sizeof(pid), "%d", (int)getpid());
			setenv("LISTEN_FDS", "1", 1);
			setenv("LISTEN_PID", pid, 1);
		}
		if (b->b_contained && (b->b_docker ? broker_contain_docker(b->b_caps) : broker_contain()) < 0) {
			fprintf(stderr, "harness: contain the broker: %s\n", strerror(errno));
			_exit(126);
		}
		uid_t u = b->b_uid;
		if (u && (setgroups(0, NULL) < 0 || setresgid(u, u, u) < 0 ||
			  setresuid(u, u, u) < 0))
			_exit(126);
		if (b->b_uid) /* the uid change cleared it */
			prctl(PR_SET_PDEATHSIG, SIGINT);
		execv(exe, (char *const *)argv);
		_exit(127);
	}
	bool healthy = false;
	for (double t0 = ms_now(); !healthy && ms_since(t0) < 30000;) {
		struct resp r;
		healthy = http(b->b_url, "GET", want_default ? "/contexts" : "/health", NULL, &r,
			       2) == 0 &&
			  r.r_status == 200 && (!want_default || strstr(r.r_body, "\"id\""));
		resp_free(&r);
		if (healthy)
			break;
		int st;
		if (waitpid(b->b_pid, &st, WNOHANG) == b->b_pid) {
			b->b_exit = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			/* its last words here: a test that expected it keeps quiet
			 * about them, one that did not fails, and the log may go */
			char cmd[600];
			fprintf(stderr, "broker exited at start-up (status %d); log in %s:\n",
				b->b_exit, b->b_log);
			snprintf(cmd, sizeof(cmd), "tail -n 3 '%s' >&2", b->b_log);
			if (system(cmd) != 0)
				fprintf(stderr, "(could not show it)\n");
			b->b_pid = 0;
			return -1;
		}
		usleep(20000);
	}
	if (healthy && want_default) {
		/* the default context answers only once its kernel is up */
		json_t *l = run(b->b_url, NULL, "1");
		healthy = l && line_of(l, "end_of_execution", 0) && !line_of(l, "error", 0);
		json_decref(l);
	}
	if (!healthy) {
		fprintf(stderr, "broker on port %d never became healthy; log in %s\n", b->b_port,
			b->b_log);
		kill(b->b_pid, SIGKILL);
		waitpid(b->b_pid, NULL, 0);
		b->b_pid = 0;
		return -1;
	}
	return 0;
}

/* SIGKILLs every proxy a run dir lists (their kernels die with them), and its uplink. */
void
broker_kill_proxies(const char *run_dir)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd),
		 "for f in '%s'/ctx/*/state.json; do [ -f \"$f\" ] || continue; "
		 "pid=$(sed -n 's/.*\"pid\":\\([0-9]*\\).*/\\1/p' \"$f\"); "
		 "[ -n \"$pid\" ] && kill -9 \"$pid\" 2>/dev/null; done; "
		 "[ -f '%s'/uplink.pid ] && kill -9 $(cat '%s'/uplink.pid) 2>/dev/null; true",
		 run_dir, run_dir, run_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not clean up proxies of %s\n", run_dir);
}

/*
 * A sanitizer build reports into the log the broker and its proxies share:
 * any report there fails the run. Prints the report lines.
 */
static int
sanitizer_reports(const char *log)
{
	static const char *const marks[] = {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
					    "runtime error:", "UndefinedBehaviorSanitizer"};
	FILE *f = fopen(log, "r");
	char line[1024];
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
			if (strstr(line, marks[i])) {
				fprintf(stderr, "%s: %s", log, line);
				n++;
				break;
			}
	if (f)
		fclose(f);
	return n;
}

/* The broker's whole log so far, NUL-terminated ("" if unreadable); caller frees. */
char *
broker_log(const struct broker *b)
{
	FILE *f = fopen(b->b_log, "r");
	char *buf = NULL;
	size_t cap = 0, n = 0, got;

	do {
		if (n + 4096 + 1 > cap)
			buf = realloc(buf, cap = (cap + 4096) * 2);
		got = f ? fread(buf + n, 1, 4096, f) : 0;
		n += got;
	} while (got);
	if (f)
		fclose(f);
	buf[n] = '\0';
	return buf;
}

int
broker_stop(struct broker *b)
{
	int rc = 0;

	if (b->b_pid > 0) {
		kill(b->b_pid, SIGTERM);
		for (int i = 0; i < 100 && waitpid(b->b_pid, NULL, WNOHANG) != b->b_pid; i++)
			usleep(50000);
		kill(b->b_pid, SIGKILL);
		waitpid(b->b_pid, NULL, 0);
		b->b_pid = 0;
	}
	if (b->b_run_dir[0])
		broker_kill_proxies(b->b_run_dir); /* whatever a test left running */
	if (b->b_run_dir[0]) {
		char cmd[600];
		/* and the sandbox's default workspace beside it, its filesystem and image */
		snprintf(cmd, sizeof(cmd), "%s.work", b->b_run_dir);
		harness_unmount_below(cmd);
		snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s.work' '%s.work.img'", b->b_run_dir,
			 b->b_run_dir, b->b_run_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", b->b_run_dir);
		if (sanitizer_reports(b->b_log)) {
			fprintf(stderr, "sanitizer reports: the whole log is %s\n", b->b_log);
			rc = -1;
		} else if (!getenv("SANDCELL_KEEP_LOGS") && !b->b_test_log) {
			unlink(b->b_log);
		}
	}
	return rc;
}

const char *
test_url(void)
{
	return getenv("SANDCELL_TEST_URL");
}

const char *
test_run_dir(void)
{
	return getenv("SANDCELL_TEST_RUN_DIR");
}

pid_t
test_broker_pid(void)
{
	const char *p = getenv("SANDCELL_TEST_PID");

	return p ? atoi(p) : 0;
}

int
wait_until(bool (*cond)(void *arg), void *arg, long timeout_ms)
{
	double t0 = ms_now();

	for (;;) {
		if (cond(arg))
			return 0;
		if (ms_since(t0) >= timeout_ms)
			return -1;
		usleep(20000);
	}
}

json_t *
context_get(const char *base, const char *id)
{
	char path[160];
	struct resp r;
	json_t *j = NULL;

	snprintf(path, sizeof(path), "/contexts/%s", id);
	if (http(base, "GET", path, NULL, &r, 10) == 0 && r.r_status == 200)
		j = json_loads(r.r_body, 0, NULL);
	resp_free(&r);
	return j;
}

int
context_delete(const char *base, const char *id)
{
	char path[128];
	struct resp r;
	int rc;

	snprintf(path, sizeof(path), "/contexts/%s", id);
	if (http(base, "DELETE", path, NULL, &r, 30) < 0)
		return -1;
	rc = r.r_status == 200 ? 0 : -1;
	if (rc < 0)
		fprintf(stderr, "DELETE %s: %ld %s\n", path, r.r_status, r.r_body);
	resp_free(&r);
	return rc;
}

char *
context_host_cwd(const char *base, const char *id)
{
	json_t *j = context_get(base, id);
	const char *ws = json_string_value(json_object_get(json_object_get(j, "sandbox"), "workspace"));
	const char *cwd = json_string_value(json_object_get(j, "cwd"));
	size_t n = strlen("/home/user");
	char *dir = NULL;

	if (cwd && !ws)
		dir = strdup(cwd);
	else if (cwd && !strncmp(cwd, "/home/user", n) && (!cwd[n] || cwd[n] == '/') &&
		 asprintf(&dir, "%s%s", ws, cwd + n) < 0)
		dir = NULL;
	json_decref(j);
	return dir;
}

struct ctx_cond {
	const char *base, *id, *key, *str;
	long long min;
};

static bool
ctx_int_reached(void *arg)
{
	struct ctx_cond *cc = arg;
	json_t *j = context_get(cc->base, cc->id);
	bool ok = j && json_integer_value(json_object_get(j, cc->key)) >= cc->min;

	json_decref(j);
	return ok;
}

static bool
ctx_str_equal(void *arg)
{
	struct ctx_cond *cc = arg;
	json_t *j = context_get(cc->base, cc->id);
	const char *v = json_string_value(json_object_get(j, cc->key));
	bool ok = v && !strcmp(v, cc->str);

	json_decref(j);
	return ok;
}

int
wait_context_int(const char *base, const char *id, const char *key, long long min,
		 long timeout_ms)
{
	struct ctx_cond cc = {.base = base, .id = id, .key = key, .min = min};

	return wait_until(ctx_int_reached, &cc, timeout_ms);
}

int
wait_context_str(const char *base, const char *id, const char *key, const char *value,
		 long timeout_ms)
{
	struct ctx_cond cc = {.base = base, .id = id, .key = key, .str = value};

	return wait_until(ctx_str_equal, &cc, timeout_ms);
}

double
metric_value(const char *base, const char *series)
{
	struct resp r;
	double v = -1;
	size_t n = strlen(series);

	if (http(base, "GET", "/metrics", NULL, &r, 5) == 0 && r.r_status == 200) {
		for (const char *p = r.r_body; (p = strstr(p, series)); p += n)
			if ((p == r.r_body || p[-1] == '\n') && p[n] == ' ') {
				v = atof(p + n + 1);
				break;
			}
	}
	resp_free(&r);
	return v;
}

struct metric_cond {
	const char *base, *series;
	double min;
};

static bool
metric_reached(void *arg)
{
	struct metric_cond *mc = arg;

	return metric_value(mc->base, mc->series) >= mc->min;
}

int
wait_metric(const char *base, const char *series, double min, long timeout_ms)
{
	struct metric_cond mc = {base, series, min};

	return wait_until(metric_reached, &mc, timeout_ms);
}

static bool
pid_gone(void *arg)
{
	pid_t pid = *(pid_t *)arg;

	waitpid(pid, NULL, WNOHANG); /* reaps it if it is ours */
	return kill(pid, 0) < 0;
}

int
wait_pid_gone(pid_t pid, long timeout_ms)
{
	return wait_until(pid_gone, &pid, timeout_ms);
}

struct pid_exit {
	pid_t pe_pid;
	int *pe_status;
};

static bool
pid_exited(void *arg)
{
	struct pid_exit *pe = arg;

	return waitpid(pe->pe_pid, pe->pe_status, WNOHANG) == pe->pe_pid;
}

int
wait_pid_exit(pid_t pid, int *status, long timeout_ms)
{
	struct pid_exit pe = {pid, status};

	return wait_until(pid_exited, &pe, timeout_ms);
}

int
ctl_run(const char *run_dir, char **out, const char *fmt, ...)
{
	char args[4096], cmd[4600];
	const char *bin = getenv("SANDCELL_BIN");
	size_t cap = 1 << 16, len = 0, n;
	char *buf = malloc(cap);
	va_list ap;
	FILE *p;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s/sandcellctl --run-dir '%s' %s 2>&1", bin ? bin : "bin",
		 run_dir ? run_dir : test_run_dir(), args);
	p = popen(cmd, "r");
	while (p && (n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
		len += n;
		if (len + 1 == cap)
			buf = realloc(buf, cap *= 2);
	}
	buf[len] = '\0';
	st = p ? pclose(p) : -1;
	if (out)
		*out = buf;
	else
		free(buf);
	return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int
ctl_executions(const char *run_dir, const char *ctx, const char *state)
{
	char *out;
	int n = -1;
	json_t *a, *e;
	size_t i;

	if (ctl_run(run_dir, &out, "--json executions") == 0 &&
	    (a = json_loads(out, 0, NULL))) {
		n = 0;
		json_array_foreach(a, i, e)
		{
			const char *c = json_string_value(json_object_get(e, "context"));
			const char *st = json_string_value(json_object_get(e, "state"));
			n += c && st && !strcmp(c, ctx) && (!state || !strcmp(st, state));
		}
		json_decref(a);
	}
	free(out);
	return n;
}

struct pool_cond {
	const char *run_dir;
	int min;
};

static bool
pool_ready(void *arg)
{
	struct pool_cond *pc = arg;
	char *out;
	json_t *j = NULL;
	bool ok = false;

	if (ctl_run(pc->run_dir, &out, "--json status") == 0 && (j = json_loads(out, 0, NULL)))
		ok = json_integer_value(json_object_get(j, "warm_pool_ready")) >= pc->min;
	json_decref(j);
	free(out);
	return ok;
}

int
wait_pool_ready(const char *run_dir, int min, long timeout_ms)
{
	struct pool_cond pc = {run_dir, min};

	return wait_until(pool_ready, &pc, timeout_ms);
}

int
stat_fields(const char *path, int first, int n, long long *out)
{
	char buf[2048], *p;
	FILE *f;
	size_t len;

	if (first < 4 || !(f = fopen(path, "re")))
		return -1;
	len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = '\0';
	/* counted after the command name's closing parenthesis (field 2) */
	if (!(p = strrchr(buf, ')')))
		return -1;
	for (int i = 2; i < first && p; i++)
		p = strchr(p + 1, ' ');
	for (int i = 0; i < n; i++, p = strchr(p + 1, ' '))
		if (!p || sscanf(p + 1, "%lld", &out[i]) != 1)
			return -1;
	return 0;
}

long long
proc_stat_field(pid_t pid, int field)
{
	char path[64];
	long long v;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return stat_fields(path, field, 1, &v) < 0 ? -1 : v;
}

double
proc_started_s(pid_t pid)
{
	long long start = proc_stat_field(pid, 22);

	return start < 0 ? -1 : (double)start / sysconf(_SC_CLK_TCK);
}

double
boot_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The name and value of a stream's first error line ("(none)" and "" if none). */
const char *
error_name(json_t *l)
{
	json_t *e = line_of(l, "error", 0);

	return e ? json_string_value(json_object_get(e, "name")) : "(none)";
}

const char *
error_value(json_t *l)
{
	json_t *e = line_of(l, "error", 0);

	return e ? json_string_value(json_object_get(e, "value")) : "";
}

/* The first process whose argv (NUL-separated, n bytes) match() accepts, or 0. */
pid_t
pid_where(bool (*match)(const char *argv, size_t n, const void *arg), const void *arg)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	pid_t found = 0;

	while (d && !found && (de = readdir(d))) {
		char buf[4096];
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		size_t n = proc_cmdline(atoi(de->d_name), buf, sizeof(buf));
		if (n && match(buf, n, arg))
			found = atoi(de->d_name);
	}
	if (d)
		closedir(d);
	return found;
}

/* The template's: its argv names the script and the run dir. */
static bool
is_template_of(const char *argv, size_t n, const void *run_dir)
{
	char line[4096];

	memcpy(line, argv, n + 1);
	for (size_t i = 0; i < n; i++)
		if (!line[i])
			line[i] = ' ';
	return strstr(line, "sandcell_template.py") && strstr(line, run_dir);
}

/* The pid of the template serving run_dir, or 0. */
pid_t
template_pid(const char *run_dir)
{
	return pid_where(is_template_of, run_dir);
}

/* Whether one of the parts GET /ready's sandbox.missing lists names what, with a "how". */
bool
ready_lacks(json_t *missing, const char *what)
{
	size_t i;
	json_t *m;

	json_array_foreach(missing, i, m)
	{
		const char *w = json_string_value(json_object_get(m, "what"));
		if (w && strstr(w, what) && json_string_value(json_object_get(m, "how")))
			return true;
	}
	return false;
}
