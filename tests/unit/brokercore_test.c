/*
 * brokercore_test.c — the broker's core in-process: request.c, stream.c, waiter.c,
 * pool.c, context.c, supervise.c, relay.c and answer.c linked with link.c's
 * port set to a fake proxy (link_use: every message the core sends to a
 * proxy, every spawn and signal, recorded here; what a proxy sends is handed
 * to relay_msg) and a fake transport (struct request_ops and stream_ops that
 * record the answer and queue the output). No HTTP server, no process. The
 * rest of the broker the core calls (the box, kernelspecs, egress, metrics)
 * is stood in for below.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#include "../../broker/broker.h"
/* the core's own view of a context and its link, as the modules under test have it */
#include "../../broker/contextdef.h"
#include "../../broker/linkdef.h"

/* ---- the fake proxy: link.c's port ---- */

#define MAX_SENT 64

struct sent {
	char slot[37]; /* the proxy it went to */
	enum msg_type type;
	uint64_t stream, req;
	char text[64]; /* EXECUTE's code, CLAIM's id */
};

static struct {
	struct sent sent[MAX_SENT];
	int nsent;
	int ndial, nhangup, nspawn;
	pid_t next_pid;
	struct {
		pid_t pid;
		int sig;
	} sig[16];
	int nsig;
} fp;

static int
fake_dial(struct context *c)
{
	(void)c;
	fp.ndial++;
	return 0;
}

static void
fake_hangup(struct proxy_link *pl)
{
	(void)pl;
	fp.nhangup++;
}

static void
fake_send(struct context *c, struct msg *m)
{
	struct sent *s;

	cr_assert_lt(fp.nsent, MAX_SENT);
	s = &fp.sent[fp.nsent++];
	snprintf(s->slot, sizeof(s->slot), "%s", c->c_pl->pl_slot);
	s->type = m->m_type;
	s->stream = m->m_stream;
	s->req = m->m_req;
	if (m->m_type == MSG_EXECUTE && m->m_code.s)
		snprintf(s->text, sizeof(s->text), "%s", m->m_code.s);
	if (m->m_type == MSG_CLAIM && m->m_id.s)
		snprintf(s->text, sizeof(s->text), "%s", m->m_id.s);
}

static int
fake_spawn(struct context *c, pid_t *pid)
{
	(void)c;
	fp.nspawn++;
	*pid = fp.next_pid++;
	return 0;
}

static void
fake_signal(const struct proxy_link *pl, int sig)
{
	cr_assert_lt(fp.nsig, 16);
	fp.sig[fp.nsig].pid = pl->pl_pid;
	fp.sig[fp.nsig++].sig = sig;
}

static bool
fake_exited(const struct proxy_link *pl, bool wait)
{
	(void)pl;
	(void)wait;
	return true; /* a fake proxy stops at once */
}

static const struct link_ops fake_link = {
    .lo_dial = fake_dial,
    .lo_hangup = fake_hangup,
    .lo_send = fake_send,
    .lo_spawn = fake_spawn,
    .lo_signal = fake_signal,
    .lo_exited = fake_exited,
};

/* The messages of type t sent so far, and the last of them. */
static int
sent_count(enum msg_type t, const struct sent **last)
{
	int n = 0;

	for (int i = 0; i < fp.nsent; i++)
		if (fp.sent[i].type == t) {
			n++;
			if (last)
				*last = &fp.sent[i];
		}
	return n;
}

/* What the proxy of c says. */
static void
proxy_state(struct context *c, enum kstate st)
{
	struct msg m;

	msg_init(&m, MSG_STATE);
	msg_set_u64(&m, F_STATE, st);
	relay_msg(c, &m);
	msg_free(&m);
}

static void
proxy_output(struct context *c, uint64_t stream, const char *line, const char *outcome)
{
	struct msg m;

	msg_init(&m, MSG_OUTPUT);
	msg_set_u64(&m, F_STREAM, stream);
	msg_set_str(&m, F_DATA, line, strlen(line));
	if (outcome) {
		msg_set_u64(&m, F_FINAL, 1);
		msg_set_str(&m, F_OUTCOME, outcome, strlen(outcome));
	}
	relay_msg(c, &m);
	msg_free(&m);
}

