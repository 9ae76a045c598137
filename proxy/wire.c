/*
 * wire.c — the Jupyter wire protocol: build, sign, verify and parse messages,
 * sent and received through zmtp.c. Frames are located by the <IDS|MSG>
 * delimiter, never by counting, since the identity/topic frames before it
 * differ per kernel.
 *
 * A received message's header and parent header are read with cJSON, its
 * metadata and content with jansson (output.c builds from those). The headers
 * are half of every message's bytes, and only three of their strings are
 * used: jansson's decoder takes 6 us for ipykernel's 200-byte header on the
 * reference machine, cJSON 1 us, which is 40 us of the proxy's ~290 us of CPU
 * per `x=1` (four messages, two headers each).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <sodium.h>

#include "proxy.h"

#define DELIM "<IDS|MSG>"

/*
 * The HMAC state once the key is in, kept per thread for the last key used: a
 * process signs with one key for its life, and taking the key in costs two
 * of the SHA-256 blocks of each signature.
 */
static void
hmac_start(crypto_auth_hmacsha256_state *st, const char *key)
{
	static __thread struct {
		char k_key[129];
		crypto_auth_hmacsha256_state k_st;
	} last;
	size_t n = strlen(key);

	if (n >= sizeof(last.k_key)) {
		crypto_auth_hmacsha256_init(st, (const unsigned char *)key, n);
		return;
	}
	if (!last.k_key[0] || strcmp(last.k_key, key)) {
		crypto_auth_hmacsha256_init(&last.k_st, (const unsigned char *)key, n);
		memcpy(last.k_key, key, n + 1);
	}
	*st = last.k_st;
}

int
wire_sign(const char *key, const struct wire_frame parts[4], char hex[65])
{
	crypto_auth_hmacsha256_state st;
	unsigned char mac[crypto_auth_hmacsha256_BYTES];

	hmac_start(&st, key);
	for (int i = 0; i < 4; i++)
		crypto_auth_hmacsha256_update(&st, parts[i].wf_data, parts[i].wf_len);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_bin2hex(hex, 65, mac, sizeof(mac));
	return 0;
}

void
jmsg_free(struct jmsg *jm)
{
	cJSON_Delete(jm->jm_header);
	cJSON_Delete(jm->jm_parent);
	json_decref(jm->jm_meta);
	json_decref(jm->jm_content);
	memset(jm, 0, sizeof(*jm));
}

/* A JSON object filling the frame (whitespace after it only), or NULL. */
static cJSON *
header_parse(const struct wire_frame *f)
{
	const char *end = NULL, *last = (const char *)f->wf_data + f->wf_len;
	cJSON *o = cJSON_ParseWithLengthOpts(f->wf_data, f->wf_len, &end, false);

	while (end && end < last && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
		end++;
	if (!cJSON_IsObject(o) || end != last) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static const char *
header_str(const cJSON *o, const char *name)
{
	return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, name));
}

/* Verifies the signature and parses the four JSON frames after the delimiter. */
int
wire_parse(const char *key, const struct wire_frame *f, size_t n, struct jmsg *jm)
{
	size_t d;
	char hex[65];
	json_t **dst[2] = {&jm->jm_meta, &jm->jm_content};

	memset(jm, 0, sizeof(*jm));
	for (d = 0; d < n; d++)
		if (f[d].wf_len == strlen(DELIM) && !memcmp(f[d].wf_data, DELIM, f[d].wf_len))
			break;
	if (d == n)
		return -EBADMSG; /* no delimiter */
	if (n - d < 6)
		return -EBADMSG; /* signature and four parts */
	if (key[0]) {
		wire_sign(key, &f[d + 2], hex);
		if (f[d + 1].wf_len != 64 || sodium_memcmp(hex, f[d + 1].wf_data, 64) != 0)
			return -EPERM;
	}
	jm->jm_header = header_parse(&f[d + 2]);
	jm->jm_parent = header_parse(&f[d + 3]);
	for (int i = 0; i < 2; i++) {
		const struct wire_frame *p = &f[d + 4 + i];
		json_error_t jerr;
		/* most metadata is "{}": no decoder for it (~1 us a message) */
		if (p->wf_len == 2 && !memcmp(p->wf_data, "{}", 2)) {
			*dst[i] = json_object();
			continue;
		}
		/* output may hold NUL characters: keep them */
		*dst[i] = json_loadb(p->wf_data, p->wf_len, JSON_ALLOW_NUL, &jerr);
	}
	jm->jm_type = header_str(jm->jm_header, "msg_type");
	if (!jm->jm_parent || !json_is_object(jm->jm_meta) || !json_is_object(jm->jm_content) ||
	    !jm->jm_type) {
		jmsg_free(jm);
		return -EINVAL;
	}
	jm->jm_parent_id = header_str(jm->jm_parent, "msg_id");
	if (!jm->jm_parent_id)
		jm->jm_parent_id = "";
	jm->jm_session = header_str(jm->jm_parent, "session");
	return 0;
}

