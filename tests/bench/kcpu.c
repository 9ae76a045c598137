/*
 * kcpu.c — section "kcpu": where a kernel's CPU per `x=1` goes. The raw
 * client (raw.c) drives, in turn and in one run, kernels that differ in one
 * thing each: its own cold kernel with the start-up profile (the baseline),
 * without it, under the box's seccomp filter (filter.c, installed as the
 * box's init installs it), and the kernels of three brokers: --no-sandbox
 * (cold, sandcell's launch without a box), the box with --no-template (cold)
 * and the box with the template (forked: the default). The raw client reaches
 * a boxed kernel's abstract sockets from the proxy's network namespace, with
 * the key of the connection file the proxy wrote; the proxy stays connected
 * and idle. A kernel's CPU is the sum of its threads' run time
 * (/proc/PID/task/TID/schedstat, ns), not 10 ms ticks; every row is the
 * median over KCPU_ROUNDS rounds of its CPU per execution and of its ratio
 * to the baseline in the same round.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <linux/seccomp.h>

#include <sodium.h>
#include <zmq.h>

#include "../../proxy/proxy.h"
#include "bench.h"

#define KCPU_ROUNDS 7
#define KCPU_RUNS 300 /* x=1 per kernel per round */
#define KCPU_WARMUP 50

enum {
	K_RAW,
	K_NOPROF,
	K_SECCOMP,
	K_NAP,
	K_FLUSH,
	K_UNBOXED,
	K_BOXCOLD,
	K_TEMPLATE,
	K_FORK2,
	K_HTTP,
	K_N
};

static const char *const kcpu_what[K_N] = {
    "raw client's kernel, cold, with the profile (baseline)",
    "  the same without the start-up profile",
    "  the same under the box's seccomp filter",
    "  the same with ipykernel's 0.5 ms nap after each execution (before)",
    "  the same with ipykernel's flush of empty streams (before)",
    "sandcell's kernel, --no-sandbox (cold, no box)",
    "sandcell's kernel in the box, --no-template (cold)",
    "sandcell's kernel in the box, forked from the template (default)",
    "  a later fork, invalidating import caches after every cell (before)",
    "  the same, driven by POST /execute (broker and proxy, not the raw client)",
};

/* What the rows marked "(before)" run first: what the kernels did before. */
static const char *const kcpu_setup[K_N] = {
    [K_NAP] = "get_ipython().kernel._execute_sleep = 0.0005",
    [K_FLUSH] = "from ipykernel.iostream import OutStream as O\n"
                "f = O.flush\n"
                "O.flush = f.__closure__[f.__code__.co_freevars.index('flush')]"
                ".cell_contents",
    [K_FORK2] = "import importlib\n"
                "get_ipython().events.register('post_run_cell',\n"
                "    lambda *_: importlib.invalidate_caches())",
};

/* The brokers of the sandcell kernels, and the raw client's filter. */
static const char *const kcpu_args[3][8] = {
    {"--no-sandbox", "--pool", "0", "--no-default-context", NULL},
    {"--no-template", "--pool", "0", "--no-default-context", NULL},
    {"--pool", "0", "--no-default-context", NULL},
};
static struct box kcpu_box;

struct kk {
	struct raw_kernel k_k;
	bool k_up, k_attached;
	void *k_zctx;      /* attached: its own, made in the proxy's netns */
	struct broker k_b; /* sandcell's kernels: their broker */
	bool k_have_b;
	struct hc k_h; /* K_HTTP: its client and request */
	char *k_body;
	char *k_ctx;
	double k_us[KCPU_ROUNDS], k_ratio[KCPU_ROUNDS];
	double k_flt[KCPU_ROUNDS], k_csw[KCPU_ROUNDS];
};

/* As the box's init installs it (sandbox.c, sb_drop): no_new_privs, then the filter. */
static int
kcpu_filter_child(void)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &kcpu_box.bx_prog) < 0)
		return -errno;
	return 0;
}

/* Run time of all of pid's threads (ns), and their faults and switches. */
static double
kcpu_ns(pid_t pid, double *flt, double *csw)
{
	*flt = proc_stat_field(pid, 10) + proc_stat_field(pid, 12); /* minflt + majflt */
	return tasks_ns(pid, csw);
}

