/*
 * raw.c — the baseline: a small Jupyter client that spawns the python
 * kernelspec itself and drives it through libzmq with proxy/wire.c's
 * messages, as sandcell's proxy does (with its own ZMTP) but with no broker,
 * no proxy and no HTTP in between. What sandcell
 * adds is measured against what this client gets in the same run.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>
#include <zmq.h>

#include "../../proxy/proxy.h"
#include "bench.h"

extern char **environ;

#define RAW_WARMUP 20
#define RAW_RUNS 300
#define RAW_STREAM_RUNS 3
#define RAW_MAX_ENV 512

struct raw_figs raw_figs;
const int raw_nkernels[3] = {1, 4, 16};
int (*raw_child_hook)(void);

static void *raw_zctx;

/* wire_send over a libzmq socket: the same frames the proxy sends. */
static int
raw_send(void *sock, const char *key, const char *session, const char *type,
	 json_t *content, char msgid[40])
{
	struct wire_out wo;
	int rc;

	if ((rc = wire_build(key, session, type, content, msgid, &wo)) < 0)
		return rc;
	for (int i = 0; i < 6 && rc == 0; i++)
		if (zmq_send(sock, wo.wo_frames[i].wf_data, wo.wo_frames[i].wf_len,
			     i < 5 ? ZMQ_SNDMORE : 0) < 0)
			rc = -errno;
	wire_out_free(&wo);
	return rc;
}

/* wire_recv over a libzmq socket: one whole message without blocking, or -EAGAIN. */
static int
raw_recv(void *sock, const char *key, struct jmsg *jm)
{
	zmq_msg_t parts[ZMTP_MAX_FRAMES];
	struct wire_frame wf[ZMTP_MAX_FRAMES];
	size_t n = 0;
	bool over = false;
	int more, rc;

	memset(jm, 0, sizeof(*jm));
	for (;;) {
		zmq_msg_t scratch, *m = n < ZMTP_MAX_FRAMES ? &parts[n] : &scratch;
		zmq_msg_init(m);
		if (zmq_msg_recv(m, sock, n == 0 && !over ? ZMQ_DONTWAIT : 0) < 0) {
			rc = -errno;
			zmq_msg_close(m);
			if (n == 0 && !over)
				return rc;
			goto out;
		}
		more = zmq_msg_more(m);
		if (m == &scratch) {
			over = true;
			zmq_msg_close(m);
		} else {
			wf[n] = (struct wire_frame){zmq_msg_data(m), zmq_msg_size(m)};
			n++;
		}
		if (!more)
			break;
	}
	rc = over ? -E2BIG : wire_parse(key, wf, n, jm);
out:
	for (size_t i = 0; i < n; i++)
		zmq_msg_close(&parts[i]);
	return rc;
}

static void *
raw_zsock(int type, const char *dir, int port)
{
	void *s = zmq_socket(raw_zctx, type);
	int zero = 0, ivl = 10;
	char ep[128];

	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl));
	zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero));
	if (type == ZMQ_SUB)
		zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
	snprintf(ep, sizeof(ep), "ipc://%s/k-%d", dir, port);
	if (zmq_connect(s, ep) < 0) {
		fprintf(stderr, "raw: connect %s: %s\n", ep, zmq_strerror(errno));
		zmq_close(s);
		return NULL;
	}
	return s;
}

static int
write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ssize_t len = strlen(text);
	int rc;

	if (fd < 0)
		return -errno;
	rc = write(fd, text, len) == len ? 0 : -EIO;
	close(fd);
	return rc;
}

/*
 * The same IPython configuration sandcell's proxy writes: no history, no
 * nap after each execution and, with profile, sandcell's start-up
 * profile (launch.c's ipython_profile), so that the kernels differ
 * in nothing but the client in front of them.
 */
