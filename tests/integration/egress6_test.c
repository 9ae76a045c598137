/*
 * egress6_test.c — IPv6 out of a root broker's boxes, through the shared
 * uplink (proxy/uplink.c, proxy/boxlink.c), with the guarantees IPv4 has:
 * a box reaches the stand-in internet's IPv6 address (inet.c, 2001:2::/48);
 * the default deny list refuses IPv6's metadata and private ranges
 * (fd00:ec2::254, a cloud's IPv6 metadata service, is a stand-in's alias),
 * --egress-deny an IPv6 block; and with the box's own rules opened to
 * unique-local and link-local addresses (so that the uplink's rules alone
 * stand), no box reaches another box's IPv6 address nor the uplink's own
 * addresses (a listener of the test's in its namespace); the cap on a box's
 * flows counts both families together; a resolver the host names at an
 * IPv6 address answers on port 53 alone. Skipped where the
 * host has no IPv6 way out (pasta then gives none).
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* the shared broker is not used: each test starts the one it needs */
HARNESS_SHARED_BROKER("--pool", "python=0", "--no-default-context");

#define METADATA6 "fd00:ec2::254" /* a cloud's IPv6 metadata service */
#define DENIED6 "2001:db8::1"     /* of the block the operator denies here */
#define RESOLVER6 "fd00:53::53"   /* the host's resolver, at a private address */
#define UPLINK_PORT 20130         /* the test's listener in the uplink's namespace */

static struct broker eb;
static struct inet in;
static bool eb_on;
static pid_t listener;
static char dns_dir[64];

static void
egress6_stop(void)
{
	if (listener > 0) {
		kill(listener, SIGKILL);
		waitpid(listener, NULL, 0);
		listener = 0;
	}
	inet_stop(&in);
	if (eb_on)
		broker_stop(&eb);
	eb_on = false;
	if (dns_dir[0]) {
		char cmd[96];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dns_dir);
		cr_expect_eq(system(cmd), 0, "%s", cmd);
	}
	dns_dir[0] = '\0';
}

/* The stand-in internet with IPv6 and its aliases, or the test is skipped. */
static void
standins(void)
{
	if (geteuid() != 0)
		cr_skip_test("not root: no uplink (each box has a pasta of its own)");
	if (inet_start(&in) < 0)
		cr_skip_test("needs iproute2 for a stand-in internet");
	if (!inet_v6_out(&in))
		cr_skip_test("no IPv6 here: the host has no IPv6 default route (pasta "
		             "then gives none) or the stand-in has no IPv6 address");
	cr_assert_eq(inet_alias(&in, METADATA6), 0, "a stand-in at " METADATA6);
	cr_assert_eq(inet_alias(&in, DENIED6), 0, "a stand-in at " DENIED6);
}

static void
broker_up(const char *const *args)
{
	cr_assert_eq(broker_start(&eb, args), 0, "the broker did not start");
	eb_on = true;
}

/* Both. */
static void
start(const char *const *args)
{
	standins();
	broker_up(args);
}

/* Python: GET of each URL of the list U, a line each: the page, or "refused" (< 3 s), or
 * "hung". */
static const char fetch_py[] =
    "import time, urllib.request\n"
    "for u in U:\n"
    "    t = time.time()\n"
    "    try:\n"
    "        print(urllib.request.urlopen(u, timeout=10).read().decode().strip())\n"
    "    except Exception as e:\n"
    "        print('refused' if time.time() - t < 3 else 'hung: %r' % e)\n";

static char *
fetch(const char *id, const char *const *urls, int n)
{
	char code[1024] = "U = [";

	for (int i = 0; i < n; i++)
		snprintf(code + strlen(code), sizeof(code) - strlen(code), "%s'%s'",
		         i ? ", " : "", urls[i]);
	snprintf(code + strlen(code), sizeof(code) - strlen(code), "]\n%s", fetch_py);
	char *out = run_stdout(eb.b_url, id, code);
	cr_assert_not_null(out);
	for (char *p; (p = strstr(out, INET_PAGE));) {
		memmove(p + 4, p + strlen(INET_PAGE), strlen(p + strlen(INET_PAGE)) + 1);
		memcpy(p, "page", 4);
	}
	return out;
}

/*
 * By default a box reaches the internet over IPv6, through the uplink (its
 * source address is the uplink's unique-local one for it), and not IPv6's
 * metadata; --egress-deny refuses an IPv6 block; both at once, not hung.
 * Python's and bash's curl alike; one pasta for all.
 */