/* The raw client's socket to one of an attached kernel's. */
static void *
kcpu_zsock(void *zctx, int type, const char *ep)
{
	void *s = zmq_socket(zctx, type);
	int zero = 0, ivl = 10;

	if (!s)
		return NULL;
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl));
	zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero));
	if (type == ZMQ_SUB)
		zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
	if (zmq_connect(s, ep) < 0) {
		fprintf(stderr, "kcpu: connect %s: %s\n", ep, zmq_strerror(errno));
		zmq_close(s);
		return NULL;
	}
	return s;
}

struct attach {
	struct raw_kernel *a_k;
	void **a_zctx;
	int a_netns; /* -1: ours */
	char a_ep[3][PATH_MAX + 16];
	int a_rc;
};

/*
 * In a thread of its own: into the proxy's network namespace (a box's
 * sockets are abstract names there), then a context whose I/O thread,
 * started by the first socket, stays in it.
 */
static void *
kcpu_attach_thread(void *arg)
{
	struct attach *a = arg;
	struct raw_kernel *k = a->a_k;

	a->a_rc = -EIO;
	if (a->a_netns >= 0 && setns(a->a_netns, CLONE_NEWNET) < 0) {
		a->a_rc = -errno;
		return NULL;
	}
	if (!(*a->a_zctx = zmq_ctx_new()))
		return NULL;
	k->rk_shell = kcpu_zsock(*a->a_zctx, ZMQ_DEALER, a->a_ep[0]);
	k->rk_iopub = kcpu_zsock(*a->a_zctx, ZMQ_SUB, a->a_ep[1]);
	k->rk_control = kcpu_zsock(*a->a_zctx, ZMQ_DEALER, a->a_ep[2]);
	if (k->rk_shell && k->rk_iopub && k->rk_control)
		a->a_rc = 0;
	return NULL;
}

/*
 * The raw client on the kernel of context ctx of broker b: the connection
 * file the proxy wrote (in the box: <ctx>/kernel/kernel.json, names in the
 * proxy's netns); *zctx its own ZeroMQ context (kcpu_detach ends both).
 */
int
kcpu_attach(struct raw_kernel *k, void **zctx, const struct broker *b, const char *ctx,
            bool boxed)
{
	struct attach a = {.a_k = k, .a_zctx = zctx, .a_netns = -1};
	pid_t proxy = hc_proxy_pid(b->b_url, ctx);
	char path[PATH_MAX];
	json_error_t err;
	json_t *cf;
	pthread_t t;

	memset(k, 0, sizeof(*k));
	*zctx = NULL;
	k->rk_pid = hc_kernel_pid(b->b_url, ctx);
	snprintf(path, sizeof(path), "%s/ctx/%s%s/kernel.json", b->b_run_dir, ctx,
	         boxed ? "/kernel" : "");
	if (proxy <= 0 || k->rk_pid <= 0 || !(cf = json_load_file(path, 0, &err))) {
		table_note("kcpu: no kernel or connection file for %s (%s)", ctx, path);
		return -ENOENT;
	}
	const char *ip = json_string_value(json_object_get(cf, "ip")),
	           *key = json_string_value(json_object_get(cf, "key"));
	static const char *const port[3] = {"shell_port", "iopub_port", "control_port"};
	for (int i = 0; i < 3; i++)
		snprintf(a.a_ep[i], sizeof(a.a_ep[i]), "ipc://%s-%d", ip ? ip : "",
		         (int)json_integer_value(json_object_get(cf, port[i])));
	snprintf(k->rk_key, sizeof(k->rk_key), "%s", key ? key : "");
	json_decref(cf);
	uuid_v4(k->rk_session);
	if (boxed) {
		snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)proxy);
		if ((a.a_netns = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			return -errno;
	}
	pthread_create(&t, NULL, kcpu_attach_thread, &a);
	pthread_join(t, NULL);
	if (a.a_netns >= 0)
		close(a.a_netns);
	return a.a_rc < 0 ? a.a_rc : raw_ready(k, 60000);
}

/* Closes what kcpu_attach opened; the kernel stays its context's. */
void
kcpu_detach(struct raw_kernel *k, void *zctx)
{
	void *s[3] = {k->rk_shell, k->rk_iopub, k->rk_control};

	for (int i = 0; i < 3; i++)
		if (s[i])
			zmq_close(s[i]);
	k->rk_shell = k->rk_iopub = k->rk_control = NULL;
	if (zctx)
		zmq_ctx_term(zctx);
}