static int
raw_ipython_config(const char *home, bool profile)
{
	char dir[PATH_MAX], path[PATH_MAX + 32], cfg[2 * PATH_MAX], prof[PATH_MAX];
	const char *bin = getenv("SANDCELL_BIN");
	int n;

	snprintf(dir, sizeof(dir), "%s/.ipython/profile_default", home);
	if (mkdir_p(dir, 0700) < 0)
		return -EIO;
	n = snprintf(cfg, sizeof(cfg), "c.HistoryManager.hist_file = ':memory:'\n%s",
	             "c.HistoryManager.enabled = False\nc.Kernel._execute_sleep = 0\n");
	if (profile) {
		snprintf(path, sizeof(path), "%s/../proxy/python/sandcell_startup.py",
		         bin ? bin : "bin");
		if (!realpath(path, prof)) {
			fprintf(stderr, "raw: no start-up profile at %s\n", path);
			return -ENOENT;
		}
		snprintf(cfg + n, sizeof(cfg) - n,
		         "c.InteractiveShellApp.exec_files = ['%s']\n", prof);
	}
	snprintf(path, sizeof(path), "%s/ipython_kernel_config.py", dir);
	return write_file(path, cfg);
}

/* Sets KEY=VALUE in env (owned strings), replacing an earlier KEY. */
static void
raw_env_put(char **env, int *n, char *kv)
{
	size_t kl = strcspn(kv, "=");

	for (int i = 0; i < *n; i++)
		if (!strncmp(env[i], kv, kl) && env[i][kl] == '=') {
			free(env[i]);
			env[i] = kv;
			return;
		}
	if (*n < RAW_MAX_ENV - 1)
		env[(*n)++] = kv;
	else
		free(kv);
}

static char *
subst(const char *arg, const char *conn, const char *resdir)
{
	if (!strcmp(arg, "{connection_file}"))
		return xstrdup(conn);
	if (!strncmp(arg, "{resource_dir}", 14))
		return xasprintf("%s%s", resdir, arg + 14);
	return xstrdup(arg);
}

/* Spawns the python kernelspec's kernel in its own session; sockets first. */
int
raw_spawn(struct raw_kernel *k, void *zctx, bool profile)
{
	struct kspec *ks = NULL;
	unsigned char key[32];
	char conn[128], home[96], *env[RAW_MAX_ENV], *argv[64];
	int ne = 0, na = 0, rc;
	pid_t parent = getpid();

	memset(k, 0, sizeof(*k));
	raw_zctx = zctx;
	if ((rc = kspec_find("python", &ks)) < 0) {
		fprintf(stderr, "raw: no python kernelspec: %s\n", strerror(-rc));
		return rc;
	}
	snprintf(k->rk_dir, sizeof(k->rk_dir), "/tmp/scbench.XXXXXX");
	if (!mkdtemp(k->rk_dir)) {
		rc = -errno;
		goto out;
	}
	randombytes_buf(key, sizeof(key));
	sodium_bin2hex(k->rk_key, sizeof(k->rk_key), key, sizeof(key));
	uuid_v4(k->rk_session);
	snprintf(conn, sizeof(conn), "%s/kernel.json", k->rk_dir);
	snprintf(home, sizeof(home), "%s/home", k->rk_dir);
	char *cf =
	    xasprintf("{\"shell_port\": 1, \"iopub_port\": 2, \"stdin_port\": 3, "
	              "\"control_port\": 4, \"hb_port\": 5, \"ip\": \"%s/k\", "
	              "\"key\": \"%s\", \"transport\": \"ipc\", "
	              "\"signature_scheme\": \"hmac-sha256\", \"kernel_name\": \"%s\"}",
	              k->rk_dir, k->rk_key, ks->ks_name);
	rc = write_file(conn, cf);
	free(cf);
	if (rc < 0 || (rc = raw_ipython_config(home, profile)) < 0)
		goto out;
	/* connect before the kernel binds, as the proxy does */
	k->rk_shell = raw_zsock(ZMQ_DEALER, k->rk_dir, 1);
	k->rk_iopub = raw_zsock(ZMQ_SUB, k->rk_dir, 2);
	k->rk_control = raw_zsock(ZMQ_DEALER, k->rk_dir, 4);
	if (!k->rk_shell || !k->rk_iopub || !k->rk_control) {
		rc = -EIO;
		goto out;
	}
	for (char **e = environ; *e; e++)
		raw_env_put(env, &ne, xstrdup(*e));
	for (char **e = ks->ks_env; *e; e++)
		raw_env_put(env, &ne, xstrdup(*e));
	raw_env_put(env, &ne, xasprintf("HOME=%s", home));
	raw_env_put(env, &ne, xasprintf("IPYTHONDIR=%s/.ipython", home));
	raw_env_put(env, &ne, xasprintf("MPLCONFIGDIR=%s/mpl", k->rk_dir));
	raw_env_put(env, &ne, xstrdup("PYDEVD_DISABLE_FILE_VALIDATION=1"));
	raw_env_put(env, &ne, xasprintf("JPY_PARENT_PID=%d", (int)parent));
	env[ne] = NULL;
	for (char **a = ks->ks_argv; *a && na < 62; a++)
		argv[na++] = subst(*a, conn, ks->ks_dir);
	argv[na] = NULL;
	fflush(NULL);
	k->rk_pid = fork();
	if (k->rk_pid == 0) {
		int null = open("/dev/null", O_RDWR);
		setsid();
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		if (chdir(k->rk_dir) < 0 || (raw_child_hook && raw_child_hook() < 0))
			_exit(126);
		execvpe(argv[0], argv, env);
		_exit(127);
	}
	rc = k->rk_pid < 0 ? -errno : 0;
	for (int i = 0; i < na; i++)
		free(argv[i]);
	for (int i = 0; i < ne; i++)
		free(env[i]);
out:
	kspec_free(ks);
	return rc;
}

