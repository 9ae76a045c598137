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

/* m's frame appended to out: 0, or -EINVAL when it does not encode. */
int
pipe_frame_out(const struct msg *m, struct buf *out)
{
	unsigned char head[4];
	void *buf = NULL;
	size_t len = 0;

	if (msg_encode(m, &buf, &len) < 0)
		return -EINVAL;
	head[0] = len >> 24;
	head[1] = len >> 16;
	head[2] = len >> 8;
	head[3] = len;
	buf_append(out, head, 4);
	buf_append(out, buf, len);
	free(buf);
	return 0;
}

/*
 * The first whole frame of in, taken off it: 0 with *m decoded, -EAGAIN when
 * no whole frame is there yet, -EMSGSIZE or -EBADMSG for one that must end
 * the connection (its bytes are not taken).
 */
int
pipe_frame_in(struct buf *in, struct msg *m)
{
	const unsigned char *p = (const unsigned char *)buf_head(in);
	size_t have = buf_pending(in), len;

	if (have < 4)
		return -EAGAIN;
	len = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
	if (len > PROTO_MAX_FRAME)
		return -EMSGSIZE;
	if (have - 4 < len)
		return -EAGAIN;
	if (msg_decode(p + 4, len, m) != PROTO_OK)
		return -EBADMSG;
	buf_consume(in, 4 + len);
	return 0;
}

/* 0, or -errno (-EPIPE: the other end is gone). */
int
pipe_send(int fd, const struct msg *m)
{
	struct buf out = {0};
	int rc;

	if ((rc = pipe_frame_out(m, &out)) == 0)
		rc = pipe_write_all(fd, (const unsigned char *)buf_head(&out),
		                    buf_pending(&out));
	buf_free(&out);
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
