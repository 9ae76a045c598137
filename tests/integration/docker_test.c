/*
 * docker_test.c — a broker started as `docker run IMAGE` leaves root
 * (harness.c's broker_contain_docker: Docker's default capabilities, its
 * seccomp profile's refusal of new namespaces, a partly masked /proc, a
 * read-only /sys/fs/cgroup, no /dev/net/tun). It starts, boxes its kernels
 * without namespaces (uids of the range, no_new_privs, seccomp, rlimits,
 * Landlock), GET /ready says so and what each missing part costs, and cells
 * that kill everything kill only their own context's processes, next to a
 * busy context of the same uid (shared isolation).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>
#include <linux/capability.h>

#include "harness.h"
#include "../../lib/lib.h"

/* --kernel-pids is RLIMIT_NPROC of the shared kernels' uid here: every context's together
 */
HARNESS_SHARED_BROKER("--pool", "python=0", "--kernel-pids", "256");
HARNESS_CONTAINED;
HARNESS_DOCKER;

#define URL test_url()

Test(docker, ready_says_the_box_is_reduced_without_namespaces, .timeout = 60)
{
	struct resp r;

	cr_assert_eq(http(URL, "GET", "/ready", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200, "%s", r.r_body);
	json_t *j = json_loads(r.r_body, 0, NULL), *sb = json_object_get(j, "sandbox");
	cr_assert_str_eq(json_string_value(json_object_get(sb, "level")), "reduced", "%s",
	                 r.r_body);
	cr_assert(json_is_false(json_object_get(sb, "namespaces")), "%s", r.r_body);
	cr_assert_eq(json_integer_value(json_object_get(sb, "landlock_abi")),
	             landlock_abi(), "%s", r.r_body);
	json_t *m = json_object_get(sb, "missing");
	cr_assert(ready_lacks(m, "PID namespace"), "%s", r.r_body);
	cr_assert(ready_lacks(m, "/proc of the box's own"), "%s", r.r_body);
	cr_assert(ready_lacks(m, "network of the box's own"), "%s", r.r_body);
	cr_assert(ready_lacks(m, "pids cgroup"), "%s", r.r_body);
	cr_assert(ready_lacks(m, "memory cgroup"), "%s", r.r_body);
	cr_assert_eq(metric_value(URL, "sandcell_sandbox_missing"),
	             (double)json_array_size(m));
	json_decref(j);
	resp_free(&r);
}

/*
 * A kernel is a uid of the range with no capabilities, no_new_privs and
 * the seccomp filter; it reads neither the run dir nor the token, writes
 * neither the system nor the host's /tmp, and signals neither the broker nor
 * its proxy; its workspace and its own /tmp are writable.
 */
Test(docker, a_kernel_is_a_uid_of_the_range_in_a_landlock_domain, .timeout = 90)
{
	if (landlock_abi() < 6)
		cr_skip_test("no Landlock scoping in this kernel (ABI %d)",
		             landlock_abi());
	char *id = context_new(URL, "python", NULL), code[2048];
	pid_t broker = test_broker_pid(), proxy = context_pid(URL, id, "proxy_pid");

	cr_assert(id && broker > 0 && proxy > 0);
	snprintf(code, sizeof(code),
	         "import os, tempfile\n"
	         "st = dict(l.split(':\\t') for l in "
	         "open('/proc/self/status').read().splitlines())\n"
	         "print(61184 <= os.getuid() <= 65519, st['CapEff'], st['NoNewPrivs'], "
	         "st['Seccomp'])\n"
	         "def tr(f):\n"
	         "    try:\n        f()\n        return 'done'\n"
	         "    except OSError as e:\n        return type(e).__name__\n"
	         "print(tr(lambda: os.listdir('%s')), tr(lambda: open('/usr/sandcell-x', "
	         "'w')),"
	         " tr(lambda: open('/tmp/sandcell-docker-test', 'w')),"
	         " tr(lambda: os.kill(%d, 0)), tr(lambda: os.kill(%d, 0)))\n"
	         "print(tr(lambda: open('notebook.txt', 'w').write('x')),"
	         " tr(lambda: tempfile.TemporaryFile().write(b'x')))",
	         test_run_dir(), (int)broker, (int)proxy);
	char *out = run_stdout(URL, id, code);
	cr_assert_str_eq(
	    out,
	    "True 0000000000000000 1 2\n"
	    "PermissionError PermissionError PermissionError PermissionError "
	    "PermissionError\n"
	    "done done\n",
	    "%s", out);
	free(out);
	context_delete(URL, id);
	free(id);
}

/* A python execution in id prints 42: its kernel answers (restarted, if a cell ended it).
 */
static bool
answers(void *arg)
{
	char *out = run_stdout(URL, arg, "print(6*7)");
	bool ok = out && !strcmp(out, "42\n");

	free(out);
	return ok;
}

/*
 * Shared isolation: both contexts' kernels are the same uid here, and only
 * their Landlock domains tell them apart. A fork bomb's processes hold the
 * uid's RLIMIT_NPROC (there is no pids cgroup) until a restart ends its box:
 * the init ends every process of its domain.
 */
Test(docker, cells_that_kill_everything_kill_only_their_own, .timeout = 300)
{
	static const char *const cells[] = {
	    "import os\ntry:\n    os.kill(-1, 9)\nexcept OSError as e:\n    print(e)",
	    "import subprocess\nsubprocess.run(['pkill', '-9', '-f', 'sandcell'])",
	    "import subprocess\nsubprocess.run('kill -9 -1', shell=True)",
	    "import subprocess\ntry:\n    subprocess.run(['bash', '-c', ':(){ :|:& "
	    "};:'], timeout=3)\nexcept Exception as e:\n    print(e)",
	    "import subprocess\nsubprocess.run('rm -rf ~ /tmp/*', shell=True)",
	    "import os\nos.killpg(0, 9)",
	};
	if (landlock_abi() < 6)
		cr_skip_test("no Landlock scoping in this kernel (ABI %d)",
		             landlock_abi());
	char *busy = context_new(URL, "python", NULL),
	     *id = context_new(URL, "python", NULL);
	cr_assert(busy && id);
	char *u1 = run_stdout(URL, busy, "import os; print(os.getuid())");
	char *u2 = run_stdout(URL, id, "import os; print(os.getuid())");
	cr_assert_str_eq(u1, u2, "the two contexts share a uid");
	free(u1);
	free(u2);
	expect_cells_kill_only_their_own(URL, test_broker_pid(), id, busy, cells,
					 sizeof(cells) / sizeof(cells[0]), 120);
	context_delete(URL, busy);
	context_delete(URL, id);
	free(busy);
	free(id);
}

/* A process of the host whose argv is exactly "sleep" arg (kept by a dead kernel). */
static bool
sleeper_gone(void *arg)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool found = false;

	while (d && !found && (de = readdir(d))) {
		char buf[256];
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		size_t n = proc_cmdline(atoi(de->d_name), buf, sizeof(buf));
		found = n > 6 && !strcmp(buf, "sleep") && !strcmp(buf + 6, arg);
	}
	if (d)
		closedir(d);
	return !found;
}

