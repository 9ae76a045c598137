/*
 * fuzz_msg.c — libFuzzer target for the IPC codec: msg_decode on arbitrary
 * bytes, and an encode/decode round trip of whatever decodes (targets.h).
 */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return fuzz_msg_one(data, size);
}
