/*
 * util_test.c — rm_rf and chown_r on trees a kernel's user owns: they never
 * leave the tree through a symlink or a hard link.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit_stubs.h"

static char root[] = "/tmp/sandcell-util-XXXXXX";
static char tree[300], outside[300], secret[300];

static void
setup(void)
{
	cr_assert_not_null(mkdtemp(root));
	snprintf(tree, sizeof(tree), "%s/tree", root);
	snprintf(outside, sizeof(outside), "%s/outside", root);
	snprintf(secret, sizeof(secret), "%s/outside/secret", root);
	cr_assert_eq(mkdir(tree, 0755), 0);
	cr_assert_eq(mkdir(outside, 0755), 0);
	int fd = open(secret, O_WRONLY | O_CREAT, 0600);
	cr_assert(fd >= 0);
	close(fd);
	char p[400];
	snprintf(p, sizeof(p), "%s/sub", tree);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/sub/link-to-outside", tree);
	cr_assert_eq(symlink(outside, p), 0);
	snprintf(p, sizeof(p), "%s/sub/hardlink-to-secret", tree);
	cr_assert_eq(link(secret, p), 0);
}

static void
teardown(void)
{
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	cr_assert_eq(system(cmd), 0);
}

Test(util, rm_rf_removes_links_not_what_they_name, .init = setup, .fini = teardown)
{
	struct stat st;

	cr_assert_eq(rm_rf(tree), 0);
	cr_assert(lstat(tree, &st) < 0, "the tree is left");
	cr_assert_eq(stat(secret, &st), 0, "rm_rf followed a link out of the tree");
}

Test(util, chown_r_leaves_what_links_name, .init = setup, .fini = teardown)
{
	struct stat st, sub;
	char p[400];

	if (geteuid() != 0)
		cr_skip_test("chown needs root");
	cr_assert_eq(chown_r(tree, 4242, 4242), 0);
	snprintf(p, sizeof(p), "%s/sub", tree);
	cr_assert_eq(stat(p, &sub), 0);
	cr_assert_eq(sub.st_uid, 4242, "the tree itself was not chowned");
	cr_assert_eq(stat(secret, &st), 0);
	cr_assert_eq(st.st_uid, 0, "chown_r changed a file outside the tree (hard link)");
	cr_assert_eq(stat(outside, &st), 0);
	cr_assert_eq(st.st_uid, 0, "chown_r followed a symlink out of the tree");
}
