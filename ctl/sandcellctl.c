/*
 * sandcellctl — the operator tool, in the relayctl mould: one request over the
 * broker's control socket, then replies until END; exit status 0 on OK, 1 on
 * FAIL or when no broker answers. Tables for people, --json for scripts.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "../proto/proto.h"

static const struct {
	const char *name;
	enum msg_type type;
	int nargs; /* positional arguments after the command */
	const char *args, *help;
} commands[] = {
	{"status", CTL_STATUS, 0, "", "version, uptime, contexts, executions, draining"},
	{"contexts", CTL_CONTEXTS, 0, "", "contexts with their live state"},
	{"executions", CTL_EXECUTIONS, 0, "", "executions in flight and queued"},
	{"cancel", CTL_CANCEL, 1, "STREAM", "cancel an execution (its client gets an error)"},
	{"interrupt", CTL_INTERRUPT, 1, "CTX", "interrupt what a context runs"},
	{"restart", CTL_RESTART, 1, "CTX", "fresh kernel, same context id"},
	{"create", CTL_CREATE, 1, "LANG", "create a context (--cwd DIR)"},
	{"delete", CTL_DELETE, 1, "CTX", "delete a context"},
	{"drain", CTL_DRAIN, 0, "", "refuse new executions (503)"},
	{"undrain", CTL_UNDRAIN, 0, "", "accept executions again"},
	{"watch", CTL_WATCH, 0, "", "print live events until Ctrl-C"},
	{"run", CTL_RUN, 2, "CTX CODE", "execute CODE in CTX and print its output"},
	{"stop-ends-contexts", CTL_STOP_ENDS, 0, "", "the broker's stop (SIGTERM) ends every context"},
	{"stop-keeps-contexts", CTL_STOP_KEEPS, 0, "", "contexts outlive the broker's stop"},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static bool as_json;
static const char *run_dir, *cwd;
static unsigned timeout_s;

static const struct opt options[] = {
    {"run-dir", "DIR", OPT_STRING, OPT_DST(run_dir),
     .o_shown = "$XDG_RUNTIME_DIR/sandcell, else /tmp/sandcell-$UID",
     .o_help = "the broker's run dir, where its control socket is"},
    {"json", NULL, OPT_SWITCH, OPT_DST(as_json), .o_help = "print the replies as JSON"},
    {"cwd", "DIR", OPT_STRING, OPT_DST(cwd), .o_help = "create: the context's cwd"},
    {"timeout", "DURATION", OPT_SECONDS, OPT_DST(timeout_s), .o_min = 1,
     .o_max = 7 * 24 * 3600,
     .o_expect = "a duration such as 120, 30s or 5m, from 1s to 7 days", .o_default = "120",
     .o_help = "how long to wait for the broker's answer"},
};

static void
usage_commands(FILE *f)
{
	fprintf(f, "\ncommands:\n");
	for (size_t i = 0; i < N_COMMANDS; i++)
		fprintf(f, "  %-19s %-9s %s\n", commands[i].name, commands[i].args,
			commands[i].help);
}

static struct optset optset = {
    .os_prog = "sandcellctl",
    .os_usage = "usage: sandcellctl [options] COMMAND [ARGS]\n",
    .os_opts = options,
    .os_n = sizeof(options) / sizeof(options[0]),
    .os_more = usage_commands,
};

static const char *
str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : "-";
}

static void
print_mb(json_t *o, const char *k)
{
	json_int_t v = json_integer_value(json_object_get(o, k));

	if (v > 0)
		printf("  %6.1f", v / 1048576.0);
	else
		printf("  %6s", "-");
}

static void
print_contexts(json_t *a)
{
	size_t i;
	json_t *c;

	printf("%-36s  %-10s  %-8s  %5s  %5s  %7s  %7s  %6s  %6s  %7s  %-7s  %5s  %s\n", "ID",
	       "LANGUAGE", "STATE", "QUEUE", "RUNS", "KPID", "PID", "KRSS", "PRSS", "AGE", "BOX",
	       "UID", "CWD");
	json_array_foreach(a, i, c)
	{
		printf("%-36s  %-10s  %-8s  %5lld  %5lld  %7lld  %7lld", str(c, "id"),
		       str(c, "language"), str(c, "state"),
		       json_integer_value(json_object_get(c, "queue")),
		       json_integer_value(json_object_get(c, "executions")),
		       json_integer_value(json_object_get(c, "kernel_pid")),
		       json_integer_value(json_object_get(c, "proxy_pid")));
		print_mb(c, "kernel_rss_bytes");
		print_mb(c, "proxy_rss_bytes");
		/* the sandbox: isolation mode and uid, or "off" (--no-sandbox) */
		json_t *box = json_object_get(c, "sandbox");
		bool on = json_is_true(json_object_get(box, "enabled"));
		printf("  %6.0fs  %-7s  %5lld  %s\n",
		       json_real_value(json_object_get(c, "age_seconds")),
		       !box ? "-" : on ? str(box, "isolation") : "off",
		       on ? json_integer_value(json_object_get(box, "uid")) : -1LL, str(c, "cwd"));
	}
}

