/*
 * template.c — section "template": Python kernels forked from the template
 * against cold starts (--no-template), in the same run, each on a broker of
 * its own with the default pool: 16 concurrent POST /contexts (slowest and
 * median), the first `import pandas` in a fresh context, and the PSS of an
 * idle fresh kernel (smaps_rollup) while the 16 contexts live.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define TPL_BURST 16
#define TPL_SAMPLES 5 /* contexts of the burst whose import and PSS are measured */

static double
stdout_ms(const char *base, const char *id, const char *code)
{
	json_t *l = run(base, id, code);
	char *out = stdout_of(l);
	double v = out && *out ? atof(out) : -1;

	free(out);
	json_decref(l);
	return v;
}

static bool
forked_ready(void *arg)
{
	const char *base = arg;
	char *id = context_new(base, "python", NULL);
	bool yes = false;

	if (id) {
		json_t *l = run(base, id, "import sys; print('pandas' in sys.modules)");
		char *out = stdout_of(l);
		yes = out && !strcmp(out, "True\n");
		free(out);
		json_decref(l);
		hc_delete_all(base, &id, 1);
	}
	return yes;
}

static void
template_on(bool on)
{
	const char *args[] = {"--no-default-context", on ? NULL : "--no-template", NULL};
	const char *what = on ? "template" : "cold (--no-template)";
	char *ids[TPL_BURST] = {0};
	double ms[TPL_BURST], imp[TPL_SAMPLES], pss[TPL_SAMPLES];
	struct stats st;
	struct broker b;
	int ni = 0, np = 0;

	progress("template: %s broker", what);
	if (broker_start(&b, args) < 0) {
		table_note("template (%s): broker did not start", what);
		return;
	}
	if (on && wait_until(forked_ready, (void *)b.b_url, 60000) < 0)
		table_note("template: no kernel was forked within 60 s");
	if (!on)
		usleep(3000 * 1000); /* as the other: the pool's kernel started */
	int ok = hc_create_parallel(b.b_url, TPL_BURST, TPL_BURST, ids, ms);
	stats_of(ms, ok, &st);
	if (ok)
		table_add(
		    "template", fmt("16 concurrent POST /contexts, %s (%d ok)", what, ok),
		    fmt("%.0f ms", st.st_p50), fmt("%.0f ms max", st.st_max), NULL,
		    on ? fmt("every one < 1 s: %s", st.st_max < 1000 ? "met" : "MISSED")
		       : NULL);
	for (int i = 0; i < TPL_BURST && ni < TPL_SAMPLES; i++)
		if (ids[i])
			imp[ni++] = stdout_ms(
			    b.b_url, ids[i],
			    "import time\nt = time.perf_counter()\nimport pandas\n"
			    "print((time.perf_counter() - t) * 1000)");
	stats_of(imp, ni, &st);
	if (ni)
		table_add(
		    "template", fmt("first import pandas in a fresh context, %s", what),
		    fmt("%.1f ms", st.st_p50), fmt("%.1f ms max", st.st_max), NULL,
		    on ? fmt("< 50 ms: %s", st.st_p50 < 50 ? "met" : "MISSED") : NULL);
	/* idle fresh kernels (the ones that imported nothing) */
	for (int i = TPL_SAMPLES; i < TPL_BURST && np < TPL_SAMPLES; i++) {
		pid_t k = ids[i] ? context_pid(b.b_url, ids[i], "kernel_pid") : 0;
		long kb = k > 0 ? proc_pss_kb(k) : -1;
		if (kb > 0)
			pss[np++] = kb / 1024.0;
	}
	stats_of(pss, np, &st);
	if (np)
		table_add(
		    "template",
		    fmt("PSS of an idle fresh kernel, %d contexts live, %s", ok, what),
		    fmt("%.1f MB", st.st_p50), fmt("%.1f MB max", st.st_max), NULL,
		    on ? fmt("< 30 MB: %s", st.st_p50 < 30 ? "met" : "MISSED") : NULL);
	hc_delete_all(b.b_url, ids, TPL_BURST);
	broker_stop(&b);
}

/* (template) forked kernels against cold ones, in the same run */
void
template_bench(void)
{
	template_on(false);
	template_on(true);
}