/*
 * No PID namespace ends what a kernel leaves when it dies, or when its
 * context is deleted: its box's init, in a Landlock domain of the box's own,
 * ends it (a process in a session of its own too), and nothing of the
 * neighbour's.
 */
Test(docker, what_a_dead_kernel_left_ends_with_it, .timeout = 120)
{
	if (landlock_abi() < 6)
		cr_skip_test("no Landlock scoping in this kernel (ABI %d)",
		             landlock_abi());
	char *id = context_new(URL, "python", NULL),
	     *busy = context_new(URL, "python", NULL);

	cr_assert(id && busy);
	char mine[16], theirs[16], code[512];
	snprintf(mine, sizeof(mine), "7%d",
	         (int)getpid()); /* its own (a run's leftovers) */
	snprintf(theirs, sizeof(theirs), "8%d", (int)getpid());
	pid_t nkernel = context_pid(URL, busy, "kernel_pid");
	snprintf(
	    code, sizeof(code),
	    "import subprocess\nsubprocess.Popen(['setsid', 'sleep', '%s'])\nprint('ok')",
	    theirs);
	char *out = run_stdout(URL, busy, code);
	cr_assert_str_eq(out, "ok\n");
	free(out);
	/* the kernel dies once its setsid child runs sleep (polled, 30 s at most) */
	snprintf(code, sizeof(code),
	         "import subprocess, os, time\n"
	         "p = subprocess.Popen(['setsid', 'sleep', '%s'])\n"
	         "for _ in range(3000):\n"
	         "    if b'sleep' in open('/proc/%%d/cmdline' %% p.pid, 'rb').read():\n"
	         "        break\n"
	         "    time.sleep(0.01)\n"
	         "os.kill(os.getpid(), 9)",
	         mine);
	json_decref(run(URL, id, code));
	cr_assert_eq(wait_until(answers, id, 60000), 0, "the context answers again");
	cr_assert_eq(wait_until(sleeper_gone, mine, 10000), 0,
	             "what the dead kernel started outlived it");
	cr_assert(!sleeper_gone(theirs), "the neighbour's process was ended");
	cr_assert_eq(context_pid(URL, busy, "kernel_pid"), nkernel,
	             "the neighbour restarted");
	context_delete(URL, id);
	cr_assert_eq(context_delete(URL, busy), 0);
	cr_assert_eq(wait_until(sleeper_gone, theirs, 10000), 0,
	             "what a deleted context's kernel started outlived it");
	free(id);
	free(busy);
}

