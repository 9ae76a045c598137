/*
 * control.c — the operator control socket sandcellctl talks to: nng pair1 in
 * polyamorous mode over ipc (ctl.sock in the run dir, 0600), so every client
 * has a pipe of its own and one request can be answered by many messages:
 * OK or FAIL, OUTPUT lines for run, events for watch, and END. The peer's uid
 * must be ours. nng queues two messages per pipe in this mode and drops what
 * does not fit, so a client acknowledges what it reads (CTL_ACK) and the
 * broker keeps the rest until the window (CTL_WINDOW) opens again.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "broker.h"

/* Pipes closed on nng's threads, handed to the loop. */
static pthread_mutex_t gone_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * A ctl pipe closed (on nng's thread): its id is kept for the loop, however
 * many close before the loop gets to them, so no watch or run is left behind.
 */
void
control_pipe_gone(uint32_t id)
{
	pthread_mutex_lock(&gone_lock);
	if (sv.sv_mb.mb_ctl_gone.n == sv.sv_mb.mb_ctl_gone.cap) {
		sv.sv_mb.mb_ctl_gone.cap = sv.sv_mb.mb_ctl_gone.cap ? 2 * sv.sv_mb.mb_ctl_gone.cap : 64;
		sv.sv_mb.mb_ctl_gone.ids = xrealloc(sv.sv_mb.mb_ctl_gone.ids,
					      sv.sv_mb.mb_ctl_gone.cap * sizeof(sv.sv_mb.mb_ctl_gone.ids[0]));
	}
	sv.sv_mb.mb_ctl_gone.ids[sv.sv_mb.mb_ctl_gone.n++] = id;
	pthread_mutex_unlock(&gone_lock);
}

static void
pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	uint64_t one = 1;

	(void)arg;
	if (ev == NNG_PIPE_EV_ADD_PRE) {
		uint64_t uid;
		if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) != 0 ||
		    uid != (uint64_t)geteuid())
			nng_pipe_close(p);
		return;
	}
	control_pipe_gone(nng_pipe_id(p));
	if (write(sv.sv_io.io_wakefd, &one, sizeof(one)) < 0)
		log_warn("eventfd: %s", strerror(errno));
}

int
control_start(void)
{
	char *url = xasprintf("ipc://%s/ctl.sock", sv.sv_cf.cf_run_dir);
	nng_listener l;
	int e;

	unlink(url + 6);
	if ((e = nng_pair1_open_poly(&sv.sv_io.io_ctl)) ||
	    (e = nng_socket_set_size(sv.sv_io.io_ctl, NNG_OPT_RECVMAXSZ, PROTO_MAX_FRAME)) ||
	    (e = nng_socket_set_int(sv.sv_io.io_ctl, NNG_OPT_SENDBUF, 1024)) ||
	    (e = nng_pipe_notify(sv.sv_io.io_ctl, NNG_PIPE_EV_ADD_PRE, pipe_event, NULL)) ||
	    (e = nng_pipe_notify(sv.sv_io.io_ctl, NNG_PIPE_EV_REM_POST, pipe_event, NULL)) ||
	    (e = nng_listener_create(&l, sv.sv_io.io_ctl, url)) ||
	    (e = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600)) ||
	    (e = nng_listener_start(l, 0)) ||
	    (e = nng_socket_get_int(sv.sv_io.io_ctl, NNG_OPT_RECVFD, &sv.sv_io.io_ctl_fd))) {
		log_err("control socket %s: %s", url, nng_strerror(e));
		free(url);
		return -1;
	}
	free(url);
	sv.sv_io.io_ev_ctl = (struct evsrc){EV_CTL, NULL};
	server_watch(sv.sv_io.io_ctl_fd, EPOLLIN, &sv.sv_io.io_ev_ctl);
	return 0;
}

/*
 * A ctl client: replies sent and not yet acknowledged, and those waiting for
 * its window. One that lets more than the stream cap (--stream-cap) wait is
 * not reading: it is disconnected, never a stall or a loss for the others.
 */
struct ctl_peer {
	TAILQ_ENTRY(ctl_peer) cp_link;
	nng_pipe cp_pipe;
	size_t cp_unacked;
	size_t cp_bytes; /* waiting in cp_q */
	struct msgq cp_q;
};

