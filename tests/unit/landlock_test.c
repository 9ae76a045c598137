/*
 * landlock_test.c — each rule of the kernels' Landlock domain (lib/landlock.c)
 * refuses what it must and allows what a kernel needs: the box's table
 * (landlock_box) rebased below a temporary root, entered by a child, which
 * then tries one thing per row: a write to the system, a read of a run dir
 * outside the table, a signal to a process outside the domain, a connect to
 * an abstract socket made outside it; and what stays allowed (the workspace,
 * /tmp, a device's file, its own children). Skipped where the kernel has no
 * Landlock, or no scoping (ABI < 6) for the scoped rows.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/lib.h"

static char root[64], run[80], sock_name[64];
static int listener = -1;

static void
put(const char *dir, const char *name)
{
	char p[256];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	cr_assert_geq(fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644), 0, "%s", p);
	cr_assert_eq(write(fd, "x", 1), 1);
	close(fd);
}

static void
setup(void)
{
	static const char *const dirs[] = {"usr",  "home", "home/user",
	                                   "tmp",  "dev",  "dev/shm",
	                                   "proc", "run",  BOX_KDIR + 1};
	char p[256];
	struct sockaddr_un a = {.sun_family = AF_UNIX};

	strcpy(root, "/tmp/landlock_test.XXXXXX");
	cr_assert_not_null(mkdtemp(root));
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", root, dirs[i]);
		cr_assert_eq(mkdir(p, 0755), 0, "%s: %s", p, strerror(errno));
	}
	snprintf(p, sizeof(p), "%s/usr", root);
	put(p, "lib.so");
	snprintf(p, sizeof(p), "%s/dev", root);
	put(p, "null");
	/* the run dir: beside the box's root, in no rule (the token, the control socket)
	 */
	snprintf(run, sizeof(run), "%s.run", root);
	cr_assert_eq(mkdir(run, 0700), 0);
	put(run, "token");
	/* an abstract socket made outside the domain */
	snprintf(sock_name, sizeof(sock_name), "landlock_test.%d", (int)getpid());
	memcpy(a.sun_path + 1, sock_name, strlen(sock_name));
	listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(bind(listener, (struct sockaddr *)&a,
	                  offsetof(struct sockaddr_un, sun_path) + 1 + strlen(sock_name)),
	             0);
	cr_assert_eq(listen(listener, 4), 0);
}

static void
teardown(void)
{
	if (listener >= 0)
		close(listener);
	rm_rf(root);
	rm_rf(run);
}

/* What a row tries, in the domain: 0, or the errno it failed with. */
typedef int (*try_fn)(void);

static int
err(int rc)
{
	return rc < 0 ? errno : 0;
}

static int
open_at(const char *dir, const char *name, int flags)
{
	char p[256];
	int fd;

	snprintf(p, sizeof(p), "%s%s/%s", dir == run ? "" : root, dir, name);
	if ((fd = open(p, flags | O_CLOEXEC, 0644)) < 0)
		return errno;
	close(fd);
	return 0;
}

static int
create_in_system(void)
{
	return open_at("/usr", "new", O_WRONLY | O_CREAT);
}

static int
write_system_file(void)
{
	return open_at("/usr", "lib.so", O_WRONLY);
}

static int
mkdir_in_root(void)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/newdir", root);
	return err(mkdir(p, 0755));
}

static int
read_run_dir_file(void)
{
	return open_at(run, "token", O_RDONLY);
}

static int
list_run_dir(void)
{
	return open_at(run, ".", O_RDONLY | O_DIRECTORY);
}

static int
remove_device(void)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/dev/null", root);
	return err(unlink(p));
}

static int
signal_outside(void)
{
	return err(kill(getppid(), 0));
}

static int
abstract_connect_outside(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), rc;

	memcpy(a.sun_path + 1, sock_name, strlen(sock_name));
	rc = err(connect(s, (struct sockaddr *)&a,
	                 offsetof(struct sockaddr_un, sun_path) + 1 + strlen(sock_name)));
	close(s);
	return rc;
}

static int
read_system(void)
{
	return open_at("/usr", "lib.so", O_RDONLY);
}

static int
write_workspace(void)
{
	return open_at(BOX_HOME, "notebook.py", O_WRONLY | O_CREAT | O_TRUNC);
}

static int
write_tmp(void)
{
	return open_at("/tmp", "scratch", O_WRONLY | O_CREAT);
}

static int
write_shm(void)
{
	return open_at("/dev/shm", "seg", O_RDWR | O_CREAT);
}

static int
write_kdir(void)
{
	return open_at(BOX_KDIR, "kernel.json", O_WRONLY | O_CREAT);
}

static int
write_device(void)
{
	return open_at("/dev", "null", O_WRONLY | O_TRUNC);
}

static int
signal_own_child(void)
{
	int status;
	pid_t k = fork();

	if (k == 0) {
		pause();
		_exit(0);
	}
	int rc = err(kill(k, SIGKILL));
	waitpid(k, &status, 0);
	return rc;
}

static const struct row {
	const char *r_what;
	try_fn r_try;
	int r_errno;  /* what it fails with in the domain; 0: allowed */
	bool r_scope; /* needs ABI 6 (scoped signals and abstract sockets) */
} rows[] = {
    {"create a file in the system", create_in_system, EACCES, false},
    {"write to a system file", write_system_file, EACCES, false},
    {"make a directory in the box's root", mkdir_in_root, EACCES, false},
    {"remove a device", remove_device, EACCES, false},
    {"read the run dir's token", read_run_dir_file, EACCES, false},
    {"list the run dir", list_run_dir, EACCES, false},
    {"signal a process outside the domain", signal_outside, EPERM, true},
    {"connect to an abstract socket outside the domain", abstract_connect_outside, EPERM,
     true},
    {"read the system", read_system, 0, false},
    {"write in the workspace", write_workspace, 0, false},
    {"write in /tmp", write_tmp, 0, false},
    {"write in /dev/shm", write_shm, 0, false},
    {"write the kernel's own dir", write_kdir, 0, false},
    {"write to a device", write_device, 0, false},
    {"signal its own child", signal_own_child, 0, false},
};

