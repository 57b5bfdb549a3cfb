"""A model's memory in inference, measured: the peak resident memory that loading it
and running a forward pass add to a process that holds torch and transformers' model
code but no model.

Each measurement runs in a child of a measuring server, ``python -m ml.memory``: a
fresh interpreter, started on the first measurement, that imports torch and the model
code every architecture shares, never runs a model, and forks one child per
measurement. So nothing the calling process holds or has freed counts, no process
forks after a forward pass ran in it (docs/operations.md: "Torch and fork"), and the
imports, seconds of CPU, are paid once per server instead of once per measurement.
The child reads its resident set (``VmRSS``), resets the peak
(``/proc/self/clear_refs``), loads the artifact, runs one forward pass on the inputs
it is given, and reports ``VmHWM - VmRSS`` before the load: the weights, the
tokenizer, and the activations of the pass. The server leaves when its caller does,
or after ``SERVER_IDLE_EXIT`` seconds without a request (it holds torch: hundreds of
MB). It is a Linux measurement; elsewhere, or when the child fails, the answer is None.

The protocol is a JSON line each way: ``{"artifact": path, "inputs": [...]}`` in,
``{"memory_mb": ..., "preloaded": ...}`` or ``{"error": ...}`` out.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

from .backbones import import_transformers

log = logging.getLogger(__name__)

MIB = 1024 * 1024
SERVER_IDLE_EXIT = 300.0
_STATUS = Path("/proc/self/status")
_server: subprocess.Popen | None = None
_server_lock = threading.Lock()  # one measurement at a time per calling process


def _status_kb(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def inference_memory_mb(artifact_dir: str | Path, inputs: list[dict], *, batch_size: int = 32,
                        timeout: float = 300.0) -> float | None:
    """Peak resident memory (MiB) that loading ``artifact_dir`` and predicting the
    first ``batch_size`` of ``inputs`` at once add to a child of the measuring server;
    None when it cannot be measured here."""
    return measure(artifact_dir, inputs[:batch_size], timeout).get("memory_mb")


def measure(artifact_dir: str | Path, inputs: list[dict], timeout: float = 300.0) -> dict:
    """The child's report: ``memory_mb``, and ``preloaded`` (torch and the shared model
    code were in the baseline); {} when there is none, with the reason logged."""
    if not _STATUS.exists() or not inputs:
        return {}
    request = json.dumps({"artifact": str(artifact_dir), "inputs": inputs}) + "\n"
    with _server_lock:
        try:
            line = _ask(request, timeout)
        except (OSError, ValueError) as exc:  # a server that left (idle, killed): once more with a new one
            _stop_server()
            try:
                line = _ask(request, timeout)
            except (OSError, ValueError, TimeoutError) as again:
                _stop_server()
                log.warning("Memory of %s not measured: %s (before that: %s)", artifact_dir, again, exc)
                return {}
        except TimeoutError as exc:
            _stop_server()  # the server and its child: a stuck measurement holds nothing after this
            log.warning("Memory of %s not measured: %s", artifact_dir, exc)
            return {}
    try:
        report = json.loads(line)
    except ValueError:
        log.warning("Memory of %s not measured: unreadable answer %r", artifact_dir, line[-500:])
        return {}
    if "error" in report:
        log.warning("Memory of %s not measured: %s", artifact_dir, report["error"])
        return {}
    return report


def _ask(request: str, timeout: float) -> str:
    server = _running_server()
    server.stdin.write(request)
    server.stdin.flush()
    ready, _, _ = select.select([server.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError(f"no answer in {timeout:.0f} s")
    line = server.stdout.readline()
    if not line:
        raise ValueError(f"the measuring server ended (exit code {server.poll()})")
    return line


def _running_server() -> subprocess.Popen:
    global _server
    if _server is not None and _server.poll() is not None:
        _stop_server()  # it left (idle, killed): its pipes are closed, a new one starts
    if _server is None:
        environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
        # A session of its own, so that stopping it stops a child it is waiting for too.
        _server = subprocess.Popen([sys.executable, "-m", "ml.memory"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, env=environment,
                                   cwd=Path(__file__).resolve().parent.parent, start_new_session=True)
    return _server


def _stop_server() -> None:
    global _server
    if _server is None:
        return
    try:
        os.killpg(_server.pid, signal.SIGKILL)
    except OSError:
        pass
    _server.wait()
    for pipe in (_server.stdin, _server.stdout):
        try:
            pipe.close()
        except OSError:
            pass
    _server = None


atexit.register(_stop_server)  # the server would leave anyway (its stdin closes): this reaps it


# --- the measuring server (python -m ml.memory) -----------------------------------------


def _serve() -> int:
    import torch  # noqa: F401 - in every child's baseline, imported once here


    import_transformers()
    import transformers.modeling_utils  # noqa: F401 - the model code every architecture shares

    while True:
        ready, _, _ = select.select([sys.stdin], [], [], SERVER_IDLE_EXIT)
        if not ready:
            return 0  # idle: the next measurement starts a new server
        line = sys.stdin.readline()
        if not line:
            return 0  # the caller left
        sys.stdout.write(_fork_and_measure(line) + "\n")
        sys.stdout.flush()


def _fork_and_measure(line: str) -> str:
    """Measure in a forked child (the server never runs a model itself); its report."""
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reading)
        try:
            report = _measure_here(json.loads(line))
        except BaseException as exc:  # noqa: BLE001 - reported to the caller, who logs it
            report = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(writing, json.dumps(report).encode())
        os._exit(0)
    os.close(writing)
    with os.fdopen(reading, "rb") as answers:
        answer = answers.read().decode()
    _, status = os.waitpid(pid, 0)
    if not answer:  # killed (out of memory) before it answered
        return json.dumps({"error": f"the measuring child ended without an answer (wait status {status})"})
    return answer


def _measure_here(request: dict) -> dict:
    preloaded = all(name in sys.modules for name in ("torch", "transformers.modeling_utils"))
    import torch

    from .prediction import ModelCache, ModelRef, predict

    torch.set_num_threads(1)
    before = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
    inputs = request["inputs"]
    predict(ModelRef(request["artifact"]), inputs, batch_size=len(inputs), cache=ModelCache(max_size=1))
    peak = _status_kb("VmHWM")
    return {"memory_mb": round(max(peak - before, 0) * 1024 / MIB, 1), "preloaded": preloaded}


if __name__ == "__main__":
    sys.exit(_serve())
