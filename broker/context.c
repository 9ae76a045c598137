/*
 * context.c — the context table: a new entry, look up, list (the JSON view,
 * with /proc RSS), delete and free contexts. Where a new context's proxy
 * comes from is pool.c's (pool_create); its proxy is link.c's and
 * supervise.c's; its waiting requests are waiter.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker.h"

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
	json_t *net = egress_context_json(c);
	if (net)
		json_object_set_new(j, "network", net);
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
		answer_done(rq, 404, NULL, "context %s was deleted", c->c_id);
	}
	free(why);
	link_close(c->c_pl);
	TAILQ_REMOVE(&sv.sv_tb.tb_contexts, c, c_link);
	free(c->c_lang);
	free(c->c_kernel);
	free(c->c_cwd);
	free(c->c_error);
	egress_free(&c->c_egress);
	uid_release(c->c_uid, c->c_uid_lease);
	uid_release(c->c_net_uid, c->c_net_lease);
	free(c->c_workspace);
	free(c);
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
	events_emit(json_pack("{s:s, s:s}", "event", "context_deleted", "context", c->c_id));
}

/* --keep-contexts: leave every proxy running; they drop our streams. */
void
context_detach_all(void)
{
	struct context *c;

	while ((c = TAILQ_FIRST(&sv.sv_tb.tb_contexts))) {
		/* envd's proxy is not kept: it has no state file to be adopted by */
		if (c->c_envd && c->c_pl->pl_pid > 0) {
			kill(c->c_pl->pl_pid, SIGTERM);
			if (c->c_pl->pl_child)
				waitpid(c->c_pl->pl_pid, NULL, 0);
		}
		/* kept: the next broker leases them again */
		if (c->c_uid_lease >= 0)
			close(c->c_uid_lease);
		if (c->c_net_lease >= 0)
			close(c->c_net_lease);
		c->c_uid_lease = c->c_net_lease = -1;
		context_free(c);
	}
}

/* The envd context: hidden, found by its flag (a respawn or a free may change it). */
struct context *
context_envd(void)
{
	struct context *c;

	TAILQ_FOREACH(c, &sv.sv_tb.tb_contexts, c_link)
	if (c->c_envd && !c->c_deleting)
		return c;
	return NULL;
}
