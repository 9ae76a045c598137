/*
 * boxnet.c — the network a proxy's boxes see: a network namespace of the
 * proxy's own, which the proxy joins and its boxes inherit (or, forked from
 * the template, join). Nothing a context listens on (its kernel's channels,
 * abstract ipc sockets and TCP ports alike, a server its code starts) is in
 * reach of another context, another broker's, or the host. Outbound
 * connections go out through pasta, user-mode networking: its own TCP/UDP
 * stack turns the namespace's packets into sockets of the host. pasta lets
 * nothing in (-t/-u/-T/-U none) and gives no way to the host's loopback
 * (--no-map-gw); DNS to a resolver there is relayed by the proxy
 * (boxdns.c). --network none: loopback only, no pasta.
 *
 * As root the namespace belongs to a user namespace of its own, owned by
 * bx_net_uid, a uid of --kernel-uid-range no kernel runs as: pasta runs as
 * it (so the broker takes its connections for a context's, peer.c), and a
 * kernel, another uid, has no capability over the network it sits in. A
 * holder process of that uid keeps the namespace while the proxy lives.
 * pasta runs in a pid namespace whose init dies with the proxy, so no
 * pasta outlives its proxy, however that ends. pasta opens /dev/net/tun as
 * that uid: it gets a device node of its own for it.
 *
 * Not root, the proxy makes the namespace itself, in a user namespace that
 * maps its own uid, and a watcher left in the host's namespace runs pasta
 * and ends it with the proxy. Everything here runs before the proxy has a
 * thread (setns and unshare of a user namespace need that).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proxy.h"

#define NET_READY_MS 3000 /* pasta configures the namespace in ~30 ms */

/* Loopback up (a new network namespace's only interface). */
static int
loopback_up(void)
{
	struct ifreq ifr = {0};
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = -1;

	if (s < 0)
		return -1;
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
		rc = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	close(s);
	return rc;
}

/* Reads fd until its other end is closed everywhere. */
static void
wait_eof(int fd)
{
	char c;
	ssize_t n;

	while ((n = read(fd, &c, 1)) != 0)
		if (n < 0 && errno != EINTR)
			return;
}

/*
 * In a helper forked from the proxy that only waits from here on (the
 * holder, pasta's minder, the watcher): its copy of the proxy's heap goes.
 * Those pages are shared with the proxy until the proxy writes or frees
 * them, and then are the helper's alone: ~0.3 MB a context, of memory the
 * helper never reads (and a copy of the proxy's state it has no use for).
 * Nothing after this may use the heap (malloc, stdio): the helper makes
 * only system calls until it ends with _exit.
 */
static void
drop_heap(void)
{
	char buf[4096], *nl;
	size_t have = 0;
	ssize_t n;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	while (fd >= 0 && (n = read(fd, buf + have, sizeof(buf) - 1 - have)) > 0) {
		have += n;
		buf[have] = 0;
		while ((nl = strchr(buf, '\n'))) {
			unsigned long a, b;
			*nl = 0;
			if (strstr(buf, "[heap]") && sscanf(buf, "%lx-%lx", &a, &b) == 2)
				madvise((void *)a, b - a, MADV_DONTNEED);
			have -= nl + 1 - buf;
			memmove(buf, nl + 1, have + 1);
		}
		if (have == sizeof(buf) - 1) /* a line longer than buf: not the heap's */
			have = 0;
	}
	if (fd >= 0)
		close(fd);
}

/*
 * pasta's argv: in through nothing (-t/-u/-T/-U none), the host's loopback
 * out of reach (--no-map-gw), the interface and routes set up in the
 * namespace (--config-net), errors on stderr (the proxy's log), as a
 * foreground child. runas: the uid to run as (root's case), or NULL.
 */
static void __attribute__((noreturn))
exec_pasta(const char *runas, pid_t target)
{
	char pid[16];
	sigset_t none;

	snprintf(pid, sizeof(pid), "%d", (int)target);
	/* the namespace's pid last: "--runas UID PID", or "PID" (the rest unread) */
	const char *argv[] = {"pasta", "--foreground", "--quiet", "--stderr", "--config-net",
			      "--no-map-gw", "-I", "eth0", "-t", "none", "-u", "none", "-T", "none",
			      "-U", "none", runas ? "--runas" : pid, runas ? runas : NULL, pid, NULL};
	/* pasta takes an inherited SIGPIPE of SIG_IGN for a failure to set its own */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null >= 0)
		dup2(null, 0);
	dup2(2, 1);
	syscall(SYS_close_range, 3, ~0U, 0);
	execvp("pasta", (char **)argv);
	dprintf(2, "sandcell-proxy: exec pasta: %s\n", strerror(errno));
	_exit(127);
}

/*
 * Root: pasta, as uid, in a mount namespace of its own whose /dev/net/tun is
 * a node that uid may open (the host's may be root's alone, 0600). Without
 * CAP_MKNOD (a container's defaults, the broker's own user namespace:
 * boxns.c) none can be made: pasta opens the host's, which the broker made
 * 0666 at start.
 */
