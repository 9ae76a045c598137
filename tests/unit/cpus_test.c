/*
 * cpus_test.c — --max-starting's default (broker/cpus.c) from cgroup trees
 * made in a temporary directory: v2's cpu.max and v1's quota and period,
 * the least quota from the broker's cgroup up to the root, rounded up, and a
 * container's view, where /proc/self/cgroup names a path its mount lacks.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/lib.h"

int cpus_quota(const char *proc_cgroup, const char *root);

static char root[64];

static void
setup(void)
{
	strcpy(root, "/tmp/cpus_test.XXXXXX");
	cr_assert_not_null(mkdtemp(root));
}

static void
teardown(void)
{
	rm_rf(root);
}

/* Writes text to root/rel, making its directories. */
static void
put(const char *rel, const char *text)
{
	char *path = xasprintf("%s/%s", root, rel);
	char *slash = strrchr(path, '/');
	*slash = '\0';
	cr_assert_eq(mkdir_p(path, 0755), 0, "mkdir %s", path);
	*slash = '/';
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f, "%s", path);
	fputs(text, f);
	fclose(f);
	free(path);
}

TestSuite(cpus, .init = setup, .fini = teardown);

Test(cpus, v2_cpu_max_rounds_up_and_max_is_none)
{
	put("cgroup.controllers", "cpuset cpu io memory pids\n");
	put("a/cpu.max", "150000 100000\n");
	cr_expect_eq(cpus_quota("0::/a\n", root), 2);
	put("a/cpu.max", "max 100000\n");
	cr_expect_eq(cpus_quota("0::/a\n", root), 0);
	put("a/cpu.max", "50000 100000\n");
	cr_expect_eq(cpus_quota("0::/a\n", root), 1);
}

Test(cpus, the_least_quota_from_the_cgroup_up_to_the_root_counts)
{
	put("cgroup.controllers", "cpu\n");
	put("pod/cpu.max", "300000 100000\n");
	put("pod/box/cpu.max", "max 100000\n");
	put("pod/box/ctr/cpu.max", "400000 100000\n");
	cr_expect_eq(cpus_quota("0::/pod/box/ctr\n", root), 3);
	put("cpu.max", "200000 100000\n"); /* the root's, if a kernel showed one */
	cr_expect_eq(cpus_quota("0::/pod/box/ctr\n", root), 2);
}

Test(cpus, a_path_the_mount_lacks_is_a_containers_own_root)
{
	put("cgroup.controllers", "cpu\n");
	put("cpu.max", "100000 100000\n");
	cr_expect_eq(cpus_quota("0::/kubepods/burstable/pod1/abc\n", root), 1);
}

Test(cpus, v1_quota_over_period_in_the_cpu_hierarchy)
{
	const char *cg = "12:pids:/x\n4:cpu,cpuacct:/x/y\n1:name=systemd:/x\n0::/x\n";
	put("cpu/x/y/cpu.cfs_quota_us", "-1\n");
	put("cpu/x/y/cpu.cfs_period_us", "100000\n");
	put("cpu/x/cpu.cfs_quota_us", "250000\n");
	put("cpu/x/cpu.cfs_period_us", "100000\n");
	cr_expect_eq(cpus_quota(cg, root), 3);
	put("cpu/x/y/cpu.cfs_quota_us", "100000\n");
	cr_expect_eq(cpus_quota(cg, root), 1);
	/* hybrid: the 0:: line's hierarchy has no cgroup.controllers at the root */
	put("cpu/x/cpu.cfs_quota_us", "-1\n");
	put("cpu/x/y/cpu.cfs_quota_us", "-1\n");
	put("x/cpu.max", "100000 100000\n");
	cr_expect_eq(cpus_quota(cg, root), 0);
}

Test(cpus, no_cpu_controller_or_garbage_is_no_quota)
{
	cr_expect_eq(cpus_quota("", root), 0);
	cr_expect_eq(cpus_quota("garbage\n::\n1:cpu\n", root), 0);
	put("cgroup.controllers", "cpu\n");
	put("a/cpu.max", "lots 100000\n");
	cr_expect_eq(cpus_quota("0::/a\n", root), 0);
	put("a/cpu.max", "100000 0\n");
	cr_expect_eq(cpus_quota("0::/a\n", root), 0);
	put("a/cpu.max", "100000\n");
	cr_expect_eq(cpus_quota("0::/a\n", root), 0);
}
