/*
 * sandbox_test.c — hostile code run from inside contexts (python and bash):
 * each attack is refused, and the victim and the server are unharmed after.
 * Contexts are sandboxes by default; nothing here turns that on.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/netlink.h>

#include "harness.h"
#include "../../lib/lib.h"

/* no pool: a context's proxy dir is named by its id */
HARNESS_SHARED_BROKER("--pool", "python=0");

#define URL test_url()

static void
check_unharmed(const char *base, const char *keeper_id, pid_t broker)
{
	struct resp r;

	keeper_check(base, keeper_id);
	cr_assert(broker <= 0 || kill(broker, 0) == 0, "the broker is gone");
	cr_assert_eq(http(base, "GET", "/health", NULL, &r, 5), 0);
	cr_assert_eq(r.r_status, 200, "the server is unhealthy after the attack");
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
	char *victim = keeper_new(URL), *id = context_new(URL, lang, NULL), code[1024];
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
	char *victim = keeper_new(URL), *id = context_new(URL, lang, NULL), code[2048];
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
	char *victim = keeper_new(URL), *id = context_new(URL, "python", NULL), code[1024];
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
 * The box's seccomp filter (proxy/filter.c), call by call: each call of the
 * table made from a box with harmless arguments, and the errno it gives, or
 * "ok". The calls run in a child of the kernel (the prober), which forks a
 * sleeping victim (kid, pidfd) and makes a pty its controlling terminal
 * (tty), so that a call the filter let through would succeed, or fail
 * otherwise, and leave the kernel as it was.
 */
#define SC_KID (LONG_MIN + 1)   /* the victim's pid */
#define SC_PIDFD (LONG_MIN + 2) /* a pidfd of it */
#define SC_TTY (LONG_MIN + 3)   /* the prober's controlling terminal */
#define SC_BUF (LONG_MIN + 4)   /* 64 zero bytes */
#define SC_SELF (LONG_MIN + 5)  /* a pidfd of the prober (a process may advise itself) */

struct sc_call {
	const char *sc_name; /* a name starting with "clone" ends the child it makes */
	long sc_nr;
	int sc_nargs;
	long sc_args[6];
	const char *sc_want; /* the errno's name, or "ok" */
};

static const struct sc_call sc_refused[] = {
	{"ptrace", SYS_ptrace, 4, {PTRACE_ATTACH, SC_KID, 0, 0}, "EPERM"},
	{"process_vm_readv", SYS_process_vm_readv, 6, {SC_KID, 0, 0, 0, 0, 0}, "EPERM"},
	{"process_vm_writev", SYS_process_vm_writev, 6, {SC_KID, 0, 0, 0, 0, 0}, "EPERM"},
	{"pidfd_getfd", SYS_pidfd_getfd, 3, {SC_PIDFD, 0, 0}, "EPERM"},
	{"process_madvise", SYS_process_madvise, 5, {SC_SELF, 0, 0, MADV_COLD, 0}, "EPERM"},
	{"kcmp", SYS_kcmp, 5, {SC_KID, SC_KID, 1 /* KCMP_VM */, 0, 0}, "EPERM"},
	{"personality ADDR_NO_RANDOMIZE", SYS_personality, 1, {PER_LINUX | ADDR_NO_RANDOMIZE},
	 "EPERM"},
	{"personality PER_BSD", SYS_personality, 1, {PER_BSD}, "EPERM"},
	{"bpf", SYS_bpf, 3, {0 /* BPF_MAP_CREATE */, 0, 0}, "EPERM"},
	{"perf_event_open", SYS_perf_event_open, 5, {0, 0, -1, -1, 0}, "EPERM"},
	{"keyctl", SYS_keyctl, 2, {0 /* KEYCTL_GET_KEYRING_ID */, -3 /* session */}, "EPERM"},
	{"add_key", SYS_add_key, 5, {0, 0, 0, 0, 0}, "EPERM"},
	{"request_key", SYS_request_key, 4, {0, 0, 0, 0}, "EPERM"},
	{"userfaultfd", SYS_userfaultfd, 1, {O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */}, "EPERM"},
	{"io_uring_setup", SYS_io_uring_setup, 2, {1, 0}, "EPERM"},
	{"mount", SYS_mount, 5, {0, 0, 0, 0, 0}, "EPERM"},
	{"umount2", SYS_umount2, 2, {0, 0}, "EPERM"},
	{"pivot_root", SYS_pivot_root, 2, {0, 0}, "EPERM"},
	{"chroot", SYS_chroot, 1, {0}, "EPERM"},
	{"fsopen", SYS_fsopen, 2, {0, 0}, "EPERM"},
	{"move_mount", SYS_move_mount, 5, {-1, 0, -1, 0, 0}, "EPERM"},
	{"open_tree", SYS_open_tree, 3, {AT_FDCWD, SC_BUF, 0}, "EPERM"},
	{"unshare", SYS_unshare, 1, {CLONE_NEWUSER}, "EPERM"},
	{"setns", SYS_setns, 2, {-1, 0}, "EPERM"},
	{"clone CLONE_NEWUSER", SYS_clone, 5, {CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0}, "EPERM"},
	{"clone CLONE_NEWNET", SYS_clone, 5, {CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0}, "EPERM"},
	{"clone3", SYS_clone3, 2, {0, 0}, "ENOSYS"},
	{"open_by_handle_at", SYS_open_by_handle_at, 3, {-1, 0, 0}, "EPERM"},
	{"kexec_load", SYS_kexec_load, 4, {0, 0, 0, 0}, "EPERM"},
	{"init_module", SYS_init_module, 3, {0, 0, 0}, "EPERM"},
	{"finit_module", SYS_finit_module, 3, {-1, 0, 0}, "EPERM"},
	{"swapon", SYS_swapon, 2, {0, 0}, "EPERM"},
	{"reboot", SYS_reboot, 4, {0, 0, 0, 0}, "EPERM"},
	{"acct", SYS_acct, 1, {0}, "EPERM"},
	{"syslog", SYS_syslog, 3, {10 /* SYSLOG_ACTION_SIZE_BUFFER */, 0, 0}, "EPERM"},
	{"clock_settime", SYS_clock_settime, 2, {CLOCK_REALTIME, 0}, "EPERM"},
	{"settimeofday", SYS_settimeofday, 2, {0, 0}, "EPERM"},
	{"sethostname", SYS_sethostname, 2, {0, 0}, "EPERM"},
	{"iopl", SYS_iopl, 1, {0}, "EPERM"},
	{"ioperm", SYS_ioperm, 3, {0, 0, 0}, "EPERM"},
	{"seccomp", SYS_seccomp, 3, {2 /* SECCOMP_GET_ACTION_AVAIL */, 0, SC_BUF}, "EPERM"},
	{"prctl PR_SET_MM", SYS_prctl, 5, {PR_SET_MM, PR_SET_MM_START_CODE, 0, 0, 0}, "EPERM"},
	{"socket AF_PACKET", SYS_socket, 3, {AF_PACKET, SOCK_RAW, 0}, "EPERM"},
	{"socket AF_INET SOCK_RAW", SYS_socket, 3, {AF_INET, SOCK_RAW, IPPROTO_ICMP}, "EPERM"},
	{"socket AF_NETLINK NETLINK_AUDIT", SYS_socket, 3, {AF_NETLINK, SOCK_RAW, NETLINK_AUDIT},
	 "EPERM"},
	{"socket AF_ALG", SYS_socket, 3, {AF_ALG, SOCK_SEQPACKET, 0}, "EPERM"},
	{"socket AF_VSOCK", SYS_socket, 3, {AF_VSOCK, SOCK_STREAM, 0}, "EPERM"},
	{"ioctl TIOCSTI", SYS_ioctl, 3, {SC_TTY, TIOCSTI, SC_BUF}, "EPERM"},
	/* the kernel reads the command's low 32 bits: high ones change nothing */
	{"ioctl TIOCSTI, high bits set", SYS_ioctl, 3, {SC_TTY, (1L << 32) | TIOCSTI, SC_BUF},
	 "EPERM"},
};

/* What the kernels need, which the same filter lets through. */
static const struct sc_call sc_allowed[] = {
	{"clone SIGCHLD", SYS_clone, 5, {SIGCHLD, 0, 0, 0, 0}, "ok"},
	{"mmap", SYS_mmap, 6, {0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0},
	 "ok"},
	{"getrandom", SYS_getrandom, 3, {SC_BUF, 16, 0}, "ok"},
	{"memfd_create", SYS_memfd_create, 2, {SC_BUF, MFD_CLOEXEC}, "ok"},
	{"socket AF_INET SOCK_STREAM", SYS_socket, 3, {AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0},
	 "ok"},
	{"socket AF_INET6 SOCK_DGRAM", SYS_socket, 3, {AF_INET6, SOCK_DGRAM, 0}, "ok"},
	{"socket AF_UNIX SOCK_SEQPACKET", SYS_socket, 3, {AF_UNIX, SOCK_SEQPACKET, 0}, "ok"},
	{"socket AF_NETLINK NETLINK_ROUTE", SYS_socket, 3, {AF_NETLINK, SOCK_RAW, NETLINK_ROUTE},
	 "ok"},
	{"socketpair AF_UNIX", SYS_socketpair, 4, {AF_UNIX, SOCK_STREAM, 0, SC_BUF}, "ok"},
	{"personality query", SYS_personality, 1, {0xffffffffL}, "ok"},
	{"prctl PR_SET_NAME", SYS_prctl, 2, {PR_SET_NAME, SC_BUF}, "ok"},
	{"ioctl FIONREAD", SYS_ioctl, 3, {SC_TTY, FIONREAD, SC_BUF}, "ok"},
	{"kill", SYS_kill, 2, {SC_KID, 0}, "ok"},
	{"pidfd_send_signal", SYS_pidfd_send_signal, 4, {SC_PIDFD, 0, 0, 0}, "ok"},
	{"sched_getaffinity", SYS_sched_getaffinity, 3, {0, 64, SC_BUF}, "ok"},
	{"close_range", SYS_close_range, 3, {1000, 1000, 0}, "ok"},
};

/* Python that makes each call in the prober and prints "name result" lines. */
static char *
sc_probe_py(const struct sc_call *calls, size_t n)
{
	size_t cap = 16384, len;
	char *py = malloc(cap);

	len = snprintf(py, cap, "%s",
		       "import ctypes, errno, fcntl, os, signal, termios, threading\n"
		       "libc = ctypes.CDLL(None, use_errno=True)\n"
		       "libc.syscall.restype = ctypes.c_long\n"
		       "r, w = os.pipe()\n"
		       "prober = os.fork()\n"
		       "if prober == 0:\n"
		       "    os.close(r)\n"
		       "    kid = os.fork()\n"
		       "    if kid == 0:\n"
		       "        while True:\n"
		       "            signal.pause()\n"
		       "    pidfd, self = os.pidfd_open(kid), os.pidfd_open(os.getpid())\n"
		       "    os.setsid()\n"
		       "    m, tty = os.openpty()\n"
		       "    fcntl.ioctl(tty, termios.TIOCSCTTY, 0)\n"
		       "    out = []\n"
		       "    def t(name, nr, *a):\n"
		       "        buf = ctypes.create_string_buffer(64)\n"
		       "        a = [buf if x == 'buf' else ctypes.c_long(x) for x in a]\n"
		       "        res = libc.syscall(ctypes.c_long(nr), *a)\n"
		       "        if res == 0 and name.startswith('clone'):\n"
		       "            os._exit(0)\n"
		       "        e = ctypes.get_errno()\n"
		       "        out.append(name + ' ' + ('ok' if res >= 0 else\n"
		       "                                 errno.errorcode.get(e, str(e))))\n");
	for (size_t i = 0; i < n; i++) {
		len += snprintf(py + len, cap - len, "    t('%s', %ld", calls[i].sc_name,
				calls[i].sc_nr);
		for (int a = 0; a < calls[i].sc_nargs; a++) {
			long v = calls[i].sc_args[a];
			len += snprintf(py + len, cap - len, ", %s",
					v == SC_KID     ? "kid"
					: v == SC_PIDFD ? "pidfd"
					: v == SC_TTY   ? "tty"
					: v == SC_BUF   ? "'buf'"
					: v == SC_SELF  ? "self"
							: "");
			if (v != SC_KID && v != SC_PIDFD && v != SC_TTY && v != SC_BUF &&
			    v != SC_SELF)
				len += snprintf(py + len, cap - len, "%ld", v);
		}
		len += snprintf(py + len, cap - len, ")\n");
	}
	len += snprintf(py + len, cap - len, "%s",
			"    th = threading.Thread(target=out.append, args=('thread ok',))\n"
			"    th.start()\n"
			"    th.join()\n"
			"    os.kill(kid, signal.SIGKILL)\n"
			"    os.write(w, ''.join(l + '\\n' for l in out).encode())\n"
			"    os._exit(0)\n"
			"os.close(w)\n"
			"got = b''\n"
			"while chunk := os.read(r, 65536):\n"
			"    got += chunk\n"
			"os.waitpid(prober, 0)\n"
			"print(got.decode(), end='')\n");
	cr_assert_lt(len, cap, "the probe outgrew its buffer");
	return py;
}

/* Runs the calls in a box of lang's (python, or bash running python3). */
static void
sc_check(const char *lang, const struct sc_call *calls, size_t n, const char *tail)
{
	char *id = context_new(URL, lang, NULL), *py = sc_probe_py(calls, n);
	size_t cap = strlen(py) + 64;
	char *code = malloc(cap), want[256];

	cr_assert_not_null(id);
	if (!strcmp(lang, "bash"))
		snprintf(code, cap, "python3 - <<'EOF'\n%sEOF", py);
	else
		snprintf(code, cap, "%s", py);
	char *out = run_stdout(URL, id, code), *line = out, *nl;
	cr_assert_not_null(out);
	for (size_t i = 0; i < n; i++, line = nl + 1) {
		snprintf(want, sizeof(want), "%s %s", calls[i].sc_name, calls[i].sc_want);
		nl = strchr(line, '\n');
		cr_assert_not_null(nl, "%s: no line for %s in:\n%s", lang, calls[i].sc_name, out);
		*nl = '\0';
		cr_expect_str_eq(line, want, "%s: got '%s', want '%s'", lang, line, want);
	}
	cr_assert_str_eq(line, tail, "%s: after the calls: %s", lang, line);
	free(out);
	free(code);
	free(py);
	free(id);
}

Test(sandbox, seccomp_refuses_each_call_of_the_table_with_its_errno, .timeout = 120)
{
	size_t n = sizeof(sc_refused) / sizeof(sc_refused[0]);

	sc_check("python", sc_refused, n, "thread ok\n");
	/* a cold box (bash's) has the same filter as one forked from the template */
	sc_check("bash", sc_refused, n, "thread ok\n");
}

Test(sandbox, seccomp_allows_forks_threads_memory_sockets_and_randomness, .timeout = 120)
{
	size_t n = sizeof(sc_allowed) / sizeof(sc_allowed[0]);

	sc_check("python", sc_allowed, n, "thread ok\n");
	sc_check("bash", sc_allowed, n, "thread ok\n");
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

/*
 * A kernel is in a Landlock domain of its context's (lib/landlock.c) that
 * scopes its signals: its box's init, which has its uid, is out of its
 * reach (kill answers EPERM; in its PID namespace a signal to PID 1 would
 * be dropped, which kill reports as done). Python forked from the template,
 * bash cold.
 */
Test(sandbox, a_kernel_signals_only_its_own_landlock_domain, .timeout = 120)
{
	if (landlock_abi() < 6)
		cr_skip_test("no Landlock scoping in this kernel (ABI %d)", landlock_abi());
	char *py = context_new(URL, "python", NULL), *sh = context_new(URL, "bash", NULL);

	cr_assert(py && sh);
	char *out = run_stdout(URL, py,
			       "import os, subprocess\n"
			       "try:\n    os.kill(1, 0)\n    print('reached')\n"
			       "except PermissionError:\n    print('scoped')\n"
			       "k = subprocess.Popen(['sleep', '60'])\nk.kill()\n"
			       "print('own', k.wait())");
	cr_assert_str_eq(out, "scoped\nown -9\n", "python: %s", out);
	free(out);
	out = run_stdout(URL, sh,
			 "kill -0 1 2>/dev/null && echo reached || echo scoped; "
			 "sleep 60 & kill -9 $! && echo own");
	cr_assert_str_eq(out, "scoped\nown\n", "bash: %s", out);
	free(out);
	free(py);
	free(sh);
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
 * A context's pids cgroup (proxy/limits.c): "<id>" under its broker's parent
 * "sandcell/broker-<hash>" (broker/bounds.c), in v1's pids hierarchy where it
 * is mounted, else under the v2 root; "" if there is none.
 */
static void
pids_cgroup(const char *id, char *path, size_t len)
{
	struct stat st;
	glob_t g;

	snprintf(path, len, "%s/sandcell/broker-*/%s",
		 stat("/sys/fs/cgroup/pids", &st) == 0 && S_ISDIR(st.st_mode) ? "/sys/fs/cgroup/pids"
									   : "/sys/fs/cgroup",
		 id);
	if (glob(path, 0, NULL, &g) == 0 && g.gl_pathc == 1)
		snprintf(path, len, "%s", g.gl_pathv[0]);
	globfree(&g);
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
	cr_assert_eq(context_delete(URL, id), 0);
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
	char *victim = keeper_new(b.b_url), *py = context_new(b.b_url, "python", NULL);
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
	cr_assert_eq(context_delete(b.b_url, py), 0);
	cr_assert_eq(context_delete(b.b_url, sh), 0);
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
	char *victim = keeper_new(b.b_url), *id = context_new(b.b_url, "python", NULL);
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




/* A private broker of one test, stopped even when an assertion fails. */
static struct broker priv_box;

static void
priv_box_stop(void)
{
	if (priv_box.b_pid > 0)
		cr_assert_eq(broker_stop(&priv_box), 0, "a sanitizer report in its log");
}

/* The host's first address that is not loopback (where pasta reaches the host), or "". */
static void
host_address(char out[64])
{
	struct ifaddrs *ifa, *i;

	out[0] = '\0';
	if (getifaddrs(&ifa) < 0)
		return;
	for (i = ifa; i && !out[0]; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !(i->ifa_flags & IFF_LOOPBACK) &&
		    (i->ifa_flags & IFF_UP))
			inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, 64);
	freeifaddrs(ifa);
}

/*
 * Each box has a network of its own with a way out: a server outside the
 * machine (a network namespace of the test's, standing in for the internet)
 * answers python's requests, bash's curl and Deno's fetch. With
 * --kernel-network none, loopback alone: no way out, Deno still runs.
 */
Test(sandbox, outbound_network_reaches_the_internet_and_none_has_none, .timeout = 180)
{
	struct broker b;
	struct inet in;
	const char *args[] = {"--no-default-context", "--pool", "python=0", "--kernel-network",
			      "none", NULL};
	char code[512];

	if (inet_start(&in) < 0)
		cr_skip_test("needs root and iproute2 for a stand-in internet");
	snprintf(code, sizeof(code), "import requests\nprint(requests.get('%s', timeout=10).text, end='')",
		 in.in_url);
	char *py = context_new(URL, "python", NULL), *sh = context_new(URL, "bash", NULL),
	     *js = context_new(URL, "javascript", NULL);
	cr_assert(py && sh && js);
	char *out = run_stdout(URL, py, code), want[128], fetch[256];
	snprintf(want, sizeof(want), "%s\n", INET_PAGE);
	cr_expect_str_eq(out, want, "python");
	free(out);
	snprintf(fetch, sizeof(fetch), "curl -s --max-time 10 %s", in.in_url);
	out = run_stdout(URL, sh, fetch);
	cr_expect_str_eq(out, want, "bash");
	free(out);
	snprintf(fetch, sizeof(fetch), "console.log((await (await fetch('%s')).text()).trim())",
		 in.in_url);
	out = run_stdout(URL, js, fetch);
	cr_expect_str_eq(out, want, "javascript");
	free(out);

	cr_assert_eq(broker_start(&b, args), 0);
	char *none = context_new(b.b_url, "python", NULL), *djs = context_new(b.b_url, "javascript", NULL);
	cr_assert(none && djs);
	snprintf(code, sizeof(code),
		 "import socket\ntry:\n    socket.create_connection(('%s', %d), 3)\n"
		 "    print('reached')\nexcept OSError:\n    print('no way out')\n"
		 "s = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\n"
		 "socket.create_connection(s.getsockname(), 3)\nprint('loopback works')",
		 in.in_addr, in.in_port);
	out = run_stdout(b.b_url, none, code);
	cr_expect_str_eq(out, "no way out\nloopback works\n");
	free(out);
	out = run_stdout(b.b_url, djs, "console.log(6 * 7)");
	cr_expect_str_eq(out, "42\n", "Deno speaks TCP to its proxy, in the namespace they share");
	free(out);
	inet_stop(&in);
	cr_assert_eq(broker_stop(&b), 0);
	free(py);
	free(sh);
	free(js);
	free(none);
	free(djs);
}

/*
 * The broker's API is out of a context's reach. Its loopback is its own, and
 * so is the address pasta copies from the host's interface; through any
 * other address of the host (here the host's side of the stand-in
 * internet's link, the broker listening on every address as in a
 * container) a connection comes from pasta, a uid of the range, and is
 * answered 403: the egress rules refuse the host's addresses, so this one
 * is allowed (--egress-allow) to reach the check behind them. Two requests that would change a neighbour are sent and not
 * waited for: one on a connection left open, one on a connection closed at
 * once. The neighbour keeps its state; a client of the machine is served.
 */
Test(sandbox, a_context_cannot_call_the_servers_api, .fini = priv_box_stop, .timeout = 120)
{
	char code[3072], host[64], via[64], url[96], hole[80];
	const char *args[] = {"--no-default-context", "--pool", "python=0", "--egress-allow", hole,
			      NULL};
	struct inet in;

	if (geteuid() != 0)
		cr_skip_test("not root: kernels are the broker's uid on the host");
	if (inet_start(&in) < 0)
		cr_skip_test("needs root and iproute2 for a second address of the host");
	host_address(host);
	snprintf(via, sizeof(via), "%.*s.1", (int)(strrchr(in.in_addr, '.') - in.in_addr),
		 in.in_addr);
	snprintf(hole, sizeof(hole), "%s/32", via);
	cr_assert_eq(broker_start_listening(&priv_box, "0.0.0.0", args), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", priv_box.b_port);
	char *victim = keeper_new(url), *attacker = context_new(url, "python", NULL);
	cr_assert_not_null(attacker);
	snprintf(code, sizeof(code),
		 "import json, socket, urllib.request, urllib.error\n"
		 "def call(where, path, body=None):\n"
		 "    data = json.dumps(body).encode() if body else None\n"
		 "    rq = urllib.request.Request('http://%%s:%d%%s' %% (where, path), data=data,\n"
		 "                                headers={'Content-Type': 'application/json'})\n"
		 "    try:\n"
		 "        return urllib.request.urlopen(rq, timeout=10).status\n"
		 "    except urllib.error.HTTPError as e:\n"
		 "        return e.code\n"
		 "    except OSError:\n"
		 "        return 'unreachable'\n"
		 "print(call('127.0.0.1', '/health'), call('%s', '/health'), call('%s', '/health'),\n"
		 "      call('%s', '/contexts'),\n"
		 "      call('%s', '/execute', {'context_id': '%s', 'code': 'print(kept)'}))\n"
		 "b = json.dumps({'context_id': '%s', 'code': 'kept = \"changed\"'}).encode()\n"
		 "req = (b'POST /execute HTTP/1.1\\r\\nHost: x\\r\\n'\n"
		 "       b'Content-Type: application/json\\r\\n'\n"
		 "       b'Content-Length: %%d\\r\\n\\r\\n' %% len(b) + b)\n"
		 "left_open = socket.create_connection(('%s', %d), 10)\n"
		 "left_open.sendall(req)\n"
		 "s = socket.create_connection(('%s', %d), 10)\n"
		 "s.sendall(req)\n"
		 "s.close()\n"
		 "print('sent')\n",
		 priv_box.b_port, host[0] ? host : "127.0.0.1", via, via, via, victim, victim, via,
		 priv_box.b_port, via, priv_box.b_port);
	char *out = run_stdout(url, attacker, code);
	inet_stop(&in);
	cr_assert_str_eq(out, "unreachable unreachable 403 403 403\nsent\n",
			 "a context called the API: %s", out);
	free(out);
	check_unharmed(url, victim, 0);
	free(attacker);
	free(victim);
}

/*
 * Connections from contexts wait for their 403 like any other for its
 * request; past a few waiting they are closed at once, so a context holding
 * hundreds open (through a second address of the host) does not take the
 * places of the clients' (here a broker with room for 40).
 */
Test(sandbox, a_context_holding_connections_open_leaves_room_for_clients, .fini = priv_box_stop,
     .timeout = 120)
{
	char code[512], via[64], url[96], hole[80];
	const char *args[] = {"--no-default-context", "--pool", "python=0", "--max-connections",
			      "40", "--egress-allow", hole, NULL};
	struct inet in;

	if (geteuid() != 0)
		cr_skip_test("not root: kernels are the broker's uid on the host");
	if (inet_start(&in) < 0)
		cr_skip_test("needs root and iproute2 for a second address of the host");
	snprintf(via, sizeof(via), "%.*s.1", (int)(strrchr(in.in_addr, '.') - in.in_addr),
		 in.in_addr);
	snprintf(hole, sizeof(hole), "%s/32", via);
	cr_assert_eq(broker_start_listening(&priv_box, "0.0.0.0", args), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", priv_box.b_port);
	char *id = context_new(url, "python", NULL);
	cr_assert_not_null(id);
	snprintf(code, sizeof(code),
		 "import socket, time\n"
		 "held = [socket.create_connection(('%s', %d), 5) for _ in range(200)]\n"
		 "print('held', flush=True)\n"
		 "time.sleep(60)\n",
		 via, priv_box.b_port);
	struct bg hold = {.base = url, .ctx = id, .code = code};
	bg_start(&hold);
	int held = bg_wait_stdout(&hold, 30000);
	for (int i = 0; held == 0 && i < 3; i++) {
		struct resp r;
		cr_assert_eq(http(url, "GET", "/health", NULL, &r, 5), 0,
			     "a client found no room beside the context's connections");
		cr_assert_eq(r.r_status, 200);
		resp_free(&r);
	}
	cr_assert_eq(context_post(url, id, "interrupt", 10), 200); /* let go of them */
	bg_join(&hold);
	inet_stop(&in);
	cr_assert_eq(held, 0, "the connections were not opened");
	json_decref(hold.lines);
	free(id);
}

/*
 * Python run by a context: every TCP port of 127.0.0.1 and of the host's
 * address that answers it, less its own box's listening ports, and the
 * abstract Unix sockets it can see that are not its own. A box sees its own
 * network alone: both lists must be empty.
 */
static const char scan_py[] =
	"import os, select, socket\n"
	"def own_ports():\n"
	"    ports = set()\n"
	"    for f in ('/proc/net/tcp', '/proc/net/tcp6'):\n"
	"        for line in open(f).readlines()[1:]:\n"
	"            local, state = line.split()[1], line.split()[3]\n"
	"            if state == '0A':\n"
	"                ports.add(int(local.split(':')[1], 16))\n"
	"    return ports\n"
	"def scan(addr):\n"
	"    found = set()\n"
	"    for start in range(1, 65536, 512):\n"
	"        socks = {}\n"
	"        for port in range(start, min(start + 512, 65536)):\n"
	"            s = socket.socket()\n"
	"            s.setblocking(False)\n"
	"            s.connect_ex((addr, port))\n"
	"            socks[s.fileno()] = (s, port)\n"
	"        left = dict(socks)\n"
	"        p = select.poll()\n"
	"        for fd in left:\n"
	"            p.register(fd, select.POLLOUT)\n"
	"        for fd, ev in p.poll(1000):\n"
	"            s, port = socks[fd]\n"
	"            # (a connection to one's own ephemeral port connects to itself)\n"
	"            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 and \\\n"
	"                    s.getsockname()[1] != port:\n"
	"                found.add(port)\n"
	"        for s, _ in socks.values():\n"
	"            s.close()\n"
	"    return found\n"
	"mine = own_ports()\n"
	"others = sorted((scan('127.0.0.1') | scan(ADDR)) - mine - HOST)\n"
	"names = [l.split()[-1] for l in open('/proc/net/unix').readlines()[1:] if len(l.split()) > 7]\n"
	"strange = sorted(n for n in names if n.startswith('@victim'))\n"
	"print('ports', others, 'abstract', strange)\n";

/* A context of lang on base that listens: TCP on a port of its own, and an abstract socket. */
static char *
listening_victim(const char *base, const char *lang, int port)
{
	char *id = context_new(base, lang, NULL), code[1024];

	cr_assert_not_null(id, "no %s context", lang);
	if (!strcmp(lang, "javascript"))
		snprintf(code, sizeof(code), "globalThis.srv = Deno.listen({hostname: '0.0.0.0', "
					     "port: %d}); console.log('listening')",
			 port);
	else if (!strcmp(lang, "bash"))
		snprintf(code, sizeof(code),
			 "python3 -c 'import socket,time; s=socket.socket(); "
			 "s.bind((\"0.0.0.0\",%d)); s.listen(); u=socket.socket(socket.AF_UNIX); "
			 "u.bind(\"\\0victim-%d\"); u.listen(); time.sleep(600)' & "
			 "for i in $(seq 200); do grep -q '@victim-%d$' /proc/net/unix && "
			 "{ echo listening; break; }; sleep 0.05; done",
			 port, port, port);
	else if (!strcmp(lang, "java"))
		snprintf(code, sizeof(code),
			 "var srv = new java.net.ServerSocket(%d); System.out.println(\"listening\");",
			 port);
	else
		snprintf(code, sizeof(code),
			 "import socket\nsrv = socket.socket()\nsrv.bind(('0.0.0.0', %d))\n"
			 "srv.listen()\nu = socket.socket(socket.AF_UNIX)\nu.bind('\\0victim-%d')\n"
			 "u.listen()\nprint('listening')",
			 port, port);
	char *out = run_stdout(base, id, code);
	cr_assert_str_eq(out, "listening\n", "%s victim: %s", lang, out);
	free(out);
	return id;
}

/* The TCP ports something listens on in our network namespace, as "p1, p2, ...". */
static void
listening_ports(char *out, size_t len)
{
	const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
	char line[512];
	size_t n = 0;

	out[0] = '\0';
	for (int f = 0; f < 2; f++) {
		FILE *fp = fopen(files[f], "r");
		while (fp && fgets(line, sizeof(line), fp)) {
			char local[128];
			unsigned state, port;
			if (sscanf(line, "%*d: %127s %*s %x", local, &state) == 2 && state == 0x0A &&
			    strchr(local, ':') && sscanf(strchr(local, ':') + 1, "%x", &port) == 1 &&
			    n + 16 < len)
				n += snprintf(out + n, len - n, "%s%u", n ? ", " : "", port);
		}
		if (fp)
			fclose(fp);
	}
	if (!n)
		snprintf(out, len, "-1");
}

/*
 * Nothing a context listens on is in reach of another context, whatever its
 * language, its broker or its isolation: not its kernel's channels (python's
 * iopub pipe, Deno's five TCP ports, the abstract ipc sockets), not a server
 * its code starts. An attacker scans every port of loopback and of the
 * host's address, and the abstract sockets it can see.
 */
Test(sandbox, no_socket_of_another_context_is_in_reach, .fini = priv_box_stop, .timeout = 300)
{
	const char *isolated[] = {"--no-default-context", "--pool", "python=0", "--isolation",
				  "context", NULL};
	const char *langs[] = {"python", "bash", "java", "javascript"};
	char host[64], code[sizeof(scan_py) + 4500], *victims[8];
	int n = 0;

	host_address(host);
	if (!host[0])
		snprintf(host, sizeof(host), "127.0.0.1");
	cr_assert_eq(broker_start(&priv_box, isolated), 0);
	for (size_t i = 0; i < 4; i++) {
		victims[n++] = listening_victim(URL, langs[i], 20000 + (int)i);
		victims[n++] = listening_victim(priv_box.b_url, langs[i], 20010 + (int)i);
	}
	/* what the host itself listens on (the brokers among it) is not a context's */
	char hostports[4096];
	listening_ports(hostports, sizeof(hostports));
	snprintf(code, sizeof(code), "ADDR = '%s'\nHOST = {%s}\n%s", host, hostports, scan_py);
	const char *where[] = {URL, priv_box.b_url};
	for (int w = 0; w < 2; w++) {
		char *attacker = context_new(where[w], "python", NULL);
		cr_assert_not_null(attacker);
		char *out = run_stdout(where[w], attacker, code);
		cr_expect_str_eq(out, "ports [] abstract []\n", "attacker on %s: %s", where[w], out);
		free(out);
		free(attacker);
	}
	for (int i = 0; i < n; i++)
		free(victims[i]);
}

/* How many processes whose name starts with comm descend from pid. */
static int
descendants_named(pid_t pid, const char *comm)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d))) {
		pid_t p = (pid_t)atoi(e->d_name);
		char path[64], name[64] = "";
		if (p <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/comm", (int)p);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		if (fgets(name, sizeof(name), f))
			name[strcspn(name, "\n")] = '\0';
		fclose(f);
		if (strncmp(name, comm, strlen(comm)))
			continue;
		for (pid_t a = p; a > 1; a = (pid_t)proc_stat_field(a, 4))
			if (a == pid) {
				n++;
				break;
			}
	}
	if (d)
		closedir(d);
	return n;
}

static const char link_victim_py[] =
    "import socket, threading\n"
    "t = socket.socket()\nt.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "t.bind(('0.0.0.0', 20120))\nt.listen()\n"
    "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nu.bind(('0.0.0.0', 20121))\n"
    "def echo():\n    while True:\n        d, a = u.recvfrom(100)\n        u.sendto(d, a)\n"
    "def serve():\n    while True:\n        c, a = t.accept()\n        c.send(b'hi')\n        c.close()\n"
    "threading.Thread(target=echo, daemon=True).start()\n"
    "threading.Thread(target=serve, daemon=True).start()\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.connect(('192.0.2.123', 9))\n"
    "print(s.getsockname()[0])\n";

/* TCP, UDP and ping to ADDR; the way out's gateway; the host's loopback port HOSTPORT. */
static const char link_probe_py[] =
    "import socket, subprocess\n"
    "def tcp(a, p):\n    try:\n        return 'reached' if socket.create_connection((a, p), 3).recv(2) "
    "== b'hi' else 'no'\n    except OSError:\n        return 'no'\n"
    "def udp(a, p):\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n    s.settimeout(2)\n"
    "    try:\n        s.sendto(b'x', (a, p))\n        return 'reached' if s.recvfrom(10)[0] == b'x' "
    "else 'no'\n    except OSError:\n        return 'no'\n"
    "def ping(a):\n    try:\n        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, "
    "socket.IPPROTO_ICMP)\n        s.settimeout(2)\n"
    "        s.sendto(b'\\x08\\0\\0\\0\\0\\0\\0\\0', (a, 0))\n        s.recvfrom(64)\n"
    "        return 'reached'\n    except OSError:\n        return 'no'\n"
    "gw = [l.split()[2] for l in open('/proc/net/route') if l.split()[1] == '00000000'][0]\n"
    "gw = socket.inet_ntoa(bytes.fromhex(gw)[::-1])\n"
    "print('tcp', tcp(ADDR, 20120), 'udp', udp(ADDR, 20121), 'ping', ping(ADDR))\n"
    "print('gateway', tcp(gw, HOSTPORT), udp(gw, 53), 'loopback', tcp('127.0.0.1', HOSTPORT))\n";

/*
 * The boxes of a root broker share one way out (one pasta, whatever their
 * number), yet no box reaches another through it: not by TCP, UDP or ping
 * to the other's own address, whatever the isolation; nor the way out's
 * gateway, nor the host's loopback (a server of the test's listens there).
 * Each box reaches its own address (the probes work).
 */
Test(sandbox, boxes_share_one_way_out_and_reach_no_other_through_it, .fini = priv_box_stop,
     .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "python=0", "--isolation",
			      "context", NULL};
	char code[sizeof(link_probe_py) + 256];

	if (geteuid() != 0)
		cr_skip_test("not root: each box has a pasta of its own");
	int srv = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	cr_assert(srv >= 0 && bind(srv, (void *)&sa, sizeof(sa)) == 0 && listen(srv, 8) == 0 &&
		  getsockname(srv, (void *)&sa, &sl) == 0);
	cr_assert_eq(broker_start(&priv_box, args), 0);
	const char *where[] = {URL, priv_box.b_url};
	for (int w = 0; w < 2; w++) {
		char *victim = context_new(where[w], "python", NULL),
		     *attacker = context_new(where[w], "python", NULL), addr[64] = "";
		cr_assert(victim && attacker);
		char *out = run_stdout(where[w], victim, link_victim_py);
		cr_assert(out && sscanf(out, "%63s", addr) == 1, "victim: %s", out);
		free(out);
		snprintf(code, sizeof(code), "ADDR = '%s'\nHOSTPORT = %d\n%s", addr,
			 ntohs(sa.sin_port), link_probe_py);
		out = run_stdout(where[w], victim, code);
		cr_expect(out && !strncmp(out, "tcp reached udp reached", 23),
			  "the victim's own probes (%s): %s", addr, out);
		free(out);
		out = run_stdout(where[w], attacker, code);
		cr_expect_str_eq(out, "tcp no udp no ping no\ngateway no no loopback no\n",
				 "attacker on %s against %s", where[w], addr);
		free(out);
		free(victim);
		free(attacker);
	}
	/* pasta, or passt.avx2 as the CPU may have it run */
	int pastas = descendants_named(priv_box.b_pid, "pas");
	cr_expect_eq(pastas, 1, "%d pasta processes for the broker's boxes", pastas);
	close(srv);
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

Test(sandbox, isolation_context_hides_a_neighbours_workspace, .timeout = 180)
{
	struct broker b;
	const char *args[] = {"--no-default-context", "--isolation", "context", NULL};
	char code[1024], ws[600];
	struct stat st;

	cr_assert_eq(broker_start(&b, args), 0);
	char *a = context_new(b.b_url, "python", NULL), *v = context_new(b.b_url, "bash", NULL);
	cr_assert(a && v);
	/* each box shows its own at /home/user */
	char *acwd = context_host_cwd(b.b_url, a), *vcwd = context_host_cwd(b.b_url, v);
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
	cr_assert_eq(context_delete(b.b_url, v), 0);
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
	int rc = 0;

	if (other.b_pid > 0)
		rc |= broker_stop(&other);
	if (other2.b_pid > 0)
		rc |= broker_stop(&other2);
	if (uid_holder > 0) {
		kill(uid_holder, SIGKILL);
		waitpid(uid_holder, NULL, 0);
	}
	cr_assert_eq(rc, 0, "a sanitizer report in a broker's log");
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
	char *k = keeper_new(URL);
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

/* sandbox.net_uid of a context: the uid its network (pasta) runs as. */
static long
net_uid_of(const char *base, const char *id)
{
	json_t *j = context_get(base, id);
	long u = (long)json_integer_value(json_object_get(json_object_get(j, "sandbox"), "net_uid"));

	json_decref(j);
	return u;
}

/* Two uids a broker: its kernels' and its network's. */
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
	cr_assert_eq(net_uid_of(other.b_url, a), 64011);
	cr_assert_eq(broker_start(&other2, args), 0);
	char *b = context_new(other2.b_url, "python", NULL);
	cr_assert_not_null(b);
	cr_assert_eq(uid_of(other2.b_url, b), 64012, "the first broker's uids were handed out");
	cr_assert_eq(net_uid_of(other2.b_url, b), 64013);
	cr_assert_eq(broker_stop(&other), 0); /* 64010 is free again, once its kernel is gone */
	long freed = 64010;
	cr_assert_eq(wait_until(uid_idle, &freed, 20000), 0, "the stopped broker's kernel still runs");
	kill(other2.b_pid, SIGKILL);
	waitpid(other2.b_pid, NULL, 0);
	cr_assert_eq(broker_restart(&other2, args), 0);
	char *b2 = context_new(other2.b_url, "python", NULL);
	cr_assert_not_null(b2);
	cr_assert_eq(uid_of(other2.b_url, b2), 64012, "not the uid of its kept context");
	cr_assert_eq(uid_of(other2.b_url, b), 64012);
	cr_assert_eq(net_uid_of(other2.b_url, b2), 64013);
	cr_assert_eq(net_uid_of(other2.b_url, b), 64013);
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

	cr_assert_eq(context_delete(other2.b_url, c), 0);
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

/* POST /contexts with cwd /srv (no box shows it): 400 naming it and why, no proxy
 * started. */
static void
root_cwd_refused_at_once(struct broker *b)
{
	struct resp r;
	int before = created_in_log(b);

	cr_assert_eq(http(b->b_url, "POST", "/contexts", "{\"cwd\": \"/srv\"}", &r, 60),
	             0);
	cr_assert_eq(r.r_status, 400, "%ld %s", r.r_status, r.r_body);
	cr_assert(strstr(r.r_body, "'/srv'") &&
	              strstr(r.r_body, "not in the context's box"),
	          "%s", r.r_body);
	resp_free(&r);
	cr_assert_eq(created_in_log(b), before, "a context was started for it");
}

/*
 * A cwd no box shows (/srv; E2B's /root once, now the tenant's: envd_test's
 * root_is_the_tenants_directory_for_contexts_and_envd): the broker answers
 * 400 at once, with no kernel started for it (it once crash-looped the
 * kernel three times and answered 500), in either isolation mode. (A directory of the box
 * its kernel cannot enter: hostile's a_bad_cwd_is_named_only_when_the_client_sent_it.)
 */
Test(sandbox, a_cwd_outside_the_box_is_400_at_once, .fini = others_stop,
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

/*
 * A client's cwd in the run dir (or above it) does not bring the run dir back:
 * a cwd is a path of the box's view (lib/boxpath.c), which shows no host
 * directory of the broker's, so it is refused at once like any path no box has.
 * Created, its kernel would have started in the run dir.
 */
Test(sandbox, a_cwd_in_the_run_dir_does_not_show_it, .timeout = 120)
{
	char body[700], path[600];
	struct resp r;

	snprintf(path, sizeof(path), "%s/ctx", test_run_dir());
	snprintf(body, sizeof(body), "{\"cwd\":\"%s\"}", path);
	cr_assert_eq(http(URL, "POST", "/contexts", body, &r, 90), 0);
	cr_expect_eq(r.r_status, 400, "the run dir was taken as a cwd: %ld %s", r.r_status,
		     r.r_body);
	cr_expect(strstr(r.r_body, path), "the refusal does not name the cwd: %s", r.r_body);
	resp_free(&r);
}

/*
 * Not root: a broker run as an unprivileged uid boxes its kernels with a user
 * namespace. The box keeps everything but a uid of its own on the host.
 */
/* not 65534: a process's ids read as that (the overflow id) in a user
 * namespace not yet mapped, which once hid a map written from them */
#define ROOTLESS_UID 60999
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
	cr_assert_eq(broker_stop(&rootless), 0, "a sanitizer report in its log");
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

/*
 * Files a context plants in the workspace, each of which would, if it ran
 * as a kernel starts, leave a RAN-* file behind and make the start fail:
 * modules named as the kernels' own, Python's site hooks, a .pth and an
 * IPython startup file where a user's Python would find them, a .pth and a
 * kernel's module in the tenant's venv, R's and bash's start files, Deno's
 * configuration (broken).
 */
static const char plant_code[] =
	"import os, sys\n"
	"v = 'python%d.%d' % sys.version_info[:2]\n"
	"def plant(path, text):\n"
	"    if os.path.dirname(path):\n"
	"        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
	"    open(path, 'w').write(text)\n"
	"evil = \"open('/home/user/RAN-%s', 'w').write('x')\\nraise SystemExit(3)\\n\"\n"
	"for m in ('ipykernel_launcher', 'ipykernel', 'IPython', 'zmq', 'traitlets',\n"
	"          'jupyter_client', 'tornado', 'runpy', 'site', 'encodings', 'sitecustomize',\n"
	"          'usercustomize', 'bash_kernel', 'matplotlib', 'numpy'):\n"
	"    plant(m + '.py', evil % m)\n"
	"plant('.local/lib/%s/site-packages/evil.pth' % v,\n"
	"      \"import os; open('/home/user/RAN-pth', 'w')\\n\")\n"
	"plant('.local/venv/lib/%s/site-packages/evil.pth' % v,\n"
	"      \"import os; open('/home/user/RAN-venv-pth', 'w')\\n\")\n"
	"plant('.local/venv/lib/%s/site-packages/zmq.py' % v, evil % 'venv-zmq')\n"
	"plant('.ipython/profile_default/startup/00-evil.py', evil % 'ipython-startup')\n"
	"plant('.ipython/profile_default/ipython_config.py', evil % 'ipython-config')\n"
	"plant('.jupyter/jupyter_config.py', evil % 'jupyter-config')\n"
	"plant('.Rprofile', 'file.create(\"/home/user/RAN-Rprofile\"); quit(status = 3)\\n')\n"
	"plant('.Renviron', 'R_PROFILE_USER=/home/user/.Rprofile\\n')\n"
	"for f in ('.bashrc', '.bash_profile', '.profile', '.bash_login'):\n"
	"    plant(f, 'touch /home/user/RAN-%s; exit 3\\n' % f)\n"
	"plant('deno.json', '{ not json')\n"
	"plant('package.json', '{ nor this')\n"
	"print(len(os.listdir('.')))";

/* The RAN-* files in dir: what of the planted files ran. */
static char *
ran_in(const char *dir)
{
	char s[512] = "";
	size_t n = 0;
	DIR *d = opendir(dir);
	struct dirent *de;

	while (d && (de = readdir(d)))
		if (!strncmp(de->d_name, "RAN-", 4) && n < sizeof(s) - 64)
			n += snprintf(s + n, sizeof(s) - n, "%s ", de->d_name);
	if (d)
		closedir(d);
	return strdup(s);
}

/* The id of the broker's default context of language. */
static char *
default_context(const struct broker *b, const char *language)
{
	struct resp r;
	json_t *all, *c;
	char *id = NULL;
	size_t i;

	cr_assert_eq(http(b->b_url, "GET", "/contexts", NULL, &r, 5), 0);
	all = json_loads(r.r_body, 0, NULL);
	json_array_foreach(all, i, c) { /* the list does not say which is the default */
		json_t *one = context_get(b->b_url, json_string_value(json_object_get(c, "id")));
		if (!id && json_is_true(json_object_get(one, "default")) &&
		    !strcmp(json_string_value(json_object_get(one, "language")), language))
			id = strdup(json_string_value(json_object_get(one, "id")));
		json_decref(one);
	}
	json_decref(all);
	resp_free(&r);
	return id;
}

/*
 * Nothing in the workspace runs unless the user runs it: after the plant,
 * new contexts of five languages start and run, so do three python ones in
 * a row (the warm pool's kernels, and those it started after the plant),
 * and the default context after a restart; no planted file ran. A user's
 * own import still finds a module of the workspace.
 */
Test(sandbox, files_planted_in_the_workspace_change_nothing, .fini = priv_box_stop,
     .timeout = 300)
{
	const char *args[] = {"--pool", "python=1", NULL};
	const char *check[][2] = {
		{"python", "print(6 * 7)"}, {"bash", "echo $((6 * 7))"}, {"r", "cat(6 * 7, '\\n')"},
		{"javascript", "console.log(6 * 7)"}, {"java", "System.out.println(6 * 7);"},
	};

	cr_assert_eq(broker_start(&priv_box, args), 0);
	const char *url = priv_box.b_url;
	char *planter = context_new(url, "python", NULL), *ws, *out, *ran;
	cr_assert_not_null(planter);
	cr_assert_not_null(ws = context_host_cwd(url, planter));
	out = run_stdout(url, planter, plant_code);
	cr_assert(out && atoi(out) > 20, "the plant: %s", out ? out : "(nothing)");
	free(out);

	for (size_t i = 0; i < sizeof(check) / sizeof(check[0]); i++) {
		char *id = context_new(url, check[i][0], NULL);
		cr_assert_not_null(id, "a %s context after the plant", check[i][0]);
		out = run_stdout(url, id, check[i][1]);
		cr_expect(out && strstr(out, "42"), "%s: %s", check[i][0], out ? out : "(nothing)");
		free(out);
		free(id);
	}
	for (int i = 0; i < 3; i++) { /* the pool's kernel, then those it refilled with */
		char *id = context_new(url, "python", NULL);
		cr_assert_not_null(id, "python context %d after the plant", i);
		out = run_stdout(url, id, "import zmq, IPython\nprint(6 * 7, zmq.__file__[:5])");
		cr_expect_str_eq(out, "42 /usr/\n", "python context %d", i);
		free(out);
		free(id);
	}
	char *dflt = default_context(&priv_box, "python");
	cr_assert_not_null(dflt);
	cr_assert_eq(context_post(url, dflt, "restart", 60), 200);
	out = run_stdout(url, dflt, "print(6 * 7)");
	cr_expect_str_eq(out, "42\n", "the default context after a restart");
	free(out);
	ran = ran_in(ws);
	cr_expect_str_eq(ran, "", "planted files ran: %s", ran);
	free(ran);
	/* a module of the workspace is the user's to import */
	out = run_stdout(url, planter, "open('mine.py', 'w').write('print(\\'mine ran\\')')");
	free(out);
	out = run_stdout(url, dflt, "import mine");
	cr_expect_str_eq(out, "mine ran\n", "%s", out ? out : "(nothing)");
	free(out);
	free(dflt);
	free(ws);
	free(planter);
}

/* Whether name is the first component of a path in the colon-separated list env names. */
static bool
first_component_of(const char *name, const char *env)
{
	const char *list = getenv(env);
	char *copy = list ? strdup(list) : NULL, *save = NULL;
	bool yes = false;

	for (char *p = copy ? strtok_r(copy, ":", &save) : NULL; p && !yes;
	     p = strtok_r(NULL, ":", &save)) {
		char real[PATH_MAX];
		for (int i = 0; i < 2 && !yes; i++) {
			const char *path = i ? (realpath(p, real) ? real : "") : p;
			size_t n = strlen(name);
			yes = path[0] == '/' && !strncmp(path + 1, name, n) &&
			      (path[n + 1] == '/' || !path[n + 1]);
		}
	}
	free(copy);
	return yes;
}

/*
 * The box's view is a short list one can read: its root holds the system
 * (read-only), a private /tmp, /dev, /proc, /home/user, /root (the
 * workspace's .root), /run/sandcell and the top directories of the kernel's
 * own files, nothing else of the host: no /srv, /opt, /mnt, /boot, /sys, no /run/lock, no
 * /dev/mqueue.
 */
Test(sandbox, the_box_shows_its_short_list_and_nothing_else, .timeout = 60)
{
	static const char *const system[] = {"bin",   "dev",   "etc",    "home", "lib",
	                                     "lib32", "lib64", "libx32", "proc", "root",
	                                     "run",   "sbin",  "tmp",    "usr",  "var"};
	char *id = context_new(URL, "python", NULL);

	cr_assert_not_null(id);
	char *out = run_stdout(URL, id, "import os\n"
				  "print(' '.join(sorted(os.listdir('/'))))\n"
				  "print(' '.join(sorted(os.listdir('/dev'))))\n"
				  "print(os.listdir('/run'), os.listdir('/home'), os.listdir('/var'),\n"
				  "      os.path.lexists('/run/lock'), os.path.lexists('/dev/mqueue'))");
	cr_assert_not_null(out);
	char *dev = strchr(out, '\n'), *rest = dev ? strchr(dev + 1, '\n') : NULL;
	cr_assert(dev && rest, "%s", out);
	*dev++ = '\0';
	*rest++ = '\0';
	char *save = NULL;
	for (char *e = strtok_r(out, " ", &save); e; e = strtok_r(NULL, " ", &save)) {
		bool listed = false;
		for (size_t i = 0; i < sizeof(system) / sizeof(system[0]); i++)
			listed = listed || !strcmp(e, system[i]);
		/* the kernelspecs', the profile's and sandcell's own dirs, at their host paths */
		listed = listed || first_component_of(e, "JUPYTER_PATH") ||
			 first_component_of(e, "SANDCELL_PYTHON_STARTUP") ||
			 first_component_of(e, "SANDCELL_BIN");
		cr_expect(listed, "/%s is in the box", e);
	}
	cr_expect_str_eq(dev, "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero");
	cr_expect_str_eq(rest, "['sandcell'] ['user'] ['tmp'] False False\n");
	free(out);
	free(id);
}

/*
 * A memory limit by default: a quarter of the machine, said at start and
 * shown in GET /contexts/{id}. A context that goes past it is killed alone
 * and told why, its kernel restarted; a neighbour's execution runs on.
 */
Test(sandbox, a_context_past_its_default_memory_limit_is_killed_alone, .fini = priv_box_stop,
     .timeout = 360)
{
	const char *args[] = {"--no-default-context", "--pool", "0", NULL};
	char code[512], said[128];
	long long total = 0;
	FILE *f = fopen("/proc/meminfo", "r");

	cr_assert(f && fscanf(f, "MemTotal: %lld kB", &total) == 1);
	fclose(f);
	total <<= 10;
	cr_assert_eq(broker_start(&priv_box, args), 0);
	const char *url = priv_box.b_url;
	char *hog = context_new(url, "python", NULL), *nb = context_new(url, "python", NULL);
	cr_assert(hog && nb);
	json_t *j = context_get(url, hog);
	long long limit =
		json_integer_value(json_object_get(json_object_get(j, "sandbox"), "memory_bytes"));
	json_decref(j);
	cr_assert(limit >= 256ll << 20 && limit <= total / 4, "limit %lld of %lld", limit, total);
	char *log = broker_log(&priv_box);
	snprintf(said, sizeof(said), "each context may use %lld MiB", limit >> 20);
	cr_expect(strstr(log, said), "the start-up log does not say '%s'", said);
	free(log);

	struct bg n = {.base = url, .ctx = nb, .timeout_ms = 120000};
	n.code = "import time\nfor i in range(20):\n    print(i, flush=True)\n    time.sleep(0.25)\n"
		 "print('done')";
	bg_start(&n);
	cr_assert_eq(bg_wait_stdout(&n, 30000), 0, "the neighbour never started");
	/* past the limit by 512 MiB, 64 MiB at a time, each page written */
	snprintf(code, sizeof(code),
		 "import mmap\nm = mmap.mmap(-1, %lld)\nc = b'x' * (64 << 20)\n"
		 "while m.tell() + len(c) <= len(m):\n    m.write(c)\nprint('not stopped')",
		 limit + (512ll << 20));
	/*
	 * Reaching a quarter of the machine takes a while when other work holds
	 * the rest of it: the kernel reclaims their page cache as the hog grows
	 * (40 s and more here, against 2 s for 2 GiB on an idle machine). Broken,
	 * the hog would print "not stopped" or never end.
	 */
	json_t *l = execute_code(url, hog, code, NULL, 240000, NULL);
	cr_expect_str_eq(error_name(l), "KernelDied", "%s", error_value(l));
	cr_expect(strstr(error_value(l), "out of memory"), "%s", error_value(l));
	json_decref(l);
	bg_join(&n);
	char *out = stdout_of(n.lines);
	cr_expect(out && strstr(out, "19\ndone\n"), "the neighbour: %s", out ? out : "(nothing)");
	cr_expect_str_eq(error_name(n.lines), "(none)");
	free(out);
	json_decref(n.lines);
	out = run_stdout(url, hog, "print('alive')");
	cr_expect_str_eq(out, "alive\n", "the hog's context after the kill");
	free(out);
	free(hog);
	free(nb);
}

/* The bytes free for files where path is. */
static long long
free_bytes(const char *path)
{
	struct statvfs v;

	return statvfs(path, &v) == 0 ? (long long)v.f_bavail * (long long)v.f_frsize : -1;
}

/* bash code: a GiB written into the cwd, what dd said first (its error), the file removed. */
#define FILL_GIB "dd if=/dev/zero of=fill bs=1M count=1024 2>&1 | head -n 1; rm -f fill"

/*
 * The workspace has a size bound, a filesystem of its own: under
 * --isolation context each context's. Filling one is ENOSPC for that
 * context: the host lost at most the bound, a neighbour still writes to
 * its own. A deleted context's filesystem and image go with it.
 */
Test(sandbox, filling_a_contexts_workspace_is_enospc_for_it_alone, .fini = priv_box_stop,
     .timeout = 180)
{
	const char *args[] = {"--no-default-context", "--pool", "0", "--isolation", "context",
			      "--workspace-size", "64M", NULL};
	char img[PATH_MAX + 8];

	cr_assert_eq(broker_start(&priv_box, args), 0);
	const char *url = priv_box.b_url;
	char *a = context_new(url, "bash", NULL), *v = context_new(url, "python", NULL);
	cr_assert(a && v);
	char *ws = context_host_cwd(url, a);
	cr_assert_not_null(ws);
	json_t *j = context_get(url, a);
	cr_expect_eq(json_integer_value(
			     json_object_get(json_object_get(j, "sandbox"), "workspace_bytes")),
		     64 << 20);
	json_decref(j);
	long long before = free_bytes(priv_box.b_run_dir);
	char *out = run_stdout(url, a, FILL_GIB);
	long long lost = before - free_bytes(priv_box.b_run_dir);
	cr_expect(out && strstr(out, "No space left on device"), "dd: %s", out ? out : "");
	free(out);
	/* (others write to this disk too: a GiB unbounded, the bound's 64 MiB bounded) */
	cr_expect(lost < 512ll << 20, "the host lost %lld MiB", lost >> 20);
	out = run_stdout(url, v, "open('mine', 'w').write('x' * (1 << 20))\nprint('written')");
	cr_expect_str_eq(out, "written\n", "the neighbour's workspace: %s", out ? out : "");
	free(out);
	snprintf(img, sizeof(img), "%s.img", ws);
	cr_assert_eq(access(img, F_OK), 0, "no image %s", img);
	cr_assert_eq(context_delete(url, a), 0);
	cr_expect_eq(wait_until(path_gone, img, 10000), 0, "a deleted context's image is left");
	cr_expect_eq(wait_until(path_gone, ws, 10000), 0, "a deleted context's workspace is left");
	free(ws);
	free(a);
	free(v);
}

/* Shared isolation: one bound for the server's workspace, the same for every context. */
Test(sandbox, filling_the_shared_workspace_is_enospc_not_a_full_disk, .fini = priv_box_stop,
     .timeout = 180)
{
	const char *args[] = {"--no-default-context", "--pool", "0", "--workspace-size", "64M",
			      NULL};

	cr_assert_eq(broker_start(&priv_box, args), 0);
	const char *url = priv_box.b_url;
	char *a = context_new(url, "bash", NULL), *b = context_new(url, "python", NULL);
	cr_assert(a && b);
	long long before = free_bytes(priv_box.b_run_dir);
	char *out = run_stdout(url, a, FILL_GIB);
	long long lost = before - free_bytes(priv_box.b_run_dir);
	cr_expect(out && strstr(out, "No space left on device"), "dd: %s", out ? out : "");
	free(out);
	cr_expect(lost < 512ll << 20, "the host lost %lld MiB", lost >> 20);
	/* the other context shares it: full while the fill is there, not after */
	out = run_stdout(url, b, "open('after', 'w').write('x' * (1 << 20))\nprint('written')");
	cr_expect_str_eq(out, "written\n", "%s", out ? out : "");
	free(out);
	free(a);
	free(b);
}

/*
 * The tenant's packages are on its workspace's filesystem: a package over
 * the bound fails with ENOSPC in that context (pip says so and takes back
 * what it unpacked), which still installs a small one; a neighbour tenant
 * installs as before.
 */
Test(sandbox, a_package_over_the_workspace_bound_is_enospc_for_its_tenant_alone,
     .fini = priv_box_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "0", "--isolation", "context",
			      "--workspace-size", "64M", NULL};
	char code[4096];

	cr_assert_eq(broker_start(&priv_box, args), 0);
	const char *url = priv_box.b_url;
	char *a = context_new(url, "python", NULL), *v = context_new(url, "python", NULL), *out;
	cr_assert(a && v);
	snprintf(code, sizeof(code),
		 "%s"
		 "wheel('/tmp/wh', 'sctobig', '0.1', 'X = 1\\n', pad=96 << 20)\n"
		 "!pip install --no-index /tmp/wh/sctobig-0.1-py3-none-any.whl 2>&1 | grep -m 1 Errno",
		 wheel_py);
	out = run_stdout(url, a, code);
	cr_expect(out && strstr(out, "No space left on device"), "pip: %s", out ? out : "");
	free(out);
	const char *small = "wheel('/tmp/ws', 'sctosmall', '0.1', 'X = 7\\n')\n"
			    "!pip install -q --no-index /tmp/ws/sctosmall-0.1-py3-none-any.whl\n"
			    "import sctosmall\n"
			    "print(sctosmall.X)";
	snprintf(code, sizeof(code), "%s%s", wheel_py, small);
	out = run_stdout(url, a, code);
	cr_expect_str_eq(out, "7\n", "a small package after: %s", out ? out : "");
	free(out);
	out = run_stdout(url, v, code);
	cr_expect_str_eq(out, "7\n", "the neighbour: %s", out ? out : "");
	free(out);
	free(a);
	free(v);
}

/*
 * The tenant's packages live in its workspace: a broker stopped with
 * --keep-contexts and started again finds them in the kept kernel, in a new
 * context and in the kept one's restarted kernel.
 */
Test(sandbox, packages_survive_a_broker_restart_with_kept_contexts, .fini = priv_box_stop,
     .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "0", "--keep-contexts", NULL};
	const char *check = "import sctokeep\nprint(sctokeep.VALUE)";
	char code[4096];

	cr_assert_eq(broker_start(&priv_box, args), 0);
	char *a = context_new(priv_box.b_url, "python", NULL), *b, *out;
	cr_assert_not_null(a);
	snprintf(code, sizeof(code),
		 "%s"
		 "wheel('/tmp/wh', 'sctokeep', '0.1', 'VALUE = \\'kept\\'\\n')\n"
		 "!pip install -q --no-index /tmp/wh/sctokeep-0.1-py3-none-any.whl\n"
		 "%s",
		 wheel_py, check);
	out = run_stdout(priv_box.b_url, a, code);
	cr_expect_str_eq(out, "kept\n", "the install: %s", out ? out : "");
	free(out);
	cr_assert_eq(broker_bounce(&priv_box, args), 0);
	out = run_stdout(priv_box.b_url, a, check);
	cr_expect_str_eq(out, "kept\n", "the kept kernel: %s", out ? out : "");
	free(out);
	cr_assert_not_null(b = context_new(priv_box.b_url, "python", NULL));
	out = run_stdout(priv_box.b_url, b, check);
	cr_expect_str_eq(out, "kept\n", "a new context: %s", out ? out : "");
	free(out);
	cr_assert_eq(context_post(priv_box.b_url, a, "restart", 60), 200);
	out = run_stdout(priv_box.b_url, a, check);
	cr_expect_str_eq(out, "kept\n", "the kept context restarted: %s", out ? out : "");
	free(out);
	free(a);
	free(b);
}

struct kept_respawn {
	const char *id;
	pid_t old;
};

/* priv_box's context rs->id has another proxy than rs->old, its kernel idle again. */
static bool
kept_respawned(void *arg)
{
	struct kept_respawn *rs = arg;
	pid_t now = context_pid(priv_box.b_url, rs->id, "proxy_pid");
	json_t *c;
	bool idle;

	if (now <= 0 || now == rs->old || !(c = context_get(priv_box.b_url, rs->id)))
		return false;
	idle = !strcmp(json_string_value(json_object_get(c, "state")) ?: "", "idle");
	json_decref(c);
	return idle;
}

/*
 * Under --isolation context a context kept across a broker's restart keeps
 * what isolates it, which the new broker learns from its proxy's state: a
 * new context gets other uids, and the kept one's proxy, killed and
 * respawned, runs its kernel as its uid, its network as its net uid, in its
 * own workspace.
 */
Test(sandbox, an_isolated_context_kept_across_a_restart_keeps_its_uids_and_workspace,
     .fini = priv_box_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "0", "--isolation", "context",
			      "--keep-contexts", NULL};

	cr_assert_eq(broker_start(&priv_box, args), 0);
	char *a = context_new(priv_box.b_url, "python", NULL), *b, *out;
	cr_assert_not_null(a);
	unsigned u = uid_of(priv_box.b_url, a);
	long n = net_uid_of(priv_box.b_url, a);
	cr_assert_gt(n, 0, "an isolated context's network has a uid of its own");
	out = run_stdout(priv_box.b_url, a, "open('mine', 'w').write('a'); print('ok')");
	cr_expect_str_eq(out, "ok\n", "the write: %s", out ? out : "");
	free(out);
	cr_assert_eq(broker_bounce(&priv_box, args), 0);
	cr_assert_not_null(b = context_new(priv_box.b_url, "python", NULL));
	cr_expect_neq(uid_of(priv_box.b_url, b), u, "a new context got the kept one's uid");
	cr_expect_neq(net_uid_of(priv_box.b_url, b), n, "... or its network's");

	pid_t proxy = context_pid(priv_box.b_url, a, "proxy_pid");
	cr_assert_gt(proxy, 0);
	kill(proxy, SIGKILL);
	struct kept_respawn rs = {a, proxy};
	cr_assert_eq(wait_until(kept_respawned, &rs, 60000), 0,
		     "the proxy was not respawned");
	cr_expect_eq(uid_of(priv_box.b_url, a), u, "the respawned kernel's uid");
	cr_expect_eq(net_uid_of(priv_box.b_url, a), n, "the respawned network's uid");
	out = run_stdout(priv_box.b_url, a, "import os; print(os.path.exists('mine'))");
	cr_expect_str_eq(out, "True\n", "its own workspace after the respawn: %s",
			 out ? out : "");
	free(out);
	free(a);
	free(b);
}

/*
 * Under --isolation context, an operator's world-writable --cwd and a cwd two
 * contexts both ask for (/tmp, /home/user) are each context's own: what one
 * writes there the other does not see.
 */
Test(sandbox, a_cwd_two_isolated_contexts_share_by_name_is_private_to_each,
     .fini = priv_box_stop, .timeout = 180)
{
	char dir[] = "/tmp/sandcell-open-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(chmod(dir, 0777), 0);
	const char *args[] = {"--no-default-context", "--pool", "0", "--isolation", "context",
			      "--cwd", dir, NULL};
	const char *cwds[] = {"/tmp", "/home/user"};

	cr_assert_eq(broker_start(&priv_box, args), 0);
	for (size_t i = 0; i < 2; i++) {
		char *a = context_new(priv_box.b_url, "python", cwds[i]);
		char *b = context_new(priv_box.b_url, "python", cwds[i]);
		cr_assert(a && b);
		char *out = run_stdout(priv_box.b_url, a,
				       "import os\nopen('secret', 'w').write('a')\nprint(os.getcwd())");
		char want[64];
		snprintf(want, sizeof(want), "%s\n", cwds[i]);
		cr_expect_str_eq(out, want);
		free(out);
		out = run_stdout(priv_box.b_url, b,
				 "import os\nprint(os.getcwd(), os.path.exists('secret'))");
		snprintf(want, sizeof(want), "%s False\n", cwds[i]);
		cr_expect_str_eq(out, want, "%s is shared", cwds[i]);
		free(out);
		free(a);
		free(b);
	}
	cr_assert_eq(broker_stop(&priv_box), 0, "a sanitizer report in its log");
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

/*
 * An access-token file where a box shows the host (under /etc), readable by
 * the kernel's uid on the host: the broker refuses it at start, saying where
 * to put it (no cover of the file survives a rotation: handdown_test). as:
 * the broker's uid (0: root's; the rootless broker's kernels are its uid on
 * the host).
 */
static void
token_file_in_sight_is_refused(struct broker *b, uid_t as)
{
	const char *token = "sandcell-file-token-never-seen";
	char path[64], *arg[] = {"--no-default-context", "--pool", "python=0",
				 "--access-token-file", path, NULL};
	int fd;

	snprintf(path, sizeof(path), "/etc/sandcell-test-token-%d", (int)getpid());
	cr_assert((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) >= 0);
	cr_assert(write(fd, token, strlen(token)) == (ssize_t)strlen(token));
	cr_assert_eq(fchown(fd, as, as), 0);
	close(fd);
	int rc = as ? broker_start_as(b, as, (const char *const *)arg)
		    : broker_start(b, (const char *const *)arg);
	char *log = broker_log(b);
	unlink(path);
	cr_expect_eq(rc, -1, "the broker started with a token file every box shows");
	cr_expect_eq(b->b_exit, 2);
	cr_expect(strstr(log, path) && strstr(log, "every box shows /etc") &&
			  strstr(log, "where no box looks"),
		  "the log does not say why: %s", log);
	free(log);
}

Test(sandbox, a_token_file_in_sight_of_the_box_is_refused_at_start, .fini = priv_box_stop,
     .timeout = 120)
{
	token_file_in_sight_is_refused(&priv_box, 0);
}

Test(sandbox, a_token_file_in_sight_of_a_rootless_box_is_refused_at_start, .fini = rootless_stop,
     .timeout = 120)
{
	token_file_in_sight_is_refused(&rootless, ROOTLESS_UID);
}

/*
 * POST /contexts with cwd: its status and its body with the cwd in it read
 * as "<cwd>", in *out (caller frees).
 */
static long
create_answer(const struct broker *b, const char *cwd, char **out)
{
	char body[1200], *p, *s;
	struct resp r;
	long st;
	size_t n = strlen(cwd);

	snprintf(body, sizeof(body), "{\"cwd\": \"%s\"}", cwd);
	cr_assert_eq(http(b->b_url, "POST", "/contexts", body, &r, 60), 0);
	st = r.r_status;
	s = r.r_body ? r.r_body : "";
	/* "<cwd>" may be longer than the cwd it stands for ("/srv") */
	*out = calloc(1, (strlen(s) + 1) * sizeof("<cwd>"));
	for (p = *out; *s;) {
		if (n && !strncmp(s, cwd, n)) {
			p += sprintf(p, "<cwd>");
			s += n;
		} else {
			*p++ = *s++;
		}
	}
	resp_free(&r);
	return st;
}

/*
 * Each cwd of refused (NULL-terminated) answered as one the box does not
 * have at all is, with no context started for it.
 */
static void
refused_alike(const struct broker *b, const char *const *refused)
{
	char *want, *got;
	int before = created_in_log(b);
	long want_st = create_answer(b, "/home/user/no-such-dir-in-any-box", &want);

	cr_assert_eq(want_st, 400, "%ld %s", want_st, want);
	for (size_t i = 0; refused[i]; i++) {
		long st = create_answer(b, refused[i], &got);
		cr_expect(st == want_st && !strcmp(got, want),
		          "cwd %s: %ld %s, where a missing one is %ld %s", refused[i], st,
		          got, want_st, want);
		free(got);
	}
	free(want);
	cr_expect_eq(created_in_log(b), before,
	             "a context was started for a refused cwd");
}

/* Host paths a box does not show: a 0700 root dir (and a dir, a file in it). */
static char oracle_dir[] = "/root/sandcell-oracle-XXXXXX";

static void
oracle_stop(void)
{
	char cmd[128];

	priv_box_stop();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", oracle_dir);
	system(cmd);
}

static void
oracle_plant(void)
{
	char p[128];
	int fd;

	cr_assert_not_null(mkdtemp(oracle_dir));
	cr_assert_eq(chmod(oracle_dir, 0700), 0);
	snprintf(p, sizeof(p), "%s/dir", oracle_dir);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/file", oracle_dir);
	cr_assert((fd = open(p, O_WRONLY | O_CREAT, 0644)) >= 0);
	close(fd);
}

/*
 * A kernel plants links in the shared workspace to the host (a directory and
 * a file in a 0700 root dir, a missing path, the run dir, and the box's root
 * by "..") and asks for contexts there: each answer is the one for a path no
 * box has, whatever the host holds, and no kernel starts for them. Links the
 * box resolves inside it still give a context there.
 */
Test(sandbox, a_cwd_through_a_tenants_links_tells_nothing_of_the_host,
     .fini = oracle_stop, .timeout = 240)
{
	const char *args[] = {"--no-default-context", "--pool", "0", NULL};
	char code[2048], c[6][700];

	oracle_plant();
	cr_assert_eq(broker_start(&priv_box, args), 0);
	const char *url = priv_box.b_url;
	char *planter = context_new(url, "python", NULL);
	cr_assert_not_null(planter);
	snprintf(code, sizeof(code),
	         "import os\n"
	         "for name, to in [('o-dir', '%s/dir'), ('o-file', '%s/file'),\n"
	         "                 ('o-missing', '%s/missing'), ('o-run', '%s'),\n"
	         "                 ('up', '../../..'), ('lnk', '/home/user/real'), "
	         "('rlnk', 'real')]:\n"
	         "    os.symlink(to, name)\n"
	         "os.makedirs('real/sub')\n"
	         "print('planted')",
	         oracle_dir, oracle_dir, oracle_dir, priv_box.b_run_dir);
	char *out = run_stdout(url, planter, code);
	cr_assert_str_eq(out, "planted\n", "%s", out ? out : "(nothing)");
	free(out);

	snprintf(c[0], sizeof(c[0]), "/home/user/up%s/dir", oracle_dir);
	snprintf(c[1], sizeof(c[1]), "/home/user/up%s/file", oracle_dir);
	snprintf(c[2], sizeof(c[2]), "/home/user/up%s", priv_box.b_run_dir);
	snprintf(c[3], sizeof(c[3]), "/home/user/../..%s/dir", oracle_dir);
	snprintf(c[4], sizeof(c[4]), "%s/dir", oracle_dir);
	snprintf(c[5], sizeof(c[5]), "/home/user/o-run/ctx");
	const char *refused[] = {"/home/user/o-dir",
	                         "/home/user/o-file",
	                         "/home/user/o-missing",
	                         "/home/user/o-run",
	                         c[0],
	                         c[1],
	                         c[2],
	                         c[3],
	                         c[4],
	                         c[5],
	                         NULL};
	refused_alike(&priv_box, refused);

	/* in the box: a link to a directory of the workspace, absolute or not */
	const char *fine[][2] = {{"/home/user/lnk/sub", "/home/user/real/sub\n"},
	                         {"/home/user/rlnk", "/home/user/real\n"}};
	for (size_t i = 0; i < 2; i++) {
		char *id = context_new(url, "python", fine[i][0]);
		cr_assert_not_null(id, "no context in %s", fine[i][0]);
		out = run_stdout(url, id, "import os\nprint(os.getcwd())");
		cr_expect_str_eq(out, fine[i][1], "cwd %s", fine[i][0]);
		free(out);
		free(id);
	}
	free(planter);
}

/* The names in dir, sorted, one per line (caller frees). */
static char *
listing(const char *dir)
{
	char cmd[300], buf[8192];
	size_t n;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | sort", dir);
	FILE *f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	pclose(f);
	return strdup(buf);
}

/*
 * --isolation context: refused cwds (below /root among them) read as a path
 * no box has, whatever the host holds there, and leave nothing in the
 * workspace root: no directory per refusal.
 */
Test(sandbox, refused_cwds_under_isolation_read_alike_and_leave_nothing,
     .fini = oracle_stop, .timeout = 180)
{
	const char *args[] = {"--no-default-context", "--isolation", "context", NULL};
	char ws[200], c[3][700];

	oracle_plant();
	cr_assert_eq(broker_start(&priv_box, args), 0);
	snprintf(ws, sizeof(ws), "%s.work", priv_box.b_run_dir);
	char *before = listing(ws);
	snprintf(c[0], sizeof(c[0]), "%s/dir", oracle_dir);
	snprintf(c[1], sizeof(c[1]), "%s/file", oracle_dir);
	snprintf(c[2], sizeof(c[2]), "/home/user/../..%s", priv_box.b_run_dir);
	const char *refused[] = {"/srv",
	                         "/root/.cache",
	                         c[0],
	                         c[1],
	                         c[2],
	                         priv_box.b_run_dir,
	                         "/home/user/sub",
	                         "/tmp/x",
	                         "/nonexistent",
	                         NULL};
	refused_alike(&priv_box, refused);
	char *after = listing(ws);
	cr_expect_str_eq(after, before, "the workspace root %s changed", ws);
	free(before);
	free(after);
}

/*
 * --isolation context: each context's /root is its own (its workspace's
 * .root). Two contexts made with cwd /root run there; what one writes there
 * the other does not see.
 */
Test(sandbox, under_isolation_each_contexts_root_is_its_own, .fini = others_stop,
     .timeout = 180)
{
	const char *args[] = {"--no-default-context", "--isolation", "context", NULL};

	cr_assert_eq(broker_start(&other, args), 0);
	char *a = context_new(other.b_url, "python", "/root"),
	     *b = context_new(other.b_url, "python", "/root");
	cr_assert(a && b, "a context with cwd /root was refused");
	char *out =
	    run_stdout(other.b_url, a,
	               "import os\nopen('mine.txt', 'w').write('a')\nprint(os.getcwd())");
	cr_assert_str_eq(out ? out : "", "/root\n");
	free(out);
	out =
	    run_stdout(other.b_url, b,
	               "import os\nprint(os.getcwd(), os.path.exists('/root/mine.txt'))");
	cr_assert_str_eq(out ? out : "", "/root False\n", "a neighbour's /root is seen");
	free(out);
	free(a);
	free(b);
}

/*
 * A tenant that makes the workspace's .root a link to a host path (/etc,
 * which its box shows read-only at /etc, or the run dir) gets an empty
 * read-only /root in its next box: the link is never followed by the
 * box's init, which runs as root on the host's paths.
 */
Test(sandbox, a_dot_root_made_a_link_is_not_followed, .fini = others_stop, .timeout = 180)
{
	const char *args[] = {"--no-default-context", "--pool", "0", NULL};
	char code[800];

	cr_assert_eq(broker_start(&other, args), 0);
	char *a = context_new(other.b_url, "python", NULL);
	cr_assert_not_null(a);
	snprintf(code, sizeof(code),
	         "import os\nos.rename('/home/user/.root', '/home/user/old-root')\n"
	         "os.symlink('%s', '/home/user/.root')\nprint('swapped')",
	         other.b_run_dir);
	char *out = run_stdout(other.b_url, a, code);
	cr_assert_str_eq(out ? out : "", "swapped\n");
	free(out);
	char *b = context_new(other.b_url, "python", "/root");
	cr_assert_not_null(b, "cwd /root refused once .root is a link");
	out = run_stdout(other.b_url, b,
	                 "import os\nprint(os.getcwd(), os.listdir('/root'), "
	                 "os.access('/root', os.W_OK))");
	cr_assert_str_eq(out ? out : "", "/root [] False\n");
	free(out);
	free(a);
	free(b);
}

/*
 * /proc/net/unix of one context, read by its kernel, against what it must
 * not name: the run dir, the context's id, the template, any path of the
 * host (its kernel's own sockets are abstract: no line names a path).
 */
static void
unix_sockets_name_nothing(const char *url, const char *run_dir, const char *id, const char *lang)
{
	const char *code = !strcmp(lang, "python") ? "print(open('/proc/net/unix').read(), end='')"
			   : !strcmp(lang, "bash") ? "cat /proc/net/unix"
						   : "console.log(Deno.readTextFileSync('/proc/net/unix'))";
	char *out = run_stdout(url, id, code), *save = NULL;

	cr_assert(out && strstr(out, "Inode Path"), "%s: /proc/net/unix: %s", lang, out ? out : "");
	for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		const char *path = strrchr(line, ' ');
		cr_expect(!strstr(line, run_dir), "%s: names the run dir: %s", lang, line);
		cr_expect(!strstr(line, id), "%s: names its context: %s", lang, line);
		cr_expect(!strstr(line, "template"), "%s: names the template: %s", lang, line);
		cr_expect(!path || path[1] != '/', "%s: names a path: %s", lang, line);
	}
	free(out);
}

/* A python context forked from the template (its pandas imported before it ran). */
struct forked {
	const char *url;
	char *id;
};

static bool
forked_python(void *arg)
{
	struct forked *f = arg;
	char *out;

	if (!f->id && !(f->id = context_new(f->url, "python", NULL)))
		return false;
	out = run_stdout(f->url, f->id, "import sys\nprint('pandas' in sys.modules)");
	bool yes = out && !strcmp(out, "True\n");
	free(out);
	if (!yes) { /* a cold start while the template was starting: another */
		context_delete(f->url, f->id);
		free(f->id);
		f->id = NULL;
	}
	return yes;
}

/*
 * /proc/net/unix in a box lists the sockets of the network namespace it
 * shares with its proxy: the proxy's link socket and its connections to the
 * template are made in the host's, so that nothing of the host is named
 * there: in shared and --isolation context modes, in a box forked from the
 * template (python) and in cold ones (bash, Deno).
 */
Test(sandbox, proc_net_unix_in_a_box_names_nothing_of_the_host, .fini = priv_box_stop,
     .timeout = 300)
{
	const char *modes[] = {"shared", "context"};

	for (int m = 0; m < 2; m++) {
		const char *args[] = {"--no-default-context", "--pool", "0", "--isolation", modes[m],
				      NULL};
		cr_assert_eq(broker_start(&priv_box, args), 0, "isolation %s", modes[m]);
		const char *url = priv_box.b_url;
		struct forked f = {url, NULL};
		cr_assert_eq(wait_until(forked_python, &f, 90000), 0,
			     "isolation %s: no kernel was forked from the template", modes[m]);
		unix_sockets_name_nothing(url, priv_box.b_run_dir, f.id, "python");
		for (int l = 0; l < 2; l++) {
			const char *lang = l ? "javascript" : "bash";
			char *id = context_new(url, lang, NULL);
			cr_assert(id, "isolation %s: a %s context", modes[m], lang);
			unix_sockets_name_nothing(url, priv_box.b_run_dir, id, lang);
			free(id);
		}
		free(f.id);
		cr_assert_eq(broker_stop(&priv_box), 0);
		priv_box.b_pid = 0;
	}
}

/* GET /ready's sandbox.all_contexts member key, or -1. */
static long long
all_contexts(const char *url, const char *key)
{
	struct resp r;
	long long v = -1;

	if (http(url, "GET", "/ready", NULL, &r, 10) == 0 && r.r_status == 200) {
		json_t *j = json_loads(r.r_body, 0, NULL);
		json_t *a = json_object_get(json_object_get(j, "sandbox"), "all_contexts");
		if (json_is_integer(json_object_get(a, key)))
			v = json_integer_value(json_object_get(a, key));
		json_decref(j);
	}
	resp_free(&r);
	return v;
}

#define HOG_MIB 32 /* each hog's share: under its own limit, three of them over the total */

/*
 * All contexts together stay under --total-memory, whatever each one's
 * limit: three contexts each holding a share under their own limit
 * (--kernel-memory) that together pass the total cannot all hold it (a
 * kernel is OOM-killed), while a quiet context and the broker stay.
 */
Test(sandbox, contexts_together_stay_under_the_total_memory, .fini = priv_box_stop,
     .timeout = 300)
{
	const char *args[] = {"--no-default-context", "--pool",	       "0",
			      "--kernel-memory",      "64M",	       "--total-memory",
			      "160M",		      "--kernel-network", "none",
			      NULL};
	char code[256], *hog[3];
	int holding = 0;

	cr_assert_eq(broker_start(&priv_box, args), 0);
	const char *url = priv_box.b_url;
	cr_assert_eq(all_contexts(url, "memory_bytes"), 160ll << 20, "GET /ready's bound");
	struct forked q = {url, NULL};
	/* forked kernels: each one's own memory is what it takes after the fork (~20 MiB) */
	cr_assert_eq(wait_until(forked_python, &q, 90000), 0, "no kernel forked from the template");
	for (int i = 0; i < 3; i++) {
		struct forked f = {url, NULL};
		cr_assert_eq(wait_until(forked_python, &f, 60000), 0, "hog %d", i);
		hog[i] = f.id;
	}
	/* each writes its share (every page) and keeps it */
	snprintf(code, sizeof(code), "x = b'x' * (%d << 20)\nprint('held')", HOG_MIB);
	for (int i = 0; i < 3; i++) {
		json_t *l = execute_code(url, hog[i], code, NULL, 60000, NULL);
		cr_log_info("hog %d: %s %s", i, error_name(l), error_value(l));
		json_decref(l);
	}
	for (int i = 0; i < 3; i++) {
		char *out = run_stdout(url, hog[i], "print(len(x))");
		holding += out && !strcmp(out, "33554432\n");
		free(out);
	}
	cr_expect(holding < 3, "three contexts hold %d MiB each, past the total of 160 MiB",
		  HOG_MIB);
	cr_expect(holding >= 1, "no context holds its share: the bound is not the total's");
	char *out = run_stdout(url, q.id, "print('quiet')");
	cr_expect_str_eq(out ? out : "", "quiet\n", "the quiet context");
	free(out);
	struct resp r;
	cr_expect_eq(http(url, "GET", "/health", NULL, &r, 5), 0);
	cr_expect_eq(r.r_status, 200, "the server after the hogs");
	resp_free(&r);
	cr_expect_eq(kill(priv_box.b_pid, 0), 0, "the broker is gone");
	for (int i = 0; i < 3; i++)
		free(hog[i]);
	free(q.id);
}

static bool
held_16m(void *url)
{
	return all_contexts(url, "workspace_bytes_held") == 16ll << 20;
}

/* POST /contexts with a language: its status, the id (caller frees) in *id. */
static long
context_post_new(const char *url, const char *lang, char **id, char *err, size_t errsz)
{
	char body[64];
	struct resp r;
	long st = -1;

	*id = NULL;
	snprintf(body, sizeof(body), "{\"language\": \"%s\"}", lang);
	if (http(url, "POST", "/contexts", body, &r, 60) == 0) {
		json_t *j = json_loads(r.r_body, 0, NULL);
		st = r.r_status;
		if (st == 200 && json_string_value(json_object_get(j, "id")))
			*id = strdup(json_string_value(json_object_get(j, "id")));
		snprintf(err, errsz, "%s", r.r_body ? r.r_body : "");
		json_decref(j);
	}
	resp_free(&r);
	return st;
}

/*
 * --isolation context: the contexts' workspace bounds never sum past
 * --total-workspace-size. Two of 16 MiB fit in 40 MiB; the third is refused
 * at once (507, saying why) and leaves nothing; the two keep writing; a
 * deleted context gives its share back. GET /ready shows the total and what
 * is held.
 */
Test(sandbox, workspaces_together_stay_under_their_total, .fini = priv_box_stop, .timeout = 180)
{
	const char *args[] = {"--no-default-context",	 "--pool",	   "0",
			      "--isolation",		 "context",	   "--workspace-size",
			      "16M",			 "--total-workspace-size", "40M",
			      "--kernel-network",	 "none",	   NULL};
	char err[1024], *a, *b, *c;

	cr_assert_eq(broker_start(&priv_box, args), 0);
	const char *url = priv_box.b_url;
	cr_assert_eq(all_contexts(url, "workspace_bytes"), 40ll << 20, "GET /ready's bound");
	cr_assert_eq(context_post_new(url, "bash", &a, err, sizeof(err)), 200, "%s", err);
	cr_assert_eq(context_post_new(url, "python", &b, err, sizeof(err)), 200, "%s", err);
	cr_expect_eq(all_contexts(url, "workspace_bytes_held"), 32ll << 20);
	cr_assert_eq(context_post_new(url, "bash", &c, err, sizeof(err)), 507, "%s", err);
	cr_expect(strstr(err, "total-workspace-size"), "the refusal does not say why: %s", err);
	cr_expect_eq(all_contexts(url, "workspace_bytes_held"), 32ll << 20);
	char *out = run_stdout(url, a, "head -c 1048576 /dev/zero > f && echo written");
	cr_expect_str_eq(out ? out : "", "written\n");
	free(out);
	out = run_stdout(url, b, "open('f', 'w').write('x' * (1 << 20))\nprint('written')");
	cr_expect_str_eq(out ? out : "", "written\n");
	free(out);
	cr_assert_eq(context_delete(url, a), 0);
	/* its share is held until its proxy has removed its workspace */
	cr_assert_eq(wait_until(held_16m, (void *)url, 20000), 0, "held: %lld",
		     all_contexts(url, "workspace_bytes_held"));
	cr_assert_eq(context_post_new(url, "bash", &c, err, sizeof(err)), 200,
		     "a deleted context's share was not given back: %s", err);
	out = run_stdout(url, c, "echo ok");
	cr_expect_str_eq(out ? out : "", "ok\n");
	free(out);
	free(a);
	free(b);
	free(c);
}
