/*
 * main.c — sandcell-broker: options, run directory, and the one event loop
 * (epoll) that drives libmicrohttpd, every proxy's IPC socket, client hang-up
 * watches, signals and timers. Everything runs on this thread; nng's own
 * threads only wake it through an eventfd.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "broker.h"

struct server sv;

#define MAX_WAIT_S (7u * 24 * 3600) /* longest timeout or grace a flag may set */

void
server_watch(int fd, uint32_t events, struct evsrc *ev)
{
	struct epoll_event e = {.events = events, .data.ptr = ev};

	if (epoll_ctl(sv.sv_epfd, EPOLL_CTL_ADD, fd, &e) < 0 &&
	    (errno != EEXIST || epoll_ctl(sv.sv_epfd, EPOLL_CTL_MOD, fd, &e) < 0))
		log_warn("epoll_ctl add fd %d: %s", fd, strerror(errno));
}

void
server_unwatch(int fd)
{
	epoll_ctl(sv.sv_epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET. */
void
server_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t n;
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@') || (n = strlen(path)) >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, path, n);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0'; /* abstract namespace */
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
		   offsetof(struct sockaddr_un, sun_path) + n) < 0)
		log_warn("sd_notify %s: %s", state, strerror(errno));
	close(fd);
}

/* Only a hash of the token is kept; comparing hashes is constant-time. */
static void
token_set(const char *token)
{
	if (!*token)
		fatal("the access token is empty");
	crypto_generichash(sv.sv_token_hash, sizeof(sv.sv_token_hash),
			   (const unsigned char *)token, strlen(token), NULL, 0);
	sv.sv_token = true;
}

static int
token_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[4096];

	if (!f || !fgets(line, sizeof(line), f)) {
		log_err("access token file %s: %s", path, f ? "empty" : strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	line[strcspn(line, "\r\n")] = '\0';
	token_set(line);
	sodium_memzero(line, sizeof(line));
	return 0;
}

/* --pool python=2,javascript=1; 0 or none for no pool. */
static int
pool_parse(const char *arg)
{
	char *copy = xstrdup(arg), *save, *tok;

	sv.sv_npool = 0;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (!strcmp(tok, "0") || !strcmp(tok, "none"))
			continue;
		uint64_t size;
		if (!eq || sv.sv_npool == sizeof(sv.sv_pool) / sizeof(sv.sv_pool[0]) ||
		    parse_count(eq + 1, 0, 64, &size) < 0) {
			free(copy);
			return -1;
		}
		*eq = '\0';
		struct pool_spec *ps = &sv.sv_pool[sv.sv_npool++];
		if (lang_normalise(tok, ps->ps_want, sizeof(ps->ps_want)) < 0) {
			free(copy);
			return -1;
		}
		ps->ps_size = size;
	}
	free(copy);
	return 0;
}

