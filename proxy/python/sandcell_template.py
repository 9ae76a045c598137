# sandcell_template.py — the template ("zygote") of Python kernels. The broker
# runs one per Python kernelspec, as root, with a minimal environment:
#
#     python3 sandcell_template.py LIBSANDCELL_BOX SOCKET
#
# It imports the kernel machinery and the data stack once, then forks every
# new kernel from itself, so their pages are shared copy-on-write and
# `import pandas` is already done. The box (namespaces, mounts, cgroups, uid,
# capabilities, no_new_privs, seccomp) is built by the C code of the cold
# start (proxy/sandbox.c, loaded as libsandcell-box.so; proxy/boxlib.c says
# how), never here. Only root (the run dir is 0700) reaches SOCKET; kernels
# never see it (their box covers the run dir) and none of its descriptors.
#
# One request per connection, from a proxy (proxy/template.c): a JSON object
# (exe, argv, env, cwd, box) with the box's stdout and stderr (a pipe the
# proxy reads: never our own stderr, the broker's log) and the proxy's network
# namespace as SCM_RIGHTS. The connection becomes the box's link
# to its proxy. A request that a fork could not honour exactly as a cold
# start would (another interpreter, an environment that changes how Python
# or the data stack start) gets "n" and a reason: the proxy starts it cold.
# A kernel whose tenant has installed its own copy of a module we imported
# (sandcell_packages.shadowed) is forked, and executes the cold command line
# in its box: we never import anything of a tenant's.

import ctypes
import errno
import gc
import json
import os
import signal
import socket
import sys
import time

import sandcell_kshell  # ours, beside this file
import sandcell_packages

# What a cold start pins at interpreter or import time from these variables
# would differ in a fork: a request whose value differs from ours is refused.
PINNED = ("PYTHON", "LANG", "LC_", "OPENBLAS", "OMP_", "MKL_", "GOTO", "NUMEXPR",
          "NUMPY", "NPY_", "PANDAS", "PYDEVD", "TMPDIR", "TZ", "JPY_", "USER",
          "IPYTHON_", "TRAITLETS")  # the broker's template.c gives us the same
# Ours as we started: imports change os.environ (debugpy sets PYDEVD_*), as
# they will in the kernel again.
START_ENV = dict(os.environ)
IMPORT_ENV = {}
LOADED = set()  # the top-level modules we imported from site- or dist-packages
HOT_AGE = 2  # s: a kernel forked this long ago has started (hot_pages)
HOT_AGAIN = 10  # s: how long a list of hot pages is used
HOT_SAID = []  # the first list's size, once logged


def log(msg):
    sys.stderr.write("sandcell-template[%d] info: %s\n" % (os.getpid(), msg))
    sys.stderr.flush()


def preload():
    """The modules a kernel imports as it starts, and the data stack."""
    import ipykernel.kernelapp  # noqa: F401 (IPython, zmq, tornado, jupyter_client...)
    import ipykernel.ipkernel  # noqa: F401
    import ipykernel.zmqshell  # noqa: F401
    import ipykernel.iostream  # noqa: F401
    import ipykernel.heartbeat  # noqa: F401
    import ipykernel.comm  # noqa: F401
    import IPython.core.interactiveshell  # noqa: F401
    import IPython.core.formatters  # noqa: F401
    import IPython.core.completer  # noqa: F401
    import IPython.core.completerlib  # noqa: F401 (imported by the shell's init)
    import jupyter_client.session  # noqa: F401
    import zmq.eventloop.zmqstream  # noqa: F401
    for name in ("numpy", "pandas"):
        try:
            __import__(name)
        except Exception as e:  # a template without it still helps
            log("no %s: %s" % (name, e))


