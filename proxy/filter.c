/*
 * filter.c — the seccomp filter of a kernel's box: an allowlist of the system
 * calls its kernels and what they run make, compiled once (before any fork)
 * into the BPF program the box's init installs. Every other call fails.
 *
 * The list was measured, not guessed: strace -f over each kernel (python
 * forked from the template and cold, R, bash, java, Deno for javascript and
 * typescript) starting, running the data stack, plots, subprocesses,
 * multiprocessing, sockets, fetch and npm: imports, pip, curl, git and gcc
 * from bash, restarting; and over the box's init from its
 * prctl(PR_SET_SECCOMP) on. Each group says who made its calls. A group
 * adds the other forms of a call it allows (stat beside newfstatat, pipe
 * beside pipe2), which refusing would break without narrowing anything, and,
 * where it says so, calls of usual libraries the runs did not reach (System
 * V IPC, mlock).
 */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/netlink.h>

#include <seccomp.h>

#include "proxy.h"

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41 /* Linux 5.17 */
#endif

/*
 * Allowed whatever their arguments. SCMP_SYS(name) is libseccomp's __SNR_name:
 * a name it does not know fails the build; one this architecture lacks is a
 * pseudo number no call matches.
 */
/* clang-format off */
static const int sb_allowed[] = {
	/* processes: every kernel forks or spawns (python subprocess, R
	 * parallel, bash, the JVM's jspawnhelper, Deno.Command); the box's init
	 * forks the kernel and executes sandcell-init (execveat) */
	SCMP_SYS(fork), SCMP_SYS(vfork), SCMP_SYS(execve), SCMP_SYS(execveat),
	SCMP_SYS(exit), SCMP_SYS(exit_group), SCMP_SYS(wait4), SCMP_SYS(waitid),
	/* a thread's setup by libc (glibc 2.35+ registers rseq) and TLS */
	SCMP_SYS(set_tid_address), SCMP_SYS(set_robust_list), SCMP_SYS(rseq),
	SCMP_SYS(arch_prctl),
	/* ids, sessions, process groups (bash job control, setsid children);
	 * set*id and capset can only keep or lower what a box holds: nothing */
	SCMP_SYS(getpid), SCMP_SYS(getppid), SCMP_SYS(gettid), SCMP_SYS(getpgid),
	SCMP_SYS(getpgrp), SCMP_SYS(getsid), SCMP_SYS(setsid), SCMP_SYS(setpgid),
	SCMP_SYS(getuid), SCMP_SYS(geteuid), SCMP_SYS(getgid), SCMP_SYS(getegid),
	SCMP_SYS(getresuid), SCMP_SYS(getresgid), SCMP_SYS(getgroups), SCMP_SYS(setuid),
	SCMP_SYS(setgid), SCMP_SYS(setreuid), SCMP_SYS(setregid), SCMP_SYS(setresuid),
	SCMP_SYS(setresgid), SCMP_SYS(setgroups), SCMP_SYS(setfsuid), SCMP_SYS(setfsgid),
	SCMP_SYS(capget), SCMP_SYS(capset),
	/* memory: malloc, the JVM's and V8's heaps and JIT (mremap, pkey_alloc:
	 * V8), madvise (MADV_POPULATE_WRITE: a forked kernel's hot pages),
	 * NUMA policy (ps, top), mlock (crypto libraries; RLIMIT_MEMLOCK bounds it) */
	SCMP_SYS(brk), SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mremap),
	SCMP_SYS(mprotect), SCMP_SYS(madvise), SCMP_SYS(msync), SCMP_SYS(mincore),
	SCMP_SYS(mlock), SCMP_SYS(mlock2), SCMP_SYS(munlock), SCMP_SYS(mlockall),
	SCMP_SYS(munlockall), SCMP_SYS(membarrier), SCMP_SYS(memfd_create),
	SCMP_SYS(pkey_alloc), SCMP_SYS(pkey_free), SCMP_SYS(pkey_mprotect),
	SCMP_SYS(get_mempolicy), SCMP_SYS(set_mempolicy), SCMP_SYS(mbind),
	/* threads and locks */
	SCMP_SYS(futex), SCMP_SYS(sched_yield), SCMP_SYS(sched_getaffinity),
	SCMP_SYS(sched_setaffinity), SCMP_SYS(sched_getparam), SCMP_SYS(sched_setparam),
	SCMP_SYS(sched_getscheduler), SCMP_SYS(sched_setscheduler),
	SCMP_SYS(sched_getattr), SCMP_SYS(sched_setattr),
	SCMP_SYS(sched_get_priority_max), SCMP_SYS(sched_get_priority_min),
	SCMP_SYS(sched_rr_get_interval), SCMP_SYS(getpriority), SCMP_SYS(setpriority),
	SCMP_SYS(getcpu),
	/* limits and what the system is (os.cpu_count, Deno.systemMemoryInfo) */
	SCMP_SYS(getrlimit), SCMP_SYS(setrlimit), SCMP_SYS(prlimit64),
	SCMP_SYS(getrusage), SCMP_SYS(times), SCMP_SYS(sysinfo), SCMP_SYS(uname),
	SCMP_SYS(getrandom),
	/* files: reading and writing; statx, faccessat2 and close_range are
	 * allowed, not ENOSYS: they are what ls, Deno, the JVM and python call */
	SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
	SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(preadv), SCMP_SYS(pwritev),
	SCMP_SYS(preadv2), SCMP_SYS(pwritev2), SCMP_SYS(open), SCMP_SYS(openat),
	SCMP_SYS(openat2), SCMP_SYS(creat), SCMP_SYS(close), SCMP_SYS(close_range),
	SCMP_SYS(dup), SCMP_SYS(dup2), SCMP_SYS(dup3), SCMP_SYS(lseek), SCMP_SYS(fcntl),
	SCMP_SYS(flock), SCMP_SYS(fsync), SCMP_SYS(fdatasync), SCMP_SYS(sync),
	SCMP_SYS(syncfs), SCMP_SYS(sync_file_range), SCMP_SYS(fallocate),
	SCMP_SYS(ftruncate), SCMP_SYS(truncate), SCMP_SYS(fadvise64), SCMP_SYS(readahead),
	SCMP_SYS(sendfile), SCMP_SYS(copy_file_range), SCMP_SYS(splice),
	/* files: names, metadata, directories (cp -a copies xattrs; the
	 * kernel's uid owns its files, chown cannot give them away) */
	SCMP_SYS(stat), SCMP_SYS(fstat), SCMP_SYS(lstat), SCMP_SYS(newfstatat),
	SCMP_SYS(statx), SCMP_SYS(statfs), SCMP_SYS(fstatfs), SCMP_SYS(access),
	SCMP_SYS(faccessat), SCMP_SYS(faccessat2), SCMP_SYS(readlink),
	SCMP_SYS(readlinkat),
	SCMP_SYS(getdents), SCMP_SYS(getdents64), SCMP_SYS(getcwd), SCMP_SYS(chdir),
	SCMP_SYS(fchdir), SCMP_SYS(umask), SCMP_SYS(mkdir), SCMP_SYS(mkdirat),
	SCMP_SYS(rmdir), SCMP_SYS(unlink), SCMP_SYS(unlinkat), SCMP_SYS(rename),
	SCMP_SYS(renameat), SCMP_SYS(renameat2), SCMP_SYS(link), SCMP_SYS(linkat),
	SCMP_SYS(symlink), SCMP_SYS(symlinkat), SCMP_SYS(mknod), SCMP_SYS(mknodat),
	SCMP_SYS(chmod), SCMP_SYS(fchmod), SCMP_SYS(fchmodat),
