/*
 * egress_test.c — where a box's traffic may go. A stand-in internet of the
 * test's own (inet.c) also answers at cloud metadata's 169.254.169.254 and
 * at a private host, 10.99.0.1 (routes to the test's namespace, for the
 * test's life); nothing is sent to any other address but the host's own
 * resolver. By default a box reaches the internet and no link-local or
 * private address nor the host's own, a refusal fails at once (no hang),
 * /metrics counts it; --egress-allow opens a hole, a context's "network"
 * narrows what the server allows and never widens it; a kernel cannot
 * change the rules. In both isolation modes, and under a broker that is
 * not root. A resolver on the host's loopback (a stand-in of the test's, at
 * 127.0.0.53, named by an /etc/resolv.conf of the test's mount namespace)
 * answers a box, and nothing else of the host's loopback does.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <errno.h>
#include <strings.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* the shared broker is not used: each test starts the one it needs */
HARNESS_SHARED_BROKER("--pool", "python=0", "--no-default-context");

#define METADATA "169.254.169.254"
#define PRIVATE "10.99.0.1"
#define ROOTLESS_UID 60998

static struct broker eb;
static struct inet in;
static bool eb_on;
static mode_t tun_mode; /* /dev/net/tun's mode before a test opened it; 0: untouched */

static void
egress_stop(void)
{
	inet_stop(&in);
	if (eb_on)
		broker_stop(&eb);
	eb_on = false;
	if (tun_mode)
		chmod("/dev/net/tun", tun_mode);
	tun_mode = 0;
}

/* The stand-in internet and its aliases, or the test is skipped. */
static void
standins(void)
{
	if (geteuid() != 0 || inet_start(&in) < 0)
		cr_skip_test("needs root and iproute2 for a stand-in internet");
	cr_assert_eq(inet_alias(&in, METADATA), 0, "a stand-in at " METADATA);
	cr_assert_eq(inet_alias(&in, PRIVATE), 0, "a stand-in at " PRIVATE);
}

static void
start(const char *const *args, uid_t as)
{
	cr_assert_eq(as ? broker_start_as(&eb, as, args) : broker_start(&eb, args), 0,
	             "the broker did not start");
	eb_on = true;
}

/*
 * Code for lang that fetches, in order, the stand-in internet, the metadata
 * stand-in and the private one, and prints a line for each: the page, or
 * "refused" when it failed within 3 s, or "hung" when it failed later
 * (each waits up to 10 s).
 */
static void
probe_code(const char *lang, char *code, size_t len)
{
	char urls[3][80];

	snprintf(urls[0], sizeof(urls[0]), "%s", in.in_url);
	snprintf(urls[1], sizeof(urls[1]), "http://" METADATA ":%d", in.in_port);
	snprintf(urls[2], sizeof(urls[2]), "http://" PRIVATE ":%d", in.in_port);
	if (!strcmp(lang, "python"))
		snprintf(code, len,
		         "import time, urllib.request\n"
		         "for u in ['%s', '%s', '%s']:\n"
		         "    t = time.time()\n"
		         "    try:\n"
		         "        print(urllib.request.urlopen(u, "
		         "timeout=10).read().decode().strip())\n"
		         "    except Exception as e:\n"
		         "        print('refused' if time.time() - t < 3 else 'hung: "
		         "%%r' %% e)\n",
		         urls[0], urls[1], urls[2]);
	else if (!strcmp(lang, "bash"))
		snprintf(code, len,
		         "for u in %s %s %s; do t=$(date +%%s); out=$(curl -s --max-time "
		         "10 $u); "
		         "rc=$?; if [ $rc = 0 ]; then echo \"$out\"; elif [ $(( $(date "
		         "+%%s) - t )) "
		         "-lt 3 ]; then echo refused; else echo \"hung: $rc\"; fi; done",
		         urls[0], urls[1], urls[2]);
	else
		snprintf(
		    code, len,
		    "for (const u of ['%s', '%s', '%s']) {\n"
		    "  const t = Date.now();\n"
		    "  try {\n"
		    "    const r = await fetch(u, {signal: "
		    "AbortSignal.timeout(10000)});\n"
		    "    console.log((await r.text()).trim());\n"
		    "  } catch (e) {\n"
		    "    console.log(Date.now() - t < 3000 ? 'refused' : 'hung: ' + e);\n"
		    "  }\n"
		    "}",
		    urls[0], urls[1], urls[2]);
}

