/*
 * control.c — the operator control socket (nng req/rep over ipc, 0600, in the
 * run dir) that sandcellctl talks to: one request, one reply.
 */
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "broker.h"

int
control_start(void)
{
	char *url = xasprintf("ipc://%s/ctl.sock", sv.sv_run_dir);
	nng_listener l;
	int e;

	unlink(url + 6);
	if ((e = nng_rep0_open(&sv.sv_ctl)) ||
	    (e = nng_socket_set_size(sv.sv_ctl, NNG_OPT_RECVMAXSZ, 64 * 1024)) ||
	    (e = nng_listener_create(&l, sv.sv_ctl, url)) ||
	    (e = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600)) ||
	    (e = nng_listener_start(l, 0)) ||
	    (e = nng_socket_get_int(sv.sv_ctl, NNG_OPT_RECVFD, &sv.sv_ctl_fd))) {
		log_err("control socket %s: %s", url, nng_strerror(e));
		free(url);
		return -1;
	}
	free(url);
	sv.sv_ev_ctl = (struct evsrc){EV_CTL, NULL};
	server_watch(sv.sv_ctl_fd, EPOLLIN, &sv.sv_ev_ctl);
	return 0;
}

static json_t *
status_json(void)
{
	struct context *c;
	struct stream *s;
	int nctx = 0, nstreams = 0;

	TAILQ_FOREACH(c, &sv.sv_contexts, c_link)
		nctx += !c->c_deleting;
	TAILQ_FOREACH(s, &sv.sv_streams, st_link)
		nstreams++;
	return json_pack("{s:s, s:f, s:i, s:i, s:s, s:s}", "version", SANDCELL_VERSION,
			 "uptime_seconds", (now_ms() - sv.sv_started) / 1000.0, "contexts",
			 nctx, "streams", nstreams, "listen", sv.sv_listen, "run_dir",
			 sv.sv_run_dir);
}

void
control_recv(void)
{
	for (;;) {
		struct msg m, r;
		json_t *j = NULL;
		int e = msg_recv(sv.sv_ctl, &m, NNG_FLAG_NONBLOCK);

		if (e == NNG_EAGAIN)
			return;
		msg_init(&r, MSG_FAIL);
		if (e) {
			const char *t = e < 0 ? proto_strerror(e) : nng_strerror(e);
			log_warn("control: bad request: %s", t);
			msg_set_u64(&r, F_REQ, 0);
			msg_set_str(&r, F_TEXT, t, strlen(t));
		} else if (m.m_type == CTL_STATUS || m.m_type == CTL_CONTEXTS) {
			r.m_type = MSG_OK;
			msg_set_u64(&r, F_REQ, m.m_req);
			if (m.m_type == CTL_STATUS) {
				j = status_json();
			} else {
				struct context *c;
				j = json_array();
				TAILQ_FOREACH(c, &sv.sv_contexts, c_link)
					if (!c->c_deleting)
						json_array_append_new(j, context_json(c, true));
			}
			char *s = json_dumps(j, JSON_COMPACT);
			msg_set_str(&r, F_DATA, s, strlen(s));
			free(s);
			json_decref(j);
		} else {
			const char *t = "unsupported request";
			msg_set_u64(&r, F_REQ, m.m_req);
			msg_set_str(&r, F_TEXT, t, strlen(t));
		}
		if (!e)
			msg_free(&m);
		if ((e = msg_send(sv.sv_ctl, &r, NNG_FLAG_NONBLOCK)))
			log_warn("control: reply: %s", nng_strerror(e));
		msg_free(&r);
	}
}

void
control_stop(void)
{
	char *path = xasprintf("%s/ctl.sock", sv.sv_run_dir);

	nng_close(sv.sv_ctl);
	unlink(path);
	free(path);
}
