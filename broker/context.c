/*
 * context.c — the context table and proxy supervision: spawn a proxy per
 * context, talk to it over an nng pair socket, route its output to streams and
 * its replies to waiting HTTP requests, respawn it when it dies, and adopt the
 * live proxies a previous broker left in the run directory.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>

#include "broker.h"

#define WAIT_REPLY_MS 10000
#define WAIT_START_MS 90000
#define RESPAWN_WINDOW_MS 60000
#define RESPAWN_MAX 5

const char *
kstate_name(enum kstate s)
{
	static const char *names[] = {"starting", "idle", "busy", "dead"};

	return (unsigned)s < 4 ? names[s] : "unknown";
}

/* starting, idle, busy (something running or queued) or dead. */
const char *
context_state(struct context *c)
{
	if (c->c_pooled)
		return "pooled";
	if (c->c_pl->pl_pid <= 0 || c->c_pl->pl_state == KS_DEAD)
		return "dead";
	if (c->c_pl->pl_state == KS_STARTING)
		return "starting";
	return c->c_nstreams ? "busy" : "idle";
}

/* Resident memory of a process in bytes, or -1. */
static long long
rss_of(pid_t pid)
{
	char path[64];
	long long pages = -1, size;
	FILE *f;

	if (pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
	if ((f = fopen(path, "r"))) {
		if (fscanf(f, "%lld %lld", &size, &pages) != 2)
			pages = -1;
		fclose(f);
	}
	return pages < 0 ? -1 : pages * sysconf(_SC_PAGESIZE);
}

struct context *
context_find(const char *id)
{
	struct context *c;

	if (!uuid_valid(id))
		return NULL;
	TAILQ_FOREACH(c, &sv.sv_contexts, c_link)
		if (context_listed(c) && !strcmp(c->c_id, id))
			return c;
	return NULL;
}

/* A context clients see: not being deleted, not a warm proxy of the pool. */
bool
context_listed(struct context *c)
{
	return !c->c_deleting && !c->c_pooled;
}

struct context *
context_default(const char *lang)
{
	struct context *c;

	TAILQ_FOREACH(c, &sv.sv_contexts, c_link)
		if (c->c_default && context_listed(c) && !strcmp(c->c_lang, lang))
			return c;
	return NULL;
}

json_t *
context_json(struct context *c, bool live)
{
	json_t *j = json_pack("{s:s, s:s, s:s}", "id", c->c_id, "language", c->c_lang, "cwd",
			      c->c_cwd);

	if (!live)
		return j;
	json_object_set_new(j, "kernel", json_string(c->c_kernel));
	json_object_set_new(j, "state", json_string(context_state(c)));
	json_object_set_new(j, "default", json_boolean(c->c_default));
	json_object_set_new(j, "proxy_pid", json_integer(c->c_pl->pl_pid));
	json_object_set_new(j, "kernel_pid", json_integer(c->c_pl->pl_kpid));
	json_object_set_new(j, "queue", json_integer(c->c_nstreams));
	json_object_set_new(j, "executions", json_integer(c->c_count));
	json_object_set_new(j, "proxy_rss_bytes", json_integer(rss_of(c->c_pl->pl_pid)));
	json_object_set_new(j, "kernel_rss_bytes", json_integer(rss_of((pid_t)c->c_pl->pl_kpid)));
	json_object_set_new(j, "age_seconds", json_real((now_ms() - c->c_created) / 1000.0));
	json_t *box = box_json(c->c_pl->pl_slot);
	if (box)
		json_object_set_new(j, "sandbox", box);
	if (c->c_error)
		json_object_set_new(j, "error", json_string(c->c_error));
	return j;
}

static void
pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct proxy_link *pl = arg; /* lives until its socket is closed */
	uint64_t one = 1;

	if (ev == NNG_PIPE_EV_ADD_PRE) {
		uint64_t uid;
		if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) != 0 ||
		    uid != (uint64_t)geteuid())
			nng_pipe_close(p); /* not our proxy */
		return;
	}
	__atomic_store_n(&pl->pl_pipe_lost, 1, __ATOMIC_SEQ_CST);
	if (write(sv.sv_wakefd, &one, sizeof(one)) < 0)
		log_warn("eventfd: %s", strerror(errno));
}

