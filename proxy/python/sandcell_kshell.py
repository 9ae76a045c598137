# sandcell_kshell.py — the IPython shell of a forked kernel, built in the
# template (sandcell_template.py) before any fork.
#
# A kernel's start constructs ipykernel's ZMQInteractiveShell (its magics,
# formatters, completer, display publisher and hook, history, aliases...):
# a forked CPython 3.11 writes into every template object that code runs
# through (reference counts, specialised bytecode) and copies its page.
# Nothing of that construction depends on the kernel but a few facts, so
# the template builds it once (build()), and each kernel takes it (arm()):
# IPythonKernel.__init__ asks ZMQInteractiveShell.instance(...), which gets
# the template's shell bound to this kernel as ipykernel's own construction
# would have left it: its parent, config and log the kernel's, its profile
# and ipython dirs, db, cwd, HOME, encoding, environment, sys.modules
# ['__main__'], builtins, prompts and excepthook taken again in the kernel.
# The kernel's session, iopub socket and topics are set by IPythonKernel
# itself right after, as on a cold start.
#
# Only a kernel whose configuration is what the template assumed takes it
# (fits()): the config launch.c writes (ipython_profile) and nothing else
# that reaches the shell. Any other kernel constructs its own, as before.
# Until then the template's shell is no singleton, its exit hooks are not
# registered, and the template's builtins, environment and sys.modules are
# as they were: code that runs before the kernel's shell exists sees no
# shell (get_ipython() is None).

import atexit
import builtins
import gc
import os
import shutil
import sys
import tempfile
import threading
import warnings
from pathlib import Path

# The config launch.c writes that reaches the shell (ipython_profile); the
# other lines of that file are for the app and the kernel (IGNORED).
CONFIG = {"HistoryManager": {"hist_file": ":memory:", "enabled": False}}
IGNORED = {
    "IPKernelApp": ("connection_file",),
    "InteractiveShellApp": ("exec_lines", "exec_files"),
    "Kernel": ("_execute_sleep",),
}
SHELL = []  # once built: [the shell, the configurables it made, its atexit hooks]


def _plain(cfg):
    """A config as plain dicts; a value that is not plain data is unique
    (a lazy value compares equal to nothing)."""
    if isinstance(cfg, dict):
        return {k: _plain(v) for k, v in cfg.items()}
    if cfg is None or isinstance(cfg, (str, int, float, bool, bytes, list, tuple)):
        return cfg
    return object()


def _relevant(cfg):
    """The sections and keys of a kernel's config that reach its shell."""
    out = {}
    for section, values in _plain(cfg).items():
        if isinstance(values, dict):
            values = {k: v for k, v in values.items() if k not in IGNORED.get(section, ())}
            if not values:
                continue
        out[section] = values
    return out


def build(log):
    """Constructs the shell as IPythonKernel.__init__ would, with CONFIG and
    placeholders for the kernel's facts, leaving nothing of it in the
    template's process state. Before gc.freeze()."""
    from IPython.core.profiledir import ProfileDir
    from ipykernel.compiler import XCachingCompiler
    from ipykernel.zmqshell import ZMQInteractiveShell
    from traitlets.config import Config, Configurable

    if threading.active_count() != 1:
        log("shell: not built (threads running)")
        return
    tmp = tempfile.mkdtemp(prefix="sandcell-kshell-")
    env = dict(os.environ)
    main = sys.modules.get("__main__")
    had = {k: builtins.__dict__[k] for k in ("__IPYTHON__", "display") if k in builtins.__dict__}
    prompts = {k: getattr(sys, k) for k in ("ps1", "ps2", "ps3") if hasattr(sys, k)}
    hook = sys.excepthook
    before = {id(o) for o in gc.get_objects() if isinstance(o, Configurable)}
    exits, register = [], atexit.register

    def record(func, *args, **kwargs):  # the construction's exit hooks: the kernel's
        exits.append((func, args, kwargs))
        return func

    atexit.register = record
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            profile = ProfileDir(location=os.path.join(tmp, "profile_default"))
            shell = ZMQInteractiveShell.instance(config=Config(CONFIG), profile_dir=profile,
                                                 ipython_dir=tmp, user_module=None,
                                                 user_ns=None, kernel=None,
                                                 compiler_class=XCachingCompiler)
            shell.display_formatter.formatters  # made on first use: here
        for w in said:
            log("shell: a warning as it was built: %s" % w.message)
    except Exception as e:  # the kernels construct theirs
        log("shell: not built: %s: %s" % (type(e).__name__, e))
        ZMQInteractiveShell.clear_instance()
        return
    finally:
        atexit.register = register
        os.environ.clear()
        os.environ.update(env)
        sys.modules["__main__"] = main
        for k in ("__IPYTHON__", "display"):
            builtins.__dict__.pop(k, None)
        builtins.__dict__.update(had)
        for k in ("ps1", "ps2", "ps3"):
            if hasattr(sys, k):
                delattr(sys, k)
        for k, v in prompts.items():
            setattr(sys, k, v)
        sys.excepthook = hook
        shutil.rmtree(tmp, ignore_errors=True)
    ZMQInteractiveShell.clear_instance()
    made = [o for o in gc.get_objects()
            if isinstance(o, Configurable) and id(o) not in before and o is not profile]
    if threading.active_count() != 1:
        log("shell: not kept (it started a thread)")
        return
    SHELL[:] = [shell, made, exits]


