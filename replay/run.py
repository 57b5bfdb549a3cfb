# Long on purpose: one seed's replay is one object (data, the adversarial chain, the control chains),
# read top to bottom.
"""Replay real adversarial rounds through the platform's own services.

``manage.py replay`` calls ``replay()``. Nothing here trains, scores or stores on
its own: examples are written with ``create_example`` against the live target,
verified with owner validations (``validate_example``), models are trained and
evaluated by Jobs (``start_training``, which queues the evaluation) and promoted
with ``promotion.promote``. The evaluations score performance only (``measure=False``:
the leaderboard's throughput, memory, robustness and fairness would cost several
times the scoring, and the replay reports accuracy). Jobs run where jobs run: on the embedded background
thread, or on a Celery worker when a broker is configured.

The run, for a task with rounds 0..R in its plan (``data.build_plan``):

1. a fresh task (``<task>-replay-<mode>`` by default) with the shipped task's
   config; round 0 gets the static data (train, dev, test), rounds 1..R are
   created as draft rounds holding their test splits, so every evaluation
   covers every round's test set from the start;
2. M0 is trained on round 0 and promoted: round 1 opens with M0 as its target;
3. for r = 1..R: round r's training examples (written by the data set's
   annotators against other models) are submitted with M(r-1) as the live
   target, which records what it gets wrong (M(r-1)'s error on round r's
   examples), verified by the replay's researcher, M(r) is trained, evaluated
   and promoted;
4. every model is scored on the functional suites (HateCheck, HatemojiCheck).

Three training strategies:

- ``cumulative`` (default) fine-tunes M(r-1) on round r's verified examples plus
  as many again (as many as the round submitted, where the earlier data holds
  that many) from round 0 and every earlier round, an even fixed sample
  (``start_training(rehearse=...)``): each model learns from every round so far
  at up to twice the new round's cost;
- ``continue`` fine-tunes M(r-1) on round r plus as many round-0 examples only
  (earlier rounds are not rehearsed, and are forgotten);
- ``retrain`` trains each model from the backbone on round 0 and rounds 1..r, as
  the ANLI and DynaHate papers did (slow on CPUs: every model sees all the data).

The static control (``control="static"``): after the chain, a second chain
C(1..R) starts from M0 and learns, with the same strategy, backbone, epochs,
batch size and seed, from as many *static* examples as M(r) learnt adversarial
ones: fresh rows of round 0's data that M0 never saw (``plan.control_pool``),
round for round and split for split, with the same rehearsal counts. Its rows
are not the platform's examples, so it is trained in this process with
``training.train_and_register`` and evaluated by a job like every model.
The balanced control (``control="balanced"``) is the same chain with its static
rows resampled to each round's label shares (``controls``); ``control`` may
name both (``["static", "balanced"]``), each a chain of its own.

With several seeds, each seed replays on a task of its own (``<slug>-s<seed>``)
with the same data plan; ``replay.summary`` pools them.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

import ml
from annotation import onboarding
from annotation.datasets import import_records
from annotation.examples import create_example
from annotation.models import Example
from annotation.validation import validate_example
from core.errors import DomainError
from core.progress import Advance, counter
from datafiles.readers import Record
from leaderboard import promotion, training
from leaderboard.evaluation import start_evaluation
from leaderboard.jobs import JobDidNotSucceed, wait_for_success, wait_for_trained_model
from leaderboard.models import Evaluation
from leaderboard.rows import example_row
from leaderboard.sampling import group_keys, stable_hash
from registry.models import ModelVersion
from registry.services import ref_for
from tasks import services as task_services
from tasks.models import Context, Task

from .controls import BalancedSampler, control_names, label_shares
from .data import ReplayPlan, build_plan
from .summary import build_report

STRATEGIES = ("cumulative", "continue", "retrain")
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
    strategy: str = "cumulative"
    control: str | list[str] | None = None  # "static", "balanced" or both: also train those control chains
    seeds: int = 1  # training seeds seed, seed+1, ...; one task each
    backbone: str | None = None  # instead of DYNABENCH_BACKBONE (a name, or a directory on the workers)
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


def _fresh_task(options: Options, researcher, seed: int) -> Task:
    slug = options.task_slug or f"{options.task}-replay-{options.mode}"
    if options.seeds > 1:
        slug = f"{slug}-s{seed}"
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


def check_options(options: Options) -> None:
    if options.mode not in DEFAULTS:
        raise ReplayError(f"Unknown mode {options.mode!r}; use fast or full.")
    if options.strategy not in STRATEGIES:
        raise ReplayError(f"Unknown strategy {options.strategy!r}; use one of {', '.join(STRATEGIES)}.")
    try:
        control_names(options.control)
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    if not isinstance(options.seeds, int) or isinstance(options.seeds, bool) or not 1 <= options.seeds <= 10:
        raise ReplayError("--seeds must be a whole number from 1 to 10.")


def training_settings(options: Options) -> dict:
    return {**DEFAULTS[options.mode], **{k: v for k, v in options.train.items() if v is not None}}


class Replay:
    """One seed's replay: the adversarial chain M0..MR, then the static control's chain."""

    def __init__(self, options: Options, plan: ReplayPlan, seed: int, progress: Callable[[str], None] = print,
                 model_done: Callable[[], None] = lambda: None):
        check_options(options)
        self.options = options
        self.plan = plan
        self.seed = seed
        self.say, self.model_done = progress, model_done  # once per model scored
        self.train = training_settings(options)

    # --- jobs -------------------------------------------------------------------

    def train_model(self, task: Task, name: str, *, rounds: list[int], parent: ModelVersion | None, epochs: int,
                    static_limit: int | None = None, rehearse: int | None = None) -> tuple[ModelVersion, float]:
        job = training.start_training(
            task, name=name, rounds=rounds, selection="verified", mode="full", parent=parent,
            static_limit=static_limit, rehearse=rehearse, evaluate=True, measure=False, user=self.researcher,
            backbone=self.options.backbone if parent is None else None, epochs=epochs,
            batch_size=self.train["batch_size"], lr=self.train["lr"], seed=self.seed)
        try:
            model = wait_for_trained_model(job, lambda line: self.say(f"  [{name}]{line}"),
                                                    self.options.job_timeout)
        except JobDidNotSucceed as exc:
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
            promotion.check_above_baseline(task, model)
        except DomainError as exc:
            self.say(f"note: {exc.message.split(': as a target')[0]}; the replay promotes it all the same")
        return promotion.promote(task, model, allow_below_baseline=True, user=self.researcher,
                                 reason="The replay promotes every round's model, as the rounds it replays did.")

    def collect(self, task: Task, rnd, records: list[Record]) -> dict:
        """Write the round's examples against its live target, then verify them."""
        contexts: dict = {}
        created, refused, fooled = [], [], 0
        # The data set's own ids go with each example: training hashes them (never the
        # example's random uid), and a pair's or premise's examples share a group.
        groups = dict(zip((r.external_uid for r in records), group_keys(records), strict=True))
        for record in records:
            context = self.context_for(task, rnd, record, contexts)
            try:
                result = create_example(task, self.annotator, context_id=context.pk, inputs=record.inputs,
                                        target=record.target,
                                        metadata={"replay_uid": record.external_uid,
                                                  "replay_group": groups[record.external_uid]})
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

    def scores(self, model: ModelVersion) -> dict[str, list[float]]:
        """The model's stored per-example scores (1/0) on every test set, by test set name,
        in the plan's order of that set's records (so seeds and models line up)."""
        out = {}
        for evaluation in Evaluation.objects.filter(model_version=model, split="test").select_related("round"):
            if evaluation.round.number >= len(self.plan.rounds):
                continue
            data = self.plan.rounds[evaluation.round.number]
            uids = dict(Example.objects.filter(pk__in=evaluation.example_ids).values_list("pk", "external_uid"))
            by_uid = {uids[pk]: value for pk, value in zip(evaluation.example_ids, evaluation.per_example,
                                                            strict=True)}
            missing = [r.external_uid for r in data.test if r.external_uid not in by_uid]
            if missing:
                raise ReplayError(f"{model.name} was not scored on {len(missing)} of {data.name}'s test "
                                  f"examples, e.g. {missing[0]}")
            out[data.name] = [float(by_uid[r.external_uid]) for r in data.test]
        return out

    def functional(self, task: Task, model: ModelVersion, upto_round: int) -> dict:
        """Per-example scores (1/0) on each functional suite in use by ``upto_round``, with
        each record's functionality; the overall accuracies are stored on the model."""
        results = {}
        for suite in self.plan.suites:
            if suite.from_round > upto_round or not suite.records:
                continue
            config = task.parsed_config
            rows = [example_row(config, r.context["fields"] if r.context else None, r.inputs, r.target)
                    for r in suite.records]
            predictions = []
            for start in range(0, len(rows), 64):
                predictions += ml.predict(ref_for(model), [r["inputs"] for r in rows[start:start + 64]])
            results[suite.name] = {
                "scores": [float(p["label"] == row["label"]) for p, row in zip(predictions, rows, strict=True)],
                "groups": [str(r.metadata.get(suite.group_field) or "unknown") for r in suite.records],
                "clusters": suite.clusters(),  # templates: the bootstrap resamples them
            }
        if results:
            model.refresh_from_db(fields=["metrics"])
            model.metrics["functional"] = {
                name: {"accuracy": sum(v["scores"]) / len(v["scores"]), "num_examples": len(v["scores"])}
                for name, v in results.items()}
            model.save(update_fields=["metrics"])
        return results

    def scored(self, task: Task, model: ModelVersion, upto_round: int) -> dict:
        scores, functional = self.scores(model), self.functional(task, model, upto_round)
        self.model_done()
        return {"model": model.name, "scores": scores, "functional": functional}

    # --- the adversarial chain ---------------------------------------------------

    def run(self) -> dict:
        options, plan = self.options, self.plan
        started = time.monotonic()
        rounds = plan.rounds  # replay() has cut the plan to --rounds
        self.researcher, self.annotator = _users()
        with transaction.atomic():
            task = _fresh_task(options, self.researcher, self.seed)
            task_services.ensure_static_round(task)
            # The replay's annotator is held to the task's onboarding like anyone: it
            # takes it through the service, with the answers it knows.
            onboarding.take_with_known_answers(task, self.annotator)
        self.say(f"task {task.slug} (seed {self.seed}): rounds "
                 + ", ".join(f"{r.number} {r.name}" for r in rounds)
                 + f"; strategy {options.strategy}; training {self.train}")
        static = rounds[0]
        self.import_split(task, 0, static.train + static.dev + static.test, None)
        for data in rounds[1:]:
            rnd = task_services.create_round(task, number=data.number, description=f"Replay of {data.name}")
            self.import_split(task, rnd.number, data.test, "test")
        # A test row the importer refused is scored by no model: it leaves the plan (and
        # its reference lines) too, the same way for every seed.
        stored = set(Example.objects.filter(task=task, split="test").values_list("external_uid", flat=True))
        for data in rounds:
            kept = [r for r in data.test if r.external_uid in stored]
            if len(kept) < len(data.test):
                self.say(f"{data.name}: {len(data.test) - len(kept)} test row(s) were refused on import; "
                         f"scoring the other {len(kept)}")
                data.test = kept

        result = {"seed": self.seed, "slug": task.slug, "rounds": [], "controls": {}}
        prefix = options.task
        self.say(f"round 0: training M0 on {len(static.train)} static examples")
        model, seconds = self.train_model(task, f"{prefix}-m0", rounds=[], parent=None,
                                          epochs=self.train["static_epochs"])
        m0 = model
        result["rounds"].append({"number": 0, "name": static.name, "collection": None,
                                 "train_seconds": round(seconds, 1), "training": model.training_data,
                                 **self.scored(task, model, 0)})
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
            if options.strategy == "cumulative":
                model, seconds = self.train_model(task, name, rounds=[data.number], parent=target,
                                                  rehearse=collection["submitted"], epochs=self.train["epochs"])
            elif options.strategy == "continue":
                model, seconds = self.train_model(task, name, rounds=[data.number], parent=target,
                                                  static_limit=collection["submitted"], epochs=self.train["epochs"])
            else:
                model, seconds = self.train_model(task, name, rounds=[r.number for r in rounds[1:data.number + 1]],
                                                  parent=None, epochs=self.train["epochs"])
            result["rounds"].append({
                "number": data.number, "name": data.name, "collection": collection,
                "train_seconds": round(seconds, 1), "training": model.training_data,
                **self.scored(task, model, data.number)})
        final = self.promote(task, model)
        self.say(f"promoted {model.name}: round {final.number} is open")
        for kind in control_names(options.control):
            result["controls"][kind] = self.static_control(task, m0, result["rounds"], kind)
        result["seconds"] = round(time.monotonic() - started, 1)
        return result

    # --- the static control ------------------------------------------------------

    def static_control(self, task: Task, m0: ModelVersion, adversarial: list[dict],
                       kind: str = "static") -> list[dict]:
        """C(1..R): M(r)'s recipe with fresh static rows in place of round r's examples
        (``kind="balanced"``: resampled to the label shares of round r's rows).

        Each count is read from what M(r) learnt (its ``training_data``): as many new
        training and held-out dev rows from the control pool, the same rehearsal counts
        per earlier round (round 0's rows from M0's training set, round k's from C(k)'s
        new rows), and round 0's dev rows, so every C(r) takes the same number of
        training steps as M(r)."""
        config = task.parsed_config
        static = self.plan.rounds[0]

        def rows(records):
            return [example_row(config, r.context["fields"] if r.context else None, r.inputs, r.target)
                    for r in records]

        def by_hash(record):
            return stable_hash(self.seed, "control-rehearsal", record.external_uid)

        strategy = self.options.strategy
        pool = list(self.plan.control_pool)
        cursor = 0
        sampler = BalancedSampler(pool) if kind == "balanced" else None
        new_rows: dict[int, list] = {0: list(static.train)}  # round -> the rows its model learnt as new
        new_dev: dict[int, list] = {}
        parent, out = m0, []
        for entry in adversarial[1:]:
            number, counts = entry["number"], entry["training"].get("counts", {})
            kept, held = counts["rounds"]["train"], counts["rounds"]["dev"]
            if strategy == "retrain":  # M(r)'s counts cover rounds 1..r: the new ones are the rest
                kept -= sum(len(v) for k, v in new_rows.items() if k)
                held -= sum(len(v) for v in new_dev.values())
            if sampler is not None:  # the round's label shares, the pool's rows (repeated when they run out)
                data = self.plan.rounds[number]
                shares = label_shares(data.train + data.dev)
                fresh, fresh_dev = sampler.draw(kept, shares), sampler.draw(held, shares)
            else:
                if kept < 0 or held < 0 or cursor + kept + held > len(pool):
                    raise ReplayError(f"The static control pool ({len(pool)} rows) cannot match round {number}.")
                fresh, fresh_dev = pool[cursor:cursor + kept], pool[cursor + kept:cursor + kept + held]
                cursor += kept + held
            if strategy == "cumulative":
                shares = {int(k): v for k, v in counts["rehearsal"].items()}
                train = [r for k in sorted(new_rows) for r in sorted(new_rows[k], key=by_hash)[:shares.get(k, 0)]]
                train += fresh
                dev = static.dev + fresh_dev
            elif strategy == "continue":
                train = sorted(static.train, key=by_hash)[:counts["static"]["train"]] + fresh
                dev = static.dev + fresh_dev
            else:
                train = [r for k in sorted(new_rows) for r in new_rows[k]] + fresh
                dev = static.dev + [r for k in sorted(new_dev) for r in new_dev[k]] + fresh_dev
            new_rows[number], new_dev[number] = fresh, fresh_dev
            summary = {"source": f"{kind} control", "control": kind, "control_for": entry["model"],
                       "strategy": strategy, "seed": self.seed,
                       "counts": {"train": len(train), "dev": len(dev), "fresh": len(fresh)},
                       "fresh_labels": dict(sorted(Counter(r.label for r in fresh).items()))}
            if sampler is not None:
                summary["repeated_so_far"] = sampler.repeated
            name = f"{self.options.task}-{'control' if kind == 'static' else kind + '-control'}-c{number}"
            self.say(f"{kind} control, round {number}: training {name} on {len(train)} rows "
                     f"({len(fresh)} fresh static rows in place of {entry['name']})")
            started = time.monotonic()
            model = training.train_and_register(
                task, {"train": rows(train), "dev": rows(dev)}, name=name, training_data=summary,
                rounds=task.rounds.filter(number=0), user=self.researcher,
                progress=lambda _percent, message, n=name: self.say(f"  [{n}] {message}"),
                parent=None if strategy == "retrain" else parent,
                **({"backbone": self.options.backbone} if strategy == "retrain" and self.options.backbone else {}),
                epochs=self.train["epochs"], batch_size=self.train["batch_size"], lr=self.train["lr"],
                seed=self.seed)
            seconds = time.monotonic() - started
            job = start_evaluation(model, user=self.researcher, measure=False)
            try:
                wait_for_success(job, "evaluate", lambda line, n=name: self.say(f"  [{n}]{line}"),
                                          self.options.job_timeout)
            except JobDidNotSucceed as exc:
                raise ReplayError(f"{name}: {exc}") from None
            out.append({"number": number, "name": entry["name"], "control_for": entry["model"],
                        "train_seconds": round(seconds, 1), "training_rows": len(train),
                        "fresh_labels": summary["fresh_labels"],
                        **self.scored(task, model, number)})
            parent = model
        return out