static void
proxy_reply(struct context *c, enum msg_type t, uint64_t req)
{
	struct msg m;

	msg_init(&m, t);
	msg_set_u64(&m, F_REQ, req);
	if (t == MSG_FAIL)
		msg_set_str(&m, F_TEXT, "failed", 6);
	relay_msg(c, &m);
	msg_free(&m);
}

/* ---- the fake transport: a client's request and its stream ---- */

struct client {
	struct request c_rq; /* first: answer.c hands us the request */
	unsigned c_status;   /* 0: not answered */
	char *c_text;
	json_t *c_json;
	bool c_suspended;
	struct stream *c_s;
	int c_wakes;
};

#define MAX_CLIENTS 32
static struct client clients[MAX_CLIENTS];
static int nclients;

static void
client_complete(struct request *rq, unsigned status, json_t *json, const char *text)
{
	struct client *cl = (struct client *)rq;

	cr_assert_eq(cl->c_status, 0, "a request answered twice");
	cl->c_status = status;
	cl->c_json = json;
	cl->c_text = text ? strdup(text) : NULL;
}

static void
client_suspend(struct request *rq)
{
	((struct client *)rq)->c_suspended = true;
}

static void
client_wake(struct stream *s)
{
	((struct client *)s->st_client)->c_wakes++;
}

static const struct stream_ops client_stream = {
    .so_wake = client_wake,
    .so_client = "test",
    .so_keepalive = false,
};

static void
client_stream_of(struct request *rq, struct stream *s)
{
	struct client *cl = (struct client *)rq;

	cl->c_s = s;
	s->st_ops = &client_stream;
	s->st_client = cl;
}

static const struct request_ops client_ops = {
    .ro_complete = client_complete,
    .ro_suspend = client_suspend,
    .ro_stream = client_stream_of,
};

static struct client *
client_new(void)
{
	cr_assert_lt(nclients, MAX_CLIENTS);
	struct client *cl = &clients[nclients++];
	cl->c_rq.rq_ops = &client_ops;
	return cl;
}

/* POST /execute of code to context c (NULL: the default). */
static struct client *
execute(struct context *c, const char *code)
{
	struct client *cl = client_new();
	json_t *body = json_pack("{s:s}", "code", code);

	if (c)
		json_object_set_new(body, "context_id", json_string(c->c_id));
	request_execute(&cl->c_rq, body);
	json_decref(body);
	return cl;
}

/* What the client of a stream has been handed so far. */
static char *
client_read(struct client *cl)
{
	static char out[8192];
	size_t n;

	cr_assert_not_null(cl->c_s);
	n = stream_take(cl->c_s, out, sizeof(out) - 1);
	out[n] = '\0';
	return out;
}

/* The stream's client leaves (respond.c: its hang-up, then MHD's close). */
static void
client_leave(struct client *cl)
{
	stream_gone(cl->c_s);
	stream_closed(cl->c_s);
	cl->c_s = NULL;
}

/* A new context, its proxy spawned and its kernel ready. */
static struct context *
ready_context(void)
{
	struct client *cl = client_new();
	struct context *c;

	request_create(&cl->c_rq, "python", NULL, NULL);
	cr_assert(cl->c_suspended, "the create waits for its kernel (%u %s)",
	          cl->c_status, cl->c_text ? cl->c_text : "");
	c = context_next(NULL);
	while (context_next(c))
		c = context_next(c);
	proxy_state(c, KS_IDLE);
	cr_assert_eq(cl->c_status, 200,
	             "the create is answered once the kernel is ready");
	return c;
}

/* ---- what the core calls of the rest of the broker ---- */

/* the settings: config.c's in the broker, this test's here */
static struct server_config settings;
const struct server_config *const cf = &settings;
static uint64_t counted[M_EGRESS_REFUSED + 1];
static char last_outcome[64];

void
metrics_count(enum metric m, uint64_t n)
{
	counted[m] += n;
}

