/*
 * template.c — a Python kernel forked from the template instead of started
 * cold. The template (proxy/python/sandcell_template.py, run by the broker)
 * has imported ipykernel and the data stack; asked over its socket, it forks
 * a box init that builds the same box as sandbox.c's, with sandbox.c's own
 * code (boxlib.c, loaded by the template), and from it the kernel.
 *
 * The proxy's side is the cold start's: it sends what the kernel is started
 * with and what the box is made of, joins the init to the context's cgroups
 * when it says hello (its pidfd with it), lets it go, and waits for the
 * kernel's hello. The init is not our child: its pidfd says when it ends,
 * its socket (bx_sock) carries the kernel's wait status, and the init
 * ends itself, and its box, when our end of that socket closes.
 *
 * Any failure before the init's hello (no template, refused, gone) is not an
 * error: the caller starts the kernel cold.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "proxy.h"

#define TPL_WAIT_MS 10000 /* the init's and the kernel's hello, each */
#define TPL_POLL_MS 20    /* how often a starting template's socket is tried */

static json_t *
strv_json(char **v)
{
	json_t *a = json_array();

	for (; v && *v; v++)
		json_array_append_new(a, json_string(*v));
	return a;
}

/* What the box is made of, for boxlib.c (computed here, as for a cold box). */
static json_t *
box_json(const struct box *bx, const char *cwd)
{
	json_t *binds = json_array(), *groups = json_array();

	for (int i = 0; i < bx->bx_nbinds; i++)
		json_array_append_new(binds, json_pack("{s:s, s:b}", "path", bx->bx_binds[i].bb_path,
						       "write", bx->bx_binds[i].bb_write));
	for (int i = 0; i < bx->bx_ngroups; i++)
		json_array_append_new(groups, json_integer(bx->bx_groups[i]));
	return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:I, s:I, s:I, s:o, s:I, s:I, s:b, s:I}", "id",
			 bx->bx_id, "cwd", cwd, "workspace", bx->bx_workspace, "kdir", bx->bx_kdir,
			 "binds", binds, "hide",
			 bx->bx_hide ? bx->bx_hide : "", "tmp_size", (json_int_t)bx->bx_tmp_size, "uid",
			 (json_int_t)bx->bx_uid, "gid", (json_int_t)bx->bx_gid, "groups", groups,
			 "memory", (json_int_t)bx->bx_mem, "cpu", (json_int_t)bx->bx_cpu,
			 "cgroup", bx->bx_cg_mem != NULL, "nproc", (json_int_t)bx->bx_nproc);
}

/*
 * The request, the box's stdout and stderr (our pipe, kout.c: never our own
 * stderr, the broker's log) and our network namespace, which the box joins.
 */
static int
send_request(const struct box *bx, const char *cwd, int s, const char *exe, char **argv,
	     char **envp)
{
	json_t *o = json_pack("{s:s, s:o, s:o, s:s, s:o}", "exe", exe, "argv", strv_json(argv),
			      "env", strv_json(envp), "cwd", cwd, "box", box_json(bx, cwd));
	char *body = json_dumps(o, JSON_COMPACT);
	int fds[2] = {bx->bx_out, -1}, nfds = 2, rc = 0;
	char cbuf[CMSG_SPACE(sizeof(fds))];
	struct iovec iov = {body, body ? strlen(body) : 0};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf};
	struct cmsghdr *cm;

	json_decref(o);
	if (!body)
		return -EINVAL;
	if ((fds[1] = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
		rc = -errno;
		goto out;
	}
	mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
	memset(cbuf, 0, sizeof(cbuf));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	if (sendmsg(s, &mh, MSG_NOSIGNAL) < 0)
		rc = -errno;
out:
	if (fds[1] >= 0)
		close(fds[1]);
	free(body);
	return rc;
}

static bool
readable(int fd, int ms)
{
	struct pollfd pf = {fd, POLLIN, 0};

	return poll(&pf, 1, ms) > 0;
}

/*
 * A connection to the template's socket, or -errno. A template the broker
 * knows is starting (the spec's template_wait) binds soon: waited for at the first
 * start only.
 */
