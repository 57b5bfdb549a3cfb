"""A task's data in every state a release must tell apart, for the release tests.

``populate(task, writers, researcher)`` gives the task: round 0 (static) with imported
seed rows; round 1, closed, with verified examples in every split (fooling and not,
one decided by a researcher, some with blind answers, one whose text is markup) and
examples that must never be released (rejected, pending, flagged, retracted,
escalated); and round 2, open, with a verified example (never released while open).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from annotation.models import Example, Validation
from registry.models import ModelVersion
from tasks import services
from tasks.config import EXTRACTIVE_QA
from tasks.models import Context, Round

MARKUP = '<script>alert("x")</script><b>bold</b> & <img src=x onerror=alert(1)>'


@dataclass
class Populated:
    task: object
    model: ModelVersion
    released: list = field(default_factory=list)  # examples a release of rounds 0 and 1 holds
    withheld: list = field(default_factory=list)  # examples of those rounds it must not hold
    open_round: list = field(default_factory=list)  # verified examples of the open round


def _target(task, context, label_index: int) -> dict:
    config = task.parsed_config
    if config.task_type == EXTRACTIVE_QA:
        passage = context.fields[config.answer_context_field]
        words = passage.split()
        text = words[label_index % len(words)]
        return {"text": text, "start": passage.index(text)}
    return {"label": config.label_names[label_index % len(config.label_names)]}


def _prediction(task, target: dict, fooled: bool, other_index: int) -> dict:
    config = task.parsed_config
    if config.task_type == EXTRACTIVE_QA:
        return {"answer": "nothing like it" if fooled else target["text"], "start": 0, "end": 1, "score": 0.5}
    if not fooled:
        return {"label": target["label"]}
    others = [name for name in config.label_names if name != target["label"]]
    return {"label": others[other_index % len(others)]}


def populate(task, writers, researcher, validators) -> Populated:
    config = task.parsed_config
    static = services.ensure_static_round(task)
    first = Round.objects.get(task=task, number=1)
    model = ModelVersion.objects.create(task=task, name=f"{task.slug}-target", artifact_path="nowhere",
                                        sha256="0" * 64)
    first.target_models.add(model)
    contexts = list(Context.objects.filter(task=task).order_by("pk")[:6])
    out = Populated(task=task, model=model)

    def inputs(text: str) -> dict:
        return {name: text for name in config.input_field_names}

    def example(rnd, i, *, split="train", status=Example.ValidationStatus.VERIFIED, fooled=True, writer=None,
                source=Example.Source.ANNOTATION, text=None, **extra):
        context = contexts[i % len(contexts)]
        target = _target(task, context, i)
        answered = source == Example.Source.ANNOTATION
        e = Example.objects.create(
            task=task, round=rnd, context=context, annotator=writer if answered else None, source=source,
            split=split, inputs=inputs(text or f"{task.slug} example {rnd.number}-{i}"), target=target,
            prediction=_prediction(task, target, fooled, i) if answered else None,
            model_predictions={str(model.pk): _prediction(task, target, fooled, i)} if answered else {},
            fooled=fooled if answered else None, validation_status=status,
            validations_correct=2 if status == Example.ValidationStatus.VERIFIED and answered else 0,
            validations_incorrect=1 if i % 3 == 0 and answered else 0, **extra)
        return e

    # Round 0: the static data, imported (no writer, no model).
    for i, split in enumerate(["train", "train", "test"]):
        out.released.append(example(static, i, split=split, source=Example.Source.SEED, fooled=None))
    # Round 1: collected, then closed.
    for i, (split, fooled) in enumerate([("train", True), ("train", False), ("train", True), ("dev", True),
                                          ("test", False), ("test", True)]):
        out.released.append(example(first, 10 + i, split=split, fooled=fooled, writer=writers[i % len(writers)]))
    markup = example(first, 20, split="train", writer=writers[0], text=MARKUP)
    out.released.append(markup)
    decided = example(first, 21, split="test", writer=writers[1])
    Validation.objects.create(example=decided, validator=researcher, label=Validation.Label.CORRECT,
                              mode=Validation.Mode.OWNER)
    out.released.append(decided)
    for n, validator in enumerate(validators):  # blind answers on a released example: one agrees, one not
        Validation.objects.create(example=out.released[3], validator=validator, label=Validation.Label.CORRECT,
                                  blind_answer={"label": "x"}, blind_agrees=n == 0)
    out.withheld += [
        example(first, 30, status=Example.ValidationStatus.REJECTED, writer=writers[0]),
        example(first, 31, status=Example.ValidationStatus.PENDING, writer=writers[1]),
        example(first, 32, status=Example.ValidationStatus.ESCALATED, writer=writers[0]),
        example(first, 33, writer=writers[0], flagged=True, flag_reason="offensive"),
        example(first, 34, writer=writers[1], retracted=True),
    ]
    services.close_round(first)
    second = Round.objects.create(task=task, number=2, status=Round.Status.OPEN)
    second.target_models.add(model)
    out.open_round.append(example(second, 40, writer=writers[0]))
    return out


def body(response) -> bytes:
    """A download's bytes, streamed or not."""
    return b"".join(response.streaming_content) if response.streaming else response.content
