"""The annotation loop: contexts, examples, predictions, validations, statistics.

Errors are DRF exceptions with field-level messages (400 bad input, 403 not
yours, 404 unknown, 409 conflict, 503 no model answer), so the API and the
pages report the same thing. Every write is one transaction; counters move
with F() updates under row locks, never read-modify-write in Python.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import time
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Q
from rest_framework import exceptions

from dynabench import rawrows
from leaderboard.models import ModelVersion
from tasks.config import EXTRACTIVE_QA
from tasks.models import Context, Round, Task
from tasks.roles import is_researcher

from .inference import (
    InferenceUnavailable,
    explain_with,
    open_round_from_rows,
    open_round_models_statement,
    predict_with,
    target_model,
)
from .models import AnnotationSession, Example, Validation

MAX_REASON_LENGTH = 500


class Conflict(exceptions.APIException):
    status_code = 409
    default_detail = "The request conflicts with the current state."
    default_code = "conflict"


class ServiceUnavailable(exceptions.APIException):
    status_code = 503
    default_detail = "The model is not available right now; try again shortly."
    default_code = "model_unavailable"


def bad(field: str, message: str):
    return exceptions.ValidationError({field: [message]})


# --- sessions -------------------------------------------------------------------


def get_session(user, task: Task, session: AnnotationSession | None = None) -> AnnotationSession:
    """The caller's session on ``task``: the token's one, else their latest, else a new one."""
    if session is not None and session.task_id == task.pk and session.user_id == user.pk:
        return session
    latest = AnnotationSession.objects.filter(user=user, task=task).order_by("-created_at").first()
    return latest or AnnotationSession.objects.create(user=user, task=task)


SESSION_COUNTERS = ("examples_written", "examples_fooled", "validations_done")


def bump_session(session: AnnotationSession, **deltas: int) -> None:
    """Add ``deltas`` to the session's counters in the database and load all three
    counters' new values onto ``session``: one ``UPDATE ... RETURNING`` statement
    (SQLite 3.35+ and PostgreSQL), so the response shows exact numbers even when the
    same session writes from two tabs at once, without a second query."""
    sql, params = _bump_session_statement(session, **deltas)
    _apply_session_counters(session, rawrows.fetch(sql, params))


def _bump_session_statement(session: AnnotationSession, **deltas: int) -> tuple[str, list]:
    unknown = set(deltas) - set(SESSION_COUNTERS)
    if unknown:
        raise ValueError(f"not session counters: {sorted(unknown)}")
    quote = connection.ops.quote_name
    table = quote(AnnotationSession._meta.db_table)
    sets = ", ".join(f"{quote(name)} = {quote(name)} + %s" for name in deltas)
    returning = ", ".join(quote(name) for name in SESSION_COUNTERS)
    return (f"UPDATE {table} SET {sets} WHERE {quote(AnnotationSession._meta.pk.column)} = %s RETURNING {returning}",  # noqa: S608
            [*deltas.values(), session.pk])


def _apply_session_counters(session: AnnotationSession, rows) -> None:
    if not rows:
        raise AnnotationSession.DoesNotExist(f"annotation session {session.pk} is gone")
    for name, value in zip(SESSION_COUNTERS, rows[0], strict=True):
        setattr(session, name, value)


def start_session(user, task: Task, *, mturk_assignment_id: str = "") -> AnnotationSession:
    return AnnotationSession.objects.create(user=user, task=task, mturk_assignment_id=mturk_assignment_id)


# --- contexts -------------------------------------------------------------------


def open_round_or_error(task: Task) -> Round:
    rnd = task.open_round()
    if rnd is None:
        raise Conflict(f"Task {task.slug} has no open round: collection is closed.")
    return rnd


def usable_contexts(task: Task, rnd: Round):
    return Context.objects.filter(task=task, is_active=True).filter(Q(round__isnull=True) | Q(round=rnd))


def next_context(task: Task, session: AnnotationSession) -> Context:
    """A context by the task's sampling strategy, never the one served last."""
    rnd = open_round_or_error(task)
    candidates = usable_contexts(task, rnd)
    strategy = task.parsed_config.context_sampling
    if strategy == "uniform":
        if session.last_context_id:
            others = candidates.exclude(pk=session.last_context_id)
            if others.exists():
                candidates = others
        count = candidates.count()
        context = candidates.order_by("pk")[random.randrange(count)] if count else None
    else:
        order = ["times_fooled", "times_used"] if strategy == "least_fooled" else ["times_used"]
        # One query: the 21 least used hold the 20 least used other than the last served
        # one; that one stays only when it is the only context there is.
        ranked = list(candidates.order_by(*order, "pk")[:21])
        pool = [c for c in ranked if c.pk != session.last_context_id] or ranked
        pool = pool[:20]
        if pool:  # among the ties for the least, pick at random so annotators spread out
            key = [getattr(pool[0], f) for f in order]
            ties = [c for c in pool if [getattr(c, f) for f in order] == key]
            context = random.choice(ties)
        else:
            context = None
    if context is None:
        raise exceptions.NotFound(f"Task {task.slug} has no contexts for round {rnd.number}.")
    with transaction.atomic():
        Context.objects.filter(pk=context.pk).update(times_used=F("times_used") + 1)
        AnnotationSession.objects.filter(pk=session.pk).update(last_context=context)
    session.last_context = context
    context.times_used += 1
    context.round_number = rnd.number  # the round it was served for
    return context