/* --isolation context: a uid per context, and Landlock's rules name its own workspace
 * only. */
Test(docker, isolation_context_hides_a_neighbours_workspace, .timeout = 180)
{
	struct broker b;
	const char *args[] = {
	    "--no-default-context", "--isolation", "context", "--pool", "python=0", NULL};
	char code[1024], ws[600];

	cr_assert_eq(broker_start_contained(&b, args), 0);
	char *a = context_new(b.b_url, "python", NULL),
	     *v = context_new(b.b_url, "python", NULL);
	cr_assert(a && v);
	char *acwd = context_host_cwd(b.b_url, a), *vcwd = context_host_cwd(b.b_url, v);
	cr_assert(acwd && vcwd && strcmp(acwd, vcwd), "one workspace for two contexts");
	char *out = run_stdout(b.b_url, v,
	                       "open('mine.txt', 'w').write('private')\nimport os\n"
	                       "print(os.getuid())");
	unsigned vuid = 0;
	cr_assert_eq(sscanf(out, "%u", &vuid), 1, "%s", out);
	free(out);
	snprintf(ws, sizeof(ws), "%s/mine.txt", vcwd);
	snprintf(code, sizeof(code),
	         "import os\nprint(os.getuid() != %u)\n"
	         "def t(f):\n    try:\n        f()\n        print('read')\n"
	         "    except OSError:\n        print('refused')\n"
	         "t(lambda: open('%s').read())\n"
	         "t(lambda: os.listdir('%s'))\n"
	         "t(lambda: os.listdir(os.path.dirname('%s')))\n"
	         "t(lambda: open('mine.txt', 'w').write('mine'))",
	         vuid, ws, vcwd, vcwd);
	out = run_stdout(b.b_url, a, code);
	cr_assert_str_eq(out, "True\nrefused\nrefused\nrefused\nread\n", "%s", out);
	free(out);
	/* Deno's channels would be TCP on the container's loopback: its proxy refuses to
	 * box it (its log says why), and the context does not start */
	struct resp r;
	cr_assert_eq(
	    http(b.b_url, "POST", "/contexts", "{\"language\": \"javascript\"}", &r, 60),
	    0);
	cr_assert(r.r_status == 500 && strstr(r.r_body, "could not start"), "%ld %s",
	          r.r_status, r.r_body);
	resp_free(&r);
	free(acwd);
	free(vcwd);
	free(a);
	free(v);
	cr_assert_eq(broker_stop(&b), 0);
}

/*
 * A root pod under RuntimeDefault with every capability dropped but the
 * few a box without namespaces uses: the kernels' uids (SETUID, SETGID,
 * CHOWN), the files they own (DAC_OVERRIDE, FOWNER), dropping capabilities
 * (SETPCAP), signalling kernels (KILL). Its broker boxes kernels as under
 * Docker's defaults.
 */
