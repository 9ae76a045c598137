/*
 * peer.c — who is at the other end of an accepted TCP connection, when that
 * end is on this machine: the kernel's socket table (NETLINK_SOCK_DIAG) names
 * the uid that made the client's socket (peer_uid). Kernels share the host's
 * network by default, so this is how the broker tells a context's code
 * calling its API from a client: whether that can work here, checked at
 * start (peer_check), and whether a connection is a context's
 * (peer_is_context, which accept.c refuses).
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker.h"

static bool checking; /* connections from contexts are refused (peer_check found it works) */

/* Whether x (an interface's address) is a's host, of the same family. */
static bool
same_host(const struct sockaddr *x, const struct sockaddr_storage *a)
{
	if (x->sa_family != a->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *p = (const void *)x, *q = (const void *)a;
		return p->sin_addr.s_addr == q->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *p = (const void *)x, *q = (const void *)a;
	return !memcmp(&p->sin6_addr, &q->sin6_addr, sizeof(p->sin6_addr));
}

/* Whether addr is one of this machine's: loopback, or an interface's. */
static bool
addr_is_local(const struct sockaddr_storage *a)
{
	struct ifaddrs *ifs, *i;
	bool local = false;

	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)a;
		if ((ntohl(in->sin_addr.s_addr) >> 24) == 127)
			return true;
	} else if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)a;
		if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
			return true;
	} else {
		return false;
	}
	if (getifaddrs(&ifs) < 0)
		return true; /* cannot tell: not taken on trust */
	for (i = ifs; i && !local; i = i->ifa_next)
		local = i->ifa_addr && same_host(i->ifa_addr, a);
	freeifaddrs(ifs);
	return local;
}

/* Copies a's address and port into the diag id's src (client side) or dst. */
static void
diag_end(const struct sockaddr_storage *a, __be16 *port, __be32 addr[4])
{
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)a;
		*port = in->sin_port;
		memcpy(addr, &in->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *in6 = (const void *)a;
		*port = in6->sin6_port;
		memcpy(addr, &in6->sin6_addr, 16);
	}
}

/*
 * The uid owning the client's end of fd (an accepted TCP connection):
 * PEER_UID with *uid and *ino (its socket's inode) set, PEER_REMOTE (not on this machine), or PEER_UNKNOWN
 * (on this machine, but its socket is gone or has no owner any more: a client
 * that closed before we looked, or one in TIME_WAIT).
 */
int
peer_uid(int fd, uid_t *uid, unsigned long long *ino)
{
	struct sockaddr_storage me, peer;
	socklen_t ml = sizeof(me), pl = sizeof(peer);
	struct {
		struct nlmsghdr nh;
		struct inet_diag_req_v2 r;
	} req = {0};
	union {
		struct nlmsghdr nh;
		char b[1024];
	} resp;
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	int nl, rc = PEER_UNKNOWN;
	ssize_t n;

	if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0 ||
	    getpeername(fd, (struct sockaddr *)&peer, &pl) < 0)
		return PEER_UNKNOWN;
	if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6)
		return PEER_REMOTE;
	req.nh.nlmsg_len = sizeof(req);
	req.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nh.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = peer.ss_family;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = ~0u;
	/* the client's socket: its own end is our peer, its far end is us */
	diag_end(&peer, &req.r.id.idiag_sport, req.r.id.idiag_src);
	diag_end(&me, &req.r.id.idiag_dport, req.r.id.idiag_dst);
	req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	if ((nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)) < 0)
		return addr_is_local(&peer) ? PEER_UNKNOWN : PEER_REMOTE;
	/* the kernel answers within sendto: the receive has nothing to wait for */
	bool answered =
	    sendto(nl, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) >= 0 &&
	    (n = recv(nl, &resp, sizeof(resp), MSG_DONTWAIT)) >= (ssize_t)sizeof(resp.nh) &&
	    NLMSG_OK(&resp.nh, (size_t)n) && resp.nh.nlmsg_type == SOCK_DIAG_BY_FAMILY &&
	    resp.nh.nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg));
	if (answered) {
		const struct inet_diag_msg *m = NLMSG_DATA(&resp.nh);
		/* a closed client's socket (orphaned, or in TIME_WAIT) names no owner */
		if (m->idiag_state != TCP_TIME_WAIT && m->idiag_inode) {
			*uid = m->idiag_uid;
			*ino = m->idiag_inode;
			rc = PEER_UID;
		}
	} else {
		/* not in our table (an error answers): another machine's, or a local
		 * one already gone */
		rc = addr_is_local(&peer) ? PEER_UNKNOWN : PEER_REMOTE;
	}
	close(nl);
	return rc;
}