void
metrics_execution(const struct stream *s, const char *ctx_id, const char *outcome,
                  uint64_t wait_ms, uint64_t run_ms)
{
	(void)s, (void)ctx_id, (void)wait_ms, (void)run_ms;
	snprintf(last_outcome, sizeof(last_outcome), "%s", outcome);
}

static struct kspec python = {.ks_name = "python3", .ks_lang = "python"};

const struct kspec *
kcache_find(const char *want)
{
	return !strcmp(want, "python") || !strcmp(want, "python3") ? &python : NULL;
}

const char *
workspace_default_cwd(void)
{
	return "/home/user";
}
const char *
workspace_of(const struct context *c)
{
	(void)c;
	return "/home/user";
}
bool
boxuid_isolates(void)
{
	return false;
}
uid_t
boxuid_kernel(const struct ctxiso *iso)
{
	(void)iso;
	return 0;
}
int
boxuid_lease(struct ctxiso *iso, char *err, size_t errsz)
{
	(void)iso, (void)err, (void)errsz;
	return 0;
}
void
boxuid_adopt(struct ctxiso *iso, json_t *box, const char *id)
{
	(void)iso, (void)box, (void)id;
}
int
workspace_own(struct ctxiso *iso, const char *id, const char *cwd, char *err,
              size_t errsz)
{
	(void)iso, (void)id, (void)cwd, (void)err, (void)errsz;
	return 0;
}
int
cwd_check(const char *dir, uid_t uid, char *err, size_t errsz)
{
	(void)dir, (void)uid, (void)err, (void)errsz;
	return 0;
}
int
cwd_usable(uid_t uid, const char *ws, const char *cwd, char *err, size_t errsz)
{
	(void)uid, (void)ws, (void)cwd, (void)err, (void)errsz;
	return 0;
}
bool
egress_own(const struct egress_lists *el)
{
	return el && (el->el_allow || el->el_deny);
}
void
egress_free(struct egress_lists *el)
{
	(void)el;
}
void
egress_adopt(struct egress_lists *el, json_t *net)
{
	(void)el, (void)net;
}
json_t *
egress_context_json(const struct egress_lists *el)
{
	(void)el;
	return NULL;
}
int
uid_lease(unsigned uid, const char *role)
{
	(void)uid, (void)role;
	return -1;
}
void
uid_release(unsigned uid, int fd)
{
	(void)uid, (void)fd;
}
const char *
template_socket(const char *kernel)
{
	(void)kernel;
	return NULL;
}
bool
template_starting(const char *kernel)
{
	(void)kernel;
	return false;
}
uint64_t
template_wait_ms(const char *kernel)
{
	(void)kernel;
	return 0;
}
uint64_t
uplink_since(void) /* no uplink here: no change of the way out to refill the pool for */
{
	return 0;
}
void
server_watch(int fd, uint32_t events, struct evsrc *ev)
{
	(void)fd, (void)events, (void)ev;
}
void
server_unwatch(int fd)
{
	(void)fd;
}
void
server_forget(struct evsrc *ev)
{
	(void)ev;
}

/* ---- set-up ---- */

static void
setup(void)
{
	memset(&settings, 0, sizeof(settings));
	memset(&fp, 0, sizeof(fp));
	fp.next_pid = 4000001; /* no process: the fake port is all that sees it */
	settings.cf_max_queue = 10;
	settings.cf_max_contexts = 10;
	settings.cf_stream_cap = 1 << 20;
	settings.cf_spill_dir = "/tmp";
	settings.cf_proxy_bin = "sandcell-proxy";
	link_use(&fake_link);
	log_init("brokercore_test", LOG_ERR);
}

/* Everything ends, so that ASan's leak check sees what the core leaks. */
static void
teardown(void)
{
	struct context *c;
	struct stream *s;

	while ((c = context_next(NULL)))
		context_end(c, CTX_DELETED, NULL);
	while ((s = stream_next(NULL)))
		stream_closed(s);
	for (int i = 0; i < nclients; i++) {
		free(clients[i].c_text);
		json_decref(clients[i].c_json);
	}
	memset(clients, 0, sizeof(clients));
	nclients = 0;
}

