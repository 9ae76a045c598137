/*
 * cidr_test.c — address blocks (lib/cidr.c): IPv4 and IPv6 CIDRs and bare
 * addresses are read into one canonical form; anything else, a prefix out of
 * range, a leading zero or bits set past the prefix, is refused with what is
 * wrong; lists are all or nothing; containment; the default deny list reads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <criterion/criterion.h>

#include "../../proto/proto.h"

static const struct {
	const char *in, *canon;
} good[] = {
    {"10.0.0.0/8", "10.0.0.0/8"},
    {"169.254.169.254", "169.254.169.254/32"},
    {"0.0.0.0/0", "0.0.0.0/0"},
    {"fd00::/8", "fd00::/8"},
    {"FE80::/10", "fe80::/10"},
    {"::/0", "::/0"},
    {"2001:db8:0:0::1", "2001:db8::1/128"},
    {"::ffff:10.0.0.0/104", "::ffff:10.0.0.0/104"},
};

static const struct {
	const char *in, *why;
} bad[] = {
    {"10.99.0.1/24", "bits set past its /24 prefix (the block is 10.99.0.0/24)"},
    {"example.com", "not an IPv4 or IPv6 address"},
    {"10.0.0.0/33", "prefix length must be 0 to 32"},
    {"::/129", "prefix length must be 0 to 128"},
    {"10.0.0.0/08", "prefix length"},
    {"10.0.0.0/", "prefix length"},
    {"10.0.0.0/-1", "prefix length"},
    {"10.0.0.0/8 ", "prefix length"},
    {"/8", "not an IPv4 or IPv6 address or CIDR"},
    {"", "not an IPv4 or IPv6 address or CIDR"},
    {"10.0.0", "not an IPv4 or IPv6 address"},
    {"010.0.0.0/8", "not an IPv4 or IPv6 address"},
    {"fe80::1%eth0", "not an IPv4 or IPv6 address"},
};

Test(cidr, addresses_and_blocks_read_canonically)
{
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct cidr c;
		char err[256], out[CIDR_STRLEN];
		cr_assert_eq(cidr_parse(good[i].in, &c, err, sizeof(err)), 0, "%s: %s",
		             good[i].in, err);
		cidr_format(&c, out, sizeof(out));
		cr_expect_str_eq(out, good[i].canon, "%s", good[i].in);
	}
}

Test(cidr, anything_else_is_refused_saying_why)
{
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cidr c;
		char err[256] = "";
		cr_expect_eq(cidr_parse(bad[i].in, &c, err, sizeof(err)), -EINVAL, "%s",
		             bad[i].in);
		cr_expect(strstr(err, bad[i].why), "%s: %s", bad[i].in, err);
	}
}

Test(cidr, a_list_is_all_or_nothing)
{
	struct cidr *v = NULL;
	size_t n = 0;
	char err[256];

	cr_assert_eq(
	    cidr_list_parse(" 10.0.0.0/8, fd00::/8 ,1.2.3.4", &v, &n, err, sizeof(err)),
	    0, "%s", err);
	cr_assert_eq(n, 3);
	cr_expect_eq(v[1].c_family, AF_INET6);
	cr_expect_eq(v[2].c_len, 32);
	cr_expect_eq(cidr_list_parse("192.168.0.0/16,nope", &v, &n, err, sizeof(err)),
	             -EINVAL);
	cr_expect_eq(n, 3, "a bad list added some of it");
	cr_expect_eq(cidr_list_parse(" , ", &v, &n, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "not an IPv4 or IPv6 address or CIDR"), "%s", err);
	cr_expect_eq(cidr_list_parse(",", &v, &n, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "names no CIDR"), "%s", err);
	free(v);
}

Test(cidr, within)
{
	struct cidr a, b, c;
	char err[128];

	cidr_parse("10.99.0.0/24", &a, err, sizeof(err));
	cidr_parse("10.0.0.0/8", &b, err, sizeof(err));
	cidr_parse("fd00::/8", &c, err, sizeof(err));
	cr_expect(cidr_within(&a, &b));
	cr_expect(!cidr_within(&b, &a));
	cr_expect(!cidr_within(&a, &c));
	cr_expect(cidr_within(&a, &a));
}

Test(cidr, the_default_deny_list_reads)
{
	int n = 0;

	for (int i = 0; cidr_default_deny[i]; i++, n++) {
		struct cidr c;
		char err[128];
		cr_expect_eq(cidr_parse(cidr_default_deny[i], &c, err, sizeof(err)), 0,
		             "%s", err);
	}
	cr_expect_geq(n, 12);
}

/* Addresses that lead to a private IPv4 one through a translator or a relay. */
static bool
denied(const char *addr)
{
	struct cidr a, d;
	char err[128];

	cr_assert_eq(cidr_parse(addr, &a, err, sizeof(err)), 0, "%s", err);
	for (int i = 0; cidr_default_deny[i]; i++)
		if (cidr_parse(cidr_default_deny[i], &d, err, sizeof(err)) == 0 && cidr_within(&a, &d))
			return true;
	return false;
}

Test(cidr, metadata_embedded_in_ipv6_is_refused_by_default)
{
	cr_expect(denied("64:ff9b::a9fe:a9fe/128"));      /* NAT64, well-known prefix */
	cr_expect(denied("64:ff9b:1:a9fe:a9fe::/128"));   /* NAT64, local-use prefix */
	cr_expect(denied("2002:a9fe:a9fe::1/128"));       /* 6to4 */
	cr_expect(denied("fd00:ec2::254/128"));           /* a cloud's IPv6 metadata */
	cr_expect(!denied("64:ff9b::808:808/128"));       /* a public one through NAT64 */
	cr_expect(!denied("2001:4860:4860::8888/128"));
}