Test(docker, a_root_pod_with_a_few_capabilities_is_boxed, .timeout = 120)
{
	if (landlock_abi() < 6) /* its kill -9 -1 would end the neighbour of its uid */
		cr_skip_test("no Landlock scoping in this kernel (ABI %d)",
		             landlock_abi());
	static const int caps[] = {CAP_SETUID, CAP_SETGID,  CAP_CHOWN, CAP_DAC_OVERRIDE,
	                           CAP_FOWNER, CAP_SETPCAP, CAP_KILL,  -1};
	const char *args[] = {"--no-default-context", "--pool", "python=0", NULL};
	struct broker b;
	struct resp r;

	cr_assert_eq(broker_start_docker(&b, caps, args), 0);
	cr_assert_eq(http(b.b_url, "GET", "/ready", NULL, &r, 5), 0);
	json_t *j = json_loads(r.r_body, 0, NULL), *sb = json_object_get(j, "sandbox");
	cr_assert_str_eq(json_string_value(json_object_get(sb, "level")), "reduced", "%s",
	                 r.r_body);
	cr_assert(json_is_false(json_object_get(sb, "namespaces")), "%s", r.r_body);
	json_decref(j);
	resp_free(&r);
	char *id = context_new(b.b_url, "python", NULL),
	     *busy = context_new(b.b_url, "python", NULL);
	cr_assert(id && busy);
	pid_t nkernel = context_pid(b.b_url, busy, "kernel_pid");
	char *out = run_stdout(
	    b.b_url, id,
	    "import os\n"
	    "st = dict(l.split(':\\t') for l in "
	    "open('/proc/self/status').read().splitlines())\n"
	    "print(61184 <= os.getuid() <= 65519, st['CapEff'], st['NoNewPrivs'], "
	    "st['Seccomp'])");
	cr_assert_str_eq(out, "True 0000000000000000 1 2\n", "%s", out);
	free(out);
	json_decref(run(b.b_url, id,
	                "import subprocess\nsubprocess.run('kill -9 -1', shell=True)"));
	cr_assert_eq(kill(b.b_pid, 0), 0, "the broker is gone");
	cr_assert_eq(context_pid(b.b_url, busy, "kernel_pid"), nkernel,
	             "the neighbour restarted");
	free(id);
	free(busy);
	cr_assert_eq(broker_stop(&b), 0);
}

/*
 * The access token's file, open to every uid here (mode 0644, outside the
 * run dir): Landlock's rules name no such place, so a kernel cannot read it,
 * where its uid alone could.
 */