def fits(cls, args, kwargs):
    """Why a kernel's instance() call cannot take the template's shell, or
    None: IPythonKernel.__init__'s call, and a config that reaches the
    shell with what the template built it with, nothing more."""
    from ipykernel.compiler import XCachingCompiler

    if cls is not type(SHELL[0]) or args:
        return "another shell class"
    if set(kwargs) != {"parent", "profile_dir", "user_module", "user_ns", "kernel",
                       "compiler_class"}:
        return "other arguments"
    if kwargs["user_module"] is not None or kwargs["user_ns"] is not None:
        return "a user namespace of the kernel's"
    if kwargs["compiler_class"] is not XCachingCompiler:
        return "another compiler"
    if kwargs["parent"] is None or kwargs["profile_dir"] is None:
        return "no parent or profile dir"
    if _relevant(kwargs["parent"].config) != CONFIG:
        return "a configuration of its own"
    return None


def bind(kwargs):
    """The template's shell, this kernel's: what the construction took from
    the kernel, its process and its arguments, taken again here."""
    from IPython.core.interactiveshell import PickleShareDB
    from IPython.paths import get_ipython_dir
    from IPython.utils.path import get_home_dir
    from traitlets.config import LoggingConfigurable, SingletonConfigurable

    shell, made, exits = SHELL
    kernel = kwargs["parent"]
    # SingletonConfigurable.instance(): the singleton of each class up to it
    for klass in type(shell).mro():
        if issubclass(klass, SingletonConfigurable) and klass is not SingletonConfigurable:
            klass._instance = shell
    shell.parent = kernel
    # Each shared the shell's config (the app's object), and logged to its
    # log. The kernel's config has in every section that reaches them what
    # they were built with (fits()): traitlets' reload of it on a change of
    # `config` would set every value to what it is, and cost 1.1 MB of
    # copied pages (its walk of each class's traits); the object is put in
    # place without it.
    for c in made:
        c._trait_values["config"] = kernel.config
        if "config" in vars(c):  # ConfigMagics: its %config method hides the trait
            vars(c)["config"] = kernel.config
        if isinstance(c, LoggingConfigurable):
            c.log = kernel.log
    shell.kernel = kwargs["kernel"]
    shell.profile_dir = kwargs["profile_dir"]
    # the extension manager makes the dir's extensions/ on a change; a cold
    # shell sets its dir before that manager exists
    ext = shell.extension_manager._on_ipython_dir_changed
    shell.unobserve(ext, names=("ipython_dir",))
    shell.ipython_dir = get_ipython_dir()
    shell.observe(ext, names=("ipython_dir",))
    shell.starting_dir = os.getcwd()
    shell.init_environment()
    shell.save_sys_module_state()
    shell.init_sys_modules()
    shell.db = PickleShareDB(os.path.join(shell.profile_dir.location, "db"))
    shell.init_encoding()
    try:  # HistoryManager's default dir_hist: the _dh of the user's namespace
        shell.history_manager.dir_hist[:] = [Path.cwd()]
    except OSError:
        shell.history_manager.dir_hist[:] = []
    shell.home_dir = get_home_dir()
    shell.init_logger()
    builtins.__dict__["__IPYTHON__"] = True
    builtins.__dict__["display"] = sys.modules["IPython.core.interactiveshell"].display
    shell.init_prompts()
    shell.sys_excepthook = sys.excepthook
    for func, args, kwargs in exits:  # ScriptMagics' kill_bg_processes, atexit_operations
        atexit.register(func, *args, **kwargs)
    return shell


def arm():
    """In a forked kernel, before ipykernel starts: its first
    ZMQInteractiveShell.instance() call takes the template's shell when it
    fits, or constructs one as before. Once."""
    if not SHELL:
        return
    cls = type(SHELL[0])

    def instance(klass, *args, **kwargs):
        if cls.__dict__.get("instance") is ours:
            del cls.instance  # traitlets' own again
        why = fits(klass, args, kwargs)
        if why is None:
            return bind(kwargs)
        SHELL.clear()
        # the operator's log (the kernel's fd 2), as sandcell_startup's errors
        sys.__stderr__.write("sandcell_kshell: the kernel builds its own shell: %s\n" % why)
        return klass.instance(*args, **kwargs)

    ours = classmethod(instance)
    cls.instance = ours
