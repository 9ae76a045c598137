/*
 * proc.c — the processes envd's agent starts (process.Process), in its box,
 * as the contexts' uid: each in a session of its own, its stdout and stderr
 * read as they come and sent as events on the stream that started it. A
 * process outlives its stream (a client that leaves only detaches it, as in
 * envd); it ends by itself or by a signal (SendSignal: its whole group).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"

#define PROC_READ (64u << 10) /* most bytes of one output event */
#define PROC_STREAMS 8        /* clients following one process at once */

extern char **environ;

struct proc {
	pid_t p_pid;
	uint64_t p_streams[PROC_STREAMS]; /* its clients' streams (Start's, Connect's) */
	json_t *p_config; /* cmd, args, envs, cwd, tag: as List gives them */
	int p_fd[2];      /* stdout, stderr; -1 once at their end */
	int p_in;         /* stdin (a PTY's: its master), or -1 */
	bool p_pty;       /* on a terminal: its output is one stream, "pty" */
	bool p_exited;
	int p_status;
};

static struct proc *procs[PROC_MAX];
static size_t nprocs;

/* A start that failed: the stream's only event. */
static void __attribute__((format(printf, 3, 4)))
start_failed(uint64_t stream, const char *code, const char *fmt, ...)
{
	char text[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	agent_event(stream, code, text, strlen(text), true);
}

/* A terminal of its own: fd[0] its master, fd[1] its slave, at the size asked. */
static int
pty_open(int fd[2], json_t *pty)
{
	struct winsize ws = {
	    .ws_row = (unsigned short)json_integer_value(json_object_get(pty, "rows")),
	    .ws_col = (unsigned short)json_integer_value(json_object_get(pty, "cols"))};
	char name[64];

	if ((fd[0] = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0)
		return -1;
	if (unlockpt(fd[0]) < 0 || ptsname_r(fd[0], name, sizeof(name)) ||
	    (fd[1] = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 ||
	    ioctl(fd[0], TIOCSWINSZ, &ws) < 0)
		return -1;
	return 0;
}

/* environ with the request's envs over it (a key given twice: the request's). */
static char **
envp_of(json_t *envs)
{
	size_t n = 0, k = 0;
	const char *key;
	json_t *v;

	while (environ[n])
		n++;
	char **envp = xcalloc(n + json_object_size(envs) + 1, sizeof(*envp));
	for (size_t i = 0; i < n; i++) {
		size_t kl = strcspn(environ[i], "=");
		char name[256];
		snprintf(name, sizeof(name), "%.*s", (int)(kl < 255 ? kl : 255),
		         environ[i]);
		if (!json_object_get(envs, name))
			envp[k++] = xstrdup(environ[i]);
	}
	json_object_foreach(envs, key, v) envp[k++] =
	    xasprintf("%s=%s", key, json_string_value(v));
	return envp;
}

static void
strv_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

/*
 * In the child: its pipes, its session, default signals, its cwd, its
 * Landlock domain, its program. The domain scopes signals (ABI 6): a
 * command's kill -9 -1 ends what the command started, never the agent or
 * another command. Without it, such a kill ends every process of the
 * agent's box, the agent too (its proxy starts it again).
 */
static void __attribute__((noreturn))
child(int in, int out, int err, int status, const char *cwd, char **argv, char **envp,
      bool tty)
{
	sigset_t none;
	int e;

	setsid();
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 ||
	    (tty && ioctl(0, TIOCSCTTY, 0) < 0) || chdir(cwd) < 0) {
		e = errno;
		goto fail;
	}
	if ((e = -landlock_scope(false)) && e != ENOTSUP)
		goto fail;
	execve(argv[0], argv, envp);
	if (errno == ENOENT && !strchr(argv[0], '/'))
		execvpe(argv[0], argv, envp); /* a name: found on PATH, as envd does */
	e = errno;
fail:
	if (write(status, &e, sizeof(e)) < 0)
		_exit(127);
	_exit(127);
}

void
proc_start(uint64_t stream, json_t *args)
{
	const char *cmd = json_string_value(json_object_get(args, "cmd"));
	const char *cwd = json_string_value(json_object_get(args, "cwd"));
	json_t *list = json_object_get(args, "args"), *v;
	bool with_stdin = json_is_true(json_object_get(args, "stdin"));
	json_t *pty = json_object_get(args, "pty");
	int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1}, st[2] = {-1, -1},
	    e = 0;
	struct stat sb;
	size_t i;
	pid_t pid;

	if (!cwd || !*cwd)
		cwd = BOX_HOME;
	if (nprocs == PROC_MAX) {
		start_failed(stream, "resource_exhausted", "%d processes run already",
		             PROC_MAX);
		return;
	}
	if ((e = stat(cwd, &sb) < 0 ? errno : S_ISDIR(sb.st_mode) ? 0 : ENOTDIR)) {
		start_failed(stream, "invalid_argument", "cwd '%s': %s", cwd,
		             strerror(e));
		return;
	}
	char **argv = xcalloc(json_array_size(list) + 2, sizeof(*argv));
	argv[0] = xstrdup(cmd);
	json_array_foreach(list, i, v) argv[i + 1] = xstrdup(json_string_value(v));
	char **envp = envp_of(json_object_get(args, "envs"));
	if (pipe2(st, O_CLOEXEC) < 0 ||
	    (pty ? pty_open(out, pty) < 0
	         : pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
	               (with_stdin
	                    ? pipe2(in, O_CLOEXEC)
	                    : (in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC))) < 0)) {
		e = errno;
		goto out;
	}
	if ((pid = fork()) < 0) {
		e = errno;
		goto out;
	}
	if (pid == 0)
		child(pty ? out[1] : in[0], out[1], pty ? out[1] : err[1], st[1], cwd,
		      argv, envp, pty != NULL); /* a PTY's slave is all three */
	close(st[1]);
	st[1] = -1;
	/* the exec closed its end: nothing to read; else its errno */
	if (read(st[0], &e, sizeof(e)) == sizeof(e)) {
		waitpid(pid, NULL, 0);
		goto out;
	}
	e = 0;
	struct proc *p = xcalloc(1, sizeof(*p));
	p->p_pid = pid;
	p->p_streams[0] = stream;
	p->p_config = json_deep_copy(args);
	p->p_fd[0] = out[0];
	p->p_fd[1] = err[0];
	out[0] = err[0] = -1;
	p->p_pty = pty != NULL;
	if (pty) { /* its input and size go to the master */
		p->p_in = dup(p->p_fd[0]);
		fcntl(p->p_in, F_SETFL, O_NONBLOCK);
	} else if (with_stdin) { /* a full pipe never stops the agent */
		p->p_in = in[1];
		fcntl(p->p_in, F_SETFL, O_NONBLOCK);
		in[1] = -1;
	} else {
		p->p_in = -1;
	}
	procs[nprocs++] = p;
	char num[24];
	snprintf(num, sizeof(num), "%d", (int)pid);
	agent_event(stream, "start", num, strlen(num), false);
out:
	if (e)
		start_failed(stream,
		             e == ENOENT   ? "not_found"
		             : e == EACCES ? "permission_denied"
		                           : "invalid_argument",
		             "start '%s': %s", cmd, strerror(e));
	for (int k = 0; k < 2; k++) {
		if (out[k] >= 0)
			close(out[k]);
		if (err[k] >= 0)
			close(err[k]);
		if (in[k] >= 0)
			close(in[k]);
		if (st[k] >= 0)
			close(st[k]);
	}
	strv_free(argv);
	strv_free(envp);
}

