/*
 * route6.c — whether the calling thread's network namespace has an IPv6
 * default route: the uplink waits for pasta's, a box gets IPv6 only where the
 * uplink has one, and the tests ask the same of the host.
 */
#include <stdio.h>
#include <string.h>

#include "lib.h"

/* An IPv6 default route of this thread's network namespace (not the kernel's "lo" one). */
bool
route6_default(void)
{
	char line[256], dst[40], dev[32];
	FILE *f = fopen("/proc/thread-self/net/ipv6_route", "re");
	unsigned len;
	bool yes = false;

	/* dst, its length, src, its length, next hop, metric, refs, use, flags, device */
	while (f && !yes && fgets(line, sizeof(line), f))
		yes = sscanf(line, "%32s %x %*s %*s %*s %*s %*s %*s %*s %31s", dst, &len,
		             dev) == 3 &&
		      len == 0 && strspn(dst, "0") == 32 && strcmp(dev, "lo");
	if (f)
		fclose(f);
	return yes;
}
