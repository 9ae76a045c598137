/*
 * config.c — the broker's settings: their one copy (settings, which options.c
 * fills from the flags; every other file reads it through cf, a const
 * pointer: config.h), and what goes beyond parsing the flags: the access
 * token, the global env (--env, --env-file), the warm pool's specs, what is
 * worked out or checked at start (defaults that depend on the machine, the
 * sandbox, the cwd; what another module works out is returned to be kept
 * here, as workspace_bound's), and the run directory (ours alone, locked,
 * with the global env file).
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#define CONFIG_WRITER
#include "config.h"

struct server_config settings;
const struct server_config *const cf = &settings;

/* Only a hash of the token is kept; comparing hashes is constant-time. */
void
config_token_set(const char *token)
{
	if (!*token)
		fatal("the access token is empty");
	crypto_generichash(settings.cf_token_hash, sizeof(settings.cf_token_hash),
			   (const unsigned char *)token, strlen(token), NULL, 0);
	settings.cf_token = true;
}

int
config_token_file(const char *path)
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
	config_token_set(line);
	sodium_memzero(line, sizeof(line));
	return 0;
}

/* --pool python=2,javascript=1; 0 or none for no pool. */
int
config_pool_parse(const char *arg)
{
	char *copy = xstrdup(arg), *save, *tok;

	settings.cf_npool = 0;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (!strcmp(tok, "0") || !strcmp(tok, "none"))
			continue;
		uint64_t size;
		if (!eq || settings.cf_npool == sizeof(settings.cf_pool) / sizeof(settings.cf_pool[0]) ||
		    parse_count(eq + 1, 0, 64, &size) < 0) {
			free(copy);
			return -1;
		}
		*eq = '\0';
		struct pool_spec *ps = &settings.cf_pool[settings.cf_npool++];
		if (lang_normalise(tok, ps->ps_want, sizeof(ps->ps_want)) < 0) {
			free(copy);
			return -1;
		}
		ps->ps_size = size;
	}
	free(copy);
	return 0;
}

int
config_env_put(const char *kv, const char *origin)
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
	json_object_set_new(settings.cf_genv, k, json_string(eq + 1));
	free(k);
	return 0;
}

int
config_env_file(const char *path)
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
		if (config_env_put(p, path) < 0)
			rc = -1;
	}
	free(line);
	fclose(f);
	return rc;
}

/* The run dir is ours alone: 0700, owned by us, one broker at a time. */
void
config_run_dir(void)
{
	struct stat st;
	char *lock, *ctx;
	int fd, rc;

	if ((rc = mkdir_p(settings.cf_run_dir, 0700)) < 0)
		fatal("run dir %s: %s", settings.cf_run_dir, strerror(-rc));
	if (lstat(settings.cf_run_dir, &st) < 0 || !S_ISDIR(st.st_mode))
		fatal("run dir %s: not a directory", settings.cf_run_dir);
	if (st.st_uid != geteuid())
		fatal("run dir %s: owned by uid %u, not us", settings.cf_run_dir, st.st_uid);
	if ((st.st_mode & 0777) != 0700 && chmod(settings.cf_run_dir, 0700) < 0)
		fatal("chmod 0700 %s: %s", settings.cf_run_dir, strerror(errno));
	lock = xasprintf("%s/broker.lock", settings.cf_run_dir);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
		fatal("run dir %s is in use by another broker (%s)", settings.cf_run_dir,
		      strerror(errno));
	free(lock); /* fd stays open: the lock lives as long as we do */
	ctx = xasprintf("%s/ctx", settings.cf_run_dir);
	if ((rc = mkdir_p(ctx, 0700)) < 0)
		fatal("mkdir %s: %s", ctx, strerror(-rc));
	free(ctx);

	settings.cf_env_file = xasprintf("%s/global-env.json", settings.cf_run_dir);
	char *tmp = xasprintf("%s.tmp", settings.cf_env_file);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || json_dumpfd(settings.cf_genv, fd, JSON_COMPACT) < 0 ||
	    rename(tmp, settings.cf_env_file) < 0)
		fatal("write %s: %s", settings.cf_env_file, strerror(errno));
	close(fd);
	free(tmp);
}

const char *
config_default_cwd(void)
{
	struct stat st;
	const char *home = getenv("HOME");

	if (stat("/home/user", &st) == 0 && S_ISDIR(st.st_mode))
		return "/home/user";
	return home && *home == '/' ? home : "/";
}