# --- input checks ---------------------------------------------------------------


def clean_text(field: str, value, max_length: int) -> str:
    if value is None:
        raise bad(field, "This field is required.")
    if not isinstance(value, str):
        raise bad(field, "Must be text.")
    if not value.strip():
        raise bad(field, "Must not be empty.")
    if len(value) > max_length:
        raise bad(field, f"Must be at most {max_length} characters (got {len(value)}).")
    if "\x00" in value:
        raise bad(field, "Must not contain NUL characters.")
    return value


def clean_inputs(task: Task, inputs) -> dict:
    config = task.parsed_config
    if not isinstance(inputs, dict):
        raise bad("inputs", f"Must be an object with the fields {config.input_field_names}.")
    unknown = sorted(set(inputs) - set(config.input_field_names))
    if unknown:
        raise bad("inputs", f"Unknown fields {unknown}; expected {config.input_field_names}.")
    errors = {}
    cleaned = {}
    for name in config.input_field_names:
        try:
            cleaned[name] = clean_text(name, inputs.get(name), config.max_input_length)
        except exceptions.ValidationError as exc:
            errors[f"inputs.{name}"] = exc.detail[name]
    if errors:
        raise exceptions.ValidationError(errors)
    return cleaned


def clean_target(task: Task, context: Context, target) -> dict:
    config = task.parsed_config
    if not isinstance(target, dict):
        raise bad("target", "Must be an object.")
    if config.task_type != EXTRACTIVE_QA:
        label = target.get("label")
        if label not in config.label_names:
            raise bad("target.label", f"{label!r} is not one of {config.label_names}.")
        return {"label": label}
    passage = context.fields[config.answer_context_field]
    start, text = target.get("start"), target.get("text")
    if not isinstance(start, int) or isinstance(start, bool) or not isinstance(text, str) or not text.strip():
        raise bad("target", "The answer needs 'start' (a character offset) and 'text' (the span).")
    end = start + len(text)
    if start < 0 or end > len(passage):
        raise bad("target.start", f"The span {start}-{end} is outside the passage (0-{len(passage)}).")
    if passage[start:end] != text:
        raise bad("target.text", "The answer must be the passage's text at the given offsets.")
    return {"text": text, "start": start}


def model_inputs(task: Task, context: Context | None, inputs: dict) -> dict:
    """The ``ml`` input row: model_inputs in order; QA as passage + question."""
    config = task.parsed_config
    fields = {**(context.fields if context else {}), **inputs}
    if config.task_type == EXTRACTIVE_QA:
        passage_field, question_field = config.model_inputs
        return {"passage": fields[passage_field], "question": fields[question_field]}
    return {name: fields[name] for name in config.model_inputs}