static int
kcpu_attach_kk(struct kk *x, bool boxed)
{
	x->k_attached = true;
	return kcpu_attach(&x->k_k, &x->k_zctx, &x->k_b, x->k_ctx, boxed);
}

/*
 * A new Python context of the broker at url forked from its template (the
 * template loads pandas): false, and none left, while the broker's contexts
 * still start cold.
 */
bool
kcpu_forked_ctx(const char *url, char **ctx)
{
	json_t *l;
	char *out;
	bool yes;

	if (!(*ctx = context_new(url, "python", NULL)))
		return false;
	l = run(url, *ctx, "import sys; print('pandas' in sys.modules)");
	out = stdout_of(l);
	yes = out && !strcmp(out, "True\n");
	free(out);
	json_decref(l);
	if (!yes)
		hc_delete_all(url, ctx, 1);
	return yes;
}

static bool
kcpu_forked(void *arg)
{
	struct kk *x = arg;

	free(x->k_ctx);
	x->k_ctx = NULL;
	return kcpu_forked_ctx(x->k_b.b_url, &x->k_ctx);
}

/* A broker, one Python context on it (forked from the template when the box
 * has one), and the raw client on its kernel. */
static int
kcpu_sandcell(struct kk *x, int which)
{
	bool boxed = which != K_UNBOXED;

	if (broker_start(&x->k_b, kcpu_args[which - K_UNBOXED]) < 0)
		return -1;
	x->k_have_b = true;
	if (which == K_TEMPLATE) {
		if (wait_until(kcpu_forked, x, 120000) < 0) {
			table_note(
			    "kcpu: no kernel was forked from the template in 120 s");
			return -1;
		}
	} else if (!(x->k_ctx = context_new(x->k_b.b_url, "python", NULL))) {
		return -1;
	}
	return kcpu_attach_kk(x, boxed);
}

static void
kcpu_stop(struct kk *x)
{
	if (x->k_attached) {
		kcpu_detach(&x->k_k, x->k_zctx);
	} else if (x->k_body) {
		hc_free(&x->k_h);
		free(x->k_body);
	} else if (x->k_up) {
		raw_stop(&x->k_k);
	}
	if (x->k_ctx)
		hc_delete_all(x->k_b.b_url, &x->k_ctx, 1);
	if (x->k_have_b)
		broker_stop(&x->k_b);
}

static const char *
kcpu_status(pid_t pid, const char *key)
{
	char path[64], line[256];
	size_t kl = strlen(key);
	const char *v = "?";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "r"))) {
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, key, kl) && line[kl] == ':') {
				line[strcspn(line, "\n")] = '\0';
				v = fmt("%s",
				        line + kl + 1 + strspn(line + kl + 1, " \t"));
			}
		fclose(f);
	}
	return v;
}

static int
kcpu_exec(struct kk *x)
{
	return x->k_body ? hc_exec(&x->k_h, x->k_body, NULL)
	                 : raw_exec(&x->k_k, "x=1", NULL, 30000);
}

/* A further context of the template's broker: the raw client on its kernel
 * (fork2), or POST /execute to it (http). */
static int
kcpu_more(struct kk *x, const struct broker *b, bool http)
{
	x->k_b = *b;
	if (wait_until(kcpu_forked, x, 120000) < 0)
		return -1;
	if (!http)
		return kcpu_attach_kk(x, true);
	if (hc_init(&x->k_h, b->b_url) < 0)
		return -1;
	x->k_body = hc_body("x=1", x->k_ctx);
	x->k_k.rk_pid = hc_kernel_pid(b->b_url, x->k_ctx);
	return x->k_k.rk_pid > 0 ? 0 : -1;
}

