/*
 * zmtp.c — one connection to a kernel's ZeroMQ socket, spoken on the proxy's
 * own loop: ZMTP 3.0 with the NULL mechanism, as the DEALER, SUB or REQ peer
 * of the kernel's ROUTER, PUB and REP. The kernel is untrusted, so what it
 * sends is read only when the loop asks for a message, and at most one
 * message (ZMTP_MAX_BYTES, ZMTP_MAX_FRAMES) is ever held: a bigger one is
 * skipped as it streams past, never buffered. A kernel that writes faster
 * than we read fills its own socket buffer and waits.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proxy.h"

#define GREETING 64
#define F_MORE 0x01
#define F_LONG 0x02
#define F_COMMAND 0x04
#define IVL_MIN_MS 10 /* reconnect after 10, 20, then every 40 ms (a kernel binds */
#define IVL_MAX_MS 40 /* its sockets early in its start, which lasts longer) */
#define READ_MIN (64u << 10)
#define OUT_MAX (2 * ZMTP_MAX_BYTES) /* unsent bytes: a send past this fails */

enum { ZS_DOWN, ZS_CONNECTING, ZS_GREETING, ZS_READY, ZS_UP };

static const char *const type_names[] = {[ZMTP_DEALER] = "DEALER", [ZMTP_SUB] = "SUB",
					 [ZMTP_REQ] = "REQ"};

static int
buf_room(struct zbuf *b, size_t need)
{
	if (b->zb_off && b->zb_cap - b->zb_len < need) {
		memmove(b->zb_data, b->zb_data + b->zb_off, b->zb_len - b->zb_off);
		b->zb_len -= b->zb_off;
		b->zb_off = 0;
	}
	if (b->zb_cap - b->zb_len >= need)
		return 0;
	/* double, or exactly what one message needs: a big one is held once */
	size_t cap = b->zb_cap ? 2 * b->zb_cap : READ_MIN;
	if (cap < b->zb_len + need)
		cap = b->zb_len + need;
	unsigned char *d = realloc(b->zb_data, cap);
	if (!d)
		return -ENOMEM;
	b->zb_data = d;
	b->zb_cap = cap;
	return 0;
}

static int
buf_put(struct zbuf *b, const void *p, size_t n)
{
	int rc = buf_room(b, n);

	if (rc == 0) {
		memcpy(b->zb_data + b->zb_len, p, n);
		b->zb_len += n;
	}
	return rc;
}

/* Empty: its memory goes back unless it is small. */
static void
buf_reset(struct zbuf *b)
{
	b->zb_off = b->zb_len = 0;
	if (b->zb_cap > 4 * READ_MIN) {
		free(b->zb_data);
		b->zb_data = NULL;
		b->zb_cap = 0;
	}
}

static size_t
frame_head(unsigned char *h, size_t len, unsigned flags)
{
	if (len <= 255) {
		h[0] = flags;
		h[1] = len;
		return 2;
	}
	h[0] = flags | F_LONG;
	for (int i = 8; i >= 1; i--, len >>= 8)
		h[i] = len & 0xff;
	return 9;
}

static int
put_frame(struct zbuf *b, const void *p, size_t len, unsigned flags)
{
	unsigned char h[9];
	int rc = buf_put(b, h, frame_head(h, len, flags));

	return rc ? rc : buf_put(b, p, len);
}

/*
 * Greeting and READY. What follows waits for the kernel's READY: libzmq
 * takes a message that comes before it has sent its own for a bad command.
 */
static int
handshake(struct zmtp *z, struct zbuf *b)
{
	unsigned char g[GREETING] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0, 'N', 'U', 'L', 'L'};
	unsigned char cmd[128], *c = cmd;
	const char *type = type_names[z->z_type];
	size_t tl = strlen(type);
	int rc;

	*c++ = 5;
	memcpy(c, "READY", 5), c += 5;
	*c++ = 11;
	memcpy(c, "Socket-Type", 11), c += 11;
	*c++ = 0, *c++ = 0, *c++ = 0, *c++ = tl;
	memcpy(c, type, tl), c += tl;
	if (z->z_idlen) {
		*c++ = 8;
		memcpy(c, "Identity", 8), c += 8;
		*c++ = 0, *c++ = 0, *c++ = 0, *c++ = z->z_idlen;
		memcpy(c, z->z_id, z->z_idlen), c += z->z_idlen;
	}
	if ((rc = buf_put(b, g, sizeof(g))))
		return rc;
	return put_frame(b, cmd, c - cmd, F_COMMAND);
}

