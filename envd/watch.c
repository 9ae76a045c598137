/*
 * watch.c — WatchDir: a directory's changes in the agent's box (inotify,
 * as the contexts' uid), as events on the stream that asked: start, then
 * create, write, remove, rename, chmod with the name under the directory.
 * Recursive: each directory below is watched too, and each one made later.
 * A watch lives as long as its client: a CANCEL ends it.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"

#define WATCH_DIRS 8192   /* directories one watch follows at most */
#define WATCH_QUEUE 10000 /* a polling watcher's changes kept until taken */
#define WATCH_MASK                                                                       \
	(IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |   \
	 IN_ONLYDIR | IN_DONT_FOLLOW)

struct wdir {
	int wd_wd;
	char *wd_rel; /* under the watched directory; "" for itself */
};

struct watch {
	uint64_t w_stream; /* WatchDir's stream; 0: a polling watcher's (w_id, w_queue) */
	char w_id[24];
	json_t *w_queue; /* its changes not yet taken: [{name, type}] */
	int w_fd;        /* its inotify instance */
	char *w_root;
	bool w_recursive;
	bool w_entry; /* each event carries its entry (includeEntry) */
	struct wdir *w_dirs;
	size_t w_n, w_cap;
};

static struct watch *watches[WATCH_MAX];
static size_t nwatches;

/* rel (a directory under the root) watched, and with recursive what is below it. */
static void
add_dir(struct watch *w, const char *rel)
{
	char *abs = *rel ? xasprintf("%s/%s", w->w_root, rel) : xstrdup(w->w_root);
	int wd;
	DIR *d;
	struct dirent *de;

	if (w->w_n == WATCH_DIRS ||
	    (wd = inotify_add_watch(w->w_fd, abs, WATCH_MASK)) < 0) {
		free(abs);
		return; /* past the bound, or gone meanwhile: not followed */
	}
	if (w->w_n == w->w_cap) {
		w->w_cap = w->w_cap ? 2 * w->w_cap : 16;
		w->w_dirs = xrealloc(w->w_dirs, w->w_cap * sizeof(*w->w_dirs));
	}
	w->w_dirs[w->w_n++] = (struct wdir){wd, xstrdup(rel)};
	if (w->w_recursive && (d = opendir(abs))) {
		while ((de = readdir(d)))
			if (de->d_type == DT_DIR && strcmp(de->d_name, ".") &&
			    strcmp(de->d_name, "..")) {
				char *sub = *rel ? xasprintf("%s/%s", rel, de->d_name)
				                 : xstrdup(de->d_name);
				add_dir(w, sub);
				free(sub);
			}
		closedir(d);
	}
	free(abs);
}

/* A watch of args' path (recursive or not): NULL with a's code and text if it cannot be.
 */
static struct watch *
watch_new(json_t *args, struct answer *a)
{
	const char *path = json_string_value(json_object_get(args, "path"));
	struct stat sb;
	struct watch *w;
	int e;

	if (nwatches == WATCH_MAX) {
		agent_fail(a, "resource_exhausted", "%d watches run already", WATCH_MAX);
		return NULL;
	}
	if (!path || !*path) {
		agent_fail(a, "invalid_argument", "path: a non-empty string is required");
		return NULL;
	}
	if ((e = stat(path, &sb) < 0 ? errno : S_ISDIR(sb.st_mode) ? 0 : ENOTDIR)) {
		agent_fail_errno(a, "watch", path, e);
		return NULL;
	}
	w = xcalloc(1, sizeof(*w));
	if ((w->w_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) {
		free(w);
		agent_fail_errno(a, "watch", path, errno);
		return NULL;
	}
	w->w_root = xstrdup(path);
	w->w_recursive = json_is_true(json_object_get(args, "recursive"));
	w->w_entry = json_is_true(json_object_get(args, "entry"));
	add_dir(w, "");
	watches[nwatches++] = w;
	return w;
}

void
watch_start(uint64_t stream, json_t *args)
{
	struct answer a = {0};
	struct watch *w = watch_new(args, &a);

	if (!w) {
		agent_event(stream, a.a_code, a.a_text, strlen(a.a_text), true);
		return;
	}
	w->w_stream = stream;
	agent_event(stream, "start", NULL, 0, false);
}

/* CreateWatcher: a watch whose changes wait to be taken (GetWatcherEvents). */
int
watch_create(json_t *args, struct answer *a)
{
	static unsigned long long next = 1;
	struct watch *w = watch_new(args, a);

	if (!w)
		return -1;
	snprintf(w->w_id, sizeof(w->w_id), "w%llu", next++);
	w->w_queue = json_array();
	a->a_json = json_pack("{s:s}", "id", w->w_id);
	return 0;
}

static struct watch *
watcher(json_t *args, struct answer *a)
{
	const char *id = json_string_value(json_object_get(args, "id"));

	for (size_t i = 0; id && i < nwatches; i++)
		if (!watches[i]->w_stream && !strcmp(watches[i]->w_id, id))
			return watches[i];
	agent_fail(a, "not_found", "no such watcher");
	return NULL;
}

/* GetWatcherEvents: the changes since the last call, taken. */
int
watch_events(json_t *args, struct answer *a)
{
	struct watch *w = watcher(args, a);

	if (!w)
		return -1;
	a->a_json = w->w_queue;
	w->w_queue = json_array();
	return 0;
}

size_t
watch_pollfds(struct pollfd *pf, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < nwatches && n < max; i++)
		pf[n++] = (struct pollfd){watches[i]->w_fd, POLLIN, 0};
	return n;
}

