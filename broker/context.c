/*
 * context.c — the context table: create, look up, list (the JSON view, with
 * /proc RSS), delete and free contexts. A context's proxy is link.c's and
 * supervise.c's; its waiting requests are waiter.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker.h"

const char *
kstate_name(enum kstate s)
{
	static const char *names[] = {"starting", "idle", "busy", "dead"};

	return (unsigned)s < 4 ? names[s] : "unknown";
}

/* Its proxy kept dying (or could not be linked again) and is not restarted. */
bool
context_proxyless(const struct context *c)
{
	return !c->c_pooled && c->c_pl->pl_pid <= 0 && c->c_pl->pl_state == KS_DEAD;
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
	TAILQ_FOREACH(c, &sv.sv_tb.tb_contexts, c_link)
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

	TAILQ_FOREACH(c, &sv.sv_tb.tb_contexts, c_link)
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

struct context *
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
	c->c_uid_lease = c->c_net_lease = -1;
	TAILQ_INIT(&c->c_streams);
	TAILQ_INIT(&c->c_waiters);
	return c;
}

void
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
		waiter_forget(rq);
		request_done(rq, 404, NULL, "context %s was deleted", c->c_id);
	}
	free(why);
	link_close(c->c_pl);
	TAILQ_REMOVE(&sv.sv_tb.tb_contexts, c, c_link);
	free(c->c_lang);
	free(c->c_kernel);
	free(c->c_cwd);
	free(c->c_error);
	uid_release(c->c_uid, c->c_uid_lease);
	uid_release(c->c_net_uid, c->c_net_lease);
	free(c->c_workspace);
	free(c);
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
	int n = 0, rc;

	TAILQ_FOREACH(c, &sv.sv_tb.tb_contexts, c_link)
		n += !c->c_pooled && !c->c_deleting;
	if (n >= sv.sv_cf.cf_max_contexts) {
		snprintf(err, errsz, "too many contexts (limit %d); delete one first",
			 sv.sv_cf.cf_max_contexts);
		return -EAGAIN;
	}
	if (!(ks = kcache_find(want))) {
		char *avail = kspec_languages();
		snprintf(err, errsz, "unknown language '%.64s'; available: %s", want, avail);
		free(avail);
		return -ENOENT;
	}
	if ((c = pool_use(ks->ks_name, cwd, is_default))) {
		*out = c;
		return 0;
	}
	c = context_new(NULL, ks->ks_lang, ks->ks_name, cwd, is_default);
	TAILQ_INSERT_TAIL(&sv.sv_tb.tb_contexts, c, c_link);
	if ((rc = box_isolate(c, err, errsz)) < 0) {
		context_free(c);
		return rc;
	}
	cwd = c->c_cwd;
	if (link_open(c, c->c_id) < 0 || supervise_spawn(c) < 0) {
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
	control_event(json_pack("{s:s, s:s}", "event", "context_deleted", "context", c->c_id));
}

/* --keep-contexts: leave every proxy running; they drop our streams. */
void
context_detach_all(void)
{
	struct context *c;

	while ((c = TAILQ_FIRST(&sv.sv_tb.tb_contexts))) {
		/* kept: the next broker leases them again */
		if (c->c_uid_lease >= 0)
			close(c->c_uid_lease);
		if (c->c_net_lease >= 0)
			close(c->c_net_lease);
		c->c_uid_lease = c->c_net_lease = -1;
		context_free(c);
	}
}
