/*
 * tpsplit.c — section "tpsplit": why sandcell's kernels spend more CPU per
 * `x=1` in the throughput rows than raw kernels. The load of those rows (N
 * clients, one execution in flight each, taking the kernels round robin; a
 * kernel runs one execution at a time) is put, window after window, on:
 * raw kernels driven by the raw client (the baseline); sandcell's boxed
 * kernels (forked from the template) driven by the same raw client from the
 * proxy's network namespace, the broker and proxies left idle; the same
 * kernels through HTTP (broker and proxies); the same pair on a --no-sandbox
 * broker; raw kernels and the boxed ones through HTTP with each kernel's
 * threads pinned to one CPU (kernel i on CPU i modulo the CPUs), for what
 * cross-CPU wakes inside a kernel cost; and raw kernels beside a stand-in for
 * the hops (threads that wake often and spin, sharing nothing with them).
 * Per execution: the kernels' CPU (all their threads' run time, schedstat),
 * their context switches (voluntary, involuntary) and migrations between
 * CPUs (/proc/PID/task/TID/sched), the broker's and proxies' CPU, this
 * client's, and the machine's rescheduling and function-call IPIs
 * (/proc/interrupts). The raw client unsubscribes from a kernel's IOPub
 * while HTTP drives it, so that the kernel publishes to the proxy alone then.
 * Every figure is the median of TS_ROUNDS rounds; in each round the variants
 * take their windows in a turning order, so all see the same machine.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "bench.h"

#define TS_ROUNDS 5
#define TS_NK 16
#define TS_RAMP_MS 500
#define TS_WINDOW_MS 3000

enum {
	V_RAW,
	V_BOX_RAW,
	V_BOX_HTTP,
	V_NOBOX_RAW,
	V_NOBOX_HTTP,
	V_RAW_PIN,
	V_BOX_HTTP_PIN,
	V_RAW_BURN,
	V_RAW_OWN,
	V_N
};
enum { G_RAW, G_BOX, G_NOBOX, G_N };

static const char *const ts_what[V_N] = {
    "raw kernels, raw client (baseline)",
    "sandcell's boxed kernels, raw client (broker, proxies idle)",
    "  the same kernels through HTTP (broker + proxies)",
    "sandcell's kernels --no-sandbox (cold), raw client",
    "  the same kernels through HTTP (broker + proxies)",
    "raw kernels, raw client, each kernel pinned to one CPU",
    "boxed kernels through HTTP, each kernel pinned to one CPU",
    "raw kernels, raw client, beside a stand-in for the hops",
    "raw kernels, a client thread of its own each (the goals' raw rows)",
};
static const int ts_group_of[V_N] = {G_RAW, G_BOX, G_BOX, G_NOBOX, G_NOBOX,
                                     G_RAW, G_BOX, G_RAW, G_RAW};
static const bool ts_http[V_N] = {
    [V_BOX_HTTP] = true, [V_NOBOX_HTTP] = true, [V_BOX_HTTP_PIN] = true};
static const bool ts_pinned[V_N] = {[V_RAW_PIN] = true, [V_BOX_HTTP_PIN] = true};

static const struct {
	int s_clients, s_nk;
} ts_shape[] = {{8, 4}, {64, 4}, {8, 16}, {64, 16}};
#define TS_NSHAPE ((int)(sizeof(ts_shape) / sizeof(ts_shape[0])))

/* 16 kernels: raw ones, or a broker's contexts with the raw client attached. */
struct ts_group {
	struct raw_kernel g_k[TS_NK];
	void *g_zctx[TS_NK];
	pthread_mutex_t g_mu[TS_NK]; /* one execution at a time per kernel */
	char *g_ctx[TS_NK], *g_body[TS_NK];
	pid_t g_proxy[TS_NK];
	struct broker g_b;
	bool g_have_b, g_up, g_subscribed;
};

/* Sums over a set of processes' threads. */
struct ts_sample {
	double s_ns, s_vol, s_invol, s_mig;
};

/* One window's figures per execution. */
struct ts_fig {
	double f_us, f_vol, f_invol, f_mig, f_hops, f_client, f_ipi, f_rate;
};

