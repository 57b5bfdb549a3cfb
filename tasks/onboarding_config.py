"""A task config's onboarding (``onboarding``): its schema, defaults and the checks of
its items against the task's own fields, labels and kind (``tasks.config`` calls
``onboarding_problems`` with the parsed config). The quiz itself runs in
``annotation.onboarding``."""

from __future__ import annotations

from core.errors import InvalidInput

# Onboarding (``onboarding``): a short quiz a worker passes before writing or validating
# on the task. Each item is an example to ``label`` (the worker gives the answer, a
# target as the task takes it) or to ``judge`` (the worker says whether the shown
# ``target`` is "correct" or "incorrect"), with its known ``answer`` and the
# ``explanation`` shown after the worker answers. ``items`` is a pool: each try draws
# ``per_try`` of them that no earlier try of the same worker served, so the answers
# shown after one try are never asked again; the pool holds at least ``per_try`` x
# ``max_tries`` items (default ``per_try``: the pool split evenly among the tries).
# ``pass_mark``: the share of a try's items it must get right; ``max_tries``: tries
# before the worker is blocked on the task.
ONBOARDING_KINDS = ["label", "judge"]
JUDGE_ANSWERS = ["correct", "incorrect"]
ONBOARDING_DEFAULTS = {"pass_mark": 0.8, "max_tries": 2, "introduction": ""}
MAX_POOL = 60
MAX_PER_TRY = 20
_TEXTS = {"type": "object", "maxProperties": 10, "additionalProperties": {"type": "string", "maxLength": 5000}}
ONBOARDING_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["items"],
    "properties": {
        "introduction": {"type": "string", "maxLength": 2000},
        "items": {
            "type": "array", "minItems": 1, "maxItems": MAX_POOL,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["kind", "inputs", "answer", "explanation"],
                "properties": {
                    "kind": {"enum": ONBOARDING_KINDS},
                    "context": _TEXTS,
                    "inputs": _TEXTS,
                    "target": {"type": "object"},
                    "answer": {"type": ["object", "string"]},
                    "explanation": {"type": "string", "minLength": 1, "maxLength": 1000},
                },
            },
        },
        "per_try": {"type": "integer", "minimum": 1, "maximum": MAX_PER_TRY},
        "pass_mark": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "max_tries": {"type": "integer", "minimum": 1, "maximum": 10},
    },
}


def with_defaults(onboarding: dict) -> dict:
    """The onboarding with its defaults filled in: ``ONBOARDING_DEFAULTS``, and ``per_try``
    the pool split evenly among ``max_tries`` (checked by ``onboarding_problems``)."""
    merged = {**ONBOARDING_DEFAULTS, **onboarding}
    merged.setdefault("per_try", len(merged["items"]) // merged["max_tries"])
    return merged


def onboarding_problems(config) -> list[str]:
    """What is wrong with the onboarding's items for this task (its shape is the
    schema's): each item's context and inputs must be the task's fields, a ``label``
    item's answer a valid answer of the task, a ``judge`` item's ``target`` a valid
    answer and its answer "correct" or "incorrect"."""
    if not config.onboarding:
        return []
    problems = []
    pool, per_try, tries = (len(config.onboarding["items"]), config.onboarding["per_try"],
                            config.onboarding["max_tries"])
    if per_try < 1 or per_try * tries > pool:
        problems.append(
            f"config.onboarding.items: each of the {tries} tries (max_tries) draws {max(per_try, 1)} items "
            f"(per_try) that no earlier try of the same worker served, since the answers are shown after each "
            f"one: the pool needs at least {max(per_try, 1) * tries} items, and has {pool}. Add items, or lower "
            "per_try or max_tries.")
    for number, item in enumerate(config.onboarding["items"]):
        where = f"config.onboarding.items.{number}"

        def check(clean, *args, where=where, **kwargs):
            try:
                return clean(*args, **kwargs)
            except InvalidInput as exc:  # its paths name a context's fields "fields"; here they are "context"
                problems.extend(f"{where}.{'context' + path[6:] if path.startswith('fields') else path}: "
                                f"{' '.join(messages)}" for path, messages in exc.errors.items())
                return None

        context = None
        if config.context_fields:
            context = check(config.clean_context_fields, item.get("context", {}))
        elif item.get("context"):
            problems.append(f"{where}.context: the task has no context fields.")
        check(config.clean_inputs, item["inputs"])
        if item["kind"] == "label":
            if "target" in item:
                problems.append(f"{where}.target: only a judge item shows a target; a label item's known answer "
                                "is its answer.")
            if not isinstance(item["answer"], dict):
                problems.append(f"{where}.answer: a label item's answer is an answer of the task (an object).")
            elif context is not None or not config.context_fields:
                check(config.clean_target, item["answer"], context, field="answer", need_start=False)
        else:
            if item["answer"] not in JUDGE_ANSWERS:
                problems.append(f"{where}.answer: a judge item's answer is one of {JUDGE_ANSWERS}.")
            if "target" not in item:
                problems.append(f"{where}.target: a judge item shows the answer to judge (target).")
            elif context is not None or not config.context_fields:
                check(config.clean_target, item["target"], context, field="target", need_start=False)
    return problems