static void __attribute__((noreturn))
pasta_as(uid_t uid, pid_t target)
{
	char runas[16];
	const char *dir = "/tmp/.sandcell-tun", *node = "/tmp/.sandcell-tun/tun";

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    (mkdir(dir, 0700) < 0 && errno != EEXIST) ||
	    mount("tmpfs", dir, "tmpfs", MS_NOEXEC, "mode=0711,size=4k") < 0 ||
	    (mknod(node, S_IFCHR | 0600, makedev(10, 200)) < 0
		     ? errno != EPERM
		     : chown(node, uid, uid) < 0 || mount(node, "/dev/net/tun", NULL, MS_BIND, NULL) < 0)) {
		dprintf(2, "sandcell-proxy: pasta's /dev/net/tun: %s\n", strerror(errno));
		_exit(126);
	}
	snprintf(runas, sizeof(runas), "%u:%u", (unsigned)uid, (unsigned)uid);
	exec_pasta(runas, target);
}

/*
 * Root: pasta's minder, pid 1 of a pid namespace of its own, a child of the
 * proxy that dies with it (PR_SET_PDEATHSIG: as root all along, nothing
 * clears it; pasta's --runas would). pasta is in the minder's namespace,
 * so the kernel ends it with the minder, however the proxy ended. alive
 * reads EOF once the proxy is gone: the proxy may have died before the
 * minder asked to die with it. The minder's status is pasta's.
 */
pid_t
boxnet_pasta(uid_t uid, pid_t target, int alive)
{
	pid_t m = (pid_t)syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, NULL, NULL, NULL, NULL);
	struct pollfd pf = {.fd = alive, .events = POLLIN};
	int status = 0;
	pid_t p;

	if (m != 0)
		return m;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (poll(&pf, 1, 0) != 0)
		_exit(0);
	if ((p = fork()) == 0)
		pasta_as(uid, target);
	drop_heap();
	while (p > 0 && waitpid(p, &status, 0) < 0 && errno == EINTR)
		;
	_exit(p < 0 ? 126 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

/*
 * Root: the holder, as bx_net_uid. It makes the user and network
 * namespaces, says so on up, and ends when the proxy does (its death
 * signal, or down closed). Dumpable: pasta, its uid, opens its namespaces
 * through /proc.
 */
static void __attribute__((noreturn))
holder(uid_t uid, pid_t proxy, int up, int down)
{
	if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
		_exit(1);
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != proxy || unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
		_exit(1);
	if (write(up, "u", 1) != 1)
		_exit(1);
	close(up);
	drop_heap();
	wait_eof(down); /* the proxy ended */
	_exit(0);
}

/*
 * Root's way: the holder's namespaces, then the proxy joins them. The way
 * out: the broker's uplink (boxlink.c) when it has one, else a pasta of the
 * box's own (and the uplink's own, uplink.c, which starts here too).
 */
int
boxnet_owned(struct box *bx)
{
	int up[2], down[2], netfd = -1, rc = 0;
	char path[64], map[64], c;
	pid_t proxy = getpid(), h, p = 0;

	if (pipe2(up, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(down, O_CLOEXEC) < 0) {
		rc = -errno;
		close(up[0]);
		close(up[1]);
		return rc;
	}
	if ((h = fork()) == 0) {
		close(up[0]);
		close(down[1]);
		holder(bx->bx_net_uid, proxy, up[1], down[0]);
	}
	close(up[1]);
	if (h < 0 || read(up[0], &c, 1) != 1) {
		rc = h < 0 ? -errno : -ECHILD;
		goto out;
	}
	/* root inside is the holder's uid outside: pasta's, which needs its capabilities */
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)bx->bx_net_uid);
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)h);
	if ((rc = write_text(path, map)) < 0)
		goto out;
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)h);
	if ((rc = write_text(path, map)) < 0)
		goto out;
	/* pasta from here, in the host's network namespace, which it takes the way out of */
	if (bx->bx_net == BOX_NET_OUTBOUND && !bx->bx_uplink && (p = boxnet_pasta(bx->bx_net_uid, h, down[0])) < 0) {
		rc = -errno;
		goto out;
	}
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)h);
	if ((netfd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || setns(netfd, CLONE_NEWNET) < 0)
		rc = -errno;
	else if (bx->bx_net == BOX_NET_OUTBOUND && bx->bx_uplink &&
		 boxlink_attach(bx, bx->bx_uplink) < 0)
		bx->bx_net_ready = true; /* said: loopback only, as when pasta fails */
out:
	close(up[0]);
	close(down[0]);
	if (netfd >= 0)
		close(netfd);
	bx->bx_net_holder = h > 0 ? h : 0;
	bx->bx_pasta = p > 0 ? p : 0;
	/* the holder and the minder read EOF on down once we end: down[1] is ours till then */
	if (rc < 0)
		close(down[1]);
	return rc;
}

