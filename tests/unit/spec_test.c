/*
 * spec_test.c — the context spec (proto/spec.c). Every field of its table
 * survives a round trip at its bounds; the table covers struct spec; what is
 * malformed, out of bounds, unknown, repeated, truncated or oversized is
 * refused with its code; spec_read takes a memfd's bytes and no more than
 * SPEC_MAX_BYTES.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <msgpack.h>

#include "../../proto/proto.h"

#define AT(s, f, T) ((T *)((char *)(s) + (f)->sf_off))

static size_t
kind_size(enum spec_kind k)
{
	return k == SK_STR   ? sizeof(char *)
	       : k == SK_U64 ? sizeof(uint64_t)
	                     : sizeof(bool);
}

/* s with every field set: strings at their longest (distinct), numbers at max */
static void
fill(struct spec *s, char **strs)
{
	size_t n;
	const struct spec_field *t = spec_fields(&n);

	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < n; i++) {
		const struct spec_field *f = &t[i];
		switch (f->sf_kind) {
		case SK_STR:
			strs[i] = malloc(f->sf_max + 1);
			memset(strs[i], 'a' + i % 26, f->sf_max);
			strs[i][f->sf_max] = '\0';
			*AT(s, f, const char *) = strs[i];
			break;
		case SK_U64:
			*AT(s, f, uint64_t) = f->sf_max;
			break;
		case SK_BOOL:
			*AT(s, f, bool) = true;
			break;
		}
	}
}

static void
expect_equal(const struct spec *a, const struct spec *b)
{
	size_t n;
	const struct spec_field *t = spec_fields(&n);

	for (size_t i = 0; i < n; i++) {
		const struct spec_field *f = &t[i];
		switch (f->sf_kind) {
		case SK_STR: {
			const char *x = *AT(a, f, const char *),
			           *y = *AT(b, f, const char *);
			cr_expect((!x && !y) || (x && y && !strcmp(x, y)),
			          "field %s differs", f->sf_name);
			break;
		}
		case SK_U64:
			cr_expect_eq(*AT(a, f, uint64_t), *AT(b, f, uint64_t), "field %s",
			             f->sf_name);
			break;
		case SK_BOOL:
			cr_expect_eq(*AT(a, f, bool), *AT(b, f, bool), "field %s",
			             f->sf_name);
			break;
		}
	}
}

Test(spec, every_field_round_trips_at_its_bounds)
{
	size_t n;
	const struct spec_field *t = spec_fields(&n);
	char **strs = calloc(n, sizeof(*strs));
	struct spec in, out;
	void *buf;
	size_t len;

	fill(&in, strs);
	cr_assert_eq(spec_encode(&in, &buf, &len), 0);
	cr_assert_eq(spec_decode(buf, len, &out), 0);
	expect_equal(&in, &out);
	spec_free(&out);
	free(buf);
	/* and each field alone (the required ones beside it), at its least nonzero */
	for (size_t i = 0; i < n; i++) {
		/* (a uid range's first is no more than its last) */
		struct spec one = {.sp_language = "python",
		                   .sp_cwd = "/home/user",
		                   .sp_uid_last = UINT32_MAX - 1};
		const struct spec_field *f = &t[i];
		switch (f->sf_kind) {
		case SK_STR:
			*AT(&one, f, const char *) = strs[i];
			break;
		case SK_U64:
			*AT(&one, f, uint64_t) = f->sf_min ? f->sf_min : 1;
			break;
		case SK_BOOL:
			*AT(&one, f, bool) = true;
			break;
		}
		cr_assert_eq(spec_encode(&one, &buf, &len), 0);
		cr_assert_eq(spec_decode(buf, len, &out), 0, "field %s alone",
		             f->sf_name);
		expect_equal(&one, &out);
		spec_free(&out);
		free(buf);
	}
	for (size_t i = 0; i < n; i++)
		free(strs[i]);
	free(strs);
}

/* A member of struct spec missing from the table leaves a hole in it. */
Test(spec, the_table_covers_the_struct)
{
	size_t n, end = 0;
	const struct spec_field *t = spec_fields(&n);
	bool *seen = calloc(sizeof(struct spec), 1);

	for (size_t i = 0; i < n; i++) {
		size_t sz = kind_size(t[i].sf_kind);
		cr_assert_leq(t[i].sf_off + sz, sizeof(struct spec), "%s", t[i].sf_name);
		for (size_t b = t[i].sf_off; b < t[i].sf_off + sz; b++) {
			cr_assert_not(seen[b], "%s overlaps another field", t[i].sf_name);
			seen[b] = true;
		}
	}
	/* every byte not a field's is padding: fewer than a pointer's worth in a row */
	for (size_t b = 0, run = 0; b < sizeof(struct spec); b++) {
		run = seen[b] ? 0 : run + 1;
		cr_assert_lt(run, sizeof(void *),
		             "a hole at byte %zu: a member not in the table", b);
		if (seen[b])
			end = b + 1;
	}
	cr_assert_gt(end, 0);
	free(seen);
}

