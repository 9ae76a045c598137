/*
 * bench.h — the parts of sandcell's benchmarks (make bench): the result table
 * and statistics (bench.c), the raw Jupyter client that is the baseline
 * (raw.c), a libcurl client for the broker (hc.c), the load, context and
 * memory sections that start brokers of their own (load.c) and the figures
 * of the performance goals with their verdicts (goals.c).
 */
#ifndef SANDCELL_BENCH_H
#define SANDCELL_BENCH_H

#include <stdbool.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

#include <curl/curl.h>

#include "../integration/harness.h"

#define BENCH_MIB (1024.0 * 1024.0)

/* The payloads of the streaming figures, identical for raw and sandcell. */
#define FLOOD_MIB 100
#define FLOOD_CODE "import sys\nfor _ in range(100): sys.stdout.write('x'*(1<<20))"
#define IMAGES_N 20
#define IMAGES_SETUP                                                                     \
	"import os\nfrom IPython.display import display, Image\n"                        \
	"_bench_img = os.urandom(1<<20)"
#define IMAGES_CODE "for _ in range(20): display(Image(data=_bench_img, format='png'))"

/* bench.c */
struct stats {
	double st_p50, st_p99, st_max, st_mean;
	int st_n;
};
void stats_of(double *v, int n, struct stats *st); /* sorts v */
double median_of(const double *v, int n);           /* v untouched */
/* One row of the table; any cell may be NULL (shown as "-"). */
void table_add(const char *section, const char *figure, const char *p50, const char *p99,
               const char *ratio, const char *target);
void table_detail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2))); /* last row */
void table_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2))); /* ring of buffers */
void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *mem_detail(pid_t pid); /* anon, file and PSS parts of the RSS */
double cpu_ms(pid_t pid);          /* user + system CPU time from /proc/PID/stat, or -1 */
double self_cpu_ms(void);          /* this process, all threads */
double tasks_ns(pid_t pid, double *csw); /* its threads' run time, ns; switches */

/* The figures of the raw client that the sandcell sections compare with. */
struct raw_figs {
	struct stats rf_x1, rf_hello, rf_x1_plain;
	double rf_flood_mibs, rf_images_mibs;
	double rf_rate[3]; /* executions/s with 1, 4, 16 kernels */
	double rf_rate_rot[3]; /* one client taking the kernels in turn */
	bool rf_have_lat, rf_have_stream, rf_have_rate;
};
extern struct raw_figs raw_figs;
extern const int raw_nkernels[3];

/* raw.c: one kernel driven straight over ZeroMQ */
struct raw_kernel {
	pid_t rk_pid;
	char rk_dir[64];
	char rk_key[65];
	char rk_session[37];
	void *rk_shell, *rk_control, *rk_iopub;
};
struct raw_out {
	size_t ro_stream_bytes; /* text of stream messages */
	int ro_images;          /* display_data with image/png */
	int ro_errors;          /* error messages, or a reply that is not ok */
};
int raw_spawn(struct raw_kernel *k, void *zctx, bool profile);
int raw_ready(struct raw_kernel *k, int timeout_ms);
int raw_exec(struct raw_kernel *k, const char *code, struct raw_out *out, int timeout_ms);
void raw_stop(struct raw_kernel *k);
int raw_start(struct raw_kernel *ks, int n, bool profile); /* n side by side */
extern int (*raw_child_hook)(void); /* in a spawned kernel before exec, if set */
void template_bench(void); /* template.c */
void raw_bench_stream(void);
void raw_bench_aggregate(void);
/*
 * One throughput window: executions/s and CPU per execution (us) of the
 * kernels, the client (this process), the broker and the proxies (0: none).
 * A figure is the median of TP_ROUNDS windows, raw and sandcell in turn.
 */
#define TP_ROUNDS 3
#define TP_RAMP_MS 500    /* each window starts after this */
#define TP_WINDOW_MS 3000 /* and measures this long */
struct tp_win {
	double w_rate;
	long w_done, w_failed;
	double w_kernels, w_client, w_broker, w_proxies;
};
double tp_median(const struct tp_win *w, int n, size_t off); /* of a double field */
int raw_agg_start(void);
void raw_agg_run(int c, struct tp_win *w);    /* raw_nkernels[c] kernels */
void raw_agg_rotate(int c, struct tp_win *w); /* one client, the kernels in turn */
void raw_agg_show(int c, bool rot, const struct tp_win *w, int n); /* its row */
void raw_agg_stop(void);

