/*
 * supervise.c — the proxies' lives: respawn one when it dies (failing what it
 * held), stop them all on shutdown, and adopt the live proxies a previous
 * broker left in the run directory. Processes are reached through link.c's
 * port (link_spawn, link_signal, link_exited).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "contextdef.h"
#include "linkdef.h"

#define RESPAWN_WINDOW_MS 60000
#define RESPAWN_MAX 5

/* The proxy is gone: fail what it held and start a fresh one, same id. */
static void
supervise_lost(struct context *c, const char *why)
{
	uint64_t now = now_ms();

	log_warn("context %s: proxy %d %s", c->c_id, (int)c->c_pl->pl_pid, why);
	if (!c->c_ready && c->c_pooled) /* no respawn storm of warm kernels */
		pool_back_off(now);
	if (!c->c_ready) {
		free(c->c_error);
		c->c_error = xasprintf("its proxy %s before the kernel was ready", why);
		waiter_answer_ready(c);
		context_end(c, CTX_DELETED, NULL); /* says it could not start */
		return;
	}
	context_fail(c, CTX_LOST, why);
	metrics_count(M_PROXY_RESTART, 1);
	events_emitf("{s:s, s:s, s:s}", "event", "supervise_lost", "context", c->c_id,
	             "why", why);
	/*
	 * The new proxy gets a new link. The old one may still hold the dead
	 * proxy's connection (nng sees its end on a thread of its own, maybe
	 * after our SIGCHLD): a message sent on it now would go down that
	 * connection and be lost, and the execution waiting for its answer would
	 * hang.
	 */
	struct proxy_link *old = c->c_pl;
	if (link_open(c, old->pl_slot) < 0) {
		link_close(c->c_pl);
		c->c_pl = old;
		c->c_pl->pl_pid = 0;
		c->c_pl->pl_state = KS_DEAD;
		free(c->c_error);
		c->c_error = xstrdup("the context's proxy could not be connected again");
		log_err("context %s: %s", c->c_id, c->c_error);
		return;
	}
	link_close(old);
	if (now > c->c_respawn_window + RESPAWN_WINDOW_MS) {
		c->c_respawn_window = now;
		c->c_respawns = 0;
	}
	if (++c->c_respawns > RESPAWN_MAX || link_spawn(c) < 0) {
		c->c_pl->pl_state = KS_DEAD;
		free(c->c_error);
		c->c_error = xstrdup("the context's proxy keeps dying; not restarted");
		log_err("context %s: %s", c->c_id, c->c_error);
		return;
	}
	log_info("context %s: proxy respawned, pid %d", c->c_id, (int)c->c_pl->pl_pid);
}

void
supervise_reaped(pid_t pid, int status)
{
	struct context *c;
	char why[128];

	CONTEXT_FOREACH(c)
		if (c->c_pl->pl_child && c->c_pl->pl_pid == pid)
			break;
	if (!c)
		return;
	if (c->c_deleting || lifecycle_quitting()) {
		c->c_pl->pl_pid = 0;
		context_end(c, CTX_DELETED, NULL);
		return;
	}
	if (WIFSIGNALED(status))
		snprintf(why, sizeof(why), "was killed by signal %d", WTERMSIG(status));
	else
		snprintf(why, sizeof(why), "exited with status %d", WEXITSTATUS(status));
	supervise_lost(c, why);
}

/* An adopted proxy (not our child) exited: its pidfd became readable. */
static void
supervise_pidfd(void *arg, uint32_t events)
{
	struct context *c = arg;

	(void)events;
	if (c->c_deleting) {
		context_end(c, CTX_DELETED, NULL);
		return;
	}
	supervise_lost(c, "exited");
}

