/*
 * bench.c — sandcell's benchmarks (make bench [BENCH=section]): every figure
 * measured in one run, against a real broker, proxies and kernels and against
 * a raw Jupyter client (raw.c) driving the same kernelspec, then printed as
 * one table. Not a test: nothing here passes or fails.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include <sodium.h>

#include "bench.h"

#define LAT_WARMUP 20
#define LAT_RUNS 300
#define STREAM_RUNS 3
#define CANCEL_RUNS 20
#define INTERRUPT_RUNS 10

static const char *const sections[] = {"raw",       "latency", "throughput", "contexts",
                                       "streaming", "memory",  "cancel",     "ipc",
                                       "sandbox",   "goals",   "template",   "scale",
                                       "kcpu",      "tpsplit",
                                       NULL};

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentiles. */
void
stats_of(double *v, int n, struct stats *st)
{
	memset(st, 0, sizeof(*st));
	if (n <= 0)
		return;
	qsort(v, n, sizeof(*v), cmp_double);
	st->st_n = n;
	st->st_p50 = v[(int)(0.50 * (n - 1) + 0.5)];
	st->st_p99 = v[(int)(0.99 * (n - 1) + 0.5)];
	st->st_max = v[n - 1];
	for (int i = 0; i < n; i++)
		st->st_mean += v[i] / n;
}

/* The median of v's n values, v untouched (0 when n is 0). */
double
median_of(const double *v, int n)
{
	double *c = n > 0 ? malloc(n * sizeof(*c)) : NULL;
	struct stats st = {0};

	if (c) {
		memcpy(c, v, n * sizeof(*c));
		stats_of(c, n, &st);
		free(c);
	}
	return st.st_p50;
}

char *
fmt(const char *f, ...)
{
	static __thread char ring[16][160];
	static __thread int next;
	char *s = ring[next++ % 16];
	va_list ap;

	va_start(ap, f);
	vsnprintf(s, sizeof(ring[0]), f, ap);
	va_end(ap);
	return s;
}

static double bench_t0;

void
progress(const char *f, ...)
{
	va_list ap;

	fprintf(stderr, "[%6.1f s] ", ms_since(bench_t0) / 1000.0);
	va_start(ap, f);
	vfprintf(stderr, f, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* "anon 1.1 MB, files 6.4 MB, PSS 2.0 MB": what an RSS figure is made of. */
const char *
mem_detail(pid_t pid)
{
	char path[64], line[256];
	long anon = -1, file = -1, pss = -1, v;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "r"))) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "RssAnon: %ld kB", &v) == 1)
				anon = v;
			else if (sscanf(line, "RssFile: %ld kB", &v) == 1)
				file = v;
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	if ((f = fopen(path, "r"))) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "Pss: %ld kB", &v) == 1)
				pss = v;
		fclose(f);
	}
	return fmt("anon %.2f MB, shared-library/file pages %.2f MB, PSS %.2f MB",
	           anon / 1024.0, file / 1024.0, pss / 1024.0);
}

/* utime and stime (fields 14 and 15) of a stat file, in ms */
static double
stat_cpu_ms(const char *path)
{
	long long t[2];

	if (stat_fields(path, 14, 2, t) < 0)
		return -1;
	return (t[0] + t[1]) * 1000.0 / sysconf(_SC_CLK_TCK);
}

double
cpu_ms(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return stat_cpu_ms(path);
}

double
self_cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/*
 * The run time of all of pid's threads so far, in ns (schedstat: not 10 ms
 * ticks), or -1; with csw, their context switches, voluntary or not.
 */
double
tasks_ns(pid_t pid, double *csw)
{
	char path[96], line[128];
	double ns = 0;
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if (!(d = opendir(path)))
		return -1;
	if (csw)
		*csw = 0;
	while ((e = readdir(d))) {
		unsigned long long run;
		int tid = atoi(e->d_name);
		FILE *f;
		if (tid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid, tid);
		if ((f = fopen(path, "r"))) {
			if (fscanf(f, "%llu", &run) == 1)
				ns += run;
			fclose(f);
		}
		snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, tid);
		if (csw && (f = fopen(path, "r"))) {
			long v;
			while (fgets(line, sizeof(line), f))
				if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
				    sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
					*csw += v;
			fclose(f);
		}
	}
	closedir(d);
	return ns;
}

