/*
 * lib.h — helpers every sandcell binary shares and that are not the protocol:
 * logging, allocation, buffers, paths, and kernelspec discovery.
 */
#ifndef SANDCELL_LIB_H
#define SANDCELL_LIB_H

#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

/* kspec.c */
struct kspec {
	char *ks_name;      /* directory name: python3, ir, ... */
	char *ks_lang;      /* normalised "language" field */
	char *ks_dir;       /* the kernelspec's directory */
	char **ks_argv;     /* NULL-terminated */
	char **ks_env;      /* NULL-terminated KEY=VALUE */
	bool ks_interrupt_msg;  /* interrupt_mode "message" */
	bool ks_tcp;        /* metadata.sandcell.transport == "tcp" */
	char *ks_fence;     /* code run silently after each unit to collect output the
			     * kernel publishes after idle (Deno); NULL: none needed */
	int ks_abort_signal; /* ends an awaiting execution, before an interrupt (Deno's
			      * fence installs its listener); 0: none */
	bool ks_config_in_cwd; /* reads a configuration from its cwd and the cwd's parents
				* as it starts (Deno: deno.json, package.json): it starts
				* there only when one is there (and else, or if that failed,
				* elsewhere, moved to its cwd by its first execution) */
};
int kspec_find(const char *want, struct kspec **out);
int kspec_index(struct kspec *const *v, size_t n, const char *want);
int kspec_list(struct kspec ***out, size_t *n);
void kspec_free(struct kspec *ks);
void kspec_list_free(struct kspec **v, size_t n);
char *kspec_languages(void);
char *kspec_program(const char *base);
bool kspec_cwd_config(const char *workspace, const char *cwd, bool *install);
int kspec_python_module(char *const *argv);
int lang_normalise(const char *in, char *out, size_t outsz);

/* boxview.c */
#define BOX_HOME "/home/user" /* the workspace in a box: HOME and the default cwd */
#define PACKAGES_VENV "/.local/venv" /* below HOME: the tenant's Python venv (packages.c) */
/* In a box, root's home as E2B's code expects it: the workspace's BOX_ROOT_DIR,
 * read-write */
#define BOX_ROOT "/root"
#define BOX_ROOT_DIR ".root"
/* A rootless box's uid and gid inside its user namespace, where the broker's
 * own map to (proxy/sandbox.c); what box.c tells of such a box */
#define BOX_USERNS_UID 1000
extern const char *const boxview_system[];
bool boxview_is_system(const char *path);
int boxview_root_open(int home, uid_t uid, gid_t gid);
const char *boxview_shows(const char *path, const char *workspace, const char *const *dirs,
			  size_t ndirs);

/* boxpath.c: a tenant's path resolved as its box would, never on the host */
#define BOXPATH_MAX_MOUNTS 8
struct boxpath_mount {
	const char *bm_path; /* in the box, canonical ("/": a whole root, a live box's) */
	int bm_fd;           /* the host directory shown there (O_PATH), or -1: an
			      * empty directory of the box's own (its /tmp at start) */
};
struct boxpath_view {
	struct boxpath_mount bv_mounts[BOXPATH_MAX_MOUNTS];
	size_t bv_n;
};
#define BOXPATH_NOFOLLOW 1u /* a symbolic link last is not followed */
int boxpath_view_open(struct boxpath_view *v, const char *workspace);
void boxpath_view_root(struct boxpath_view *v, int rootfd);
void boxpath_view_close(struct boxpath_view *v);
int boxpath_open(const struct boxpath_view *v, const char *path, unsigned flags, int *fd,
		 char *real, size_t realsz);
int boxpath_reopen(int fd, int flags);

/* peerbox.c: a Unix socket's peer of our uid in a box (kernels as our uid) */
void peerbox_on(void);
bool peerbox_boxed(unsigned long long pid);
bool peerbox_socket_boxed(unsigned long long ino);

/* landlock.c */
#define BOX_KDIR "/run/sandcell" /* in a box, the kernel's own dir (a copy of px_kdir) */
struct landlock_rule {
	const char *lr_path; /* and what is beneath it */
	uint64_t lr_access;  /* LANDLOCK_ACCESS_FS_* it may do there */
};
extern const struct landlock_rule landlock_box[];
int landlock_abi(void);
struct landlock_rule *landlock_host(const char *home, const char *kdir, const char *const *reads);
int landlock_enter(const struct landlock_rule *rules);
int landlock_scope(bool sockets);

/* cgroup.c */
char *cgroup_base(const char *controller);
bool cgroup_usable(const char *controller);
char *cgroup_parent(const char *controller, const char *group);
uint64_t cgroup_memory_limit(void);
uint64_t cgroup_machine_memory(void);

/* route6.c */
bool route6_default(void);

/* ports.c */
int ports_free(int *ports, size_t n);

/* wsdisk.c */
bool wsdisk_mounted(const char *dir);
uint64_t wsdisk_free(const char *path);
/* dir's own filesystem of size bytes (its image made the first time), its
 * root with dir's owner and mode; 0, or -errno and why in err. */
int wsdisk_mount(const char *dir, uint64_t size, char *err, size_t errsz);
void wsdisk_unmount(const char *dir, bool remove_image);

/* cidr.c: an IPv4 or IPv6 address block */
#define CIDR_STRLEN 52 /* "addr/len" of either family, and its NUL */
struct cidr {
	int c_family;       /* AF_INET, AF_INET6 */
	uint8_t c_addr[16]; /* network byte order, host bits clear */
	unsigned c_len;     /* prefix length */
};
extern const char *const cidr_default_deny[];
int cidr_parse(const char *s, struct cidr *out, char *err, size_t errsz);
void cidr_format(const struct cidr *c, char *out, size_t outsz);
bool cidr_within(const struct cidr *inner, const struct cidr *outer);
int cidr_list_parse(const char *list, struct cidr **v, size_t *n, char *err, size_t errsz);

