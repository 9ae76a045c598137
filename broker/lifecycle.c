/*
 * lifecycle.c — where the broker is in its life: started when, draining (new
 * executions and contexts get 503: the operator's drain, or SIGTERM's),
 * stopping (SIGTERM: once drained, or when the grace is over), quitting (the
 * loop ends), making the default contexts of start-up, and whether a stop
 * keeps the contexts (--keep-contexts, changed at run time by sandcellctl).
 * Its state is its own: the others ask and tell through these calls.
 */
#include <errno.h>

#include "broker.h"

static uint64_t started, grace_until;
static bool draining, stopping, quitting, defaults, keeps;

/* At start: the clock of uptime, and --keep-contexts. */
void
lifecycle_start(void)
{
	started = now_ms();
	keeps = cf->cf_keep_contexts;
}

/* Seconds since lifecycle_start. */
double
lifecycle_uptime(void)
{
	return (now_ms() - started) / 1000.0;
}

bool
lifecycle_draining(void)
{
	return draining;
}

/* The operator's drain, or its end; -EBUSY: stopping, there is no way back. */
int
lifecycle_drain(bool on)
{
	if (!on && stopping)
		return -EBUSY;
	draining = on;
	return 0;
}

/* SIGTERM: drain, and stop once drained or after grace_ms. */
void
lifecycle_stop(uint64_t grace_ms)
{
	draining = stopping = true;
	grace_until = now_ms() + grace_ms;
}

bool
lifecycle_stopping(void)
{
	return stopping;
}

/* Stopping, and its grace is over at now. */
bool
lifecycle_grace_over(uint64_t now)
{
	return stopping && now >= grace_until;
}

/* The loop ends after this round. */
void
lifecycle_quit(void)
{
	quitting = true;
}

bool
lifecycle_quitting(void)
{
	return quitting;
}

/* The default contexts of start-up are being made (true), or made (false). */
void
lifecycle_defaults(bool making)
{
	defaults = making;
}

bool
lifecycle_making_defaults(void)
{
	return defaults;
}

/* Whether a stop leaves the proxies and kernels running (sandcellctl, at run time). */
void
lifecycle_keep_contexts(bool keep)
{
	keeps = keep;
}

bool
lifecycle_keeps_contexts(void)
{
	return keeps;
}
