/*
 * boxpath_test.c — a tenant's path resolved in its box's view: links and ".."
 * go where they go in the box (an absolute link against the box's root, not
 * the host's nor the workspace's), and what the box does not show is ENOENT
 * whatever the host holds there.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/lib.h"

static char root[] = "/tmp/sandcell-boxpath-XXXXXX";
static char ws[300], secret[300];
static struct boxpath_view view;

static void
in_ws(const char *name, const char *target)
{
	char p[400];

	snprintf(p, sizeof(p), "%s/%s", ws, name);
	if (target)
		cr_assert_eq(symlink(target, p), 0, "%s", p);
	else
		cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
}

static void
setup(void)
{
	char p[400];

	cr_assert_not_null(mkdtemp(root));
	snprintf(ws, sizeof(ws), "%s/ws", root);
	snprintf(secret, sizeof(secret), "%s/secret",
	         root); /* a host dir outside the box */
	cr_assert_eq(mkdir(ws, 0755), 0);
	cr_assert_eq(mkdir(secret, 0700), 0);
	snprintf(p, sizeof(p), "%s/file", secret);
	close(open(p, O_WRONLY | O_CREAT, 0600));
	in_ws("a", NULL);
	in_ws("a/b", NULL);
	snprintf(p, sizeof(p), "%s/a/f", ws);
	close(open(p, O_WRONLY | O_CREAT, 0600));
	in_ws("abs", BOX_HOME "/a"); /* absolute, as a tenant writes it */
	in_ws("rel", "a/b");
	in_ws("up", "../../.."); /* the box's root */
	in_ws("host", secret);   /* a host dir: not in the box */
	snprintf(p, sizeof(p), "%s/file", secret);
	in_ws("hostfile", p);
	in_ws("gone", "/nonexistent-boxpath");
	in_ws("etc", "/etc");
	in_ws("loop", "loop");
	in_ws("file", "a/f");
	cr_assert_eq(boxpath_view_open(&view, ws), 0);
}

static void
teardown(void)
{
	char cmd[400];

	boxpath_view_close(&view);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	cr_assert_eq(system(cmd), 0);
}

/* rc of resolving path, and where it landed in real. */
static int
resolve(const char *path, unsigned flags, char real[PATH_MAX], struct stat *st)
{
	int fd, rc = boxpath_open(&view, path, flags, &fd, real, PATH_MAX);

	if (rc == 0 && st) {
		if (fd >= 0)
			cr_assert_eq(fstat(fd, st), 0);
		else
			st->st_mode = S_IFDIR;
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

TestSuite(boxpath, .init = setup, .fini = teardown);

Test(boxpath, links_and_dots_land_where_the_box_puts_them)
{
	static const struct {
		const char *path, *real;
	} cases[] = {
	    {"/", "/"},
	    {"/home", "/home"},
	    {BOX_HOME, BOX_HOME},
	    {BOX_HOME "/a/b", BOX_HOME "/a/b"},
	    {BOX_HOME "/abs/b", BOX_HOME "/a/b"},
	    {BOX_HOME "/rel", BOX_HOME "/a/b"},
	    {BOX_HOME "/rel/..", BOX_HOME "/a"},
	    {BOX_HOME "/up", "/"},
	    {BOX_HOME "/up/home/user/a", BOX_HOME "/a"},
	    {BOX_HOME "/../../../etc", "/etc"},
	    {BOX_HOME "/etc", "/etc"},
	    {BOX_HOME "/./a//b/", BOX_HOME "/a/b"},
	    {"/tmp", "/tmp"},
	    {BOX_HOME "/file", BOX_HOME "/a/f"},
	};
	char real[PATH_MAX];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cr_expect_eq(resolve(cases[i].path, 0, real, NULL), 0, "%s",
		             cases[i].path);
		cr_expect_str_eq(real, cases[i].real, "%s", cases[i].path);
	}
}

Test(boxpath, what_the_box_does_not_show_is_enoent_whatever_the_host_holds)
{
	char real[PATH_MAX], p[400];
	const char *missing[] = {
	    BOX_HOME "/host",
	    BOX_HOME "/hostfile",
	    BOX_HOME "/gone",
	    BOX_HOME "/nothing",
	    "/root/x",
	    "/tmp/x",
	    "/proc/self",
	    BOX_HOME "/up/root/x",
	    BOX_HOME "/up/tmp/x",
	};

	for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++)
		cr_expect_eq(resolve(missing[i], 0, real, NULL), -ENOENT, "%s",
		             missing[i]);
	/* the secret's own path, asked through the box's root */
	snprintf(p, sizeof(p), BOX_HOME "/up%s", secret);
	cr_expect_eq(resolve(p, 0, real, NULL), -ENOENT, "%s", p);
	cr_expect_eq(resolve(secret, 0, real, NULL), -ENOENT, "%s", secret);
}

Test(boxpath, the_box_answers_of_its_own_paths)
{
	char real[PATH_MAX];
	struct stat st;

	cr_expect_eq(resolve(BOX_HOME "/loop", 0, real, NULL), -ELOOP);
	cr_expect_eq(resolve(BOX_HOME "/a/f/x", 0, real, NULL), -ENOTDIR);
	cr_expect_eq(resolve(BOX_HOME "/file/", 0, real, NULL), -ENOTDIR);
	cr_expect_eq(resolve("home/user", 0, real, NULL), -EINVAL);
	cr_expect_eq(resolve(BOX_HOME "/file", 0, real, &st), 0);
	cr_expect(S_ISREG(st.st_mode));
	cr_expect_eq(resolve(BOX_HOME "/file", BOXPATH_NOFOLLOW, real, &st), 0);
	cr_expect(S_ISLNK(st.st_mode));
	cr_expect_str_eq(real, BOX_HOME "/file");
}