/* CPU of this process's threads other than the calling one (libzmq's I/O thread). */
static double
other_threads_cpu_ms(void)
{
	char path[64];
	double sum = 0;
	pid_t self = gettid();
	struct dirent *e;
	DIR *d = opendir("/proc/self/task");

	while (d && (e = readdir(d))) {
		pid_t tid = atoi(e->d_name);
		if (tid <= 0 || tid == self)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
		double ms = stat_cpu_ms(path);
		if (ms > 0)
			sum += ms;
	}
	if (d)
		closedir(d);
	return sum;
}

static double
thread_cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define TABLE_COLS 7
#define TABLE_MAX 128

static struct {
	char *t_cell[TABLE_MAX][TABLE_COLS];
	int t_rows;
	char *t_notes[64];
	int t_nnotes;
} table;

void
table_add(const char *section, const char *figure, const char *p50, const char *p99,
          const char *ratio, const char *target)
{
	const char *c[TABLE_COLS] = {section, figure, p50, p99, ratio, target, ""};

	if (table.t_rows == TABLE_MAX)
		return;
	for (int i = 0; i < TABLE_COLS; i++)
		table.t_cell[table.t_rows][i] = strdup(c[i] && *c[i] ? c[i]
		                                       : i < 6       ? "-"
		                                                     : "");
	progress("  %s: %s  p50 %s  p99/value %s  %s", table.t_cell[table.t_rows][0],
	         table.t_cell[table.t_rows][1], table.t_cell[table.t_rows][2],
	         table.t_cell[table.t_rows][3], table.t_cell[table.t_rows][4]);
	table.t_rows++;
}

void
table_detail(const char *f, ...)
{
	va_list ap;
	char *s;

	if (!table.t_rows)
		return;
	va_start(ap, f);
	if (vasprintf(&s, f, ap) < 0)
		s = NULL;
	va_end(ap);
	if (!s)
		return;
	free(table.t_cell[table.t_rows - 1][6]);
	table.t_cell[table.t_rows - 1][6] = s;
	progress("    (%s)", s);
}

void
table_note(const char *f, ...)
{
	va_list ap;
	char *s;

	va_start(ap, f);
	if (vasprintf(&s, f, ap) < 0)
		s = NULL;
	va_end(ap);
	if (s && table.t_nnotes < 64) {
		table.t_notes[table.t_nnotes++] = s;
		progress("  note: %s", s);
	} else {
		free(s);
	}
}

static void
table_print(void)
{
	static const char *const head[TABLE_COLS] = {
	    "section", "figure", "p50", "p99 / value", "vs raw", "target", "detail"};
	int w[TABLE_COLS];

	/* rows in section order (insertion sort: stable), as measured within each */
	for (int r = 1; r < table.t_rows; r++)
		for (int q = r;
		     q > 0 && table.t_cell[q][0][0] < table.t_cell[q - 1][0][0]; q--)
			for (int i = 0; i < TABLE_COLS; i++) {
				char *t = table.t_cell[q][i];
				table.t_cell[q][i] = table.t_cell[q - 1][i];
				table.t_cell[q - 1][i] = t;
			}
	for (int i = 0; i < TABLE_COLS; i++) {
		w[i] = strlen(head[i]);
		for (int r = 0; r < table.t_rows; r++)
			if ((int)strlen(table.t_cell[r][i]) > w[i])
				w[i] = strlen(table.t_cell[r][i]);
	}
	printf("\n");
	for (int i = 0; i < TABLE_COLS; i++)
		printf("%-*s%s", w[i], head[i], i + 1 < TABLE_COLS ? "  " : "\n");
	for (int i = 0; i < TABLE_COLS; i++)
		for (int j = 0; j < w[i] + (i + 1 < TABLE_COLS ? 2 : 0); j++)
			putchar(j < w[i] ? '-' : ' ');
	putchar('\n');
	for (int r = 0; r < table.t_rows; r++) {
		if (r && strcmp(table.t_cell[r][0], table.t_cell[r - 1][0]) &&
		    table.t_cell[r][0][0] != table.t_cell[r - 1][0][0])
			putchar('\n');
		for (int i = 0; i < TABLE_COLS; i++)
			printf("%-*s%s", i + 1 < TABLE_COLS ? w[i] : 0,
			       table.t_cell[r][i], i + 1 < TABLE_COLS ? "  " : "\n");
	}
	if (table.t_nnotes)
		printf("\nnotes:\n");
	for (int i = 0; i < table.t_nnotes; i++)
		printf("- %s\n", table.t_notes[i]);
	fflush(stdout);
}

