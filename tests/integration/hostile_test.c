/*
 * hostile_test.c — let in only whom it should, and survive anything: access
 * token, limits, slowloris and idle connections, hostile HTTP bodies and
 * paths, garbage on the IPC sockets, a misbehaving kernel, kernels as an
 * unprivileged user. Throughout, other clients are served and every context
 * keeps its state.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <glob.h>
#include <errno.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>
#include <nng/protocol/pair1/pair.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../proto/proto.h"
#include "harness.h"

HARNESS_SHARED_BROKER("--max-body", "16777216", "--header-timeout", "2");

#define URL test_url()

/* Whether the server has closed fd (reads EOF within ms). */
static bool
closed_within(int fd, int ms)
{
	struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
	char buf[4096];

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return true;
		if (n < 0)
			return false;
	}
}

/* A private broker of one test, stopped even when an assertion fails. */
static struct broker priv;

static void
priv_stop(void)
{
	cr_expect_eq(broker_stop(&priv), 0, "sanitizer report in the broker log");
}

/* GET /health answers this status, polled until timeout_ms. */
struct health_cond {
	const char *base;
	long status;
};

static bool
health_is(void *arg)
{
	struct health_cond *hc = arg;
	struct resp r;
	bool ok = http(hc->base, "GET", "/health", NULL, &r, 5) == 0 && r.r_status == hc->status;

	resp_free(&r);
	return ok;
}