static struct ctl_peer *
peer_find(uint32_t id)
{
	struct ctl_peer *cp;

	TAILQ_FOREACH(cp, &sv.sv_tb.tb_ctl_peers, cp_link)
		if ((uint32_t)nng_pipe_id(cp->cp_pipe) == id)
			return cp;
	return NULL;
}

static void
peer_free(struct ctl_peer *cp)
{
	TAILQ_REMOVE(&sv.sv_tb.tb_ctl_peers, cp, cp_link);
	msgq_free(&cp->cp_q);
	free(cp);
}

/* Sends what the client's window allows, in order. */
static void
peer_pump(struct ctl_peer *cp)
{
	while (cp->cp_unacked < CTL_WINDOW && cp->cp_q.mq_n) {
		size_t len = msgq_head_len(&cp->cp_q), sent;
		int e = msgq_flush_max(&cp->cp_q, sv.sv_io.io_ctl, 1, &sent);
		if (!sent)
			return; /* the socket's queue (SENDBUF) is full: the next ack or reply retries */
		cp->cp_bytes -= len;
		if (e)
			log_warn("control: a reply to a sandcellctl client was lost: %s",
				 nng_strerror(e));
		else
			cp->cp_unacked++;
	}
}

static void
send_to(nng_pipe p, struct msg *m)
{
	uint32_t id = nng_pipe_id(p);
	struct ctl_peer *cp = peer_find(id);
	nng_msg *nm;

	if (!cp) {
		cp = xcalloc(1, sizeof(*cp));
		cp->cp_pipe = p;
		TAILQ_INSERT_TAIL(&sv.sv_tb.tb_ctl_peers, cp, cp_link);
	}
	if (msg_pack(m, &nm))
		fatal("control: cannot encode %s", msg_type_name(m->m_type));
	nng_msg_set_pipe(nm, p);
	cp->cp_bytes += nng_msg_len(nm);
	msgq_push(&cp->cp_q, nm);
	peer_pump(cp);
	if (cp->cp_bytes > sv.sv_cf.cf_stream_cap) {
		/* its runs are cancelled and its watch ends when the pipe is gone */
		log_warn("control: a sandcellctl client does not read (over %llu bytes "
			 "waiting): disconnected",
			 (unsigned long long)sv.sv_cf.cf_stream_cap);
		nng_pipe_close(p);
		peer_free(cp);
	}
}

/* The client read count replies: its window opens. */
static void
peer_ack(nng_pipe p, uint64_t count)
{
	struct ctl_peer *cp = peer_find(nng_pipe_id(p));

	if (!cp)
		return;
	cp->cp_unacked = count < cp->cp_unacked ? cp->cp_unacked - count : 0;
	peer_pump(cp);
	if (!cp->cp_unacked && !cp->cp_q.mq_n)
		peer_free(cp);
}

static void
send_reply(nng_pipe p, enum msg_type t, uint64_t req, json_t *data, const char *text)
{
	struct msg m;

	msg_init(&m, t);
	msg_set_u64(&m, F_REQ, req);
	if (data) {
		char *s = json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(12));
		msg_set_str(&m, F_DATA, s, strlen(s));
		free(s);
	}
	if (text || t == MSG_FAIL)
		msg_set_str(&m, F_TEXT, text ? text : "failed", strlen(text ? text : "failed"));
	send_to(p, &m);
	msg_free(&m);
}

static void
done(nng_pipe p, uint64_t req, enum msg_type t, json_t *data, const char *text)
{
	send_reply(p, t, req, data, text);
	send_reply(p, MSG_END, req, NULL, NULL);
	json_decref(data);
}

/* A request of a ctl client completed (request_done, which then frees it). */
void
control_reply(struct request *rq, unsigned status, json_t *json, const char *text)
{
	done(rq->rq_pipe, rq->rq_ctl_req, status < 300 ? MSG_OK : MSG_FAIL, json, text);
}

