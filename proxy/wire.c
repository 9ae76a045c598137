/*
 * wire.c — the Jupyter wire protocol over ZeroMQ: build, sign, receive, verify
 * and parse messages. Frames are located by the <IDS|MSG> delimiter, never by
 * counting, since the identity/topic frames before it differ per kernel.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sodium.h>
#include <zmq.h>

#include "proxy.h"

#define DELIM "<IDS|MSG>"
#define MAX_FRAMES 64

int
wire_sign(const char *key, const struct wire_frame parts[4], char hex[65])
{
	crypto_auth_hmacsha256_state st;
	unsigned char mac[crypto_auth_hmacsha256_BYTES];

	crypto_auth_hmacsha256_init(&st, (const unsigned char *)key, strlen(key));
	for (int i = 0; i < 4; i++)
		crypto_auth_hmacsha256_update(&st, parts[i].wf_data, parts[i].wf_len);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_bin2hex(hex, 65, mac, sizeof(mac));
	return 0;
}

void
jmsg_free(struct jmsg *jm)
{
	json_decref(jm->jm_header);
	json_decref(jm->jm_parent);
	json_decref(jm->jm_meta);
	json_decref(jm->jm_content);
	memset(jm, 0, sizeof(*jm));
}

/* Verifies the signature and parses the four JSON frames after the delimiter. */
int
wire_parse(const char *key, const struct wire_frame *f, size_t n, struct jmsg *jm)
{
	size_t d;
	char hex[65];
	json_t **dst[4] = {&jm->jm_header, &jm->jm_parent, &jm->jm_meta, &jm->jm_content};

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
	for (int i = 0; i < 4; i++) {
		json_error_t jerr;
		/* output may hold NUL characters: keep them */
		*dst[i] = json_loadb(f[d + 2 + i].wf_data, f[d + 2 + i].wf_len, JSON_ALLOW_NUL,
				     &jerr);
		if (!json_is_object(*dst[i])) {
			jmsg_free(jm);
			return -EINVAL;
		}
	}
	jm->jm_type = json_string_value(json_object_get(jm->jm_header, "msg_type"));
	jm->jm_parent_id = json_string_value(json_object_get(jm->jm_parent, "msg_id"));
	if (!jm->jm_type) {
		jmsg_free(jm);
		return -EINVAL;
	}
	if (!jm->jm_parent_id)
		jm->jm_parent_id = "";
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

/* Sends a request; takes ownership of content. */
int
wire_send(void *sock, const char *key, const char *session, const char *type,
	  json_t *content, char msgid[40])
{
	char date[64], id[37], hex[65];
	json_t *hdr;
	char *parts[4];
	struct wire_frame wf[4];
	int rc = 0;

	wire_msgid(id);
	iso_time(date);
	hdr = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", id, "session", session,
			"username", "sandcell", "date", date, "msg_type", type, "version",
			"5.3");
	parts[0] = json_dumps(hdr, JSON_COMPACT);
	parts[1] = xstrdup("{}");
	parts[2] = xstrdup("{}");
	parts[3] = json_dumps(content, JSON_COMPACT);
	json_decref(hdr);
	json_decref(content);
	if (!parts[0] || !parts[3]) {
		rc = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < 4; i++)
		wf[i] = (struct wire_frame){parts[i], strlen(parts[i])};
	wire_sign(key, wf, hex);
	if (zmq_send(sock, DELIM, strlen(DELIM), ZMQ_SNDMORE) < 0 ||
	    zmq_send(sock, hex, 64, ZMQ_SNDMORE) < 0) {
		rc = -errno;
		goto out;
	}
	for (int i = 0; i < 4; i++)
		if (zmq_send(sock, wf[i].wf_data, wf[i].wf_len, i < 3 ? ZMQ_SNDMORE : 0) < 0) {
			rc = -errno;
			goto out;
		}
	if (msgid)
		snprintf(msgid, 40, "%s", id);
out:
	for (int i = 0; i < 4; i++)
		free(parts[i]);
	return rc;
}

/*
 * Receives one whole multipart message without blocking. Returns 0 with jm
 * filled, -EAGAIN when nothing is waiting, or another negative error for a
 * message that was read and dropped (bad signature, bad JSON, too many frames).
 */
int
wire_recv(void *sock, const char *key, struct jmsg *jm)
{
	zmq_msg_t parts[MAX_FRAMES];
	struct wire_frame wf[MAX_FRAMES];
	size_t n = 0;
	bool over = false;
	int more, rc;

	memset(jm, 0, sizeof(*jm));
	for (;;) {
		zmq_msg_t scratch, *m = n < MAX_FRAMES ? &parts[n] : &scratch;
		zmq_msg_init(m);
		if (zmq_msg_recv(m, sock, n == 0 && !over ? ZMQ_DONTWAIT : 0) < 0) {
			rc = -errno;
			zmq_msg_close(m);
			if (n == 0 && !over)
				return rc;
			goto out;
		}
		more = zmq_msg_more(m);
		if (m == &scratch) {
			over = true;
			zmq_msg_close(m);
		} else {
			wf[n] = (struct wire_frame){zmq_msg_data(m), zmq_msg_size(m)};
			n++;
		}
		if (!more)
			break;
	}
	rc = over ? -E2BIG : wire_parse(key, wf, n, jm);
out:
	for (size_t i = 0; i < n; i++)
		zmq_msg_close(&parts[i]);
	return rc;
}
