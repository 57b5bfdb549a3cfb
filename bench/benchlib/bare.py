"""The bare model: a registered artifact, verified and loaded by ``ml`` in a process
of its own (so the process that drives the load never imports torch), timed inside
that process.

It reads JSON lines on stdin and answers each with what it measured:

* ``forward``: one ``model(**tokenizer(premise, hypothesis))`` under
  torch.inference_mode (the model's TorchScript trace when it has one, as the
  platform runs it: ``ml.tracing``), after idling (untimed) ``idle`` seconds when asked;
* ``explain``: ``ml.explain`` with n_steps=10;
* ``throughput``: examples/s at batch 1 and batch 32 over the given pairs, each for
  ``seconds`` after one warm-up batch;
* ``quit``.

One process per OpenMP setting (``VARIANTS``, from its environment): switching
``torch.set_num_threads`` back and forth in one process costs more than a pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from .procs import Processes, module_command, module_env

VARIANTS = {
    "default": ("torch defaults", {}),
    "1thread": ("OMP_NUM_THREADS=1", {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}),
    "passive": ("OMP_WAIT_POLICY=PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"}),
}
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class BareModel:
    """The bare-pass process, seen from the process that drives the benchmark."""

    def __init__(
        self, procs: Processes, path: str, sha256: str, variant: str, env: dict, log_path: Path
    ):
        self.name, extra = VARIANTS[variant]
        self.env = extra
        self.proc = procs.start(
            f"bare pass ({self.name})",
            module_command("bare", path, sha256),
            module_env({**env, **extra}),
            log_path,
            pipe=True,
        )
        ready = self._read()
        self.torch_threads = ready["torch_threads"]
        self.traced = ready.get("traced", False)

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the bare-pass process exited ({self.proc.poll()})")
        return json.loads(line)

    def _ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def forward(self, premise: str, hypothesis: str, idle: float = 0.0) -> float:
        """One timed pass; with ``idle``, the process first sleeps that long (untimed)."""
        return self._ask(op="forward", premise=premise, hypothesis=hypothesis, idle=idle)["s"]

    def explain(self, premise: str, hypothesis: str, target: str) -> float:
        return self._ask(op="explain", premise=premise, hypothesis=hypothesis, target=target)["s"]

    def throughput(self, pairs: list[tuple[str, str]], seconds: float) -> dict:
        """Examples/s at batch 1 and batch 32: ``{"batch1": ..., "batch32": ...}``."""
        return self._ask(op="throughput", pairs=pairs, seconds=seconds)["examples_per_s"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass


# --- inside the bare-pass process -------------------------------------------------------


def main(path: str, sha256: str) -> int:
    import torch

    import ml
    from ml.tracing import forward  # the pass the platform runs: the trace when there is one

    cache = ml.ModelCache(max_size=1)
    ref = ml.ModelRef(path, sha256)
    loaded = cache.get(ref)
    tokenizer, spec = loaded.tokenizer, loaded.spec

    def batch_pass(batch):
        enc = tokenizer(
            [p for p, _ in batch],
            [h for _, h in batch],
            truncation=True,
            max_length=spec.max_tokens,
            padding="longest",
            return_tensors="pt",
        )
        with torch.inference_mode():
            forward(loaded, {k: v for k, v in enc.items() if k in MODEL_INPUTS})

    def throughput(pairs, seconds) -> dict:
        out = {}
        for size in (1, 32):
            batch_pass(pairs[:size])  # warm
            done, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds:
                begin = (done * size) % len(pairs)
                batch_pass((pairs[begin:] + pairs)[:size])
                done += 1
            out[f"batch{size}"] = done * size / (time.perf_counter() - started)
        return out

    print(
        json.dumps(
            {
                "ready": True,
                "torch_threads": torch.get_num_threads(),
                "traced": loaded.inference_forward is not None,
            }
        ),
        flush=True,
    )
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            break
        if request["op"] == "throughput":
            found = throughput(request["pairs"], request["seconds"])
            print(json.dumps({"examples_per_s": found}), flush=True)
            continue
        if request.get("idle"):  # the HTTP loop's cadence: see annotation.py's latency_phase
            time.sleep(request["idle"])
        started = time.perf_counter()
        if request["op"] == "forward":
            enc = tokenizer(
                request["premise"],
                request["hypothesis"],
                return_tensors="pt",
                truncation=True,
                max_length=spec.max_tokens,
            )
            with torch.inference_mode():
                forward(loaded, {k: v for k, v in enc.items() if k in MODEL_INPUTS})[
                    "logits"
                ].softmax(-1)
        else:
            ml.explain(
                ref,
                {"premise": request["premise"], "hypothesis": request["hypothesis"]},
                target=request["target"],
                n_steps=10,
                cache=cache,
            )
        print(json.dumps({"s": time.perf_counter() - started}), flush=True)
    return 0


if __name__ == "__main__":  # python -m benchlib.bare PATH SHA256 (BareModel starts it)
    raise SystemExit(main(*sys.argv[1:]))