Test(hostile, access_token_guards_every_endpoint_but_the_probes, .fini = priv_stop, .timeout = 60)
{
	struct broker *b = &priv;
	char path[] = "/tmp/sandcell-token-XXXXXX";
	int fd = mkstemp(path);
	const char *token = "t0ken-that-must-not-leak";
	const char *args[] = {"--access-token-file", path, "--no-default-context", NULL};
	struct resp r;

	cr_assert(write(fd, token, strlen(token)) > 0);
	close(fd);
	cr_assert_eq(broker_start(b, args), 0);
	cr_assert_eq(http(b->b_url, "GET", "/health", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200);
	resp_free(&r);
	cr_assert_eq(http(b->b_url, "GET", "/ready", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200, "a readiness probe sends no token: %s", r.r_body);
	resp_free(&r);
	static const char *const guarded[][2] = {
		{"GET", "/contexts"}, {"POST", "/execute"}, {"GET", "/metrics"},
		{"POST", "/contexts"}, {"GET", "/languages"}, {"DELETE", "/contexts/x"},
		{"GET", "/openapi.json"},
	};
	for (size_t i = 0; i < sizeof(guarded) / sizeof(guarded[0]); i++) {
		cr_assert_eq(http(b->b_url, guarded[i][0], guarded[i][1], "{\"code\":\"1\"}", &r, 5), 0);
		cr_expect_eq(r.r_status, 401, "%s %s: %ld", guarded[i][0], guarded[i][1], r.r_status);
		cr_expect(strstr(r.r_body, "missing access token"), "%s", r.r_body);
		resp_free(&r);
	}
	/* wrong token, right token in either header */
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "curl -s -o /dev/null -w '%%{http_code}' -H 'X-Access-Token: wrong' %s/contexts",
		 b->b_url);
	FILE *p = popen(cmd, "r");
	char code[8] = "";
	cr_assert(fgets(code, sizeof(code), p));
	pclose(p);
	cr_assert_str_eq(code, "401");
	for (int h = 0; h < 2; h++) {
		snprintf(cmd, sizeof(cmd),
			 "curl -s -o /dev/null -w '%%{http_code}' -H '%s%s' %s/contexts",
			 h ? "Authorization: Bearer " : "X-Access-Token: ", token, b->b_url);
		p = popen(cmd, "r");
		cr_assert(fgets(code, sizeof(code), p));
		pclose(p);
		cr_assert_str_eq(code, "200", "header %d", h);
	}
	/* the token is not in the log, nor in the environment kernels inherit */
	snprintf(cmd, sizeof(cmd), "grep -c '%s' '%s'", token, b->b_log);
	p = popen(cmd, "r");
	cr_assert(fgets(code, sizeof(code), p));
	pclose(p);
	cr_assert_str_eq(code, "0\n");
	cr_assert_eq(broker_stop(b), 0);
	unlink(path);
}

Test(hostile, connection_limit_answers_503_and_recovers, .fini = priv_stop, .timeout = 60)
{
	struct broker *b = &priv;
	const char *args[] = {"--max-connections", "4", "--no-default-context", NULL};
	int fds[8];
	struct resp r;

	cr_assert_eq(broker_start(b, args), 0);
	for (int i = 0; i < 8; i++)
		cr_assert((fds[i] = tcp_connect(b->b_url)) >= 0);
	struct health_cond refused = {b->b_url, 503}, served = {b->b_url, 200};
	cr_assert_eq(wait_until(health_is, &refused, 5000), 0, "never over the limit");
	cr_assert_eq(http(b->b_url, "GET", "/health", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 503);
	cr_assert(strstr(r.r_body, "too many connections"), "%s", r.r_body);
	resp_free(&r);
	for (int i = 0; i < 8; i++)
		close(fds[i]);
	cr_assert_eq(wait_until(health_is, &served, 5000), 0, "never recovered");
	cr_assert_eq(broker_stop(b), 0);
}

Test(hostile, context_limit_answers_429, .fini = priv_stop, .timeout = 90)
{
	struct broker *b = &priv;
	const char *args[] = {"--max-contexts", "1", "--no-default-context", NULL};
	struct resp r;

	cr_assert_eq(broker_start(b, args), 0);
	char *one = context_new(b->b_url, "python", NULL);
	cr_assert_not_null(one);
	cr_assert_eq(http(b->b_url, "POST", "/contexts", "{}", &r, 30), 0);
	cr_assert_eq(r.r_status, 429);
	cr_assert(strstr(r.r_body, "too many contexts"), "%s", r.r_body);
	resp_free(&r);
	free(one);
	cr_assert_eq(broker_stop(b), 0);
}

Test(hostile, slowloris_and_silent_connections_are_cut_while_others_are_served,
     .timeout = 60)
{
	char *id = keeper_new(URL);
	int idle[500], slow = tcp_connect(URL);
	struct resp r;

	cr_assert(slow >= 0);
	for (int i = 0; i < 500; i++)
		cr_assert((idle[i] = tcp_connect(URL)) >= 0);
	/* while 500 never send and one trickles a header, others are served */
	double t0 = ms_now();
	for (int i = 0; i < 6; i++) {
		cr_assert(write(slow, "G", 1) == 1);
		cr_assert_eq(http(URL, "GET", "/health", NULL, &r, 5), 0);
		cr_assert_eq(r.r_status, 200);
		resp_free(&r);
		usleep(400000);
	}
	expect_stdout(URL, id, "print(6*7)", "42\n");
	/* the header timeout (2 s here) cut the trickler and the silent ones; one it
	 * missed stays open for the idle timeout (2 min) */
	cr_assert(closed_within(slow, 15000), "the slowloris connection is still open after %.0f ms",
		  ms_since(t0));
	int cut = 0;
	double t1 = ms_now();
	for (int i = 0; i < 500; i++) { /* 15 s for all of them */
		double left = 15000 - ms_since(t1);
		cut += closed_within(idle[i], left > 1 ? (int)left : 1);
		close(idle[i]);
	}
	cr_assert_eq(cut, 500, "only %d of 500 silent connections were closed", cut);
	close(slow);
	keeper_check(URL, id);
	free(id);
}

Test(hostile, headers_forever_get_431, .timeout = 30)
{
	int fd = tcp_connect(URL);
	char line[128], buf[256];

	cr_assert(fd >= 0);
	cr_assert(write(fd, "GET /health HTTP/1.1\r\nHost: x\r\n", 31) == 31);
	for (int i = 0; i < 5000; i++) {
		int n = snprintf(line, sizeof(line), "X-Forever-%d: %080d\r\n", i, i);
		if (write(fd, line, n) != n)
			break; /* the server closed: fine */
	}
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	cr_assert(n > 0);
	buf[n] = '\0';
	cr_assert(strstr(buf, " 431 "), "%s", buf);
	close(fd);
	struct resp r;
	cr_assert_eq(http(URL, "GET", "/health", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200);
	resp_free(&r);
}

/* Bodies and paths a hostile client sends: each a clear 4xx, nothing else moves. */
Test(hostile, hostile_bodies_and_paths, .timeout = 120)
{
	char *id = keeper_new(URL);
	struct resp r;
	static const struct {
		const char *name, *body;
		long status;
	} bodies[] = {
		{"invalid UTF-8", "{\"code\":\"\xff\xfe\"}", 400},
		{"NUL in code", "{\"code\":\"a\\u0000b\"}", 400},
		{"number for language", "{\"code\":\"1\",\"language\":5}", 400},
		{"number for context_id", "{\"code\":\"1\",\"context_id\":5}", 400},
		{"object for code", "{\"code\":{}}", 400},
		{"array for env_vars", "{\"code\":\"1\",\"env_vars\":[]}", 400},
		{"number in env", "{\"code\":\"1\",\"env_vars\":{\"A\":5}}", 400},
		{"duplicate keys", "{\"code\":\"1\",\"code\":\"1\"}", 400},
		{"context_id with ../", "{\"code\":\"1\",\"context_id\":\"../../etc\"}", 404},
		{"context_id with NUL", "{\"code\":\"1\",\"context_id\":\"a\\u0000b\"}", 400},
		{"negative timeout", "{\"code\":\"1\",\"timeout\":-1}", 400},
		{"huge number", "{\"code\":\"1\",\"timeout\":1e999}", 400},
		{"empty body", "", 400},
		{"just garbage", "\x01\x02\x03garbage", 400},
	};
	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		cr_assert_eq(http(URL, "POST", "/execute", bodies[i].body, &r, 10), 0);
		cr_expect_eq(r.r_status, bodies[i].status, "%s: %ld %s", bodies[i].name, r.r_status,
			     r.r_body);
		cr_expect(r.r_len > 1, "%s: the error names the problem", bodies[i].name);
		resp_free(&r);
	}
	/* deep nesting */
	size_t depth = 100000;
	char *deep = malloc(2 * depth + 32);
	strcpy(deep, "{\"code\":");
	memset(deep + 8, '[', depth);
	memset(deep + 8 + depth, ']', depth);
	strcpy(deep + 8 + 2 * depth, "}");
	cr_assert_eq(http(URL, "POST", "/execute", deep, &r, 10), 0);
	cr_assert_eq(r.r_status, 400, "deep nesting: %ld", r.r_status);
	resp_free(&r);
	free(deep);
	/* random paths */
	unsigned seed = 7;
	for (int i = 0; i < 200; i++) {
		char path[300] = "/";
		int n = 1 + rand_r(&seed) % 120;
		for (int j = 1; j < n; j++) {
			static const char set[] = "abc/._-%~0123456789contexts";
			path[j] = set[rand_r(&seed) % (sizeof(set) - 1)];
		}
		path[n] = '\0';
		if (i % 10 == 0)
			snprintf(path, sizeof(path), "/contexts/%%2e%%2e/%%00%d/restart", i);
		cr_assert_eq(http(URL, i % 2 ? "POST" : "GET", path, NULL, &r, 5), 0,
			     "path %s", path);
		cr_expect(r.r_status >= 400 && r.r_status < 500, "%s: %ld", path, r.r_status);
		resp_free(&r);
	}
	keeper_check(URL, id);
	free(id);
}

/*
 * Sends req on a new connection and reads until the server closes it or ms
 * pass; what came back in out. Returns the ms it took, or -1 on timeout.
 */
static double
raw_request(const char *base, const char *req, size_t reqlen, char *out, size_t outsz, int ms)
{
	int fd = tcp_connect(base);
	double t0 = ms_now();
	struct timeval tv = {0, 100000};
	size_t n = 0;

	cr_assert(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	cr_assert_eq(write(fd, req, reqlen), (ssize_t)reqlen);
	out[0] = '\0';
	while (ms_since(t0) < ms) {
		ssize_t k = read(fd, out + n, outsz - 1 - n);
		if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
			break;
		if (k > 0) {
			n += k;
			out[n] = '\0';
		}
	}
	double took = ms_since(t0);
	close(fd);
	return took < ms ? took : -1;
}

Test(hostile, head_health_is_200_with_no_body, .timeout = 30)
{
	static const char req[] = "HEAD /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
	char out[2048];

	cr_assert_geq(raw_request(URL, req, sizeof(req) - 1, out, sizeof(out), 5000), 0,
		      "not closed: %s", out);
	cr_assert(!strncmp(out, "HTTP/1.1 200", 12), "%s", out);
	char *end = strstr(out, "\r\n\r\n");
	cr_assert_not_null(end, "%s", out);
	cr_assert_str_eq(end + 4, "", "a body came with HEAD: %s", out);
}

/*
 * A request line that cannot be HTTP: a 400 that says so, and the connection
 * closed, not left to the header timeout (60 s on this broker).
 */
Test(hostile, garbage_request_lines_get_400_and_are_closed_at_once, .fini = priv_stop,
     .timeout = 150)
{
	const char *args[] = {"--no-default-context", "--pool", "0", "--header-timeout", "60",
			      NULL};
	static const struct {
		const char *name, *req;
		size_t len;
	} cases[] = {
		{"one word", "GARBAGE\r\n\r\n", 0},
		{"leading space", " / HTTP/1.1\r\n\r\n", 0},
		{"NUL bytes", "\0\0\0\r\n\r\n", 7},
		{"TLS hello", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11},
		{"control bytes", "\x01\x02\x03 zz\r\n\r\n", 0},
		{"no target", "GET\r\n\r\n", 0},
	};
	char out[2048];

	cr_assert_eq(broker_start(&priv, args), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = cases[i].len ? cases[i].len : strlen(cases[i].req);
		double took = raw_request(priv.b_url, cases[i].req, len, out, sizeof(out), 15000);
		cr_expect(took >= 0, "%s: still open after 15 s", cases[i].name);
		cr_expect(!strncmp(out, "HTTP/1.1 400", 12), "%s: answered '%.80s'", cases[i].name,
			  out);
	}
}

/* An id is one path segment: %2F does not split it, %00 does not cut it. */
Test(hostile, encoded_slash_or_nul_in_a_path_is_400, .timeout = 60)
{
	char *id = keeper_new(URL), path[256];
	struct resp r;

	static const char *const forms[] = {"/contexts/%s%%2frestart", "/contexts/%s%%2Frestart",
					    "/contexts/%s%%00/restart", "/contexts/%s%%00"};
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		snprintf(path, sizeof(path), forms[i], id);
		cr_assert_eq(http(URL, i < 3 ? "POST" : "DELETE", path, NULL, &r, 30), 0);
		cr_expect_eq(r.r_status, 400, "%s: %ld %s", path, r.r_status, r.r_body);
		cr_expect(strstr(r.r_body, "encoded"), "%s: %s", path, r.r_body);
		resp_free(&r);
	}
	/* %25 decodes once: "%2f" is then text of an id that does not exist */
	snprintf(path, sizeof(path), "/contexts/%s%%252f", id);
	cr_assert_eq(http(URL, "GET", path, NULL, &r, 10), 0);
	cr_expect_eq(r.r_status, 404, "%s: %ld %s", path, r.r_status, r.r_body);
	resp_free(&r);
	keeper_check(URL, id); /* neither restarted nor deleted */
	free(id);
}

/* What a 404 echoes of an id is bounded and printable, and a long one says so. */
Test(hostile, unknown_ids_are_echoed_safely, .timeout = 30)
{
	char path[700];
	struct resp r;

	snprintf(path, sizeof(path), "/contexts/");
	memset(path + 10, 'a', 600);
	path[610] = '\0';
	cr_assert_eq(http(URL, "GET", path, NULL, &r, 10), 0);
	cr_expect_eq(r.r_status, 404);
	cr_expect(strstr(r.r_body, "600 bytes") && !strstr(r.r_body, "'?'"), "%s", r.r_body);
	cr_expect_lt(r.r_len, 200, "%s", r.r_body);
	resp_free(&r);
	cr_assert_eq(http(URL, "GET", "/contexts/ab%01%FFcd", NULL, &r, 10), 0);
	cr_expect_eq(r.r_status, 404);
	cr_expect(strstr(r.r_body, "'ab\\x01\\xffcd'"), "%s", r.r_body);
	resp_free(&r);
}

/* Seconds in JSON have millisecond precision, not 46.978999999999999. */
Test(hostile, seconds_in_json_are_printed_to_the_millisecond, .timeout = 30)
{
	char *id = keeper_new(URL), path[128];
	struct resp r;

	snprintf(path, sizeof(path), "/contexts/%s", id);
	cr_assert_eq(http(URL, "GET", path, NULL, &r, 10), 0);
	const char *age = strstr(r.r_body, "\"age_seconds\":");
	cr_assert_not_null(age, "%s", r.r_body);
	age += strlen("\"age_seconds\":");
	size_t len = strspn(age, "0123456789.e+-");
	const char *dot = memchr(age, '.', len);
	cr_expect(!dot || age + len - dot - 1 <= 3, "age_seconds %.*s", (int)len, age);
	resp_free(&r);
	free(id);
}

Test(hostile, ten_megabytes_of_code_run, .timeout = 120)
{
	size_t n = 10u << 20;
	char *body = malloc(n + 64);
	long st;

	int k = sprintf(body, "{\"code\":\"x = '");
	memset(body + k, 'y', n);
	strcpy(body + k + n, "'\\nprint(len(x))\"}");
	json_t *l = execute(URL, body, &st, 60000);
	cr_assert_not_null(l, "status %ld", st);
	char *out = stdout_of(l);
	cr_assert_str_eq(out, "10485760\n");
	free(out);
	json_decref(l);
	free(body);
}

/* What every ctl client says of each reply it read (the broker's window). */
static void
ctl_ack(nng_socket s)
{
	struct msg ack;

	msg_init(&ack, CTL_ACK);
	msg_set_u64(&ack, F_COUNT, 1);
	cr_assert_eq(msg_send(s, &ack, 0), 0);
	msg_free(&ack);
}

Test(hostile, garbage_on_the_control_socket, .timeout = 30)
{
	nng_socket s;
	char url[256];
	unsigned seed = 3;

	snprintf(url, sizeof(url), "ipc://%s/ctl.sock", test_run_dir());
	cr_assert_eq(nng_pair1_open(&s), 0);
	cr_assert_eq(nng_dial(s, url, NULL, 0), 0);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 15000); /* no answer at all is the failure */
	for (int i = 0; i < 200; i++) {
		uint8_t junk[64];
		size_t n = 1 + rand_r(&seed) % sizeof(junk);
		for (size_t j = 0; j < n; j++)
			junk[j] = rand_r(&seed);
		if (i % 3 == 0)
			junk[0] = 0x92; /* looks like a frame */
		cr_assert_eq(nng_send(s, junk, n, 0), 0);
		struct msg r;
		cr_assert_eq(msg_recv(s, &r, 0), 0, "answer to garbage %d", i);
		cr_assert_eq(r.m_type, MSG_FAIL);
		msg_free(&r);
		ctl_ack(s);
		cr_assert_eq(msg_recv(s, &r, 0), 0);
		cr_assert_eq(r.m_type, MSG_END);
		msg_free(&r);
		ctl_ack(s);
	}
	/* a client that never reads its replies holds up no one else */
	nng_socket quiet;
	cr_assert_eq(nng_pair1_open(&quiet), 0);
	cr_assert_eq(nng_dial(quiet, url, NULL, 0), 0);
	for (int i = 0; i < 50; i++)
		cr_assert_eq(nng_send(quiet, "\x92garbage", 8, 0), 0);
	char *out;
	cr_assert_eq(ctl_run(NULL, &out, "status"), 0, "%s", out);
	free(out);
	nng_close(quiet);
	nng_close(s);
	struct resp rr;
	cr_assert_eq(http(URL, "GET", "/health", NULL, &rr, 5), 0);
	cr_assert_eq(rr.r_status, 200);
	resp_free(&rr);
}

/* Runs code on a proxy we are the broker of; returns the stream's NDJSON. */
static char *
exec_code(nng_socket s, uint64_t stream, const char *code)
{
	struct msg m, r;
	struct buf out = {0};

	msg_init(&m, MSG_EXECUTE);
	msg_set_u64(&m, F_STREAM, stream);
	msg_set_str(&m, F_CODE, code, strlen(code));
	cr_assert_eq(msg_send(s, &m, 0), 0);
	msg_free(&m);
	for (;;) {
		cr_assert_eq(msg_recv(s, &r, 0), 0, "no answer from the proxy");
		bool fin = r.m_type == MSG_OUTPUT && r.m_stream == stream && r.m_final;
		if (r.m_type == MSG_OUTPUT && r.m_stream == stream)
			buf_append(&out, r.m_data.s, r.m_data.len);
		msg_free(&r);
		if (fin)
			break;
	}
	buf_append(&out, "", 1);
	return out.b_data;
}

/* Connections the test's dialer has made to the proxy (on nng's thread). */
static atomic_int pipes_up;

static void
pipe_up(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)p, (void)ev, (void)arg;
	atomic_fetch_add(&pipes_up, 1);
}

