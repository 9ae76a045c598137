/*
 * survive_test.c — work and state outlive what is not a fault: an execution
 * longer than the heartbeat timeout in a kernel that does not answer
 * heartbeats while busy (IRkernel), an interrupt a few ms after the start, a
 * kernel asking for input. The shared broker uses a short heartbeat timeout
 * so that the cases that used to kill a kernel after 20 s take seconds.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"

HARNESS_SHARED_BROKER("--no-default-context", "--pool", "0", "--heartbeat-timeout", "3");

#define URL test_url()

/* An R context holding x = 42; its kernel's pid in *kpid. */
static char *
r_context(pid_t *kpid)
{
	char *id = context_new(URL, "r", "/tmp");

	cr_assert_not_null(id, "no R context");
	json_decref(run(URL, id, "x <- 42"));
	*kpid = context_pid(URL, id, "kernel_pid");
	cr_assert(*kpid > 0);
	return id;
}

/* x is still 42 and the kernel is the same process: nothing was lost. */
static void
expect_state_kept(const char *id, pid_t kpid, const char *after)
{
	json_t *l = run(URL, id, "cat(x, '\\n', sep = '')");
	char *out = stdout_of(l);

	cr_expect_str_eq(out, "42\n", "%s: state lost (error %s: %s)", after, error_name(l),
			 error_value(l));
	cr_expect_eq(context_pid(URL, id, "kernel_pid"), kpid, "%s: the kernel was replaced",
		     after);
	free(out);
	json_decref(l);
}

/* Reads a raw response to its end (at most 20 s); caller frees. */
static char *
raw_read_all(int fd)
{
	struct timeval tv = {.tv_sec = 20};
	size_t n = 0, cap = 1 << 16;
	char *p = malloc(cap);
	ssize_t r;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while ((r = read(fd, p + n, cap - n - 1)) > 0)
		if ((n += r) + 1 == cap)
			p = realloc(p, cap *= 2);
	p[n] = '\0';
	close(fd);
	return p;
}

Test(survive, r_execution_longer_than_the_heartbeat_timeout_keeps_its_state, .timeout = 90)
{
	pid_t kpid;
	char *id = r_context(&kpid);

	/* 5 s asleep, then 5 s of busy loop: IRkernel answers no heartbeat meanwhile */
	json_t *l = run(URL, id, "Sys.sleep(5); x");
	cr_assert_eq(count_of(l, "error"), 0, "%s: %s", error_name(l), error_value(l));
	cr_assert_str_eq(result_text(l), "[1] 42");
	json_decref(l);
	l = run(URL, id, "t <- Sys.time(); while (Sys.time() - t < 5) {}; cat('done\\n')");
	cr_assert_eq(count_of(l, "error"), 0, "%s: %s", error_name(l), error_value(l));
	char *out = stdout_of(l);
	cr_assert_str_eq(out, "done\n");
	free(out);
	json_decref(l);
	/* idle again past the timeout: it answers heartbeats, nothing is replaced */
	sleep(4);
	expect_state_kept(id, kpid, "idle after a long execution");
	free(id);
}

/*
 * IRkernel's readline() ignores allow_stdin: it gets an empty line at once.
 * Unanswered, it blocks until the client gives up (60 s).
 */
Test(survive, r_readline_gets_an_empty_line_at_once, .timeout = 90)
{
	pid_t kpid;
	char *id = r_context(&kpid);
	double t0 = ms_now();
	json_t *l = run(URL, id, "a <- readline('name? '); cat('[', a, ']\\n', sep = '')");
	char *out = stdout_of(l);

	cr_assert_str_eq(out, "[]\n", "error %s: %s", error_name(l), error_value(l));
	cr_assert(ms_since(t0) < 15000, "readline took %.0f ms", ms_since(t0));
	free(out);
	json_decref(l);
	expect_state_kept(id, kpid, "readline");
	free(id);
}

/*
 * A SIGINT that reaches IRkernel between execute_input and its evaluation
 * (or while it replies) is handled by no one, and a non-interactive R halts.
 * Clients gone, and interrupts sent, 0-10 ms after the start keep the kernel.
 */