static void
usage(void)
{
	fprintf(stderr,
		"usage: sandcell-broker [options]\n"
		"  each option can also be set as SANDCELL_<OPTION> (SANDCELL_MAX_BODY=32M);\n"
		"  the command line wins. SIZE: 16M, 4G...; DURATION: 30 (s), 500ms, 2m, 1h\n"
		"  --listen HOST:PORT      HTTP address (default 127.0.0.1:49999)\n"
		"  --run-dir DIR           sockets and state (default $XDG_RUNTIME_DIR/sandcell\n"
		"                          or /tmp/sandcell-$UID)\n"
		"  --cwd DIR               default working directory of contexts, one the\n"
		"                          kernel user can enter\n"
		"                          (default /home/user if it exists, else $HOME)\n"
		"  --env KEY=VALUE         global env var for every context (repeatable)\n"
		"  --env-file FILE         global env vars, KEY=VALUE lines\n"
		"  --max-body SIZE         largest request body (default 16M, at most 64M)\n"
		"  --max-queue N           queued executions per context (default 64)\n"
		"  --max-contexts N        contexts in total (default 256)\n"
		"  --conn-timeout DURATION idle HTTP connection timeout (default 2m)\n"
		"  --no-default-context    do not start the default contexts at start-up\n"
		"  --keep-contexts         proxies and kernels outlive a stop; the next\n"
		"                          broker on the same run dir re-attaches them\n"
		"  --grace DURATION        on SIGTERM, running executions get this long to\n"
		"                          finish while new ones get 503 (default 30)\n"
		"  --kernel-memory SIZE    memory limit of each kernel (RLIMIT_DATA, and\n"
		"                          the cgroup's limit with --kernel-cgroup)\n"
		"  --kernel-cpu DURATION   CPU-time limit of each kernel (RLIMIT_CPU)\n"
		"  --kernel-cgroup DIR     give each kernel its own cgroup under DIR\n"
		"                          (v2, or v1 memory), so that a kernel over its\n"
		"                          memory limit is killed alone; 'systemd': a\n"
		"                          scope per kernel under sandcell.slice\n"
		"  --proxy PATH            sandcell-proxy binary (default: beside this one)\n"
		"  --python-startup FILE   run in every Python kernel at start (default:\n"
		"                          $SANDCELL_PYTHON_STARTUP, else sandcell's profile\n"
		"                          for rich data results; '' for none)\n"
		"  --access-token TOKEN    require this token (X-Access-Token or\n"
		"                          Authorization: Bearer) on every endpoint but\n"
		"                          /health and /ready\n"
		"  --access-token-file F   the token is the first line of F\n"
		"  --max-connections N     concurrent HTTP connections (default 4096)\n"
		"  --header-timeout DURATION  a connection must send a request head\n"
		"                          within DURATION of connecting or of its last response\n"
		"                          (default 30)\n"
		"  --kernel-user USER      run kernels as USER (the broker may stay root)\n"
		"  --no-sandbox            run kernels unboxed, with the broker's view of the\n"
		"                          machine (default: a sandbox per context)\n"
		"  --kernel-uid-range A-B  uids the sandbox runs kernels as (default\n"
		"                          61184-65519; shared isolation uses A)\n"
		"  --isolation MODE        shared (default: one uid, one workspace) or\n"
		"                          context (a uid and a workspace per context)\n"
		"  --kernel-network MODE   host (default) or none (loopback only)\n"
		"  --kernel-pids N         processes per context (default 1024; 0: none)\n"
		"  --kernel-tmp-size SIZE  size of each context's private /tmp (default\n"
		"                          512M)\n"
		"  --heartbeat-timeout DURATION  an idle kernel that answers no heartbeat\n"
		"                          for DURATION is restarted (default 20; a busy\n"
		"                          one is dead only when its process is stopped)\n"
		"  --stream-cap SIZE       output a stream may hold for a client that reads\n"
		"                          slowly; past it the execution is cancelled and\n"
		"                          the stream says so (default 1 GiB)\n"
		"  --spill-dir DIR         where that backlog goes past 256 KiB per stream\n"
		"                          (unlinked files; default $TMPDIR or /var/tmp)\n"
		"  --pool LANG=N[,...]     warm kernels kept ready per language, taken by\n"
		"                          POST /contexts and restart (default python=1;\n"
		"                          0 for none)\n"
		"  --interrupt-retry DURATION  an interrupt the kernel has not acted on\n"
		"                          is sent again after DURATION (default 1s)\n"
		"  --interrupt-grace DURATION  a kernel still running DURATION after the\n"
		"                          first interrupt is restarted (default 3s)\n"
		"  --log-level LEVEL       error, warn, info (default) or debug\n");
	exit(2);
}

static int
env_put(const char *kv, const char *origin)
{
	const char *eq = strchr(kv, '=');
	char *k;

	if (!eq) {
		log_err("%s: '%s' is not KEY=VALUE", origin, kv);
		return -1;
	}
	k = xstrndup(kv, eq - kv);
	if (!env_key_valid(k)) {
		log_err("%s: '%s' is not a valid variable name", origin, k);
		free(k);
		return -1;
	}
	json_object_set_new(sv.sv_genv, k, json_string(eq + 1));
	free(k);
	return 0;
}

static int
env_file_read(const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int rc = 0;

	if (!f) {
		log_err("env file %s: %s", path, strerror(errno));
		return -1;
	}
	while ((n = getline(&line, &cap, f)) > 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		char *p = line;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\0' || *p == '#')
			continue;
		if (!strncmp(p, "export ", 7))
			p += 7;
		if (env_put(p, path) < 0)
			rc = -1;
	}
	free(line);
	fclose(f);
	return rc;
}