/*
 * Whether the broker can tell a context's connections from its clients': it
 * looks up a connection to itself made here (peer_uid), which must name our
 * own uid. Without it (no sock_diag here) no connection is refused as a
 * context's, and the log says that contexts can reach the API.
 */
static bool
lookup_works(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), c = -1, s = -1;
	uid_t uid = (uid_t)-1;
	unsigned long long ino;
	bool ok = false;

	if (l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 1) == 0 &&
	    getsockname(l, (struct sockaddr *)&a, &al) == 0 &&
	    (c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
	    connect(c, (struct sockaddr *)&a, sizeof(a)) == 0 && (s = accept(l, NULL, NULL)) >= 0)
		ok = peer_uid(s, &uid, &ino) == PEER_UID && uid == geteuid();
	if (s >= 0)
		close(s);
	if (c >= 0)
		close(c);
	if (l >= 0)
		close(l);
	return ok;
}

/*
 * Whether the kernels' uids on the host are their own: root's boxes (the
 * range, or --kernel-user), or --kernel-user without the sandbox. Otherwise
 * they are the broker's uid and nothing tells their connections apart.
 */
static bool
kernels_have_own_uids(void)
{
	return boxuid_ranged() || cf->cf_kernel_uid;
}

/* At start: whether peer_is_context can work here; the log says if not. */
void
peer_check(void)
{
	checking = false;
	if (boxnons_on() && geteuid() != 0) {
		/* kernels are our uid: their connections are told by their boxes (peerbox.c) */
		if (!(checking = lookup_works()))
			log_warn("cannot look up the owners of local connections (NETLINK_SOCK_DIAG): "
				 "code in a context can reach this server's API over the network%s",
				 cf->cf_token ? " (the access token still guards it)"
						   : "; set --access-token");
		return;
	}
	if (!kernels_have_own_uids()) {
		if (!cf->cf_sandbox)
			return; /* the log already says what --no-sandbox gives away */
		log_warn("kernels run as the broker's uid on the host: code in a context can "
			 "reach this server's API over the network%s",
			 cf->cf_token ? " (the access token still guards it)"
					   : "; set --access-token, or --kernel-network none");
		return;
	}
	if (!(checking = lookup_works()))
		log_warn("cannot look up the owners of local connections (NETLINK_SOCK_DIAG): "
			 "code in a context can reach this server's API over the network%s",
			 cf->cf_token ? " (the access token still guards it)"
					   : "; set --access-token, or --kernel-network none");
}

/*
 * Whether an accepted HTTP connection comes from code in a context: kernels
 * share the host's network by default, and through the API one context could
 * run code in another, read its output or delete it. A connection from this
 * machine whose owner cannot be named (its client closed before we looked)
 * is not taken on trust either.
 */
bool
peer_is_context(int fd)
{
	unsigned long long ino = 0;
	unsigned a, b;
	uid_t uid;

	if (!checking)
		return false;
	switch (peer_uid(fd, &uid, &ino)) {
	case PEER_REMOTE: return false;
	case PEER_UNKNOWN: return true;
	}
	if (uid == geteuid()) /* a kernel of ours, where kernels keep our uid */
		return peerbox_socket_boxed(ino);
	if (cf->cf_kernel_uid && uid == cf->cf_kernel_uid)
		return true;
	boxuid_range(&a, &b);
	return boxuid_ranged() && uid >= a && uid <= b;
}