/* The kernel's READY came: the subscription, then what was sent meanwhile. */
static int
up(struct zmtp *z)
{
	int rc = 0;

	z->z_state = ZS_UP;
	z->z_ivl = IVL_MIN_MS;
	if (z->z_type == ZMTP_SUB) /* ZMTP 3.0: a message of 1 and the prefix, here none */
		rc = put_frame(&z->z_out, "\1", 1, 0);
	if (rc == 0 && z->z_pend.zb_len > z->z_pend.zb_off)
		rc = buf_put(&z->z_out, z->z_pend.zb_data + z->z_pend.zb_off,
			     z->z_pend.zb_len - z->z_pend.zb_off);
	buf_reset(&z->z_pend);
	return rc; /* written when the loop sees the socket writable */
}

static void
set_down(struct zmtp *z)
{
	if (z->z_fd >= 0)
		close(z->z_fd);
	z->z_fd = -1;
	z->z_state = ZS_DOWN;
	z->z_retry_at = now_ms() + z->z_ivl;
	z->z_ivl = z->z_ivl * 2 > IVL_MAX_MS ? IVL_MAX_MS : z->z_ivl * 2;
	/* a message half written cannot be finished on another connection */
	buf_reset(&z->z_out);
	buf_reset(&z->z_in);
	z->z_cur = z->z_nframes = z->z_msg_bytes = z->z_skip = 0;
	z->z_skipping = z->z_skip_more = z->z_dropping = z->z_quiet = z->z_have = false;
}

/* A kernel can break its connections at will: their lines are limited. */
static struct loglimit zmtp_log = {.ll_what = "warnings about the kernel's connections"};

/* A protocol error or a closed connection: down, tried again later. */
static void
lost(struct zmtp *z, const char *why)
{
	if (why && z->z_ep)
		log_limited(&zmtp_log, now_ms(), LOG_WARN, "kernel %s %s: connection dropped: %s",
			    type_names[z->z_type], z->z_ep, why);
	set_down(z);
}

/* ipc://PATH or tcp://HOST:PORT, the forms a kernel's connection file gives. */
static int
endpoint(const char *ep, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	if (!strncmp(ep, "ipc://", 6)) {
		struct sockaddr_un *un = (struct sockaddr_un *)ss;
		size_t n = strlen(ep + 6);
		if (n >= sizeof(un->sun_path) || !strcmp(ep + 6, "@"))
			return n ? -ENAMETOOLONG : -EINVAL;
		un->sun_family = AF_UNIX;
		memcpy(un->sun_path, ep + 6, n);
		/* "@name": an abstract socket (ZeroMQ's form), as long as its name */
		if (un->sun_path[0] == '@')
			un->sun_path[0] = '\0';
		*len = offsetof(struct sockaddr_un, sun_path) + n;
		return 0;
	}
	if (!strncmp(ep, "tcp://", 6)) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;
		char host[64];
		const char *colon = strrchr(ep + 6, ':');
		if (!colon || (size_t)(colon - (ep + 6)) >= sizeof(host))
			return -EINVAL;
		memcpy(host, ep + 6, colon - (ep + 6));
		host[colon - (ep + 6)] = '\0';
		char *end;
		long port = strtol(colon + 1, &end, 10);
		if (*end || port <= 0 || port > 65535 || inet_pton(AF_INET, host, &in->sin_addr) != 1)
			return -EINVAL;
		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		*len = sizeof(*in);
		return 0;
	}
	return -EINVAL;
}