/* What a context of lang sees of the three: "page|refused" etc., one word each. */
static char *
probe(const char *base, const char *id, const char *lang)
{
	char code[2048];
	char *out;

	probe_code(lang, code, sizeof(code));
	out = run_stdout(base, id, code);
	cr_assert_not_null(out);
	/* the page reads "page": shorter to compare */
	for (char *p; (p = strstr(out, INET_PAGE));) {
		memmove(p + 4, p + strlen(INET_PAGE), strlen(p + strlen(INET_PAGE)) + 1);
		memcpy(p, "page", 4);
	}
	return out;
}

static bool
refusals_counted(void *arg)
{
	return metric_value(eb.b_url, "sandcell_egress_refused_total") >= *(double *)arg;
}

/*
 * Python: a name that cannot exist looked up as any program looks one up
 * (getaddrinfo, through the resolvers of the box's /etc/resolv.conf): "no
 * such name" is the resolver's answer (its way is open), "no answer" that it
 * could not be reached; "no resolver" if the box names none it can use. The
 * test sends nothing else outside the machine: whether a resolver's other
 * ports are refused is the private stand-in's case (10.99.0.1), never probed
 * at a real resolver's address.
 */
static const char dns_py[] =
    "import ipaddress, socket\n"
    "ns = [l.split()[1] for l in open('/etc/resolv.conf') if "
    "l.startswith('nameserver')]\n"
    "ns = [a for a in ns if ipaddress.ip_address(a).version == 4 and\n"
    "      not ipaddress.ip_address(a).is_loopback]\n"
    "if not ns:\n"
    "    print('no resolver')\n"
    "else:\n"
    "    try:\n"
    "        socket.getaddrinfo('sandcell.invalid', 80)\n"
    "        print('an answer')\n"
    "    except socket.gaierror as e:\n"
    "        print('no such name' if e.errno == socket.EAI_NONAME else 'no answer', e)\n";

/*
 * Python's, bash's and Deno's way out reach the internet and not the
 * metadata nor the private host, refused at once; the refusals are counted.
 * The host's resolver (a private address here, 10.255.255.53 on this
 * machine's kind) still answers a name's lookup.
 */
static void
default_rules(const char *const *args, uid_t as)
{
	static const char *const langs[] = {"python", "bash", "javascript"};

	standins();
	start(args, as);
	for (int i = 0; i < 3; i++) {
		char *id = context_new(eb.b_url, langs[i], NULL);
		cr_assert_not_null(id, "a %s context", langs[i]);
		char *out = probe(eb.b_url, id, langs[i]);
		cr_expect_str_eq(out, "page\nrefused\nrefused\n", "%s: %s", langs[i],
		                 out);
		free(out);
		free(id);
	}
	/* GET /ready says what is in force */
	struct resp r;
	cr_assert_eq(http(eb.b_url, "GET", "/ready", NULL, &r, 10), 0);
	cr_expect(strstr(r.r_body, "\"egress\"") &&
	              strstr(r.r_body, "\"169.254.0.0/16\""),
	          "/ready: %s", r.r_body);
	resp_free(&r);
	double want = 6; /* two refusals of three languages, at least */
	cr_expect_eq(wait_until(refusals_counted, &want, 10000), 0,
	             "sandcell_egress_refused_total is %g",
	             metric_value(eb.b_url, "sandcell_egress_refused_total"));

	/* DNS: the resolvers the box's /etc/resolv.conf names answer */
	char *py = context_new(eb.b_url, "python", NULL);
	cr_assert_not_null(py);
	char *out = run_stdout(eb.b_url, py, dns_py);
	cr_assert_not_null(out);
	if (strcmp(out, "no resolver\n"))
		cr_expect(!strncmp(out, "no such name", 12), "DNS to the host's resolver: %s", out);
	free(out);

	/* the host's own addresses: a listener of the test's on the host's side of the
	 * link */
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char code[512];
	cr_assert(ls >= 0 && bind(ls, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	          listen(ls, 16) == 0 &&
	          getsockname(ls, (struct sockaddr *)&sa, &sl) == 0);
	snprintf(code, sizeof(code),
	         "import socket, time\n"
	         "t = time.time()\n"
	         "try:\n"
	         "    socket.create_connection(('%.*s.1', %d), 10)\n"
	         "    print('host reached')\n"
	         "except OSError:\n"
	         "    print('host refused' if time.time() - t < 3 else 'host hung')\n",
	         (int)(strrchr(in.in_addr, '.') - in.in_addr), in.in_addr,
	         ntohs(sa.sin_port));
	out = run_stdout(eb.b_url, py, code);
	close(ls);
	cr_expect_str_eq(out, "host refused\n", "the host's address: %s", out);
	free(out);
	free(py);
}

Test(egress, shared_boxes_reach_the_internet_but_not_metadata_or_private_hosts,
     .fini = egress_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};
	default_rules(args, 0);
}

