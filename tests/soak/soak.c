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

static void
check_stream(json_t *l, int tag, int lines, bool abandoned)
{
	json_t *end = line_of(l, "end_of_execution", 0), *err = line_of(l, "error", 0);
	int next = 0;

	if (abandoned) {
		atomic_fetch_add(&n_abandoned, 1);
		return;
	}
	/* stdout lines are ours, in order, with no gap (a line may span chunks) */
	char *out = stdout_of(l);
	for (const char *p = out; *p;) {
		int gt, gi;
		if (sscanf(p, "%d %d", &gt, &gi) != 2 || gt != tag || gi != next) {
			fprintf(stderr, "soak: stream %d: unexpected line '%.40s' (want %d)\n", tag,
				p, next);
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
		snprintf(body, sizeof(body),
			 "{\"context_id\":\"%s\",\"code\":\"import time\\nfor i in range(%d):\\n"
			 "    print(%d, i)\\n    if i %% 10 == 0: time.sleep(0.01)\"}",
			 ctx[rand_r(&seed) % NCTX], lines, tag);
		json_t *l = execute(b.b_url, body, &st, vanish ? 50 : 60000);
		if (!l) {
			if (st != 429)
				atomic_fetch_add(&n_failed, 1);
			continue;
		}
		check_stream(l, tag, lines, line_of(l, "_client_timeout", 0) != NULL);
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
		const char *id = ctx[rand_r(&seed) % NCTX];
		char path[128];
		struct resp r;
		pid_t pid;
		switch (rand_r(&seed) % 4) {
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
		atomic_fetch_add(&n_faults, 1);
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
