/*
 * peer.c — who is at the other end of an accepted TCP connection, when that
 * end is on this machine: the kernel's socket table (NETLINK_SOCK_DIAG) names
 * the uid that made the client's socket. Kernels share the host's network by
 * default, so this is how the broker tells a context's code calling its API
 * from a client (box.c decides what to do with it).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker.h"

/* Whether addr is one of this machine's: loopback, or one it may bind. */
static bool
addr_is_local(const struct sockaddr_storage *a)
{
	int fd;
	bool local;

	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)a;
		if ((ntohl(in->sin_addr.s_addr) >> 24) == 127)
			return true;
	} else if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)a;
		if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
		    (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127))
			return true;
	} else {
		return false;
	}
	/* any other address of ours: a socket can be bound to it (port 0) */
	struct sockaddr_storage probe = *a;
	if (probe.ss_family == AF_INET)
		((struct sockaddr_in *)&probe)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&probe)->sin6_port = 0;
	if ((fd = socket(a->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return false;
	local = bind(fd, (struct sockaddr *)&probe,
		     a->ss_family == AF_INET ? sizeof(struct sockaddr_in)
					     : sizeof(struct sockaddr_in6)) == 0;
	close(fd);
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
 * PEER_UID with *uid set, PEER_REMOTE (not on this machine), or PEER_UNKNOWN
 * (on this machine, but its socket is gone or has no owner any more: a client
 * that closed before we looked, or one in TIME_WAIT).
 */
int
peer_uid(int fd, uid_t *uid)
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
	if (sendto(nl, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0 ||
	    (n = recv(nl, &resp, sizeof(resp), 0)) < (ssize_t)sizeof(struct nlmsghdr) ||
	    !NLMSG_OK(&resp.nh, (size_t)n)) {
		rc = addr_is_local(&peer) ? PEER_UNKNOWN : PEER_REMOTE;
	} else if (resp.nh.nlmsg_type == SOCK_DIAG_BY_FAMILY &&
		   resp.nh.nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
		const struct inet_diag_msg *m = NLMSG_DATA(&resp.nh);
		/* a TIME_WAIT socket (a closed client) has no owner to name */
		if (m->idiag_state != TCP_TIME_WAIT && m->idiag_inode) {
			*uid = m->idiag_uid;
			rc = PEER_UID;
		}
	} else {
		/* not in our table: another machine's, or a local one already gone */
		rc = addr_is_local(&peer) ? PEER_UNKNOWN : PEER_REMOTE;
	}
	close(nl);
	return rc;
}