Test(egress, isolated_boxes_reach_the_internet_but_not_metadata_or_private_hosts,
     .fini = egress_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool",  "python=0",
	                      "--isolation",          "context", NULL};
	default_rules(args, 0);
}

Test(egress, rootless_boxes_reach_the_internet_but_not_metadata_or_private_hosts,
     .fini = egress_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0",
	                      "--kernel-memory",      "2G",     NULL};
	struct stat st;

	/* its pasta opens the host's tun device: Debian's 0666, as a root broker makes it
	 */
	if (stat("/dev/net/tun", &st) < 0)
		cr_skip_test("no /dev/net/tun: no way out to test");
	if ((st.st_mode & 0666) != 0666) {
		tun_mode = st.st_mode & 07777;
		cr_assert_eq(chmod("/dev/net/tun", 0666), 0);
	}
	default_rules(args, ROOTLESS_UID);
}

/*
 * An idle proxy reads its box's refusals counter less often (every 15 s
 * instead of every second, 30 s after its kernel last worked: a read lists
 * the whole ruleset), but what a kernel's background code is refused while
 * nothing executes is still counted.
 */
Test(egress, refusals_while_the_kernel_is_idle_are_counted, .fini = egress_stop,
     .timeout = 180)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};
	char code[512];

	standins();
	start(args, 0);
	char *id = context_new(eb.b_url, "python", NULL);
	cr_assert_not_null(id);
	/* after the awake window, a thread tries the metadata stand-in once */
	snprintf(code, sizeof(code),
	         "import threading, time, urllib.request\n"
	         "def late():\n"
	         "    time.sleep(40)\n"
	         "    try:\n"
	         "        urllib.request.urlopen('http://" METADATA ":%d', timeout=5)\n"
	         "    except Exception:\n"
	         "        pass\n"
	         "threading.Thread(target=late, daemon=True).start()\n",
	         in.in_port);
	json_decref(run(eb.b_url, id, code));
	double before = metric_value(eb.b_url, "sandcell_egress_refused_total");
	double want = (before > 0 ? before : 0) + 1;
	cr_expect_eq(wait_until(refusals_counted, &want, 90000), 0,
	             "sandcell_egress_refused_total is %g, was %g",
	             metric_value(eb.b_url, "sandcell_egress_refused_total"), before);
	free(id);
}

/* A context of lang with this "network" (JSON), its id; NULL on failure (status in *st).
 */
static char *
context_with(const char *lang, const char *network, long *st)
{
	char *id = context_new_network(eb.b_url, lang, network, st);

	cr_assert_neq(*st, 0, "POST /contexts: no answer");
	return id;
}

/*
 * --egress-allow opens the private host to every context; a context's
 * lists narrow that: one reaches the private host alone (deny_out all,
 * allow_out it), one nothing; one cannot open the metadata. A warm proxy
 * (the server's rules) is handed to none of them, nor at a restart.
 */