static double
ts_field(const char *line, const char *key)
{
	size_t kl = strlen(key);
	const char *p;

	if (strncmp(line, key, kl) || (line[kl] != ' ' && line[kl] != ':'))
		return -1;
	p = strchr(line + kl, ':');
	return p ? strtod(p + 1, NULL) : -1;
}

/* Adds pid's threads' run time (schedstat), switches and migrations (sched). */
static void
ts_add(pid_t pid, struct ts_sample *s)
{
	char path[96], line[256];
	struct dirent *e;
	double v;
	DIR *d;

	if (pid <= 0)
		return;
	s->s_ns += tasks_ns(pid, NULL);
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if (!(d = opendir(path)))
		return;
	while ((e = readdir(d))) {
		int tid = atoi(e->d_name);
		FILE *f;
		if (tid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/sched", (int)pid, tid);
		if (!(f = fopen(path, "r")))
			continue;
		while (fgets(line, sizeof(line), f)) {
			if ((v = ts_field(line, "se.nr_migrations")) >= 0)
				s->s_mig += v;
			else if ((v = ts_field(line, "nr_voluntary_switches")) >= 0)
				s->s_vol += v;
			else if ((v = ts_field(line, "nr_involuntary_switches")) >= 0)
				s->s_invol += v;
		}
		fclose(f);
	}
	closedir(d);
}

static void
ts_kernels(const struct ts_group *g, int nk, struct ts_sample *s)
{
	*s = (struct ts_sample){0};
	for (int i = 0; i < nk; i++)
		ts_add(g->g_k[i].rk_pid, s);
}

/* The machine's inter-processor interrupts so far: rescheduling and function calls. */
static double
ts_ipis(void)
{
	char line[1024];
	double sum = 0;
	FILE *f = fopen("/proc/interrupts", "r");

	while (f && fgets(line, sizeof(line), f)) {
		char *p = line + strspn(line, " "), *end;
		if (strncmp(p, "RES:", 4) && strncmp(p, "CAL:", 4))
			continue;
		for (p += 4;; p = end) {
			double v = strtod(p, &end);
			if (end == p)
				break;
			sum += v;
		}
	}
	if (f)
		fclose(f);
	return sum;
}

/*
 * Every thread of the group's kernels on one CPU each (kernel i on CPU i
 * modulo the CPUs), or on all CPUs again.
 */
static void
ts_pin(const struct ts_group *g, bool on)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	char path[64];
	struct dirent *e;
	cpu_set_t set;
	DIR *d;

	for (int i = 0; i < TS_NK; i++) {
		CPU_ZERO(&set);
		for (long c = 0; c < ncpu; c++)
			if (!on || c == i % ncpu)
				CPU_SET(c, &set);
		snprintf(path, sizeof(path), "/proc/%d/task", (int)g->g_k[i].rk_pid);
		if (g->g_k[i].rk_pid <= 0 || !(d = opendir(path)))
			continue;
		while ((e = readdir(d)))
			if (atoi(e->d_name) > 0 &&
			    sched_setaffinity(atoi(e->d_name), sizeof(set), &set) < 0)
				table_note("tpsplit: sched_setaffinity of thread %s: %s",
				           e->d_name, strerror(errno));
		closedir(d);
	}
}

/* The broker's and proxies' run time, ns (0 for raw kernels). */
static double
ts_hops_ns(const struct ts_group *g, int nk)
{
	double ns = g->g_have_b ? tasks_ns(g->g_b.b_pid, NULL) : 0;

	for (int i = 0; g->g_have_b && i < nk; i++)
		ns += tasks_ns(g->g_proxy[i], NULL);
	return ns;
}

/* The raw client's driver: one of nclients, as tp_client_run over HTTP. */
struct ts_drv {
	struct ts_group *d_g;
	int d_nk, d_first;
	double d_start, d_end;
	long d_done, d_failed;
	pthread_t d_thread;
};

static void *
ts_drive(void *arg)
{
	struct ts_drv *d = arg;

	for (int j = d->d_first; ms_now() < d->d_end; j++) {
		int i = j % d->d_nk, rc;
		pthread_mutex_lock(&d->d_g->g_mu[i]);
		rc = raw_exec(&d->d_g->g_k[i], "x=1", NULL, 30000);
		pthread_mutex_unlock(&d->d_g->g_mu[i]);
		double t = ms_now();
		if (t < d->d_start || t > d->d_end)
			continue;
		if (rc == 0)
			d->d_done++;
		else
			d->d_failed++;
	}
	return NULL;
}