/* Starts a connection; what was queued while down follows the handshake. */
static void
connect_now(struct zmtp *z)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, one = 1;

	if (endpoint(z->z_ep, &ss, &len) < 0) {
		set_down(z);
		return;
	}
	if ((fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
		set_down(z);
		return;
	}
	if (ss.ss_family == AF_INET)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	z->z_fd = fd;
	z->z_drained = false;
	z->z_conns++;
	buf_reset(&z->z_out);
	if (handshake(z, &z->z_out) < 0) {
		set_down(z);
		return;
	}
	if (connect(fd, (struct sockaddr *)&ss, len) == 0)
		z->z_state = ZS_GREETING;
	else if (errno == EINPROGRESS)
		z->z_state = ZS_CONNECTING; /* TCP: the loop's EPOLLOUT says when */
	else
		set_down(z); /* not bound yet (ENOENT, ECONNREFUSED), or a full backlog */
}

struct zmtp *
zmtp_open(enum zmtp_type type, const char *ep, const char *id)
{
	struct zmtp *z = xcalloc(1, sizeof(*z));

	z->z_type = type;
	z->z_ep = xstrdup(ep);
	z->z_fd = -1;
	z->z_ivl = IVL_MIN_MS;
	if (id) {
		z->z_idlen = strlen(id) < sizeof(z->z_id) ? strlen(id) : sizeof(z->z_id) - 1;
		memcpy(z->z_id, id, z->z_idlen);
	}
	connect_now(z);
	if (z->z_state >= ZS_GREETING)
		zmtp_flush(z);
	return z;
}

void
zmtp_close(struct zmtp *z)
{
	if (!z)
		return;
	if (z->z_fd >= 0)
		close(z->z_fd);
	free(z->z_out.zb_data);
	free(z->z_pend.zb_data);
	free(z->z_in.zb_data);
	free(z->z_ep);
	free(z);
}

/* Quiet: the buffers that hold nothing are freed (64 KiB or more each, most
 * of it written once); the next message takes new ones. */
void
zmtp_shed(struct zmtp *z)
{
	struct zbuf *b[3] = {&z->z_out, &z->z_pend, &z->z_in};

	for (int i = 0; i < 3; i++) {
		if (b[i]->zb_off != b[i]->zb_len || (i == 2 && (z->z_have || z->z_cur)))
			continue;
		free(b[i]->zb_data);
		memset(b[i], 0, sizeof(*b[i]));
	}
}

void
zmtp_reconnect(struct zmtp *z)
{
	if (z->z_fd >= 0)
		lost(z, NULL);
	z->z_retry_at = now_ms();
}

bool
zmtp_up(const struct zmtp *z)
{
	return z->z_state == ZS_UP;
}

int
zmtp_fd(const struct zmtp *z)
{
	return z->z_fd;
}

unsigned
zmtp_events(const struct zmtp *z)
{
	if (z->z_fd < 0)
		return 0;
	if (z->z_state == ZS_CONNECTING)
		return EPOLLOUT;
	return EPOLLIN | (z->z_out.zb_len > z->z_out.zb_off ? EPOLLOUT : 0);
}

long
zmtp_wait(const struct zmtp *z, uint64_t now)
{
	if (z->z_state != ZS_DOWN)
		return -1;
	return z->z_retry_at > now ? (long)(z->z_retry_at - now) : 0;
}

void
zmtp_tick(struct zmtp *z, uint64_t now)
{
	log_limit_flush(&zmtp_log, now);
	if (z->z_state == ZS_DOWN && z->z_ep && now >= z->z_retry_at) {
		connect_now(z);
		if (z->z_state >= ZS_GREETING)
			zmtp_flush(z);
	}
}

/* Writes what it can; the loop's EPOLLOUT brings it back for the rest. */
void
zmtp_flush(struct zmtp *z)
{
	if (z->z_state == ZS_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(z->z_fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
			set_down(z);
			return;
		}
		z->z_state = ZS_GREETING;
	}
	while (z->z_fd >= 0 && z->z_out.zb_len > z->z_out.zb_off) {
		ssize_t n = send(z->z_fd, z->z_out.zb_data + z->z_out.zb_off,
				 z->z_out.zb_len - z->z_out.zb_off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == ENOTCONN)
				return;
			lost(z, strerror(errno));
			return;
		}
		z->z_out.zb_off += n;
	}
	if (z->z_out.zb_off == z->z_out.zb_len)
		buf_reset(&z->z_out);
}

