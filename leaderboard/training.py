"""Training a model: the rows a training job learns from, training and registering
the model, the options a job takes, and queueing training jobs."""

from __future__ import annotations

import hashlib
import logging
import shutil
from collections.abc import Callable, Iterable

from django.conf import settings
from django.db import transaction

import ml
from annotation import counters
from core import celery_names
from core.errors import Conflict, DomainError, InvalidInput
from jobs.engine import JobReporter, create_job, enqueue_by_name
from jobs.models import Job
from registry.models import ModelVersion
from registry.services import artifact_dir_for, check_new_model_name, register_model
from tasks.models import STATIC_ROUND, Round, Task

from .evaluation import score_rows
from .rows import data_summary, example_rows, ml_spec, untampered, usable_examples

log = logging.getLogger(__name__)


DEMO_MODEL_NAME = "round0-seed"


# For the small shipped seed sets (84-140 training rows) a higher learning rate
# and small batches learn more in the same time than the library defaults (on the
# seed dev splits, for NLI accuracy and QA F1 alike).
DEMO_TRAINING = {"epochs": 6, "batch_size": 8, "lr": 1e-4, "seed": 0}


DEMO_TRAINING_BY_TASK = {"qa": {"lr": 2e-4}}


SELECTIONS = {"verified": "every verified example", "fooling": "verified examples that fooled the model"}


MODES = {"full": "full fine-tuning", "head": "head only (frozen encoder)"}


def training_examples(task: Task, *, rounds: Iterable[int] | None = None, split: str = "train"):
    """Every usable example of ``split`` in ``rounds`` (all rounds by default)."""
    return usable_examples(task, split=split, rounds=rounds)


def stable_id(example) -> str:
    """The id a partition hashes: the data set's own id where the example has one (its
    ``external_uid``, or the ``replay_uid`` the replay writes in its metadata), else the
    example's uid. The data set's id is the same in every run, so a replay's split and
    samples depend on its seed alone, not on the random uid each run's examples get."""
    metadata = example.metadata if isinstance(example.metadata, dict) else {}
    return str(example.external_uid or metadata.get("replay_uid") or example.uid)


def partition_key(example) -> str:
    """What a dev hold-out hashes: the example's pair group where the source has one
    (``replay_group``: a contrastive pair's two sides share it, so they stay on one side),
    else its ``stable_id``."""
    metadata = example.metadata if isinstance(example.metadata, dict) else {}
    return str(metadata.get("replay_group") or stable_id(example))


