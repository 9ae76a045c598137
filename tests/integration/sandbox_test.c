/*
 * sandbox_test.c — hostile code run from inside contexts (python and bash):
 * each attack is refused, and the victim and the server are unharmed after.
 * Contexts are sandboxes by default; nothing here turns that on.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* no pool: a context's proxy dir is named by its id */
HARNESS_SHARED_BROKER("--pool", "python=0");

#define URL test_url()

static char *
keeper(const char *base)
{
	char *id = context_new(base, "python", NULL);

	cr_assert_not_null(id);
	json_decref(run(base, id, "kept = 'intact'"));
	return id;
}

static void
check_unharmed(const char *base, const char *keeper_id, pid_t broker)
{
	char *out = run_stdout(base, keeper_id, "print(kept)");
	struct resp r;

	cr_assert_str_eq(out, "intact\n", "the neighbour lost its state");
	free(out);
	cr_assert(broker <= 0 || kill(broker, 0) == 0, "the broker is gone");
	cr_assert_eq(http(base, "GET", "/health", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200, "the server is unhealthy after the attack");
	resp_free(&r);
}

static void
context_delete(const char *base, const char *id)
{
	char path[128];
	struct resp r;

	snprintf(path, sizeof(path), "/contexts/%s", id);
	cr_assert_eq(http(base, "DELETE", path, NULL, &r, 30), 0);
	cr_assert_eq(r.r_status, 200);
	resp_free(&r);
}

/* Whether a process of the host has exactly this argv[1]. */
static bool
process_with_arg(const char *arg)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool found = false;

	while (d && !found && (de = readdir(d))) {
		char buf[256];
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		size_t n = proc_cmdline(atoi(de->d_name), buf, sizeof(buf));
		size_t first = strlen(buf);
		found = first + 1 < n && !strcmp(buf + first + 1, arg);
	}
	if (d)
		closedir(d);
	return found;
}

static void
kill_everything_of_the_server_is_refused(const char *lang)
{
	char *victim = keeper(URL), *id = context_new(URL, lang, NULL), code[1024];
	pid_t broker = test_broker_pid(), proxy = context_pid(URL, id, "proxy_pid");
	pid_t nkernel = context_pid(URL, victim, "kernel_pid");

	cr_assert(id && broker > 0 && proxy > 0 && nkernel > 0);
	if (!strcmp(lang, "python"))
		snprintf(code, sizeof(code),
			 "import os\nfor p in (%d, %d, %d):\n    try:\n        os.kill(p, 9)\n"
			 "        print('killed', p)\n    except OSError:\n        print('refused')",
			 (int)broker, (int)proxy, (int)nkernel);
	else
		snprintf(code, sizeof(code),
			 "for p in %d %d %d; do kill -9 $p 2>/dev/null && echo killed $p || "
			 "echo refused; done",
			 (int)broker, (int)proxy, (int)nkernel);
	char *out = run_stdout(URL, id, code);
	cr_assert_str_eq(out, "refused\nrefused\nrefused\n", "%s: %s", lang, out);
	free(out);
	cr_assert_eq(kill(proxy, 0), 0, "the proxy is gone");
	cr_assert_eq(context_pid(URL, victim, "kernel_pid"), nkernel, "the neighbour restarted");
	check_unharmed(URL, victim, broker);
	free(victim);
	free(id);
}

Test(sandbox, kill_the_broker_a_proxy_or_a_neighbour_is_refused_python, .timeout = 120)
{
	kill_everything_of_the_server_is_refused("python");
}

Test(sandbox, kill_the_broker_a_proxy_or_a_neighbour_is_refused_bash, .timeout = 120)
{
	kill_everything_of_the_server_is_refused("bash");
}

/* The run dir, the control socket, the broker's environ, a neighbour's connection file. */
static void
server_files_are_out_of_reach(const char *lang)
{
	char *victim = keeper(URL), *id = context_new(URL, lang, NULL), code[2048];
	char conn[600], sock[600], environ_path[64];
	struct stat st;
	pid_t broker = test_broker_pid();

	cr_assert_not_null(id);
	snprintf(conn, sizeof(conn), "%s/ctx/%s/kernel/kernel.json", test_run_dir(), victim);
	snprintf(sock, sizeof(sock), "%s/ctl.sock", test_run_dir());
	snprintf(environ_path, sizeof(environ_path), "/proc/%d/environ", (int)broker);
	/* all there, seen from outside */
	cr_assert_eq(stat(conn, &st), 0, "%s", conn);
	cr_assert_eq(stat(sock, &st), 0);
	cr_assert_eq(stat(environ_path, &st), 0);
	if (!strcmp(lang, "python"))
		snprintf(code, sizeof(code),
			 "import os, socket\n"
			 "def t(f):\n    try:\n        f()\n        print('read')\n"
			 "    except OSError:\n        print('refused')\n"
			 "t(lambda: print(os.listdir('%s')))\n"
			 "t(lambda: socket.socket(socket.AF_UNIX).connect('%s'))\n"
			 "t(lambda: open('%s', 'rb').read())\n"
			 "t(lambda: open('%s').read())",
			 test_run_dir(), sock, environ_path, conn);
	else
		snprintf(code, sizeof(code),
			 "ls '%s' >/dev/null 2>&1 && echo read || echo refused\n"
			 "[ -S '%s' ] && echo read || echo refused\n"
			 "cat '%s' >/dev/null 2>&1 && echo read || echo refused\n"
			 "cat '%s' >/dev/null 2>&1 && echo read || echo refused",
			 test_run_dir(), sock, environ_path, conn);
	char *out = run_stdout(URL, id, code);
	cr_assert_str_eq(out, "refused\nrefused\nrefused\nrefused\n", "%s: %s", lang, out);
	free(out);
	check_unharmed(URL, victim, broker);
	free(victim);
	free(id);
}

