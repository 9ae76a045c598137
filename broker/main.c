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

static int sigfd = -1;
static struct evsrc ev_sig;
static uint64_t watchdog_ms; /* systemd's watchdog interval / 2; 0: none */

/* The signalfd: SIGTERM drains or stops, SIGINT stops, SIGCHLD reaps. */
static void
handle_signals(void *arg, uint32_t events)
{
	struct signalfd_siginfo si;
	int status;
	pid_t pid;

	(void)arg, (void)events;
	while (read(sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGTERM && !lifecycle_stopping() && cf->cf_grace) {
			/* drain: no new executions, running ones get the grace period */
			lifecycle_stop(cf->cf_grace * 1000ull);
			server_notify("STOPPING=1");
			log_info("SIGTERM: draining; stopping within %u s", cf->cf_grace);
		} else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
			log_info("signal %d: stopping", si.ssi_signo);
			lifecycle_quit();
		}
	}
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (!template_reaped(pid, status) && !uplink_reaped(pid, status))
			supervise_reaped(pid, status);
}

static void
loop(void)
{
	uint64_t next_tick = now_ms() + TICK_MS, watchdog_at = 0;

	while (!lifecycle_quitting()) {
		uint64_t now = now_ms();
		long wait = http_wait(next_tick > now ? (long)(next_tick - now) : 0);

		long pw = respond_park_wait(now);
		if (pw >= 0 && pw < wait)
			wait = pw;
		server_wait(wait);
		respond_park_due(now_ms());
		server_kicked();
		http_run(MHD_PASSES);
		if (pool_kicked()) {
			/* after http_run: a claimed kernel's answer leaves before the fork */
			if (!lifecycle_draining())
				pool_fill();
		}
		now = now_ms();
		if (now >= next_tick) {
			stream_tick(now);
			waiter_tick(now);
			envdfile_tick(now);
			envdstream_tick(now);
			http_tick(now);
			if (!lifecycle_draining())
				pool_fill();
			template_tick(now);
			uplink_tick(now);
			next_tick = now + TICK_MS;
			if (watchdog_ms && now >= watchdog_at) {
				server_notify("WATCHDOG=1");
				watchdog_at = now + watchdog_ms;
			}
			bool idle = !stream_next(NULL);
			if (lifecycle_stopping() && (idle || lifecycle_grace_over(now))) {
				log_info("drained: %s",
					 idle ? "no execution left" : "grace period over");
				lifecycle_quit();
			}
		}
	}
}

/* The loop's own fds, the two listeners, the adopted and default contexts. */
static void
serve_start(void)
{
	char err[512];

	lifecycle_start();
	config_run_dir();

	server_open();
	ev_sig = (struct evsrc){handle_signals, NULL};
	server_watch(sigfd, EPOLLIN, &ev_sig);

	if (control_start() < 0)
		exit(1);
	if (http_start() < 0)
		exit(1);
	uplink_start(boxuid_net());
	template_start();
	supervise_adopt_all();
	envd_start();
	/* python always, javascript when Deno is installed, as E2B does */
	lifecycle_defaults(true);
	for (int i = 0; i < 2 && !cf->cf_no_default; i++) {
		const char *lang = i ? "javascript" : "python";
		struct context *ctx;
		if (context_default(lang) || !kcache_find(lang))
			continue;
		if (pool_create(lang, workspace_default_cwd(), true, NULL, &ctx, err, sizeof(err)) < 0)
			log_err("default %s context: %s", lang, err);
	}
	lifecycle_defaults(false);
	log_info("listening on http://%s (run dir %s, version %s)", accept_address(),
		 cf->cf_run_dir, SANDCELL_VERSION);
	const char *wd = getenv("WATCHDOG_USEC");
	if (wd && strtoull(wd, NULL, 10) >= 2000)
		watchdog_ms = strtoull(wd, NULL, 10) / 2000;
	server_notify("READY=1");
}

static void
serve_stop(void)
{
	server_notify("STOPPING=1");
	/* what is still streaming ends with an error line the client can read */
	stream_fail_all("ServerStopping", "the server is stopping", "server_stopping");
	for (uint64_t until = now_ms() + 500; stream_next(NULL) && now_ms() < until;) {
		http_run(0);
		usleep(5000);
	}
	http_stop();
	template_stop(); /* the kernels it forked are their proxies' */
	bool keep = lifecycle_keeps_contexts();
	if (keep)
		context_detach_all();
	else
		supervise_shutdown_all();
	if (!keep)
		uplink_stop(); /* else the kept boxes' way out, for the next broker */
	control_stop();
	if (!keep) {
		unlink(cf->cf_env_file);
		box_release();
		workspace_release();
	}
	log_info("stopped%s", keep ? "; contexts kept running" : "");
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
	log_init("sandcell-broker", parse_level(cf->cf_log_level));
	/* first: the sandbox's probe (config_settle) waits for a child */
	if ((sigfd = signal_fd()) < 0)
		fatal("signalfd: %s", strerror(errno));
	if (sodium_init() < 0)
		fatal("sodium_init failed");
	config_settle();
	serve_start();
	loop();
	serve_stop();
	return 0;
}
