/*
 * options.c — sandcell-broker's options as one table (lib/opts.c reads it):
 * each flag's SANDCELL_<FLAG> variable, its check, its default and its help
 * line, from which --help and README.md's table both come. What needs more
 * than a field set is a config.c function.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_WRITER
#include "config.h"

#define MAX_WAIT_S (7u * 24 * 3600) /* longest timeout or grace a flag may set */
#define MAX_KERNEL_MS 86400000u     /* longest interrupt or heartbeat wait */

static int
env_file(const char *path, const char *origin)
{
	(void)origin;
	return config_env_file(path);
}

/* --env-pass NAME (repeatable; SANDCELL_ENV_PASS: names separated by commas or spaces) */
static int
env_pass(const char *names, const char *origin)
{
	char *bad;

	if (kenv_pass_add(&settings.cf_env_pass, names, &bad) < 0) {
		fprintf(stderr, "sandcell-broker: %s '%s': '%s' is not a variable's name\n", origin,
			names, bad);
		free(bad);
		return -1;
	}
	return 0;
}

static int
token(const char *tok, const char *origin)
{
	(void)origin;
	config_token_set(tok);
	memset((char *)tok, 'x', strlen(tok)); /* not in ps output: a copy in argv or optenv's */
	return 0;
}

static int
token_file(const char *path, const char *origin)
{
	(void)origin;
	if (config_token_file(path) < 0)
		return -1;
	settings.cf_token_file = path; /* hidden in every box */
	return 0;
}

static int
pool(const char *spec, const char *origin)
{
	if (config_pool_parse(spec) < 0) {
		fprintf(stderr, "sandcell-broker: %s '%s': expected LANG=N[,...] "
				"with N from 0 to 64, or 0\n",
			origin, spec);
		return -1;
	}
	return 0;
}

static int
uid_range(const char *range, const char *origin)
{
	unsigned a, b;

	(void)origin;
	if (sscanf(range, "%u-%u", &a, &b) != 2 || a == 0 || a > b) {
		log_err("--kernel-uid-range %s: not A-B with 0 < A <= B", range);
		return -1;
	}
	settings.cf_uid_range = range;
	return 0;
}

static int
isolation(const char *mode, const char *origin)
{
	(void)origin;
	if (strcmp(mode, "shared") && strcmp(mode, "context")) {
		log_err("--isolation %s: shared or context", mode);
		return -1;
	}
	settings.cf_isolated = !strcmp(mode, "context");
	return 0;
}

static int
network(const char *mode, const char *origin)
{
	(void)origin;
	if (!strcmp(mode, "host")) {
		log_err("--kernel-network host: kernels no longer share the host's "
			"network (a context could reach what another listens on); "
			"'outbound' keeps their way out");
		return -1;
	}
	if (strcmp(mode, "outbound") && strcmp(mode, "none")) {
		log_err("--kernel-network %s: outbound or none", mode);
		return -1;
	}
	settings.cf_kernel_network = mode;
	return 0;
}

static int
level(const char *name, const char *origin)
{
	if (parse_level(name) < 0) {
		fprintf(stderr, "sandcell-broker: %s '%s': expected error, warn, info or debug\n",
			origin, name);
		return -1;
	}
	settings.cf_log_level = name;
	return 0;
}

static int
envd_listen(const char *where, const char *origin)
{
	(void)origin;
	settings.cf_envd_listen = !*where || !strcmp(where, "none") ? NULL : where;
	return 0;
}

