"""A real sandcell broker for the Python tests (tests/api, tests/deploy).

Started from $SANDCELL_BIN (default bin/ of the tree) on a free port with a run
dir of its own; stopped with SIGTERM, then whatever it left running is killed
and its run dir removed, as the C harness does (tests/integration/harness.c).
"""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SANDCELL_BIN", os.path.join(ROOT, "bin"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, *args, env=None, token=None, envd=False):
        self.token = token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.envd_port = free_port() if envd else None
        self.run_dir = tempfile.mkdtemp(prefix="sandcell-pytest.")
        self.log = self.run_dir + ".log"
        # envd on a free port when asked, else off (its fixed default port is no test's)
        envd_at = f"127.0.0.1:{self.envd_port}" if envd else "none"
        argv = [os.path.join(BIN, "sandcell-broker"), "--listen", f"127.0.0.1:{self.port}",
                "--envd-listen", envd_at, "--run-dir", self.run_dir, "--grace", "2"] + list(args)
        if token:
            argv += ["--access-token", token]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, **(env or {})))
        self._wait_healthy("--no-default-context" not in args)

    def _wait_healthy(self, want_default):
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            if self.proc.poll() is not None:
                break
            try:
                path = "/ready" if want_default else "/health"
                with urllib.request.urlopen(self.url + path, timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        tail = self.log_text()[-3000:]
        self.stop()
        raise RuntimeError(f"the broker never became ready; its log ends:\n{tail}")

    def log_text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def ctl(self, *args):
        return subprocess.run([os.path.join(BIN, "sandcellctl"), "--run-dir", self.run_dir]
                              + list(args), capture_output=True, text=True, timeout=30)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for state in glob.glob(os.path.join(self.run_dir, "ctx", "*", "state.json")):
            try:
                with open(state) as f:
                    os.kill(json.load(f)["pid"], signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass
        for d in (self.run_dir, self.run_dir + ".work"):
            shutil.rmtree(d, ignore_errors=True)
        if not os.environ.get("SANDCELL_KEEP_LOGS"):
            try:
                os.unlink(self.log)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def metric_names(exposition):
    """The metric names a Prometheus text exposition holds: its samples' names and
    what its TYPE lines declare (a histogram's _bucket, _sum and _count too)."""
    names = set()
    for line in exposition.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            names.add(m.group(1))
            if m.group(2) in ("histogram", "summary"):
                names |= {m.group(1) + s for s in ("_bucket", "_sum", "_count")}
        elif line and not line.startswith("#"):
            names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    return names
