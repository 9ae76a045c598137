/*
 * agent.c — sandcell-envd: the agent that does envd's file operations inside
 * a box (docs/ENVD.md). Its envd proxy (proxy/envd.c) starts it in a box
 * built like a context's, as the contexts' uid, with /home/user as its cwd;
 * it connects to the proxy's abstract socket (argv[1]) and answers each
 * MSG_ENVD with OK (data: JSON, or a file's bytes) or FAIL (outcome: a
 * Connect error code). Every path is a path of the box, resolved by the
 * kernel as the tenant: nothing here checks paths, nothing here can reach
 * what the tenant cannot. Its answers are checked by the broker.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include "agent.h"

#define AGENT_MAX_DEPTH 64
#define AGENT_MAX_ENTRIES 100000

static int proxy_fd = -1;

int
agent_fail(struct answer *a, const char *code, const char *fmt, ...)
{
	va_list ap;

	a->a_code = code;
	va_start(ap, fmt);
	vsnprintf(a->a_text, sizeof(a->a_text), fmt, ap);
	va_end(ap);
	return -1;
}

/* An errno as envd's Connect code. */
static const char *
code_of(int e)
{
	switch (e) {
	case ENOENT:
		return "not_found";
	case EEXIST:
	case ENOTEMPTY:
		return "already_exists";
	case EACCES:
	case EPERM:
	case EROFS:
		return "permission_denied";
	case EISDIR:
	case ENOTDIR:
	case EINVAL:
	case ELOOP:
	case ENAMETOOLONG:
	case EXDEV:
		return "invalid_argument";
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
	case EMFILE:
	case ENFILE:
		return "resource_exhausted";
	default:
		return "internal";
	}
}

int
agent_fail_errno(struct answer *a, const char *what, const char *path, int e)
{
	return agent_fail(a, code_of(e), "%s '%s': %s", what, path, strerror(e));
}

/* The path as a path of the box: relative ones are under the cwd (/home/user). */
static char *
absolute(const char *path)
{
	char cwd[PATH_MAX];

	if (path[0] == '/' || !getcwd(cwd, sizeof(cwd)))
		return xstrdup(path);
	return xasprintf("%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", path);
}

static void
perms(mode_t m, char out[11])
{
	const char *rwx = "rwxrwxrwx";

	out[0] = S_ISDIR(m) ? 'd' : S_ISLNK(m) ? 'L' : '-';
	for (int i = 0; i < 9; i++)
		out[i + 1] = (m & (1u << (8 - i))) ? rwx[i] : '-';
	out[10] = '\0';
}

static json_t *
name_of_uid(uid_t uid)
{
	struct passwd *pw = getpwuid(uid);

	return pw ? json_string(pw->pw_name) : json_sprintf("%u", (unsigned)uid);
}

static json_t *
name_of_gid(gid_t gid)
{
	struct group *gr = getgrgid(gid);

	return gr ? json_string(gr->gr_name) : json_sprintf("%u", (unsigned)gid);
}

/* What envd's EntryInfo says of path (lstat: a symlink is one, with its target). */
json_t *
agent_entry(const char *path, struct answer *a)
{
	char *abs = absolute(path), target[PATH_MAX], pm[11];
	const char *base = strrchr(abs, '/');
	struct stat st, to;
	json_t *e;
	ssize_t n;

	if (lstat(path, &st) < 0) {
		agent_fail_errno(a, "stat", path, errno);
		free(abs);
		return NULL;
	}
	base = base && base[1] ? base + 1 : abs;
	e = json_pack("{s:s, s:s, s:I, s:i, s:o, s:o, s:I, s:I}", "name", base, "path",
	              abs, "size", (json_int_t)st.st_size, "mode",
	              (int)(st.st_mode & 07777), "owner", name_of_uid(st.st_uid), "group",
	              name_of_gid(st.st_gid), "mtime_s", (json_int_t)st.st_mtim.tv_sec,
	              "mtime_ns", (json_int_t)st.st_mtim.tv_nsec);
	if (!e) { /* a name JSON cannot carry (not UTF-8) */
		agent_fail(a, "invalid_argument", "path '%s': not UTF-8", path);
		free(abs);
		return NULL;
	}
	if (S_ISLNK(st.st_mode)) {
		json_object_set_new(e, "type", json_string("symlink"));
		if ((n = readlink(path, target, sizeof(target) - 1)) >= 0) {
			target[n] = '\0';
			json_object_set_new(e, "symlink_target", json_string(target));
		}
		/* envd's type and mode are its target's */
		if (stat(path, &to) == 0) {
			json_object_set_new(
			    e, "type", json_string(S_ISDIR(to.st_mode) ? "dir" : "file"));
			st.st_mode = (st.st_mode & S_IFMT) | (to.st_mode & 07777);
		}
	} else {
		json_object_set_new(e, "type",
		                    json_string(S_ISDIR(st.st_mode) ? "dir" : "file"));
	}
	perms(st.st_mode, pm);
	json_object_set_new(e, "permissions", json_string(pm));
	json_t *md = meta_of(path);
	if (md)
		json_object_set_new(e, "metadata", md);
	free(abs);
	return e;
}

