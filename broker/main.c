/*
 * main.c — sandcell-broker: options (config.c does what needs more than a
 * field set, and prepares the run directory) and the one event loop (epoll)
 * that drives libmicrohttpd, every proxy's IPC socket, client hang-up watches,
 * signals and timers. Everything runs on this thread; nng's own threads only
 * wake it through an eventfd.
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

#define MAX_WAIT_S (7u * 24 * 3600) /* longest timeout or grace a flag may set */

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
		"  --cwd DIR               the workspace: boxed, shown at /home/user in every\n"
		"                          box (HOME, the default cwd); unboxed, the default\n"
		"                          cwd (default: <run dir>.work boxed; unboxed\n"
		"                          /home/user if it exists, else $HOME)\n"
		"  --env KEY=VALUE         global env var for every context (repeatable)\n"
		"  --env-file FILE         global env vars, KEY=VALUE lines\n"
		"  --max-body SIZE         largest request body (default 16M, at most 64M)\n"
		"  --max-queue N           queued executions per context (default 64)\n"
		"  --max-contexts N        contexts in total (default 256)\n"
		"  --max-starting N        kernels that start at once; the others wait\n"
		"                          their turn (default: CPUs or CPU quota + 1; 0: none)\n"
		"  --conn-timeout DURATION idle HTTP connection timeout (default 2m)\n"
		"  --no-default-context    do not start the default contexts at start-up\n"
		"  --keep-contexts         proxies and kernels outlive a stop; the next\n"
		"                          broker on the same run dir re-attaches them\n"
		"  --grace DURATION        on SIGTERM, running executions get this long to\n"
		"                          finish while new ones get 503 (default 30)\n"
		"  --kernel-memory SIZE    memory limit of each context (a cgroup of its\n"
		"                          own; else RLIMIT_DATA); default a quarter of the\n"
		"                          machine's memory in a box; 0: none\n"
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
		"  --no-template           start every Python kernel cold (default: forked\n"
		"                          from a template that has imported ipykernel,\n"
		"                          numpy and pandas, when the broker is root)\n"
		"  --kernel-uid-range A-B  uids the sandbox runs kernels as (default\n"
		"                          61184-65519), each leased to one broker at a\n"
		"                          time (shared isolation: one for all contexts)\n"
		"  --isolation MODE        shared (default: one uid, one workspace) or\n"
		"                          context (a uid and a workspace per context)\n"
		"  --kernel-network MODE   outbound (default: a network of the context's own\n"
		"                          with a way out, pasta) or none (loopback only)\n"
		"  --kernel-pids N         processes per context (default 1024; 0: none)\n"
		"  --kernel-tmp-size SIZE  size of each context's private /tmp (default\n"
		"                          512M)\n"
		"  --workspace-size SIZE   the workspace's size bound, a filesystem of its\n"
		"                          own (shared: the server's; --isolation context:\n"
		"                          each context's; default a quarter of the space\n"
		"                          free at start; 0: none)\n"
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

static void
handle_signals(void)
{
	struct signalfd_siginfo si;
	int status;
	pid_t pid;

	while (read(sv.sv_io.io_sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGTERM && !sv.sv_lc.lc_stopping && sv.sv_cf.cf_grace) {
			/* drain: no new executions, running ones get the grace period */
			sv.sv_lc.lc_draining = sv.sv_lc.lc_stopping = true;
			sv.sv_lc.lc_drain_until = now_ms() + sv.sv_cf.cf_grace * 1000ull;
			server_notify("STOPPING=1");
			log_info("SIGTERM: draining; stopping within %u s", sv.sv_cf.cf_grace);
		} else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
			log_info("signal %d: stopping", si.ssi_signo);
			sv.sv_lc.lc_quit = true;
		}
	}
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (!template_reaped(pid, status))
			supervise_reaped(pid, status);
}