Test(egress6, boxes_reach_the_internet_over_ipv6_but_not_metadata_or_a_denied_block,
     .fini = egress6_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool",        "python=0",
	                      "--egress-deny",        "2001:db8::/32", NULL};
	char urls[3][96], code[512];

	start(args);
	snprintf(urls[0], sizeof(urls[0]), "%s", in.in_url6);
	snprintf(urls[1], sizeof(urls[1]), "http://[" METADATA6 "]:%d", in.in_port);
	snprintf(urls[2], sizeof(urls[2]), "http://[" DENIED6 "]:%d", in.in_port);
	char *id = context_new(eb.b_url, "python", NULL);
	cr_assert_not_null(id);
	const char *const u[] = {urls[0], urls[1], urls[2]};
	char *out = fetch(id, u, 3);
	cr_expect_str_eq(out, "page\nrefused\nrefused\n", "python: %s", out);
	free(out);
	/* its source address: the box's own of the uplink's unique-local block */
	snprintf(code, sizeof(code),
	         "import socket\ns = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
	         "s.connect(('%s', "
	         "9))\nprint(s.getsockname()[0].startswith('fd5c:ce11:b0c5:'))\n",
	         in.in_addr6);
	out = run_stdout(eb.b_url, id, code);
	cr_expect_str_eq(out, "True\n", "the box's IPv6 source: %s", out);
	free(out);
	free(id);

	char *sh = context_new(eb.b_url, "bash", NULL);
	cr_assert_not_null(sh);
	snprintf(
	    code, sizeof(code),
	    "for u in %s %s %s; do t=$(date +%%s); out=$(curl -s -g --max-time 10 $u); "
	    "rc=$?; if [ $rc = 0 ]; then echo \"$out\"; elif [ $(( $(date +%%s) - t )) "
	    "-lt 3 ]; then echo refused; else echo \"hung: $rc\"; fi; done",
	    urls[0], urls[1], urls[2]);
	out = run_stdout(eb.b_url, sh, code);
	cr_assert_not_null(out);
	cr_expect(!strncmp(out, INET_PAGE, strlen(INET_PAGE)) &&
	              !strcmp(out + strlen(INET_PAGE), "\nrefused\nrefused\n"),
	          "bash: %s", out);
	free(out);
	free(sh);
}

/* The uplink's pid, from its run dir's uplink.pid; 0 if none. */
static pid_t
uplink_of(const char *run_dir)
{
	char path[256];
	int p = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/uplink.pid", run_dir);
	if ((f = fopen(path, "re"))) {
		if (fscanf(f, "%d", &p) != 1)
			p = 0;
		fclose(f);
	}
	return p;
}

/*
 * A TCP listener on [::]:UPLINK_PORT in the uplink's network namespace,
 * answering "hi": what a box must not reach. Its global IPv6 address (pasta's
 * eth0) into addr. 0 once it listens.
 */
static int
listen_in_uplink(pid_t uplink, char *addr, size_t len)
{
	char path[64], cmd[128];
	int ready[2], fd;
	char c;
	FILE *p;

	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)uplink);
	if (pipe2(ready, O_CLOEXEC) < 0)
		return -1;
	if ((listener = fork()) == 0) {
		struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
		                          .sin6_port = htons(UPLINK_PORT)};
		int one = 1, s;
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
		    setns(fd, CLONE_NEWNET) < 0 ||
		    (s = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
		    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		    bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    listen(s, 16) < 0 || write(ready[1], "r", 1) != 1)
			_exit(1);
		for (int a; (a = accept(s, NULL, NULL)) >= 0; close(a))
			if (write(a, "hi", 2) < 0)
				continue;
		_exit(0);
	}
	close(ready[1]);
	if (listener < 0 || read(ready[0], &c, 1) != 1) {
		close(ready[0]);
		return -1;
	}
	close(ready[0]);
	snprintf(cmd, sizeof(cmd),
	         "nsenter -t %d -n ip -o -6 addr show dev eth0 scope global",
	         (int)uplink);
	addr[0] = '\0';
	if ((p = popen(cmd, "r"))) {
		char line[256];
		if (fgets(line, sizeof(line), p))
			sscanf(line, "%*d: %*s inet6 %47[^/]", addr);
		pclose(p);
	}
	(void)len;
	return addr[0] ? 0 : -1;
}

/* The host's global IPv6 addresses, as /128s, appended to the comma list s. */
static void
host_addrs6(char *s, size_t len)
{
	struct ifaddrs *ifa = NULL;

	if (getifaddrs(&ifa) < 0)
		return;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
		char a[INET6_ADDRSTRLEN];
		struct in6_addr *v;
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6)
			continue;
		v = &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
		if (IN6_IS_ADDR_LINKLOCAL(v) || IN6_IS_ADDR_LOOPBACK(v))
			continue;
		inet_ntop(AF_INET6, v, a, sizeof(a));
		snprintf(s + strlen(s), len - strlen(s), ",%s/128", a);
	}
	freeifaddrs(ifa);
}

