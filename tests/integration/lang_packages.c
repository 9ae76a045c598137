/*
 * lang_packages.c — packages installed at run time (#included by lang_test.c,
 * so run under shared isolation and again under --isolation context): pip,
 * install.packages and npm land in the tenant's places, import at once, and
 * are seen by every context of the tenant and by no other tenant. Offline
 * but for the npm registry.
 */
/* What a second context of the tenant sees; under --isolation context it is another tenant. */
#ifdef LANG_ISOLATED
#define TENANT_SEES(shared, isolated) (isolated)
#else
#define TENANT_SEES(shared, isolated) (shared)
#endif

/* The code's stdout and no error, in context id. */
static void
expect_out(const char *id, const char *code, const char *want, const char *what)
{
	json_t *l = run(URL, id, code);
	char *out = stdout_of(l);

	cr_expect_str_eq(out, want, "%s: got '%s' (error %s: %s)", what, out, error_name(l),
			 error_value(l));
	free(out);
	json_decref(l);
}

/*
 * `!pip install`, `%pip install` and `sys.executable -m pip install` of
 * wheels built in the test, offline: each imports in the same cell, from the
 * tenant's venv; a second Python context and a bash context of the tenant
 * import it too, another tenant's do not; a restarted kernel still does.
 */
Test(lang, pip_installs_into_the_tenants_venv_and_imports_at_once, .timeout = 300)
{
	char *a = context_new(URL, "python", NULL), *b, *sh, code[4096];
	json_t *l;

	cr_assert_not_null(a);
	snprintf(code, sizeof(code),
		 "%s"
		 "for n in ('sctoya', 'sctoyb', 'sctoyc'):\n"
		 "    wheel('/tmp/wh', n, '0.1', 'VALUE = %%r\\n' %% n[-1])\n"
		 "!pip install -q --no-index --find-links /tmp/wh sctoya\n"
		 "import sctoya\n"
		 "%%pip install -q --no-index --find-links /tmp/wh sctoyb\n"
		 "import sctoyb, subprocess, sys\n"
		 "subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-index',\n"
		 "                '--find-links', '/tmp/wh', 'sctoyc'], check=True)\n"
		 "import sctoyc\n"
		 "mods = (sctoya, sctoyb, sctoyc)\n"
		 "' '.join(m.VALUE for m in mods), {m.__file__.split('/lib/python')[0] for m in mods}",
		 wheel_py);
	l = run(URL, a, code);
	cr_assert_null(line_of(l, "error", 0), "the installs: %s: %s", error_name(l), error_value(l));
	cr_expect_str_eq(result_text(l), "('a b c', {'/home/user/.local/venv'})", "%s",
			 result_text(l));
	json_decref(l);

	cr_assert_not_null(b = context_new(URL, "python", NULL));
	expect_out(b, "import importlib.util as u\nprint(u.find_spec('sctoya') is not None)",
		   TENANT_SEES("True\n", "False\n"), "a second python context");
	cr_assert_not_null(sh = context_new(URL, "bash", NULL));
	expect_out(sh, "command -v pip; python3 -c 'import importlib.util as u; "
		       "print(u.find_spec(\"sctoyb\") is not None)'",
		   TENANT_SEES("/home/user/.local/venv/bin/pip\nTrue\n",
			       "/home/user/.local/venv/bin/pip\nFalse\n"),
		   "a bash context");

	cr_assert_eq(context_post(URL, a, "restart", 60), 200);
	expect_out(a, "import sctoya, sctoyc\nprint(sctoya.VALUE, sctoyc.VALUE)", "a c\n",
		   "after a restart");
	free(a);
	free(b);
	free(sh);
}

/* The R code that builds sctoyr_0.1.tar.gz in tempdir() (R CMD build of a tiny package). */
#define R_BUILD_SCTOYR                                                                     \
	"d <- file.path(tempdir(), 'sctoyr'); dir.create(file.path(d, 'R'), recursive = TRUE)\n" \
	"writeLines(c('Package: sctoyr', 'Version: 0.1', 'Title: Toy', 'Description: A toy.',\n" \
	"  'License: MIT', 'Author: t', 'Maintainer: t <t@example.org>'),\n"                     \
	"  file.path(d, 'DESCRIPTION'))\n"                                                        \
	"writeLines('export(sctoy_value)', file.path(d, 'NAMESPACE'))\n"                         \
	"writeLines('sctoy_value <- function() 42', file.path(d, 'R', 'sctoy.R'))\n"             \
	"old <- setwd(tempdir())\n"                                                               \
	"invisible(system2(file.path(R.home('bin'), 'R'), c('CMD', 'build', 'sctoyr'),\n"        \
	"  stdout = FALSE, stderr = FALSE))\n"                                                    \
	"setwd(old)\n"