void
supervise_shutdown_all(void)
{
	struct context *c;
	uint64_t until = now_ms() + 3000;
	int left;

	CONTEXT_FOREACH(c)
		link_signal(c->c_pl, SIGTERM);
	do {
		left = 0;
		CONTEXT_FOREACH(c)
			left += !link_exited(c->c_pl, false);
		if (left)
			usleep(10000);
	} while (left && now_ms() < until);
	while ((c = context_next(NULL))) {
		if (c->c_pl->pl_pid > 0) {
			log_warn("context %s: proxy %d did not stop; killed", c->c_id,
				 (int)c->c_pl->pl_pid);
			link_signal(c->c_pl, SIGKILL);
			if (c->c_pl->pl_child)
				link_exited(c->c_pl, true);
		}
		context_end(c, CTX_DELETED, NULL);
	}
}

/*
 * Adopts the proxies a previous broker left running: each context dir with a
 * state file whose proxy is alive is re-attached under the same id; anything
 * else there is stale and removed.
 */
void
supervise_adopt_all(void)
{
	char *dir = xasprintf("%s/ctx", cf->cf_run_dir);
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char *cdir = xasprintf("%s/%s", dir, de->d_name);
		char *state = xasprintf("%s/state.json", cdir);
		json_t *j = json_load_file(state, 0, NULL);
		const char *id = json_string_value(json_object_get(j, "id"));
		const char *slot = json_string_value(json_object_get(j, "slot"));
		bool pooled = json_is_null(json_object_get(j, "id"));
		const char *lang = json_string_value(json_object_get(j, "language"));
		const char *kernel = json_string_value(json_object_get(j, "kernel"));
		const char *cwd = json_string_value(json_object_get(j, "cwd"));
		json_int_t pid = json_integer_value(json_object_get(j, "pid"));
		bool is_default = json_is_true(json_object_get(j, "default"));
		char exe[PATH_MAX] = "", *link = xasprintf("/proc/%lld/exe", (long long)pid);
		ssize_t el = readlink(link, exe, sizeof(exe) - 1);

		if (el > 0)
			exe[el] = '\0';
		free(link);
		const char *base = strrchr(exe, '/');
		/* the proxy lives in ctx/<slot>; a pooled one serves no context yet */
		if (pooled)
			id = slot;
		if (id && slot && lang && kernel && cwd && pid > 1 && !strcmp(slot, de->d_name) &&
		    uuid_valid(id) && base && !strncmp(base + 1, "sandcell-proxy", 14) &&
		    !context_find(id)) {
			struct context *c =
			    context_new(id, lang, kernel, cwd, is_default,
			                pooled ? CONTEXT_POOLED : CONTEXT_CLIENT);
			egress_adopt(&c->c_egress, json_object_get(j, "network"));
			boxuid_adopt(&c->c_iso, json_object_get(j, "sandbox"), id);
			if (link_open(c, slot) < 0) {
				context_end(c, CTX_DELETED, NULL);
			} else {
				c->c_pl->pl_pid = pid;
				c->c_pl->pl_child = false;
				/* not our child: a pidfd tells us when it exits */
				c->c_pl->pl_pidfd = syscall(SYS_pidfd_open, (pid_t)pid, 0);
				if (c->c_pl->pl_pidfd >= 0) {
					c->c_pl->pl_ev_pidfd =
					    (struct evsrc){supervise_pidfd, c};
					server_watch(c->c_pl->pl_pidfd, EPOLLIN,
						     &c->c_pl->pl_ev_pidfd);
				}
				c->c_ready = true; /* it was ready for the previous broker */
				n += !pooled;
			}
		} else {
			log_info("run dir: removing stale context dir %s", cdir);
			rm_rf(cdir);
			char *kdir = xasprintf("%s.kernels/%s", cf->cf_run_dir, de->d_name);
			rm_rf(kdir);
			free(kdir);
		}
		json_decref(j);
		free(state);
		free(cdir);
	}
	if (d)
		closedir(d);
	free(dir);
	if (n)
		log_info("re-attached %d live context%s from %s", n, n == 1 ? "" : "s",
			 cf->cf_run_dir);
}