static int
spawn(struct context *c)
{
	const char *argv[64];
	int n = 0;
	sigset_t none;
	pid_t pid;

	argv[n++] = sv.sv_proxy_bin;
	argv[n++] = "--run-dir";
	argv[n++] = (char *)sv.sv_run_dir;
	argv[n++] = "--id";
	argv[n++] = c->c_pl->pl_slot;
	argv[n++] = "--language";
	argv[n++] = c->c_lang;
	argv[n++] = "--kernel";
	argv[n++] = c->c_kernel;
	argv[n++] = "--cwd";
	argv[n++] = c->c_cwd;
	argv[n++] = "--env-file";
	argv[n++] = sv.sv_env_file;
	argv[n++] = "--log-level";
	argv[n++] = (char *)sv.sv_log_level;
	if (c->c_default)
		argv[n++] = "--default";
	if (c->c_pooled)
		argv[n++] = "--pooled";
	if (sv.sv_kernel_memory) {
		argv[n++] = "--memory";
		argv[n++] = (char *)sv.sv_kernel_memory;
	}
	if (sv.sv_kernel_cpu) {
		argv[n++] = "--cpu";
		argv[n++] = (char *)sv.sv_kernel_cpu;
	}
	if (sv.sv_kernel_cgroup) {
		argv[n++] = "--cgroup";
		argv[n++] = (char *)sv.sv_kernel_cgroup;
	}
	if (sv.sv_python_startup) {
		argv[n++] = "--python-startup";
		argv[n++] = (char *)sv.sv_python_startup;
	}
	if (sv.sv_kernel_user) {
		argv[n++] = "--kernel-user";
		argv[n++] = (char *)sv.sv_kernel_user;
	}
	box_args(c, argv, &n);
	if (sv.sv_interrupt_retry[0]) {
		argv[n++] = "--interrupt-retry";
		argv[n++] = sv.sv_interrupt_retry;
	}
	if (sv.sv_interrupt_grace[0]) {
		argv[n++] = "--interrupt-grace";
		argv[n++] = sv.sv_interrupt_grace;
	}
	if (sv.sv_heartbeat_timeout[0]) {
		argv[n++] = "--heartbeat-timeout";
		argv[n++] = sv.sv_heartbeat_timeout;
	}
	argv[n] = NULL;
	sigemptyset(&none);
	if ((pid = fork()) < 0) {
		log_err("context %s: fork: %s", c->c_id, strerror(errno));
		return -errno;
	}
	if (pid == 0) {
		/* own session: a terminal's Ctrl-C reaches the broker, which stops us */
		setsid();
		sigprocmask(SIG_SETMASK, &none, NULL);
		execv(sv.sv_proxy_bin, (char *const *)argv);
		_exit(127);
	}
	c->c_pl->pl_pid = pid;
	c->c_pl->pl_child = true;
	c->c_pl->pl_state = KS_STARTING;
	return 0;
}

/* A link to the proxy named slot, serving c; dialing goes on in the background. */
static int
connect_proxy(struct context *c, const char *slot)
{
	char *url = xasprintf("ipc://%s/ctx/%s/proxy.sock", sv.sv_run_dir, slot);
	int e;

	c->c_pl = xcalloc(1, sizeof(*c->c_pl));
	snprintf(c->c_pl->pl_slot, sizeof(c->c_pl->pl_slot), "%s", slot);
	c->c_pl->pl_pidfd = c->c_pl->pl_rfd = c->c_pl->pl_sfd = -1;
	c->c_pl->pl_state = KS_STARTING;
	if ((e = nng_pair0_open(&c->c_pl->pl_sock)))
		goto out;
	nng_socket_set_size(c->c_pl->pl_sock, NNG_OPT_RECVMAXSZ, PROTO_MAX_FRAME);
	nng_socket_set_int(c->c_pl->pl_sock, NNG_OPT_SENDBUF, 1024);
	nng_socket_set_int(c->c_pl->pl_sock, NNG_OPT_RECVBUF, 1024);
	nng_socket_set_ms(c->c_pl->pl_sock, NNG_OPT_RECONNMINT, 5);
	nng_socket_set_ms(c->c_pl->pl_sock, NNG_OPT_RECONNMAXT, 100);
	nng_pipe_notify(c->c_pl->pl_sock, NNG_PIPE_EV_ADD_PRE, pipe_event, c->c_pl);
	nng_pipe_notify(c->c_pl->pl_sock, NNG_PIPE_EV_REM_POST, pipe_event, c->c_pl);
	if ((e = nng_dial(c->c_pl->pl_sock, url, NULL, NNG_FLAG_NONBLOCK)) ||
	    (e = nng_socket_get_int(c->c_pl->pl_sock, NNG_OPT_RECVFD, &c->c_pl->pl_rfd)) ||
	    (e = nng_socket_get_int(c->c_pl->pl_sock, NNG_OPT_SENDFD, &c->c_pl->pl_sfd)))
		goto out;
	c->c_pl->pl_ev_recv = (struct evsrc){EV_CTX_RECV, c};
	c->c_pl->pl_ev_send = (struct evsrc){EV_CTX_SEND, c};
	server_watch(c->c_pl->pl_rfd, EPOLLIN, &c->c_pl->pl_ev_recv);
out:
	if (e)
		log_err("context %s: connect %s: %s", c->c_id, url, nng_strerror(e));
	free(url);
	return e ? -EIO : 0;
}

