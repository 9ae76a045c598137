"""sandcell's Java kernel: a Jupyter wrapper kernel around one JShell session
(jdk.jshell) in a JVM of its own, SandcellJShell.java beside this file.

Declarations, variables and imports persist between executions; the jshell
tool's default imports (java.util.* and the like) are there from the start.
Each cell goes to the JVM over a pipe; stdout and stderr stream as the code
prints. The JVM ignores SIGINT (it shares the kernel's process group): on
SIGINT the wrapper asks it to stop the cell (JShell.stop) and the execution
ends as KeyboardInterrupt. System.exit ends that JVM (error JavaExited) and a
new one starts. Setting the user.dir property changes the working directory.

SandcellJShell is compiled once per JDK into the user's ~/.cache/sandcell (a
JVM is ready about a second sooner than in source-file mode), and the JVM is
spawned before ipykernel is imported, so its warm-up overlaps the kernel's.
"""
import hashlib
import json
import os
import pwd
import resource
import shutil
import signal
import subprocess
import tempfile

from sandcell_marked import read_to_markers  # beside this file (make copies it)

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "SandcellJShell.java")
# the names of the global (--env) variables, which the JVM also sets as system
# properties, as in E2B; taken out of the environment code sees
GLOBAL_ENV = os.environ.pop("SANDCELL_GLOBAL_ENV", "")


def _jdk():
    """(java, JDK home, feature version, release file) of the java on PATH."""
    java = shutil.which("java") or "/usr/bin/java"
    home = os.path.dirname(os.path.dirname(os.path.realpath(java)))
    release = b""
    try:
        with open(os.path.join(home, "release"), "rb") as f:
            release = f.read()
    except OSError:
        pass
    feature = 0
    for line in release.decode("utf-8", "replace").splitlines():
        if line.startswith("JAVA_VERSION="):
            v = line.split("=", 1)[1].strip('"').split(".")[0]
            feature = int(v) if v.isdigit() else 0
    return java, home, feature, release


def _cache_dirs():
    """Where compiled classes may live: shared by every kernel of this user,
    so not $HOME (the proxy gives each kernel a home of its own)."""
    uid = os.getuid()
    if os.environ.get("XDG_CACHE_HOME"):
        yield os.path.join(os.environ["XDG_CACHE_HOME"], "sandcell")
    try:
        yield os.path.join(pwd.getpwuid(uid).pw_dir, ".cache", "sandcell")
    except KeyError:
        pass
    yield os.path.join(tempfile.gettempdir(), f"sandcell-{uid}-cache")


def _classes(home, release):
    """The directory of SandcellJShell compiled by this JDK (compiled now if
    missing), or None: the JVM then runs the source file."""
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read() + home.encode() + release).hexdigest()
    name = "java-kernel-" + digest[:16]
    for cache in _cache_dirs():
        try:
            os.makedirs(cache, mode=0o700, exist_ok=True)
            st = os.stat(cache)
        except OSError:
            continue
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            continue  # classes others could have written are not run
        final = os.path.join(cache, name)
        if not os.path.exists(os.path.join(final, "SandcellJShell.class")):
            _compile(home, cache, final)
        if os.path.exists(os.path.join(final, "SandcellJShell.class")):
            return final
    return None