Test(sandbox, server_files_are_out_of_reach_python, .timeout = 120)
{
	server_files_are_out_of_reach("python");
}

Test(sandbox, server_files_are_out_of_reach_bash, .timeout = 120)
{
	server_files_are_out_of_reach("bash");
}

static void
tmp_is_private(const char *lang)
{
	char *a = context_new(URL, lang, NULL), *b = context_new(URL, lang, NULL), code[512];
	char path[128];
	struct stat st;

	cr_assert(a && b);
	snprintf(path, sizeof(path), "/tmp/sandcell-secret-%d", (int)getpid());
	unlink(path);
	snprintf(code, sizeof(code), "echo secret > %s && cat %s", path, path);
	if (!strcmp(lang, "python"))
		snprintf(code, sizeof(code),
			 "open('%s', 'w').write('secret\\n')\nprint(open('%s').read(), end='')",
			 path, path);
	char *out = run_stdout(URL, a, code);
	cr_assert_str_eq(out, "secret\n", "the writer reads its own file");
	free(out);
	snprintf(code, sizeof(code), "cat %s 2>/dev/null || echo refused", path);
	if (!strcmp(lang, "python"))
		snprintf(code, sizeof(code),
			 "try:\n    print(open('%s').read(), end='')\nexcept OSError:\n"
			 "    print('refused')",
			 path);
	out = run_stdout(URL, b, code);
	cr_assert_str_eq(out, "refused\n", "%s: a neighbour read %s", lang, out);
	free(out);
	cr_assert(stat(path, &st) < 0, "the context's /tmp is the host's");
	free(a);
	free(b);
}

Test(sandbox, a_neighbours_tmp_is_invisible_python, .timeout = 120)
{
	tmp_is_private("python");
}

Test(sandbox, a_neighbours_tmp_is_invisible_bash, .timeout = 120)
{
	tmp_is_private("bash");
}

/* Refused by the seccomp filter with EPERM, not by a kill. */
Test(sandbox, ptrace_is_refused_with_eperm, .timeout = 120)
{
	char *victim = keeper(URL), *id = context_new(URL, "python", NULL), code[1024];
	pid_t nkernel = context_pid(URL, victim, "kernel_pid");

	cr_assert(id && nkernel > 0);
	snprintf(code, sizeof(code),
		 "import ctypes, errno, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
		 "pid = os.fork()\nif pid == 0:\n    time.sleep(30)\n    os._exit(0)\n"
		 "r = libc.ptrace(16, pid, 0, 0)\nown = ctypes.get_errno()\n"
		 "r2 = libc.ptrace(16, %d, 0, 0)\nos.kill(pid, 9)\nos.waitpid(pid, 0)\n"
		 "print(r, errno.errorcode[own], r2)",
		 (int)nkernel);
	char *out = run_stdout(URL, id, code);
	cr_assert_str_eq(out, "-1 EPERM -1\n");
	free(out);
	check_unharmed(URL, victim, test_broker_pid());
	free(victim);
	free(id);
}

/*
 * A cold box's init (a clone of the proxy) has the kernel's uid, and holds
 * the proxy's socket: the kernel cannot open its /proc/1/mem, take that
 * socket (pidfd_getfd) or ptrace it. (A forked box's: template_test.c.)
 */
Test(sandbox, the_kernel_cannot_reach_into_its_cold_init, .timeout = 120)
{
	char *id = context_new(URL, "bash", NULL), code[4096];

	cr_assert_not_null(id);
	snprintf(code, sizeof(code), "python3 - <<'EOF'\n%sEOF", init_probe_py);
	char *out = run_stdout(URL, id, code);
	cr_assert_str_eq(out, "denied denied denied\n", "the kernel reaches into its init: %s", out);
	free(out);
	free(id);
}

Test(sandbox, no_privilege_to_gain_through_a_setuid_binary, .timeout = 120)
{
	char *id = context_new(URL, "bash", NULL);
	struct stat st;

	cr_assert_not_null(id);
	if (stat("/usr/bin/su", &st) < 0 || !(st.st_mode & S_ISUID) || st.st_uid != 0)
		cr_skip_test("no setuid-root su here");
	char *out = run_stdout(URL, id,
			   "su root -c 'id -u' </dev/null 2>/dev/null || echo refused\n"
			   "grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd):' /proc/self/status\n"
			   "[ \"$(id -u)\" != 0 ] && echo not-root");
	cr_assert_str_eq(out,
			 "refused\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
			 "CapBnd:\t0000000000000000\nNoNewPrivs:\t1\nnot-root\n",
			 "%s", out);
	free(out);
	free(id);
}

/*
 * A context's pids cgroup (proxy/sandbox.c): "sandcell/<id>" under v1's pids
 * hierarchy where it is mounted, else under the v2 root.
 */