/* "1.07 (+0.42 ms)" */
static const char *
ratio_ms(double ours, double raw)
{
	return raw > 0 ? fmt("%.2f (%+.2f ms)", ours / raw, ours - raw) : NULL;
}

/*
 * (1) and (2): sequential executions on a raw kernel and through sandcell,
 * alternating run by run so that both see the same machine (url NULL: raw only).
 */
static void
bench_latency(const struct broker *b)
{
	static const struct {
		const char *code;
		bool prints;
	} cases[] = {{"x=1", false}, {"print('hello')", true}};
	const char *url = b ? b->b_url : NULL;
	struct raw_kernel k;
	struct hc h;
	double rv[LAT_RUNS], hv[LAT_RUNS];
	pid_t proxy = 0, kernel = 0;

	progress(
	    "latency: x=1 and print('hello'), %d runs each, raw and%s through sandcell "
	    "alternately",
	    LAT_RUNS, url ? "" : " (not)");
	if (raw_start(&k, 1, true) < 0) {
		table_note("latency: the raw kernel did not start");
		return;
	}
	if (url && hc_init(&h, url) < 0)
		url = NULL;
	if (url) {
		char *ctx = hc_default_context(url);
		proxy = ctx ? hc_proxy_pid(url, ctx) : 0;
		kernel = ctx ? hc_kernel_pid(url, ctx) : 0;
		free(ctx);
	}
	for (size_t c = 0; c < 2; c++) {
		char *body = hc_body(cases[c].code, NULL);
		struct stats rs, hs, *raw = c == 0 ? &raw_figs.rf_x1 : &raw_figs.rf_hello;
		int nr = 0, nh = 0, bad = 0;
		/* CPU: [0] raw kernel, [1] raw client (this thread + libzmq's), [2]
		 * broker, [3] proxy, [4] sandcell's kernel, [5] curl client (this thread)
		 */
		double cpu[6] = {0}, t;
		for (int i = 0; i < LAT_WARMUP; i++) {
			raw_exec(&k, cases[c].code, NULL, 30000);
			if (url)
				hc_exec(&h, body, NULL);
		}
		cpu[0] = -cpu_ms(k.rk_pid);
		cpu[1] = -other_threads_cpu_ms();
		if (url) {
			cpu[2] = -cpu_ms(b->b_pid);
			cpu[3] = -cpu_ms(proxy);
			cpu[4] = -cpu_ms(kernel);
		}
		for (int i = 0; i < LAT_RUNS; i++) {
			struct raw_out o;
			double t0 = ms_now(), ms;
			t = thread_cpu_ms();
			if (raw_exec(&k, cases[c].code, &o, 30000) == 0 &&
			    (o.ro_stream_bytes > 0) == cases[c].prints)
				rv[nr++] = ms_since(t0);
			cpu[1] += thread_cpu_ms() - t;
			if (!url)
				continue;
			t = thread_cpu_ms();
			int rc = hc_exec(&h, body, &ms);
			cpu[5] += thread_cpu_ms() - t;
			if (rc == 0 && (h.hc_lines_stdout > 0) == cases[c].prints)
				hv[nh++] = ms;
			else if (!bad++)
				table_note(
				    "%s: first failed run: rc %d, %d stdout lines, "
				    "%d error lines, %zu bytes",
				    body, rc, h.hc_lines_stdout, h.hc_lines_error,
				    h.hc_bytes);
		}
		cpu[0] += cpu_ms(k.rk_pid);
		cpu[1] += other_threads_cpu_ms();
		if (url) {
			cpu[2] += cpu_ms(b->b_pid);
			cpu[3] += cpu_ms(proxy);
			cpu[4] += cpu_ms(kernel);
		}
		for (int i = 0; i < 6; i++) /* µs per execution */
			cpu[i] *= 1000.0 / LAT_RUNS;
		free(body);
		stats_of(rv, nr, &rs);
		stats_of(hv, nh, &hs);
		*raw = rs;
		if (nr) {
			table_add("1 raw",
			          fmt("%s round trip (%d runs)", cases[c].code, nr),
			          fmt("%.2f ms", rs.st_p50), fmt("%.2f ms", rs.st_p99),
			          "1.00 (baseline)", NULL);
			table_detail("CPU/exec: kernel %.0f us, client %.0f us", cpu[0],
			             cpu[1]);
		}
		if (!nh || !nr)
			continue;
		table_add("2 sandcell",
		          fmt("POST /execute %s (%d runs%s)", cases[c].code, nh,
		              bad ? fmt(", %d failed", bad) : ""),
		          fmt("%.2f ms", hs.st_p50), fmt("%.2f ms", hs.st_p99),
		          ratio_ms(hs.st_p50, rs.st_p50),
		          fmt("overhead < 0.5 ms: %s",
		              hs.st_p50 - rs.st_p50 < 0.5 ? "met" : "MISSED"));
		table_detail(
		    "CPU/exec: broker %.0f us, proxy %.0f us, kernel %.0f us, client "
		    "%.0f us",
		    cpu[2], cpu[3], cpu[4], cpu[5]);
		table_add("2 sandcell", fmt("  the same, p99 against raw p99"), NULL,
		          fmt("%.2f ms", hs.st_p99), ratio_ms(hs.st_p99, rs.st_p99),
		          NULL);
		if (c == 0 && cpu[4] > 0)
			table_add("2 sandcell",
			          "  CPU/exec of broker + proxy against the kernel's",
			          NULL, fmt("%.0f vs %.0f us", cpu[2] + cpu[3], cpu[4]),
			          fmt("%.2f", (cpu[2] + cpu[3]) / cpu[4]),
			          goals_cpu(cpu[2], cpu[3], cpu[4]));
	}
	raw_figs.rf_have_lat = raw_figs.rf_x1.st_n > 0;
	raw_stop(&k);
	if (url)
		hc_free(&h);
}

