/*
 * kconfig.c — a kernel that reads a configuration from its cwd and the
 * cwd's parents as it starts (Deno: deno.json, deno.jsonc, package.json;
 * a kernelspec's ks_config_in_cwd). It starts in its cwd only when one is
 * there (lib/kspec.c's kspec_cwd_config), and not after two starts with it
 * in a row failed, until a restart: a file a context wrote must not keep the
 * next kernel from starting, and one failure may be the machine's (a start
 * killed under load), not the file's. Elsewhere (its own dir) its first units move it to
 * its cwd. kernel.c asks; this file calls nothing of the proxy's.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "proxy.h"

static struct {
	bool kc_in_cwd;  /* the kernel starting or running was started in its cwd, with it */
	bool kc_install; /* ... whose nearest package.json has no node_modules beside it */
	int kc_fails;    /* starts with it that failed in a row */
	bool kc_failed;  /* two did: started elsewhere until a restart */
	char *kc_notice; /* for the next unit's stderr: the configuration was not read */
} kc;

/* Where the kernel of px (in box bx) starts: its cwd, or its own dir. */
const char *
kconfig_start_dir(const struct proxy *px, const struct box *bx)
{
	kc.kc_in_cwd = kc.kc_install = false;
	if (!px->px_ks->ks_config_in_cwd)
		return px->px_cwd;
	if (!kc.kc_failed &&
	    kspec_cwd_config(bx->bx_on ? bx->bx_workspace : NULL, px->px_cwd, &kc.kc_install)) {
		kc.kc_in_cwd = true;
		return px->px_cwd;
	}
	(void)bx;
	return sandbox_kdir(px);
}

/*
 * The silent units the kernel runs once ready, before any other, each
 * caller-freed, NULL-terminated in out[3]: to its cwd when it started
 * elsewhere, and `deno install` for a package.json without node_modules.
 */
void
kconfig_first_units(const struct proxy *px, char *out[3])
{
	int n = 0;

	kc.kc_fails = 0; /* it started */
	if (px->px_ks->ks_config_in_cwd && !kc.kc_in_cwd)
		out[n++] = envset_chdir(px->px_ks->ks_lang, px->px_cwd);
	if (kc.kc_install) {
		out[n++] = envset_deno_install(px->px_cwd);
		log_info("context %s: deno install in %s (package.json, no node_modules)",
			 px->px_id, px->px_cwd);
	}
	out[n] = NULL;
}

/*
 * A start that failed (why): whether it was one with the configuration,
 * which may be why; the next start is with it again once, then without it
 * (and the next unit says so). Such a start ran nothing: nothing of the
 * context is lost.
 */
bool
kconfig_start_failed(const struct proxy *px, const char *why)
{
	if (!kc.kc_in_cwd)
		return false;
	if (++kc.kc_fails < 2) {
		log_warn("context %s: kernel %s did not start with the configuration in %s or "
			 "above (%s): started again with it",
			 px->px_id, px->px_ks->ks_name, px->px_cwd, why);
		return true;
	}
	kc.kc_failed = true;
	log_warn("context %s: kernel %s did not start with the configuration in %s or above "
		 "(%s): started again without it",
		 px->px_id, px->px_ks->ks_name, px->px_cwd, why);
	free(kc.kc_notice);
	kc.kc_notice = xasprintf("sandcell: the kernel did not start with the Deno configuration "
				 "(deno.json, package.json) in %s or above (%s), and runs without "
				 "it: `deno info` in a bash context there says what is wrong; a "
				 "restart of this context reads it again.\n",
				 px->px_cwd, why);
	return true;
}

/* A restart: the configuration is read again. */
void
kconfig_reset(void)
{
	kc.kc_failed = false;
	kc.kc_fails = 0;
	free(kc.kc_notice);
	kc.kc_notice = NULL;
}

/* What the next unit says on stderr before it runs, once (caller frees), or NULL. */
char *
kconfig_take_notice(void)
{
	char *n = kc.kc_notice;

	kc.kc_notice = NULL;
	return n;
}
