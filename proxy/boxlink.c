/*
 * boxlink.c — a box's link to the broker's uplink (uplink.c): a veth pair,
 * a kernel object of a few KB, between the box's network namespace and the
 * uplink's, where one pasta serves every box of the broker. The proxy makes
 * it while it still holds CAP_NET_ADMIN over both namespaces (before it has
 * a thread), through rtnetlink.
 *
 * Addresses: the uplink's end of every link is BOXLINK_GW (the same address
 * on each, a next hop only); the box's end a /32 of BOXLINK_NET, the uplink's
 * route to it (dev its end, NLM_F_EXCL) is what reserves it: a route already
 * there is a live box's, and the next address is tried. The box's default
 * route goes through BOXLINK_GW. Nothing but the uplink's rules (uplink.c)
 * decides what a box reaches beyond its own: they forward a box's packets
 * to the way out alone, never to another box or to the uplink itself.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <linux/if_link.h>
#include <linux/ip.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proxy.h"

#define BOXLINK_GW 0xa9fe0001u    /* 169.254.0.1: the uplink's end of every link */
#define BOXLINK_FIRST 0xa9fe0100u /* 169.254.1.0 .. 169.254.126.255: the boxes' ends */
#define BOXLINK_SLOTS (126 * 256)
/*
 * pasta's (its tap's default, 65520): a segment pasta hands the uplink is
 * forwarded to a box whole. At Ethernet's 1500 it could not be (pasta sends
 * up to its MTU and takes no ICMP "fragmentation needed"): a TLS handshake's
 * answer never came.
 */
#define BOXLINK_MTU 65520

struct nlreq {
	struct nlmsghdr n;
	char buf[1024];
};

/* Appends attribute type with len bytes of data to m; the attribute, for nesting. */
static struct rtattr *
put(struct nlreq *r, unsigned short type, const void *data, size_t len)
{
	struct nlmsghdr *m = &r->n;
	struct rtattr *a =
	    (struct rtattr *)(r->buf + NLMSG_ALIGN(m->nlmsg_len) - sizeof(r->n));

	a->rta_type = type;
	a->rta_len = RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(a), data, len);
	m->nlmsg_len = NLMSG_ALIGN(m->nlmsg_len) + RTA_ALIGN(a->rta_len);
	return a;
}

/* Closes a nest opened at a. */
static void
end(struct nlreq *r, struct rtattr *a)
{
	a->rta_len = (unsigned short)(r->buf + r->n.nlmsg_len - sizeof(r->n) - (char *)a);
}

/* Sends m on s and reads its acknowledgement: 0, or the kernel's -errno. */
static int
talk(int s, struct nlmsghdr *m)
{
	char buf[4096];
	ssize_t n;

	m->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
	if (send(s, m, m->nlmsg_len, 0) < 0)
		return -errno;
	if ((n = recv(s, buf, sizeof(buf), 0)) < 0)
		return -errno;
	for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, (size_t)n);
	     h = NLMSG_NEXT(h, n))
		if (h->nlmsg_type == NLMSG_ERROR)
			return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
	return -EPROTO;
}

static void
start(struct nlreq *r, unsigned short type, unsigned short flags, size_t hdr)
{
	memset(r, 0, sizeof(*r));
	r->n.nlmsg_type = type;
	r->n.nlmsg_flags = flags;
	r->n.nlmsg_len = NLMSG_LENGTH(hdr);
}

static int
rtnl(void)
{
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);

	return s < 0 ? -errno : s;
}

/* Interface idx up. */
static int
link_up(int s, int idx)
{
	struct nlreq r;
	struct ifinfomsg *i = NLMSG_DATA(&r.n);

	start(&r, RTM_NEWLINK, 0, sizeof(*i));
	i->ifi_family = AF_UNSPEC;
	i->ifi_index = idx;
	i->ifi_flags = i->ifi_change = IFF_UP;
	return talk(s, &r.n);
}

/* Interface idx (a veth: both its ends) gone. */
static int
link_del(int s, int idx)
{
	struct nlreq r;
	struct ifinfomsg *i = NLMSG_DATA(&r.n);

	start(&r, RTM_DELLINK, 0, sizeof(*i));
	i->ifi_family = AF_UNSPEC;
	i->ifi_index = idx;
	return talk(s, &r.n);
}

/* IPv4 forwarding on idx (its devconf, as net.ipv4.conf.IF.forwarding without /proc/sys).
 */