TestSuite(core, .init = setup, .fini = teardown);

/*
 * A test's last step: everything ends (teardown), and under ASan (make
 * test-asan) nothing the core allocated may be left: a leak fails the test
 * (an assertion in .fini would not).
 */
static void
core_done(void)
{
	teardown();
#ifdef __SANITIZE_ADDRESS__
	cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "the core leaked (above)");
#endif
}

/* ---- the tests ---- */

/* Executions to one context go to its proxy in the order they came, each
 * stream gets its own output, and the queue's bound holds. */
Test(core, admission_order)
{
	struct context *c = ready_context();
	struct client *a, *b, *d, *e;
	const char *code[] = {"first", "second", "third"};
	struct context_counts cc;
	int k = 0;

	settings.cf_max_queue = 2;
	a = execute(c, code[0]);
	b = execute(c, code[1]);
	d = execute(c, code[2]);
	cr_assert(a->c_s && b->c_s && d->c_s, "three executions accepted");
	for (int i = 0; i < fp.nsent; i++) {
		if (fp.sent[i].type != MSG_EXECUTE)
			continue;
		cr_assert_lt(k, 3);
		cr_assert_str_eq(fp.sent[i].text, code[k], "EXECUTE %d is the %s", k,
		                 code[k]);
		cr_assert_eq(fp.sent[i].stream, (k == 0   ? a
		                                 : k == 1 ? b
		                                          : d)
		                                    ->c_s->st_id);
		cr_assert_str_eq(fp.sent[i].slot, c->c_pl->pl_slot);
		k++;
	}
	cr_assert_eq(k, 3);
	context_count(&cc, NULL);
	cr_assert_eq(cc.cc_running, 1);
	cr_assert_eq(cc.cc_queued, 2);

	/* one running and two waiting: a fourth is over --max-queue 2 */
	e = execute(c, "fourth");
	cr_assert_eq(e->c_status, 429, "the queue's bound: %u", e->c_status);
	cr_assert_eq(sent_count(MSG_EXECUTE, NULL), 3);

	/* the proxy serves them in order: each output reaches its own client */
	proxy_output(c, a->c_s->st_id, "{\"out\":\"1\"}\n", "ok");
	cr_assert_str_eq(client_read(a), "{\"out\":\"1\"}\n");
	cr_assert(a->c_s->st_final);
	cr_assert_str_eq(client_read(b), "");
	cr_assert_not(b->c_s->st_final);
	proxy_output(c, b->c_s->st_id, "{\"out\":\"2\"}\n", "ok");
	proxy_output(c, d->c_s->st_id, "{\"out\":\"3\"}\n", "ok");
	cr_assert_str_eq(client_read(b), "{\"out\":\"2\"}\n");
	cr_assert_str_eq(client_read(d), "{\"out\":\"3\"}\n");
	cr_assert_eq(c->c_nstreams, 0, "none running or queued once all ended");
	core_done();
}

/* A client that leaves: its proxy is told CANCEL for its stream, once, and
 * the context takes the next execution at once. */
Test(core, cancel_on_disconnect)
{
	struct context *c = ready_context();
	const struct sent *cancel;
	struct client *a, *b, *d;
	uint64_t id;

	settings.cf_max_queue = 0; /* one execution at a time */
	a = execute(c, "while True: pass");
	cr_assert_not_null(a->c_s);
	id = a->c_s->st_id;
	b = execute(c, "1");
	cr_assert_eq(b->c_status, 429, "blocked while the first runs: %u", b->c_status);

	client_leave(a);
	cr_assert_eq(sent_count(MSG_CANCEL, &cancel), 1, "one CANCEL");
	cr_assert_eq(cancel->stream, id, "CANCEL names the stream whose client left");
	cr_assert_str_eq(cancel->slot, c->c_pl->pl_slot);
	cr_assert_eq(counted[M_CANCEL], 1);
	cr_assert_str_eq(last_outcome, "cancelled");

	d = execute(c, "2");
	cr_assert_not_null(d->c_s, "the next execution is not blocked (%u %s)",
	                   d->c_status, d->c_text ? d->c_text : "");
	cr_assert_eq(sent_count(MSG_EXECUTE, NULL), 2);
	/* the cancelled one's last output goes nowhere; the next one's arrives */
	proxy_output(c, id, "{\"late\":1}\n", "cancelled");
	proxy_output(c, d->c_s->st_id, "{\"out\":\"2\"}\n", "ok");
	cr_assert_str_eq(client_read(d), "{\"out\":\"2\"}\n");
	cr_assert_eq(sent_count(MSG_CANCEL, NULL), 1, "CANCEL sent once");
	core_done();
}

