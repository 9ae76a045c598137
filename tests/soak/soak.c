/*
 * soak.c — make soak: clients run numbered output against a real broker
 * while faults are injected at random (kernel SIGKILL, proxy SIGKILL,
 * interrupts, restarts, clients that vanish). At the end: every stream that
 * completed had all of its own lines, in order; every stream that failed
 * ended with an error line and end_of_execution; the server still answers.
 * SOAK_MINUTES (default 2) sets the length. Then SOAK_CYCLES (default 40)
 * contexts are created, used and deleted: the broker's open fds and resident
 * memory must come back to what they were.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "../integration/harness.h"

#define NCTX 4
#define NCLIENTS 8

static struct broker b;
static char *ctx[NCTX];
static atomic_bool stop;
static atomic_int n_ok, n_failed, n_abandoned, n_bad, n_faults;

/* The last faults, said with a broken stream: which context, what, when. */
#define NLAST 8
static const char *const fault_names[] = {"kill kernel", "kill proxy", "interrupt", "restart"};
static struct {
	double at_ms;
	int ctx, what;
} last_faults[NLAST];
static pthread_mutex_t last_mu = PTHREAD_MUTEX_INITIALIZER;

static void
say_last_faults(void)
{
	pthread_mutex_lock(&last_mu);
	int n = atomic_load(&n_faults);
	for (int i = n > NLAST ? n - NLAST : 0; i < n; i++)
		fprintf(stderr, "soak:   fault at %.0f ms: %s, context %d\n",
			last_faults[i % NLAST].at_ms, fault_names[last_faults[i % NLAST].what],
			last_faults[i % NLAST].ctx);
	pthread_mutex_unlock(&last_mu);
}

static void
check_stream(json_t *l, int tag, int c, int lines, bool abandoned, double t0)
{
	json_t *end = line_of(l, "end_of_execution", 0), *err = line_of(l, "error", 0);
	int next = 0;

	if (abandoned) {
		atomic_fetch_add(&n_abandoned, 1);
		return;
	}
	/*
	 * stdout lines are ours, in order, with no gap (a line may span chunks).
	 * A stream that ends in an error may end in the middle of a line: the
	 * kernel died, or was interrupted, between print()'s writes.
	 */
	char *out = stdout_of(l);
	for (const char *p = out; *p;) {
		int gt, gi;
		char want[32];
		snprintf(want, sizeof(want), "%d %d", tag, next);
		if (err && !strchr(p, '\n') && !strncmp(p, want, strlen(p)))
			break;
		if (sscanf(p, "%d %d", &gt, &gi) != 2 || gt != tag || gi != next) {
			fprintf(stderr,
				"soak: stream %d (context %d, %.0f-%.0f ms): unexpected line '%.40s' "
				"(want %d); %zu bytes of stdout, ends '%s', error %s %s\n",
				tag, c, t0, ms_now(), p, next, strlen(out),
				out + (strlen(out) > 60 ? strlen(out) - 60 : 0), error_name(l),
				error_value(l));
			say_last_faults();
			atomic_fetch_add(&n_bad, 1);
			free(out);
			return;
		}
		next++;
		p = strchr(p, '\n');
		if (!p)
			break;
		p++;
	}
	free(out);
	if (!end) {
		fprintf(stderr, "soak: stream %d: no end_of_execution\n", tag);
		atomic_fetch_add(&n_bad, 1);
	} else if (err) {
		atomic_fetch_add(&n_failed, 1); /* ended by a fault, said so */
	} else if (next != lines) {
		fprintf(stderr, "soak: stream %d: %d of %d lines and no error\n", tag, next, lines);
		atomic_fetch_add(&n_bad, 1);
	} else {
		atomic_fetch_add(&n_ok, 1);
	}
}

static void *
client(void *arg)
{
	int id = (int)(long)arg;
	unsigned seed = id * 7919;

	for (int k = 0; !atomic_load(&stop); k++) {
		int tag = id * 1000000 + k, lines = 5 + rand_r(&seed) % 50;
		bool vanish = rand_r(&seed) % 10 == 0;
		char body[512];
		long st;
		int c = rand_r(&seed) % NCTX;
		snprintf(body, sizeof(body),
			 "{\"context_id\":\"%s\",\"code\":\"import time\\nfor i in range(%d):\\n"
			 "    print(%d, i)\\n    if i %% 10 == 0: time.sleep(0.01)\"}",
			 ctx[c], lines, tag);
		double t0 = ms_now();
		json_t *l = execute(b.b_url, body, &st, vanish ? 50 : 60000);
		if (!l) {
			if (st != 429)
				atomic_fetch_add(&n_failed, 1);
			continue;
		}
		check_stream(l, tag, c, lines, line_of(l, "_client_timeout", 0) != NULL, t0);
		json_decref(l);
	}
	return NULL;
}

