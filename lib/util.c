/*
 * util.c — logging, allocation that cannot fail silently, clocks, ids, paths
 * and a growable byte buffer: the small things every sandcell binary uses.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib.h"

int log_level_max = LOG_INFO;
static const char *log_prog = "sandcell";

void
log_init(const char *prog, int level)
{
	log_prog = prog;
	log_level_max = level;
}

int
parse_level(const char *s)
{
	static const char *names[] = {"error", "warn", "info", "debug"};

	for (int i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

/* One line, formatted once and written whole (stderr's stdio would format it again). */
static void
vlog(int level, const char *fmt, va_list ap)
{
	static const char *tags[] = {"error", "warn", "info", "debug"};
	char line[2048];
	size_t room = sizeof(line) - 1; /* the newline's */
	int n = snprintf(line, room, "%s[%d] %s: ", log_prog, (int)getpid(), tags[level]);
	size_t len = n < 0 ? 0 : (size_t)n < room ? (size_t)n : room - 1;
	int m = vsnprintf(line + len, room - len, fmt, ap);

	len += m < 0 ? 0 : (size_t)m < room - len ? (size_t)m : room - len - 1;
	line[len++] = '\n';
	for (size_t off = 0; off < len;) {
		ssize_t w = write(STDERR_FILENO, line + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
}

void
log_msg(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > log_level_max)
		return;
	va_start(ap, fmt);
	vlog(level, fmt, ap);
	va_end(ap);
}

void
log_limit_flush(struct loglimit *ll, uint64_t now)
{
	if (now - ll->ll_start < LOG_LIMIT_WINDOW_MS)
		return;
	if (ll->ll_suppressed)
		log_msg(LOG_WARN, "%u more %s in the last %d s, not logged", ll->ll_suppressed,
			ll->ll_what, LOG_LIMIT_WINDOW_MS / 1000);
	ll->ll_start = now;
	ll->ll_n = ll->ll_suppressed = 0;
}

void
log_limited(struct loglimit *ll, uint64_t now, int level, const char *fmt, ...)
{
	va_list ap;

	if (level > log_level_max)
		return;
	log_limit_flush(ll, now);
	if (ll->ll_n >= LOG_LIMIT_BURST) {
		ll->ll_suppressed++;
		return;
	}
	ll->ll_n++;
	va_start(ap, fmt);
	vlog(level, fmt, ap);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_ERR, fmt, ap);
	va_end(ap);
	exit(1);
}

void *
xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		fatal("out of memory (%zu bytes)", n);
	return p;
}

void *
xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);

	if (!p)
		fatal("out of memory (%zu x %zu bytes)", n, sz);
	return p;
}

void *
xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		fatal("out of memory (%zu bytes)", n);
	return p;
}

char *
xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *
xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *
xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		fatal("out of memory");
	va_end(ap);
	return s;
}

uint64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Wall-clock UTC time as 2026-11-29T10:00:00.123456Z. */
void
iso_time(char out[64])
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 ts.tv_nsec / 1000);
}

uint64_t
now_ms(void)
{
	return now_us() / 1000;
}

void
uuid_v4(char out[37])
{
	uint8_t b[16];

	if (getrandom(b, sizeof(b), 0) != sizeof(b))
		fatal("getrandom: %s", strerror(errno));
	b[6] = (b[6] & 0x0f) | 0x40;
	b[8] = (b[8] & 0x3f) | 0x80;
	snprintf(out, 37,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
		 b[12], b[13], b[14], b[15]);
}

/* Lower-case 8-4-4-4-12 hex: the only context ids we mint or accept. */
bool
uuid_valid(const char *s)
{
	for (int i = 0; i < 36; i++) {
		char c = s[i];
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != '-')
				return false;
		} else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
			return false;
		}
	}
	return s[36] == '\0';
}

/*
 * A daemon's stop signals and SIGCHLD as a descriptor for its loop
 * (SIGPIPE ignored), taken first thing in main. Their dispositions are ours
 * whatever the starter left: with SIGCHLD ignored, the kernel reaps every
 * child itself and no waitpid learns how one ended (the broker then took its
 * sandbox probe for a failure and refused to start). -1 with errno.
 */
