/*
 * boxfw.c — where a box's traffic may go: nftables rules in the box's own
 * network namespace (boxnet.c), set by the proxy before any kernel starts,
 * through libnftables. A kernel runs as another uid with no capability and
 * no_new_privs, so it cannot change them: nftables answers only a holder of
 * CAP_NET_ADMIN over the namespace.
 *
 * What leaves the namespace (all but loopback, which never leaves it) goes
 * through two chains, and must pass both:
 *   server:  the default deny list (cidr.c), --egress-allow and
 *            --egress-deny, and the host's own addresses;
 *   context: the context's allow_out and deny_out.
 * In the server's chain the longest matching prefix decides; at equal
 * length --egress-deny, then --egress-allow, then the default list and the
 * host's own addresses; in the context's, as in E2B, an allow_out match passes
 * whatever deny_out says. An address no rule of a chain matches passes
 * it. So a context narrows what the server allows, never widens it: its
 * allow_out only opens holes in its own deny_out. DNS to the host's resolvers (its
 * /etc/resolv.conf, which the box shows) passes on port 53 alone, before
 * both, unless the operator's or the context's own rules refuse the
 * resolver; one on the host's loopback is the proxy's relay on the box's
 * own loopback (boxdns.c), under the same condition (boxfw_resolver_ok).
 * IPv6's neighbour discovery (hop limit 255: never beyond the link) passes
 * before both too: the gateway is link-local (fe80::/10, refused), and a
 * box whose rules refuse ::/0 but allow an IPv6 address still finds it.
 * A refusal fails at once (a TCP reset, else ICMP administratively
 * prohibited) and counts in a named counter the proxy reports (MSG_STATS).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nftables/libnftables.h>

#include "proxy.h"

#define BOXFW_TABLE "sandcell"
/*
 * The refusals counter is read every BOXFW_REPORT_MS while the kernel starts
 * or works and for BOXFW_AWAKE_MS after (or after a read that found new
 * refusals), every BOXFW_IDLE_MS otherwise: a read goes through
 * libnftables, which lists the box's whole ruleset (~0.3 ms of CPU), and
 * once a second that was most of what an idle proxy spends (256 of them
 * took 14 % of a CPU doing nothing, make bench BENCH=scale).
 */
#define BOXFW_REPORT_MS 1000
#define BOXFW_AWAKE_MS 30000
#define BOXFW_IDLE_MS 15000

/* a rule's class, which decides between rules of one prefix length */
enum rule_class { RC_DENY, RC_ALLOW, RC_DEFAULT };
struct rule {
	struct cidr r_net;
	bool r_allow;
	enum rule_class r_class;
};

static uint64_t refused_seen, read_at, awake_at;

/* --egress-allow and its kin: a comma list of CIDRs, added to that list. */
int
boxfw_option(struct boxfw *fw, const char *list, enum boxfw_list which)
{
	char err[256];

	if (cidr_list_parse(list, &fw->fw_list[which], &fw->fw_n[which], err,
	                    sizeof(err)) < 0) {
		log_err("egress rules: %s", err);
		return -1;
	}
	return 0;
}

static void
add_rule(struct rule **v, size_t *n, const struct cidr *c, enum rule_class rc)
{
	*v = xrealloc(*v, (*n + 1) * sizeof(**v));
	(*v)[*n].r_net = *c;
	(*v)[*n].r_class = rc;
	(*v)[(*n)++].r_allow = rc == RC_ALLOW;
}

/* Longest prefix first; at equal length, by class. */
static int
rule_order(const void *a, const void *b)
{
	const struct rule *x = a, *y = b;

	if (x->r_net.c_len != y->r_net.c_len)
		return x->r_net.c_len > y->r_net.c_len ? -1 : 1;
	return (int)x->r_class - (int)y->r_class;
}

/* A chain's rules, in the order nftables tries them (rules() put them so). */
static void
put_chain(FILE *f, const char *name, const struct rule *v, size_t n)
{
	fprintf(f, "add chain inet " BOXFW_TABLE " %s\n", name);
	for (size_t i = 0; i < n; i++) {
		char net[CIDR_STRLEN];
		cidr_format(&v[i].r_net, net, sizeof(net));
		fprintf(f, "add rule inet " BOXFW_TABLE " %s %s daddr %s %s\n", name,
		        v[i].r_net.c_family == AF_INET ? "ip" : "ip6", net,
		        v[i].r_allow ? "return" : "goto refuse");
	}
}

/* The host's own addresses, read in the host's namespace (boxfw_host). */
static struct cidr *host_addrs;
static size_t host_n;

void
boxfw_host(void)
{
	struct ifaddrs *ifa = NULL;

	if (getifaddrs(&ifa) < 0) {
		log_warn("egress rules: the host's addresses: %s", strerror(errno));
		return;
	}
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
		struct cidr c = {0};
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET) {
			c.c_family = AF_INET;
			c.c_len = 32;
			memcpy(c.c_addr, &((struct sockaddr_in *)i->ifa_addr)->sin_addr,
			       4);
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			c.c_family = AF_INET6;
			c.c_len = 128;
			memcpy(c.c_addr, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
			       16);
		} else {
			continue;
		}
		host_addrs = xrealloc(host_addrs, (host_n + 1) * sizeof(*host_addrs));
		host_addrs[host_n++] = c;
	}
	freeifaddrs(ifa);
}