def preload_startup():
    """sandcell_startup.py's modules (the profile, ~1000 lines), loaded as it
    loads them, for our kernels' startup to take (sandcell_packages.PRELOADED):
    their code objects are ours, shared, not unmarshalled again in each
    kernel. A file changed since is loaded again by the startup."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("sandcell_packages", "sandcell_profile"):
        path = os.path.join(here, name + ".py")
        try:
            st = os.stat(path)
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except Exception as e:  # the startup loads it as before
            log("startup module %s: %s: %s" % (name, type(e).__name__, e))
            continue
        sandcell_packages.PRELOADED[path] = (st.st_mtime_ns, st.st_size, module)


def refuse(conn, why):
    try:
        conn.send(b"n" + why.encode("utf-8", "replace")[:400])
    except OSError:
        pass


def interpreter_options(argv, i):
    """The -X and -W options of argv from i on (kspec_python_module's rule)."""
    j = i
    while j < len(argv) and isinstance(argv[j], str) and argv[j][:2] in ("-X", "-W"):
        j += 1 if len(argv[j]) > 2 else 2
    return argv[i:j]


def module_args(argv):
    """The kernel's arguments after the module in launch.c's safe run:
    python -s [-X/-W options] -c CODE MODULE ARGS."""
    return argv[5 + len(interpreter_options(argv, 2)):]


def check(req):
    """Why this request cannot be a fork, or None."""
    argv = req.get("argv")
    if not isinstance(argv, list) or len(argv) < 5 or argv[1] != "-s":
        return "not python -s -c <run module> ipykernel_launcher"
    opts = interpreter_options(argv, 2)
    k = 2 + len(opts)
    if argv[k:k + 1] != ["-c"] or argv[k + 2:k + 3] != ["ipykernel_launcher"]:
        return "not python -s -c <run module> ipykernel_launcher"
    # the template was started with the kernelspec's options: a fork has them
    if opts != sys.orig_argv[1:len(sys.orig_argv) - len(sys.argv)]:
        return "interpreter options %s, not the template's" % " ".join(opts)
    exe = req.get("exe", "")
    if os.path.realpath(exe) != os.path.realpath(sys.executable):
        return "another interpreter (%s)" % exe
    env = dict(kv.split("=", 1) for kv in req.get("env", []) if "=" in kv)
    keys = set(env) | set(START_ENV)
    for k in sorted(keys):
        if k.startswith(PINNED) and env.get(k) != START_ENV.get(k):
            return "%s differs from the template's" % k
    return None


def become_kernel(req):
    """In the boxed child: what `python -m ipykernel_launcher ...` would be."""
    import runpy
    import site
    import tempfile

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    env = dict(kv.split("=", 1) for kv in req["env"] if "=" in kv)
    # the tenant installed its own numpy (or another of ours): a kernel
    # started cold imports it, this one has ours; the same command line, in
    # this box (the tenant's packages were never imported here)
    shadow = sandcell_packages.shadowed(env, LOADED)
    if shadow:
        log("a cold start: the tenant's packages shadow %s" % ", ".join(shadow))
        os.execve(req["exe"], req["argv"], env)
    os.environ.clear()
    os.environ.update(env)
    os.environ.update(IMPORT_ENV)  # what the preloaded imports set, as they would
    # what the interpreter computed from our environment: again from the kernel's
    tempfile.tempdir = None
    # -s: no user site-packages (HOME is the workspace)
    if site.USER_SITE in sys.path:
        sys.path.remove(site.USER_SITE)
    site.USER_BASE = site.USER_SITE = None
    site.ENABLE_USER_SITE = False
    # the safe run takes the first entry off sys.path (the cwd; ours is this
    # file's dir) before it imports anything; runpy sets argv[0]
    del sys.path[0]
    sys.argv = ["-m"] + list(module_args(req["argv"]))
    parse_quickly(sys.argv[1:])
    sys.orig_argv = list(req["argv"])
    # random state inherited from the template: a fresh one per kernel
    if "numpy" in sys.modules:
        try:
            sys.modules["numpy"].random.seed()
        except Exception:
            pass
    sandcell_kshell.arm()  # the template's shell, when it fits
    runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)


