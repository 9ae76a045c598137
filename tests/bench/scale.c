/*
 * scale.c — the default maximum of contexts on one broker (make bench
 * BENCH=scale): SCALE_N idle Python contexts (default 256, --max-contexts'
 * default), then a mix of every language GET /languages lists (SCALE_MIX of
 * each, default 64, as many as fit in 256 together); then one execution in
 * each. It prints what each further context costs the machine (MemAvailable
 * and the PSS of every process it adds, by kind: kernel, proxy, the proxy's
 * helpers, box init, pasta; the kernel's own pages; what /proc/meminfo
 * shows of the machine's own memory: slab, page tables, kernel stacks), the
 * idle CPU per second of the broker and the proxies with them all alive, and
 * the time to create the last one. A root broker's uplink (the boxes' one
 * pasta, its holder and minder, sandcell-proxy --uplink-serve) is counted
 * once, apart: a fixed cost, and that cost spread over the boxes alive.
 * It checks MemAvailable before it starts
 * and between batches, and stops with a message rather than press the
 * machine. SCALE_ARGS: more broker flags. Figures only: nothing fails.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define SCALE_MAX 256  /* --max-contexts' default */
#define SCALE_BATCH 16 /* created between two checks of MemAvailable */
#define SCALE_CONC 4   /* POST /contexts at once */
/* what a Python context is assumed to cost before a batch is measured */
#define SCALE_PY_MB 56.0
#define SCALE_QUIET_S 32        /* idle this long before idle CPU is sampled */
#define SCALE_IDLE_S 10         /* idle CPU is sampled this long */
#define SCALE_RESERVE_MB 2048.0 /* MemAvailable left to the rest of the machine */
#define SCALE_TREE 8192

/* The kinds of process a broker's tree holds, by what they run. */
enum {
	K_BROKER,
	K_TEMPLATE,
	K_PROXY,
	K_HELPER,
	K_PASTA,
	K_INIT,
	K_KERNEL,
	K_UPLINK,
	K_N
};
struct tree {
	pid_t t_pid[SCALE_TREE];
	int t_kind[SCALE_TREE];
	int t_n;
	int t_count[K_N];
	double t_pss_mb[K_N];
	double t_kuss_mb; /* the kernels' own pages (USS) */
	int t_kthreads;   /* the kernels' threads */
	long t_mem[5];    /* what /proc/meminfo names in scale_meminfo, kB */
};

/* The machine's memory that no process's PSS shows: the kernel's own. */
static const char *const scale_meminfo[5] = {"Shmem", "Slab", "PageTables", "KernelStack",
                                             "Percpu"};

/* How one language's contexts answer: code printing 42. sl_mb: what one is
 * assumed to cost until a batch of them has been measured; the dearest last,
 * so that a shortfall of memory stops the fewest. */
static const struct {
	const char *sl_lang, *sl_code;
	double sl_mb;
} scale_code[] = {
    {"python", "print(6*7)", SCALE_PY_MB},   {"bash", "echo $((6*7))", 128},
    {"r", "cat(6*7, '\\n', sep='')", 128},   {"java", "System.out.println(6*7)", 200},
    {"javascript", "console.log(6*7)", 256}, {"typescript", "console.log(6*7)", 256},
};

static int
scale_env(const char *name, int dflt)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : dflt;
}

/* MemAvailable of /proc/meminfo, MB; -1 if unreadable */
static double
scale_avail_mb(void)
{
	char line[128];
	long kb = -1;
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb < 0 ? -1 : kb / 1024.0;
}

static const char *
scale_load(void)
{
	double l[3];

	if (getloadavg(l, 3) != 3)
		return "load ?";
	return fmt("load %.2f %.2f %.2f", l[0], l[1], l[2]);
}

