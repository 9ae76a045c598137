/*
 * hotpages_test.c — the template's list of the pages its kernels copy
 * (proxy/hotpages.c), on real forks of this process: references that write
 * to some pages of a shared region, a scan against them, and a later fork
 * that copies the listed pages and no other.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

long boxlib_hot_scan(const int *refs, int nrefs);
long boxlib_hot_fill(void);

#define PAGES 16384 /* 64 MiB: the test process's other pages (ASan's too) stay well under a third */
#define PG 4096

static char *region;

static void
setup(void)
{
	region = mmap(NULL, (size_t)PAGES * PG, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(region != MAP_FAILED);
	madvise(region, (size_t)PAGES * PG, MADV_NOHUGEPAGE); /* one frame per page */
	for (size_t i = 0; i < PAGES; i++)
		region[i * PG] = 1;
}

static void
teardown(void)
{
	boxlib_hot_scan(NULL, 0); /* no list */
	munmap(region, (size_t)PAGES * PG);
}

/* A fork that writes to the pages named (n of them, -1 ends), says so, and waits. */
static pid_t
reference(const int *pages)
{
	int p[2];
	char c;
	pid_t pid;

	cr_assert(pipe(p) == 0);
	if ((pid = fork()) == 0) {
		for (; *pages >= 0; pages++)
			region[(size_t)*pages * PG] = 2;
		(void)!write(p[1], "r", 1);
		pause();
		_exit(0);
	}
	close(p[1]);
	cr_assert(read(p[0], &c, 1) == 1, "the reference did not start");
	close(p[0]);
	return pid;
}

static void
end(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static uint64_t
pfn_of(int pm, size_t page)
{
	uint64_t e = 0;

	if (pread(pm, &e, sizeof(e), (off_t)(((uintptr_t)region / PG + page) * sizeof(e))) !=
	    sizeof(e))
		return 0;
	return e & ((1ULL << 55) - 1);
}

/*
 * A fork that runs boxlib_hot_fill and then reports which pages of the
 * region it no longer shares with us (the page frames differ): a bitmap.
 */
static void
fill_in_fork(unsigned char *copied, long *filled)
{
	int p[2];
	pid_t pid;
	int pm = open("/proc/self/pagemap", O_RDONLY);
	static uint64_t ours[PAGES];

	cr_assert(pm >= 0);
	for (size_t i = 0; i < PAGES; i++)
		ours[i] = pfn_of(pm, i);
	close(pm);
	cr_assert(pipe(p) == 0);
	if ((pid = fork()) == 0) {
		static unsigned char bits[PAGES];
		long n = boxlib_hot_fill();
		int cpm = open("/proc/self/pagemap", O_RDONLY);
		for (size_t i = 0; i < PAGES; i++)
			bits[i] = pfn_of(cpm, i) != ours[i];
		(void)!write(p[1], &n, sizeof(n));
		(void)!write(p[1], bits, sizeof(bits));
		_exit(0);
	}
	close(p[1]);
	cr_assert(read(p[0], filled, sizeof(*filled)) == sizeof(*filled));
	size_t got = 0;
	ssize_t r;
	while (got < PAGES && (r = read(p[0], copied + got, PAGES - got)) > 0)
		got += (size_t)r;
	cr_assert_eq(got, PAGES);
	close(p[0]);
	waitpid(pid, NULL, 0);
}

/*
 * The list made against references that wrote the pages named (one -1-ended
 * array each), which then end; then a fork's fill: what it reported and which
 * pages it copied. The scan's result.
 */
static long
scan_then_fill(const int *const *writes, int nrefs, unsigned char *copied, long *filled)
{
	pid_t refs[4] = {0};
	long n;

	cr_assert_leq(nrefs, 4);
	for (int k = 0; k < nrefs; k++)
		refs[k] = reference(writes[k]);
	n = boxlib_hot_scan(refs, nrefs);
	for (int k = 0; k < nrefs; k++)
		end(refs[k]);
	fill_in_fork(copied, filled);
	return n;
}

static void
need_frames(void)
{
	if (geteuid() != 0)
		cr_skip_test("page frame numbers need CAP_SYS_ADMIN");
}

TestSuite(hotpages, .init = setup, .fini = teardown);

Test(hotpages, a_fork_copies_the_pages_the_reference_copied_and_no_other)
{
	static const int wrote[] = {3, 10, 11, 12, 500, PAGES - 1, -1};
	static unsigned char copied[PAGES];
	long filled;

	need_frames();
	long n = scan_then_fill((const int *const[]){wrote}, 1, copied, &filled);
	cr_assert_geq(n, 6, "listed %ld pages", n);
	cr_assert_geq(filled, 6);
	for (size_t i = 0, k = 0; i < PAGES; i++) {
		bool listed = (int)i == wrote[k];
		cr_expect_eq(copied[i], listed, "page %zu: copied %d, written by the reference %d",
			     i, copied[i], listed);
		k += listed;
	}
}

Test(hotpages, with_two_references_only_the_pages_both_copied_are_listed)
{
	static const int a[] = {3, 10, 20, -1}, b[] = {10, 20, 30, -1};
	static unsigned char copied[PAGES];
	long filled;

	need_frames();
	long n = scan_then_fill((const int *const[]){a, b}, 2, copied, &filled);
	cr_assert_geq(n, 2);
	for (size_t i = 0; i < PAGES; i++)
		cr_expect_eq(copied[i], i == 10 || i == 20, "page %zu: copied %d", i, copied[i]);
}

Test(hotpages, a_reference_that_copied_most_pages_gives_no_list)
{
	static int all[PAGES + 1];
	static unsigned char copied[PAGES];
	long filled;

	need_frames();
	for (int i = 0; i < PAGES; i++)
		all[i] = i;
	all[PAGES] = -1;
	long n = scan_then_fill((const int *const[]){all}, 1, copied, &filled);
	cr_assert_lt(n, 0, "a list of %ld pages, more than a third of ours", n);
	cr_assert_eq(filled, 0);
	for (size_t i = 0; i < PAGES; i++)
		cr_expect_eq(copied[i], 0, "page %zu copied", i);
}

Test(hotpages, without_a_reference_there_is_no_list)
{
	static const int wrote[] = {3, -1};
	static unsigned char copied[PAGES];
	long filled;

	need_frames();
	pid_t ref = reference(wrote);
	cr_assert_gt(boxlib_hot_scan(&ref, 1), 0);
	end(ref); /* reaped: its pagemap is gone */
	cr_assert_eq(boxlib_hot_scan(&ref, 1), -ESRCH);
	cr_assert_eq(boxlib_hot_scan(NULL, 0), -ESRCH);
	fill_in_fork(copied, &filled);
	cr_assert_eq(filled, 0);
	cr_expect_eq(copied[3], 0);
}