static bool
is_status(struct jmsg *jm, const char *parent, const char *state)
{
	const char *s =
	    json_string_value(json_object_get(jm->jm_content, "execution_state"));

	return !strcmp(jm->jm_type, "status") && s && !strcmp(s, state) &&
	       (!parent || !strcmp(jm->jm_parent_id, parent));
}

/*
 * The kernel_info handshake, with the slow-joiner fix: after the first reply,
 * kernel_info_request again every 100 ms until a status arrives on iopub.
 */
int
raw_ready(struct raw_kernel *k, int timeout_ms)
{
	double t0 = ms_now(), last;
	bool reply = false, status = false;
	struct jmsg jm;

	if (raw_send(k->rk_shell, k->rk_key, k->rk_session, "kernel_info_request",
	              json_object(), NULL) < 0)
		return -EIO;
	last = ms_now();
	while (!(reply && status)) {
		zmq_pollitem_t it[2] = {{k->rk_shell, 0, ZMQ_POLLIN, 0},
		                        {k->rk_iopub, 0, ZMQ_POLLIN, 0}};
		if (ms_since(t0) > timeout_ms)
			return -ETIMEDOUT;
		if (waitpid(k->rk_pid, NULL, WNOHANG) == k->rk_pid) {
			k->rk_pid = 0;
			return -ECHILD;
		}
		zmq_poll(it, 2, 20);
		while (raw_recv(k->rk_shell, k->rk_key, &jm) != -EAGAIN) {
			if (jm.jm_type && !strcmp(jm.jm_type, "kernel_info_reply"))
				reply = true;
			jmsg_free(&jm);
		}
		while (raw_recv(k->rk_iopub, k->rk_key, &jm) != -EAGAIN) {
			if (jm.jm_type && !strcmp(jm.jm_type, "status"))
				status = true;
			jmsg_free(&jm);
		}
		if (reply && !status && ms_since(last) >= 100) {
			raw_send(k->rk_shell, k->rk_key, k->rk_session,
			          "kernel_info_request", json_object(), NULL);
			last = ms_now();
		}
	}
	/* a resent request's reply and status may still come: let them pass */
	usleep(50000);
	while (raw_recv(k->rk_shell, k->rk_key, &jm) != -EAGAIN)
		jmsg_free(&jm);
	while (raw_recv(k->rk_iopub, k->rk_key, &jm) != -EAGAIN)
		jmsg_free(&jm);
	return 0;
}

static void
raw_count(struct jmsg *jm, struct raw_out *out)
{
	if (!strcmp(jm->jm_type, "stream")) {
		out->ro_stream_bytes +=
		    json_string_length(json_object_get(jm->jm_content, "text"));
	} else if (!strcmp(jm->jm_type, "display_data")) {
		json_t *d = json_object_get(jm->jm_content, "data");
		if (json_object_get(d, "image/png"))
			out->ro_images++;
	} else if (!strcmp(jm->jm_type, "error")) {
		out->ro_errors++;
	}
}