#ifdef __NR_fchmodat2 /* glibc 2.39's lchmod; kernel headers 6.6+ */
	SCMP_SYS(fchmodat2),
#endif
	SCMP_SYS(chown), SCMP_SYS(fchown), SCMP_SYS(lchown), SCMP_SYS(fchownat),
	SCMP_SYS(utime), SCMP_SYS(utimes), SCMP_SYS(futimesat), SCMP_SYS(utimensat),
	SCMP_SYS(getxattr), SCMP_SYS(lgetxattr), SCMP_SYS(fgetxattr), SCMP_SYS(setxattr),
	SCMP_SYS(lsetxattr), SCMP_SYS(fsetxattr), SCMP_SYS(listxattr),
	SCMP_SYS(llistxattr), SCMP_SYS(flistxattr), SCMP_SYS(removexattr),
	SCMP_SYS(lremovexattr), SCMP_SYS(fremovexattr),
	/* waiting on descriptors: every event loop (zmq, asyncio, tokio, the
	 * JVM's NIO); signalfd: the box's init; inotify: Deno.watchFs */
	SCMP_SYS(poll), SCMP_SYS(ppoll), SCMP_SYS(select), SCMP_SYS(pselect6),
	SCMP_SYS(epoll_create), SCMP_SYS(epoll_create1), SCMP_SYS(epoll_ctl),
	SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait), SCMP_SYS(epoll_pwait2),
	SCMP_SYS(eventfd), SCMP_SYS(eventfd2), SCMP_SYS(signalfd), SCMP_SYS(signalfd4),
	SCMP_SYS(pipe), SCMP_SYS(pipe2), SCMP_SYS(inotify_init), SCMP_SYS(inotify_init1),
	SCMP_SYS(inotify_add_watch), SCMP_SYS(inotify_rm_watch),
	/* time and timers (setitimer: python's signal.setitimer; timer_create:
	 * timeout(1); the clocks are read, never set) */
	SCMP_SYS(clock_gettime), SCMP_SYS(clock_getres), SCMP_SYS(clock_nanosleep),
	SCMP_SYS(nanosleep), SCMP_SYS(gettimeofday), SCMP_SYS(time), SCMP_SYS(alarm),
	SCMP_SYS(getitimer), SCMP_SYS(setitimer), SCMP_SYS(timer_create),
	SCMP_SYS(timer_settime), SCMP_SYS(timer_gettime), SCMP_SYS(timer_getoverrun),
	SCMP_SYS(timer_delete), SCMP_SYS(timerfd_create), SCMP_SYS(timerfd_settime),
	SCMP_SYS(timerfd_gettime),
	/* signals: within the box's PID namespace only */
	SCMP_SYS(rt_sigaction), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigreturn),
	SCMP_SYS(rt_sigsuspend), SCMP_SYS(rt_sigpending), SCMP_SYS(rt_sigtimedwait),
	SCMP_SYS(rt_sigqueueinfo), SCMP_SYS(rt_tgsigqueueinfo), SCMP_SYS(sigaltstack),
	SCMP_SYS(pause), SCMP_SYS(kill), SCMP_SYS(tkill), SCMP_SYS(tgkill),
	SCMP_SYS(pidfd_open), SCMP_SYS(pidfd_send_signal), SCMP_SYS(restart_syscall),
	/* sockets, once made (socket, socketpair: rules below) */
	SCMP_SYS(bind), SCMP_SYS(listen), SCMP_SYS(accept), SCMP_SYS(accept4),
	SCMP_SYS(connect), SCMP_SYS(getsockname), SCMP_SYS(getpeername), SCMP_SYS(sendto),
	SCMP_SYS(recvfrom), SCMP_SYS(sendmsg), SCMP_SYS(recvmsg), SCMP_SYS(sendmmsg),
	SCMP_SYS(recvmmsg), SCMP_SYS(shutdown), SCMP_SYS(setsockopt),
	SCMP_SYS(getsockopt),
	/* System V IPC, in the box's own IPC namespace (shared memory of X
	 * libraries, PostgreSQL, MPI) */
	SCMP_SYS(shmget), SCMP_SYS(shmat), SCMP_SYS(shmdt), SCMP_SYS(shmctl),
	SCMP_SYS(semget), SCMP_SYS(semop), SCMP_SYS(semtimedop), SCMP_SYS(semctl),
	SCMP_SYS(msgget), SCMP_SYS(msgsnd), SCMP_SYS(msgrcv), SCMP_SYS(msgctl),
	/* Landlock: the kernel's child enters its domain after the filter
	 * (lib/landlock.c); a kernel can only narrow its own further */
	SCMP_SYS(landlock_create_ruleset), SCMP_SYS(landlock_add_rule),
	SCMP_SYS(landlock_restrict_self),
};
/* clang-format on */

