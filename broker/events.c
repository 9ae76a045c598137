/*
 * events.c — the broker's lifecycle events (a context created, an execution
 * started or ended, a kernel restarted, ...) go to whoever subscribed: the
 * modules that see them do not know who listens (control.c, for
 * `sandcellctl watch`).
 */
#include <stdarg.h>

#include "broker.h"

#define EVENTS_MAX 4

static struct {
	void (*fn)(json_t *ev, void *arg);
	bool (*wants)(void *arg);
	void *arg;
} subs[EVENTS_MAX];
static size_t nsubs;

/* wants: whether fn takes events now (no one watching: none is built). */
void
events_subscribe(void (*fn)(json_t *ev, void *arg), bool (*wants)(void *arg), void *arg)
{
	if (nsubs == EVENTS_MAX)
		fatal("events: more than %d subscribers", EVENTS_MAX);
	subs[nsubs].fn = fn;
	subs[nsubs].wants = wants;
	subs[nsubs++].arg = arg;
}

/* Takes ev; a subscriber borrows it. */
static void
events_emit(json_t *ev)
{
	if (!ev)
		return;
	for (size_t i = 0; i < nsubs; i++)
		subs[i].fn(ev, subs[i].arg);
	json_decref(ev);
}

/*
 * An event packed as json_pack packs it, built only when a subscriber wants
 * it: an `x=1` packed and freed two events (started, ended) for no one.
 */
void
events_emitf(const char *fmt, ...)
{
	bool wanted = false;
	va_list ap;

	for (size_t i = 0; i < nsubs && !wanted; i++)
		wanted = subs[i].wants(subs[i].arg);
	if (!wanted)
		return;
	va_start(ap, fmt);
	events_emit(json_vpack_ex(NULL, 0, fmt, ap));
	va_end(ap);
}
