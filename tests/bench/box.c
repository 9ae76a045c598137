/*
 * box.c — (9) what the sandbox costs: context creation (cold and from the
 * warm pool), /execute latency and throughput, each on a broker with the
 * sandbox (the default) and one with --no-sandbox, side by side in one run,
 * alternating request by request so that both see the same machine.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define BOX_CREATES 20
#define BOX_REFILL_MS 2500
#define BOX_LAT_RUNS 300
#define BOX_TP_CLIENTS 4
#define BOX_TP_MS 3000
#define BOX_TP_ROUNDS 6

static const char *const box_modes[2] = {"sandbox", "--no-sandbox"};

static int
box_start(struct broker b[2], const char *pool)
{
	/* kernels start cold on both: the template (sandbox only) has its own section */
	const char *on[] = {"--pool", pool, "--max-queue", "256", "--no-template", NULL, NULL};
	const char *off[] = {"--pool", pool, "--max-queue", "256", "--no-sandbox", NULL};

	if (broker_start(&b[0], on) < 0)
		return -1;
	if (broker_start(&b[1], off) < 0) {
		broker_stop(&b[0]);
		return -1;
	}
	return 0;
}

/* One timed POST /contexts (answered once its kernel is ready); id in *id. */
static double
box_create(const char *url, char **id)
{
	double ms = -1;

	*id = NULL;
	if (hc_create_parallel(url, 1, 1, id, &ms) != 1)
		return -1;
	return ms;
}

/*
 * One row. The ratio is the median of the ratios of neighbouring runs (one
 * with, one without, taken in turn) when there are such pairs, which cancels
 * what drifts in between better than the ratio of the two medians.
 */
static void
box_row(const char *figure, const struct stats *on, const struct stats *off, bool higher_better,
	double *pairs, int npairs)
{
	double ratio = off->st_p50 > 0 ? on->st_p50 / off->st_p50 : 0;
	struct stats pr;

	if (npairs > 0) {
		stats_of(pairs, npairs, &pr);
		ratio = pr.st_p50;
	}
	double cost = higher_better ? (ratio > 0 ? 1 / ratio - 1 : 0) : ratio - 1;

	table_add("9 sandbox", figure, fmt("%.2f", on->st_p50),
		  fmt("%.2f with --no-sandbox", off->st_p50), fmt("%.3f", ratio),
		  fmt("adds <= 5%%: %s (%+.1f%%)%s", cost <= 0.05 ? "met" : "MISSED", cost * 100,
		      npairs > 0 ? ", median of pairs" : ""));
}

static void
box_creation(const char *what, const char *pool, int pause_ms)
{
	struct broker b[2];
	double v[2][BOX_CREATES];
	char *ids[2][BOX_CREATES] = {{0}};
	int n[2] = {0, 0};
	struct stats st[2];

	progress("sandbox: context creation, %s", what);
	if (box_start(b, pool) < 0) {
		table_note("sandbox: brokers did not start (creation, %s)", what);
		return;
	}
	if (pause_ms)
		usleep(pause_ms * 1000 * 2); /* both pools full */
	double pairs[BOX_CREATES];
	int np = 0;
	for (int i = 0; i < BOX_CREATES; i++) {
		double ms[2];
		for (int k = 0; k < 2; k++) {
			int m = (i + k) % 2; /* who goes first alternates: drift cancels */
			ms[m] = box_create(b[m].b_url, &ids[m][i]);
			if (ms[m] >= 0)
				v[m][n[m]++] = ms[m];
			if (pause_ms)
				usleep(pause_ms * 1000);
		}
		if (ms[0] > 0 && ms[1] > 0)
			pairs[np++] = ms[0] / ms[1];
	}
	for (int m = 0; m < 2; m++) {
		stats_of(v[m], n[m], &st[m]);
		hc_delete_all(b[m].b_url, ids[m], BOX_CREATES);
		broker_stop(&b[m]);
	}
	if (n[0] && n[1])
		box_row(fmt("context creation, %s, ms (%d runs)", what, n[0]), &st[0], &st[1],
			false, pairs, np);
}

struct box_client {
	const char *bc_url;
	char *bc_body;
	double bc_end;
	long bc_done;
	pthread_t bc_thread;
};