/* clang-format off */
/* An argument the kernel reads as an int: a filter sees 64 bits, compare 32. */
#define SB_INT(arg, v) {(arg), SCMP_CMP_MASKED_EQ, 0xffffffffu, (v)}
#define SB_BITS(arg, mask, v) {(arg), SCMP_CMP_MASKED_EQ, (mask), (v)}
/* a socket's type, without SOCK_CLOEXEC and SOCK_NONBLOCK (SOCK_TYPE_MASK) */
#define SB_TYPE(t) SB_BITS(1, 0xf, (t))

/* Allowed when all of a rule's tests hold (one or two, on different arguments). */
static const struct sb_rule {
	int r_nr;
	unsigned r_ncmp;
	struct scmp_arg_cmp r_cmp[2];
} sb_rules[] = {
	/* threads and processes, but no new namespaces (a user namespace gives
	 * capabilities back inside it) */
	{SCMP_SYS(clone), 1, {SB_BITS(0, SB_NS_FLAGS, 0)}},
	/* sockets: Unix, TCP and UDP over IPv4 and IPv6, and netlink routing
	 * (glibc's getaddrinfo with AI_ADDRCONFIG, if_nameindex, getifaddrs:
	 * python, Deno.networkInterfaces); no raw, packet or other families */
	{SCMP_SYS(socket), 1, {SB_INT(0, AF_UNIX)}},
	{SCMP_SYS(socket), 2, {SB_INT(0, AF_INET), SB_TYPE(SOCK_STREAM)}},
	{SCMP_SYS(socket), 2, {SB_INT(0, AF_INET), SB_TYPE(SOCK_DGRAM)}},
	{SCMP_SYS(socket), 2, {SB_INT(0, AF_INET6), SB_TYPE(SOCK_STREAM)}},
	{SCMP_SYS(socket), 2, {SB_INT(0, AF_INET6), SB_TYPE(SOCK_DGRAM)}},
	{SCMP_SYS(socket), 2, {SB_INT(0, AF_NETLINK), SB_INT(2, NETLINK_ROUTE)}},
	{SCMP_SYS(socketpair), 1, {SB_INT(0, AF_UNIX)}},
	/* prctl: thread names (every runtime), the box's init and kernel
	 * (PDEATHSIG, DUMPABLE), libcap's probe (CAPBSET_READ), glibc naming
	 * its mappings (SET_VMA), and asking for what the box already is */
	{SCMP_SYS(prctl), 1, {SB_INT(0, PR_SET_NAME)}},
	{SCMP_SYS(prctl), 1, {SB_INT(0, PR_GET_NAME)}},
	{SCMP_SYS(prctl), 1, {SB_INT(0, PR_SET_PDEATHSIG)}},
	{SCMP_SYS(prctl), 1, {SB_INT(0, PR_GET_PDEATHSIG)}},
	{SCMP_SYS(prctl), 1, {SB_INT(0, PR_SET_DUMPABLE)}},
	{SCMP_SYS(prctl), 1, {SB_INT(0, PR_GET_DUMPABLE)}},
	{SCMP_SYS(prctl), 1, {SB_INT(0, PR_CAPBSET_READ)}},
	{SCMP_SYS(prctl), 1, {SB_INT(0, PR_SET_VMA)}},
	{SCMP_SYS(prctl), 1, {SB_INT(0, PR_SET_NO_NEW_PRIVS)}},
	{SCMP_SYS(prctl), 1, {SB_INT(0, PR_GET_NO_NEW_PRIVS)}},
	{SCMP_SYS(prctl), 1, {SB_INT(0, PR_GET_SECCOMP)}},
	/* personality: asking, or plain Linux; no other persona (no
	 * ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC) */
	{SCMP_SYS(personality), 1, {SB_INT(0, PER_LINUX)}},
	{SCMP_SYS(personality), 1, {SB_INT(0, 0xffffffffu)}},
};

