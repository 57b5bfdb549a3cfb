"""Model versions: training, registration, evaluation and the demo models.

Training and evaluation run as Jobs on the ``training`` queue
(``leaderboard.tasks``); these functions are what the jobs, the admin and the
management commands call. ``ml`` is imported inside functions so that a web
process never imports torch before gunicorn forks.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count

from annotation.models import Example
from annotation.services.examples import signature_ok
from core.errors import Conflict, DomainError, InvalidInput
from tasks.jobs import JobReporter, cancel_job, create_job, enqueue, run_job, wait_for_job
from tasks.models import STATIC_ROUND, Job, ModelVersion, Round, Task
from tasks.registry import artifact_dir_for, ref_for, register_model
from tasks.services import SEED_DIR

from .models import Evaluation

log = logging.getLogger(__name__)

DEMO_MODEL_NAME = "round0-seed"
# For the small shipped seed sets (84-140 training rows) a higher learning rate
# and small batches learn more in the same time than the library defaults
# (measured on the seed dev splits: NLI accuracy 0.37 -> 0.44; QA F1 0.09 -> 0.17).
DEMO_TRAINING = {"epochs": 6, "batch_size": 8, "lr": 1e-4, "seed": 0}
DEMO_TRAINING_BY_TASK = {"qa": {"lr": 2e-4}}


def ml_spec(task: Task):
    import ml

    return ml.TaskSpec.from_dict(task.parsed_config.ml_spec_dict())


# --- rows ------------------------------------------------------------------


def example_row(config, context_fields: dict | None, inputs: dict, target: dict) -> dict:
    """An Example (context fields + inputs + target) as an ``ml`` training row."""
    fields = {**(context_fields or {}), **inputs}
    model_inputs = {name: fields.get(name, "") for name in config.model_inputs}
    if config.task_type == "extractive_qa":
        passage_field, question_field = config.model_inputs
        return {
            "inputs": {"passage": model_inputs[passage_field], "question": model_inputs[question_field]},
            "answer": {"text": target["text"], "start": target["start"]},
        }
    return {"inputs": model_inputs, "label": target["label"]}


def example_rows(task: Task, examples: Iterable) -> list[dict]:
    config = task.parsed_config
    return [
        example_row(config, ex.context.fields if ex.context_id else None, ex.inputs, ex.target)
        for ex in examples
    ]


SELECTIONS = {"verified": "every verified example", "fooling": "verified examples that fooled the model"}
MODES = {"full": "full fine-tuning", "head": "head only (frozen encoder)"}


def usable_examples(task: Task, *, split: str | None, rounds: Iterable[int] | None = None,
                    fooling_only: bool = False):
    """Examples fit to train or score on: VERIFIED (imports are verified when imported),
    not flagged, not retracted. Pending, rejected and flagged ones never count.
    ``split=None``: every split."""
    qs = Example.objects.filter(task=task, retracted=False, flagged=False,
                                validation_status=Example.ValidationStatus.VERIFIED)
    if split is not None:
        qs = qs.filter(split=split)
    if rounds is not None:
        qs = qs.filter(round__number__in=list(rounds))
    if fooling_only:
        qs = qs.filter(fooled=True)
    return qs.select_related("context").order_by("pk")


def training_examples(task: Task, *, rounds: Iterable[int] | None = None, split: str = "train"):
    """Every usable example of ``split`` in ``rounds`` (all rounds by default)."""
    return usable_examples(task, split=split, rounds=rounds)


def held_out(uid, dev_fraction: float, seed: int) -> bool:
    """A fixed share of collected examples goes to dev, by a hash of their uid: the
    same example lands on the same side in every run, whatever else was collected."""
    digest = hashlib.sha256(f"{seed}:{uid}".encode()).digest()
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
    their uid): a model fine-tuned from its parent on a new round rehearses that much
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
        return hashlib.sha256(f"{seed}:{example.uid}".encode()).digest()

    if include_static:
        static_train = untampered(usable_examples(task, split="train", rounds=[STATIC_ROUND]), reporter)
        if rehearse is not None:
            earlier = [n for n in collection_rounds(task, None) if numbers and n < min(numbers)]
            pools = [static_train] + [
                [e for e in untampered(usable_examples(task, split="train", rounds=[n]), reporter)
                 if not held_out(e.uid, dev_fraction, seed)] for n in earlier]
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
    kept = [e for e in collected if not held_out(e.uid, dev_fraction, seed)]
    held = [e for e in collected if held_out(e.uid, dev_fraction, seed)]
    train += kept
    dev += held + collected_dev
    counts["rounds"] = {"train": len(kept), "dev": len(held) + len(collected_dev)}
    rows = {"train": example_rows(task, train), "dev": example_rows(task, dev)}
    summary = data_summary(rows, source="examples", rounds=numbers, selection=selection,
                           static_round=include_static, static_limit=static_limit, rehearse=rehearse,
                           dev_fraction=dev_fraction, seed=seed, counts=counts)
    return rows, summary


def untampered(examples: Iterable[Example], reporter: JobReporter | None = None) -> list[Example]:
    """``examples`` without the written ones whose signature does not check (their text,
    answer, the model's answer or ``fooled`` changed after the model answered)."""
    kept, dropped = [], 0
    for example in examples:
        if example.source == Example.Source.ANNOTATION and not signature_ok(example):
            dropped += 1
            log.warning("example %s: signature does not match its data; left out", example.pk)
            continue
        kept.append(example)
    if dropped and reporter:
        reporter.progress(0, f"left out {dropped} example(s) whose signature does not match their data")
    return kept


def read_seed_rows(slug: str, config=None) -> dict[str, list[dict]]:
    """The shipped seed examples of a task, by split, as ``ml`` rows.

    Read with the same ``seed`` reader that ``import_dataset`` uses. Without
    ``config``, the task's shipped definition is used (no database needed).
    """
    from annotation.importers import RowError, read_records
    from tasks.config import validate_task_config
    from tasks.services import load_definition

    if config is None:
        definition = load_definition(slug)
        config = validate_task_config(definition["task_type"], definition["config"])
    path = SEED_DIR / "examples" / f"{slug}.jsonl"
    splits: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
    if not path.exists():
        return splits
    for record in read_records("seed", path):
        if isinstance(record, RowError):
            raise ValidationError(f"{path}: line {record.line}: {record.message}")
        context_fields = record.context["fields"] if record.context else None
        splits[record.split or "train"].append(example_row(config, context_fields, record.inputs, record.target))
    return splits


def data_summary(rows_by_split: dict[str, list[dict]], **extra) -> dict:
    summary = dict(extra)
    for split, rows in rows_by_split.items():
        labels = Counter(r["label"] for r in rows if "label" in r)
        summary[split] = {"count": len(rows), **({"labels": dict(sorted(labels.items()))} if labels else {})}
    return summary


# --- training --------------------------------------------------------------------


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
    import ml

    if not rows_by_split.get("train"):
        raise ValidationError(f"No training examples for task {task.slug}.")
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


# --- evaluation -------------------------------------------------------------------


def primary_metric(task: Task) -> str:
    """The number a round's column shows: accuracy, or SQuAD F1 for QA."""
    return "f1" if task.parsed_config.task_type == "extractive_qa" else "accuracy"


def score_rows(task: Task, model: ModelVersion, rows: list[dict], batch_size: int = 32,
               progress: Callable[[int], None] | None = None) -> dict:
    """Metrics of ``model`` on ml rows, plus the model error rate by the task's metric."""
    return score_rows_in_detail(task, model, rows, batch_size, progress)[0]


def score_rows_in_detail(task: Task, model: ModelVersion, rows: list[dict], batch_size: int = 32,
                         progress: Callable[[int], None] | None = None) -> tuple[dict, dict]:
    """``(metrics, details)``: ``details`` holds the task metric per example and, for
    classification, the gold and predicted labels and the predicted label's
    probability (what intervals and calibration are computed from)."""
    import ml
    from ml import metrics

    config = task.parsed_config
    ref = ref_for(model)
    predictions = []
    if rows:
        ml.predict(ref, [rows[0]["inputs"]])  # loaded before the clock starts
    started = time.perf_counter()
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        predictions.extend(ml.predict(ref, [r["inputs"] for r in batch]))
        if progress:
            progress(min(start + batch_size, len(rows)))
    elapsed = time.perf_counter() - started
    details: dict = {"predictions": predictions}
    if rows:
        details["throughput"] = len(rows) / elapsed if elapsed > 0 else None
    if config.task_type == "extractive_qa":
        golds = [r["answer"]["text"] for r in rows]
        answers = [p["answer"] for p in predictions]
        scores = metrics.squad_scores(answers, golds)
        details["per_example"] = [round(metrics.f1(a, g), 6) for a, g in zip(answers, golds, strict=True)]
        wrong = [config.model_fooled(r["answer"], p) for r, p in zip(rows, predictions, strict=True)]
    else:
        golds = [r["label"] for r in rows]
        labels = [p["label"] for p in predictions]
        scores = metrics.classification_report(golds, labels, labels=config.label_names)
        wrong = [config.model_fooled({"label": g}, p) for g, p in zip(golds, predictions, strict=True)]
        details.update(per_example=[float(g == p) for g, p in zip(golds, labels, strict=True)], gold=golds,
                       pred=labels, confidence=[round(float(p["probabilities"][p["label"]]), 6)
                                                for p in predictions])
    scores["num_examples"] = len(rows)
    scores["model_error_rate"] = sum(wrong) / len(rows) if rows else None
    return scores, details


class TimeLimitExceeded(Exception):
    """An evaluation ran past ``EVALUATION_TIME_LIMIT``."""


def _round_progress(reporter: JobReporter | None, index: int, size: int, total: int, deadline: float | None = None):
    """Progress of round ``index`` of ``total`` as examples are scored; past ``deadline``
    (a ``time.monotonic()`` value) the evaluation stops with a readable error."""
    def report(done):
        if deadline is not None and time.monotonic() > deadline:
            raise TimeLimitExceeded(f"The evaluation ran past its time limit of {settings.EVALUATION_TIME_LIMIT} s "
                                    f"(round {index + 1} of {total}, {done} of {size} examples scored).")
        if reporter is not None:
            reporter.progress(100 * (index + done / size) / total)
    return report


def evaluate_model(model: ModelVersion, rounds: Iterable[Round], *, split: str = "test",
                   reporter: JobReporter | None = None, job: Job | None = None,
                   measure: bool = True) -> list[Evaluation]:
    """Score ``model`` on each round's usable ``split`` examples (round 0, the static
    test set, included); one Evaluation row per round that has any. ``measure=False``
    scores performance (and calibration) only: no throughput, memory, robustness or
    fairness, which cost several times the scoring (the replay's models)."""
    rounds = list(rounds)
    results = []
    limit = getattr(settings, "EVALUATION_TIME_LIMIT", None)
    deadline = time.monotonic() + limit if limit else None
    for i, rnd in enumerate(rounds):
        examples = untampered(usable_examples(model.task, rounds=[rnd.number], split=split), reporter)
        rows = example_rows(model.task, examples)
        if reporter:
            reporter.progress(100 * i / max(len(rounds), 1), f"round {rnd.number}: {len(rows)} {split} examples")
        if not rows:
            continue
        scores, details = score_rows_in_detail(model.task, model, rows,
                                               progress=_round_progress(reporter, i, len(rows), len(rounds),
                                                                        deadline))
        from . import board

        ids = [e.pk for e in examples]
        if measure:
            scores.update(board.measure(model.task, ref_for(model), rows, details, ids))
        extra = board.uncertainty(model.task, scores, details, ids, seed=board.dataset_seed(rnd.number))
        evaluation, _ = Evaluation.objects.update_or_create(
            model_version=model, round=rnd, split=split,
            defaults={"num_examples": len(rows), "metrics": scores,
                      "model_error_rate": scores["model_error_rate"], "job": job,
                      "example_ids": [e.pk for e in examples], "per_example": details["per_example"], **extra},
        )
        results.append(evaluation)
    return results


def evaluated_model_ids(model_ids: Iterable[int]) -> set[int]:
    """Of ``model_ids``, those for which an evaluation job over every round ran to the end."""
    return set(Job.objects.filter(kind=Job.Kind.EVALUATE_MODEL, status=Job.Status.SUCCEEDED, params__rounds=None,
                                  params__model_version__in=list(model_ids))
               .values_list("params__model_version", flat=True))


def has_finished_evaluation(model: ModelVersion) -> bool:
    return model.pk in evaluated_model_ids([model.pk])


# --- jobs ---------------------------------------------------------------------

TRAIN_OPTION_LIMITS = {"epochs": (1, 50), "batch_size": (1, 256), "max_steps": (1, 10_000_000),
                       "seed": (0, 2**31 - 1)}


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
                   user=None, **options) -> Job:
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
    ``backbone``: a built-in backbone's name or a directory on the training workers
    (instead of ``DYNABENCH_BACKBONE``); the API never passes it (the replay's ``--backbone``).
    One training job per task at a time: a second is refused (409).
    """
    from .tasks import train_model

    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise InvalidInput.field("name", "Must be a model name of 1 to 100 characters.")
    if ModelVersion.objects.filter(task=task, name=name).exists():
        raise Conflict(f"Task {task.slug} already has a model named {name!r}.")
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
    available = usable_examples(task, split="train", rounds=numbers, fooling_only=selection == "fooling").count()
    if include_static:
        available += usable_examples(task, split="train", rounds=[STATIC_ROUND]).count()
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
              "promote_if_better": bool(promote_if_better)}
    with transaction.atomic():
        job = create_job(Job.Kind.TRAIN_MODEL, params=params, task=task, user=user)
        enqueue(job, train_model, queue="training")
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
    counts = dict.fromkeys(("train", "dev", "test"), 0)
    rows = (usable_examples(task, split=None, rounds=[STATIC_ROUND])
            .order_by().values_list("split").annotate(n=Count("pk")))
    for split, n in rows:
        counts[split] = n
    return counts


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
    numbers = collection_rounds(task, None)
    static = static_training_counts(task)
    collected = usable_examples(task, split=None, rounds=numbers).exclude(split="test")
    return {"static": static["train"] + static["dev"], "verified": collected.count(),
            "fooling": collected.filter(fooled=True).count()}


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


def run_training_job(job_id: int) -> Job:
    def work(job: Job, reporter: JobReporter) -> dict:
        task, params = job.task, job.params
        if params.get("import"):
            from .static_data import import_for_training

            import_for_training(task, params["import"], reporter)
        rows, summary = select_training_rows(
            task, rounds=params.get("rounds"), selection=params.get("selection", "verified"),
            dev_fraction=params.get("dev_fraction", 0.1), seed=params.get("options", {}).get("seed", 0),
            include_static=params.get("include_static", True), static_limit=params.get("static_limit"),
            rehearse=params.get("rehearse"), reporter=reporter)
        reporter.progress(1, "training on " + ", ".join(f"{len(v)} {k}" for k, v in rows.items())
                          + f" ({MODES[params.get('mode', 'full')]})")
        parent = ModelVersion.objects.filter(pk=params["parent"]).first() if params.get("parent") else None
        if params.get("parent") and parent is None:
            raise ValidationError(f"The parent model #{params['parent']} no longer exists.")
        rounds = task.rounds.filter(number__in=[STATIC_ROUND, *summary["rounds"]] if params.get(
            "include_static", True) else summary["rounds"])
        result = {}

        def registered(model):
            result.update(model_version=model.pk, name=model.name, dev=model.metrics.get("dev_accuracy",
                                                                                       model.metrics.get("dev_f1")))
            if params.get("evaluate"):
                # In the same transaction: a registered model always has its evaluation job.
                result["evaluation_job"] = start_evaluation(
                    model, user=job.created_by, target_if_none=params.get("target_if_none", False),
                    promote_if_better=params.get("promote_if_better", False),
                    measure=params.get("measure", True)).pk
            reporter.complete(result)  # in the registration's transaction: a cancel wins or loses whole

        train_and_register(
            task, rows, name=params["name"], rounds=rounds, user=job.created_by, parent=parent,
            training_data=summary, progress=reporter.progress, on_registered=registered,
            freeze_encoder=params.get("mode") == "head", **params.get("options", {}),
        )
        if params.get("then_train"):  # this job has completed: the task may have its next training job
            start_follow_up_training(task, params["then_train"], user=job.created_by)
        return result

    return run_job(job_id, work)


class JobDidNotSucceed(Exception):
    """A waited-for job failed, was cancelled, timed out or was interrupted."""


def wait_for_success(job: Job, what: str, say: Callable[[str], None], timeout: float | None = None) -> Job:
    """Wait for ``job``, echoing its log lines to ``say``; Ctrl-C cancels it."""
    try:
        job = wait_for_job(job, on_log=lambda line: say(f"  {what}: {line}"), timeout=timeout)
    except KeyboardInterrupt:
        job.refresh_from_db()
        if job.status in Job.ACTIVE:
            cancel_job(job)
            raise JobDidNotSucceed(f"Interrupted: {what} job #{job.pk} cancelled.") from None
        raise
    except (TimeoutError, RuntimeError) as exc:
        raise JobDidNotSucceed(f"{what} job #{job.pk}: {exc}") from None
    if job.status != Job.Status.SUCCEEDED:
        reason = job.error.strip().splitlines()[0] if job.error.strip() else job.status
        raise JobDidNotSucceed(f"The {what} job #{job.pk} {job.status}: {reason}")
    return job


def wait_for_trained_model(job: Job, say: Callable[[str], None], timeout: float | None = None) -> ModelVersion:
    """Wait for a training job, then for the evaluation it queued with the model."""
    job = wait_for_success(job, "train", say, timeout)
    model = ModelVersion.objects.get(pk=job.result["model_version"])
    evaluation = Job.objects.filter(pk=job.result.get("evaluation_job")).first()
    if evaluation is None:  # trained with evaluate=False
        evaluation = start_evaluation(model, user=job.created_by)
    say(f"evaluation job #{evaluation.pk}")
    wait_for_success(evaluation, "evaluate", say, timeout)
    return model


def start_evaluation(model: ModelVersion, *, rounds: Iterable[int] | None = None, split: str = "test",
                     target_if_none: bool = False, promote_if_better: bool = False, measure: bool = True,
                     user=None) -> Job:
    """Queue the evaluation of ``model`` on every round's test split (round 0 included).
    ``target_if_none``, ``promote_if_better``, ``measure``: see ``start_training``."""
    from .tasks import evaluate_model as evaluate_task

    if model.status != ModelVersion.Status.READY:
        raise Conflict(f"{model} is {model.status}; only ready models are evaluated.")
    params = {"model_version": model.pk, "rounds": list(rounds) if rounds is not None else None, "split": split}
    if not measure:
        params["measure"] = False
    if target_if_none:
        params["target_if_none"] = True
    if promote_if_better:
        params["promote_if_better"] = True
    with transaction.atomic():
        job = create_job(Job.Kind.EVALUATE_MODEL, params=params, task=model.task, user=user)
        enqueue(job, evaluate_task, queue="training")
    return job


def run_evaluation_job(job_id: int) -> Job:
    def work(job: Job, reporter: JobReporter) -> dict:
        model = ModelVersion.objects.select_related("task").get(pk=job.params["model_version"])
        rounds = model.task.rounds.order_by("number")
        if job.params.get("rounds"):
            rounds = rounds.filter(number__in=job.params["rounds"])
        split = job.params.get("split", "test")
        evaluations = evaluate_model(model, rounds, split=split, reporter=reporter, job=job,
                                     measure=job.params.get("measure", True))
        if not evaluations:
            numbers = ", ".join(str(r.number) for r in rounds) or "none"
            raise ValidationError(
                f"No usable {split} examples in round(s) {numbers} of task {model.task.slug}: nothing to score "
                f"{model} on. Import a test set into round 0 (manage.py import_dataset --round 0 --split test, "
                "or bootstrap_demo for the shipped seed set), or let a round's examples be verified first.")
        result = {"evaluations": {f"round {e.round.number}": e.metrics for e in evaluations}}
        if job.params.get("promote_if_better"):
            result["promotion"] = compare_with_target(model, reporter, job)
        from .board import forget

        with transaction.atomic():
            reporter.complete(result)  # an update(): no signal, so the board is dropped here
            transaction.on_commit(lambda: forget(model.task_id))
        if result.get("promotion", {}).get("promote"):
            make_target_or_log(model)  # after complete(): promotion needs this evaluation finished
        elif job.params.get("target_if_none"):
            target_if_none(model)
        return result

    return run_job(job_id, work)


def compare_with_target(model: ModelVersion, reporter: JobReporter, job: Job) -> dict:
    """Whether ``model`` should replace the open round's target: it scores higher on
    round 0's test set, and not below always answering the most common label there
    (promotion would refuse that). The target is scored again first, on that set as it is now (an
    import may have grown it since its own evaluation), so both numbers count the same
    examples. Returns {"promote": bool, "reason": str}, and logs the reason."""
    task = model.task
    rnd = task.open_round()
    targets = list(rnd.target_models.all()) if rnd is not None else []
    static = task.rounds.filter(number=STATIC_ROUND).first()
    metric = primary_metric(task)

    def decided(promote: bool, reason: str) -> dict:
        reporter.progress(100, reason)
        return {"promote": promote, "reason": reason}

    if rnd is None:
        return decided(False, "no open round: nothing to promote into")
    if model in targets:
        return decided(False, f"{model.name} is the target already")
    mine = Evaluation.objects.filter(model_version=model, round=static, split="test").first() if static else None
    if mine is None or mine.metrics.get(metric) is None:
        return decided(False, f"{model.name} has no {metric} on round 0's test split: the target stays")
    if not targets:
        return decided(True, f"round {rnd.number} has no target yet: {model.name} becomes it")
    reporter.progress(100, f"scoring the target ({', '.join(t.name for t in targets)}) on round 0's "
                           f"{mine.num_examples} test examples too")
    theirs = [evaluation.metrics.get(metric) for target in targets
              for evaluation in evaluate_model(target, [static], job=job)]
    theirs = [value for value in theirs if value is not None]
    if not theirs:
        return decided(True, f"the target has no {metric} on round 0: {model.name} becomes the target")
    score, best = mine.metrics[metric], max(theirs)
    from .board import forget, target_scores

    forget(task.pk)  # the majority line on the test set as it is now (an import may have grown it)
    majority = target_scores(task, [model])[0]["baseline"]
    summary = (f"{model.name} {score:.1%} against the target's {best:.1%} {metric} on round 0's "
               f"{mine.num_examples} test examples"
               + (f" (always answering the most common label: {majority:.1%})" if majority is not None else ""))
    if majority is not None and score < majority:  # promotion would refuse it (cycle.check_above_baseline)
        return decided(False, f"{summary}: below the majority line, the target stays")
    if score > best:
        return decided(True, f"{summary}: {model.name} becomes the target")
    return decided(False, f"{summary}: the target stays")


def challenger(task: Task) -> dict:
    """For the public task page: a model on its way to replace the target if it scores
    higher (its job, queued or running), and the last such decision. Either may be None.
    One query: the page's budget is small."""
    from django.db.models import Q

    rows = list(Job.objects.filter(task=task).filter(
        Q(status__in=Job.ACTIVE) & (Q(params__promote_if_better=True) | Q(params__has_key="then_train"))
        | Q(kind=Job.Kind.EVALUATE_MODEL, status=Job.Status.SUCCEEDED, result__has_key="promotion"))
        .order_by("-pk")[:20])
    pending = [job for job in rows if job.status in Job.ACTIVE]
    decided = next((job for job in rows if job.status == Job.Status.SUCCEEDED), None)
    return {"job": pending[-1] if pending else None, "last": decided.result["promotion"]["reason"] if decided else None}


def make_target_or_log(model: ModelVersion) -> None:
    """``cycle.make_target``, a refusal logged (the evaluation it follows has succeeded)."""
    from .cycle import make_target

    try:
        rnd, promoted = make_target(model.task, model)
    except DomainError as exc:
        log.warning("%s could not become a target of %s: %s", model, model.task.slug, exc.message)
        return
    log.info("%s is the target of %s round %s%s", model, model.task.slug, rnd.number,
             " (promoted: the round before closed)" if promoted else "")


def target_if_none(model: ModelVersion) -> bool:
    """Make ``model`` the target of its task's open round if that round has none yet
    (nobody can write in it before). True if it did. A refusal is logged, not raised:
    the evaluation it follows has succeeded all the same."""
    from .cycle import make_target

    rnd = model.task.open_round()
    if rnd is None or rnd.target_models.exists():
        return False
    try:
        make_target(model.task, model)
    except DomainError as exc:
        log.warning("%s could not become the target of %s round %s: %s", model, model.task.slug, rnd.number,
                    exc.message)
        return False
    return True

