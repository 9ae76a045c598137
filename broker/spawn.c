/*
 * spawn.c — the real proxy processes (link.c's port, set by main.c): one
 * sandcell-proxy spawned per context, told its context by a spec on an fd
 * (proto/spec.c: its kernel, its box, its limits), signalled, reaped.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "linkdef.h"

#define SPAWN_SPEC_FD 3 /* the proxy's --spec-fd */

/* A number the options left as decimal digits; NULL or "": 0 (none, or the proxy's
 * default). */
static uint64_t
spawn_digits(const char *s)
{
	return s && *s ? strtoull(s, NULL, 10) : 0;
}

/* The box's part of c's spec: its uids, workspace, limits, network. */
static void
spawn_box(const struct context *c, struct spec *sp)
{
	const struct ctxiso *iso = context_iso(c);
	unsigned first, last;

	if (!cf->cf_sandbox)
		return;
	if (iso->ci_uid || (boxuid_ranged() && !cf->cf_kernel_user))
		sp->sp_uid = iso->ci_uid ? iso->ci_uid : boxuid_shared();
	if (boxuid_ranged())
		sp->sp_net_uid = iso->ci_net_uid ? iso->ci_net_uid : boxuid_net();
	sp->sp_own_workspace = iso->ci_workspace != NULL;
	sp->sp_no_namespaces = boxnons_on();
	sp->sp_cgroup_group = bounds_group(); /* the parent cgroup of all contexts' boxes */
	sp->sp_workspace_size = cf->cf_workspace_size; /* an own one's (its proxy makes it), or shown */
	sp->sp_workspace = workspace_of(c);
	sp->sp_hide = cf->cf_token_file;
	sp->sp_sandbox = true;
	boxuid_range(&first, &last);
	sp->sp_uid_first = first;
	sp->sp_uid_last = last;
	sp->sp_isolated = cf->cf_isolated;
	sp->sp_outbound = !strcmp(cf->cf_kernel_network, "outbound");
	sp->sp_uplink = uplink_pid() > 0 ? (uint64_t)uplink_pid() : 0;
	egress_spec(context_egress(c), sp);
	sp->sp_pids = strtoull(cf->cf_kernel_pids, NULL, 10);
	sp->sp_tmp_size = strtoull(cf->cf_kernel_tmp, NULL, 10);
}

/*
 * What c's proxy is told about its context (proto/spec.c): everything but
 * its name and where it lives, which its command line shows.
 */
static void
spawn_spec(const struct context *c, struct spec *sp)
{
	uint64_t wait_ms;

	*sp = (struct spec){
	    .sp_env_file = cf->cf_env_file,
	    .sp_env_pass = cf->cf_env_pass,
	    .sp_memory = spawn_digits(cf->cf_kernel_memory),
	    .sp_cpu = spawn_digits(cf->cf_kernel_cpu),
	    .sp_cgroup = cf->cf_kernel_cgroup,
	    .sp_python_startup = cf->cf_python_startup,
	    .sp_kernel_user = cf->cf_kernel_user,
	    .sp_envd = context_is_envd(c) ? cf->cf_envd_bin : NULL,
	    .sp_max_starting = spawn_digits(cf->cf_max_starting),
	    .sp_interrupt_retry = spawn_digits(cf->cf_interrupt_retry),
	    .sp_interrupt_grace = spawn_digits(cf->cf_interrupt_grace),
	    .sp_heartbeat_timeout = spawn_digits(cf->cf_heartbeat_timeout),
	};
	context_spec(c, sp); /* language, kernelspec, cwd, default, pooled */
	sp->sp_template = template_socket(sp->sp_kernel);
	/* the default context made as we start waits for the template as the
	 * pool does (template_starting); a client's request never does */
	if (sp->sp_template && sp->sp_default && lifecycle_making_defaults() &&
	    (wait_ms = template_wait_ms(sp->sp_kernel)))
		sp->sp_template_wait = wait_ms;
	spawn_box(c, sp);
}

/*
 * c's spec, encoded, in a memfd of its own (close-on-exec, never fd
 * SPAWN_SPEC_FD itself, which the child's dup2 would leave close-on-exec):
 * a file no other process can open, of any size, read by the proxy before
 * it has a link; gone with the last fd.
 */
static int
spawn_spec_fd(const struct context *c)
{
	struct spec sp;
	void *buf;
	size_t len;
	int fd, e;

	spawn_spec(c, &sp);
	/* a setting over its bound in the spec (which the proxy would refuse): E2BIG */
	if ((e = spec_encode(&sp, &buf, &len)) < 0)
		return e == PROTO_ESIZE ? -E2BIG : -ENOMEM;
	if ((fd = memfd_create("sandcell-spec", MFD_CLOEXEC)) < 0) {
		e = -errno;
		free(buf);
		return e;
	}
	if (fd == SPAWN_SPEC_FD) {
		int moved = fcntl(fd, F_DUPFD_CLOEXEC, SPAWN_SPEC_FD + 1);
		close(fd);
		if ((fd = moved) < 0) {
			free(buf);
			return -errno;
		}
	}
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, (char *)buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			e = w < 0 ? -errno : -EIO;
			close(fd);
			free(buf);
			return e;
		}
		off += (size_t)w;
	}
	free(buf);
	return fd;
}

/* Starts c's proxy (its link is open): *pid is its pid. */
int
spawn_proxy(struct context *c, pid_t *pid)
{
	char spec_fd[12];
	const char *argv[] = {cf->cf_proxy_bin,
	                      "--run-dir",
	                      cf->cf_run_dir,
	                      "--id",
	                      context_link(c)->pl_slot,
	                      "--log-level",
	                      cf->cf_log_level,
	                      "--spec-fd",
	                      spec_fd,
	                      NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none;
	int e, fd;

	if ((fd = spawn_spec_fd(c)) < 0) {
		log_err("context %s: its spec: %s", context_id(c), strerror(-fd));
		return fd;
	}
	snprintf(spec_fd, sizeof(spec_fd), "%d", SPAWN_SPEC_FD);
	/*
	 * A spawn, not a fork: a fork of this process (its heap, nng's threads)
	 * copies its page tables, write-protects every page of every thread (a
	 * TLB shootdown on each CPU they ran on) and then each first write of
	 * any thread is a fault, until the child's exec tears its copy down. Its
	 * own session: a terminal's Ctrl-C reaches the broker, which stops us.
	 */
	sigemptyset(&none);
	if ((e = posix_spawn_file_actions_init(&fa)) == 0) {
		if ((e = posix_spawn_file_actions_adddup2(&fa, fd, SPAWN_SPEC_FD)) == 0 &&
		    (e = posix_spawnattr_init(&at)) == 0) {
			posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID |
			                                  POSIX_SPAWN_SETSIGMASK);
			posix_spawnattr_setsigmask(&at, &none);
			e = posix_spawn(pid, cf->cf_proxy_bin, &fa, &at,
			                (char *const *)argv, environ);
			posix_spawnattr_destroy(&at);
		}
		posix_spawn_file_actions_destroy(&fa);
	}
	close(fd);
	if (e) {
		log_err("context %s: start %s: %s", context_id(c), cf->cf_proxy_bin,
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