int
zmtp_send(struct zmtp *z, const struct wire_frame *f, size_t n)
{
	size_t bytes = 0;
	int rc = 0;

	/* before the handshake is done, held apart (a lost connection keeps it) */
	struct zbuf *b = z->z_state == ZS_UP ? &z->z_out : &z->z_pend;

	for (size_t i = 0; i < n; i++)
		bytes += f[i].wf_len + 9;
	if (b->zb_len - b->zb_off + bytes > OUT_MAX)
		return -ENOBUFS;
	size_t mark = b->zb_len - b->zb_off; /* a message goes whole or not at all */
	if (z->z_type == ZMTP_REQ)          /* REQ's envelope: an empty frame first */
		rc = put_frame(b, "", 0, F_MORE);
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = put_frame(b, f[i].wf_data, f[i].wf_len, i + 1 < n ? F_MORE : 0);
	if (rc < 0) {
		b->zb_len = b->zb_off + mark;
		return rc;
	}
	if (z->z_state == ZS_UP)
		zmtp_flush(z);
	return 0;
}

/* The frame header at p (avail bytes): its size, its body's length, flags. */
static int
parse_head(const unsigned char *p, size_t avail, size_t *hl, uint64_t *len, unsigned *flags)
{
	if (avail < 2)
		return -EAGAIN;
	*flags = p[0];
	if (p[0] & ~(F_MORE | F_LONG | F_COMMAND))
		return -EPROTO;
	*hl = p[0] & F_LONG ? 9 : 2;
	if (avail < *hl)
		return -EAGAIN;
	if (!(p[0] & F_LONG)) {
		*len = p[1];
		return 0;
	}
	*len = 0;
	for (int i = 1; i <= 8; i++)
		*len = *len << 8 | p[i];
	return *len >> 62 ? -EPROTO : 0; /* no real frame; keeps sums from overflowing */
}

/* The peer's greeting: ZMTP 3 or later, NULL mechanism. */
static int
greeting(const unsigned char *g)
{
	static const unsigned char null[20] = "NULL";

	if (g[0] != 0xff || !(g[9] & 1) || g[10] < 3 || memcmp(g + 12, null, sizeof(null)))
		return -EPROTO;
	return 0;
}

/* Forgets the message being cut (its bytes stay until consumed). */
static void
msg_reset(struct zmtp *z)
{
	z->z_cur = z->z_msg_bytes = 0;
	z->z_nframes = 0;
}

/*
 * Cuts the next message out of what was read. Returns 0 with its frames in
 * z_frames, -E2BIG when one was skipped whole, -EAGAIN when at least *need
 * more bytes are wanted, -EPROTO when the stream is not ZMTP.
 */
static int
cut(struct zmtp *z, size_t *need)
{
	struct zbuf *b = &z->z_in;

	*need = 9;
	for (;;) {
		unsigned char *p = b->zb_data + b->zb_off;
		size_t avail = b->zb_len - b->zb_off, hl;
		uint64_t len;
		unsigned flags;
		int rc;

		if (z->z_skipping) { /* a dropped frame's body: consumed as it comes */
			size_t n = avail < z->z_skip ? avail : z->z_skip;
			b->zb_off += n;
			if ((z->z_skip -= n))
				return -EAGAIN;
			z->z_skipping = false;
			if (!z->z_skip_more) {
				bool quiet = z->z_quiet;
				z->z_dropping = z->z_quiet = false;
				if (!quiet)
					return -E2BIG;
			}
			continue;
		}
		if (z->z_state == ZS_GREETING) {
			if (avail < GREETING) {
				*need = GREETING - avail;
				return -EAGAIN;
			}
			if (greeting(p) < 0)
				return -EPROTO;
			b->zb_off += GREETING;
			z->z_state = ZS_READY;
			continue;
		}
		if ((rc = parse_head(p + z->z_cur, avail - z->z_cur, &hl, &len, &flags)) < 0)
			return rc;
		if (z->z_state == ZS_READY) { /* the peer's READY, properties unread */
			if ((flags & ~F_LONG) != F_COMMAND || len < 6 || len > 4096)
				return -EPROTO;
			if (avail < hl + len) {
				*need = hl + len - avail;
				return -EAGAIN;
			}
			if (p[hl] != 5 || memcmp(p + hl + 1, "READY", 5))
				return -EPROTO;
			b->zb_off += hl + len;
			if (up(z) < 0)
				return -ENOMEM;
			continue;
		}
		if ((flags & F_COMMAND) && !z->z_dropping) {
			/* a command between messages (a 3.1 peer's PING): skipped */
			if (z->z_nframes || (flags & F_MORE))
				return -EPROTO;
			z->z_dropping = z->z_quiet = true;
		}
		if (!z->z_dropping &&
		    (z->z_nframes == ZMTP_MAX_FRAMES || z->z_msg_bytes + len > ZMTP_MAX_BYTES)) {
			b->zb_off += z->z_cur; /* what was cut of it goes too */
			msg_reset(z);
			z->z_dropping = true;
			continue;
		}
		if (z->z_dropping) {
			b->zb_off += hl;
			z->z_skip = len;
			z->z_skip_more = flags & F_MORE;
			z->z_skipping = true;
			continue;
		}
		if (avail - z->z_cur < hl + len) {
			*need = hl + len - (avail - z->z_cur);
			return -EAGAIN;
		}
		/* offsets: the buffer may move before the message is whole */
		z->z_foff[z->z_nframes] = z->z_cur + hl;
		z->z_frames[z->z_nframes++].wf_len = len;
		z->z_msg_bytes += len;
		z->z_cur += hl + len;
		if (!(flags & F_MORE))
			return 0;
	}
}