static bool
reconnected(void *arg)
{
	(void)arg;
	return atomic_load(&pipes_up) >= 2;
}

/*
 * The proxy socket accepts one peer: a proxy started alone here, with the test
 * as its broker, gets truncated, oversized and garbage frames, and still runs
 * code with its state.
 */
Test(hostile, garbage_on_the_proxy_socket, .timeout = 90)
{
	char run_dir[] = "/tmp/sandcell-proxy-test.XXXXXX", url[256], exe[512], id[37];
	const char *bin = getenv("SANDCELL_BIN");
	nng_socket s;

	cr_assert_not_null(mkdtemp(run_dir));
	harness_track(run_dir); /* swept if this test times out */
	uuid_v4(id);
	snprintf(exe, sizeof(exe), "%s/sandcell-proxy", bin ? bin : "bin");
	/* its context, as a broker tells it (proto/spec.c), on its fd 3 */
	struct spec sp = {.sp_language = "python", .sp_cwd = "/tmp"};
	void *enc;
	size_t enclen;
	int specfd = memfd_create("spec", MFD_CLOEXEC);
	cr_assert_geq(specfd, 4);
	cr_assert_eq(spec_encode(&sp, &enc, &enclen), 0);
	cr_assert_eq(write(specfd, enc, enclen), (ssize_t)enclen);
	free(enc);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test that dies takes it along */
		dup2(specfd, 3);
		execl(exe, exe, "--run-dir", run_dir, "--id", id, "--spec-fd", "3", "--log-level",
		      "error", (char *)NULL);
		_exit(127);
	}
	close(specfd);
	snprintf(url, sizeof(url), "ipc://%s/ctx/%s/proxy.sock", run_dir, id);
	cr_assert_eq(nng_pair0_open(&s), 0);
	nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, PROTO_MAX_FRAME);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 30000);
	nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 30000); /* a proxy that stops reading fails it */
	cr_assert_eq(nng_pipe_notify(s, NNG_PIPE_EV_ADD_POST, pipe_up, NULL), 0);
	nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 10);
	cr_assert_eq(nng_dial(s, url, NULL, NNG_FLAG_NONBLOCK), 0);

	char *o = exec_code(s, 1, "kept = 'intact'");
	free(o);

	unsigned seed = 11;
	void *valid;
	size_t vlen;
	struct msg v;
	msg_init(&v, MSG_EXECUTE);
	msg_set_u64(&v, F_STREAM, 99);
	msg_set_str(&v, F_CODE, "print('never')", 14);
	msg_encode(&v, &valid, &vlen);
	msg_free(&v);
	for (size_t cut = 0; cut < vlen; cut++) /* every truncation */
		cr_assert_eq(nng_send(s, valid, cut ? cut : 1, 0), 0);
	free(valid);
	for (int i = 0; i < 300; i++) { /* garbage */
		uint8_t junk[128];
		size_t n = 1 + rand_r(&seed) % sizeof(junk);
		for (size_t j = 0; j < n; j++)
			junk[j] = rand_r(&seed);
		cr_assert_eq(nng_send(s, junk, n, 0), 0);
	}
	/* a frame claiming a 4 GB map, and one over the frame limit */
	uint8_t liar[] = {0x92, MSG_EXECUTE, 0xdf, 0xff, 0xff, 0xff, 0xff};
	cr_assert_eq(nng_send(s, liar, sizeof(liar), 0), 0);
	size_t big = PROTO_MAX_FRAME + 1024;
	uint8_t *huge = calloc(1, big);
	huge[0] = 0x92;
	nng_send(s, huge, big, 0); /* the proxy drops the connection: the dialer comes back */
	free(huge);
	/* on the new connection: one sent before the drop would go down with the old */
	cr_assert_eq(wait_until(reconnected, NULL, 10000), 0, "the dialer never came back");

	o = exec_code(s, 2, "print(kept)");
	cr_assert(strstr(o, "\"text\":\"intact\\n\""), "%s", o);
	cr_assert_null(strstr(o, "never"));
	free(o);
	nng_close(s);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", run_dir);
	cr_assert_eq(system(cmd), 0);
}

