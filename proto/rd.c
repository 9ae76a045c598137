/*
 * rd.c — the bounded msgpack reader the frame codec (proto.c) and the
 * context spec (spec.c) share: every read checks the bytes that remain, and
 * a count is believed only as far as the bytes left can hold it.
 */
#include <stdbool.h>
#include <stdint.h>

#include "proto.h"

int
rd_bytes(struct rd *r, size_t n, const uint8_t **out)
{
	if ((size_t)(r->end - r->p) < n)
		return PROTO_ETRUNC;
	*out = r->p;
	r->p += n;
	return 0;
}

int
rd_be(struct rd *r, size_t n, uint64_t *v)
{
	const uint8_t *b;
	int e = rd_bytes(r, n, &b);

	if (e)
		return e;
	*v = 0;
	for (size_t i = 0; i < n; i++)
		*v = (*v << 8) | b[i];
	return 0;
}

int
rd_uint(struct rd *r, uint64_t *v)
{
	uint64_t t;
	int e = rd_be(r, 1, &t);

	if (e)
		return e;
	if (t <= 0x7f) {
		*v = t;
		return 0;
	}
	switch (t) {
	case 0xcc:
		return rd_be(r, 1, v);
	case 0xcd:
		return rd_be(r, 2, v);
	case 0xce:
		return rd_be(r, 4, v);
	case 0xcf:
		return rd_be(r, 8, v);
	}
	return PROTO_ETYPE;
}

int
rd_str(struct rd *r, size_t max, const char **s, size_t *len)
{
	uint64_t t, n;
	int e = rd_be(r, 1, &t);

	if (e)
		return e;
	if (t >= 0xa0 && t <= 0xbf)
		n = t & 0x1f;
	else if (t == 0xd9)
		e = rd_be(r, 1, &n);
	else if (t == 0xda)
		e = rd_be(r, 2, &n);
	else if (t == 0xdb)
		e = rd_be(r, 4, &n);
	else
		return PROTO_ETYPE;
	if (e)
		return e;
	if (n > max)
		return PROTO_ESIZE;
	const uint8_t *b;
	if ((e = rd_bytes(r, n, &b)))
		return e;
	*s = (const char *)b;
	*len = n;
	return 0;
}

int
rd_map(struct rd *r, uint64_t *n)
{
	uint64_t t;
	int e = rd_be(r, 1, &t);

	if (e)
		return e;
	if (t >= 0x80 && t <= 0x8f)
		*n = t & 0x0f;
	else if (t == 0xde)
		e = rd_be(r, 2, n);
	else if (t == 0xdf)
		e = rd_be(r, 4, n);
	else
		return PROTO_ETYPE;
	/* each entry takes at least two bytes: a count past that is a lie */
	if (!e && *n > (uint64_t)(r->end - r->p) / 2)
		return PROTO_ETRUNC;
	return e;
}

int
rd_bool(struct rd *r, bool *v)
{
	uint64_t t;
	int e = rd_be(r, 1, &t);

	if (e)
		return e;
	if (t != 0xc2 && t != 0xc3)
		return PROTO_ETYPE;
	*v = t == 0xc3;
	return 0;
}
