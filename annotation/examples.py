"""Writing an example against the live model, and what its author can do with it.

The hot path of the platform is ``create_example``: one read (the open round
with its target models; the caller's session comes with the token, and with it
the context it was served last, which is the one written about), the model's
answer from the inference thread or queue, then one write transaction. Nothing
is stored unless the model answered and the round is still open when the
transaction runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from core.errors import Conflict, Forbidden, InvalidInput, Unavailable
from jobs.models import Job
from registry.endpoints import endpoint_of
from registry.models import ModelVersion
from registry.services import target_model
from tasks.models import Context, Round, Task
from tasks.roles import is_researcher
from tasks.targets import open_round_with_models

from . import onboarding, sessions
from .inference import explain_endpoint_with, explain_with, predict_with
from .models import AnnotationSession, Example, forget_examples

MAX_REASON_LENGTH = 500
MAX_DATABASE_ID = 2**63 - 1
SIGNATURE_SALT = "dynabench.example.signature"


def target_job(task: Task) -> Job | None:
    """The training or evaluation job under way for ``task`` (the oldest), if any."""
    return (Job.objects.filter(task=task, kind__in=(Job.Kind.TRAIN_MODEL, Job.Kind.EVALUATE_MODEL),
                               status__in=Job.ACTIVE).order_by("pk").first())


def waiting_for_target(task: Task) -> str:
    """Why an open round without a target cannot take examples yet, and when it will."""
    job = target_job(task)
    if job is not None:
        return (f"Its model is being prepared: {job.describe_progress()}. Writing opens once the model is "
                "trained and evaluated.")
    return ("No model is being trained for it: a researcher must train one and make it the target "
            "(the task page's \"Train the next target model\").")


def model_inputs(task: Task, context_fields: dict | None, inputs: dict) -> dict:
    """The ``ml`` input row: the config's model inputs in order, named as the task's kind
    says (QA: passage + question)."""
    config = task.parsed_config
    fields = {**(context_fields or {}), **inputs}
    return config.kind.ml_inputs({name: fields[name] for name in config.model_inputs})


# --- signatures ----------------------------------------------------------------------


def _signed_payload(example: Example) -> str:
    return json.dumps({
        "inputs": example.inputs, "target": example.target, "prediction": example.prediction,
        "models": example.model_predictions, "fooled": example.fooled,
    }, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def example_signature(example: Example, secret: str | None = None) -> str:
    """HMAC over what was written, its target, the models' answers and ``fooled``."""
    return salted_hmac(SIGNATURE_SALT, _signed_payload(example), secret=secret, algorithm="sha256").hexdigest()


def signature_ok(example: Example) -> bool:
    """Whether the stored signature matches the example's data (under the current
    SECRET_KEY or one of its fallbacks): nothing that decides a bonus or training
    data was changed after the model answered."""
    if not example.signature:
        return False
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return any(constant_time_compare(example.signature, example_signature(example, secret)) for secret in secrets)


# --- create ---------------------------------------------------------------------------


@dataclass
class Created:
    example: Example
    session: AnnotationSession
    model_names: dict[int, str]  # of the models that answered, by id