/* (5) the same floods as raw, through broker and proxy to a libcurl client */
/* Adds sign * CPU ms of broker, proxy, kernel and this process into acc[4]. */
static void
cpu_mark(double acc[4], const pid_t pids[3], int sign)
{
	for (int i = 0; i < 3; i++)
		acc[i] += sign * (pids[i] > 0 ? cpu_ms(pids[i]) : 0);
	acc[3] += sign * self_cpu_ms();
}

static void
bench_streaming(const struct broker *b)
{
	struct hc h;
	char *setup = hc_body(IMAGES_SETUP, NULL), *flood = hc_body(FLOOD_CODE, NULL),
	     *images = hc_body(IMAGES_CODE, NULL);
	double fl[STREAM_RUNS], im[STREAM_RUNS];
	int nf = 0, ni = 0;
	struct stats sf, si;

	/* CPU seconds per run: broker, proxy, kernel, this client */
	double fcpu[4] = {0}, icpu[4] = {0};
	char *ctx = hc_default_context(b->b_url);
	pid_t pids[3] = {b->b_pid, ctx ? hc_proxy_pid(b->b_url, ctx) : 0,
	                 ctx ? hc_kernel_pid(b->b_url, ctx) : 0};

	free(ctx);
	progress("streaming: %d MiB stdout flood and %d x 1 MiB images, %d runs each",
	         FLOOD_MIB, IMAGES_N, STREAM_RUNS);
	if (hc_init(&h, b->b_url) < 0)
		goto out;
	hc_exec(&h, setup, NULL);
	cpu_mark(fcpu, pids, -1);
	for (int i = 0; i < STREAM_RUNS; i++) {
		double ms;
		int rc = hc_exec(&h, flood, &ms);
		if (rc == 0 && h.hc_bytes >= (size_t)FLOOD_MIB << 20)
			fl[nf++] = FLOOD_MIB / (ms / 1000.0);
		else
			table_note(
			    "stdout flood run %d: rc %d, %zu bytes, %d error lines", i,
			    rc, h.hc_bytes, h.hc_lines_error);
	}
	cpu_mark(fcpu, pids, 1);
	cpu_mark(icpu, pids, -1);
	for (int i = 0; i < STREAM_RUNS; i++) {
		double ms;
		int rc = hc_exec(&h, images, &ms);
		if (rc == 0 && h.hc_lines_result == IMAGES_N)
			im[ni++] = IMAGES_N / (ms / 1000.0);
		else
			table_note("images run %d: rc %d, %d result lines, %zu bytes", i,
			           rc, h.hc_lines_result, h.hc_bytes);
	}
	cpu_mark(icpu, pids, 1);
	hc_free(&h);
	stats_of(fl, nf, &sf);
	stats_of(im, ni, &si);
	if (nf)
		table_add("5 streaming",
		          fmt("stdout flood %d MiB (%d runs)", FLOOD_MIB, nf), NULL,
		          fmt("%.1f MiB/s", sf.st_p50),
		          raw_figs.rf_have_stream
		              ? fmt("%.2f", sf.st_p50 / raw_figs.rf_flood_mibs)
		              : NULL,
		          NULL);
	if (nf)
		table_detail(
		    "CPU/run: broker %.2f s, proxy %.2f s, kernel %.2f s, client %.2f s",
		    fcpu[0] / STREAM_RUNS / 1e3, fcpu[1] / STREAM_RUNS / 1e3,
		    fcpu[2] / STREAM_RUNS / 1e3, fcpu[3] / STREAM_RUNS / 1e3);
	if (ni)
		table_add("5 streaming", fmt("%d images x 1 MiB (%d runs)", IMAGES_N, ni),
		          NULL, fmt("%.1f MiB/s", si.st_p50),
		          raw_figs.rf_have_stream
		              ? fmt("%.2f", si.st_p50 / raw_figs.rf_images_mibs)
		              : NULL,
		          NULL);
	if (ni)
		table_detail(
		    "CPU/run: broker %.2f s, proxy %.2f s, kernel %.2f s, client %.2f s",
		    icpu[0] / STREAM_RUNS / 1e3, icpu[1] / STREAM_RUNS / 1e3,
		    icpu[2] / STREAM_RUNS / 1e3, icpu[3] / STREAM_RUNS / 1e3);
out:
	free(setup);
	free(flood);
	free(images);
}

