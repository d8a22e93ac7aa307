"""What the Python black-box tests share: a tierserve process on port 0 (its --port-file
read once written), stopped with SIGTERM; a JSON call over HTTP without a client library
in between."""
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request


class Proc:
    """`BIN ARGV... --port 0 --port-file WORK/NAME.port`, its stderr in WORK/NAME.stderr."""

    def __init__(self, binary, argv, work, name, timeout_s=60):
        os.makedirs(work, exist_ok=True)
        port_file = os.path.join(work, name + ".port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        self.stderr_path = os.path.join(work, name + ".stderr")
        self._err = open(self.stderr_path, "w")
        self.proc = subprocess.Popen([binary, *argv, "--port", "0", "--port-file", port_file],
                                     stdout=subprocess.DEVNULL, stderr=self._err)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if os.path.exists(port_file):
                with open(port_file) as f:
                    text = f.read()
                if text.endswith("\n"):
                    self.port = int(text)
                    return
            if self.proc.poll() is not None:
                self._err.close()
                with open(self.stderr_path) as f:
                    raise RuntimeError(f"{name} exited with {self.proc.returncode}: {f.read()}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"{name} did not start within {timeout_s} s")

    def stop(self):
        """SIGTERM, then the exit status (killed after 30 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._err.closed:
            self._err.close()
        return self.proc.returncode


def http(port, method, path, body=None, raw=None, key=None, timeout=60):
    """(status, headers, text); a JSON body, or raw bytes as they are."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()
