/*
 * nftctr.c — the packets of a named nftables counter, read with one
 * netlink request (NFT_MSG_GETOBJ) in the caller's network namespace.
 * libnftables builds a context of its own for the same question, ~1 MB
 * allocated and freed on the proxy's heap every read (boxfw.c reads the
 * box's refusals counter every second or 15 s): pages that either stay
 * dirty or, trimmed (memtrim.c), are faulted in again by the next read.
 * The reply comes from the kernel; it is still read within its bounds.
 */
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <endian.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy.h"

#define NFTCTR_BUF 8192

static size_t
put_attr(char *buf, size_t at, uint16_t type, const void *data, size_t len)
{
	struct nlattr *a = (struct nlattr *)(buf + at);

	a->nla_type = type;
	a->nla_len = NLA_HDRLEN + len;
	memcpy(buf + at + NLA_HDRLEN, data, len);
	return at + NLA_ALIGN(a->nla_len);
}

/* The first attribute of type in [p, p + len), or NULL. */
static const struct nlattr *
find_attr(const char *p, size_t len, uint16_t type)
{
	while (len >= NLA_HDRLEN) {
		const struct nlattr *a = (const struct nlattr *)p;
		if (a->nla_len < NLA_HDRLEN || a->nla_len > len)
			return NULL;
		if ((a->nla_type & NLA_TYPE_MASK) == type)
			return a;
		size_t step = NLA_ALIGN(a->nla_len);
		if (step >= len)
			return NULL;
		p += step;
		len -= step;
	}
	return NULL;
}

/* The packets counted by counter name of table (family inet); -errno. */
int64_t
nftctr_packets(const char *table, const char *name)
{
	static char buf[NFTCTR_BUF] __attribute__((aligned(NLMSG_ALIGNTO)));
	struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
	uint32_t type = htobe32(NFT_OBJECT_COUNTER);
	struct nlmsghdr *nh = (struct nlmsghdr *)buf;
	struct nfgenmsg *g = NLMSG_DATA(nh);
	size_t at = NLMSG_SPACE(sizeof(*g));
	int64_t n = -ENOENT;
	ssize_t r;
	int fd;

	if (strlen(table) + strlen(name) > 256)
		return -ENAMETOOLONG;
	memset(buf, 0, at);
	nh->nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETOBJ;
	nh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	nh->nlmsg_seq = 1;
	g->nfgen_family = NFPROTO_INET;
	g->version = NFNETLINK_V0;
	at = put_attr(buf, at, NFTA_OBJ_TABLE, table, strlen(table) + 1);
	at = put_attr(buf, at, NFTA_OBJ_NAME, name, strlen(name) + 1);
	at = put_attr(buf, at, NFTA_OBJ_TYPE, &type, sizeof(type));
	nh->nlmsg_len = at;
	if ((fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER)) < 0)
		return -errno;
	if (sendto(fd, buf, at, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		n = -errno;
		goto out;
	}
	/* the object (NEWOBJ), then the ACK; or an error */
	while ((r = recv(fd, buf, sizeof(buf), 0)) > 0) {
		size_t len = r;
		for (nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, len);
		     nh = NLMSG_NEXT(nh, len)) {
			if (nh->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(nh);
				if (nh->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
					n = -EPROTO;
				else if (e->error)
					n = e->error;
				goto out; /* the ACK (error 0) ends the answer */
			}
			if (nh->nlmsg_type !=
			        ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWOBJ) ||
			    nh->nlmsg_len < NLMSG_SPACE(sizeof(*g)))
				continue;
			const char *p = (const char *)nh + NLMSG_SPACE(sizeof(*g));
			size_t plen = nh->nlmsg_len - NLMSG_SPACE(sizeof(*g));
			const struct nlattr *d = find_attr(p, plen, NFTA_OBJ_DATA), *pk;
			uint64_t v;
			if (!d ||
			    !(pk = find_attr((const char *)d + NLA_HDRLEN,
			                     d->nla_len - NLA_HDRLEN,
			                     NFTA_COUNTER_PACKETS)) ||
			    pk->nla_len < NLA_HDRLEN + sizeof(v)) {
				n = -EPROTO;
				continue;
			}
			memcpy(&v, (const char *)pk + NLA_HDRLEN, sizeof(v));
			n = (int64_t)(be64toh(v) & INT64_MAX);
		}
	}
	if (r < 0)
		n = -errno;
out:
	close(fd);
	return n;
}
