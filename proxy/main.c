/*
 * main.c — sandcell-proxy: its options, its start (the context's
 * configuration, its dirs, the box, the link to the broker, the kernel),
 * the loop (loop.c) and its end.
 */
#include <errno.h>
#include <grp.h>
#include <malloc.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "proxy.h"

static struct proxy px = {.px_box.bx_sock = -1};
static bool opt_uplink_serve;

static int
load_env_file(struct proxy *p, const char *path)
{
	json_error_t jerr;
	json_t *o = json_load_file(path, 0, &jerr), *v;
	const char *k;

	if (!json_is_object(o)) {
		log_err("env file %s: %s", path, jerr.text);
		json_decref(o);
		return -1;
	}
	p->px_genv = xcalloc(json_object_size(o) + 1, sizeof(*p->px_genv));
	json_object_foreach(o, k, v)
	{
		if (!json_is_string(v) || !env_key_valid(k))
			continue;
		struct penv *e = &p->px_genv[p->px_ngenv++];
		e->e_key.s = xstrdup(k);
		e->e_key.len = strlen(k);
		e->e_val.s = xstrdup(json_string_value(v));
		e->e_val.len = strlen(e->e_val.s);
	}
	json_decref(o);
	return 0;
}

/* sandcell-proxy's options: the broker's, in its own words (spawn.c). */
static const char *opt_env_file, *opt_kernel, *opt_kuser;
static unsigned long opt_uid;
static int opt_level = LOG_INFO;

static void usage(void) __attribute__((noreturn));

static int
opt_uid_range(const char *range, const char *origin)
{
	unsigned a, b;

	(void)origin;
	if (sscanf(range, "%u-%u", &a, &b) != 2 || !a || a > b)
		usage();
	px.px_box.bx_uid_first = a;
	px.px_box.bx_uid_last = b;
	return 0;
}

static int
opt_isolation(const char *mode, const char *origin)
{
	(void)origin;
	if (strcmp(mode, "shared") && strcmp(mode, "context"))
		usage();
	px.px_box.bx_isolated = !strcmp(mode, "context");
	return 0;
}

static int
opt_network(const char *mode, const char *origin)
{
	(void)origin;
	if (strcmp(mode, "outbound") && strcmp(mode, "none"))
		usage();
	px.px_box.bx_net = strcmp(mode, "none") ? BOX_NET_OUTBOUND : BOX_NET_NONE;
	return 0;
}

/* --egress-allow and its kin: the box's egress rules (boxfw.c) */
static int
opt_egress(const char *list, const char *origin, enum boxfw_list which)
{
	(void)origin;
	if (boxfw_option(&px.px_box.bx_fw, list, which) < 0)
		usage();
	return 0;
}

static int
opt_egress_allow(const char *list, const char *origin)
{
	return opt_egress(list, origin, BOXFW_ALLOW);
}

static int
opt_egress_deny(const char *list, const char *origin)
{
	return opt_egress(list, origin, BOXFW_DENY);
}

static int
opt_context_allow(const char *list, const char *origin)
{
	return opt_egress(list, origin, BOXFW_CTX_ALLOW);
}

static int
opt_context_deny(const char *list, const char *origin)
{
	return opt_egress(list, origin, BOXFW_CTX_DENY);
}

static int
opt_template_wait(const char *ms, const char *origin)
{
	uint64_t v;
	int rc;

	if ((rc = parse_count(ms, 0, UINT32_MAX, &v)) < 0)
		parse_fail("sandcell-proxy", origin, ms, rc, "milliseconds");
	px.px_template_until = now_ms() + v;
	return 0;
}

static int
opt_log_level(const char *name, const char *origin)
{
	(void)origin;
	if ((opt_level = parse_level(name)) < 0)
		usage();
	return 0;
}

