"""MLServer, the Open Inference Protocol's reference server (Seldon), run as a subprocess
that serves one of the platform's trained artifacts through
``ml.serving.mlserver_runtime.ArtifactRuntime``.

MLServer lives in a venv of its own, ``var/mlserver``, which ``make install`` builds
from ``requirements-mlserver.txt``; that venv sees ``.venv``'s packages (torch,
transformers, numpy) through a ``.pth`` file. The platform only speaks HTTP to it.
The server listens on loopback: HTTP on a free port, and its gRPC and metrics servers
(which it always starts) on free ports of their own. It runs inference in its own
process (``parallel_workers: 0``: no worker processes to stop), in the test's process
group, so an interrupted run stops it too. ``calls()`` reads its Prometheus counter of
successful inference requests for the model.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "var" / "mlserver"
EXECUTABLE = VENV / "bin" / "mlserver"
# Where it listens: loopback, which an endpoint reaches only where ENDPOINT_ALLOWED_HOSTS
# names it (the tests that register it as an endpoint do, explicitly).
HOST = "127.0.0.1"
START_TIMEOUT = 180.0  # seconds: imports torch and loads the model on a busy 2-core machine
PORT_TAKEN = ("address already in use", "errno 98")


def executable_or_skip() -> Path:
    """The server's executable; the test skips where it is not installed, and fails
    under CI (``make install`` builds it before ``make test``)."""
    if not EXECUTABLE.exists():
        missing = f"MLServer is not installed ({EXECUTABLE} is missing; `make install` builds it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {missing}")
        pytest.skip(missing)
    return EXECUTABLE


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class MLServerProcess:
    def __init__(self, name: str, artifact: str | os.PathLike, sha256: str | None, folder: Path):
        self.name = name
        self.artifact = os.fspath(artifact)
        self.sha256 = sha256
        self.folder = Path(folder)
        self.log = self.folder / "mlserver.log"
        self.process: subprocess.Popen | None = None
        self.port = self.metrics_port = 0
        self.start_seconds = 0.0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def _write_settings(self) -> None:
        self.port, grpc_port, self.metrics_port = free_ports(3)
        settings = {"host": HOST, "http_port": self.port, "grpc_port": grpc_port,
                    "metrics_port": self.metrics_port, "parallel_workers": 0, "debug": False,
                    "environments_dir": str(self.folder / ".envs"), "metrics_dir": str(self.folder / ".metrics")}
        model = {"name": self.name, "implementation": "ml.serving.mlserver_runtime.ArtifactRuntime",
                 "parameters": {"uri": self.artifact, "extra": {"sha256": self.sha256}}}
        (self.folder / "settings.json").write_text(json.dumps(settings, indent=2))
        (self.folder / "model-settings.json").write_text(json.dumps(model, indent=2))

    def _get(self, url: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def _log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def _start_once(self) -> bool:
        """Starts the server and waits until the model is ready: True, or False where
        a port was taken between choosing it and binding it (the caller tries again)."""
        self._write_settings()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([str(EXECUTABLE), "start", str(self.folder)], cwd=self.folder, env=env,
                                            stdout=log, stderr=subprocess.STDOUT)
        ready = f"{self.url}/v2/models/{self.name}/ready"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if any(phrase in self._log_tail().lower() for phrase in PORT_TAKEN):
                    return False
                raise RuntimeError(f"MLServer exited ({self.process.returncode}) before it was ready:\n"
                                   + self._log_tail())
            try:
                if self._get(ready, timeout=2.0)[0] == 200:
                    return True
            except OSError:
                pass  # not listening yet
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"MLServer was not ready within {START_TIMEOUT:.0f} s:\n" + self._log_tail())

    def __enter__(self) -> MLServerProcess:
        executable_or_skip()
        started = time.monotonic()
        for _ in range(3):
            if self._start_once():
                self.start_seconds = time.monotonic() - started
                return self
        raise RuntimeError("MLServer found its ports taken three times:\n" + self._log_tail())

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()  # MLServer stops its servers on SIGTERM
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def calls(self) -> int:
        """Successful inference requests for the model, from the server's own metrics."""
        status, text = self._get(f"http://{HOST}:{self.metrics_port}/metrics")
        assert status == 200, text
        pattern = rf'^model_infer_request_success_total\{{[^}}]*model="{re.escape(self.name)}"[^}}]*\}} (\S+)$'
        found = re.findall(pattern, text, flags=re.MULTILINE)
        return int(float(found[0])) if found else 0