static int
template_connect(const struct proxy *px)
{
	static bool waited;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int s, one = 1, rc;

	if (strlen(px->px_template) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, px->px_template);
	/* in the host's namespace: its accepted end, named as the template's socket, is made in ours */
	if ((s = hostnet_socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) < 0)
		return -errno;
	setsockopt(s, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	/* a template that accepts nothing (stopped, overwhelmed) is not waited for long */
	struct timeval tv = {TPL_WAIT_MS / 1000, 0};
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while ((rc = connect(s, (struct sockaddr *)&sa, sizeof(sa))) < 0 &&
	       (errno == ENOENT || errno == ECONNREFUSED) && !waited &&
	       now_ms() < px->px_template_until)
		poll(NULL, 0, TPL_POLL_MS);
	waited = true;
	if (rc < 0) {
		rc = -errno; /* not started yet, or respawning */
		log_debug("context %s: template %s: %s: a cold start", px->px_id, px->px_template,
			  strerror(errno));
		close(s);
		return rc;
	}
	return s;
}

/* The kernel's process from the template: 0 with *kp and the box's pidfd and socket set. */
int
template_spawn(const struct proxy *px, struct box *bx, const char *exe, char **argv,
	       char **envp, struct kproc *kp)
{
	char buf[512], hello;
	int s, rc, pidfd = -1;
	ssize_t got = 0;
	pid_t pid;

	if (!px->px_template || !bx->bx_on || bx->bx_userns)
		return -ENOTSUP;
	/* a memory limit that is RLIMIT_DATA would count the template's heap */
	if (bx->bx_mem && !bx->bx_cg_mem)
		return -ENOTSUP;
	if ((s = template_connect(px)) < 0)
		return s;
	if ((rc = send_request(bx, px->px_cwd, s, exe, argv, envp)) < 0) {
		log_warn("context %s: template: send: %s: a cold start", px->px_id, strerror(-rc));
		close(s);
		return rc;
	}
	/* the init's hello with its pidfd, or the template's refusal */
	if (!readable(s, TPL_WAIT_MS) ||
	    (pid = sandbox_recv(s, buf, sizeof(buf) - 1, &got, 0, &pidfd)) <= 0 || got < 1 ||
	    buf[0] != 'i' || pidfd < 0) {
		if (got > 0 && buf[0] == 'n') {
			buf[got] = '\0';
			log_info("context %s: template refused (%s): a cold start", px->px_id,
				 buf + 1);
		} else {
			log_warn("context %s: the template did not fork a box: a cold start",
				 px->px_id);
		}
		if (pidfd >= 0)
			close(pidfd);
		close(s);
		return -EAGAIN;
	}
	kp->kp_pid = pid;
	bx->bx_pidfd = pidfd;
	bx->bx_sock = s;
	/* into its cgroups before it runs anything: a failure stops the kernel */
	if ((rc = limits_join(bx, pid)) < 0) {
		log_err("context %s: move the kernel into its cgroup: %s", px->px_id,
			strerror(-rc));
		goto kill;
	}
	if (send(s, "g", 1, MSG_NOSIGNAL) != 1) {
		rc = -errno;
		goto kill;
	}
	if (!readable(s, TPL_WAIT_MS) ||
	    (kp->kp_shown = sandbox_recv(s, &hello, 1, &got, 0, NULL)) <= 0 || got != 1 ||
	    hello != 'k') {
		rc = -ECHILD;
		kp->kp_shown = 0;
		log_err("context %s: the box forked from the template did not start its kernel",
			px->px_id);
		goto kill;
	}
	return 0;
kill:
	template_kill(bx);
	sandbox_reaped(bx);
	kp->kp_pid = 0;
	return rc < 0 ? rc : -EIO;
}

/*
 * Ends a box forked from the template: its init (the box's PID 1) is killed,
 * which ends every process of the box, and is awaited through its pidfd.
 */
void
template_kill(const struct box *bx)
{
	int pidfd = bx->bx_pidfd;

	if (pidfd < 0)
		return;
	if (syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
		log_warn("context %s: kill the kernel's box: %s", bx->bx_id, strerror(errno));
	if (!readable(pidfd, 5000))
		log_warn("context %s: the kernel's box did not end within 5 s", bx->bx_id);
}