static void
print_executions(json_t *a)
{
	size_t i;
	json_t *e;

	printf("%-18s  %-36s  %-7s  %-11s  %7s  %s\n", "STREAM", "CONTEXT", "STATE", "CLIENT",
	       "AGE", "CODE");
	json_array_foreach(a, i, e)
	{
		printf("%-18lld  %-36s  %-7s  %-11s  %6.1fs  %s\n",
		       json_integer_value(json_object_get(e, "stream")), str(e, "context"),
		       str(e, "state"), str(e, "client"),
		       json_real_value(json_object_get(e, "age_seconds")), str(e, "code"));
	}
}

static void
print_object(json_t *o)
{
	const char *k;
	json_t *v;

	json_object_foreach(o, k, v)
	{
		char *vs = json_string_value(v) ? strdup(json_string_value(v))
						: json_dumps(v, JSON_ENCODE_ANY);
		printf("%-20s %s\n", k, vs);
		free(vs);
	}
}

/* One NDJSON line of a run, as a person would read it. */
static void
print_line(json_t *l)
{
	const char *t = str(l, "type");

	if (!strcmp(t, "stdout"))
		fputs(str(l, "text"), stdout);
	else if (!strcmp(t, "stderr"))
		fputs(str(l, "text"), stderr);
	else if (!strcmp(t, "result")) {
		const char *text = json_string_value(json_object_get(l, "text"));
		printf("%s\n", text ? text : "[result without text]");
	} else if (!strcmp(t, "error"))
		fprintf(stderr, "%s: %s\n", str(l, "name"), str(l, "value"));
	fflush(stdout);
}

static void
print_event(json_t *ev)
{
	const char *k;
	json_t *v;

	printf("%s  %-18s", str(ev, "time"), str(ev, "event"));
	json_object_foreach(ev, k, v)
	{
		if (!strcmp(k, "time") || !strcmp(k, "event"))
			continue;
		char *vs = json_string_value(v) ? strdup(json_string_value(v))
						: json_dumps(v, JSON_ENCODE_ANY);
		printf("  %s=%s", k, vs);
		free(vs);
	}
	printf("\n");
	fflush(stdout);
}

static void
show(const char *cmd, json_t *data)
{
	if (as_json) {
		/* watch prints one event per line, for scripts that read a stream */
		char *s = json_dumps(data, JSON_ENCODE_ANY |
						   (strcmp(cmd, "watch") ? JSON_INDENT(2) : JSON_COMPACT));
		printf("%s\n", s);
		free(s);
	} else if (!strcmp(cmd, "contexts")) {
		print_contexts(data);
	} else if (!strcmp(cmd, "executions")) {
		print_executions(data);
	} else if (!strcmp(cmd, "watch")) {
		print_event(data);
	} else if (json_is_object(data)) {
		print_object(data);
	} else {
		char *s = json_dumps(data, JSON_ENCODE_ANY);
		printf("%s\n", s);
		free(s);
	}
	fflush(stdout);
}

/*
 * The broker's end closed (it stopped or died): nng would dial again and wait
 * for ever, so the loop, which wakes every POLL_MS, ends instead.
 */
#define POLL_MS 250
static atomic_bool broker_gone; /* set on nng's thread */

static void
pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)p;
	(void)ev;
	(void)arg;
	atomic_store(&broker_gone, true);
}

/* Prints each whole NDJSON line; a partial one waits for its rest. */
static void
show_output(const char *data, size_t len)
{
	static struct buf part; /* a line the proxy cut across messages (1 MiB each) */
	const char *p, *end;

	buf_append(&part, data, len);
	p = buf_head(&part);
	end = p + buf_pending(&part);
	for (const char *nl; (nl = memchr(p, '\n', end - p)); p = nl + 1) {
		size_t n = nl - p;
		if (as_json) {
			fwrite(p, 1, n + 1, stdout);
		} else {
			json_t *l = json_loadb(p, n, 0, NULL);
			if (l)
				print_line(l);
			json_decref(l);
		}
	}
	buf_consume(&part, p - buf_head(&part));
	fflush(stdout);
}

