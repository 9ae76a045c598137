/*
 * inet.c — a stand-in for the internet in tests: a network namespace of the
 * test's own, joined to the host by a veth pair, where python3's http.server
 * serves one page. A box reaches it as it would a server outside the
 * machine: through its way out (pasta), over the host's routes. Its
 * addresses are of 198.18.0.0/15 (benchmarking: neither private nor
 * anyone's), which a box may reach, and, where the host has IPv6, of
 * 2001:2::/48 (IPv6's benchmarking block); inet_alias adds stand-ins at any
 * other address (cloud metadata's, a private host's), inet_resolver a
 * resolver. inet_resolv_conf gives the test an /etc/resolv.conf of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/lib.h"
#include "harness.h"

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd) == 0 ? 0 : -1;
}

/* on [::], IPv4's addresses too (mapped) */
#define INET_SERVER                                                                      \
	"import functools, http.server, socket, socketserver, sys\n"                     \
	"class S(socketserver.ThreadingTCPServer):\n"                                    \
	"    allow_reuse_address = True\n"                                               \
	"    address_family = socket.AF_INET6\n"                                         \
	"    def server_bind(self):\n"                                                   \
	"        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"   \
	"        super().server_bind()\n"                                                \
	"class H(http.server.SimpleHTTPRequestHandler): log_message = lambda *a: None\n" \
	"h = functools.partial(H, directory=sys.argv[3])\n"                              \
	"S(('::', int(sys.argv[2])), h).serve_forever()\n"

static bool
serving(void *arg)
{
	struct inet *in = arg;
	struct resp r;
	bool ok = http(in->in_url, "GET", "/", NULL, &r, 2) == 0 && r.r_status == 200 &&
	          strstr(r.r_body, INET_PAGE);

	resp_free(&r);
	return ok;
}

int
inet_start(struct inet *in)
{
	unsigned n = (unsigned)getpid();
	char page[300];
	FILE *f;

	memset(in, 0, sizeof(*in));
	if (geteuid() != 0 || system("ip -V >/dev/null 2>&1") != 0)
		return -1;
	snprintf(in->in_ns, sizeof(in->in_ns), "sc-inet-%u", n);
	snprintf(in->in_if, sizeof(in->in_if), "scv%u", n % 10000000);
	snprintf(in->in_addr, sizeof(in->in_addr), "198.%u.%u.2", 18 + n % 2,
	         (n / 2) % 256);
	snprintf(in->in_dir, sizeof(in->in_dir), "/tmp/sandcell-inet.XXXXXX");
	if (!mkdtemp(in->in_dir))
		return -1;
	snprintf(page, sizeof(page), "%s/index.html", in->in_dir);
	if (!(f = fopen(page, "w")))
		return -1;
	fprintf(f, "%s\n", INET_PAGE);
	fclose(f);
	harness_track_netns(in->in_ns);
	/* the host side .1, the namespace's .2, a /30 of 198.18.0.0/15 */
	if (sh("ip netns add %s && ip link add %s type veth peer name %sp && "
	       "ip link set %sp netns %s && ip addr add %.*s.1/30 dev %s && ip link set "
	       "%s up && "
	       "ip -n %s addr add %s/30 dev %sp && ip -n %s link set %sp up && "
	       "ip -n %s link set lo up && ip -n %s route add default via %.*s.1",
	       in->in_ns, in->in_if, in->in_if, in->in_if, in->in_ns,
	       (int)(strrchr(in->in_addr, '.') - in->in_addr), in->in_addr, in->in_if,
	       in->in_if, in->in_ns, in->in_addr, in->in_if, in->in_ns, in->in_if,
	       in->in_ns, in->in_ns, (int)(strrchr(in->in_addr, '.') - in->in_addr),
	       in->in_addr) < 0) {
		inet_stop(in);
		return -1;
	}
	in->in_port = 8000 + n % 1000;
	snprintf(in->in_url, sizeof(in->in_url), "http://%s:%d", in->in_addr,
	         in->in_port);
	/* IPv6 beside it, without duplicate address detection (a second's wait) */
	snprintf(in->in_addr6, sizeof(in->in_addr6), "2001:2:0:%x::2", n % 0x10000);
	if (sh("ip -6 addr add %.*s1/64 dev %s nodad && "
	       "ip -n %s -6 addr add %s/64 dev %sp nodad && "
	       "ip -n %s -6 route add default via %.*s1",
	       (int)strlen(in->in_addr6) - 1, in->in_addr6, in->in_if, in->in_ns,
	       in->in_addr6, in->in_if, in->in_ns, (int)strlen(in->in_addr6) - 1,
	       in->in_addr6) == 0)
		snprintf(in->in_url6, sizeof(in->in_url6), "http://[%s]:%d", in->in_addr6,
		         in->in_port);
	else
		in->in_addr6[0] = '\0';
	if ((in->in_srv = fork()) == 0) {
		char port[16];
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		snprintf(port, sizeof(port), "%d", in->in_port);
		/*
		 * not python3 -m http.server: it looks its own address up in
		 * DNS, which the namespace has no way to, and starts 10 s late.
		 */
		execlp("ip", "ip", "netns", "exec", in->in_ns, "/usr/bin/python3", "-c",
		       INET_SERVER, in->in_addr, port, in->in_dir, (char *)NULL);
		_exit(127);
	}
	if (in->in_srv < 0 || wait_until(serving, in, 10000) < 0) {
		inet_stop(in);
		return -1;
	}
	if (in->in_url6[0]) { /* the same server, at its IPv6 address */
		struct inet probe = *in;
		memcpy(probe.in_url, in->in_url6, sizeof(probe.in_url));
		if (wait_until(serving, &probe, 10000) < 0)
			in->in_addr6[0] = in->in_url6[0] = '\0';
	}
	return 0;
}

