/*
 * egress.c — where a context's traffic may go, as the broker knows it: the
 * server's --egress-allow and --egress-deny, a context's "network"
 * ({"allow_out": [...], "deny_out": [...]}, E2B's names) on POST
 * /contexts, checked strictly and handed to its proxy, which sets the rules
 * in the box's network (proxy/boxfw.c); and what GET /ready says of them.
 *
 * The rule (docs/SECURITY.md, Egress): an address is reached only if the
 * server's rules allow it (the default deny list, holes from --egress-allow,
 * additions from --egress-deny, the longest matching prefix deciding, deny
 * at equal length) and then the context's (allow_out before deny_out, as
 * E2B's). A context narrows what the server allows; it never widens it.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nftables/libnftables.h>

#include "broker.h"

#define EGRESS_MAX 64 /* CIDRs in each of a context's lists */

/* The server's lists as given (canonical, comma-joined for the proxies), or NULL. */
static char *server_list[2];

static char *
joined(const struct cidr *v, size_t n)
{
	char *s = NULL;

	for (size_t i = 0; i < n; i++) {
		char net[CIDR_STRLEN], *t;
		cidr_format(&v[i], net, sizeof(net));
		t = s ? xasprintf("%s,%s", s, net) : xstrdup(net);
		free(s);
		s = t;
	}
	return s;
}

static int
server_add(const char *list, const char *origin, int which)
{
	struct cidr *v = NULL;
	size_t n = 0;
	char err[256], *add, *all;

	if (cidr_list_parse(list, &v, &n, err, sizeof(err)) < 0) {
		log_err("%s: %s", origin, err);
		free(v);
		return -1;
	}
	add = joined(v, n);
	all = server_list[which] ? xasprintf("%s,%s", server_list[which], add)
	                         : xstrdup(add);
	free(server_list[which]);
	free(add);
	free(v);
	server_list[which] = all;
	return 0;
}

/* --egress-allow CIDR[,...] (repeatable) */
int
egress_allow(const char *list, const char *origin)
{
	return server_add(list, origin, 0);
}

/* --egress-deny CIDR[,...] (repeatable) */
int
egress_deny(const char *list, const char *origin)
{
	return server_add(list, origin, 1);
}

/*
 * Whether nftables takes egress rules here, as a proxy sets them (the reset,
 * the counter, the output hook), in a network namespace of a child's own
 * (not root: in a user namespace of its own too). NULL, or why not (a
 * static string): then no box may have a way out.
 */
const char *
egress_probe(void)
{
	static char why[256];
	static const char rules[] =
	    "add table inet probe\n"
	    "add counter inet probe refused\n"
	    "add chain inet probe out { type filter hook output priority 0; }\n"
	    "add rule inet probe out ip daddr 169.254.0.0/16 counter name \"refused\"\n"
	    "add rule inet probe out meta l4proto tcp reject with tcp reset\n"
	    "add rule inet probe out reject with icmpx type admin-prohibited\n";
	int p[2], status = 0;
	ssize_t n = 0;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return strerror(errno);
	if ((pid = fork()) == 0) {
		struct nft_ctx *nft = NULL;
		const char *e = "";
		close(p[0]);
		if (unshare((geteuid() ? CLONE_NEWUSER : 0) | CLONE_NEWNET) < 0)
			e = strerror(errno);
		else if (!(nft = nft_ctx_new(NFT_CTX_DEFAULT)))
			e = "nft_ctx_new failed";
		else if (nft_ctx_buffer_error(nft),
		         nft_run_cmd_from_buffer(nft, rules) != 0)
			e = nft_ctx_get_error_buffer(nft);
		if (*e && write(p[1], e, strlen(e)) < 0)
			_exit(2);
		_exit(*e ? 1 : 0);
	}
	close(p[1]);
	if (pid > 0) {
		n = read(p[0], why, sizeof(why) - 1);
		waitpid(pid, &status, 0);
	}
	close(p[0]);
	if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return NULL;
	why[n > 0 ? n : 0] = '\0';
	why[strcspn(why, "\n")] = '\0';
	if (!why[0])
		snprintf(why, sizeof(why), "%s",
		         pid < 0 ? strerror(errno) : "the probe failed");
	return why;
}

/* One of a context's lists: an array of CIDR strings, as a canonical comma list. */
static int
context_list(json_t *net, const char *key, char **out, char *err, size_t errsz)
{
	json_t *a = json_object_get(net, key), *v;
	struct cidr *c = NULL;
	size_t i, n = 0;
	char why[256];

	*out = NULL;
	if (!a || json_is_null(a))
		return 0;
	if (!json_is_array(a)) {
		snprintf(err, errsz, "'network.%s' must be an array of CIDRs", key);
		return -EINVAL;
	}
	if (json_array_size(a) > EGRESS_MAX) {
		snprintf(err, errsz, "'network.%s' has %zu entries; at most %d", key,
		         json_array_size(a), EGRESS_MAX);
		return -EINVAL;
	}
	c = xcalloc(json_array_size(a) + 1, sizeof(*c));
	json_array_foreach(a, i, v)
	{
		const char *s = json_string_value(v);
		if (!s || strlen(s) != json_string_length(v)) {
			snprintf(err, errsz,
			         "'network.%s[%zu]' must be a string (a CIDR)", key, i);
			free(c);
			return -EINVAL;
		}
		if (cidr_parse(s, &c[n], why, sizeof(why)) < 0) {
			snprintf(
			    err, errsz, "'network.%s[%zu]': %s%s", key, i, why,
			    strchr(s, '/') ||
			            strspn(s, "0123456789abcdefABCDEF.:") == strlen(s)
			        ? ""
			        : " (domain names are not supported: give addresses)");
			free(c);
			return -EINVAL;
		}
		n++;
	}
	*out = joined(c, n);
	free(c);
	return 0;
}