def _context_id(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_DATABASE_ID:
        raise InvalidInput.field("context", "Must be a context id (a whole number from 1).")
    return value


def _written_context(task: Task, session: AnnotationSession, context_id: int) -> Context | None:
    """The active context ``context_id`` of ``task``. Usually it is the one the session
    was served last, which a token's session brings along (no query of its own)."""
    if session.last_context_id == context_id:
        context = session.last_context
        return context if context is not None and context.task_id == task.pk and context.is_active else None
    return Context.objects.filter(pk=context_id, task=task, is_active=True).first()


def create_example(task: Task, user, *, context_id, inputs, target, session: AnnotationSession | None = None,
                   metadata: dict | None = None,
                   within_transaction: Callable[[Created], None] | None = None) -> Created:
    """Check, ask the round's target model(s), then store it all in one transaction.

    ``within_transaction(created)`` runs inside that transaction after the writes
    (an API's idempotency record goes there); if it raises, nothing is stored.
    """
    config = task.parsed_config
    onboarding.require_passed(task, user)  # whatever the example says: the worker may not write yet
    rnd, models = open_round_with_models(task)
    if rnd is None:
        raise Conflict(f"Task {task.slug} has no open round: collection is closed.")
    session = sessions.current_session(user, task, session)
    context = _written_context(task, session, _context_id(context_id))
    if context is None or context.round_id not in (None, rnd.pk):
        raise InvalidInput.field("context", f"Context {context_id} is not an active context of "
                                            f"{task.slug} round {rnd.number}.")
    inputs = config.clean_inputs(inputs)
    target = config.clean_target(target, context.fields)
    problem = sessions.mode_problem(session, "create")
    if problem:
        raise Forbidden(problem)
    capped = sessions.example_cap_problem(session)
    if capped:  # before the model is asked anything
        raise Conflict(capped)
    if not models:
        raise Unavailable(f"{rnd} has no target model yet. {waiting_for_target(task)}", retry_after=60)

    started = time.perf_counter()
    [result] = predict_with(models, [model_inputs(task, context.fields, inputs)], task=task, round_id=rnd.pk)
    latency_ms = (time.perf_counter() - started) * 1000
    members = result.pop("members", {})
    # An endpoint's answer it could not read fools the model only where the task says so.
    fooled = config.model_fooled(target, result) and (
        not result.get("unparseable") or config.endpoint_models["unparseable_is_error"])
    example = Example(
        task=task, round=rnd, context=context, annotator=user, source=Example.Source.ANNOTATION,
        inputs=inputs, target=target, prediction=result, model_predictions=members, fooled=fooled,
        latency_ms=round(latency_ms, 2), metadata=metadata or {}, session=session,
        provisional=session.provisional,
    )
    example.signature = example_signature(example)
    answered = {int(k) for k in members}
    created = Created(example, session, {m.id: m.name for m in models if m.id in answered})
    with transaction.atomic():
        # Lock the round's row and check it is still open: a round closed while the
        # model was answering gets nothing (closing takes the same lock).
        if not Round.objects.select_for_update().filter(pk=rnd.pk, status=Round.Status.OPEN).exists():
            raise Conflict(f"Round {rnd.number} closed while the model was answering; nothing was stored.")
        capped = sessions.example_cap_problem(session, lock=True)
        if capped:
            raise Conflict(capped + " Nothing was stored.")
        example.save()
        Example.model_versions.through.objects.bulk_create(
            [Example.model_versions.through(example=example, modelversion_id=model_id)
             for model_id in sorted(answered)])
        if fooled and not session.provisional:  # a provisional session's count once it is confirmed
            Context.objects.filter(pk=context.pk).update(times_fooled=F("times_fooled") + 1)
        sessions.bump(session, examples_written=1, examples_fooled=int(fooled))
        if within_transaction is not None:
            within_transaction(created)
    return created


# --- the author's actions ----------------------------------------------------------------


def _author_or_researcher(example: Example, user, action: str) -> None:
    if example.annotator_id != user.pk and not is_researcher(user, example.task):
        raise Forbidden(f"Only the example's author or the task's researchers can {action} it.")


def explain_example(example: Example, user, *, n_steps: int = 10) -> dict:
    """Word-level heat for the example's text and context, from the first model that
    answered. Cached on the example: asking twice costs one explanation."""
    _author_or_researcher(example, user, "explain")
    allowed = settings.EXPLANATION_STEPS
    if not isinstance(n_steps, int) or isinstance(n_steps, bool) or n_steps not in allowed:
        raise InvalidInput.field("n_steps", f"Must be one of {', '.join(map(str, allowed))}.")
    cached = example.metadata.get("explanation")
    if cached and cached.get("n_steps") == n_steps:
        return cached
    model_ids = sorted(int(k) for k in example.model_predictions)
    if not model_ids:
        raise Conflict("No model answered this example, so there is nothing to explain.")
    model_version = ModelVersion.objects.filter(pk=model_ids[0]).first()
    if model_version is None:
        raise Conflict(f"Model version {model_ids[0]}, which answered this example, no longer exists.")
    member = example.model_predictions[str(model_ids[0])]
    config = example.task.parsed_config
    kind = config.kind
    target = kind.explanation_target(member)
    context_fields = example.context.fields if example.context_id else None
    endpoint = endpoint_of(model_version)
    if endpoint is not None:  # a black box: leave one word out (bounded by the task config), or not available
        explanation = explain_endpoint_with(endpoint, config,
                                            model_inputs(example.task, context_fields, example.inputs),
                                            target, round_id=example.round_id, account=user.pk)
        explanation.update(n_steps=n_steps, convergence_delta=None)  # cached like a local one: no calls repeated
    else:
        explanation = explain_with(target_model(model_version),
                                   model_inputs(example.task, context_fields, example.inputs),
                                   target, n_steps, account=user.pk)
    names = {ml_name: name for name, ml_name in kind.ml_field_names().items() if ml_name != name}
    for word in explanation["words"]:  # name the fields as the task does
        word["field"] = names.get(word["field"], word["field"])
    explanation["model_version"] = model_ids[0]
    with transaction.atomic():  # merge into the stored metadata, not the copy read before the model ran
        stored = Example.objects.select_for_update().only("metadata").get(pk=example.pk)
        stored.metadata = {**stored.metadata, "explanation": explanation}
        stored.save(update_fields=["metadata"])
    return explanation


@transaction.atomic
def retract_example(example: Example, user) -> Example:
    """The author takes the example back: it leaves the queue, the stats and training data."""
    _author_or_researcher(example, user, "retract")
    example = Example.objects.select_for_update().get(pk=example.pk)
    if example.retracted:
        return example
    if example.validation_status == Example.ValidationStatus.VERIFIED:
        raise Conflict("A verified example cannot be retracted.")
    example.retracted = True
    example.save(update_fields=["retracted", "updated_at"])
    return example


def _check_reason(reason) -> str:
    if not isinstance(reason, str) or len(reason) > MAX_REASON_LENGTH or "\x00" in reason:
        raise InvalidInput.field("reason", f"Must be text of at most {MAX_REASON_LENGTH} characters.")
    return reason


@transaction.atomic
def flag_example(example: Example, user, reason: str = "") -> Example:
    """The author or a researcher flags the example for the researchers' attention.

    Other annotators flag through the validation label ``flagged`` instead, which
    counts like any other validation. The first reason given is kept: a later
    flag never overwrites it."""
    _check_reason(reason)
    if example.annotator_id != user.pk and not is_researcher(user, example.task):
        raise Forbidden("Only the example's author or the task's researchers can flag it; "
                        "as a validator, give the validation label 'flagged'.")
    example = Example.objects.select_for_update().get(pk=example.pk)
    if example.flagged:
        return example
    example.flagged = True
    example.flagged_by = user
    if not example.flag_reason:
        example.flag_reason = reason
    example.save(update_fields=["flagged", "flagged_by", "flag_reason", "updated_at"])
    return example


@transaction.atomic
def unflag_example(example: Example, user) -> Example:
    """A researcher clears the flag (the reason stays on record)."""
    if not is_researcher(user, example.task):
        raise Forbidden("Only the task's researchers can unflag an example.")
    example = Example.objects.select_for_update().get(pk=example.pk)
    if example.flagged:
        example.flagged = False
        example.metadata = {**example.metadata, "unflagged": {"by": user.pk, "at": timezone.now().isoformat()}}
        example.save(update_fields=["flagged", "metadata", "updated_at"])
    return example


@transaction.atomic
def delete_examples(examples) -> int:
    """Delete ``examples`` (a queryset) with their validations; the counters forget
    them in the same transaction. How many were deleted."""
    doomed = list(examples.select_for_update(of=("self",)).order_by("pk"))
    forget_examples(doomed)
    Example.objects.filter(pk__in=[e.pk for e in doomed]).delete()
    return len(doomed)


@transaction.atomic
def move_to_split(example: Example, split: str) -> Example:
    """A researcher moves the example to another split (train, dev, test)."""
    if split not in Example.Split.values:
        raise InvalidInput.field("split", f"Must be one of {', '.join(Example.Split.values)}.")
    example = Example.objects.select_for_update().get(pk=example.pk)
    if example.split != split:
        example.split = split
        example.save(update_fields=["split", "updated_at"])
    return example