static int
forward_on(int s, int idx)
{
	struct nlreq r;
	struct ifinfomsg *i = NLMSG_DATA(&r.n);
	uint32_t one = 1;

	start(&r, RTM_NEWLINK, 0, sizeof(*i));
	i->ifi_family = AF_UNSPEC;
	i->ifi_index = idx;
	struct rtattr *spec = put(&r, IFLA_AF_SPEC, NULL, 0);
	struct rtattr *inet = put(&r, AF_INET, NULL, 0);
	struct rtattr *conf = put(&r, IFLA_INET_CONF, NULL, 0);
	put(&r, IPV4_DEVCONF_FORWARDING, &one, sizeof(one));
	end(&r, conf);
	end(&r, inet);
	end(&r, spec);
	return talk(s, &r.n);
}

/*
 * Forwarding on interface name of our namespace: the uplink's eth0 (pasta's)
 * and each box's end, where packets come in to be forwarded. 0, or -errno.
 */
int
boxlink_forwarding(const char *name)
{
	int idx = (int)if_nametoindex(name), s, rc;

	if (!idx)
		return -errno;
	if ((s = rtnl()) < 0)
		return s;
	rc = forward_on(s, idx);
	close(s);
	return rc;
}

/* Address addr/32 on idx. */
static int
addr_add(int s, int idx, uint32_t addr)
{
	struct nlreq r;
	struct ifaddrmsg *a = NLMSG_DATA(&r.n);
	uint32_t be = htonl(addr);

	start(&r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, sizeof(*a));
	a->ifa_family = AF_INET;
	a->ifa_prefixlen = 32;
	a->ifa_scope = RT_SCOPE_UNIVERSE;
	a->ifa_index = (unsigned)idx;
	put(&r, IFA_LOCAL, &be, 4);
	put(&r, IFA_ADDRESS, &be, 4);
	return talk(s, &r.n);
}

/* A route to dst/len (0/0: the default) through idx, via gw (0: on the link). */
static int
route_add(int s, int idx, uint32_t dst, int len, uint32_t gw, unsigned short flags)
{
	struct nlreq r;
	struct rtmsg *m = NLMSG_DATA(&r.n);
	uint32_t d = htonl(dst), g = htonl(gw);

	start(&r, RTM_NEWROUTE, NLM_F_CREATE | flags, sizeof(*m));
	m->rtm_family = AF_INET;
	m->rtm_dst_len = (unsigned char)len;
	m->rtm_table = RT_TABLE_MAIN;
	m->rtm_protocol = RTPROT_STATIC;
	m->rtm_scope = gw ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
	m->rtm_type = RTN_UNICAST;
	if (len)
		put(&r, RTA_DST, &d, 4);
	if (gw)
		put(&r, RTA_GATEWAY, &g, 4);
	put(&r, RTA_OIF, &idx, sizeof(idx));
	return talk(s, &r.n);
}

/* A veth pair: "eth0" here, peer named peer in the namespace of netfd. */
static int
veth_add(int s, const char *peer, int netfd)
{
	struct nlreq r;
	struct ifinfomsg *i = NLMSG_DATA(&r.n), pi = {.ifi_family = AF_UNSPEC};
	uint32_t mtu = BOXLINK_MTU;

	start(&r, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, sizeof(*i));
	i->ifi_family = AF_UNSPEC;
	put(&r, IFLA_IFNAME, "eth0", 5);
	put(&r, IFLA_MTU, &mtu, sizeof(mtu));
	struct rtattr *info = put(&r, IFLA_LINKINFO, NULL, 0);
	put(&r, IFLA_INFO_KIND, "veth", 5);
	struct rtattr *data = put(&r, IFLA_INFO_DATA, NULL, 0);
	struct rtattr *p = put(&r, VETH_INFO_PEER, &pi, sizeof(pi));
	put(&r, IFLA_IFNAME, peer, strlen(peer) + 1);
	put(&r, IFLA_MTU, &mtu, sizeof(mtu));
	put(&r, IFLA_NET_NS_FD, &netfd, sizeof(netfd));
	end(&r, p);
	end(&r, data);
	end(&r, info);
	return talk(s, &r.n);
}

/*
 * The uplink's end, named name, in the uplink's namespace (s is a socket
 * of it): up, BOXLINK_GW on it, and a route to the first free address of
 * BOXLINK_NET from slot on, which is the box's (*addr).
 */