def parse_quickly(args):
    """traitlets parses a kernel's command line by first building an argparse
    parser of every option of every configurable class: 8-16 ms of each
    fork's start, for the one form the kernelspec gives, `-f FILE`. For that
    form (an absolute path the proxy made), the kernel app is given what
    that parse gives; any other argv, or a second parse, goes to traitlets.
    template_test compares the result with a cold kernel's."""
    # an absolute path: nothing traitlets' from_string would change (~, quotes)
    if len(args) != 2 or args[0] != "-f" or not args[1].startswith("/"):
        return
    from ipykernel.kernelapp import IPKernelApp
    from traitlets.config import Config

    own = IPKernelApp.__dict__.get("parse_command_line")

    def parse_command_line(self, argv=None):
        if own is None:  # traitlets' own again
            del IPKernelApp.parse_command_line
        else:
            IPKernelApp.parse_command_line = own
        argv = sys.argv[1:] if argv is None else argv
        if list(argv) != args:
            return self.parse_command_line(argv)
        self.argv = list(args)
        self.cli_config = Config({"IPKernelApp": {"connection_file": args[1]}})
        self.update_config(self.cli_config)
        self.extra_args = []

    IPKernelApp.parse_command_line = parse_command_line


def fork_box(lib, ownpid, conn, req, fds):
    """Forks B, PID 1 of a new PID namespace (our own children stay in ours),
    and from B the kernel, in one C call (boxlib_fork) bracketed as
    os.fork() brackets its fork: no Python runs in B, which ends as the
    box's init. Returns B's pid here, and 0 in the kernel."""
    box = json.dumps(req["box"]).encode()
    args = b"".join(a.encode() + b"\0" for a in req["argv"])
    env = b"".join(kv.encode() + b"\0" for kv in req["env"])
    netfd = fds[1] if len(fds) > 1 else -1
    api, pid = ctypes.pythonapi, -1
    api.PyOS_BeforeFork()
    try:
        pid = lib.boxlib_fork(ownpid, box, netfd, args, len(args), env, len(env),
                              conn.fileno(), fds[0])
    finally:
        if pid == 0:
            api.PyOS_AfterFork_Child()
        else:
            api.PyOS_AfterFork_Parent()
    if pid == 0:
        return 0
    if pid == -errno.EPROTO:  # our next kernels would nest in this box: start again
        log("back to our PID namespace: %s" % os.strerror(errno.EPROTO))
        os._exit(1)
    if pid < 0:
        raise OSError(-pid, "the box: %s" % os.strerror(-pid))
    return pid


def child(srv, conn, req, fds):
    """The kernel, in its box: it ends with SystemExit; nothing else returns."""
    # closed by boxlib_init with every other descriptor of ours: not again
    srv.detach()
    conn.detach()
    # The kernel: from here on it ends as `python -m` would, through the
    # interpreter's own exit (SystemExit leaves the template's frames: main()
    # catches no BaseException, and has nothing left to close of ours).
    fds.clear()
    try:
        become_kernel(req)
    except SystemExit:
        raise
    except BaseException:
        import traceback

        traceback.print_exc()
        raise SystemExit(1)
    raise SystemExit(0)