/*
 * Whether a chain's rules, in their order, pass addr (the first that holds
 * it decides; none: it passes); with_defaults false: as if the default list
 * and the host's addresses were not there.
 */
static bool
chain_passes(const struct rule *v, size_t n, const struct cidr *addr, bool with_defaults)
{
	for (size_t i = 0; i < n; i++)
		if ((with_defaults || v[i].r_class != RC_DEFAULT) &&
		    cidr_within(addr, &v[i].r_net))
			return v[i].r_allow;
	return true;
}

/*
 * The host's resolvers, as the box's /etc/resolv.conf (the host's) names
 * them: port 53 passes to them, whatever the default list and the host's
 * addresses say, unless the operator's rules or the context's refuse the
 * resolver itself (deny_out 0.0.0.0/0 leaves no DNS either).
 */
static void
put_resolvers(FILE *f, const struct rule *srv, size_t nsrv, const struct rule *ctx,
              size_t nctx)
{
	FILE *rc = fopen("/etc/resolv.conf", "re");
	char line[256], addr[INET6_ADDRSTRLEN + 1], err[128];

	while (rc && fgets(line, sizeof(line), rc)) {
		struct cidr c;
		if (sscanf(line, " nameserver %46s", addr) != 1 ||
		    cidr_parse(addr, &c, err, sizeof(err)) < 0 ||
		    !chain_passes(srv, nsrv, &c, false) ||
		    !chain_passes(ctx, nctx, &c, true))
			continue;
		fprintf(f,
		        "add rule inet " BOXFW_TABLE
		        " out %s daddr %s meta l4proto { tcp, udp } "
		        "th dport 53 accept\n",
		        c.c_family == AF_INET ? "ip" : "ip6", addr);
	}
	if (rc)
		fclose(rc);
}

/* The server's chain (by prefix) and the context's (as given), as rules. */
static void
rules(const struct boxfw *fw, struct rule **srv, size_t *nsrv, struct rule **ctx,
      size_t *nctx)
{
	char err[128];

	for (int i = 0; cidr_default_deny[i]; i++) {
		struct cidr c;
		if (cidr_parse(cidr_default_deny[i], &c, err, sizeof(err)) == 0)
			add_rule(srv, nsrv, &c, RC_DEFAULT);
	}
	for (size_t i = 0; i < host_n; i++)
		add_rule(srv, nsrv, &host_addrs[i], RC_DEFAULT);
	for (size_t i = 0; i < fw->fw_n[BOXFW_ALLOW]; i++)
		add_rule(srv, nsrv, &fw->fw_list[BOXFW_ALLOW][i], RC_ALLOW);
	for (size_t i = 0; i < fw->fw_n[BOXFW_DENY]; i++)
		add_rule(srv, nsrv, &fw->fw_list[BOXFW_DENY][i], RC_DENY);
	qsort(*srv, *nsrv, sizeof(**srv), rule_order);
	/* the context's as given: allow_out first */
	for (size_t i = 0; i < fw->fw_n[BOXFW_CTX_ALLOW]; i++)
		add_rule(ctx, nctx, &fw->fw_list[BOXFW_CTX_ALLOW][i], RC_ALLOW);
	for (size_t i = 0; i < fw->fw_n[BOXFW_CTX_DENY]; i++)
		add_rule(ctx, nctx, &fw->fw_list[BOXFW_CTX_DENY][i], RC_DENY);
}

/*
 * Whether DNS may go to the host's resolver at c: unless the operator's
 * rules or the context's refuse it (the default list and the host's
 * addresses aside). boxdns.c asks it of a resolver on the host's loopback.
 */
bool
boxfw_resolver_ok(const struct box *bx, const struct cidr *c)
{
	struct rule *srv = NULL, *ctx = NULL;
	size_t nsrv = 0, nctx = 0;
	bool ok;

	rules(&bx->bx_fw, &srv, &nsrv, &ctx, &nctx);
	ok = chain_passes(srv, nsrv, c, false) && chain_passes(ctx, nctx, c, true);
	free(srv);
	free(ctx);
	return ok;
}

