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
	bool b_test_log; /* named for its test (harness_log_name): the runner keeps or removes it */
	uid_t b_uid; /* runs as this uid (and gid), not ours; 0: ours */
	int b_exit; /* its exit status if it exited at start-up, else -1 */
	int b_listen_fd; /* > 0: passed at each (re)start as systemd passes a socket */
	bool b_contained; /* started as a container's defaults leave root (broker_contain) */
	bool b_docker;    /* ... Docker's: no user namespaces either (broker_contain_docker) */
	const int *b_caps; /* ... with these capabilities (-1 ends them) for Docker's */
	char b_host[48]; /* the address it listens on ("127.0.0.1"; b_url names loopback) */
};

/*
 * A run dir the runner sweeps once every test has run (hooks.c): whatever
 * still runs from it (a timed-out test's kept proxies) is killed, and its
 * contexts' cgroups, its uid leases and the dir itself are removed.
 * broker_start does it for its brokers' run dirs.
 */
void harness_track(const char *run_dir);
/* The same for a network namespace a test made (inet.c). */
void harness_track_netns(const char *name);
/* Every request after this carries X-Access-Token: token (NULL: none). */
void harness_access_token(const char *token);
/* Unmounts what is mounted at or below dir (a workspace's filesystem); how many. */
int harness_unmount_below(const char *dir);
/* Done by the runner after all tests: quiet when there was nothing to do. */
void harness_sweep(void);

/*
 * A stand-in for the internet (inet.c): a network namespace joined to the
 * host by a veth pair, serving INET_PAGE over HTTP at in_url. Needs root
 * and iproute2: -1 without them. inet_stop removes it all.
 */
#define INET_PAGE "sandcell stands in for the internet"
struct inet {
	char in_ns[32], in_if[16], in_addr[32], in_url[80], in_dir[64];
	/* its IPv6 address (of 2001:2::/48) and URL; "" where the host has no IPv6 */
	char in_addr6[48], in_url6[80];
	int in_port;
	pid_t in_srv;
	pid_t in_dns; /* inet_resolver's */
};
int inet_start(struct inet *in);
/* The stand-in answers at addr (IPv4 or IPv6) too (a host route to it, for its life). */
int inet_alias(struct inet *in, const char *addr);
void inet_stop(struct inet *in);
/* A stand-in resolver: INET_DNS_NAME's A is INET_DNS_ADDR; no AAAA, no other name. */
#define INET_DNS_NAME "sandcell-test.example"
#define INET_DNS_ADDR "198.18.0.7"
bool inet_v6_out(const struct inet *in);
pid_t inet_dns_serve(int s);
int inet_resolver(struct inet *in, const char *addr);
int inet_resolv_conf(char *dir, size_t dirsz, const char *ns, bool link);

/* Starts a broker with extra arguments (NULL-terminated); waits for /health
 * and for the default python context to be ready unless --no-default-context.
 * -1 (and nothing left running) when it never became healthy. */
int broker_start(struct broker *b, const char *const *extra);
/* The same on a listening socket of the caller's, passed as systemd does
 * (fd 3, LISTEN_FDS, LISTEN_PID) at each start and restart; b_port is its. */
int broker_start_on(struct broker *b, int listen_fd, const char *const *extra);
/* The same listening on host (e.g. "0.0.0.0", as in a container): b_url is loopback's. */
int broker_start_listening(struct broker *b, const char *host, const char *const *extra);
/* The same as an unprivileged uid (and gid) when we are root: the run dir is
 * its; broker_stop removes it as it does any other. */
int broker_start_as(struct broker *b, uid_t uid, const char *const *extra);
/* The same, contained as a container's defaults leave root (broker_contain). */
int broker_start_contained(struct broker *b, const char *const *extra);
/* The same as Docker's defaults leave root, with caps (-1-ended) for Docker's default ones. */
int broker_start_docker(struct broker *b, const int *caps, const char *const *extra);
/* ... as a restricted pod leaves it: Docker's seccomp profile, uid (not 0),
 * no capability at all */
int broker_start_restricted(struct broker *b, uid_t uid, const char *const *extra);
/* Stops it and its proxies; -1 if its log holds a sanitizer report. */
int broker_stop(struct broker *b);
char *broker_log(const struct broker *b); /* its whole log so far; caller frees */
void broker_kill_proxies(const char *run_dir);
/* Starts a broker on an existing run dir and port (a restart); -1 as above. */
int broker_restart(struct broker *b, const char *const *extra);
/* Stops it (SIGTERM, as a service stop: kept contexts stay) and broker_restart()s it. */
int broker_bounce(struct broker *b, const char *const *extra);
/* The shared broker of this test binary. */
const char *test_url(void);
const char *test_run_dir(void);
pid_t test_broker_pid(void);