/* A victim's listeners: TCP on [::]:20120, a UDP echo on [::]:20121; prints its IPv6
 * source. */
static const char victim_py[] =
    "import socket, threading\n"
    "t = socket.socket(socket.AF_INET6)\nt.setsockopt(socket.SOL_SOCKET, "
    "socket.SO_REUSEADDR, 1)\n"
    "t.bind(('::', 20120))\nt.listen()\n"
    "u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\nu.bind(('::', 20121))\n"
    "def echo():\n    while True:\n        d, a = u.recvfrom(100)\n        u.sendto(d, "
    "a)\n"
    "def serve():\n    while True:\n        c, a = t.accept()\n        c.send(b'hi')\n   "
    "     c.close()\n"
    "threading.Thread(target=echo, daemon=True).start()\n"
    "threading.Thread(target=serve, daemon=True).start()\n"
    "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\ns.connect((INET6, 9))\n"
    "print(s.getsockname()[0])\n";

/* TCP and UDP to VICTIM, TCP to the uplink's gateway and its pasta-side address. */
static const char probe_py[] =
    "import socket\n"
    "def tcp(a, p):\n    try:\n"
    "        return 'reached' if socket.create_connection((a, p), 3).recv(2) == b'hi' "
    "else 'no'\n"
    "    except OSError:\n        return 'no'\n"
    "def udp(a, p):\n    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n    "
    "s.settimeout(2)\n"
    "    try:\n        s.sendto(b'x', (a, p))\n"
    "        return 'reached' if s.recvfrom(10)[0] == b'x' else 'no'\n"
    "    except OSError:\n        return 'no'\n"
    "print('tcp', tcp(VICTIM, 20120), 'udp', udp(VICTIM, 20121))\n"
    "print('gateway', tcp('fe80::1%eth0', PORT), 'uplink', tcp(UPLINK, PORT))\n";

/*
 * With unique-local and link-local addresses and the host's own allowed by
 * the operator (the box's own rules would refuse them; the uplink's way out
 * has the host's address), the uplink's rules alone keep a box
 * from another box's IPv6 address (TCP, UDP) and from the uplink's own
 * addresses (its end of every link, fe80::1, and its way out's), where a
 * listener of the test's answers. The victim reaches its own address, and
 * both reach the internet over IPv6.
 */
Test(egress6, no_box_reaches_another_box_or_the_uplink_over_ipv6, .fini = egress6_stop,
     .timeout = 240)
{
	static char allow[512] = "fc00::/7,fe80::/10";
	const char *args[] = {"--no-default-context", "--pool", "python=0",
	                      "--egress-allow",       allow,    NULL};
	char code[sizeof(probe_py) + sizeof(victim_py) + 256], victim6[64] = "", up6[48];

	host_addrs6(allow, sizeof(allow));
	start(args);
	pid_t uplink = uplink_of(eb.b_run_dir);
	cr_assert_gt(uplink, 0, "no uplink");
	cr_assert_eq(listen_in_uplink(uplink, up6, sizeof(up6)), 0,
	             "a listener in the uplink's namespace");
	char *victim = context_new(eb.b_url, "python", NULL),
	     *attacker = context_new(eb.b_url, "python", NULL);
	cr_assert(victim && attacker);
	const char *const u[] = {in.in_url6};
	char *out = fetch(attacker, u, 1);
	cr_expect_str_eq(out, "page\n", "the attacker's way out over IPv6: %s", out);
	free(out);
	snprintf(code, sizeof(code), "INET6 = '%s'\n%s", in.in_addr6, victim_py);
	out = run_stdout(eb.b_url, victim, code);
	cr_assert(out && sscanf(out, "%63s", victim6) == 1 && strchr(victim6, ':'),
	          "victim: %s", out);
	free(out);
	snprintf(code, sizeof(code), "VICTIM = '%s'\nUPLINK = '%s'\nPORT = %d\n%s",
	         victim6, up6, UPLINK_PORT, probe_py);
	out = run_stdout(eb.b_url, victim, code);
	cr_expect(out && !strncmp(out, "tcp reached udp reached", 23),
	          "the victim's own probes (%s): %s", victim6, out);
	free(out);
	out = run_stdout(eb.b_url, attacker, code);
	cr_expect_str_eq(out, "tcp no udp no\ngateway no uplink no\n",
	                 "the attacker against %s, the uplink at %s: %s", victim6, up6,
	                 out);
	free(out);
	free(victim);
	free(attacker);
}

