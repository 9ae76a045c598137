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
 * route goes through BOXLINK_GW. Where the uplink has an IPv6 way out, the
 * box has one too: an address of BOXLINK_NET6 made of its IPv4 one (so
 * reserved with it), a default route through fe80::1, the uplink's end of
 * every link. Nothing but the uplink's rules (uplink.c)
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

/*
 * Address addr (family's bytes)/len on idx. IPv6's without duplicate address
 * detection: the address is the box's alone (boxlink_attach), and usable at
 * once rather than tentative for a second.
 */
static int
addr_add(int s, int idx, int family, const void *addr, int len)
{
	struct nlreq r;
	struct ifaddrmsg *a = NLMSG_DATA(&r.n);
	size_t alen = family == AF_INET ? 4 : 16;

	start(&r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, sizeof(*a));
	a->ifa_family = (unsigned char)family;
	a->ifa_prefixlen = (unsigned char)len;
	a->ifa_flags = family == AF_INET6 ? IFA_F_NODAD : 0;
	a->ifa_scope = RT_SCOPE_UNIVERSE;
	a->ifa_index = (unsigned)idx;
	put(&r, IFA_LOCAL, addr, alen);
	put(&r, IFA_ADDRESS, addr, alen);
	return talk(s, &r.n);
}

static int
addr4_add(int s, int idx, uint32_t addr)
{
	uint32_t be = htonl(addr);

	return addr_add(s, idx, AF_INET, &be, 32);
}

/*
 * A route to dst/len (family's bytes; len 0: the default) through idx, via
 * gw (NULL: on the link).
 */
static int
route_add(int s, int idx, int family, const void *dst, int len, const void *gw,
          unsigned short flags)
{
	struct nlreq r;
	struct rtmsg *m = NLMSG_DATA(&r.n);
	size_t alen = family == AF_INET ? 4 : 16;

	start(&r, RTM_NEWROUTE, NLM_F_CREATE | flags, sizeof(*m));
	m->rtm_family = (unsigned char)family;
	m->rtm_dst_len = (unsigned char)len;
	m->rtm_table = RT_TABLE_MAIN;
	m->rtm_protocol = RTPROT_STATIC;
	m->rtm_scope = gw ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
	m->rtm_type = RTN_UNICAST;
	if (len)
		put(&r, RTA_DST, dst, alen);
	if (gw)
		put(&r, RTA_GATEWAY, gw, alen);
	put(&r, RTA_OIF, &idx, sizeof(idx));
	return talk(s, &r.n);
}

static int
route4_add(int s, int idx, uint32_t dst, int len, uint32_t gw, unsigned short flags)
{
	uint32_t d = htonl(dst), g = htonl(gw);

	return route_add(s, idx, AF_INET, &d, len, gw ? &g : NULL, flags);
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
 * IPv6, where the uplink has a way out for it: the box's address is
 * BOXLINK_NET6 (a unique-local /96 of sandcell's own, RFC 4193's random
 * global id) followed by its IPv4 one, so the IPv4 route's reservation
 * reserves it too; the uplink's end of every link is BOXLINK_GW6 as well.
 */
static const uint8_t BOXLINK_NET6[12] = {0xfd, 0x5c, 0xce, 0x11, 0xb0, 0xc5};
static const uint8_t BOXLINK_GW6[16] = {0xfe, 0x80, [15] = 1}; /* fe80::1 */

static void
box6(uint32_t addr, uint8_t out[16])
{
	uint32_t be = htonl(addr);

	memcpy(out, BOXLINK_NET6, sizeof(BOXLINK_NET6));
	memcpy(out + 12, &be, 4);
}

/*
 * In the uplink's namespace: whether it forwards IPv6 (uplink.c turns it on
 * where it can) and pasta has given it an IPv6 default route (only where
 * the host has one).
 */
static bool
uplink_v6(void)
{
	int fd = open("/proc/sys/net/ipv6/conf/all/forwarding", O_RDONLY | O_CLOEXEC);
	char c = '0';

	if (fd >= 0) {
		if (read(fd, &c, 1) != 1)
			c = '0';
		close(fd);
	}
	return c == '1' && route6_default();
}

/*
 * The uplink's end, named name, in the uplink's namespace (s is a socket
 * of it): up, BOXLINK_GW on it, and a route to the first free address of
 * BOXLINK_NET from slot on, which is the box's (*addr). Where the uplink
 * has IPv6 (*v6 then), BOXLINK_GW6 on it and a route to the box's IPv6
 * address; if that fails, said, the box has IPv4 alone.
 */
static int
uplink_end(int s, const char *name, unsigned slot, uint32_t *addr, bool *v6)
{
	int idx = (int)if_nametoindex(name), rc;
	uint8_t a6[16];

	*v6 = false;
	if (!idx)
		return -errno;
	if ((rc = link_up(s, idx)) < 0 || (rc = forward_on(s, idx)) < 0 ||
	    (rc = addr4_add(s, idx, BOXLINK_GW)) < 0)
		return rc;
	for (unsigned i = 0; i < BOXLINK_SLOTS; i++) {
		*addr = BOXLINK_FIRST + (slot + i) % BOXLINK_SLOTS;
		if ((*addr & 0xff) == 0 || (*addr & 0xff) == 0xff)
			continue;
		if ((rc = route4_add(s, idx, *addr, 32, 0, NLM_F_EXCL)) != -EEXIST)
			break;
	}
	if (rc < 0)
		return rc == -EEXIST ? -EADDRINUSE : rc;
	if (!uplink_v6())
		return 0;
	box6(*addr, a6);
	if ((rc = addr_add(s, idx, AF_INET6, BOXLINK_GW6, 64)) < 0 ||
	    (rc = route_add(s, idx, AF_INET6, a6, 128, NULL, NLM_F_EXCL)) < 0)
		log_warn("the box's link %s: its IPv6 in the uplink: %s: IPv4 alone",
		         name, strerror(-rc));
	*v6 = rc == 0;
	return 0;
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
	uint8_t a6[16];
	char text6[INET6_ADDRSTRLEN] = "";
	bool v6 = false;

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
	rc = us < 0 ? us : uplink_end(us, peer, (unsigned)getpid(), &addr, &v6);
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
	if ((rc = link_up(s, idx)) < 0 || (rc = addr4_add(s, idx, addr)) < 0 ||
	    (rc = route4_add(s, idx, BOXLINK_GW, 32, 0, 0)) < 0 ||
	    (rc = route4_add(s, idx, 0, 0, BOXLINK_GW, 0)) < 0)
		goto out;
	box6(addr, a6);
	if (v6) { /* its address, and its default route through BOXLINK_GW6 */
		int r6 = addr_add(s, idx, AF_INET6, a6, 128);
		if (r6 == 0)
			r6 = route_add(s, idx, AF_INET6, NULL, 0, BOXLINK_GW6, 0);
		if (r6 < 0)
			log_warn("context %s: the box's IPv6 way out: %s: IPv4 alone",
			         bx->bx_id, strerror(-r6));
		else
			inet_ntop(AF_INET6, a6, text6, sizeof(text6));
	}
	bx->bx_net_ready = true;
	log_info("context %s: the box's link %s to the uplink (pid %d): %u.%u.%u.%u%s%s",
	         bx->bx_id, peer, (int)uplink, addr >> 24, (addr >> 16) & 0xff,
	         (addr >> 8) & 0xff, addr & 0xff, *text6 ? ", " : " (no IPv6)", text6);
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