def held_out(key, dev_fraction: float, seed: int) -> bool:
    """A fixed share of collected examples goes to dev, by a hash of their key
    (``partition_key``): the same example lands on the same side in every run with
    the same seed, whatever else was collected."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < dev_fraction


def collection_rounds(task: Task, rounds: Iterable[int] | None) -> list[int]:
    numbers = list(task.rounds.exclude(number=STATIC_ROUND).order_by("number").values_list("number", flat=True))
    if rounds is None:
        return numbers
    wanted = sorted(set(rounds) - {STATIC_ROUND})
    unknown = sorted(set(wanted) - set(numbers))
    if unknown:
        raise InvalidInput.field("rounds", f"Task {task.slug} has no round(s) {unknown}.")
    return wanted


def rehearsal_sample(groups: list[list], size: int, key: Callable) -> list[list]:
    """A fixed sample of ``size`` items spread evenly over ``groups``: each group gives an
    equal share (a small group all it has, its unused share going to the others), its
    items chosen by ``key`` (a hash: the same on every run). One list per group."""
    quotas = [0] * len(groups)
    left = min(size, sum(len(g) for g in groups))
    while left > 0:
        open_groups = [i for i, g in enumerate(groups) if quotas[i] < len(g)]
        share, extra = divmod(left, len(open_groups))
        for rank, i in enumerate(open_groups):
            add = min(share + (rank < extra), len(groups[i]) - quotas[i])
            quotas[i] += add
            left -= add
    samples = []
    for group, quota in zip(groups, quotas, strict=True):
        chosen = {id(item) for item in sorted(group, key=key)[:quota]}
        samples.append([item for item in group if id(item) in chosen])  # in the group's order
    return samples


def select_training_rows(task: Task, *, rounds: Iterable[int] | None = None, selection: str = "verified",
                         dev_fraction: float = 0.1, seed: int = 0, include_static: bool = True,
                         static_limit: int | None = None, rehearse: int | None = None,
                         reporter: JobReporter | None = None) -> tuple[dict[str, list[dict]], dict]:
    """The rows a "train next model" job learns from, and a summary of them.

    - round 0 (static data): its ``train`` and ``dev`` examples;
    - the chosen collection rounds: their VERIFIED, unflagged, unretracted ``train``
      examples (``selection="fooling"``: only those that fooled the model), less a
      ``dev_fraction`` held out as dev, plus their ``dev`` examples.
    ``static_limit`` keeps a fixed sample of round 0's train examples (by a hash of
    their ``stable_id``): a model fine-tuned from its parent on a new round rehearses that much
    of the static data instead of all of it. ``rehearse`` (instead of round 0's train
    examples) keeps a fixed sample of that many train examples spread evenly over
    round 0 and every collection round before the chosen ones (``rehearsal_sample``;
    never their held-out dev share): a model fine-tuned on a new round rehearses all
    the rounds before it. Test examples are never trained on.
    """
    if selection not in SELECTIONS:
        raise InvalidInput.field("selection", f"Must be one of {sorted(SELECTIONS)}.")
    if not 0 <= dev_fraction < 1:
        raise InvalidInput.field("dev_fraction", "Must be at least 0 and below 1.")
    numbers = collection_rounds(task, rounds)
    train, dev = [], []
    counts = {}

    def by_hash(example):
        return hashlib.sha256(f"{seed}:{stable_id(example)}".encode()).digest()

    if include_static:
        static_train = untampered(usable_examples(task, split="train", rounds=[STATIC_ROUND]), reporter)
        if rehearse is not None:
            earlier = [n for n in collection_rounds(task, None) if numbers and n < min(numbers)]
            pools = [static_train] + [
                [e for e in untampered(usable_examples(task, split="train", rounds=[n]), reporter)
                 if not held_out(partition_key(e), dev_fraction, seed)] for n in earlier]
            samples = rehearsal_sample(pools, rehearse, key=by_hash)
            static_train = [e for sample in samples for e in sample]
            counts["rehearsal"] = {str(n): len(sample) for n, sample in zip([STATIC_ROUND, *earlier], samples,
                                                                            strict=True)}
        elif static_limit is not None and len(static_train) > static_limit:
            static_train = sorted(static_train, key=by_hash)
            static_train = sorted(static_train[:static_limit], key=lambda e: e.pk)
        static_dev = untampered(usable_examples(task, split="dev", rounds=[STATIC_ROUND]), reporter)
        train += static_train
        dev += static_dev
        counts["static"] = {"train": len(static_train), "dev": len(static_dev)}
    collected = untampered(usable_examples(task, split="train", rounds=numbers,
                                           fooling_only=selection == "fooling"), reporter)
    collected_dev = untampered(usable_examples(task, split="dev", rounds=numbers,
                                               fooling_only=selection == "fooling"), reporter)
    kept = [e for e in collected if not held_out(partition_key(e), dev_fraction, seed)]
    held = [e for e in collected if held_out(partition_key(e), dev_fraction, seed)]
    train += kept
    dev += held + collected_dev
    counts["rounds"] = {"train": len(kept), "dev": len(held) + len(collected_dev)}
    rows = {"train": example_rows(task, train), "dev": example_rows(task, dev)}
    summary = data_summary(rows, source="examples", rounds=numbers, selection=selection,
                           static_round=include_static, static_limit=static_limit, rehearse=rehearse,
                           dev_fraction=dev_fraction, seed=seed, counts=counts)
    return rows, summary


def train_and_register(task: Task, rows_by_split: dict[str, list[dict]], *, name: str,
                       training_data: dict, rounds: Iterable[Round] = (), user=None,
                       parent: ModelVersion | None = None,
                       progress: Callable[[float, str], None] | None = None,
                       on_registered: Callable[[ModelVersion], None] | None = None,
                       **train_options) -> ModelVersion:
    """Train on ``rows_by_split`` and register the model once its artifact is verified.

    ``parent``: start from that model's weights instead of the plain backbone.
    ``on_registered(model)`` runs inside the registration's transaction (a job marks
    itself succeeded there): if it raises, nothing is registered. A failure at any
    point leaves no ModelVersion and no half-written artifact.
    """
    if not rows_by_split.get("train"):
        raise Conflict(f"No training examples for task {task.slug}.")
    out_dir = artifact_dir_for(task, name)
    options = {"backbone": settings.DYNABENCH_BACKBONE, **train_options}
    if parent is not None:
        ml.verify_artifact(parent.artifact_dir, parent.sha256)  # what we start from is what was registered
        options["backbone"] = str(parent.artifact_dir)
    info = ml.train(ml_spec(task), rows_by_split["train"], rows_by_split.get("dev") or [], out_dir,
                    training_data=training_data, progress=progress, **options)
    try:
        with transaction.atomic():
            model = register_model(task, info, name=name, rounds=rounds, user=user, parent=parent)
            if rows_by_split.get("test"):
                if progress:
                    progress(99, f"scoring {len(rows_by_split['test'])} held-out test examples")
                model.metrics = {**model.metrics, "test": score_rows(task, model, rows_by_split["test"])}
                model.save(update_fields=["metrics"])
            if on_registered is not None:
                on_registered(model)
    except BaseException:
        shutil.rmtree(info.path, ignore_errors=True)
        raise
    return model


TRAIN_OPTION_LIMITS = {"epochs": (1, 50), "batch_size": (1, 256), "max_steps": (1, 10_000_000),
                       "max_minutes": (1, 7 * 24 * 60), "seed": (0, 2**31 - 1)}


def _check_options(options: dict) -> dict:
    clean = {}
    for key, value in options.items():
        if value is None:
            continue
        if key == "lr":
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 1:
                raise InvalidInput.field("lr", "Must be a number above 0 and at most 1.")
            clean[key] = float(value)
        elif key in TRAIN_OPTION_LIMITS:
            low, high = TRAIN_OPTION_LIMITS[key]
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise InvalidInput.field(key, f"Must be a whole number from {low} to {high}.")
            clean[key] = value
        else:
            raise InvalidInput.field(key, f"Unknown training option {key!r}.")
    return clean


def start_training(task: Task, *, name: str, rounds: Iterable[int] | None = None, selection: str = "verified",
                   mode: str = "full", parent: ModelVersion | None = None, include_static: bool = True,
                   static_limit: int | None = None, rehearse: int | None = None, dev_fraction: float = 0.1,
                   evaluate: bool = True, measure: bool = True, backbone: str | None = None,
                   target_if_none: bool = False, import_data: dict | None = None, promote_if_better: bool = False,
                   recipe: dict | None = None, user=None, **options) -> Job:
    """Queue a training job on the ``training`` queue.

    It learns from ``select_training_rows`` (round 0 plus the chosen rounds' verified
    examples), registers the model, then queues its evaluation (``evaluate``). With
    ``target_if_none`` the model becomes the target of the open round once its
    evaluation succeeds, if that round has no target yet (the demo's first models).
    ``import_data`` (``static_data.import_for_training``): files the job first imports
    into round 0, so the import runs in its turn, after the jobs queued before it.
    ``promote_if_better``: its evaluation then makes it the target if it beats the open
    round's target on round 0's test set (``compare_with_target``).
    ``rehearse``: see ``select_training_rows`` (with ``parent``, the cumulative form of
    fine-tuning: the new rounds plus an even sample of every round before them).
    ``measure=False``: the evaluation scores performance only (``evaluate_model``).
    ``recipe``: where the options came from, kept in the job's params for its page
    (``cycle.train_next``: {"from": the seed model's name, "changed": the options the
    researcher set}).
    ``backbone``: a built-in backbone's name or a directory on the training workers
    (instead of ``DYNABENCH_BACKBONE``); the API never passes it (the replay's ``--backbone``).
    One training job per task at a time: a second is refused (409).
    """
    name = check_new_model_name(task, name)
    if mode not in MODES:
        raise InvalidInput.field("mode", f"Must be one of {sorted(MODES)}.")
    if parent is not None and (parent.task_id != task.pk or parent.status != ModelVersion.Status.READY):
        raise InvalidInput.field("parent", f"Must be a ready model of task {task.slug}.")
    options = _check_options(options)
    if backbone is not None:
        if not isinstance(backbone, str) or not backbone.strip() or len(backbone) > 500:
            raise InvalidInput.field("backbone", "Must be a backbone's name or a directory, up to 500 characters.")
        options["backbone"] = backbone.strip()
    cap = getattr(settings, "TRAINING_MAX_STEPS", None)
    if cap:  # a deployment's bound on one training job (shared CPUs)
        options["max_steps"] = min(options.get("max_steps", cap), cap)
    if static_limit is not None and (not isinstance(static_limit, int) or isinstance(static_limit, bool)
                                     or static_limit < 0):
        raise InvalidInput.field("static_limit", "Must be a whole number from 0.")
    if rehearse is not None and (not isinstance(rehearse, int) or isinstance(rehearse, bool) or rehearse < 0):
        raise InvalidInput.field("rehearse", "Must be a whole number from 0.")
    if rehearse is not None and static_limit is not None:
        raise InvalidInput.field("rehearse", "Give static_limit or rehearse, not both.")
    if not isinstance(dev_fraction, int | float) or isinstance(dev_fraction, bool) or not 0 <= dev_fraction < 1:
        raise InvalidInput.field("dev_fraction", "Must be at least 0 and below 1.")
    numbers = collection_rounds(task, rounds)
    if selection not in SELECTIONS:
        raise InvalidInput.field("selection", f"Must be one of {sorted(SELECTIONS)}.")
    usable = counters.task_totals(task, numbers=numbers)
    available = usable["usable_fooled_train" if selection == "fooling" else "usable_train"]
    if include_static:
        available += counters.task_totals(task, numbers=[STATIC_ROUND])["usable_train"]
    if not available and not (import_data and include_static):
        raise Conflict(f"Task {task.slug} has no usable training examples in the chosen rounds "
                       f"({SELECTIONS[selection]}; round 0 {'included' if include_static else 'left out'}). "
                       "Import a data set into round 0 (manage.py import_dataset --round 0, or bootstrap_demo for "
                       "the shipped seed set), or let the open round's examples be written and verified first.")
    params = {"name": name, "rounds": list(rounds) if rounds is not None else None, "selection": selection,
              "mode": mode, "parent": parent.pk if parent else None, "include_static": include_static,
              "static_limit": static_limit, "rehearse": rehearse, "dev_fraction": dev_fraction,
              "evaluate": evaluate, "options": options, **({} if measure else {"measure": False}),
              "target_if_none": bool(target_if_none), "import": import_data or None,
              "promote_if_better": bool(promote_if_better), **({"recipe": recipe} if recipe else {})}
    with transaction.atomic():
        job = create_job(Job.Kind.TRAIN_MODEL, params=params, task=task, user=user)
        enqueue_by_name(job, celery_names.TRAIN_MODEL, queue=celery_names.TRAINING_QUEUE)
    return job


def start_follow_up_training(task: Task, spec: dict, user=None) -> Job | None:
    """The training job that a finished one names to follow it (``then_train``: the
    keyword arguments of ``start_static_training``); a refusal is logged, not raised."""
    try:
        return start_static_training(task, user=user, **spec)
    except DomainError as exc:
        log.warning("%s: the training job to follow could not start: %s", task.slug, exc.message)
        return None


def check_training_options(*, mode: str = "full", **options) -> dict:
    """The training options as ``start_training`` would take them, or InvalidInput:
    for callers that check them before doing anything (``manage.py train_model``)."""
    if mode not in MODES:
        raise InvalidInput.field("mode", f"Must be one of {sorted(MODES)}.")
    return _check_options(options)


def static_training_counts(task: Task) -> dict[str, int]:
    """Round 0's usable examples per split (what a round-0 model learns from and is tested on)."""
    totals = counters.task_totals(task, numbers=[STATIC_ROUND])
    return {split: totals[f"usable_{split}"] for split in ("train", "dev", "test")}


def unique_model_name(task: Task, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``... : the first that ``task`` has no model of."""
    taken = set(ModelVersion.objects.filter(task=task, name__startswith=base).values_list("name", flat=True))
    if base not in taken:
        return base
    return next(f"{base}-{n}" for n in range(2, len(taken) + 3) if f"{base}-{n}" not in taken)


def default_static_model_name(task: Task, source: str = "static") -> str:
    return unique_model_name(task, f"round0-{source}")


def usable_training_counts(task: Task) -> dict:
    """What each "train next" choice would learn from: round 0's train and dev examples,
    and the collection rounds' usable (verified, unflagged, unretracted) train and dev
    examples, all of them and those that fooled the model."""
    static = static_training_counts(task)
    collected = counters.task_totals(task, numbers=collection_rounds(task, None))
    return {"static": static["train"] + static["dev"],
            "verified": collected["usable_train"] + collected["usable_dev"],
            "fooling": collected["usable_fooled_train"] + collected["usable_fooled_dev"]}


def start_static_training(task: Task, *, name: str, mode: str = "full", static_limit: int | None = None,
                          evaluate: bool = True, target_if_none: bool = False, import_data: dict | None = None,
                          promote_if_better: bool = False, user=None, **options) -> Job:
    """Queue a job that trains a model on round 0, the static data, only: its train
    examples (``static_limit``: a fixed sample of them), with its dev examples to pick
    the best epoch. The model is registered as trained on round 0 and, with
    ``evaluate``, then evaluated on every round's test split."""
    if not import_data and not static_training_counts(task)["train"]:
        raise Conflict(f"Task {task.slug} has no static training data: round 0 has no usable train examples. "
                       "Import a data set into round 0 first (manage.py train_model, or import_dataset --round 0).")
    return start_training(task, name=name, rounds=[], include_static=True, mode=mode, static_limit=static_limit,
                          evaluate=evaluate, target_if_none=target_if_none, import_data=import_data,
                          promote_if_better=promote_if_better, user=user, **options)
