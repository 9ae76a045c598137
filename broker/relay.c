/*
 * relay.c — what a proxy sends, to where it goes: output to its stream,
 * kernel state to its context (and the requests waiting for it to be
 * ready), replies to the waiting requests (waiter.c), the proxy's counts to
 * the metrics, one message at a time (relay_msg). main.c's loop calls
 * relay_recv() when a link has frames.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contextdef.h"
#include "linkdef.h"

static void
relay_state(struct context *c, struct msg *m)
{
	if (m->m_type == MSG_STATE && c->c_ready && m->m_state == KS_STARTING) {
		metrics_count(M_KERNEL_RESTART, 1);
		events_emitf("{s:s, s:s, s:s}", "event", "kernel_restarted", "context",
		             c->c_id, "why", m->m_text.s ? m->m_text.s : "");
	}
	c->c_pl->pl_state = m->m_state;
	if (m->m_has & FB(F_KPID))
		c->c_pl->pl_kpid = m->m_kpid;
	free(c->c_error);
	c->c_error = NULL;
	if (c->c_pl->pl_state == KS_DEAD && (m->m_has & FB(F_TEXT)))
		c->c_error = xstrdup(m->m_text.s);
	if (!c->c_ready &&
	    (c->c_pl->pl_state == KS_IDLE || c->c_pl->pl_state == KS_BUSY) &&
	    c->c_pooled) {
		c->c_ready = true;
		log_info("pool: a %s kernel is warm (proxy %d, %llu ms)", c->c_kernel,
		         (int)c->c_pl->pl_pid,
		         (unsigned long long)(now_ms() - c->c_created));
	} else if (!c->c_ready &&
	           (c->c_pl->pl_state == KS_IDLE || c->c_pl->pl_state == KS_BUSY)) {
		c->c_ready = true;
		log_info("context %s: ready in %llu ms", c->c_id,
		         (unsigned long long)(now_ms() - c->c_created));
		events_emitf("{s:s, s:s, s:s}", "event", "context_ready", "context",
		             c->c_id, "language", c->c_lang);
		waiter_answer_ready(c);
		pool_kick(); /* the pool may have waited for it (pool_yield) */
	} else if (!c->c_ready && c->c_pl->pl_state == KS_DEAD) {
		if (c->c_pooled)
			pool_back_off(now_ms());
		waiter_answer_ready(c);
		c->c_deleting = true; /* a context that never started is not kept */
		struct msg sd;
		msg_init(&sd, MSG_SHUTDOWN);
		msg_set_u64(&sd, F_REQ, waiter_next_req());
		link_send(c, &sd);
		msg_free(&sd);
	}
}

/* One message of c's proxy (m stays the caller's). */
void
relay_msg(struct context *c, struct msg *m)
{
	struct stream *s;

	switch (m->m_type) {
	case MSG_OUTPUT:
		if ((s = stream_find(c, m->m_stream)) && s->st_kind) {
			s->st_heard = true;
			s->st_kind->sk_in(s, m); /* envd's: connect.c */
		} else if (s)
			stream_output(s, m->m_data.s, m->m_data.len,
			              m->m_final ? m : NULL);
		break;
	case MSG_HELLO:
	case MSG_STATE:
		relay_state(c, m);
		break;
	case MSG_STATS:
		metrics_count(M_OUTPUT_DROPPED, m->m_count);
		metrics_count(M_EGRESS_REFUSED, m->m_refused);
		break;
	case MSG_OK:
	case MSG_FAIL:
		waiter_reply(c, m);
		break;
	default:
		log_warn("context %s: unexpected %s from proxy, dropped", c->c_id,
		         msg_type_name(m->m_type));
	}
}

/* What c's link has (chanlink.c's handler calls it when its chan is readable). */
void
relay_recv(struct context *c)
{
	struct proxy_link *pl = c->c_pl;

	for (int i = 0; i < 1024; i++) {
		struct msg m;
		int e = chan_next(&pl->pl_chan, &m);
		if (e == CHAN_EMPTY)
			return;
		if (e == CHAN_UP)
			continue; /* the proxy says HELLO */
		if (e == CHAN_DOWN) {
			log_debug("context %s: proxy link down: %s", c->c_id,
			          pl->pl_chan.ch_why);
			/* a context being deleted: its proxy is done with us */
			if (c->c_deleting && !pl->pl_child && pl->pl_pidfd < 0) {
				context_end(c, CTX_DELETED, NULL);
				return;
			}
			continue;
		}
		if (e < 0) {
			log_warn("context %s: bad frame from proxy dropped: %s", c->c_id,
			         proto_strerror(e));
			continue;
		}
		relay_msg(c, &m);
		msg_free(&m);
	}
	/* more than a turn's share: the rest comes at the next turn, after the
	 * other contexts' (the socket may be empty, all of it read) */
	chan_wake(&pl->pl_chan);
}
