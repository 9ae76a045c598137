/*
 * wire.c — (8) what the proxy spends on one kernel message before acting on
 * it: proxy/wire.c's wire_parse (signature check, four JSON parts) of an
 * execute_reply as ipykernel 6 sends it, and the two headers alone, read
 * with cJSON (as wire_parse does) and with jansson (which reads the
 * metadata and content), in the same run. An `x=1` brings four messages.
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "../../proxy/proxy.h"
#include "bench.h"

#define WIRE_RUNS 20000

static const char *const parts[4] = {
    "{\"msg_id\": \"6f1c2d3e-4b5a69788796a5b4c3d2e1f0_4242_17\", \"msg_type\": "
    "\"execute_reply\", \"username\": \"user\", \"session\": "
    "\"6f1c2d3e-4b5a69788796a5b4c3d2e1f0\", \"date\": \"2026-12-01T19:40:00.123456Z\", "
    "\"version\": \"5.3\"}",
    "{\"msg_id\":\"d3b07384-d113-4ec6-a5a4-5d1e2c3b4a59\",\"session\":\"0f6c3e1a-1b2c-4d5e-"
    "8f90-a1b2c3d4e5f6\",\"username\":\"sandcell\",\"date\":\"2026-12-01T19:40:00.120000Z\","
    "\"msg_type\":\"execute_request\",\"version\":\"5.3\"}",
    "{\"started\": \"2026-12-01T19:40:00.121000Z\", \"dependencies_met\": true, \"engine\": "
    "\"4b0a2c1e-7d6f-4e3a-9b8c-1d2e3f4a5b6c\", \"status\": \"ok\"}",
    "{\"status\": \"ok\", \"execution_count\": 17, \"user_expressions\": {}, \"payload\": []}",
};

enum what { W_PARSE, W_HEADERS_CJSON, W_HEADERS_JANSSON };

/* Median of WIRE_RUNS / 100 batches of 100, us per item. */
static double
per_item_us(enum what what, const char *key, const struct wire_frame *f)
{
	double v[WIRE_RUNS / 100];
	struct stats st;

	for (int b = 0; b < WIRE_RUNS / 100; b++) {
		double t0 = ms_now();
		for (int i = 0; i < 100; i++) {
			if (what == W_PARSE) {
				struct jmsg jm;
				if (wire_parse(key, f, 6, &jm) == 0)
					jmsg_free(&jm);
			} else {
				for (int p = 2; p < 4; p++) {
					if (what == W_HEADERS_CJSON) {
						cJSON_Delete(cJSON_ParseWithLength(f[p].wf_data,
										   f[p].wf_len));
					} else {
						json_decref(json_loadb(f[p].wf_data, f[p].wf_len, 0,
								       NULL));
					}
				}
			}
		}
		v[b] = ms_since(t0) * 1000 / 100;
	}
	stats_of(v, WIRE_RUNS / 100, &st);
	return st.st_p50;
}

void
wire_bench(void)
{
	static const char key[] = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
	struct wire_frame f[6] = {{"<IDS|MSG>", 9}};
	char sig[65];
	struct jmsg jm;

	progress("ipc: the proxy's parse of one kernel message, %d runs", WIRE_RUNS);
	for (int i = 0; i < 4; i++)
		f[2 + i] = (struct wire_frame){parts[i], strlen(parts[i])};
	wire_sign(key, &f[2], sig);
	f[1] = (struct wire_frame){sig, 64};
	if (wire_parse(key, f, 6, &jm) != 0) {
		table_note("ipc: wire_parse refused the bench's execute_reply");
		return;
	}
	jmsg_free(&jm);
	double whole = per_item_us(W_PARSE, key, f), cj = per_item_us(W_HEADERS_CJSON, key, f),
	       jn = per_item_us(W_HEADERS_JANSSON, key, f);
	table_add("8 ipc", fmt("the proxy's parse of a kernel's execute_reply (%d runs)", WIRE_RUNS),
		  fmt("%.1f us", whole), NULL, NULL, NULL);
	table_detail("signature and four JSON parts; its two headers alone: %.1f us with cJSON "
		     "(as parsed), %.1f us with jansson",
		     cj, jn);
}