/*
 * install.packages() of a source tarball the test builds (repos = NULL):
 * into the tenant's library, first on .libPaths() in every R context of the
 * tenant and in Rscript from bash; not in another tenant's.
 */
Test(lang, r_installs_a_source_package_into_the_tenants_library, .timeout = 300)
{
	char *r = context_new(URL, "r", NULL), *r2, *sh;

	cr_assert_not_null(r);
	expect_out(r,
		   R_BUILD_SCTOYR
		   "install.packages(file.path(tempdir(), 'sctoyr_0.1.tar.gz'), repos = NULL,\n"
		   "  type = 'source', quiet = TRUE)\n"
		   "library(sctoyr)\n"
		   "cat(sctoy_value(), .libPaths()[1], find.package('sctoyr'), '\\n')",
		   "42 /home/user/.local/lib/R /home/user/.local/lib/R/sctoyr \n", "the install");
	cr_assert_not_null(r2 = context_new(URL, "r", NULL));
	expect_out(r2, "cat(requireNamespace('sctoyr', quietly = TRUE), '\\n')",
		   TENANT_SEES("TRUE \n", "FALSE \n"), "a second R context");
	cr_assert_not_null(sh = context_new(URL, "bash", NULL));
	expect_out(sh, "Rscript -e \"cat(requireNamespace('sctoyr', quietly = TRUE), '\\n')\"",
		   TENANT_SEES("TRUE \n", "FALSE \n"), "Rscript in a bash context");
	free(r);
	free(r2);
	free(sh);
}

/*
 * npm: specifiers in JavaScript and TypeScript, fetched from the registry
 * through the box's network into Deno's cache in the workspace; npm -g
 * from bash into the tenant's prefix.
 */
Test(lang, npm_packages_import_in_deno_and_install_from_bash, .timeout = 300)
{
	const char *code[][2] = {
		{"javascript", "import isNumber from 'npm:is-number';\n"
			       "console.log(isNumber(5), isNumber('x'),\n"
			       "  Deno.statSync('/home/user/.cache/deno').isDirectory)"},
		{"typescript", "import isNumber from 'npm:is-number';\n"
			       "const five: number = 5;\n"
			       "console.log(isNumber(five), isNumber('x'),\n"
			       "  Deno.statSync('/home/user/.cache/deno').isDirectory)"},
	};

	for (size_t i = 0; i < sizeof(code) / sizeof(code[0]); i++) {
		char *id = context_new(URL, code[i][0], NULL);
		cr_assert_not_null(id, "%s", code[i][0]);
		expect_out(id, code[i][1], "true false true\n", code[i][0]);
		free(id);
	}
	char *sh = context_new(URL, "bash", NULL);
	cr_assert_not_null(sh);
	expect_out(sh,
		   "npm install -g --no-fund --no-audit --no-update-notifier is-number >/dev/null "
		   "2>&1; ls ~/.local/lib/node_modules",
		   "is-number\n", "npm install -g");
	free(sh);
}

/* Whether a stderr line of l holds want. */
static bool
stderr_has(json_t *l, const char *want)
{
	json_t *e;

	for (int i = 0; (e = line_of(l, "stderr", i)); i++) {
		const char *t = json_string_value(json_object_get(e, "text"));
		if (t && strstr(t, want))
			return true;
	}
	return false;
}

#ifndef LANG_ISOLATED /* a context of another tenant would not see the directory */
/* A bare import of is-number in a new context of language in cwd prints "true false". */
static void
expect_bare_import(const char *language, const char *cwd, const char *what)
{
	char *id = context_new(URL, language, cwd);

	cr_assert_not_null(id, "%s: a %s context in %s", what, language, cwd);
	expect_out(id,
		   !strcmp(language, "typescript")
			   ? "import isNumber from 'is-number';\n"
			     "const five: number = 5;\n"
			     "console.log(isNumber(five), isNumber('x'))"
			   : "import isNumber from 'is-number';\n"
			     "console.log(isNumber(5), isNumber('x'))",
		   "true false\n", what);
	free(id);
}

/*
 * `deno add` in a bash context (Deno's own program, on its PATH) writes a
 * deno.json: a bare import of what it added works in JavaScript and
 * TypeScript contexts started in that directory or below it.
 */