/* optenv.c */
struct optenv {
	int oe_argc;
	char **oe_argv;  /* from the environment first, then the command line */
	int oe_nenv;     /* oe_argv[1..oe_nenv] came from the environment */
	char **oe_vars;  /* their variables' names, same indices */
	char *oe_flag;   /* optenv_origin's last "--name" */
};
int optenv_build(struct optenv *oe, const char *prefix, const struct option *opts, int argc,
		 char **argv);
const char *optenv_origin(struct optenv *oe, const struct option *opts, int idx, int optind_now);
void optenv_free(struct optenv *oe);

/* opts.c */
enum opt_type {
	OPT_SWITCH, /* no value: sets a bool (OPT_OFF: clears it) */
	OPT_STRING, /* the value itself */
	OPT_FUNC,   /* o_fn takes it */
	OPT_SIZE,   /* parse_size: bytes */
	OPT_SECONDS, /* parse_seconds: whole seconds */
	OPT_MS,     /* parse_duration: milliseconds */
	OPT_COUNT,  /* parse_count */
};
#define OPT_OFF 1u     /* OPT_SWITCH: the switch turns it off */
#define OPT_ZERO 2u    /* 0 is allowed although under o_min ("0: none") */
#define OPT_DIGITS 4u  /* the number goes to char[o_size] as decimal digits */
#define OPT_XDIGITS 8u /* ... to a char * of its own (allocated) */
#define OPT_VAL0 256   /* getopt's value for the table's first option */
struct opt {
	const char *o_name;   /* --name; its variable is PREFIX_NAME */
	const char *o_arg;    /* what it takes, for --help (SIZE, DIR); NULL: a switch */
	enum opt_type o_type;
	void *o_dst;          /* where its value goes... */
	size_t o_size;        /* ...and that field's size (a number: 4 or 8 bytes) */
	unsigned o_flags;
	uint64_t o_min, o_max; /* numbers: the range accepted */
	const char *o_expect;  /* numbers: what a refusal says is expected */
	int (*o_fn)(const char *val, const char *origin); /* OPT_FUNC; < 0: exit 2 */
	bool *o_given;         /* set when given (a variable or a flag) */
	const char *o_default; /* applied first, as if given, and shown in --help */
	const char *o_shown;   /* a default the program works out: shown only */
	const char *o_help;
};
#define OPT_DST(field) .o_dst = &(field), .o_size = sizeof(field)
struct optset {
	const char *os_prog;
	const char *os_prefix; /* its variables' (SANDCELL); NULL: none are read */
	const char *os_usage;  /* --help's first lines */
	const struct opt *os_opts;
	size_t os_n;
	void (*os_more)(FILE *f); /* --help's last lines, or NULL */
	struct optenv os_env;     /* the values point into it: it lives as long as they do */
};
int opts_parse(struct optset *os, int argc, char **argv, char ***operands);
void opts_usage(const struct optset *os) __attribute__((noreturn));

/* parse.c */
int parse_size(const char *s, uint64_t max, uint64_t *out);
int parse_duration(const char *s, uint64_t max_ms, uint64_t *out_ms);
int parse_seconds(const char *s, uint64_t max_s, uint64_t *out_s);
int parse_count(const char *s, uint64_t min, uint64_t max, uint64_t *out);
void parse_fail(const char *prog, const char *origin, const char *val, int rc,
		const char *expect) __attribute__((noreturn));

/* util.c */
enum log_level { LOG_ERR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };
extern int log_level_max;
void log_init(const char *prog, int level);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

/*
 * Lines a peer can cause as often as it likes (a hostile kernel's junk): at
 * most LOG_LIMIT_BURST in each LOG_LIMIT_WINDOW_MS, the rest counted, and
 * the count said once the window is over (at the next such line, or
 * log_limit_flush from a tick).
 */
#define LOG_LIMIT_BURST 20
#define LOG_LIMIT_WINDOW_MS 60000
struct loglimit {
	const char *ll_what; /* "warnings about ...", for the count's line */
	uint64_t ll_start;   /* the window's start (ms) */
	unsigned ll_n, ll_suppressed;
};
void log_limited(struct loglimit *ll, uint64_t now, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void log_limit_flush(struct loglimit *ll, uint64_t now);
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t sz);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t now_ms(void);
void iso_time(char out[64]);
uint64_t now_us(void);
void uuid_v4(char out[37]);
bool uuid_valid(const char *s);
int signal_fd(void);
int write_text(const char *path, const char *text);
int write_in_dir(const char *dir, const char *name, const char *text);
int mkdir_p(const char *path, unsigned mode);
int rm_rf(const char *path);
int chown_r(const char *path, unsigned uid, unsigned gid);
const char *default_run_dir(void);
int parse_level(const char *s);
#define ENV_KEY_MAX 1024u /* longest environment variable name accepted */
bool env_key_valid(const char *k);

struct buf {
	char *b_data;
	size_t b_off, b_len, b_cap; /* pending: b_data[b_off, b_len) */
};
#define buf_pending(b) ((b)->b_len - (b)->b_off)
#define buf_head(b) ((b)->b_data + (b)->b_off)
void buf_append(struct buf *b, const void *p, size_t n);
void buf_consume(struct buf *b, size_t n);
void buf_free(struct buf *b);

/* kenv.c */
bool kenv_passes(const char *kv, const char *pass);
int kenv_pass_add(char **list, const char *spec, char **bad);

#endif