/* The proxy dies mid-stream: its streams end with ContextLost, its waiting
 * requests are answered, and the context keeps its id with a new proxy. */
Test(core, proxy_death_mid_stream)
{
	struct context *c = ready_context();
	struct client *a, *b, *intr;
	char id[37];
	pid_t pid = c->c_pl->pl_pid;
	int dials = fp.ndial, spawns = fp.nspawn;

	snprintf(id, sizeof(id), "%s", c->c_id);
	a = execute(c, "running");
	b = execute(c, "queued");
	intr = client_new();
	request_context(&intr->c_rq, c->c_id, OP_INTERRUPT);
	cr_assert(intr->c_suspended);
	cr_assert_eq(sent_count(MSG_INTERRUPT, NULL), 1);
	proxy_output(c, a->c_s->st_id, "{\"out\":\"partial\"}\n", NULL);

	supervise_reaped(pid, SIGKILL); /* a wait status: killed by signal 9 */

	cr_assert(strstr(client_read(a), "{\"out\":\"partial\"}\n"),
	          "output before it stays");
	cr_assert(a->c_s->st_final);
	cr_assert(b->c_s->st_final);
	cr_assert(strstr(client_read(b), "\"ContextLost\""), "the queued one ends too");
	cr_assert_eq(intr->c_status, 500, "the waiting interrupt is answered: %u",
	             intr->c_status);
	cr_assert(strstr(intr->c_text, "killed by signal 9"), "%s", intr->c_text);
	cr_assert_eq(c->c_nstreams, 0);
	cr_assert_eq(context_find(id), c, "the context stays, same id");
	cr_assert_eq(fp.ndial, dials + 1, "a new link");
	cr_assert_eq(fp.nspawn, spawns + 1, "a new proxy");
	cr_assert_neq(c->c_pl->pl_pid, pid);
	cr_assert_str_eq(context_state(c), "starting");
	cr_assert_eq(counted[M_PROXY_RESTART], 1);
	proxy_state(c, KS_IDLE);
	cr_assert_not_null(execute(c, "again")->c_s, "it runs code again");
	core_done();
}

/* Its stream's own error, read whole: the ContextLost line, then the end. */
Test(core, proxy_death_stream_error)
{
	struct context *c = ready_context();
	struct client *a = execute(c, "x");

	supervise_reaped(c->c_pl->pl_pid, 1 << 8); /* exited with status 1 */
	const char *out = client_read(a);
	cr_assert(strstr(out, "\"name\":\"ContextLost\""), "%s", out);
	cr_assert(strstr(out, "exited with status 1"), "%s", out);
	cr_assert(strstr(out, "{\"type\":\"end_of_execution\"}\n"), "%s", out);
	cr_assert_str_eq(last_outcome, "context_lost");
	core_done();
}

/* A proxy that dies before its kernel was ready: the create is answered
 * with why, and the context is not kept. */
Test(core, proxy_death_before_ready)
{
	struct client *cl = client_new();
	struct context *c;

	request_create(&cl->c_rq, "python", NULL, NULL);
	cr_assert(cl->c_suspended);
	c = context_next(NULL);
	supervise_reaped(c->c_pl->pl_pid, SIGSEGV);
	cr_assert_eq(cl->c_status, 500, "%u", cl->c_status);
	cr_assert(strstr(cl->c_text, "before the kernel was ready"), "%s", cl->c_text);
	cr_assert_null(context_next(NULL), "not kept");
	cr_assert_eq(fp.nspawn, 1, "not respawned");
	core_done();
}