def replay(options: Options, progress: Callable[[str], None] = print, advance: Advance | None = None) -> dict:
    """Replay ``options.seeds`` seeds on one data plan; the pooled report (``summary``).
    ``advance(label, done, total)`` counts the models trained and evaluated, every seed's."""
    return replay_seeds(options, progress, advance)[0]


def replay_seeds(options: Options, progress: Callable[[str], None] = print,
                 advance: Advance | None = None) -> tuple[dict, list[dict]]:
    """``replay``'s pooled report, and each seed's own report (the same shape, one seed)."""
    check_options(options)
    started_at, started = timezone.now(), time.monotonic()
    plan = build_plan(options.task, Path(options.data_dir), mode=options.mode, limit=options.limit,
                      seed=options.seed)
    if options.rounds is not None:
        plan.rounds = plan.rounds[:options.rounds + 1]
    controls = control_names(options.control)
    per_seed = len(plan.rounds) + (len(plan.rounds) - 1) * len(controls)  # M0..MR, C1..CR per control
    done = counter("models trained and evaluated", options.seeds * per_seed, advance)
    runs, own = [], []
    for i in range(options.seeds):
        seed_started_at, seed_started = timezone.now(), time.monotonic()
        runs.append(Replay(options, plan, options.seed + i, progress, done).run())
        own.append((seed_started_at, round(time.monotonic() - seed_started, 1)))

    def report(chosen: list[dict], at, seconds: float) -> dict:
        return build_report(plan, chosen, task=options.task, mode=options.mode, strategy=options.strategy,
                            control=controls, training=training_settings(options),
                            started_at=at.isoformat(), seconds=seconds)

    pooled = report(runs, started_at, round(time.monotonic() - started, 1))
    return pooled, [report([run], at, seconds) for run, (at, seconds) in zip(runs, own, strict=True)]