Test(docker, a_kernel_reads_no_token_file_even_one_open_to_all, .timeout = 120)
{
	if (landlock_abi() < 2)
		cr_skip_test("no Landlock in this kernel");
	char dir[] = "/var/tmp/docker_test.XXXXXX", path[64], code[256];
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(chmod(dir, 0755), 0);
	snprintf(path, sizeof(path), "%s/token", dir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("s3cret-token\n", f);
	fclose(f);
	cr_assert_eq(chmod(path, 0644), 0);
	const char *args[] = {"--no-default-context", "--pool", "python=0",
	                      "--access-token-file",  path,     NULL};
	struct broker b;

	harness_access_token("s3cret-token");
	cr_assert_eq(broker_start_docker(&b, NULL, args), 0);
	char *id = context_new(b.b_url, "python", NULL);
	cr_assert_not_null(id);
	snprintf(code, sizeof(code),
	         "import os\ntry:\n    print(open('%s').read())\nexcept OSError as e:\n"
	         "    print(type(e).__name__, os.access('%s', os.R_OK))",
	         path, path);
	char *out = run_stdout(b.b_url, id, code);
	/* its uid may read it (access(2) asks the modes), Landlock refuses */
	cr_assert_str_eq(out, "PermissionError True\n", "%s", out);
	free(out);
	free(id);
	cr_assert_eq(broker_stop(&b), 0);
	harness_access_token(NULL);
	unlink(path);
	rmdir(dir);
}

/*
 * Two contexts of one uid (shared isolation), without a PID namespace
 * between them: the neighbour's kernel is in sight in /proc, but its
 * environment, memory and descriptors are another Landlock domain's
 * (ptrace access is scoped: the names of its descriptors show, not what
 * they are), and so are its signals.
 */
Test(docker, a_neighbour_of_the_same_uid_is_out_of_reach, .timeout = 120)
{
	if (landlock_abi() < 6)
		cr_skip_test("no Landlock scoping in this kernel (ABI %d)",
		             landlock_abi());
	char *id = context_new(URL, "python", NULL),
	     *nb = context_new(URL, "python", NULL);
	char code[1024];

	cr_assert(id && nb);
	pid_t nkernel = context_pid(URL, nb, "kernel_pid");
	cr_assert(nkernel > 0);
	snprintf(code, sizeof(code),
	         "import os\n"
	         "def tr(f):\n"
	         "    try:\n        f()\n        return 'done'\n"
	         "    except OSError as e:\n        return type(e).__name__\n"
	         "print(os.stat('/proc/%d').st_uid == os.getuid())\n"
	         "print(tr(lambda: open('/proc/%d/environ').read()),"
	         " tr(lambda: open('/proc/%d/mem', 'rb').read(1)),"
	         " tr(lambda: os.readlink('/proc/%d/fd/1')), tr(lambda: os.kill(%d, 0)))",
	         (int)nkernel, (int)nkernel, (int)nkernel, (int)nkernel, (int)nkernel);
	char *out = run_stdout(URL, id, code);
	cr_assert_str_eq(
	    out,
	    "True\nPermissionError PermissionError PermissionError PermissionError\n",
	    "%s", out);
	free(out);
	cr_assert_eq(context_pid(URL, nb, "kernel_pid"), nkernel,
	             "the neighbour restarted");
	context_delete(URL, id);
	context_delete(URL, nb);
	free(id);
	free(nb);
}

/* As the image starts it (a default context, a warm pool): every kernel boxed the same.
 */
Test(docker, the_default_context_and_the_pool_are_boxed, .timeout = 180)
{
	const char *args[] = {"--pool", "python=2", NULL};
	struct broker b;

	cr_assert_eq(broker_start_docker(&b, NULL, args), 0);
	for (int i = 0; i < 3; i++) {
		char *id = context_new(b.b_url, "python", NULL);
		cr_assert_not_null(id);
		char *out = run_stdout(b.b_url, id,
		                       "import os\n"
		                       "st = dict(l.split(':\\t') for l in "
		                       "open('/proc/self/status').read().splitlines())\n"
		                       "print(61184 <= os.getuid() <= 65519, "
		                       "st['NoNewPrivs'], st['Seccomp'], "
		                       "os.getcwd() == os.environ['HOME'])");
		cr_assert_str_eq(out, "True 1 2 True\n", "context %d: %s", i, out);
		free(out);
		free(id);
	}
	cr_assert_eq(broker_stop(&b), 0);
}

/*
 * A box without namespaces shows the host's paths: a cwd of /root (E2B's
 * SDK suites) is the workspace's .root there, made for it, the tenant's,
 * and a second context reads what the first wrote in it.
 */
Test(docker, cwd_root_is_the_workspaces_dot_root, .timeout = 120)
{
	char *a = context_new(URL, "python", "/root");

	cr_assert_not_null(a, "a context with cwd /root was refused");
	char *out = run_stdout(
	    URL, a,
	    "import os\nopen('r.txt', 'w').write('kept')\n"
	    "print(os.getcwd().endswith('/.root'), os.stat('.').st_uid == os.getuid())");
	cr_assert_str_eq(out ? out : "", "True True\n");
	free(out);
	char *b = context_new(URL, "python", "/root");
	cr_assert_not_null(b);
	out = run_stdout(URL, b, "print(open('r.txt').read())");
	cr_assert_str_eq(out ? out : "", "kept\n");
	free(out);
	context_delete(URL, a);
	context_delete(URL, b);
	free(a);
	free(b);
}

/*
 * As a restricted pod leaves the broker (non-root, every capability dropped,
 * RuntimeDefault: no namespace at all): it starts and boxes its kernels
 * without namespaces as its own uid. A kernel reads neither the run dir nor
 * the token; the control socket, whose path a kernel of our uid can walk,
 * closes on it, and the API refuses it (both tell it by its box's seccomp
 * filter, lib/peerbox.c); its kill -9 -1 ends neither the broker nor the
 * neighbour of the same uid.
 */
Test(docker, a_restricted_pod_boxes_kernels_as_its_uid, .timeout = 180)
{
	if (landlock_abi() < 6) /* without the scoping it refuses to start */
		cr_skip_test("no Landlock scoping in this kernel (ABI %d)",
		             landlock_abi());
	const uid_t uid = 60997;
	char tok[] = "/var/tmp/docker_test.XXXXXX", path[64], code[2048];
	cr_assert_not_null(mkdtemp(tok));
	snprintf(path, sizeof(path), "%s/token", tok);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("s3cret-token\n", f);
	fclose(f);
	cr_assert_eq(chown(tok, uid, uid) | chown(path, uid, uid) | chmod(path, 0600), 0);
	const char *args[] = {"--no-default-context", "--pool", "python=0",
	                      "--access-token-file",  path,     NULL};
	struct broker b;
	struct resp r;

	harness_access_token("s3cret-token");
	cr_assert_eq(broker_start_restricted(&b, uid, args), 0);
	cr_assert_eq(http(b.b_url, "GET", "/ready", NULL, &r, 5), 0);
	json_t *j = json_loads(r.r_body, 0, NULL), *sb = json_object_get(j, "sandbox");
	cr_assert_str_eq(json_string_value(json_object_get(sb, "level")), "reduced", "%s",
	                 r.r_body);
	cr_assert(json_is_false(json_object_get(sb, "namespaces")), "%s", r.r_body);
	json_decref(j);
	resp_free(&r);
	char *id = context_new(b.b_url, "python", NULL),
	     *busy = context_new(b.b_url, "python", NULL);
	cr_assert(id && busy);
	pid_t nkernel = context_pid(b.b_url, busy, "kernel_pid");
	snprintf(code, sizeof(code),
	         "import os, socket, urllib.request\n"
	         "st = dict(l.split(':\\t') for l in "
	         "open('/proc/self/status').read().splitlines())\n"
	         "def tr(f):\n"
	         "    try:\n        f()\n        return 'done'\n"
	         "    except OSError as e:\n        return type(e).__name__\n"
	         "def ctl():\n"
	         "    s = socket.socket(socket.AF_UNIX)\n    s.settimeout(5)\n"
	         "    s.connect('%s/ctl.sock')\n"
	         "    s.send(b'\\x00SP\\x00\\x00\\x11\\x00\\x00')\n"
	         "    while s.recv(64):\n        pass\n"
	         "def api():\n"
	         "    try:\n        urllib.request.urlopen('%s/contexts', timeout=5)\n"
	         "    except urllib.error.HTTPError as e:\n        return e.code\n"
	         "print(os.getuid(), st['NoNewPrivs'], st['Seccomp'], tr(lambda: os.listdir('%s')),"
	         " tr(lambda: open('%s').read()), tr(ctl), api())",
	         b.b_run_dir, b.b_url, b.b_run_dir, path);
	char *out = run_stdout(b.b_url, id, code), want[64];
	/* ctl's connect is taken and closed at once (done), never kept open (timeout) */
	snprintf(want, sizeof(want), "%u 1 2 PermissionError PermissionError done 403\n",
	         (unsigned)uid);
	cr_assert_str_eq(out, want, "%s", out);
	free(out);
	json_decref(run(b.b_url, id,
	                "import subprocess\nsubprocess.run('kill -9 -1', shell=True)"));
	cr_assert_eq(kill(b.b_pid, 0), 0, "the broker is gone");
	cr_assert_eq(context_pid(b.b_url, busy, "kernel_pid"), nkernel,
	             "the neighbour restarted");
	free(id);
	free(busy);
	cr_assert_eq(broker_stop(&b), 0);
	harness_access_token(NULL);
	unlink(path);
	rmdir(tok);
}

/*
 * A Deno kernel (javascript) under shared isolation: it starts in its own
 * dir (no deno.json in its cwd), a host path, which a run dir under /tmp
 * (the image's, the harness's) puts under /tmp: the box's view of the cwd
 * must not take it for the box's /tmp.
 */
Test(docker, a_deno_kernel_runs_in_a_box_without_namespaces, .timeout = 120)
{
	char *id = context_new(URL, "javascript", NULL);
	cr_assert_not_null(id);
	char *out = run_stdout(URL, id, "console.log(6*7)");
	cr_assert_str_eq(out, "42\n", "%s", out);
	free(out);
	context_delete(URL, id);
	free(id);
}
