/*
 * packages.c — the tenant's package places, in its HOME (the workspace in a
 * box, so on its bounded disk and shared as the workspace is): a Python
 * virtual environment that sees the system's packages, an R library, npm's
 * global prefix; pip's and Deno's caches are in HOME too (~/.cache).
 * launch.c puts them in every kernel's environment, before the operator's
 * --env settings (which win); the box makes them, as the kernel's uid,
 * before each kernel runs.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proxy.h"

/*
 * The venv's interpreter: the system's Python, whose data stack sandcell's
 * deps install. pip refuses to install into it (Debian marks it externally
 * managed, and the box shows it read-only); into a venv of it, it installs.
 */
#define PACKAGES_PYHOME "/usr/bin"
#define PACKAGES_PYTHON PACKAGES_PYHOME "/python3"

/* pip's own console script, run by the venv's interpreter: the system's pip. */
static const char pip_script[] = "import sys\n"
				 "from pip._internal.cli.main import main\n"
				 "sys.exit(main())\n";

/* The environment that points every language at home's places (caller frees). */
char **
packages_env(const char *home, const char *path)
{
	char **v = xcalloc(6, sizeof(*v));

	v[0] = xasprintf("VIRTUAL_ENV=%s" PACKAGES_VENV, home);
	/* the venv's python3 and pip first, then what npm -g and pip --user install */
	v[1] = xasprintf("PATH=%s" PACKAGES_VENV "/bin:%s/.local/bin:%s", home, home,
			 path ? path : "/usr/local/bin:/usr/bin:/bin");
	v[2] = xasprintf("R_LIBS_USER=%s" PACKAGES_RLIB, home);
	v[3] = xasprintf("NPM_CONFIG_PREFIX=%s/.local", home);
	/* Deno's default, said outright: a DENO_DIR of the broker's is a host path */
	v[4] = xasprintf("DENO_DIR=%s/.cache/deno", home);
	return v;
}

static int
pk_mkdir(const char *home, const char *sub)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s%s", home, sub);
	return mkdir(p, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

static int
pk_write(const char *path, const char *text, unsigned mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
	size_t len = strlen(text);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, text, len) != (ssize_t)len)
		rc = errno ? -errno : -ENOSPC;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	return rc;
}

/*
 * The layout `python3 -m venv --without-pip --system-site-packages` makes
 * (PEP 405: pyvenv.cfg, bin/python3 a link to the system's), without its
 * activate scripts (PATH and VIRTUAL_ENV are set), and pip's console scripts,
 * which run the system's pip in the venv: nothing is copied, it takes a few
 * system calls once, and no Python runs before the kernel. pyvenv.cfg comes
 * last: a venv without it is made again at the next start.
 */
static int
pk_venv(const char *home)
{
	char p[PATH_MAX], script[PATH_MAX + 128];
	const char *const pips[] = {"pip", "pip3"};
	int rc;

	snprintf(p, sizeof(p), "%s" PACKAGES_VENV "/pyvenv.cfg", home);
	if (access(p, F_OK) == 0 || access(PACKAGES_PYTHON, X_OK) < 0)
		return 0;
	if ((rc = pk_mkdir(home, PACKAGES_VENV)) < 0 ||
	    (rc = pk_mkdir(home, PACKAGES_VENV "/bin")) < 0)
		return rc;
	snprintf(p, sizeof(p), "%s" PACKAGES_VENV "/bin/python3", home);
	if (symlink(PACKAGES_PYTHON, p) < 0 && errno != EEXIST)
		return -errno;
	snprintf(p, sizeof(p), "%s" PACKAGES_VENV "/bin/python", home);
	if (symlink("python3", p) < 0 && errno != EEXIST)
		return -errno;
	snprintf(script, sizeof(script), "#!%s" PACKAGES_VENV "/bin/python3\n%s", home,
		 pip_script);
	for (size_t i = 0; i < sizeof(pips) / sizeof(pips[0]); i++) {
		snprintf(p, sizeof(p), "%s" PACKAGES_VENV "/bin/%s", home, pips[i]);
		if ((rc = pk_write(p, script, 0755)) < 0)
			return rc;
	}
	snprintf(p, sizeof(p), "%s" PACKAGES_VENV "/pyvenv.cfg", home);
	return pk_write(p, "home = " PACKAGES_PYHOME "\ninclude-system-site-packages = true\n",
			0644);
}

/*
 * home's places, made where missing; run as the kernel's uid, in its view.
 * A failure (a full workspace, a file where a directory goes) is logged and
 * leaves the kernel to start without them: pip, R and npm then say why.
 */
void
packages_prepare(const char *home)
{
	int rc;

	if ((rc = pk_mkdir(home, "/.local")) < 0 || (rc = pk_mkdir(home, "/.local/lib")) < 0 ||
	    (rc = pk_mkdir(home, PACKAGES_RLIB)) < 0 || (rc = pk_venv(home)) < 0)
		dprintf(2, "sandcell: packages in %s/.local: %s\n", home, strerror(-rc));
}
