/*
 * proto.c — the IPC message schema and its codec. Encoding uses msgpack-c's
 * packer. Decoding walks the frame with a bounds-checked cursor instead of
 * msgpack-c's unpacker, because that unpacker allocates container storage from
 * the count the peer declares before reading a single element (a five-byte
 * frame can ask for 48 GB); our schema is flat, so a cursor that checks every
 * length against the bytes present is both simpler and safe.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "proto.h"

enum fkind { FK_U64, FK_STR, FK_ENV };

static const struct {
	enum fkind kind;
	size_t max; /* strings: byte limit */
	size_t off; /* offset of the field in struct msg */
} fields[F_FIELD_MAX] = {
	[F_STREAM] = {FK_U64, 0, offsetof(struct msg, m_stream)},
	[F_REQ] = {FK_U64, 0, offsetof(struct msg, m_req)},
	[F_CODE] = {FK_STR, PROTO_MAX_BIG, offsetof(struct msg, m_code)},
	[F_ENV] = {FK_ENV, 0, offsetof(struct msg, m_env)},
	[F_TIMEOUT] = {FK_U64, 0, offsetof(struct msg, m_timeout)},
	[F_POLICY] = {FK_U64, 0, offsetof(struct msg, m_policy)},
	[F_DATA] = {FK_STR, PROTO_MAX_BIG, offsetof(struct msg, m_data)},
	[F_FINAL] = {FK_U64, 0, offsetof(struct msg, m_final)},
	[F_TEXT] = {FK_STR, PROTO_MAX_TEXT, offsetof(struct msg, m_text)},
	[F_ID] = {FK_STR, PROTO_MAX_NAME, offsetof(struct msg, m_id)},
	[F_LANG] = {FK_STR, PROTO_MAX_NAME, offsetof(struct msg, m_lang)},
	[F_CWD] = {FK_STR, PROTO_MAX_NAME, offsetof(struct msg, m_cwd)},
	[F_PID] = {FK_U64, 0, offsetof(struct msg, m_pid)},
	[F_KPID] = {FK_U64, 0, offsetof(struct msg, m_kpid)},
	[F_STATE] = {FK_U64, 0, offsetof(struct msg, m_state)},
	[F_QUEUE] = {FK_U64, 0, offsetof(struct msg, m_queue)},
	[F_COUNT] = {FK_U64, 0, offsetof(struct msg, m_count)},
	[F_OUTCOME] = {FK_STR, 64, offsetof(struct msg, m_outcome)},
	[F_WAIT] = {FK_U64, 0, offsetof(struct msg, m_wait)},
	[F_RUN] = {FK_U64, 0, offsetof(struct msg, m_run)},
	[F_FLAGS] = {FK_U64, 0, offsetof(struct msg, m_flags)},
	[F_REFUSED] = {FK_U64, 0, offsetof(struct msg, m_refused)},
};

#define KSTAT (FB(F_STATE) | FB(F_KPID) | FB(F_QUEUE) | FB(F_COUNT))
/* a schema's fields must fit the 32-bit presence mask */
_Static_assert(F_FIELD_MAX <= 32, "too many fields for m_has");

