"""The Open Inference Protocol (KServe v2: ``POST {base}/v2/models/{name}/infer``),
which Triton, KServe, Seldon and MLServer speak.

The request holds one ``BYTES`` tensor per input field (named as the task's ``ml``
fields: ``statement``, ``premise``/``hypothesis``, ``passage``/``question``), shape
``[n]``, a batch of ``n`` examples. The answer must hold, for classification, an
``FP32``/``FP64`` tensor ``probabilities`` of shape ``[n, k]`` with the task's
``k`` labels in the task's order; for extractive QA, integer tensors ``start``
and ``end`` of shape ``[n]``: character offsets into the passage, end exclusive.
Anything else is an ``EndpointProtocolError``.
"""

from __future__ import annotations

import hashlib
import json
import math
from urllib.parse import quote

from ..spec import TaskSpec
from .errors import EndpointProtocolError
from .network import NetworkPolicy
from .transport import post_json

INT_TYPES = {"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"}
FLOAT_TYPES = {"FP16", "FP32", "FP64"}


def infer_url(base: str, model: str) -> str:
    base = base.rstrip("/")
    if base.endswith("/infer"):
        return base
    return f"{base}/v2/models/{quote(model, safe='')}/infer"  # a name is one path segment, whatever it holds


def request_body(spec: TaskSpec, rows: list[dict[str, str]]) -> dict:
    return {"inputs": [{"name": name, "shape": [len(rows)], "datatype": "BYTES", "data": [r[name] for r in rows]}
                       for name in spec.input_fields]}


def _flat(data) -> list:
    if isinstance(data, list) and any(isinstance(item, list) for item in data):
        return [value for item in data for value in _flat(item)]
    if not isinstance(data, list):
        raise EndpointProtocolError("A tensor's data is not a list.")
    return data


def output(body: dict, name: str, shape: list[int], types: set[str]) -> list:
    """The named output tensor's flat data, checked for shape and type."""
    outputs = body.get("outputs")
    if not isinstance(outputs, list):
        raise EndpointProtocolError("The answer has no 'outputs' list.")
    found = [o for o in outputs if isinstance(o, dict) and o.get("name") == name]
    if len(found) != 1:
        raise EndpointProtocolError(f"The answer has no single output tensor named {name!r}.")
    tensor = found[0]
    # What the endpoint sent is not repeated in a message: only what was expected.
    if tensor.get("datatype") not in types:
        raise EndpointProtocolError(f"Output {name!r} is not of a datatype among {sorted(types)}.")
    if tensor.get("shape") != shape:
        raise EndpointProtocolError(f"Output {name!r} does not have the shape {shape}.")
    data = _flat(tensor.get("data"))
    if len(data) != math.prod(shape):
        raise EndpointProtocolError(f"Output {name!r} does not hold {math.prod(shape)} values for shape {shape}.")
    for value in data:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise EndpointProtocolError(f"Output {name!r} holds a value that is not a finite number.")
    return data


def interpret(spec: TaskSpec, rows: list[dict[str, str]], body: dict) -> list[dict]:
    n = len(rows)
    if spec.is_qa:
        starts = output(body, "start", [n], INT_TYPES)
        ends = output(body, "end", [n], INT_TYPES)
        predictions = []
        for row, start, end in zip(rows, starts, ends, strict=True):
            start, end = int(start), int(end)
            if not 0 <= start <= end <= len(row["passage"]):
                raise EndpointProtocolError("An answered span is not inside the passage.")
            predictions.append({"answer": row["passage"][start:end], "start": start, "end": end, "score": 1.0,
                                "raw": [start, end]})
        return predictions
    k = len(spec.labels)
    values = output(body, "probabilities", [n, k], FLOAT_TYPES)
    predictions = []
    for i in range(n):
        row = [float(v) for v in values[i * k:(i + 1) * k]]
        if any(v < 0 for v in row) or abs(sum(row) - 1.0) > 1e-3:
            raise EndpointProtocolError("A row of 'probabilities' is not a probability distribution.")
        best = max(range(k), key=row.__getitem__)
        predictions.append({"label": spec.labels[best], "probabilities": dict(zip(spec.labels, row, strict=True)),
                            "raw": row})
    return predictions


def predict_batch(spec: TaskSpec, rows: list[dict[str, str]], *, url: str, model: str, headers: dict,
                  network: NetworkPolicy, timeout: float, budget: float, **transport) -> list[dict]:
    """Predictions for ``rows`` (one request), each with ``endpoint``: its raw output
    values, their sha256, the request's latency and attempts."""
    if not rows:
        return []
    response = post_json(infer_url(url, model), request_body(spec, rows), network=network, headers=headers,
                         timeout=timeout, budget=budget, **transport)
    predictions = interpret(spec, rows, response.body)
    for prediction in predictions:
        raw = prediction.pop("raw")
        prediction["endpoint"] = {"protocol": "v2", "raw": raw,
                                  "raw_sha256": hashlib.sha256(json.dumps(raw).encode()).hexdigest(),
                                  "latency_ms": response.latency_ms, "attempts": response.attempts,
                                  "batch": len(rows)}
    return predictions