/*
 * The raw client's IOPub subscription to a group's kernels: on for its own
 * windows (then a kernel_info round trip until a status arrives, so the
 * subscription holds), off while HTTP drives them.
 */
static int
ts_subscribe(struct ts_group *g, bool on)
{
	int rc = 0;

	if (g->g_subscribed == on)
		return 0;
	for (int i = 0; i < TS_NK; i++) {
		zmq_setsockopt(g->g_k[i].rk_iopub, on ? ZMQ_SUBSCRIBE : ZMQ_UNSUBSCRIBE,
		               "", 0);
		if (on && raw_ready(&g->g_k[i], 30000) < 0)
			rc = -ETIMEDOUT;
	}
	g->g_subscribed = on;
	return rc;
}

/*
 * The stand-in for the hops: TS_BURNERS threads that wake every
 * TS_BURN_SLEEP_US and spin TS_BURN_SPIN_US, ~0.4 of a CPU in ~10000 wakes
 * a second (the broker and proxies take ~0.25 of a CPU in ~9 thread hops per
 * x=1 at ~1000 x=1 a second), touching nothing of the kernels'.
 */
#define TS_BURNERS 2
#define TS_BURN_SPIN_US 40
#define TS_BURN_SLEEP_US 160

static void *
ts_burn(void *arg)
{
	const double *end = arg;

	while (ms_now() < *end) {
		double until = ms_now() + TS_BURN_SPIN_US / 1000.0;
		while (ms_now() < until)
			;
		usleep(TS_BURN_SLEEP_US);
	}
	return NULL;
}

/* One window of variant v with nclients over the group's first nk kernels. */
static int
ts_window(struct ts_group *g, bool http, bool burn, int nclients, int nk,
          struct ts_fig *f)
{
	struct ts_drv *d = calloc(nclients, sizeof(*d));
	struct tp_client *c = calloc(nclients, sizeof(*c));
	double t0, burn_end, hops, client, ipi;
	pthread_t burner[TS_BURNERS];
	struct ts_sample a, b;
	long done = 0, failed = 0;

	*f = (struct ts_fig){0};
	if (!d || !c || ts_subscribe(g, !http) < 0) {
		free(d);
		free(c);
		return -1;
	}
	/* after the subscription's round trips: the window is the clients' */
	t0 = ms_now();
	burn_end = t0 + TS_RAMP_MS + TS_WINDOW_MS;
	for (int i = 0; i < nclients; i++) {
		double start = t0 + TS_RAMP_MS, end = start + TS_WINDOW_MS;
		if (http) {
			c[i] = (struct tp_client){.c_url = g->g_b.b_url,
			                          .c_bodies = g->g_body,
			                          .c_nctx = nk,
			                          .c_first = i,
			                          .c_start = start,
			                          .c_end = end};
			pthread_create(&c[i].c_thread, NULL, tp_client_run, &c[i]);
		} else {
			d[i] = (struct ts_drv){.d_g = g,
			                       .d_nk = nk,
			                       .d_first = i,
			                       .d_start = start,
			                       .d_end = end};
			pthread_create(&d[i].d_thread, NULL, ts_drive, &d[i]);
		}
	}
	for (int i = 0; burn && i < TS_BURNERS; i++)
		pthread_create(&burner[i], NULL, ts_burn, &burn_end);
	tp_sleep_until(t0 + TS_RAMP_MS); /* the samples bound what the clients count */
	ts_kernels(g, nk, &a);
	hops = -ts_hops_ns(g, nk);
	client = -tasks_ns(getpid(), NULL);
	ipi = -ts_ipis();
	tp_sleep_until(t0 + TS_RAMP_MS + TS_WINDOW_MS);
	ts_kernels(g, nk, &b);
	hops += ts_hops_ns(g, nk);
	client += tasks_ns(getpid(), NULL);
	ipi += ts_ipis();
	for (int i = 0; burn && i < TS_BURNERS; i++)
		pthread_join(burner[i], NULL);
	for (int i = 0; i < nclients; i++) {
		pthread_join(http ? c[i].c_thread : d[i].d_thread, NULL);
		done += http ? c[i].c_done : d[i].d_done;
		failed += http ? c[i].c_failed : d[i].d_failed;
	}
	free(d);
	free(c);
	if (failed)
		table_note("tpsplit: %ld executions failed in a window", failed);
	if (!done)
		return -1;
	f->f_us = (b.s_ns - a.s_ns) / 1e3 / done;
	f->f_vol = (b.s_vol - a.s_vol) / done;
	f->f_invol = (b.s_invol - a.s_invol) / done;
	f->f_mig = (b.s_mig - a.s_mig) / done;
	f->f_hops = hops / 1e3 / done;
	f->f_client = client / 1e3 / done;
	f->f_ipi = ipi / done;
	f->f_rate = done / (TS_WINDOW_MS / 1000.0);
	return 0;
}