/* Each test binary names its shared broker's extra arguments with this. */
extern const char *const harness_broker_args[];
#define HARNESS_SHARED_BROKER(...)                                                       \
	const char *const harness_broker_args[] = {__VA_ARGS__, NULL}
/* The shared broker is started contained (broker_contain); a suite declares it once. */
extern const bool harness_broker_contained;
#define HARNESS_CONTAINED const bool harness_broker_contained = true
/* ... as Docker's defaults leave root (broker_contain_docker). */
extern const bool harness_broker_docker;
#define HARNESS_DOCKER const bool harness_broker_docker = true
/*
 * In a broker's child, before its exec: what `podman run IMAGE` leaves
 * root: a mount namespace of its own, /proc partly masked (a file under
 * /dev/null, as podman masks /proc/keys), a read-only /sys/fs/cgroup
 * without controllers, no /dev/net/tun, and podman's default capabilities
 * only (no CAP_SYS_ADMIN). 0, or -1 with errno.
 */
int broker_contain(void);
/*
 * The same as `docker run IMAGE` (and Kubernetes' RuntimeDefault) leaves
 * root: Docker's default capabilities, and its default seccomp profile's
 * refusals of namespaces without CAP_SYS_ADMIN: unshare and setns EPERM,
 * clone with a CLONE_NEW* flag EPERM, clone3 ENOSYS (glibc falls back to
 * clone). 0, or -1 with errno.
 */
int broker_contain_docker(const int *caps);

/*
 * Where a broker started in a test's worker writes its log, named for that
 * test (hooks.c), so that the runner can show a failed test's broker logs
 * once every test has run; false (or NULL, outside criterion): beside its
 * run dir, removed by broker_stop.
 */
extern bool (*harness_log_name)(char *path, size_t len);

struct resp {
	long r_status;
	char *r_body;
	size_t r_len;
	char r_ctype[128];
};
/* One request; body may be NULL; timeout in seconds. */
/* A libcurl write callback that gathers a body (NUL-terminated; caller frees data). */
struct sink {
	char *data;
	size_t len;
};
size_t sink_write(char *p, size_t sz, size_t n, void *arg);

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
	int stdout_seen;  /* stdout lines arrived so far (while it runs) */
	int done;         /* the request is over (lines may be NULL: no answer) */
	pthread_t t;
};
void bg_start(struct bg *b);
void bg_join(struct bg *b);
/* Its first stdout line has arrived: code that prints when it starts has started. */
int bg_wait_stdout(struct bg *b, long timeout_ms);

/* "kernel_pid" or "proxy_pid" of a context, from GET /contexts/{id}; 0 if none. */
pid_t context_pid(const char *base, const char *id, const char *which);
/* Whether GET /ready's sandbox.missing names what (with what would give it). */
bool ready_lacks(json_t *missing, const char *what);
/* POST /contexts/{id}/{action} (restart, interrupt): the HTTP status, or -1. */
long context_post(const char *base, const char *id, const char *action, long timeout_s);

json_t *line_of(json_t *lines, const char *type, int nth);
int count_of(json_t *lines, const char *type);
const char *error_name(json_t *lines);  /* the first error line's name, or "(none)" */
const char *error_value(json_t *lines); /* and its value, or "" */
char *stdout_of(json_t *lines); /* concatenated stdout text; caller frees */
const char *result_text(json_t *lines);

/* POST /contexts; returns the new id (caller frees) or NULL. */
char *context_new(const char *base, const char *language, const char *cwd);
/* One with this "network" (JSON: allow_out, deny_out); NULL if refused, the status
 * in *status (0: no answer). */
char *context_new_network(const char *base, const char *language, const char *network,
                          long *status);
/* DELETE /contexts/{id}: 0 when it answered 200. */
int context_delete(const char *base, const char *id);
/* A pthread start routine: context_new(base, "python", NULL), the id its result. */
void *context_new_thread(void *base);

/*
 * Waiting on state instead of sleeping: each polls until its condition holds
 * and returns 0, or returns -1 once timeout_ms has passed.
 */
int wait_until(bool (*cond)(void *arg), void *arg, long timeout_ms);
/* GET /contexts/{id} as JSON (caller frees), or NULL when it is not 200. */
json_t *context_get(const char *base, const char *id);
/*
 * Where the context's cwd is on this side (caller frees): a file its code
 * makes under a relative name is there. In a box, the cwd is a path of the
 * box: under /home/user, it is in sandbox.workspace; elsewhere (the box's
 * own /tmp) it is not in sight: NULL. Unboxed, the cwd itself.
 */