/* One execution, complete when both its execute_reply and its idle arrived. */
int
raw_exec(struct raw_kernel *k, const char *code, struct raw_out *out, int timeout_ms)
{
	char id[40];
	bool reply = false, idle = false;
	double t0 = ms_now();
	struct raw_out scratch;
	struct jmsg jm;
	json_t *c = json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent",
	                      0, "store_history", 1, "user_expressions", "allow_stdin", 0,
	                      "stop_on_error", 0);

	if (!out)
		out = &scratch;
	memset(out, 0, sizeof(*out));
	if (raw_send(k->rk_shell, k->rk_key, k->rk_session, "execute_request", c, id) <
	    0)
		return -EIO;
	while (!(reply && idle)) {
		zmq_pollitem_t it[2] = {{k->rk_shell, 0, ZMQ_POLLIN, 0},
		                        {k->rk_iopub, 0, ZMQ_POLLIN, 0}};
		if (ms_since(t0) > timeout_ms)
			return -ETIMEDOUT;
		if (zmq_poll(it, 2, 100) < 0 && errno != EINTR)
			return -EIO;
		while (raw_recv(k->rk_iopub, k->rk_key, &jm) != -EAGAIN) {
			if (jm.jm_type && !strcmp(jm.jm_parent_id, id)) {
				raw_count(&jm, out);
				if (is_status(&jm, id, "idle"))
					idle = true;
			}
			jmsg_free(&jm);
		}
		while (raw_recv(k->rk_shell, k->rk_key, &jm) != -EAGAIN) {
			if (jm.jm_type && !strcmp(jm.jm_type, "execute_reply") &&
			    !strcmp(jm.jm_parent_id, id)) {
				const char *st = json_string_value(
				    json_object_get(jm.jm_content, "status"));
				reply = true;
				if (!st || strcmp(st, "ok"))
					out->ro_errors++;
			}
			jmsg_free(&jm);
		}
	}
	return out->ro_errors ? -EPROTO : 0;
}

/* Kills the kernel's session, reaps it and removes its files. */
void
raw_stop(struct raw_kernel *k)
{
	if (k->rk_pid > 0) {
		kill(-k->rk_pid, SIGKILL);
		kill(k->rk_pid, SIGKILL);
		waitpid(k->rk_pid, NULL, 0);
		k->rk_pid = 0;
	}
	if (k->rk_shell)
		zmq_close(k->rk_shell);
	if (k->rk_iopub)
		zmq_close(k->rk_iopub);
	if (k->rk_control)
		zmq_close(k->rk_control);
	k->rk_shell = k->rk_iopub = k->rk_control = NULL;
	if (k->rk_dir[0])
		rm_rf(k->rk_dir);
	k->rk_dir[0] = '\0';
}

static void *
raw_ctx(void)
{
	static void *z;

	if (!z)
		z = zmq_ctx_new();
	return z;
}

/* Spawns n kernels side by side (they boot in parallel), then waits for each. */
int
raw_start(struct raw_kernel *ks, int n, bool profile)
{
	memset(ks, 0, n * sizeof(*ks));
	for (int i = 0; i < n; i++)
		if (raw_spawn(&ks[i], raw_ctx(), profile) < 0)
			goto err;
	for (int i = 0; i < n; i++)
		if (raw_ready(&ks[i], 120000) < 0) {
			fprintf(stderr, "raw: kernel %d did not become ready\n", i);
			goto err;
		}
	return 0;
err:
	for (int i = 0; i < n; i++)
		raw_stop(&ks[i]);
	return -1;
}

/* MiB/s of payload (median of the runs) and the CPU the kernel and client spent. */
static int
raw_stream_runs(struct raw_kernel *k, const char *code, double mib, bool images,
                struct stats *st)
{
	double v[RAW_STREAM_RUNS], kcpu = -cpu_ms(k->rk_pid), ccpu = -self_cpu_ms();
	int n = 0;