struct ts_fork {
	const char *fk_url;
	char **fk_ctx;
};

static bool
ts_forked(void *arg)
{
	struct ts_fork *fk = arg;

	return kcpu_forked_ctx(fk->fk_url, fk->fk_ctx);
}

/* A broker's 16 contexts (forked from the template when boxed), attached. */
static int
ts_sandcell(struct ts_group *g, bool boxed)
{
	static const char *const args[2][8] = {
	    {"--no-sandbox", "--pool", "0", "--no-default-context", "--max-queue", "256",
	     NULL},
	    {"--pool", "0", "--no-default-context", "--max-queue", "256", NULL},
	};
	double ms[TS_NK];

	if (broker_start(&g->g_b, args[boxed]) < 0)
		return -1;
	g->g_have_b = true;
	if (boxed) {
		for (int i = 0; i < TS_NK; i++) {
			struct ts_fork fk = {g->g_b.b_url, &g->g_ctx[i]};
			if (wait_until(ts_forked, &fk, 120000) < 0) {
				table_note("tpsplit: context %d was not forked from the "
				           "template in 120 s",
				           i);
				return -1;
			}
		}
	} else if (hc_create_parallel(g->g_b.b_url, TS_NK, 8, g->g_ctx, ms) < TS_NK) {
		return -1;
	}
	for (int i = 0; i < TS_NK; i++) {
		g->g_body[i] = hc_body("x=1", g->g_ctx[i]);
		g->g_proxy[i] = hc_proxy_pid(g->g_b.b_url, g->g_ctx[i]);
		if (kcpu_attach(&g->g_k[i], &g->g_zctx[i], &g->g_b, g->g_ctx[i], boxed) <
		    0)
			return -1;
	}
	g->g_subscribed = true;
	return 0;
}

/*
 * 16 raw kernels, each with a ZeroMQ context (an I/O thread) of its own as
 * the raw client has on an attached kernel: the client differs in nothing.
 */
static int
ts_raw(struct ts_group *g)
{
	for (int i = 0; i < TS_NK; i++)
		if (!(g->g_zctx[i] = zmq_ctx_new()) ||
		    raw_spawn(&g->g_k[i], g->g_zctx[i], true) < 0)
			return -1;
	for (int i = 0; i < TS_NK; i++)
		if (raw_ready(&g->g_k[i], 120000) < 0)
			return -1;
	return 0;
}

static int
ts_start(struct ts_group *g, int which)
{
	int rc;

	for (int i = 0; i < TS_NK; i++)
		pthread_mutex_init(&g->g_mu[i], NULL);
	if (which == G_RAW)
		rc = ts_raw(g);
	else
		rc = ts_sandcell(g, which == G_BOX);
	g->g_subscribed = true;
	g->g_up = rc == 0;
	for (int i = 0; g->g_up && i < TS_NK; i++) /* first executions are slower */
		for (int j = 0; j < 20; j++)
			raw_exec(&g->g_k[i], "x=1", NULL, 30000);
	return rc;
}