def _compile(home, cache, final):
    tmp = None
    try:
        tmp = tempfile.mkdtemp(prefix=".build-", dir=cache)
        subprocess.run([os.path.join(home, "bin", "javac"), "-nowarn", "-d", tmp, SOURCE],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        os.rename(tmp, final)  # another kernel may have won the race: use its copy
        tmp = None
    except (OSError, subprocess.CalledProcessError):
        pass
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


class Jvm:
    """One SandcellJShell process: cells in through a pipe, output and end
    markers back on its stdout and stderr."""

    def __init__(self, cwd=None):
        java, home, feature, release = _jdk()
        classes = _classes(home, release)
        argv = [java, "-Xrs", "-Dfile.encoding=UTF-8", "-Dsun.stdout.encoding=UTF-8",
                "-Dsun.stderr.encoding=UTF-8", "-Djava.awt.headless=true"]
        # under --kernel-memory (RLIMIT_DATA) a heap sized for the machine fails at
        # start; half the limit leaves room for code, metaspace and stacks, and a
        # cell that wants more gets an OutOfMemoryError instead of a dead JVM
        soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
        if soft != resource.RLIM_INFINITY:
            argv.append(f"-Xmx{max(soft // 2 >> 20, 32)}m")
        # System.getenv() and the cached working directory are changed by reflection
        for pkg in ("java.lang", "java.util", "java.io", "sun.nio.fs"):
            argv.append(f"--add-opens=java.base/{pkg}=ALL-UNNAMED")
        # the foreign linker calls chdir(2): JDK 17's incubating one, or JDK 22's
        if feature == 17:
            argv.append("--add-modules=jdk.incubator.foreign")
        if feature == 17 or feature >= 22:
            argv.append("--enable-native-access=ALL-UNNAMED")
        if GLOBAL_ENV:
            argv.append(f"-Dsandcell.global.env={GLOBAL_ENV}")
        rfd, self.req = os.pipe()
        argv += ["-cp", classes, "SandcellJShell"] if classes else [SOURCE]
        argv.append(f"/dev/fd/{rfd}")
        try:
            self.proc = subprocess.Popen(
                argv, cwd=cwd, pass_fds=(rfd,), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                # with -Xrs the JVM leaves SIGINT ignored: the kernel's interrupt is not its death
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        finally:
            os.close(rfd)
        self.info = None

    def wait_ready(self):
        """Waits for the JVM's first end marker; raises if it died first."""
        if self.info is not None:
            return self.info
        said = []
        self.info = self.collect(lambda name, text: said.append(text))
        if self.info is None:
            rc = self.proc.wait()
            said = "".join(said)[-2000:]
            raise RuntimeError(f"the JVM exited with status {rc} at start: {said}")
        return self.info

    def _write(self, data):
        while data:
            data = data[os.write(self.req, data):]

    def send_cell(self, code):
        data = code.encode("utf-8", "surrogatepass")
        self._write(b"X %d\n" % len(data) + data)

    def stop(self):
        try:
            self._write(b"S\n")
        except OSError:
            pass

    def collect(self, publish):
        """Streams output to publish(name, text) up to the end markers; returns
        the JVM's reply (a dict), or None if the JVM is gone."""
        streams = {self.proc.stdout.fileno(): "stdout", self.proc.stderr.fileno(): "stderr"}
        tails = read_to_markers(streams, publish)
        return None if tails is None else json.loads(tails["stdout"].decode("ascii"))

    def kill(self):
        try:
            os.close(self.req)  # the JVM halts when its request pipe closes
        except OSError:
            pass
        try:
            self.proc.kill()
            self.proc.wait()
        except OSError:
            pass


# Started before ipykernel is imported: the JVM warms up while the kernel starts.
_early = Jvm() if __name__ == "__main__" else None

from ipykernel.kernelbase import Kernel  # noqa: E402


class JavaKernel(Kernel):
    implementation = "sandcell-java"
    implementation_version = "1.0"
    language = "java"
    language_version = "17"
    language_info = {
        "name": "java",
        "mimetype": "text/x-java",
        "file_extension": ".java",
        "codemirror_mode": "text/x-java",
    }
    banner = "Java (JShell), wrapped by sandcell"

    def __init__(self, **kwargs):
        global _early
        super().__init__(**kwargs)
        self.jvm, _early = _early or Jvm(), None
        self._ready(self.jvm.wait_ready())
        self._sending = self._interrupted = False

    def _ready(self, info):
        self.cwd = info.get("cwd")
        self.language_version = str(info.get("feature", self.language_version))
        self.language_info = dict(self.language_info, version=info.get("version", ""))

    def _publish(self, name, text, silent):
        if text and not silent:
            self.send_response(self.iopub_socket, "stream", {"name": name, "text": text})

    def _error(self, ename, evalue, silent, traceback=None):
        content = {"ename": ename, "evalue": evalue,
                   "traceback": traceback or [f"{ename}: {evalue}"]}
        if not silent:
            self.send_response(self.iopub_socket, "error", content)
        return dict(content, status="error", execution_count=self.execution_count)

    def _on_sigint(self, signum, frame):
        # never inside a request being written: the stop would cut it in two
        self._interrupted = True
        if not self._sending:
            self.jvm.stop()

    def do_execute(self, code, silent, store_history=True, user_expressions=None,
                   allow_stdin=False, **kwargs):
        self._interrupted = False
        saved = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            self._sending = True
            self.jvm.send_cell(code)
            self._sending = False
            if self._interrupted:
                self.jvm.stop()
            reply = self.jvm.collect(lambda name, text: self._publish(name, text, silent))
        except OSError:  # the request pipe broke: the JVM is gone
            reply = None
        finally:
            self._sending = False
            signal.signal(signal.SIGINT, saved)
        if reply is None:
            try:
                rc = self.jvm.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:  # it closed its output but lives on
                rc = "unknown"
            self.jvm.kill()
            self.jvm = Jvm(self.cwd if self.cwd and os.path.isdir(self.cwd) else None)
            self._ready(self.jvm.wait_ready())
            return self._error("JavaExited", f"the JVM exited with status {rc}; its state is "
                               "lost and a new JVM was started", silent)
        self.cwd = reply.get("cwd", self.cwd)
        status = reply.get("status")
        if status == "stopped":
            return self._error("KeyboardInterrupt", "interrupted", silent)
        if status == "error":
            return self._error(reply.get("ename", "Error"), reply.get("evalue", ""), silent,
                               reply.get("traceback"))
        if "result" in reply and not silent:
            self.send_response(self.iopub_socket, "execute_result", {
                "execution_count": self.execution_count,
                "data": {"text/plain": reply["result"]},
                "metadata": {},
            })
        return {"status": "ok", "execution_count": self.execution_count,
                "payload": [], "user_expressions": {}}

    def do_shutdown(self, restart):
        self.jvm.kill()
        return {"status": "ok", "restart": restart}


if __name__ == "__main__":
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(kernel_class=JavaKernel)