static void
wake_drain(void)
{
	uint64_t v;

	if (read(sv.sv_io.io_wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warn("eventfd: %s", strerror(errno));
	control_wake();
}

/* MHD wants to run again at once. */
static bool
mhd_due(void)
{
	MHD_UNSIGNED_LONG_LONG mt;

	return MHD_get_timeout(sv.sv_io.io_mhd, &mt) == MHD_YES && mt == 0;
}

static void
loop(void)
{
	struct epoll_event evs[64];
	uint64_t next_tick = now_ms() + TICK_MS;

	while (!sv.sv_lc.lc_quit) {
		MHD_UNSIGNED_LONG_LONG mt;
		uint64_t now = now_ms();
		long wait = next_tick > now ? (long)(next_tick - now) : 0;

		if (MHD_get_timeout(sv.sv_io.io_mhd, &mt) == MHD_YES && (long long)mt < wait)
			wait = (long)mt;
		long pw = respond_park_wait(now);
		if (pw >= 0 && pw < wait)
			wait = pw;
		if (sv.sv_lc.lc_mhd_kick)
			wait = 0;
		int n = epoll_wait(sv.sv_io.io_epfd, evs, 64, (int)wait);
		if (n < 0 && errno != EINTR)
			fatal("epoll_wait: %s", strerror(errno));
		sv.sv_io.io_batch = evs;
		sv.sv_io.io_batch_n = n > 0 ? n : 0;
		for (int i = 0; i < n; i++) {
			struct evsrc *ev = evs[i].data.ptr;
			if (!ev)
				continue; /* its object was freed by an earlier one (server_forget) */
			switch (ev->ev_kind) {
			case EV_MHD: break; /* MHD_run below */
			case EV_SIGNAL: handle_signals(); break;
			case EV_WAKE: wake_drain(); break;
			case EV_CTX_RECV: relay_recv(ev->ev_obj); break;
			case EV_CTX_PIDFD: supervise_pidfd(ev->ev_obj); break;
			case EV_HANGUP: respond_hangup(ev->ev_obj, evs[i].events); break;
			case EV_CTL: control_recv(); break;
			case EV_LISTEN: accept_ready(); break;
			case EV_PENDING: accept_sniff(ev->ev_obj, evs[i].events); break;
			}
		}
		sv.sv_io.io_batch_n = 0;
		respond_park_due(now_ms());
		sv.sv_lc.lc_mhd_kick = false;
		MHD_run(sv.sv_io.io_mhd);
		/* MHD's own next steps that want no wait (a reply sent, then its
		 * keep-alive connection read again: two passes) run here rather
		 * than each after an epoll_wait of ours that finds nothing */
		for (int i = 0; i < MHD_PASSES && mhd_due(); i++)
			MHD_run(sv.sv_io.io_mhd);
		if (sv.sv_po.po_kick) {
			/* after MHD_run: a claimed kernel's answer leaves before the fork */
			sv.sv_po.po_kick = false;
			if (!sv.sv_lc.lc_draining)
				pool_fill();
		}
		now = now_ms();
		if (now >= next_tick) {
			stream_tick(now);
			waiter_tick(now);
			http_tick(now);
			if (!sv.sv_lc.lc_draining)
				pool_fill();
			template_tick(now);
			next_tick = now + TICK_MS;
			if (sv.sv_cf.cf_watchdog_ms && now >= sv.sv_lc.lc_watchdog_at) {
				server_notify("WATCHDOG=1");
				sv.sv_lc.lc_watchdog_at = now + sv.sv_cf.cf_watchdog_ms;
			}
			if (sv.sv_lc.lc_stopping &&
			    (TAILQ_EMPTY(&sv.sv_tb.tb_streams) || now >= sv.sv_lc.lc_drain_until)) {
				log_info("drained: %s", TAILQ_EMPTY(&sv.sv_tb.tb_streams)
								 ? "no execution left"
								 : "grace period over");
				sv.sv_lc.lc_quit = true;
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
		{"max-starting", required_argument, NULL, 's'},
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
		{"no-template", no_argument, NULL, 'z'},
		{"kernel-uid-range", required_argument, NULL, 'Y'},
		{"isolation", required_argument, NULL, 'i'},
		{"kernel-network", required_argument, NULL, 'N'},
		{"kernel-pids", required_argument, NULL, 'P'},
		{"kernel-tmp-size", required_argument, NULL, 'Z'},
		{"workspace-size", required_argument, NULL, 'K'},
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
	int c, li, level = LOG_INFO;
	char err[512];
	static struct optenv oe; /* the configuration points into it: lives as long as we do */
	uint64_t v;

	sv.sv_cf.cf_listen = "127.0.0.1:49999";
	sv.sv_cf.cf_max_body = 16u << 20;
	sv.sv_cf.cf_max_queue = 64;
	sv.sv_cf.cf_max_contexts = 256;
	sv.sv_cf.cf_conn_timeout = 120;
	sv.sv_cf.cf_genv = json_object();
	sv.sv_cf.cf_log_level = "info";
	sv.sv_cf.cf_grace = 30;
	config_pool_parse("python=1");
	sv.sv_cf.cf_max_conns = 4096;
	sv.sv_cf.cf_stream_cap = 1ull << 30;
	sv.sv_cf.cf_spill_dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
	sv.sv_cf.cf_header_timeout = 30;
	sv.sv_cf.cf_sandbox = true;
	sv.sv_cf.cf_template = true;
	sv.sv_cf.cf_uid_range = "61184-65519";
	sv.sv_cf.cf_kernel_network = "outbound";
	sv.sv_cf.cf_kernel_pids = "1024";
	sv.sv_cf.cf_kernel_tmp = "536870912";
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
		case 'l': sv.sv_cf.cf_listen = optarg; break;
		case 'r': sv.sv_cf.cf_run_dir = optarg; break;
		case 'c': sv.sv_cf.cf_cwd = optarg; break;
		case 'e':
			if (config_env_put(optarg, origin) < 0)
				exit(2);
			break;
		case 'E':
			if (config_env_file(optarg) < 0)
				exit(2);
			break;
		case 'b':
			if ((rc = parse_size(optarg, PROTO_MAX_BIG, &v)) < 0 || (rc = v ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a size from 1 to 64M, such as 16M");
			sv.sv_cf.cf_max_body = v;
			break;
		case 'q':
			if ((rc = parse_count(optarg, 0, 1000000, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a count from 0 to 1000000");
			sv.sv_cf.cf_max_queue = v;
			break;
		case 'm':
			if ((rc = parse_count(optarg, 1, 1000000, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a count from 1 to 1000000");
			sv.sv_cf.cf_max_contexts = v;
			break;
		case 's':
			if ((rc = parse_count(optarg, 0, 1000000, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a count from 0 to 1000000");
			snprintf(sv.sv_cf.cf_max_starting, sizeof(sv.sv_cf.cf_max_starting), "%llu",
				 (unsigned long long)v);
			break;
		case 't':
			if ((rc = parse_seconds(optarg, MAX_WAIT_S, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a duration such as 120, 90s or 2m, at most 7 days");
			sv.sv_cf.cf_conn_timeout = v;
			break;
		case 'n': sv.sv_cf.cf_no_default = true; break;
		case 'k': sv.sv_cf.cf_keep_contexts = true; break;
		case 'g':
			if ((rc = parse_seconds(optarg, MAX_WAIT_S, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a duration such as 30, 30s or 5m, at most 7 days");
			sv.sv_cf.cf_grace = v;
			break;
		case 'M':
			/* below a few MiB no interpreter starts: a missing unit, surely */
			if ((rc = parse_size(optarg, UINT64_MAX, &v)) < 0 ||
			    (rc = !v || v >= (16u << 20) ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a size of at least 16M, such as 4G or 512M, or 0 for "
					   "no limit");
			sv.sv_cf.cf_kernel_memory = xasprintf("%llu", (unsigned long long)v);
			break;
		case 'C':
			if ((rc = parse_seconds(optarg, UINT32_MAX, &v)) < 0 ||
			    (rc = v ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a CPU time of at least 1s, such as 600 or 2h");
			sv.sv_cf.cf_kernel_cpu = xasprintf("%llu", (unsigned long long)v);
			break;
		case 'G': sv.sv_cf.cf_kernel_cgroup = optarg; break;
		case 'S': sv.sv_cf.cf_python_startup = optarg; break;
		case 'T':
			config_token_set(optarg);
			memset(optarg, 'x', strlen(optarg)); /* not in ps output */
			break;
		case 'F':
			if (config_token_file(optarg) < 0)
				exit(2);
			sv.sv_cf.cf_token_file = optarg; /* hidden in every box */
			break;
		case 'x':
			if ((rc = parse_count(optarg, 1, 1000000, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a count from 1 to 1000000");
			sv.sv_cf.cf_max_conns = v;
			break;
		case 'H':
			if ((rc = parse_seconds(optarg, MAX_WAIT_S, &v)) < 0 ||
			    (rc = v ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a duration such as 30, 30s or 1m, from 1s to 7 days");
			sv.sv_cf.cf_header_timeout = v;
			break;
		case 'U': sv.sv_cf.cf_kernel_user = optarg; break;
		case 'O': sv.sv_cf.cf_sandbox = false; break;
		case 'z': sv.sv_cf.cf_template = false; break;
		case 'Y': {
			unsigned a, b;
			if (sscanf(optarg, "%u-%u", &a, &b) != 2 || a == 0 || a > b) {
				log_err("--kernel-uid-range %s: not A-B with 0 < A <= B", optarg);
				exit(2);
			}
			sv.sv_cf.cf_uid_range = optarg;
			break;
		}
		case 'i':
			if (strcmp(optarg, "shared") && strcmp(optarg, "context")) {
				log_err("--isolation %s: shared or context", optarg);
				exit(2);
			}
			sv.sv_cf.cf_isolated = !strcmp(optarg, "context");
			break;
		case 'N':
			if (!strcmp(optarg, "host")) {
				log_err("--kernel-network host: kernels no longer share the host's "
					"network (a context could reach what another listens on); "
					"'outbound' keeps their way out");
				exit(2);
			}
			if (strcmp(optarg, "outbound") && strcmp(optarg, "none")) {
				log_err("--kernel-network %s: outbound or none", optarg);
				exit(2);
			}
			sv.sv_cf.cf_kernel_network = optarg;
			break;
		case 'P':
			if ((rc = parse_size(optarg, 1u << 22, &v)) < 0)
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a number of processes, 0 for no limit");
			sv.sv_cf.cf_kernel_pids = xasprintf("%llu", (unsigned long long)v);
			break;
		case 'Z':
			if ((rc = parse_size(optarg, UINT64_MAX, &v)) < 0 ||
			    (rc = v >= (1u << 20) ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a size of at least 1M, such as 512M or 2G");
			sv.sv_cf.cf_kernel_tmp = xasprintf("%llu", (unsigned long long)v);
			break;
		case 'K':
			if ((rc = parse_size(optarg, UINT64_MAX, &v)) < 0 ||
			    (rc = !v || v >= (16u << 20) ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a size of at least 16M, such as 4G, or 0 for none");
			sv.sv_cf.cf_workspace_size = v;
			sv.sv_cf.cf_workspace_size_set = true;
			break;
		case 'X':
			if ((rc = parse_size(optarg, UINT64_MAX, &v)) < 0 || (rc = v ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a size such as 1G or 256M");
			sv.sv_cf.cf_stream_cap = v;
			break;
		case 'D': sv.sv_cf.cf_spill_dir = optarg; break;
		case 'I':
		case 'J':
		case 'B':
			if ((rc = parse_duration(optarg, 86400000, &v)) < 0 || (rc = v ? 0 : -ERANGE))
				parse_fail("sandcell-broker", origin, optarg, rc,
					   "a duration such as 1, 1.5s or 500ms, at most 24h");
			snprintf(c == 'I' ? sv.sv_cf.cf_interrupt_retry
				 : c == 'J' ? sv.sv_cf.cf_interrupt_grace
					    : sv.sv_cf.cf_heartbeat_timeout,
				 sizeof(sv.sv_cf.cf_interrupt_retry), "%llu", (unsigned long long)v);
			break;
		case 'W':
			if (config_pool_parse(optarg) < 0) {
				fprintf(stderr, "sandcell-broker: %s '%s': expected LANG=N[,...] "
						"with N from 0 to 64, or 0\n",
					origin, optarg);
				exit(2);
			}
			break;
		case 'p': sv.sv_cf.cf_proxy_bin = optarg; break;
		case 'v':
			if ((level = parse_level(optarg)) < 0) {
				fprintf(stderr, "sandcell-broker: %s '%s': expected error, warn, "
						"info or debug\n",
					origin, optarg);
				exit(2);
			}
			sv.sv_cf.cf_log_level = optarg;
			break;
		default: usage();
		}
	}
	if (optind != oe.oe_argc)
		usage();
	log_init("sandcell-broker", level);
	/* first: the sandbox's probe below waits for a child */
	if ((sv.sv_io.io_sigfd = signal_fd()) < 0)
		fatal("signalfd: %s", strerror(errno));
	if (!sv.sv_cf.cf_max_starting[0]) {
		/* a start is CPU work: one per CPU we can use, and one more to
		 * keep them busy while a slot changes hands */
		int quota, n = cpus_usable(&quota);
		snprintf(sv.sv_cf.cf_max_starting, sizeof(sv.sv_cf.cf_max_starting), "%d", n + 1);
		log_info("start gate: at most %d kernels start at once (%d CPU%s%s)", n + 1, n,
			 n == 1 ? "" : "s", quota == n ? ", the cgroup's CPU quota" : "");
	}
	if (sodium_init() < 0)
		fatal("sodium_init failed");
	if (sv.sv_cf.cf_kernel_user) {
		struct passwd *pw = getpwnam(sv.sv_cf.cf_kernel_user);
		if (!pw)
			fatal("--kernel-user %s: no such user", sv.sv_cf.cf_kernel_user);
		sv.sv_cf.cf_kernel_uid = pw->pw_uid;
	}
	/* one descriptor per connection: take what the hard limit allows */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	if (!sv.sv_cf.cf_run_dir)
		sv.sv_cf.cf_run_dir = default_run_dir();
	if (sv.sv_cf.cf_sandbox) {
		if (box_check(err, sizeof(err)) < 0)
			fatal("sandbox: %s", err);
		if (!sv.sv_cf.cf_kernel_memory && geteuid() == 0) { /* a memory cgroup each */
			uint64_t of, m = config_default_memory(&of);
			sv.sv_cf.cf_kernel_memory = xasprintf("%llu", (unsigned long long)m);
			log_info("sandbox: each context may use %llu MiB of memory, a quarter of "
				 "the machine's %llu MiB; --kernel-memory changes it, 0 lifts it",
				 (unsigned long long)(m >> 20), (unsigned long long)(of >> 20));
		}
		struct passwd *ku = sv.sv_cf.cf_kernel_user ? getpwnam(sv.sv_cf.cf_kernel_user) : NULL;
		if (ku && (ku->pw_uid == 0 || ku->pw_uid == geteuid()))
			fatal("--kernel-user %s: kernels never run as root or as the broker's uid",
			      sv.sv_cf.cf_kernel_user);
		/* not root, the kernels are uid 1000 of a user namespace (proxy/sandbox.c) */
		const char *who = ku ? sv.sv_cf.cf_kernel_user : geteuid() ? "1000" : sv.sv_cf.cf_uid_range;
		const char *how = geteuid()		 ? " in a user namespace"
				  : ku || sv.sv_cf.cf_isolated ? ""
							 : ", one leased for all contexts";
		log_info("sandbox: on (uid %s%s, isolation %s, network %s, pids %s, tmp %s "
			 "bytes, memory %s)",
			 who, how, sv.sv_cf.cf_isolated ? "context" : "shared",
			 sv.sv_cf.cf_kernel_network, sv.sv_cf.cf_kernel_pids, sv.sv_cf.cf_kernel_tmp,
			 sv.sv_cf.cf_kernel_memory ? sv.sv_cf.cf_kernel_memory : "no limit");
		if (sv.sv_cf.cf_isolated && sv.sv_cf.cf_npool) {
			/* a warm kernel has a uid and workspace before it has a context */
			log_info("sandbox: no warm pool with --isolation context");
			sv.sv_cf.cf_npool = 0;
		}
	} else {
		log_warn("sandbox: off (--no-sandbox): kernels run with the broker's privileges "
			 "and see the whole machine");
	}
	/* with no network of their own, kernels cannot connect to us at all */
	if (!sv.sv_cf.cf_sandbox || strcmp(sv.sv_cf.cf_kernel_network, "none"))
		box_peer_check();
	/* every kernel would fail to start there (status 126): refuse now */
	bool cwd_given = sv.sv_cf.cf_cwd;
	if (!sv.sv_cf.cf_cwd)
		sv.sv_cf.cf_cwd = sv.sv_cf.cf_sandbox ? box_workspace() : config_default_cwd();
	if (cwd_check(sv.sv_cf.cf_cwd, box_isolates() ? (uid_t)-1 : box_kernel_uid(NULL), err,
		      sizeof(err)) < 0) {
		log_err("%s %s: %s%s", cwd_given ? "--cwd" : "default cwd", sv.sv_cf.cf_cwd, err,
			cwd_given ? "" : "; give one with --cwd DIR");
		exit(2);
	}
	box_bound_workspace(); /* its filesystem's root takes the directory's owner and mode */
	if (!sv.sv_cf.cf_proxy_bin)
		sv.sv_cf.cf_proxy_bin = config_proxy_bin();
	if (!sv.sv_cf.cf_python_startup)
		sv.sv_cf.cf_python_startup = getenv("SANDCELL_PYTHON_STARTUP");
	if (!sv.sv_cf.cf_python_startup)
		sv.sv_cf.cf_python_startup = config_python_startup();
	else if (!*sv.sv_cf.cf_python_startup)
		sv.sv_cf.cf_python_startup = NULL; /* --python-startup '': none */
	if (access(sv.sv_cf.cf_proxy_bin, X_OK) < 0)
		fatal("proxy binary %s: %s", sv.sv_cf.cf_proxy_bin, strerror(errno));
	TAILQ_INIT(&sv.sv_tb.tb_contexts);
	TAILQ_INIT(&sv.sv_tb.tb_streams);
	sv.sv_lc.lc_started = now_ms();
	config_run_dir();

	if ((sv.sv_io.io_epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		fatal("epoll_create1: %s", strerror(errno));
	if ((sv.sv_io.io_wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		fatal("eventfd: %s", strerror(errno));
	sv.sv_io.io_ev_sig = (struct evsrc){EV_SIGNAL, NULL};
	sv.sv_io.io_ev_wake = (struct evsrc){EV_WAKE, NULL};
	server_watch(sv.sv_io.io_sigfd, EPOLLIN, &sv.sv_io.io_ev_sig);
	server_watch(sv.sv_io.io_wakefd, EPOLLIN, &sv.sv_io.io_ev_wake);

	if (control_start() < 0)
		exit(1);
	if (http_start() < 0)
		exit(1);
	template_start();
	supervise_adopt_all();
	/* python always, javascript when Deno is installed, as E2B does */
	sv.sv_lc.lc_defaults = true;
	for (int i = 0; i < 2 && !sv.sv_cf.cf_no_default; i++) {
		const char *lang = i ? "javascript" : "python";
		struct context *ctx;
		if (context_default(lang) || !kcache_find(lang))
			continue;
		if (pool_create(lang, box_default_cwd(), true, &ctx, err, sizeof(err)) < 0)
			log_err("default %s context: %s", lang, err);
	}
	sv.sv_lc.lc_defaults = false;
	log_info("listening on http://%s (run dir %s, version %s)", sv.sv_cf.cf_listen,
		 sv.sv_cf.cf_run_dir, SANDCELL_VERSION);
	const char *wd = getenv("WATCHDOG_USEC");
	if (wd && strtoull(wd, NULL, 10) >= 2000)
		sv.sv_cf.cf_watchdog_ms = strtoull(wd, NULL, 10) / 2000;
	server_notify("READY=1");
	loop();

	server_notify("STOPPING=1");
	/* what is still streaming ends with an error line the client can read */
	stream_fail_all("ServerStopping", "the server is stopping", "server_stopping");
	for (uint64_t until = now_ms() + 500; !TAILQ_EMPTY(&sv.sv_tb.tb_streams) && now_ms() < until;) {
		MHD_run(sv.sv_io.io_mhd);
		usleep(5000);
	}
	http_stop();
	template_stop(); /* the kernels it forked are their proxies' */
	if (sv.sv_cf.cf_keep_contexts)
		context_detach_all();
	else
		supervise_shutdown_all();
	control_stop();
	if (!sv.sv_cf.cf_keep_contexts) {
		unlink(sv.sv_cf.cf_env_file);
		box_release();
	}
	log_info("stopped%s", sv.sv_cf.cf_keep_contexts ? "; contexts kept running" : "");
	return 0;
}