Test(spec, an_empty_spec_lacks_what_is_required)
{
	struct spec s = {0}, out;
	void *buf;
	size_t len;

	cr_assert_eq(spec_encode(&s, &buf, &len), 0);
	cr_assert_eq(spec_decode(buf, len, &out), PROTO_EMISSING);
	free(buf);
	s.sp_language = "python";
	cr_assert_eq(spec_encode(&s, &buf, &len), 0);
	cr_assert_eq(spec_decode(buf, len, &out), PROTO_EMISSING); /* no cwd */
	free(buf);
}

static size_t field_index(const char *name);

/* A spec packed by hand: {language: "python", cwd: "/", uid_last: 1000, key: value} */
static void
packed(msgpack_sbuffer *sb, void (*more)(msgpack_packer *, void *), unsigned extra,
       void *arg)
{
	msgpack_packer pk;

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3 + extra);
	msgpack_pack_uint64(&pk, field_index("language"));
	msgpack_pack_str_with_body(&pk, "python", 6);
	msgpack_pack_uint64(&pk, field_index("cwd"));
	msgpack_pack_str_with_body(&pk, "/", 1);
	msgpack_pack_uint64(&pk, field_index("uid_last"));
	msgpack_pack_uint64(&pk, UINT32_MAX - 1);
	if (more)
		more(&pk, arg);
}

static size_t
field_index(const char *name)
{
	size_t n;
	const struct spec_field *t = spec_fields(&n);

	for (size_t i = 0; i < n; i++)
		if (!strcmp(t[i].sf_name, name))
			return i;
	cr_assert_fail("no field %s", name);
	return 0;
}

struct kv {
	uint64_t key;
	int kind; /* 0 uint, 1 str, 2 bool, 3 nil */
	uint64_t u;
	const char *s;
	size_t slen;
};

static void
pack_kv(msgpack_packer *pk, void *arg)
{
	const struct kv *kv = arg;

	msgpack_pack_uint64(pk, kv->key);
	switch (kv->kind) {
	case 0:
		msgpack_pack_uint64(pk, kv->u);
		break;
	case 1:
		msgpack_pack_str_with_body(pk, kv->s, kv->slen);
		break;
	case 2:
		msgpack_pack_true(pk);
		break;
	case 3:
		msgpack_pack_nil(pk);
		break;
	}
}

static int
decode_kv(struct kv kv)
{
	msgpack_sbuffer sb;
	struct spec out;
	int e;

	packed(&sb, pack_kv, 1, &kv);
	if ((e = spec_decode(sb.data, sb.size, &out)) == 0)
		spec_free(&out);
	msgpack_sbuffer_destroy(&sb);
	return e;
}

/* Field f one over its bound: the broker does not send it (big: a string of 'x'). */
static void
over_is_not_sent(const struct spec_field *f, char *big)
{
	struct spec over = {.sp_language = "python", .sp_cwd = "/"};
	void *enc = (void *)&over;
	size_t len;

	if (f->sf_kind == SK_STR) {
		big[f->sf_max + 1] = '\0';
		*AT(&over, f, const char *) = big;
	} else {
		*AT(&over, f, uint64_t) = f->sf_max + 1;
	}
	cr_expect_eq(spec_encode(&over, &enc, &len), PROTO_ESIZE, "%s sent", f->sf_name);
	cr_expect_null(enc);
	if (f->sf_kind == SK_STR)
		big[f->sf_max + 1] = 'x';
}

