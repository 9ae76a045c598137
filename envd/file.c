/*
 * file.c — envd's /files in the agent, streamed (docs/ENVD.md): a download
 * is read in ENVD_CHUNK pieces and sent as its stream's events as far as
 * the broker's credit goes (ENVD_WINDOW, topped up by "more"); an upload's
 * chunks are written at their offsets, acknowledged one by one, into an
 * unnamed file in the target's directory (O_TMPFILE) that is linked into
 * place only when whole (over a file that is there: linked beside it and
 * renamed over it). So a cut, failed or killed upload leaves nothing: no
 * half-written file, no temporary name (the kernel frees an unnamed file with
 * its last descriptor). A filesystem without O_TMPFILE gets a named
 * temporary file beside the target instead (`.NAME.upload-XXXXXX`), which
 * only a killed agent leaves behind. Each transfer is a stream of the
 * broker's: its CANCEL drops it (a download stops, an upload's file goes).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"

/* One transfer: a download, or an upload (x_up) into x_path or x_tmp. */
struct xfer {
	uint64_t x_stream; /* 0: a free slot */
	int x_fd;
	bool x_up;
	char *x_tmp, *x_path; /* an upload's named temporary file (or NULL) and target */
	json_t *x_meta;       /* an upload's metadata (X-Metadata-*), or NULL */
	uint64_t x_size, x_off; /* a download's size at open; bytes done */
	uint64_t x_credit;      /* a download's bytes the broker takes now */
};

static struct xfer xfers[FILE_MAX];

static struct xfer *
find(uint64_t stream)
{
	for (size_t i = 0; i < FILE_MAX; i++)
		if (stream && xfers[i].x_stream == stream)
			return &xfers[i];
	return NULL;
}

/* A slot for stream, or NULL with its refusal sent. */
static struct xfer *
slot(uint64_t stream)
{
	struct xfer *x = NULL;

	for (size_t i = 0; !x && i < FILE_MAX; i++)
		if (!xfers[i].x_stream)
			x = &xfers[i];
	if (!x) {
		proc_refuse(stream, "resource_exhausted",
		            "too many files in transfer at once");
		return NULL;
	}
	*x = (struct xfer){.x_stream = stream, .x_fd = -1};
	return x;
}

/* The transfer ends: its fd closed, an upload's temporary file removed. */
static void
drop(struct xfer *x)
{
	if (x->x_fd >= 0)
		close(x->x_fd);
	if (x->x_tmp)
		unlink(x->x_tmp);
	free(x->x_tmp);
	free(x->x_path);
	json_decref(x->x_meta);
	*x = (struct xfer){.x_fd = -1};
}

/* It ends with a Connect code and why (its stream's last event). */
static void
fail(struct xfer *x, int e, const char *what, const char *path)
{
	struct answer a = {0};

	agent_fail_errno(&a, what, path, e);
	proc_refuse(x->x_stream, a.a_code, a.a_text);
	drop(x);
}

static void
event_num(uint64_t stream, const char *kind, uint64_t n)
{
	char num[24];

	snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
	agent_event(stream, kind, num, strlen(num), false);
}

/* read {path}: its size, then its bytes as credit allows (file_step). */
void
file_read(uint64_t stream, json_t *args)
{
	const char *path = json_string_value(json_object_get(args, "path"));
	struct stat st;
	struct xfer *x;

	if (!path || !*path) {
		proc_refuse(stream, "invalid_argument", "path: a string is required");
		return;
	}
	if (!(x = slot(stream)))
		return;
	if ((x->x_fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)) < 0)
		return fail(x, errno, "open", path);
	if (fstat(x->x_fd, &st) < 0)
		return fail(x, errno, "stat", path);
	if (!S_ISREG(st.st_mode)) {
		proc_refuse(stream, "invalid_argument",
		            S_ISDIR(st.st_mode) ? "the path is a directory"
		                                : "the path is not a regular file");
		return drop(x);
	}
	x->x_size = (uint64_t)st.st_size;
	x->x_credit = ENVD_WINDOW;
	event_num(stream, "size", x->x_size);
}

