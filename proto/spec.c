/*
 * spec.c — the context spec's codec (struct spec, proto.h): one table of
 * fields, each with its kind and bounds, from which the encoder, the decoder,
 * spec_free and the round-trip test all work. The proxy decodes what its
 * broker wrote, but checks every field as peer input all the same.
 */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <msgpack.h>

#include "proto.h"

/* a path (a request's cwd is shorter); a language, a kernelspec, a user;
 * a comma-separated list (CIDRs, names), as long as an argument could be */
#define SPEC_PATH PROTO_MAX_NAME
#define SPEC_NAME 255
#define SPEC_LIST (128u << 10)
#define SPEC_DAY 86400000 /* ms */

/*
 * A field's number on the wire is its index here: new fields go last, and
 * none is ever reordered. sf_min and sf_max bound a number, sf_max a
 * string's length; sf_req: a spec without it is refused.
 */
static const struct spec_field fields[] = {
// clang-format off
#define S(m, max, req) {#m, SK_STR, offsetof(struct spec, sp_##m), 0, max, req}
#define U(m, min, max) {#m, SK_U64, offsetof(struct spec, sp_##m), min, max, false}
#define B(m) {#m, SK_BOOL, offsetof(struct spec, sp_##m), 0, 1, false}
    S(language, SPEC_NAME, true),
    S(kernel, SPEC_NAME, false),
    S(cwd, SPEC_PATH, true),
    S(env_file, SPEC_PATH, false),
    S(env_pass, SPEC_LIST, false),
    B(default),
    B(pooled),
    S(python_startup, SPEC_PATH, false),
    S(kernel_user, SPEC_NAME, false),
    U(memory, 0, UINT64_MAX),
    U(cpu, 0, UINT32_MAX),
    S(cgroup, SPEC_PATH, false),
    S(cgroup_group, SPEC_PATH, false),
    B(sandbox),
    B(no_namespaces),
    B(isolated),
    B(outbound),
    U(uid_first, 0, UINT32_MAX - 1),
    U(uid_last, 0, UINT32_MAX - 1),
    U(uid, 0, UINT32_MAX - 1),
    U(net_uid, 0, UINT32_MAX - 1),
    U(uplink, 0, INT32_MAX),
    S(egress_allow, SPEC_LIST, false),
    S(egress_deny, SPEC_LIST, false),
    S(context_allow, SPEC_LIST, false),
    S(context_deny, SPEC_LIST, false),
    U(pids, 0, UINT64_MAX),
    U(tmp_size, 0, UINT64_MAX),
    B(own_workspace),
    U(workspace_size, 0, UINT64_MAX),
    S(workspace, SPEC_PATH, false),
    S(hide, SPEC_PATH, false),
    U(interrupt_retry, 0, SPEC_DAY),
    U(interrupt_grace, 0, SPEC_DAY),
    U(heartbeat_timeout, 0, SPEC_DAY),
    S(envd, SPEC_PATH, false),
    S(template, SPEC_PATH, false),
    U(template_wait, 0, UINT32_MAX),
    U(max_starting, 0, 1000000),
// clang-format on
#undef S
#undef U
#undef B
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

const struct spec_field *
spec_fields(size_t *n)
{
	*n = NFIELDS;
	return fields;
}

#define AT(s, f, T) ((T *)((char *)(s) + (f)->sf_off))

/* Whether field f of s is sent: set, not its zero. */
static bool
spec_has(const struct spec *s, const struct spec_field *f)
{
	switch (f->sf_kind) {
	case SK_STR:
		return *AT(s, f, const char *const) != NULL;
	case SK_U64:
		return *AT(s, f, const uint64_t) != 0;
	case SK_BOOL:
		return *AT(s, f, const bool);
	}
	return false;
}

/* Whether field f of s (sent) is within its bounds. */
static bool
spec_within(const struct spec *s, const struct spec_field *f)
{
	switch (f->sf_kind) {
	case SK_STR:
		return strlen(*AT(s, f, const char *const)) <= f->sf_max;
	case SK_U64:
		return *AT(s, f, const uint64_t) >= f->sf_min &&
		       *AT(s, f, const uint64_t) <= f->sf_max;
	case SK_BOOL:
		return true;
	}
	return false;
}

static int
write_sbuf(void *data, const char *buf, size_t len)
{
	return msgpack_sbuffer_write(data, buf, len);
}

int
spec_encode(const struct spec *s, void **buf, size_t *len)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	unsigned n = 0;
	int e;

	*buf = NULL;
	*len = 0;
	for (size_t i = 0; i < NFIELDS; i++) {
		if (!spec_has(s, &fields[i]))
			continue;
		if (!spec_within(s, &fields[i])) /* the proxy would refuse it */
			return PROTO_ESIZE;
		n++;
	}
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, write_sbuf);
	e = msgpack_pack_map(&pk, n);
	for (size_t i = 0; i < NFIELDS && !e; i++) {
		const struct spec_field *f = &fields[i];
		if (!spec_has(s, f))
			continue;
		e = msgpack_pack_uint32(&pk, i);
		switch (f->sf_kind) {
		case SK_STR: {
			const char *v = *AT(s, f, const char *const);
			e = e || msgpack_pack_str(&pk, strlen(v)) ||
			    msgpack_pack_str_body(&pk, v, strlen(v));
			break;
		}
		case SK_U64:
			e = e || msgpack_pack_uint64(&pk, *AT(s, f, const uint64_t));
			break;
		case SK_BOOL:
			e = e || msgpack_pack_true(&pk);
			break;
		}
	}
	if (e || !sb.data) {
		msgpack_sbuffer_destroy(&sb);
		*buf = NULL;
		*len = 0;
		return PROTO_ENOMEM;
	}
	*buf = sb.data;
	*len = sb.size;
	return 0;
}