static void
pids_cgroup(const char *id, char *path, size_t len)
{
	struct stat st;

	if (stat("/sys/fs/cgroup/pids", &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(path, len, "/sys/fs/cgroup/pids/sandcell/%s", id);
	else
		snprintf(path, len, "/sys/fs/cgroup/sandcell/%s", id);
}

static bool
path_gone(void *path)
{
	return access(path, F_OK) != 0;
}

static bool
arg_runs(void *arg)
{
	return process_with_arg(arg);
}

static bool
arg_gone(void *arg)
{
	return !process_with_arg(arg);
}

/* A setsid child is still the context's: it ends with it, as does the box's cgroup. */
Test(sandbox, delete_ends_every_process_of_the_context, .timeout = 120)
{
	char *id = context_new(URL, "python", NULL), code[512], arg[32], cg[256];

	cr_assert_not_null(id);
	snprintf(arg, sizeof(arg), "%d.25", 3000 + (int)getpid() % 1000);
	snprintf(code, sizeof(code),
		 "import subprocess\nsubprocess.Popen(['setsid', 'sleep', '%s'], "
		 "start_new_session=True)\nprint('started')",
		 arg);
	char *out = run_stdout(URL, id, code);
	cr_assert_str_eq(out, "started\n");
	free(out);
	cr_assert_eq(wait_until(arg_runs, arg, 5000), 0, "the detached child never ran");
	pids_cgroup(id, cg, sizeof(cg));
	cr_assert(access(cg, F_OK) == 0, "the context has no pids cgroup %s", cg);
	context_delete(URL, id);
	cr_assert_eq(wait_until(arg_gone, arg, 10000), 0, "a setsid child outlived its context");
	cr_assert_eq(wait_until(path_gone, cg, 10000), 0, "the context's cgroup %s is left", cg);
	free(id);
}

/* The process limit holds a fork bomb; the neighbour and the server carry on. */
Test(sandbox, fork_bomb_is_contained, .timeout = 180)
{
	struct broker b;
	const char *args[] = {"--no-default-context", "--pool", "python=0", "--kernel-pids",
			      "64", NULL};

	cr_assert_eq(broker_start(&b, args), 0);
	char *victim = keeper(b.b_url), *py = context_new(b.b_url, "python", NULL);
	char *sh = context_new(b.b_url, "bash", NULL);
	cr_assert(py && sh);
	char *out = run_stdout(b.b_url, py,
			   "import os, time\nn = 0\ntry:\n    while n < 5000:\n"
			   "        if os.fork() == 0:\n            time.sleep(120)\n"
			   "            os._exit(0)\n        n += 1\n"
			   "except OSError as e:\n    print('refused', n < 64, e.errno)");
	cr_assert_str_eq(out, "refused True 11\n", "%s", out);
	free(out);
	/* a real bomb in bash: it runs into the limit and stays there */
	long status;
	json_t *l = execute_code(b.b_url, sh, "b() { b | b & }; b; sleep 3; echo done",
				 "{\"timeout\":8}", 30000, &status);
	json_decref(l);
	check_unharmed(b.b_url, victim, b.b_pid);
	context_delete(b.b_url, py);
	context_delete(b.b_url, sh);
	char cg[256];
	pids_cgroup(sh, cg, sizeof(cg));
	cr_assert_eq(wait_until(path_gone, cg, 10000), 0, "the bomb's cgroup %s is left", cg);
	check_unharmed(b.b_url, victim, b.b_pid);
	free(victim);
	free(py);
	free(sh);
	cr_assert_eq(broker_stop(&b), 0);
}

Test(sandbox, filling_tmp_stops_at_its_size, .timeout = 120)
{
	struct broker b;
	const char *args[] = {"--no-default-context", "--pool", "python=0", "--kernel-tmp-size",
			      "33554432", NULL};

	cr_assert_eq(broker_start(&b, args), 0);
	char *victim = keeper(b.b_url), *id = context_new(b.b_url, "python", NULL);
	cr_assert_not_null(id);
	char *out = run_stdout(b.b_url, id,
			   "n = 0\ntry:\n    with open('/tmp/fill', 'wb') as f:\n"
			   "        while n < 1024:\n            f.write(b'x' * (1 << 20))\n"
			   "            f.flush()\n            n += 1\n"
			   "except OSError as e:\n    print('full', e.errno, n <= 32)");
	cr_assert_str_eq(out, "full 28 True\n", "%s", out);
	free(out);
	check_unharmed(b.b_url, victim, b.b_pid);
	free(victim);
	free(id);
	cr_assert_eq(broker_stop(&b), 0);
}

/* The token is gone from the broker's environment block, not only unset. */
Test(sandbox, access_token_is_not_in_the_brokers_environ, .timeout = 60)
{
	struct broker b;
	const char *args[] = {"--no-default-context", NULL};
	const char *token = "sandcell-env-token-never-seen";
	char path[64], buf[65536];

	setenv("SANDCELL_ACCESS_TOKEN", token, 1);
	int rc = broker_start(&b, args);
	unsetenv("SANDCELL_ACCESS_TOKEN");
	cr_assert_eq(rc, 0);
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)b.b_pid);
	int fd = open(path, O_RDONLY);
	cr_assert(fd >= 0);
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	cr_assert(n > 0);
	cr_assert_null(memmem(buf, n, token, strlen(token)), "the token is in %s", path);
	cr_assert_eq(broker_stop(&b), 0);
}

Test(sandbox, no_network_with_kernel_network_none, .timeout = 120)
{
	struct broker b;
	const char *args[] = {"--no-default-context", "--pool", "python=0", "--kernel-network",
			      "none", NULL};
	char code[512];

	/* the same connection succeeds from a context of the host's network */
	char *host = context_new(URL, "python", NULL);
	cr_assert_not_null(host);
	const char *port = strrchr(URL, ':') + 1;
	snprintf(code, sizeof(code),
		 "import socket\ntry:\n    socket.create_connection(('127.0.0.1', %s), 3).close()\n"
		 "    print('connected')\nexcept OSError:\n    print('refused')",
		 port);
	char *out = run_stdout(URL, host, code);
	cr_assert_str_eq(out, "connected\n");
	free(out);
	free(host);

	cr_assert_eq(broker_start(&b, args), 0);
	char *id = context_new(b.b_url, "python", NULL);
	cr_assert_not_null(id);
	out = run_stdout(b.b_url, id, code);
	cr_assert_str_eq(out, "refused\n", "a context without network reached the server");
	free(out);
	out = run_stdout(b.b_url, id,
		     "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\n"
		     "c = socket.create_connection(s.getsockname(), 3)\nprint('loopback works')");
	cr_assert_str_eq(out, "loopback works\n");
	free(out);
	free(id);
	/* Deno speaks TCP to its proxy: inside the namespace they share */
	id = context_new(b.b_url, "javascript", NULL);
	cr_assert_not_null(id);
	out = run_stdout(b.b_url, id, "console.log(6 * 7)");
	cr_assert_str_eq(out, "42\n");
	free(out);
	free(id);
	cr_assert_eq(broker_stop(&b), 0);
}