static int
uplink_end(int s, const char *name, unsigned slot, uint32_t *addr)
{
	int idx = (int)if_nametoindex(name), rc;

	if (!idx)
		return -errno;
	if ((rc = link_up(s, idx)) < 0 || (rc = forward_on(s, idx)) < 0 ||
	    (rc = addr_add(s, idx, BOXLINK_GW)) < 0)
		return rc;
	for (unsigned i = 0; i < BOXLINK_SLOTS; i++) {
		*addr = BOXLINK_FIRST + (slot + i) % BOXLINK_SLOTS;
		if ((*addr & 0xff) == 0 || (*addr & 0xff) == 0xff)
			continue;
		if ((rc = route_add(s, idx, *addr, 32, 0, NLM_F_EXCL)) != -EEXIST)
			return rc;
	}
	return -EADDRINUSE;
}

/*
 * Whether pid is an uplink (root's, sandcell-proxy --uplink-serve: the
 * broker's, or a broker's before a restart under --keep-contexts) in a
 * network namespace other than the host's: a peer end there would be the
 * host's.
 */
static bool
uplink_valid(pid_t pid)
{
	char path[64], cmd[4096];
	struct stat st;
	ssize_t n = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) < 0 || st.st_uid != 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, cmd, sizeof(cmd) - 1);
		close(fd);
	}
	if (n <= 0 || !memmem(cmd, (size_t)n, "\0--uplink-serve\0", 16))
		return false;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return false;
	bool host = hostnet_is(fd);
	close(fd);
	return !host;
}

/*
 * The box's link to the uplink whose process is pid, from the box's
 * namespace (ours). 0, or -errno, said.
 */
int
boxlink_attach(struct box *bx, pid_t uplink)
{
	char path[64], peer[IFNAMSIZ];
	int up = -1, here = -1, s = -1, us = -1, rc, idx;
	uint32_t addr = 0;

	if (!uplink_valid(uplink)) {
		rc = -ESRCH;
		goto out;
	}
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)uplink);
	snprintf(peer, sizeof(peer), "sb%x", (unsigned)getpid());
	if ((up = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
	    (here = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
		rc = -errno;
		goto out;
	}
	if ((s = rtnl()) < 0 || (rc = veth_add(s, peer, up)) == -EEXIST) {
		/* a dead proxy's of our pid whose box is not gone yet */
		snprintf(peer, sizeof(peer), "sb%x.%x", (unsigned)getpid(),
		         (unsigned)now_ms() & 0xfff);
		rc = s < 0 ? s : veth_add(s, peer, up);
	}
	if (rc < 0)
		goto out;
	/* the uplink's end, from a socket of its namespace */
	if (setns(up, CLONE_NEWNET) < 0) {
		rc = -errno;
		goto out;
	}
	us = rtnl();
	rc = us < 0 ? us : uplink_end(us, peer, (unsigned)getpid(), &addr);
	/* back in the box's: a proxy left in the uplink's must not go on */
	if (setns(here, CLONE_NEWNET) < 0)
		fatal("context %s: back from the uplink's network namespace: %s",
		      bx->bx_id, strerror(errno));
	if (rc < 0)
		goto out;
	if (!(idx = (int)if_nametoindex("eth0"))) {
		rc = -errno;
		goto out;
	}
	if ((rc = link_up(s, idx)) < 0 || (rc = addr_add(s, idx, addr)) < 0 ||
	    (rc = route_add(s, idx, BOXLINK_GW, 32, 0, 0)) < 0 ||
	    (rc = route_add(s, idx, 0, 0, BOXLINK_GW, 0)) < 0)
		goto out;
	bx->bx_net_ready = true;
	log_info("context %s: the box's link %s to the uplink (pid %d): %u.%u.%u.%u",
	         bx->bx_id, peer, (int)uplink, addr >> 24, (addr >> 16) & 0xff,
	         (addr >> 8) & 0xff, addr & 0xff);
out:
	if (rc < 0 && s >= 0 && (idx = (int)if_nametoindex("eth0")))
		link_del(s, idx); /* both ends, and the uplink's route to it */
	if (rc < 0)
		log_err(
		    "context %s: the box's link to the uplink (pid %d): %s: no way out, "
		    "loopback only",
		    bx->bx_id, (int)uplink, strerror(-rc));
	if (us >= 0)
		close(us);
	if (s >= 0)
		close(s);
	if (up >= 0)
		close(up);
	if (here >= 0)
		close(here);
	return rc;
}