/*
 * (7) Cancel: a client abandons a long execution (policy interrupt); how long
 * from its disconnect until the next request's first output line arrives.
 */
static void
bench_cancel(const char *url, int runs)
{
	double t[64];
	int n = 0;
	struct stats st;

	progress("cancel: disconnect during time.sleep(30), %d runs", runs);
	for (int i = 0; i < runs && i < 64; i++) {
		long status;
		json_t *l = execute(url, "{\"code\":\"import time\\ntime.sleep(30)\"}",
		                    &status, 300);
		json_decref(l);
		/* curl has closed the connection (the disconnect); "_ms" of the next
		 * request's lines counts from right after it */
		l = execute(url, "{\"code\":\"print('hello')\"}", &status, 30000);
		json_t *first = line_of(l, "stdout", 0);
		if (first)
			t[n++] = json_real_value(json_object_get(first, "_ms"));
		json_decref(l);
	}
	if (!n) {
		table_note("cancel: no run produced output");
		return;
	}
	stats_of(t, n, &st);
	table_add("7 cancel",
	          fmt("disconnect -> next request's first output (%d runs)", n),
	          fmt("%.1f ms", st.st_p50), fmt("max %.1f ms", st.st_max), NULL, NULL);
}

/*
 * (7) Interrupt: POST /contexts/{id}/interrupt while code sleeps (Python) or
 * awaits a timer (Deno); how long from the request until the stream ends
 * with KeyboardInterrupt. The tests only check that it ends well before the
 * code would have; this is how fast.
 */