/* The pool warms a proxy; a create takes it (CLAIM, no spawn, answered at
 * once); the pool warms another. */
Test(core, pool_claim_and_refill)
{
	struct context_counts cc;
	struct context *warm, *c;
	const struct sent *claim;
	struct client *cl;

	snprintf(settings.cf_pool[0].ps_want, sizeof(settings.cf_pool[0].ps_want),
	         "python");
	settings.cf_pool[0].ps_size = 1;
	settings.cf_npool = 1;
	pool_fill();
	cr_assert_eq(fp.nspawn, 1, "one warm proxy spawned");
	warm = context_next(NULL);
	cr_assert(warm && warm->c_pooled);
	cr_assert_null(context_find(warm->c_id), "a warm proxy is not listed");
	pool_fill();
	cr_assert_eq(fp.nspawn, 1, "the pool is full");
	proxy_state(warm, KS_IDLE);
	context_count(&cc, NULL);
	cr_assert_eq(cc.cc_pool_ready, 1);

	cl = client_new();
	request_create(&cl->c_rq, "python", NULL, NULL);
	cr_assert_eq(cl->c_status, 200, "answered at once: %u", cl->c_status);
	cr_assert_eq(fp.nspawn, 1, "no spawn: the warm one was taken");
	c = context_find(json_string_value(json_object_get(cl->c_json, "id")));
	cr_assert_eq(c, warm, "the new context is the warm proxy");
	cr_assert_not(c->c_pooled);
	cr_assert_eq(sent_count(MSG_CLAIM, &claim), 1, "its proxy is told");
	cr_assert_str_eq(claim->text, c->c_id);
	cr_assert_str_eq(claim->slot, c->c_pl->pl_slot);
	cr_assert(pool_kicked(), "the pool is kicked to refill");

	/* refilled once the claim's grace (POOL_CLAIM_GRACE_MS) is over */
	for (uint64_t until = now_ms() + 5000; fp.nspawn < 2 && now_ms() < until;
	     usleep(10000))
		pool_fill();
	cr_assert_eq(fp.nspawn, 2, "the pool warms another");
	context_count(&cc, NULL);
	cr_assert_eq(cc.cc_pooled, 1);
	cr_assert_eq(cc.cc_listed, 1);
	core_done();
}

/* A restart while executions run and wait, from the pool: they end with
 * ContextRestarted, the old proxy is stopped, the context takes the warm
 * proxy under its own id and runs there. */
Test(core, restart_while_queued_from_pool)
{
	struct context *c = ready_context(), *warm;
	struct client *a, *b, *rs, *d, *intr;
	const struct sent *claim, *ex;
	pid_t old = c->c_pl->pl_pid, wpid;
	char slot[37];

	snprintf(settings.cf_pool[0].ps_want, sizeof(settings.cf_pool[0].ps_want),
	         "python");
	settings.cf_pool[0].ps_size = 1;
	settings.cf_npool = 1;
	pool_fill();
	warm = context_next(c);
	cr_assert(warm && warm->c_pooled);
	proxy_state(warm, KS_IDLE);
	wpid = warm->c_pl->pl_pid;
	snprintf(slot, sizeof(slot), "%s", warm->c_pl->pl_slot);

	a = execute(c, "running");
	b = execute(c, "queued");
	intr = client_new();
	request_context(&intr->c_rq, c->c_id, OP_INTERRUPT);
	cr_assert(intr->c_suspended);
	rs = client_new();
	request_context(&rs->c_rq, c->c_id, OP_RESTART);
	cr_assert_eq(rs->c_status, 200, "%u", rs->c_status);
	cr_assert_eq(intr->c_status, 409, "the waiting interrupt is answered: %u",
	             intr->c_status);
	cr_assert(strstr(intr->c_text, "was restarted meanwhile"), "%s", intr->c_text);
	cr_assert(strstr(client_read(a), "\"ContextRestarted\""));
	cr_assert(strstr(client_read(b), "\"ContextRestarted\""));
	cr_assert_eq(c->c_nstreams, 0);
	cr_assert_eq(fp.nsig, 1);
	cr_assert_eq(fp.sig[0].pid, old, "the old proxy is stopped");
	cr_assert_eq(fp.sig[0].sig, SIGTERM);
	cr_assert_eq(c->c_pl->pl_pid, wpid, "it has the warm proxy");
	cr_assert_eq(sent_count(MSG_CLAIM, &claim), 1);
	cr_assert_str_eq(claim->text, c->c_id, "claimed under the context's id");
	cr_assert_str_eq(claim->slot, slot);
	cr_assert_eq(context_next(c), NULL, "the warm entry left the table");

	d = execute(c, "after");
	cr_assert_not_null(d->c_s);
	sent_count(MSG_EXECUTE, &ex);
	cr_assert_str_eq(ex->slot, slot, "the next execution goes to the new proxy");
	core_done();
}

