/*
 * fuzz_wire.c — libFuzzer target for the Jupyter wire protocol: wire_parse on
 * length-prefixed frames, signed and unsigned, then output_iopub and
 * output_result on what parses (targets.h).
 */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return fuzz_wire_one(data, size);
}