/* The run dir is ours alone: 0700, owned by us, one broker at a time. */
static void
run_dir_prepare(void)
{
	struct stat st;
	char *lock, *ctx;
	int fd, rc;

	if ((rc = mkdir_p(sv.sv_run_dir, 0700)) < 0)
		fatal("run dir %s: %s", sv.sv_run_dir, strerror(-rc));
	if (lstat(sv.sv_run_dir, &st) < 0 || !S_ISDIR(st.st_mode))
		fatal("run dir %s: not a directory", sv.sv_run_dir);
	if (st.st_uid != geteuid())
		fatal("run dir %s: owned by uid %u, not us", sv.sv_run_dir, st.st_uid);
	if ((st.st_mode & 0777) != 0700 && chmod(sv.sv_run_dir, 0700) < 0)
		fatal("chmod 0700 %s: %s", sv.sv_run_dir, strerror(errno));
	lock = xasprintf("%s/broker.lock", sv.sv_run_dir);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
		fatal("run dir %s is in use by another broker (%s)", sv.sv_run_dir,
		      strerror(errno));
	free(lock); /* fd stays open: the lock lives as long as we do */
	ctx = xasprintf("%s/ctx", sv.sv_run_dir);
	if ((rc = mkdir_p(ctx, 0700)) < 0)
		fatal("mkdir %s: %s", ctx, strerror(-rc));
	free(ctx);

	sv.sv_env_file = xasprintf("%s/global-env.json", sv.sv_run_dir);
	char *tmp = xasprintf("%s.tmp", sv.sv_env_file);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || json_dumpfd(sv.sv_genv, fd, JSON_COMPACT) < 0 ||
	    rename(tmp, sv.sv_env_file) < 0)
		fatal("write %s: %s", sv.sv_env_file, strerror(errno));
	close(fd);
	free(tmp);
}

static const char *
default_cwd(void)
{
	struct stat st;
	const char *home = getenv("HOME");

	if (stat("/home/user", &st) == 0 && S_ISDIR(st.st_mode))
		return "/home/user";
	return home && *home == '/' ? home : "/";
}

/* sandcell's IPython start-up profile: in the source tree, or installed. */
static const char *
default_python_startup(void)
{
	static char path[PATH_MAX];
	const char *rel[] = {"../proxy/python/sandcell_startup.py",
			     "../share/sandcell/sandcell_startup.py"};
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0)
		return NULL;
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		char *p = xasprintf("%s/%s", exe, rel[i]);
		if (realpath(p, path) && access(path, R_OK) == 0) {
			free(p);
			return path;
		}
		free(p);
	}
	return NULL;
}

static const char *
default_proxy_bin(void)
{
	static char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 32);

	if (n <= 0)
		return "sandcell-proxy";
	path[n] = '\0';
	char *slash = strrchr(path, '/');
	strcpy(slash + 1, "sandcell-proxy");
	return path;
}

static void
handle_signals(void)
{
	struct signalfd_siginfo si;
	int status;
	pid_t pid;

	while (read(sv.sv_sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGTERM && !sv.sv_stopping && sv.sv_grace) {
			/* drain: no new executions, running ones get the grace period */
			sv.sv_draining = sv.sv_stopping = true;
			sv.sv_drain_until = now_ms() + sv.sv_grace * 1000ull;
			server_notify("STOPPING=1");
			log_info("SIGTERM: draining; stopping within %u s", sv.sv_grace);
		} else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
			log_info("signal %d: stopping", si.ssi_signo);
			sv.sv_quit = true;
		}
	}
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		context_reaped(pid, status);
}