static const struct {
	const char *name;
	uint32_t req, opt;
} schema[MSG_TYPE_MAX] = {
	[MSG_EXECUTE] = {"EXECUTE", FB(F_STREAM) | FB(F_CODE),
			 FB(F_ENV) | FB(F_TIMEOUT) | FB(F_POLICY)},
	[MSG_CANCEL] = {"CANCEL", FB(F_STREAM), 0},
	[MSG_INTERRUPT] = {"INTERRUPT", FB(F_REQ), 0},
	[MSG_RESTART] = {"RESTART", FB(F_REQ), 0},
	[MSG_SHUTDOWN] = {"SHUTDOWN", FB(F_REQ), 0},
	[MSG_INFO] = {"INFO", FB(F_REQ), 0},
	[MSG_CLAIM] = {"CLAIM", FB(F_REQ) | FB(F_ID) | FB(F_CWD), FB(F_FLAGS)},
	[MSG_STATS] = {"STATS", FB(F_COUNT), FB(F_REFUSED)},
	[MSG_HELLO] = {"HELLO", FB(F_ID) | FB(F_LANG) | FB(F_CWD) | FB(F_PID) | FB(F_STATE),
		       KSTAT | FB(F_TEXT)},
	[MSG_OUTPUT] = {"OUTPUT", FB(F_STREAM) | FB(F_DATA),
			FB(F_FINAL) | FB(F_OUTCOME) | FB(F_WAIT) | FB(F_RUN)},
	[MSG_STATE] = {"STATE", FB(F_STATE), KSTAT | FB(F_TEXT)},
	[MSG_OK] = {"OK", FB(F_REQ), FB(F_TEXT) | FB(F_DATA) | KSTAT | FB(F_PID)},
	[MSG_FAIL] = {"FAIL", FB(F_REQ) | FB(F_TEXT), FB(F_OUTCOME)},
	[MSG_END] = {"END", FB(F_REQ), 0},
	[CTL_STATUS] = {"CTL_STATUS", FB(F_REQ), 0},
	[CTL_CONTEXTS] = {"CTL_CONTEXTS", FB(F_REQ), 0},
	[CTL_EXECUTIONS] = {"CTL_EXECUTIONS", FB(F_REQ), 0},
	[CTL_CANCEL] = {"CTL_CANCEL", FB(F_REQ) | FB(F_STREAM), 0},
	[CTL_INTERRUPT] = {"CTL_INTERRUPT", FB(F_REQ) | FB(F_ID), 0},
	[CTL_RESTART] = {"CTL_RESTART", FB(F_REQ) | FB(F_ID), 0},
	[CTL_CREATE] = {"CTL_CREATE", FB(F_REQ) | FB(F_LANG), FB(F_CWD)},
	[CTL_DELETE] = {"CTL_DELETE", FB(F_REQ) | FB(F_ID), 0},
	[CTL_DRAIN] = {"CTL_DRAIN", FB(F_REQ), 0},
	[CTL_UNDRAIN] = {"CTL_UNDRAIN", FB(F_REQ), 0},
	[CTL_WATCH] = {"CTL_WATCH", FB(F_REQ), 0},
	[CTL_RUN] = {"CTL_RUN", FB(F_REQ) | FB(F_ID) | FB(F_CODE), 0},
	[CTL_STOP_ENDS] = {"CTL_STOP_ENDS", FB(F_REQ), 0},
	[CTL_STOP_KEEPS] = {"CTL_STOP_KEEPS", FB(F_REQ), 0},
	[CTL_ACK] = {"CTL_ACK", FB(F_COUNT), 0},
	[MSG_ENVD] = {"ENVD", FB(F_REQ) | FB(F_TEXT) | FB(F_CODE), FB(F_DATA) | FB(F_STREAM)},
};

const char *
proto_strerror(int err)
{
	switch (err) {
	case PROTO_OK: return "ok";
	case PROTO_ETRUNC: return "truncated frame";
	case PROTO_ETYPE: return "wrong value type";
	case PROTO_EMISSING: return "required field missing";
	case PROTO_ESIZE: return "field or frame over its size limit";
	case PROTO_EUNKNOWN: return "unknown message type or field";
	case PROTO_EDUP: return "duplicate field";
	case PROTO_ETRAIL: return "trailing bytes after frame";
	case PROTO_ENOMEM: return "out of memory";
	}
	return "unknown error";
}

const char *
msg_type_name(enum msg_type t)
{
	if ((unsigned)t < MSG_TYPE_MAX && schema[t].name)
		return schema[t].name;
	return "?";
}

void
msg_init(struct msg *m, enum msg_type t)
{
	memset(m, 0, sizeof(*m));
	m->m_type = t;
}

void
msg_free(struct msg *m)
{
	for (int f = 0; f < F_FIELD_MAX; f++)
		if (fields[f].kind == FK_STR)
			free(((struct pstr *)((char *)m + fields[f].off))->s);
	for (size_t i = 0; i < m->m_nenv; i++) {
		free(m->m_env[i].e_key.s);
		free(m->m_env[i].e_val.s);
	}
	free(m->m_env);
	msg_init(m, MSG_NONE);
}

int
msg_set_str(struct msg *m, enum msg_field f, const char *s, size_t len)
{
	struct pstr *p = (struct pstr *)((char *)m + fields[f].off);

	free(p->s);
	p->s = xstrndup(s, len);
	p->len = len;
	m->m_has |= FB(f);
	return 0;
}