static void
context_rules(const char *isolation)
{
	const char *args[] = {"--no-default-context", "--pool",  "python=1",
	                      "--isolation",          isolation, "--egress-allow",
	                      "10.99.0.0/24",         NULL};
	long st;

	standins();
	start(args, 0);
	char *plain = context_new(eb.b_url, "python", NULL);
	cr_assert_not_null(plain);
	char *out = probe(eb.b_url, plain, "python");
	cr_expect_str_eq(out, "page\nrefused\npage\n", "the server's hole: %s", out);
	free(out);

	char *only = context_with(
	    "python", "{\"deny_out\": [\"0.0.0.0/0\"], \"allow_out\": [\"" PRIVATE "\"]}",
	    &st);
	cr_assert_not_null(only, "%ld", st);
	char *sh = context_with(
	    "bash",
	    "{\"deny_out\": [\"0.0.0.0/0\"], \"allow_out\": [\"" PRIVATE "/32\"]}", &st);
	cr_assert_not_null(sh, "%ld", st);
	out = probe(eb.b_url, sh, "bash");
	cr_expect_str_eq(out, "refused\nrefused\npage\n",
	                 "bash, the private host alone: %s", out);
	free(out);
	out = probe(eb.b_url, only, "python");
	cr_expect_str_eq(out, "refused\nrefused\npage\n",
	                 "python, the private host alone: %s", out);
	free(out);
	/* deny_out all leaves no DNS either: the resolver is refused like the rest */
	out = run_stdout(eb.b_url, only, dns_py);
	cr_assert_not_null(out);
	cr_expect(!strcmp(out, "no resolver\n") || !strncmp(out, "no answer", 9),
	          "DNS under deny_out all: %s", out);
	free(out);

	char *none =
	    context_with("javascript", "{\"deny_out\": [\"0.0.0.0/0\", \"::/0\"]}", &st);
	cr_assert_not_null(none, "%ld", st);
	out = probe(eb.b_url, none, "javascript");
	cr_expect_str_eq(out, "refused\nrefused\nrefused\n", "no way out: %s", out);
	free(out);

	char *wider =
	    context_with("python", "{\"allow_out\": [\"169.254.0.0/16\"]}", &st);
	cr_assert_not_null(wider, "%ld", st);
	out = probe(eb.b_url, wider, "python");
	cr_expect_str_eq(out, "page\nrefused\npage\n",
	                 "a context widened the server's: %s", out);
	free(out);

	/* a restart keeps the context's rules (no warm proxy with the server's) */
	cr_assert_eq(context_post(eb.b_url, only, "restart", 60), 200);
	out = probe(eb.b_url, only, "python");
	cr_expect_str_eq(out, "refused\nrefused\npage\n", "after a restart: %s", out);
	free(out);

	/* bad lists: 400, saying what is wrong */
	static const char *const bad[] = {
	    "{\"deny_out\": [\"10.99.0.1/24\"]}",
	    "{\"deny_out\": [\"example.com\"]}",
	    "{\"deny_out\": \"0.0.0.0/0\"}",
	    "{\"allowOut\": []}",
	    "{\"deny_out\": [\"::1/129\"]}",
	    "{\"deny_out\": [\"1.2.3.4/\"]}",
	    "[\"0.0.0.0/0\"]",
	    "{\"deny_out\": [42]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *id = context_with("python", bad[i], &st);
		cr_expect_null(id, "%s was taken", bad[i]);
		cr_expect_eq(st, 400, "%s: %ld", bad[i], st);
		free(id);
	}
	free(plain);
	free(only);
	free(sh);
	free(none);
	free(wider);
}

Test(egress, a_contexts_network_narrows_the_servers_rules_shared, .fini = egress_stop,
     .timeout = 300)
{
	context_rules("shared");
}

Test(egress, a_contexts_network_narrows_the_servers_rules_isolated, .fini = egress_stop,
     .timeout = 300)
{
	context_rules("context");
}

/*
 * The kernel cannot take the rules down: nft (nfnetlink) refuses it, as do
 * route and address changes; the metadata stays refused after it tried.
 */
