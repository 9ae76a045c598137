/*
 * kout.c — what a kernel and its box write to their stdout and stderr: one
 * pipe of the proxy's, the only descriptors a box is given (with /dev/null
 * as stdin and, for its init, the proxy's socket). Nothing of the broker's
 * (its log, the journal's socket) is ever handed down. The proxy reads the
 * pipe on its loop, so a kernel that floods it never waits for long, and
 * logs what comes as lines of its own: each cut to KOUT_LINE bytes, every
 * byte outside printable ASCII escaped (no line of a kernel's can pass for
 * one of ours), at most LOG_LIMIT_BURST a minute, the rest counted and
 * dropped. What it holds is one line, however much comes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proxy.h"

#define KOUT_LINE 240 /* bytes of a line logged; the rest of it is dropped */
#define KOUT_READ_MAX                                                                    \
	(256 << 10) /* read at most this much per wake: the loop serves the rest */

static struct {
	const char *ko_id; /* the proxy's, for the log */
	int ko_rd, ko_wr;  /* the pipe: ours to read, the boxes' to write */
	char ko_line[KOUT_LINE];
	size_t ko_len; /* of ko_line */
	bool ko_cut;   /* the line went on past KOUT_LINE: dropped until its end */
	struct loglimit ko_log;
} ko = {.ko_rd = -1, .ko_wr = -1, .ko_log = {.ll_what = "lines of the kernel's output"}};

/* The pipe, made once for every kernel the proxy starts: 0 or -errno. */
int
kout_open(const char *id)
{
	int p[2];

	ko.ko_id = id;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	/* ours never blocks; theirs does, as a terminal's would, while we read */
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
		int rc = -errno;
		close(p[0]);
		close(p[1]);
		return rc;
	}
	ko.ko_rd = p[0];
	ko.ko_wr = p[1];
	return 0;
}

/* The end the loop watches, and the end a box's stdout and stderr are. */
int
kout_fd(void)
{
	return ko.ko_rd;
}

int
kout_box_fd(void)
{
	return ko.ko_wr;
}

/* One line, escaped, at the limited rate. */
static void
emit(uint64_t now)
{
	char esc[KOUT_LINE * 4 + 8];
	size_t n = 0;

	for (size_t i = 0; i < ko.ko_len; i++) {
		unsigned char c = (unsigned char)ko.ko_line[i];
		if (c >= 0x20 && c < 0x7f && c != '\\')
			esc[n++] = (char)c;
		else
			n += snprintf(esc + n, sizeof(esc) - n,
			              c == '\t' ? "\\t" : "\\x%02x", c);
	}
	esc[n] = '\0';
	if (n)
		log_limited(&ko.ko_log, now, LOG_INFO, "context %s: kernel output: %s%s",
		            ko.ko_id, esc, ko.ko_cut ? " [cut]" : "");
	ko.ko_len = 0;
}

/* Reads what the pipe holds (at most KOUT_READ_MAX a call), logging its lines. */
void
kout_drain(uint64_t now)
{
	char buf[16384];
	size_t total = 0;
	ssize_t got;

	while (total < KOUT_READ_MAX && (got = read(ko.ko_rd, buf, sizeof(buf))) > 0) {
		total += got;
		for (ssize_t i = 0; i < got; i++) {
			if (buf[i] == '\n' || buf[i] == '\r') {
				if (!ko.ko_cut)
					emit(now);
				ko.ko_cut = false;
			} else if (ko.ko_cut) {
				continue; /* the rest of a line logged cut */
			} else if (ko.ko_len < KOUT_LINE) {
				ko.ko_line[ko.ko_len++] = buf[i];
			} else {
				ko.ko_cut = true;
				emit(now);
			}
		}
	}
}

/* The count of lines not logged, once their minute is over. */
void
kout_tick(uint64_t now)
{
	log_limit_flush(&ko.ko_log, now);
}
