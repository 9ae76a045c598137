/*
 * optenv.c — every long option can also come from the environment as
 * PREFIX_<NAME> (--max-body: SANDCELL_MAX_BODY). The variables become
 * "--name=value" arguments placed before the command line's, so getopt sees
 * one list, the same checks apply, and a flag wins over its variable because
 * it comes later.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib.h"

/* --kernel-memory -> SANDCELL_KERNEL_MEMORY */
static char *
var_name(const char *prefix, const char *opt)
{
	char *v = xasprintf("%s_%s", prefix, opt);

	for (char *p = v + strlen(prefix) + 1; *p; p++)
		*p = *p == '-' ? '_' : toupper((unsigned char)*p);
	return v;
}

int
optenv_build(struct optenv *oe, const char *prefix, const struct option *opts, int argc,
	     char **argv)
{
	int n = 1;

	memset(oe, 0, sizeof(*oe));
	oe->oe_argv = xcalloc(argc + 1, sizeof(char *));
	oe->oe_vars = xcalloc(1, sizeof(char *));
	oe->oe_argv[0] = argv[0];
	for (const struct option *o = opts; o->name; o++) {
		if (!strcmp(o->name, "help"))
			continue;
		char *var = var_name(prefix, o->name);
		const char *val = getenv(var);
		char *arg = NULL;
		if (!val) {
			free(var);
			continue;
		}
		if (o->has_arg == no_argument) {
			/* a switch: on or off, nothing else */
			if (!strcasecmp(val, "1") || !strcasecmp(val, "yes") ||
			    !strcasecmp(val, "true") || !strcasecmp(val, "on")) {
				arg = xasprintf("--%s", o->name);
			} else if (strcasecmp(val, "0") && strcasecmp(val, "no") &&
				   strcasecmp(val, "false") && strcasecmp(val, "off") && *val) {
				fprintf(stderr, "%s: %s '%s': a switch takes 1/yes/true or 0/no/false\n",
					program_invocation_short_name, var, val);
				free(var);
				oe->oe_nenv = n - 1;
				optenv_free(oe);
				return -EINVAL;
			}
		} else {
			arg = xasprintf("--%s=%s", o->name, val);
		}
		if (!arg) {
			free(var);
			continue;
		}
		oe->oe_argv = xrealloc(oe->oe_argv, (argc + n + 2) * sizeof(char *));
		oe->oe_vars = xrealloc(oe->oe_vars, (n + 1) * sizeof(char *));
		oe->oe_argv[n] = arg;
		oe->oe_vars[n] = var;
		n++;
	}
	oe->oe_nenv = n - 1;
	for (int i = 1; i < argc; i++)
		oe->oe_argv[n++] = argv[i];
	oe->oe_argv[n] = NULL;
	oe->oe_argc = n;
	return 0;
}

/*
 * Where the option getopt_long just returned came from, for error messages:
 * the variable's name, or "--name" (idx: getopt's longindex, -1 if none).
 */
const char *
optenv_origin(struct optenv *oe, const struct option *opts, int idx, int optind_now)
{
	int at = optind_now - 1; /* "--name=value": one argument, just consumed */

	if (at >= 1 && at <= oe->oe_nenv)
		return oe->oe_vars[at];
	free(oe->oe_flag);
	oe->oe_flag = idx >= 0 ? xasprintf("--%s", opts[idx].name) : xstrdup("option");
	return oe->oe_flag;
}

void
optenv_free(struct optenv *oe)
{
	for (int i = 1; i <= oe->oe_nenv; i++) {
		free(oe->oe_argv[i]);
		free(oe->oe_vars[i]);
	}
	free(oe->oe_argv);
	free(oe->oe_vars);
	free(oe->oe_flag);
	memset(oe, 0, sizeof(*oe));
}