Test(egress, a_kernel_cannot_remove_the_rules, .fini = egress_stop, .timeout = 180)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};

	standins();
	start(args, 0);
	char *id = context_new(eb.b_url, "python", NULL);
	cr_assert_not_null(id);
	char *out = run_stdout(
	    eb.b_url, id,
	    "import os, socket, subprocess\n"
	    "for fd in map(int, os.listdir('/proc/self/fd')):\n"
	    "    try:\n"
	    "        s = socket.socket(fileno=os.dup(fd))\n"
	    "    except OSError:\n"
	    "        continue\n"
	    "    if s.family == socket.AF_NETLINK:\n"
	    "        print('a netlink socket at fd', fd, 'ok')\n"
	    "    s.close()\n"
	    "try:\n"
	    "    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12).close()\n"
	    "    print('netfilter socket opened')\n"
	    "except OSError as e:\n"
	    "    print('netfilter socket refused')\n"
	    "for cmd in ['nft flush ruleset', 'nft delete table inet sandcell',\n"
	    "            'ip route del default', 'ip link set eth0 down']:\n"
	    "    try:\n"
	    "        r = subprocess.run(cmd.split(), capture_output=True)\n"
	    "        print(cmd, 'ok' if r.returncode == 0 else 'failed')\n"
	    "    except FileNotFoundError:\n"
	    "        print(cmd, 'failed')\n");
	cr_assert_not_null(out);
	cr_expect_eq(strstr(out, " ok\n"), NULL, "a kernel changed the network: %s", out);
	free(out);
	out = probe(eb.b_url, id, "python");
	cr_expect_str_eq(out, "page\nrefused\nrefused\n", "after the kernel tried: %s",
	                 out);
	free(out);
	free(id);
}

struct respawn {
	const char *id;
	pid_t old;
};

/* Its proxy is another, and its kernel is ready again. */
static bool
respawned(void *arg)
{
	struct respawn *rs = arg;
	pid_t now = context_pid(eb.b_url, rs->id, "proxy_pid");
	json_t *c;
	bool idle;

	if (now <= 0 || now == rs->old || !(c = context_get(eb.b_url, rs->id)))
		return false;
	idle = !strcmp(json_string_value(json_object_get(c, "state")) ?: "", "idle");
	json_decref(c);
	return idle;
}

/*
 * A context's rules are its proxy's: a broker restarted under
 * --keep-contexts learns them from the proxy it re-attaches (GET
 * /contexts/{id} shows them), and a proxy respawned after that (killed
 * here) gets them again.
 */
Test(egress, a_contexts_rules_outlive_a_broker_restart_and_a_proxy_respawn,
     .fini = egress_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0",
	                      "--keep-contexts", NULL};
	long st;

	standins();
	start(args, 0);
	char *id = context_with("python", "{\"deny_out\": [\"0.0.0.0/0\"]}", &st);
	cr_assert_not_null(id, "%ld", st);
	char *out = probe(eb.b_url, id, "python");
	cr_expect_str_eq(out, "refused\nrefused\nrefused\n", "deny_out all: %s", out);
	free(out);

	kill(eb.b_pid, SIGKILL);
	waitpid(eb.b_pid, NULL, 0);
	cr_assert_eq(broker_restart(&eb, args), 0);
	json_t *c = context_get(eb.b_url, id);
	cr_assert_not_null(c);
	json_t *deny = json_object_get(json_object_get(c, "network"), "deny_out");
	cr_expect_str_eq(json_string_value(json_array_get(deny, 0)), "0.0.0.0/0",
	                 "the re-attached context's network: %s", json_dumps(c, 0));
	json_decref(c);

	pid_t proxy = context_pid(eb.b_url, id, "proxy_pid");
	cr_assert_gt(proxy, 0);
	kill(proxy, SIGKILL);
	struct respawn rs = {id, proxy};
	cr_assert_eq(wait_until(respawned, &rs, 60000), 0, "the proxy was not respawned");
	out = probe(eb.b_url, id, "python");
	cr_expect_str_eq(out, "refused\nrefused\nrefused\n", "after a respawn: %s", out);
	free(out);
	free(id);
}

