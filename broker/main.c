/*
 * main.c — sandcell-broker: start-up in order (options.c, config.c), then the
 * one event loop (epoll) that drives libmicrohttpd, every proxy's IPC socket,
 * client hang-up watches, signals and timers: each ready fd's handler is in
 * its event source (struct evsrc, set by the module that watches it), so the
 * loop names no module's. Everything runs on this thread; nng's own threads
 * only wake it through an eventfd (control.c's).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "broker.h"

/* The signalfd: SIGTERM drains or stops, SIGINT stops, SIGCHLD reaps. */
static void
handle_signals(void *arg, uint32_t events)
{
	struct signalfd_siginfo si;
	int status;
	pid_t pid;

	(void)arg, (void)events;
	while (read(sv.sv_io.io_sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGTERM && !sv.sv_lc.lc_stopping && sv.sv_cf.cf_grace) {
			/* drain: no new executions, running ones get the grace period */
			sv.sv_lc.lc_draining = sv.sv_lc.lc_stopping = true;
			sv.sv_lc.lc_drain_until = now_ms() + sv.sv_cf.cf_grace * 1000ull;
			server_notify("STOPPING=1");
			log_info("SIGTERM: draining; stopping within %u s", sv.sv_cf.cf_grace);
		} else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
			log_info("signal %d: stopping", si.ssi_signo);
			sv.sv_lc.lc_quit = true;
		}
	}
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (!template_reaped(pid, status) && !uplink_reaped(pid, status))
			supervise_reaped(pid, status);
}

static void
loop(void)
{
	struct epoll_event evs[64];
	uint64_t next_tick = now_ms() + TICK_MS;

	while (!sv.sv_lc.lc_quit) {
		uint64_t now = now_ms();
		long wait = http_wait(next_tick > now ? (long)(next_tick - now) : 0);

		long pw = respond_park_wait(now);
		if (pw >= 0 && pw < wait)
			wait = pw;
		if (sv.sv_lc.lc_mhd_kick)
			wait = 0;
		int n = epoll_wait(sv.sv_io.io_epfd, evs, 64, (int)wait);
		if (n < 0 && errno != EINTR)
			fatal("epoll_wait: %s", strerror(errno));
		sv.sv_io.io_batch = evs;
		sv.sv_io.io_batch_n = n > 0 ? n : 0;
		for (int i = 0; i < n; i++) {
			struct evsrc *ev = evs[i].data.ptr;
			/* NULL: its object was freed by an earlier one (server_forget) */
			if (ev)
				ev->ev_fn(ev->ev_arg, evs[i].events);
		}
		sv.sv_io.io_batch_n = 0;
		respond_park_due(now_ms());
		sv.sv_lc.lc_mhd_kick = false;
		http_run(MHD_PASSES);
		if (sv.sv_po.po_kick) {
			/* after http_run: a claimed kernel's answer leaves before the fork */
			sv.sv_po.po_kick = false;
			if (!sv.sv_lc.lc_draining)
				pool_fill();
		}
		now = now_ms();
		if (now >= next_tick) {
			stream_tick(now);
			waiter_tick(now);
			envdfile_tick(now);
			envdstream_tick(now);
			http_tick(now);
			if (!sv.sv_lc.lc_draining)
				pool_fill();
			template_tick(now);
			uplink_tick(now);
			next_tick = now + TICK_MS;
			if (sv.sv_cf.cf_watchdog_ms && now >= sv.sv_lc.lc_watchdog_at) {
				server_notify("WATCHDOG=1");
				sv.sv_lc.lc_watchdog_at = now + sv.sv_cf.cf_watchdog_ms;
			}
			if (sv.sv_lc.lc_stopping &&
			    (TAILQ_EMPTY(&sv.sv_tb.tb_streams) || now >= sv.sv_lc.lc_drain_until)) {
				log_info("drained: %s", TAILQ_EMPTY(&sv.sv_tb.tb_streams)
								 ? "no execution left"
								 : "grace period over");
				sv.sv_lc.lc_quit = true;
			}
		}
	}
}