void
msg_set_u64(struct msg *m, enum msg_field f, uint64_t v)
{
	*(uint64_t *)((char *)m + fields[f].off) = v;
	m->m_has |= FB(f);
}

int
msg_add_env(struct msg *m, const char *k, const char *v)
{
	m->m_env = xrealloc(m->m_env, (m->m_nenv + 1) * sizeof(*m->m_env));
	struct penv *e = &m->m_env[m->m_nenv++];
	e->e_key.s = xstrdup(k);
	e->e_key.len = strlen(k);
	e->e_val.s = xstrdup(v);
	e->e_val.len = strlen(v);
	m->m_has |= FB(F_ENV);
	return 0;
}

static int
pack_str(msgpack_packer *pk, const char *s, size_t len)
{
	return msgpack_pack_str(pk, len) || msgpack_pack_str_body(pk, s, len);
}

static int
pack_write_sbuf(void *data, const char *buf, size_t len)
{
	return msgpack_sbuffer_write(data, buf, len);
}

static int
pack_write_nng(void *data, const char *buf, size_t len)
{
	return nng_msg_append(data, buf, len) ? -1 : 0;
}

/* Nonzero when a write failed (out of memory): the frame is then incomplete. */
static int
pack_msg(const struct msg *m, msgpack_packer *pk)
{
	unsigned n = 0;
	int e;

	for (int f = 0; f < F_FIELD_MAX; f++)
		n += (m->m_has >> f) & 1;
	e = msgpack_pack_array(pk, 2) || msgpack_pack_uint32(pk, m->m_type) ||
	    msgpack_pack_map(pk, n);
	for (int f = 0; f < F_FIELD_MAX && !e; f++) {
		if (!(m->m_has & FB(f)))
			continue;
		const char *p = (const char *)m + fields[f].off;
		e = msgpack_pack_uint32(pk, f);
		switch (fields[f].kind) {
		case FK_U64:
			e = e || msgpack_pack_uint64(pk, *(const uint64_t *)p);
			break;
		case FK_STR: {
			const struct pstr *s = (const struct pstr *)p;
			e = e || pack_str(pk, s->s ? s->s : "", s->len);
			break;
		}
		case FK_ENV:
			e = e || msgpack_pack_map(pk, m->m_nenv);
			for (size_t i = 0; i < m->m_nenv && !e; i++)
				e = pack_str(pk, m->m_env[i].e_key.s, m->m_env[i].e_key.len) ||
				    pack_str(pk, m->m_env[i].e_val.s, m->m_env[i].e_val.len);
			break;
		}
	}
	return e;
}

int
msg_encode(const struct msg *m, void **buf, size_t *len)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, pack_write_sbuf);
	if (pack_msg(m, &pk) || !sb.data) {
		msgpack_sbuffer_destroy(&sb);
		*buf = NULL;
		*len = 0;
		return PROTO_ENOMEM;
	}
	*buf = sb.data; /* the caller frees it */
	*len = sb.size;
	return 0;
}

static int
dup_pstr(struct pstr *p, const char *s, size_t len)
{
	p->s = malloc(len + 1);
	if (!p->s)
		return PROTO_ENOMEM;
	if (len)
		memcpy(p->s, s, len);
	p->s[len] = '\0';
	p->len = len;
	return 0;
}

static int
rd_env(struct rd *r, struct msg *m)
{
	uint64_t n;
	int e = rd_map(r, &n);

	if (e)
		return e;
	if (n > PROTO_MAX_ENV)
		return PROTO_ESIZE;
	m->m_env = calloc(n ? n : 1, sizeof(*m->m_env));
	if (!m->m_env)
		return PROTO_ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		const char *k = "", *v = "";
		size_t kl = 0, vl = 0;
		if ((e = rd_str(r, PROTO_MAX_ENVKEY, &k, &kl)) ||
		    (e = rd_str(r, PROTO_MAX_ENVVAL, &v, &vl)))
			return e;
		struct penv *pe = &m->m_env[m->m_nenv];
		if ((e = dup_pstr(&pe->e_key, k, kl)))
			return e;
		if ((e = dup_pstr(&pe->e_val, v, vl))) {
			free(pe->e_key.s);
			return e;
		}
		m->m_nenv++;
	}
	return 0;
}

