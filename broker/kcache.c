/*
 * kcache.c — the kernelspecs the broker knows, read again when stale or on a
 * miss.
 */
#include "broker.h"

/* the kernelspecs as last read, and when */
static struct kspec **kspecs;
static size_t nkspecs;
static uint64_t kspecs_at;

#define KSPEC_TTL_MS 5000

/*
 * Kernelspecs without rescanning the data dirs on every request: the list is
 * read again after KSPEC_TTL_MS, or on a miss (at most once a second), so a
 * kernelspec installed meanwhile is found at once. The result is borrowed
 * until the next call.
 */
const struct kspec *
kcache_find(const char *want)
{
	uint64_t now = now_ms();
	int i = -1;

	if (kspecs_at && now < kspecs_at + KSPEC_TTL_MS &&
	    (i = kspec_index(kspecs, nkspecs, want)) >= 0)
		return kspecs[i];
	if (!kspecs_at || now >= kspecs_at + 1000) {
		kspec_list_free(kspecs, nkspecs);
		kspec_list(&kspecs, &nkspecs);
		kspecs_at = now;
		i = kspec_index(kspecs, nkspecs, want);
	}
	return i >= 0 ? kspecs[i] : NULL;
}