/* One round: KCPU_RUNS x=1 on each kernel, taking them in turn. */
static void
kcpu_round(struct kk *x, int r)
{
	double ns[K_N], flt[K_N], csw[K_N], f, c;

	for (int m = 0; m < K_N; m++)
		if (x[m].k_up)
			ns[m] = -kcpu_ns(x[m].k_k.rk_pid, &flt[m], &csw[m]);
	for (int i = 0; i < KCPU_RUNS; i++)
		for (int j = 0; j < K_N; j++) {
			int m =
			    (i + j + r) % K_N; /* who goes first turns: drift cancels */
			if (x[m].k_up)
				kcpu_exec(&x[m]);
		}
	for (int m = 0; m < K_N; m++) {
		if (!x[m].k_up)
			continue;
		ns[m] += kcpu_ns(x[m].k_k.rk_pid, &f, &c);
		x[m].k_us[r] = ns[m] / 1e3 / KCPU_RUNS;
		x[m].k_flt[r] = (f - flt[m]) / KCPU_RUNS;
		x[m].k_csw[r] = (c - csw[m]) / KCPU_RUNS;
	}
	for (int m = 0; m < K_N; m++)
		x[m].k_ratio[r] =
		    x[K_RAW].k_up && x[m].k_up ? x[m].k_us[r] / x[K_RAW].k_us[r] : 0;
}

void
kcpu_bench(void)
{
	static struct kk x[K_N];
	double l[3];

	progress("kcpu: %d kernels, %d rounds of %d x=1 each, in turn", K_N, KCPU_ROUNDS,
	         KCPU_RUNS);
	if (filter_build(&kcpu_box) < 0)
		table_note("kcpu: the box's seccomp filter could not be built");
	for (int m = 0; m < K_N; m++) {
		int rc;
		if (m == K_SECCOMP && !kcpu_box.bx_prog.len)
			continue;
		raw_child_hook = m == K_SECCOMP ? kcpu_filter_child : NULL;
		if (m < K_UNBOXED)
			rc = raw_start(&x[m].k_k, 1, m != K_NOPROF);
		else if (m > K_TEMPLATE)
			rc = x[K_TEMPLATE].k_up
			         ? kcpu_more(&x[m], &x[K_TEMPLATE].k_b, m == K_HTTP)
			         : -1;
		else
			rc = kcpu_sandcell(&x[m], m);
		raw_child_hook = NULL;
		x[m].k_up = rc == 0;
		if (x[m].k_up && kcpu_setup[m] &&
		    raw_exec(&x[m].k_k, kcpu_setup[m], NULL, 30000) < 0)
			table_note("kcpu: %s: its set-up failed", kcpu_what[m]);
		if (!x[m].k_up)
			table_note("kcpu: %s: did not start or answer", kcpu_what[m]);
		else
			progress("kcpu: %s: kernel pid %d", kcpu_what[m],
			         (int)x[m].k_k.rk_pid);
		for (int i = 0; x[m].k_up && i < KCPU_WARMUP; i++)
			kcpu_exec(&x[m]);
	}
	if (getloadavg(l, 3) == 3)
		table_note("kcpu: load average before the rounds %.2f %.2f %.2f", l[0],
		           l[1], l[2]);
	for (int r = 0; r < KCPU_ROUNDS; r++) {
		progress("kcpu: round %d of %d", r + 1, KCPU_ROUNDS);
		kcpu_round(x, r);
	}
	for (int m = 0; m < K_N; m++) {
		if (!x[m].k_up)
			continue;
		pid_t pid = x[m].k_k.rk_pid;
		table_add("kcpu", fmt("%s", kcpu_what[m]),
		          fmt("%.0f us", median_of(x[m].k_us, KCPU_ROUNDS)), NULL,
		          fmt("%.3f", median_of(x[m].k_ratio, KCPU_ROUNDS)), NULL);
		table_detail(
		    "kernel CPU per x=1, median of %d rounds of %d; per x=1: %.2f "
		    "faults, %.1f context switches; %s threads, CPUs %s, %s",
		    KCPU_ROUNDS, KCPU_RUNS, median_of(x[m].k_flt, KCPU_ROUNDS),
		    median_of(x[m].k_csw, KCPU_ROUNDS), kcpu_status(pid, "Threads"),
		    kcpu_status(pid, "Cpus_allowed_list"), kcpu_status(pid, "Seccomp"));
	}
	if (getloadavg(l, 3) == 3)
		table_note("kcpu: load average after the rounds %.2f %.2f %.2f", l[0],
		           l[1], l[2]);
	table_note(
	    "kcpu rows: p50 is the kernel's CPU per x=1 (all its threads' run time), "
	    "vs raw the median of the rounds' ratios to the baseline's; absolute "
	    "figures move with the machine's load, ratios of one run hold");
	for (int m = K_N - 1; m >= 0; m--) /* a broker's contexts before it */
		kcpu_stop(&x[m]);
}