static void
wake_drain(void)
{
	uint64_t v;

	if (read(sv.sv_wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warn("eventfd: %s", strerror(errno));
	context_pipe_events();
	control_pipe_events();
}

static void
loop(void)
{
	struct epoll_event evs[64];
	uint64_t next_tick = now_ms() + TICK_MS;

	while (!sv.sv_quit) {
		MHD_UNSIGNED_LONG_LONG mt;
		uint64_t now = now_ms();
		long wait = next_tick > now ? (long)(next_tick - now) : 0;

		if (MHD_get_timeout(sv.sv_mhd, &mt) == MHD_YES && (long long)mt < wait)
			wait = (long)mt;
		long pw = stream_park_wait(now);
		if (pw >= 0 && pw < wait)
			wait = pw;
		if (sv.sv_mhd_kick)
			wait = 0;
		int n = epoll_wait(sv.sv_epfd, evs, 64, (int)wait);
		if (n < 0 && errno != EINTR)
			fatal("epoll_wait: %s", strerror(errno));
		for (int i = 0; i < n; i++) {
			struct evsrc *ev = evs[i].data.ptr;
			switch (ev->ev_kind) {
			case EV_MHD: break; /* MHD_run below */
			case EV_SIGNAL: handle_signals(); break;
			case EV_WAKE: wake_drain(); break;
			case EV_CTX_RECV: context_recv(ev->ev_obj); break;
			case EV_CTX_SEND: context_flush(ev->ev_obj); break;
			case EV_CTX_PIDFD: context_pidfd(ev->ev_obj); break;
			case EV_HANGUP: stream_hangup(ev->ev_obj, evs[i].events); break;
			case EV_CTL: control_recv(); break;
			case EV_LISTEN: accept_ready(); break;
			case EV_PENDING: accept_sniff(ev->ev_obj, evs[i].events); break;
			}
		}
		stream_park_due(now_ms());
		sv.sv_mhd_kick = false;
		MHD_run(sv.sv_mhd);
		if (sv.sv_pool_kick) {
			/* after MHD_run: a claimed kernel's answer leaves before the fork */
			sv.sv_pool_kick = false;
			if (!sv.sv_draining)
				pool_fill();
		}
		now = now_ms();
		if (now >= next_tick) {
			stream_tick(now);
			context_tick(now);
			http_tick(now);
			if (!sv.sv_draining)
				pool_fill();
			next_tick = now + TICK_MS;
			if (sv.sv_watchdog_ms && now >= sv.sv_watchdog_at) {
				server_notify("WATCHDOG=1");
				sv.sv_watchdog_at = now + sv.sv_watchdog_ms;
			}
			if (sv.sv_stopping &&
			    (TAILQ_EMPTY(&sv.sv_streams) || now >= sv.sv_drain_until)) {
				log_info("drained: %s", TAILQ_EMPTY(&sv.sv_streams)
								 ? "no execution left"
								 : "grace period over");
				sv.sv_quit = true;
			}
		}
	}
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"run-dir", required_argument, NULL, 'r'},
		{"cwd", required_argument, NULL, 'c'},
		{"env", required_argument, NULL, 'e'},
		{"env-file", required_argument, NULL, 'E'},
		{"max-body", required_argument, NULL, 'b'},
		{"max-queue", required_argument, NULL, 'q'},
		{"max-contexts", required_argument, NULL, 'm'},
		{"conn-timeout", required_argument, NULL, 't'},
		{"no-default-context", no_argument, NULL, 'n'},
		{"keep-contexts", no_argument, NULL, 'k'},
		{"grace", required_argument, NULL, 'g'},
		{"kernel-memory", required_argument, NULL, 'M'},
		{"kernel-cpu", required_argument, NULL, 'C'},
		{"kernel-cgroup", required_argument, NULL, 'G'},
		{"python-startup", required_argument, NULL, 'S'},
		{"access-token", required_argument, NULL, 'T'},
		{"access-token-file", required_argument, NULL, 'F'},
		{"max-connections", required_argument, NULL, 'x'},
		{"header-timeout", required_argument, NULL, 'H'},
		{"kernel-user", required_argument, NULL, 'U'},
		{"no-sandbox", no_argument, NULL, 'O'},
		{"kernel-uid-range", required_argument, NULL, 'Y'},
		{"isolation", required_argument, NULL, 'i'},
		{"kernel-network", required_argument, NULL, 'N'},
		{"kernel-pids", required_argument, NULL, 'P'},
		{"kernel-tmp-size", required_argument, NULL, 'Z'},
		{"pool", required_argument, NULL, 'W'},
		{"interrupt-retry", required_argument, NULL, 'I'},
		{"interrupt-grace", required_argument, NULL, 'J'},
		{"heartbeat-timeout", required_argument, NULL, 'B'},
		{"stream-cap", required_argument, NULL, 'X'},
		{"spill-dir", required_argument, NULL, 'D'},
		{"proxy", required_argument, NULL, 'p'},
		{"log-level", required_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	sigset_t mask;
	int c, li, level = LOG_INFO;
	char err[512];
	static struct optenv oe; /* the configuration points into it: lives as long as we do */
	uint64_t v;

	sv.sv_listen = "127.0.0.1:49999";
	sv.sv_max_body = 16u << 20;
	sv.sv_max_queue = 64;
	sv.sv_max_contexts = 256;
	sv.sv_conn_timeout = 120;
	sv.sv_genv = json_object();
	sv.sv_log_level = "info";
	sv.sv_grace = 30;
	pool_parse("python=1");
	sv.sv_max_conns = 4096;
	sv.sv_stream_cap = 1ull << 30;
	sv.sv_spill_dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
	sv.sv_header_timeout = 30;
	TAILQ_INIT(&sv.sv_conns);
	sv.sv_sandbox = true;
	sv.sv_uid_range = "61184-65519";
	sv.sv_kernel_network = "host";
	sv.sv_kernel_pids = "1024";
	sv.sv_kernel_tmp = "536870912";
	/* SANDCELL_<FLAG> for every flag; the command line comes after, so it wins */
	if (optenv_build(&oe, "SANDCELL", opts, argc, argv) < 0)
		exit(2);
	/* /proc/PID/environ shows the block itself: clear the token there (optenv
	 * holds a copy), then unset it so kernels do not inherit it */
	char *env_token = getenv("SANDCELL_ACCESS_TOKEN");
	if (env_token)
		explicit_bzero(env_token, strlen(env_token));
	unsetenv("SANDCELL_ACCESS_TOKEN");
	while ((li = -1, c = getopt_long(oe.oe_argc, oe.oe_argv, "h", opts, &li)) != -1) {
		const char *origin = c == '?' ? NULL : optenv_origin(&oe, opts, li, optind);
		int rc = 0;
		switch (c) {
		case 'l': sv.sv_listen = optarg; break;
		case 'r': sv.sv_run_dir = optarg; break;
		case 'c': sv.sv_cwd = optarg; break;
		case 'e':
			if (env_put(optarg, origin) < 0)
				exit(2);
			break;
		case 'E':
			if (env_file_read(optarg) < 0)
				exit(2);
			break;
		case 'b':
			if ((rc = parse_size(optarg, PROTO_MAX_BIG, &v)) < 0 || (rc = v ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a size from 1 to 64M, such as 16M");
			sv.sv_max_body = v;
			break;
		case 'q':
			if ((rc = parse_count(optarg, 0, 1000000, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a count from 0 to 1000000");
			sv.sv_max_queue = v;
			break;
		case 'm':
			if ((rc = parse_count(optarg, 1, 1000000, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a count from 1 to 1000000");
			sv.sv_max_contexts = v;
			break;
		case 't':
			if ((rc = parse_seconds(optarg, MAX_WAIT_S, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a duration such as 120, 90s or 2m, at most 7 days");
			sv.sv_conn_timeout = v;
			break;
		case 'n': sv.sv_no_default = true; break;
		case 'k': sv.sv_keep_contexts = true; break;
		case 'g':
			if ((rc = parse_seconds(optarg, MAX_WAIT_S, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a duration such as 30, 30s or 5m, at most 7 days");
			sv.sv_grace = v;
			break;
		case 'M':
			/* below a few MiB no interpreter starts: a missing unit, surely */
			if ((rc = parse_size(optarg, UINT64_MAX, &v)) < 0 ||
			    (rc = v >= (16u << 20) ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a size of at least 16M, such as 4G or 512M");
			sv.sv_kernel_memory = xasprintf("%llu", (unsigned long long)v);
			break;
		case 'C':
			if ((rc = parse_seconds(optarg, UINT32_MAX, &v)) < 0 ||
			    (rc = v ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a CPU time of at least 1s, such as 600 or 2h");
			sv.sv_kernel_cpu = xasprintf("%llu", (unsigned long long)v);
			break;
		case 'G': sv.sv_kernel_cgroup = optarg; break;
		case 'S': sv.sv_python_startup = optarg; break;
		case 'T':
			token_set(optarg);
			memset(optarg, 'x', strlen(optarg)); /* not in ps output */
			break;
		case 'F':
			if (token_file(optarg) < 0)
				exit(2);
			break;
		case 'x':
			if ((rc = parse_count(optarg, 1, 1000000, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a count from 1 to 1000000");
			sv.sv_max_conns = v;
			break;
		case 'H':
			if ((rc = parse_seconds(optarg, MAX_WAIT_S, &v)) < 0 ||
			    (rc = v ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a duration such as 30, 30s or 1m, from 1s to 7 days");
			sv.sv_header_timeout = v;
			break;
		case 'U': sv.sv_kernel_user = optarg; break;
		case 'O': sv.sv_sandbox = false; break;
		case 'Y': {
			unsigned a, b;
			if (sscanf(optarg, "%u-%u", &a, &b) != 2 || a == 0 || a > b) {
				log_err("--kernel-uid-range %s: not A-B with 0 < A <= B", optarg);
				exit(2);
			}
			sv.sv_uid_range = optarg;
			break;
		}
		case 'i':
			if (strcmp(optarg, "shared") && strcmp(optarg, "context")) {
				log_err("--isolation %s: shared or context", optarg);
				exit(2);
			}
			sv.sv_isolated = !strcmp(optarg, "context");
			break;
		case 'N':
			if (strcmp(optarg, "host") && strcmp(optarg, "none")) {
				log_err("--kernel-network %s: host or none", optarg);
				exit(2);
			}
			sv.sv_kernel_network = optarg;
			break;
		case 'P':
			if ((rc = parse_size(optarg, 1u << 22, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a number of processes, 0 for no limit");
			sv.sv_kernel_pids = xasprintf("%llu", (unsigned long long)v);
			break;
		case 'Z':
			if ((rc = parse_size(optarg, UINT64_MAX, &v)) < 0 ||
			    (rc = v >= (1u << 20) ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a size of at least 1M, such as 512M or 2G");
			sv.sv_kernel_tmp = xasprintf("%llu", (unsigned long long)v);
			break;
		case 'X':
			if ((rc = parse_size(optarg, UINT64_MAX, &v)) < 0 || (rc = v ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a size such as 1G or 256M");
			sv.sv_stream_cap = v;
			break;
		case 'D': sv.sv_spill_dir = optarg; break;
		case 'I':
		case 'J':
		case 'B':
			if ((rc = parse_duration(optarg, 86400000, &v)) < 0 || (rc = v ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a duration such as 1, 1.5s or 500ms, at most 24h");
			snprintf(c == 'I' ? sv.sv_interrupt_retry
				 : c == 'J' ? sv.sv_interrupt_grace
					    : sv.sv_heartbeat_timeout,
				 sizeof(sv.sv_interrupt_retry), "%llu", (unsigned long long)v);
			break;
		case 'W':
			if (pool_parse(optarg) < 0) {
				fprintf(stderr, "sandcell-broker: %s '%s': expected LANG=N[,...] "
						"with N from 0 to 64, or 0\n",
					origin, optarg);
				exit(2);
			}
			break;
		case 'p': sv.sv_proxy_bin = optarg; break;
		case 'v':
			if ((level = parse_level(optarg)) < 0) {
				fprintf(stderr, "sandcell-broker: %s '%s': expected error, warn, "
						"info or debug\n",
					origin, optarg);
				exit(2);
			}
			sv.sv_log_level = optarg;
			break;
		default: usage();
		}
	}
	if (optind != oe.oe_argc)
		usage();
	log_init("sandcell-broker", level);
	if (sodium_init() < 0)
		fatal("sodium_init failed");
	if (sv.sv_kernel_user && !getpwnam(sv.sv_kernel_user))
		fatal("--kernel-user %s: no such user", sv.sv_kernel_user);
	/* one descriptor per connection: take what the hard limit allows */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	if (!sv.sv_run_dir)
		sv.sv_run_dir = default_run_dir();
	if (sv.sv_sandbox) {
		if (box_check(err, sizeof(err)) < 0)
			fatal("sandbox: %s", err);
		struct passwd *ku = sv.sv_kernel_user ? getpwnam(sv.sv_kernel_user) : NULL;
		if (ku && (ku->pw_uid == 0 || ku->pw_uid == geteuid()))
			fatal("--kernel-user %s: kernels never run as root or as the broker's uid",
			      sv.sv_kernel_user);
		/* not root, the kernels are uid 1000 of a user namespace (proxy/sandbox.c) */
		const char *who = ku ? sv.sv_kernel_user : geteuid() ? "1000" : sv.sv_uid_range;
		const char *how = geteuid()		 ? " in a user namespace"
				  : ku || sv.sv_isolated ? ""
							 : " first";
		log_info("sandbox: on (uid %s%s, isolation %s, network %s, pids %s, tmp %s "
			 "bytes, memory %s)",
			 who, how, sv.sv_isolated ? "context" : "shared",
			 sv.sv_kernel_network, sv.sv_kernel_pids, sv.sv_kernel_tmp,
			 sv.sv_kernel_memory ? sv.sv_kernel_memory : "no limit");
		if (sv.sv_isolated && sv.sv_npool) {
			/* a warm kernel has a uid and workspace before it has a context */
			log_info("sandbox: no warm pool with --isolation context");
			sv.sv_npool = 0;
		}
	} else {
		log_warn("sandbox: off (--no-sandbox): kernels run with the broker's privileges "
			 "and see the whole machine");
	}
	/* every kernel would fail to start there (status 126): refuse now */
	bool cwd_given = sv.sv_cwd;
	if (!sv.sv_cwd)
		sv.sv_cwd = sv.sv_sandbox ? box_workspace() : default_cwd();
	if (cwd_check(sv.sv_cwd, err, sizeof(err)) < 0) {
		log_err("%s %s: %s%s", cwd_given ? "--cwd" : "default cwd", sv.sv_cwd, err,
			cwd_given ? "" : "; give one with --cwd DIR");
		exit(2);
	}
	if (!sv.sv_proxy_bin)
		sv.sv_proxy_bin = default_proxy_bin();
	if (!sv.sv_python_startup)
		sv.sv_python_startup = getenv("SANDCELL_PYTHON_STARTUP");
	if (!sv.sv_python_startup)
		sv.sv_python_startup = default_python_startup();
	else if (!*sv.sv_python_startup)
		sv.sv_python_startup = NULL; /* --python-startup '': none */
	if (access(sv.sv_proxy_bin, X_OK) < 0)
		fatal("proxy binary %s: %s", sv.sv_proxy_bin, strerror(errno));
	TAILQ_INIT(&sv.sv_contexts);
	TAILQ_INIT(&sv.sv_streams);
	TAILQ_INIT(&sv.sv_parked);
	sv.sv_started = now_ms();
	/* stream ids never repeat across broker restarts: proxies outlive us */
	sv.sv_next_stream = (uint64_t)time(NULL) << 20;
	sv.sv_next_req = 1;
	run_dir_prepare();

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	if ((sv.sv_epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		fatal("epoll_create1: %s", strerror(errno));
	if ((sv.sv_sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
		fatal("signalfd: %s", strerror(errno));
	if ((sv.sv_wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		fatal("eventfd: %s", strerror(errno));
	sv.sv_ev_sig = (struct evsrc){EV_SIGNAL, NULL};
	sv.sv_ev_wake = (struct evsrc){EV_WAKE, NULL};
	server_watch(sv.sv_sigfd, EPOLLIN, &sv.sv_ev_sig);
	server_watch(sv.sv_wakefd, EPOLLIN, &sv.sv_ev_wake);

	if (control_start() < 0)
		exit(1);
	if (http_start() < 0)
		exit(1);
	context_adopt_all();
	/* python always, javascript when Deno is installed, as E2B does */
	for (int i = 0; i < 2 && !sv.sv_no_default; i++) {
		const char *lang = i ? "javascript" : "python";
		struct context *ctx;
		if (context_default(lang) || !kspec_cached(lang))
			continue;
		if (context_create(lang, sv.sv_cwd, true, &ctx, err, sizeof(err)) < 0)
			log_err("default %s context: %s", lang, err);
	}
	log_info("listening on http://%s (run dir %s, version %s)", sv.sv_listen,
		 sv.sv_run_dir, SANDCELL_VERSION);
	const char *wd = getenv("WATCHDOG_USEC");
	if (wd && strtoull(wd, NULL, 10) >= 2000)
		sv.sv_watchdog_ms = strtoull(wd, NULL, 10) / 2000;
	server_notify("READY=1");
	loop();

	server_notify("STOPPING=1");
	/* what is still streaming ends with an error line the client can read */
	stream_fail_all("ServerStopping", "the server is stopping", "server_stopping");
	for (uint64_t until = now_ms() + 500; !TAILQ_EMPTY(&sv.sv_streams) && now_ms() < until;) {
		MHD_run(sv.sv_mhd);
		usleep(5000);
	}
	http_stop();
	if (sv.sv_keep_contexts)
		context_detach_all();
	else
		context_shutdown_all();
	control_stop();
	if (!sv.sv_keep_contexts)
		unlink(sv.sv_env_file);
	log_info("stopped%s", sv.sv_keep_contexts ? "; contexts kept running" : "");
	return 0;
}
