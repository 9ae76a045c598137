/*
 * opts.c — a binary's options as one table (struct opt): getopt's list, the
 * SANDCELL_<NAME> variables (optenv.c), the checks and the one-line refusal
 * of a bad value (parse.c), the defaults and --help all come from it, so none
 * can drift from another. scripts/options-md.sh turns --help into the README's
 * table, and make test checks that the two agree.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib.h"

#define HELP_NAME_COLS 34 /* "  --name ARG" padded to this, then the variable */
#define HELP_INDENT 8     /* the help text and the default, under it */
#define HELP_COLS 80

static void
store(const struct opt *o, uint64_t v)
{
	if (o->o_flags & OPT_DIGITS) {
		snprintf(o->o_dst, o->o_size, "%llu", (unsigned long long)v);
	} else if (o->o_flags & OPT_XDIGITS) {
		free(*(char **)o->o_dst); /* only ever set here: the default's, then a flag's */
		*(char **)o->o_dst = xasprintf("%llu", (unsigned long long)v);
	} else if (o->o_size == sizeof(uint32_t)) {
		uint32_t w = v; /* every table's o_max fits its field */
		memcpy(o->o_dst, &w, sizeof(w));
	} else {
		memcpy(o->o_dst, &v, sizeof(v));
	}
}

/* One value, from a default, a variable or a flag; a bad one ends the program (2). */
static void
apply(const struct optset *os, const struct opt *o, const char *val, const char *origin,
      bool given)
{
	uint64_t v = 0;
	int rc = 0;

	switch (o->o_type) {
	case OPT_SWITCH: *(bool *)o->o_dst = !(o->o_flags & OPT_OFF); break;
	case OPT_STRING: *(const char **)o->o_dst = val; break;
	case OPT_FUNC:
		if (o->o_fn(val, origin) < 0)
			exit(2);
		break;
	case OPT_SIZE: rc = parse_size(val, o->o_max, &v); break;
	case OPT_SECONDS: rc = parse_seconds(val, o->o_max, &v); break;
	case OPT_MS: rc = parse_duration(val, o->o_max, &v); break;
	case OPT_COUNT: rc = parse_count(val, 0, o->o_max, &v); break;
	}
	if (o->o_type >= OPT_SIZE) {
		if (!rc && v < o->o_min && !(v == 0 && (o->o_flags & OPT_ZERO)))
			rc = -ERANGE;
		if (rc < 0)
			parse_fail(os->os_prog, origin, val, rc, o->o_expect);
		store(o, v);
	}
	if (given && o->o_given)
		*o->o_given = true;
}

/*
 * Defaults, then the environment (if the set has a prefix), then the command
 * line. Returns how many operands follow the options, *operands pointing at
 * them; --help, -h or an unknown option print the help and exit 2.
 */
int
opts_parse(struct optset *os, int argc, char **argv, char ***operands)
{
	struct option *lo = xcalloc(os->os_n + 2, sizeof(*lo));
	struct optenv *oe = &os->os_env;
	int c, li;

	for (size_t i = 0; i < os->os_n; i++) {
		const struct opt *o = &os->os_opts[i];
		lo[i] = (struct option){o->o_name, o->o_arg ? required_argument : no_argument,
					NULL, OPT_VAL0 + (int)i};
		if (o->o_default)
			apply(os, o, o->o_default, "default", false);
	}
	lo[os->os_n] = (struct option){"help", no_argument, NULL, 'h'};
	if (os->os_prefix) {
		if (optenv_build(oe, os->os_prefix, lo, argc, argv) < 0)
			exit(2);
	} else {
		*oe = (struct optenv){.oe_argc = argc, .oe_argv = argv};
	}
	while ((li = -1, c = getopt_long(oe->oe_argc, oe->oe_argv, "h", lo, &li)) != -1) {
		if (c < OPT_VAL0 || c >= OPT_VAL0 + (int)os->os_n)
			opts_usage(os);
		apply(os, &os->os_opts[c - OPT_VAL0], optarg, optenv_origin(oe, lo, li, optind), true);
	}
	free(lo);
	*operands = oe->oe_argv + optind;
	return oe->oe_argc - optind;
}

/* --kernel-memory -> SANDCELL_KERNEL_MEMORY (as optenv.c names it) */
static void
print_var(FILE *f, const char *prefix, const char *name)
{
	fprintf(f, "%s_", prefix);
	for (const char *p = name; *p; p++)
		fputc(*p == '-' ? '_' : *p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p, f);
}

/* text, its words wrapped under the option, lead on its first line */
static void
print_wrapped(FILE *f, const char *lead, const char *text)
{
	int col = fprintf(f, "%*s%s", HELP_INDENT, "", lead);
	bool first = true;

	for (const char *w = text; *w;) {
		int n = (int)strcspn(w, " ");
		if (!first && col + 1 + n > HELP_COLS) {
			col = fprintf(f, "\n%*s", HELP_INDENT, "") - 1;
			first = true;
		}
		col += fprintf(f, "%s%.*s", first ? "" : " ", n, w);
		first = false;
		w += n;
		w += strspn(w, " ");
	}
	fputc('\n', f);
}

/*
 * Each option as three parts, in a shape scripts/options-md.sh reads back:
 * "  --name ARG" and its variable; its help, indented; "default: ..." if any.
 */
void
opts_usage(const struct optset *os)
{
	fputs(os->os_usage, stderr);
	for (size_t i = 0; i < os->os_n; i++) {
		const struct opt *o = &os->os_opts[i];
		const char *def = o->o_shown ? o->o_shown : o->o_default;
		int n = fprintf(stderr, "  --%s%s%s", o->o_name, o->o_arg ? " " : "",
				o->o_arg ? o->o_arg : "");
		if (os->os_prefix) {
			fprintf(stderr, "%*s", n < HELP_NAME_COLS - 2 ? HELP_NAME_COLS - n : 2, "");
			print_var(stderr, os->os_prefix, o->o_name);
		}
		fputc('\n', stderr);
		print_wrapped(stderr, "", o->o_help);
		if (def)
			print_wrapped(stderr, "default: ", def);
	}
	if (os->os_more)
		os->os_more(stderr);
	exit(2);
}
