/*
 * config.c — the broker's settings beyond parsing its flags: the access token,
 * the global env (--env, --env-file), the warm pool's specs, default paths,
 * and the run directory (ours alone, locked, with the global env file).
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "broker.h"

/* Only a hash of the token is kept; comparing hashes is constant-time. */
void
config_token_set(const char *token)
{
	if (!*token)
		fatal("the access token is empty");
	crypto_generichash(sv.sv_cf.cf_token_hash, sizeof(sv.sv_cf.cf_token_hash),
			   (const unsigned char *)token, strlen(token), NULL, 0);
	sv.sv_cf.cf_token = true;
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

	sv.sv_cf.cf_npool = 0;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (!strcmp(tok, "0") || !strcmp(tok, "none"))
			continue;
		uint64_t size;
		if (!eq || sv.sv_cf.cf_npool == sizeof(sv.sv_cf.cf_pool) / sizeof(sv.sv_cf.cf_pool[0]) ||
		    parse_count(eq + 1, 0, 64, &size) < 0) {
			free(copy);
			return -1;
		}
		*eq = '\0';
		struct pool_spec *ps = &sv.sv_cf.cf_pool[sv.sv_cf.cf_npool++];
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
	json_object_set_new(sv.sv_cf.cf_genv, k, json_string(eq + 1));
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

	if ((rc = mkdir_p(sv.sv_cf.cf_run_dir, 0700)) < 0)
		fatal("run dir %s: %s", sv.sv_cf.cf_run_dir, strerror(-rc));
	if (lstat(sv.sv_cf.cf_run_dir, &st) < 0 || !S_ISDIR(st.st_mode))
		fatal("run dir %s: not a directory", sv.sv_cf.cf_run_dir);
	if (st.st_uid != geteuid())
		fatal("run dir %s: owned by uid %u, not us", sv.sv_cf.cf_run_dir, st.st_uid);
	if ((st.st_mode & 0777) != 0700 && chmod(sv.sv_cf.cf_run_dir, 0700) < 0)
		fatal("chmod 0700 %s: %s", sv.sv_cf.cf_run_dir, strerror(errno));
	lock = xasprintf("%s/broker.lock", sv.sv_cf.cf_run_dir);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
		fatal("run dir %s is in use by another broker (%s)", sv.sv_cf.cf_run_dir,
		      strerror(errno));
	free(lock); /* fd stays open: the lock lives as long as we do */
	ctx = xasprintf("%s/ctx", sv.sv_cf.cf_run_dir);
	if ((rc = mkdir_p(ctx, 0700)) < 0)
		fatal("mkdir %s: %s", ctx, strerror(-rc));
	free(ctx);

	sv.sv_cf.cf_env_file = xasprintf("%s/global-env.json", sv.sv_cf.cf_run_dir);
	char *tmp = xasprintf("%s.tmp", sv.sv_cf.cf_env_file);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || json_dumpfd(sv.sv_cf.cf_genv, fd, JSON_COMPACT) < 0 ||
	    rename(tmp, sv.sv_cf.cf_env_file) < 0)
		fatal("write %s: %s", sv.sv_cf.cf_env_file, strerror(errno));
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

/* A number from the first line of a file, or 0 ("max", absent, garbage). */
static uint64_t
first_number(const char *path)
{
	FILE *f = fopen(path, "re");
	unsigned long long v = 0;

	if (f && fscanf(f, "%llu", &v) != 1)
		v = 0;
	if (f)
		fclose(f);
	return v;
}

/*
 * The memory limit of each context when none is given: a quarter of what
 * the machine has, or of a container's limit (the cgroup at its root, v2 or
 * v1) when that is less. At least 256 MiB; the caller says it at start.
 */
uint64_t
config_default_memory(uint64_t *of)
{
	uint64_t total = 0, lim;
	char line[256];
	FILE *f = fopen("/proc/meminfo", "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %" SCNu64 " kB", &total) == 1) {
			total <<= 10;
			break;
		}
	if (f)
		fclose(f);
	if ((lim = first_number("/sys/fs/cgroup/memory.max")) && lim < total)
		total = lim;
	if ((lim = first_number("/sys/fs/cgroup/memory/memory.limit_in_bytes")) && lim < total)
		total = lim;
	*of = total;
	lim = (total / 4) & ~((1ull << 20) - 1);
	return lim < (256ull << 20) ? 256ull << 20 : lim;
}