static int
scale_kind(pid_t pid, pid_t ppid, pid_t broker)
{
	char path[64], comm[32] = "", argv[512];
	size_t n;
	FILE *f;

	if (pid == broker)
		return K_BROKER;
	n = proc_cmdline(pid, argv, sizeof(argv));
	if (ppid == broker && memmem(argv, n, "\0--uplink-serve\0", 16))
		return K_UPLINK;
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	if ((f = fopen(path, "r"))) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
	}
	if (!strcmp(comm, "sandcell-proxy"))
		return ppid == broker ? K_PROXY : K_HELPER;
	if (!strncmp(comm, "passt", 5) || !strncmp(comm, "pasta", 5))
		return K_PASTA;
	if (!strcmp(comm, "sandcell-init"))
		return K_INIT;
	if (ppid == broker && memmem(argv, n, "sandcell_template", 17))
		return K_TEMPLATE;
	return K_KERNEL; /* a kernel or what it runs */
}

static void
scale_meminfo_read(long *kb)
{
	char line[128], name[64];
	long v;
	FILE *f = fopen("/proc/meminfo", "r");

	memset(kb, 0, 5 * sizeof(long));
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%63[^:]: %ld", name, &v) == 2)
			for (int i = 0; i < 5; i++)
				if (!strcmp(name, scale_meminfo[i]))
					kb[i] = v;
	if (f)
		fclose(f);
}

/* Whether pid descends from the uplink up (its pasta, the pasta's minder, its holder). */
static bool
scale_under(pid_t pid, pid_t up, pid_t broker)
{
	for (pid_t a = pid; a > 1 && a != broker; a = (pid_t)proc_stat_field(a, 4))
		if (a == up)
			return true;
	return false;
}

/* The broker's tree by kind; with pss, each kind's PSS. */
static void
scale_tree(pid_t broker, bool pss, struct tree *t)
{
	pid_t up = 0;

	memset(t, 0, sizeof(*t));
	t->t_n = proc_tree(broker, t->t_pid, SCALE_TREE);
	for (int i = 0; i < t->t_n; i++)
		if ((t->t_kind[i] =
		         scale_kind(t->t_pid[i], (pid_t)proc_stat_field(t->t_pid[i], 4),
		                    broker)) == K_UPLINK)
			up = t->t_pid[i];
	for (int i = 0; i < t->t_n; i++) {
		int k =
		    up && scale_under(t->t_pid[i], up, broker) ? K_UPLINK : t->t_kind[i];
		long kb = pss ? proc_pss_kb(t->t_pid[i]) : -1;
		t->t_kind[i] = k;
		t->t_count[k]++;
		if (kb > 0)
			t->t_pss_mb[k] += kb / 1024.0;
		if (pss && k == K_KERNEL && (kb = proc_uss_kb(t->t_pid[i])) > 0)
			t->t_kuss_mb += kb / 1024.0;
		if (k == K_KERNEL)
			t->t_kthreads += (int)proc_stat_field(t->t_pid[i], 20);
	}
	scale_meminfo_read(t->t_mem);
}

/* CPU time of a process, all its threads, ms, from schedstat (ns; the 10 ms
 * ticks of /proc/PID/stat cannot resolve an idle proxy); 0 when gone */
static double
scale_cpu(pid_t pid)
{
	char path[64];
	unsigned long long ns, sum = 0;
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if (!(d = opendir(path)))
		return 0;
	while ((e = readdir(d))) {
		char p[300];
		FILE *f;
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
		if ((f = fopen(p, "r"))) {
			if (fscanf(f, "%llu", &ns) == 1)
				sum += ns;
			fclose(f);
		}
	}
	closedir(d);
	return sum / 1e6;
}

