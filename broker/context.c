/*
 * context.c — the context table and each context's life in it: a new entry
 * (context_new), look up, iterate (context_next), the one set of counts every
 * listing reads (context_count), the JSON view (with /proc RSS), a warm one
 * claimed (context_claim), a proxy swapped (context_swap), and the end for a
 * reason (context_fail, context_end): nothing else adds to the table or takes
 * from it. Where a new context's proxy comes from is pool.c's (pool_create);
 * its proxy is link.c's and supervise.c's; its waiting requests are waiter.c's.
 * struct context is contextdef.h's, seen by those owners alone; the rest ask
 * the accessors at the end of this file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

#include "contextdef.h"
#include "linkdef.h"

static struct contextq contexts = TAILQ_HEAD_INITIALIZER(contexts);

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

/* The table in order, from its start (c NULL); NULL after the last. */
struct context *
context_next(const struct context *c)
{
	return c ? TAILQ_NEXT(c, c_link) : TAILQ_FIRST(&contexts);
}

/* its kernel's state as its proxy reports it; KS_DEAD once the proxy is gone */
enum kstate
context_kstate(const struct context *c)
{
	return c->c_pl->pl_pid <= 0 ? KS_DEAD : c->c_pl->pl_state;
}

/* its proxy kept dying (or could not be linked again): not restarted */
bool
context_proxyless(const struct context *c)
{
	return !c->c_pooled && c->c_pl->pl_pid <= 0 && c->c_pl->pl_state == KS_DEAD;
}

/* pooled, or starting, idle, busy (something running or queued) or dead */
const char *
context_state(const struct context *c)
{
	if (c->c_pooled)
		return "pooled";
	if (context_kstate(c) == KS_DEAD)
		return "dead";
	if (context_kstate(c) == KS_STARTING)
		return "starting";
	return c->c_nstreams ? "busy" : "idle";
}

/* a context clients see: not being deleted, not a warm proxy of the pool */
bool
context_listed(const struct context *c)
{
	return !c->c_deleting && !c->c_pooled && !c->c_envd;
}

/*
 * The counts every listing reads (GET /metrics, sandcellctl status, the
 * --max-contexts check, the pool's fill), of the contexts not being deleted;
 * the warm pool's of kernelspec kernel alone when it is given.
 */
void
context_count(struct context_counts *cc, const char *kernel)
{
	const struct kspec *pool[MAX_POOL];
	struct context *c;

	memset(cc, 0, sizeof(*cc));
	for (size_t i = 0; i < cf->cf_npool; i++)
		pool[i] = kcache_find(cf->cf_pool[i].ps_want);
	TAILQ_FOREACH(c, &contexts, c_link) {
		const char *st = context_state(c);
		size_t i;
		if (c->c_deleting)
			continue;
		cc->cc_listed += context_listed(c);
		if (c->c_pooled && (!kernel || !strcmp(c->c_kernel, kernel))) {
			cc->cc_pooled++;
			cc->cc_pool_ready += c->c_ready;
		}
		for (i = 0; i < cf->cf_npool; i++)
			cc->cc_pool_ready_of[i] += c->c_pooled && c->c_ready && pool[i] &&
						   !strcmp(c->c_kernel, pool[i]->ks_name);
		if (c->c_nstreams) {
			cc->cc_running++;
			cc->cc_queued += c->c_nstreams - 1;
		}
		for (i = 0; i < cc->cc_nstates; i++)
			if (!strcmp(cc->cc_states[i].cs_lang, c->c_lang) &&
			    !strcmp(cc->cc_states[i].cs_state, st))
				break;
		if (i == cc->cc_nstates) {
			if (i == sizeof(cc->cc_states) / sizeof(cc->cc_states[0]))
				continue;
			cc->cc_states[cc->cc_nstates++] =
				(struct context_states){c->c_lang, st, 0};
		}
		cc->cc_states[i].cs_n++;
	}
}

/* What the proxy of slot wrote of its box in its state file; NULL if nothing. */
static json_t *
context_box_json(const char *slot)
{
	char *path = xasprintf("%s/ctx/%s/state.json", cf->cf_run_dir, slot);
	json_t *st = json_load_file(path, 0, NULL), *box = NULL;

	free(path);
	if (json_is_object(json_object_get(st, "sandbox")))
		box = json_incref(json_object_get(st, "sandbox"));
	json_decref(st);
	return box;
}

