/*
 * fuzz_replay_test.c — every fuzz seed and saved crash (tests/fuzz/corpus/NAME
 * and tests/fuzz/regressions/NAME) replayed through the very code the
 * libFuzzer targets run (tests/fuzz/targets.h), so make test keeps a fixed
 * crash fixed without clang. Paths are relative to the repository root, where
 * make test runs the unit tests.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../fuzz/targets.h"

typedef int (*fuzz_fn)(const uint8_t *data, size_t size);

static char crash_note[600];

/* A crash (not an ASan report: ASan keeps its own handler) names the input. */
static void
on_crash(int sig)
{
	if (write(STDERR_FILENO, crash_note, strlen(crash_note)) < 0)
		(void)0;
	signal(sig, SIG_DFL);
	raise(sig);
}

static void
catch_crashes(void)
{
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
	struct sigaction sa = {.sa_handler = on_crash}, old;

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
			sigaction(sigs[i], &sa, NULL);
}

/* The whole file, in a buffer of exactly its size so ASan sees any over-read. */
static uint8_t *
slurp(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *b;
	FILE *f = fopen(path, "rb");

	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	cr_assert_eq(fstat(fileno(f), &st), 0, "%s: %s", path, strerror(errno));
	b = malloc(st.st_size ? (size_t)st.st_size : 1);
	cr_assert_not_null(b);
	*len = fread(b, 1, st.st_size, f);
	cr_assert_eq(*len, (size_t)st.st_size, "%s: short read", path);
	fclose(f);
	return b;
}

static int
regular_file(const struct dirent *de)
{
	return de->d_name[0] != '.';
}

/* Replays every file of dir through one; returns how many there were. */
static size_t
replay_dir(const char *dir, fuzz_fn one, bool required)
{
	struct dirent **names;
	int n = scandir(dir, &names, regular_file, alphasort);
	char path[512];

	if (n < 0) {
		cr_assert(!required,
		          "%s: %s (the unit tests run from the repository root; the fuzz "
		          "corpus must be there)",
		          dir, strerror(errno));
		return 0;
	}
	for (int i = 0; i < n; i++) {
		size_t len;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
		free(names[i]);
		uint8_t *data = slurp(path, &len);
		snprintf(crash_note, sizeof(crash_note), "fuzz_replay: crashed on %s\n",
		         path);
		fuzz_input = path;
		cr_assert_eq(one(data, len), 0, "%s: the target returned non-zero", path);
		fuzz_input = NULL;
		free(data);
	}
	free(names);
	return n;
}

static void
replay(const char *target, fuzz_fn one)
{
	char dir[128];
	size_t seeds;

	catch_crashes();
	snprintf(dir, sizeof(dir), "tests/fuzz/corpus/%s", target);
	seeds = replay_dir(dir, one, true);
	cr_assert_gt(seeds, 0, "%s holds no seeds", dir);
	snprintf(dir, sizeof(dir), "tests/fuzz/regressions/%s", target);
	replay_dir(dir, one, false);
}

Test(fuzz_replay, every_msg_seed_and_regression_decodes_or_is_rejected_cleanly)
{
	replay("msg", fuzz_msg_one);
}

Test(fuzz_replay, every_http_seed_and_regression_validates_or_is_rejected_cleanly)
{
	cr_assert_eq(fuzz_http_init(), 0, "kernelspec temp dir: %s", strerror(errno));
	replay("http", fuzz_http_one);
}

Test(fuzz_replay, every_wire_seed_and_regression_parses_and_maps_or_is_rejected_cleanly)
{
	replay("wire", fuzz_wire_one);
}

Test(fuzz_replay, every_zmtp_seed_and_regression_is_cut_into_messages_or_dropped_cleanly)
{
	replay("zmtp", fuzz_zmtp_one);
}
