/*
 * boxroot.c — the filesystem a box sees, built from nothing up: an empty root
 * of its own (pivot_root) given, one line of box_view each, the system
 * read-only, the workspace at BOX_HOME read-write (and its BOX_ROOT_DIR at
 * BOX_ROOT, root's home as E2B's code expects it), a private /tmp, its own
 * /proc (or the host's with the others' processes hidden: proc_of_host), a
 * minimal /dev, a copy of the kernel's own dir at BOX_KDIR, and what it is
 * started from read-only at the host's paths. No other host path exists
 * inside. Runs in the box's init, before it drops its privileges, with raw
 * system calls only (sandbox.c says why).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proxy.h"

#define STAGE "/tmp" /* where the new root is made, in the init's own mount namespace */

/* What a line of the view makes (box_view). */
enum part {
	P_SYSTEM, P_RESOLV, P_LINK, P_TMPFS, P_DEV, P_PROC, P_HOME, P_ROOT, P_KERNEL, P_BIND, P_HIDE
};
struct part_line {
	enum part pl_kind;
	const char *pl_path; /* in the box */
};

/*
 * The box's view, in the order it is built. System parts that a host lacks
 * are skipped (lib32, libx32); on a merged-/usr host /bin, /sbin and /lib*
 * are its symbolic links into /usr.
 */
static const struct part_line box_view[] = {
	{P_SYSTEM, NULL},          /* boxview_system, read-only: /usr, /etc */
	{P_RESOLV, "/etc/resolv.conf"}, /* where the host's is a link: the file it names */
	{P_LINK, "/bin"},          {P_LINK, "/sbin"},  {P_LINK, "/lib"},
	{P_LINK, "/lib32"},        {P_LINK, "/lib64"}, {P_LINK, "/libx32"},
	{P_TMPFS, "/tmp"},         /* private, --kernel-tmp-size; /var/tmp is a link to it */
	{P_DEV, "/dev"},           /* null zero full random urandom tty, pts, shm */
	{P_PROC, "/proc"},         /* the box's processes only */
	{P_HOME, BOX_HOME},        /* the workspace, read-write: HOME and the default cwd */
	{P_ROOT, BOX_ROOT},        /* the workspace's BOX_ROOT_DIR, read-write (boxview.c) */
	{P_KERNEL, BOX_KDIR},      /* its own dir, a copy in a small tmpfs: connection file,
				    * IPython profile (the kernel writes both) */
	{P_BIND, NULL},            /* the kernel's files and program (bx_binds), read-only */
	{P_HIDE, NULL},            /* the access token, if a part above shows it */
};

static const char *const devices[] = {"null", "zero", "full", "random", "urandom", "tty"};

/* mkdir -p of path (absolute), mode 0755; the last component too. */
static void
mkdirs(const char *path)
{
	char tmp[PATH_MAX];
	size_t n = strlen(path);

	if (n >= sizeof(tmp))
		return;
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(tmp, 0755);
			*p = '/';
		}
	mkdir(tmp, 0755);
}

/* An empty file at path (and its parent dirs): a mount point for a file. */
static void
mkfile(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	int fd;

	if (!slash || (size_t)(slash - path) >= sizeof(dir))
		return;
	memcpy(dir, path, slash - path);
	dir[slash - path] = '\0';
	mkdirs(dir);
	if ((fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0444)) >= 0)
		close(fd);
}

/* STAGE followed by path (in the box). */
static const char *
staged(char out[PATH_MAX], const char *path)
{
	snprintf(out, PATH_MAX, STAGE "%s", path);
	return out;
}

/* /proc/self/fd/N: the source of a bind opened before the stage hid it. */
static const char *
fdpath(char out[32], int fd)
{
	snprintf(out, 32, "/proc/self/fd/%d", fd);
	return out;
}