	for (int i = 0; i < RAW_STREAM_RUNS; i++) {
		struct raw_out o;
		double t0 = ms_now();
		int rc = raw_exec(k, code, &o, 120000);
		double ms = ms_since(t0);
		bool whole = images ? o.ro_images == IMAGES_N
		                    : o.ro_stream_bytes == (size_t)(FLOOD_MIB << 20);
		if (rc < 0 || !whole) {
			fprintf(stderr, "raw: stream run: rc %d, %zu bytes, %d images\n",
			        rc, o.ro_stream_bytes, o.ro_images);
			continue;
		}
		v[n++] = mib / (ms / 1000.0);
	}
	kcpu += cpu_ms(k->rk_pid);
	ccpu += self_cpu_ms();
	stats_of(v, n, st);
	if (n)
		table_add("1 raw",
		          fmt("%s (%d runs)",
		              images ? fmt("%d images x 1 MiB", IMAGES_N)
		                     : fmt("stdout flood %d MiB", FLOOD_MIB),
		              n),
		          NULL, fmt("%.1f MiB/s", st->st_p50), "1.00 (baseline)", NULL);
	if (n)
		table_detail("CPU/run: kernel %.2f s, client %.2f s",
		             kcpu / RAW_STREAM_RUNS / 1e3, ccpu / RAW_STREAM_RUNS / 1e3);
	return n;
}

void
raw_bench_stream(void)
{
	struct raw_kernel k;
	struct stats fl = {0}, im = {0};

	progress("raw: %d MiB stdout flood and %d x 1 MiB images, %d runs each",
	         FLOOD_MIB, IMAGES_N, RAW_STREAM_RUNS);
	if (raw_start(&k, 1, true) < 0) {
		table_note("raw streaming: kernel did not start");
		return;
	}
	raw_exec(&k, IMAGES_SETUP, NULL, 30000);
	raw_stream_runs(&k, FLOOD_CODE, FLOOD_MIB, false, &fl);
	raw_stream_runs(&k, IMAGES_CODE, IMAGES_N, true, &im);
	raw_stop(&k);
	raw_figs.rf_flood_mibs = fl.st_p50;
	raw_figs.rf_images_mibs = im.st_p50;
	raw_figs.rf_have_stream = fl.st_n && im.st_n;
}

struct raw_drive {
	struct raw_kernel *d_k;
	double d_start, d_end; /* the measured window */
	long d_done, d_failed;
	pthread_t d_thread;
};

/* One thread per kernel, one execution in flight: as many x=1 as it can. */
static void *
raw_drive(void *arg)
{
	struct raw_drive *d = arg;

	while (ms_now() < d->d_end) {
		int rc = raw_exec(d->d_k, "x=1", NULL, 30000);
		double t = ms_now();
		if (t >= d->d_start && t <= d->d_end) {
			if (rc == 0)
				d->d_done++;
			else
				d->d_failed++;
		}
	}
	return NULL;
}

static struct raw_kernel raw_agg[16];
static bool raw_agg_up;

/* Starts the 16 kernels of the aggregate figures (they stay up until stop). */
int
raw_agg_start(void)
{
	if (raw_start(raw_agg, 16, true) < 0) {
		table_note("raw aggregate: kernels did not start");
		return -1;
	}
	for (int i = 0; i < 16; i++) /* first executions are slower */
		for (int j = 0; j < 5; j++)
			raw_exec(&raw_agg[i], "x=1", NULL, 30000);
	raw_agg_up = true;
	return 0;
}

void
raw_agg_stop(void)
{
	if (!raw_agg_up)
		return;
	for (int i = 0; i < 16; i++)
		raw_stop(&raw_agg[i]);
	raw_agg_up = false;
}

/* The median of a double field (offsetof) over n windows. */
double
tp_median(const struct tp_win *w, int n, size_t off)
{
	double v[TP_ROUNDS];
	struct stats st;

	n = n < TP_ROUNDS ? n : TP_ROUNDS;
	for (int i = 0; i < n; i++)
		v[i] = *(const double *)((const char *)&w[i] + off);
	stats_of(v, n, &st);
	return n ? st.st_p50 : 0;
}