Test(survive, r_interrupt_within_ms_of_the_start_keeps_the_kernel, .timeout = 120)
{
	pid_t kpid;
	char *id = r_context(&kpid);
	const int delays_us[] = {0, 2000, 4000, 6000, 8000, 10000};
	char what[64];

	for (size_t i = 0; i < sizeof(delays_us) / sizeof(delays_us[0]); i++) {
		int fd = raw_execute(URL, id, "Sys.sleep(5)", "1.1", "Connection: close\r\n");
		cr_assert_geq(fd, 0);
		usleep(delays_us[i]);
		close(fd); /* the client is gone: the proxy interrupts */
		snprintf(what, sizeof(what), "client gone after %d ms", delays_us[i] / 1000);
		expect_state_kept(id, kpid, what);
	}
	for (size_t i = 0; i < sizeof(delays_us) / sizeof(delays_us[0]); i++) {
		int fd = raw_execute(URL, id, "Sys.sleep(5)", "1.1", "Connection: close\r\n");
		cr_assert_geq(fd, 0);
		usleep(delays_us[i]);
		cr_expect_eq(context_post(URL, id, "interrupt", 10), 200);
		char *resp = raw_read_all(fd);
		snprintf(what, sizeof(what), "interrupt after %d ms", delays_us[i] / 1000);
		cr_expect(strstr(resp, "{\"type\":\"end_of_execution\"}"), "%s: %s", what, resp);
		cr_expect(!strstr(resp, "KernelDied"), "%s: %s", what, resp);
		free(resp);
		expect_state_kept(id, kpid, what);
	}
	free(id);
}

/* The heartbeat still finds a kernel that cannot run: stopped, idle or busy. */
Test(survive, stopped_r_kernel_is_replaced_idle_or_busy, .timeout = 90)
{
	pid_t kpid;
	char *id = r_context(&kpid);

	kill(kpid, SIGSTOP);
	double t0 = ms_now();
	pid_t now = kpid;
	while ((now = context_pid(URL, id, "kernel_pid")) == kpid || now == 0) {
		cr_assert(ms_since(t0) < 20000, "a stopped idle kernel is kept");
		usleep(100000);
	}
	cr_assert(kill(kpid, 0) < 0, "the stopped kernel %d was left behind", (int)kpid);

	json_decref(run(URL, id, "x <- 42")); /* the fresh kernel */
	kpid = context_pid(URL, id, "kernel_pid");
	struct bg b = {.ctx = id, .code = "cat('start\\n'); Sys.sleep(60)"};
	bg_start(&b);
	cr_assert_eq(bg_wait_stdout(&b, 20000), 0, "the code never started");
	t0 = ms_now();
	kill(kpid, SIGSTOP); /* busy, and stopped */
	bg_join(&b);
	cr_assert_str_eq(error_name(b.lines), "KernelDied");
	cr_assert(strstr(error_value(b.lines), "heartbeat"), "%s", error_value(b.lines));
	/* a heartbeat timeout of 3 s; not noticed, the stream waits until the client gives up */
	cr_assert(ms_since(t0) < 30000, "a stopped busy kernel was noticed after %.0f ms",
		  ms_since(t0));
	json_decref(b.lines);
	/* the stream ends first */
	cr_assert_eq(wait_pid_gone(kpid, 5000), 0, "the stopped kernel %d was left behind",
		     (int)kpid);
	free(id);
}

/* VmHWM or VmRSS of a process, in KiB; -1 if unknown (unused under ASan). */
__attribute__((unused)) static long
proc_kib(pid_t pid, const char *field)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, strlen(field)) && line[strlen(field)] == ':')
			kib = atol(line + strlen(field) + 1);
	fclose(f);
	return kib;
}

/* Stream text bytes in total; fails if a line holds more than max bytes. */
static size_t
stream_bytes(json_t *l, const char *type, size_t max)
{
	size_t n = 0;
	json_t *o;

	for (int i = 0; (o = line_of(l, type, i)); i++) {
		size_t len = json_string_length(json_object_get(o, "text"));
		cr_expect_leq(len, max, "a %s line of %zu bytes", type, len);
		n += len;
	}
	return n;
}

/*
 * 40 MB printed at once: it arrives whole, in lines of at most 1 MiB of
 * text, and the proxy relays it without holding it (ipykernel's iopub waits
 * for the proxy instead of filling its memory).
 */
