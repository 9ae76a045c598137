/*
 * spawn.c — the real proxy processes (link.c's port, set by main.c): one
 * sandcell-proxy spawned per context with its argv, signalled, reaped.
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker.h"

/* Starts c's proxy (its link is open): *pid is its pid. */
int
spawn_proxy(struct context *c, pid_t *pid)
{
	const char *argv[80];
	char wait[24];
	uint64_t wait_ms;
	int n = 0;
	posix_spawnattr_t at;
	sigset_t none;
	int e;

	argv[n++] = sv.sv_cf.cf_proxy_bin;
	argv[n++] = "--run-dir";
	argv[n++] = (char *)sv.sv_cf.cf_run_dir;
	argv[n++] = "--id";
	argv[n++] = c->c_pl->pl_slot;
	argv[n++] = "--language";
	argv[n++] = c->c_lang;
	argv[n++] = "--kernel";
	argv[n++] = c->c_kernel;
	argv[n++] = "--cwd";
	argv[n++] = c->c_cwd;
	argv[n++] = "--env-file";
	argv[n++] = sv.sv_cf.cf_env_file;
	if (sv.sv_cf.cf_env_pass) {
		argv[n++] = "--env-pass";
		argv[n++] = sv.sv_cf.cf_env_pass;
	}
	argv[n++] = "--log-level";
	argv[n++] = (char *)sv.sv_cf.cf_log_level;
	if (c->c_default)
		argv[n++] = "--default";
	if (c->c_pooled)
		argv[n++] = "--pooled";
	if (sv.sv_cf.cf_kernel_memory) {
		argv[n++] = "--memory";
		argv[n++] = (char *)sv.sv_cf.cf_kernel_memory;
	}
	if (sv.sv_cf.cf_kernel_cpu) {
		argv[n++] = "--cpu";
		argv[n++] = (char *)sv.sv_cf.cf_kernel_cpu;
	}
	if (sv.sv_cf.cf_kernel_cgroup) {
		argv[n++] = "--cgroup";
		argv[n++] = (char *)sv.sv_cf.cf_kernel_cgroup;
	}
	if (sv.sv_cf.cf_python_startup) {
		argv[n++] = "--python-startup";
		argv[n++] = (char *)sv.sv_cf.cf_python_startup;
	}
	if (sv.sv_cf.cf_kernel_user) {
		argv[n++] = "--kernel-user";
		argv[n++] = (char *)sv.sv_cf.cf_kernel_user;
	}
	box_args(c, argv, &n);
	if (c->c_envd) {
		argv[n++] = "--envd";
		argv[n++] = (char *)sv.sv_cf.cf_envd_bin;
	}
	if (template_socket(c->c_kernel)) {
		argv[n++] = "--template";
		argv[n++] = (char *)template_socket(c->c_kernel);
		/* the default context made as we start waits for the template as
		 * the pool does (template_starting); a client's request never does */
		if (c->c_default && sv.sv_lc.lc_defaults &&
		    (wait_ms = template_wait_ms(c->c_kernel))) {
			snprintf(wait, sizeof(wait), "%llu", (unsigned long long)wait_ms);
			argv[n++] = "--template-wait";
			argv[n++] = wait;
		}
	}
	argv[n++] = "--max-starting";
	argv[n++] = sv.sv_cf.cf_max_starting;
	if (sv.sv_cf.cf_interrupt_retry[0]) {
		argv[n++] = "--interrupt-retry";
		argv[n++] = sv.sv_cf.cf_interrupt_retry;
	}
	if (sv.sv_cf.cf_interrupt_grace[0]) {
		argv[n++] = "--interrupt-grace";
		argv[n++] = sv.sv_cf.cf_interrupt_grace;
	}
	if (sv.sv_cf.cf_heartbeat_timeout[0]) {
		argv[n++] = "--heartbeat-timeout";
		argv[n++] = sv.sv_cf.cf_heartbeat_timeout;
	}
	argv[n] = NULL;
	/*
	 * A spawn, not a fork: a fork of this process (its heap, nng's threads)
	 * copies its page tables, write-protects every page of every thread (a
	 * TLB shootdown on each CPU they ran on) and then each first write of
	 * any thread is a fault, until the child's exec tears its copy down. Its
	 * own session: a terminal's Ctrl-C reaches the broker, which stops us.
	 */
	sigemptyset(&none);
	if ((e = posix_spawnattr_init(&at)) == 0) {
		posix_spawnattr_setflags(&at,
		                         POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
		posix_spawnattr_setsigmask(&at, &none);
		e = posix_spawn(pid, sv.sv_cf.cf_proxy_bin, NULL, &at,
		                (char *const *)argv, environ);
		posix_spawnattr_destroy(&at);
	}
	if (e) {
		log_err("context %s: start %s: %s", c->c_id, sv.sv_cf.cf_proxy_bin,
		        strerror(e));
		return -e;
	}
	return 0;
}

void
spawn_signal(const struct proxy_link *pl, int sig)
{
	kill(pl->pl_pid, sig);
}

/* Our child: reaped (wait: until it is); adopted: gone. */
bool
spawn_exited(const struct proxy_link *pl, bool wait)
{
	if (pl->pl_child)
		return waitpid(pl->pl_pid, NULL, wait ? 0 : WNOHANG) == pl->pl_pid;
	return kill(pl->pl_pid, 0) < 0;
}
