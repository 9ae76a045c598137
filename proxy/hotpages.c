/*
 * hotpages.c — the template's pages that every kernel forked from it copies
 * as it starts, copied in a few calls instead of one page fault each.
 *
 * A forked kernel's start writes to some 4000 of the template's pages (CPython
 * writes reference counts into every object it touches), and each first
 * write is a copy-on-write fault: on a virtual machine whose faults cost tens
 * of microseconds, much of its start. Which pages they are does not change
 * from one kernel to the next. Before a fork the template lists them in runs
 * (boxlib_hot_scan); the kernel, first thing, copies each run with one
 * MADV_POPULATE_WRITE (boxlib_hot_fill). That is the copy its first writes
 * would have made, earlier: what the kernel computes is untouched, and its
 * memory grows only by pages its start would have copied anyway.
 *
 * A page is listed when the kernels that have started, the references (up
 * to HOT_REFS), each map another page frame there than the template: each
 * copied it. Kernels still starting are left out: they have not copied their
 * pages yet (the exclusive bit of /proc/self/pagemap would count them, and on
 * recent Linux it speaks for a whole huge page). Without a reference, when
 * page frames are not readable, or with a list of more than a third of the
 * template's pages, there is no list, and kernels fault as before.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proxy.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#define PM_PRESENT (1ULL << 63)
#define PM_PFN ((1ULL << 55) - 1) /* 0 unless CAP_SYS_ADMIN */
#define HOT_REFS 3
#define HOT_MAX_SHARE 3 /* at most 1/3 of the present pages */
#define HOT_BATCH 4096  /* pagemap entries read at once */

struct run {
	uintptr_t r_at;
	size_t r_pages;
};

/* The list, made in the template, inherited by each fork. */
static struct run *hot;
static size_t nhot, hot_cap, hot_pages;

static void
hot_add(uintptr_t at, size_t pagesz)
{
	if (nhot && hot[nhot - 1].r_at + hot[nhot - 1].r_pages * pagesz == at) {
		hot[nhot - 1].r_pages++;
	} else {
		if (nhot == hot_cap) {
			hot_cap = hot_cap ? hot_cap * 2 : 1024;
			hot = xrealloc(hot, hot_cap * sizeof(*hot));
		}
		hot[nhot++] = (struct run){at, 1};
	}
	hot_pages++;
}

/* The listed pages of [a, b) (ref: the references' pagemaps); the present ones counted. */
static int
scan_range(int pm, const int *ref, int nref, uintptr_t a, uintptr_t b, size_t pagesz,
	   size_t *present)
{
	static uint64_t e[HOT_BATCH], r[HOT_REFS][HOT_BATCH];
	ssize_t m[HOT_REFS];

	for (uintptr_t at = a; at < b;) {
		size_t want = (b - at) / pagesz;
		if (want > HOT_BATCH)
			want = HOT_BATCH;
		off_t off = (off_t)(at / pagesz * sizeof(*e));
		ssize_t n = pread(pm, e, want * sizeof(*e), off);
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		/* a reference may lack part of the range: none of that part is listed */
		for (int k = 0; k < nref; k++)
			m[k] = pread(ref[k], r[k], (size_t)n, off) / (ssize_t)sizeof(*e);
		for (size_t i = 0; i < (size_t)n / sizeof(*e); i++, at += pagesz) {
			uint64_t pfn = e[i] & PM_PFN;
			if (!(e[i] & PM_PRESENT))
				continue;
			(*present)++;
			int k = 0;
			while (k < nref && pfn && (ssize_t)i < m[k] && (r[k][i] & PM_PRESENT) &&
			       (r[k][i] & PM_PFN) != pfn)
				k++;
			if (k == nref)
				hot_add(at, pagesz);
		}
	}
	return 0;
}

/*
 * In the template, before a fork: the list, from its private writable memory
 * without a file (heap, Python's arenas) and the pagemaps of refs, kernels
 * forked from it that have started. The pages listed, or -errno: no list
 * (-ESRCH: no reference could be read).
 */
long
boxlib_hot_scan(const int *refs, int nrefs)
{
	size_t pagesz = (size_t)sysconf(_SC_PAGESIZE), present = 0;
	char line[512], path[64];
	FILE *maps = NULL;
	int pm = -1, ref[HOT_REFS], nref = 0;
	int rc = 0;

	nhot = hot_pages = 0;
	for (int k = 0; k < nrefs && nref < HOT_REFS; k++) {
		snprintf(path, sizeof(path), "/proc/%d/pagemap", refs[k]);
		if ((ref[nref] = open(path, O_RDONLY | O_CLOEXEC)) >= 0)
			nref++;
	}
	if (!nref)
		return -ESRCH; /* our own maps are not read for nothing */
	if (!(maps = fopen("/proc/self/maps", "re")) ||
	    (pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC)) < 0) {
		rc = -errno;
		goto out;
	}
	while (rc == 0 && fgets(line, sizeof(line), maps)) {
		unsigned long a, b;
		char perms[8], name[256] = "";
		if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &a, &b, perms, name) < 3)
			continue;
		/* rw-p, and anonymous: no path, or the heap */
		if (strcmp(perms, "rw-p") || (name[0] && strcmp(name, "[heap]")))
			continue;
		rc = scan_range(pm, ref, nref, a, b, pagesz, &present);
	}
	if (rc == 0 && hot_pages * HOT_MAX_SHARE > present)
		rc = -E2BIG;
out:
	if (rc < 0)
		nhot = hot_pages = 0;
	if (maps)
		fclose(maps);
	if (pm >= 0)
		close(pm);
	while (nref > 0)
		close(ref[--nref]);
	return rc < 0 ? rc : (long)hot_pages;
}

/*
 * In the kernel, first thing after its fork: each run of the list copied at
 * once. A run that is no longer there (the template freed it before the
 * fork) fails alone. The pages copied.
 */
long
boxlib_hot_fill(void)
{
	size_t pagesz = (size_t)sysconf(_SC_PAGESIZE);
	long done = 0;

	for (size_t i = 0; i < nhot; i++)
		if (madvise((void *)hot[i].r_at, hot[i].r_pages * pagesz, MADV_POPULATE_WRITE) ==
		    0)
			done += (long)hot[i].r_pages;
		else if (errno == EINVAL) /* a kernel before 5.14: none will work */
			break;
	return done;
}
