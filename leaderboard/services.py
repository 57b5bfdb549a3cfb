"""Model versions: training, registration, evaluation and the demo models.

Training and evaluation run as Jobs on the ``training`` queue
(``leaderboard.tasks``); these functions are what the jobs, the admin and the
management commands call. ``ml`` is imported inside functions so that a web
process never imports torch before gunicorn forks.
"""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from collections.abc import Callable, Iterable

from django.conf import settings
from django.core.exceptions import ValidationError

from annotation.models import Example
from annotation.services.examples import signature_ok
from tasks.jobs import JobReporter, create_job, enqueue, run_job
from tasks.models import Job, ModelVersion, Round, Task
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


def training_examples(task: Task, *, rounds: Iterable[int] | None = None, split: str = "train"):
    """Examples usable for training: not retracted, not rejected or flagged."""
    qs = Example.objects.filter(task=task, split=split, retracted=False).exclude(
        validation_status__in=[Example.ValidationStatus.REJECTED, Example.ValidationStatus.FLAGGED]
    )
    if rounds is not None:
        qs = qs.filter(round__number__in=list(rounds))
    return qs.select_related("context").order_by("pk")


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
                       progress: Callable[[float, str], None] | None = None, **train_options) -> ModelVersion:
    """Train on ``rows_by_split`` and register the model once its artifact is verified.

    A failure at any point leaves no ModelVersion and no half-written artifact.
    """
    import ml

    if not rows_by_split.get("train"):
        raise ValidationError(f"No training examples for task {task.slug}.")
    out_dir = artifact_dir_for(task, name)
    options = {"backbone": settings.DYNABENCH_BACKBONE, **train_options}
    info = ml.train(ml_spec(task), rows_by_split["train"], rows_by_split.get("dev") or [], out_dir,
                    training_data=training_data, progress=progress, **options)
    try:
        model = register_model(task, info, name=name, rounds=rounds, user=user)
    except Exception:
        shutil.rmtree(info.path, ignore_errors=True)
        raise
    if rows_by_split.get("test"):
        if progress:
            progress(99, f"scoring {len(rows_by_split['test'])} held-out test examples")
        test = score_rows(task, model, rows_by_split["test"])
        model.metrics = {**model.metrics, "test": test}
        model.save(update_fields=["metrics"])
    return model


# --- evaluation -------------------------------------------------------------------


def score_rows(task: Task, model: ModelVersion, rows: list[dict], batch_size: int = 32,
               progress: Callable[[int], None] | None = None) -> dict:
    """Metrics of ``model`` on ml rows, plus the model error rate by the task's metric."""
    import ml
    from ml import metrics

    config = task.parsed_config
    ref = ref_for(model)
    predictions = []
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        predictions.extend(ml.predict(ref, [r["inputs"] for r in batch]))
        if progress:
            progress(min(start + batch_size, len(rows)))
    if config.task_type == "extractive_qa":
        golds = [r["answer"]["text"] for r in rows]
        scores = metrics.squad_scores([p["answer"] for p in predictions], golds)
        wrong = [config.model_fooled(r["answer"], p) for r, p in zip(rows, predictions, strict=True)]
    else:
        golds = [r["label"] for r in rows]
        labels = [p["label"] for p in predictions]
        scores = metrics.classification_report(golds, labels, labels=config.label_names)
        wrong = [config.model_fooled({"label": g}, p) for g, p in zip(golds, predictions, strict=True)]
    scores["num_examples"] = len(rows)
    scores["model_error_rate"] = sum(wrong) / len(rows) if rows else None
    return scores


def _round_progress(reporter: JobReporter | None, index: int, size: int, total: int):
    """Progress of round ``index`` of ``total`` as examples are scored."""
    if reporter is None:
        return None
    return lambda done: reporter.progress(100 * (index + done / size) / total)


def evaluate_model(model: ModelVersion, rounds: Iterable[Round], *, split: str = "test",
                   reporter: JobReporter | None = None, job: Job | None = None) -> list[Evaluation]:
    """Score ``model`` on each round's ``split``; one Evaluation row per round."""
    rounds = list(rounds)
    results = []
    for i, rnd in enumerate(rounds):
        examples = untampered(training_examples(model.task, rounds=[rnd.number], split=split), reporter)
        rows = example_rows(model.task, examples)
        if reporter:
            reporter.progress(100 * i / max(len(rounds), 1), f"round {rnd.number}: {len(rows)} {split} examples")
        if not rows:
            continue

        scores = score_rows(model.task, model, rows, progress=_round_progress(reporter, i, len(rows), len(rounds)))
        evaluation, _ = Evaluation.objects.update_or_create(
            model_version=model, round=rnd, split=split,
            defaults={"num_examples": len(rows), "metrics": scores,
                      "model_error_rate": scores["model_error_rate"], "job": job},
        )
        results.append(evaluation)
    return results


