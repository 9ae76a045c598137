"""sandcell's bash kernel: a Jupyter wrapper kernel around one persistent bash.

Variables, functions and the working directory persist between executions.
Each execution is written to a file and sourced (stdin from /dev/null, so the
code cannot read the next request); stdout and stderr stream as they come. A
non-zero exit status of the code is reported as an error with the status. On
SIGINT (the kernel and bash share a process group), bash's INT trap makes the
`source` return 130 and the execution ends as KeyboardInterrupt.
"""
import codecs
import os
import selectors
import signal
import subprocess
import tempfile

from ipykernel.kernelbase import Kernel

END = b"\x1eSANDCELL-END"  # followed by " <status>\x1e" on stdout, "\x1e" on stderr


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
        self._send(b"trap 'return 130 2>/dev/null' INT\n")

    def _send(self, data):
        self.bash.stdin.write(data)
        self.bash.stdin.flush()

    def _publish(self, name, text, silent):
        if text and not silent:
            self.send_response(self.iopub_socket, "stream", {"name": name, "text": text})

    def _error(self, ename, evalue, silent):
        content = {"ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}
        if not silent:
            self.send_response(self.iopub_socket, "error", content)
        return dict(content, status="error", execution_count=self.execution_count)

    def do_execute(self, code, silent, store_history=True, user_expressions=None,
                   allow_stdin=False, **kwargs):
        fd, path = tempfile.mkstemp(prefix="sandcell-bash-", suffix=".sh")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(code)
            if not code.endswith("\n"):
                f.write("\n")
        try:
            status, interrupted = self._run(path, silent)
        finally:
            os.unlink(path)
        if status is None:
            rc = self.bash.wait()
            self._start_bash()
            return self._error("BashExited", f"bash exited with status {rc}; "
                               "its state is lost and a new bash was started", silent)
        if interrupted or status == 130:
            return self._error("KeyboardInterrupt", "interrupted", silent)
        if status != 0:
            return self._error("ExitStatus", f"exit status {status}", silent)
        return {"status": "ok", "execution_count": self.execution_count,
                "payload": [], "user_expressions": {}}

    def _run(self, path, silent):
        """Sources the file; returns (status or None if bash died, interrupted)."""
        quoted = path.replace("'", "'\\''")
        self._send(f"source '{quoted}' </dev/null; "
                   f"printf '\\036SANDCELL-END %d\\036' $?; "
                   f"printf '\\036SANDCELL-END\\036' >&2\n".encode())
        sel = selectors.DefaultSelector()
        streams = {self.bash.stdout.fileno(): "stdout", self.bash.stderr.fileno(): "stderr"}
        pending = {name: b"" for name in streams.values()}
        decoders = {name: codecs.getincrementaldecoder("utf-8")("replace")
                    for name in streams.values()}
        for fd in streams:
            sel.register(fd, selectors.EVENT_READ)
        status, done, interrupted = None, set(), False
        while len(done) < 2:
            try:
                events = sel.select()
            except KeyboardInterrupt:
                interrupted = True
                continue
            for key, _ in events:
                name = streams[key.fd]
                chunk = os.read(key.fd, 65536)
                if not chunk:  # bash is gone
                    sel.close()
                    return None, interrupted
                buf = pending[name] + chunk
                i = buf.find(END)
                if i >= 0:
                    tail = buf[i + len(END):]
                    close = tail.find(b"\x1e")
                    if close < 0:  # the marker is not complete yet
                        pending[name] = buf
                        continue
                    if name == "stdout":
                        status = int(tail[:close].strip() or b"0")
                    self._publish(name, decoders[name].decode(buf[:i], final=True), silent)
                    pending[name] = b""
                    done.add(name)
                    sel.unregister(key.fd)
                    continue
                # hold back what could be the start of the marker
                keep = 0
                for n in range(min(len(END) - 1, len(buf)), 0, -1):
                    if END.startswith(buf[-n:]):
                        keep = n
                        break
                out, pending[name] = (buf[:-keep], buf[-keep:]) if keep else (buf, b"")
                self._publish(name, decoders[name].decode(out), silent)
        sel.close()
        return status, interrupted

    def do_shutdown(self, restart):
        try:
            self.bash.kill()
        except OSError:
            pass
        return {"status": "ok", "restart": restart}


if __name__ == "__main__":
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(kernel_class=BashKernel)