static void
bench_interrupt(const char *url, int runs)
{
	static const struct {
		const char *lang, *code, *what;
	} cases[] = {
	    {"python", "print('started', flush=True)\nimport time\ntime.sleep(30)",
	     "python time.sleep(30)"},
	    {"javascript",
	     "console.log('started'); await new Promise((r) => setTimeout(r, 30000))",
	     "javascript await of a 30 s timer"},
	};

	progress("interrupt: POST interrupt of a sleep (python) and an await (javascript), "
	         "%d runs each", runs);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		char *id = context_new(url, cases[c].lang, NULL);
		double t[64];
		int n = 0, bad = 0;
		struct stats st;

		if (!id) {
			table_note("interrupt: no %s context", cases[c].lang);
			continue;
		}
		for (int i = 0; i < runs && i < 64; i++) {
			struct bg b = {.base = url, .ctx = id, .code = cases[c].code};
			bg_start(&b);
			double t0 = 0;
			if (bg_wait_stdout(&b, 30000) == 0) {
				t0 = ms_now();
				context_post(url, id, "interrupt", 30);
			}
			bg_join(&b);
			if (t0 > 0 && !strcmp(error_name(b.lines), "KeyboardInterrupt"))
				t[n++] = ms_since(t0);
			else if (!bad++)
				table_note("interrupt, %s: first failed run: %s: %s", cases[c].lang,
				           error_name(b.lines), error_value(b.lines));
			json_decref(b.lines);
		}
		hc_delete_all(url, &id, 1);
		if (!n)
			continue;
		stats_of(t, n, &st);
		table_add("7 cancel",
		          fmt("POST interrupt -> end of stream, %s (%d runs%s)", cases[c].what, n,
		              bad ? fmt(", %d failed", bad) : ""),
		          fmt("%.1f ms", st.st_p50), fmt("max %.1f ms", st.st_max), NULL, NULL);
	}
}

/*
 * Others' work on this machine skews every figure: per phase, the CPU the
 * machine spent outside this benchmark's processes (/proc/stat's busy time
 * less theirs), as a share of all CPUs. Theirs is each process's own CPU,
 * sampled every WATCH_MS by a thread, not what wait accounting adds up: a
 * box's init that ends (a context deleted, a broker stopped) takes the rest
 * of its PID namespace along and reaps it without adding its CPU to its own
 * (zap_pid_ns_processes), so the CPU of every kernel of the phase went
 * unaccounted and was taken for others' work (~40 % of a goals run). What a
 * process spends in its last WATCH_MS, or in a life shorter than that, is
 * still missed.
 */
#define WATCH_MS 200
#define WATCH_MAX 16384

struct watch {
	double w_t, w_busy;
};
static struct {
	pthread_t ws_thread;
	pthread_mutex_t ws_mu;
	bool ws_stop;
	int ws_n;
	struct seen {
		pid_t s_pid;
		unsigned long long s_start; /* pid and start time: one process */
		double s_first, s_last;     /* its own CPU, ms */
	} ws_seen[WATCH_MAX];
} ws = {.ws_mu = PTHREAD_MUTEX_INITIALIZER};
static char foreign[512];

static double
machine_busy_ms(void)
{
	unsigned long long v[8] = {0};
	FILE *f = fopen("/proc/stat", "r");
	int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
	                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7])
	          : 0;

	if (f)
		fclose(f);
	if (n < 8)
		return -1;
	/* user nice system [idle iowait] irq softirq steal */
	return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) * 1000.0 / sysconf(_SC_CLK_TCK);
}

/*
 * One look at our processes (us and our descendants): each one's own CPU so
 * far. One thread at a time: the sampler, or watch_start/watch_end around it.
 */