def collapse():
    """Our heap in huge pages where it can be (MADV_COLLAPSE, Linux 6.1+; a
    no-op elsewhere): each fork then copies a page table entry per 2 MiB
    rather than 512, the largest cost of forking a box. A kernel that writes
    to such a page splits its own mapping and copies 4 KiB as before."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    huge, done = 1 << 21, 0
    with open("/proc/self/maps") as f:
        spans = [line.split() for line in f]
    for fields in spans:
        # private writable anonymous memory: the heap and Python's arenas
        if len(fields) > 5 and fields[5] != "[heap]" or not fields[1].startswith("rw"):
            continue
        a, b = (int(x, 16) for x in fields[0].split("-"))
        a, b = (a + huge - 1) & ~(huge - 1), b & ~(huge - 1)
        if b > a and libc.madvise(a, b - a, 25) == 0:  # MADV_COLLAPSE
            done += b - a
    return done >> 20


BOXES = {}  # our children, the boxes' inits: (when forked, the kernel's uid)


def reap(*_):
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        BOXES.pop(pid, None)


def hot_pages(lib, hot, uid):
    """The pages our kernels copy as they start, listed for the next ones
    (hotpages.c) against the kernels of our oldest boxes of the same uid
    (one tenant's: with --isolation context a context's uid is its own, so
    no other context shapes what its kernel copies) that have had HOT_AGE
    seconds to start; made again every HOT_AGAIN seconds, or at once while
    there was no kernel to compare with. hot: when the list was made, its
    size (or -errno; None: no kernel), and for which uid."""
    now = time.monotonic()
    if hot[1] is not None and hot[2] == uid and now - hot[0] < HOT_AGAIN:
        return hot
    refs = []
    for pid, (t, u) in sorted(BOXES.items(), key=lambda kv: kv[1][0]):
        if now - t < HOT_AGE or len(refs) == 3:
            break
        if u != uid:
            continue
        try:
            with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                refs.append(int(f.read().split()[0]))
        except (OSError, IndexError, ValueError):
            continue
    n = lib.boxlib_hot_scan((ctypes.c_int * len(refs))(*refs), len(refs))
    if n == -errno.ESRCH:  # no list: try again with the next request
        return (now, None, uid)
    if n > 0 and not HOT_SAID:
        HOT_SAID.append(n)
        log("kernels copy %d pages (%d MiB) ahead as they start, in %.1f ms" %
            (n, n >> 8, (time.monotonic() - now) * 1000))
    return (now, n, uid)


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: sandcell_template.py LIBSANDCELL_BOX SOCKET\n")
        sys.exit(2)
    started = time.monotonic()
    lib = ctypes.CDLL(sys.argv[1])
    lib.boxlib_fork.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
                                ctypes.c_int, ctypes.c_int]
    lib.boxlib_hot_scan.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    lib.boxlib_hot_scan.restype = ctypes.c_long
    ownpid = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    path = sys.argv[2]
    if lib.boxlib_template() < 0:
        log("PR_SET_CHILD_SUBREAPER failed")
    preload()
    preload_startup()
    IMPORT_ENV.update((k, v) for k, v in os.environ.items() if START_ENV.get(k) != v)
    # the kernels' IPython shell (sandcell_kshell.py): it imports too
    sandcell_kshell.build(log)
    LOADED.update(name.split(".", 1)[0] for name, m in list(sys.modules.items())
                  if "-packages" in (getattr(m, "__file__", None) or ""))
    # every object so far stays out of the collector's reach: its passes in a
    # kernel would write to these pages and unshare them
    gc.collect()
    gc.freeze()
    huge = collapse()
    signal.signal(signal.SIGCHLD, reap)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    old = os.umask(0o177)
    srv.bind(path)
    os.umask(old)
    srv.listen(64)
    log("ready in %.0f ms (%s, %d MiB in huge pages)" % ((time.monotonic() - started) * 1000, path, huge))
    hot = (0, None, None)
    while True:
        conn, _ = srv.accept()
        fds = []
        try:
            conn.settimeout(5)
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 4)
            req = json.loads(msg)
            why = check(req) if fds else "no descriptors"
            if why:
                refuse(conn, why)
                continue
            box = req.get("box")
            uid = box.get("uid") if isinstance(box, dict) else None
            # BOXES stays as it is (reap) until the new box is in it
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
            try:
                hot = hot_pages(lib, hot, uid)
                sys.stderr.flush()
                pid = fork_box(lib, ownpid, conn, req, fds)
                if pid:
                    BOXES[pid] = (time.monotonic(), uid)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
            if pid == 0:
                child(srv, conn, req, fds)
        except Exception as e:
            log("request: %s: %s" % (type(e).__name__, e))
            refuse(conn, "bad request")
        finally:
            conn.close()
            for fd in fds:
                os.close(fd)


if __name__ == "__main__":
    main()