static int
op_stat(json_t *args, struct answer *a)
{
	const char *path = json_string_value(json_object_get(args, "path"));

	if (!(a->a_json = agent_entry(path, a)))
		return -1;
	return 0;
}

static int
list_into(json_t *out, const char *dir, unsigned depth, struct answer *a)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return agent_fail_errno(a, "list", dir, errno);
	while ((de = readdir(d)) && rc == 0) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (json_array_size(out) >= AGENT_MAX_ENTRIES) {
			rc = agent_fail(a, "resource_exhausted",
			                "list '%s': over %u entries", dir,
			                AGENT_MAX_ENTRIES);
			break;
		}
		char *p = xasprintf("%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
		                    de->d_name);
		json_t *e = agent_entry(p, a);
		if (!e) {
			/* gone meanwhile, or a name JSON cannot carry: skipped */
			if (strcmp(a->a_code, "not_found") &&
			    strcmp(a->a_code, "invalid_argument"))
				rc = -1;
			a->a_code = rc ? a->a_code : NULL;
		} else {
			bool sub = depth > 1 && de->d_type == DT_DIR;
			json_array_append_new(out, e);
			/* a directory below that is not the tenant's to read: its entry
			 * alone */
			if (sub && list_into(out, p, depth - 1, a) < 0) {
				if (strcmp(a->a_code, "permission_denied"))
					rc = -1;
				else
					a->a_code = NULL;
			}
		}
		free(p);
	}
	closedir(d);
	return rc;
}

static int
op_list(json_t *args, struct answer *a)
{
	const char *path = json_string_value(json_object_get(args, "path"));
	json_int_t depth = json_integer_value(json_object_get(args, "depth"));
	struct stat st;

	if (depth < 1)
		depth = 1;
	if (depth > AGENT_MAX_DEPTH)
		depth = AGENT_MAX_DEPTH;
	if (stat(path, &st) < 0)
		return agent_fail_errno(a, "list", path, errno);
	if (!S_ISDIR(st.st_mode))
		return agent_fail(a, "invalid_argument", "path '%s' is not a directory",
		                  path);
	a->a_json = json_array();
	return list_into(a->a_json, path, (unsigned)depth, a);
}

/* mkdir -p of path's parents, as envd does before a write or a move. */
int
agent_parents(const char *path, struct answer *a)
{
	char *dir = xstrdup(path), *slash = strrchr(dir, '/');
	int rc = 0;

	if (slash && slash != dir) {
		*slash = '\0';
		if ((rc = mkdir_p(dir, 0755)) < 0)
			agent_fail_errno(a, "make the directory", dir, -rc);
	}
	free(dir);
	return rc < 0 ? -1 : 0;
}

static int
op_mkdir(json_t *args, struct answer *a)
{
	const char *path = json_string_value(json_object_get(args, "path"));
	struct stat st;
	int rc;

	if (lstat(path, &st) == 0)
		return agent_fail(a, "already_exists", "path '%s' already exists", path);
	if ((rc = mkdir_p(path, 0755)) < 0)
		return agent_fail_errno(a, "make the directory", path, -rc);
	return (a->a_json = agent_entry(path, a)) ? 0 : -1;
}

static int
op_move(json_t *args, struct answer *a)
{
	const char *from = json_string_value(json_object_get(args, "source"));
	const char *to = json_string_value(json_object_get(args, "destination"));

	if (agent_parents(to, a) < 0)
		return -1;
	if (rename(from, to) < 0)
		return agent_fail_errno(a, "move", from, errno);
	return (a->a_json = agent_entry(to, a)) ? 0 : -1;
}