static void
watch_scan(bool first)
{
	enum { MAXP = 8192 };
	static pid_t pid[MAXP], ppid[MAXP];
	static unsigned long long start[MAXP];
	static double cpu[MAXP];
	static bool mine[MAXP];
	int n = 0;
	struct dirent *e;
	DIR *d = opendir("/proc");

	while (d && (e = readdir(d)) && n < MAXP) {
		char path[64], buf[1024], *p;
		unsigned long long ut, st, t0;
		int fd, pp;
		ssize_t len;
		if (atoi(e->d_name) <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/stat", atoi(e->d_name));
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		len = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (len <= 0)
			continue;
		buf[len] = '\0';
		if (!(p = strrchr(buf, ')')) ||
		    sscanf(p + 2,
		           "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
		           "%*d %*d %llu",
		           &pp, &ut, &st, &t0) != 4)
			continue;
		pid[n] = atoi(e->d_name);
		ppid[n] = pp;
		start[n] = t0;
		cpu[n] = (ut + st) * 1000.0 / sysconf(_SC_CLK_TCK);
		mine[n] = pid[n] == getpid();
		n++;
	}
	if (d)
		closedir(d);
	for (bool more = true; more;) { /* descendants, to a fixed point */
		more = false;
		for (int i = 0; i < n; i++)
			for (int j = 0; !mine[i] && j < n; j++)
				if (mine[j] && ppid[i] == pid[j])
					mine[i] = more = true;
	}
	pthread_mutex_lock(&ws.ws_mu);
	for (int i = 0; i < n; i++) {
		int k;
		if (!mine[i])
			continue;
		for (k = 0; k < ws.ws_n; k++)
			if (ws.ws_seen[k].s_pid == pid[i] && ws.ws_seen[k].s_start == start[i])
				break;
		if (k == ws.ws_n) {
			if (k == WATCH_MAX)
				continue;
			/* there at the start: from what it had; born since: from nothing */
			ws.ws_seen[ws.ws_n++] =
			    (struct seen){pid[i], start[i], first ? cpu[i] : 0, cpu[i]};
		}
		ws.ws_seen[k].s_last = cpu[i];
	}
	pthread_mutex_unlock(&ws.ws_mu);
}

static void *
watch_thread(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec t = {0, WATCH_MS * 1000000L};
		nanosleep(&t, NULL);
		pthread_mutex_lock(&ws.ws_mu);
		bool stop = ws.ws_stop;
		pthread_mutex_unlock(&ws.ws_mu);
		if (stop)
			return NULL;
		watch_scan(false);
	}
}

static void
watch_start(struct watch *w)
{
	w->w_t = ms_now();
	w->w_busy = machine_busy_ms();
	ws.ws_n = 0;
	ws.ws_stop = false;
	watch_scan(true);
	pthread_create(&ws.ws_thread, NULL, watch_thread, NULL);
}

static void
watch_end(struct watch *w, const char *phase)
{
	double wall = ms_since(w->w_t) * sysconf(_SC_NPROCESSORS_ONLN);
	double busy = machine_busy_ms() - w->w_busy, ours = 0;
	size_t len = strlen(foreign);

	pthread_mutex_lock(&ws.ws_mu);
	ws.ws_stop = true;
	pthread_mutex_unlock(&ws.ws_mu);
	pthread_join(ws.ws_thread, NULL);
	watch_scan(false);
	for (int k = 0; k < ws.ws_n; k++)
		ours += ws.ws_seen[k].s_last - ws.ws_seen[k].s_first;
	double other = busy - ours;
	if (wall <= 0)
		return;
	if (other < 0)
		other = 0;
	snprintf(foreign + len, sizeof(foreign) - len, "%s%s %.0f%%", len ? ", " : "",
	         phase, 100 * other / wall);
}

/* Others' work on this machine skews every figure: say how busy it was. */
static void
note_load(const char *when)
{
	double l[3];

	if (getloadavg(l, 3) == 3)
		table_note("load average %s: %.2f %.2f %.2f (1, 5, 15 min)", when, l[0],
		           l[1], l[2]);
}

static bool
want(const char *only, const char *s)
{
	return !only || !strcmp(only, s);
}

