/*
 * fuzz_http.c — libFuzzer target for request validation: /execute bodies
 * through validate_execute, and the name checks (lang_normalise,
 * env_key_valid, uuid_valid) on the input's first NUL-terminated part.
 */
#include "targets.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (fuzz_http_init() < 0) {
		perror("fuzz_http: kernelspec dir");
		exit(1);
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return fuzz_http_one(data, size);
}