/* The flags a remount must keep: those a less privileged mount namespace inherits locked. */
static unsigned long
kept_flags(const char *path)
{
	struct statvfs v;
	unsigned long f = 0;

	if (statvfs(path, &v) < 0)
		return 0;
	f |= v.f_flag & ST_NOSUID ? MS_NOSUID : 0;
	f |= v.f_flag & ST_NODEV ? MS_NODEV : 0;
	f |= v.f_flag & ST_NOEXEC ? MS_NOEXEC : 0;
	f |= v.f_flag & ST_NOATIME ? MS_NOATIME : 0;
	f |= v.f_flag & ST_NODIRATIME ? MS_NODIRATIME : 0;
	f |= v.f_flag & ST_RELATIME ? MS_RELATIME : 0;
	return f;
}

/*
 * A bind remounted nosuid and nodev (the box's devices are /dev's alone, and
 * no_new_privs ignores set-uid bits anyway), and read-only unless writable.
 */
static int
remount_bind(const char *path, bool writable)
{
	return mount(NULL, path, NULL,
		     MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (writable ? 0 : MS_RDONLY) |
			     kept_flags(path),
		     NULL);
}

/*
 * Every mount at or below dst read-only: a recursive bind carries the host's
 * submounts (a container's /etc/hosts), which a remount of dst alone leaves
 * writable. mountinfo's fifth field is the mount point (spaces as \040).
 */
static int
ro_tree(const char *dst)
{
	char buf[16384], point[PATH_MAX];
	size_t n = strlen(dst), have = 0;
	ssize_t got;
	int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC), rc = remount_bind(dst, false);

	if (fd < 0)
		return rc;
	while (rc == 0 && (got = read(fd, buf + have, sizeof(buf) - 1 - have)) > 0) {
		char *line = buf, *nl;
		have += got;
		buf[have] = '\0';
		while ((nl = strchr(line, '\n'))) {
			*nl = '\0';
			const char *f = line;
			for (int i = 0; i < 4 && f; i++)
				f = strchr(f, ' ') ? strchr(f, ' ') + 1 : NULL;
			size_t k = 0;
			for (; f && *f && *f != ' ' && k < sizeof(point) - 1; f++)
				if (f[0] == '\\' && f[1] >= '0' && f[1] <= '3' && f[2] && f[3]) {
					point[k++] = (char)((f[1] - '0') * 64 + (f[2] - '0') * 8 + f[3] - '0');
					f += 3;
				} else {
					point[k++] = *f;
				}
			point[k] = '\0';
			if (f && k > n && !strncmp(point, dst, n) && point[n] == '/')
				rc = remount_bind(point, false) < 0 ? -1 : rc;
			line = nl + 1;
		}
		have = strlen(line);
		memmove(buf, line, have);
	}
	close(fd);
	return rc;
}

/* Binds the host's src (an fd opened before the stage) at path in the box, as is. */
static int
bind_raw(int src, const char *path, bool dir)
{
	char dst[PATH_MAX], fdp[32];

	if (src < 0)
		return -1;
	staged(dst, path);
	if (dir)
		mkdirs(dst);
	else
		mkfile(dst);
	return mount(fdpath(fdp, src), dst, NULL, MS_BIND | MS_REC, NULL);
}

/* The same, nosuid and nodev, and read-only (with what is mounted below it) unless writable. */
static int
bind_at(int src, const char *path, bool dir, bool writable)
{
	char dst[PATH_MAX];

	if (bind_raw(src, path, dir) < 0)
		return -1;
	staged(dst, path);
	return writable ? remount_bind(dst, true) : ro_tree(dst);
}