Test(lang, deno_add_in_bash_makes_a_bare_import_work_in_deno, .timeout = 300)
{
	char *sh = context_new(URL, "bash", NULL);

	cr_assert_not_null(sh);
	expect_out(sh,
		   "mkdir -p ~/deno-add/below && cd ~/deno-add && "
		   "deno add npm:is-number >/dev/null 2>&1; "
		   "grep -o '\"is-number\": \"npm:is-number' deno.json; "
		   "test -d ~/.cache/deno/npm && echo cached",
		   "\"is-number\": \"npm:is-number\ncached\n", "deno add");
	expect_bare_import("javascript", "/home/user/deno-add", "deno.json in the cwd");
	expect_bare_import("typescript", "/home/user/deno-add", "deno.json in the cwd");
	expect_bare_import("javascript", "/home/user/deno-add/below", "deno.json above the cwd");
	free(sh);
}

/*
 * A package.json's dependencies import bare, with the node_modules `npm
 * install` makes in bash, and without one: the kernel runs `deno install`
 * as it starts.
 */
Test(lang, package_json_dependencies_import_bare_in_deno, .timeout = 300)
{
	char *sh = context_new(URL, "bash", NULL);

	cr_assert_not_null(sh);
	expect_out(sh,
		   "for d in npm bare; do mkdir -p ~/pkg-$d && "
		   "echo '{\"dependencies\": {\"is-number\": \"^7.0.0\"}}' >~/pkg-$d/package.json; done; "
		   "cd ~/pkg-npm && npm install --no-fund --no-audit --no-update-notifier "
		   ">/dev/null 2>&1; ls ~/pkg-npm/node_modules; ls ~/pkg-bare",
		   "is-number\npackage.json\n", "npm install");
	expect_bare_import("javascript", "/home/user/pkg-npm", "package.json, npm install");
	expect_bare_import("typescript", "/home/user/pkg-bare", "package.json alone");
	expect_out(sh, "ls ~/pkg-bare/node_modules", "is-number\n", "deno install at start");
	free(sh);
}
#endif

/*
 * A Deno configuration a context writes is read by its kernel's next start
 * (a restart): a broken one is not, and the kernel starts without it and
 * says so on the next execution's stderr; once it is mended (`deno add`
 * from the kernel itself), the restarted kernel imports bare.
 */
Test(lang, deno_config_is_read_at_restart_and_a_broken_one_is_skipped, .timeout = 300)
{
#ifdef LANG_ISOLATED
	const char *cwd = NULL; /* its own workspace */
#else
	const char *cwd = "/home/user/deno-restart";
	char *sh = context_new(URL, "bash", NULL);
	cr_assert_not_null(sh);
	expect_out(sh, "mkdir -p ~/deno-restart && echo made", "made\n", "mkdir");
	free(sh);
#endif
	char *js = context_new(URL, "javascript", cwd);
	json_t *l;

	cr_assert_not_null(js);
	expect_out(js, "Deno.writeTextFileSync('deno.json', '{ not json'); console.log('planted')",
		   "planted\n", "the broken deno.json");
	cr_assert_eq(context_post(URL, js, "restart", 90), 200);
	l = run(URL, js, "console.log(6 * 7)");
	char *out = stdout_of(l);
	cr_expect_str_eq(out, "42\n", "after a restart with a broken deno.json");
	cr_expect(stderr_has(l, "did not start with the Deno configuration"),
		  "no notice on stderr: %s", json_dumps(l, 0));
	free(out);
	json_decref(l);
	l = run(URL, js, "console.log(6 * 7)");
	cr_expect(!stderr_has(l, "Deno configuration"), "the notice came twice");
	json_decref(l);

	expect_out(js,
		   "Deno.removeSync('deno.json');\n"
		   "const r = new Deno.Command('deno', { args: ['add', 'npm:is-number'], "
		   "stdout: 'null', stderr: 'null' }).outputSync();\n"
		   "console.log(r.code, Deno.readTextFileSync('deno.json').includes('npm:is-number'))",
		   "0 true\n", "deno add from the kernel");
	cr_assert_eq(context_post(URL, js, "restart", 90), 200);
	l = run(URL, js, "import isNumber from 'is-number';\nconsole.log(isNumber(5))");
	out = stdout_of(l);
	cr_expect_str_eq(out, "true\n", "a bare import after the restart (error %s: %s)",
			 error_name(l), error_value(l));
	cr_expect(!stderr_has(l, "Deno configuration"), "a notice with a sound deno.json");
	free(out);
	json_decref(l);
	free(js);
}