/*
 * A POST /contexts body's "network" (absent or null: none): 0 with the
 * context's lists in *el (each NULL when empty), or -EINVAL and what is
 * wrong in err.
 */
int
egress_context(json_t *body, struct egress_lists *el, char *err, size_t errsz)
{
	json_t *net = body ? json_object_get(body, "network") : NULL, *v;
	const char *k;
	int rc;

	memset(el, 0, sizeof(*el));
	if (!net || json_is_null(net))
		return 0;
	if (!json_is_object(net)) {
		snprintf(err, errsz,
		         "'network' must be an object: {\"allow_out\": [CIDR, ...], "
		         "\"deny_out\": [CIDR, ...]}");
		return -EINVAL;
	}
	json_object_foreach(net, k, v)
	{
		if (strcmp(k, "allow_out") && strcmp(k, "deny_out")) {
			snprintf(err, errsz,
			         "'network.%.64s' is not known: allow_out or deny_out",
			         k);
			return -EINVAL;
		}
	}
	if ((rc = context_list(net, "allow_out", &el->el_allow, err, errsz)) < 0 ||
	    (rc = context_list(net, "deny_out", &el->el_deny, err, errsz)) < 0) {
		egress_free(el);
		return rc;
	}
	/* unboxed, a kernel has the host's network: nothing could hold it to them */
	if (egress_own(el) && !cf->cf_sandbox) {
		snprintf(err, errsz,
		         "'network': this server runs kernels unboxed (--no-sandbox), "
		         "with the host's network; it cannot hold a context to rules");
		egress_free(el);
		return -EINVAL;
	}
	return 0;
}

void
egress_free(struct egress_lists *el)
{
	free(el->el_allow);
	free(el->el_deny);
	el->el_allow = el->el_deny = NULL;
}

/* Whether the context has rules of its own (a warm proxy has none). */
bool
egress_own(const struct egress_lists *el)
{
	return el && (el->el_allow || el->el_deny);
}

/* The egress lists of a context's spec, with its own lists el (spawn.c's spawn_box). */
void
egress_spec(const struct egress_lists *el, struct spec *sp)
{
	if (strcmp(cf->cf_kernel_network, "outbound"))
		return;
	sp->sp_egress_allow = server_list[0];
	sp->sp_egress_deny = server_list[1];
	sp->sp_context_allow = el->el_allow;
	sp->sp_context_deny = el->el_deny;
}

/* A re-attached proxy's state file's "network": the context's lists (el) again. */
void
egress_adopt(struct egress_lists *el, json_t *net)
{
	const char *allow = json_string_value(json_object_get(net, "allow_out")),
	           *deny = json_string_value(json_object_get(net, "deny_out"));

	el->el_allow = allow ? xstrdup(allow) : NULL;
	el->el_deny = deny ? xstrdup(deny) : NULL;
}

static json_t *
list_json(const char *list)
{
	json_t *a = json_array();
	char *copy = list ? xstrdup(list) : NULL, *save = NULL;

	for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t;
	     t = strtok_r(NULL, ",", &save))
		json_array_append_new(a, json_string(t));
	free(copy);
	return a;
}

/* GET /contexts/{id}'s "network": a context's own lists el, or NULL if none. */
json_t *
egress_context_json(const struct egress_lists *el)
{
	if (!egress_own(el))
		return NULL;
	return json_pack("{s:o, s:o}", "allow_out", list_json(el->el_allow), "deny_out",
	                 list_json(el->el_deny));
}

/* GET /ready's "egress": the rules every box gets here. */
json_t *
egress_json(void)
{
	json_t *d;

	if (boxnons_on()) /* no namespace to hold the rules: the container's network */
		return json_pack("{s:s}", "mode", "unfiltered");
	if (!cf->cf_sandbox || strcmp(cf->cf_kernel_network, "outbound"))
		return json_pack("{s:s}", "mode",
		                 cf->cf_sandbox ? "none" : "unboxed");
	d = json_array();
	for (int i = 0; cidr_default_deny[i]; i++)
		json_array_append_new(d, json_string(cidr_default_deny[i]));
	return json_pack("{s:s, s:o, s:o, s:o, s:s, s:s}", "mode", "outbound",
	                 "default_deny", d, "allow", list_json(server_list[0]), "deny",
	                 list_json(server_list[1]), "host_addresses", "refused", "dns",
	                 "the host's resolvers, port 53");
}