/* /dev: a tmpfs of the device nodes listed in devices[], a pts of its own, links. */
static int
make_dev(const int *devfd, uint64_t shm)
{
	char dst[PATH_MAX], opts[64];

	if (mount("tmpfs", staged(dst, "/dev"), "tmpfs", MS_NOSUID | MS_NOEXEC,
		  "mode=0755,size=64k") < 0)
		return -1;
	for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++) {
		char path[32];
		snprintf(path, sizeof(path), "/dev/%s", devices[i]);
		if (devfd[i] >= 0 && bind_raw(devfd[i], path, false) < 0)
			return -1;
	}
	mkdirs(staged(dst, "/dev/pts"));
	if (mount("devpts", dst, "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=0620") < 0)
		return -1;
	if (symlink("pts/ptmx", staged(dst, "/dev/ptmx")) < 0 ||
	    symlink("/proc/self/fd", staged(dst, "/dev/fd")) < 0 ||
	    symlink("/proc/self/fd/0", staged(dst, "/dev/stdin")) < 0 ||
	    symlink("/proc/self/fd/1", staged(dst, "/dev/stdout")) < 0 ||
	    symlink("/proc/self/fd/2", staged(dst, "/dev/stderr")) < 0)
		return -1;
	mkdirs(staged(dst, "/dev/shm"));
	snprintf(opts, sizeof(opts), "mode=1777,size=%llu", (unsigned long long)shm);
	return mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, opts);
}

/* The kernel's ids as the box's init sees them (in its user namespace, if any). */
static uid_t
inside_uid(const struct box *bx)
{
	return bx->bx_userns ? bx->bx_inuid : bx->bx_uid;
}

static gid_t
inside_gid(const struct box *bx)
{
	return bx->bx_userns ? bx->bx_inuid : bx->bx_gid;
}