/* The message zmtp_recv gave last is done with: its bytes go. */
static void
consume(struct zmtp *z)
{
	if (!z->z_have)
		return;
	z->z_have = false;
	z->z_in.zb_off += z->z_cur;
	msg_reset(z);
	if (z->z_in.zb_off == z->z_in.zb_len)
		buf_reset(&z->z_in);
}

int
zmtp_recv(struct zmtp *z, const struct wire_frame **f, size_t *n)
{
	consume(z);
	for (;;) {
		size_t need;
		ssize_t r;
		int rc;

		if (z->z_state < ZS_GREETING)
			return -EAGAIN;
		if (z->z_in.zb_data && (rc = cut(z, &need)) != -EAGAIN) {
			if (rc == -EPROTO || rc == -ENOMEM) {
				lost(z, rc == -ENOMEM ? "out of memory" : "the kernel does not speak ZMTP 3");
				return -EAGAIN;
			}
			if (rc == 0) {
				for (size_t i = 0; i < z->z_nframes; i++)
					z->z_frames[i].wf_data =
					    z->z_in.zb_data + z->z_in.zb_off + z->z_foff[i];
				z->z_have = true;
				*f = z->z_frames;
				*n = z->z_nframes;
			}
			return rc;
		}
		if (!z->z_in.zb_data)
			need = GREETING;
		if (z->z_fd < 0)
			return -EAGAIN;
		/* A read that got less than it asked for emptied the socket: the
		 * next one would find nothing (EAGAIN), so it is not made. Bytes
		 * that came since keep the socket readable for the loop's epoll,
		 * and every loop reads each socket it woke for again (the flag
		 * lasts only until the call that skips the read). */
		if (z->z_drained) {
			z->z_drained = false;
			return -EAGAIN;
		}
		if (buf_room(&z->z_in, need > READ_MIN ? need : READ_MIN) < 0) {
			lost(z, "out of memory");
			return -EAGAIN;
		}
		size_t want = z->z_in.zb_cap - z->z_in.zb_len;
		r = recv(z->z_fd, z->z_in.zb_data + z->z_in.zb_len, want, MSG_DONTWAIT);
		if (r > 0) {
			z->z_in.zb_len += r;
			z->z_drained = (size_t)r < want;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return -EAGAIN;
		lost(z, r == 0 ? "closed by the kernel" : strerror(errno));
		return -EAGAIN;
	}
}

struct zmtp *
zmtp_open_buffer(enum zmtp_type type)
{
	struct zmtp *z = xcalloc(1, sizeof(*z));

	z->z_type = type;
	z->z_fd = -1;
	z->z_ivl = IVL_MIN_MS;
	z->z_state = ZS_GREETING;
	return z;
}

int
zmtp_feed(struct zmtp *z, const void *p, size_t n)
{
	return buf_put(&z->z_in, p, n);
}
