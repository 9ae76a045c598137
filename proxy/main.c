/*
 * main.c — sandcell-proxy: its options, its start (the context's
 * configuration, its dirs, the box, the link to the broker, the kernel),
 * the loop (loop.c) and its end.
 */
#include <errno.h>
#include <getopt.h>
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

static void
usage(void)
{
	fprintf(stderr, "usage: sandcell-proxy --run-dir DIR --id UUID --language LANG "
			"--cwd DIR [--kernel NAME] [--env-file FILE] [--memory BYTES]\n"
			"       [--cpu SECONDS] [--cgroup DIR] [--python-startup FILE] [--default]\n"
			"       [--kernel-user USER] [--pooled] [--interrupt-retry MS]\n"
			"       [--interrupt-grace MS] [--heartbeat-timeout MS] [--sandbox\n"
			"       [--uid-range A-B] [--isolation shared|context] [--network host|none]\n"
			"       [--pids N] [--tmp-size BYTES] [--uid UID] [--own-workspace]\n"
			"       [--workspace-size BYTES]\n"
			"       [--template SOCKET [--template-wait MS]]]\n"
			"       [--max-starting N] [--log-level LEVEL]\n");
	exit(2);
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
 * unboxed as another user, a dir of its own under <run dir>.kernels (0711),
 * outside the run dir (0700, ours); else the context's dir.
 */
static void
kernel_dir(struct proxy *p, bool other_user)
{
	int c;

	if (p->px_box.bx_on) {
		p->px_kdir = xasprintf("%s/kernel", p->px_dir);
	} else if (other_user) {
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
	static const struct option opts[] = {
		{"run-dir", required_argument, NULL, 'r'},
		{"id", required_argument, NULL, 'i'},
		{"language", required_argument, NULL, 'l'},
		{"cwd", required_argument, NULL, 'c'},
		{"env-file", required_argument, NULL, 'e'},
		{"log-level", required_argument, NULL, 'v'},
		{"default", no_argument, NULL, 'd'},
		{"kernel", required_argument, NULL, 'k'},
		{"python-startup", required_argument, NULL, 'P'},
		{"kernel-user", required_argument, NULL, 'u'},
		{"pooled", no_argument, NULL, 'o'},
		{"memory", required_argument, NULL, 'M'},
		{"cpu", required_argument, NULL, 'C'},
		{"cgroup", required_argument, NULL, 'G'},
		{"sandbox", no_argument, NULL, 'S'},
		{"uid-range", required_argument, NULL, 'Q'},
		{"isolation", required_argument, NULL, 'I'},
		{"network", required_argument, NULL, 'N'},
		{"pids", required_argument, NULL, 'p'},
		{"tmp-size", required_argument, NULL, 'T'},
		{"uid", required_argument, NULL, 'U'},
		{"own-workspace", no_argument, NULL, 'W'},
		{"workspace-size", required_argument, NULL, 'K'},
		{"workspace", required_argument, NULL, 'w'},
		{"net-uid", required_argument, NULL, 'n'},
		{"hide", required_argument, NULL, 'h'},
		{"interrupt-retry", required_argument, NULL, 'R'},
		{"interrupt-grace", required_argument, NULL, 'A'},
		{"heartbeat-timeout", required_argument, NULL, 'H'},
		{"template", required_argument, NULL, 'Z'},
		{"template-wait", required_argument, NULL, 'Y'},
		{"max-starting", required_argument, NULL, 'g'},
		{NULL, 0, NULL, 0},
	};
	int c;
	uint64_t v;

	px.px_interrupt_retry_ms = INTERRUPT_RETRY_MS;
	px.px_interrupt_grace_ms = INTERRUPT_GRACE_MS;
	px.px_hb_dead_ms = HB_DEAD_MS;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r': px.px_run_dir = optarg; break;
		case 'i': px.px_id = optarg; break;
		case 'l': px.px_lang = optarg; break;
		case 'c': px.px_cwd = optarg; break;
		case 'e': *env_file = optarg; break;
		case 'd': px.px_default = true; break;
		case 'k': *kernel = optarg; break;
		case 'P': px.px_py_startup = optarg; break;
		case 'u': *kuser = optarg; break;
		case 'o': px.px_pooled = true; break;
		case 'M':
			if ((c = parse_size(optarg, UINT64_MAX, &v)) < 0)
				parse_fail("sandcell-proxy", "--memory", optarg, c, "a size such as 4G");
			px.px_box.bx_mem = v;
			break;
		case 'C':
			if ((c = parse_seconds(optarg, UINT32_MAX, &v)) < 0)
				parse_fail("sandcell-proxy", "--cpu", optarg, c,
					   "a CPU time such as 600 or 2h");
			px.px_box.bx_cpu = v;
			break;
		case 'G': px.px_box.bx_cg_parent = optarg; break;
		case 'S': px.px_box.bx_on = true; break;
		case 'Q': {
			unsigned a, b;
			if (sscanf(optarg, "%u-%u", &a, &b) != 2 || !a || a > b)
				usage();
			px.px_box.bx_uid_first = a;
			px.px_box.bx_uid_last = b;
			break;
		}
		case 'I':
			if (strcmp(optarg, "shared") && strcmp(optarg, "context"))
				usage();
			px.px_box.bx_isolated = !strcmp(optarg, "context");
			break;
		case 'N':
			if (strcmp(optarg, "outbound") && strcmp(optarg, "none"))
				usage();
			px.px_box.bx_net = strcmp(optarg, "none") ? BOX_NET_OUTBOUND : BOX_NET_NONE;
			break;
		case 'p': px.px_box.bx_pids = strtoull(optarg, NULL, 10); break;
		case 'T': px.px_box.bx_tmp_size = strtoull(optarg, NULL, 10); break;
		case 'U': *uid_arg = strtoul(optarg, NULL, 10); break;
		case 'W': px.px_box.bx_own_ws = true; break;
		case 'K': px.px_box.bx_ws_size = strtoull(optarg, NULL, 10); break;
		case 'w': px.px_box.bx_workspace = optarg; break;
		case 'n': px.px_box.bx_net_uid = strtoul(optarg, NULL, 10); break;
		case 'h': px.px_box.bx_hide = optarg; break;
		case 'Z': px.px_template = optarg; break;
		case 'Y': px.px_template_until = now_ms() + strtoull(optarg, NULL, 10); break;
		case 'g':
			if ((c = parse_count(optarg, 0, 1000000, &v)) < 0)
				parse_fail("sandcell-proxy", "--max-starting", optarg, c,
					   "a count from 0 to 1000000");
			px.px_max_starting = v;
			break;
		case 'R':
		case 'A':
		case 'H': {
			const char *flag = c == 'R' ? "--interrupt-retry"
					   : c == 'A' ? "--interrupt-grace"
						      : "--heartbeat-timeout";
			uint64_t *to = c == 'R' ? &px.px_interrupt_retry_ms
				       : c == 'A' ? &px.px_interrupt_grace_ms
						  : &px.px_hb_dead_ms;
			/* milliseconds, from the broker */
			if ((c = parse_count(optarg, 1, 86400000, &v)) < 0)
				parse_fail("sandcell-proxy", flag, optarg, c,
					   "milliseconds from 1 to 86400000");
			*to = v;
			break;
		}
		case 'v':
			if ((*level = parse_level(optarg)) < 0)
				usage();
			break;
		default: usage();
		}
	}
	if (!px.px_run_dir || !px.px_id || !px.px_lang || !px.px_cwd || !uuid_valid(px.px_id))
		usage();
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
	if (lang_normalise(kernel ? kernel : px.px_lang, lang, sizeof(lang)) < 0 ||
	    kspec_find(lang, &px.px_ks) < 0)
		fatal("context %s: no kernelspec '%s'", px.px_id, kernel ? kernel : px.px_lang);
	if (lang_normalise(px.px_lang, lang, sizeof(lang)) < 0)
		fatal("context %s: bad language '%s'", px.px_id, px.px_lang);
	px.px_lang = lang;
	px.px_display_is_result = !strcmp(px.px_ks->ks_lang, "r");
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
	if ((c = sandbox_init(&px)) < 0)
		fatal("context %s: cannot build the sandbox: %s", px.px_id, strerror(-c));
	if (boxnet_start(&px.px_box) < 0) /* while no thread exists */
		exit(1);

	/*
	 * Output passes through in buffers of about a MiB: mapped, not taken from
	 * the heap, so a flood's memory goes back to the system when it has
	 * passed (glibc's adaptive threshold would keep up to 32 MiB ones).
	 */
	mallopt(M_MMAP_THRESHOLD, 256 << 10);

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
	if ((sigfd = signal_fd()) < 0)
		fatal("signalfd: %s", strerror(errno));
	configure(kernel, env_file);
	start(kuser, uid_arg);
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
