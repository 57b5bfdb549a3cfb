"""Targets served behind endpoints, in the annotation flow: asked from the process
that handles the request (the call is I/O, not a model pass, so it takes no model
thread and no inference queue), alone or in an ensemble with local models.

The endpoint's own rules (secret, slots across workers, rate limit, budget, retries
within ``INFERENCE_TIMEOUT``, cost) are ``registry.endpoints``'s.
"""

from __future__ import annotations

from collections.abc import Callable

from registry import endpoints
from registry.models import Endpoint
from registry.services import TargetModel


def combine(members: list[dict], qa: bool) -> dict:
    """One answer from the members' (in order): classification, the mean of the
    readable members' probabilities and its best label; QA, the readable member
    with the highest score. No readable member: the first member's answer, which
    says it is unparseable."""
    readable = [m for m in members if not m.get("unparseable")]
    if not readable:
        return {k: v for k, v in members[0].items() if k != "endpoint"}
    if qa:
        best = max(readable, key=lambda m: m.get("score", 0.0))
        return {k: best[k] for k in ("answer", "start", "end", "score")}
    labels = list(readable[0]["probabilities"])
    mean = {label: sum(m["probabilities"][label] for m in readable) / len(readable) for label in labels}
    return {"label": max(labels, key=mean.__getitem__), "probabilities": mean}


def predict_with_endpoints(models: list[TargetModel], rows_inputs: list[dict], *, task, round_id: int | None,
                           local: Callable[[list[TargetModel], list[dict]], list[dict]]) -> list[dict]:
    """``inference.predict_with`` when some of ``models`` are endpoints: the local ones
    through ``local`` (the model thread or the queue), each endpoint through
    ``registry.endpoints.predict``. Any failure raises before anything is stored."""
    if task is None:
        raise ValueError("asking an endpoint model needs the task (its prompt and answer format)")
    config = task.parsed_config
    found = Endpoint.objects.select_related("model_version").in_bulk(
        [m.endpoint_id for m in models if m.endpoint_id is not None])
    local_models = [m for m in models if m.endpoint_id is None]
    by_model: dict[int, list[dict]] = {}
    if local_models:
        for result in local(local_models, rows_inputs):
            for key, member in result["members"].items():
                by_model.setdefault(int(key), []).append(member)
    for model in models:
        if model.endpoint_id is not None:
            by_model[model.id] = endpoints.predict(found[model.endpoint_id], config, rows_inputs, round_id=round_id)
    qa = config.kind.answer_shape == "span"  # an ensemble of spans is combined as spans
    results = []
    for i in range(len(rows_inputs)):
        members = [by_model[m.id][i] for m in models]
        result = dict(members[0]) if len(members) == 1 else combine(members, qa)
        result["members"] = {str(m.id): member for m, member in zip(models, members, strict=True)}
        results.append(result)
    return results