/* pasta (or passt.avx2, as the CPU may have it run) among pid's descendants; 0: none. */
static pid_t
pasta_under(pid_t pid)
{
	char path[64], name[64];
	pid_t found = 0;

	for (pid_t p = 2; p < 4194304 && !found; p++) {
		snprintf(path, sizeof(path), "/proc/%d/comm", (int)p);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		bool named = fgets(name, sizeof(name), f) && !strncmp(name, "pas", 3);
		fclose(f);
		for (pid_t a = p; named && a > 1; a = (pid_t)proc_stat_field(a, 4))
			if (a == pid)
				found = p;
	}
	return found;
}

struct pasta_wait {
	pid_t broker, old;
};

static bool
pasta_again(void *arg)
{
	struct pasta_wait *w = arg;
	pid_t p = pasta_under(w->broker);

	return p > 0 && p != w->old;
}

static bool
page_again(void *arg)
{
	char *out = probe(eb.b_url, arg, "python");
	bool ok = !strcmp(out, "page\nrefused\nrefused\n");

	free(out);
	return ok;
}

/* Whether context arg reaches the stand-in's IPv6 address (where there is IPv6). */
static bool
page6(void *arg)
{
	char code[256], *out;
	bool ok;

	if (!inet_v6_out(&in))
		return true;
	snprintf(
	    code, sizeof(code),
	    "import urllib.request\ntry:\n"
	    "    print(urllib.request.urlopen('%s', timeout=5).read().decode().strip())\n"
	    "except Exception as e:\n    print('no: %%r' %% e)\n",
	    in.in_url6);
	out = run_stdout(eb.b_url, arg, code);
	ok = out && !strcmp(out, INET_PAGE "\n");
	free(out);
	return ok;
}

/*
 * A root broker's boxes go out through one pasta (the uplink's): when it
 * dies, it is started again and the boxes it served go out again; a broker
 * killed and restarted under --keep-contexts finds the uplink its kept boxes
 * use, and a box made after the restart goes out through it too. The egress
 * rules hold throughout; IPv6 comes back too, where the host has it.
 */
Test(egress, the_shared_way_out_survives_pasta_ending_and_a_broker_restart,
     .fini = egress_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", "--keep-contexts",
	                      NULL};

	standins();
	start(args, 0);
	char *id = context_new(eb.b_url, "python", NULL);
	cr_assert_not_null(id);
	char *out = probe(eb.b_url, id, "python");
	cr_expect_str_eq(out, "page\nrefused\nrefused\n", "at first: %s", out);
	free(out);
	cr_expect(page6(id), "IPv6 at first");

	struct pasta_wait w = {eb.b_pid, pasta_under(eb.b_pid)};
	cr_assert_gt(w.old, 0, "no pasta under the broker");
	cr_assert_eq(kill(w.old, SIGKILL), 0);
	cr_assert_eq(wait_until(pasta_again, &w, 20000), 0, "pasta was not started again");
	cr_expect_eq(wait_until(page_again, id, 60000), 0, "no way out after pasta's restart");
	cr_expect_eq(wait_until(page6, id, 20000), 0, "no IPv6 after pasta's restart");

	kill(eb.b_pid, SIGKILL);
	waitpid(eb.b_pid, NULL, 0);
	cr_assert_eq(broker_restart(&eb, args), 0);
	out = probe(eb.b_url, id, "python");
	cr_expect_str_eq(out, "page\nrefused\nrefused\n", "the kept box after a restart: %s", out);
	free(out);
	char *later = context_new(eb.b_url, "python", NULL);
	cr_assert_not_null(later);
	out = probe(eb.b_url, later, "python");
	cr_expect_str_eq(out, "page\nrefused\nrefused\n", "a box made after the restart: %s", out);
	free(out);
	cr_expect(page6(id) && page6(later), "IPv6 after the broker's restart");
	free(later);
	free(id);
}