/* A workspace not made yet: BOX_HOME an empty directory of the box's own. */
Test(boxpath, a_workspace_not_made_yet_is_empty)
{
	struct boxpath_view v;
	int fd;

	cr_assert_eq(boxpath_view_open(&v, NULL), 0);
	cr_expect_eq(boxpath_open(&v, BOX_HOME, 0, &fd, NULL, 0), 0);
	cr_expect_eq(fd, -1);
	cr_expect_eq(boxpath_open(&v, BOX_HOME "/a", 0, &fd, NULL, 0), -ENOENT);
	cr_expect_eq(boxpath_open(&v, "/etc", 0, &fd, NULL, 0), 0);
	cr_expect(fd >= 0);
	close(fd);
	boxpath_view_close(&v);
}

/*
 * Deno's configuration is looked for where the box's cwd is (kspec.c): a
 * link to a workspace directory finds it, a link to the host's does not.
 */
Test(boxpath, a_configuration_is_looked_for_in_the_box_only)
{
	char p[400];
	bool install;

	snprintf(p, sizeof(p), "%s/a/deno.json", ws);
	close(open(p, O_WRONLY | O_CREAT, 0600));
	snprintf(p, sizeof(p), "%s/package.json", secret);
	close(open(p, O_WRONLY | O_CREAT, 0600));
	cr_expect(kspec_cwd_config(ws, BOX_HOME "/abs/b", &install));
	cr_expect(kspec_cwd_config(ws, BOX_HOME "/file/..", &install) == false);
	cr_expect(kspec_cwd_config(ws, BOX_HOME "/rel", &install));
	cr_expect_not(kspec_cwd_config(ws, BOX_HOME "/host", &install));
	cr_expect_not(kspec_cwd_config(ws, BOX_HOME, &install));
	snprintf(p, sizeof(p), BOX_HOME "/up%s", secret);
	cr_expect_not(kspec_cwd_config(ws, p, &install));
	/* unboxed: the host's own paths */
	cr_expect(kspec_cwd_config(NULL, secret, &install));
	cr_expect(install, "a package.json without node_modules");
}

/*
 * A live box's whole root as the view: an absolute link resolves against
 * it, ".." stops at it, and a file found is read through boxpath_reopen.
 */
Test(boxpath, a_live_roots_view_keeps_every_path_inside_it)
{
	struct boxpath_view v;
	char real[PATH_MAX], p[400], buf[16] = "";
	int fd, rfd;

	snprintf(p, sizeof(p), "%s/a/f", ws);
	rfd = open(p, O_WRONLY | O_TRUNC);
	cr_assert(rfd >= 0);
	cr_assert_eq(write(rfd, "in", 2), 2);
	close(rfd);
	snprintf(p, sizeof(p), "%s/back", ws);
	cr_assert_eq(symlink("/../../a", p), 0);
	cr_assert((rfd = open(ws, O_PATH | O_DIRECTORY | O_CLOEXEC)) >= 0);
	boxpath_view_root(&v, rfd);
	cr_expect_eq(boxpath_open(&v, "/back/f", 0, &fd, real, sizeof(real)), 0);
	cr_expect_str_eq(real, "/a/f");
	int io = boxpath_reopen(fd, O_RDONLY);
	cr_assert(io >= 0, "%s", strerror(-io));
	cr_expect_eq(read(io, buf, sizeof(buf) - 1), 2);
	cr_expect_str_eq(buf, "in");
	close(io);
	close(fd);
	cr_expect_eq(boxpath_open(&v, "/abs", 0, &fd, NULL, 0), -ENOENT,
	             "/home/user in this root");
	cr_expect_eq(boxpath_open(&v, "/host", 0, &fd, NULL, 0), -ENOENT,
	             "the host's dir");
	cr_expect_eq(boxpath_open(&v, "/file", BOXPATH_NOFOLLOW, &fd, NULL, 0), 0);
	cr_expect_eq(boxpath_reopen(fd, O_RDONLY), -ELOOP, "a link reopened");
	close(fd);
	boxpath_view_close(&v);
}

/*
 * /root is the workspace's .root (an empty directory of the box's own until a
 * box made it); a .root that is a link (to a host dir) is not followed.
 */
Test(boxpath, root_is_the_workspaces_dot_root_and_never_a_link)
{
	char real[PATH_MAX], p[400];
	struct stat st;

	cr_expect_eq(resolve("/root", 0, real, &st), 0);
	cr_expect(S_ISDIR(st.st_mode));
	cr_expect_eq(resolve("/root/file", 0, real, NULL), -ENOENT);
	/* a link to the secret dir: still the box's own empty /root */
	snprintf(p, sizeof(p), "%s/.root", ws);
	cr_assert_eq(symlink(secret, p), 0);
	boxpath_view_close(&view);
	cr_assert_eq(boxpath_view_open(&view, ws), 0);
	cr_expect_eq(resolve("/root/file", 0, real, NULL), -ENOENT,
	             "the link was followed");
	/* the directory: what it holds is at /root */
	cr_assert_eq(unlink(p), 0);
	in_ws(".root", NULL);
	snprintf(p, sizeof(p), "%s/.root/f", ws);
	close(open(p, O_WRONLY | O_CREAT, 0600));
	boxpath_view_close(&view);
	cr_assert_eq(boxpath_view_open(&view, ws), 0);
	cr_expect_eq(resolve("/root/f", 0, real, &st), 0);
	cr_expect_str_eq(real, "/root/f");
	cr_expect(S_ISREG(st.st_mode));
	cr_expect_eq(resolve(BOX_HOME "/.root/f", 0, real, NULL), 0);
}
