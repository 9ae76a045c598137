/*
 * contained_test.c — a broker started as `podman run IMAGE` leaves root
 * (harness.c's broker_contain: no CAP_SYS_ADMIN, a partly masked /proc, a
 * read-only /sys/fs/cgroup, no /dev/net/tun). It boxes its kernels from a
 * user namespace of its own, GET /ready says what the box lacks, and cells
 * that kill everything kill only their own, next to a busy context too.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* without a pids cgroup --kernel-pids is RLIMIT_NPROC of the shared kernels' uid: every
 * context's threads together (a python kernel has ~12), so each test deletes its contexts */
HARNESS_SHARED_BROKER("--pool", "python=0", "--kernel-pids", "256");
HARNESS_CONTAINED;

#define URL test_url()

Test(contained, ready_says_the_box_is_reduced_and_what_it_lacks, .timeout = 60)
{
	struct resp r;

	cr_assert_eq(http(URL, "GET", "/ready", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200, "%s", r.r_body);
	json_t *j = json_loads(r.r_body, 0, NULL), *sb = json_object_get(j, "sandbox");
	cr_assert_str_eq(json_string_value(json_object_get(sb, "level")), "reduced", "%s",
	                 r.r_body);
	cr_assert(json_is_true(json_object_get(sb, "own_user_namespace")), "%s",
	          r.r_body);
	json_t *m = json_object_get(sb, "missing");
	cr_assert(ready_lacks(m, "/proc of the box's own"), "%s", r.r_body);
	cr_assert(ready_lacks(m, "pids cgroup"), "%s", r.r_body);
	cr_assert(ready_lacks(m, "memory cgroup"), "%s", r.r_body);
	cr_assert(ready_lacks(m, "outbound network"), "%s", r.r_body);
	cr_assert(ready_lacks(m, "size bound on the workspace"), "%s", r.r_body);
	cr_assert_eq(metric_value(URL, "sandcell_sandbox_missing"),
	             (double)json_array_size(m));
	json_decref(j);
	resp_free(&r);
}

Test(contained, a_kernel_is_boxed_as_a_uid_of_its_own_and_sees_nothing_of_the_server,
     .timeout = 90)
{
	char *id = context_new(URL, "python", NULL), code[1024];
	pid_t broker = test_broker_pid(), proxy = context_pid(URL, id, "proxy_pid");

	cr_assert(id && broker > 0 && proxy > 0);
	snprintf(
	    code, sizeof(code),
	    "import os, resource\n"
	    "st = dict(l.split(':\\t') for l in "
	    "open('/proc/self/status').read().splitlines())\n"
	    "u = os.getuid()\n"
	    "print(61184 <= u <= 65519, st['CapEff'], st['NoNewPrivs'], st['Seccomp'])\n"
	    "print(os.path.exists('%s'), os.listdir('/proc/%d'), "
	    "os.listdir('/proc/%d'))\n"
	    "print(resource.getrlimit(resource.RLIMIT_NPROC)[0])",
	    test_run_dir(), (int)broker, (int)proxy);
	char *out = run_stdout(URL, id, code);
	cr_assert_str_eq(out, "True 0000000000000000 1 2\nFalse [] []\n256\n", "%s", out);
	free(out);
	context_delete(URL, id);
	free(id);
}

Test(contained, cells_that_kill_everything_kill_only_their_own, .timeout = 300)
{
	static const char *const cells[] = {
	    "import os\ntry:\n    os.kill(-1, 9)\nexcept OSError as e:\n    print(e)",
	    "import subprocess\nsubprocess.run(['pkill', '-9', '-f', 'sandcell'])",
	    "import subprocess\nsubprocess.run('kill -9 -1', shell=True)",
	    "import subprocess\ntry:\n    subprocess.run(['bash', '-c', ':(){ :|:& "
	    "};:'], "
	    "timeout=3)\nexcept Exception as e:\n    print(e)",
	    "import subprocess\nsubprocess.run('rm -rf ~ /tmp/*', shell=True)",
	    "import os\nos.killpg(0, 9)",
	};
	char *busy = context_new(URL, "python", NULL),
	     *id = context_new(URL, "python", NULL);
	cr_assert(busy && id);
	expect_cells_kill_only_their_own(URL, test_broker_pid(), id, busy, cells,
					 sizeof(cells) / sizeof(cells[0]), 200);
	context_delete(URL, busy);
	context_delete(URL, id);
	free(busy);
	free(id);
}

/* A new context whose kernel was forked from the template (pandas imported before it
 * ran). */
static bool
forked_ctx(void *arg)
{
	char *id = context_new(URL, "python", NULL), *out;
	bool yes;

	if (!id)
		return false;
	out = run_stdout(
	    URL, id, "import sys, os; print('pandas' in sys.modules, os.getuid() != 0)");
	yes = out && !strcmp(out, "True True\n");
	*(char **)arg = yes ? id : NULL;
	if (!yes) {
		context_delete(URL, id);
		free(id);
	}
	free(out);
	return yes;
}

/*
 * The template cannot go back to its PID namespace after a fork into a new
 * one (no CAP_SYS_ADMIN over the container's): it forks each box through an
 * intermediate, and serves one request after another.
 */
Test(contained, python_kernels_are_forked_from_the_template_one_after_another,
     .timeout = 120)
{
	char *id = NULL;

	cr_assert_eq(wait_until(forked_ctx, &id, 60000), 0,
	             "no kernel was forked from the template");
	pid_t tpl = template_pid(test_run_dir());
	cr_assert(tpl > 0);
	char *out = run_stdout(URL, id, "import os\nprint(os.getpid())");
	cr_assert_str_eq(out, "2\n", "the kernel is not PID 2 of its box: %s", out);
	free(out);
	context_delete(URL, id);
	free(id);
	for (int i = 0; i < 3; i++) {
		cr_assert(forked_ctx(&id), "kernel %d after the first was not forked",
		          i + 1);
		context_delete(URL, id);
		free(id);
	}
	cr_assert_eq(template_pid(test_run_dir()), tpl, "the template started again");
}