struct dirent64 {
	unsigned long long d_ino;
	long long d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* A copy of the tree at src (a dir fd) in dst, files and dirs, the kernel's; depth levels. */
static int
copy_tree(int src, const char *dst, uid_t uid, gid_t gid, int depth)
{
	char ents[2048], path[PATH_MAX], data[4096];
	long n;

	if (src < 0 || depth < 0)
		return -1;
	while ((n = syscall(SYS_getdents64, src, ents, sizeof(ents))) > 0)
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(ents + off);
			off += d->d_reclen;
			if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
				continue;
			if ((size_t)snprintf(path, sizeof(path), "%s/%s", dst, d->d_name) >= sizeof(path))
				return -1;
			int in = openat(src, d->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), out, rc = 0;
			struct stat st;
			if (in < 0 || fstat(in, &st) < 0)
				return -1;
			if (S_ISDIR(st.st_mode)) {
				rc = mkdir(path, 0700) < 0 || chown(path, uid, gid) < 0
					     ? -1
					     : copy_tree(in, path, uid, gid, depth - 1);
			} else if (S_ISREG(st.st_mode)) {
				if ((out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0 ||
				    fchown(out, uid, gid) < 0)
					rc = -1;
				ssize_t got;
				while (rc == 0 && (got = read(in, data, sizeof(data))) > 0)
					rc = write(out, data, got) == got ? 0 : -1;
				if (out >= 0)
					close(out);
			}
			close(in);
			if (rc < 0)
				return -1;
		}
	return n < 0 ? -1 : 0;
}

/* The descriptors of everything the box shows, opened while the host's view is whole. */
struct sources {
	int s_system[8];
	int s_dev[sizeof(devices) / sizeof(devices[0])];
	int s_home, s_root, s_kernel, s_bind[BOX_MAX_BINDS], s_hide, s_resolv;
};

static void
open_sources(const struct box *bx, struct sources *src)
{
	char path[32];

	for (size_t i = 0; i < 8 && boxview_system[i]; i++)
		src->s_system[i] = open(boxview_system[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
	for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++) {
		snprintf(path, sizeof(path), "/dev/%s", devices[i]);
		src->s_dev[i] = open(path, O_PATH | O_CLOEXEC);
	}
	src->s_home = open(bx->bx_workspace, O_PATH | O_DIRECTORY | O_CLOEXEC);
	src->s_root = src->s_home < 0 ? -1
				      : boxview_root_open(src->s_home, inside_uid(bx), inside_gid(bx));
	src->s_kernel = bx->bx_kdir ? open(bx->bx_kdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	for (int i = 0; i < bx->bx_nbinds; i++)
		src->s_bind[i] = boxview_is_system(bx->bx_binds[i].bb_path)
					 ? -1
					 : open(bx->bx_binds[i].bb_path, O_PATH | O_CLOEXEC);
	src->s_hide = bx->bx_hide ? open("/dev/null", O_PATH | O_CLOEXEC) : -1;
	struct stat st;
	src->s_resolv = lstat("/etc/resolv.conf", &st) == 0 && S_ISLNK(st.st_mode)
				? open("/etc/resolv.conf", O_PATH | O_CLOEXEC)
				: -1;
}

/* Done with them: nothing of the host's stays open in the init once the root is made. */
static void
close_sources(const struct box *bx, const struct sources *src)
{
	int fds[] = {src->s_home, src->s_root, src->s_kernel, src->s_hide, src->s_resolv};

	for (size_t i = 0; i < 8 && boxview_system[i]; i++)
		if (src->s_system[i] >= 0)
			close(src->s_system[i]);
	for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++)
		if (src->s_dev[i] >= 0)
			close(src->s_dev[i]);
	for (int i = 0; i < bx->bx_nbinds; i++)
		if (src->s_bind[i] >= 0)
			close(src->s_bind[i]);
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* The numeric names in the dir at path (pids, tids), each passed to fn; raw calls only. */
static void
each_number(const char *path, void (*fn)(const char *name, void *arg), void *arg)
{
	char ents[2048];
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long n;

	if (fd < 0)
		return;
	while ((n = syscall(SYS_getdents64, fd, ents, sizeof(ents))) > 0)
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(ents + off);
			off += d->d_reclen;
			if (d->d_name[0] >= '1' && d->d_name[0] <= '9')
				fn(d->d_name, arg);
		}
	close(fd);
}

struct hiding {
	const char *h_self; /* our own pid, as the host's /proc names it */
	const char *h_empty; /* what goes over the others */
	const char *h_dst;   /* the box's /proc, staged */
};

static void
hide_one(const char *name, void *arg)
{
	const struct hiding *h = arg;
	char at[PATH_MAX];

	if (strcmp(name, h->h_self) && snprintf(at, sizeof(at), "%s/%s", h->h_dst, name) < PATH_MAX)
		mount(h->h_empty, at, NULL, MS_BIND, NULL); /* gone meanwhile: nothing to hide */
}

static void
hide_process(const char *pid, void *arg)
{
	char task[64];

	snprintf(task, sizeof(task), "/proc/%s/task", pid); /* its threads' /proc/<tid> too */
	each_number(task, hide_one, arg);
	hide_one(pid, arg);
}

/*
 * Where a /proc of the box's own is refused (the host's is partly masked, as
 * a container's defaults make it): the host's, with every process that is
 * not the box's when it starts (the broker, the proxies, other kernels, and
 * each of their threads) under an empty read-only directory. The box's own
 * processes show by their pids on the host: /proc/self is right, a pid the
 * box's namespace gives (os.getpid()) is not the host's.
 */
static int
proc_of_host(const char *dst)
{
	char self[16], empty[PATH_MAX];
	ssize_t n = readlink("/proc/self", self, sizeof(self) - 1);

	if (n <= 0 || mount("/proc", dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		return -1;
	self[n] = '\0';
	staged(empty, "/.empty");
	mkdirs(empty);
	if (mount("tmpfs", empty, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
		  "mode=0555,size=4k") < 0)
		return -1;
	struct hiding h = {self, empty, dst};
	each_number("/proc", hide_process, &h);
	return umount2(empty, MNT_DETACH) < 0 || rmdir(empty) < 0 ? -1 : 0;
}

/* One line of box_view. */
static int
make_part(const struct box *bx, const struct sources *src, size_t i)
{
	const char *path = box_view[i].pl_path;
	char dst[PATH_MAX], target[PATH_MAX], opts[64];
	struct stat st;
	ssize_t n;

	switch (box_view[i].pl_kind) {
	case P_SYSTEM:
		for (size_t k = 0; k < 8 && boxview_system[k]; k++)
			if (bind_at(src->s_system[k], boxview_system[k], true, false) < 0)
				return -1;
		return 0;
	case P_RESOLV: { /* an Ubuntu's link into /run/systemd, which the box lacks */
		if (src->s_resolv < 0)
			return 0; /* a file, shown with /etc; or a link to nothing */
		int link = open(staged(dst, path), O_PATH | O_NOFOLLOW | O_CLOEXEC), rc;
		/* over the link itself: through its fd, as its path would be followed */
		rc = link < 0 ? -1
			      : mount(fdpath(target, src->s_resolv), fdpath(opts, link), NULL,
				      MS_BIND, NULL);
		if (link >= 0)
			close(link);
		return rc < 0 ? -1 : remount_bind(dst, false);
	}
	case P_LINK: /* the host's link, or its directory read-only; nothing if neither */
		if ((n = readlink(path, target, sizeof(target) - 1)) > 0) {
			target[n] = '\0';
			return symlink(target, staged(dst, path));
		}
		if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
			return 0;
		int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC), rc;
		rc = bind_at(fd, path, true, false);
		close(fd);
		return rc;
	case P_TMPFS:
		mkdirs(staged(dst, path));
		snprintf(opts, sizeof(opts), "mode=1777,size=%llu",
			 (unsigned long long)bx->bx_tmp_size);
		if (mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
			return -1;
		mkdirs(staged(dst, "/var"));
		return symlink("../tmp", staged(dst, "/var/tmp"));
	case P_DEV:
		mkdirs(staged(dst, path));
		return make_dev(src->s_dev, bx->bx_tmp_size);
	case P_PROC:
		mkdirs(staged(dst, path));
		if (mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0)
			return 0;
		return errno == EPERM ? proc_of_host(dst) : -1;
	case P_HOME:
		return bind_at(src->s_home, path, true, true);
	case P_ROOT: /* none (the tenant put a file or a link there): empty, read-only */
		if (src->s_root < 0) {
			mkdirs(staged(dst, path));
			return 0;
		}
		return bind_at(src->s_root, path, true, true);
	case P_KERNEL:
		if (!bx->bx_kdir)
			return 0;
		mkdirs(staged(dst, path));
		snprintf(opts, sizeof(opts), "mode=0700,uid=%u,gid=%u,size=8m", (unsigned)inside_uid(bx),
			 (unsigned)inside_gid(bx));
		if (mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) < 0)
			return -1;
		return copy_tree(src->s_kernel, dst, inside_uid(bx), inside_gid(bx), 4);
	case P_BIND:
		for (int b = 0; b < bx->bx_nbinds; b++) {
			const struct box_bind *bb = &bx->bx_binds[b];
			if (src->s_bind[b] < 0)
				continue; /* shown already, or gone */
			bool dir = fstat(src->s_bind[b], &st) == 0 && S_ISDIR(st.st_mode);
			if (bind_at(src->s_bind[b], bb->bb_path, dir, bb->bb_write) < 0)
				return -1;
		}
		return 0;
	case P_HIDE: /* only where a part shows it: a path the box lacks stays lacking */
		if (!bx->bx_hide || lstat(staged(dst, bx->bx_hide), &st) < 0)
			return 0;
		return mount(fdpath(target, src->s_hide), dst, NULL, MS_BIND, NULL);
	}
	return -1;
}

/*
 * In the box's init, in its own mount namespace: the root made at STAGE,
 * then pivot_root into it (the old root, stacked beneath, detached), which
 * is made read-only. 0, or -1 with errno (the init's exit code says the rest).
 */
int
boxroot_enter(const struct box *bx)
{
	struct sources src;
	int rc = 0;

	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return -1;
	open_sources(bx, &src);
	if (src.s_home < 0 ||
	    mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0)
		rc = -1;
	for (size_t i = 0; rc == 0 && i < sizeof(box_view) / sizeof(box_view[0]); i++)
		rc = make_part(bx, &src, i);
	close_sources(bx, &src);
	if (rc < 0)
		return -1;
	if (chdir(STAGE) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		return -1;
	return mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
		     NULL);
}

