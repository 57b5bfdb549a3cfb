"""Business logic for tasks, rounds and contexts."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import Conflict, InvalidInput, NotFound
from registry.models import ModelVersion

from .config import validate_task_config
from .models import STATIC_ROUND, Context, Round, Task

log = logging.getLogger(__name__)

DEFINITIONS_DIR = Path(__file__).resolve().parent / "definitions"
SEED_DIR = Path(__file__).resolve().parent / "seed"
DEFAULT_TASK_SLUGS = ["nli", "qa", "sentiment", "hate"]
TASK_FIELDS = ["name", "task_type", "config", "goal", "instructions", "content_warning"]


def load_definition(slug: str) -> dict:
    path = DEFINITIONS_DIR / f"{slug}.json"
    if not path.exists():
        raise NotFound(f"No task definition named {slug!r} in {DEFINITIONS_DIR}.")
    return json.loads(path.read_text(encoding="utf-8"))


def data_shape(task_type: str, config: dict) -> tuple:
    """What a task's stored data depends on: its type, field names, labels and model inputs."""
    parsed = validate_task_config(task_type, config)
    return (task_type, parsed.context_field_names, parsed.input_field_names, parsed.label_names,
            parsed.model_inputs, parsed.answer_context_field)


def check_config_change(task: Task, task_type: str, config: dict) -> None:
    """Refuse a change of type or config that would no longer fit the task's data: once it
    has contexts, examples or models, its field names, labels and model inputs stay.
    Descriptions, validation, sampling and length settings may change at any time."""
    if data_shape(task_type, config) == data_shape(task.task_type, task.config):
        return
    has_data = (task.contexts.exists() or task.model_versions.exists()
                # ``examples``: the reverse relation of annotation's Example (no import of that app)
                or task.examples.exists())
    if has_data:
        raise Conflict(f"Task {task.slug} already has data: its type, field names, labels and model inputs "
                       "cannot change. Create a new task for a new shape of data.")


def create_task(definition: dict, *, owners: Iterable = ()) -> tuple[Task, bool]:
    """Create the task a definition describes, unless its slug exists already.

    An existing task is left as it is (a researcher may have edited it).
    """
    validate_task_config(definition["task_type"], definition["config"])
    existing = Task.objects.filter(slug=definition["slug"]).first()
    if existing:
        return existing, False
    task = Task(slug=definition["slug"], **{k: definition[k] for k in TASK_FIELDS if k in definition})
    task.full_clean()
    task.save()
    task.owners.add(*owners)
    return task, True


def create_task_by(user, fields: dict) -> Task:
    """A new task made by ``user`` through the API from checked ``fields`` (the
    serializer's): its config is checked again here, the creator owns it (a superuser
    sees every task anyway), and a taken slug is a Conflict, also when two requests
    race for it."""
    validate_task_config(fields.get("task_type"), fields.get("config"))
    try:
        with transaction.atomic():
            task = Task.objects.create(**fields)
            if not user.is_superuser:
                task.owners.add(user)
    except IntegrityError:
        if Task.objects.filter(slug=fields.get("slug")).exists():
            raise Conflict(f"A task with the slug {fields.get('slug')!r} exists already.") from None
        raise
    return task


@transaction.atomic
def ensure_first_round(task: Task) -> tuple[Round, bool]:
    """Round 1, open, if the task has no rounds yet."""
    first = task.rounds.order_by("number").first()
    if first:
        return first, False
    rnd = Round.objects.create(task=task, number=1, status=Round.Status.OPEN, opened_at=timezone.now())
    return rnd, True


@transaction.atomic
def ensure_static_round(task: Task) -> Round:
    """Round 0, the home of the task's static data (MNLI, SST-2, Davidson...): closed
    from the start, never open for collection, evaluated like every round."""
    rnd, _ = Round.objects.get_or_create(
        task=task, number=STATIC_ROUND,
        defaults={"status": Round.Status.CLOSED, "description": "Static data (round 0): never open for collection."},
    )
    return rnd


def _ready_models_of(task: Task, models: Iterable[ModelVersion]) -> list[ModelVersion]:
    models = list(models)
    foreign = sorted(m.name for m in models if m.task_id != task.pk)
    if foreign:
        raise InvalidInput.field("target_models", f"Models {foreign} belong to other tasks.")
    retired = sorted(m.name for m in models if m.status != ModelVersion.Status.READY)
    if retired:
        raise InvalidInput.field("target_models", f"Models {retired} are not ready.")
    return models


@transaction.atomic
def create_round(task: Task, *, number: int | None = None, target_models: Iterable[ModelVersion] = (),
                 ensemble_mode: str = Round.EnsembleMode.SINGLE, description: str = "") -> Round:
    """A draft round: the next number unless given. Round 0 is made by ``ensure_static_round``."""
    models = _ready_models_of(task, target_models)
    if ensemble_mode not in Round.EnsembleMode.values:
        raise InvalidInput.field("ensemble_mode", f"Must be one of {Round.EnsembleMode.values}.")
    Task.objects.select_for_update().filter(pk=task.pk).exists()  # one new round number at a time
    last = task.rounds.order_by("-number").values_list("number", flat=True).first()
    if number is None:
        number = (last or 0) + 1
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise InvalidInput.field("number", "Must be a whole number from 1 (round 0 holds the static data).")
    if task.rounds.filter(number=number).exists():
        raise Conflict(f"Task {task.slug} has a round {number} already.")
    rnd = Round.objects.create(task=task, number=number, ensemble_mode=ensemble_mode, description=description)
    rnd.target_models.set(models)
    return rnd