static int alias_lock = -1; /* inet_alias's, held until the process exits */

/*
 * Another address the stand-in answers at (the same page, the same port):
 * the namespace's own, routed there from the host for as long as the
 * stand-in lives (the route goes with the veth pair).
 */

int
inet_alias(struct inet *in, const char *addr)
{
	char url[80];
	struct inet probe;
	bool v6 = strchr(addr, ':') != NULL;

	if (v6 && !in->in_addr6[0])
		return -1;
	/*
	 * The route to addr is the host's, one for every process: a second
	 * test process aliasing the same address (10.99.0.1, the metadata's)
	 * would take it from under this one. So one process at a time holds
	 * aliases, until it exits (the lock goes with its descriptors).
	 */
	if (alias_lock < 0 &&
	    ((alias_lock = open("/run/sandcell-test-inet-alias.lock",
	                        O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0 ||
	     flock(alias_lock, LOCK_EX) < 0))
		return -1;
	if (sh("ip -n %s addr add %s/%d dev lo && ip route replace %s/%d via %s dev %s",
	       in->in_ns, addr, v6 ? 128 : 32, addr, v6 ? 128 : 32,
	       v6 ? in->in_addr6 : in->in_addr, in->in_if) < 0)
		return -1;
	snprintf(url, sizeof(url), v6 ? "http://[%s]:%d" : "http://%s:%d", addr,
	         in->in_port);
	probe = *in;
	snprintf(probe.in_url, sizeof(probe.in_url), "%s", url);
	return wait_until(serving, &probe, 10000);
}

/* The resolver's answer to q (n bytes) in out: INET_DNS_NAME's A, nothing else. */
static size_t
dns_answer(const unsigned char *q, size_t n, unsigned char *out)
{
	static const unsigned char want[] = "\015sandcell-test\007example";
	size_t i = 12;

	while (i < n && q[i])
		i += q[i] + 1u;
	if (n < 12 || i + 5 > n)
		return 0;
	size_t qlen = i + 5 - 12; /* the question: its name, type and class */
	bool ours = i - 12 == sizeof(want) - 1 &&
	            !strncasecmp((const char *)q + 12, (const char *)want, i - 12);
	bool a = q[i + 1] == 0 && q[i + 2] == 1;
	memcpy(out, q, 2);
	out[2] = 0x81;               /* an answer, recursion desired */
	out[3] = ours ? 0x80 : 0x83; /* recursion available; no such name */
	memcpy(out + 4, "\0\1\0\0\0\0\0\0", 8);
	out[7] = ours && a;
	memcpy(out + 12, q + 12, qlen);
	if (!(ours && a))
		return 12 + qlen;
	static const unsigned char rr[] = {0xc0, 0x0c, 0, 1, 0,   1,  0, 0,
	                                   0,    60,   0, 4, 198, 18, 0, 7};
	memcpy(out + 12 + qlen, rr, sizeof(rr));
	return 12 + qlen + sizeof(rr);
}

/* Answers queries on s (a bound UDP socket), for ever. */
static void __attribute__((noreturn)) dns_loop(int s)
{
	for (;;) {
		unsigned char q[1500], out[1600];
		struct sockaddr_storage from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(s, q, sizeof(q), 0, (struct sockaddr *)&from, &fl);
		size_t m = n > 0 ? dns_answer(q, (size_t)n, out) : 0;
		if (m)
			sendto(s, out, m, 0, (struct sockaddr *)&from, fl);
	}
}

/* A child answering queries on s (a bound UDP socket) until killed; its pid, or -1. */
pid_t
inet_dns_serve(int s)
{
	pid_t p = fork();

	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dns_loop(s);
	}
	return p;
}

/*
 * A resolver at addr (IPv4 or IPv6; an alias of the stand-in's), port 53
 * UDP, in the stand-in's namespace, for its life: INET_DNS_NAME's A is
 * INET_DNS_ADDR. 0, or -1.
 */
int
inet_resolver(struct inet *in, const char *addr)
{
	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_port = htons(53)};
	struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = htons(53)};
	bool v6 = strchr(addr, ':') != NULL;
	char path[96];
	int ready[2], s = -1, fd = -1;
	char c;

	if (inet_alias(in, addr) < 0 || pipe2(ready, O_CLOEXEC) < 0)
		return -1;
	snprintf(path, sizeof(path), "/run/netns/%s", in->in_ns);
	if ((in->in_dns = fork()) == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (v6)
			inet_pton(AF_INET6, addr, &s6.sin6_addr);
		else
			inet_pton(AF_INET, addr, &s4.sin_addr);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
		    setns(fd, CLONE_NEWNET) < 0 ||
		    (s = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) <
		        0 ||
		    bind(s, v6 ? (struct sockaddr *)&s6 : (struct sockaddr *)&s4,
		         v6 ? sizeof(s6) : sizeof(s4)) < 0 ||
		    write(ready[1], "r", 1) != 1)
			_exit(1);
		close(ready[1]);
		dns_loop(s);
	}
	close(ready[1]);
	bool ok = in->in_dns > 0 && read(ready[0], &c, 1) == 1;
	close(ready[0]);
	return ok ? 0 : -1;
}

