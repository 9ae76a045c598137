/*
 * ctlpeer.c — the control socket's clients (control.c): what is sent to each
 * within its window, who watches the events, and the pipes nng closed. nng
 * queues two messages per pipe in pair1's polyamorous mode and drops what
 * does not fit, so a client acknowledges what it reads (CTL_ACK) and the
 * rest waits here until the window (CTL_WINDOW) opens again.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "broker.h"

#define WATCHERS_MAX 32

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
TAILQ_HEAD(ctlpeerq, ctl_peer);

static nng_socket sock;
static uint64_t cap; /* bytes a client may let wait (--stream-cap) */
/* clients with replies unacked or waiting */
static struct ctlpeerq peers = TAILQ_HEAD_INITIALIZER(peers);
/* sandcellctl watch clients */
static struct {
	nng_pipe pipe;
	uint64_t req;
} watchers[WATCHERS_MAX];
static size_t nwatchers;
/* pipes closed, written on nng's threads and read on the loop's: under gone_lock */
static pthread_mutex_t gone_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint32_t *ids;
	size_t n, cap;
} gone;

void
ctlpeer_init(nng_socket s, uint64_t stream_cap)
{
	sock = s;
	cap = stream_cap;
}

static struct ctl_peer *
peer_find(uint32_t id)
{
	struct ctl_peer *cp;

	TAILQ_FOREACH(cp, &peers, cp_link)
	if ((uint32_t)nng_pipe_id(cp->cp_pipe) == id)
		return cp;
	return NULL;
}

static void
peer_free(struct ctl_peer *cp)
{
	TAILQ_REMOVE(&peers, cp, cp_link);
	msgq_free(&cp->cp_q);
	free(cp);
}

/* Sends what the client's window allows, in order. */
static void
peer_pump(struct ctl_peer *cp)
{
	while (cp->cp_unacked < CTL_WINDOW && cp->cp_q.mq_n) {
		size_t len = msgq_head_len(&cp->cp_q), sent;
		int e = msgq_flush_max(&cp->cp_q, sock, 1, &sent);
		if (!sent)
			return; /* the socket's queue (SENDBUF) is full: the next ack or
			           reply retries */
		cp->cp_bytes -= len;
		if (e)
			log_warn("control: a reply to a sandcellctl client was lost: %s",
			         nng_strerror(e));
		else
			cp->cp_unacked++;
	}
}

void
ctlpeer_send(nng_pipe p, struct msg *m)
{
	uint32_t id = nng_pipe_id(p);
	struct ctl_peer *cp = peer_find(id);
	nng_msg *nm;

	if (!cp) {
		cp = xcalloc(1, sizeof(*cp));
		cp->cp_pipe = p;
		TAILQ_INSERT_TAIL(&peers, cp, cp_link);
	}
	if (msg_pack(m, &nm))
		fatal("control: cannot encode %s", msg_type_name(m->m_type));
	nng_msg_set_pipe(nm, p);
	cp->cp_bytes += nng_msg_len(nm);
	msgq_push(&cp->cp_q, nm);
	peer_pump(cp);
	if (cp->cp_bytes > cap) {
		/* its runs are cancelled and its watch ends when the pipe is gone */
		log_warn("control: a sandcellctl client does not read (over %llu bytes "
		         "waiting): disconnected",
		         (unsigned long long)cap);
		nng_pipe_close(p);
		peer_free(cp);
	}
}

/* The client read count replies: its window opens. */
void
ctlpeer_ack(nng_pipe p, uint64_t count)
{
	struct ctl_peer *cp = peer_find(nng_pipe_id(p));

	if (!cp)
		return;
	cp->cp_unacked = count < cp->cp_unacked ? cp->cp_unacked - count : 0;
	peer_pump(cp);
	if (!cp->cp_unacked && !cp->cp_q.mq_n)
		peer_free(cp);
}

/* A reply (OK, FAIL, END) to the request req; data is borrowed. */
void
ctlpeer_reply(nng_pipe p, enum msg_type t, uint64_t req, json_t *data, const char *text)
{
	struct msg m;

	msg_init(&m, t);
	msg_set_u64(&m, F_REQ, req);
	if (data) {
		char *s = json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY |
		                               JSON_REAL_PRECISION(12));
		msg_set_str(&m, F_DATA, s, strlen(s));
		free(s);
	}
	if (text || t == MSG_FAIL)
		msg_set_str(&m, F_TEXT, text ? text : "failed",
		            strlen(text ? text : "failed"));
	ctlpeer_send(p, &m);
	msg_free(&m);
}

/* The client on p watches the events from now on, as answers to req. */
int
ctlpeer_watch(nng_pipe p, uint64_t req)
{
	if (nwatchers == WATCHERS_MAX)
		return -1;
	watchers[nwatchers].pipe = p;
	watchers[nwatchers++].req = req;
	return 0;
}

size_t
ctlpeer_watchers(void)
{
	return nwatchers;
}

/* events.c's subscriber wants events while a `sandcellctl watch` is on. */
bool
ctlpeer_event_wanted(void *arg)
{
	(void)arg;
	return nwatchers > 0;
}

/* An event (events.c's subscriber) to every `sandcellctl watch`; ev is borrowed. */
void
ctlpeer_event(json_t *ev, void *arg)
{
	char t[64];

	(void)arg;
	if (!nwatchers)
		return;
	iso_time(t);
	json_object_set_new(ev, "time", json_string(t));
	for (size_t i = 0; i < nwatchers; i++)
		ctlpeer_reply(watchers[i].pipe, MSG_OK, watchers[i].req, ev, NULL);
}

/*
 * A ctl pipe closed (on nng's thread): its id is kept for the loop, however
 * many close before the loop gets to them, so no watch or run is left behind.
 */
void
ctlpeer_gone(uint32_t id)
{
	pthread_mutex_lock(&gone_lock);
	if (gone.n == gone.cap) {
		gone.cap = gone.cap ? 2 * gone.cap : 64;
		gone.ids = xrealloc(gone.ids, gone.cap * sizeof(gone.ids[0]));
	}
	gone.ids[gone.n++] = id;
	pthread_mutex_unlock(&gone_lock);
}

/* On the loop: clients that left lose their queue and watch; fn ends the rest. */
void
ctlpeer_reap(void (*fn)(uint32_t id, void *arg), void *arg)
{
	uint32_t *ids;
	size_t n;

	pthread_mutex_lock(&gone_lock);
	ids = gone.ids;
	n = gone.n;
	gone.ids = NULL;
	gone.n = gone.cap = 0;
	pthread_mutex_unlock(&gone_lock);
	for (size_t k = 0; k < n; k++) {
		struct ctl_peer *cp = peer_find(ids[k]);
		if (cp)
			peer_free(cp);
		for (size_t i = 0; i < nwatchers;)
			if ((uint32_t)nng_pipe_id(watchers[i].pipe) == ids[k])
				watchers[i] = watchers[--nwatchers];
			else
				i++;
		fn(ids[k], arg);
	}
	free(ids);
}

void
ctlpeer_stop(void)
{
	while (!TAILQ_EMPTY(&peers))
		peer_free(TAILQ_FIRST(&peers));
}