/*
 * A message id: unique, not secret (the HMAC key guards the channel). A
 * random uuid drawn once per process, its last 64 bits counting up, spares a
 * getrandom(2) per message.
 */
static void
wire_msgid(char out[37])
{
	static const char hex[] = "0123456789abcdef";
	static uint8_t b[16];
	static uint64_t n;
	uint8_t id[16];

	if (!n++)
		randombytes_buf(b, sizeof(b));
	memcpy(id, b, 8);
	uint64_t low = 0;
	for (int i = 8; i < 16; i++)
		low = low << 8 | b[i];
	low += n;
	for (int i = 15; i >= 8; i--, low >>= 8)
		id[i] = low & 0xff;
	id[6] = (id[6] & 0x0f) | 0x40;
	id[8] = (id[8] & 0x3f) | 0x80;
	for (int i = 0, o = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[id[i] >> 4];
		out[o++] = hex[id[i] & 0xf];
	}
	out[36] = '\0';
}

/* A string a JSON string holds as it is (none of ", \\ or a control character). */
static bool
wire_plain(const char *v)
{
	for (; *v; v++)
		if (*v == '"' || *v == '\\' || (unsigned char)*v < 0x20)
			return false;
	return true;
}

/*
 * Builds a request's six frames (delimiter, signature, four JSON parts);
 * takes ownership of content. wire_out_free frees them. The header is our
 * own strings in a fixed order, printed as they are: packing and dumping it
 * with jansson took as long as the rest of the request.
 */
int
wire_build(const char *key, const char *session, const char *type, json_t *content,
	   char msgid[40], struct wire_out *wo)
{
	char date[64], id[37];
	int n;

	memset(wo, 0, sizeof(*wo));
	wire_msgid(id);
	iso_time(date);
	if (!wire_plain(session) || !wire_plain(type)) {
		json_decref(content);
		return -EINVAL;
	}
	n = snprintf(wo->wo_head, sizeof(wo->wo_head),
	             "{\"msg_id\":\"%s\",\"session\":\"%s\",\"username\":\"sandcell\","
	             "\"date\":\"%s\",\"msg_type\":\"%s\",\"version\":\"5.3\"}",
	             id, session, date, type);
	wo->wo_part[0] = wo->wo_head;
	wo->wo_part[1] = wo->wo_part[2] = "{}";
	wo->wo_part[3] = json_dumps(content, JSON_COMPACT);
	json_decref(content);
	if (n < 0 || (size_t)n >= sizeof(wo->wo_head) || !wo->wo_part[3]) {
		wire_out_free(wo);
		return n < 0 || (size_t)n >= sizeof(wo->wo_head) ? -EINVAL : -ENOMEM;
	}
	wo->wo_frames[0] = (struct wire_frame){DELIM, strlen(DELIM)};
	for (int i = 0; i < 4; i++)
		wo->wo_frames[2 + i] = (struct wire_frame){wo->wo_part[i], strlen(wo->wo_part[i])};
	wire_sign(key, &wo->wo_frames[2], wo->wo_hmac);
	wo->wo_frames[1] = (struct wire_frame){wo->wo_hmac, 64};
	if (msgid)
		snprintf(msgid, 40, "%s", id);
	return 0;
}

void
wire_out_free(struct wire_out *wo)
{
	free(wo->wo_part[3]);
	memset(wo, 0, sizeof(*wo));
}

/* Sends a request to the kernel; takes ownership of content. */
int
wire_send(struct zmtp *z, const char *key, const char *session, const char *type,
	  json_t *content, char msgid[40])
{
	struct wire_out wo;
	int rc;

	if (!z) {
		json_decref(content);
		return -ENOTCONN;
	}
	if ((rc = wire_build(key, session, type, content, msgid, &wo)) < 0)
		return rc;
	rc = zmtp_send(z, wo.wo_frames, 6);
	wire_out_free(&wo);
	return rc;
}

/*
 * Receives one whole message without blocking. Returns 0 with jm filled,
 * -EAGAIN when none is waiting, or another negative error for a message that
 * was read and dropped (too big, bad signature, bad JSON).
 */
int
wire_recv(struct zmtp *z, const char *key, struct jmsg *jm)
{
	const struct wire_frame *f;
	size_t n;
	int rc;

	memset(jm, 0, sizeof(*jm));
	if ((rc = zmtp_recv(z, &f, &n)) < 0)
		return rc;
	return wire_parse(key, f, n, jm);
}