#define BX px.px_box
#define KERNEL_MS 1, 86400000, "milliseconds from 1 to 86400000"
static const struct opt options[] = {
    {"run-dir", "DIR", OPT_STRING, OPT_DST(px.px_run_dir), .o_help = "the broker's run dir"},
    {"id", "UUID", OPT_STRING, OPT_DST(px.px_id), .o_help = "this proxy's name"},
    {"language", "LANG", OPT_STRING, OPT_DST(px.px_lang), .o_help = "the context's language"},
    {"cwd", "DIR", OPT_STRING, OPT_DST(px.px_cwd), .o_help = "the context's cwd"},
    {"kernel", "NAME", OPT_STRING, OPT_DST(opt_kernel), .o_help = "a kernelspec by name"},
    {"env-file", "FILE", OPT_STRING, OPT_DST(opt_env_file), .o_help = "the global env (JSON)"},
    {"env-pass", "NAMES", OPT_STRING, OPT_DST(px.px_env_pass),
     .o_help = "variables of ours the kernel gets beside PATH and the locale (comma-separated)"},
    {"log-level", "LEVEL", OPT_FUNC, .o_fn = opt_log_level, .o_help = "error, warn, info, debug"},
    {"default", NULL, OPT_SWITCH, OPT_DST(px.px_default),
     .o_help = "the broker's default context for its language"},
    {"pooled", NULL, OPT_SWITCH, OPT_DST(px.px_pooled), .o_help = "no context until CLAIM"},
    {"python-startup", "FILE", OPT_STRING, OPT_DST(px.px_py_startup),
     .o_help = "run in every IPython kernel at start"},
    {"kernel-user", "USER", OPT_STRING, OPT_DST(opt_kuser), .o_help = "run the kernel as USER"},
    {"memory", "SIZE", OPT_SIZE, OPT_DST(BX.bx_mem), .o_max = UINT64_MAX,
     .o_expect = "a size such as 4G", .o_help = "memory limit; 0: none"},
    {"cpu", "SECONDS", OPT_SECONDS, OPT_DST(BX.bx_cpu), .o_max = UINT32_MAX,
     .o_expect = "a CPU time such as 600 or 2h", .o_help = "CPU-time limit; 0: none"},
    {"cgroup", "DIR", OPT_STRING, OPT_DST(BX.bx_cg_parent), .o_help = "memory cgroup parent"},
    {"cgroup-group", "NAME", OPT_STRING, OPT_DST(BX.bx_cg_group),
     .o_help = "the box's cgroups go under this one of sandcell's (the broker's bound on all)"},
    {"sandbox", NULL, OPT_SWITCH, OPT_DST(BX.bx_on), .o_help = "the kernel runs boxed"},
    {"no-namespaces", NULL, OPT_SWITCH, OPT_DST(BX.bx_nons),
     .o_help = "a box without namespaces: uid, seccomp, rlimits, Landlock"},
    {"uid-range", "A-B", OPT_FUNC, .o_fn = opt_uid_range, .o_help = "uids the box may lease"},
    {"isolation", "shared|context", OPT_FUNC, .o_fn = opt_isolation, .o_help = "(the broker's)"},
    {"network", "outbound|none", OPT_FUNC, .o_fn = opt_network, .o_help = "the box's network"},
    {"egress-allow", "CIDR[,...]", OPT_FUNC, .o_fn = opt_egress_allow,
     .o_help = "the server's holes in the default deny list (repeatable)"},
    {"egress-deny", "CIDR[,...]", OPT_FUNC, .o_fn = opt_egress_deny,
     .o_help = "the server's additions to it (repeatable)"},
    {"context-allow-out", "CIDR[,...]", OPT_FUNC, .o_fn = opt_context_allow,
     .o_help = "the context's allow_out (repeatable)"},
    {"context-deny-out", "CIDR[,...]", OPT_FUNC, .o_fn = opt_context_deny,
     .o_help = "the context's deny_out (repeatable)"},
    {"pids", "N", OPT_COUNT, OPT_DST(BX.bx_pids), .o_max = UINT64_MAX, .o_expect = "a count",
     .o_help = "pids.max; 0: none"},
    {"tmp-size", "BYTES", OPT_COUNT, OPT_DST(BX.bx_tmp_size), .o_max = UINT64_MAX,
     .o_expect = "a number of bytes", .o_help = "the box's /tmp"},
    {"uid", "UID", OPT_COUNT, OPT_DST(opt_uid), .o_max = UINT32_MAX, .o_expect = "a uid",
     .o_help = "the kernel's uid (--isolation context)"},
    {"own-workspace", NULL, OPT_SWITCH, OPT_DST(BX.bx_own_ws), .o_help = "this context's own"},
    {"workspace-size", "BYTES", OPT_COUNT, OPT_DST(BX.bx_ws_size), .o_max = UINT64_MAX,
     .o_expect = "a number of bytes", .o_help = "the workspace's size bound; 0: none"},
    {"workspace", "DIR", OPT_STRING, OPT_DST(BX.bx_workspace),
     .o_help = "the host directory shown at " BOX_HOME},
    {"net-uid", "UID", OPT_COUNT, OPT_DST(BX.bx_net_uid), .o_max = UINT32_MAX,
     .o_expect = "a uid", .o_help = "owns the network namespace and runs pasta"},
    {"uplink", "PID", OPT_COUNT, OPT_DST(BX.bx_uplink), .o_max = INT32_MAX, .o_expect = "a pid",
     .o_help = "the broker's uplink (uplink.c): the box's way out, no pasta of its own"},
    {"uplink-serve", NULL, OPT_SWITCH, OPT_DST(opt_uplink_serve),
     .o_help = "be the broker's uplink (with --net-uid), not a context's proxy"},
    {"hide", "FILE", OPT_STRING, OPT_DST(BX.bx_hide), .o_help = "a host file the box covers"},
    {"interrupt-retry", "MS", OPT_COUNT, OPT_DST(px.px_interrupt_retry_ms), 0, KERNEL_MS,
     .o_help = "an interrupt unanswered this long is sent again"},
    {"interrupt-grace", "MS", OPT_COUNT, OPT_DST(px.px_interrupt_grace_ms), 0, KERNEL_MS,
     .o_help = "a kernel still running this long after the first interrupt is restarted"},
    {"heartbeat-timeout", "MS", OPT_COUNT, OPT_DST(px.px_hb_dead_ms), 0, KERNEL_MS,
     .o_help = "an idle kernel silent this long is dead"},
    {"envd", "AGENT", OPT_STRING, OPT_DST(px.px_envd),
     .o_help = "the box runs envd's agent AGENT, not a kernel (docs/ENVD.md)"},
    {"template", "SOCKET", OPT_STRING, OPT_DST(px.px_template), .o_help = "fork from it"},
    {"template-wait", "MS", OPT_FUNC, .o_fn = opt_template_wait,
     .o_help = "the template is starting: wait this long for it"},
    {"max-starting", "N", OPT_COUNT, OPT_DST(px.px_max_starting), .o_max = 1000000,
     .o_expect = "a count from 0 to 1000000", .o_help = "kernels starting at once; 0: any"},
};
#undef KERNEL_MS
#undef BX