/* hc.c: POST /execute over one reused connection, output counted, not kept */
struct hc {
	CURL *hc_curl;
	struct curl_slist *hc_hdr;
	char hc_url[128];
	/* the response being read */
	char hc_head[64]; /* first bytes of the current line */
	size_t hc_headlen;
	size_t hc_bytes;
	int hc_lines_stdout, hc_lines_result, hc_lines_error;
	bool hc_end;
};
int hc_init(struct hc *h, const char *base);
void hc_free(struct hc *h);
/* 0 when the stream ended with end_of_execution and no error line; ms taken */
int hc_exec(struct hc *h, const char *body, double *ms);
char *hc_body(const char *code, const char *ctx); /* caller frees */
char *hc_default_context(const char *base);       /* caller frees */
pid_t hc_proxy_pid(const char *base, const char *ctx);
pid_t hc_kernel_pid(const char *base, const char *ctx);
int hc_create_parallel(const char *base, int n, int conc, char **ids, double *ms);
int hc_create_lang(const char *base, const char *lang, int n, int conc, char **ids,
                   double *ms);
void hc_delete_all(const char *base, char **ids, int n);

/* load.c: one HTTP client, one request in flight, contexts taken round robin
 * from c_first, counting what completes within [c_start, c_end] (c_cap
 * latencies into c_lat, 0: none) */
struct tp_client {
	const char *c_url;
	char **c_bodies; /* one per context */
	int c_nctx, c_first;
	double c_start, c_end;
	long c_done, c_failed;
	double *c_lat;
	int c_nlat, c_cap;
	pthread_t c_thread;
};
void *tp_client_run(void *arg);
void tp_sleep_until(double t_ms);
/* load.c; goal_rows: only the rows of the goals (8 and 64 clients over 4 and 16) */
void load_bench_throughput(const struct broker *b, bool goal_rows);
void load_bench_contexts(void);
void load_bench_memory(void);

/* goals.c: the figures of issue 17 with their goals; each goals_X records
 * its row of the goals table and returns the main table's target cell */
const char *goals_cpu(double broker_us, double proxy_us, double kernel_us);
const char *goals_profile(double with_ms, double without_ms);
/* NULL for shapes other than 8 and 64 clients over 4 and 16 contexts; ratio:
 * the median of the rounds' ratios to raw, rate and raw: the median rates */
const char *goals_throughput(int nclients, int nctx, double ratio, double rate,
                             double raw);
void goals_profile_run(const char *section); /* raw kernels with and without it */
void goals_contexts(const char *section);    /* burst, first import pandas, PSS */
void goals_bench(void);
void goals_print(void);

/* goals.c: root and its descendants (breadth first), at most max */
int proc_tree(pid_t root, pid_t *out, int max);

/* scale.c: (10) the default maximum of contexts on one broker */
void scale_bench(void);

/* kcpu.c: a kernel's CPU per x=1, split by cause */
void kcpu_bench(void);
/* The raw client on a context's kernel (boxed: from its proxy's netns). */
int kcpu_attach(struct raw_kernel *k, void **zctx, const struct broker *b, const char *ctx,
                bool boxed);
void kcpu_detach(struct raw_kernel *k, void *zctx);
/* A new context of the broker at url forked from its template, or false. */
bool kcpu_forked_ctx(const char *url, char **ctx);

/* tpsplit.c: the kernels' CPU per x=1 under the throughput rows' load, split */
void tpsplit_bench(void);

/* box.c: (9) the sandbox against --no-sandbox */
void box_bench(void);

/* ipc.c: (8) one broker-proxy hop, nng against a plain socket */
void ipc_bench(void);
int ipc_echo_main(const char *where);

/* wire.c: (8) the proxy's parse of one kernel message */
void wire_bench(void);

#endif
