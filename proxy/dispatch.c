/*
 * dispatch.c — what the proxy does on each event: the broker's requests
 * (EXECUTE, CANCEL, INTERRUPT, RESTART, SHUTDOWN, INFO, CLAIM) and the
 * kernel's events (ready, lost, a reply, output), handed to admit.c,
 * kernel.c and ipc.c. The modules below call no one above them: the kernel
 * tells of its events through the hook it was given, the link asks for
 * its state fields through its own.
 */
#include <stdlib.h>
#include <string.h>

#include "proxy.h"

static struct proxy *px;
static struct {
	uint64_t d_restart_req; /* a RESTART waiting for the new kernel */
	bool d_restart_pending;
	bool d_quit;            /* the loop ends */
	bool d_gone;            /* the broker ended the context (SHUTDOWN) */
} d;

/* The state fields of STATE, HELLO and OK (ipc.c's status hook). */
static void
status(struct msg *m)
{
	msg_set_u64(m, F_STATE, kernel_state());
	msg_set_u64(m, F_KPID, (uint64_t)kernel_pid_shown());
	msg_set_u64(m, F_QUEUE, admit_depth());
	msg_set_u64(m, F_COUNT, admit_count());
}

static void
on_kernel(enum kernel_event ev, const char *why, struct jmsg *jm)
{
	switch (ev) {
	case KEV_READY:
		ipc_state(NULL);
		if (d.d_restart_pending) {
			struct msg m;
			msg_init(&m, MSG_OK);
			msg_set_u64(&m, F_REQ, d.d_restart_req);
			ipc_send(&m);
			msg_free(&m);
			d.d_restart_pending = false;
		}
		admit_next();
		break;
	case KEV_JOINED: admit_next(); break;
	case KEV_LOST: admit_fail_all("KernelDied", why); break;
	case KEV_STATE: ipc_state(why); break;
	case KEV_REPLY: admit_on_reply(jm); break;
	case KEV_INFO: admit_on_probe(jm); break;
	case KEV_IOPUB: admit_on_iopub(jm); break;
	}
}

void
dispatch_init(struct proxy *p)
{
	px = p;
	admit_init(px);
	kernel_init(px, &px->px_box, on_kernel);
	ipc_listen(px, status);
}

/*
 * A pooled proxy becomes a context (or a live one is renamed after a restart
 * took this proxy from the pool): new id, cwd applied in the kernel, state
 * file rewritten so a restarted broker finds it under its context id.
 */
static void
claim(struct msg *m)
{
	bool moved = strcmp(m->m_cwd.s, px->px_cwd) != 0;

	if (!uuid_valid(m->m_id.s) || m->m_cwd.s[0] != '/') {
		ipc_reply(MSG_FAIL, m->m_req, "bad claim");
		return;
	}
	free(px->px_ctx);
	px->px_ctx = xstrdup(m->m_id.s);
	free(px->px_cwd);
	px->px_cwd = xstrdup(m->m_cwd.s); /* kernels restarted later start there */
	px->px_default = m->m_flags & FLAG_DEFAULT;
	px->px_pooled = false;
	if (moved) {
		char *cd = envset_chdir(px->px_ks->ks_lang, px->px_cwd);
		/* the shell channel is ordered: every unit runs after this */
		if (cd && kernel_execute(cd, true, NULL) < 0)
			log_warn("context %s: could not change the kernel's directory", px->px_ctx);
		free(cd);
	}
	statefile_write(px);
	log_info("proxy %s now serves context %s (cwd %s)", px->px_id, px->px_ctx, px->px_cwd);
	ipc_reply(MSG_OK, m->m_req, NULL);
}

static void
restart(struct msg *m)
{
	if (d.d_restart_pending)
		ipc_reply(MSG_OK, d.d_restart_req, "superseded by a later restart");
	d.d_restart_req = m->m_req;
	d.d_restart_pending = true;
	admit_fail_all("ContextRestarted", "restart requested");
	kernel_restart("restart requested");
	if (kernel_state() == KS_DEAD) {
		ipc_reply(MSG_FAIL, m->m_req,
			  kernel_dead_reason() ? kernel_dead_reason() : "kernel could not be started");
		d.d_restart_pending = false;
	}
}

/* One message from the broker. */
void
dispatch_msg(struct msg *m)
{
	switch (m->m_type) {
	case MSG_EXECUTE:
		admit_push(m);
		break;
	case MSG_CANCEL:
		admit_cancel(m->m_stream);
		break;
	case MSG_INTERRUPT:
		ipc_reply(MSG_OK, m->m_req, admit_interrupt() ? "interrupted" : "nothing running");
		break;
	case MSG_RESTART:
		restart(m);
		break;
	case MSG_SHUTDOWN:
		ipc_reply(MSG_OK, m->m_req, "shutting down");
		d.d_gone = true;
		dispatch_stop();
		break;
	case MSG_INFO:
		ipc_reply(MSG_OK, m->m_req, NULL);
		break;
	case MSG_CLAIM:
		claim(m);
		break;
	default:
		log_warn("context %s: unexpected %s from broker, dropped", px->px_id,
			 msg_type_name(m->m_type));
	}
}

/* The proxy stops (SHUTDOWN, SIGTERM): the loop ends, the kernel is not restarted. */
void
dispatch_stop(void)
{
	d.d_quit = true;
	kernel_no_respawn();
}

bool
dispatch_quit(void)
{
	return d.d_quit;
}

/* The broker ended the context: its own workspace goes with it. */
bool
dispatch_gone(void)
{
	return d.d_gone;
}
