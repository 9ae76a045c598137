/*
 * pool.c — the warm pool (--pool): proxies whose kernels are started and have
 * run nothing, handed to a new context or to a restart at once; and so where
 * a new context's proxy comes from (pool_create: warm, or spawned).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "contextdef.h"

/* When a warm kernel was last handed out (ms): pool_yield() waits a little after. */
static uint64_t claimed;
/* No refill before backoff (a warm kernel failed), of cf_pool[i] before retry_at[i] */
static uint64_t backoff, retry_at[MAX_POOL];
/* Refill once this round's responses are out (main.c's loop asks pool_kicked). */
static bool kick;

/* Whether the directory at dirfd/name holds anything. */
static bool
pool_nonempty(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *de;
	bool any = false;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	while (!any && (de = readdir(d)))
		any = strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return any;
}

/*
 * When the tenant's Python packages last changed (the mtime of a non-empty
 * site-packages of the workspace's venv, proxy/packages.c), in now_ms()'s
 * clock; 0 if never. A warm kernel forked from the template before then may
 * hold the system's copy of a module the tenant has installed since (a fork
 * after it starts cold, sandcell_template.py): it is not handed out. Only
 * the mtimes of the tenant's directories are read.
 */
static uint64_t
pool_packages_changed(void)
{
	char site[PATH_MAX];
	struct timespec newest = {0}, rt;
	struct boxpath_view v;
	struct dirent *de;
	struct stat st;
	int fd = -1, dfd;
	DIR *d = NULL;

	/* looked at in the box's view: a tenant's link leads nowhere out of it */
	if (!cf->cf_sandbox || boxpath_view_open(&v, workspace_of(NULL)) < 0)
		return 0;
	if (boxpath_open(&v, BOX_HOME PACKAGES_VENV "/lib", 0, &fd, NULL, 0) < 0 ||
	    fd < 0 || (dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		goto out;
	if (!(d = fdopendir(dfd))) {
		close(dfd);
		goto out;
	}
	while ((de = readdir(d))) {
		int sfd;
		if (strncmp(de->d_name, "python", 6) ||
		    snprintf(site, sizeof(site),
		             BOX_HOME PACKAGES_VENV "/lib/%s/site-packages",
		             de->d_name) >= (int)sizeof(site) ||
		    boxpath_open(&v, site, BOXPATH_NOFOLLOW, &sfd, NULL, 0) < 0 ||
		    sfd < 0)
			continue;
		if (fstat(sfd, &st) == 0 && S_ISDIR(st.st_mode) &&
		    pool_nonempty(sfd, ".") &&
		    (st.st_mtim.tv_sec > newest.tv_sec ||
		     (st.st_mtim.tv_sec == newest.tv_sec &&
		      st.st_mtim.tv_nsec > newest.tv_nsec)))
			newest = st.st_mtim;
		close(sfd);
	}
out:
	if (d)
		closedir(d);
	if (fd >= 0)
		close(fd);
	boxpath_view_close(&v);
	if (!newest.tv_sec)
		return 0;
	clock_gettime(CLOCK_REALTIME, &rt);
	int64_t ago = (int64_t)(rt.tv_sec - newest.tv_sec) * 1000 +
	              (rt.tv_nsec - newest.tv_nsec) / 1000000;
	uint64_t now = now_ms();
	return ago <= 0 ? now : (uint64_t)ago < now ? now - (uint64_t)ago : 1;
}

/*
 * Whether a kernel of this kernelspec for a context in cwd (of context x's
 * workspace; NULL: a new one's) reads a configuration there as it starts
 * (Deno's deno.json, package.json) and one is there: a warm one, started
 * elsewhere or before the file was written, has not read it.
 */
static bool
pool_cwd_config(const char *kernel, const struct context *x, const char *cwd)
{
	const struct kspec *ks = kcache_find(kernel);
	bool install;

	return ks && ks->ks_config_in_cwd &&
	       kspec_cwd_config(cf->cf_sandbox ? workspace_of(x) : NULL, cwd, &install);
}

/*
 * A ready warm proxy of this kernelspec for a context in cwd (x's, or a new
 * one's: NULL), or NULL. One warmed before the tenant's packages changed is
 * deleted instead (the pool warms another); none is taken for a cwd whose
 * configuration the kernel reads as it starts (pool_cwd_config).
 */
static struct context *
pool_take(const char *kernel, const struct context *x, const char *cwd)
{
	uint64_t changed = 0;
	bool looked = false;
	struct context *c;

	if (x && egress_own(&x->c_egress)) /* its rules are not a warm box's */
		return NULL;
	CONTEXT_FOREACH(c) {
		if (!c->c_pooled || !c->c_ready || c->c_deleting ||
		    context_kstate(c) != KS_IDLE || strcmp(c->c_kernel, kernel))
			continue;
		if (!looked) {
			if (pool_cwd_config(kernel, x, cwd)) {
				log_info("pool: %s holds a configuration a %s kernel reads as it "
					 "starts: not a warm one", cwd, kernel);
				return NULL;
			}
			changed = pool_packages_changed();
			/* a warm box linked to an uplink that has ended has no way out */
			if (uplink_since() > changed)
				changed = uplink_since();
			looked = true;
		}
		if (c->c_created >= changed)
			return c;
		log_info("pool: a warm %s kernel is older than the tenant's packages or the "
			 "boxes' uplink: stopped",
			 kernel);
		context_delete(c);
	}
	return NULL;
}

/*
 * Tells a proxy which context it now is: id, cwd (applied in its kernel),
 * default; and the pool when it was last drawn on (pool_yield).
 */
static void
pool_claim(struct context *c)
{
	struct msg m;

	claimed = now_ms();

	msg_init(&m, MSG_CLAIM);
	msg_set_u64(&m, F_REQ, waiter_next_req());
	msg_set_str(&m, F_ID, c->c_id, strlen(c->c_id));
	msg_set_str(&m, F_CWD, c->c_cwd, strlen(c->c_cwd));
	msg_set_u64(&m, F_FLAGS, c->c_default ? FLAG_DEFAULT : 0);
	link_send(c, &m);
	msg_free(&m);
}


/*
 * A warm kernel of this kernelspec becomes a new context at once, listed as
 * the newest; NULL when the pool has none.
 */
struct context *
pool_use(const char *kernel, const char *cwd, bool is_default)
{
	struct context *c = pool_take(kernel, NULL, cwd);

	if (!c)
		return NULL;
	context_claim(c, cwd, is_default);
	pool_claim(c);
	log_info("context %s: created from the warm pool (%s, cwd %s%s)", c->c_id, c->c_lang,
		 cwd, is_default ? ", default" : "");
	events_emitf("{s:s, s:s, s:s, s:s, s:b}", "event", "context_created", "context",
	             c->c_id, "language", c->c_lang, "cwd", cwd, "pooled", 1);
	kick = true;
	return c;
}

/*
 * Whether the pool should wait: a context a client asked for is starting (not
 * from the pool), less than POOL_YIELD_MS ago. A kernel warmed now would take
 * CPU from the creations clients wait for (a burst of them is CPU-bound); it
 * is warmed as soon as they are ready (relay.c kicks the pool then). Nor for
 * POOL_CLAIM_GRACE_MS after a warm kernel was handed out: a burst's first
 * requests take the pool, and its refill, started before the rest of the
 * burst is read, would take a start slot from them (startgate.c).
 */
static bool
pool_yield(uint64_t now)
{
	struct context *c;

	if (now < claimed + POOL_CLAIM_GRACE_MS)
		return true;

	CONTEXT_FOREACH(c)
		if (!c->c_pooled && !c->c_ready && !c->c_deleting &&
		    now < c->c_created + POOL_YIELD_MS)
			return true;
	return false;
}

/* The pool is to be refilled soon: a kernel was claimed, or one got ready. */
void
pool_kick(void)
{
	kick = true;
}

/* A warm kernel failed to start: no refill for a while (no respawn storm). */
void
pool_back_off(uint64_t now)
{
	backoff = now + POOL_BACKOFF_MS;
}

/* Whether the pool was kicked since the last call (which clears it). */
bool
pool_kicked(void)
{
	bool was = kick;

	kick = false;
	return was;
}

/*
 * Keeps the warm pool full: per --pool entry, that many proxies whose kernels
 * are started and have run nothing. A kernelspec whose pooled proxies keep
 * failing is left alone for a while.
 */
void
pool_fill(void)
{
	uint64_t now = now_ms();

	if (now < backoff || pool_yield(now))
		return;
	for (size_t i = 0; i < cf->cf_npool; i++) {
		const struct pool_spec *ps = &cf->cf_pool[i];
		struct context_counts cc;
		const struct kspec *ks;
		struct context *c;

		if (now < retry_at[i] || !(ks = kcache_find(ps->ps_want)) ||
		    template_starting(ks->ks_name))
			continue;
		context_count(&cc, ks->ks_name);
		for (int have = cc.cc_pooled; have < ps->ps_size; have++) {
			c = context_new(NULL, ks->ks_lang, ks->ks_name, workspace_default_cwd(), false,
			                CONTEXT_POOLED);
			if (link_open(c, c->c_id) < 0 || link_spawn(c) < 0) {
				context_end(c, CTX_DELETED, NULL);
				retry_at[i] = now + 10000;
				break;
			}
			log_debug("pool: warming a %s kernel (proxy %d)", ks->ks_name,
				  (int)context_pid(c));
		}
	}
}

/*
 * Restart from the pool: the context keeps its id, cwd and default-ness and
 * takes a warm proxy; its old proxy and kernel are stopped. Returns false when
 * the pool has none for its kernelspec.
 */
bool
pool_restart(struct context *x)
{
	struct context *p = pool_take(x->c_kernel, x, x->c_cwd);

	if (!p)
		return false;
	context_fail(x, CTX_RESTARTED, NULL);
	link_signal(x->c_pl, SIGTERM); /* stops its kernel, removes its dir */
	context_swap(x, p);
	pool_claim(x);
	metrics_count(M_KERNEL_RESTART, 1);
	log_info("context %s: restarted with a warm kernel (proxy %d)", x->c_id,
		 (int)context_pid(x));
	events_emitf("{s:s, s:s, s:s}", "event", "kernel_restarted", "context", x->c_id,
	             "why", "restart requested (warm pool)");
	kick = true;
	return true;
}

/*
 * A new context: a warm proxy of the pool when one fits, else one spawned.
 * want is a kernelspec name or a language (normalised); the context records
 * the kernelspec it resolved to and that kernelspec's language, so "python3"
 * and "python" are the same default context.
 */
int
pool_create(const char *want, const char *cwd, bool is_default, struct egress_lists *net,
	    struct context **out, char *err, size_t errsz)
{
	struct context_counts cc;
	struct context *c;
	const struct kspec *ks;
	int rc;

	context_count(&cc, NULL);
	if (cc.cc_listed >= cf->cf_max_contexts) {
		snprintf(err, errsz, "too many contexts (limit %d); delete one first",
			 cf->cf_max_contexts);
		return -EAGAIN;
	}
	if (!(ks = kcache_find(want))) {
		char *avail = kspec_languages();
		snprintf(err, errsz, "unknown language '%.64s'; available: %s", want, avail);
		free(avail);
		return -ENOENT;
	}
	/* a warm proxy's box has the server's rules alone: none for a context with its own */
	if (!egress_own(net) && (c = pool_use(ks->ks_name, cwd, is_default))) {
		*out = c;
		return 0;
	}
	c = context_new(NULL, ks->ks_lang, ks->ks_name, cwd, is_default, CONTEXT_CLIENT);
	if (net) { /* the context's now */
		c->c_egress = *net;
		memset(net, 0, sizeof(*net));
	}
	/* --isolation context: its own uids, then its own workspace */
	if (boxuid_isolates() &&
	    ((rc = boxuid_lease(&c->c_iso, err, errsz)) < 0 ||
	     (rc = workspace_own(&c->c_iso, c->c_id, c->c_cwd, err, errsz)) < 0)) {
		context_end(c, CTX_DELETED, NULL);
		return rc;
	}
	cwd = c->c_cwd;
	if (link_open(c, c->c_id) < 0 || link_spawn(c) < 0) {
		snprintf(err, errsz, "could not start a proxy for the context");
		context_end(c, CTX_DELETED, NULL);
		return -EIO;
	}
	log_info("context %s: created (%s, kernel %s, cwd %s%s), proxy pid %d", c->c_id,
		 c->c_lang, c->c_kernel, cwd, is_default ? ", default" : "", (int)context_pid(c));
	events_emitf("{s:s, s:s, s:s, s:s}", "event", "context_created", "context",
	             c->c_id, "language", c->c_lang, "cwd", cwd);
	*out = c;
	return 0;
}
