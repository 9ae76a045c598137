/*
 * nftctr.c — the packets of a named nftables counter, read with one
 * netlink request (NFT_MSG_GETOBJ) in the caller's network namespace,
 * through libnftnl (the message) and libmnl (the socket). libnftables builds
 * a context of its own for the same question, ~1 MB allocated and freed on
 * the proxy's heap every read (boxfw.c reads the box's refusals counter
 * every second or 15 s): pages that either stay dirty or, trimmed
 * (memtrim.c), are faulted in again by the next read. Here a read costs two
 * small objects and a socket, and a buffer on the stack.
 */
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <stdint.h>
#include <string.h>
#include <libmnl/libmnl.h>
#include <libnftnl/common.h>
#include <libnftnl/object.h>

#include "proxy.h"

/* One counter's reply is ~100 bytes; libmnl's MNL_SOCKET_BUFFER_SIZE on
 * 4 KiB pages, and room for any name nftctr_packets() takes. */
#define NFTCTR_BUF 4096

/* One NEWOBJ of the reply: *data becomes the counter's packets, or -EPROTO
 * if the kernel's object carries none. */
static int
nftctr_reply(const struct nlmsghdr *nh, void *data)
{
	int64_t *n = data;
	struct nftnl_obj *o;

	if (nh->nlmsg_type != ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWOBJ))
		return MNL_CB_OK;
	if (!(o = nftnl_obj_alloc())) {
		*n = -ENOMEM;
		return MNL_CB_OK;
	}
	if (nftnl_obj_nlmsg_parse(nh, o) < 0 || !nftnl_obj_is_set(o, NFTNL_OBJ_CTR_PKTS))
		*n = -EPROTO;
	else
		*n = (int64_t)(nftnl_obj_get_u64(o, NFTNL_OBJ_CTR_PKTS) & INT64_MAX);
	nftnl_obj_free(o);
	return MNL_CB_OK;
}

/* The packets counted by counter name of table (family inet); -errno. */
int64_t
nftctr_packets(const char *table, const char *name)
{
	/* zeroed: libmnl leaves an attribute's padding as it finds it */
	char buf[NFTCTR_BUF] __attribute__((aligned(4))) = {0};
	struct mnl_socket *nl = NULL;
	struct nftnl_obj *o;
	struct nlmsghdr *nh;
	const uint32_t seq = 1;
	unsigned int portid;
	int64_t n = -ENOENT;
	ssize_t r;

	/* the request is built without bounds (mnl_attr_put_strz) */
	if (strlen(table) + strlen(name) > 256)
		return -ENAMETOOLONG;
	if (!(o = nftnl_obj_alloc()))
		return -ENOMEM;
	nftnl_obj_set_str(o, NFTNL_OBJ_TABLE, table);
	nftnl_obj_set_str(o, NFTNL_OBJ_NAME, name);
	nftnl_obj_set_u32(o, NFTNL_OBJ_TYPE, NFT_OBJECT_COUNTER);
	nftnl_obj_set_u32(o, NFTNL_OBJ_FAMILY, NFPROTO_INET);
	nh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETOBJ, NFPROTO_INET, NLM_F_ACK, seq);
	nftnl_obj_nlmsg_build_payload(nh, o);
	nftnl_obj_free(o);

	if (!(nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC)) ||
	    mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0 ||
	    mnl_socket_sendto(nl, nh, nh->nlmsg_len) < 0) {
		n = -errno;
		goto out;
	}
	portid = mnl_socket_get_portid(nl);
	/* the object (NEWOBJ), then the ACK, which ends the answer; or an
	 * error, which mnl_cb_run() returns as -1 with errno set */
	while ((r = mnl_socket_recvfrom(nl, buf, sizeof(buf))) > 0) {
		int rc = mnl_cb_run(buf, r, seq, portid, nftctr_reply, &n);
		if (rc < 0)
			n = -errno;
		if (rc <= MNL_CB_STOP)
			goto out;
	}
	if (r < 0)
		n = -errno;
out:
	if (nl)
		mnl_socket_close(nl);
	return n;
}