/*
 * Refused with ENOSYS, not EPERM: callers take it for "this kernel has no
 * such call" and fall back. clone3 passes its flags in memory a filter
 * cannot read (the namespace rule above would not hold): glibc then uses
 * clone.
 */
static const int sb_enosys[] = {
	SCMP_SYS(clone3),
};
/* clang-format on */

/* The calls after libseccomp's last name refused with ENOSYS, and its longest gap. */
#define SB_YOUNG 64

/*
 * ioctl, but not TIOCSTI (typing into a terminal's input). The kernel reads
 * the command as 32 bits, and libseccomp has no "masked not equal": one rule
 * per bit of those 32, each allowing the commands that differ from TIOCSTI in
 * that bit; together, every command but TIOCSTI. (TIOCSTI works only on the
 * caller's own terminal, and the box's init calls setsid: this is the second
 * fence, not the first.)
 */
static int
filter_ioctl(scmp_filter_ctx ctx)
{
	int rc = 0;

	for (int b = 0; b < 32 && rc == 0; b++) {
		uint64_t bit = 1ull << b;
		struct scmp_arg_cmp cmd = SCMP_A1(SCMP_CMP_MASKED_EQ, bit,
						  ~TIOCSTI & bit);

		rc = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
					    &cmd);
	}
	return rc;
}