static struct optset optset = {
    .os_prog = "sandcell-proxy",
    .os_usage = "usage: sandcell-proxy --run-dir DIR --id UUID --language LANG --cwd DIR "
		"[options]\n",
    .os_opts = options,
    .os_n = sizeof(options) / sizeof(options[0]),
};

static void
usage(void)
{
	opts_usage(&optset);
}

/* The ids kernels run as: --kernel-user's, the broker's --uid for a box, or ours (-1). */
static void
kernel_ids(struct box *bx, const char *kuser, unsigned long uid)
{
	bx->bx_uid = (uid_t)-1;
	if (kuser) {
		struct passwd *pw = getpwnam(kuser);
		if (!pw)
			fatal("--kernel-user %s: no such user", kuser);
		bx->bx_uid = pw->pw_uid;
		bx->bx_gid = pw->pw_gid;
		bx->bx_ngroups = sizeof(bx->bx_groups) / sizeof(bx->bx_groups[0]);
		if (getgrouplist(kuser, pw->pw_gid, bx->bx_groups, &bx->bx_ngroups) < 0)
			bx->bx_ngroups = 0;
	} else if (uid) { /* a uid of its own, from the broker */
		bx->bx_uid = bx->bx_gid = uid;
		bx->bx_ngroups = 0;
	}
}

/*
 * The kernel's own files (connection file, IPython profile; ipc sockets when
 * unboxed): in a box, this context's dir, which its box shows read-only;
 * unboxed as another user or boxed without namespaces (which show the host's
 * paths), a dir of its own under <run dir>.kernels (0711),
 * outside the run dir (0700, ours); else the context's dir.
 */
static void
kernel_dir(struct proxy *p, bool other_user)
{
	int c;

	if (p->px_box.bx_on && !p->px_box.bx_nons) {
		p->px_kdir = xasprintf("%s/kernel", p->px_dir);
	} else if (other_user || p->px_box.bx_on) {
		char *root = xasprintf("%s.kernels", p->px_run_dir);
		mkdir_p(root, 0711);
		chmod(root, 0711);
		p->px_kdir = xasprintf("%s/%s", root, p->px_id);
		free(root);
	} else {
		p->px_kdir = xstrdup(p->px_dir);
	}
	if ((c = mkdir_p(p->px_kdir, 0700)) < 0)
		fatal("context %s: kernel dir: %s", p->px_id, strerror(-c));
}

/* The command line into px and the out-parameters. */
static void
parse_options(int argc, char **argv, const char **env_file, const char **kernel,
	      const char **kuser, unsigned long *uid_arg, int *level)
{
	char **operands;

	px.px_interrupt_retry_ms = INTERRUPT_RETRY_MS;
	px.px_interrupt_grace_ms = INTERRUPT_GRACE_MS;
	px.px_hb_dead_ms = HB_DEAD_MS;
	if (opts_parse(&optset, argc, argv, &operands))
		usage();
	*level = opt_level;
	if (opt_uplink_serve)
		return;
	if (!px.px_run_dir || !px.px_id || !px.px_lang || !px.px_cwd || !uuid_valid(px.px_id))
		usage();
	*env_file = opt_env_file;
	*kernel = opt_kernel;
	*kuser = opt_kuser;
	*uid_arg = opt_uid;
	*level = opt_level;
}

