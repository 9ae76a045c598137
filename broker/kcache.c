/*
 * kcache.c — the kernelspecs the broker knows, read again when stale or on a
 * miss.
 */
#include "broker.h"

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

	if (sv.sv_tb.tb_kspecs_at && now < sv.sv_tb.tb_kspecs_at + KSPEC_TTL_MS &&
	    (i = kspec_index(sv.sv_tb.tb_kspecs, sv.sv_tb.tb_nkspecs, want)) >= 0)
		return sv.sv_tb.tb_kspecs[i];
	if (!sv.sv_tb.tb_kspecs_at || now >= sv.sv_tb.tb_kspecs_at + 1000) {
		kspec_list_free(sv.sv_tb.tb_kspecs, sv.sv_tb.tb_nkspecs);
		kspec_list(&sv.sv_tb.tb_kspecs, &sv.sv_tb.tb_nkspecs);
		sv.sv_tb.tb_kspecs_at = now;
		i = kspec_index(sv.sv_tb.tb_kspecs, sv.sv_tb.tb_nkspecs, want);
	}
	return i >= 0 ? sv.sv_tb.tb_kspecs[i] : NULL;
}