static struct context *
context_new(const char *id, const char *lang, const char *kernel, const char *cwd,
	    bool is_default)
{
	struct context *c = xcalloc(1, sizeof(*c));

	if (id)
		snprintf(c->c_id, sizeof(c->c_id), "%s", id);
	else
		uuid_v4(c->c_id);
	c->c_lang = xstrdup(lang);
	c->c_kernel = xstrdup(kernel);
	c->c_cwd = xstrdup(cwd);
	c->c_default = is_default;
	c->c_created = now_ms();
	TAILQ_INIT(&c->c_streams);
	TAILQ_INIT(&c->c_waiters);
	return c;
}

/*
 * nng < 1.6 never closes the two pipes behind a pair0 socket's poll fds
 * (NNG_OPT_RECVFD, _SENDFD; fixed by nng PR 1640): 4 fds per context. After
 * nng_close nothing in nng uses them, so we close every fd on those pipes,
 * found by inode (the write ends are nng's own).
 */
static void
link_close_poll_pipes(int rfd, int sfd)
{
#if NNG_MAJOR_VERSION == 1 && NNG_MINOR_VERSION < 6
	struct stat want[2], st;
	int n = 0;
	DIR *d;
	struct dirent *de;

	if (rfd >= 0 && fstat(rfd, &want[n]) == 0 && S_ISFIFO(want[n].st_mode))
		n++;
	if (sfd >= 0 && fstat(sfd, &want[n]) == 0 && S_ISFIFO(want[n].st_mode))
		n++;
	if (!n || !(d = opendir("/proc/self/fd")))
		return;
	while ((de = readdir(d))) {
		int fd = atoi(de->d_name);
		if (de->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) < 0)
			continue;
		for (int i = 0; i < n; i++)
			if (st.st_ino == want[i].st_ino && st.st_dev == want[i].st_dev &&
			    S_ISFIFO(st.st_mode))
				close(fd);
	}
	closedir(d);
#else
	(void)rfd;
	(void)sfd;
#endif
}

/* Stops watching, closes the socket (and the poll pipes nng leaves), frees pl. */
static void
link_close(struct proxy_link *pl)
{
	if (!pl)
		return;
	if (pl->pl_rfd >= 0)
		server_unwatch(pl->pl_rfd);
	if (pl->pl_sfd_watched)
		server_unwatch(pl->pl_sfd);
	if (pl->pl_pidfd >= 0) {
		server_unwatch(pl->pl_pidfd);
		close(pl->pl_pidfd);
	}
	nng_close(pl->pl_sock); /* waits for pipe callbacks: pl stays valid until here */
	link_close_poll_pipes(pl->pl_rfd, pl->pl_sfd);
	msgq_clear(&pl->pl_outq);
	free(pl->pl_outq.mq_q);
	free(pl);
}

static void
context_free(struct context *c)
{
	struct stream *s;
	struct request *rq;
	/* one that never started says why, not that someone deleted it */
	char *why = !c->c_ready && c->c_error
			    ? xasprintf("the context could not start: %s", c->c_error)
			    : NULL;

	while ((s = TAILQ_FIRST(&c->c_streams))) {
		if (s->st_gone) { /* its client left: nothing to tell it */
			stream_detach(s);
			continue;
		}
		/* ends it, which takes it off c's list (and frees a ctl one) */
		if (why)
			stream_fail(s, "ContextLost", why, "context_lost");
		else
			stream_fail(s, "ContextDeleted", "the context was deleted", "deleted");
	}
	while ((rq = TAILQ_FIRST(&c->c_waiters))) {
		context_forget_waiter(rq);
		request_done(rq, 404, NULL, "context %s was deleted", c->c_id);
	}
	free(why);
	link_close(c->c_pl);
	TAILQ_REMOVE(&sv.sv_contexts, c, c_link);
	free(c->c_lang);
	free(c->c_kernel);
	free(c->c_cwd);
	free(c->c_error);
	free(c);
}

#define KSPEC_TTL_MS 5000
#define POOL_BACKOFF_MS 10000 /* after a warm kernel failed to start */

/*
 * Kernelspecs without rescanning the data dirs on every request: the list is
 * read again after KSPEC_TTL_MS, or on a miss (at most once a second), so a
 * kernelspec installed meanwhile is found at once. The result is borrowed
 * until the next call.
 */
const struct kspec *
kspec_cached(const char *want)
{
	uint64_t now = now_ms();
	int i = -1;

	if (sv.sv_kspecs_at && now < sv.sv_kspecs_at + KSPEC_TTL_MS &&
	    (i = kspec_index(sv.sv_kspecs, sv.sv_nkspecs, want)) >= 0)
		return sv.sv_kspecs[i];
	if (!sv.sv_kspecs_at || now >= sv.sv_kspecs_at + 1000) {
		kspec_list_free(sv.sv_kspecs, sv.sv_nkspecs);
		kspec_list(&sv.sv_kspecs, &sv.sv_nkspecs);
		sv.sv_kspecs_at = now;
		i = kspec_index(sv.sv_kspecs, sv.sv_nkspecs, want);
	}
	return i >= 0 ? sv.sv_kspecs[i] : NULL;
}