/* A restart with no warm proxy: the proxy is asked, the request waits for
 * its reply; what runs and waits is the proxy's to end (its outputs still
 * reach their clients). */
Test(core, restart_while_queued_by_proxy)
{
	struct context *c = ready_context();
	struct client *a, *b, *rs;
	const struct sent *rq;

	a = execute(c, "running");
	b = execute(c, "queued");
	rs = client_new();
	request_context(&rs->c_rq, c->c_id, OP_RESTART);
	cr_assert(rs->c_suspended);
	cr_assert_eq(sent_count(MSG_RESTART, &rq), 1);
	cr_assert_eq(fp.nsig, 0, "no signal: the proxy restarts its kernel");
	proxy_output(c, a->c_s->st_id, "{\"error\":\"restarted\"}\n", "restarted");
	proxy_output(c, b->c_s->st_id, "{\"error\":\"restarted\"}\n", "restarted");
	cr_assert_eq(rs->c_status, 0, "not answered before its reply");
	proxy_reply(c, MSG_OK, rq->req);
	cr_assert_eq(rs->c_status, 200);
	cr_assert_str_eq(client_read(b), "{\"error\":\"restarted\"}\n");
	cr_assert_eq(c->c_nstreams, 0);
	core_done();
}

/* Drain: what runs finishes, new executions and contexts get 503, accepting
 * again takes them; on the stop every proxy gets SIGTERM and the table
 * empties. */
Test(core, drain)
{
	struct context *c = ready_context();
	struct client *a, *dr, *e, *cr, *un;

	a = execute(c, "running");
	dr = client_new();
	request_drain(&dr->c_rq, true);
	cr_assert_eq(dr->c_status, 200);
	e = execute(c, "new");
	cr_assert_eq(e->c_status, 503, "%u", e->c_status);
	cr = client_new();
	request_create(&cr->c_rq, "python", NULL, NULL);
	cr_assert_eq(cr->c_status, 503, "%u", cr->c_status);
	cr_assert_eq(sent_count(MSG_EXECUTE, NULL), 1);

	proxy_output(c, a->c_s->st_id, "{\"out\":\"done\"}\n", "ok");
	cr_assert_str_eq(client_read(a), "{\"out\":\"done\"}\n",
	                 "the running one finishes");
	client_leave(a);
	cr_assert_null(stream_next(NULL), "drained: no stream left");
	cr_assert_eq(sent_count(MSG_CANCEL, NULL), 0,
	             "a finished stream is not cancelled");

	un = client_new();
	request_drain(&un->c_rq, false);
	cr_assert_eq(un->c_status, 200);
	cr_assert_not_null(execute(c, "accepted")->c_s);

	pid_t pid = c->c_pl->pl_pid;
	supervise_shutdown_all();
	cr_assert_eq(fp.nsig, 1);
	cr_assert_eq(fp.sig[0].pid, pid);
	cr_assert_eq(fp.sig[0].sig, SIGTERM);
	cr_assert_null(context_next(NULL), "the table is empty");
	core_done();
}
