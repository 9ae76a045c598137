/*
 * util_test.c — rm_rf and chown_r on trees a kernel's user owns: they never
 * leave the tree through a symlink or a hard link. log_limited: a peer that
 * causes warnings at will gets a few lines a minute, and the count of the rest.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/lib.h"

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

/* The lines of the file at path that hold needle. */
static int
lines_of(const char *path, const char *needle)
{
	char line[4096];
	int n = 0;
	FILE *f = fopen(path, "r");

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

Test(util, log_limited_says_a_few_lines_a_window_and_counts_the_rest)
{
	char path[] = "/tmp/sandcell-log-XXXXXX";
	struct loglimit ll = {.ll_what = "warnings about junk"};
	int fd = mkstemp(path), saved = dup(2);
	uint64_t t0 = 5000000;

	cr_assert(fd >= 0 && saved >= 0);
	fflush(stderr);
	dup2(fd, 2);
	for (int i = 0; i < 1000; i++) /* a flood, within one window */
		log_limited(&ll, t0 + (uint64_t)i, LOG_WARN, "junk %d dropped", i);
	log_limit_flush(&ll, t0 + LOG_LIMIT_WINDOW_MS - 1); /* not yet over */
	fflush(stderr);
	cr_assert_eq(lines_of(path, "dropped"), LOG_LIMIT_BURST);
	cr_assert_eq(lines_of(path, "not logged"), 0);
	log_limit_flush(&ll, t0 + LOG_LIMIT_WINDOW_MS); /* the window is over: the count */
	log_limited(&ll, t0 + LOG_LIMIT_WINDOW_MS + 1, LOG_WARN, "junk again dropped");
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(fd);
	cr_assert_eq(lines_of(path, "dropped"), LOG_LIMIT_BURST + 1);
	char want[128];
	snprintf(want, sizeof(want), "%d more warnings about junk in the last %d s, not logged",
		 1000 - LOG_LIMIT_BURST, LOG_LIMIT_WINDOW_MS / 1000);
	cr_assert_eq(lines_of(path, want), 1, "no count line '%s'", want);
	unlink(path);
}