/* The loop's own fds, the two listeners, the adopted and default contexts. */
static void
serve_start(void)
{
	char err[512];

	TAILQ_INIT(&sv.sv_tb.tb_streams);
	sv.sv_lc.lc_started = now_ms();
	config_run_dir();

	if ((sv.sv_io.io_epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		fatal("epoll_create1: %s", strerror(errno));
	sv.sv_io.io_ev_sig = (struct evsrc){handle_signals, NULL};
	server_watch(sv.sv_io.io_sigfd, EPOLLIN, &sv.sv_io.io_ev_sig);

	if (control_start() < 0)
		exit(1);
	if (http_start() < 0)
		exit(1);
	uplink_start(boxuid_net());
	template_start();
	supervise_adopt_all();
	envd_start();
	/* python always, javascript when Deno is installed, as E2B does */
	sv.sv_lc.lc_defaults = true;
	for (int i = 0; i < 2 && !sv.sv_cf.cf_no_default; i++) {
		const char *lang = i ? "javascript" : "python";
		struct context *ctx;
		if (context_default(lang) || !kcache_find(lang))
			continue;
		if (pool_create(lang, workspace_default_cwd(), true, NULL, &ctx, err, sizeof(err)) < 0)
			log_err("default %s context: %s", lang, err);
	}
	sv.sv_lc.lc_defaults = false;
	log_info("listening on http://%s (run dir %s, version %s)", sv.sv_cf.cf_listen,
		 sv.sv_cf.cf_run_dir, SANDCELL_VERSION);
	const char *wd = getenv("WATCHDOG_USEC");
	if (wd && strtoull(wd, NULL, 10) >= 2000)
		sv.sv_cf.cf_watchdog_ms = strtoull(wd, NULL, 10) / 2000;
	server_notify("READY=1");
}

static void
serve_stop(void)
{
	server_notify("STOPPING=1");
	/* what is still streaming ends with an error line the client can read */
	stream_fail_all("ServerStopping", "the server is stopping", "server_stopping");
	for (uint64_t until = now_ms() + 500; !TAILQ_EMPTY(&sv.sv_tb.tb_streams) && now_ms() < until;) {
		http_run(0);
		usleep(5000);
	}
	http_stop();
	template_stop(); /* the kernels it forked are their proxies' */
	if (sv.sv_cf.cf_keep_contexts)
		context_detach_all();
	else
		supervise_shutdown_all();
	if (!sv.sv_cf.cf_keep_contexts)
		uplink_stop(); /* else the kept boxes' way out, for the next broker */
	control_stop();
	if (!sv.sv_cf.cf_keep_contexts) {
		unlink(sv.sv_cf.cf_env_file);
		box_release();
		workspace_release();
	}
	log_info("stopped%s", sv.sv_cf.cf_keep_contexts ? "; contexts kept running" : "");
}

/* The core reaches its proxies through link.c's port: these are the real ones. */
static const struct link_ops real_link = {
	.lo_dial = chanlink_dial,
	.lo_hangup = chanlink_hangup,
	.lo_send = chanlink_send,
	.lo_spawn = spawn_proxy,
	.lo_signal = spawn_signal,
	.lo_exited = spawn_exited,
};

int
main(int argc, char **argv)
{
	link_use(&real_link);
	options_parse(argc, argv); /* options.c */
	log_init("sandcell-broker", parse_level(sv.sv_cf.cf_log_level));
	/* first: the sandbox's probe (config_settle) waits for a child */
	if ((sv.sv_io.io_sigfd = signal_fd()) < 0)
		fatal("signalfd: %s", strerror(errno));
	if (sodium_init() < 0)
		fatal("sodium_init failed");
	config_settle();
	serve_start();
	loop();
	serve_stop();
	return 0;
}
