# sandcell_startup.py — what IPython runs in a Python kernel at start (its
# exec_files): sandcell's profile, sandcell_profile.py beside this file,
# loaded as a module of its own and installed.
#
# This file stays small: IPython compiles the whole file it runs, and
# compiling the profile's thousand lines costs about 10 ms of start-up and
# leaves some 2 MB on the kernel's heap. The profile is a module instead,
# which the import system loads from its bytecode (__pycache__, made by
# `make`, checked against the source's hash) and compiles only when that is
# missing or stale.
#
# sandcell_packages.py, beside it too, comes first: the tenant's packages
# for the user's imports from here on.
#
# A kernel forked from the template finds both modules loaded there already
# (sandcell_packages.PRELOADED, when the file is the one the template
# loaded): their code is the template's, shared, not read again.
#
# IPython runs this file in the user's namespace: no name is left behind.


def _sandcell_load(here, name):
    import importlib.util
    import os
    import sys

    try:
        path = os.path.join(os.path.dirname(os.path.abspath(here)), name + ".py")
        pre = getattr(sys.modules.get("sandcell_packages"), "PRELOADED", None)
        got = pre.pop(path, None) if isinstance(pre, dict) else None
        st = os.stat(path)
        if got and got[:2] == (st.st_mtime_ns, st.st_size):
            module = got[2]
        else:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        module.install()
    except Exception as e:  # the operator's log (kernel fd 2), not a stream
        sys.__stderr__.write("sandcell_startup: %s: %s: %s\n" % (name, type(e).__name__, e))


_sandcell_load(__file__, "sandcell_packages")
_sandcell_load(__file__, "sandcell_profile")
del _sandcell_load