/*
 * The host's network is the default, so the broker's port is in reach of a
 * context; its API is not. A request for a neighbour's data is answered 403.
 * Two requests that would change the neighbour are sent and not waited for:
 * one on a connection left open (run, it would change the neighbour before
 * this test looks), one on a connection closed at once (refused whether the
 * broker looks it up before or after the close). The neighbour keeps its
 * state. A client of the machine (this test, another uid) is served as before.
 */
Test(sandbox, a_context_cannot_call_the_servers_api, .timeout = 120)
{
	char code[2048];
	const char *port = strrchr(URL, ':') + 1;

	if (geteuid() != 0)
		cr_skip_test("not root: kernels are the broker's uid on the host");
	char *victim = keeper(URL), *attacker = context_new(URL, "python", NULL);
	cr_assert_not_null(attacker);
	snprintf(code, sizeof(code),
		 "import json, socket, urllib.request, urllib.error\n"
		 "def call(path, body=None):\n"
		 "    data = json.dumps(body).encode() if body else None\n"
		 "    rq = urllib.request.Request('http://127.0.0.1:%s' + path, data=data,\n"
		 "                                headers={'Content-Type': 'application/json'})\n"
		 "    try:\n"
		 "        return urllib.request.urlopen(rq, timeout=10).status\n"
		 "    except urllib.error.HTTPError as e:\n"
		 "        return e.code\n"
		 "print(call('/health'), call('/contexts'),\n"
		 "      call('/execute', {'context_id': '%s', 'code': 'print(kept)'}))\n"
		 "b = json.dumps({'context_id': '%s', 'code': 'kept = \"changed\"'}).encode()\n"
		 "req = (b'POST /execute HTTP/1.1\\r\\nHost: x\\r\\n'\n"
		 "       b'Content-Type: application/json\\r\\n'\n"
		 "       b'Content-Length: %%d\\r\\n\\r\\n' %% len(b) + b)\n"
		 "left_open = socket.create_connection(('127.0.0.1', %s), 10)\n"
		 "left_open.sendall(req)\n"
		 "s = socket.create_connection(('127.0.0.1', %s), 10)\n"
		 "s.sendall(req)\n"
		 "s.close()\n"
		 "print('sent')\n",
		 port, victim, victim, port, port);
	char *out = run_stdout(URL, attacker, code);
	cr_assert_str_eq(out, "403 403 403\nsent\n", "a context called the API: %s", out);
	free(out);
	check_unharmed(URL, victim, 0);
	context_delete(URL, attacker);
	context_delete(URL, victim);
	free(attacker);
	free(victim);
}

/*
 * Connections from a context wait for their 403 like any other for its
 * request; past a few waiting they are closed at once, so a context holding
 * hundreds open does not take the places of the clients' (here a broker
 * with room for 40).
 */
Test(sandbox, a_context_holding_connections_open_leaves_room_for_clients, .timeout = 120)
{
	struct broker b;
	const char *args[] = {"--no-default-context", "--pool", "python=0", "--max-connections",
			      "40", NULL};
	char code[512];

	if (geteuid() != 0)
		cr_skip_test("not root: kernels are the broker's uid on the host");
	cr_assert_eq(broker_start(&b, args), 0);
	char *id = context_new(b.b_url, "python", NULL);
	cr_assert_not_null(id);
	snprintf(code, sizeof(code),
		 "import socket, time\n"
		 "held = [socket.create_connection(('127.0.0.1', %d), 5) for _ in range(200)]\n"
		 "print('held', flush=True)\n"
		 "time.sleep(60)\n",
		 b.b_port);
	struct bg hold = {.base = b.b_url, .ctx = id, .code = code};
	bg_start(&hold);
	cr_assert_eq(bg_wait_stdout(&hold, 30000), 0, "the connections were not opened");
	for (int i = 0; i < 3; i++) {
		struct resp r;
		cr_assert_eq(http(b.b_url, "GET", "/health", NULL, &r, 5), 0,
			     "a client found no room beside the context's connections");
		cr_assert_eq(r.r_status, 200);
		resp_free(&r);
	}
	cr_assert_eq(context_post(b.b_url, id, "interrupt", 10), 200); /* let go of them */
	bg_join(&hold);
	json_decref(hold.lines);
	free(id);
	cr_assert_eq(broker_stop(&b), 0);
}

Test(sandbox, context_shows_its_box, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL), path[128];
	struct resp r;

	cr_assert_not_null(id);
	snprintf(path, sizeof(path), "/contexts/%s", id);
	cr_assert_eq(http(URL, "GET", path, NULL, &r, 5), 0);
	json_t *j = json_loads(r.r_body, 0, NULL), *box = json_object_get(j, "sandbox");
	resp_free(&r);
	cr_assert(json_is_true(json_object_get(box, "enabled")), "no sandbox in %s", path);
	json_int_t uid = json_integer_value(json_object_get(box, "uid"));
	cr_assert(uid > 0 && uid != (json_int_t)geteuid(), "uid %lld", (long long)uid);
	cr_assert_str_eq(json_string_value(json_object_get(box, "isolation")), "shared");
	cr_assert(json_integer_value(json_object_get(box, "pids_max")) > 0);
	char code[64];
	snprintf(code, sizeof(code), "import os; print(os.getuid())");
	char *out = run_stdout(URL, id, code), want[32];
	snprintf(want, sizeof(want), "%lld\n", (long long)uid);
	cr_assert_str_eq(out, want);
	free(out);
	json_decref(j);
	free(id);
}