/* Output of a sandcellctl run; the end says whether it failed. */
void
control_stream_output(struct stream *s, const char *data, size_t len, bool final)
{
	struct msg m;

	if (memmem(data, len, "{\"type\":\"error\"", 15))
		s->st_errored = true;
	msg_init(&m, MSG_OUTPUT);
	msg_set_u64(&m, F_STREAM, s->st_id);
	msg_set_str(&m, F_DATA, data, len);
	send_to(s->st_pipe, &m);
	msg_free(&m);
	if (final)
		done(s->st_pipe, s->st_req, s->st_errored ? MSG_FAIL : MSG_OK, NULL,
		     s->st_errored ? "the execution ended with an error" : NULL);
}

/* Lifecycle events to every `sandcellctl watch`. Takes ev. */
void
control_event(json_t *ev)
{
	char t[64];

	if (!ev || !sv.sv_tb.tb_watchers.n) {
		json_decref(ev);
		return;
	}
	iso_time(t);
	json_object_set_new(ev, "time", json_string(t));
	for (size_t i = 0; i < sv.sv_tb.tb_watchers.n; i++)
		send_reply(sv.sv_tb.tb_watchers.w[i].pipe, MSG_OK, sv.sv_tb.tb_watchers.w[i].req, ev, NULL);
	json_decref(ev);
}

static json_t *
status_json(void)
{
	struct context *c;
	int nctx = 0, running = 0, queued = 0, pooled = 0, warm = 0;

	TAILQ_FOREACH(c, &sv.sv_tb.tb_contexts, c_link) {
		nctx += context_listed(c);
		pooled += c->c_pooled && !c->c_deleting;
		warm += c->c_pooled && !c->c_deleting && c->c_ready;
		if (!c->c_deleting && c->c_nstreams) {
			running++;
			queued += c->c_nstreams - 1;
		}
	}
	return json_pack("{s:s, s:f, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:s, s:s}", "version",
			 SANDCELL_VERSION, "uptime_seconds", (now_ms() - sv.sv_lc.lc_started) / 1000.0,
			 "contexts", nctx, "warm_pool", pooled, "warm_pool_ready", warm,
			 "executions_running", running, "executions_queued", queued, "draining",
			 sv.sv_lc.lc_draining, "keep_contexts", sv.sv_cf.cf_keep_contexts, "listen", sv.sv_cf.cf_listen,
			 "run_dir", sv.sv_cf.cf_run_dir);
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

	TAILQ_FOREACH(s, &sv.sv_tb.tb_streams, st_link) {
		struct context *c = s->st_ctx;
		bool running = c && TAILQ_FIRST(&c->c_streams) == s;
		if (s->st_final)
			continue; /* ended: only its delivery to a slow client remains */
		const char *client = s->st_cancel_sent ? "cancelled"
				     : s->st_gone      ? "gone"
				     : s->st_ctl       ? "sandcellctl"
							 : "connected";
		json_array_append_new(
			a, json_pack("{s:I, s:s, s:s, s:s, s:f, s:s}", "stream",
				     (json_int_t)s->st_id, "context", c ? c->c_id : "",
				     "state", running ? "running" : "queued", "client", client,
				     "age_seconds", (now - s->st_started) / 1000.0, "code",
				     s->st_code_head));
	}
	return a;
}

static struct request *
ctl_request(nng_pipe p, uint64_t req)
{
	struct request *rq = xcalloc(1, sizeof(*rq));

	rq->rq_ctl = true;
	rq->rq_pipe = p;
	rq->rq_ctl_req = req;
	return rq;
}