/* landlock_box with every path below root: the box's rules over a tree of ours. */
static struct landlock_rule *
rebased(void)
{
	size_t n = 0;
	struct landlock_rule *r;

	while (landlock_box[n].lr_path)
		n++;
	r = calloc(n + 1, sizeof(*r));
	for (size_t i = 0; i < n; i++)
		r[i] = (struct landlock_rule){
		    xasprintf("%s%s", root, landlock_box[i].lr_path),
		    landlock_box[i].lr_access};
	return r;
}

TestSuite(landlock, .init = setup, .fini = teardown);

Test(landlock, each_rule_refuses_and_allows)
{
	int abi = landlock_abi(), status;
	struct landlock_rule *rules = rebased();

	if (abi < 2)
		cr_skip_test("no Landlock in this kernel");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		if (r->r_scope && abi < 6)
			continue;
		/* the row's try succeeds outside the domain (the test is the rule's
		 * doing) */
		if (r->r_errno) {
			pid_t k = fork();
			if (k == 0)
				_exit(r->r_try());
			cr_assert_eq(waitpid(k, &status, 0), k);
			cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			          "%s: fails without Landlock too (%s)", r->r_what,
			          strerror(WEXITSTATUS(status)));
			if (r->r_try == create_in_system || r->r_try == mkdir_in_root) {
				char p[256];
				snprintf(p, sizeof(p), "%s/%s", root,
				         r->r_try == mkdir_in_root ? "newdir"
				                                   : "usr/new");
				r->r_try == mkdir_in_root ? rmdir(p) : unlink(p);
			}
			if (r->r_try == remove_device)
				put(root, "dev/null");
		}
		pid_t k = fork();
		if (k == 0) {
			if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
			    landlock_enter(rules) < 0)
				_exit(255);
			_exit(r->r_try());
		}
		cr_assert_eq(waitpid(k, &status, 0), k);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 255,
		          "%s: no domain", r->r_what);
		cr_expect_eq(WEXITSTATUS(status), r->r_errno, "%s: %s, not %s", r->r_what,
		             strerror(WEXITSTATUS(status)), strerror(r->r_errno));
	}
}

/* What a row of the host's table tries: 0, or the errno it failed with. */
static int
try_open(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC, 0644);

	if (fd < 0)
		return errno;
	close(fd);
	return 0;
}

/*
 * The rules of a box without namespaces (landlock_host), at the host's own
 * paths: the system and the devices a box shows, its workspace and own dir;
 * not the host's /tmp, /proc's files for writing, other devices, or what is
 * beside them.
 */
Test(landlock, the_hosts_table_names_the_box_and_nothing_else)
{
	static const struct {
		const char *h_what, *h_path;
		int h_flags, h_errno;
	} rows[] = {
	    {"read the system", "/etc/passwd", O_RDONLY, 0},
	    {"write a device a box shows", "/dev/null", O_WRONLY | O_TRUNC, 0},
	    {"read /proc", "/proc/self/status", O_RDONLY, 0},
	    {"write the workspace", "HOME/notebook.py", O_WRONLY | O_CREAT, 0},
	    {"write its own dir", "KDIR/kernel.json", O_WRONLY | O_CREAT, 0},
	    {"write the host's /tmp", "/tmp/landlock_test.host", O_WRONLY | O_CREAT,
	     EACCES},
	    {"read the run dir", "RUN/token", O_RDONLY, EACCES},
	    {"write /proc's files", "/proc/self/comm", O_WRONLY, EACCES},
	    {"read a device a box does not show", "/dev/kmsg", O_RDONLY, EACCES},
	};
	char home[128], kdir[128], p[256];
	int status;

	if (landlock_abi() < 2)
		cr_skip_test("no Landlock in this kernel");
	snprintf(home, sizeof(home), "%s/home/user", root);
	snprintf(kdir, sizeof(kdir), "%s%s", root, BOX_KDIR);
	struct landlock_rule *rules = landlock_host(home, kdir, NULL);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const char *path = rows[i].h_path;
		if (!strncmp(path, "HOME/", 5))
			snprintf(p, sizeof(p), "%s/%s", home, path + 5), path = p;
		else if (!strncmp(path, "KDIR/", 5))
			snprintf(p, sizeof(p), "%s/%s", kdir, path + 5), path = p;
		else if (!strncmp(path, "RUN/", 4))
			snprintf(p, sizeof(p), "%s/%s", run, path + 4), path = p;
		if (access(path, F_OK) < 0 && !(rows[i].h_flags & O_CREAT))
			continue; /* this host has no such file */
		pid_t k = fork();
		if (k == 0) {
			if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
			    landlock_enter(rules) < 0)
				_exit(255);
			_exit(try_open(path, rows[i].h_flags));
		}
		cr_assert_eq(waitpid(k, &status, 0), k);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 255,
		          "%s: no domain", rows[i].h_what);
		cr_expect_eq(WEXITSTATUS(status), rows[i].h_errno, "%s (%s): %s, not %s",
		             rows[i].h_what, path, strerror(WEXITSTATUS(status)),
		             strerror(rows[i].h_errno));
	}
	unlink("/tmp/landlock_test.host");
	free(rules);
}
