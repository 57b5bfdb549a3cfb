"""The demo a new user gets from ``make run``: idempotent, safe to rerun.

The four tasks with round 1 open, the shipped seed contexts, the shipped seed
examples in round 0 (each in its split: train and dev to learn from, test for
every evaluation), and per task a seed model: a training job on round 0, then an
evaluation job, then round 1's target once the evaluation succeeds. With
``background`` (``make run``) the jobs are only queued: the web process runs them
when it starts, so the site answers at once and the pages show their progress.

``bootstrap_demo(real_data=True)`` (``manage.py bootstrap_demo --real-data``)
gives NLI, sentiment and hate speech a round-0 target trained on real data from
``DYNABENCH_DATA_DIR`` instead of the shipped seed set (``REAL_DATA``): MNLI+SNLI
dev split 80/10/10 by premise; SST-2 train / dev / labelled test; Davidson split
80/10/10, its training rows balanced (5.8% of its tweets are hate speech). Each is
imported into round 0 (at most ``REAL_DATA_LIMIT`` rows of each split), trained
there for one epoch as a job, evaluated, and made the target of the next round:
round 1 if it has no target yet (a fresh demo), else, when an earlier plain demo
left the seed model as round 1's target, a promotion opens round 2 with it (an
open round's target never changes under its annotators). QA gets SQuAD v1.1 dev,
every question, split 80/10/10 by article, trained with ``QA_TRAINING`` under a time
budget (``settings.DYNABENCH_QA_TRAINING_MINUTES``): fine-tuning on SQuAD is slow on a
few CPU cores, so it trains for as long as that allows and keeps what it reached;
like every target it must clear its task's reference line (for QA the sliding-window
baseline on the same test questions) to become one. A task whose files are absent
keeps the seed model, with a note.

``bootstrap_demo(real_data=True, background=True)`` (``make run``) keeps the seed
models first, so the site works within minutes, and queues the real-data models
after them (``queue_real_models``): each imports its data into round 0 beside the
seed set and replaces the seed target only if it scores higher on the same test
examples.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from core.errors import DomainError
from core.progress import Advance, counted
from jobs.engine import held_for_the_server
from jobs.models import Job
from leaderboard import promotion, training
from leaderboard.evaluation import has_finished_evaluation, start_evaluation
from leaderboard.jobs import JobDidNotSucceed, wait_for_success, wait_for_trained_model
from registry.models import ModelVersion
from tasks import services
from tasks.models import Task
from tasks.services import SEED_DIR

from .jobs import train_static_model
from .static_data import (
    Source,
    StaticDataError,
    default_data_dir,
    dev_score,
    import_static_data,
    parse_source,
    read_static_data,
    thinned,
)
from .training import DEMO_MODEL_NAME

DEMO_ADMIN_USERNAME = "admin"
REAL_MODEL_NAME = "round0-real"
# At most this many rows of each split: one epoch of them takes minutes a task on two
# idle CPU cores, and several times longer on cores shared with other work
# (bench/baselines.py measures training speed).
REAL_DATA_LIMIT = 4000
REAL_DATA_TRAINING = {"epochs": 1, "batch_size": 16, "lr": 5e-5, "seed": 0}
# QA on SQuAD: the span head starts from nothing, so a higher rate and two epochs, cut
# short by the time budget (``max_minutes``, added from the settings when it is queued).
# bench/qa_training.py measures this recipe (its RECIPE; a test holds the two together).
QA_TRAINING = {"epochs": 2, "batch_size": 16, "lr": 1e-4, "seed": 0}


@dataclass(frozen=True)
class RealData:
    """What ``--real-data`` imports into a task's round 0: files relative to the data
    directory, ``PATH[:SPLIT]`` as ``train_model`` takes them."""

    format_name: str
    sources: tuple[str, ...]
    description: str
    dev_fraction: float = 0.1
    test_fraction: float = 0.1
    balance: bool = False
    limit: int | None = REAL_DATA_LIMIT  # rows of each split; None: all of them
    time_budget: bool = False  # trained for at most settings.DYNABENCH_QA_TRAINING_MINUTES

    def training(self) -> dict:
        """The recipe its model trains with (the caller's options go on top)."""
        if not self.time_budget:
            return dict(REAL_DATA_TRAINING)

        return {**QA_TRAINING, "max_minutes": settings.DYNABENCH_QA_TRAINING_MINUTES}


def real_data_for(slug: str, data_dir: Path | None) -> tuple[RealData | None, str]:
    """The real data ``slug`` gets from ``data_dir``, or None and the reason."""
    if data_dir is None:
        return None, "no data directory (DYNABENCH_DATA_DIR is unset or not a directory)"

    def have(name):
        return (data_dir / name).is_file()

    if slug == "nli":
        files = tuple(name for name in ("nli/mnli/dev.jsonl", "nli/snli/dev.jsonl") if have(name))
        if not files:
            return None, f"neither nli/mnli/dev.jsonl nor nli/snli/dev.jsonl under {data_dir}"
        return RealData("nli-jsonl", files, "MNLI+SNLI dev, split 80/10/10 by premise"), ""
    if slug == "sentiment":
        absent = [name for name in ("sst2/train_full.tsv", "sst2/dev.tsv") if not have(name)]
        if absent:
            return None, f"{', '.join(absent)} absent under {data_dir}"
        if have("sst2/test-labeled.tsv"):
            return RealData("sst2", ("sst2/train_full.tsv:train", "sst2/dev.tsv:dev", "sst2/test-labeled.tsv:test"),
                            "SST-2 train, dev and labelled test"), ""
        return RealData("sst2", ("sst2/train_full.tsv:train", "sst2/dev.tsv"),
                        "SST-2 train; its dev halved into dev and test", dev_fraction=0.5, test_fraction=0.5), ""
    if slug == "qa":
        if not have("squad/dev-v1.1.json"):
            return None, f"squad/dev-v1.1.json absent under {data_dir}"
        return RealData("squad", ("squad/dev-v1.1.json",), "SQuAD v1.1 dev, split 80/10/10 by article",
                        limit=None, time_budget=True), ""
    if slug == "hate":
        if not have("davidson/labeled_data.csv"):
            return None, f"davidson/labeled_data.csv absent under {data_dir}"
        return RealData("davidson", ("davidson/labeled_data.csv",),
                        "Davidson et al. 2017, split 80/10/10, training rows balanced", balance=True), ""
    return None, "no real data set for this task"


def active_training_job(task: Task, name: str = DEMO_MODEL_NAME) -> Job | None:
    """The training job of ``task``'s model ``name`` (the seed model by default) that is
    queued or running, if any."""
    return (Job.objects.filter(task=task, kind=Job.Kind.TRAIN_MODEL, status__in=Job.ACTIVE,
                               params__name=name).order_by("-pk").first())


def ensure_demo_models(slugs: Iterable[str], progress: Callable[[str], None] | None = None,
                       background: bool = False, advance: Advance | None = None, **train_options) -> list[str]:
    """A round-0 model trained on the shipped seed set (imported into round 0) for
    each task that has none, made the target of the open round once its evaluation
    succeeds. Each is a training job, then an evaluation job; a seed model left
    without a finished evaluation (an older demo) is evaluated.

    ``background``: queue the jobs and return (``make run`` serves at once; the web
    process runs them, ``jobs.engine.resume_queued_jobs``). Otherwise wait for them.
    Returns the models trained now (none with ``background``). ``advance(label, done,
    total)`` counts the tasks done (``core.progress``)."""
    if background:
        with held_for_the_server():
            return _ensure_demo_models(slugs, progress, background=True, advance=advance, **train_options)
    return _ensure_demo_models(slugs, progress, background=False, advance=advance, **train_options)


def _ensure_demo_models(slugs, progress, *, background: bool, advance: Advance | None, **train_options) -> list[str]:
    say = progress or (lambda message: None)
    trained = []
    for slug in counted(slugs, "seed models queued" if background else "seed models", advance):
        task = Task.objects.get(slug=slug)
        echo = thinned(lambda line, slug=slug: say(f"{slug}: {line}"))
        model = ModelVersion.objects.filter(task=task, name=DEMO_MODEL_NAME).first()
        try:
            if model is None:
                job = active_training_job(task) or _start_demo_training(task, say, train_options)
                if job is None or background:
                    continue
                model = wait_for_trained_model(job, echo)
                trained.append(str(model))
            elif not has_finished_evaluation(model):
                job = (Job.objects.filter(kind=Job.Kind.EVALUATE_MODEL, status__in=Job.ACTIVE,
                                          params__model_version=model.pk).first()
                       or start_evaluation(model, target_if_none=True))
                say(f"{slug}: {model} has no finished evaluation: evaluation job #{job.pk}")
                if background:
                    continue
                wait_for_success(job, "evaluate", echo)
        except JobDidNotSucceed as exc:
            say(f"{slug}: {exc}")
            continue
        if not background:
            promotion.target_if_none(model)
    return trained


def _start_demo_training(task: Task, say: Callable[[str], None], train_options: dict) -> Job | None:
    counts = training.static_training_counts(task)
    if not counts["train"]:
        say(f"{task.slug}: round 0 has no training examples; no seed model")
        return None
    options = {**training.DEMO_TRAINING, **training.DEMO_TRAINING_BY_TASK.get(task.slug, {}),
               **train_options}
    job = training.start_static_training(task, name=DEMO_MODEL_NAME, evaluate=True, target_if_none=True,
                                               **options)
    say(f"{task.slug}: training job #{job.pk} queued: {DEMO_MODEL_NAME} on round 0's {counts['train']} train "
        f"and {counts['dev']} dev examples, then its evaluation on {counts['test']} test examples")
    return job


@dataclass
class DemoReport:
    tasks_created: list[str] = field(default_factory=list)
    rounds_created: list[str] = field(default_factory=list)
    contexts_created: dict[str, int] = field(default_factory=dict)
    models_trained: list[str] = field(default_factory=list)
    examples_imported: dict[str, int] = field(default_factory=dict)  # seed examples into round 0, by task
    admin_password: str | None = None  # set only when the admin was created now

    @property
    def created_anything(self) -> bool:
        return bool(self.tasks_created or self.rounds_created or any(self.contexts_created.values())
                    or any(self.examples_imported.values()) or self.models_trained or self.admin_password)


def ensure_admin(report: DemoReport) -> None:
    User = get_user_model()
    if User.objects.filter(username=DEMO_ADMIN_USERNAME).exists():
        return
    password = os.environ.get("DJANGO_SUPERUSER_PASSWORD") or secrets.token_urlsafe(12)
    User.objects.create_superuser(DEMO_ADMIN_USERNAME, email="", password=password)
    from_env = os.environ.get("DJANGO_SUPERUSER_PASSWORD")
    report.admin_password = "(from DJANGO_SUPERUSER_PASSWORD)" if from_env else password


def ensure_real_model(task: Task, data: RealData, data_dir: Path, *, limit: int | None,
                      progress: Callable[[str], None], train_options: dict) -> tuple[ModelVersion, bool]:
    """The task's round-0 model trained on ``data`` (imported and trained unless it
    exists already), made a target if it is none yet. Returns (model, trained now)."""
    slug = task.slug
    model = ModelVersion.objects.filter(task=task, name=REAL_MODEL_NAME).first()
    trained = False
    if model is None:
        config = task.parsed_config
        static = read_static_data(
            data.format_name, [parse_source(source, base=data_dir) for source in data.sources],
            labels=config.kind.import_labels,
            dev_fraction=data.dev_fraction, test_fraction=data.test_fraction, limit=limit or data.limit,
            balance=data.balance)
        if not static.total:
            raise StaticDataError(f"no usable rows in {', '.join(data.sources)}")
        imported = import_static_data(task, static)
        counts = training.static_training_counts(task)
        progress(f"{slug}: round 0 <- {data.description}: {imported.created} rows imported "
                 f"({imported.skipped_duplicates} there already); it holds "
                 + ", ".join(f"{n} {split}" for split, n in counts.items()))
        errors = static.errors + imported.errors
        if errors:
            path, error = errors[0]
            progress(f"{slug}: {len(errors)} row(s) skipped, e.g. {path} line {error.line}: {error.message}")
        options = {**data.training(), **train_options}
        progress(f"{slug}: training {REAL_MODEL_NAME} on round 0 ({', '.join(f'{k} {v}' for k, v in options.items())})")
        model = train_static_model(task, name=REAL_MODEL_NAME, say=thinned(lambda line: progress(f"{slug}: {line}")),
                                   static_limit=limit or data.limit, **options)
        what, value = dev_score(model)
        progress(f"{slug}: {REAL_MODEL_NAME} {what} "
                 + (f"{value:.3f}" if isinstance(value, int | float) else "-"))
        trained = True
    if not model.target_of_rounds.exists():
        try:
            rnd, promoted = promotion.make_target(task, model)
        except DomainError as exc:  # e.g. below the majority-class answer: the earlier target stays
            progress(f"{slug}: {REAL_MODEL_NAME} cannot be a target: {exc.message}")
            return model, trained
        progress(f"{slug}: {REAL_MODEL_NAME} is the target of round {rnd.number}"
                 + (" (promoted: the earlier target's round closed)" if promoted else ""))
    return model, trained


def ensure_real_models(slugs, *, data_dir: Path | None, limit: int | None, progress: Callable[[str], None],
                       train_options: dict, advance: Advance | None = None) -> tuple[list[str], list[str]]:
    """Round-0 models on real data where the data is there. Returns (models trained,
    the slugs that fall back to the seed model)."""
    trained, fallback = [], []
    for slug in counted(slugs, "real-data models", advance):
        task = Task.objects.get(slug=slug)
        data, reason = real_data_for(slug, data_dir)
        if data is None:
            progress(f"{slug}: no real data ({reason}); it keeps the seed model")
            fallback.append(slug)
            continue
        try:
            model, now = ensure_real_model(task, data, data_dir, limit=limit,
                                           progress=progress, train_options=train_options)
        except StaticDataError as exc:
            progress(f"{slug}: real data unusable ({exc}); it keeps the seed model")
            fallback.append(slug)
            continue
        except DomainError as exc:  # e.g. an earlier run's model whose evaluation never finished
            progress(f"{slug}: {REAL_MODEL_NAME} cannot be a target: {exc.message}")
            continue
        if now:
            trained.append(str(model))
    return trained, fallback


def queue_real_models(slugs, *, data_dir: Path | None, limit: int | None, progress: Callable[[str], None],
                      train_options: dict, advance: Advance | None = None) -> None:
    """``make run``'s real-data targets, as jobs that run after the seed models' (the web
    process runs them in turn): each imports its task's real data into round 0 beside
    the seed set, trains ``round0-real`` there, evaluates it, and makes it the target
    if it beats the seed target on round 0's test set, both scored on the same
    examples (``promotion.compare_with_target``). Tasks without their files, and tasks
    that have the model or its job already, are skipped with a note."""
    for slug in counted(slugs, "real-data models queued", advance):
        task = Task.objects.get(slug=slug)
        data, reason = real_data_for(slug, data_dir)
        if data is None:
            progress(f"{slug}: no real data ({reason}); the seed target stays. manage.py fetch_data gets the "
                     "data sets")
            continue
        model = ModelVersion.objects.filter(task=task, name=REAL_MODEL_NAME).first()
        if model is not None:
            where = ", ".join(f"round {r.number}" for r in model.target_of_rounds.all())
            progress(f"{slug}: {REAL_MODEL_NAME} exists" + (f" (the target of {where})" if where else
                                                           " (it did not beat the seed target)"))
            continue
        options = {**data.training(), **train_options}
        what = (f"imports {data.description} into round 0, trains {REAL_MODEL_NAME} there"
                + (f" for at most {options['max_minutes']} minutes" if options.get("max_minutes") else "")
                + ", and makes it the target if it beats the seed target and clears the reference line")
        job = active_training_job(task, REAL_MODEL_NAME)
        if job is not None:
            progress(f"{slug}: job #{job.pk} {what}")
            continue
        spec = {"name": REAL_MODEL_NAME, "evaluate": True, "promote_if_better": True,
                "import_data": {"format": data.format_name,
                                "sources": [str(data_dir / source) for source in data.sources],
                                "dev_fraction": data.dev_fraction, "test_fraction": data.test_fraction,
                                "limit": limit or data.limit, "balance": data.balance,
                                "description": data.description},
                **options}
        # One training job per task at a time: behind the seed model's, it follows that one.
        before = Job.objects.filter(task=task, kind=Job.Kind.TRAIN_MODEL, status=Job.Status.QUEUED).first()
        if before is not None:
            Job.objects.filter(pk=before.pk).update(params={**before.params, "then_train": spec})
            progress(f"{slug}: after job #{before.pk}, a training job {what}")
            continue
        try:
            job = training.start_static_training(task, **spec)
        except DomainError as exc:  # e.g. a researcher's training job is running
            progress(f"{slug}: no real-data target for now: {exc.message}")
            continue
        progress(f"{slug}: job #{job.pk} {what}")


def import_seed_examples(task: Task) -> int:
    """The shipped seed examples of ``task`` (``tasks/seed/examples``) into round 0, each
    in its own split: train and dev for the round-0 model to learn from, test for
    every evaluation to score on. Known rows are skipped. Returns the rows created."""
    path = SEED_DIR / "examples" / f"{task.slug}.jsonl"
    if not path.is_file():
        return 0
    config = task.parsed_config
    data = read_static_data("seed", [Source(path)],
                            labels=config.kind.import_labels)
    if data.errors:
        where, error = data.errors[0]
        raise StaticDataError(f"{where} line {error.line}: {error.message}")
    return import_static_data(task, data).created


def bootstrap_demo(*, slugs=None, with_models: bool = True, progress=None,
                   train_options: dict | None = None, real_data: bool = False, real_data_limit: int | None = None,
                   data_dir: Path | None = None, seed_examples: bool = True, background: bool = False,
                   advance: Advance | None = None) -> DemoReport:
    """``real_data``: see the module docstring; ``data_dir`` defaults to DYNABENCH_DATA_DIR.
    ``seed_examples``: import the shipped seed examples into round 0 (``import_seed_examples``).
    ``background``: queue the seed models' jobs and return (see ``ensure_demo_models``); with
    ``real_data`` too, queue the real-data targets' jobs after them (``queue_real_models``).
    ``train_options`` apply to every model trained (tests make them tiny). ``advance(label, done,
    total)`` counts the tasks set up, then each kind of model, task by task (``core.progress``)."""
    report = DemoReport()
    data_dir = Path(data_dir) if data_dir else default_data_dir()
    # A task that gets real data keeps its round 0 for it: the seed set would mix into
    # what its real model learns from and is scored on. In the background (``make run``)
    # the seed model comes first, so the seed set stays and the real data joins it.
    real = {slug for slug in slugs or services.DEFAULT_TASK_SLUGS
            if real_data and with_models and not background and real_data_for(slug, data_dir)[0] is not None}
    with transaction.atomic():
        ensure_admin(report)
        for slug in counted(slugs or services.DEFAULT_TASK_SLUGS, "demo tasks set up", advance):
            task, created = services.create_task(services.load_definition(slug))
            if created:
                report.tasks_created.append(slug)
            _round, round_created = services.ensure_first_round(task)
            if round_created:
                report.rounds_created.append(f"{slug} round 1")
            created_contexts, _ = services.add_contexts(task, services.read_seed_contexts(slug))
            report.contexts_created[slug] = created_contexts
            if seed_examples and slug not in real:
                report.examples_imported[slug] = import_seed_examples(task)
    if with_models and background:
        report.models_trained += ensure_demo_models(slugs or services.DEFAULT_TASK_SLUGS, progress=progress,
                                                    background=True, advance=advance, **(train_options or {}))
        if real_data:
            with held_for_the_server():
                queue_real_models(slugs or services.DEFAULT_TASK_SLUGS, data_dir=data_dir, limit=real_data_limit,
                                  progress=progress or (lambda message: None), train_options=train_options or {},
                                  advance=advance)
    elif with_models:
        seed_slugs = list(slugs or services.DEFAULT_TASK_SLUGS)
        if real_data:
            report.models_trained, seed_slugs = ensure_real_models(
                seed_slugs, data_dir=data_dir, limit=real_data_limit,
                progress=progress or (lambda message: None), train_options=train_options or {}, advance=advance)
            for slug in set(seed_slugs) & real:  # its real data was unusable: the seed model learns the seed set
                if seed_examples:
                    report.examples_imported[slug] = import_seed_examples(Task.objects.get(slug=slug))
        report.models_trained += ensure_demo_models(seed_slugs, progress=progress, background=background,
                                                    advance=advance, **(train_options or {}))
    return report
