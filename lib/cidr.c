/*
 * cidr.c — the address blocks egress rules name: IPv4 and IPv6 CIDRs read
 * strictly (an address, or an address and a prefix length with no host bits
 * set), written back in one canonical form, and the blocks a box may never
 * reach unless the operator allows them (the default deny list).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib.h"

/*
 * Refused by default: "this network", loopback, link-local (cloud metadata,
 * 169.254.169.254), the private ranges, carrier-grade NAT; IPv6's loopback,
 * link-local, unique-local and IPv4-mapped addresses, and those IPv4 ranges
 * as NAT64's well-known prefix embeds them (64:ff9b::169.254.169.254, where
 * a NAT64 gateway would carry them on); NAT64's local-use prefix and 6to4
 * (deprecated, RFC 7526) whole, since a relay would carry any IPv4 address
 * they embed, private ones included (2002:a9fe:a9fe::).
 */
const char *const cidr_default_deny[] = {
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "::/128",
    "::1/128",
    "::ffff:0:0/96",
    "fc00::/7",
    "fe80::/10",
    "64:ff9b::a00:0/104",
    "64:ff9b::6440:0/106",
    "64:ff9b::7f00:0/104",
    "64:ff9b::a9fe:0/112",
    "64:ff9b::ac10:0/108",
    "64:ff9b::c0a8:0/112",
    "64:ff9b:1::/48",
    "2002::/16",
    NULL,
};

/* s as a CIDR: 0, or -EINVAL and what is wrong in err. */
int
cidr_parse(const char *s, struct cidr *out, char *err, size_t errsz)
{
	char addr[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(s, '/');
	size_t alen = slash ? (size_t)(slash - s) : strlen(s);
	unsigned max, len;

	memset(out, 0, sizeof(*out));
	if (alen == 0 || alen >= sizeof(addr)) {
		snprintf(err, errsz, "'%.64s' is not an IPv4 or IPv6 address or CIDR", s);
		return -EINVAL;
	}
	memcpy(addr, s, alen);
	addr[alen] = '\0';
	if (inet_pton(AF_INET, addr, out->c_addr) == 1) {
		out->c_family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, addr, out->c_addr) == 1) {
		out->c_family = AF_INET6;
		max = 128;
	} else {
		snprintf(err, errsz, "'%.64s': '%s' is not an IPv4 or IPv6 address", s,
		         addr);
		return -EINVAL;
	}
	len = max;
	if (slash) {
		const char *p = slash + 1;
		if (!*p || strlen(p) > 3 || strspn(p, "0123456789") != strlen(p) ||
		    (p[0] == '0' && p[1]) || (len = (unsigned)atoi(p)) > max) {
			snprintf(err, errsz, "'%.64s': the prefix length must be 0 to %u",
			         s, max);
			return -EINVAL;
		}
	}
	out->c_len = len;
	for (unsigned bit = len; bit < max; bit++)
		if (out->c_addr[bit / 8] & (0x80 >> (bit % 8))) {
			struct cidr net = *out;
			char canon[CIDR_STRLEN];
			for (unsigned b = len; b < max; b++)
				net.c_addr[b / 8] &= (uint8_t) ~(0x80 >> (b % 8));
			cidr_format(&net, canon, sizeof(canon));
			snprintf(
			    err, errsz,
			    "'%.64s' has bits set past its /%u prefix (the block is %s)",
			    s, len, canon);
			return -EINVAL;
		}
	return 0;
}

/* c as text, "addr/len". */
void
cidr_format(const struct cidr *c, char *out, size_t outsz)
{
	char addr[INET6_ADDRSTRLEN];

	inet_ntop(c->c_family, c->c_addr, addr, sizeof(addr));
	snprintf(out, outsz, "%s/%u", addr, c->c_len);
}

/* Whether block inner lies wholly within outer. */
bool
cidr_within(const struct cidr *inner, const struct cidr *outer)
{
	if (inner->c_family != outer->c_family || inner->c_len < outer->c_len)
		return false;
	for (unsigned bit = 0; bit < outer->c_len; bit++) {
		uint8_t m = 0x80 >> (bit % 8);
		if ((inner->c_addr[bit / 8] & m) != (outer->c_addr[bit / 8] & m))
			return false;
	}
	return true;
}

/*
 * A comma-separated list of CIDRs (spaces around them allowed), appended to
 * *v (*n of them). 0, or -EINVAL and what is wrong in err; nothing is added
 * then.
 */
int
cidr_list_parse(const char *list, struct cidr **v, size_t *n, char *err, size_t errsz)
{
	char *copy = xstrdup(list), *save = NULL, *tok;
	size_t had = *n;
	int rc = 0;

	for (tok = strtok_r(copy, ",", &save); tok && rc == 0;
	     tok = strtok_r(NULL, ",", &save)) {
		tok += strspn(tok, " \t");
		size_t l = strlen(tok);
		while (l && (tok[l - 1] == ' ' || tok[l - 1] == '\t'))
			tok[--l] = '\0';
		*v = xrealloc(*v, (*n + 1) * sizeof(**v));
		if ((rc = cidr_parse(tok, &(*v)[*n], err, errsz)) == 0)
			(*n)++;
	}
	if (rc == 0 && *n == had) {
		snprintf(err, errsz, "'%.64s' names no CIDR", list);
		rc = -EINVAL;
	}
	if (rc < 0)
		*n = had;
	free(copy);
	return rc;
}
