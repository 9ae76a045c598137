/*
 * memtrim.c — the proxy's free heap given back to the system while its
 * context is quiet. Setting up a box (its rules through libnftables, a
 * context of its own, ~1 MB allocated and freed) and a kernel's start
 * leave free memory on the heap that glibc keeps, dirty, because it is not
 * at the heap's top: ~0.8 MB a context, hundreds of idle contexts on a
 * broker; and the kernel
 * sockets' empty buffers (zmtp.c, 64 KiB each, a dozen) hold ~0.75 MB
 * more. Once the kernel has been idle with nothing queued for
 * MEMTRIM_QUIET_MS, and every MEMTRIM_AGAIN_MS while it stays so, the empty
 * buffers are freed (zmtp_shed) and malloc_trim(0) returns the free pages
 * when more than MEMTRIM_MIN bytes are free. A busy context is never
 * trimmed. The price is idle CPU where something keeps allocating; the
 * refusals counter's reads (nftctr.c) hardly do (docs/PERFORMANCE.md).
 */
#include <malloc.h>

#include "proxy.h"

#define MEMTRIM_QUIET_MS 2000
#define MEMTRIM_AGAIN_MS 15000 /* boxfw.c's idle reads come as often */
#define MEMTRIM_MIN (256 << 10)

static uint64_t seen = ~0ULL, quiet_at;
static bool again; /* trimmed once in this quiet spell */

void
memtrim_tick(uint64_t now)
{
	uint64_t s = admit_count() + kernel_gen();

	if (s != seen || kernel_state() != KS_IDLE || admit_depth()) {
		seen = s;
		quiet_at = now;
		again = false;
		return;
	}
	if (now - quiet_at < (again ? MEMTRIM_AGAIN_MS : MEMTRIM_QUIET_MS))
		return;
	quiet_at = now;
	again = true;
	for (int i = 0; i < KSOCK_N; i++)
		if (kernel_sock(i))
			zmtp_shed(kernel_sock(i));
	if (mallinfo2().fordblks >= MEMTRIM_MIN)
		malloc_trim(0);
}