@transaction.atomic
def set_round_targets(rnd: Round, target_models: Iterable[ModelVersion], *, ensemble_mode: str | None = None) -> Round:
    """Choose a draft round's target model(s). An open round's target changes only by
    promoting a model (a new round), so that each round has one target for its data."""
    rnd = Round.objects.select_for_update().select_related("task").get(pk=rnd.pk)
    if rnd.status != Round.Status.DRAFT:
        raise Conflict(f"{rnd} is {rnd.status}: only a draft round's target models can change. "
                       "Promote a model to start a new round with it.")
    models = _ready_models_of(rnd.task, target_models)
    if ensemble_mode is not None:
        if ensemble_mode not in Round.EnsembleMode.values:
            raise InvalidInput.field("ensemble_mode", f"Must be one of {Round.EnsembleMode.values}.")
        rnd.ensemble_mode = ensemble_mode
        rnd.save(update_fields=["ensemble_mode"])
    rnd.target_models.set(models)
    return rnd


@transaction.atomic
def open_round(rnd: Round) -> Round:
    """Open a draft round, closing the task's currently open one. The round must
    have a ready target model: annotators would otherwise get a 503 on every example."""
    rnd = Round.objects.select_for_update().select_related("task").get(pk=rnd.pk)
    if rnd.status == Round.Status.OPEN:
        return rnd
    if rnd.number == STATIC_ROUND:
        raise Conflict(f"{rnd} holds the static data; it is never open for collection.")
    if rnd.status == Round.Status.CLOSED:
        raise Conflict(f"{rnd} is closed; a closed round is not opened again.")
    foreign = sorted(rnd.target_models.exclude(task_id=rnd.task_id).values_list("name", flat=True))
    if foreign:
        raise Conflict(f"{rnd}'s target models {foreign} belong to other tasks.")
    if not rnd.target_models.filter(status=ModelVersion.Status.READY).exists():
        raise Conflict(f"{rnd} has no ready target model; choose one before opening it.")
    now = timezone.now()
    Round.objects.select_for_update().filter(task=rnd.task, status=Round.Status.OPEN).update(
        status=Round.Status.CLOSED, closed_at=now
    )
    rnd.status, rnd.opened_at = Round.Status.OPEN, now
    rnd.save(update_fields=["status", "opened_at"])
    return rnd


@transaction.atomic
def close_round(rnd: Round) -> Round:
    """Close an open round (collection stops); closing a closed round changes nothing."""
    rnd = Round.objects.select_for_update().select_related("task").get(pk=rnd.pk)
    if rnd.status == Round.Status.DRAFT:
        raise Conflict(f"{rnd} was never opened; there is nothing to close.")
    if rnd.status != Round.Status.CLOSED:
        rnd.status, rnd.closed_at = Round.Status.CLOSED, timezone.now()
        rnd.save(update_fields=["status", "closed_at"])
    return rnd


CONTEXT_BATCH_SIZE = 500


def add_contexts(task: Task, rows: Iterable[dict], *, round: Round | None = None) -> tuple[int, int]:
    """Add contexts ``{"external_id"?, "fields", "tag"?, "metadata"?}``.

    Rows whose external id the task already has (or an earlier row had) are
    skipped, so adding the same file twice creates nothing twice. The others are
    checked (``Context.full_clean``: the task config's rules; a bad row raises
    ``ValidationError``) and written in batches of ``CONTEXT_BATCH_SIZE``, a few
    queries each; wrap the call in a transaction to write all or nothing.
    Returns (created, skipped).
    """
    created = skipped = 0
    seen: set[str] = set()
    batch: list[dict] = []

    def flush() -> None:
        nonlocal created, skipped
        ids = [row["external_id"] for row in batch if row["external_id"]]
        existing = set(Context.objects.filter(task=task, external_id__in=ids).values_list("external_id", flat=True))
        new = []
        for row in batch:
            if row["external_id"] in existing:
                skipped += 1
                continue
            context = Context(task=task, round=round, **row)
            # The task and round are rows already; the external id was checked above.
            context.full_clean(exclude=["task", "round"], validate_constraints=False)
            new.append(context)
        batch.clear()
        try:
            with transaction.atomic():
                Context.objects.bulk_create(new)
            created += len(new)
        except IntegrityError:  # a concurrent import added some first: one at a time
            for context in new:
                try:
                    with transaction.atomic():
                        context.pk = None
                        context.save(force_insert=True)
                except IntegrityError:
                    skipped += 1
                else:
                    created += 1

    for row in rows:
        external_id = str(row.get("external_id", "") or "")
        if external_id and external_id in seen:
            skipped += 1
            continue
        seen.add(external_id)
        batch.append({"external_id": external_id, "fields": row["fields"], "tag": row.get("tag", ""),
                      "metadata": row.get("metadata", {})})
        if len(batch) >= CONTEXT_BATCH_SIZE:
            flush()
    if batch:
        flush()
    return created, skipped


def read_seed_contexts(slug: str) -> list[dict]:
    path = SEED_DIR / "contexts" / f"{slug}.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            rows.append({"external_id": item["passage_id"], "fields": item["fields"], "tag": item.get("tag", "")})
    return rows
