/*
 * harness.h — integration tests drive the real binaries: a broker started on
 * a free port with its own run dir, real proxies and kernels, and libcurl as
 * the HTTP client. Each test binary shares one broker (started before all
 * tests, its address passed to the forked tests in the environment); tests
 * that need other flags start their own.
 */
#ifndef SANDCELL_HARNESS_H
#define SANDCELL_HARNESS_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include <jansson.h>

struct broker {
	pid_t b_pid;
	int b_port;
	char b_url[64];
	char b_run_dir[128];
	char b_log[160];
	int b_exit; /* its exit status if it exited at start-up, else -1 */
};

/* Starts a broker with extra arguments (NULL-terminated); waits for /health
 * and for the default python context to be ready unless --no-default-context. */
int broker_start(struct broker *b, const char *const *extra);
/* Stops it and its proxies; -1 if its log holds a sanitizer report. */
int broker_stop(struct broker *b);
void broker_kill_proxies(const char *run_dir);
/* Starts a broker on an existing run dir and port (a restart). */
int broker_restart(struct broker *b, const char *const *extra);
/* The shared broker of this test binary. */
const char *test_url(void);
const char *test_run_dir(void);
pid_t test_broker_pid(void);

/* Each test binary names its shared broker's extra arguments with this. */
extern const char *const harness_broker_args[];
#define HARNESS_SHARED_BROKER(...)                                                       \
	const char *const harness_broker_args[] = {__VA_ARGS__, NULL}


struct resp {
	long r_status;
	char *r_body;
	size_t r_len;
	char r_ctype[128];
};
/* One request; body may be NULL; timeout in seconds. */
int http(const char *base, const char *method, const char *path, const char *body,
	 struct resp *r, long timeout_s);
void resp_free(struct resp *r);

/*
 * POST /execute and collect the NDJSON lines as a JSON array; each line gets
 * "_ms": milliseconds since the request was sent when it arrived. Keepalives
 * are dropped. Returns NULL (status in *status) when the answer is not 200.
 * A client that gives up after timeout_ms closes its connection (a real
 * disconnect); its lines end with {"type":"_client_timeout"}.
 */
json_t *execute(const char *base, const char *body_json, long *status, long timeout_ms);
/* The same with code, an optional context id and optional extra members
 * (a JSON object's text, e.g. "{\"timeout\":1}") given directly. */
json_t *execute_code(const char *base, const char *ctx, const char *code,
		     const char *extra_json, long timeout_ms, long *status);
json_t *run(const char *base, const char *ctx, const char *code);

/* One execution on its own thread: fill in, bg_start, ..., bg_join. */
struct bg {
	const char *base; /* NULL: test_url() */
	const char *ctx, *code, *extra;
	long timeout_ms;  /* 0: 60 s */
	json_t *lines;
	double took;      /* ms from start to the end of the stream */
	pthread_t t;
};
void bg_start(struct bg *b);
void bg_join(struct bg *b);

/* "kernel_pid" or "proxy_pid" of a context, from GET /contexts/{id}; 0 if none. */
pid_t context_pid(const char *base, const char *id, const char *which);
/* POST /contexts/{id}/{action} (restart, interrupt): the HTTP status, or -1. */
long context_post(const char *base, const char *id, const char *action, long timeout_s);

json_t *line_of(json_t *lines, const char *type, int nth);
int count_of(json_t *lines, const char *type);
char *stdout_of(json_t *lines); /* concatenated stdout text; caller frees */
const char *result_text(json_t *lines);

/* POST /contexts; returns the new id (caller frees) or NULL. */
char *context_new(const char *base, const char *language, const char *cwd);

double ms_since(double t0);
double ms_now(void);
int free_port(void);
int tcp_connect(const char *url); /* a plain TCP connection to the broker, or -1 */
/* Open file descriptors and resident memory (KiB) of a process, or -1. */
int proc_fd_count(pid_t pid);
long proc_rss_kb(pid_t pid);

#endif