/* A ready warm proxy of this kernelspec, or NULL. */
static struct context *
pool_take(const char *kernel)
{
	struct context *c;

	TAILQ_FOREACH(c, &sv.sv_contexts, c_link)
		if (c->c_pooled && c->c_ready && !c->c_deleting && c->c_pl->pl_pid > 0 &&
		    c->c_pl->pl_state == KS_IDLE && !strcmp(c->c_kernel, kernel))
			return c;
	return NULL;
}

/* Tells a proxy which context it now is: id, cwd (applied in its kernel), default. */
static void
claim(struct context *c)
{
	struct msg m;

	msg_init(&m, MSG_CLAIM);
	msg_set_u64(&m, F_REQ, sv.sv_next_req++);
	msg_set_str(&m, F_ID, c->c_id, strlen(c->c_id));
	msg_set_str(&m, F_CWD, c->c_cwd, strlen(c->c_cwd));
	msg_set_u64(&m, F_FLAGS, c->c_default ? FLAG_DEFAULT : 0);
	context_send(c, &m);
	msg_free(&m);
}

/*
 * Keeps the warm pool full: per --pool entry, that many proxies whose kernels
 * are started and have run nothing. A kernelspec whose pooled proxies keep
 * failing is left alone for a while.
 */
void
pool_fill(void)
{
	uint64_t now = now_ms();

	if (now < sv.sv_pool_backoff)
		return;
	for (size_t i = 0; i < sv.sv_npool; i++) {
		struct pool_spec *ps = &sv.sv_pool[i];
		const struct kspec *ks;
		struct context *c;
		int have = 0;

		if (now < ps->ps_retry_at || !(ks = kspec_cached(ps->ps_want)))
			continue;
		TAILQ_FOREACH(c, &sv.sv_contexts, c_link)
			have += c->c_pooled && !c->c_deleting && !strcmp(c->c_kernel, ks->ks_name);
		for (; have < ps->ps_size; have++) {
			c = context_new(NULL, ks->ks_lang, ks->ks_name, sv.sv_cwd, false);
			c->c_pooled = true;
			TAILQ_INSERT_TAIL(&sv.sv_contexts, c, c_link);
			if (connect_proxy(c, c->c_id) < 0 || spawn(c) < 0) {
				context_free(c);
				ps->ps_retry_at = now + 10000;
				break;
			}
			log_debug("pool: warming a %s kernel (proxy %d)", ks->ks_name,
				  (int)c->c_pl->pl_pid);
		}
	}
}

/*
 * Restart from the pool: the context keeps its id, cwd and default-ness and
 * takes a warm proxy; its old proxy and kernel are stopped. Returns false when
 * the pool has none for its kernelspec.
 */
bool
context_restart_from_pool(struct context *x)
{
	struct context *p = pool_take(x->c_kernel);
	struct stream *s, *next;
	struct request *rq;

	if (!p)
		return false;
	for (s = TAILQ_FIRST(&x->c_streams); s; s = next) {
		next = TAILQ_NEXT(s, st_ctx_link);
		stream_fail(s, "ContextRestarted", "the context was restarted", "restarted");
	}
	while ((rq = TAILQ_FIRST(&x->c_waiters))) {
		context_forget_waiter(rq);
		request_done(rq, 409, NULL, "context %s was restarted meanwhile", x->c_id);
	}
	if (x->c_pl->pl_pid > 0)
		kill(x->c_pl->pl_pid, SIGTERM); /* stops its kernel, removes its dir */
	link_close(x->c_pl);
	x->c_pl = p->c_pl;
	p->c_pl = NULL;
	x->c_pl->pl_ev_recv.ev_obj = x->c_pl->pl_ev_send.ev_obj = x->c_pl->pl_ev_pidfd.ev_obj = x;
	x->c_ready = true;
	TAILQ_REMOVE(&sv.sv_contexts, p, c_link);
	free(p->c_lang);
	free(p->c_kernel);
	free(p->c_cwd);
	free(p->c_error);
	free(p);
	claim(x);
	metrics_count(M_KERNEL_RESTART, 1);
	log_info("context %s: restarted with a warm kernel (proxy %d)", x->c_id,
		 (int)x->c_pl->pl_pid);
	control_event(json_pack("{s:s, s:s, s:s}", "event", "kernel_restarted", "context",
				x->c_id, "why", "restart requested (warm pool)"));
	sv.sv_pool_kick = true;
	return true;
}

/*
 * want is a kernelspec name or a language (normalised); the context records
 * the kernelspec it resolved to and that kernelspec's language, so "python3"
 * and "python" are the same default context.
 */
