/*
 * metrics.c — counters and histograms for GET /metrics (Prometheus text
 * format 0.0.4), and the one log line every finished execution gets. All of
 * it lives on the broker's single thread: no locks.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "broker.h"

static const char *const outcomes[] = {
	"ok",	   "error",	 "timeout",	     "interrupted", "kernel_died", "restarted",
	"deleted", "aborted",	 "context_lost",    "cancelled",   "server_stopping",
	"output_limit", "other",
};
#define N_OUTCOMES (sizeof(outcomes) / sizeof(outcomes[0]))

static const double buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
				 2.5,	5,    10,    30,   60,	 300,  1800};
#define N_BUCKETS (sizeof(buckets) / sizeof(buckets[0]))

struct histogram {
	uint64_t h_count[N_BUCKETS + 1]; /* last: +Inf */
	double h_sum;
	uint64_t h_n;
};

#define MAX_HTTP_SERIES 128

static struct {
	struct {
		const char *endpoint, *method;
		unsigned status;
		uint64_t n;
	} http[MAX_HTTP_SERIES];
	size_t nhttp;
	uint64_t executions[N_OUTCOMES];
	struct histogram duration, wait;
	uint64_t disconnects, cancels, kernel_restarts, proxy_restarts, bytes, output_dropped;
	uint64_t egress_refused;
} mx;

void
metrics_http(const char *endpoint, const char *method, unsigned status)
{
	size_t i;

	for (i = 0; i < mx.nhttp; i++)
		if (mx.http[i].endpoint == endpoint && !strcmp(mx.http[i].method, method) &&
		    mx.http[i].status == status)
			break;
	if (i == mx.nhttp) {
		if (mx.nhttp == MAX_HTTP_SERIES)
			return; /* endpoints and methods are a fixed set: never reached */
		mx.http[mx.nhttp++] = (typeof(mx.http[0])){endpoint, method, status, 0};
	}
	mx.http[i].n++;
}

static void
observe(struct histogram *h, double v)
{
	size_t i = 0;

	while (i < N_BUCKETS && v > buckets[i])
		i++;
	h->h_count[i]++;
	h->h_sum += v;
	h->h_n++;
}

/* A stream of context ctx_id ended: count it and log its one line. */
void
metrics_execution(const struct stream *s, const char *ctx_id, const char *outcome,
                  uint64_t wait_ms, uint64_t run_ms)
{
	size_t i;

	for (i = 0; i < N_OUTCOMES - 1; i++)
		if (!strcmp(outcomes[i], outcome))
			break;
	mx.executions[i]++;
	if (strcmp(outcome, "cancelled")) {
		observe(&mx.duration, run_ms / 1000.0);
		observe(&mx.wait, wait_ms / 1000.0);
	}
	log_info("execution: context %s stream %llu outcome %s wait %llu ms run %llu ms "
		 "output %llu bytes",
		 ctx_id, (unsigned long long)s->st_id, outcome,
		 (unsigned long long)wait_ms, (unsigned long long)run_ms,
		 (unsigned long long)s->st_bytes);
}

void
metrics_count(enum metric m, uint64_t n)
{
	switch (m) {
	case M_DISCONNECT: mx.disconnects += n; break;
	case M_CANCEL: mx.cancels += n; break;
	case M_KERNEL_RESTART: mx.kernel_restarts += n; break;
	case M_PROXY_RESTART: mx.proxy_restarts += n; break;
	case M_BYTES: mx.bytes += n; break;
	case M_OUTPUT_DROPPED: mx.output_dropped += n; break;
	case M_EGRESS_REFUSED: mx.egress_refused += n; break;
	}
}

static void
put(struct buf *b, const char *fmt, ...)
{
	char *s;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		fatal("out of memory");
	va_end(ap);
	buf_append(b, s, strlen(s));
	free(s);
}

static void
header(struct buf *b, const char *name, const char *type, const char *help)
{
	put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
counter(struct buf *b, const char *name, const char *help, uint64_t v)
{
	header(b, name, "counter", help);
	put(b, "%s %llu\n", name, (unsigned long long)v);
}

static void
histogram(struct buf *b, const char *name, const char *help, struct histogram *h)
{
	uint64_t cum = 0;

	header(b, name, "histogram", help);
	for (size_t i = 0; i < N_BUCKETS; i++) {
		cum += h->h_count[i];
		put(b, "%s_bucket{le=\"%g\"} %llu\n", name, buckets[i], (unsigned long long)cum);
	}
	put(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->h_n);
	put(b, "%s_sum %.6f\n%s_count %llu\n", name, h->h_sum, name, (unsigned long long)h->h_n);
}

/* The warm pool per --pool entry: its size, and its kernels ready to be taken. */
static void
pool_gauges(struct buf *b, const struct context_counts *cc)
{
	header(b, "sandcell_pool_target", "gauge", "Warm kernels the pool keeps (--pool).");
	for (size_t i = 0; i < cf->cf_npool; i++) {
		const struct kspec *ks = kcache_find(cf->cf_pool[i].ps_want);
		if (ks)
			put(b, "sandcell_pool_target{kernel=\"%s\"} %d\n", ks->ks_name,
			    cf->cf_pool[i].ps_size);
	}
	header(b, "sandcell_pool_ready", "gauge",
	       "Warm kernels started and waiting to become a context.");
	for (size_t i = 0; i < cf->cf_npool; i++) {
		const struct kspec *ks = kcache_find(cf->cf_pool[i].ps_want);
		if (ks)
			put(b, "sandcell_pool_ready{kernel=\"%s\"} %d\n", ks->ks_name,
			    cc->cc_pool_ready_of[i]);
	}
}

/*
 * Kernel starts waiting for a slot of --max-starting (proxy/startgate.c): the
 * places in the run dir's start-queue/ that their proxy still holds locked; a
 * name starting with 1 is the warm pool's.
 */
static void
start_gate_gauge(struct buf *b)
{
	char *path = xasprintf("%s/start-queue", cf->cf_run_dir);
	int waiting[2] = {0, 0};
	struct dirent *de;
	DIR *d = opendir(path);

	free(path);
	while (d && (de = readdir(d))) {
		if (de->d_name[0] != '0' && de->d_name[0] != '1')
			continue;
		int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_SH | LOCK_NB) < 0) /* held: its start waits */
			waiting[de->d_name[0] == '1']++;
		close(fd);
	}
	if (d)
		closedir(d);
	header(b, "sandcell_kernel_starts_waiting", "gauge",
	       "Kernel starts waiting for a start slot (--max-starting), for a client's "
	       "context or the warm pool.");
	put(b, "sandcell_kernel_starts_waiting{kind=\"context\"} %d\n", waiting[0]);
	put(b, "sandcell_kernel_starts_waiting{kind=\"pool\"} %d\n", waiting[1]);
}