#define CF settings
static const struct opt options[] = {
    {"listen", "HOST:PORT", OPT_STRING, OPT_DST(CF.cf_listen), .o_default = "127.0.0.1:49999",
     .o_help = "HTTP address ([::1]:PORT for IPv6)"},
    {"envd-listen", "HOST:PORT", OPT_FUNC, .o_fn = envd_listen, .o_default = "127.0.0.1:49983",
     .o_help = "envd's API (files, commands; docs/ENVD.md), the same access token; none or '' turns it "
	       "off, as --isolation context does"},
    {"run-dir", "DIR", OPT_STRING, OPT_DST(CF.cf_run_dir),
     .o_shown = "$XDG_RUNTIME_DIR/sandcell, else /tmp/sandcell-$UID",
     .o_help = "sockets and kernel state (0700); one broker per run dir"},
    {"cwd", "DIR", OPT_STRING, OPT_DST(CF.cf_cwd),
     .o_shown = "the workspace <run dir>.work (owned by the kernels' uid); with --no-sandbox, "
		"/home/user if it exists, else $HOME",
     .o_help = "the workspace on the host, shown at /home/user in every box (HOME, the "
	       "default cwd; with --no-sandbox: the contexts' default cwd); one the kernel "
	       "user cannot enter stops the broker at start (exit status 2)"},
    {"env", "KEY=VALUE", OPT_FUNC, .o_fn = config_env_put,
     .o_help = "a global env var for every kernel (repeatable)"},
    {"env-file", "FILE", OPT_FUNC, .o_fn = env_file,
     .o_help = "global env vars for every kernel, KEY=VALUE lines ('export ' and # comments "
	       "allowed)"},
    {"env-pass", "NAME", OPT_FUNC, .o_fn = env_pass,
     .o_help = "a variable of the broker's environment every kernel gets, with its value at "
	       "start (repeatable; the variable: names separated by commas or spaces), such as "
	       "HTTPS_PROXY or PIP_INDEX_URL; kernels get no other of the broker's variables but "
	       "PATH, LANG, LANGUAGE, LC_* and TZ"},
    {"access-token", "TOKEN", OPT_FUNC, .o_fn = token,
     .o_help = "require this token (X-Access-Token or Authorization: Bearer) on every "
	       "endpoint but /health and /ready; SANDCELL_ACCESS_TOKEN is not passed on to "
	       "kernels"},
    {"access-token-file", "F", OPT_FUNC, .o_fn = token_file,
     .o_help = "the token is the first line of F, a file no box shows (one under /etc, the "
	       "workspace or a kernel's directory is refused at start)"},
    {"max-body", "SIZE", OPT_SIZE, OPT_DST(CF.cf_max_body), .o_min = 1, .o_max = PROTO_MAX_BIG,
     .o_expect = "a size from 1 to 64M, such as 16M", .o_default = "16M",
     .o_help = "largest request body but an envd upload's (--max-file-size) (413 above; at "
	       "most 64M); a request head may take up to ~6 KiB (431 above)"},
    {"max-file-size", "SIZE", OPT_SIZE, OPT_DST(CF.cf_max_file_size), .o_min = 1,
     .o_max = UINT64_MAX, .o_expect = "a size such as 1G", .o_default = "1G",
     .o_help = "largest file an upload to envd's POST /files writes (413 above, nothing "
	       "left behind); its body streams to the box, not bounded by --max-body "
	       "(docs/ENVD.md)"},
    {"max-queue", "N", OPT_COUNT, OPT_DST(CF.cf_max_queue), .o_max = 1000000,
     .o_expect = "a count from 0 to 1000000", .o_default = "64",
     .o_help = "executions waiting per context (429 above)"},
    {"max-contexts", "N", OPT_COUNT, OPT_DST(CF.cf_max_contexts), .o_min = 1, .o_max = 1000000,
     .o_expect = "a count from 1 to 1000000", .o_default = "256",
     .o_help = "contexts in total (429 above)"},
    {"max-starting", "N", OPT_COUNT, OPT_DST(CF.cf_max_starting), OPT_DIGITS, .o_max = 1000000,
     .o_expect = "a count from 0 to 1000000",
     .o_shown = "CPUs + 1: the CPUs of the broker's affinity mask, or fewer under a CPU quota "
		"of its cgroup or an ancestor's (a container's CPU limit; cgroup v2 cpu.max, v1 "
		"cpu.cfs_quota_us), rounded up; the log says which (start gate:)",
     .o_help = "kernels that start at once (creations, restarts, the pool); the others wait "
	       "their turn in the order they came, as starting; 0: no limit "
	       "(docs/PERFORMANCE.md)"},
    {"max-connections", "N", OPT_COUNT, OPT_DST(CF.cf_max_conns), .o_min = 1, .o_max = 1000000,
     .o_expect = "a count from 1 to 1000000", .o_default = "4096",
     .o_help = "concurrent HTTP connections (503 above)"},
    {"header-timeout", "DURATION", OPT_SECONDS, OPT_DST(CF.cf_header_timeout), .o_min = 1,
     .o_max = MAX_WAIT_S, .o_expect = "a duration such as 30, 30s or 1m, from 1s to 7 days",
     .o_default = "30s",
     .o_help = "a connection must send a request head within DURATION of connecting or of "
	       "its last response (slowloris)"},
    {"body-timeout", "DURATION", OPT_SECONDS, OPT_DST(CF.cf_body_timeout), .o_min = 1,
     .o_max = MAX_WAIT_S, .o_expect = "a duration such as 30, 30s or 1m, from 1s to 7 days",
     .o_default = "30s",
     .o_help = "a request's body must be in within DURATION of its head, however it trickles "
	       "(408 and the connection closed; a 16M body at 30s needs ~550 KiB/s)"},
    {"allowed-origin", "ORIGIN", OPT_FUNC, .o_fn = caller_origin_option,
     .o_help = "a web page origin (https://app.example.com) whose browser requests are "
	       "answered, CORS preflights included (repeatable, or a comma list; * for any); "
	       "a request with any other Origin is refused (403)"},
    {"allowed-host", "NAME", OPT_FUNC, .o_fn = caller_host_option,
     .o_help = "a name clients reach the server by, besides localhost and IP addresses "
	       "(repeatable, or a comma list; * for any, e.g. behind an ingress that checks "
	       "it); a request with another Host is refused (403: DNS rebinding)"},
    {"conn-timeout", "DURATION", OPT_SECONDS, OPT_DST(CF.cf_conn_timeout), .o_max = MAX_WAIT_S,
     .o_expect = "a duration such as 120, 90s or 2m, at most 7 days", .o_default = "2m",
     .o_help = "idle HTTP connection timeout"},
    {"stream-cap", "SIZE", OPT_SIZE, OPT_DST(CF.cf_stream_cap), .o_min = 1, .o_max = UINT64_MAX,
     .o_expect = "a size such as 1G or 256M", .o_default = "1G",
     .o_help = "output a stream may hold for a slow client; past it the execution is "
	       "cancelled and the stream ends with OutputLimitExceeded"},
    {"spill-dir", "DIR", OPT_STRING, OPT_DST(CF.cf_spill_dir), .o_shown = "$TMPDIR or /var/tmp",
     .o_help = "where that backlog goes past 256 KiB per stream (unlinked files); if it "
	       "cannot be written (e.g. the disk is full) the execution is cancelled and the "
	       "stream ends with OutputSpillFailed naming the dir and the system's error"},
    {"pool", "LANG=N[,...]", OPT_FUNC, .o_fn = pool, .o_default = "python=1",
     .o_help = "warm kernels kept ready per language, taken by POST /contexts and restart; 0 "
	       "for none"},
    {"no-default-context", NULL, OPT_SWITCH, OPT_DST(CF.cf_no_default),
     .o_help = "no python/javascript context at start-up"},
    {"grace", "DURATION", OPT_SECONDS, OPT_DST(CF.cf_grace), .o_max = MAX_WAIT_S,
     .o_expect = "a duration such as 30, 30s or 5m, at most 7 days", .o_default = "30s",
     .o_help = "on SIGTERM, running executions get this long while new ones (and /ready) get "
	       "503; then exit 0"},
    {"interrupt-retry", "DURATION", OPT_MS, OPT_DST(CF.cf_interrupt_retry), OPT_DIGITS, 1,
     MAX_KERNEL_MS, "a duration such as 1, 1.5s or 500ms, at most 24h", .o_shown = "1s",
     .o_help = "an interrupt (cancel, timeout, /interrupt) the kernel has not acted on is sent "
	       "again after this long"},
    {"interrupt-grace", "DURATION", OPT_MS, OPT_DST(CF.cf_interrupt_grace), OPT_DIGITS, 1,
     MAX_KERNEL_MS, "a duration such as 1, 1.5s or 500ms, at most 24h", .o_shown = "3s",
     .o_help = "a kernel still running this long after the first interrupt is restarted (its "
	       "state is lost)"},
    {"heartbeat-timeout", "DURATION", OPT_MS, OPT_DST(CF.cf_heartbeat_timeout), OPT_DIGITS, 1,
     MAX_KERNEL_MS, "a duration such as 1, 1.5s or 500ms, at most 24h", .o_shown = "20s",
     .o_help = "an idle kernel silent on its heartbeat this long is restarted; a busy one "
	       "(IRkernel does not answer while it runs code) only when its process is stopped"},
    {"keep-contexts", NULL, OPT_SWITCH, OPT_DST(CF.cf_keep_contexts),
     .o_help = "proxies and kernels outlive a stop; the next broker on the same run dir "
	       "re-attaches them (sandcellctl stop-ends-contexts changes it at run time)"},
    {"kernel-memory", "SIZE", OPT_SIZE, OPT_DST(CF.cf_kernel_memory), OPT_XDIGITS | OPT_ZERO,
     16u << 20, UINT64_MAX, "a size of at least 16M, such as 4G or 512M, or 0 for no limit",
     .o_shown = "a quarter of the machine's memory (root, with the sandbox); 0 lifts it",
     .o_help = "memory limit of each context: the box's memory cgroup (the kernel and its "
	       "children; over it the kernel is OOM-killed alone, KernelDied: out of memory); "
	       "only without a memory cgroup (--no-sandbox or a broker that is not root, and no "
	       "--kernel-cgroup) it is RLIMIT_DATA, under which Deno cannot start"},
    {"kernel-cpu", "DURATION", OPT_SECONDS, OPT_DST(CF.cf_kernel_cpu), OPT_XDIGITS, 1,
     UINT32_MAX, "a CPU time of at least 1s, such as 600 or 2h",
     .o_help = "CPU-time limit of each kernel (RLIMIT_CPU, whole seconds)"},
    {"kernel-cgroup", "DIR|systemd", OPT_STRING, OPT_DST(CF.cf_kernel_cgroup),
     .o_help = "each kernel in its own memory cgroup under DIR (v2 or v1), so that a kernel "
	       "over its memory limit is killed alone; or (--no-sandbox only) a scope per "
	       "kernel under sandcell.slice"},
    {"kernel-user", "USER", OPT_STRING, OPT_DST(CF.cf_kernel_user),
     .o_help = "run kernels as USER (never root nor the broker's uid with the sandbox)"},
    {"no-sandbox", NULL, OPT_SWITCH, OPT_DST(CF.cf_sandbox), OPT_OFF,
     .o_help = "run kernels unboxed, as the broker's uid with its view of the machine (logged "
	       "once at start)"},
    {"no-template", NULL, OPT_SWITCH, OPT_DST(CF.cf_template), OPT_OFF,
     .o_help = "start every Python kernel cold instead of forking it from a template that has "
	       "imported ipykernel, numpy and pandas (logged once at start); the template needs "
	       "the sandbox and a root broker, other languages always start cold"},
    {"kernel-uid-range", "A-B", OPT_FUNC, .o_fn = uid_range, .o_default = "61184-65519",
     .o_help = "uids the sandbox runs kernels as, no account needed (systemd's DynamicUser "
	       "range); shared isolation uses the first one this broker can lease. A uid is one "
	       "broker's at a time, and one that a process already runs as is skipped "
	       "(docs/SECURITY.md: Uids), so brokers on one machine may share a range"},
    {"isolation", "shared|context", OPT_FUNC, .o_fn = isolation, .o_default = "shared",
     .o_help = "shared: one uid and one workspace for all contexts (E2B: a file written in one "
	       "is read in another); context: each context gets a uid of its own and its own "
	       "workspace <workspace>/<id> (0700, removed with the context) and no warm pool"},
    {"egress-allow", "CIDR[,...]", OPT_FUNC, .o_fn = egress_allow,
     .o_help = "addresses of the default deny list boxes may reach after all, such as a "
	       "package mirror's 10.99.0.0/24 (repeatable; IPv4 or IPv6). By default a box "
	       "reaches the internet but not link-local (cloud metadata), private, "
	       "carrier-grade NAT or loopback ranges, nor the host's own addresses "
	       "(docs/SECURITY.md: Egress)"},
    {"egress-deny", "CIDR[,...]", OPT_FUNC, .o_fn = egress_deny,
     .o_help = "more addresses boxes may not reach, such as 0.0.0.0/0 and ::/0 for no "
	       "internet (repeatable); the longest matching prefix of both lists decides"},
    {"kernel-network", "outbound|none", OPT_FUNC, .o_fn = network, .o_default = "outbound",
     .o_help = "each context has a network of its own; outbound: with a way out through pasta "
	       "(nothing comes in, the host's loopback is out of reach); none: loopback only"},
    {"workspace-size", "SIZE", OPT_SIZE, OPT_DST(CF.cf_workspace_size), OPT_ZERO, 16u << 20,
     UINT64_MAX, "a size of at least 16M, such as 4G, or 0 for none",
     .o_given = &CF.cf_workspace_size_set,
     .o_shown = "a quarter of the space free at start; --isolation context: "
		"--total-workspace-size shared by --max-contexts contexts (at least 16M)",
     .o_help = "the workspace's size bound, a filesystem of its own (shared: the server's; "
	       "--isolation context: each context's); 0 for none"},
    {"total-memory", "SIZE", OPT_SIZE, OPT_DST(CF.cf_total_memory), OPT_ZERO, 16u << 20,
     UINT64_MAX, "a size of at least 16M, such as 12G, or 0 for none",
     .o_given = &CF.cf_total_memory_set,
     .o_shown = "three quarters of the machine's memory (root, with the sandbox)",
     .o_help = "memory limit of all contexts together: a parent cgroup over every box's (over "
	       "it the largest kernel is OOM-killed, KernelDied: out of memory); 0 for none"},
    {"total-pids", "N", OPT_COUNT, OPT_DST(CF.cf_total_pids), 0, 0, 1u << 22,
     "a number of processes, 0 for no limit", .o_given = &CF.cf_total_pids_set,
     .o_shown = "half of what the machine can have (root, with the sandbox)",
     .o_help = "processes and threads of all contexts together (the parent cgroup's pids.max)"},
    {"total-workspace-size", "SIZE", OPT_SIZE, OPT_DST(CF.cf_total_workspace), OPT_ZERO,
     16u << 20, UINT64_MAX, "a size of at least 16M, such as 100G, or 0 for none",
     .o_given = &CF.cf_total_workspace_set, .o_shown = "half the space free at start",
     .o_help = "--isolation context: the sum of the contexts' workspace bounds; a context "
	       "whose bound does not fit in what the others hold is refused (507); by default "
	       "each one's bound is it shared by --max-contexts contexts"},
    {"kernel-pids", "N", OPT_SIZE, OPT_DST(CF.cf_kernel_pids), OPT_XDIGITS, 0, 1u << 22,
     "a number of processes, 0 for no limit", .o_default = "1024",
     .o_help = "processes and threads per context (cgroup pids controller; where none can "
	       "be made, as in a container, RLIMIT_NPROC of the kernels' uid, which under "
	       "shared isolation bounds all contexts together; 0 none)"},
    {"kernel-tmp-size", "SIZE", OPT_SIZE, OPT_DST(CF.cf_kernel_tmp), OPT_XDIGITS, 1u << 20,
     UINT64_MAX, "a size of at least 1M, such as 512M or 2G", .o_default = "512M",
     .o_help = "size of each context's private /tmp (tmpfs, also /var/tmp and /dev/shm)"},
    {"python-startup", "FILE", OPT_STRING, OPT_DST(CF.cf_python_startup),
     .o_shown = "the profile beside the binaries, for rich data results",
     .o_help = "run in every Python kernel at start; '' for none"},
    {"proxy", "PATH", OPT_STRING, OPT_DST(CF.cf_proxy_bin), .o_shown = "beside the broker",
     .o_help = "the sandcell-proxy binary"},
    {"log-level", "LEVEL", OPT_FUNC, .o_fn = level, .o_default = "info",
     .o_help = "error, warn, info or debug (stderr)"},
};
#undef CF