Test(hostile, misbehaving_kernel_messages_are_dropped, .fini = priv_stop, .timeout = 120)
{
	struct broker *b = &priv;
	const char *args[] = {"--no-default-context", NULL};
	char path[4096], cwd[2048];

	cr_assert_not_null(getcwd(cwd, sizeof(cwd))); /* tests run from the repo root */
	snprintf(path, sizeof(path), "%s/tests/integration/kernels:%s", cwd,
		 getenv("JUPYTER_PATH") ? getenv("JUPYTER_PATH") : "");
	setenv("JUPYTER_PATH", path, 1);
	cr_assert_eq(broker_start(b, args), 0);
	char *evil = context_new(b->b_url, "evil", NULL), *good = keeper_new(b->b_url);
	cr_assert_not_null(evil);

	json_t *l = run(b->b_url, evil, "hello");
	char *out = stdout_of(l);
	cr_assert_str_eq(out, "GOOD hello\n", "only the genuine output passes");
	cr_assert_str_eq(result_text(l), "hello");
	free(out);
	json_decref(l);

	/* a frame over the size limit: skipped, the unit says so and ends, nothing crashes */
	l = run(b->b_url, evil, "HUGE");
	cr_assert_not_null(line_of(l, "end_of_execution", 0));
	cr_assert_str_eq(error_name(l), "OutputLost");
	json_decref(l);
	expect_stdout(b->b_url, evil, "after", "GOOD after\n");
	keeper_check(b->b_url, good);
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "grep -c 'bad signature\\|another session\\|dropped' '%s'", b->b_log);
	FILE *p = popen(cmd, "r");
	char n[16] = "";
	cr_assert(fgets(n, sizeof(n), p));
	pclose(p);
	cr_assert(atoi(n) >= 6, "each dropped message has a log line (%s)", n);
	free(evil);
	free(good);
	cr_assert_eq(broker_stop(b), 0);
}

