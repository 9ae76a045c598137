/*
 * boxdns.c — DNS for a box whose host's resolver sits on the host's
 * loopback (systemd-resolved's 127.0.0.53, a local dnsmasq or unbound at
 * 127.0.0.1, ::1). The box has a loopback of its own (boxnet.c), so such a
 * "nameserver" of the host's /etc/resolv.conf, which the box shows, would
 * point into the box; and pasta gives no way to the host's loopback
 * (--no-map-gw: left on, it would hand the box every port of it, and this
 * pasta maps a loopback resolver to 127.0.0.1 alone, where resolved does not
 * listen).
 *
 * So the proxy relays it: for each loopback resolver the host names (up to
 * BOXDNS_MAX), a UDP socket made in the host's namespace and connected to
 * that resolver's port 53, and one bound to the same address and port 53 on
 * the box's loopback. A datagram to it is a query: it goes to the host's
 * resolver under an id of the relay's, and the answer to that id goes back
 * to whoever asked, under its own id. Nothing else of the host's loopback
 * is reached: no other address, no other port, no TCP (an answer too long
 * for UDP fails; the resolver's TCP is not relayed). A relay exists only if
 * the egress rules would let DNS reach that resolver (boxfw_resolver_ok).
 * Resolvers at other addresses are reached directly, through pasta and the
 * egress rules' port-53 hole (boxfw.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy.h"

#define BOXDNS_MAX 3        /* resolv.conf's own bound (glibc's MAXNS) */
#define BOXDNS_PENDING 64   /* unanswered queries per relay; the oldest gives way */
#define BOXDNS_WAIT_MS 5000 /* a query unanswered this long is forgotten */
#define DNS_HEADER 12       /* a message shorter than its header is none */

struct asked {
	struct sockaddr_storage a_from; /* who asked, in the box */
	socklen_t a_fromlen;
	uint16_t a_id, a_theirs; /* the id sent on, the asker's own */
	uint64_t a_at;           /* 0: free */
};

static struct relay {
	struct cidr r_addr; /* the resolver's, on the host's loopback and the box's */
	int r_host;         /* connected to it, made in the host's namespace */
	int r_box;          /* bound to it in the box's; -1: none (yet) */
	struct asked r_asked[BOXDNS_PENDING];
} relays[BOXDNS_MAX];
static int nrelays;

static bool
loopback(const struct cidr *c)
{
	static const unsigned char v6[16] = {[15] = 1};

	return c->c_family == AF_INET ? c->c_addr[0] == 127 : !memcmp(c->c_addr, v6, 16);
}

/* addr:53 as a socket address; its length. */
static socklen_t
sockaddr_of(const struct cidr *c, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (c->c_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(53);
		memcpy(&s->sin_addr, c->c_addr, 4);
		return sizeof(*s);
	}
	struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
	s->sin6_family = AF_INET6;
	s->sin6_port = htons(53);
	memcpy(&s->sin6_addr, c->c_addr, 16);
	return sizeof(*s);
}

/*
 * In the host's namespace, before boxnet_start leaves it: a connected
 * socket for each loopback resolver the host's /etc/resolv.conf names.
 */
void
boxdns_host(void)
{
	FILE *f = fopen("/etc/resolv.conf", "re");
	char line[256], addr[INET6_ADDRSTRLEN + 1], err[128];

	while (f && nrelays < BOXDNS_MAX && fgets(line, sizeof(line), f)) {
		struct relay *r = &relays[nrelays];
		struct sockaddr_storage ss;
		socklen_t len;
		bool seen = false;

		if (sscanf(line, " nameserver %46s", addr) != 1 ||
		    cidr_parse(addr, &r->r_addr, err, sizeof(err)) < 0 ||
		    !loopback(&r->r_addr))
			continue;
		for (int i = 0; i < nrelays; i++)
			seen |= !memcmp(&relays[i].r_addr, &r->r_addr, sizeof(r->r_addr));
		if (seen)
			continue;
		len = sockaddr_of(&r->r_addr, &ss);
		r->r_box = -1;
		r->r_host =
		    socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (r->r_host < 0 ||
		    connect(r->r_host, (struct sockaddr *)&ss, len) < 0) {
			log_warn("DNS relay to the host's resolver %s: %s", addr,
			         strerror(errno));
			if (r->r_host >= 0)
				close(r->r_host);
			continue;
		}
		nrelays++;
	}
	if (f)
		fclose(f);
}

/*
 * In the box's namespace, its egress rules known: each relay's socket
 * there, where the egress rules let DNS reach its resolver (else the relay
 * is closed).
 */