char *context_host_cwd(const char *base, const char *id);
/* An integer member of GET /contexts/{id} reaches at least min ("queue", "executions"). */
int wait_context_int(const char *base, const char *id, const char *key, long long min,
		     long timeout_ms);
/* A string member of GET /contexts/{id} equals value ("state": "idle"). */
int wait_context_str(const char *base, const char *id, const char *key, const char *value,
		     long timeout_ms);
/* The value of one series of GET /metrics ("name{labels}"), or -1 when absent. */
double metric_value(const char *base, const char *series);
/* That series reaches at least min. */
int wait_metric(const char *base, const char *series, double min, long timeout_ms);
/* A process is gone (not even a zombie of ours). */
int wait_pid_gone(pid_t pid, long timeout_ms);
/* A child of ours has exited; its wait status goes to *status. */
int wait_pid_exit(pid_t pid, int *status, long timeout_ms);
/* sandcellctl against a run dir (NULL: the shared broker's); its exit status,
 * its stdout and stderr in *out (caller frees) when out is not NULL. */
int ctl_run(const char *run_dir, char **out, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The executions sandcellctl lists for a context: how many are in state
 * ("running", "queued"; NULL for any); -1 when sandcellctl failed. */
int ctl_executions(const char *run_dir, const char *ctx, const char *state);

/* Warm kernels of the pool that are ready to be taken (sandcellctl status). */
int wait_pool_ready(const char *run_dir, int min, long timeout_ms);
/* Fields FIRST to FIRST + N - 1 (4 on, as proc(5) numbers them) of a stat
 * file (/proc/PID/stat, /proc/PID/task/TID/stat): 0, or -1. */
int stat_fields(const char *path, int first, int n, long long *out);
/* Field FIELD of /proc/PID/stat, or -1. */
long long proc_stat_field(pid_t pid, int field);
/* When a process started, and now, in seconds since boot: a kernel that
 * started before a request was not started for it (it came from the pool). */
double proc_started_s(pid_t pid);
double boot_now_s(void);

double ms_since(double t0);
double ms_now(void);
int free_port(void);
int tcp_connect(const char *url); /* a plain TCP connection to the broker, or -1 */
/* POST /execute written whole on a connection of its own (headers: more header
 * lines, each ending in \r\n, or ""): its socket, or -1. */
int raw_execute(const char *url, const char *id, const char *code, const char *version,
		const char *headers);
/* Open file descriptors and resident memory (KiB) of a process, or -1. */
int proc_fd_count(pid_t pid);
/* Its argv, NUL-separated (at most size - 1 bytes, then a NUL); 0 if unreadable. */
size_t proc_cmdline(pid_t pid, char *buf, size_t size);
/* The first process whose argv (NUL-separated, n bytes) match() accepts, or 0. */
pid_t pid_where(bool (*match)(const char *argv, size_t n, const void *arg), const void *arg);
/* The pid of the Python template serving run_dir, or 0. */
pid_t template_pid(const char *run_dir);
long proc_rss_kb(pid_t pid);
long proc_pss_kb(pid_t pid); /* Pss of smaps_rollup, KiB; -1 if unreadable */
long proc_uss_kb(pid_t pid); /* its own pages (private clean + dirty), KiB; or -1 */
unsigned long proc_ns_ino(pid_t pid, const char *which); /* /proc/PID/ns/WHICH's inode, or 0 */
long proc_huge_kb(pid_t pid); /* AnonHugePages of smaps_rollup, KiB; -1 if unreadable */
char *run_stdout(const char *base, const char *id, const char *code); /* caller frees */

/* keeper.c (suites only): a python context with a variable set (caller frees
 * the id), and the assertion that it still has it. */
char *keeper_new(const char *base);
void keeper_check(const char *base, const char *id);
/* expect.c (suites only): code, run in context id, prints exactly want. */
void expect_stdout(const char *base, const char *id, const char *code, const char *want);
/* expect.c (suites only): cells run in id beside busy, a neighbour printing lines
 * 0..lines-1: each kills only id's own processes (the broker is pid broker). */
void expect_cells_kill_only_their_own(const char *base, pid_t broker, const char *id,
				      const char *busy, const char *const *cells, size_t ncells,
				      int lines);
/*
 * Python code, run by a process of a box: whether it can open its init's
 * /proc/1/mem, take the init's fd 3 (the proxy's socket) with pidfd_getfd,
 * ptrace-attach it. Prints "denied denied denied" when it can do none.
 */
extern const char init_probe_py[];
/*
 * Python code defining wheel(dir, name, version, body, pad=0): a wheel of
 * one module, name/__init__.py holding body (and pad random bytes beside
 * it), built with zipfile in dir, offline; its path. A test's cell
 * appends its own code.
 */
extern const char wheel_py[];

#endif
