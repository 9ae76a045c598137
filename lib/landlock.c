/*
 * landlock.c — the kernel's Landlock domain: what a kernel may touch of the
 * filesystem, and whom it may signal or reach by an abstract Unix socket,
 * through Landlock's own system calls (landlock_create_ruleset,
 * landlock_add_rule, landlock_restrict_self), which need no privilege, only
 * no_new_privs. A second layer under the box's mounts and namespaces: a
 * hole in one is not a hole in the box.
 *
 * The rules are a table (landlock_box): the box's system read-only (execute
 * allowed), read-write only the workspace, /tmp, /dev/shm and the kernel's
 * own dir, and writes to /dev's devices and /proc's files. Whatever the
 * table does not name is closed. From ABI 6 the domain also scopes signals
 * and abstract Unix sockets: a kernel and everything it starts signal only
 * each other (kill -9 -1, pkill -9 -f sandcell, killpg end only the
 * context's processes, never its box's init), and connect only to abstract
 * sockets made in their own domain.
 *
 * The kernel's child applies it right before its exec (or, forked from the
 * template, before Python goes on): every process of a context is in that
 * domain, and the box's init, the proxy and other contexts are not. The
 * rights the running kernel does not know are left out, as the kernel's
 * documentation shows (Documentation/userspace-api/landlock.rst). Raw
 * system calls only (sandbox.c says why).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/landlock.h>

#include "lib.h"

/* Rights and fields of ABI 3 to 6, where the system's headers predate them
 * (Linux 6.12's). */
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif

/* struct landlock_ruleset_attr as of ABI 6 (it grows; its size tells the kernel which).
 */
struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net; /* ABI 4; none handled: TCP stays the network's */
	uint64_t scoped;             /* ABI 6 */
};

#define LL_READ                                                                          \
	(LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE |                     \
	 LANDLOCK_ACCESS_FS_READ_DIR)
#define LL_FILES (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE)
#define LL_WRITE                                                                         \
	(LL_READ | LL_FILES | LANDLOCK_ACCESS_FS_REMOVE_DIR |                            \
	 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_DIR |                  \
	 LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK |                    \
	 LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_SYM |                    \
	 LANDLOCK_ACCESS_FS_REFER)
/* every right a domain handles: what no rule grants is refused (devices are never made)
 */
#define LL_HANDLED                                                                       \
	(LL_WRITE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK |       \
	 LANDLOCK_ACCESS_FS_IOCTL_DEV)

/*
 * The box's rules, at the paths its kernel sees (boxroot.c's view). Its root
 * holds only what the box shows, the token covered: all of it may be read.
 */
const struct landlock_rule landlock_box[] = {
    {"/", LL_READ},       /* the system, its files */
    {BOX_HOME, LL_WRITE}, /* the workspace */
    {BOX_ROOT, LL_WRITE}, /* the workspace's BOX_ROOT_DIR */
    {"/tmp", LL_WRITE},   /* its own, /var/tmp's too */
    {"/dev", LL_READ | LL_FILES | LANDLOCK_ACCESS_FS_IOCTL_DEV}, /* null, tty, pts... */
    {"/dev/shm", LL_WRITE},                                      /* POSIX shared memory */
    {"/proc", LL_READ | LL_FILES},                               /* /proc/self/comm... */
    {BOX_KDIR, LL_WRITE}, /* connection file, profile */
    {NULL, 0},
};

/* The system's parts beside boxview_system, as a host has them (boxroot.c's links). */
static const char *const system_links[] = {"/bin",   "/sbin",  "/lib",
                                           "/lib32", "/lib64", "/libx32"};
/* Of the host's /dev, what a box's shows (boxroot.c's devices); its shm is a row above.
 */
static const char *const host_devices[] = {"/dev/null",   "/dev/zero",    "/dev/full",
                                           "/dev/random", "/dev/urandom", "/dev/tty",
                                           "/dev/pts"};

/*
 * The rules of a box without namespaces, at the host's paths, which its
 * kernel sees: the box's table without its root (the host's holds the run
 * dir, the broker's files, other workspaces) and without /tmp (everyone's
 * here: the kernel's is in its own dir), with the workspace home and its own
 * dir kdir for BOX_HOME and BOX_KDIR, the system's parts (boxview_system)
 * and each of reads (NULL-ended: what it is started from) read-only. Of
 * /dev, the devices a box shows; /proc read-only (the host's shows every
 * process of the uid, other contexts' too). Caller-freed (the paths are the
 * caller's).
 */
