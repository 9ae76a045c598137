/*
 * sandcellctl — the operator tool: one request over the broker's control
 * socket, print the reply, exit 0 on OK and 1 on FAIL or no broker.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "../proto/proto.h"

static void
usage(void)
{
	fprintf(stderr, "usage: sandcellctl [--run-dir DIR] [--json] status|contexts\n");
	exit(2);
}

static void
print_contexts(json_t *a)
{
	size_t i;
	json_t *c;

	printf("%-36s  %-12s  %-8s  %5s  %5s  %8s  %8s  %s\n", "ID", "LANGUAGE", "STATE",
	       "QUEUE", "RUNS", "KPID", "PID", "CWD");
	json_array_foreach(a, i, c)
	{
		printf("%-36s  %-12s  %-8s  %5lld  %5lld  %8lld  %8lld  %s\n",
		       json_string_value(json_object_get(c, "id")),
		       json_string_value(json_object_get(c, "language")),
		       json_string_value(json_object_get(c, "state")),
		       json_integer_value(json_object_get(c, "queue")),
		       json_integer_value(json_object_get(c, "executions")),
		       json_integer_value(json_object_get(c, "kernel_pid")),
		       json_integer_value(json_object_get(c, "proxy_pid")),
		       json_string_value(json_object_get(c, "cwd")));
	}
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"run-dir", required_argument, NULL, 'r'},
		{"json", no_argument, NULL, 'j'},
		{NULL, 0, NULL, 0},
	};
	const char *run_dir = NULL, *cmd;
	bool as_json = false;
	struct msg m, r;
	nng_socket s;
	char *url;
	int c, e;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'r')
			run_dir = optarg;
		else if (c == 'j')
			as_json = true;
		else
			usage();
	}
	if (optind != argc - 1)
		usage();
	cmd = argv[optind];
	log_init("sandcellctl", LOG_WARN);
	if (!run_dir)
		run_dir = default_run_dir();
	if (!strcmp(cmd, "status"))
		msg_init(&m, CTL_STATUS);
	else if (!strcmp(cmd, "contexts"))
		msg_init(&m, CTL_CONTEXTS);
	else
		usage();
	msg_set_u64(&m, F_REQ, 1);
	url = xasprintf("ipc://%s/ctl.sock", run_dir);
	if ((e = nng_req0_open(&s)) || (e = nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000)) ||
	    (e = nng_dial(s, url, NULL, 0))) {
		fprintf(stderr, "sandcellctl: no broker at %s: %s\n", url, nng_strerror(e));
		return 1;
	}
	if ((e = msg_send(s, &m, 0)) || (e = msg_recv(s, &r, 0))) {
		fprintf(stderr, "sandcellctl: %s\n",
			e > 0 ? nng_strerror(e) : proto_strerror(e));
		return 1;
	}
	if (r.m_type != MSG_OK) {
		fprintf(stderr, "sandcellctl: %s\n", r.m_text.s ? r.m_text.s : "failed");
		return 1;
	}
	json_t *j = json_loads(r.m_data.s ? r.m_data.s : "null", 0, NULL);
	if (as_json) {
		char *out = json_dumps(j, JSON_INDENT(2));
		printf("%s\n", out);
		free(out);
	} else if (!strcmp(cmd, "contexts")) {
		print_contexts(j);
	} else {
		const char *k;
		json_t *v;
		json_object_foreach(j, k, v)
		{
			char *vs = json_dumps(v, JSON_ENCODE_ANY);
			printf("%-16s %s\n", k, vs);
			free(vs);
		}
	}
	json_decref(j);
	msg_free(&r);
	msg_free(&m);
	nng_close(s);
	free(url);
	return 0;
}