/* Every process's CPU over SCALE_IDLE_S s, by kind, as ms per second. */
static void
scale_idle_cpu(pid_t broker, const char *what, int n)
{
	static struct tree t;
	static double before[SCALE_TREE];
	double per[K_N] = {0}, t0, wall;

	/* past the proxies' awake window after their kernels' work (boxfw.c) */
	progress("scale: %d s for the contexts to go idle", SCALE_QUIET_S);
	usleep(SCALE_QUIET_S * 1000 * 1000);
	scale_tree(broker, false, &t);
	for (int i = 0; i < t.t_n; i++)
		before[i] = scale_cpu(t.t_pid[i]);
	t0 = ms_now();
	usleep(SCALE_IDLE_S * 1000 * 1000);
	wall = ms_since(t0) / 1000.0;
	for (int i = 0; i < t.t_n; i++) {
		double d = scale_cpu(t.t_pid[i]) - before[i];
		if (d > 0)
			per[t.t_kind[i]] += d / wall;
	}
	table_add("10 scale",
	          fmt("idle CPU with %d %s contexts alive, over %.0f s", n, what, wall),
	          NULL,
	          fmt("broker %.2f ms/s, proxies %.2f ms/s", per[K_BROKER],
	              per[K_PROXY] + per[K_HELPER]),
	          NULL, NULL);
	table_detail(
	    "per second of wall time: broker %.2f ms, proxies %.2f ms (%.3f each), "
	    "proxy helpers %.2f, pasta %.2f, box inits %.2f, kernels %.2f "
	    "(%.3f each), template %.2f, the uplink (its pasta and helpers) %.2f; %s",
	    per[K_BROKER], per[K_PROXY], n ? per[K_PROXY] / n : 0, per[K_HELPER],
	    per[K_PASTA], per[K_INIT], per[K_KERNEL], n ? per[K_KERNEL] / n : 0,
	    per[K_TEMPLATE], per[K_UPLINK], scale_load());
}

/* Waits for the pool to refill and the machine to settle after creations. */
static void
scale_settle(const struct broker *b)
{
	wait_pool_ready(b->b_run_dir, 1, 120000);
	usleep(3000 * 1000);
}

/*
 * n contexts of lang into ids (NULL where one failed), SCALE_BATCH at a time
 * while MemAvailable keeps SCALE_RESERVE_MB after the rest at mb each; the
 * last one alone, timed into *last_ms. How many it asked for.
 */
static int
scale_create(const struct broker *b, const char *lang, int n, double mb, char **ids,
             double *ms, double *last_ms)
{
	double a0 = scale_avail_mb();
	int done = 0;

	*last_ms = -1;
	while (done < n - 1) {
		int k = n - 1 - done < SCALE_BATCH ? n - 1 - done : SCALE_BATCH;
		double avail = scale_avail_mb();
		if (done >= SCALE_BATCH && a0 > avail) /* measured: what each has cost */
			mb = (a0 - avail) / done > mb ? (a0 - avail) / done : mb;
		if (avail - (n - done) * mb < SCALE_RESERVE_MB) {
			table_note(
			    "scale: stopped after %d %s contexts: MemAvailable %.0f MB, "
			    "%d more at %.0f MB each would leave less than %.0f MB",
			    done, lang, avail, n - done, mb, SCALE_RESERVE_MB);
			return done;
		}
		hc_create_lang(b->b_url, lang, k, SCALE_CONC, ids + done, ms + done);
		done += k;
		progress("scale: %d of %d %s contexts (MemAvailable %.0f MB, %s)", done,
		         n, lang, scale_avail_mb(), scale_load());
	}
	scale_settle(b);
	hc_create_lang(b->b_url, lang, 1, 1, ids + done, ms + done);
	*last_ms = ids[done] ? ms[done] : -1;
	return done + 1;
}

struct scale_run {
	const char *sr_base;
	char **sr_ids;
	const char **sr_code;
	int sr_n, sr_next, sr_ok, sr_bad;
	double *sr_ms;
	char sr_first_bad[256];
	pthread_mutex_t sr_lock;
};