static void
handle(nng_pipe p, struct msg *m)
{
	const char *id = m->m_has & FB(F_ID) ? m->m_id.s : "";
	struct context *c;
	struct stream *s;

	switch (m->m_type) {
	case CTL_STATUS:
		done(p, m->m_req, MSG_OK, status_json(), NULL);
		return;
	case CTL_CONTEXTS: {
		json_t *a = json_array();
		TAILQ_FOREACH(c, &sv.sv_tb.tb_contexts, c_link)
			if (!c->c_deleting)
				json_array_append_new(a, context_json(c, true));
		done(p, m->m_req, MSG_OK, a, NULL);
		return;
	}
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
		request_create(ctl_request(p, m->m_req), m->m_lang.s, m->m_cwd.s);
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
		sv.sv_cf.cf_keep_contexts = m->m_type == CTL_STOP_KEEPS;
		log_info("the operator says: stopping %s", sv.sv_cf.cf_keep_contexts
								? "keeps the contexts running"
								: "ends every context");
		done(p, m->m_req, MSG_OK, NULL,
		     sv.sv_cf.cf_keep_contexts ? "a stop keeps the contexts running"
					 : "a stop ends every context");
		return;
	case CTL_WATCH:
		if (sv.sv_tb.tb_watchers.n == sizeof(sv.sv_tb.tb_watchers.w) / sizeof(sv.sv_tb.tb_watchers.w[0])) {
			done(p, m->m_req, MSG_FAIL, NULL, "too many watchers");
			return;
		}
		sv.sv_tb.tb_watchers.w[sv.sv_tb.tb_watchers.n].pipe = p;
		sv.sv_tb.tb_watchers.w[sv.sv_tb.tb_watchers.n++].req = m->m_req;
		control_event(json_pack("{s:s}", "event", "watching"));
		return;
	case CTL_RUN: {
		/* the same body an HTTP client would send, through the same checks */
		json_t *code = json_stringn(m->m_code.s, m->m_code.len); /* checks UTF-8 */
		json_t *body;
		if (!code) {
			done(p, m->m_req, MSG_FAIL, NULL, "code is not valid UTF-8");
			return;
		}
		body = json_pack("{s:o}", "code", code);
		if ((m->m_has & FB(F_ID)) &&
		    json_object_set_new(body, "context_id", json_stringn(id, m->m_id.len)) < 0) {
			json_decref(body);
			done(p, m->m_req, MSG_FAIL, NULL, "the context id is not valid UTF-8");
			return;
		}
		request_execute(ctl_request(p, m->m_req), body);
		json_decref(body);
		return;
	}
	default:
		done(p, m->m_req, MSG_FAIL, NULL, "unsupported request");
	}
}

void
control_recv(void)
{
	for (int i = 0; i < 64; i++) {
		nng_msg *nm;
		struct msg m;
		int e = nng_recvmsg(sv.sv_io.io_ctl, &nm, NNG_FLAG_NONBLOCK);

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
			peer_ack(p, m.m_count);
		} else if (m.m_type < CTL_STATUS || !(m.m_has & FB(F_REQ))) {
			log_warn("control: unexpected %s dropped", msg_type_name(m.m_type));
			done(p, m.m_req, MSG_FAIL, NULL, "not a control request");
		} else {
			handle(p, &m);
		}
		msg_free(&m);
	}
}

/* Clients that left: their watches end, their runs are cancelled. */
void
control_pipe_events(void)
{
	uint32_t *ids;
	size_t n;

	pthread_mutex_lock(&gone_lock);
	ids = sv.sv_mb.mb_ctl_gone.ids;
	n = sv.sv_mb.mb_ctl_gone.n;
	sv.sv_mb.mb_ctl_gone.ids = NULL;
	sv.sv_mb.mb_ctl_gone.n = sv.sv_mb.mb_ctl_gone.cap = 0;
	pthread_mutex_unlock(&gone_lock);
	for (size_t k = 0; k < n; k++) {
		struct stream *s, *next;
		struct ctl_peer *cp = peer_find(ids[k]);
		if (cp)
			peer_free(cp);
		for (size_t i = 0; i < sv.sv_tb.tb_watchers.n;)
			if ((uint32_t)nng_pipe_id(sv.sv_tb.tb_watchers.w[i].pipe) == ids[k])
				sv.sv_tb.tb_watchers.w[i] = sv.sv_tb.tb_watchers.w[--sv.sv_tb.tb_watchers.n];
			else
				i++;
		for (s = TAILQ_FIRST(&sv.sv_tb.tb_streams); s; s = next) {
			next = TAILQ_NEXT(s, st_link);
			if (s->st_ctl && (uint32_t)nng_pipe_id(s->st_pipe) == ids[k])
				stream_closed(s);
		}
	}
	free(ids);
}

void
control_stop(void)
{
	char *path = xasprintf("%s/ctl.sock", sv.sv_cf.cf_run_dir);

	while (!TAILQ_EMPTY(&sv.sv_tb.tb_ctl_peers))
		peer_free(TAILQ_FIRST(&sv.sv_tb.tb_ctl_peers));

	nng_close(sv.sv_io.io_ctl);
	unlink(path);
	free(path);
}