/* more {n}: the broker took n bytes of a download. */
void
file_more(uint64_t stream, json_t *args)
{
	struct xfer *x = find(stream);
	json_int_t n = json_integer_value(json_object_get(args, "n"));

	if (!x || x->x_up || n <= 0)
		return;
	x->x_credit += (uint64_t)n;
	if (x->x_credit > ENVD_WINDOW)
		x->x_credit = ENVD_WINDOW;
}

/* A name beside path for its temporary file: ".NAME.upload-" and tail. */
static char *
beside(const char *path, const char *tail)
{
	const char *slash = strrchr(path, '/');

	return slash ? xasprintf("%.*s/.%s.upload-%s", (int)(slash - path), path,
	                         slash + 1, tail)
	             : xasprintf(".%s.upload-%s", path, tail);
}

/* wopen {path}: an unnamed file in the target's directory (its parents made). */
void
file_wopen(uint64_t stream, json_t *args)
{
	const char *path = json_string_value(json_object_get(args, "path"));
	char *dir, *slash, real[PATH_MAX];
	struct answer a = {0};
	struct stat st;
	struct xfer *x;

	if (!path || !*path) {
		proc_refuse(stream, "invalid_argument", "path: a string is required");
		return;
	}
	if (agent_parents(path, &a) < 0) {
		proc_refuse(stream, a.a_code, a.a_text);
		return;
	}
	if (!(x = slot(stream)))
		return;
	/* a link is written through, as envd's open(O_TRUNC) does */
	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && realpath(path, real))
		path = real;
	x->x_up = true;
	x->x_path = xstrdup(path);
	if (json_is_object(json_object_get(args, "metadata")))
		x->x_meta = json_incref(json_object_get(args, "metadata"));
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return fail(x, EISDIR, "write", path);
	dir = xstrdup(path);
	slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir] = '\0'; /* "/x": "/" */
	x->x_fd = open(slash ? dir : ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
	free(dir);
	if (x->x_fd >= 0)
		return;
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return fail(x, errno, "create", path);
	/* a filesystem without O_TMPFILE: a named file beside it */
	x->x_tmp = beside(path, "XXXXXX");
	if ((x->x_fd = mkostemp(x->x_tmp, O_CLOEXEC)) < 0) {
		int e = errno;
		free(x->x_tmp);
		x->x_tmp = NULL; /* nothing made */
		return fail(x, e, "create a file beside", path);
	}
	fchmod(x->x_fd, 0644 & ~022);
}

/*
 * The unnamed file, whole, linked at its path (through /proc/self/fd, which
 * needs no privilege, unlike AT_EMPTY_PATH); over a file that is there,
 * linked beside it and renamed over it. 0 or -errno.
 */
static int
link_into_place(struct xfer *x)
{
	char fdpath[32], *tmp;
	uint32_t r;
	int e;

	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", x->x_fd);
	if (linkat(AT_FDCWD, fdpath, AT_FDCWD, x->x_path, AT_SYMLINK_FOLLOW) == 0)
		return 0;
	if (errno != EEXIST)
		return -errno;
	for (int i = 0; i < 16; i++) {
		char tail[16];
		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			return -EIO;
		snprintf(tail, sizeof(tail), "%08x", r);
		tmp = beside(x->x_path, tail);
		if (linkat(AT_FDCWD, fdpath, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) < 0) {
			e = errno;
			free(tmp);
			if (e == EEXIST)
				continue;
			return -e;
		}
		e = rename(tmp, x->x_path) < 0 ? errno : 0;
		if (e)
			unlink(tmp);
		free(tmp);
		return -e;
	}
	return -EEXIST;
}