/*
 * The whole exposition, as Prometheus text format: the contexts' counts, the
 * streams open and the box's missing parts as its caller read them
 * (context_count, stream_count, box_missing).
 */
char *
metrics_render(const struct context_counts *cc, size_t open_streams, size_t missing,
	       size_t *len)
{
	struct buf b = {0};

	header(&b, "sandcell_build_info", "gauge", "Version of this sandcell broker.");
	put(&b, "sandcell_build_info{version=\"%s\"} 1\n", SANDCELL_VERSION);
	header(&b, "sandcell_uptime_seconds", "gauge", "Seconds since the broker started.");
	put(&b, "sandcell_uptime_seconds %.3f\n", lifecycle_uptime());
	header(&b, "sandcell_draining", "gauge", "1 while new executions are refused.");
	put(&b, "sandcell_draining %d\n", lifecycle_draining() ? 1 : 0);

	header(&b, "sandcell_http_requests_total", "counter",
	       "HTTP requests by endpoint, method and status.");
	for (size_t i = 0; i < mx.nhttp; i++)
		put(&b, "sandcell_http_requests_total{endpoint=\"%s\",method=\"%s\",status=\"%u\"} %llu\n",
		    mx.http[i].endpoint, mx.http[i].method, mx.http[i].status,
		    (unsigned long long)mx.http[i].n);

	header(&b, "sandcell_executions_total", "counter", "Finished executions by outcome.");
	for (size_t i = 0; i < N_OUTCOMES; i++)
		put(&b, "sandcell_executions_total{outcome=\"%s\"} %llu\n", outcomes[i],
		    (unsigned long long)mx.executions[i]);
	histogram(&b, "sandcell_execution_duration_seconds",
		  "Time executions ran in their kernel.", &mx.duration);
	histogram(&b, "sandcell_execution_queue_wait_seconds",
		  "Time executions waited for their context.", &mx.wait);

	header(&b, "sandcell_streams_open", "gauge", "Executions in flight or queued.");
	put(&b, "sandcell_streams_open %llu\n", (unsigned long long)open_streams);

	header(&b, "sandcell_contexts", "gauge", "Contexts by language and state.");
	for (size_t i = 0; i < cc->cc_nstates; i++)
		put(&b, "sandcell_contexts{language=\"%s\",state=\"%s\"} %d\n",
		    cc->cc_states[i].cs_lang, cc->cc_states[i].cs_state, cc->cc_states[i].cs_n);

	pool_gauges(&b, cc);
	start_gate_gauge(&b);
	header(&b, "sandcell_sandbox_enabled", "gauge",
	       "1 when kernels run in boxes, 0 when unboxed (--no-sandbox).");
	put(&b, "sandcell_sandbox_enabled %d\n", cf->cf_sandbox ? 1 : 0);
	header(&b, "sandcell_sandbox_isolated", "gauge",
	       "1 when each context has its own uid, workspace and network view (--isolation "
	       "context).");
	put(&b, "sandcell_sandbox_isolated %d\n", cf->cf_sandbox && cf->cf_isolated);
	header(&b, "sandcell_sandbox_missing", "gauge",
	       "Parts of the box this machine or container withholds (GET /ready lists them); "
	       "0: the full box.");
	put(&b, "sandcell_sandbox_missing %zu\n", missing);

	counter(&b, "sandcell_client_disconnects_total",
		"Clients that went away before their stream ended.", mx.disconnects);
	counter(&b, "sandcell_cancels_total",
		"CANCEL messages sent to proxies (disconnects and operator cancels).",
		mx.cancels);
	counter(&b, "sandcell_kernel_restarts_total",
		"Kernels started again in a live context (death, restart, interrupt fallback).",
		mx.kernel_restarts);
	counter(&b, "sandcell_proxy_restarts_total", "Proxies respawned after they died.",
		mx.proxy_restarts);
	counter(&b, "sandcell_streamed_bytes_total", "NDJSON bytes sent to clients.", mx.bytes);
	counter(&b, "sandcell_output_dropped_total",
		"Kernel output messages no execution owned (e.g. a thread or timer printing "
		"after its execution ended), dropped.",
		mx.output_dropped);
	counter(&b, "sandcell_egress_refused_total",
		"Packets the boxes' egress rules refused (connections to link-local, private or "
		"the host's addresses, or outside --egress-allow and a context's network).",
		mx.egress_refused);
	*len = b.b_len;
	return b.b_data;
}