Test(spec, every_bound_and_type_is_checked)
{
	size_t n;
	const struct spec_field *t = spec_fields(&n);
	char *big = malloc(SPEC_MAX_BYTES + 2);

	memset(big, 'x', SPEC_MAX_BYTES + 2);
	for (size_t i = 0; i < n; i++) {
		const struct spec_field *f = &t[i];
		if (i == field_index("language") || i == field_index("cwd") ||
		    i == field_index("uid_last")) /* in packed()'s frame already */
			continue;
		switch (f->sf_kind) {
		case SK_STR:
			cr_expect_eq(decode_kv((struct kv){i, 1, 0, big, f->sf_max}), 0,
			             "%s", f->sf_name);
			cr_expect_eq(decode_kv((struct kv){i, 1, 0, big, f->sf_max + 1}),
			             PROTO_ESIZE, "%s one over", f->sf_name);
			over_is_not_sent(f, big);
			cr_expect_eq(decode_kv((struct kv){i, 1, 0, "a\0b", 3}),
			             PROTO_ETYPE, "%s with a NUL", f->sf_name);
			cr_expect_eq(decode_kv((struct kv){i, 0, 7, NULL, 0}),
			             PROTO_ETYPE, "%s", f->sf_name);
			break;
		case SK_U64:
			cr_expect_eq(decode_kv((struct kv){i, 0, f->sf_max, NULL, 0}), 0,
			             "%s", f->sf_name);
			if (f->sf_max < UINT64_MAX) {
				cr_expect_eq(
				    decode_kv((struct kv){i, 0, f->sf_max + 1, NULL, 0}),
				    PROTO_ESIZE, "%s one over", f->sf_name);
				over_is_not_sent(f, big);
			}
			cr_expect_eq(decode_kv((struct kv){i, 1, 0, "1", 1}), PROTO_ETYPE,
			             "%s", f->sf_name);
			break;
		case SK_BOOL:
			cr_expect_eq(decode_kv((struct kv){i, 2, 0, NULL, 0}), 0, "%s",
			             f->sf_name);
			cr_expect_eq(decode_kv((struct kv){i, 0, 1, NULL, 0}),
			             PROTO_ETYPE, "%s", f->sf_name);
			break;
		}
		cr_expect_eq(decode_kv((struct kv){i, 3, 0, NULL, 0}), PROTO_ETYPE,
		             "%s nil", f->sf_name);
	}
	cr_expect_eq(decode_kv((struct kv){n, 0, 1, NULL, 0}), PROTO_EUNKNOWN);
	cr_expect_eq(decode_kv((struct kv){UINT64_MAX, 0, 1, NULL, 0}), PROTO_EUNKNOWN);
	cr_expect_eq(decode_kv((struct kv){field_index("cwd"), 1, 0, "/w", 2}),
	             PROTO_EDUP);
	free(big);
}

Test(spec, a_uid_range_runs_first_to_last)
{
	struct spec s = {.sp_language = "python",
	                 .sp_cwd = "/",
	                 .sp_uid_first = 200000,
	                 .sp_uid_last = 100000},
	            out;
	void *buf;
	size_t len;

	cr_assert_eq(spec_encode(&s, &buf, &len), 0);
	cr_expect_eq(spec_decode(buf, len, &out), PROTO_ESIZE);
	free(buf);
}

Test(spec, truncated_trailing_and_lying_frames_are_refused)
{
	struct spec s = {.sp_language = "python",
	                 .sp_cwd = "/home/user",
	                 .sp_memory = 1ull << 40,
	                 .sp_sandbox = true},
	            out;
	uint8_t *buf, *more;
	size_t len;

	cr_assert_eq(spec_encode(&s, (void **)&buf, &len), 0);
	for (size_t cut = 0; cut < len; cut++)
		cr_expect_lt(spec_decode(buf, cut, &out), 0, "cut at %zu", cut);
	more = malloc(len + 1);
	memcpy(more, buf, len);
	more[len] = 0xc0;
	cr_expect_eq(spec_decode(more, len + 1, &out), PROTO_ETRAIL);
	free(more);
	free(buf);
	/* a map claiming 4 G entries; not a map at all; a whole spec over the limit */
	uint8_t liar[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0x00};
	cr_expect_eq(spec_decode(liar, sizeof(liar), &out), PROTO_ETRUNC);
	uint8_t array[] = {0x90};
	cr_expect_eq(spec_decode(array, sizeof(array), &out), PROTO_ETYPE);
	uint8_t *huge = calloc(1, SPEC_MAX_BYTES + 1);
	huge[0] = 0x80;
	cr_expect_eq(spec_decode(huge, SPEC_MAX_BYTES + 1, &out), PROTO_ESIZE);
	free(huge);
}

Test(spec, spec_read_takes_a_memfd_and_refuses_too_much)
{
	struct spec s = {.sp_language = "r",
	                 .sp_cwd = "/w",
	                 .sp_template = "/run/t.sock"},
	            out;
	void *enc;
	char *buf;
	size_t len, got;
	int fd = memfd_create("spec", MFD_CLOEXEC);

	cr_assert_geq(fd, 0);
	cr_assert_eq(spec_encode(&s, &enc, &len), 0);
	cr_assert_eq(write(fd, enc, len),
	             (ssize_t)len); /* its offset is at the end: read from 0 */
	cr_assert_eq(spec_read(fd, &buf, &got), 0);
	cr_assert_eq(got, len);
	cr_assert_eq(spec_decode(buf, got, &out), 0);
	expect_equal(&s, &out);
	spec_free(&out);
	free(buf);
	free(enc);
	/* one byte over the limit */
	cr_assert_eq(ftruncate(fd, SPEC_MAX_BYTES + 1), 0);
	cr_expect_eq(spec_read(fd, &buf, &got), -EFBIG);
	cr_expect_null(buf);
	cr_assert_eq(ftruncate(fd, SPEC_MAX_BYTES), 0);
	cr_expect_eq(spec_read(fd, &buf, &got), 0);
	cr_expect_eq(got, SPEC_MAX_BYTES);
	free(buf);
	close(fd);
}