/* wdata {off} + bytes: written at off, acknowledged. */
void
file_wdata(uint64_t stream, json_t *args, const struct pstr *data)
{
	struct xfer *x = find(stream);
	json_int_t off = json_integer_value(json_object_get(args, "off"));
	size_t done = 0;

	if (!x || !x->x_up)
		return; /* cancelled or failed: its end was sent */
	if (off < 0 || (uint64_t)off != x->x_off)
		return fail(x, EINVAL, "write (out of order)", x->x_path);
	while (done < data->len) {
		ssize_t w = pwrite(x->x_fd, data->s + done, data->len - done,
		                   (off_t)(x->x_off + done));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return fail(x, w < 0 ? errno : ENOSPC, "write", x->x_path);
		done += (size_t)w;
	}
	x->x_off += done;
	event_num(stream, "ack", x->x_off);
}

/* wend: the file renamed into place; its EntryInfo is the last event. */
void
file_wend(uint64_t stream)
{
	struct xfer *x = find(stream);
	struct answer a = {0};
	json_t *e;
	char *s;

	if (!x || !x->x_up)
		return;
	/* on the file before it has its name: it is never seen without them */
	int rc = x->x_meta ? meta_set(x->x_fd, x->x_meta) : 0;
	if (rc < 0)
		return fail(x, -rc, "set the metadata of", x->x_path);
	rc = x->x_tmp ? 0 : link_into_place(x);
	if (rc < 0)
		return fail(x, -rc, "write", x->x_path);
	rc = close(x->x_fd) < 0 ? errno : 0;
	x->x_fd = -1;
	if (rc) { /* its bytes may not all be there: it goes, as a failed upload's */
		if (!x->x_tmp)
			unlink(x->x_path);
		return fail(x, rc, "write", x->x_path);
	}
	if (x->x_tmp && rename(x->x_tmp, x->x_path) < 0)
		return fail(x, errno, "write", x->x_path);
	free(x->x_tmp);
	x->x_tmp = NULL; /* it is the file now */
	/* envd writes in place: a watcher sees the file written. A truncate to its
	 * own size, by its name, says so (IN_MODIFY) and changes no byte. */
	if (x->x_off && truncate(x->x_path, (off_t)x->x_off) < 0)
		log_warn("truncate %s: %s", x->x_path, strerror(errno));
	if (!(e = agent_entry(x->x_path, &a))) {
		proc_refuse(stream, a.a_code, a.a_text);
		return drop(x);
	}
	s = json_dumps(e, JSON_COMPACT);
	json_decref(e);
	agent_event(stream, "done", s, strlen(s), true);
	free(s);
	drop(x);
}

/* The broker's CANCEL: a download stops, an upload leaves nothing. */
void
file_cancel(uint64_t stream)
{
	struct xfer *x = find(stream);

	if (!x)
		return;
	drop(x);
	/* its last event, which the proxy takes as its end (the broker has none) */
	agent_event(stream, "cancelled", NULL, 0, true);
}

/* Whether a download may send now (the loop then does not sleep in poll). */
bool
file_ready(void)
{
	for (size_t i = 0; i < FILE_MAX; i++)
		if (xfers[i].x_stream && !xfers[i].x_up && xfers[i].x_credit)
			return true;
	return false;
}

/* One chunk of each download that has credit; the last ends its stream. */
void
file_step(void)
{
	static char chunk[ENVD_CHUNK];

	for (size_t i = 0; i < FILE_MAX; i++) {
		struct xfer *x = &xfers[i];
		if (!x->x_stream || x->x_up || !x->x_credit)
			continue;
		uint64_t want = x->x_size - x->x_off;
		if (want > sizeof(chunk))
			want = sizeof(chunk);
		if (want > x->x_credit)
			want = x->x_credit;
		ssize_t r = want ? pread(x->x_fd, chunk, want, (off_t)x->x_off) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fail(x, errno, "read", "the file");
			continue;
		}
		/* at its size, or shrunk: the end (the broker checks the count) */
		if (r == 0) {
			char num[24];
			snprintf(num, sizeof(num), "%llu", (unsigned long long)x->x_off);
			agent_event(x->x_stream, "end", num, strlen(num), true);
			drop(x);
			continue;
		}
		x->x_off += (uint64_t)r;
		x->x_credit -= (uint64_t)r;
		agent_event(x->x_stream, "data", chunk, (size_t)r, false);
	}
}