/* sandcell's IPython start-up profile: in the source tree, or installed. */
const char *
config_python_startup(void)
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

const char *
config_proxy_bin(void)
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

/*
 * The memory limit of each context when none is given: a quarter of what
 * the machine has, or of the memory limit the broker is under (its cgroup's
 * or an ancestor's, as a container's) when that is less. At least 256 MiB; the caller says it at start.
 */
uint64_t
config_default_memory(uint64_t *of)
{
	uint64_t lim;

	*of = cgroup_machine_memory();
	lim = (*of / 4) & ~((1ull << 20) - 1);
	return lim < (256ull << 20) ? 256ull << 20 : lim;
}

/* Limits that depend on the machine: the start gate, the kernels' user, fds. */
static void
settle_limits(void)
{
	struct rlimit nofile;

	if (!settings.cf_max_starting[0]) {
		/* a start is CPU work: one per CPU we can use, and one more to
		 * keep them busy while a slot changes hands */
		int quota, n = cpus_usable(&quota);
		snprintf(settings.cf_max_starting, sizeof(settings.cf_max_starting), "%d", n + 1);
		log_info("start gate: at most %d kernels start at once (%d CPU%s%s)", n + 1, n,
			 n == 1 ? "" : "s", quota == n ? ", the cgroup's CPU quota" : "");
	}
	if (settings.cf_kernel_user) {
		struct passwd *pw = getpwnam(settings.cf_kernel_user);
		if (!pw)
			fatal("--kernel-user %s: no such user", settings.cf_kernel_user);
		settings.cf_kernel_uid = pw->pw_uid;
	}
	/* one descriptor per connection: take what the hard limit allows */
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
}

/* The sandbox: usable here, its memory default, and what it will be, said once. */
static void
settle_sandbox(void)
{
	char err[512];

	if (!settings.cf_sandbox) {
		log_warn("sandbox: off (--no-sandbox): kernels run with the broker's privileges "
			 "and see the whole machine");
		return;
	}
	if (box_check(err, sizeof(err)) < 0)
		fatal("sandbox: %s", err);
	if (box_no_way_out()) /* box_check said why */
		settings.cf_kernel_network = "none";
	/* the parent cgroup of all contexts' boxes */
	const char *remedy, *lacks = bounds_settle(box_memory_cgroup(), &remedy);
	if (lacks)
		box_lack(lacks, remedy);
	if (!settings.cf_kernel_memory && box_memory_cgroup()) { /* a memory cgroup each */
		uint64_t of, m = config_default_memory(&of);
		settings.cf_kernel_memory = xasprintf("%llu", (unsigned long long)m);
		log_info("sandbox: each context may use %llu MiB of memory, a quarter of "
			 "the machine's %llu MiB; --kernel-memory changes it, 0 lifts it",
			 (unsigned long long)(m >> 20), (unsigned long long)(of >> 20));
	}
	struct passwd *ku = settings.cf_kernel_user ? getpwnam(settings.cf_kernel_user) : NULL;
	if (ku && (ku->pw_uid == 0 || ku->pw_uid == geteuid()))
		fatal("--kernel-user %s: kernels never run as root or as the broker's uid",
		      settings.cf_kernel_user);
	/* not root, the kernels are uid 1000 of a user namespace (proxy/sandbox.c) */
	const char *who = ku ? settings.cf_kernel_user : geteuid() ? "1000" : settings.cf_uid_range;
	const char *how = geteuid()			 ? " in a user namespace"
			  : ku || settings.cf_isolated ? ""
						       : ", one leased for all contexts";
	log_info("sandbox: on (uid %s%s, isolation %s, network %s, pids %s, tmp %s "
		 "bytes, memory %s)",
		 who, how, settings.cf_isolated ? "context" : "shared", settings.cf_kernel_network,
		 settings.cf_kernel_pids, settings.cf_kernel_tmp,
		 settings.cf_kernel_memory ? settings.cf_kernel_memory : "no limit");
	if (settings.cf_isolated && settings.cf_npool) {
		/* a warm kernel has a uid and workspace before it has a context */
		log_info("sandbox: no warm pool with --isolation context");
		settings.cf_npool = 0;
	}
}

/*
 * The access token's file is in no box's sight. A box covering it (the
 * file's inode under /dev/null) would not do: the usual rotation, a new
 * file renamed over it, puts the new token in the cover's place for every
 * running kernel; nor can a box hide the directories it needs (/etc).
 * So a file the view shows (the system, the workspace, the Python profile's
 * or Deno's directory) is refused at start, saying where to put it; each
 * proxy checks its box's own binds too (proxy/sandbox.c).
 */
