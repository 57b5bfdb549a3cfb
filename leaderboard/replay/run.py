"""Replay real adversarial rounds through the platform's own services.

``manage.py replay`` calls ``replay()``. Nothing here trains, scores or stores on
its own: examples are written with ``create_example`` against the live target,
verified with owner validations (``validate_example``), models are trained and
evaluated by Jobs (``start_training``, which queues the evaluation) and promoted
with ``cycle.promote``. Jobs run where jobs run: on the embedded background
thread, or on a Celery worker when a broker is configured.

The run, for a task with rounds 0..R in its plan (``data.build_plan``):

1. a fresh task (``<task>-replay-<mode>`` by default) with the shipped task's
   config; round 0 gets the static data (train, dev, test), rounds 1..R are
   created as draft rounds holding their test splits, so every evaluation
   covers every round's test set from the start;
2. M0 is trained on round 0 and promoted: round 1 opens with M0 as its target;
3. for r = 1..R: round r's training examples are written against the live
   target M(r-1) (which records the model error rate at collection), verified
   by the replay's researcher, M(r) is trained, evaluated and promoted;
4. every model is scored on the functional suites (HateCheck, HatemojiCheck).

Two training strategies: ``continue`` (default) fine-tunes M(r-1) on round r's
verified examples plus as many round-0 examples, a fixed sample, rehearsed so the
static data is not forgotten (fast on CPUs: each model sees twice the new round);
``retrain`` trains each model from the backbone on round 0 and rounds 1..r, as the
ANLI and DynaHate papers did (slow on CPUs: every model sees all the data again).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from annotation.datasets import import_records
from annotation.importers import Record
from annotation.services.examples import create_example
from annotation.services.validation import validate_example
from core.errors import DomainError
from tasks import services as task_services
from tasks.models import Context, ModelVersion, Task
from tasks.registry import ref_for

from .. import cycle, services
from .data import ReplayPlan, build_plan, plan_summary

STRATEGIES = ("continue", "retrain")
# Epochs: the static data is large (15-20k rows in full mode), one pass is enough;
# the rounds are small.
DEFAULTS = {
    "fast": {"static_epochs": 2, "epochs": 2, "batch_size": 16, "lr": 5e-5},
    "full": {"static_epochs": 1, "epochs": 2, "batch_size": 16, "lr": 5e-5},
}
REPLAY_RESEARCHER = "replay-researcher"
REPLAY_ANNOTATOR = "replay-annotator"


class ReplayError(Exception):
    pass


@dataclass
class Options:
    task: str
    data_dir: Path
    mode: str = "fast"
    limit: int | None = None
    seed: int = 0
    strategy: str = "continue"
    task_slug: str | None = None
    replace: bool = False
    rounds: int | None = None  # replay rounds 1..rounds only
    train: dict = field(default_factory=dict)
    job_timeout: float | None = None


def _users():
    User = get_user_model()
    researcher, created = User.objects.get_or_create(username=REPLAY_RESEARCHER, defaults={"is_staff": True})
    if created:
        researcher.set_unusable_password()
        researcher.save()
    annotator, created = User.objects.get_or_create(username=REPLAY_ANNOTATOR)
    if created:
        annotator.set_unusable_password()
        annotator.save()
    return researcher, annotator


def _fresh_task(options: Options, researcher) -> Task:
    slug = options.task_slug or f"{options.task}-replay-{options.mode}"
    existing = Task.objects.filter(slug=slug).first()
    if existing is not None:
        if not options.replace:
            raise ReplayError(f"Task {slug} exists already (an earlier replay?). Pass --replace to delete it "
                              "and its data first, or --task-slug for another name.")
        existing.delete()
    definition = task_services.load_definition(options.task)
    definition = {**definition, "slug": slug,
                  "name": f"{definition['name']} (replay, {options.mode})",
                  "goal": f"A replay of real adversarial rounds through the platform ({options.mode} mode)."}
    task, _ = task_services.create_task(definition, owners=[researcher])
    return task


class Replay:
    def __init__(self, options: Options, progress: Callable[[str], None] = print):
        if options.mode not in DEFAULTS:
            raise ReplayError(f"Unknown mode {options.mode!r}; use fast or full.")
        if options.strategy not in STRATEGIES:
            raise ReplayError(f"Unknown strategy {options.strategy!r}; use one of {', '.join(STRATEGIES)}.")
        self.options = options
        self.say = progress
        self.train = {**DEFAULTS[options.mode], **{k: v for k, v in options.train.items() if v is not None}}

    # --- jobs -------------------------------------------------------------------

    def train_model(self, task: Task, name: str, *, rounds: list[int], parent: ModelVersion | None, epochs: int,
                    static_limit: int | None = None) -> tuple[ModelVersion, float]:
        job = services.start_training(
            task, name=name, rounds=rounds, selection="verified", mode="full", parent=parent,
            static_limit=static_limit, evaluate=True, user=self.researcher, epochs=epochs,
            batch_size=self.train["batch_size"], lr=self.train["lr"], seed=self.options.seed)
        try:
            model = services.wait_for_trained_model(job, lambda line: self.say(f"  [{name}]{line}"),
                                                    self.options.job_timeout)
        except services.JobDidNotSucceed as exc:
            raise ReplayError(f"{name}: {exc}") from None
        job.refresh_from_db()  # succeeded: it has started and finished
        return model, (job.finished_at - job.started_at).total_seconds()

    # --- data -------------------------------------------------------------------

    def import_split(self, task: Task, number: int, records: list[Record], split: str | None) -> int:
        report = import_records(task, records, round_number=number, split=split)
        if report.errors:
            self.say(f"  round {number}: {len(report.errors)} row(s) refused on import, e.g. {report.errors[0]}")
        return report.created

    def context_for(self, task: Task, rnd, record: Record, cache: dict) -> Context:
        """The record's own context (NLI premise), or one context per round for tasks
        whose source rows have none (hate speech: the statement is the whole example)."""
        if record.context:
            key = record.context["external_id"]
            fields = record.context["fields"]
        else:
            key = f"replay-round-{rnd.number}"
            names = task.parsed_config.context_field_names
            fields = {name: f"Replay of {self.plan.rounds[rnd.number].name}" for name in names}
        if key not in cache:
            task_services.add_contexts(task, [{"external_id": key, "fields": fields, "tag": "replay"}], round=rnd)
            cache[key] = Context.objects.get(task=task, external_id=key)
        return cache[key]

    def promote(self, task, model):
        """The replay promotes every model, as the rounds it replays did, even one below the
        majority-class answer (the platform refuses that without the override); it says so."""
        try:
            cycle.check_above_baseline(task, model)
        except DomainError as exc:
            self.say(f"note: {exc.message.split(': as a target')[0]}; the replay promotes it all the same")
        return cycle.promote(task, model, allow_below_baseline=True, user=self.researcher)

    def collect(self, task: Task, rnd, records: list[Record]) -> dict:
        """Write the round's examples against its live target, then verify them."""
        contexts: dict = {}
        created, refused, fooled = [], [], 0
        for record in records:
            context = self.context_for(task, rnd, record, contexts)
            try:
                result = create_example(task, self.annotator, context_id=context.pk, inputs=record.inputs,
                                        target=record.target, metadata={"replay_uid": record.external_uid})
            except DomainError as exc:
                refused.append(f"{record.external_uid}: {exc}")
                continue
            created.append(result.example.pk)
            fooled += bool(result.example.fooled)
        for example_id in created:
            validate_example(example_id, self.researcher, label="correct", reason="replay: validated at source")
        if refused:
            self.say(f"  round {rnd.number}: {len(refused)} example(s) refused, e.g. {refused[0]}")
        return {"submitted": len(created), "fooled": fooled,
                "model_error_rate": fooled / len(created) if created else None, "refused": len(refused)}

    # --- scoring ----------------------------------------------------------------

    def evaluations(self, model: ModelVersion) -> dict:
        names = {r.number: r.name for r in self.plan.rounds}
        metric = services.primary_metric(model.task)
        out = {}
        for evaluation in model.evaluations.filter(split="test").select_related("round").order_by("round__number"):
            name = names.get(evaluation.round.number, f"round {evaluation.round.number}")
            out[name] = {"accuracy": evaluation.metrics.get(metric),
                         "macro_f1": evaluation.metrics.get("macro_f1"),
                         "num_examples": evaluation.num_examples}
        return out

    def functional(self, task: Task, model: ModelVersion, upto_round: int) -> dict:
        """Accuracy on each functional suite in use by ``upto_round``, overall and per functionality."""
        import ml

        results = {}
        for suite in self.plan.suites:
            if suite.from_round > upto_round or not suite.records:
                continue
            config = task.parsed_config
            rows = [services.example_row(config, r.context["fields"] if r.context else None, r.inputs, r.target)
                    for r in suite.records]
            predictions = []
            for start in range(0, len(rows), 64):
                predictions += ml.predict(ref_for(model), [r["inputs"] for r in rows[start:start + 64]])
            right = [p["label"] == row["label"] for p, row in zip(predictions, rows, strict=True)]
            groups: dict[str, list[bool]] = {}
            for record, ok in zip(suite.records, right, strict=True):
                groups.setdefault(str(record.metadata.get(suite.group_field, "")), []).append(ok)
            results[suite.name] = {
                "accuracy": sum(right) / len(right), "num_examples": len(right),
                "by_functionality": {k: {"accuracy": sum(v) / len(v), "num_examples": len(v)}
                                     for k, v in sorted(groups.items())},
            }
        if results:
            model.refresh_from_db(fields=["metrics"])
            model.metrics["functional"] = {k: {"accuracy": v["accuracy"], "num_examples": v["num_examples"]}
                                           for k, v in results.items()}
            model.save(update_fields=["metrics"])
        return results

    # --- the run ----------------------------------------------------------------

    def run(self) -> dict:
        options = self.options
        started_at, started = timezone.now(), time.monotonic()
        self.plan: ReplayPlan = build_plan(options.task, Path(options.data_dir), mode=options.mode,
                                           limit=options.limit, seed=options.seed)
        rounds = self.plan.rounds if options.rounds is None else self.plan.rounds[:options.rounds + 1]
        self.researcher, self.annotator = _users()
        with transaction.atomic():
            task = _fresh_task(options, self.researcher)
            task_services.ensure_static_round(task)
        self.say(f"task {task.slug}: rounds " + ", ".join(f"{r.number} {r.name}" for r in rounds)
                 + f"; strategy {options.strategy}; training {self.train}")
        static = rounds[0]
        self.import_split(task, 0, static.train + static.dev + static.test, None)
        for data in rounds[1:]:
            rnd = task_services.create_round(task, number=data.number, description=f"Replay of {data.name}")
            self.import_split(task, rnd.number, data.test, "test")

        report = {"task": options.task, "slug": task.slug, "mode": options.mode, "strategy": options.strategy,
                  "training": self.train, "started_at": started_at.isoformat(), "data": plan_summary(self.plan),
                  "rounds": []}
        prefix = options.task
        self.say(f"round 0: training M0 on {len(static.train)} static examples")
        model, seconds = self.train_model(task, f"{prefix}-m0", rounds=[], parent=None,
                                          epochs=self.train["static_epochs"])
        report["rounds"].append({"number": 0, "name": static.name, "model": model.name, "collection": None,
                                 "train_seconds": round(seconds, 1), "evaluations": self.evaluations(model),
                                 "functional": self.functional(task, model, 0)})
        for data in rounds[1:]:
            target = model
            rnd = self.promote(task, target)
            if rnd.number != data.number:
                raise ReplayError(f"Promoting {target.name} opened round {rnd.number}, expected {data.number}.")
            self.say(f"round {rnd.number} ({data.name}): writing {len(data.train) + len(data.dev)} examples "
                     f"against {target.name}")
            collection = self.collect(task, rnd, data.train + data.dev)
            collection["target"] = target.name
            self.say(f"round {rnd.number}: {collection['fooled']} of {collection['submitted']} fooled "
                     f"{target.name} ({100 * (collection['model_error_rate'] or 0):.1f}%)")
            name = f"{prefix}-m{data.number}"
            if options.strategy == "continue":
                model, seconds = self.train_model(task, name, rounds=[data.number], parent=target,
                                                  static_limit=collection["submitted"], epochs=self.train["epochs"])
            else:
                model, seconds = self.train_model(task, name, rounds=[r.number for r in rounds[1:data.number + 1]],
                                                  parent=None, epochs=self.train["epochs"])
            report["rounds"].append({
                "number": data.number, "name": data.name, "model": model.name, "collection": collection,
                "train_seconds": round(seconds, 1), "evaluations": self.evaluations(model),
                "functional": self.functional(task, model, data.number)})
        final = self.promote(task, model)
        self.say(f"promoted {model.name}: round {final.number} is open")
        # Earlier models were evaluated before later rounds' examples were verified; their
        # test sets were there from the start, so every model has every round's column.
        report["seconds"] = round(time.monotonic() - started, 1)
        return report


def replay(options: Options, progress: Callable[[str], None] = print) -> dict:
    return Replay(options, progress).run()
