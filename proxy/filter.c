/*
 * filter.c — the seccomp filter of a kernel's box: the system calls it
 * refuses, compiled once (before any fork) into the BPF program the box's
 * init installs.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/filter.h>

#include <seccomp.h>

#include "proxy.h"

/*
 * Refused with EPERM: what no notebook needs and what widens the kernel's
 * attack surface or reaches outside the box.
 */
static const char *const sb_refused[] = {
	"ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
	"chroot", "swapon", "swapoff", "reboot", "kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module", "bpf", "perf_event_open", "keyctl",
	"add_key", "request_key", "acct", "quotactl", "setns", "unshare",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "userfaultfd", "iopl",
	"ioperm", "syslog", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"sethostname", "setdomainname", "fsopen", "fsconfig", "fsmount", "fspick",
	"move_mount", "open_tree", "mount_setattr", "kcmp", "vhangup", "uselib", "ustat",
	"sysfs", "_sysctl", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"fanotify_init", "nfsservctl", "create_module", "get_kernel_syms", "query_module",
};

/* The filter as a BPF program, built once before any fork. */
int
filter_build(struct box *bx)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int rc = -EINVAL, fd = -1;
	struct stat st;

	if (!ctx)
		return -ENOMEM;
	/* a binary tree, not a list: every allowed call would walk all rules */
	seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	for (size_t i = 0; i < sizeof(sb_refused) / sizeof(sb_refused[0]); i++) {
		int nr = seccomp_syscall_resolve_name(sb_refused[i]);
		if (nr != __NR_SCMP_ERROR &&
		    (rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0)) < 0)
			goto out;
	}
	/* new namespaces (a user namespace gives back capabilities inside it);
	 * libseccomp cannot say "any of these bits" in one rule: one per flag */
	for (unsigned long f = 1; f; f <<= 1)
		if ((f & SB_NS_FLAGS) &&
		    (rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
					   SCMP_A0(SCMP_CMP_MASKED_EQ, f, f))) < 0)
			goto out;
	/* clone3 passes flags in memory a filter cannot read: glibc falls back to clone */
	if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
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