static void *
scale_run_worker(void *arg)
{
	struct scale_run *r = arg;

	for (;;) {
		pthread_mutex_lock(&r->sr_lock);
		int i = r->sr_next < r->sr_n ? r->sr_next++ : -1;
		pthread_mutex_unlock(&r->sr_lock);
		if (i < 0)
			return NULL;
		if (!r->sr_ids[i])
			continue;
		double t0 = ms_now();
		json_t *l = run(r->sr_base, r->sr_ids[i], r->sr_code[i]);
		char *out = stdout_of(l);
		bool ok = !strcmp(out, "42\n");
		pthread_mutex_lock(&r->sr_lock);
		r->sr_ms[i] = ms_since(t0);
		if (ok)
			r->sr_ok++;
		else if (r->sr_bad++ == 0)
			snprintf(r->sr_first_bad, sizeof(r->sr_first_bad),
			         "%.60s: %.80s %.80s", r->sr_code[i], error_name(l),
			         error_value(l));
		pthread_mutex_unlock(&r->sr_lock);
		free(out);
		json_decref(l);
	}
}

/* One execution in each context, 8 at once: how many printed 42. */
static void
scale_answer(const char *base, char **ids, const char **code, int n, const char *what)
{
	struct scale_run r = {.sr_base = base, .sr_ids = ids, .sr_code = code, .sr_n = n};
	pthread_t t[8];
	double *v = calloc(n, sizeof(double)), t0 = ms_now();
	int nv = 0, asked = 0;
	struct stats st;

	r.sr_ms = calloc(n, sizeof(double));
	if (!v || !r.sr_ms)
		goto out;
	progress("scale: one execution in each of %d %s contexts", n, what);
	pthread_mutex_init(&r.sr_lock, NULL);
	for (int i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, scale_run_worker, &r);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&r.sr_lock);
	for (int i = 0; i < n; i++)
		if (ids[i]) {
			asked++;
			v[nv++] = r.sr_ms[i];
		}
	stats_of(v, nv, &st);
	table_add("10 scale",
	          fmt("one execution in each of %d %s contexts (8 at once)", asked, what),
	          fmt("%.0f ms", st.st_p50), fmt("max %.0f ms", st.st_max), NULL,
	          fmt("all answer: %s (%d of %d)",
	              r.sr_ok == asked && asked == n ? "met" : "MISSED", r.sr_ok, n));
	table_detail("%.1f s in all; %s%s", ms_since(t0) / 1000, scale_load(),
	             r.sr_bad ? fmt("; first wrong: %s", r.sr_first_bad) : "");
out:
	free(v);
	free(r.sr_ms);
}

/* the median of n values, in creation order (v is left as it is) */
static double
scale_median(const double *v, int n)
{
	double c[SCALE_MAX];
	struct stats st;

	memcpy(c, v, n * sizeof(double));
	stats_of(c, n, &st);
	return st.st_p50;
}

