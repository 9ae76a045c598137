/*
 * boxuid.c — which uids of --kernel-uid-range the boxes run as on the host:
 * the kernels' and the network's shared uids, held for the broker's life, or
 * under --isolation context each context's own two (boxuid_lease), each
 * leased through uidlease.c so that no other broker on the machine gives it
 * out; and the uid a context's kernel runs as (boxuid_kernel).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "broker.h"

/* --kernel-uid-range, A-B. */
void
boxuid_range(unsigned *a, unsigned *b)
{
	*a = *b = 0;
	sscanf(cf->cf_uid_range, "%u-%u", a, b);
}

/* Whether boxes run kernels as uids of the range on the host (root's boxes). */
bool
boxuid_ranged(void)
{
	return cf->cf_sandbox && geteuid() == 0;
}

/*
 * The kernels' uid in shared isolation, as root: the one this broker held
 * before a restart (its kept contexts run as it) if it can lease it again,
 * else the first uid of --kernel-uid-range it can lease (uidlease.c); kept
 * for the broker's life.
 */
static unsigned shared_uid, shared_net_uid;
static int shared_lease = -1, shared_net_lease = -1; /* held for the broker's life */

/* Whether uid is one of ours already (a context's, or the shared ones). */
static bool
ours(unsigned uid)
{
	struct context *o;

	if (uid == shared_uid || uid == shared_net_uid)
		return true;
	CONTEXT_FOREACH(o)
		if (context_iso(o)->ci_uid == uid || context_iso(o)->ci_net_uid == uid)
			return true;
	return false;
}

/*
 * A uid of the range for role ("" a kernel's, "net" a network's): the one
 * that role had before a restart (our kept contexts use it), else the first
 * no context of ours uses and that we can lease; its lease in *fd (-1 when
 * leases cannot be kept here). 0 when none is free.
 */
static unsigned
lease_one(const char *role, bool again, int *fd)
{
	unsigned a, b, u;

	boxuid_range(&a, &b);
	*fd = -1;
	if (again && (u = uid_lease_ours(a, b, role, fd)))
		return u;
	for (u = a; u <= b; u++)
		if (!ours(u) && (*fd = uid_lease(u, role)) != -EBUSY)
			return u;
	return 0;
}

/*
 * The uid kernels run as with shared isolation: the one our kept contexts run
 * as, else the first of --kernel-uid-range this broker can lease
 * (uidlease.c); kept for the broker's life.
 */
unsigned
boxuid_shared(void)
{
	unsigned a, b;

	if (shared_uid)
		return shared_uid;
	boxuid_range(&a, &b);
	if (!boxuid_ranged())
		return a;
	if (!(shared_uid = lease_one("", true, &shared_lease)))
		fatal("no uid of --kernel-uid-range %s is free: other brokers or processes "
		      "hold them all",
		      cf->cf_uid_range);
	log_info("sandbox: kernels run as uid %u%s", shared_uid,
		 shared_lease >= 0 ? ", leased for this broker's life" : "");
	return shared_uid;
}

/*
 * The uid that owns the boxes' network namespaces and runs pasta (boxnet.c):
 * of the range, so that the broker takes pasta's connections for a
 * context's, and never a kernel's, so that no kernel has a capability over
 * the network it sits in. Shared: one for the broker's life.
 */
unsigned
boxuid_net(void)
{
	if (shared_net_uid || !boxuid_ranged())
		return shared_net_uid;
	boxuid_shared(); /* the kernels' first: after a restart, theirs is taken again */
	if (!(shared_net_uid = lease_one("net", true, &shared_net_lease)))
		fatal("no uid of --kernel-uid-range %s is free for the boxes' network",
		      cf->cf_uid_range);
	return shared_net_uid;
}

/*
 * The uid a context's kernel runs as on the host, given its isolation (NULL:
 * a shared context's), or (uid_t)-1 when it is ours: no sandbox, or a
 * rootless one, whose user namespace maps the kernel to our uid.
 */
uid_t
boxuid_kernel(const struct ctxiso *iso)
{
	if (cf->cf_kernel_user)
		return cf->cf_kernel_uid;
	if (!boxuid_ranged())
		return (uid_t)-1;
	return iso && iso->ci_uid ? iso->ci_uid : boxuid_shared();
}

/* Whether each context gets uids of its own (boxuid_lease) and a workspace. */
bool
boxuid_isolates(void)
{
	return cf->cf_sandbox && cf->cf_isolated && !cf->cf_kernel_user;
}

/*
 * --isolation context: two uids of the range no live context holds, its
 * kernels' and its network's, leased for its life (context_end releases them).
 */
int
boxuid_lease(struct ctxiso *iso, char *err, size_t errsz)
{
	if (!(iso->ci_uid = lease_one("", false, &iso->ci_uid_lease)) ||
	    (boxuid_ranged() &&
	     !(iso->ci_net_uid = lease_one("net", false, &iso->ci_net_lease)))) {
		snprintf(err, errsz, "no free uid in --kernel-uid-range %s", cf->cf_uid_range);
		return -EAGAIN;
	}
	return 0;
}

/*
 * The isolation an adopted context (a previous broker's, id) ran with, from
 * its proxy's state file's "sandbox" (box): under --isolation context its
 * uids stay taken, leased again, and its workspace stays its own.
 */
void
boxuid_adopt(struct ctxiso *iso, json_t *box, const char *id)
{
	const char *how = json_string_value(json_object_get(box, "isolation"));
	const char *ws = json_string_value(json_object_get(box, "workspace"));

	if (!how || strcmp(how, "context"))
		return;
	iso->ci_uid = json_integer_value(json_object_get(box, "uid"));
	iso->ci_net_uid = json_integer_value(json_object_get(box, "net_uid"));
	iso->ci_workspace = ws ? xstrdup(ws) : NULL;
	if ((iso->ci_uid && (iso->ci_uid_lease = uid_lease(iso->ci_uid, "")) == -EBUSY) ||
	    (iso->ci_net_uid &&
	     (iso->ci_net_lease = uid_lease(iso->ci_net_uid, "net")) == -EBUSY))
		log_warn("context %s: its uids %u and %u are leased by another broker", id,
			 iso->ci_uid, iso->ci_net_uid);
}

/* A stop that ended every context: the shared uids are no longer ours. */
void
boxuid_release(void)
{
	uid_release(shared_uid, shared_lease);
	uid_release(shared_net_uid, shared_net_lease);
	shared_lease = shared_net_lease = -1;
}
