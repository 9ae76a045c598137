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

/*
 * sandcell-proxy's options: its name and place (what ps shows), its log
 * level (for what goes wrong before the spec is read), and the fd of its
 * context's spec (proto/spec.c), which says everything else. The uplink
 * (--uplink-serve) is no context: it has no spec.
 */
static const char *opt_env_file, *opt_kernel, *opt_kuser;
static unsigned long opt_uid;
static int opt_level = LOG_INFO, opt_spec_fd = -1;
static struct spec spec; /* kept: px and its box point into it */

static void usage(void) __attribute__((noreturn));

static int
opt_log_level(const char *name, const char *origin)
{
	(void)origin;
	if ((opt_level = parse_level(name)) < 0)
		usage();
	return 0;
}

static const struct opt options[] = {
    {"run-dir", "DIR", OPT_STRING, OPT_DST(px.px_run_dir), .o_help = "the broker's run dir"},
    {"id", "UUID", OPT_STRING, OPT_DST(px.px_id), .o_help = "this proxy's name"},
    {"log-level", "LEVEL", OPT_FUNC, .o_fn = opt_log_level, .o_help = "error, warn, info, debug"},
    {"spec-fd", "FD", OPT_COUNT, OPT_DST(opt_spec_fd), .o_max = INT32_MAX, .o_expect = "an fd",
     .o_help = "the context's spec (proto/spec.c), read from its start, then closed"},
    {"uplink-serve", NULL, OPT_SWITCH, OPT_DST(opt_uplink_serve),
     .o_help = "be the broker's uplink (with --net-uid), not a context's proxy"},
    {"net-uid", "UID", OPT_COUNT, OPT_DST(px.px_box.bx_net_uid), .o_max = UINT32_MAX,
     .o_expect = "a uid", .o_help = "the uplink's: owns its network namespace and runs pasta"},
};

/* The spec into px and its box; a list boxfw refuses ends us. */
static void
apply_spec(const struct spec *sp)
{
	struct box *bx = &px.px_box;
	static const struct {
		const char *const *list;
		enum boxfw_list which;
	} lists[] = {{&spec.sp_egress_allow, BOXFW_ALLOW},
		     {&spec.sp_egress_deny, BOXFW_DENY},
		     {&spec.sp_context_allow, BOXFW_CTX_ALLOW},
		     {&spec.sp_context_deny, BOXFW_CTX_DENY}};

	px.px_lang = (char *)sp->sp_language;
	px.px_cwd = (char *)sp->sp_cwd;
	opt_kernel = sp->sp_kernel;
	opt_env_file = sp->sp_env_file;
	px.px_env_pass = sp->sp_env_pass;
	px.px_default = sp->sp_default;
	px.px_pooled = sp->sp_pooled;
	px.px_py_startup = sp->sp_python_startup;
	opt_kuser = sp->sp_kernel_user;
	bx->bx_mem = sp->sp_memory;
	bx->bx_cpu = sp->sp_cpu;
	bx->bx_cg_parent = (char *)sp->sp_cgroup;
	bx->bx_cg_group = (char *)sp->sp_cgroup_group;
	bx->bx_on = sp->sp_sandbox;
	bx->bx_nons = sp->sp_no_namespaces;
	bx->bx_uid_first = sp->sp_uid_first;
	bx->bx_uid_last = sp->sp_uid_last;
	bx->bx_isolated = sp->sp_isolated;
	if (sp->sp_sandbox)
		bx->bx_net = sp->sp_outbound ? BOX_NET_OUTBOUND : BOX_NET_NONE;
	for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
		if (*lists[i].list && boxfw_option(&bx->bx_fw, *lists[i].list, lists[i].which) < 0)
			fatal("context %s: the spec's egress list '%s' is not one", px.px_id,
			      *lists[i].list);
	bx->bx_pids = sp->sp_pids;
	bx->bx_tmp_size = sp->sp_tmp_size;
	opt_uid = sp->sp_uid;
	bx->bx_own_ws = sp->sp_own_workspace;
	bx->bx_ws_size = sp->sp_workspace_size;
	bx->bx_workspace = (char *)sp->sp_workspace;
	bx->bx_net_uid = sp->sp_net_uid;
	bx->bx_uplink = (pid_t)sp->sp_uplink;
	bx->bx_hide = (char *)sp->sp_hide;
	if (sp->sp_interrupt_retry)
		px.px_interrupt_retry_ms = sp->sp_interrupt_retry;
	if (sp->sp_interrupt_grace)
		px.px_interrupt_grace_ms = sp->sp_interrupt_grace;
	if (sp->sp_heartbeat_timeout)
		px.px_hb_dead_ms = sp->sp_heartbeat_timeout;
	px.px_envd = (char *)sp->sp_envd;
	px.px_template = sp->sp_template;
	if (sp->sp_template_wait) /* the template is starting: wait this long for it */
		px.px_template_until = now_ms() + sp->sp_template_wait;
	px.px_max_starting = (int)sp->sp_max_starting;
}

static struct optset optset = {
    .os_prog = "sandcell-proxy",
    .os_usage = "usage: sandcell-proxy --run-dir DIR --id UUID --spec-fd FD [options]\n"
		"       sandcell-proxy --uplink-serve --run-dir DIR --net-uid UID [options]\n",
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

/* The command line into px. */
static void
parse_options(int argc, char **argv)
{
	char **operands;

	if (opts_parse(&optset, argc, argv, &operands))
		usage();
	if (opt_uplink_serve)
		return;
	if (!px.px_run_dir || !px.px_id || opt_spec_fd < 0 || !uuid_valid(px.px_id))
		usage();
}

/* The spec at --spec-fd into px and the out-parameters; the fd closed. */
static void
load_spec(const char **env_file, const char **kernel, const char **kuser, unsigned long *uid_arg)
{
	char *buf;
	size_t len;
	int e;

	px.px_interrupt_retry_ms = INTERRUPT_RETRY_MS;
	px.px_interrupt_grace_ms = INTERRUPT_GRACE_MS;
	px.px_hb_dead_ms = HB_DEAD_MS;
	if ((e = spec_read(opt_spec_fd, &buf, &len)) < 0)
		fatal("context %s: read its spec (fd %d): %s", px.px_id, opt_spec_fd, strerror(-e));
	close(opt_spec_fd); /* nothing we start inherits it */
	if ((e = spec_decode(buf, len, &spec)) < 0)
		fatal("context %s: its spec: %s", px.px_id, proto_strerror(e));
	free(buf);
	apply_spec(&spec);
	*env_file = opt_env_file;
	*kernel = opt_kernel;
	*kuser = opt_kuser;
	*uid_arg = opt_uid;
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
	int sigfd;

	parse_options(argc, argv);
	log_init("sandcell-proxy", opt_level);
	if (opt_uplink_serve)
		return uplink_run(&px.px_box, px.px_run_dir);
	load_spec(&env_file, &kernel, &kuser, &uid_arg);
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