/*
 * The uplink's cap of 4096 flows per box counts IPv4 and IPv6 together: a
 * box with 2100 UDP flows of each (to the stand-in internet's ports) has its
 * next connection refused at once, over either family, while another box
 * still goes out over both.
 */
Test(egress6, the_flow_cap_counts_ipv4_and_ipv6_together, .fini = egress6_stop,
     .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};
	char code[1024];

	start(args);
	char *hog = context_new(eb.b_url, "python", NULL),
	     *other = context_new(eb.b_url, "python", NULL);
	cr_assert(hog && other);
	snprintf(code, sizeof(code),
	         "import socket, urllib.request\n"
	         "for fam, a in ((socket.AF_INET, '%s'), (socket.AF_INET6, '%s')):\n"
	         "    for i in range(2100):\n"
	         "        s = socket.socket(fam, socket.SOCK_DGRAM)\n"
	         "        s.sendto(b'x', (a, 20000 + i))\n"
	         "        s.close()\n"
	         "for u in ('%s', '%s'):\n"
	         "    try:\n"
	         "        urllib.request.urlopen(u, timeout=10).read()\n"
	         "        print('reached')\n"
	         "    except Exception as e:\n"
	         "        print('refused')\n",
	         in.in_addr, in.in_addr6, in.in_url, in.in_url6);
	char *out = run_stdout(eb.b_url, hog, code);
	cr_expect_str_eq(out, "refused\nrefused\n", "the box past its flows: %s", out);
	free(out);
	const char *const u[] = {in.in_url, in.in_url6};
	out = fetch(other, u, 2);
	cr_expect_str_eq(out, "page\npage\n", "its neighbour: %s", out);
	free(out);
	free(hog);
	free(other);
}

/*
 * A resolver the host names at an IPv6 address, a private one (as a cloud
 * network's resolver is), answers a box through the uplink, on port 53
 * alone: the same address's other ports stay refused. The test's broker
 * runs in a mount namespace of the test's own whose /etc/resolv.conf names
 * only the stand-in's resolver.
 */
Test(egress6, an_ipv6_resolver_of_the_hosts_answers_on_port_53_alone,
     .fini = egress6_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};
	char code[512];

	standins();
	cr_assert_eq(inet_resolver(&in, RESOLVER6), 0,
	             "a stand-in resolver at " RESOLVER6);
	cr_assert_eq(inet_resolv_conf(dns_dir, sizeof(dns_dir), RESOLVER6, false), 0,
	             "the test's /etc naming " RESOLVER6 ": %s", strerror(errno));
	broker_up(args);
	char *py = context_new(eb.b_url, "python", NULL);
	cr_assert_not_null(py);
	snprintf(code, sizeof(code),
	         "import socket, time\n"
	         "try:\n"
	         "    print(socket.getaddrinfo('" INET_DNS_NAME "', 80, "
	         "socket.AF_INET)[0][4][0])\n"
	         "except OSError as e:\n"
	         "    print('no answer', e)\n"
	         "t = time.time()\n"
	         "try:\n"
	         "    socket.create_connection(('" RESOLVER6 "', %d), 10)\n"
	         "    print('reached')\n"
	         "except OSError:\n"
	         "    print('refused' if time.time() - t < 3 else 'hung')\n",
	         in.in_port);
	char *out = run_stdout(eb.b_url, py, code);
	cr_expect_str_eq(out, INET_DNS_ADDR "\nrefused\n",
	                 "a lookup through " RESOLVER6 ", then its web port: %s", out);
	free(out);
	free(py);
}

/*
 * A context whose own rules refuse all of IPv6 but one address of the
 * stand-in internet reaches that address: its box still finds its gateway
 * (fe80::1, neighbour discovery passes its rules); the metadata stays out of
 * reach, whatever the context allows.
 */
Test(egress6, a_context_allowed_one_ipv6_address_reaches_it_and_nothing_else,
     .fini = egress6_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};
	char net[256], meta[96];
	long st;

	start(args);
	snprintf(net, sizeof(net),
	         "{\"deny_out\": [\"::/0\"], \"allow_out\": [\"%s\", \"" METADATA6 "\"]}",
	         in.in_addr6);
	char *id = context_new_network(eb.b_url, "python", net, &st);
	cr_assert_not_null(id, "POST /contexts with %s: %ld", net, st);
	snprintf(meta, sizeof(meta), "http://[" METADATA6 "]:%d", in.in_port);
	const char *const u[] = {in.in_url6, meta};
	char *out = fetch(id, u, 2);
	cr_expect_str_eq(out, "page\nrefused\n", "%s: %s", net, out);
	free(out);
	free(id);
}