/* Per context, by kind: the PSS the n contexts added between before and after. */
static void
scale_cost(const char *what, int n, double avail0, double avail1, const struct tree *t0,
           const struct tree *t1, double last_ms, const double *ms)
{
	double sum = 0, per[K_N], v[SCALE_MAX], first, lastb;
	int nv = 0, c[K_N];
	struct stats st;

	for (int k = 0; k < K_N; k++) {
		per[k] = n ? (t1->t_pss_mb[k] - t0->t_pss_mb[k]) / n : 0;
		c[k] = t1->t_count[k] - t0->t_count[k];
		sum += k == K_BROKER || k == K_TEMPLATE || k == K_UPLINK ? 0 : per[k];
	}
	for (int i = 0; i < n - 1 && i < SCALE_MAX; i++) /* the last is on its own */
		if (ms[i] > 0)
			v[nv++] = ms[i];
	/* the first batch's and the last's medians: does creating slow down? */
	first = scale_median(v, nv < SCALE_BATCH ? nv : SCALE_BATCH);
	lastb =
	    nv > SCALE_BATCH ? scale_median(v + nv - SCALE_BATCH, SCALE_BATCH) : first;
	stats_of(v, nv, &st);
	table_add("10 scale",
	          fmt("%d idle %s contexts: what each further one costs", n, what), NULL,
	          fmt("%.1f MiB of MemAvailable", n ? (avail0 - avail1) / n : 0), NULL,
	          "<= 12 MB");
	table_detail(
	    "PSS each %.1f MB: kernel %.1f (%d processes), pasta %.1f (%d), proxy "
	    "%.2f (%d), proxy helpers %.2f (%d), box init %.2f (%d); broker +%.1f "
	    "KB each, template %+.1f MB in all; MemAvailable %.0f -> %.0f MB; %s",
	    sum, per[K_KERNEL], c[K_KERNEL], per[K_PASTA], c[K_PASTA], per[K_PROXY],
	    c[K_PROXY], per[K_HELPER], c[K_HELPER], per[K_INIT], c[K_INIT],
	    per[K_BROKER] * 1024, t1->t_pss_mb[K_TEMPLATE] - t0->t_pss_mb[K_TEMPLATE],
	    avail0, avail1, scale_load());
	/* the uplink: once for all boxes, spread over those alive (contexts and the
	 * pool's) */
	int boxes = t1->t_count[K_PROXY];
	table_add("10 scale",
	          fmt("the boxes' shared uplink, with %d %s contexts: once, and per box",
	              n, what),
	          NULL,
	          t1->t_count[K_UPLINK]
	              ? fmt("%.1f MB once, %.2f MB per box", t1->t_pss_mb[K_UPLINK],
	                    boxes ? t1->t_pss_mb[K_UPLINK] / boxes : 0)
	              : "none (a pasta per box)",
	          NULL, NULL);
	if (t1->t_count[K_UPLINK])
		table_detail(
		    "PSS of the uplink's %d processes (sandcell-proxy --uplink-serve, "
		    "its namespace's holder, pasta's minder and pasta) %.1f MB, "
		    "%+.1f MB since the %d contexts came, spread over the %d boxes "
		    "alive (contexts and warm pool); not in the PSS each above",
		    t1->t_count[K_UPLINK], t1->t_pss_mb[K_UPLINK],
		    t1->t_pss_mb[K_UPLINK] - t0->t_pss_mb[K_UPLINK], n, boxes);
	char km[256] = "";
	for (int i = 0; i < 5; i++)
		snprintf(km + strlen(km), sizeof(km) - strlen(km), "%s%s %+.2f",
		         i ? ", " : "", scale_meminfo[i],
		         n ? (t1->t_mem[i] - t0->t_mem[i]) / 1024.0 / n : 0);
	table_add(
	    "10 scale",
	    fmt("%d idle %s contexts: the kernel, and memory no PSS shows", n, what),
	    NULL, fmt("kernel USS %.1f MB", n ? (t1->t_kuss_mb - t0->t_kuss_mb) / n : 0),
	    NULL, NULL);
	table_detail(
	    "each kernel: USS %.1f MB, %.1f threads; the machine's own memory per "
	    "context, MB: %s",
	    n ? (t1->t_kuss_mb - t0->t_kuss_mb) / n : 0,
	    n ? (t1->t_kthreads - t0->t_kthreads) / (double)n : 0, km);
	table_add("10 scale",
	          fmt("creating the %s contexts: the last one alone (from the pool if it "
	              "has one)",
	              what),
	          last_ms >= 0 ? fmt("%.0f ms", last_ms) : "failed",
	          fmt("the others %.0f ms p50, %.0f max (%d at once)", st.st_p50,
	              st.st_max, SCALE_CONC),
	          NULL, NULL);
	table_detail("median of the first %d created %.0f ms, of the last %d %.0f ms",
	             SCALE_BATCH, first, SCALE_BATCH, lastb);
}

/* The same n contexts' PSS by kind once idle (after scale_idle_cpu's wait):
 * what a context holds when nothing has happened in it for a while. */