static const char *
rel_of(const struct watch *w, int wd)
{
	for (size_t i = 0; i < w->w_n; i++)
		if (w->w_dirs[i].wd_wd == wd)
			return w->w_dirs[i].wd_rel;
	return NULL;
}

/*
 * One change, to its stream or its queue; with includeEntry and a file
 * still there, its entry after the name (a stream's data: name, NUL, JSON).
 */
static void
change(struct watch *w, const char *kind, const char *name)
{
	struct answer a = {0};
	char *path = xasprintf("%s/%s", w->w_root, name);
	json_t *e = w->w_entry ? agent_entry(path, &a) : NULL;

	free(path);
	if (!w->w_stream) {
		if (json_array_size(w->w_queue) < WATCH_QUEUE)
			json_array_append_new(
			    w->w_queue,
			    e ? json_pack("{s:s, s:s, s:o}", "name", name, "type", kind,
			                  "entry", e)
			      : json_pack("{s:s, s:s}", "name", name, "type", kind));
		else
			json_decref(e);
		return;
	}
	struct buf b = {0};
	buf_append(&b, name, strlen(name));
	if (e) {
		char *s = json_dumps(e, JSON_COMPACT);
		buf_append(&b, "", 1);
		buf_append(&b, s, strlen(s));
		free(s);
		json_decref(e);
	}
	agent_event(w->w_stream, kind, buf_head(&b), buf_pending(&b), false);
	buf_free(&b);
}

/* One watch's changes, as events. */
static void
changes(struct watch *w)
{
	char buf[64 << 10] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t r;

	while ((r = read(w->w_fd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + r;) {
			struct inotify_event *ev = (struct inotify_event *)p;
			const char *rel = rel_of(w, ev->wd), *kind = NULL;
			p += sizeof(*ev) + ev->len;
			if (!rel || !ev->len)
				continue; /* about a directory itself, or one no longer
				             followed */
			char *name =
			    *rel ? xasprintf("%s/%s", rel, ev->name) : xstrdup(ev->name);
			if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
				kind = "create";
				if ((ev->mask & IN_ISDIR) && w->w_recursive)
					add_dir(w, name);
			} else if (ev->mask & IN_MODIFY) {
				kind = "write";
			} else if (ev->mask & IN_DELETE) {
				kind = "remove";
			} else if (ev->mask & IN_MOVED_FROM) {
				kind = "rename";
			} else if (ev->mask & IN_ATTRIB) {
				kind = "chmod";
			}
			if (kind)
				change(w, kind, name);
			free(name);
		}
	}
}

void
watch_ready(const struct pollfd *pf, size_t n)
{
	for (size_t j = 0; j < n; j++)
		for (size_t i = 0; i < nwatches && pf[j].revents; i++)
			if (watches[i]->w_fd == pf[j].fd) {
				changes(watches[i]);
				break;
			}
}

static void
watch_free(size_t i)
{
	struct watch *w = watches[i];

	close(w->w_fd);
	for (size_t k = 0; k < w->w_n; k++)
		free(w->w_dirs[k].wd_rel);
	free(w->w_dirs);
	free(w->w_root);
	json_decref(w->w_queue);
	free(w);
	watches[i] = watches[--nwatches];
}

/* RemoveWatcher */
int
watch_remove(json_t *args, struct answer *a)
{
	struct watch *w = watcher(args, a);

	if (!w)
		return -1;
	for (size_t i = 0; i < nwatches; i++)
		if (watches[i] == w)
			watch_free(i);
	a->a_json = json_object();
	return 0;
}

/* Its client left: the watch ends (its stream's last frame, so the proxy forgets it). */
void
watch_cancel(uint64_t stream)
{
	for (size_t i = 0; i < nwatches; i++)
		if (stream && watches[i]->w_stream == stream) {
			watch_free(i);
			agent_event(stream, "detached", NULL, 0, true);
			return;
		}
}