static void *
box_client_run(void *arg)
{
	struct box_client *c = arg;
	struct hc h;

	if (hc_init(&h, c->bc_url) < 0)
		return NULL;
	while (ms_now() < c->bc_end)
		if (hc_exec(&h, c->bc_body, NULL) == 0)
			c->bc_done++;
	hc_free(&h);
	return NULL;
}

/* Executions per second of BOX_TP_CLIENTS clients, each on a context of its own. */
static double
box_throughput(const char *url, char **ids)
{
	struct box_client c[BOX_TP_CLIENTS];
	long done = 0;
	double t0 = ms_now();

	for (int i = 0; i < BOX_TP_CLIENTS; i++) {
		c[i] = (struct box_client){.bc_url = url, .bc_body = hc_body("x=1", ids[i]),
					   .bc_end = t0 + BOX_TP_MS};
		pthread_create(&c[i].bc_thread, NULL, box_client_run, &c[i]);
	}
	for (int i = 0; i < BOX_TP_CLIENTS; i++) {
		pthread_join(c[i].bc_thread, NULL);
		done += c[i].bc_done;
		free(c[i].bc_body);
	}
	return done * 1000.0 / ms_since(t0);
}

static void
box_execution(void)
{
	struct broker b[2];
	struct hc h[2];
	char *ids[2][BOX_TP_CLIENTS] = {{0}}, *body[2];
	double lat[2][BOX_LAT_RUNS], tp[2][BOX_TP_ROUNDS];
	int n[2] = {0, 0};
	struct stats st[2], tps[2];

	progress("sandbox: /execute latency and throughput");
	if (box_start(b, "0") < 0) {
		table_note("sandbox: brokers did not start (execution)");
		return;
	}
	for (int m = 0; m < 2; m++) {
		for (int i = 0; i < BOX_TP_CLIENTS; i++)
			box_create(b[m].b_url, &ids[m][i]);
		body[m] = hc_body("x=1", ids[m][0]);
		hc_init(&h[m], b[m].b_url);
		for (int i = 0; i < 20; i++) /* warm-up */
			hc_exec(&h[m], body[m], NULL);
	}
	double pairs[BOX_LAT_RUNS];
	int np = 0;
	for (int i = 0; i < BOX_LAT_RUNS; i++) {
		double ms[2] = {-1, -1};
		for (int k = 0; k < 2; k++) {
			int m = (i + k) % 2;
			if (hc_exec(&h[m], body[m], &ms[m]) == 0)
				lat[m][n[m]++] = ms[m];
			else
				ms[m] = -1;
		}
		if (ms[0] > 0 && ms[1] > 0)
			pairs[np++] = ms[0] / ms[1];
	}
	double tpairs[BOX_TP_ROUNDS];
	for (int r = 0; r < BOX_TP_ROUNDS; r++) { /* on, off; off, on; ... */
		for (int k = 0; k < 2; k++) {
			int m = (r + k) % 2;
			tp[m][r] = box_throughput(b[m].b_url, ids[m]);
		}
		tpairs[r] = tp[0][r] / tp[1][r];
	}
	for (int m = 0; m < 2; m++) {
		stats_of(lat[m], n[m], &st[m]);
		stats_of(tp[m], BOX_TP_ROUNDS, &tps[m]);
		hc_free(&h[m]);
		free(body[m]);
		hc_delete_all(b[m].b_url, ids[m], BOX_TP_CLIENTS);
		broker_stop(&b[m]);
	}
	if (n[0] && n[1]) {
		box_row(fmt("POST /execute x=1, p50 ms (%d runs)", n[0]), &st[0], &st[1], false,
			pairs, np);
		struct stats p99[2] = {{.st_p50 = st[0].st_p99}, {.st_p50 = st[1].st_p99}};
		box_row("  the same, p99 ms", &p99[0], &p99[1], false, NULL, 0);
	}
	if (tps[0].st_p50 > 0 && tps[1].st_p50 > 0)
		box_row(fmt("throughput x=1, %d clients on %d contexts, exec/s", BOX_TP_CLIENTS,
			    BOX_TP_CLIENTS),
			&tps[0], &tps[1], true, tpairs, BOX_TP_ROUNDS);
}

void
box_bench(void)
{
	box_creation("cold", "0", 0);
	box_creation("from the warm pool", "python=1", BOX_REFILL_MS);
	box_execution();
	table_note("sandbox rows: the first value with the sandbox (the default), the second "
		   "with %s; both brokers run at once and take requests in turn",
		   box_modes[1]);
}