static void
scale_idle_pss(const char *what, int n, const struct tree *t0, const struct tree *t2)
{
	double per[K_N], sum = 0;

	if (!n)
		return;
	for (int k = 0; k < K_N; k++) {
		per[k] = (t2->t_pss_mb[k] - t0->t_pss_mb[k]) / n;
		sum += k == K_BROKER || k == K_TEMPLATE ? 0 : per[k];
	}
	table_add("10 scale",
	          fmt("%d %s contexts, idle %d s: PSS each", n, what,
	              SCALE_QUIET_S + SCALE_IDLE_S),
	          NULL, fmt("%.1f MB", sum), NULL, NULL);
	table_detail(
	    "kernel %.1f (USS %.1f), proxy %.2f, proxy helpers %.2f, box init %.2f, "
	    "pasta %.1f",
	    per[K_KERNEL], (t2->t_kuss_mb - t0->t_kuss_mb) / n, per[K_PROXY],
	    per[K_HELPER], per[K_INIT], per[K_PASTA]);
}

/* The soft RLIMIT_NOFILE of a process, or -1. */
static long
scale_nofile(pid_t pid)
{
	char path[64], line[256];
	long soft = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Max open files %ld", &soft) == 1)
			break;
	fclose(f);
	return soft;
}

/* SCALE_N Python contexts on a broker with the defaults. */
static void
scale_python(const struct broker *b, int n)
{
	static struct tree t0, t1, t2;
	char **ids = calloc(n, sizeof(char *));
	const char **code = calloc(n, sizeof(char *));
	double *ms = calloc(n, sizeof(double)), last, a0, a1;
	int asked, ok = 0;

	if (!ids || !code || !ms)
		goto out;
	scale_settle(b);
	a0 = scale_avail_mb();
	scale_tree(b->b_pid, true, &t0);
	asked = scale_create(b, "python", n, SCALE_PY_MB, ids, ms, &last);
	for (int i = 0; i < asked; i++) {
		ok += ids[i] != NULL;
		code[i] = scale_code[0].sl_code;
	}
	if (!ok)
		goto del;
	if (n >= SCALE_MAX && asked == n) { /* one over the limit is refused */
		struct resp r;
		http(b->b_url, "POST", "/contexts", "{\"language\":\"python\"}", &r, 60);
		table_note("scale: context %d of --max-contexts %d: HTTP %ld", n + 1,
		           SCALE_MAX, r.r_status);
		resp_free(&r);
	}
	scale_settle(b);
	a1 = scale_avail_mb();
	scale_tree(b->b_pid, true, &t1);
	scale_cost(fmt("Python (%d asked)", asked), ok, a0, a1, &t0, &t1, last, ms);
	table_add("10 scale", fmt("the broker with %d Python contexts", ok), NULL,
	          fmt("%d fds of %ld", proc_fd_count(b->b_pid), scale_nofile(b->b_pid)),
	          NULL, NULL);
	table_detail("VmRSS %.1f MB, %lld threads", proc_rss_kb(b->b_pid) / 1024.0,
	             proc_stat_field(b->b_pid, 20));
	scale_idle_cpu(b->b_pid, "Python", ok);
	scale_tree(b->b_pid, true, &t2);
	scale_idle_pss("Python", ok, &t0, &t2);
	scale_answer(b->b_url, ids, code, asked, "Python");
del:
	progress("scale: deleting the Python contexts");
	hc_delete_all(b->b_url, ids, asked);
out:
	free(ids);
	free(code);
	free(ms);
}

/* The languages of GET /languages that scale_code knows; how many. */
static int
scale_languages(const char *base, int *which)
{
	json_t *j = NULL;
	struct resp r;
	int n = 0;

	if (http(base, "GET", "/languages", NULL, &r, 10) == 0 && r.r_status == 200)
		j = json_loadb(r.r_body, r.r_len, 0, NULL);
	resp_free(&r);
	for (size_t c = 0; c < sizeof(scale_code) / sizeof(scale_code[0]); c++) {
		size_t i;
		json_t *e;
		json_array_foreach(
		    j, i, e) if (!strcmp(json_string_value(json_object_get(e, "language"))
		                             ?: "",
		                         scale_code[c].sl_lang)) which[n++] = c;
	}
	json_decref(j);
	return n;
}