Test(survive, python_flood_arrives_in_bounded_lines_and_the_proxy_stays_small, .timeout = 120)
{
	char *id = context_new(URL, "python", NULL);
	cr_assert_not_null(id);
	pid_t proxy = context_pid(URL, id, "proxy_pid");
	json_t *l = run(URL, id, "print('x' * 40_000_000)");

	cr_assert_eq(count_of(l, "error"), 0, "%s: %s", error_name(l), error_value(l));
	cr_assert_eq(stream_bytes(l, "stdout", 1 << 20), 40000001);
	cr_assert_geq(count_of(l, "stdout"), 39);
	json_decref(l);
	/* the proxy's memory (ASan's quarantine holds freed memory, so a
	 * sanitizer build's RSS says nothing about it) */
#ifndef __SANITIZE_ADDRESS__
	long hwm = proc_kib(proxy, "VmHWM"), rss = proc_kib(proxy, "VmRSS");
	cr_assert(hwm > 0 && hwm < 48 * 1024, "the proxy peaked at %ld KiB", hwm);
	cr_assert(rss > 0 && rss < 24 * 1024, "the proxy holds %ld KiB after", rss);
#else
	(void)proxy;
#endif
	free(id);
}

/* IRkernel sends one message for one cat(): the proxy cuts it into lines. */
Test(survive, r_huge_message_arrives_in_bounded_lines, .timeout = 120)
{
	pid_t kpid;
	char *id = r_context(&kpid);
	pid_t proxy = context_pid(URL, id, "proxy_pid");
	json_t *l = run(URL, id, "cat(strrep('x', 2e7))");

	cr_assert_eq(count_of(l, "error"), 0, "%s: %s", error_name(l), error_value(l));
	cr_assert_eq(stream_bytes(l, "stdout", 1 << 20), 20000000);
	json_decref(l);
#ifndef __SANITIZE_ADDRESS__ /* as above: ASan's quarantine keeps freed memory */
	long rss = proc_kib(proxy, "VmRSS");
	cr_assert(rss > 0 && rss < 24 * 1024, "the proxy holds %ld KiB after", rss);
#else
	(void)proxy;
#endif
	free(id);
}

/* A private broker whose --spill-dir is a 1 MiB tmpfs (torn down in fini). */
static struct broker spill_broker;
static char spill_dir[64];

static void
tiny_spill_dir_start(const char *cap)
{
	snprintf(spill_dir, sizeof(spill_dir), "/tmp/sandcell-spill.XXXXXX");
	cr_assert_not_null(mkdtemp(spill_dir));
	cr_assert_eq(mount("tmpfs", spill_dir, "tmpfs", 0, "size=1m"), 0, "mount tmpfs: %s",
		     strerror(errno));
	const char *args[] = {"--no-default-context", "--pool", "0", "--spill-dir", spill_dir,
			      "--stream-cap", cap, NULL};
	cr_assert_eq(broker_start(&spill_broker, args), 0);
}

static void
tiny_spill_dir_init(void)
{
	tiny_spill_dir_start("1073741824");
}

static void
tiny_spill_dir_small_cap_init(void)
{
	tiny_spill_dir_start("600000"); /* reached before the disk is full */
}

static void
tiny_spill_dir_fini(void)
{
	if (spill_broker.b_pid > 0)
		cr_assert_eq(broker_stop(&spill_broker), 0, "a sanitizer report in its log");
	umount2(spill_dir, MNT_DETACH);
	rmdir(spill_dir);
}

/*
 * A client that reads nothing while 32 MB are printed, then reads it all.
 * Every line must be whole JSON and the last end_of_execution; returns the
 * error line (the caller frees it).
 */