static int
filter_rules(scmp_filter_ctx ctx)
{
	int rc = 0, last = 0;
	char *name;

	for (size_t i = 0; i < sizeof(sb_allowed) / sizeof(sb_allowed[0]) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, sb_allowed[i], 0);
	for (size_t i = 0; i < sizeof(sb_rules) / sizeof(sb_rules[0]) && rc == 0; i++)
		rc = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, sb_rules[i].r_nr,
					    sb_rules[i].r_ncmp, sb_rules[i].r_cmp);
	if (rc == 0)
		rc = filter_ioctl(ctx);
	for (size_t i = 0; i < sizeof(sb_enosys) / sizeof(sb_enosys[0]) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), sb_enosys[i], 0);
	/*
	 * Calls younger than this libseccomp, which it cannot name (x86_64 and
	 * 2.5.4: 457 on): ENOSYS, what an older kernel answers, so that a newer
	 * libc falls back where EPERM would fail it. Its names go on past the
	 * highest allowed above, with gaps shorter than SB_YOUNG.
	 */
	for (size_t i = 0; i < sizeof(sb_allowed) / sizeof(sb_allowed[0]); i++)
		if (sb_allowed[i] > last)
			last = sb_allowed[i];
	for (int nr = last + 1; nr <= last + SB_YOUNG; nr++)
		if ((name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr))) {
			last = nr;
			free(name);
		}
	for (int nr = last + 1; nr <= last + SB_YOUNG && rc == 0; nr++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0);
	return rc;
}

/* The filter as a BPF program, built once before any fork. */
int
filter_build(struct box *bx)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	int rc = -EINVAL, fd = -1;
	struct stat st;

	if (!ctx)
		return -ENOMEM;
	/* a binary tree, not a list: every allowed call would walk all rules */
	seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if ((rc = filter_rules(ctx)) < 0)
		goto out;
	if ((fd = memfd_create("sandcell-seccomp", MFD_CLOEXEC)) < 0) {
		rc = -errno;
		goto out;
	}
	if ((rc = seccomp_export_bpf(ctx, fd)) < 0)
		goto out;
	if (fstat(fd, &st) < 0 || st.st_size == 0 || st.st_size % sizeof(struct sock_filter)) {
		rc = -EIO;
		goto out;
	}
	bx->bx_prog.len = st.st_size / sizeof(struct sock_filter);
	bx->bx_prog.filter = xmalloc(st.st_size);
	if (pread(fd, bx->bx_prog.filter, st.st_size, 0) != st.st_size) {
		rc = -EIO;
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return rc;
}
