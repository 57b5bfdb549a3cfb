"""Inference passes that run outside Python's global interpreter lock.

An eager transformers forward pass is hundreds of small torch calls. Each one
releases the GIL and takes it back, so a model thread that shares its process with
busy Python threads (a web server's request threads, a worker's pool threads)
waits for the lock hundreds of times per pass: next to a few busy Python threads a
pass can take many times as long as alone.

A TorchScript trace runs the whole pass in C++ and releases the GIL once: next to
the same threads it stays close to its time alone, and alone it is no slower than
the eager one. Traces share the eager model's parameter tensors (no second copy of
the weights); explanations and training keep using the eager model, which they
need for gradients.

A trace records one path through the model's Python code, so each one is checked
at load time: it must give the eager model's outputs on batches of other shapes (a
padded batch of three, one unpadded example, and one input as long as the model
takes), each run twice (TorchScript optimises the graph after its first run, so the
second run is the one a request gets). A model that fails to trace, or whose trace
disagrees, runs eagerly, with a warning in the log.

``DYNABENCH_TRACE_MODELS=0`` turns tracing off (every model runs eagerly).
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from typing import Any

import torch

from .spec import TaskSpec

log = logging.getLogger(__name__)

# Tracing warns (the tracer's notes on Python-side control flow, for which the load
# check stands in; torch's and transformers' deprecation notices). They are silenced
# with ``warnings.catch_warnings``, which swaps the process's filters and puts them
# back on exit: two traces at once (the model thread and the explanation thread may
# load two models) could put back the wrong list and silence every warning for good,
# so one trace runs at a time. While a model traces (about a second, at load), other
# threads' warnings are not shown either.
_TRACE_LOCK = threading.Lock()

ENV = "DYNABENCH_TRACE_MODELS"
#: How far a trace's outputs may stray from the eager model's (float32 logits).
TOLERANCE = 1e-4

_TRACE_TEXTS = (("A person is outside.", "Someone is out of doors today."), ("Rain.", "It is wet"))
_CHECK_TEXTS = (
    ("Three children play football in a large green park near the river.", "Kids play."),
    ("A dog.", "An animal sleeps on the warm floor of the old kitchen all afternoon."),
    ("Yes", "No"),
)
_CHECK_SINGLE = (("A quiet street.", "Nobody is there."),)
#: Repeated until it fills the model's input (truncated to ``spec.max_tokens``).
_LONG_TEXT = "The old bridge over the river was rebuilt in stone after the winter floods. "
_CHECK_RUNS = 2
_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _inputs(tokenizer: Any, spec: TaskSpec, pairs, device) -> dict[str, torch.Tensor]:
    """A padded batch with the keys the real inference code passes for this task."""
    first = [a for a, _ in pairs]
    second = [b for _, b in pairs] if spec.is_qa or len(spec.input_fields) == 2 else None
    encoding = tokenizer(first, second, truncation=True, max_length=spec.max_tokens, padding="longest",
                         return_tensors="pt")
    return {k: encoding[k].to(device) for k in _INPUT_KEYS if k in encoding}


def _outputs(out: Any) -> dict[str, torch.Tensor]:
    """A model's (or trace's) output tensors by name."""
    return {k: v for k, v in dict(out).items() if isinstance(v, torch.Tensor)}


def trace_for_inference(model: Any, tokenizer: Any, spec: TaskSpec, device: Any) -> Any | None:
    """A checked TorchScript trace of ``model`` for inference, or None (run eagerly)."""
    if not enabled():
        return None
    name = getattr(model, "name_or_path", "?")
    try:
        sample = _inputs(tokenizer, spec, _TRACE_TEXTS, device)
        with _TRACE_LOCK, warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(model, example_kwarg_inputs=sample, strict=False, check_trace=False)
        long_text = _LONG_TEXT * (spec.max_tokens // 8 + 1)
        checks = [_inputs(tokenizer, spec, pairs, device)
                  for pairs in (_CHECK_TEXTS, _CHECK_SINGLE, ((long_text, long_text),))]
        disagrees = False
        with torch.inference_mode():
            for check in checks:
                expected = _outputs(model(**check))
                for _ in range(_CHECK_RUNS):
                    disagrees = disagrees or not _same(_outputs(traced(**check)), expected)
    except Exception as exc:  # noqa: BLE001 - any failure means: run eagerly
        log.warning("model %s: no TorchScript trace (%s: %s); it runs eagerly", name, type(exc).__name__, exc)
        return None
    if disagrees:
        log.warning("model %s: its TorchScript trace disagrees with the model; it runs eagerly", name)
        return None
    return traced


def _same(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> bool:
    return set(got) == set(expected) and all(
        got[k].shape == expected[k].shape and torch.allclose(got[k], expected[k], atol=TOLERANCE, rtol=TOLERANCE)
        for k in expected
    )


def forward(holder: Any, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One inference pass: the holder's trace when it has one, else its eager model.

    ``holder`` is a :class:`ml.artifacts.LoadedModel` or anything with ``.model``
    (a model being trained has no trace). Call it under ``torch.inference_mode()``.
    """
    run = getattr(holder, "inference_forward", None) or holder.model
    return _outputs(run(**inputs))
