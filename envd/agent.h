/*
 * agent.h — sandcell-envd, envd's agent in its box (docs/ENVD.md): what its
 * files share. agent.c: the loop, the file operations, the answers; proc.c:
 * the processes it starts (process.Process); watch.c: WatchDir.
 */
#ifndef SANDCELL_AGENT_H
#define SANDCELL_AGENT_H

#include <poll.h>
#include <stdbool.h>

#include <jansson.h>

#include "../proto/proto.h"

/* One request's answer: OK (JSON or bytes) or FAIL (a Connect code). */
struct answer {
	const char *a_code; /* NULL: OK */
	char a_text[1024];
	json_t *a_json; /* OK's data as JSON */
	char *a_bytes;  /* ... or bytes */
	size_t a_nbytes;
};

/* agent.c */
int agent_fail(struct answer *a, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int agent_fail_errno(struct answer *a, const char *what, const char *path, int e);
void agent_send(const struct msg *m); /* to the proxy; the agent ends if it is gone */
int agent_parents(const char *path, struct answer *a); /* mkdir -p of its parents */
json_t *agent_entry(const char *path, struct answer *a); /* envd's EntryInfo, the agent's words */
void agent_event(uint64_t stream, const char *kind, const void *data, size_t len,
                 bool final);

/* proc.c: processes, each in its own session; events go out as MSG_OUTPUT on
 * the stream that started it (outcome: start, stdout, stderr, end, or a
 * Connect code for a start that failed; final on the last) */
#define PROC_MAX 256
void proc_start(uint64_t stream, json_t *args);
int proc_list(struct answer *a);
int proc_signal(json_t *args, struct answer *a);
int proc_input(json_t *args, const struct pstr *data, struct answer *a);
int proc_close_stdin(json_t *args, struct answer *a);
void proc_cancel(uint64_t stream);
void proc_connect(uint64_t stream, json_t *args);
int proc_resize(json_t *args, struct answer *a);
void proc_refuse(uint64_t stream, const char *code,
                 const char *text);                 /* its only event */
size_t proc_pollfds(struct pollfd *pf, size_t max); /* its pipes, for the loop */
void proc_ready(const struct pollfd *pf, size_t n); /* after poll: their output */
void proc_reap(void);                               /* after SIGCHLD */

/* watch.c: WatchDir, a directory's changes (inotify) as events on its stream */
#define WATCH_MAX 64
void watch_start(uint64_t stream, json_t *args);
size_t watch_pollfds(struct pollfd *pf, size_t max);
void watch_ready(const struct pollfd *pf, size_t n);
void watch_cancel(uint64_t stream);
int watch_create(json_t *args, struct answer *a); /* the polling watchers */
int watch_events(json_t *args, struct answer *a);
int watch_remove(json_t *args, struct answer *a);

/* meta.c: a file's user metadata (user.e2b.* xattrs) */
int meta_set(int fd, json_t *meta);
json_t *meta_of(const char *path);

/* file.c: GET and POST /files, streamed: a download's chunks as credit allows,
 * an upload's into an unnamed file linked into place at its end */
#define FILE_MAX 16
void file_read(uint64_t stream, json_t *args);
void file_more(uint64_t stream, json_t *args);
void file_wopen(uint64_t stream, json_t *args);
void file_wdata(uint64_t stream, json_t *args, const struct pstr *data);
void file_wend(uint64_t stream);
void file_cancel(uint64_t stream);
bool file_ready(void);
void file_step(void);

#endif
