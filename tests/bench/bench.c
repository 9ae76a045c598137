/*
 * bench.c — sandcell's benchmarks (make bench): figures printed as a table,
 * measured against a real broker, proxies and kernels in one run. Not a test:
 * nothing here passes or fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "../integration/harness.h"

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double
pct(double *v, int n, double p)
{
	qsort(v, n, sizeof(*v), cmp_double);
	int i = (int)(p * (n - 1) + 0.5);
	return v[i];
}

/*
 * Cancel: a client abandons a long execution (policy interrupt); how long from
 * its disconnect until the next request's first output line arrives.
 */
static void
bench_cancel(const char *url, int runs)
{
	double t[64];
	int n = 0;

	for (int i = 0; i < runs && i < 64; i++) {
		long st;
		json_t *l = execute(url, "{\"code\":\"import time\\ntime.sleep(30)\"}", &st, 300);
		json_decref(l);
		/* curl has closed the connection (the disconnect); "_ms" of the next
		 * request's lines counts from right after it */
		l = execute(url, "{\"code\":\"print('hello')\"}", &st, 30000);
		json_t *first = line_of(l, "stdout", 0);
		if (first)
			t[n++] = json_real_value(json_object_get(first, "_ms"));
		json_decref(l);
	}
	if (!n) {
		printf("cancel: no run produced output\n");
		return;
	}
	double max = 0;
	for (int i = 0; i < n; i++)
		max = t[i] > max ? t[i] : max;
	printf("%-52s %8.1f ms median %8.1f ms max  (%d runs)\n",
	       "disconnect -> next request's first output", pct(t, n, 0.5), max, n);
}

int
main(int argc, char **argv)
{
	struct broker b;
	const char *only = argc > 1 ? argv[1] : NULL;

	curl_global_init(CURL_GLOBAL_ALL);
	if (broker_start(&b, NULL) < 0) {
		fprintf(stderr, "bench: broker did not start\n");
		return 1;
	}
	printf("sandcell benchmarks (%s)\n", b.b_url);
	if (!only || !strcmp(only, "cancel"))
		bench_cancel(b.b_url, 20);
	broker_stop(&b);
	return 0;
}