/*
 * The test process's own /etc: a copy of the machine's in a directory of
 * /tmp (its name in dir, for the caller to remove) whose resolv.conf names
 * ns alone (link: a link to a file beside /etc, as Ubuntu's is), bound over
 * /etc in a mount namespace of the process's own; its brokers and their
 * boxes see it. 0, or -1 (errno).
 */
int
inet_resolv_conf(char *dir, size_t dirsz, const char *ns, bool link)
{
	char etc[96], cmd[160], path[128], stub[128];
	FILE *f;

	snprintf(dir, dirsz, "/tmp/sandcell-dns-XXXXXX");
	if (!mkdtemp(dir)) {
		dir[0] = '\0';
		return -1;
	}
	chmod(dir, 0755);
	snprintf(etc, sizeof(etc), "%s/etc", dir);
	snprintf(cmd, sizeof(cmd), "cp -a /etc '%s'", etc);
	if (system(cmd) != 0)
		return -1;
	snprintf(path, sizeof(path), "%s/resolv.conf", etc);
	snprintf(stub, sizeof(stub), "%s/stub-resolv.conf", dir);
	unlink(path);
	if (!(f = fopen(link ? stub : path, "w")))
		return -1;
	fprintf(f, "nameserver %s\noptions timeout:2 attempts:2\n", ns);
	fclose(f);
	chmod(link ? stub : path, 0644);
	if ((link && symlink(stub, path) < 0) || unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(etc, "/etc", NULL, MS_BIND, NULL) < 0)
		return -1;
	return 0;
}

/*
 * Whether a box may reach the stand-in over IPv6: it has an IPv6 address,
 * and the host an IPv6 default route (pasta gives a box IPv6 only then).
 */
bool
inet_v6_out(const struct inet *in)
{
	return in->in_addr6[0] && route6_default();
}

void
inet_stop(struct inet *in)
{
	if (in->in_dns > 0) {
		kill(in->in_dns, SIGKILL);
		waitpid(in->in_dns, NULL, 0);
		in->in_dns = 0;
	}
	if (in->in_srv > 0) {
		kill(in->in_srv, SIGKILL);
		waitpid(in->in_srv, NULL, 0);
		in->in_srv = 0;
	}
	if (in->in_ns[0]) {
		/* the veth pair goes with the namespace */
		sh("ip netns del %s 2>/dev/null; ip link del %s 2>/dev/null; true",
		   in->in_ns, in->in_if);
		in->in_ns[0] = '\0';
	}
	if (in->in_dir[0]) {
		sh("rm -rf '%s'", in->in_dir);
		in->in_dir[0] = '\0';
	}
}
