/*
 * lang_isolated_test.c — the language tests again, with --isolation context:
 * each context has a uid and a workspace of its own.
 */
#define LANG_ISOLATED 1
#define LANG_BROKER_ARGS "--no-default-context", "--isolation", "context"
#include "lang_test.c"
