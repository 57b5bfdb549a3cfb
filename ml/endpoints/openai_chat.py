"""OpenAI-compatible chat completions (``POST {base}/v1/chat/completions``): hosted
LLMs, vLLM, llama.cpp's server, Ollama, TGI.

One request per example, temperature 0, a single choice; the answer
(``choices[0].message.content``) is read strictly (``prompts.parse_label`` /
``parse_span``). An answer that cannot be read is returned as such
(``"unparseable": True``), not raised: the caller decides whether it counts as
the model's error. Token counts come from ``usage`` where the endpoint reports it.
"""

from __future__ import annotations

import hashlib

from ..spec import TaskSpec
from . import prompts
from .errors import EndpointProtocolError
from .network import NetworkPolicy
from .transport import post_json

RAW_KEPT = 2000  # characters of the raw answer stored with a prediction (its sha256 covers all of it)
MAX_TOKENS = 64  # the most completion tokens a request asks for (a label or a span is short)
TEMPLATE_TOKENS = 16  # a generous bound on the tokens a chat template adds per message (role, markers)


def chat_url(base: str) -> str:
    """The chat completions URL of a base URL given with or without ``/v1``, or in full."""
    base = base.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if base.endswith("/v1"):
        return base + "/chat/completions"
    return base + "/v1/chat/completions"


def request_body(spec: TaskSpec, inputs: dict[str, str], *, model: str, template: str | None,
                 descriptions: dict[str, str], max_tokens: int = MAX_TOKENS) -> dict:
    if template is None:
        template = prompts.QA_TEMPLATE if spec.is_qa else prompts.CLASSIFICATION_TEMPLATE
    text = prompts.render(template, prompts.values_for(inputs, list(spec.labels), descriptions))
    body = {"messages": [{"role": "system", "content": prompts.SYSTEM_MESSAGE}, {"role": "user", "content": text}],
            "temperature": 0, "n": 1, "max_tokens": max_tokens}
    if model:
        body["model"] = model
    return body


def content_of(body: dict) -> str:
    """``choices[0].message.content``, or ``EndpointProtocolError``."""
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise EndpointProtocolError("The answer has no choices[0].message.content.") from None
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise EndpointProtocolError("choices[0].message.content is not text.")
    return content


def usage_of(body: dict) -> dict:
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    found = {}
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            found[key] = value
    return found


def interpret(spec: TaskSpec, inputs: dict[str, str], content: str) -> dict:
    """The prediction an answer gives, in ``ml.predict``'s shape."""
    if spec.is_qa:
        span = prompts.parse_span(content, inputs["passage"])
        if span is None:
            return {"answer": "", "start": 0, "end": 0, "score": 0.0, "unparseable": True}
        start, end = span
        return {"answer": inputs["passage"][start:end], "start": start, "end": end, "score": 1.0}
    label = prompts.parse_label(content, list(spec.labels))
    probabilities = {name: float(name == label) for name in spec.labels}
    if label is None:
        return {"label": None, "probabilities": probabilities, "unparseable": True}
    return {"label": label, "probabilities": probabilities}


def most_tokens(body: dict) -> tuple[int, int]:
    """Upper bounds on what a request may be billed: prompt tokens (no tokenizer makes
    more tokens of a text than its UTF-8 bytes; each message gets ``TEMPLATE_TOKENS``
    for the chat template's markers) and completion tokens (its ``max_tokens``)."""
    prompt = TEMPLATE_TOKENS + sum(len(str(m.get("content", "")).encode()) + TEMPLATE_TOKENS
                                   for m in body.get("messages", []))
    return prompt, int(body.get("max_tokens") or MAX_TOKENS)


def predict_one(spec: TaskSpec, inputs: dict[str, str], *, url: str, model: str, headers: dict,
                network: NetworkPolicy, timeout: float, budget: float, template: str | None = None,
                descriptions: dict | None = None, **transport) -> dict:
    """Ask about one example; its prediction with ``endpoint``: the raw answer (cut
    to ``RAW_KEPT`` characters), its sha256, the latency, attempts and token counts."""
    body = request_body(spec, inputs, model=model, template=template, descriptions=descriptions or {})
    response = post_json(chat_url(url), body, network=network, headers=headers, timeout=timeout, budget=budget,
                         **transport)
    content = content_of(response.body)
    prediction = interpret(spec, inputs, content)
    prediction["endpoint"] = {"protocol": "openai", "raw": content[:RAW_KEPT],
                              "raw_sha256": hashlib.sha256(content.encode()).hexdigest(),
                              "latency_ms": response.latency_ms, "attempts": response.attempts,
                              **usage_of(response.body)}
    return prediction
