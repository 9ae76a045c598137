/*
 * control.c — the operator control socket sandcellctl talks to: nng pair1 in
 * polyamorous mode over ipc (ctl.sock in the run dir, 0600), so every client
 * has a pipe of its own and one request can be answered by many messages:
 * OK or FAIL, OUTPUT lines for run, events for watch, and END. The peer's uid
 * must be ours. What each client is sent, within its window, and who
 * watches the events are ctlpeer.c's; requests go to the request layer
 * (request.c) with ctl_ops, runs' output comes back through run_ops.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "broker.h"

/* nng's threads wake the loop through it when a client leaves (control_wake). */
static int wake_fd = -1;
static struct evsrc ev_wake;

static void control_recv(void *arg, uint32_t events);
static void control_wake(void *arg, uint32_t events);

static void
pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	uint64_t one = 1;

	(void)arg;
	if (ev == NNG_PIPE_EV_ADD_PRE) {
		uint64_t uid = (uint64_t)-1, pid = 0;
		if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) != 0 ||
		    uid != (uint64_t)geteuid() ||
		    nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid) != 0 ||
		    peerbox_boxed(pid)) {
			if (uid == (uint64_t)geteuid())
				log_warn("control: refused a client in a box (pid %llu)",
				         (unsigned long long)pid);
			nng_pipe_close(p);
		}
		return;
	}
	ctlpeer_gone(nng_pipe_id(p));
	if (write(wake_fd, &one, sizeof(one)) < 0)
		log_warn("eventfd: %s", strerror(errno));
}

static nng_socket sock;
static int sock_fd;
static struct evsrc ev_ctl;