static struct optset optset = {
    .os_prog = "sandcell-broker",
    .os_prefix = "SANDCELL",
    .os_usage = "usage: sandcell-broker [options]\n"
		"  each option can also be set as SANDCELL_<OPTION> (SANDCELL_MAX_BODY=32M,\n"
		"  SANDCELL_KEEP_CONTEXTS=1; 0/no for off); the command line wins.\n"
		"  SIZE: 16M, 4G... (binary); DURATION: 30 (s), 1.5s, 500ms, 2m, 1h\n",
    .os_opts = options,
    .os_n = sizeof(options) / sizeof(options[0]),
};

/* The flags and SANDCELL_* variables into the settings (config.h); a bad one exits 2. */
void
options_parse(int argc, char **argv)
{
	char **operands;
	const char *tmp = getenv("TMPDIR");

	settings.cf_genv = json_object();
	settings.cf_spill_dir = tmp && *tmp ? tmp : "/var/tmp";
	settings.cf_sandbox = true;
	settings.cf_template = true;
	if (opts_parse(&optset, argc, argv, &operands))
		opts_usage(&optset);
	/* /proc/PID/environ shows the block itself: clear the token there (optenv
	 * holds a copy), then unset it so kernels do not inherit it */
	char *env_token = getenv("SANDCELL_ACCESS_TOKEN");
	if (env_token)
		explicit_bzero(env_token, strlen(env_token));
	unsetenv("SANDCELL_ACCESS_TOKEN");
}