/* Its end, once it exited and its output is all read: the last event. */
static void
maybe_end(size_t idx)
{
	struct proc *p = procs[idx];
	char text[64];

	if (!p->p_exited || p->p_fd[0] >= 0 || p->p_fd[1] >= 0)
		return;
	if (WIFEXITED(p->p_status))
		snprintf(text, sizeof(text), "exit %d", WEXITSTATUS(p->p_status));
	else
		snprintf(text, sizeof(text), "signal %d", WTERMSIG(p->p_status));
	for (int k = 0; k < PROC_STREAMS; k++)
		agent_event(p->p_streams[k], "end", text, strlen(text), true);
	if (p->p_in >= 0)
		close(p->p_in);
	json_decref(p->p_config);
	free(p);
	procs[idx] = procs[--nprocs];
}

size_t
proc_pollfds(struct pollfd *pf, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < nprocs; i++)
		for (int k = 0; k < 2; k++)
			if (procs[i]->p_fd[k] >= 0 && n < max)
				pf[n++] = (struct pollfd){procs[i]->p_fd[k], POLLIN, 0};
	return n;
}

void
proc_ready(const struct pollfd *pf, size_t n)
{
	static char chunk[PROC_READ];

	for (size_t j = 0; j < n; j++) {
		if (!pf[j].revents)
			continue;
		for (size_t i = 0; i < nprocs; i++) {
			struct proc *p = procs[i];
			int k = p->p_fd[0] == pf[j].fd   ? 0
			        : p->p_fd[1] == pf[j].fd ? 1
			                                 : -1;
			if (k < 0)
				continue;
			ssize_t r = read(p->p_fd[k], chunk, sizeof(chunk));
			if (r > 0) {
				for (int f = 0; f < PROC_STREAMS; f++)
					agent_event(p->p_streams[f],
					            p->p_pty ? "pty"
					            : k      ? "stderr"
					                     : "stdout",
					            chunk, (size_t)r, false);
			} else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
				close(p->p_fd[k]);
				p->p_fd[k] = -1;
				maybe_end(i);
			}
			break;
		}
	}
}

void
proc_reap(void)
{
	int st;
	pid_t pid;

	while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
		for (size_t i = 0; i < nprocs; i++)
			if (procs[i]->p_pid == pid && !procs[i]->p_exited) {
				procs[i]->p_exited = true;
				procs[i]->p_status = st;
				maybe_end(i);
				break;
			}
}