/* The uid change clears PR_SET_PDEATHSIG: the box's init sets it again. */
Test(sandbox, a_killed_proxy_takes_its_box_along, .timeout = 60)
{
	char *id = context_new(URL, "python", NULL);
	cr_assert_not_null(id);
	pid_t proxy = context_pid(URL, id, "proxy_pid"), kpid = context_pid(URL, id, "kernel_pid");

	cr_assert(proxy > 0 && kpid > 0);
	cr_assert_eq(kill(proxy, SIGKILL), 0);
	cr_assert_eq(wait_pid_gone(kpid, 5000), 0, "the kernel %d outlived its proxy", (int)kpid);
	free(id);
}

static char *
cwd_of(const char *base, const char *id)
{
	char path[128];
	struct resp r;
	char *cwd = NULL;

	snprintf(path, sizeof(path), "/contexts/%s", id);
	if (http(base, "GET", path, NULL, &r, 5) == 0 && r.r_status == 200) {
		json_t *j = json_loads(r.r_body, 0, NULL);
		const char *s = json_string_value(json_object_get(j, "cwd"));
		cwd = s ? strdup(s) : NULL;
		json_decref(j);
	}
	resp_free(&r);
	return cwd;
}

Test(sandbox, isolation_context_hides_a_neighbours_workspace, .timeout = 180)
{
	struct broker b;
	const char *args[] = {"--no-default-context", "--isolation", "context", NULL};
	char code[1024], ws[600];
	struct stat st;

	cr_assert_eq(broker_start(&b, args), 0);
	char *a = context_new(b.b_url, "python", NULL), *v = context_new(b.b_url, "bash", NULL);
	cr_assert(a && v);
	char *acwd = cwd_of(b.b_url, a), *vcwd = cwd_of(b.b_url, v);
	cr_assert(acwd && vcwd && strcmp(acwd, vcwd), "one workspace for two contexts");
	char *out = run_stdout(b.b_url, v, "echo private > mine.txt && cat mine.txt && id -u");
	unsigned vuid = 0;
	cr_assert_eq(sscanf(out, "private\n%u", &vuid), 1, "%s", out);
	free(out);
	snprintf(ws, sizeof(ws), "%s/mine.txt", vcwd);
	cr_assert_eq(stat(ws, &st), 0, "the file is not in the workspace %s", vcwd);
	snprintf(code, sizeof(code),
		 "import os\nprint(os.getuid() != %u)\n"
		 "def t(f):\n    try:\n        f()\n        print('read')\n"
		 "    except OSError:\n        print('refused')\n"
		 "t(lambda: open('%s').read())\n"
		 "t(lambda: os.listdir('%s'))\n"
		 "t(lambda: os.listdir(os.path.dirname('%s')))",
		 vuid, ws, vcwd, vcwd);
	out = run_stdout(b.b_url, a, code);
	cr_assert_str_eq(out, "True\nrefused\nrefused\nrefused\n", "%s", out);
	free(out);
	context_delete(b.b_url, v);
	cr_assert_eq(wait_until(path_gone, vcwd, 10000), 0,
		     "a deleted context's workspace %s is left", vcwd);
	free(acwd);
	free(vcwd);
	free(a);
	free(v);
	cr_assert_eq(broker_stop(&b), 0);
}

/*
 * Brokers on one machine share the host's uids, and each hides only its own
 * run dir from its kernels: a uid of --kernel-uid-range is one broker's at a
 * time (broker/uidlease.c), and a uid some process already runs as (a kernel
 * a dead broker left behind, a systemd DynamicUser service) is not handed out.
 */
static struct broker other, other2;
static pid_t uid_holder;

static void
others_stop(void)
{
	if (other.b_pid > 0)
		broker_stop(&other);
	if (other2.b_pid > 0)
		broker_stop(&other2);
	if (uid_holder > 0) {
		kill(uid_holder, SIGKILL);
		waitpid(uid_holder, NULL, 0);
	}
}

static long host_uid_of(pid_t pid);

/* Whether a process of this machine runs as *uid (real uid); for wait_until. */
static bool
uid_runs(void *uid)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool found = false;

	while (d && !found && (de = readdir(d)))
		found = de->d_name[0] >= '1' && de->d_name[0] <= '9' &&
			host_uid_of(atoi(de->d_name)) == *(long *)uid;
	if (d)
		closedir(d);
	return found;
}

static bool
uid_idle(void *uid)
{
	return !uid_runs(uid);
}

static unsigned
uid_of(const char *base, const char *id)
{
	char *out = run_stdout(base, id, "import os; print(os.getuid())");
	unsigned u = 0;

	cr_assert_eq(sscanf(out ? out : "", "%u", &u), 1, "uid: %s", out ? out : "(none)");
	free(out);
	return u;
}

