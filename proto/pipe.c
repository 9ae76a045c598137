/*
 * pipe.c — messages over a plain stream socket, for the envd proxy and its
 * agent (docs/ENVD.md): each frame is a 4-byte big-endian length, then the
 * msgpack frame msg_encode makes. Blocking: each end writes whole frames.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "proto.h"

static int
pipe_write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EPIPE;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int
pipe_read_all(int fd, unsigned char *p, size_t n)
{
	while (n) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EPIPE;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* 0, or -errno (-EPIPE: the other end is gone). */
int
pipe_send(int fd, const struct msg *m)
{
	unsigned char head[4];
	void *buf = NULL;
	size_t len = 0;
	int rc;

	if (msg_encode(m, &buf, &len) < 0)
		return -EINVAL;
	head[0] = len >> 24;
	head[1] = len >> 16;
	head[2] = len >> 8;
	head[3] = len;
	if ((rc = pipe_write_all(fd, head, 4)) == 0)
		rc = pipe_write_all(fd, buf, len);
	free(buf);
	return rc;
}

/* 0 with *m decoded (msg_free it), -EPIPE at the end, -EMSGSIZE or -EBADMSG for a bad
 * frame. */
int
pipe_recv(int fd, struct msg *m)
{
	unsigned char head[4], *buf;
	size_t len;
	int rc;

	if ((rc = pipe_read_all(fd, head, 4)) < 0)
		return rc;
	len = (size_t)head[0] << 24 | (size_t)head[1] << 16 | (size_t)head[2] << 8 |
	      head[3];
	if (len > PROTO_MAX_FRAME)
		return -EMSGSIZE;
	buf = xmalloc(len ? len : 1);
	if ((rc = pipe_read_all(fd, buf, len)) == 0 &&
	    msg_decode(buf, len, m) != PROTO_OK)
		rc = -EBADMSG;
	free(buf);
	return rc;
}