struct context *
context_find(const char *id)
{
	struct context *c;

	if (!uuid_valid(id))
		return NULL;
	TAILQ_FOREACH(c, &contexts, c_link)
		if (context_listed(c) && !strcmp(c->c_id, id))
			return c;
	return NULL;
}

struct context *
context_default(const char *lang)
{
	struct context *c;

	TAILQ_FOREACH(c, &contexts, c_link)
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
	json_t *box = context_box_json(c->c_pl->pl_slot);
	if (box)
		json_object_set_new(j, "sandbox", box);
	json_t *net = egress_context_json(&c->c_egress);
	if (net)
		json_object_set_new(j, "network", net);
	if (c->c_error)
		json_object_set_new(j, "error", json_string(c->c_error));
	return j;
}

/*
 * The table as a listing: the contexts clients see in their view (GET
 * /contexts), or for an operator every one not being deleted, live.
 */
json_t *
context_list_json(bool operator)
{
	json_t *a = json_array();
	struct context *c;

	TAILQ_FOREACH(c, &contexts, c_link)
		if (operator ? !c->c_deleting : context_listed(c))
			json_array_append_new(a, context_json(c, operator));
	return a;
}

/* A new context, at the table's end (listed, unless the caller pools or hides it). */
struct context *
context_new(const char *id, const char *lang, const char *kernel, const char *cwd,
	    bool is_default, enum context_kind kind)
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
	c->c_pooled = kind == CONTEXT_POOLED;
	c->c_envd = kind == CONTEXT_ENVD;
	c->c_created = now_ms();
	c->c_iso.ci_uid_lease = c->c_iso.ci_net_lease = -1;
	TAILQ_INIT(&c->c_streams);
	TAILQ_INIT(&c->c_waiters);
	TAILQ_INSERT_TAIL(&contexts, c, c_link);
	return c;
}

/*
 * A warm proxy's context becomes one a client asked for: listed as the
 * newest, with its cwd and default-ness, created now.
 */
void
context_claim(struct context *c, const char *cwd, bool is_default)
{
	c->c_pooled = false;
	TAILQ_REMOVE(&contexts, c, c_link);
	TAILQ_INSERT_TAIL(&contexts, c, c_link);
	c->c_default = is_default;
	c->c_created = now_ms();
	free(c->c_cwd);
	c->c_cwd = xstrdup(cwd);
}

/*
 * Ends what context c holds for a reason: every stream (but one whose client
 * left) with its error, every waiting request with its answer. The context
 * stays, with no stream and no waiter; detail is why its proxy was lost
 * (CTX_LOST).
 */
void
context_fail(struct context *c, enum context_why why, const char *detail)
{
	struct stream *s, *next;
	struct request *rq;
	char *value = NULL, *answer = NULL;
	const char *name, *outcome;
	unsigned status;

	switch (why) {
	case CTX_LOST:
		value = xasprintf("the context's proxy %s; the context was restarted and its "
				  "state is lost",
				  detail);
		name = "ContextLost", outcome = "context_lost", status = 500;
		answer = xstrdup(value);
		break;
	case CTX_RESTARTED:
		value = xstrdup("the context was restarted");
		name = "ContextRestarted", outcome = "restarted", status = 409;
		answer = xasprintf("context %s was restarted meanwhile", c->c_id);
		break;
	case CTX_DELETED:
	default:
		/* one that never started says why, not that someone deleted it */
		if (!c->c_ready && c->c_error) {
			value = xasprintf("the context could not start: %s", c->c_error);
			name = "ContextLost", outcome = "context_lost";
		} else {
			value = xstrdup("the context was deleted");
			name = "ContextDeleted", outcome = "deleted";
		}
		status = 404;
		answer = xasprintf("context %s was deleted", c->c_id);
		break;
	}
	for (s = TAILQ_FIRST(&c->c_streams); s; s = next) {
		next = TAILQ_NEXT(s, st_ctx_link);
		/* its client left: nothing to tell it (it leaves a context that ends) */
		if (s->st_gone) {
			if (why == CTX_DELETED)
				stream_detach(s);
			continue;
		}
		/* ends it, which takes it off c's list (and frees a ctl one) */
		stream_fail(s, name, value, outcome);
	}
	while ((rq = TAILQ_FIRST(&c->c_waiters)))
		answer_done(rq, status, NULL, "%s", answer);
	free(value);
	free(answer);
}

