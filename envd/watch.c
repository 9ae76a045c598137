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

#define WATCH_DIRS 8192 /* directories one watch follows at most */
#define WATCH_MASK                                                                       \
	(IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |   \
	 IN_ONLYDIR | IN_DONT_FOLLOW)

struct wdir {
	int wd_wd;
	char *wd_rel; /* under the watched directory; "" for itself */
};

struct watch {
	uint64_t w_stream;
	int w_fd; /* its inotify instance */
	char *w_root;
	bool w_recursive;
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

void
watch_start(uint64_t stream, json_t *args)
{
	const char *path = json_string_value(json_object_get(args, "path"));
	struct stat sb;
	struct watch *w;
	int e;

	if (nwatches == WATCH_MAX) {
		agent_event(stream, "resource_exhausted", "too many watches", 16, true);
		return;
	}
	if ((e = stat(path, &sb) < 0 ? errno : S_ISDIR(sb.st_mode) ? 0 : ENOTDIR)) {
		char text[512];
		snprintf(text, sizeof(text), "watch '%s': %s", path, strerror(e));
		agent_event(stream,
		            e == ENOENT   ? "not_found"
		            : e == EACCES ? "permission_denied"
		                          : "invalid_argument",
		            text, strlen(text), true);
		return;
	}
	w = xcalloc(1, sizeof(*w));
	if ((w->w_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) {
		free(w);
		agent_event(stream, "resource_exhausted", "no inotify instance", 19,
		            true);
		return;
	}
	w->w_stream = stream;
	w->w_root = xstrdup(path);
	w->w_recursive = json_is_true(json_object_get(args, "recursive"));
	add_dir(w, "");
	watches[nwatches++] = w;
	agent_event(stream, "start", NULL, 0, false);
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
				agent_event(w->w_stream, kind, name, strlen(name), false);
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

/* Its client left: the watch ends (its stream's last frame, so the proxy forgets it). */
void
watch_cancel(uint64_t stream)
{
	for (size_t i = 0; i < nwatches; i++) {
		struct watch *w = watches[i];
		if (w->w_stream != stream)
			continue;
		close(w->w_fd);
		for (size_t k = 0; k < w->w_n; k++)
			free(w->w_dirs[k].wd_rel);
		free(w->w_dirs);
		free(w->w_root);
		free(w);
		watches[i] = watches[--nwatches];
		agent_event(stream, "detached", NULL, 0, true);
		return;
	}
}