/*
 * No box takes the shared way out from the others: past 4096 flows of its
 * own at once (UDP ones here, each to another port of the stand-in
 * internet), a box's next connection is refused at once, while another
 * box's goes through.
 */
Test(egress, a_box_with_too_many_flows_is_refused_and_its_neighbour_is_not,
     .fini = egress_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};
	char code[1024];

	standins();
	start(args, 0);
	char *hog = context_new(eb.b_url, "python", NULL),
	     *other = context_new(eb.b_url, "python", NULL);
	cr_assert(hog && other);
	snprintf(code, sizeof(code),
	         "import socket, urllib.request\n"
	         "for i in range(4200):\n"
	         "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
	         "    s.sendto(b'x', ('%s', 20000 + i))\n"
	         "    s.close()\n"
	         "try:\n"
	         "    urllib.request.urlopen('%s', timeout=10).read()\n"
	         "    print('reached')\n"
	         "except Exception as e:\n"
	         "    print('refused')\n",
	         in.in_addr, in.in_url);
	char *out = run_stdout(eb.b_url, hog, code);
	cr_expect_str_eq(out, "refused\n", "the box past its flows: %s", out);
	free(out);
	out = probe(eb.b_url, other, "python");
	cr_expect_str_eq(out, "page\nrefused\nrefused\n", "its neighbour: %s", out);
	free(out);
	free(hog);
	free(other);
}

/*
 * The server's own lists: no internet (SANDCELL_EGRESS_DENY, as an image
 * sets it) but a package mirror (--egress-allow), for every context: the
 * longer prefix decides.
 */
Test(egress, the_server_denies_the_internet_and_opens_a_mirror, .fini = egress_stop,
     .timeout = 120)
{
	const char *args[] = {"--no-default-context", "--pool",       "python=0",
	                      "--egress-allow",       "10.99.0.0/24", NULL};

	standins();
	setenv("SANDCELL_EGRESS_DENY", "0.0.0.0/0, ::/0", 1);
	start(args, 0);
	unsetenv("SANDCELL_EGRESS_DENY");
	char *id = context_new(eb.b_url, "python", NULL);
	cr_assert_not_null(id);
	char *out = probe(eb.b_url, id, "python");
	cr_expect_str_eq(out, "refused\nrefused\npage\n", "the mirror alone: %s", out);
	free(out);
	free(id);
}

/*
 * A loopback resolver of the host's (systemd-resolved's 127.0.0.53 stub, a
 * local dnsmasq): the test's broker runs in a mount namespace of the
 * test's own where /etc/resolv.conf names only it, and a stand-in of the
 * test's answers there (the machine's own /etc/resolv.conf is untouched;
 * nothing is sent outside the machine).
 */
#define DNS_NAME INET_DNS_NAME
#define DNS_ADDR INET_DNS_ADDR

static pid_t dns_pid;
static char dns_dir[64];

static void
dns_stop(void)
{
	if (dns_pid > 0) {
		kill(dns_pid, SIGKILL);
		waitpid(dns_pid, NULL, 0);
	}
	dns_pid = 0;
	egress_stop();
	if (dns_dir[0]) {
		char cmd[96];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dns_dir);
		cr_expect_eq(system(cmd), 0, "%s", cmd);
	}
	dns_dir[0] = '\0';
}

/* The stand-in resolver at addr:53 (UDP), a child of the test's; 0, or -1 if the port is taken. */
static int
dns_standin(const char *addr)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(53)};
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, addr, &sa.sin_addr);
	if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (s >= 0)
			close(s);
		return -1;
	}
	dns_pid = inet_dns_serve(s);
	close(s);
	return dns_pid > 0 ? 0 : -1;
}

/*
 * link: the broker's /etc/resolv.conf is a link to a file the box does not
 * show (an Ubuntu's, into /run/systemd; here into the test's dir in /tmp),
 * else a file. Its /etc is a copy of the machine's, with the test's
 * resolv.conf, bound over /etc in a mount namespace of the test's own.
 */