int
signal_fd(void)
{
	static const int taken[] = {SIGCHLD, SIGTERM, SIGINT};
	sigset_t mask;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++) {
		signal(taken[i], SIG_DFL);
		sigaddset(&mask, taken[i]);
	}
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
		return -1;
	return signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
}

/*
 * text into an existing file (a /proc or cgroup knob): 0 or -errno. Raw
 * calls only, no allocation: also used in a forked child.
 */
int
write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), rc = 0;

	if (fd < 0 || write(fd, text, strlen(text)) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	return rc;
}

/* write_text of dir/name. */
int
write_in_dir(const char *dir, const char *name, const char *text)
{
	char *path = xasprintf("%s/%s", dir, name);
	int rc = write_text(path, text);

	free(path);
	return rc;
}

int
mkdir_p(const char *path, unsigned mode)
{
	char tmp[PATH_MAX];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * rm_rf and chown_r walk trees a kernel's user may own and change while we
 * walk (a root broker or proxy cleaning up after --kernel-user or a sandbox):
 * every step is relative to a directory fd, opened with O_NOFOLLOW, so a
 * directory swapped for a symlink is never followed out of the tree.
 */
static int
rm_at(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), rc = 0;
	struct dirent *de;
	DIR *d;

	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		if (errno != ENOTDIR && errno != ELOOP) /* ELOOP: a symlink itself */
			return -errno;
		return unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	}
	if (!(d = fdopendir(fd))) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			rc = rm_at(fd, de->d_name) < 0 ? -EIO : rc;
	closedir(d);
	if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		rc = -errno;
	return rc;
}

int
rm_rf(const char *path)
{
	return rm_at(AT_FDCWD, path);
}

/* A portable environment variable name: [A-Za-z_][A-Za-z0-9_]*. */
bool
env_key_valid(const char *k)
{
	if (!*k || (*k >= '0' && *k <= '9') || strlen(k) > ENV_KEY_MAX)
		return false;
	for (; *k; k++)
		if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
		      (*k >= '0' && *k <= '9') || *k == '_'))
			return false;
	return true;
}

static int
chown_at(int dirfd, const char *name, unsigned uid, unsigned gid)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (fd < 0) {
		if (errno != ENOTDIR && errno != ELOOP)
			return -errno;
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
		/* a hard link may name a file from outside the tree: leave it */
		if (!S_ISLNK(st.st_mode) && st.st_nlink > 1)
			return 0;
		return fchownat(dirfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
	}
	if (fchown(fd, uid, gid) < 0 || !(d = fdopendir(fd))) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			chown_at(fd, de->d_name, uid, gid);
	closedir(d);
	return 0;
}

int
chown_r(const char *path, unsigned uid, unsigned gid)
{
	return chown_at(AT_FDCWD, path, uid, gid);
}

/* $XDG_RUNTIME_DIR/sandcell, else /tmp/sandcell-$UID. */
const char *
default_run_dir(void)
{
	static char dir[PATH_MAX];
	const char *x = getenv("XDG_RUNTIME_DIR");

	if (x && *x && x[0] == '/')
		snprintf(dir, sizeof(dir), "%s/sandcell", x);
	else
		snprintf(dir, sizeof(dir), "/tmp/sandcell-%u", (unsigned)getuid());
	return dir;
}

/* Pending bytes are b_data[b_off, b_len); consumed space is reclaimed lazily. */
void
buf_append(struct buf *b, const void *p, size_t n)
{
	if (n == 0)
		return;
	if (b->b_len + n > b->b_cap && b->b_off) {
		memmove(b->b_data, b->b_data + b->b_off, b->b_len - b->b_off);
		b->b_len -= b->b_off;
		b->b_off = 0;
	}
	if (b->b_len + n > b->b_cap) {
		size_t cap = b->b_cap ? b->b_cap : 256;
		while (cap < b->b_len + n)
			cap *= 2;
		b->b_data = xrealloc(b->b_data, cap);
		b->b_cap = cap;
	}
	memcpy(b->b_data + b->b_len, p, n);
	b->b_len += n;
}

void
buf_consume(struct buf *b, size_t n)
{
	b->b_off += n;
	if (b->b_off >= b->b_len)
		b->b_off = b->b_len = 0;
}

void
buf_free(struct buf *b)
{
	free(b->b_data);
	memset(b, 0, sizeof(*b));
}