static int
op_remove(json_t *args, struct answer *a)
{
	const char *path = json_string_value(json_object_get(args, "path"));
	struct stat st;
	int rc;

	if (lstat(path, &st) < 0)
		return agent_fail_errno(a, "remove", path, errno);
	if ((rc = rm_rf(path)) < 0)
		return agent_fail_errno(a, "remove", path, -rc);
	a->a_json = json_object();
	return 0;
}

/* Every operation's string arguments: present, non-empty, no NUL (the decoder's). */
static int
check_paths(json_t *args, const char *op, struct answer *a)
{
	const char *keys[2] = {"path", NULL};

	if (!strcmp(op, "move")) {
		keys[0] = "source";
		keys[1] = "destination";
	}
	for (int i = 0; i < 2 && keys[i]; i++) {
		json_t *v = json_object_get(args, keys[i]);
		if (!json_is_string(v) || !json_string_length(v) ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return agent_fail(a, "invalid_argument",
			                  "%s: a non-empty string is required", keys[i]);
	}
	return 0;
}

/* To the proxy; the agent ends when it is gone. */
void
agent_send(const struct msg *m)
{
	if (pipe_send(proxy_fd, m) < 0)
		exit(0);
}

/* An event on a stream (a process's, a watch's); none when stream is 0. */
void
agent_event(uint64_t stream, const char *kind, const void *data, size_t len, bool final)
{
	struct msg m;

	if (!stream)
		return;
	msg_init(&m, MSG_OUTPUT);
	msg_set_u64(&m, F_STREAM, stream);
	msg_set_str(&m, F_OUTCOME, kind, strlen(kind));
	msg_set_str(&m, F_DATA, data ? data : "", len);
	if (final)
		msg_set_u64(&m, F_FINAL, 1);
	agent_send(&m);
	msg_free(&m);
}

/* The file operations' and the processes' unary calls. */
static void
dispatch(const char *op, json_t *args, const struct msg *m, struct answer *a)
{
	if (!strcmp(op, "plist"))
		proc_list(a);
	else if (!strcmp(op, "signal"))
		proc_signal(args, a);
	else if (!strcmp(op, "input"))
		proc_input(args, &m->m_data, a);
	else if (!strcmp(op, "close_stdin"))
		proc_close_stdin(args, a);
	else if (!strcmp(op, "resize"))
		proc_resize(args, a);
	else if (!strcmp(op, "wcreate"))
		watch_create(args, a);
	else if (!strcmp(op, "wevents"))
		watch_events(args, a);
	else if (!strcmp(op, "wremove"))
		watch_remove(args, a);
	else if (check_paths(args, op, a) < 0)
		return;
	else if (!strcmp(op, "stat"))
		op_stat(args, a);
	else if (!strcmp(op, "list"))
		op_list(args, a);
	else if (!strcmp(op, "mkdir"))
		op_mkdir(args, a);
	else if (!strcmp(op, "move"))
		op_move(args, a);
	else if (!strcmp(op, "remove"))
		op_remove(args, a);
	else
		agent_fail(a, "unimplemented", "no operation '%.64s'", op);
}

static void
handle(const struct msg *m)
{
	struct answer a = {0};
	json_t *args = json_loadb(m->m_code.s, m->m_code.len, 0, NULL);
	const char *op = m->m_text.s;
	struct msg r;

	if (m->m_has & FB(F_STREAM)) { /* a stream: its events answer it */
		if (!strcmp(op, "start") && json_is_object(args))
			proc_start(m->m_stream, args);
		else if (!strcmp(op, "connect") && json_is_object(args))
			proc_connect(m->m_stream, args);
		else if (!strcmp(op, "watch") && json_is_object(args))
			watch_start(m->m_stream, args);
		else if (!strcmp(op, "read") && json_is_object(args))
			file_read(m->m_stream, args);
		else if (!strcmp(op, "more") && json_is_object(args))
			file_more(m->m_stream, args);
		else if (!strcmp(op, "wopen") && json_is_object(args))
			file_wopen(m->m_stream, args);
		else if (!strcmp(op, "wdata") && json_is_object(args))
			file_wdata(m->m_stream, args, &m->m_data);
		else if (!strcmp(op, "wend"))
			file_wend(m->m_stream);
		else /* the stream ends at once */
			proc_refuse(m->m_stream, "unimplemented",
			            "no such stream operation");
		json_decref(args);
		return;
	}
	if (!json_is_object(args))
		agent_fail(&a, "invalid_argument", "the arguments are not a JSON object");
	else
		dispatch(op, args, m, &a);
	json_decref(args);
	msg_init(&r, a.a_code ? MSG_FAIL : MSG_OK);
	msg_set_u64(&r, F_REQ, m->m_req);
	if (a.a_code) {
		msg_set_str(&r, F_TEXT, a.a_text, strlen(a.a_text));
		msg_set_str(&r, F_OUTCOME, a.a_code, strlen(a.a_code));
	} else if (a.a_bytes) {
		msg_set_str(&r, F_DATA, a.a_bytes, a.a_nbytes);
	} else {
		char *s = a.a_json ? json_dumps(a.a_json, JSON_COMPACT) : NULL;
		if (!s) { /* nothing said what failed: say so, never answer nothing */
			msg_free(&r);
			msg_init(&r, MSG_FAIL);
			msg_set_u64(&r, F_REQ, m->m_req);
			msg_set_str(&r, F_TEXT, "no answer", 9);
			msg_set_str(&r, F_OUTCOME, "internal", 8);
		} else {
			msg_set_str(&r, F_DATA, s, strlen(s));
		}
		free(s);
	}
	json_decref(a.a_json);
	free(a.a_bytes);
	agent_send(&r);
	msg_free(&r);
}

/*
 * A sanitized build (make test-asan) checks the agent for errors, but not for
 * leaks: LeakSanitizer needs ptrace, which its box refuses. (Read by the ASan
 * runtime; unused otherwise.)
 */
const char *__asan_default_options(void);
const char *
__asan_default_options(void)
{
	return "detect_leaks=0";
}

int
main(int argc, char **argv)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct pollfd pf[2 + 2 * PROC_MAX + WATCH_MAX];
	sigset_t chld;
	size_t n;
	int sigfd;

	log_init("sandcell-envd", LOG_INFO);
	if (argc != 2 || (n = strlen(argv[1])) + 1 > sizeof(sa.sun_path))
		fatal("usage: sandcell-envd SOCKET-NAME (started by sandcell-proxy "
		      "--envd)");
	memcpy(sa.sun_path + 1, argv[1], n); /* abstract: this network namespace's */
	/* the agent listens and the proxy connects: Landlock's scoping keeps a
	 * boxed process from connecting to an abstract socket made outside its
	 * domain, never the proxy from connecting in */
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 ||
	    bind(lfd, (struct sockaddr *)&sa,
	         offsetof(struct sockaddr_un, sun_path) + 1 + n) < 0 ||
	    listen(lfd, 1) < 0 || (proxy_fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
		fatal("listen for the proxy: %s", strerror(errno));
	close(lfd); /* one connection: nothing else gets the proxy's place */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	signal(SIGPIPE, SIG_IGN);
	if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0 ||
	    (sigfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
		fatal("signalfd: %s", strerror(errno));
	umask(022);
	for (;;) {
		pf[0] = (struct pollfd){proxy_fd, POLLIN, 0};
		pf[1] = (struct pollfd){sigfd, POLLIN, 0};
		size_t np = 2 + proc_pollfds(pf + 2, 2 * PROC_MAX);
		size_t nw = watch_pollfds(pf + np, WATCH_MAX);
		/* a download with credit goes on at once */
		if (poll(pf, np + nw, file_ready() ? 0 : -1) < 0) {
			if (errno == EINTR)
				continue;
			fatal("poll: %s", strerror(errno));
		}
		/* output first, then the exits (an end follows its output), then requests
		 */
		proc_ready(pf + 2, np - 2);
		watch_ready(pf + np, nw);
		file_step();
		if (pf[1].revents) {
			struct signalfd_siginfo si;
			while (read(sigfd, &si, sizeof(si)) == sizeof(si))
				;
			proc_reap();
		}
		if (pf[0].revents) {
			struct msg m;
			int rc = pipe_recv(proxy_fd, &m);
			if (rc == -EPIPE)
				return 0;
			if (rc < 0)
				fatal("a bad message from the proxy: %s", strerror(-rc));
			if (m.m_type == MSG_ENVD)
				handle(&m);
			else if (m.m_type ==
			         MSG_CANCEL) { /* a process's stream, or a watch's */
				proc_cancel(m.m_stream);
				watch_cancel(m.m_stream);
				file_cancel(m.m_stream);
			}
			msg_free(&m);
		}
	}
}
