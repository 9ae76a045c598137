/*
 * wsdisk.c — a workspace's size bound: a filesystem of its own, an ext4
 * image (sparse: it takes the host's disk as it fills) loop-mounted at the
 * workspace's directory. Full, it is an ENOSPC for the contexts writing to
 * it, never a full host disk. The image is <dir>.img beside the directory,
 * root's and 0600, outside every box. Shared isolation: one for the
 * server's workspace (the broker's); --isolation context: one per context
 * (its proxy's). Root only: a loop device and a mount of the host's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib.h"

/* Whether dir is the root of a mount (another device than its parent's). */
bool
wsdisk_mounted(const char *dir)
{
	char parent[PATH_MAX];
	struct stat a, b;

	if (snprintf(parent, sizeof(parent), "%s/..", dir) >= (int)sizeof(parent))
		return false;
	return stat(dir, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

/* The space free for files on the filesystem holding path, in bytes. */
uint64_t
wsdisk_free(const char *path)
{
	struct statvfs v;

	return statvfs(path, &v) == 0 ? (uint64_t)v.f_bavail * v.f_frsize : 0;
}

static bool
empty_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool empty = d != NULL;

	while (empty && (de = readdir(d)))
		empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
	if (d)
		closedir(d);
	return empty;
}

/* mke2fs on img: no journal, no reserved blocks, its root uid:gid's. */
static int
make_fs(const char *img, uid_t uid, gid_t gid)
{
	char ext[96];
	int status;
	pid_t pid;

	snprintf(ext, sizeof(ext), "root_owner=%u:%u,lazy_itable_init=1,nodiscard", (unsigned)uid,
		 (unsigned)gid);
	if ((pid = fork()) < 0)
		return -errno;
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
		}
		execlp("mke2fs", "mke2fs", "-q", "-F", "-t", "ext4", "-O", "^has_journal", "-m", "0",
		       "-E", ext, img, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* A loop device of img's, detached by the kernel once unmounted; its fd. */
static int
loop_attach(int img, char *dev, size_t devsz)
{
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC), rc = -EBUSY;

	if (ctl < 0)
		return -errno;
	for (int tries = 0; tries < 16 && rc == -EBUSY; tries++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE), fd;
		if (n < 0) {
			rc = -errno;
			break;
		}
		snprintf(dev, devsz, "/dev/loop%d", n);
		if ((fd = open(dev, O_RDWR | O_CLOEXEC)) < 0) {
			rc = -errno;
			continue;
		}
		struct loop_config cfg = {.fd = (unsigned)img};
		cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
		if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0) {
			close(ctl);
			return fd;
		}
		rc = -errno; /* EBUSY: another took it between the two calls */
		close(fd);
	}
	close(ctl);
	return rc;
}

int
wsdisk_mount(const char *dir, uint64_t size, char *err, size_t errsz)
{
	char img[PATH_MAX], dev[32];
	struct stat st, own;
	int fd = -1, loop = -1, rc = 0;

	if (wsdisk_mounted(dir))
		return 0; /* kept across a restart of ours */
	if (stat(dir, &own) < 0) { /* its owner and mode become its filesystem's root's */
		rc = -errno;
		snprintf(err, errsz, "%s: %s", dir, strerror(-rc));
		return rc;
	}
	if (snprintf(img, sizeof(img), "%s.img", dir) >= (int)sizeof(img))
		return -ENAMETOOLONG;
	if (stat(img, &st) < 0) {
		/* a directory with files and no image is the operator's: not hidden under a mount */
		if (!empty_dir(dir)) {
			snprintf(err, errsz, "%s has files of its own: no size bound for it", dir);
			return -ENOTEMPTY;
		}
		uint64_t avail = wsdisk_free(dir); /* not mounted: the image's filesystem */
		if (avail < size) {
			snprintf(err, errsz, "%llu MiB free where its image would be, %llu MiB wanted",
				 (unsigned long long)(avail >> 20), (unsigned long long)(size >> 20));
			return -ENOSPC;
		}
		if ((fd = open(img, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0 ||
		    ftruncate(fd, (off_t)size) < 0 || (rc = make_fs(img, own.st_uid, own.st_gid)) < 0) {
			rc = rc ? rc : -errno;
			snprintf(err, errsz, "image %s: %s", img, strerror(-rc));
			if (fd >= 0)
				unlink(img);
			goto out;
		}
	} else if ((fd = open(img, O_RDWR | O_CLOEXEC)) < 0) {
		rc = -errno;
		snprintf(err, errsz, "image %s: %s", img, strerror(-rc));
		goto out;
	}
	if ((loop = loop_attach(fd, dev, sizeof(dev))) < 0) {
		rc = loop;
		snprintf(err, errsz, "a loop device for %s: %s", img, strerror(-rc));
		goto out;
	}
	if (mount(dev, dir, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, NULL) < 0) {
		rc = -errno;
		snprintf(err, errsz, "mount %s at %s: %s", img, dir, strerror(-rc));
		goto out;
	}
	snprintf(img, sizeof(img), "%s/lost+found", dir);
	rmdir(img); /* e2fsck makes it again if it must */
	if (chown(dir, own.st_uid, own.st_gid) < 0 || chmod(dir, own.st_mode & 07777) < 0) {
		rc = -errno;
		snprintf(err, errsz, "%s: %s", dir, strerror(-rc));
		umount2(dir, MNT_DETACH);
	}
out:
	if (loop >= 0)
		close(loop); /* the mount holds it now; unmounted, it detaches */
	if (fd >= 0)
		close(fd);
	return rc;
}

void
wsdisk_unmount(const char *dir, bool remove)
{
	char img[PATH_MAX];

	if (wsdisk_mounted(dir))
		umount2(dir, MNT_DETACH);
	if (remove && snprintf(img, sizeof(img), "%s.img", dir) < (int)sizeof(img))
		unlink(img);
}