int
control_start(void)
{
	char *url = xasprintf("ipc://%s/ctl.sock", cf->cf_run_dir);
	nng_listener l;
	int e;

	if ((wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		fatal("eventfd: %s", strerror(errno));
	ev_wake = (struct evsrc){control_wake, NULL};
	server_watch(wake_fd, EPOLLIN, &ev_wake);
	unlink(url + 6);
	if ((e = nng_pair1_open_poly(&sock)) ||
	    (e = nng_socket_set_size(sock, NNG_OPT_RECVMAXSZ, PROTO_MAX_FRAME)) ||
	    (e = nng_socket_set_int(sock, NNG_OPT_SENDBUF, 1024)) ||
	    (e = nng_pipe_notify(sock, NNG_PIPE_EV_ADD_PRE, pipe_event, NULL)) ||
	    (e = nng_pipe_notify(sock, NNG_PIPE_EV_REM_POST, pipe_event, NULL)) ||
	    (e = nng_listener_create(&l, sock, url)) ||
	    (e = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600)) ||
	    (e = nng_listener_start(l, 0)) ||
	    (e = nng_socket_get_int(sock, NNG_OPT_RECVFD, &sock_fd))) {
		log_err("control socket %s: %s", url, nng_strerror(e));
		free(url);
		return -1;
	}
	free(url);
	ev_ctl = (struct evsrc){control_recv, NULL};
	server_watch(sock_fd, EPOLLIN, &ev_ctl);
	ctlpeer_init(sock, cf->cf_stream_cap);
	events_subscribe(ctlpeer_event, ctlpeer_event_wanted, NULL);
	return 0;
}

static void
done(nng_pipe p, uint64_t req, enum msg_type t, json_t *data, const char *text)
{
	ctlpeer_reply(p, t, req, data, text);
	ctlpeer_reply(p, MSG_END, req, NULL, NULL);
	json_decref(data);
}

/* A request of a ctl client: the request layer's part first. */
struct ctl_request {
	struct request cr_rq;
	nng_pipe cr_pipe;
	uint64_t cr_req;
};

/* A run: the ctl side of its stream (st_client). */
struct ctl_run {
	nng_pipe cr_pipe;
	uint64_t cr_req; /* the request it answers */
	bool cr_errored; /* an error line went by */
};

/* Output of a run as it comes; the end says whether it failed. */
static void
run_chunk(struct stream *s, const char *data, size_t len, bool final)
{
	struct ctl_run *run = s->st_client;
	struct msg m;

	if (memmem(data, len, "{\"type\":\"error\"", 15))
		run->cr_errored = true;
	msg_init(&m, MSG_OUTPUT);
	msg_set_u64(&m, F_STREAM, s->st_id);
	msg_set_str(&m, F_DATA, data, len);
	ctlpeer_send(run->cr_pipe, &m);
	msg_free(&m);
	if (!final)
		return;
	done(run->cr_pipe, run->cr_req, run->cr_errored ? MSG_FAIL : MSG_OK, NULL,
	     run->cr_errored ? "the execution ended with an error" : NULL);
	free(run); /* the stream goes after it */
}

static const struct stream_ops run_ops = {
	.so_chunk = run_chunk,
	.so_client = "sandcellctl",
};

/* The request layer's answers (struct request_ops), on the control socket. */
static void
ctl_done(struct request *rq, unsigned status, json_t *json, const char *text)
{
	struct ctl_request *cr = (struct ctl_request *)rq;

	done(cr->cr_pipe, cr->cr_req, status < 300 ? MSG_OK : MSG_FAIL, json, text);
	free(cr);
}

static void
ctl_wait(struct request *rq)
{
	(void)rq; /* the client waits on its pipe */
}

static void
ctl_stream(struct request *rq, struct stream *s)
{
	struct ctl_request *cr = (struct ctl_request *)rq;
	struct ctl_run *run = xcalloc(1, sizeof(*run));

	run->cr_pipe = cr->cr_pipe;
	run->cr_req = cr->cr_req;
	s->st_ops = &run_ops;
	s->st_client = run;
	free(cr); /* the stream answers the client when it ends */
}

static const struct request_ops ctl_ops = {
	.ro_complete = ctl_done,
	.ro_suspend = ctl_wait,
	.ro_stream = ctl_stream,
};

static json_t *
status_json(void)
{
	struct context_counts cc;

	context_count(&cc, NULL);
	return json_pack("{s:s, s:f, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:s, s:s}", "version",
			 SANDCELL_VERSION, "uptime_seconds", lifecycle_uptime(),
			 "contexts", cc.cc_listed, "warm_pool", cc.cc_pooled, "warm_pool_ready",
			 cc.cc_pool_ready, "executions_running", cc.cc_running, "executions_queued",
			 cc.cc_queued, "draining", lifecycle_draining(), "keep_contexts",
			 lifecycle_keeps_contexts(), "listen", accept_address(), "run_dir",
			 cf->cf_run_dir);
}

/*
 * In flight and queued. The proxy runs a context's units in order, so the
 * oldest open stream of a busy context is the one running.
 */
static json_t *
executions_json(void)
{
	json_t *a = json_array();
	struct stream *s;
	uint64_t now = now_ms();

	for (s = stream_next(NULL); s; s = stream_next(s)) {
		struct context *c = s->st_ctx;
		bool running = stream_running(s);
		if (s->st_final)
			continue; /* ended: only its delivery to a slow client remains */
		const char *client = s->st_cancel_sent ? "cancelled"
				     : s->st_gone      ? "gone"
				     : s->st_ops       ? s->st_ops->so_client
							 : "connected";
		json_array_append_new(
			a, json_pack("{s:I, s:s, s:s, s:s, s:f, s:s}", "stream",
				     (json_int_t)s->st_id, "context", c ? context_id(c) : "",
				     "state", running ? "running" : "queued", "client", client,
				     "age_seconds", (now - s->st_started) / 1000.0, "code",
				     s->st_code_head));
	}
	return a;
}

static struct request *
ctl_request(nng_pipe p, uint64_t req)
{
	struct ctl_request *cr = xcalloc(1, sizeof(*cr));

	cr->cr_rq.rq_ops = &ctl_ops;
	cr->cr_pipe = p;
	cr->cr_req = req;
	return &cr->cr_rq;
}

/* A run: the same body an HTTP client would send, through the same checks. */
static void
run(nng_pipe p, struct msg *m)
{
	json_t *code = json_stringn(m->m_code.s, m->m_code.len); /* checks UTF-8 */
	json_t *body;

	if (!code) {
		done(p, m->m_req, MSG_FAIL, NULL, "code is not valid UTF-8");
		return;
	}
	body = json_pack("{s:o}", "code", code);
	if ((m->m_has & FB(F_ID)) &&
	    json_object_set_new(body, "context_id", json_stringn(m->m_id.s, m->m_id.len)) < 0) {
		json_decref(body);
		done(p, m->m_req, MSG_FAIL, NULL, "the context id is not valid UTF-8");
		return;
	}
	request_execute(ctl_request(p, m->m_req), body);
	json_decref(body);
}

static void
handle(nng_pipe p, struct msg *m)
{
	const char *id = m->m_has & FB(F_ID) ? m->m_id.s : "";
	struct stream *s;

	switch (m->m_type) {
	case CTL_STATUS:
		done(p, m->m_req, MSG_OK, status_json(), NULL);
		return;
	case CTL_CONTEXTS:
		done(p, m->m_req, MSG_OK, context_list_json(true), NULL);
		return;
	case CTL_EXECUTIONS:
		done(p, m->m_req, MSG_OK, executions_json(), NULL);
		return;
	case CTL_CANCEL:
		if (!(s = stream_by_id(m->m_stream))) {
			done(p, m->m_req, MSG_FAIL, NULL, "no such execution");
			return;
		}
		log_info("stream %llu: cancelled by the operator", (unsigned long long)s->st_id);
		stream_cancel(s, "cancelled by the operator");
		done(p, m->m_req, MSG_OK, NULL, "cancelled");
		return;
	case CTL_INTERRUPT:
		request_context(ctl_request(p, m->m_req), id, OP_INTERRUPT);
		return;
	case CTL_RESTART:
		request_context(ctl_request(p, m->m_req), id, OP_RESTART);
		return;
	case CTL_DELETE:
		request_context(ctl_request(p, m->m_req), id, OP_DELETE);
		return;
	case CTL_CREATE:
		request_create(ctl_request(p, m->m_req), m->m_lang.s, m->m_cwd.s, NULL);
		return;
	case CTL_DRAIN:
	case CTL_UNDRAIN:
		request_drain(ctl_request(p, m->m_req), m->m_type == CTL_DRAIN);
		return;
	case CTL_STOP_ENDS:
	case CTL_STOP_KEEPS:
		/*
		 * What the next stop (SIGTERM) does with the contexts, whatever
		 * --keep-contexts said: the unit's ExecStop tells a stop from a restart.
		 */
		lifecycle_keep_contexts(m->m_type == CTL_STOP_KEEPS);
		log_info("the operator says: stopping %s", lifecycle_keeps_contexts()
								? "keeps the contexts running"
								: "ends every context");
		done(p, m->m_req, MSG_OK, NULL,
		     lifecycle_keeps_contexts() ? "a stop keeps the contexts running"
						: "a stop ends every context");
		return;
	case CTL_WATCH:
		if (ctlpeer_watch(p, m->m_req) < 0) {
			done(p, m->m_req, MSG_FAIL, NULL, "too many watchers");
			return;
		}
		events_emitf("{s:s}", "event", "watching");
		return;
	case CTL_RUN:
		run(p, m);
		return;
	default:
		done(p, m->m_req, MSG_FAIL, NULL, "unsupported request");
	}
}

static void
control_recv(void *arg, uint32_t events)
{
	(void)arg, (void)events;
	for (int i = 0; i < 64; i++) {
		nng_msg *nm;
		struct msg m;
		int e = nng_recvmsg(sock, &nm, NNG_FLAG_NONBLOCK);

		if (e)
			return;
		nng_pipe p = nng_msg_get_pipe(nm);
		e = msg_decode(nng_msg_body(nm), nng_msg_len(nm), &m);
		nng_msg_free(nm);
		if (e) {
			log_warn("control: bad request dropped: %s", proto_strerror(e));
			done(p, 0, MSG_FAIL, NULL, proto_strerror(e));
			continue;
		}
		if (m.m_type == CTL_ACK) {
			ctlpeer_ack(p, m.m_count);
		} else if (m.m_type < CTL_STATUS || !(m.m_has & FB(F_REQ))) {
			log_warn("control: unexpected %s dropped", msg_type_name(m.m_type));
			done(p, m.m_req, MSG_FAIL, NULL, "not a control request");
		} else {
			handle(p, &m);
		}
		msg_free(&m);
	}
}

/* The runs of a client that left are cancelled. */
static void
runs_end(uint32_t id, void *arg)
{
	struct stream *s, *next;

	(void)arg;
	for (s = stream_next(NULL); s; s = next) {
		next = stream_next(s);
		if (s->st_ops == &run_ops &&
		    (uint32_t)nng_pipe_id(((struct ctl_run *)s->st_client)->cr_pipe) == id) {
			free(s->st_client);
			stream_closed(s);
		}
	}
}

/* The loop's wake-up: clients that left lose their watch and runs. */
static void
control_wake(void *arg, uint32_t events)
{
	uint64_t v;

	(void)arg, (void)events;
	if (read(wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warn("eventfd: %s", strerror(errno));
	ctlpeer_reap(runs_end, NULL);
}

void
control_stop(void)
{
	char *path = xasprintf("%s/ctl.sock", cf->cf_run_dir);

	ctlpeer_stop();
	nng_close(sock);
	unlink(path);
	free(path);
}