/* Takes c out of the table and frees it, its proxy's link and its leases. */
static void
context_free(struct context *c)
{
	link_close(c->c_pl);
	TAILQ_REMOVE(&contexts, c, c_link);
	free(c->c_lang);
	free(c->c_kernel);
	free(c->c_cwd);
	free(c->c_error);
	egress_free(&c->c_egress);
	uid_release(c->c_iso.ci_uid, c->c_iso.ci_uid_lease);
	uid_release(c->c_iso.ci_net_uid, c->c_iso.ci_net_lease);
	free(c->c_iso.ci_workspace);
	free(c);
}

/* The end of context c: what it holds fails for the reason (context_fail), then it goes. */
void
context_end(struct context *c, enum context_why why, const char *detail)
{
	context_fail(c, why, detail);
	context_free(c);
}

/*
 * Context x takes warm context p's proxy (a restart from the pool): x's own
 * link closes, p (which holds nothing but its proxy) leaves the table.
 */
void
context_swap(struct context *x, struct context *p)
{
	link_close(x->c_pl);
	x->c_pl = p->c_pl;
	p->c_pl = NULL;
	x->c_pl->pl_ev_recv.ev_arg = x->c_pl->pl_ev_pidfd.ev_arg = x;
	x->c_ready = true;
	context_free(p);
}

/*
 * Deletion is answered once the proxy confirms; the context is freed when the
 * proxy is gone (SIGCHLD, or its link closing for an adopted one), so its last
 * messages still reach their streams.
 */
void
context_delete(struct context *c)
{
	c->c_deleting = true;
	log_info("context %s: deleted", c->c_id);
	events_emitf("{s:s, s:s}", "event", "context_deleted", "context", c->c_id);
}

/* --keep-contexts: leave every proxy running; they drop our streams. */
void
context_detach_all(void)
{
	struct context *c;

	while ((c = TAILQ_FIRST(&contexts))) {
		/* envd's proxy is not kept: it has no state file to be adopted by */
		if (c->c_envd && c->c_pl->pl_pid > 0) {
			link_signal(c->c_pl, SIGTERM);
			if (c->c_pl->pl_child)
				link_exited(c->c_pl, true);
		}
		/* kept: the next broker leases them again */
		if (c->c_iso.ci_uid_lease >= 0)
			close(c->c_iso.ci_uid_lease);
		if (c->c_iso.ci_net_lease >= 0)
			close(c->c_iso.ci_net_lease);
		c->c_iso.ci_uid_lease = c->c_iso.ci_net_lease = -1;
		context_end(c, CTX_DELETED, NULL);
	}
}

/* The envd context: hidden, found by its flag (a respawn or a free may change it). */
struct context *
context_envd(void)
{
	struct context *c;

	TAILQ_FOREACH(c, &contexts, c_link)
	if (c->c_envd && !c->c_deleting)
		return c;
	return NULL;
}

/*
 * What the modules that own no part of a context may know of it (the others
 * include contextdef.h).
 */
const char *
context_id(const struct context *c)
{
	return c->c_id;
}

const char *
context_lang(const struct context *c)
{
	return c->c_lang;
}

bool
context_is_default(const struct context *c)
{
	return c->c_default;
}

/* its kernel has been ready once (its creation was answered) */
bool
context_ready(const struct context *c)
{
	return c->c_ready;
}

/* why its kernel is dead or could not start, or NULL */
const char *
context_error(const struct context *c)
{
	return c->c_error;
}

/* its executions: the one running and those queued behind it */
int
context_queue(const struct context *c)
{
	return c->c_nstreams;
}

/* its proxy's pid; 0 when it has none */
pid_t
context_pid(const struct context *c)
{
	return c->c_pl->pl_pid;
}

/* its proxy's link (link.c's port: chanlink.c, spawn.c) */
struct proxy_link *
context_link(const struct context *c)
{
	return c->c_pl;
}

/* its part of its proxy's spec: what it is (spawn.c fills the rest) */
void
context_spec(const struct context *c, struct spec *sp)
{
	sp->sp_language = c->c_lang;
	sp->sp_kernel = c->c_kernel;
	sp->sp_cwd = c->c_cwd;
	sp->sp_default = c->c_default;
	sp->sp_pooled = c->c_pooled;
}

/* whether it is the envd context (its box runs envd's agent) */
bool
context_is_envd(const struct context *c)
{
	return c->c_envd;
}

/* its isolation (boxuid.c's, workspace.c's), to read */
const struct ctxiso *
context_iso(const struct context *c)
{
	return &c->c_iso;
}

/* its own egress rules (egress.c's), to read */
const struct egress_lists *
context_egress(const struct context *c)
{
	return &c->c_egress;
}