Test(sandbox, two_brokers_on_one_machine_give_their_kernels_other_uids, .fini = others_stop,
     .timeout = 240)
{
	const char *shared[] = {"--no-default-context", NULL};
	const char *isolated[] = {"--no-default-context", "--isolation", "context", NULL};
	char *k = keeper(URL);
	unsigned u0 = uid_of(URL, k);

	cr_assert_eq(broker_start(&other, shared), 0);
	char *a = context_new(other.b_url, "python", NULL);
	cr_assert_not_null(a);
	unsigned u1 = uid_of(other.b_url, a);
	cr_assert_eq(broker_start(&other2, isolated), 0);
	char *c = context_new(other2.b_url, "python", NULL);
	cr_assert_not_null(c);
	unsigned u2 = uid_of(other2.b_url, c);
	cr_assert(u0 != u1 && u0 != u2 && u1 != u2,
		  "the test broker's kernels run as %u, a second broker's as %u, a third's as %u",
		  u0, u1, u2);
	/* a broker that died and comes back keeps its uid: its kept kernels run as it */
	kill(other.b_pid, SIGKILL);
	waitpid(other.b_pid, NULL, 0);
	cr_assert_eq(broker_restart(&other, shared), 0);
	cr_assert_eq(uid_of(other.b_url, a), u1, "the kept context");
	char *a2 = context_new(other.b_url, "python", NULL);
	cr_assert_not_null(a2);
	cr_assert_eq(uid_of(other.b_url, a2), u1, "a new context beside the kept one");
	free(a2);
	free(a);
	free(c);
	free(k);
	cr_assert_eq(broker_stop(&other), 0); /* no sanitizer report */
	cr_assert_eq(broker_stop(&other2), 0);
}

Test(sandbox, a_restarted_broker_keeps_its_uid_when_a_lower_one_is_free, .fini = others_stop,
     .timeout = 240)
{
	/* no pool: a kept pooled kernel would answer the new context */
	const char *args[] = {"--no-default-context", "--pool", "0", "--kernel-uid-range",
			      "64010-64013", NULL};

	cr_assert_eq(broker_start(&other, args), 0);
	char *a = context_new(other.b_url, "python", NULL);
	cr_assert_not_null(a);
	cr_assert_eq(uid_of(other.b_url, a), 64010);
	cr_assert_eq(broker_start(&other2, args), 0);
	char *b = context_new(other2.b_url, "python", NULL);
	cr_assert_not_null(b);
	cr_assert_eq(uid_of(other2.b_url, b), 64011, "the first broker's uid was handed out");
	cr_assert_eq(broker_stop(&other), 0); /* 64010 is free again, once its kernel is gone */
	long freed = 64010;
	cr_assert_eq(wait_until(uid_idle, &freed, 20000), 0, "the stopped broker's kernel still runs");
	kill(other2.b_pid, SIGKILL);
	waitpid(other2.b_pid, NULL, 0);
	cr_assert_eq(broker_restart(&other2, args), 0);
	char *b2 = context_new(other2.b_url, "python", NULL);
	cr_assert_not_null(b2);
	cr_assert_eq(uid_of(other2.b_url, b2), 64011, "not the uid of its kept context");
	cr_assert_eq(uid_of(other2.b_url, b), 64011);
	free(a);
	free(b);
	free(b2);
	cr_assert_eq(broker_stop(&other2), 0);
}

/* A lease file is there while a uid may run a context of the broker. */
static bool
leased(void *uid)
{
	char path[64];

	snprintf(path, sizeof(path), "/run/sandcell-uids/%ld", *(long *)uid);
	return access(path, F_OK) == 0;
}

static bool
unleased(void *uid)
{
	return !leased(uid);
}

/*
 * A uid no context of the broker runs as any more (its context deleted, or
 * every context ended at a stop) is let go with its lease file: brokers that
 * come and go leave nothing in /run/sandcell-uids. A broker killed with its
 * contexts running leaves its file, naming its run dir, for its next start.
 */
Test(sandbox, a_uid_no_context_runs_as_any_more_leaves_no_lease_file, .fini = others_stop,
     .timeout = 120)
{
	const char *shared[] = {"--no-default-context", "--pool", "0", "--kernel-uid-range",
				"64020-64023", NULL};
	const char *isolated[] = {"--no-default-context", "--isolation", "context",
				  "--kernel-uid-range", "64024-64027", NULL};

	cr_assert_eq(broker_start(&other, shared), 0);
	char *a = context_new(other.b_url, "python", NULL);
	cr_assert_not_null(a);
	long u1 = uid_of(other.b_url, a);
	cr_assert(leased(&u1), "no lease file for uid %ld", u1);
	cr_assert_eq(broker_start(&other2, isolated), 0);
	char *c = context_new(other2.b_url, "python", NULL);
	cr_assert_not_null(c);
	long u2 = uid_of(other2.b_url, c);
	cr_assert(leased(&u2), "no lease file for uid %ld", u2);

	context_delete(other2.b_url, c);
	cr_assert_eq(wait_until(unleased, &u2, 10000), 0, "a deleted context's uid stays leased");
	cr_assert_eq(broker_stop(&other), 0);
	cr_assert(!leased(&u1), "a stopped broker's uid stays leased");
	free(a);
	free(c);
}

/* How many contexts a broker's log says it created (a proxy each). */
static int
created_in_log(const struct broker *b)
{
	char *log = broker_log(b), *p = log;
	int n = 0;

	while ((p = strstr(p, ": created ")))
		n++, p++;
	free(log);
	return n;
}

/* POST /contexts with cwd /root: 400 naming it and why, no proxy started for it. */
static void
root_cwd_refused_at_once(struct broker *b)
{
	struct resp r;
	int before = created_in_log(b);

	cr_assert_eq(http(b->b_url, "POST", "/contexts", "{\"cwd\": \"/root\"}", &r, 60), 0);
	cr_assert_eq(r.r_status, 400, "%ld %s", r.r_status, r.r_body);
	cr_assert(strstr(r.r_body, "/root") && strstr(r.r_body, "cannot enter it"), "%s",
		  r.r_body);
	resp_free(&r);
	cr_assert_eq(created_in_log(b), before, "a context was started for it");
}