def is_fooled(task: Task, target: dict, prediction: dict) -> bool:
    from ml.metrics import model_fooled

    config = task.parsed_config
    if config.task_type == EXTRACTIVE_QA:
        return model_fooled("string_f1", prediction["answer"], target["text"], threshold=config.metric_threshold)
    return prediction["label"] != target["label"]


def sign(inputs: dict, prediction: dict, model_ids: list[int]) -> str:
    payload = json.dumps({"inputs": inputs, "prediction": prediction, "models": model_ids},
                         sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hmac.new(settings.SECRET_KEY.encode(), payload.encode(), hashlib.sha256).hexdigest()


def verify_signature(example: Example) -> bool:
    model_ids = sorted(int(k) for k in example.model_predictions)
    expected = sign(example.inputs, example.prediction, model_ids)
    return hmac.compare_digest(expected, example.signature)


# --- create flow -----------------------------------------------------------------


@lru_cache(maxsize=4)
def _hot_sql(vendor: str) -> dict[str, str]:
    """The create-example statements, built once from the models' ``_meta`` (the ORM
    compiles every statement anew, 0.3-0.6 ms each here: see dynabench.rawrows)."""
    q = connection.ops.quote_name
    col = lambda model, name: q(model._meta.get_field(name).column)  # noqa: E731
    through = Example.model_versions.through
    return {
        "context": (
            f"SELECT {rawrows.columns(Context, 'c')} FROM {q(Context._meta.db_table)} c "
            f"WHERE c.{col(Context, 'id')} = %s AND c.{col(Context, 'task')} = %s AND c.{col(Context, 'is_active')}"
        ),
        "count_example": (
            f"UPDATE {q(Round._meta.db_table)} SET "
            f"{col(Round, 'examples_collected')} = {col(Round, 'examples_collected')} + 1, "
            f"{col(Round, 'examples_fooled')} = {col(Round, 'examples_fooled')} + %s "
            f"WHERE {col(Round, 'id')} = %s AND {col(Round, 'status')} = %s"
        ),
        "add_model": (  # by the example's uid: sent in the same batch as its INSERT
            f"INSERT INTO {q(through._meta.db_table)} ({col(through, 'example')}, {col(through, 'modelversion')}) "
            f"SELECT {col(Example, 'id')}, %s FROM {q(Example._meta.db_table)} WHERE {col(Example, 'uid')} = %s"
        ),
        "context_fooled": (
            f"UPDATE {q(Context._meta.db_table)} SET {col(Context, 'times_fooled')} = {col(Context, 'times_fooled')} + 1 "
            f"WHERE {col(Context, 'id')} = %s"
        ),
    }


def _active_context_statement(task: Task, context_id: int) -> tuple[str, list]:
    """``(sql, params)`` reading the task's active context ``context_id`` (any round)."""
    return _hot_sql(connection.vendor)["context"], [context_id, task.pk]


def _context_from_rows(rows) -> Context | None:
    return rawrows.build(Context, rows[0]) if rows else None


@dataclass
class Created:
    example: Example
    session: AnnotationSession
    model_names: dict[int, str] | None = None  # of the models that answered, by id


def create_example(task: Task, user, *, context_id, inputs, target, session: AnnotationSession | None = None,
                   metadata: dict | None = None) -> Created:
    """Check, predict (inference queue), then store everything in one transaction.

    The hot path of the platform: three reads (open round with its models, context;
    the caller's session comes with the token) and one write transaction.
    """
    context_ok = isinstance(context_id, int) and not isinstance(context_id, bool) and 0 < context_id < 2**63
    # Both reads in one batch (one round trip on PostgreSQL).
    (_, round_rows), (_, context_rows) = rawrows.run_many([
        open_round_models_statement(task),
        _active_context_statement(task, context_id if context_ok else -1),
    ])
    rnd, models = open_round_from_rows(task, round_rows)
    if rnd is None:
        raise Conflict(f"Task {task.slug} has no open round: collection is closed.")
    if not context_ok:
        raise bad("context", "Must be a context id.")
    context = _context_from_rows(context_rows)
    if context is None or context.round_id not in (None, rnd.pk):
        raise bad("context", f"Context {context_id} is not an active context of {task.slug} round {rnd.number}.")
    inputs = clean_inputs(task, inputs)
    target = clean_target(task, context, target)
    session = get_session(user, task, session)
    if not models:
        raise ServiceUnavailable(f"{rnd} has no target model yet.")

    row = model_inputs(task, context, inputs)
    started = time.perf_counter()
    try:
        [result] = predict_with(models, [row])
    except InferenceUnavailable as exc:
        raise ServiceUnavailable(str(exc)) from exc
    latency_ms = (time.perf_counter() - started) * 1000
    members = result.pop("members", {})
    model_ids = sorted(int(k) for k in members)
    fooled = is_fooled(task, target, result)

    sql = _hot_sql(connection.vendor)
    example = Example(
        task=task, round=rnd, context=context, annotator=user, source=Example.Source.ANNOTATION,
        inputs=inputs, target=target, prediction=result, model_predictions=members, fooled=fooled,
        latency_ms=round(latency_ms, 2), signature=sign(inputs, result, model_ids),
        metadata=metadata or {},
    )
    uid = Example._meta.get_field("uid").get_db_prep_value(example.uid, connection)
    bump_sql, bump_params = _bump_session_statement(session, examples_written=1, examples_fooled=int(fooled))
    with transaction.atomic():
        # One batch (one round trip on PostgreSQL: rawrows.run_many). Counting the
        # example first locks the round's row, as SELECT ... FOR UPDATE would, and
        # checks in the same statement that the round is still open; if it was not,
        # the exception below rolls the whole batch back.
        statements = [
            (sql["count_example"], [int(fooled), rnd.pk, Round.Status.OPEN.value]),
            rawrows.insert_statement(example),
            *[(sql["add_model"], [model_id, uid]) for model_id in model_ids],
            *([(sql["context_fooled"], [context.pk])] if fooled else []),  # adding 0 would change nothing
            (bump_sql, bump_params),
        ]
        results = rawrows.run_many(statements)
        if not results[0][0]:
            raise Conflict(f"Round {rnd.number} closed while the model was answering; nothing was stored.")
        example.pk = results[1][1][0][0]
        example._state.adding, example._state.db = False, "default"
        _apply_session_counters(session, results[-1][1])
    return Created(example, session, {m.id: m.name for m in models if m.id in model_ids})


def own_example(example: Example, user, action: str) -> None:
    if example.annotator_id != user.pk and not is_researcher(user, example.task):
        raise exceptions.PermissionDenied(f"Only the example's author can {action} it.")


def explain_example(example: Example, user, *, n_steps: int = 10) -> dict:
    """Word-level heat for the example's text and context, from the first target model.

    Cached on the example: asking twice costs one explanation.
    """
    own_example(example, user, "explain")
    if not 1 <= n_steps <= 200:
        raise bad("n_steps", "Must be between 1 and 200.")
    cached = example.metadata.get("explanation")
    if cached and cached.get("n_steps") == n_steps:
        return cached
    model_ids = sorted(int(k) for k in example.model_predictions)
    if not model_ids:
        raise Conflict("No model answered this example, so there is nothing to explain.")
    model_id = model_ids[0]
    model_version = ModelVersion.objects.filter(pk=model_id).first()
    if model_version is None:
        raise Conflict(f"Model version {model_id}, which answered this example, no longer exists.")
    member = example.model_predictions[str(model_id)]
    config = example.task.parsed_config
    target = None if config.task_type == EXTRACTIVE_QA else member["label"]
    try:
        explanation = explain_with(target_model(model_version), model_inputs(example.task, example.context, example.inputs),
                                   target, n_steps)
    except InferenceUnavailable as exc:
        raise ServiceUnavailable(str(exc)) from exc
    if config.task_type == EXTRACTIVE_QA:  # name the fields as the task does
        names = dict(zip(["passage", "question"], config.model_inputs, strict=True))
        for word in explanation["words"]:
            word["field"] = names.get(word["field"], word["field"])
    explanation["model_version"] = model_id
    Example.objects.filter(pk=example.pk).update(metadata={**example.metadata, "explanation": explanation})
    return explanation


@transaction.atomic
def retract_example(example: Example, user) -> Example:
    own_example(example, user, "retract")
    example = Example.objects.select_for_update().get(pk=example.pk)
    if example.retracted:
        return example
    if example.validation_status == Example.ValidationStatus.VERIFIED:
        raise Conflict("A verified example cannot be retracted.")
    example.retracted = True
    example.save(update_fields=["retracted", "updated_at"])
    if example.source == Example.Source.ANNOTATION:
        Round.objects.filter(pk=example.round_id).update(
            examples_collected=F("examples_collected") - 1,
            examples_fooled=F("examples_fooled") - int(bool(example.fooled)),
        )
    return example


@transaction.atomic
def flag_example(example: Example, user, reason: str = "") -> Example:
    if not isinstance(reason, str) or len(reason) > MAX_REASON_LENGTH:
        raise bad("reason", f"Must be text of at most {MAX_REASON_LENGTH} characters.")
    example = Example.objects.select_for_update().get(pk=example.pk)
    example.flagged = True
    example.flag_reason = reason
    example.save(update_fields=["flagged", "flag_reason", "updated_at"])
    return example


# --- validation flow ---------------------------------------------------------------


def validation_queue(task: Task, user):
    """Examples the user may validate: fooling first, then the fewest validations."""
    return (
        Example.objects.filter(task=task, retracted=False, flagged=False,
                               validation_status=Example.ValidationStatus.PENDING,
                               source=Example.Source.ANNOTATION)
        .exclude(annotator=user)
        .exclude(validations__validator=user)
        .annotate(n_validations=F("validations_correct") + F("validations_incorrect") + F("validations_flagged"))
        .order_by(F("fooled").desc(nulls_last=True), "n_validations", "created_at", "pk")
        .select_related("context", "round", "task")
    )


def next_for_validation(task: Task, user) -> Example:
    example = validation_queue(task, user).first()
    if example is None:
        raise exceptions.NotFound("Nothing to validate in this task right now. Thank you!")
    return example


def _decide(example: Example, needed: int) -> str:
    """The validation status after a user validation changed the counters."""
    if example.validations_flagged >= needed:
        return Example.ValidationStatus.FLAGGED
    if example.validations_correct >= needed:
        return Example.ValidationStatus.VERIFIED
    if example.validations_incorrect >= needed:
        return Example.ValidationStatus.REJECTED
    return example.validation_status


OWNER_OUTCOME = {
    Validation.Label.CORRECT: Example.ValidationStatus.VERIFIED,
    Validation.Label.INCORRECT: Example.ValidationStatus.REJECTED,
    Validation.Label.FLAGGED: Example.ValidationStatus.FLAGGED,
}
COUNTER = {
    Validation.Label.CORRECT: "validations_correct",
    Validation.Label.INCORRECT: "validations_incorrect",
    Validation.Label.FLAGGED: "validations_flagged",
}


def validate_example(example_id: int, user, *, label: str, reason: str = "",
                     session: AnnotationSession | None = None) -> tuple[Example, Validation]:
    if label not in COUNTER:
        raise bad("label", f"{label!r} is not one of {sorted(COUNTER)}.")
    if not isinstance(reason, str) or len(reason) > MAX_REASON_LENGTH:
        raise bad("reason", f"Must be text of at most {MAX_REASON_LENGTH} characters.")
    with transaction.atomic():
        example = Example.objects.select_for_update().select_related("task").filter(pk=example_id).first()
        if example is None:
            raise exceptions.NotFound("No such example.")
        if example.annotator_id == user.pk:
            raise exceptions.PermissionDenied("You cannot validate your own example.")
        if example.retracted:
            raise Conflict("The example was retracted by its author.")
        if Validation.objects.filter(example=example, validator=user).exists():
            raise Conflict("You have already validated this example.")
        owner = is_researcher(user, example.task)
        mode = Validation.Mode.OWNER if owner else Validation.Mode.USER
        if not owner and example.validation_status != Example.ValidationStatus.PENDING:
            raise Conflict("This example has been decided already.")
        try:
            with transaction.atomic():
                validation = Validation.objects.create(example=example, validator=user, label=label,
                                                       mode=mode, reason=reason)
        except IntegrityError as exc:  # a concurrent duplicate from the same user
            raise Conflict("You have already validated this example.") from exc

        was_verified_fooled = example.validation_status == Example.ValidationStatus.VERIFIED and example.fooled
        field = COUNTER[label]
        setattr(example, field, getattr(example, field) + 1)
        if mode == Validation.Mode.OWNER:
            example.validation_status = OWNER_OUTCOME[label]
        else:
            example.validation_status = _decide(example, example.task.parsed_config.num_matching_validations)
        example.save(update_fields=[field, "validation_status", "updated_at"])
        is_verified_fooled = example.validation_status == Example.ValidationStatus.VERIFIED and example.fooled
        delta = int(is_verified_fooled) - int(was_verified_fooled)
        Round.objects.filter(pk=example.round_id).update(
            validations_count=F("validations_count") + 1,
            examples_verified_fooled=F("examples_verified_fooled") + delta,
        )
        if session is None or session.task_id != example.task_id:
            session = get_session(user, example.task)
        bump_session(session, validations_done=1)
    return example, validation


# --- statistics -------------------------------------------------------------------


def round_stats(rnd: Round) -> dict:
    """Counts and rates for a round, computed from the examples themselves."""
    from .exporting import anonymise

    base = Example.objects.filter(round=rnd, retracted=False, source=Example.Source.ANNOTATION)
    verified_fooled = Q(fooled=True, validation_status=Example.ValidationStatus.VERIFIED)
    counts = {"n_collected": Count("pk"), "n_fooled": Count("pk", filter=Q(fooled=True)),
              "n_verified_fooled": Count("pk", filter=verified_fooled)}
    totals = base.aggregate(**counts, n_verified=Count(
        "pk", filter=Q(validation_status=Example.ValidationStatus.VERIFIED)))
    per_annotator = (
        base.values("annotator_id").annotate(**counts)
        .order_by("-n_verified_fooled", "-n_fooled", "annotator_id")
    )

    def rate(num, den):
        return num / den if den else None

    return {
        "task": rnd.task.slug,
        "round": rnd.number,
        "status": rnd.status,
        "collected": totals["n_collected"],
        "fooled": totals["n_fooled"],
        "verified": totals["n_verified"],
        "verified_fooled": totals["n_verified_fooled"],
        "model_error_rate": rate(totals["n_fooled"], totals["n_collected"]),
        "verified_model_error_rate": rate(totals["n_verified_fooled"], totals["n_collected"]),
        "target_models": list(rnd.target_models.values_list("name", flat=True)),
        "annotators": [
            {"annotator": anonymise(row["annotator_id"]), "collected": row["n_collected"],
             "fooled": row["n_fooled"], "verified_fooled": row["n_verified_fooled"],
             "model_error_rate": rate(row["n_fooled"], row["n_collected"]),
             "verified_model_error_rate": rate(row["n_verified_fooled"], row["n_collected"])}
            for row in per_annotator
        ],
    }


def model_version_names(ids) -> dict[int, str]:
    return dict(ModelVersion.objects.filter(pk__in=ids).values_list("pk", "name"))