/* One value of field f into s: within its bounds, a string without a NUL. */
static int
spec_field(struct rd *r, const struct spec_field *f, struct spec *s)
{
	const char *str;
	size_t sl;
	uint64_t v;
	char *copy;
	int e;

	switch (f->sf_kind) {
	case SK_STR:
		if ((e = rd_str(r, f->sf_max, &str, &sl)))
			return e;
		if (memchr(str, '\0', sl))
			return PROTO_ETYPE;
		if (!(copy = strndup(str, sl)))
			return PROTO_ENOMEM;
		*AT(s, f, char *) = copy;
		return 0;
	case SK_U64:
		if ((e = rd_uint(r, &v)))
			return e;
		if (v < f->sf_min || v > f->sf_max)
			return PROTO_ESIZE;
		*AT(s, f, uint64_t) = v;
		return 0;
	case SK_BOOL:
		return rd_bool(r, AT(s, f, bool));
	}
	return PROTO_ETYPE;
}

int
spec_decode(const void *buf, size_t len, struct spec *s)
{
	struct rd r = {buf, (const uint8_t *)buf + len};
	bool seen[NFIELDS] = {0};
	uint64_t n, id;
	int e;

	memset(s, 0, sizeof(*s));
	if (len > SPEC_MAX_BYTES)
		return PROTO_ESIZE;
	if ((e = rd_map(&r, &n)))
		return e;
	for (uint64_t i = 0; i < n; i++) {
		if ((e = rd_uint(&r, &id)))
			goto err;
		if (id >= NFIELDS) {
			e = PROTO_EUNKNOWN;
			goto err;
		}
		if (seen[id]) {
			e = PROTO_EDUP;
			goto err;
		}
		seen[id] = true;
		if ((e = spec_field(&r, &fields[id], s)))
			goto err;
	}
	for (size_t i = 0; i < NFIELDS; i++)
		if (fields[i].sf_req && !seen[i]) {
			e = PROTO_EMISSING;
			goto err;
		}
	if (r.p != r.end) {
		e = PROTO_ETRAIL;
		goto err;
	}
	if (s->sp_uid_first > s->sp_uid_last) { /* a range, first to last */
		e = PROTO_ESIZE;
		goto err;
	}
	return 0;
err:
	spec_free(s);
	return e;
}

int
spec_read(int fd, char **buf, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *b = malloc(cap), *more;
	ssize_t got;
	int e;

	*buf = NULL;
	*len = 0;
	if (!b)
		return -ENOMEM;
	lseek(fd, 0, SEEK_SET); /* a memfd the broker wrote; a pipe has no offset */
	for (;;) {
		if (n == cap) {
			if (cap > SPEC_MAX_BYTES) {
				free(b);
				return -EFBIG;
			}
			if (!(more = realloc(b, cap * 2))) {
				free(b);
				return -ENOMEM;
			}
			b = more;
			cap *= 2;
		}
		if ((got = read(fd, b + n, cap - n)) < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			e = -errno;
			free(b);
			return e;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	if (n > SPEC_MAX_BYTES) {
		free(b);
		return -EFBIG;
	}
	*buf = b;
	*len = n;
	return 0;
}

void
spec_free(struct spec *s)
{
	for (size_t i = 0; i < NFIELDS; i++)
		if (fields[i].sf_kind == SK_STR)
			free(*AT(s, &fields[i], char *));
	memset(s, 0, sizeof(*s));
}