int
context_create(const char *want, const char *cwd, bool is_default, struct context **out,
	       char *err, size_t errsz)
{
	struct context *c;
	const struct kspec *ks;
	int n = 0;

	TAILQ_FOREACH(c, &sv.sv_contexts, c_link)
		n += !c->c_pooled && !c->c_deleting;
	if (n >= sv.sv_max_contexts) {
		snprintf(err, errsz, "too many contexts (limit %d); delete one first",
			 sv.sv_max_contexts);
		return -EAGAIN;
	}
	if (!(ks = kspec_cached(want))) {
		char *avail = kspec_languages();
		snprintf(err, errsz, "unknown language '%.64s'; available: %s", want, avail);
		free(avail);
		return -ENOENT;
	}
	if ((c = pool_take(ks->ks_name))) {
		/* a warm kernel: it becomes this context at once, listed as the newest */
		c->c_pooled = false;
		TAILQ_REMOVE(&sv.sv_contexts, c, c_link);
		TAILQ_INSERT_TAIL(&sv.sv_contexts, c, c_link);
		c->c_default = is_default;
		c->c_created = now_ms();
		free(c->c_cwd);
		c->c_cwd = xstrdup(cwd);
		claim(c);
		log_info("context %s: created from the warm pool (%s, cwd %s%s)", c->c_id,
			 c->c_lang, cwd, is_default ? ", default" : "");
		control_event(json_pack("{s:s, s:s, s:s, s:s, s:b}", "event", "context_created",
					"context", c->c_id, "language", c->c_lang, "cwd", cwd,
					"pooled", 1));
		*out = c;
		sv.sv_pool_kick = true;
		return 0;
	}
	c = context_new(NULL, ks->ks_lang, ks->ks_name, cwd, is_default);
	TAILQ_INSERT_TAIL(&sv.sv_contexts, c, c_link);
	if (box_isolate(c, err, errsz) < 0) {
		context_free(c);
		return -EAGAIN;
	}
	cwd = c->c_cwd;
	if (connect_proxy(c, c->c_id) < 0 || spawn(c) < 0) {
		snprintf(err, errsz, "could not start a proxy for the context");
		context_free(c);
		return -EIO;
	}
	log_info("context %s: created (%s, kernel %s, cwd %s%s), proxy pid %d", c->c_id,
		 c->c_lang, c->c_kernel, cwd, is_default ? ", default" : "", (int)c->c_pl->pl_pid);
	control_event(json_pack("{s:s, s:s, s:s, s:s}", "event", "context_created", "context",
				c->c_id, "language", c->c_lang, "cwd", cwd));
	*out = c;
	return 0;
}

void
context_flush(struct context *c)
{
	struct proxy_link *pl = c->c_pl;
	int e = msgq_flush(&pl->pl_outq, pl->pl_sock);

	if (e)
		log_warn("context %s: send: %s", c->c_id, nng_strerror(e));
	/* the send fd is readable while sending would not block: watch it only
	 * while something waits, or the loop would spin */
	if (pl->pl_outq.mq_n && !pl->pl_sfd_watched) {
		server_watch(pl->pl_sfd, EPOLLIN, &pl->pl_ev_send);
		pl->pl_sfd_watched = true;
	} else if (!pl->pl_outq.mq_n && pl->pl_sfd_watched) {
		server_unwatch(pl->pl_sfd);
		pl->pl_sfd_watched = false;
	}
}

void
context_send(struct context *c, struct msg *m)
{
	nng_msg *nm;

	if (msg_pack(m, &nm))
		fatal("context %s: cannot encode %s", c->c_id, msg_type_name(m->m_type));
	msgq_push(&c->c_pl->pl_outq, nm);
	context_flush(c);
}

static void
add_waiter(struct context *c, struct request *rq, uint64_t req, int op, uint64_t wait_ms)
{
	rq->rq_ctx = c;
	rq->rq_req = req;
	rq->rq_op = op;
	rq->rq_deadline = now_ms() + wait_ms;
	TAILQ_INSERT_TAIL(&c->c_waiters, rq, rq_link);
}

void
context_forget_waiter(struct request *rq)
{
	if (!rq->rq_ctx)
		return;
	TAILQ_REMOVE(&rq->rq_ctx->c_waiters, rq, rq_link);
	rq->rq_ctx = NULL;
}

void
context_wait_ready(struct context *c, struct request *rq)
{
	if (c->c_ready) {
		request_done(rq, 200, context_json(c, false), NULL);
		return;
	}
	add_waiter(c, rq, 0, OP_CREATE, WAIT_START_MS);
}

void
context_request(struct context *c, struct request *rq, enum msg_type t, int op)
{
	struct msg m;
	uint64_t req = sv.sv_next_req++;

	if (op == OP_DELETE)
		log_info("context %s: delete requested", c->c_id);
	add_waiter(c, rq, req, op, op == OP_RESTART ? WAIT_START_MS : WAIT_REPLY_MS);
	msg_init(&m, t);
	msg_set_u64(&m, F_REQ, req);
	context_send(c, &m);
	msg_free(&m);
}

/*
 * Deletion is answered once the proxy confirms; the context is freed when the
 * proxy is gone (SIGCHLD, or the pipe closing for an adopted one), so its last
 * messages still reach their streams.
 */
