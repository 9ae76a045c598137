/*
 * shapes.h — the shapes of values more than one unit test checks (a header:
 * each file in tests/unit is a test binary of its own).
 */
#ifndef SANDCELL_TEST_SHAPES_H
#define SANDCELL_TEST_SHAPES_H

#include <stdbool.h>
#include <string.h>

/* An ISO 8601 UTC time to the microsecond, as Jupyter and E2B write it. */
static inline bool
is_iso_utc_us(const char *s)
{
	/* 2026-11-29T10:00:00.123456Z */
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.ddddddZ";

	if (strlen(s) != sizeof(shape) - 1)
		return false;
	for (size_t i = 0; s[i]; i++)
		if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
			return false;
	return true;
}

#endif