int
msg_decode(const void *buf, size_t len, struct msg *m)
{
	struct rd r = {buf, (const uint8_t *)buf + len};
	const uint8_t *b;
	uint64_t type, n;
	int e;

	msg_init(m, MSG_NONE);
	if (len > PROTO_MAX_FRAME)
		return PROTO_ESIZE;
	if ((e = rd_bytes(&r, 1, &b)))
		return e;
	if (*b != 0x92) /* fixarray of 2 */
		return PROTO_ETYPE;
	if ((e = rd_uint(&r, &type)))
		return e;
	if (type == MSG_NONE || type >= MSG_TYPE_MAX || !schema[type].name)
		return PROTO_EUNKNOWN;
	m->m_type = type;
	if ((e = rd_map(&r, &n)))
		goto err;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t f;
		if ((e = rd_uint(&r, &f)))
			goto err;
		if (f >= F_FIELD_MAX || !((schema[type].req | schema[type].opt) & FB(f))) {
			e = PROTO_EUNKNOWN;
			goto err;
		}
		if (m->m_has & FB(f)) {
			e = PROTO_EDUP;
			goto err;
		}
		char *p = (char *)m + fields[f].off;
		switch (fields[f].kind) {
		case FK_U64:
			e = rd_uint(&r, (uint64_t *)p);
			break;
		case FK_STR: {
			const char *s = "";
			size_t sl = 0;
			if (!(e = rd_str(&r, fields[f].max, &s, &sl)))
				e = dup_pstr((struct pstr *)p, s, sl);
			break;
		}
		case FK_ENV:
			e = rd_env(&r, m);
			break;
		}
		if (e)
			goto err;
		m->m_has |= FB(f);
	}
	if ((m->m_has & schema[type].req) != schema[type].req) {
		e = PROTO_EMISSING;
		goto err;
	}
	if (r.p != r.end) {
		e = PROTO_ETRAIL;
		goto err;
	}
	return 0;
err:
	msg_free(m);
	return e;
}

/* Bytes a frame of m takes at most (every header at its widest). */
static size_t
pack_size(const struct msg *m)
{
	size_t n = 16;

	for (int f = 0; f < F_FIELD_MAX; f++) {
		if (!(m->m_has & FB(f)))
			continue;
		n += 16;
		if (fields[f].kind == FK_STR)
			n += ((const struct pstr *)((const char *)m + fields[f].off))->len;
		else if (fields[f].kind == FK_ENV)
			for (size_t i = 0; i < m->m_nenv; i++)
				n += 10 + m->m_env[i].e_key.len + m->m_env[i].e_val.len;
	}
	return n;
}

/*
 * Packs straight into an nng message, its room reserved first: no
 * intermediate buffer, and no copy as it grows (a 1 MiB output chunk would
 * otherwise be copied again by every reallocation).
 */
int
msg_pack_at(const struct msg *m, size_t room, nng_msg **out)
{
	msgpack_packer pk;
	size_t most = pack_size(m);
	int e;

	if ((e = nng_msg_alloc(out, room + most)))
		return e;
	nng_msg_chop(*out, most); /* keeps the room */
	msgpack_packer_init(&pk, *out, pack_write_nng);
	if (pack_msg(m, &pk)) {
		nng_msg_free(*out);
		*out = NULL;
		return NNG_ENOMEM;
	}
	return 0;
}

int
msg_pack(const struct msg *m, nng_msg **out)
{
	return msg_pack_at(m, 0, out);
}

int
msg_send(nng_socket s, const struct msg *m, int flags)
{
	nng_msg *nm;
	int e;

	if ((e = msg_pack(m, &nm)))
		return e;
	if ((e = nng_sendmsg(s, nm, flags)))
		nng_msg_free(nm);
	return e;
}

/* Returns 0, an nng error (positive), or a PROTO_ error (negative). */
int
msg_recv(nng_socket s, struct msg *m, int flags)
{
	nng_msg *nm;
	int e = nng_recvmsg(s, &nm, flags);

	if (e)
		return e;
	e = msg_decode(nng_msg_body(nm), nng_msg_len(nm), m);
	nng_msg_free(nm);
	return e;
}