void
boxdns_box(const struct box *bx)
{
	for (int i = 0; i < nrelays; i++) {
		struct relay *r = &relays[i];
		struct sockaddr_storage ss;
		socklen_t len = sockaddr_of(&r->r_addr, &ss);
		char addr[CIDR_STRLEN];

		cidr_format(&r->r_addr, addr, sizeof(addr));
		if (!boxfw_resolver_ok(bx, &r->r_addr)) {
			close(r->r_host);
			r->r_host = -1;
			continue;
		}
		r->r_box =
		    socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (r->r_box < 0 || bind(r->r_box, (struct sockaddr *)&ss, len) < 0) {
			log_warn("context %s: DNS relay at %s in the box: %s", bx->bx_id,
			         addr, strerror(errno));
			if (r->r_box >= 0)
				close(r->r_box);
			close(r->r_host);
			r->r_box = r->r_host = -1;
			continue;
		}
		log_debug("context %s: DNS at %s:53 relayed to the host's", bx->bx_id,
		          addr);
	}
}

/* The relays' sockets, for the proxy's loop to watch: how many (at most max). */
int
boxdns_fds(int *fds, int max)
{
	int n = 0;

	for (int i = 0; i < nrelays && n + 2 <= max; i++)
		if (relays[i].r_box >= 0) {
			fds[n++] = relays[i].r_box;
			fds[n++] = relays[i].r_host;
		}
	return n;
}

/* A query from the box: on to the host's resolver, under an id of ours. */
static void
query(struct relay *r, unsigned char *msg, size_t n, const struct sockaddr_storage *from,
      socklen_t fromlen, uint64_t now)
{
	struct asked *slot = &r->r_asked[0];
	uint16_t id;

	for (int i = 0; i < BOXDNS_PENDING; i++) {
		struct asked *a = &r->r_asked[i];
		if (a->a_at && now > a->a_at + BOXDNS_WAIT_MS)
			a->a_at = 0;
		if (!a->a_at || (slot->a_at && a->a_at < slot->a_at))
			slot = a;
	}
	if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != sizeof(id))
		id = (uint16_t)(now ^ (uint64_t)(slot - r->r_asked));
	slot->a_from = *from;
	slot->a_fromlen = fromlen;
	slot->a_theirs = (uint16_t)(msg[0] << 8 | msg[1]);
	slot->a_id = id;
	slot->a_at = now;
	msg[0] = (unsigned char)(id >> 8);
	msg[1] = (unsigned char)id;
	if (send(r->r_host, msg, n, MSG_DONTWAIT) < 0)
		slot->a_at = 0; /* the resolver is not there: the asker times out */
}

/* An answer from the host's resolver: back to whoever asked, under its id. */
static void
answer(struct relay *r, unsigned char *msg, size_t n)
{
	uint16_t id = (uint16_t)(msg[0] << 8 | msg[1]);

	for (int i = 0; i < BOXDNS_PENDING; i++) {
		struct asked *a = &r->r_asked[i];
		if (!a->a_at || a->a_id != id)
			continue;
		msg[0] = (unsigned char)(a->a_theirs >> 8);
		msg[1] = (unsigned char)a->a_theirs;
		sendto(r->r_box, msg, n, MSG_DONTWAIT, (struct sockaddr *)&a->a_from,
		       a->a_fromlen);
		a->a_at = 0;
		return;
	}
}

/* Whatever the relays' sockets hold, passed on (nonblocking: until none is left). */
void
boxdns_drain(void)
{
	static unsigned char msg[65536];
	uint64_t now = now_ms();

	for (int i = 0; i < nrelays; i++) {
		struct relay *r = &relays[i];
		struct sockaddr_storage from;
		socklen_t fromlen;
		ssize_t n;

		if (r->r_box < 0)
			continue;
		for (int k = 0; k < BOXDNS_PENDING; k++) {
			fromlen = sizeof(from);
			n = recvfrom(r->r_box, msg, sizeof(msg), MSG_DONTWAIT,
			             (struct sockaddr *)&from, &fromlen);
			if (n < 0)
				break;
			if (n >= DNS_HEADER &&
			    !(msg[2] & 0x80)) /* a query, not an answer */
				query(r, msg, (size_t)n, &from, fromlen, now);
		}
		for (int k = 0; k < BOXDNS_PENDING; k++) {
			n = recv(r->r_host, msg, sizeof(msg), MSG_DONTWAIT);
			if (n < 0)
				break;
			if (n >= DNS_HEADER && (msg[2] & 0x80))
				answer(r, msg, (size_t)n);
		}
	}
}