int
main(int argc, char **argv)
{
	const char *only = argc > 1 && *argv[1] ? argv[1] : NULL;
	struct rlimit rl;

	if (argc > 2 && !strcmp(argv[1], "--ipc-echo"))
		return ipc_echo_main(argv[2]);
	bench_t0 = ms_now();
	if (only) {
		int i;
		for (i = 0; sections[i] && strcmp(sections[i], only); i++)
			;
		if (!sections[i]) {
			fprintf(stderr, "bench: unknown section %s; one of:", only);
			for (i = 0; sections[i]; i++)
				fprintf(stderr, " %s", sections[i]);
			fprintf(stderr, "\n");
			return 2;
		}
	}
	if (sodium_init() < 0)
		return 1;
	curl_global_init(CURL_GLOBAL_ALL);
	/* 1000 client sockets here, as many connections in the broker it forks */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	printf("sandcell benchmarks (%s), %ld CPUs\n", only ? only : "all sections",
	       sysconf(_SC_NPROCESSORS_ONLN));
	note_load("at start");
	fflush(stdout);

	struct broker b;
	struct watch w;
	const char *url = NULL;
	if (want(only, "latency") || want(only, "throughput") ||
	    want(only, "streaming") || want(only, "cancel")) {
		/* 64 clients on one context: a queue deeper than the default */
		static const char *const args[] = {"--max-queue", "256", NULL};
		progress("starting the broker");
		if (broker_start(&b, args) == 0)
			url = b.b_url;
		else
			table_note(
			    "broker did not start: latency, throughput, streaming and "
			    "cancel not measured");
	}
	if (want(only, "raw") || want(only, "latency")) {
		watch_start(&w);
		bench_latency(url && want(only, "latency") ? &b : NULL);
		if (want(only, "raw"))
			goals_profile_run("1 raw");
		watch_end(&w, "latency");
	}
	if (want(only, "raw") || want(only, "streaming")) {
		watch_start(&w);
		raw_bench_stream();
		if (url && want(only, "streaming"))
			bench_streaming(&b);
		watch_end(&w, "streaming");
	}
	if (want(only, "raw") || want(only, "throughput")) {
		watch_start(&w);
		/* with a broker, the throughput section measures the raw ceilings itself
		 */
		if (url && want(only, "throughput"))
			load_bench_throughput(&b, false);
		else
			raw_bench_aggregate();
		watch_end(&w, "throughput");
	}
	if (url && want(only, "cancel")) {
		watch_start(&w);
		bench_cancel(url, CANCEL_RUNS);
		bench_interrupt(url, INTERRUPT_RUNS);
		watch_end(&w, "cancel");
	}
	if (url)
		broker_stop(&b);
	if (want(only, "contexts")) {
		watch_start(&w);
		load_bench_contexts();
		goals_contexts("4 contexts");
		watch_end(&w, "contexts");
	}
	if (want(only, "template")) {
		watch_start(&w);
		template_bench();
		watch_end(&w, "template");
	}
	if (want(only, "memory")) {
		watch_start(&w);
		load_bench_memory();
		watch_end(&w, "memory");
	}
	if (want(only, "ipc")) {
		watch_start(&w);
		ipc_bench();
		wire_bench();
		watch_end(&w, "ipc");
	}
	if (want(only, "sandbox")) {
		watch_start(&w);
		box_bench();
		watch_end(&w, "sandbox");
	}
	/* 256 contexts on one broker: only when asked for (SCALE_N contexts) */
	if (only && !strcmp(only, "scale")) {
		watch_start(&w);
		scale_bench();
		watch_end(&w, "scale");
	}
	if (only && !strcmp(only, "kcpu")) {
		watch_start(&w);
		kcpu_bench();
		watch_end(&w, "kcpu");
	}
	if (only && !strcmp(only, "tpsplit")) {
		watch_start(&w);
		tpsplit_bench();
		watch_end(&w, "tpsplit");
	}
	/* a full run records the goals' figures in its sections */
	if (only && !strcmp(only, "goals")) {
		watch_start(&w);
		goals_bench();
		watch_end(&w, "goals");
	}
	if (foreign[0])
		table_note(
		    "CPU spent by other work on this machine (outside this benchmark's "
		    "processes), share of all CPUs per phase: %s",
		    foreign);

	note_load("at end");
	table_note("p50/p99: over the runs named; throughput rows: p50 is the request "
	           "latency over all windows, the value the median executions/s of %d "
	           "windows of %.1f s (each after a %.1f s ramp), raw and sandcell in turn",
	           TP_ROUNDS, TP_WINDOW_MS / 1000.0, TP_RAMP_MS / 1000.0);
	table_note(
	    "CPU/exec: user+system CPU from /proc (10 ms ticks) over the measured runs, "
	    "divided by the executions; client = this process");
	table_print();
	goals_print();
	progress("done");
	return 0;
}