/* SCALE_MIX of each language (as many as fit in SCALE_MAX together). */
static void
scale_mix(const struct broker *b, int each)
{
	static struct tree t0, t1;
	int which[8], nl = scale_languages(b->b_url, which), total = 0, ok = 0;
	char *ids[SCALE_MAX] = {0}, names[128] = "";
	const char *code[SCALE_MAX] = {0};
	double ms[SCALE_MAX] = {0};

	if (!nl) {
		table_note("scale: GET /languages listed none to mix");
		return;
	}
	if (each * nl > SCALE_MAX) {
		table_note("scale: %d languages; %d of each would pass --max-contexts "
		           "%d: %d of each",
		           nl, each, SCALE_MAX, SCALE_MAX / nl);
		each = SCALE_MAX / nl;
	}
	/* as many of each as the memory holds, all of them estimated at once */
	double one = 0, avail = scale_avail_mb();
	for (int l = 0; l < nl; l++)
		one += scale_code[which[l]].sl_mb;
	if (each * one > avail - SCALE_RESERVE_MB) {
		int fit = (avail - SCALE_RESERVE_MB) / one;
		table_note(
		    "scale: MemAvailable %.0f MB holds %d of each language (one of "
		    "each ~%.0f MB), not %d",
		    avail, fit > 0 ? fit : 0, one, each);
		each = fit;
	}
	if (each <= 0)
		return;
	for (int l = 0; l < nl; l++) {
		const char *lang = scale_code[which[l]].sl_lang;
		double last, a0, a1;
		int asked;
		scale_settle(b);
		a0 = scale_avail_mb();
		scale_tree(b->b_pid, true, &t0);
		asked = scale_create(b, lang, each, scale_code[which[l]].sl_mb,
		                     ids + total, ms + total, &last);
		int got = 0;
		for (int i = total; i < total + asked; i++) {
			got += ids[i] != NULL;
			code[i] = scale_code[which[l]].sl_code;
		}
		scale_settle(b);
		a1 = scale_avail_mb();
		scale_tree(b->b_pid, true, &t1);
		if (got)
			scale_cost(lang, got, a0, a1, &t0, &t1, last, ms + total);
		total += asked;
		ok += got;
		snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
		         l ? ", " : "", lang);
	}
	scale_idle_cpu(b->b_pid, fmt("mixed (%s)", names), ok);
	scale_answer(b->b_url, ids, code, total, fmt("mixed (%s)", names));
	progress("scale: deleting the mixed contexts");
	hc_delete_all(b->b_url, ids, total);
}

void
scale_bench(void)
{
	static char extra[512];
	const char *args[20] = {"--no-default-context"}, *e = getenv("SCALE_ARGS");
	int n = scale_env("SCALE_N", SCALE_MAX), each = scale_env("SCALE_MIX", 64);
	double avail = scale_avail_mb();
	struct broker b;

	if (n > SCALE_MAX)
		n = SCALE_MAX;
	if (avail < 0 || avail - n * SCALE_PY_MB < SCALE_RESERVE_MB) {
		table_note(
		    "scale: not started: MemAvailable %.0f MB; %d Python contexts at "
		    "~%.0f "
		    "MB each need %.0f MB and %.0f MB left to the rest of the machine",
		    avail, n, SCALE_PY_MB, n * SCALE_PY_MB, SCALE_RESERVE_MB);
		return;
	}
	/* SCALE_ARGS: more flags for the broker, split at spaces */
	snprintf(extra, sizeof(extra), "%s", e ? e : "");
	int na = 1;
	for (char *tok = strtok(extra, " "); tok && na < 19; tok = strtok(NULL, " "))
		args[na++] = tok;
	progress(
	    "scale: a broker with the defaults (--no-default-context%s%s); %d Python "
	    "contexts, then %d of each language (MemAvailable %.0f MB, %s)",
	    e && *e ? " " : "", e ? e : "", n, each, avail, scale_load());
	if (broker_start(&b, args) < 0) {
		table_note("scale: the broker did not start");
		return;
	}
	if (n > 0)
		scale_python(&b, n);
	if (each > 0)
		scale_mix(&b, each);
	broker_stop(&b);
}