/*
 * Code in a context writes junk to its proxy as fast as it can, in messages
 * just under the size limit, on the control connection (from a thread) and
 * the shell one: the proxy reads a message only when its loop asks for one,
 * so it holds at most about one, and the context goes on. (Through libzmq,
 * which read everything into its queues, a proxy grew by 1.5 GB in 10 s.)
 * Each socket gets 12 messages, however fast the proxy takes them: what it
 * has not taken waits in the kernel's own queues, and a flood bounded by
 * time alone grew the kernel past its default memory limit (a quarter of
 * the machine) under ASan's slower proxy, which killed it before it said
 * its counts.
 */
static const char flood_code[] =
    "import threading, time\n"
    "k = get_ipython().kernel\n"
    "sid = k.get_parent()['header']['session'].encode()\n"
    "junk = b'x' * (60 << 20)\n"
    "sent = [0, 0]\n"
    "def flood(sock, i):\n"
    "    while sent[i] < 12:\n"
    "        sock.send_multipart([sid, junk]); sent[i] += 1\n"
    "t = threading.Thread(target=flood, args=(k.control_stream.socket, 0))\n"
    "print('flooding', flush=True)\n"
    "t.start(); flood(k.shell_stream.socket, 1); t.join()\n"
    "print(sent[0], sent[1])\n";

