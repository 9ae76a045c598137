/*
 * parse.c — numbers given by an operator (flags, SANDCELL_* variables): sizes
 * with binary units, durations with time units, plain counts. Anything else is
 * refused whole (sign, overflow, trailing garbage, empty), never half-read.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib.h"

/* Leading decimal digits only: strtoull alone takes spaces, signs and hex. */
static int
digits(const char *s, uint64_t *out, const char **rest)
{
	uint64_t v = 0;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	for (; isdigit((unsigned char)*s); s++) {
		unsigned d = *s - '0';
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	*rest = s;
	return 0;
}

static int
scaled(uint64_t v, uint64_t unit, uint64_t max, uint64_t *out)
{
	if (unit && v > UINT64_MAX / unit)
		return -ERANGE;
	if (v * unit > max)
		return -ERANGE;
	*out = v * unit;
	return 0;
}

/* N, NK, NM, NG, NT (binary; also KiB..., and B after a number of bytes). */
int
parse_size(const char *s, uint64_t max, uint64_t *out)
{
	static const struct {
		const char *u;
		unsigned shift;
	} units[] = {
	    {"", 0},    {"b", 0},    {"k", 10},  {"kb", 10},  {"kib", 10}, {"m", 20},
	    {"mb", 20}, {"mib", 20}, {"g", 30},  {"gb", 30},  {"gib", 30}, {"t", 40},
	    {"tb", 40}, {"tib", 40},
	};
	const char *rest;
	uint64_t v;
	int rc;

	if ((rc = digits(s, &v, &rest)) < 0)
		return rc;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcasecmp(rest, units[i].u))
			return scaled(v, 1ull << units[i].shift, max, out);
	return -EINVAL;
}

/*
 * N (seconds), Nms, Ns, Nm, Nh, with a decimal fraction if it comes to whole
 * milliseconds (1.5s, 0.25); the result in milliseconds.
 */
int
parse_duration(const char *s, uint64_t max_ms, uint64_t *out_ms)
{
	static const struct {
		const char *u;
		uint64_t ms;
	} units[] = {
	    {"", 1000}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000},
	};
	const char *rest;
	uint64_t v, frac = 0, scale = 1, whole;
	int rc;

	if ((rc = digits(s, &v, &rest)) < 0)
		return rc;
	if (*rest == '.') {
		const char *f = rest + 1;
		if (!isdigit((unsigned char)*f))
			return -EINVAL;
		for (; isdigit((unsigned char)*f); f++) {
			if (scale == 1000000000ull) /* a nanosecond is not ours to count */
				return -EINVAL;
			frac = frac * 10 + (*f - '0');
			scale *= 10;
		}
		rest = f;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(rest, units[i].u))
			continue;
		if ((frac * units[i].ms) % scale)
			return -EINVAL; /* a fraction of a millisecond */
		if ((rc = scaled(v, units[i].ms, max_ms, &whole)) < 0)
			return rc;
		if (whole + frac * units[i].ms / scale > max_ms)
			return -ERANGE;
		*out_ms = whole + frac * units[i].ms / scale;
		return 0;
	}
	return -EINVAL;
}

/* A duration in whole seconds: "1500ms" is refused, not rounded. */
int
parse_seconds(const char *s, uint64_t max_s, uint64_t *out_s)
{
	uint64_t ms;
	int rc;

	if (max_s > UINT64_MAX / 1000)
		max_s = UINT64_MAX / 1000;
	if ((rc = parse_duration(s, max_s * 1000, &ms)) < 0)
		return rc;
	if (ms % 1000)
		return -EDOM;
	*out_s = ms / 1000;
	return 0;
}

/* A plain integer in [min, max]. */
int
parse_count(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *rest;
	uint64_t v;
	int rc;

	if ((rc = digits(s, &v, &rest)) < 0)
		return rc;
	if (*rest)
		return -EINVAL;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

/*
 * The one-line refusal every binary prints for a bad number, naming where it
 * came from (--max-body, SANDCELL_MAX_BODY) and what is accepted; exits 2.
 */
void
parse_fail(const char *prog, const char *origin, const char *val, int rc, const char *expect)
{
	const char *why = rc == -ERANGE ? "out of range"
			  : rc == -EDOM ? "not a whole number of seconds"
					: "not understood";

	fprintf(stderr, "%s: %s '%s': %s (expected %s)\n", prog, origin, val, why, expect);
	exit(2);
}
