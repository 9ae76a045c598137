/*
 * uplink.c — sandcell-proxy --uplink-serve: the way out of every box of a
 * root broker, one process and one pasta for them all, where a pasta per
 * box cost ~29 MB each (docs/PERFORMANCE.md). Its network namespace is
 * made as a box's is (boxnet_owned: owned by --net-uid, pasta as that uid
 * in it); each box's namespace is linked to it by a veth pair (boxlink.c).
 *
 * Its nftables rules, in its own namespace (the host's firewall is not
 * touched): from a box's link, forwarded to the way out (pasta's eth0)
 * alone, masqueraded there; back to a box, only what answers it; nothing
 * from one box to another, nothing from a box to the uplink itself, nothing
 * in from the way out. A box's own egress rules (boxfw.c) stay in its own
 * namespace, as without the uplink. The rules hold for IPv4 and IPv6 alike
 * (table inet), and count a box's flows by its link, whatever the family;
 * a box's neighbour discovery reaches the uplink (as its ARP does), nothing
 * else of it. IPv4 forwarding is on per interface (pasta's eth0 here, each
 * box's end in boxlink.c), through rtnetlink: net.ipv4.ip_forward is not
 * needed, nor a writable /proc/sys (a container's, systemd's
 * ProtectKernelTunables). IPv6's has no such switch (the kernel forwards
 * IPv6 on net.ipv6.conf.all.forwarding alone, a sysctl and nothing else):
 * it is written in our namespace, through a procfs of our own where /proc/sys
 * is read-only; where that fails too, said, and boxes get IPv4 alone
 * (boxlink.c looks). So do they where pasta has no IPv6 (the host has no
 * IPv6 default route).
 *
 * pasta ending is said and pasta started again, in the same namespace: the
 * boxes' links stay. The holder ending (the namespace gone) ends the uplink,
 * and the broker starts another (broker/uplink.c). It outlives a broker
 * stopped under --keep-contexts (its boxes' way out), for the next one; with
 * no broker of its run dir and no box linked, it ends.
 */
#include <errno.h>
#include <net/if.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nftables/libnftables.h>

#include "proxy.h"

#define UPLINK_RESTART_MS 1000 /* between two starts of pasta */
#define UPLINK_IDLE_S 5        /* how often it looks for a broker and boxes */
#define UPLINK_NET_MS 3000     /* pasta makes its eth0 in ~30 ms */
#define UPLINK_NET6_MS 1000    /* and its IPv6 route with the rest, at once */

/*
 * A segment of pasta's conntrack does not take for a box's (this pasta sends
 * window updates without ACK) is dropped, not answered: the uplink's own
 * stack would reset the box's connection in pasta.
 *
 * UPLINK_BOX_FLOWS: a box's connections through the uplink at once (TCP and
 * UDP flows, IPv4 and IPv6 together, by its link): past it a new one is
 * refused, so that no box takes the whole of the connection tracking and
 * pasta's flows from the others.
 */
#define UPLINK_BOX_FLOWS "4096"
static const char rules[] =
    "add table inet sandcell_uplink\n"
    "add set inet sandcell_uplink boxes { type iface_index; size 65535; flags dynamic; "
    "}\n"
    "add chain inet sandcell_uplink input { type filter hook input priority 0; "
    "policy accept; }\n"
    "add rule inet sandcell_uplink input iifname \"sb*\" icmpv6 type "
    "{ nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255 accept\n"
    "add rule inet sandcell_uplink input iifname \"sb*\" drop\n"
    "add rule inet sandcell_uplink input iifname \"eth0\" ct state invalid drop\n"
    "add chain inet sandcell_uplink forward { type filter hook forward priority 0; "
    "policy drop; }\n"
    "add rule inet sandcell_uplink forward iifname \"sb*\" ct state new "
    "add @boxes { meta iif ct count over " UPLINK_BOX_FLOWS " } reject\n"
    "add rule inet sandcell_uplink forward iifname \"sb*\" oifname \"eth0\" accept\n"
    "add rule inet sandcell_uplink forward iifname \"eth0\" oifname \"sb*\" "
    "ct state established,related accept\n"
    "add chain inet sandcell_uplink out { type nat hook postrouting priority 100; }\n"
    "add rule inet sandcell_uplink out iifname \"sb*\" oifname \"eth0\" masquerade\n";

/* The rules above, in our namespace. */
static int
configure(void)
{
	struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
	int rc;

	if (!nft)
		return -ENOMEM;
	nft_ctx_buffer_error(nft);
	rc = nft_run_cmd_from_buffer(nft, rules);
	if (rc)
		log_err("uplink: nftables: %s", nft_ctx_get_error_buffer(nft));
	nft_ctx_free(nft);
	return rc ? -EIO : 0;
}

/* net.ipv6.conf.all.forwarding in our namespace, through the procfs at proc. */
static int
v6_forwarding_at(const char *proc)
{
	char *path = xasprintf("%s/sys/net/ipv6/conf/all/forwarding", proc);
	int rc = write_text(path, "1");

	free(path);
	return rc;
}

/*
 * IPv6 forwarding in our namespace (a new one's is off): through /proc/sys,
 * else (read-only) through a procfs mounted in a mount namespace of a
 * child's own, which the sysctl's namespace (the opener's network one) is
 * ours in. Said if neither: then boxes have IPv4 alone.
 */