Test(hostile, a_kernel_flooding_its_proxy_cannot_grow_it, .timeout = 180)
{
	char *id = context_new(URL, "python", NULL), *keep = keeper_new(URL);
	pid_t proxy = context_pid(URL, id, "proxy_pid");
	struct bg flood = {.ctx = id, .code = flood_code, .timeout_ms = 120000};
	long most = 0, before = proc_rss_kb(proxy);
	int control = 0, shell = 0;

	cr_assert_gt(proxy, 0);
	bg_start(&flood);
	cr_assert_eq(bg_wait_stdout(&flood, 30000), 0, "the flood did not start");
	/* sampled every 20 ms until the code prints its counts, its last line */
	for (double t0 = ms_now(); __atomic_load_n(&flood.stdout_seen, __ATOMIC_SEQ_CST) < 2 &&
				   !__atomic_load_n(&flood.done, __ATOMIC_SEQ_CST) &&
				   ms_since(t0) < 90000;) {
		long kb = proc_rss_kb(proxy);
		if (kb > most)
			most = kb;
		usleep(20000);
	}
	bg_join(&flood);
	char *out = stdout_of(flood.lines);
	cr_assert_eq(sscanf(out, "flooding\n%d %d", &control, &shell), 2, "%s", out);
	cr_assert_geq(control + shell, 10, "hardly a flood: %d and %d messages of 60 MB", control,
		      shell);
#ifndef __SANITIZE_ADDRESS__ /* ASan's quarantine keeps freed memory: RSS says nothing */
	cr_assert_lt(most, before + (192L << 10),
		     "the proxy grew from %ld to %ld KiB under a flood of %d + %d messages of 60 MB",
		     before, most, control, shell);
#else
	(void)before;
	(void)most;
#endif
	free(out);
	json_decref(flood.lines);
	out = run_stdout(URL, id, "print('after')");
	cr_assert_str_eq(out, "after\n", "the flooded context goes on");
	free(out);
	keeper_check(URL, keep);
	cr_assert_eq(context_pid(URL, id, "proxy_pid"), proxy, "the proxy was replaced");
	free(id);
	free(keep);
}

/*
 * Code in a context sends its proxy junk, small and fast: every message is
 * dropped, but the log says so only LOG_LIMIT_BURST times a minute (the
 * count of the rest follows once the minute is over), so a kernel cannot
 * fill the disk or the journal through its proxy.
 */
Test(hostile, a_kernel_sending_junk_cannot_fill_the_log, .fini = priv_stop, .timeout = 120)
{
	const char *args[] = {"--no-default-context", NULL};
	static const char junk_code[] =
	    "k = get_ipython().kernel\n"
	    "sid = k.get_parent()['header']['session'].encode()\n"
	    "for i in range(5000):\n"
	    "    k.shell_stream.socket.send_multipart([sid, b'junk'])\n"
	    "print('sent')\n";
	char cmd[512], n[16] = "";

	cr_assert_eq(broker_start(&priv, args), 0);
	char *id = context_new(priv.b_url, "python", NULL);
	cr_assert_not_null(id);
	char *out = run_stdout(priv.b_url, id, junk_code);
	cr_assert_str_eq(out, "sent\n");
	free(out);
	out = run_stdout(priv.b_url, id, "print('after')"); /* the junk was read before this */
	cr_assert_str_eq(out, "after\n", "the context goes on");
	free(out);
	snprintf(cmd, sizeof(cmd), "grep -c 'message from kernel dropped' '%s'", priv.b_log);
	FILE *p = popen(cmd, "r");
	cr_assert(fgets(n, sizeof(n), p));
	pclose(p);
	cr_assert_gt(atoi(n), 0, "the drops are logged");
	cr_assert_leq(atoi(n), LOG_LIMIT_BURST, "5000 junk messages, %d log lines", atoi(n));
	free(id);
	cr_assert_eq(broker_stop(&priv), 0);
}

/* The broker's open fds fall to at most limit before ms pass; the last count. */
static int
fds_settle(pid_t pid, int limit, int ms)
{
	double t0 = ms_now();
	int n;

	while ((n = proc_fd_count(pid)) > limit && ms_since(t0) < ms)
		usleep(50000);
	return n;
}

/* Each context costs the broker some fds while it lives, none after. */
Test(hostile, create_delete_cycles_leave_the_fd_count_flat, .fini = priv_stop, .timeout = 180)
{
	const char *args[] = {"--no-default-context", "--pool", "0", NULL};
	struct resp r;
	char path[128];

	cr_assert_eq(broker_start(&priv, args), 0);
	int base = proc_fd_count(priv.b_pid);
	cr_assert(base > 0);
	for (int i = 0; i < 10; i++) {
		char *id = context_new(priv.b_url, "python", NULL);
		cr_assert_not_null(id, "cycle %d: create", i);
		snprintf(path, sizeof(path), "/contexts/%s", id);
		cr_assert_eq(http(priv.b_url, "DELETE", path, NULL, &r, 30), 0);
		cr_assert_eq(r.r_status, 200, "cycle %d: delete: %s", i, r.r_body);
		resp_free(&r);
		free(id);
	}
	/* a deleted context is freed once its proxy has exited */
	int n = fds_settle(priv.b_pid, base + 4, 20000);
	cr_assert_leq(n, base + 4, "10 create/delete cycles took the broker from %d to %d fds",
		      base, n);
}

/* A broker given args must exit with status 2 and a log line holding want. */
static void
refused_at_start(const char *const *args, const char *want)
{
	cr_assert_eq(broker_start(&priv, args), -1, "the broker started");
	char *log = broker_log(&priv);
	cr_expect_eq(priv.b_exit, 2, "exit status %d; log: %s", priv.b_exit, log);
	cr_expect(strstr(log, want), "the log does not say '%s': %s", want, log);
	free(log);
	cr_assert_eq(broker_stop(&priv), 0, "a sanitizer report in its log");
}

/* Every kernel would fail to start there (status 126): the broker refuses at once. */
Test(hostile, a_cwd_kernels_cannot_enter_is_refused_at_start, .fini = priv_stop,
     .timeout = 60)
{
	const char *none[] = {"--no-default-context", "--cwd", "/nonexistent-sandcell", NULL};

	refused_at_start(none, "--cwd /nonexistent-sandcell: No such file or directory");
}