static void
context_delete(struct context *c)
{
	c->c_deleting = true;
	log_info("context %s: deleted", c->c_id);
	control_event(json_pack("{s:s, s:s}", "event", "context_deleted", "context", c->c_id));
}

static void
answer_ready(struct context *c)
{
	struct request *rq, *next;

	for (rq = TAILQ_FIRST(&c->c_waiters); rq; rq = next) {
		next = TAILQ_NEXT(rq, rq_link);
		if (rq->rq_op != OP_CREATE)
			continue;
		context_forget_waiter(rq);
		if (c->c_ready)
			request_done(rq, 200, context_json(c, false), NULL);
		else
			request_done(rq, 500, NULL, "context %s could not start: %s", c->c_id,
				     c->c_error ? c->c_error : "unknown error");
	}
}

static void
on_state(struct context *c, struct msg *m)
{
	if (m->m_type == MSG_STATE && c->c_ready && m->m_state == KS_STARTING) {
		metrics_count(M_KERNEL_RESTART, 1);
		control_event(json_pack("{s:s, s:s, s:s}", "event", "kernel_restarted", "context",
					c->c_id, "why", m->m_text.s ? m->m_text.s : ""));
	}
	c->c_pl->pl_state = m->m_state;
	if (m->m_has & FB(F_KPID))
		c->c_pl->pl_kpid = m->m_kpid;
	free(c->c_error);
	c->c_error = NULL;
	if (c->c_pl->pl_state == KS_DEAD && (m->m_has & FB(F_TEXT)))
		c->c_error = xstrdup(m->m_text.s);
	if (!c->c_ready && (c->c_pl->pl_state == KS_IDLE || c->c_pl->pl_state == KS_BUSY) &&
	    c->c_pooled) {
		c->c_ready = true;
		log_info("pool: a %s kernel is warm (proxy %d, %llu ms)", c->c_kernel,
			 (int)c->c_pl->pl_pid, (unsigned long long)(now_ms() - c->c_created));
	} else if (!c->c_ready && (c->c_pl->pl_state == KS_IDLE || c->c_pl->pl_state == KS_BUSY)) {
		c->c_ready = true;
		log_info("context %s: ready in %llu ms", c->c_id,
			 (unsigned long long)(now_ms() - c->c_created));
		control_event(json_pack("{s:s, s:s, s:s}", "event", "context_ready", "context",
					c->c_id, "language", c->c_lang));
		answer_ready(c);
	} else if (!c->c_ready && c->c_pl->pl_state == KS_DEAD) {
		if (c->c_pooled)
			sv.sv_pool_backoff = now_ms() + POOL_BACKOFF_MS;
		answer_ready(c);
		c->c_deleting = true; /* a context that never started is not kept */
		struct msg sd;
		msg_init(&sd, MSG_SHUTDOWN);
		msg_set_u64(&sd, F_REQ, sv.sv_next_req++);
		context_send(c, &sd);
		msg_free(&sd);
	}
}

static void
on_reply(struct context *c, struct msg *m)
{
	struct request *rq;

	TAILQ_FOREACH(rq, &c->c_waiters, rq_link)
		if (rq->rq_req == m->m_req)
			break;
	if (!rq)
		return; /* its client left */
	context_forget_waiter(rq);
	if (m->m_type == MSG_FAIL) {
		request_done(rq, 500, NULL, "%s", m->m_text.s);
		return;
	}
	switch (rq->rq_op) {
	case OP_RESTART:
		log_info("context %s: restarted", c->c_id);
		request_done(rq, 200, json_null(), NULL);
		break;
	case OP_INTERRUPT:
		request_done(rq, 200, json_null(), NULL);
		break;
	case OP_DELETE:
		request_done(rq, 200, json_null(), NULL);
		context_delete(c);
		break;
	}
}

void
context_recv(struct context *c)
{
	for (int i = 0; i < 1024; i++) {
		struct msg m;
		int e = msg_recv(c->c_pl->pl_sock, &m, NNG_FLAG_NONBLOCK);
		if (e == NNG_EAGAIN)
			return;
		if (e > 0) {
			log_warn("context %s: receive: %s", c->c_id, nng_strerror(e));
			return;
		}
		if (e < 0) {
			log_warn("context %s: bad frame from proxy dropped: %s", c->c_id,
				 proto_strerror(e));
			continue;
		}
		struct stream *s;
		switch (m.m_type) {
		case MSG_OUTPUT:
			if ((s = stream_find(c, m.m_stream)))
				stream_output(s, m.m_data.s, m.m_data.len, m.m_final ? &m : NULL);
			break;
		case MSG_HELLO:
		case MSG_STATE:
			on_state(c, &m);
			break;
		case MSG_STATS:
			metrics_count(M_OUTPUT_DROPPED, m.m_count);
			break;
		case MSG_OK:
		case MSG_FAIL:
			on_reply(c, &m);
			break;
		default:
			log_warn("context %s: unexpected %s from proxy, dropped", c->c_id,
				 msg_type_name(m.m_type));
		}
		msg_free(&m);
	}
}