struct landlock_rule *
landlock_host(const char *home, const char *kdir, const char *const *reads)
{
	size_t n = 0, max = 32;
	struct landlock_rule *r = xmalloc(max * sizeof(*r));

	for (const struct landlock_rule *b = landlock_box; b->lr_path && n < max - 1;
	     b++) {
		/* BOX_ROOT: the workspace's BOX_ROOT_DIR, beneath home */
		if (!strcmp(b->lr_path, "/") || !strcmp(b->lr_path, "/tmp") ||
		    !strcmp(b->lr_path, BOX_ROOT))
			continue;
		if (!strcmp(b->lr_path, "/dev")) {
			for (size_t i = 0;
			     i < sizeof(host_devices) / sizeof(*host_devices) &&
			     n < max - 1;
			     i++)
				r[n++] =
				    (struct landlock_rule){host_devices[i], b->lr_access};
			continue;
		}
		r[n] = *b;
		if (!strcmp(b->lr_path, BOX_HOME))
			r[n].lr_path = home;
		else if (!strcmp(b->lr_path, BOX_KDIR))
			r[n].lr_path = kdir;
		else if (!strcmp(b->lr_path, "/proc"))
			r[n].lr_access = LL_READ;
		n++;
	}
	for (const char *const *s = boxview_system; *s && n < max - 1; s++)
		r[n++] = (struct landlock_rule){*s, LL_READ};
	for (size_t i = 0;
	     i < sizeof(system_links) / sizeof(*system_links) && n < max - 1; i++)
		r[n++] = (struct landlock_rule){system_links[i], LL_READ};
	for (; reads && *reads && n < max - 1; reads++)
		r[n++] = (struct landlock_rule){*reads, LL_READ};
	r[n] = (struct landlock_rule){NULL, 0};
	return r;
}

/* The kernel's Landlock ABI version: 0 without Landlock (not built, or disabled). */
int
landlock_abi(void)
{
	long v = syscall(SYS_landlock_create_ruleset, NULL, 0,
	                 LANDLOCK_CREATE_RULESET_VERSION);

	return v < 0 ? 0 : (int)v;
}

/* The rights of ABI abi among want (the documentation's degradation). */
static uint64_t
known(int abi, uint64_t want)
{
	if (abi < 2)
		want &= ~LANDLOCK_ACCESS_FS_REFER;
	if (abi < 3)
		want &= ~LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi < 5)
		want &= ~LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return want;
}

/* The rule of one path (skipped where the path is absent): 0 or -errno. */
static int
add_path(int ruleset, int abi, const struct landlock_rule *r)
{
	struct landlock_path_beneath_attr pb = {.allowed_access =
	                                            known(abi, r->lr_access)};
	int fd = open(r->lr_path, O_PATH | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	/* rights a file cannot have (a path of the table that is not a directory) */
	struct stat st;
	if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
		pb.allowed_access &= LANDLOCK_ACCESS_FS_EXECUTE | LL_FILES |
		                     LANDLOCK_ACCESS_FS_READ_FILE |
		                     LANDLOCK_ACCESS_FS_IOCTL_DEV;
	pb.parent_fd = fd;
	if (syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) <
	    0)
		rc = -errno;
	close(fd);
	return rc;
}

/*
 * This process (and what it starts) into a Landlock domain that scopes
 * signals (and, with sockets, abstract sockets) alone, no file rule. A box's
 * init without namespaces (sockets too), so that its kill(-1) at the end
 * reaches its box's processes (the kernel's domain is nested in it) and
 * nothing else of its uid's; a command envd starts (signals only: commands
 * may still meet at an abstract socket), so that its kill(-1) reaches its
 * own processes, never the agent or another command. 0; -ENOTSUP below ABI
 * 6 (nothing changed); or -errno.
 */
int
landlock_scope(bool sockets)
{
	struct ll_ruleset_attr attr = {
	    .scoped = LANDLOCK_SCOPE_SIGNAL |
	              (sockets ? LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET : 0)};
	int ruleset, rc = 0;

	if (landlock_abi() < 6)
		return -ENOTSUP;
	if ((ruleset = syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0)) < 0)
		return -errno;
	if (syscall(SYS_landlock_restrict_self, ruleset, 0) < 0)
		rc = -errno;
	close(ruleset);
	return rc;
}

/*
 * This process (and what it starts) into a new Landlock domain of rules
 * (ended by a NULL path), with signals and abstract sockets scoped to it
 * where the kernel can (ABI 6). no_new_privs must be set. 0; -ENOTSUP
 * without Landlock, or with ABI 1 only (nothing changed); or -errno of the
 * step that failed.
 */
int
landlock_enter(const struct landlock_rule *rules)
{
	int abi = landlock_abi(), ruleset, rc = 0;
	struct ll_ruleset_attr attr = {.handled_access_fs = known(abi, LL_HANDLED)};

	/* ABI 1 refuses every rename or link between directories (pip's, git's):
	 * no domain rather than a box its kernels cannot install into */
	if (abi < 2)
		return -ENOTSUP;
	if (abi >= 6)
		attr.scoped = LANDLOCK_SCOPE_SIGNAL | LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET;
	/* an older kernel takes the larger struct while what it does not know is zero */
	if ((ruleset = syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0)) < 0)
		return -errno;
	for (const struct landlock_rule *r = rules; rc == 0 && r->lr_path; r++)
		rc = add_path(ruleset, abi, r);
	if (rc == 0 && syscall(SYS_landlock_restrict_self, ruleset, 0) < 0)
		rc = -errno;
	close(ruleset);
	return rc;
}
