/*
 * statefile.c — the proxy's state.json in its dir: which context it serves,
 * its language, kernel, cwd, pid and box. A restarted broker reads it to
 * re-attach the proxy; a CLAIM rewrites it under the new context's id.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy.h"

void
statefile_write(const struct proxy *px)
{
	char *path = xasprintf("%s/state.json", px->px_dir);
	char *tmp = xasprintf("%s.tmp", path);
	/* the context's own egress rules, which a respawned proxy must get again */
	char *allow = boxfw_list_text(&px->px_box, BOXFW_CTX_ALLOW),
	     *deny = boxfw_list_text(&px->px_box, BOXFW_CTX_DENY);
	json_t *o = json_pack("{s:s?, s:s, s:s, s:s, s:s, s:i, s:b, s:o, s:{s:s?, s:s?}}", "id",
			      px->px_pooled ? NULL : px->px_ctx, "slot", px->px_id, "language",
			      px->px_lang, "kernel", px->px_ks->ks_name, "cwd", px->px_cwd, "pid",
			      (int)getpid(), "default", px->px_default, "sandbox",
			      sandbox_json(&px->px_box), "network", "allow_out", allow,
			      "deny_out", deny);

	/* without it a restarted broker cannot re-attach this proxy: say so */
	if (json_dump_file(o, tmp, JSON_COMPACT) < 0)
		log_err("state file %s: write failed", tmp);
	else if (rename(tmp, path) < 0) {
		log_err("state file: rename %s to %s: %s", tmp, path, strerror(errno));
		unlink(tmp);
	}
	json_decref(o);
	free(allow);
	free(deny);
	free(tmp);
	free(path);
}