/*
 * E2B's SDK suites create contexts with cwd /root. A boxed kernel is not root:
 * the broker checks the cwd as the kernel's uid and answers 400 at once, with
 * no kernel started for it (it once crash-looped the kernel three times and
 * answered 500), in either isolation mode.
 */
Test(sandbox, a_cwd_the_kernels_uid_cannot_enter_is_400_at_once, .fini = others_stop,
     .timeout = 120)
{
	const char *shared[] = {"--no-default-context", "--pool", "0", NULL};
	const char *isolated[] = {"--no-default-context", "--isolation", "context", NULL};

	cr_assert_eq(broker_start(&other, shared), 0);
	root_cwd_refused_at_once(&other);
	cr_assert_eq(broker_start(&other2, isolated), 0);
	root_cwd_refused_at_once(&other2);
}

Test(sandbox, a_uid_a_process_already_runs_as_is_not_handed_out, .fini = others_stop,
     .timeout = 120)
{
	const char *args[] = {"--no-default-context", "--kernel-uid-range", "64000-64003", NULL};

	if ((uid_holder = fork()) == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (setresgid(64000, 64000, 64000) == 0 && setresuid(64000, 64000, 64000) == 0)
			pause();
		_exit(1);
	}
	cr_assert(uid_holder > 0);
	long held = 64000;
	cr_assert_eq(wait_until(uid_runs, &held, 10000), 0, "the holder never ran as 64000");
	cr_assert_eq(broker_start(&other, args), 0);
	char *a = context_new(other.b_url, "python", NULL);
	cr_assert_not_null(a);
	cr_assert_eq(uid_of(other.b_url, a), 64001, "a uid in use was handed out");
	free(a);
	cr_assert_eq(broker_stop(&other), 0);
}

/*
 * Deno speaks only TCP to its proxy. On the host's network its ports are on
 * the host's loopback, where another context could subscribe to its output
 * (reading needs no key). Under --isolation context its box gets a network of
 * its own; a Python context keeps the host's.
 */
Test(sandbox, isolation_context_gives_deno_a_network_of_its_own, .timeout = 180)
{
	struct broker b;
	const char *args[] = {"--no-default-context", "--isolation", "context", NULL};

	cr_assert_eq(broker_start(&b, args), 0);
	char *js = context_new(b.b_url, "javascript", NULL), *py = context_new(b.b_url, "python", NULL);
	cr_assert(js && py, "no javascript context (Deno installed?)");
	char *out = run_stdout(b.b_url, js, "console.log(6 * 7)");
	cr_assert_str_eq(out, "42\n");
	free(out);
	json_t *c = context_get(b.b_url, js);
	json_t *sb = json_object_get(c, "sandbox");
	cr_assert_str_eq(json_string_value(json_object_get(sb, "network")), "none");
	json_decref(c);
	unsigned long host = proc_ns_ino(getpid(), "net"),
		      js_ns = proc_ns_ino(context_pid(b.b_url, js, "kernel_pid"), "net"),
		      py_ns = proc_ns_ino(context_pid(b.b_url, py, "kernel_pid"), "net");
	cr_assert(host && js_ns && py_ns, "a network namespace could not be read");
	cr_assert_neq(js_ns, host, "Deno is on the host's network");
	cr_assert_eq(py_ns, host, "the python context lost the host's network");
	free(js);
	free(py);
	cr_assert_eq(broker_stop(&b), 0);
}

/* The memory limit is the box's memory cgroup: V8 reserves address space at
 * start, which RLIMIT_DATA refused (SIGTRAP at start-up). */
Test(sandbox, deno_starts_under_a_memory_limit, .timeout = 120)
{
	struct broker b;
	const char *args[] = {"--no-default-context", "--kernel-memory", "1000000000", NULL};

	cr_assert_eq(broker_start(&b, args), 0);
	char *id = context_new(b.b_url, "javascript", NULL);
	cr_assert_not_null(id, "no javascript context under --kernel-memory");
	char *out = run_stdout(b.b_url, id, "console.log(6 * 7)");
	cr_assert_str_eq(out, "42\n");
	free(out);
	free(id);
	cr_assert_eq(broker_stop(&b), 0);
}

/* Kernels start clean: no stray descriptor of the proxy's, SIGPIPE not ignored. */
Test(sandbox, kernels_inherit_no_stray_fd_and_default_sigpipe, .timeout = 90)
{
	char *r = context_new(URL, "r", NULL);

	cr_assert_not_null(r);
	/* R opens no /dev/null of its own (ipykernel does) */
	char *out = run_stdout(URL, r,
			   "fds <- list.files('/proc/self/fd', full.names = TRUE)\n"
			   "l <- Sys.readlink(fds)\n"
			   "cat('stray', sum(l == '/dev/null' & as.integer(basename(fds)) > 2, na.rm = TRUE), '\\n')");
	cr_assert_str_eq(out, "stray 0 \n", "%s", out);
	free(out);
	/* R leaves SIGPIPE as it found it: what its children inherit */
	out = run_stdout(URL, r,
		     "m <- system(\"awk '/SigIgn/{print $2}' /proc/self/status\", intern = TRUE)\n"
		     "cat('sigpipe-ignored', bitwAnd(strtoi(substr(m, 13, 16), 16L), 4096L) > 0, '\\n')");
	cr_assert_str_eq(out, "sigpipe-ignored FALSE \n", "%s", out);
	free(out);
	free(r);
}

