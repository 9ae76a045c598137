/*
 * fuzz_zmtp.c — libFuzzer target for zmtp.c, the proxy's reading of a
 * kernel's ZMTP stream: fed in pieces, cut into messages (targets.h).
 */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return fuzz_zmtp_one(data, size);
}