/* ... and one the kernels' user cannot enter, though it exists. */
Test(hostile, a_cwd_the_kernel_user_cannot_enter_is_refused_at_start, .fini = priv_stop,
     .timeout = 60)
{
	char closed[] = "/tmp/sandcell-closed-XXXXXX", want[128];

	if (geteuid() != 0 || !getpwnam("nobody"))
		cr_skip_test("needs root (a directory root alone enters) and a 'nobody' user");
	cr_assert_not_null(mkdtemp(closed)); /* 0700, root's */
	const char *user[] = {"--no-default-context", "--kernel-user", "nobody", "--cwd", closed,
			      NULL};
	snprintf(want, sizeof(want), "--cwd %s: user nobody cannot enter it", closed);
	refused_at_start(user, want);
	rmdir(closed);
}

/* The default cwd ($HOME when there is no /home/user) is checked as a given one is. */
Test(hostile, a_default_cwd_the_kernel_user_cannot_enter_is_refused_at_start,
     .fini = priv_stop, .timeout = 60)
{
	char closed[] = "/tmp/sandcell-closed-XXXXXX", want[128];
	struct stat st;

	if (geteuid() != 0 || !getpwnam("nobody"))
		cr_skip_test("needs root (a directory root alone enters) and a 'nobody' user");
	if (stat("/home/user", &st) == 0)
		cr_skip_test("/home/user exists here: it is the default cwd, not $HOME");
	cr_assert_not_null(mkdtemp(closed)); /* 0700, root's */
	setenv("HOME", closed, 1);
	/* the sandbox's default is its own workspace; without it, $HOME */
	const char *dflt[] = {"--no-default-context", "--no-sandbox", "--kernel-user", "nobody",
			      NULL};
	snprintf(want, sizeof(want), "default cwd %s: user nobody cannot enter it", closed);
	refused_at_start(dflt, want);
	rmdir(closed);
}

/* A default cwd gone since start is not blamed on the request: the server's, a 500. */
Test(hostile, a_default_cwd_gone_is_named_as_the_servers, .fini = priv_stop, .timeout = 60)
{
	char dflt[] = "/tmp/sandcell-cwd-XXXXXX";
	/* a plain directory (no filesystem of its own): the test removes it under the broker */
	const char *args[] = {"--no-default-context", "--pool", "0", "--workspace-size", "0",
			      "--cwd", dflt, NULL};
	struct resp r;

	cr_assert_not_null(mkdtemp(dflt));
	cr_assert_eq(chmod(dflt, 0755), 0);
	cr_assert_eq(broker_start(&priv, args), 0);
	cr_assert_eq(rmdir(dflt), 0);
	cr_assert_eq(http(priv.b_url, "POST", "/contexts", "{}", &r, 60), 0);
	cr_expect_eq(r.r_status, 500, "%ld %s", r.r_status, r.r_body);
	cr_expect(strstr(r.r_body, "server's workspace") && strstr(r.r_body, dflt), "%s",
		  r.r_body);
	resp_free(&r);
}

/* A request's cwd its kernel cannot enter is named, a 400 at once. */
Test(hostile, a_request_cwd_the_kernel_cannot_enter_is_named, .fini = priv_stop,
     .timeout = 60)
{
	char dflt[] = "/tmp/sandcell-cwd-XXXXXX", closed[64];
	const char *args[] = {"--no-default-context", "--pool", "0", "--workspace-size", "0",
			      "--cwd", dflt, "--kernel-user", "nobody", NULL};
	struct resp r;

	if (geteuid() != 0 || !getpwnam("nobody"))
		cr_skip_test("needs root (a directory root alone enters) and a 'nobody' user");
	cr_assert_not_null(mkdtemp(dflt));
	cr_assert_eq(chmod(dflt, 0755), 0);
	cr_assert_eq(broker_start(&priv, args), 0);
	/* a directory of the workspace (the box's /home/user) its kernel cannot enter */
	snprintf(closed, sizeof(closed), "%s/closed", dflt);
	cr_assert_eq(mkdir(closed, 0700), 0);
	cr_assert_eq(http(priv.b_url, "POST", "/contexts", "{\"cwd\":\"/home/user/closed\"}",
			  &r, 60), 0);
	cr_expect_eq(r.r_status, 400, "%ld %s", r.r_status, r.r_body);
	cr_expect(strstr(r.r_body, "'/home/user/closed'") &&
		  strstr(r.r_body, "user nobody cannot enter"),
		  "%s", r.r_body);
	resp_free(&r);
	rmdir(closed);
	rmdir(dflt);
}

static char full_dir[] = "/tmp/sandcell-full-XXXXXX";

static void
full_fini(void)
{
	char run[64];

	cr_assert_eq(broker_stop(&priv), 0, "a sanitizer report in its log");
	snprintf(run, sizeof(run), "%s/run", full_dir);
	broker_kill_proxies(run);
	umount2(full_dir, MNT_DETACH);
	rmdir(full_dir);
}

/* No space left in the run dir: the log, the HTTP answer and the stream say so. */
Test(hostile, a_full_run_dir_is_reported_as_such, .fini = full_fini, .timeout = 60)
{
	char run[64], *fill;
	struct resp r;
	long st;

	if (geteuid() != 0)
		cr_skip_test("needs root to mount a tmpfs");
	cr_assert_not_null(mkdtemp(full_dir));
	if (mount("tmpfs", full_dir, "tmpfs", 0, "size=1m,mode=0700") < 0)
		cr_skip_test("cannot mount a tmpfs: %s", strerror(errno));
	snprintf(run, sizeof(run), "%s/run", full_dir);
	const char *args[] = {"--no-default-context", "--pool", "0", "--run-dir", run, NULL};
	cr_assert_eq(broker_start(&priv, args), 0);
	fill = malloc(strlen(full_dir) + 8);
	sprintf(fill, "%s/fill", full_dir);
	int fd = open(fill, O_WRONLY | O_CREAT, 0600);
	static char block[4096];
	while (write(fd, block, sizeof(block)) > 0)
		;
	cr_assert_eq(errno, ENOSPC);
	close(fd);
	free(fill);

	cr_assert_eq(http(priv.b_url, "POST", "/contexts", "{}", &r, 60), 0);
	cr_expect_eq(r.r_status, 500, "%ld %s", r.r_status, r.r_body);
	cr_expect(strstr(r.r_body, "No space left on device"), "%s", r.r_body);
	resp_free(&r);
	json_t *l = execute_code(priv.b_url, NULL, "print(1)", NULL, 60000, &st);
	cr_assert_not_null(l, "status %ld", st);
	json_t *err = line_of(l, "error", 0);
	cr_assert_not_null(err);
	const char *v = json_string_value(json_object_get(err, "value"));
	cr_expect(v && strstr(v, "No space left on device"), "%s: %s",
		  json_string_value(json_object_get(err, "name")), v);
	json_decref(l);
	char *log = broker_log(&priv);
	cr_expect(strstr(log, "No space left on device"), "%s", log);
	cr_expect(!strstr(log, "Input/output error"), "%s", log);
	free(log);
}