static json_t *
slow_client_error(const char *base)
{
	char *id = context_new(base, "python", NULL);
	json_t *body = json_pack("{s:s, s:s}", "code", "print('x' * 32_000_000)\nprint('after')",
				 "context_id", id);
	char *js = json_dumps(body, JSON_COMPACT), req[512], path[128];
	struct resp r = {0};
	int fd;

	cr_assert_not_null(id);
	snprintf(req, sizeof(req),
		 "POST /execute HTTP/1.0\r\nContent-Type: application/json\r\n"
		 "Content-Length: %zu\r\n\r\n%s",
		 strlen(js), js);
	cr_assert((fd = tcp_connect(base)) >= 0);
	cr_assert(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
	snprintf(path, sizeof(path), "/contexts/%s", id);
	double t0 = ms_now();
	do { /* until the broker has ended it (the context stays busy until it is read) */
		cr_assert(ms_since(t0) < 60000, "the execution never ended: %s", r.r_body);
		usleep(200000);
		resp_free(&r);
		cr_assert_eq(http(base, "GET", path, NULL, &r, 5), 0);
	} while (!strstr(r.r_body, "\"executions\":1"));
	resp_free(&r);

	char *all = raw_read_all(fd), *lines = strstr(all, "\r\n\r\n"), last[64] = "";
	json_t *err = NULL;
	int n = 0;
	cr_assert_not_null(lines, "no response head: %.200s", all);
	for (char *save = NULL, *l = strtok_r(lines + 4, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save), n++) {
		json_t *o = json_loads(l, 0, NULL);
		cr_assert_not_null(o, "line %d is not JSON: %.80s", n, l);
		snprintf(last, sizeof(last), "%s", json_string_value(json_object_get(o, "type")));
		if (!strcmp(last, "error"))
			err = json_incref(o);
		json_decref(o);
	}
	cr_assert_str_eq(last, "end_of_execution");
	cr_assert_not_null(err, "no error line in %d lines", n);
	free(all);
	free(js);
	json_decref(body);
	free(id);
	return err;
}

/* The backlog spills past 256 KiB into a spill dir that fills up. */
Test(survive, full_spill_dir_is_named_as_the_cause, .timeout = 120, .init = tiny_spill_dir_init,
     .fini = tiny_spill_dir_fini)
{
	json_t *err = slow_client_error(spill_broker.b_url);
	const char *v = json_string_value(json_object_get(err, "value"));

	cr_assert_str_eq(json_string_value(json_object_get(err, "name")), "OutputSpillFailed");
	cr_assert(strstr(v, "No space left on device") && strstr(v, spill_dir), "%s", v);
	json_decref(err);
}

Test(survive, stream_cap_ends_the_stream_after_whole_lines, .timeout = 120,
     .init = tiny_spill_dir_small_cap_init, .fini = tiny_spill_dir_fini)
{
	json_t *err = slow_client_error(spill_broker.b_url);
	const char *v = json_string_value(json_object_get(err, "value"));

	cr_assert_str_eq(json_string_value(json_object_get(err, "name")), "OutputLimitExceeded");
	cr_assert(strstr(v, "over 600000 bytes"), "%s", v);
	json_decref(err);
}

/* GET /contexts/{id} holds needle (polled until it does, at most 20 s). */
static void
wait_context(const char *id, const char *needle)
{
	char path[128];
	double t0 = ms_now();
	struct resp r = {0};

	snprintf(path, sizeof(path), "/contexts/%s", id);
	for (;;) {
		cr_assert_eq(http(URL, "GET", path, NULL, &r, 5), 0);
		if (strstr(r.r_body, needle))
			break;
		cr_assert(ms_since(t0) < 20000, "never %s: %s", needle, r.r_body);
		resp_free(&r);
		usleep(50000);
	}
	resp_free(&r);
}

/*
 * An execution that ignores its interrupt gets the kernel restarted; the
 * executions queued behind it still run, on the new kernel, and say first
 * that the state is gone, and precisely why.
 */
Test(survive, queued_executions_learn_whose_ignored_interrupt_restarted_the_kernel,
     .timeout = 90)
{
	char *id = context_new(URL, "python", NULL);
	struct bg a = {.ctx = id,
		       .code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
			       "print('a', flush=True)\ntime.sleep(60)"};
	struct bg q = {.ctx = id, .code = "print('queued', 'signal' in dir())"};

	cr_assert_not_null(id);
	bg_start(&a);
	/* 'a' is printed once SIGINT is ignored: an interrupt before would work */
	cr_assert_eq(bg_wait_stdout(&a, 30000), 0, "the code never ignored SIGINT");
	bg_start(&q);
	wait_context(id, "\"queue\":2");
	cr_assert_eq(context_post(URL, id, "interrupt", 10), 200);
	bg_join(&a);
	bg_join(&q);
	cr_assert_str_eq(error_name(a.lines), "ContextRestarted");
	cr_assert(strstr(error_value(a.lines), "did not stop after an interrupt"), "%s",
		  error_value(a.lines));
	cr_assert_str_eq(error_name(q.lines), "(none)", "%s", error_value(q.lines));
	char *out = stdout_of(q.lines);
	cr_assert_str_eq(out, "queued False\n", "the queued code did not run in a new kernel");
	free(out);
	json_t *e = line_of(q.lines, "stderr", 0);
	const char *v = json_string_value(json_object_get(e, "text"));
	cr_assert(v && strstr(v, "state") && strstr(v, "is lost") && strstr(v, "(stream ") &&
		      strstr(v, "did not stop after an interrupt"),
		  "%s", v ? v : "no stderr line");
	json_decref(a.lines);
	json_decref(q.lines);
	free(id);
}