static void
settle_token(void)
{
	const char *dirs[2] = {NULL, NULL}, *part;
	char *startup = NULL;

	if (!settings.cf_sandbox || !settings.cf_token_file)
		return;
	if (settings.cf_python_startup && strrchr(settings.cf_python_startup, '/'))
		dirs[0] = startup = xstrndup(settings.cf_python_startup,
					     strrchr(settings.cf_python_startup, '/') -
						     settings.cf_python_startup);
	char *deno = kspec_program("deno");
	if (deno && strrchr(deno, '/'))
		*strrchr(deno, '/') = '\0', dirs[1] = deno;
	part = boxview_shows(settings.cf_token_file, settings.cf_cwd, dirs, 2);
	if (part) {
		log_err("--access-token-file %s: every box shows %s to its kernels, and no cover "
			"of the file outlives a rotation (a new file renamed over it): put the "
			"token where no box looks, such as /var/lib/sandcell/token (0600) or "
			"systemd's $CREDENTIALS_DIRECTORY",
			settings.cf_token_file, part);
		exit(2);
	}
	free(startup);
	free(deno);
}

/* The paths not given: the cwd (checked), the proxy, the Python profile. */
static void
settle_paths(void)
{
	bool cwd_given = settings.cf_cwd;
	char err[512];

	if (!settings.cf_cwd)
		settings.cf_cwd = settings.cf_sandbox ? workspace_shared() : config_default_cwd();
	/* every kernel would fail to start there (status 126): refuse now */
	if (cwd_check(settings.cf_cwd, boxuid_isolates() ? (uid_t)-1 : boxuid_kernel(NULL), err,
		      sizeof(err)) < 0) {
		log_err("%s %s: %s%s", cwd_given ? "--cwd" : "default cwd", settings.cf_cwd, err,
			cwd_given ? "" : "; give one with --cwd DIR");
		exit(2);
	}
	/* (SANDCELL_PYTHON_STARTUP is the flag's variable: options.c read it) */
	if (!settings.cf_python_startup)
		settings.cf_python_startup = config_python_startup();
	else if (!*settings.cf_python_startup)
		settings.cf_python_startup = NULL; /* --python-startup '': none */
	settle_token(); /* before the workspace is mounted: a refusal leaves nothing */
	/* its filesystem's root takes the directory's owner and mode */
	settings.cf_workspace_size = workspace_bound();
	bounds_workspaces();
	if (!settings.cf_proxy_bin)
		settings.cf_proxy_bin = config_proxy_bin();
	if (access(settings.cf_proxy_bin, X_OK) < 0)
		fatal("proxy binary %s: %s", settings.cf_proxy_bin, strerror(errno));
	/* envd's agent (envd.c) is beside the proxy */
	const char *slash = strrchr(settings.cf_proxy_bin, '/');
	settings.cf_envd_bin = slash ? xasprintf("%.*s/sandcell-envd",
						 (int)(slash - settings.cf_proxy_bin),
						 settings.cf_proxy_bin)
				     : "sandcell-envd";
}

/* Once every lack is known: the sandbox's level, as GET /ready gives it. */
static void
say_level(void)
{
	json_t *lv = box_level_json();
	size_t n = json_array_size(json_object_get(lv, "missing"));
	json_int_t abi = json_integer_value(json_object_get(lv, "landlock_abi"));

	char parts[64] = "";

	if (n)
		snprintf(parts, sizeof(parts), " (%zu parts missing, each said above)", n);
	if (settings.cf_sandbox)
		log_msg(n ? LOG_WARN : LOG_INFO, "sandbox: level %s%s%s, Landlock ABI %lld%s",
			json_string_value(json_object_get(lv, "level")),
			json_is_false(json_object_get(lv, "namespaces")) ? " without namespaces" : "",
			parts, (long long)abi,
			abi >= 6 ? "" : abi ? " (no scoping of signals)" : " (none)");
	json_decref(lv);
}

/* What the options leave to be worked out or checked, in order; exits on failure. */
void
config_settle(void)
{
	settle_limits();
	if (!settings.cf_run_dir)
		settings.cf_run_dir = default_run_dir();
	settle_sandbox();
	/* with no network of their own, kernels cannot connect to us at all */
	if (!settings.cf_sandbox || strcmp(settings.cf_kernel_network, "none"))
		peer_check();
	settle_paths();
	say_level();
}
