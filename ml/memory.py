"""A model's memory in inference, measured: the peak resident memory that loading it
and running a forward pass add to a fresh interpreter.

:func:`inference_memory_mb` runs ``python -m ml.memory`` (a fresh interpreter, so
nothing else the calling process holds or has freed counts, and no fork after
torch ran). The child imports torch and transformers, reads its resident set
(``VmRSS``), resets the peak (``/proc/self/clear_refs``), loads the artifact, runs
one forward pass on the inputs it is given, and reports ``VmHWM - VmRSS`` before
the load: the weights, the tokenizer, and the activations of the pass. It is a
Linux measurement; elsewhere, or when the child fails, the answer is None.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

MIB = 1024 * 1024
_STATUS = Path("/proc/self/status")


def _status_kb(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def inference_memory_mb(artifact_dir: str | Path, inputs: list[dict], *, batch_size: int = 32,
                        timeout: float = 300.0) -> float | None:
    """Peak resident memory (MiB) that loading ``artifact_dir`` and predicting the
    first ``batch_size`` of ``inputs`` at once add to a fresh interpreter; None when
    it cannot be measured here."""
    if not _STATUS.exists() or not inputs:
        return None
    with tempfile.TemporaryDirectory(prefix="dynabench-memory-") as folder:
        request = Path(folder) / "request.json"
        request.write_text(json.dumps({"artifact": str(artifact_dir), "inputs": inputs[:batch_size]}))
        environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
        try:
            done = subprocess.run([sys.executable, "-m", "ml.memory", str(request)], capture_output=True,
                                  text=True, timeout=timeout, env=environment, check=False,
                                  cwd=Path(__file__).resolve().parent.parent)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("Memory of %s not measured: %s", artifact_dir, exc)
            return None
        if done.returncode != 0:
            log.warning("Memory of %s not measured: %s", artifact_dir, done.stderr[-2000:])
            return None
        try:
            return float(json.loads(done.stdout.strip().splitlines()[-1])["memory_mb"])
        except (ValueError, KeyError, IndexError):
            log.warning("Memory of %s not measured: unreadable answer %r", artifact_dir, done.stdout[-500:])
            return None


def _child(request_path: str) -> int:
    request = json.loads(Path(request_path).read_text())
    import torch  # noqa: F401  (what every model needs is resident before the baseline)

    from .backbones import import_transformers
    from .prediction import ModelCache, ModelRef, predict

    import_transformers()
    torch.set_num_threads(1)
    before = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
    predict(ModelRef(request["artifact"]), request["inputs"], batch_size=len(request["inputs"]),
            cache=ModelCache(max_size=1))
    peak = _status_kb("VmHWM")
    print(json.dumps({"memory_mb": round(max(peak - before, 0) * 1024 / MIB, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