/* The proxy is gone: fail what it held and start a fresh one, same id. */
static void
proxy_lost(struct context *c, const char *why)
{
	struct stream *s, *next;
	struct request *rq;
	uint64_t now = now_ms();
	char *value = xasprintf("the context's proxy %s; the context was restarted and "
				"its state is lost",
				why);

	log_warn("context %s: proxy %d %s", c->c_id, (int)c->c_pl->pl_pid, why);
	if (!c->c_ready && c->c_pooled) /* no respawn storm of warm kernels */
		sv.sv_pool_backoff = now + POOL_BACKOFF_MS;
	if (!c->c_ready) {
		free(c->c_error);
		c->c_error = xasprintf("its proxy %s before the kernel was ready", why);
		answer_ready(c);
		context_free(c);
		free(value);
		return;
	}
	for (s = TAILQ_FIRST(&c->c_streams); s; s = next) {
		next = TAILQ_NEXT(s, st_ctx_link);
		stream_fail(s, "ContextLost", value, "context_lost"); /* may free it */
	}
	metrics_count(M_PROXY_RESTART, 1);
	control_event(json_pack("{s:s, s:s, s:s}", "event", "proxy_lost", "context", c->c_id,
				"why", why));
	while ((rq = TAILQ_FIRST(&c->c_waiters))) {
		context_forget_waiter(rq);
		request_done(rq, 500, NULL, "%s", value);
	}
	free(value);
	/*
	 * The new proxy gets a new link. The old socket may still hold the dead
	 * proxy's pipe (nng sees its end on a thread of its own, maybe after our
	 * SIGCHLD): a message sent on it now would go down that pipe and be lost,
	 * and the execution waiting for its answer would hang.
	 */
	struct proxy_link *old = c->c_pl;
	if (connect_proxy(c, old->pl_slot) < 0) {
		link_close(c->c_pl);
		c->c_pl = old;
		c->c_pl->pl_pid = 0;
		c->c_pl->pl_state = KS_DEAD;
		free(c->c_error);
		c->c_error = xstrdup("the context's proxy could not be connected again");
		log_err("context %s: %s", c->c_id, c->c_error);
		return;
	}
	link_close(old);
	if (now > c->c_respawn_window + RESPAWN_WINDOW_MS) {
		c->c_respawn_window = now;
		c->c_respawns = 0;
	}
	if (++c->c_respawns > RESPAWN_MAX || spawn(c) < 0) {
		c->c_pl->pl_state = KS_DEAD;
		free(c->c_error);
		c->c_error = xstrdup("the context's proxy keeps dying; not restarted");
		log_err("context %s: %s", c->c_id, c->c_error);
		return;
	}
	log_info("context %s: proxy respawned, pid %d", c->c_id, (int)c->c_pl->pl_pid);
}

void
context_reaped(pid_t pid, int status)
{
	struct context *c;
	char why[128];

	TAILQ_FOREACH(c, &sv.sv_contexts, c_link)
		if (c->c_pl->pl_child && c->c_pl->pl_pid == pid)
			break;
	if (!c)
		return;
	if (c->c_deleting || sv.sv_quit) {
		c->c_pl->pl_pid = 0;
		context_free(c);
		return;
	}
	if (WIFSIGNALED(status))
		snprintf(why, sizeof(why), "was killed by signal %d", WTERMSIG(status));
	else
		snprintf(why, sizeof(why), "exited with status %d", WEXITSTATUS(status));
	proxy_lost(c, why);
}

/* An adopted proxy (not our child) exited: its pidfd became readable. */
void
context_pidfd(struct context *c)
{
	if (c->c_deleting) {
		context_free(c);
		return;
	}
	proxy_lost(c, "exited");
}

/* Pipe removals of a context being deleted: its proxy is done with us. */
void
context_pipe_events(void)
{
	struct context *c, *next;

	for (c = TAILQ_FIRST(&sv.sv_contexts); c; c = next) {
		next = TAILQ_NEXT(c, c_link);
		if (__atomic_exchange_n(&c->c_pl->pl_pipe_lost, 0, __ATOMIC_SEQ_CST) &&
		    c->c_deleting && !c->c_pl->pl_child && c->c_pl->pl_pidfd < 0)
			context_free(c);
	}
}

/* --keep-contexts: leave every proxy running; they drop our streams. */
void
context_detach_all(void)
{
	struct context *c;

	while ((c = TAILQ_FIRST(&sv.sv_contexts)))
		context_free(c);
}

/* Requests whose proxy never answered. */
void
context_tick(uint64_t now)
{
	struct context *c;
	struct request *rq, *next;

	TAILQ_FOREACH(c, &sv.sv_contexts, c_link)
		for (rq = TAILQ_FIRST(&c->c_waiters); rq; rq = next) {
			next = TAILQ_NEXT(rq, rq_link);
			if (now < rq->rq_deadline)
				continue;
			context_forget_waiter(rq);
			request_done(rq, 504, NULL, "context %s did not answer in time", c->c_id);
		}
}