/* The whole ruleset, as nft's commands, in one transaction. */
static char *
ruleset(const struct boxfw *fw)
{
	struct rule *srv = NULL, *ctx = NULL;
	size_t nsrv = 0, nctx = 0, len = 0;
	char *text = NULL;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		fatal("open_memstream: %s", strerror(errno));
	rules(fw, &srv, &nsrv, &ctx, &nctx);
	fprintf(f, "add table inet " BOXFW_TABLE "\n"
	           "add counter inet " BOXFW_TABLE " refused\n"
	           "add chain inet " BOXFW_TABLE " refuse\n"
	           "add rule inet " BOXFW_TABLE " refuse counter name \"refused\"\n"
	           "add rule inet " BOXFW_TABLE
	           " refuse meta l4proto tcp reject with tcp reset\n"
	           "add rule inet " BOXFW_TABLE
	           " refuse reject with icmpx type admin-prohibited\n");
	put_chain(f, "server", srv, nsrv);
	put_chain(f, "context", ctx, nctx);
	fprintf(f, "add chain inet " BOXFW_TABLE
	           " out { type filter hook output priority 0; policy accept; }\n"
	           "add rule inet " BOXFW_TABLE " out oifname \"lo\" accept\n"
	           /* IPv6's ARP: the box's kernel finds its gateway (fe80::1, the
	            * way out's), on the link alone; no kernel's code can send it */
	           "add rule inet " BOXFW_TABLE " out icmpv6 type { nd-neighbor-solicit, "
	           "nd-neighbor-advert, nd-router-solicit } ip6 hoplimit 255 accept\n");
	put_resolvers(f, srv, nsrv, ctx, nctx);
	fprintf(f, "add rule inet " BOXFW_TABLE " out jump server\n"
	           "add rule inet " BOXFW_TABLE " out jump context\n");
	fclose(f);
	free(srv);
	free(ctx);
	return text;
}

/*
 * nftables, for one command: its netlink socket (open for as long as the
 * context is, without FD_CLOEXEC, and speaking with our capabilities) is
 * never left in the proxy for a child to inherit. NULL: said.
 */
static struct nft_ctx *
nft_open(const struct box *bx)
{
	struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);

	if (!nft) {
		log_err("context %s: egress rules: nft_ctx_new failed", bx->bx_id);
		return NULL;
	}
	nft_ctx_buffer_output(nft);
	nft_ctx_buffer_error(nft);
	return nft;
}

/*
 * In the box's network namespace, before any kernel: the rules. 0, or
 * -errno (said): a box whose rules could not be set gets no kernel.
 */
int
boxfw_apply(struct box *bx)
{
	struct nft_ctx *nft;
	char *text;

	if (!bx->bx_on || bx->bx_net == BOX_NET_NONE)
		return 0;
	if (!(nft = nft_open(bx)))
		return -ENOMEM;
	text = ruleset(&bx->bx_fw);
	if (nft_run_cmd_from_buffer(nft, text) != 0) {
		const char *why = nft_ctx_get_error_buffer(nft);
		log_err("context %s: egress rules could not be set: %s", bx->bx_id,
		        why && *why ? why : "nftables refused them");
		log_debug("the rules were:\n%s", text);
		free(text);
		nft_ctx_free(nft);
		return -EPERM;
	}
	log_debug("context %s: egress rules:\n%s", bx->bx_id, text);
	free(text);
	nft_ctx_free(nft);
	bx->bx_fw.fw_on = true;
	return 0;
}

/* One of the box's lists as a comma list of CIDRs (caller frees), or NULL if empty. */
char *
boxfw_list_text(const struct box *bx, enum boxfw_list which)
{
	const struct boxfw *fw = &bx->bx_fw;
	char *s = NULL;

	for (size_t i = 0; i < fw->fw_n[which]; i++) {
		char net[CIDR_STRLEN], *t;
		cidr_format(&fw->fw_list[which][i], net, sizeof(net));
		t = s ? xasprintf("%s,%s", s, net) : xstrdup(net);
		free(s);
		s = t;
	}
	return s;
}

/* The refusals so far (the named counter's packets); -1 if it cannot be
 * read. One netlink request (nftctr.c), not a libnftables context a read. */
int64_t
boxfw_refused(const struct box *bx)
{
	int64_t n;

	if (!bx->bx_fw.fw_on)
		return -1;
	return (n = nftctr_packets(BOXFW_TABLE, "refused")) < 0 ? -1 : n;
}

/* Now and then: refusals since the last report go to the broker (MSG_STATS);
 * how often: BOXFW_REPORT_MS above, more often while busy (its kernel starts
 * or works: the loop says, so this file calls nothing of the kernel's). */
void
boxfw_tick(const struct box *bx, uint64_t now, bool busy)
{
	int64_t n;
	struct msg m;

	if (!bx->bx_fw.fw_on)
		return;
	if (busy)
		awake_at = now;
	if (now <
	    read_at + (now - awake_at < BOXFW_AWAKE_MS ? BOXFW_REPORT_MS : BOXFW_IDLE_MS))
		return;
	read_at = now;
	if ((n = boxfw_refused(bx)) < 0 || (uint64_t)n <= refused_seen)
		return;
	awake_at = now; /* refusals come in runs */
	msg_init(&m, MSG_STATS);
	msg_set_u64(&m, F_COUNT, 0);
	msg_set_u64(&m, F_REFUSED, (uint64_t)n - refused_seen);
	ipc_send(&m);
	msg_free(&m);
	refused_seen = (uint64_t)n;
}