static void *
faults(void *arg)
{
	unsigned seed = 42;

	(void)arg;
	while (!atomic_load(&stop)) {
		usleep(1000000 + rand_r(&seed) % 2000000);
		int c = rand_r(&seed) % NCTX, what = rand_r(&seed) % 4;
		const char *id = ctx[c];
		char path[128];
		struct resp r;
		pid_t pid;
		pthread_mutex_lock(&last_mu);
		int n = atomic_load(&n_faults);
		last_faults[n % NLAST].at_ms = ms_now();
		last_faults[n % NLAST].ctx = c;
		last_faults[n % NLAST].what = what;
		pthread_mutex_unlock(&last_mu);
		switch (what) {
		case 0:
			if ((pid = context_pid(b.b_url, id, "kernel_pid")) > 0)
				kill(pid, SIGKILL);
			break;
		case 1:
			if ((pid = context_pid(b.b_url, id, "proxy_pid")) > 0)
				kill(pid, SIGKILL);
			break;
		case 2:
			snprintf(path, sizeof(path), "/contexts/%s/interrupt", id);
			http(b.b_url, "POST", path, NULL, &r, 10);
			resp_free(&r);
			break;
		case 3:
			snprintf(path, sizeof(path), "/contexts/%s/restart", id);
			http(b.b_url, "POST", path, NULL, &r, 60);
			resp_free(&r);
			break;
		}
		atomic_fetch_add(&n_faults, 1); /* only this thread adds */
	}
	return NULL;
}

/* One context created, used and deleted; false if any step failed. */
static bool
cycle(void)
{
	char *id = context_new(b.b_url, "python", NULL), path[128];
	struct resp r;
	bool ok;

	if (!id)
		return false;
	json_t *l = run(b.b_url, id, "print('cycle')");
	char *out = l ? stdout_of(l) : NULL;
	ok = out && !strcmp(out, "cycle\n");
	free(out);
	json_decref(l);
	snprintf(path, sizeof(path), "/contexts/%s", id);
	ok = http(b.b_url, "DELETE", path, NULL, &r, 30) == 0 && r.r_status == 200 && ok;
	resp_free(&r);
	free(id);
	return ok;
}

/*
 * The broker's fds once deleted contexts are freed and the warm pool is
 * refilled: at most limit, or unchanged for a second; waits up to 20 s.
 */
static int
fds_settled(int limit)
{
	int n = proc_fd_count(b.b_pid), same = 0;

	for (int i = 0; n > limit && same < 10 && i < 200; i++) {
		usleep(100000);
		int m = proc_fd_count(b.b_pid);
		same = m == n ? same + 1 : 0;
		n = m;
	}
	return n;
}

/*
 * Create/use/delete cycles: a leak of one fd or a few KiB per context shows
 * here. The first cycles warm up (the allocator's arenas, nng's threads).
 */
static int
cycles(void)
{
	const char *m = getenv("SOAK_CYCLES");
	int n = m ? atoi(m) : 40, failed = 0;

	for (int i = 0; i < 5; i++)
		failed += !cycle();
	int fd0 = fds_settled(0);
	long rss0 = proc_rss_kb(b.b_pid);
	for (int i = 0; i < n; i++)
		failed += !cycle();
	int fd1 = fds_settled(fd0 + 4);
	long rss1 = proc_rss_kb(b.b_pid);
	long rss_margin = 2048 + rss0 / 10;
	bool ok = !failed && fd1 <= fd0 + 4 && rss1 >= 0 && rss1 <= rss0 + rss_margin;

	printf("soak: %d create/use/delete cycles (%d failed): broker fds %d -> %d, "
	       "RSS %ld -> %ld KiB (margin %ld): %s\n",
	       n, failed, fd0, fd1, rss0, rss1, rss_margin, ok ? "flat" : "LEAK");
	return ok ? 0 : 1;
}

int
main(void)
{
	const char *m = getenv("SOAK_MINUTES");
	double minutes = m ? atof(m) : 2;
	const char *args[] = {"--no-default-context", "--log-level", "warn", NULL};
	pthread_t cl[NCLIENTS], ft;

	curl_global_init(CURL_GLOBAL_ALL);
	if (broker_start(&b, args) < 0)
		return 1;
	for (int i = 0; i < NCTX; i++)
		if (!(ctx[i] = context_new(b.b_url, "python", NULL)))
			return 1;
	printf("soak: %.1f min, %d clients over %d contexts, faults every 1-3 s\n", minutes,
	       NCLIENTS, NCTX);
	for (long i = 0; i < NCLIENTS; i++)
		pthread_create(&cl[i], NULL, client, (void *)i);
	pthread_create(&ft, NULL, faults, NULL);
	usleep((useconds_t)(minutes * 60e6));
	atomic_store(&stop, true);
	pthread_join(ft, NULL);
	for (int i = 0; i < NCLIENTS; i++)
		pthread_join(cl[i], NULL);

	json_t *l = run(b.b_url, ctx[0], "print('still serving')");
	char *out = l ? stdout_of(l) : NULL;
	bool alive = out && !strcmp(out, "still serving\n");
	printf("soak: %d faults; streams: %d complete, %d ended with an error line, "
	       "%d abandoned by their client, %d BROKEN; server %s\n",
	       n_faults, n_ok, n_failed, n_abandoned, n_bad, alive ? "answering" : "NOT answering");
	free(out);
	json_decref(l);
	int leak = cycles();
	broker_stop(&b);
	printf("%d passed, %d failed\n", n_ok + n_failed + n_abandoned, n_bad + !alive + leak);
	return n_bad || !alive || leak;
}
