"""A round-0 model from data set files: the workflow behind ``manage.py train_model``.

Check the request, read the files into round 0's splits (``static_data``), import
them, train a model on round 0 as a job and wait for it and its evaluation, and with
``target`` make it the target of the task's next round. A refusal raises a
``DomainError`` (or ``StaticDataError`` for files that cannot be used) whose message
is said as it is; nothing is written before the files are read and found usable.

Progress goes to ``say(line, tone)``: ``tone`` is ``""`` for a plain line,
``"warning"`` or ``"success"`` for lines a terminal may colour, and ``"job"`` for the
jobs' own log lines; the training job's steps also go to ``advance(label, done,
total)`` (``core.progress``), read from its step lines (``training_step``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.db import transaction

from annotation.datasets import DatasetImportError, check_format
from core.errors import Conflict, DomainError, NotFound
from core.progress import Advance
from datafiles.readers import FORMATS
from registry.models import ModelVersion
from tasks.models import STATIC_ROUND, Task

from . import promotion, training
from .jobs import train_static_model
from .rows import primary_metric
from .static_data import (
    Source,
    StaticData,
    StaticDataError,
    dev_score,
    evaluation_table,
    import_static_data,
    parse_source,
    read_static_data,
    training_step,
)

SHOWN_ERRORS = 20  # malformed or refused rows listed one by one; the rest are counted

Say = Callable[..., None]


def _print(line: str, tone: str = "") -> None:
    print(line)


def train_round0_model(task_slug: str, format_name: str, paths: Sequence[str], *, split: str | None = None,
                       dev_fraction: float = 0.1, test_fraction: float = 0.1, limit: int | None = None,
                       balance: bool = False, name: str | None = None, mode: str = "full",
                       options: dict | None = None, target: bool = False, override: str = "",
                       job_timeout: float | None = None, say: Say = _print,
                       advance: Advance | None = None) -> ModelVersion:
    """Import ``paths`` (``PATH`` or ``PATH:SPLIT``, all in ``format_name``) into the task's
    round 0, train ``name`` on it with ``mode`` and ``options`` (checked already:
    ``training.check_training_options``), evaluate it, and with ``target`` make it the
    task's next target (``override``: the reason to do so where the promotion rules
    refuse). Returns the registered model."""
    task = Task.objects.filter(slug=task_slug).first()
    if task is None:
        known = ", ".join(Task.objects.order_by("slug").values_list("slug", flat=True)) or "(none)"
        raise NotFound(f"Unknown task {task_slug!r}. Known tasks: {known}.")
    if format_name not in FORMATS:
        raise NotFound(f"Unknown format {format_name!r}. Known formats: {', '.join(FORMATS)}.")
    try:
        check_format(task, format_name)
    except DatasetImportError as exc:
        raise Conflict(str(exc)) from None
    name = name or training.default_static_model_name(task, format_name)
    if ModelVersion.objects.filter(task=task, name=name).exists():
        raise Conflict(f"Task {task_slug} already has a model named {name!r}; choose another --name.")
    options = options or {}
    sources = [parse_source(path) for path in paths]
    missing = [str(s.path) for s in sources if not s.path.is_file()]
    if missing:
        raise NotFound(f"No such file: {', '.join(missing)}")

    say(f"Task {task.slug}, format {format_name}: {len(sources)} file(s) into round {STATIC_ROUND} "
        "(static data).")
    data = read_static_data(format_name, sources, labels=task.parsed_config.kind.import_labels,
                            dev_fraction=dev_fraction, test_fraction=test_fraction, split=split, limit=limit,
                            balance=balance)
    for line in read_summary(data, sources, split, dev_fraction, test_fraction):
        say(line)
    if not data.total:
        raise StaticDataError(f"No usable rows in {', '.join(str(s.path) for s in sources)}: nothing to import "
                              "or train on.")
    if transaction.get_connection().in_atomic_block:
        raise Conflict("train_model waits for its jobs, which start when the data is committed: "
                       "run it outside a transaction.")

    imported = import_static_data(task, data)
    say(f"Imported into {task.slug} round {STATIC_ROUND}: {imported.created} created, "
        f"{imported.skipped_duplicates} already there, {len(imported.errors)} refused.")
    errors = data.errors + imported.errors
    if errors:
        say(f"Malformed or refused rows, skipped ({len(errors)}):", "warning")
        for path, error in errors[:SHOWN_ERRORS]:
            say(f"  {path} line {error.line}: {error.message}")
        if len(errors) > SHOWN_ERRORS:
            say(f"  ... and {len(errors) - SHOWN_ERRORS} more")
    counts = training.static_training_counts(task)
    say(f"Round {STATIC_ROUND} now holds " + ", ".join(f"{n} {s}" for s, n in counts.items())
        + " usable examples.")

    settings_text = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in options.items()) or "the trainer's defaults"
    sample = f" (a fixed sample of at most {limit} train examples)" if limit else ""
    say(f"Training {name} on round {STATIC_ROUND}{sample}: {training.MODES[mode]}, {settings_text}.")

    def job_log(line: str) -> None:
        say(line, "job")
        steps = training_step(line)
        if steps and advance is not None:
            advance(f"training {name}", *steps)

    model = train_static_model(task, name=name, say=job_log, mode=mode, static_limit=limit,
                               job_timeout=job_timeout, **options)

    what, value = dev_score(model)
    score = f"{value:.3f}" if isinstance(value, int | float) else "- (no dev examples)"
    say(f"Registered {model.name} (#{model.pk}): {what} {score}.", "success")
    say(f"Evaluation on each round's test split ({primary_metric(task)}):")
    for line in evaluation_table(model):
        say(line)
    if target:
        try:
            rnd, promoted = promotion.make_target(task, model, allow_below_baseline=bool(override.strip()),
                                                  reason=override)
        except DomainError as exc:
            raise Conflict(f"{model.name} was trained, but cannot be a target: {exc.message}") from exc
        how = "opened by promotion" if promoted else "open, had no target"
        say(f"{model.name} is the target of {rnd} ({how}).", "success")
    return model


def read_summary(data: StaticData, sources: Sequence[Source], split: str | None, dev_fraction: float,
                 test_fraction: float) -> list[str]:
    """What was read: each file's rows and split rule, what was left out, and the rows
    per split and label."""
    lines = []
    for source in sources:
        rule = (f"all {split}" if split else f"all {source.split}" if source.split
                else "the file's splits" if FORMATS[data.format_name].has_split
                else f"dev {dev_fraction:g}, test {test_fraction:g} by hash")
        lines.append(f"  {source.path}: {data.rows_read.get(source.path, 0)} rows read; splits: {rule}")
    if FORMATS[data.format_name].has_split and not split and not all(s.split for s in sources):
        lines.append(f"  (rows without a split column value: dev {dev_fraction:g}, test {test_fraction:g} by hash)")
    if data.duplicates:
        lines.append(f"  {data.duplicates} duplicate row(s) (the same id twice) left out")
    if data.rounds_ignored:
        lines.append(f"  {data.rounds_ignored} row(s) name a round other than 0: they go to round 0 all the same")
    left_out = sum(data.left_out.values())
    if left_out:
        lines.append(f"  {left_out} row(s) over --limit{' or the balance' if data.left_out['train'] else ''} left "
                     "out: " + ", ".join(f"{n} {s}" for s, n in data.left_out.items() if n))
    lines.append(f"  {'split':<6}{'label':<16}{'rows':>8}")
    for split_name, labels in data.counts().items():
        for label, n in sorted(labels.items(), key=lambda kv: str(kv[0])):
            lines.append(f"  {split_name:<6}{label if label is not None else '-':<16}{n:>8}")
        if not labels:
            lines.append(f"  {split_name:<6}{'-':<16}{0:>8}")
    return lines