/* The context's configuration beyond its options: its kernelspec, language, env. */
static void
configure(const char *kernel, const char *env_file)
{
	static char lang[128];

	px.px_ctx = xstrdup(px.px_id);
	px.px_cwd = xstrdup(px.px_cwd);
	if (sodium_init() < 0)
		fatal("sodium_init failed");
	if (px.px_envd) { /* no kernel: its agent (envd.c), with the global env */
		if (px.px_envd[0] != '/' || !px.px_box.bx_on)
			fatal("context %s: --envd needs an absolute path and --sandbox", px.px_id);
		if (env_file && load_env_file(&px, env_file) < 0)
			exit(1);
		return;
	}
	if (lang_normalise(kernel ? kernel : px.px_lang, lang, sizeof(lang)) < 0 ||
	    kspec_find(lang, &px.px_ks) < 0)
		fatal("context %s: no kernelspec '%s'", px.px_id, kernel ? kernel : px.px_lang);
	if (lang_normalise(px.px_lang, lang, sizeof(lang)) < 0)
		fatal("context %s: bad language '%s'", px.px_id, px.px_lang);
	px.px_lang = lang;
	px.px_display_is_result = !strcmp(px.px_ks->ks_lang, "r");
	px.px_deno = kspec_program("deno");
	/* the profile, which sets NODROP, runs in ipykernel's Python kernels */
	for (char **a = px.px_ks->ks_argv; *a && !px.px_iopub_waits; a++)
		px.px_iopub_waits = px.px_py_startup && !strcmp(px.px_ks->ks_lang, "python") &&
				    strstr(*a, "ipykernel");
	if (env_file && load_env_file(&px, env_file) < 0)
		exit(1);
}

/* Its dirs, its box, the link to the broker, the kernel's start. */
static void
start(const char *kuser, unsigned long uid_arg)
{
	int c;

	px.px_dir = xasprintf("%s/ctx/%s", px.px_run_dir, px.px_id);
	if ((c = mkdir_p(px.px_dir, 0700)) < 0)
		fatal("mkdir %s: %s", px.px_dir, strerror(-c));
	kernel_ids(&px.px_box, kuser, uid_arg);
	kernel_dir(&px, kuser != NULL);
	/* the kernels' stdout and stderr: a pipe of ours, never our stderr (the broker's log) */
	if ((c = kout_open(px.px_id)) < 0)
		fatal("context %s: the kernel's output pipe: %s", px.px_id, strerror(-c));
	px.px_box.bx_out = kout_box_fd();
	/* our uid's kernels (not root, no namespaces) can reach our link's path */
	if (px.px_box.bx_on && px.px_box.bx_nons && geteuid() != 0)
		peerbox_on();
	if ((c = sandbox_init(&px)) < 0)
		fatal("context %s: cannot build the sandbox: %s", px.px_id, strerror(-c));
	hostnet_keep(); /* the link's socket and the template's connections are made there */
	if (boxnet_start(&px.px_box) < 0) /* while no thread exists */
		exit(1);

	/*
	 * Output passes through in buffers of about a MiB: mapped, not taken from
	 * the heap, so a flood's memory goes back to the system when it has
	 * passed (glibc's adaptive threshold would keep up to 32 MiB ones).
	 */
	mallopt(M_MMAP_THRESHOLD, 256 << 10);

	if (px.px_envd)
		return; /* envd_run listens and starts its agent */
	dispatch_init(&px); /* listens for the broker */
	statefile_write(&px);
	/* on failure, stay: the broker hears why (HELLO) and shuts us down */
	kernel_start();
}

int
main(int argc, char **argv)
{
	const char *env_file = NULL, *kernel = NULL, *kuser = NULL;
	unsigned long uid_arg = 0;
	int level = LOG_INFO, sigfd;

	parse_options(argc, argv, &env_file, &kernel, &kuser, &uid_arg, &level);
	log_init("sandcell-proxy", level);
	if (opt_uplink_serve)
		return uplink_run(&px.px_box, px.px_run_dir);
	if ((sigfd = signal_fd()) < 0)
		fatal("signalfd: %s", strerror(errno));
	configure(kernel, env_file);
	start(kuser, uid_arg);
	if (px.px_envd) {
		envd_run(&px, sigfd);
		sandbox_cleanup(&px.px_box, false);
		ipc_close();
		rm_rf(px.px_kdir);
		rm_rf(px.px_dir);
		log_info("context %s: envd proxy stopped", px.px_id);
		return 0;
	}
	loop_run(&px, sigfd);

	admit_fail_all("ContextDeleted", "the context was shut down");
	kernel_stop();
	sandbox_cleanup(&px.px_box, dispatch_gone());
	ipc_close(); /* the last replies leave: written, they arrive */
	if (strcmp(px.px_kdir, px.px_dir))
		rm_rf(px.px_kdir);
	rm_rf(px.px_dir);
	log_info("context %s: proxy stopped", px.px_id);
	return 0;
}