# --- jobs ---------------------------------------------------------------------


def start_training(task: Task, *, name: str, rounds: Iterable[int] | None = None, user=None,
                   **options) -> Job:
    """Queue a training job on the task's examples (``train``/``dev``/``test`` splits)."""
    from .tasks import train_model

    if ModelVersion.objects.filter(task=task, name=name).exists():
        raise ValidationError({"name": f"Task {task.slug} already has a model named {name!r}."})
    params = {"name": name, "rounds": list(rounds) if rounds is not None else None, "options": options}
    job = create_job(Job.Kind.TRAIN_MODEL, params=params, task=task, user=user)
    enqueue(job, train_model, queue="training")
    return job


def run_training_job(job_id: int) -> Job:
    def work(job: Job, reporter: JobReporter) -> dict:
        task, params = job.task, job.params
        existing = ModelVersion.objects.filter(task=task, name=params["name"]).first()
        if existing:  # a redelivered job after registration: nothing to redo
            return {"model_version": existing.pk, "reused": True}
        rows = {split: example_rows(task, untampered(training_examples(task, rounds=params.get("rounds"),
                                                                           split=split), reporter))
                for split in ("train", "dev", "test")}
        reporter.progress(1, "training on " + ", ".join(f"{len(v)} {k}" for k, v in rows.items()))
        rounds = task.rounds.filter(number__in=params["rounds"]) if params.get("rounds") else task.rounds.all()
        model = train_and_register(
            task, rows, name=params["name"], rounds=rounds, user=job.created_by,
            training_data=data_summary(rows, source="examples", rounds=params.get("rounds")),
            progress=reporter.progress, **params.get("options", {}),
        )
        return {"model_version": model.pk, "metrics": model.metrics}

    return run_job(job_id, work)


def start_evaluation(model: ModelVersion, *, rounds: Iterable[int] | None = None, split: str = "test",
                     user=None) -> Job:
    from .tasks import evaluate_model as evaluate_task

    params = {"model_version": model.pk, "rounds": list(rounds) if rounds is not None else None, "split": split}
    job = create_job(Job.Kind.EVALUATE_MODEL, params=params, task=model.task, user=user)
    enqueue(job, evaluate_task, queue="training")
    return job


def run_evaluation_job(job_id: int) -> Job:
    def work(job: Job, reporter: JobReporter) -> dict:
        model = ModelVersion.objects.select_related("task").get(pk=job.params["model_version"])
        rounds = model.task.rounds.order_by("number")
        if job.params.get("rounds"):
            rounds = rounds.filter(number__in=job.params["rounds"])
        evaluations = evaluate_model(model, rounds, split=job.params.get("split", "test"),
                                     reporter=reporter, job=job)
        return {"evaluations": {f"round {e.round.number}": e.metrics for e in evaluations}}

    return run_job(job_id, work)


# --- demo --------------------------------------------------------------------


def ensure_demo_models(slugs: Iterable[str], progress: Callable[[str], None] | None = None,
                       **train_options) -> list[str]:
    """Train a round-0 model on the shipped seed set for each task that has none,
    and make it the target of the task's open round. Returns what was trained."""
    trained = []
    for slug in slugs:
        task = Task.objects.get(slug=slug)
        model = ModelVersion.objects.filter(task=task, name=DEMO_MODEL_NAME).first()
        if model is None:
            rows = read_seed_rows(slug, task.parsed_config)
            if not rows["train"]:
                continue
            if progress:
                progress(f"training the {slug} round-0 model on {len(rows['train'])} seed examples "
                         "(first run only)")
            last = [-10]

            def report(percent, message, slug=slug, last=last):
                if progress and percent - last[0] >= 25:
                    last[0] = percent
                    progress(f"{slug}: {int(percent)}% {message}")

            options = {**DEMO_TRAINING, **DEMO_TRAINING_BY_TASK.get(slug, {}), **train_options}
            model = train_and_register(task, rows, name=DEMO_MODEL_NAME, progress=report,
                                       training_data=data_summary(rows, source="shipped seed set"),
                                       **options)
            trained.append(str(model))
        rnd = task.open_round()
        if rnd is not None and not rnd.target_models.exists():
            rnd.target_models.add(model)
    return trained