/* The command's request, from its arguments. */
static void
request(struct msg *m, enum msg_type type, char **arg)
{
	uint64_t v;
	int e;

	msg_init(m, type);
	msg_set_u64(m, F_REQ, 1);
	switch (type) {
	case CTL_CANCEL:
		if ((e = parse_count(arg[0], 0, UINT64_MAX, &v)) < 0)
			parse_fail("sandcellctl", "cancel", arg[0], e, "a stream number");
		msg_set_u64(m, F_STREAM, v);
		break;
	case CTL_CREATE:
		msg_set_str(m, F_LANG, arg[0], strlen(arg[0]));
		if (cwd)
			msg_set_str(m, F_CWD, cwd, strlen(cwd));
		break;
	case CTL_INTERRUPT:
	case CTL_RESTART:
	case CTL_DELETE:
		msg_set_str(m, F_ID, arg[0], strlen(arg[0]));
		break;
	case CTL_RUN:
		msg_set_str(m, F_ID, arg[0], strlen(arg[0]));
		msg_set_str(m, F_CODE, arg[1], strlen(arg[1]));
		break;
	default:
		break;
	}
}

/* Replies until END, each acknowledged; 0 if the broker said OK. */
static int
replies(nng_socket s, size_t ci)
{
	bool watch = commands[ci].type == CTL_WATCH;
	int e, rc = 1;

	for (unsigned waited = 0;;) {
		struct msg r;
		if ((e = msg_recv(s, &r, 0)) == NNG_ETIMEDOUT && !atomic_load(&broker_gone) &&
		    (watch || (waited += POLL_MS) < timeout_s * 1000))
			continue;
		if (e) {
			fprintf(stderr, "sandcellctl: %s\n",
				atomic_load(&broker_gone) ? "the broker went away"
				: e == NNG_ETIMEDOUT ? "the broker did not answer in time"
				: e > 0		     ? nng_strerror(e)
						     : proto_strerror(e));
			return 1;
		}
		waited = 0;
		/* read: the broker may send the next (it holds CTL_WINDOW unacked) */
		struct msg ack;
		msg_init(&ack, CTL_ACK);
		msg_set_u64(&ack, F_COUNT, 1);
		msg_send(s, &ack, 0);
		msg_free(&ack);
		if (r.m_type == MSG_END) {
			msg_free(&r);
			return rc;
		}
		if (r.m_type == MSG_OUTPUT) {
			show_output(r.m_data.s, r.m_data.len);
		} else if (r.m_type == MSG_OK) {
			json_t *d = r.m_data.s ? json_loads(r.m_data.s, JSON_DECODE_ANY, NULL) : NULL;
			if (d)
				show(commands[ci].name, d);
			else if (r.m_text.s && !as_json && commands[ci].type != CTL_RUN)
				printf("%s\n", r.m_text.s);
			json_decref(d);
			rc = 0;
		} else if (r.m_type == MSG_FAIL) {
			fprintf(stderr, "sandcellctl: %s\n", r.m_text.s ? r.m_text.s : "failed");
			rc = 1;
		}
		msg_free(&r);
	}
}

int
main(int argc, char **argv)
{
	char **arg;
	int e, rc, n = opts_parse(&optset, argc, argv, &arg);
	size_t ci;
	struct msg m;
	nng_socket s;

	if (n < 1)
		opts_usage(&optset);
	for (ci = 0; ci < N_COMMANDS; ci++)
		if (!strcmp(arg[0], commands[ci].name))
			break;
	if (ci == N_COMMANDS || n - 1 != commands[ci].nargs)
		opts_usage(&optset);
	log_init("sandcellctl", LOG_WARN);
	if (!run_dir)
		run_dir = default_run_dir();
	request(&m, commands[ci].type, arg + 1);

	char *url = xasprintf("ipc://%s/ctl.sock", run_dir);
	if ((e = nng_pair1_open(&s)) || (e = nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, PROTO_MAX_FRAME)) ||
	    (e = nng_pipe_notify(s, NNG_PIPE_EV_REM_POST, pipe_gone, NULL)) ||
	    (e = nng_dial(s, url, NULL, 0))) {
		fprintf(stderr, "sandcellctl: no broker is listening at %s (%s); is sandcell-broker "
				"running with --run-dir %s?\n",
			url, nng_strerror(e), run_dir);
		return 1;
	}
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, POLL_MS);
	if ((e = msg_send(s, &m, 0))) {
		fprintf(stderr, "sandcellctl: send: %s\n", nng_strerror(e));
		return 1;
	}
	rc = replies(s, ci);
	msg_free(&m);
	nng_close(s);
	free(url);
	return rc;
}