/* The running process the request's selector names (pid or tag), or NULL. */
static struct proc *
selected(json_t *args, struct answer *a)
{
	json_t *pid = json_object_get(args, "pid");
	const char *tag = json_string_value(json_object_get(args, "tag"));

	for (size_t i = 0; i < nprocs; i++) {
		struct proc *p = procs[i];
		const char *ptag = json_string_value(json_object_get(p->p_config, "tag"));
		if (p->p_exited)
			continue;
		if (json_is_integer(pid) && json_integer_value(pid) == p->p_pid)
			return p;
		if (tag && ptag && !strcmp(tag, ptag))
			return p;
	}
	agent_fail(a, "not_found", "no such process");
	return NULL;
}

int
proc_list(struct answer *a)
{
	a->a_json = json_array();
	for (size_t i = 0; i < nprocs; i++) {
		if (procs[i]->p_exited)
			continue;
		json_t *o = json_deep_copy(procs[i]->p_config);
		json_object_set_new(o, "pid", json_integer(procs[i]->p_pid));
		json_array_append_new(a->a_json, o);
	}
	return 0;
}

int
proc_signal(json_t *args, struct answer *a)
{
	struct proc *p = selected(args, a);
	int sig = (int)json_integer_value(json_object_get(args, "signal"));

	if (!p)
		return -1;
	if (sig != SIGKILL && sig != SIGTERM)
		return agent_fail(a, "invalid_argument", "signal %d: SIGKILL or SIGTERM",
		                  sig);
	/* its group: what it started goes with it (it leads its own session) */
	if (kill(-p->p_pid, sig) < 0 && kill(p->p_pid, sig) < 0)
		return agent_fail_errno(a, "signal", "process", errno);
	a->a_json = json_object();
	return 0;
}

int
proc_input(json_t *args, const struct pstr *data, struct answer *a)
{
	struct proc *p = selected(args, a);
	size_t done = 0;

	if (!p)
		return -1;
	if (p->p_in < 0)
		return agent_fail(a, "failed_precondition",
		                  "the process has no stdin open");
	while (done < data->len) {
		ssize_t w = write(p->p_in, data->s + done, data->len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			return agent_fail(
			    a, "resource_exhausted",
			    "the process's stdin is full: it does not read it");
		if (w < 0)
			return agent_fail_errno(a, "write stdin of", "the process",
			                        errno);
		done += (size_t)w;
	}
	a->a_json = json_object();
	return 0;
}

int
proc_close_stdin(json_t *args, struct answer *a)
{
	struct proc *p = selected(args, a);

	if (!p)
		return -1;
	if (p->p_in >= 0)
		close(p->p_in);
	p->p_in = -1;
	a->a_json = json_object();
	return 0;
}

/* Its client left: its process runs on, its output goes to its other clients or nowhere.
 */
void
proc_cancel(uint64_t stream)
{
	bool had = false;

	for (size_t i = 0; i < nprocs; i++)
		for (int k = 0; k < PROC_STREAMS; k++)
			if (procs[i]->p_streams[k] == stream) {
				procs[i]->p_streams[k] = 0;
				had = true;
			}
	if (had) /* the stream's last frame, so the proxy forgets it */
		agent_event(stream, "detached", NULL, 0, true);
}

/* Connect: one more client of a running process, from its start event on. */
void
proc_connect(uint64_t stream, json_t *args)
{
	struct answer a = {0};
	struct proc *p = selected(args, &a);
	char num[24];

	if (!p) {
		agent_event(stream, a.a_code, a.a_text, strlen(a.a_text), true);
		return;
	}
	for (int k = 0; k < PROC_STREAMS; k++)
		if (!p->p_streams[k]) {
			p->p_streams[k] = stream;
			snprintf(num, sizeof(num), "%d", (int)p->p_pid);
			agent_event(stream, "start", num, strlen(num), false);
			return;
		}
	agent_event(stream, "resource_exhausted", "too many clients follow this process",
	            36, true);
}

void
proc_refuse(uint64_t stream, const char *code, const char *text)
{
	agent_event(stream, code, text, strlen(text), true);
}

/* Update: a PTY's new size. */
int
proc_resize(json_t *args, struct answer *a)
{
	struct proc *p = selected(args, a);
	struct winsize ws = {
	    .ws_row = (unsigned short)json_integer_value(json_object_get(args, "rows")),
	    .ws_col = (unsigned short)json_integer_value(json_object_get(args, "cols"))};

	if (!p)
		return -1;
	if (!p->p_pty || p->p_in < 0)
		return agent_fail(a, "failed_precondition",
		                  "the process has no terminal");
	if (ioctl(p->p_in, TIOCSWINSZ, &ws) < 0)
		return agent_fail_errno(a, "resize the terminal of", "the process",
		                        errno);
	a->a_json = json_object();
	return 0;
}