static void
v6_forwarding(void)
{
	int rc = v6_forwarding_at("/proc"), status = 0;
	pid_t p;

	if (rc == 0 || rc == -ENOENT) /* ENOENT: no IPv6 in this kernel */
		return;
	if ((p = fork()) == 0) {
		if (unshare(CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		          NULL) < 0)
			_exit(errno & 0x7f);
		_exit(-v6_forwarding_at("/proc") & 0x7f);
	}
	while (p > 0 && waitpid(p, &status, 0) < 0 && errno == EINTR)
		;
	if (p > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return;
	log_warn("uplink: IPv6 forwarding could not be turned on (/proc/sys: %s; a "
	         "procfs of its own: %s): the boxes have IPv4 alone",
	         strerror(-rc),
	         p < 0               ? strerror(errno)
	         : WIFEXITED(status) ? strerror(WEXITSTATUS(status))
	                             : "killed");
}

/*
 * pasta's IPv6 default route in our namespace, where the host has one: a
 * box linked before it came would get IPv4 alone (boxlink.c). Said if it
 * does not come.
 */
static void
v6_routed(void)
{
	uint64_t until = now_ms() + UPLINK_NET6_MS;
	int here = hostnet_enter();
	bool host;

	if (here < 0)
		return;
	host = route6_default();
	hostnet_leave(here);
	while (host && !route6_default() && now_ms() < until)
		usleep(10000);
	if (host && !route6_default())
		log_warn("uplink: pasta gave it no IPv6 default route, though the host "
		         "has one: boxes linked now have IPv4 alone");
}

/*
 * Forwarding on pasta's eth0, once pasta has made it (the boxes' ends get
 * theirs from boxlink.c), through rtnetlink: a pasta started again makes a
 * new eth0, which takes net.ipv4.conf.default's, whatever that is.
 */
static int
way_out_forwards(void)
{
	uint64_t until = now_ms() + UPLINK_NET_MS;
	int rc;

	while ((rc = boxlink_forwarding("eth0")) == -ENODEV && now_ms() < until)
		usleep(10000);
	if (rc < 0)
		log_err("uplink: forwarding on pasta's eth0: %s", strerror(-rc));
	return rc;
}

/* Whether a box's link is in our namespace. */
static bool
linked(void)
{
	struct if_nameindex *ifs = if_nameindex(), *i;
	bool any = false;

	if (!ifs)
		return true; /* unknown: stay */
	for (i = ifs; i->if_index && !any; i++)
		any = !strncmp(i->if_name, "sb", 2);
	if_freenameindex(ifs);
	return any;
}

/*
 * Whether a broker holds run_dir's lock (config.c's flock), read from
 * /proc/locks: taking it, even for a moment, would fail a broker starting.
 */
static bool
broker_alive(const char *run_dir)
{
	char *path = xasprintf("%s/broker.lock", run_dir), line[256];
	struct stat st;
	bool yes = false;
	FILE *f;

	if (stat(path, &st) < 0 || !(f = fopen("/proc/locks", "re"))) {
		free(path);
		return true; /* unknown: stay */
	}
	free(path);
	while (!yes && fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		unsigned long long ino;
		char *p = strstr(line, "FLOCK");
		yes = p &&
		      sscanf(p, "FLOCK %*s %*s %*d %x:%x:%llu", &maj, &min, &ino) == 3 &&
		      ino == (unsigned long long)st.st_ino &&
		      makedev(maj, min) == st.st_dev;
	}
	fclose(f);
	return yes;
}

/* pasta again, from the host's namespace, where it takes the way out. */
static int
restart_pasta(struct box *bx, int alive)
{
	int here = hostnet_enter(), rc = 0;

	if (here < 0) {
		log_err("uplink: the host's network namespace: %s", strerror(-here));
		return here;
	}
	if ((bx->bx_pasta = boxnet_pasta(bx->bx_net_uid, bx->bx_net_holder, alive)) < 0) {
		rc = -errno;
		log_err("uplink: pasta: %s", strerror(errno));
	}
	hostnet_leave(here);
	return rc;
}

/*
 * The uplink's life: its namespace and pasta, its rules, then pasta kept
 * running, until no broker of run_dir runs and no box is linked (a broker
 * killed, not stopped, leaves it). An exit status.
 */
int
uplink_run(struct box *bx, const char *run_dir)
{
	int life[2], status, rc;
	sigset_t chld;
	pid_t pid;

	bx->bx_id = "uplink";
	bx->bx_net = BOX_NET_OUTBOUND;
	bx->bx_uplink = 0;
	if (!bx->bx_net_uid || !run_dir || pipe2(life, O_CLOEXEC) < 0)
		return 2;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	hostnet_keep(); /* pasta, started again, takes the way out of the host's namespace
	                 */
	if ((rc = boxnet_owned(bx)) < 0) {
		log_err("uplink: its network namespace: %s", strerror(-rc));
		return 1;
	}
	if (configure() < 0 || way_out_forwards() < 0)
		return 1;
	v6_forwarding(); /* these two said if not */
	v6_routed();
	if (write(3, "r", 1) != 1) /* the broker waits for it */
		return 1;
	close(3);
	log_info("uplink: ready (holder %d, pasta %d, uid %u)", (int)bx->bx_net_holder,
	         (int)bx->bx_pasta, (unsigned)bx->bx_net_uid);
	for (;;) {
		struct timespec idle = {UPLINK_IDLE_S, 0};
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
			if (pid == bx->bx_net_holder) {
				log_err(
				    "uplink: the namespace's holder ended (status %d)",
				    status);
				return 1;
			}
			if (pid != bx->bx_pasta)
				continue;
			log_warn("uplink: pasta ended (status %d): started again",
			         status);
			usleep(UPLINK_RESTART_MS * 1000);
			if (restart_pasta(bx, life[0]) < 0)
				return 1;
			way_out_forwards(); /* said if not */
			v6_routed();
		}
		if (!broker_alive(run_dir) && !linked()) {
			log_info("uplink: no broker and no box left: ending");
			return 0;
		}
		sigtimedwait(&chld, NULL, &idle);
	}
}