/*
 * Not root: a watcher stays in the host's namespace and, once the proxy has
 * its own, runs pasta for it and ends it when the proxy ends.
 */
static int
start_own(struct box *bx)
{
	int go[2], rc;
	char map[64], c;
	pid_t proxy = getpid(), w = 0;
	/* read before unshare: in the new namespace they are the overflow ids until mapped */
	unsigned uid = (unsigned)geteuid(), gid = (unsigned)getegid();

	if (bx->bx_net == BOX_NET_OUTBOUND) {
		if (pipe2(go, O_CLOEXEC) < 0)
			return -errno;
		if ((w = fork()) == 0) {
			pid_t p;
			close(go[1]);
			/* no death signal: it must outlive us, to end pasta (EOF on go) */
			if (getppid() != proxy || read(go[0], &c, 1) != 1)
				_exit(0);
			if ((p = fork()) == 0)
				exec_pasta(NULL, proxy);
			drop_heap();
			wait_eof(go[0]); /* the proxy ended */
			if (p > 0)
				kill(p, SIGKILL);
			_exit(0);
		}
		close(go[0]);
		if (w < 0) {
			close(go[1]);
			return -errno;
		}
		bx->bx_net_holder = w;
	}
	if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
		return -errno;
	snprintf(map, sizeof(map), "%u %u 1", uid, uid);
	if ((rc = write_text("/proc/self/setgroups", "deny")) < 0 ||
	    (rc = write_text("/proc/self/uid_map", map)) < 0)
		return rc;
	snprintf(map, sizeof(map), "%u %u 1", gid, gid);
	if ((rc = write_text("/proc/self/gid_map", map)) < 0)
		return rc;
	if (w > 0 && write(go[1], "g", 1) != 1)
		return -EPIPE;
	return 0; /* go[1] stays open until we end: the watcher's signal */
}

/*
 * At the proxy's start, before it has a thread: the network namespace it
 * and its boxes will be in. Unboxed kernels keep the host's network.
 */
int
boxnet_start(struct box *bx)
{
	int rc;

	if (!bx->bx_on || bx->bx_nons) /* without namespaces: the container's network */
		return 0;
	if (bx->bx_net == BOX_NET_OUTBOUND) { /* while we are in the host's namespace */
		boxfw_host();
		boxdns_host();
	}
	if (bx->bx_userns)
		rc = start_own(bx);
	else if (bx->bx_net == BOX_NET_NONE)
		rc = unshare(CLONE_NEWNET) < 0 ? -errno : 0;
	else
		rc = boxnet_owned(bx);
	if (rc == 0 && loopback_up() < 0)
		rc = -errno;
	if (rc < 0) {
		log_err("context %s: the box's network namespace: %s", bx->bx_id, strerror(-rc));
		return rc;
	}
	if ((rc = boxfw_apply(bx)) < 0)
		return rc; /* said */
	if (bx->bx_net == BOX_NET_OUTBOUND)
		boxdns_box(bx); /* a loopback resolver of the host's: relayed */
	return 0;
}

/* A default route in our namespace: pasta has set it up. */
static bool
routed(void)
{
	char line[256];
	FILE *f = fopen("/proc/self/net/route", "re");
	bool yes = false;

	while (f && !yes && fgets(line, sizeof(line), f)) {
		char ifname[32];
		unsigned dest;
		yes = sscanf(line, "%31s %x", ifname, &dest) == 2 && dest == 0 &&
		      strcmp(ifname, "Iface");
	}
	if (f)
		fclose(f);
	return yes;
}

/*
 * Whether the network is there for a kernel's code: loopback at once, the
 * way out once pasta has configured it (or failed, or NET_READY_MS passed:
 * said once, and the context goes on with loopback only).
 */
bool
boxnet_ready(struct box *bx, uint64_t since)
{
	if (!bx->bx_on || bx->bx_net == BOX_NET_NONE || bx->bx_net_ready)
		return true;
	if (routed())
		return bx->bx_net_ready = true;
	/* (not root: the watcher runs pasta, and stands for it) */
	pid_t way = bx->bx_pasta ? bx->bx_pasta : bx->bx_net_holder;
	if (way && kill(way, 0) == 0 && now_ms() < since + NET_READY_MS)
		return false;
	log_warn("context %s: no way out of the box's network (pasta %s): loopback only",
		 bx->bx_id, bx->bx_pasta ? "did not set it up in time" : "did not start");
	return bx->bx_net_ready = true;
}

/* pasta (or the watcher) ended: its status is not the kernel's. */
bool
boxnet_reaped(struct box *bx, pid_t pid, int status)
{
	if (!pid || (pid != bx->bx_pasta && pid != bx->bx_net_holder))
		return false;
	if (pid == bx->bx_pasta) {
		bx->bx_pasta = 0;
		if (!bx->bx_net_ready || WIFSIGNALED(status) || WEXITSTATUS(status))
			log_warn("context %s: pasta ended (status %d): the box has no way out",
				 bx->bx_id, status);
	} else {
		bx->bx_net_holder = 0;
	}
	return true;
}