void
context_shutdown_all(void)
{
	struct context *c;
	uint64_t until = now_ms() + 3000;
	int left;

	TAILQ_FOREACH(c, &sv.sv_contexts, c_link)
		if (c->c_pl->pl_pid > 0)
			kill(c->c_pl->pl_pid, SIGTERM);
	do {
		left = 0;
		TAILQ_FOREACH(c, &sv.sv_contexts, c_link) {
			if (c->c_pl->pl_pid <= 0)
				continue;
			if (c->c_pl->pl_child ? waitpid(c->c_pl->pl_pid, NULL, WNOHANG) == c->c_pl->pl_pid
				       : kill(c->c_pl->pl_pid, 0) < 0)
				c->c_pl->pl_pid = 0;
			else
				left++;
		}
		if (left)
			usleep(10000);
	} while (left && now_ms() < until);
	while ((c = TAILQ_FIRST(&sv.sv_contexts))) {
		if (c->c_pl->pl_pid > 0) {
			log_warn("context %s: proxy %d did not stop; killed", c->c_id,
				 (int)c->c_pl->pl_pid);
			kill(c->c_pl->pl_pid, SIGKILL);
			if (c->c_pl->pl_child)
				waitpid(c->c_pl->pl_pid, NULL, 0);
		}
		context_free(c);
	}
}

/*
 * Adopts the proxies a previous broker left running: each context dir with a
 * state file whose proxy is alive is re-attached under the same id; anything
 * else there is stale and removed.
 */
void
context_adopt_all(void)
{
	char *dir = xasprintf("%s/ctx", sv.sv_run_dir);
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char *cdir = xasprintf("%s/%s", dir, de->d_name);
		char *state = xasprintf("%s/state.json", cdir);
		json_t *j = json_load_file(state, 0, NULL);
		const char *id = json_string_value(json_object_get(j, "id"));
		const char *slot = json_string_value(json_object_get(j, "slot"));
		bool pooled = json_is_null(json_object_get(j, "id"));
		const char *lang = json_string_value(json_object_get(j, "language"));
		const char *kernel = json_string_value(json_object_get(j, "kernel"));
		const char *cwd = json_string_value(json_object_get(j, "cwd"));
		json_int_t pid = json_integer_value(json_object_get(j, "pid"));
		bool is_default = json_is_true(json_object_get(j, "default"));
		char exe[PATH_MAX] = "", *link = xasprintf("/proc/%lld/exe", (long long)pid);
		ssize_t el = readlink(link, exe, sizeof(exe) - 1);

		if (el > 0)
			exe[el] = '\0';
		free(link);
		const char *base = strrchr(exe, '/');
		/* the proxy lives in ctx/<slot>; a pooled one serves no context yet */
		if (pooled)
			id = slot;
		if (id && slot && lang && kernel && cwd && pid > 1 && !strcmp(slot, de->d_name) &&
		    uuid_valid(id) && base && !strncmp(base + 1, "sandcell-proxy", 14) &&
		    !context_find(id)) {
			struct context *c = context_new(id, lang, kernel, cwd, is_default);
			json_t *box = json_object_get(j, "sandbox");
			const char *iso = json_string_value(json_object_get(box, "isolation"));
			c->c_pooled = pooled;
			if (iso && !strcmp(iso, "context")) { /* its uid stays taken */
				char *own = xasprintf("%s/%s", sv.sv_cwd, id);
				c->c_uid = json_integer_value(json_object_get(box, "uid"));
				c->c_own_ws = !strcmp(cwd, own);
				free(own);
			}
			TAILQ_INSERT_TAIL(&sv.sv_contexts, c, c_link);
			if (connect_proxy(c, slot) < 0) {
				context_free(c);
			} else {
				c->c_pl->pl_pid = pid;
				c->c_pl->pl_child = false;
				/* not our child: a pidfd tells us when it exits */
				c->c_pl->pl_pidfd = syscall(SYS_pidfd_open, (pid_t)pid, 0);
				if (c->c_pl->pl_pidfd >= 0) {
					c->c_pl->pl_ev_pidfd = (struct evsrc){EV_CTX_PIDFD, c};
					server_watch(c->c_pl->pl_pidfd, EPOLLIN,
						     &c->c_pl->pl_ev_pidfd);
				}
				c->c_ready = true; /* it was ready for the previous broker */
				n += !pooled;
			}
		} else {
			log_info("run dir: removing stale context dir %s", cdir);
			rm_rf(cdir);
			char *kdir = xasprintf("%s.kernels/%s", sv.sv_run_dir, de->d_name);
			rm_rf(kdir);
			free(kdir);
		}
		json_decref(j);
		free(state);
		free(cdir);
	}
	if (d)
		closedir(d);
	free(dir);
	if (n)
		log_info("re-attached %d live context%s from %s", n, n == 1 ? "" : "s",
			 sv.sv_run_dir);
}