/* A client's cwd in the run dir (or above it) does not bring the run dir back. */
Test(sandbox, a_cwd_in_the_run_dir_does_not_show_it, .timeout = 120)
{
	char body[700], path[600];
	struct resp r;

	snprintf(path, sizeof(path), "%s/ctx", test_run_dir());
	snprintf(body, sizeof(body), "{\"cwd\":\"%s\"}", path);
	cr_assert_eq(http(URL, "POST", "/contexts", body, &r, 90), 0);
	json_t *j = r.r_status == 200 ? json_loads(r.r_body, 0, NULL) : NULL;
	resp_free(&r);
	if (!j)
		return; /* refused: the kernel could not start there */
	const char *id = json_string_value(json_object_get(j, "id"));
	char *out = run_stdout(URL, id,
			   "import os\ntry:\n    print(len(os.listdir('.')) > 0)\n"
			   "except OSError:\n    print('refused')");
	cr_assert_neq(strcmp(out, "True\n"), 0, "the run dir is listed: %s", out);
	free(out);
	json_decref(j);
}

/*
 * Not root: a broker run as an unprivileged uid boxes its kernels with a user
 * namespace. The box keeps everything but a uid of its own on the host.
 */
#define ROOTLESS_UID 65534
static struct broker rootless;

static void
rootless_start(void)
{
	/* a memory limit without cgroups of its own is RLIMIT_DATA */
	static const char *const args[] = {"--no-default-context", "--pool", "python=0",
					   "--kernel-memory", "2G", NULL};

	cr_assert_eq(broker_start_as(&rootless, ROOTLESS_UID, args), 0,
		     "a broker as uid %d did not start", ROOTLESS_UID);
}

static void
rootless_stop(void)
{
	broker_stop(&rootless);
}

/* The uid a host process runs as, from its /proc status; -1 if none. */
static long
host_uid_of(pid_t pid)
{
	char path[64], line[256];
	long uid = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Uid: %ld", &uid) == 1)
			break;
	fclose(f);
	return uid;
}

static void
rootless_box(const char *lang)
{
	const char *base = rootless.b_url;
	char *id = context_new(base, lang, NULL), code[2048], path[128];
	pid_t proxy = context_pid(base, id, "proxy_pid");
	pid_t kernel = context_pid(base, id, "kernel_pid");
	bool py = !strcmp(lang, "python");

	cr_assert(id && proxy > 0 && kernel > 0);
	/* on the host the kernel is the broker's uid: that is what a user namespace maps */
	cr_assert_eq(host_uid_of(kernel), ROOTLESS_UID);
	if (py)
		snprintf(code, sizeof(code),
			 "import os\n"
			 "for p in (%d, %d):\n"
			 "    try:\n        os.kill(p, 0)\n        print('seen', p)\n"
			 "    except OSError:\n        print('hidden')\n"
			 "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
			 "print('own pids' if len(pids) < 10 and '1' in pids else pids)\n"
			 "for f in ('ctl.sock', 'broker.lock'):\n"
			 "    print('seen ' + f if os.path.exists('%s/' + f) else 'hidden')\n"
			 "st = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines())\n"
			 "print(st['CapEff'], st['CapPrm'], st['CapBnd'], os.getuid())",
			 (int)rootless.b_pid, (int)proxy, rootless.b_run_dir);
	else
		snprintf(code, sizeof(code),
			 "for p in %d %d; do kill -0 $p 2>/dev/null && echo seen $p || echo hidden; done\n"
			 "n=$(ls /proc | grep -c '^[0-9]'); [ \"$n\" -lt 10 ] && echo own pids || echo $n pids\n"
			 "for f in ctl.sock broker.lock; do [ -e %s/$f ] && echo seen $f || echo hidden; done\n"
			 "echo $(awk '/^Cap(Eff|Prm|Bnd)/ {print $2}' /proc/self/status) $(id -u)",
			 (int)rootless.b_pid, (int)proxy, rootless.b_run_dir);
	char *out = run_stdout(base, id, code);
	cr_assert_str_eq(out,
			 "hidden\nhidden\nown pids\nhidden\nhidden\n"
			 "0000000000000000 0000000000000000 0000000000000000 1000\n",
			 "%s: %s", lang, out);
	free(out);
	/* its init has its uid too, and is out of its reach */
	if (py)
		snprintf(code, sizeof(code), "%s", init_probe_py);
	else
		snprintf(code, sizeof(code), "python3 - <<'EOF'\n%sEOF", init_probe_py);
	out = run_stdout(base, id, code);
	cr_assert_str_eq(out, "denied denied denied\n", "%s reaches into its init: %s", lang, out);
	free(out);
	json_decref(run(base, id, py ? "x = 41" : "x=41"));
	out = run_stdout(base, id, py ? "print(x + 1)" : "echo $((x + 1))");
	cr_assert_str_eq(out, "42\n", "%s lost its state: %s", lang, out);
	free(out);
	snprintf(path, sizeof(path), "/contexts/%s", id);
	json_t *j = context_get(base, id), *box = json_object_get(j, "sandbox");
	cr_assert(json_is_true(json_object_get(box, "user_namespace")), "%s", path);
	cr_assert_eq(json_integer_value(json_object_get(box, "uid")), 1000);
	cr_assert_eq(json_integer_value(json_object_get(box, "host_uid")), ROOTLESS_UID);
	json_decref(j);
	cr_assert_eq(kill(rootless.b_pid, 0), 0, "the broker is gone");
	free(id);
}

Test(sandbox, rootless_broker_boxes_python_with_a_user_namespace, .init = rootless_start,
     .fini = rootless_stop, .timeout = 120)
{
	rootless_box("python");
}

Test(sandbox, rootless_broker_boxes_bash_with_a_user_namespace, .init = rootless_start,
     .fini = rootless_stop, .timeout = 120)
{
	rootless_box("bash");
}
