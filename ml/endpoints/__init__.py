"""Models behind endpoints: clients of two standard protocols, no Django.

- ``openai``: OpenAI-compatible chat completions (``openai_chat``), one request per
  example, the answer read strictly (``prompts``);
- ``v2``: the Open Inference Protocol (``oip_v2``), a batch per request.

``predict(endpoint, spec, rows)`` answers in ``ml.predict``'s shape (``label`` and
``probabilities``, or ``answer``/``start``/``end``/``score``), each prediction with
``endpoint``: the raw answer, its sha256, latency, attempts and token counts.
``explain_by_occlusion`` is a black-box "Why?": leave one word out at a time.
The secret (an API key) is passed in as a value by the caller with the hosts it is
bound to; it is sent as a bearer token to those hosts only, and never logged or
returned. Where requests may go is the caller's ``network.NetworkPolicy`` (the
default refuses every internal address and plain http), checked on every
connection (``network``). ``most_usage`` bounds what a request may be billed
before it is sent, so a caller can reserve it against a budget.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..spec import TaskSpec
from . import oip_v2, openai_chat
from .errors import EndpointError, EndpointProtocolError, EndpointRefused, EndpointRejected, EndpointUnavailable
from .network import NetworkPolicy, host_and_port, host_listed

PROTOCOLS = ("openai", "v2")
V2_BATCH = 32

__all__ = ["PROTOCOLS", "Endpoint", "EndpointError", "EndpointProtocolError", "EndpointRefused", "EndpointRejected",
           "EndpointUnavailable", "NetworkPolicy", "explain_by_occlusion", "most_usage", "predict"]


@dataclass(frozen=True)
class Endpoint:
    """How to reach one model: ``secret`` is the key's value, found by the caller
    (from the operator's key map), never stored; ``secret_hosts`` the hosts it may be
    sent to (``host`` or ``host:port``); ``network`` where requests may go at all."""

    protocol: str
    url: str
    model: str = ""
    secret: str | None = field(default=None, repr=False)
    secret_hosts: tuple[str, ...] = ()
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    timeout: float = 10.0
    concurrency: int = 4
    prompt_template: str | None = None
    label_descriptions: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}; one of {', '.join(PROTOCOLS)}")

    def headers(self) -> dict:
        """The request's headers: the key, checked now against the hosts it is bound to."""
        if not self.secret:
            return {}
        host, port = host_and_port(self.url)
        if not host_listed(self.secret_hosts, host, port):
            raise EndpointRefused(f"The endpoint's key is not sent to {host}: it is bound to other hosts.")
        return {"Authorization": f"Bearer {self.secret}"}


def most_usage(endpoint: Endpoint, spec: TaskSpec, rows: list[dict]) -> dict:
    """The most that asking about ``rows`` may be billed, before it is asked:
    ``requests``, ``prompt_tokens`` and ``completion_tokens`` (chat: each request's
    bytes and its ``max_tokens``; v2 reports no tokens)."""
    if endpoint.protocol == "v2":
        return {"requests": math.ceil(len(rows) / V2_BATCH), "prompt_tokens": 0, "completion_tokens": 0}
    prompt = completion = 0
    for row in rows:
        body = openai_chat.request_body(spec, spec.validate_inputs(row), model=endpoint.model,
                                        template=endpoint.prompt_template, descriptions=endpoint.label_descriptions)
        most_prompt, most_completion = openai_chat.most_tokens(body)
        prompt += most_prompt
        completion += most_completion
    return {"requests": len(rows), "prompt_tokens": prompt, "completion_tokens": completion}


def predict(endpoint: Endpoint, spec: TaskSpec, rows: list[dict], *, budget: float, **transport) -> list[dict]:
    """Predictions for ``rows`` (``ml`` inputs, validated against ``spec``), in order.
    Chat requests run up to ``endpoint.concurrency`` at a time. Any failure raises
    (an ``EndpointError``): the caller gets every answer or none."""
    rows = [spec.validate_inputs(r) for r in rows]
    common = {"url": endpoint.url, "model": endpoint.model, "headers": endpoint.headers(),
              "network": endpoint.network, "timeout": endpoint.timeout, "budget": budget, **transport}
    if endpoint.protocol == "v2":
        results = []
        for start in range(0, len(rows), V2_BATCH):
            results.extend(oip_v2.predict_batch(spec, rows[start:start + V2_BATCH], **common))
        return results

    def one(row):
        return openai_chat.predict_one(spec, row, template=endpoint.prompt_template,
                                       descriptions=endpoint.label_descriptions, **common)

    if len(rows) == 1 or endpoint.concurrency <= 1:
        return [one(r) for r in rows]
    with ThreadPoolExecutor(max_workers=min(endpoint.concurrency, len(rows))) as pool:
        return list(pool.map(one, rows))


def explain_by_occlusion(predict_rows: Callable[[list[dict]], list[dict]], spec: TaskSpec, inputs: dict,
                         target=None, *, max_calls: int) -> dict:
    """Leave-one-word-out occlusion: each word's importance is how much the score of
    ``target`` (a label's probability; for QA, whether the same span still comes back)
    drops when that word is removed (``attribution``; ``heat`` is it over the largest
    absolute one, as ``ml.explain`` gives). At most ``max_calls`` examples are asked for
    (the full input included); words beyond that budget get no score and the answer
    says so (``"complete": False``). Words as ``ml.explain`` gives them:
    ``{"field", "text", "start", "end", "attribution", "heat"}``."""
    if max_calls < 2:
        raise ValueError("occlusion needs at least two calls (the input and one word left out)")
    inputs = spec.validate_inputs(inputs)
    words = [(name, m.start(), m.end()) for name in spec.input_fields if not (spec.is_qa and name == "passage")
             for m in re.finditer(r"\S+", inputs[name])]
    asked = words[:max_calls - 1]
    variants = [dict(inputs)]
    for name, start, end in asked:
        changed = dict(inputs)
        text = inputs[name][:start] + inputs[name][end:]
        changed[name] = text if text.strip() else "…"
        variants.append(changed)
    predictions = predict_rows(variants)
    base = predictions[0]
    if target is None:
        target = base.get("answer") if spec.is_qa else base.get("label")

    def score(prediction):
        if spec.is_qa:
            return float(prediction.get("answer") == target)
        return float((prediction.get("probabilities") or {}).get(target, 0.0))

    full = score(base)
    drops = [full - score(p) for p in predictions[1:]]
    biggest = max((abs(d) for d in drops), default=0.0)
    found = [{"field": name, "text": inputs[name][start:end], "start": start, "end": end,
              "attribution": round(drop, 6), "heat": round(drop / biggest, 6) if biggest > 0 else 0.0}
             for (name, start, end), drop in zip(asked, drops, strict=True)]
    return {"method": "occlusion", "target": target, "words": found, "calls": len(variants),
            "complete": len(asked) == len(words), "words_total": len(words)}
