/*
 * launch.c — what a kernel is started with: its environment, its argv with the
 * kernelspec's placeholders filled in and resolved on PATH, the IPython
 * profile, and the connection file (ipc paths, or free loopback ports).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "proxy.h"

extern char **environ;

/* A free loopback TCP port, for kernels that cannot use ipc (Deno). */
static int
free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd < 0)
		return -1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static void
env_put(char ***v, size_t *n, size_t *cap, char *kv)
{
	size_t kl = strcspn(kv, "=");

	for (size_t i = 0; i < *n; i++)
		if (!strncmp((*v)[i], kv, kl) && (*v)[i][kl] == '=') {
			free((*v)[i]);
			(*v)[i] = kv;
			return;
		}
	if (*n + 2 > *cap)
		*v = xrealloc(*v, (*cap *= 2) * sizeof(**v));
	(*v)[(*n)++] = kv;
}

/* environ, overridden by the kernelspec's env, then ours, then the global env. */
char **
launch_env(struct proxy *px, const char *home)
{
	size_t n = 0, cap = 64;
	char **v = xmalloc(cap * sizeof(*v));
	char *ours[] = {
		xasprintf("HOME=%s", home),
		xasprintf("IPYTHONDIR=%s/.ipython", home),
		xasprintf("JUPYTER_RUNTIME_DIR=%s/.jupyter-runtime", home),
		xasprintf("PWD=%s", px->px_cwd),
		xstrdup("PYDEVD_DISABLE_FILE_VALIDATION=1"),
		/* one font cache for every kernel, built once, not per context */
		xasprintf("MPLCONFIGDIR=%s", px->px_mplcache),
		/* in a box the kernel's parent is its init, PID 1: "1" turns
		 * ipykernel's parent poller off (PR_SET_PDEATHSIG does its job) */
		xasprintf("JPY_PARENT_PID=%d", px->px_sandbox ? 1 : (int)getpid()),
		NULL,
	};

	for (char **e = environ; *e; e++)
		if (strncmp(*e, "NOTIFY_SOCKET=", 14) && strncmp(*e, "LISTEN_", 7))
			env_put(&v, &n, &cap, xstrdup(*e));
	for (char **e = px->px_ks->ks_env; *e; e++)
		env_put(&v, &n, &cap, xstrdup(*e));
	for (char **e = ours; *e; e++)
		env_put(&v, &n, &cap, *e);
	if (!getenv("LANG") && !getenv("LC_ALL")) /* R and bash need it for UTF-8 */
		env_put(&v, &n, &cap, xstrdup("LANG=C.UTF-8"));
	for (size_t i = 0; i < px->px_ngenv; i++)
		env_put(&v, &n, &cap, xasprintf("%s=%s", px->px_genv[i].e_key.s, px->px_genv[i].e_val.s));
	if (px->px_ngenv && !strcmp(px->px_ks->ks_lang, "java")) {
		/* their names: the Java kernel sets them as system properties too */
		struct buf names = {0};
		buf_append(&names, "SANDCELL_GLOBAL_ENV=", 20);
		for (size_t i = 0; i < px->px_ngenv; i++) {
			if (i)
				buf_append(&names, ",", 1);
			buf_append(&names, px->px_genv[i].e_key.s, px->px_genv[i].e_key.len);
		}
		buf_append(&names, "", 1);
		env_put(&v, &n, &cap, names.b_data);
	}
	v[n] = NULL;
	return v;
}