static void
ts_stop(struct ts_group *g, int which)
{
	for (int i = 0; i < TS_NK; i++) {
		if (which == G_RAW) {
			raw_stop(&g->g_k[i]);
			if (g->g_zctx[i])
				zmq_ctx_term(g->g_zctx[i]);
		} else if (g->g_zctx[i])
			kcpu_detach(&g->g_k[i], g->g_zctx[i]);
		free(g->g_body[i]);
	}
	if (g->g_have_b) {
		hc_delete_all(g->g_b.b_url, g->g_ctx, TS_NK);
		broker_stop(&g->g_b);
	}
}

static void
ts_load(const char *when)
{
	double l[3];

	if (getloadavg(l, 3) == 3)
		table_note("tpsplit: load average %s %.2f %.2f %.2f", when, l[0], l[1],
		           l[2]);
}

void
tpsplit_bench(void)
{
	static struct ts_group g[G_N];
	static struct ts_fig f[TS_NSHAPE][V_N][TS_ROUNDS];
	double ratio[TS_ROUNDS], v[TS_ROUNDS];

	progress("tpsplit: 16 raw kernels, 16 boxed and 16 --no-sandbox contexts");
	for (int w = 0; w < G_N; w++)
		if (ts_start(&g[w], w) < 0)
			table_note("tpsplit: the %s kernels did not start or answer",
			           w == G_RAW   ? "raw"
			           : w == G_BOX ? "boxed"
			                        : "--no-sandbox");
	ts_load("before the rounds");
	for (int r = 0; r < TS_ROUNDS; r++)
		for (int s = 0; s < TS_NSHAPE; s++) {
			progress("tpsplit: round %d of %d, %d clients over %d kernels",
			         r + 1, TS_ROUNDS, ts_shape[s].s_clients,
			         ts_shape[s].s_nk);
			for (int j = 0; j < V_N; j++) {
				int m = (j + r + s) % V_N; /* who goes first turns */
				struct ts_group *x = &g[ts_group_of[m]];
				if (!x->g_up)
					continue;
				if (ts_pinned[m])
					ts_pin(x, true);
				ts_window(x, ts_http[m], m == V_RAW_BURN,
				          m == V_RAW_OWN ? ts_shape[s].s_nk
				                         : ts_shape[s].s_clients,
				          ts_shape[s].s_nk, &f[s][m][r]);
				if (ts_pinned[m])
					ts_pin(x, false);
			}
		}
	ts_load("after the rounds");
	for (int s = 0; s < TS_NSHAPE; s++)
		for (int m = 0; m < V_N; m++) {
			struct ts_fig *x = f[s][m];
#define TS_MED(field)                                                                    \
	({                                                                               \
		for (int r = 0; r < TS_ROUNDS; r++)                                      \
			v[r] = x[r].field;                                               \
		median_of(v, TS_ROUNDS);                                                 \
	})
			if (!g[ts_group_of[m]].g_up || TS_MED(f_us) <= 0)
				continue;
			for (int r = 0; r < TS_ROUNDS; r++)
				ratio[r] = f[s][V_RAW][r].f_us > 0
				               ? x[r].f_us / f[s][V_RAW][r].f_us
				               : 0;
			table_add("tpsplit",
			          fmt("%d clients over %d kernels: %s",
			              ts_shape[s].s_clients, ts_shape[s].s_nk,
			              ts_what[m]),
			          fmt("%.0f us", TS_MED(f_us)),
			          fmt("%.0f exec/s", TS_MED(f_rate)),
			          fmt("%.3f", median_of(ratio, TS_ROUNDS)), NULL);
			table_detail(
			    "per x=1, medians of %d windows: kernels' switches %.2f "
			    "voluntary + %.2f involuntary, migrations %.2f; broker "
			    "+ proxies %.0f us, client %.0f us; the machine's IPIs %.2f",
			    TS_ROUNDS, TS_MED(f_vol), TS_MED(f_invol), TS_MED(f_mig),
			    TS_MED(f_hops), TS_MED(f_client), TS_MED(f_ipi));
#undef TS_MED
		}
	table_note(
	    "tpsplit rows: p50 is the kernels' CPU per x=1 (all their threads' run "
	    "time), p99 the rate; vs raw the median of the rounds' ratios of CPU "
	    "per x=1 to the raw kernels' under the same load");
	for (int w = G_N - 1; w >= 0; w--)
		ts_stop(&g[w], w);
}