static void
loopback_resolver(const char *const *args, uid_t as, bool link)
{
	const char *ns = "127.0.0.53";
	char code[1024];

	standins();
	if (dns_standin(ns) < 0) /* a resolved of the machine's own: another loopback address */
		cr_assert_eq(dns_standin(ns = "127.0.0.153"), 0, "a stand-in resolver");
	cr_assert_eq(inet_resolv_conf(dns_dir, sizeof(dns_dir), ns, link), 0,
	             "the test's /etc naming %s (%s): %s", ns, dns_dir, strerror(errno));
	struct stat st;
	cr_assert(lstat("/etc/resolv.conf", &st) == 0 && !S_ISLNK(st.st_mode) == !link,
	          "/etc/resolv.conf is%s a link", link ? " not" : "");
	start(args, as);

	/* a name looked up as programs do: Python (forked from the template), bash (cold) */
	char *py = context_new(eb.b_url, "python", NULL);
	cr_assert_not_null(py);
	char *out = run_stdout(eb.b_url, py,
	                       "import socket\n"
	                       "print([l.split()[1] for l in open('/etc/resolv.conf') "
	                       "if l.startswith('nameserver')])\n"
	                       "try:\n"
	                       "    print(socket.getaddrinfo('" DNS_NAME "', 80, "
	                       "socket.AF_INET)[0][4][0])\n"
	                       "except OSError as e:\n"
	                       "    print('no answer', e)\n");
	char want[128];
	snprintf(want, sizeof(want), "['%s']\n" DNS_ADDR "\n", ns);
	cr_expect_str_eq(out, want, "Python's lookup through the host's loopback resolver: %s",
	                 out);
	free(out);
	char *sh = context_new(eb.b_url, "bash", NULL);
	cr_assert_not_null(sh);
	out = run_stdout(eb.b_url, sh, "getent hosts " DNS_NAME " || echo no answer");
	cr_assert_not_null(out);
	cr_expect(!strncmp(out, DNS_ADDR " ", strlen(DNS_ADDR " ")) && strstr(out, DNS_NAME),
	          "bash's lookup: %s", out);
	free(out);
	free(sh);

	/* nothing else of the host's loopback: the resolver's address over TCP, another
	 * port of the host's loopback where the test listens */
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, ns, &sa.sin_addr);
	cr_assert(ls >= 0 && bind(ls, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	          listen(ls, 16) == 0 && getsockname(ls, (struct sockaddr *)&sa, &sl) == 0);
	snprintf(code, sizeof(code),
	         "import socket, time\n"
	         "for a in [('%s', 53), ('%s', %d), ('127.0.0.1', %d)]:\n"
	         "    t = time.time()\n"
	         "    try:\n"
	         "        socket.create_connection(a, 10)\n"
	         "        print('reached')\n"
	         "    except OSError:\n"
	         "        print('refused' if time.time() - t < 3 else 'hung')\n",
	         ns, ns, ntohs(sa.sin_port), ntohs(sa.sin_port));
	out = run_stdout(eb.b_url, py, code);
	close(ls);
	cr_expect_str_eq(out, "refused\nrefused\nrefused\n", "the host's loopback: %s", out);
	free(out);
	/* and the metadata, still */
	out = probe(eb.b_url, py, "python");
	cr_expect_str_eq(out, "page\nrefused\nrefused\n", "%s", out);
	free(out);
	free(py);
}

Test(egress, a_loopback_resolver_behind_a_link_answers_and_nothing_else_of_the_hosts_loopback,
     .fini = dns_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};
	loopback_resolver(args, 0, true);
}

Test(egress, a_loopback_resolver_answers_a_rootless_broker_s_boxes, .fini = dns_stop,
     .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0",
	                      "--kernel-memory",      "2G",     NULL};
	struct stat st;

	if (stat("/dev/net/tun", &st) < 0)
		cr_skip_test("no /dev/net/tun: no way out to test");
	if ((st.st_mode & 0666) != 0666) {
		tun_mode = st.st_mode & 07777;
		cr_assert_eq(chmod("/dev/net/tun", 0666), 0);
	}
	loopback_resolver(args, ROOTLESS_UID, false);
}