void
launch_free_strv(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

char *
launch_subst(const char *arg, const char *conn, const char *resdir)
{
	struct buf b = {0};
	const struct {
		const char *pat, *val;
	} subs[] = {{"{connection_file}", conn}, {"{resource_dir}", resdir}};

	while (*arg) {
		size_t i, nsubs = sizeof(subs) / sizeof(subs[0]);
		for (i = 0; i < nsubs; i++)
			if (!strncmp(arg, subs[i].pat, strlen(subs[i].pat)))
				break;
		if (i < nsubs) {
			buf_append(&b, subs[i].val, strlen(subs[i].val));
			arg += strlen(subs[i].pat);
		} else {
			buf_append(&b, arg++, 1);
		}
	}
	buf_append(&b, "", 1);
	return b.b_data;
}

/* Resolves argv[0] on PATH before fork, so the child only calls execve. */
char *
launch_which(const char *prog)
{
	const char *path = getenv("PATH");
	char *copy, *save, *dir;

	if (strchr(prog, '/'))
		return xstrdup(prog);
	copy = xstrdup(path ? path : "/usr/local/bin:/usr/bin:/bin");
	for (dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		char *p = xasprintf("%s/%s", *dir ? dir : ".", prog);
		if (access(p, X_OK) == 0) {
			free(copy);
			return p;
		}
		free(p);
	}
	free(copy);
	return xstrdup(prog);
}

/*
 * The IPython kernel's configuration: history in memory, not in an sqlite
 * file (a kernel killed mid-write leaves the file to its successor, which then
 * prints "Session/line number was not unique" into the user's output), and
 * sandcell's start-up profile (rich results for data work) run at start.
 */
void
launch_ipython_profile(struct proxy *px, const char *home)
{
	char *dir = xasprintf("%s/.ipython/profile_default", home);
	char *path = xasprintf("%s/ipython_kernel_config.py", dir);
	struct buf cfg = {0};
	int fd;

	buf_append(&cfg, "c.HistoryManager.hist_file = ':memory:'\n", 40);
	if (px->px_py_startup) {
		json_t *p = json_string(px->px_py_startup);
		char *lit = json_dumps(p, JSON_ENCODE_ANY);
		char *line = xasprintf("c.InteractiveShellApp.exec_files = [%s]\n", lit);
		buf_append(&cfg, line, strlen(line));
		free(line);
		free(lit);
		json_decref(p);
	}
	if (mkdir_p(dir, 0700) == 0 &&
	    (fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) >= 0) {
		if (write(fd, buf_head(&cfg), buf_pending(&cfg)) < 0)
			log_warn("context %s: write %s: %s", px->px_id, path, strerror(errno));
		close(fd);
	}
	buf_free(&cfg);
	free(path);
	free(dir);
}

int
launch_connection_file(struct proxy *px, const char *path, int ports[5], char ep[5][EP_MAX])
{
	json_t *o;
	char ip[PATH_MAX];
	int rc, fd;
	char *s;

	if (px->px_ks->ks_tcp) {
		snprintf(ip, sizeof(ip), "127.0.0.1");
		for (int i = 0; i < 5; i++) {
			if ((ports[i] = free_port()) < 0)
				return -EADDRNOTAVAIL;
			snprintf(ep[i], EP_MAX, "tcp://127.0.0.1:%d", ports[i]);
		}
	} else {
		snprintf(ip, sizeof(ip), "%s/%s", px->px_kdir, px->px_kchan);
		for (int i = 0; i < 5; i++) {
			ports[i] = i + 1;
			snprintf(ep[i], EP_MAX, "ipc://%s-%d", ip, ports[i]);
		}
	}
	o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:s, s:s, s:s}", "shell_port",
		      ports[0], "iopub_port", ports[1], "stdin_port", ports[2], "control_port",
		      ports[3], "hb_port", ports[4], "ip", ip, "key", px->px_key, "transport",
		      px->px_ks->ks_tcp ? "tcp" : "ipc", "signature_scheme", "hmac-sha256",
		      "kernel_name", px->px_ks->ks_name);
	s = json_dumps(o, JSON_INDENT(1));
	json_decref(o);
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
	} else {
		if (px->px_kuid != (uid_t)-1 && fchown(fd, px->px_kuid, px->px_kgid) < 0)
			log_warn("context %s: chown %s: %s", px->px_id, path, strerror(errno));
		size_t len = strlen(s);
		ssize_t n = write(fd, s, len);
		/* a short write is a full filesystem: say so, not EIO */
		rc = n == (ssize_t)len ? 0 : n < 0 ? -errno : -ENOSPC;
		if (close(fd) < 0 && !rc)
			rc = -errno;
	}
	free(s);
	return rc;
}
