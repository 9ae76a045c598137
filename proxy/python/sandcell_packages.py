# sandcell_packages.py — a Python kernel and the tenant's virtual environment
# ($VIRTUAL_ENV, made by the box before the kernel runs: proxy/packages.c).
#
# The kernel is the system's interpreter started as a venv's would not be:
# its machinery (ipykernel, zmq, tornado) comes from the system, whatever
# the tenant installed, and nothing of the venv runs as it starts (its .pth
# files are not read). Once it has started (IPython's exec_files), install()
# makes it the venv's interpreter for the user: the venv's site-packages
# ahead of the system's (a package the user installs shadows a system one),
# and sys.executable the venv's python3, so that `%pip`, `!pip` and
# `subprocess.run([sys.executable, "-m", "pip", ...])` install there.
#
# The template (sandcell_template.py) forks kernels that have imported
# numpy and pandas already: shadowed() tells it when the venv holds one of
# them, and that kernel starts cold instead.

import os
import sys

# The startup's modules as the template loaded them, by path: (st_mtime_ns,
# st_size, module); sandcell_startup.py takes each once (a forked kernel).
PRELOADED = {}


def site_packages(venv):
    """The venv's site-packages directory, as its own interpreter names it."""
    return os.path.join(venv, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")


def top_names(directory):
    """The top-level modules a directory of sys.path offers."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return set()
    names = set()
    for e in entries:
        if e.endswith((".dist-info", ".egg-info", ".pth")) or e.startswith(".") or \
                e == "__pycache__":
            continue
        names.add(e.split(".", 1)[0])
    return names


def shadowed(env, loaded):
    """The modules of loaded (top-level names) that the venv of env (a
    kernel's environment) installs again, sorted."""
    venv = env.get("VIRTUAL_ENV")
    if not venv:
        return []
    return sorted(top_names(site_packages(venv)) & set(loaded))


def stale_checker(system):
    """What a Python kernel runs after each cell (IPython's post_run_cell)
    so that a package installed by a cell imports in the next one, whatever
    the directories' times say: importlib.invalidate_caches() once a
    directory of sys.path that can change (the venv's site-packages, the
    cwd, the user's own entries: not those under system, the interpreter's
    read-only prefix) has changed since the last cell, or within the last
    second (a directory's time ticks coarsely: a change in the tick of the
    import system's last look would go unseen). Invalidating after every
    cell walked every finder the kernel had made (~170 in a kernel forked
    from the template: pandas' packages), 20-30 us of each execution."""
    import importlib
    import time

    seen = {}

    def check(*_):
        now = time.time_ns()
        stale = False
        for p in sys.path:
            if not isinstance(p, str) or p.startswith(system):
                continue
            try:
                m = os.stat(p or ".").st_mtime_ns
            except OSError:
                m = None
            if seen.get(p, -1) != m or (m is not None and now - m < 1000000000):
                stale = True
            seen[p] = m
        if stale:
            importlib.invalidate_caches()

    return check


def install():
    from IPython import get_ipython

    venv = os.environ.get("VIRTUAL_ENV")
    if not venv or not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        return
    site = site_packages(venv)
    try:
        # there from the start: the import system then sees what pip adds
        os.makedirs(site, exist_ok=True)
    except OSError as e:  # a full workspace: pip will say so
        sys.__stderr__.write("sandcell_packages: %s: %s\n" % (site, e))
    if site not in sys.path:
        at = len(sys.path)
        for i, p in enumerate(sys.path):
            if p.endswith(("site-packages", "dist-packages")):
                at = i
                break
        sys.path.insert(at, site)
    sys.executable = os.path.join(venv, "bin", "python3")
    sys.prefix = sys.exec_prefix = venv
    ip = get_ipython()
    if ip is not None:
        system = os.path.join(sys.base_prefix, "")
        ip.events.register("post_run_cell", stale_checker(system))