/* A port in use: the second broker stops at once and says which address failed. */
Test(hostile, a_second_broker_on_the_same_port_says_which_address_failed, .fini = priv_stop,
     .timeout = 30)
{
	char listen[64], want[128];
	const char *port = strrchr(URL, ':') + 1;

	snprintf(listen, sizeof(listen), "127.0.0.1:%s", port);
	const char *args[] = {"--no-default-context", "--listen", listen, NULL};
	cr_assert_eq(broker_start(&priv, args), -1, "a second broker started on %s", listen);
	char *log = broker_log(&priv);
	cr_expect_neq(priv.b_exit, 0);
	snprintf(want, sizeof(want), "listen on %s: Address already in use", listen);
	cr_expect(strstr(log, want), "the log does not say '%s': %s", want, log);
	free(log);
}

Test(hostile, kernels_run_as_an_unprivileged_user, .fini = priv_stop, .timeout = 90)
{
	struct broker *b = &priv;
	const char *args[] = {"--no-default-context", "--kernel-user", "nobody", NULL};
	struct passwd *pw = getpwnam("nobody");

	if (geteuid() != 0 || !pw)
		cr_skip_test("needs root and a 'nobody' user");
	cr_assert_eq(broker_start(b, args), 0);
	char *id = context_new(b->b_url, "python", NULL);
	cr_assert_not_null(id);
	char code[1024];
	/* its HOME (the workspace) its to write; the run dir not in its reach */
	snprintf(code, sizeof(code),
		 "import os\nprint(os.getuid(), os.access(os.environ['HOME'], os.W_OK))\n"
		 "try:\n    os.listdir('%s')\n    print('run dir readable')\n"
		 "except OSError:\n    print('run dir closed')",
		 b->b_run_dir);
	json_t *l = run(b->b_url, id, code);
	char *out = stdout_of(l), want[64];
	snprintf(want, sizeof(want), "%u True\nrun dir closed\n", pw->pw_uid);
	cr_assert_str_eq(out, want);
	free(out);
	json_decref(l);
	struct stat st;
	cr_assert_eq(stat(b->b_run_dir, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0700, "run dir mode %o", st.st_mode & 0777);
	free(id);
	cr_assert_eq(broker_stop(b), 0);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s.kernels'", b->b_run_dir);
	cr_assert_eq(system(cmd), 0);
}

Test(hostile, ipc_sockets_are_private, .timeout = 30)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), "%s/ctl.sock", test_run_dir());
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600, "ctl.sock mode %o", st.st_mode & 0777);
	cr_assert_eq(stat(test_run_dir(), &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0700);
	/* the shared broker's own proxies (it has a default context): there is one */
	glob_t g;
	snprintf(path, sizeof(path), "%s/ctx/*/proxy.sock", test_run_dir());
	cr_assert_eq(glob(path, 0, NULL, &g), 0, "no proxy socket under %s", test_run_dir());
	for (size_t i = 0; i < g.gl_pathc; i++) {
		cr_assert_eq(stat(g.gl_pathv[i], &st), 0);
		cr_assert_eq(st.st_mode & 0777, 0600, "%s mode %o", g.gl_pathv[i],
			     st.st_mode & 0777);
	}
	globfree(&g);
}

/*
 * A proxy serves one broker at a time: a second peer on its socket (here one
 * that speaks the link's handshake) is closed at once, and the context the
 * broker holds through that socket goes on with its state.
 */
Test(hostile, a_second_peer_on_a_proxy_socket_is_refused_and_the_context_goes_on,
     .timeout = 60)
{
	static const char hello[8] = {0, 'S', 'P', 0, 0, 0x10, 0, 0};
	char *id = keeper_new(URL), path[512], cmd[4096], *slot = NULL;
	pid_t proxy = context_pid(URL, id, "proxy_pid");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	/*
	 * The keeper's proxy only: the broker is attached to it (the keeper just
	 * ran). Another proxy of the shared broker may be starting, with nobody
	 * attached yet, and would take us as its first peer. Its socket is
	 * RUN/ctx/SLOT/proxy.sock, SLOT its --id.
	 */
	cr_assert_gt(proxy, 0);
	size_t n = proc_cmdline(proxy, cmd, sizeof(cmd));
	for (char *a = cmd; a < cmd + n; a += strlen(a) + 1)
		if (!strcmp(a, "--id") && a + strlen(a) + 1 < cmd + n)
			slot = a + strlen(a) + 1;
	cr_assert_not_null(slot, "no --id in proxy %d's command line", (int)proxy);
	snprintf(path, sizeof(path), "%s/ctx/%s/proxy.sock", test_run_dir(), slot);
	cr_assert_lt(strlen(path), sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s: %s", path,
		     strerror(errno));
	/* closed before or after our handshake: both are a refusal */
	ssize_t sent = send(fd, hello, sizeof(hello), MSG_NOSIGNAL);
	cr_assert(sent == (ssize_t)sizeof(hello) || errno == EPIPE || errno == ECONNRESET,
		  "%s: %s", path, strerror(errno));
	cr_assert(closed_within(fd, 5000), "%s kept a second peer", path);
	close(fd);
	keeper_check(URL, id);
	free(id);
}
