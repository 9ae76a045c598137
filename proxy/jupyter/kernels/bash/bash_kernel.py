"""sandcell's bash kernel: a Jupyter wrapper kernel around one persistent bash.

Variables, functions and the working directory persist between executions.
Each execution is written to a file and sourced (stdin from /dev/null, so the
code cannot read the next request); stdout and stderr stream as they come,
and all of it is read before the reply, so no output outlives its request. A
non-zero exit status of the code is reported as an error with the status.

Interrupts: the kernel and bash share a process group, so an interrupt
(SIGINT to the group) reaches bash and the code's processes whenever it comes,
also before a request's code started or after it ended; bash then runs its
INT trap at its next command, which may be in the next request. So the trap
acts only while the flag file exists, and the kernel creates it only while a
request it was interrupted in is running, then signals the group once more
(the first signal may have come before the file). The code's first line checks
the flag too, for a signal that came before `source` began. During a request
the kernel itself only records the interrupt (no KeyboardInterrupt at a random
point of its own code): every request gets its reply, and an interrupted one
reports KeyboardInterrupt.
"""
import atexit
import os
import select
import shutil
import signal
import subprocess
import tempfile

from ipykernel.kernelbase import Kernel

from sandcell_marked import read_to_markers  # beside this file (make copies it)


def _quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


class BashKernel(Kernel):
    implementation = "sandcell-bash"
    implementation_version = "1.0"
    language = "bash"
    language_version = "5"
    language_info = {
        "name": "bash",
        "mimetype": "text/x-sh",
        "file_extension": ".sh",
        "codemirror_mode": "shell",
    }
    banner = "bash, wrapped by sandcell"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._dir = tempfile.mkdtemp(prefix="sandcell-bash-")
        atexit.register(shutil.rmtree, self._dir, True)
        self._script = os.path.join(self._dir, "code.sh")
        self._flag = os.path.join(self._dir, "interrupt")
        self._interrupted = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._start_bash()

    def _start_bash(self):
        self.bash = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            # children get the default SIGINT back (the kernel ignores it between requests)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        # $_ is kept across executions (the code's first line restores it)
        trap = f"[[ -e {_quote(self._flag)} ]] && return 130 2>/dev/null"
        self._send(f"trap {_quote(trap)} INT; trap '__sandcell_last=$_' RETURN\n".encode())

    def _send(self, data):
        self.bash.stdin.write(data)
        self.bash.stdin.flush()

    def _on_sigint(self, signum, frame):
        self._interrupted = True
        try:
            os.write(self._wake_w, b"i")
        except OSError:
            pass

    def pre_handler_hook(self):
        """Records an interrupt during a request instead of raising
        KeyboardInterrupt wherever the kernel happens to be."""
        self._interrupted = False
        self.saved_sigint_handler = signal.signal(signal.SIGINT, self._on_sigint)

    def _publish(self, name, text, silent, late=False):
        if text and not silent:
            self.send_response(self.iopub_socket, "stream", {"name": name, "text": text},
                               metadata={"sandcell_late": True} if late else None)

    def _drain_late(self):
        """Output that came while no request ran (a background job of an
        earlier one) is not this request's: it is published marked late,
        which sandcell drops and counts (also before a silent request)."""
        for pipe, name in ((self.bash.stdout, "stdout"), (self.bash.stderr, "stderr")):
            data = b""
            while True:
                ready = select.select([pipe], [], [], 0)[0]
                chunk = os.read(pipe.fileno(), 65536) if ready else b""
                if not chunk:
                    break
                data += chunk
            self._publish(name, data.decode("utf-8", "replace"), False, late=True)

    def _error(self, ename, evalue, silent):
        content = {"ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}
        if not silent:
            self.send_response(self.iopub_socket, "error", content)
        return dict(content, status="error", execution_count=self.execution_count)

    def do_execute(self, code, silent, store_history=True, user_expressions=None,
                   allow_stdin=False, **kwargs):
        status = 0
        self._drain_late()
        if not self._interrupted:  # an interrupt before the code was sent: it never runs
            with open(self._script, "w", encoding="utf-8") as f:
                # on the code's own first line, so that line numbers stay the user's
                f.write(f"[[ -e {_quote(self._flag)} ]] && return 130; "
                        ': "${__sandcell_last-}"; ')
                f.write(code)
                if not code.endswith("\n"):
                    f.write("\n")
            status = self._run(silent)
        if status is None:
            rc = self.bash.wait()
            self._start_bash()
            return self._error("BashExited", f"bash exited with status {rc}; "
                               "its state is lost and a new bash was started", silent)
        if self._interrupted:
            return self._error("KeyboardInterrupt", "interrupted", silent)
        if status != 0:
            return self._error("ExitStatus", f"exit status {status}", silent)
        return {"status": "ok", "execution_count": self.execution_count,
                "payload": [], "user_expressions": {}}

    def _interrupt_bash(self):
        """Lets bash's trap act, and signals the group again: the signal that
        reached bash may have come before the flag file existed."""
        open(self._flag, "w").close()
        try:
            os.killpg(os.getpgid(0), signal.SIGINT)
        except OSError:
            pass

    def _run(self, silent):
        """Sources the script; returns its status, or None if bash died."""
        source = f"source {_quote(self._script)} </dev/null; __sandcell_st=$?; "
        if silent:  # sandcell's own snippets (env vars) leave $_ as the user's code left it
            source = (f"__sandcell_keep=${{__sandcell_last-}}; {source}"
                      "__sandcell_last=$__sandcell_keep; ")
        self._send(f"{source}"
                   f"printf '\\036SANDCELL-END %d\\036' $__sandcell_st; "
                   f"printf '\\036SANDCELL-END\\036' >&2\n".encode())
        streams = {self.bash.stdout.fileno(): "stdout", self.bash.stderr.fileno(): "stderr"}
        signalled = False

        def each_turn():
            nonlocal signalled
            if self._interrupted and not signalled:
                signalled = True
                self._interrupt_bash()

        try:
            tails = read_to_markers(streams, lambda name, text: self._publish(name, text, silent),
                                    self._wake_r, each_turn)
            return None if tails is None else int(tails["stdout"].strip() or b"0")
        finally:
            # bash is idle: a signal still pending in it finds no flag
            try:
                os.unlink(self._flag)
            except FileNotFoundError:
                pass

    def do_shutdown(self, restart):
        try:
            self.bash.kill()
        except OSError:
            pass
        return {"status": "ok", "restart": restart}


if __name__ == "__main__":
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(kernel_class=BashKernel)