/* One window of the aggregate x=1 rate of raw_nkernels[c] kernels, one thread each. */
void
raw_agg_run(int c, struct tp_win *w)
{
	struct raw_drive d[16];
	int n = raw_nkernels[c];
	double t0 = ms_now(), kcpu = 0, ccpu;

	*w = (struct tp_win){0};
	if (!raw_agg_up)
		return;
	progress("raw: aggregate x=1 rate of %d kernel%s (%d s)", n, n > 1 ? "s" : "",
	         TP_WINDOW_MS / 1000);
	for (int i = 0; i < n; i++) {
		d[i] = (struct raw_drive){.d_k = &raw_agg[i],
		                          .d_start = t0 + TP_RAMP_MS,
		                          .d_end = t0 + TP_RAMP_MS + TP_WINDOW_MS};
		pthread_create(&d[i].d_thread, NULL, raw_drive, &d[i]);
	}
	usleep(TP_RAMP_MS * 1000);
	for (int i = 0; i < n; i++)
		kcpu -= cpu_ms(raw_agg[i].rk_pid);
	ccpu = -self_cpu_ms();
	usleep(TP_WINDOW_MS * 1000);
	for (int i = 0; i < n; i++)
		kcpu += cpu_ms(raw_agg[i].rk_pid);
	ccpu += self_cpu_ms();
	for (int i = 0; i < n; i++) {
		pthread_join(d[i].d_thread, NULL);
		w->w_done += d[i].d_done;
		w->w_failed += d[i].d_failed;
	}
	w->w_rate = w->w_done / (TP_WINDOW_MS / 1000.0);
	if (w->w_done) {
		w->w_kernels = kcpu * 1000 / w->w_done;
		w->w_client = ccpu * 1000 / w->w_done;
	}
}

/*
 * One window of one client, one execution in flight, taking raw_nkernels[c]
 * kernels in turn: the ceiling of one sandcell client over as many contexts
 * (each kernel runs every n-th execution, so it is colder than a kernel run
 * back to back).
 */
void
raw_agg_rotate(int c, struct tp_win *w)
{
	int n = raw_nkernels[c];
	double t0 = ms_now(), t, kcpu = 0;
	bool measuring = false;

	*w = (struct tp_win){0};
	if (!raw_agg_up)
		return;
	progress("raw: one client over %d kernels in turn (%d s)", n, TP_WINDOW_MS / 1000);
	for (long i = 0; (t = ms_now()) < t0 + TP_RAMP_MS + TP_WINDOW_MS; i++) {
		if (t >= t0 + TP_RAMP_MS && !measuring) {
			measuring = true;
			for (int j = 0; j < n; j++)
				kcpu -= cpu_ms(raw_agg[j].rk_pid);
		}
		int rc = raw_exec(&raw_agg[i % n], "x=1", NULL, 30000);
		if (measuring)
			rc == 0 ? w->w_done++ : w->w_failed++;
	}
	for (int j = 0; j < n; j++)
		kcpu += cpu_ms(raw_agg[j].rk_pid);
	w->w_rate = w->w_done / (TP_WINDOW_MS / 1000.0);
	if (w->w_done)
		w->w_kernels = kcpu * 1000 / w->w_done;
}

/* The row of n windows: their median rate, which the sandcell rows compare with. */
void
raw_agg_show(int c, bool rot, const struct tp_win *w, int n)
{
	long failed = 0;
	double rate = tp_median(w, n, offsetof(struct tp_win, w_rate)),
	       kus = tp_median(w, n, offsetof(struct tp_win, w_kernels)),
	       cus = tp_median(w, n, offsetof(struct tp_win, w_client));

	if (!raw_agg_up || n < 1)
		return;
	for (int i = 0; i < n; i++)
		failed += w[i].w_failed;
	if (rot) {
		raw_figs.rf_rate_rot[c] = rate;
	} else {
		raw_figs.rf_rate[c] = rate;
		raw_figs.rf_have_rate = true;
	}
	table_add("1 raw",
	          rot ? fmt("x=1, 1 client over %d kernels in turn%s", raw_nkernels[c],
	                    failed ? fmt(" (%ld failed)", failed) : "")
	              : fmt("aggregate x=1, %d kernel%s, 1 in flight each%s", raw_nkernels[c],
	                    raw_nkernels[c] > 1 ? "s" : "",
	                    failed ? fmt(" (%ld failed)", failed) : ""),
	          NULL, fmt("%.0f exec/s", rate), "1.00 (baseline)", NULL);
	if (rot)
		table_detail("median of %d windows; CPU/exec: kernels %.0f us", n, kus);
	else
		table_detail("median of %d windows; CPU/exec: kernels %.0f us, client %.0f us",
		             n, kus, cus);
}

void
raw_bench_aggregate(void)
{
	if (raw_agg_start() < 0)
		return;
	for (int c = 0; c < 3; c++) {
		struct tp_win w;
		raw_agg_run(c, &w);
		raw_agg_show(c, false, &w, 1);
		if (c) {
			raw_agg_rotate(c, &w);
			raw_agg_show(c, true, &w, 1);
		}
	}
	raw_agg_stop();
}
