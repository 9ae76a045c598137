/*
 * events.c — the broker's lifecycle events (a context created, an execution
 * started or ended, a kernel restarted, ...) go to whoever subscribed: the
 * modules that see them do not know who listens (control.c, for
 * `sandcellctl watch`).
 */
#include "broker.h"

#define EVENTS_MAX 4

static struct {
	void (*fn)(json_t *ev, void *arg);
	void *arg;
} subs[EVENTS_MAX];
static size_t nsubs;

void
events_subscribe(void (*fn)(json_t *ev, void *arg), void *arg)
{
	if (nsubs == EVENTS_MAX)
		fatal("events: more than %d subscribers", EVENTS_MAX);
	subs[nsubs].fn = fn;
	subs[nsubs++].arg = arg;
}

/* Takes ev; a subscriber borrows it. */
void
events_emit(json_t *ev)
{
	if (!ev)
		return;
	for (size_t i = 0; i < nsubs; i++)
		subs[i].fn(ev, subs[i].arg);
	json_decref(ev);
}
