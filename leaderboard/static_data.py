"""Round 0 from data set files: read them, give every row a split, import them, train on them.

``leaderboard.round0`` (``manage.py train_model``) and ``bootstrap_demo --real-data``
call these; the admin's "Train a round-0 model" action calls
``services.start_static_training``.

Which split a row goes to, first rule that applies:

1. ``split`` (``--split``): every row of every file;
2. a source written ``PATH:SPLIT`` (``sst2/dev.tsv:dev``): every row of that file;
3. the file's own split column (DynaHate, HatemojiBuild, our seed files and export);
4. otherwise a hash: ``test_fraction`` of the rows go to test, ``dev_fraction`` to
   dev, the rest to train, by ``stable_hash(seed, "static-split", key)`` of each row's
   *group*. The group is the row's ``external_uid``, except where rows are related:
   rows sharing a context (an NLI premise: MNLI and SNLI write three hypotheses per
   premise) are one group, and so are the two sides of a contrastive pair
   (``sampling.group_keys``); QA rows whose passage has a title are grouped by
   the title, i.e. SQuAD is split by article. So no premise or article is trained
   on and tested on, the same row lands in the same split on every run and
   machine, and adding a file never moves the rows of another.

``limit`` keeps at most that many rows of each split, stratified by label and
chosen by hash (``sampling.cap_records``): a capped import is a subset of the
full one. ``balance`` keeps as many training rows of each label as the rarest
label has (Davidson's tweets are 5.8% hateful: a model trained on its natural
rate learns to answer not-hateful).

Rows that cannot be read, rows whose label is not one of the task's and exact
duplicates (the same ``external_uid`` twice, e.g. identical SNLI lines) are left
out before the split and the caps, and reported with their file and line; rows
the task's own rules refuse are reported the same way by the import. Importing
the same files again creates nothing twice (``import_records`` skips known
``external_uid``).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from annotation.datasets import import_records
from core.errors import InvalidInput
from datafiles.readers import FORMATS, SPLITS, FormatError, Record, RowError, read_records
from registry.models import ModelVersion
from tasks.models import STATIC_ROUND, Task
from tasks.services import ensure_static_round

from .models import Evaluation
from .rows import primary_metric
from .sampling import cap_records, group_keys, stable_hash
from .training import static_training_counts

SPLIT_SEED = 0
SPLIT_PURPOSE = "static-split"


def default_data_dir() -> Path | None:
    """The data folder (``DYNABENCH_DATA_DIR``) when it names a directory, else None."""
    value = getattr(settings, "DYNABENCH_DATA_DIR", "")
    if not value or not Path(value).is_dir():
        return None
    return Path(value)


class StaticDataError(Exception):
    """The files cannot be used: missing, unreadable, no usable rows, bad options."""


@dataclass(frozen=True)
class Source:
    path: Path
    split: str | None = None  # every row of the file goes to this split

    def __str__(self):
        return f"{self.path}:{self.split}" if self.split else str(self.path)


_SOURCE_SPLIT = re.compile(rf"^(?P<path>.+):(?P<split>{'|'.join(SPLITS)})$")


def parse_source(text: str | Path, base: Path | None = None) -> Source:
    """``PATH`` or ``PATH:SPLIT`` (``SPLIT`` one of train, dev, test). A file whose
    own name ends in ``:train`` is still that file."""
    text = str(text)
    path = Path(text) if base is None else base / text
    match = _SOURCE_SPLIT.match(text)
    if match and not path.is_file():
        found = Path(match["path"]) if base is None else base / match["path"]
        return Source(found, match["split"])
    return Source(path)


@dataclass
class StaticData:
    """Records ready for round 0, by file, each with its ``split`` set."""

    format_name: str
    records: dict[Path, list[Record]] = field(default_factory=dict)
    errors: list[tuple[Path, RowError]] = field(default_factory=list)
    rows_read: dict[Path, int] = field(default_factory=dict)
    duplicates: int = 0
    left_out: Counter = field(default_factory=Counter)  # split -> rows over the limit or the balance
    rounds_ignored: int = 0  # rows whose file gave a round other than 0

    @property
    def total(self) -> int:
        return sum(len(records) for records in self.records.values())

    def counts(self) -> dict[str, Counter]:
        """split -> label -> rows (label None for QA)."""
        table: dict[str, Counter] = {split: Counter() for split in SPLITS}
        for records in self.records.values():
            for record in records:
                table[record.split][record.label] += 1
        return table


def check_fractions(dev_fraction: float, test_fraction: float) -> None:
    for name, value in (("dev fraction", dev_fraction), ("test fraction", test_fraction)):
        if not 0 <= value <= 1:
            raise StaticDataError(f"The {name} must be from 0 to 1, not {value}.")
    if dev_fraction + test_fraction > 1:
        raise StaticDataError(f"The dev and test fractions add up to {dev_fraction + test_fraction:g}, "
                              "more than 1.")


def split_keys(records: list[Record]) -> list[str]:
    """The key each record's split is drawn from (see the module docstring)."""
    keys = group_keys(records)
    for i, record in enumerate(records):
        title = (record.context or {}).get("fields", {}).get("title")
        if isinstance(title, str) and title.strip():
            keys[i] = "title:" + title.strip()
    return keys


def hash_splits(records: list[Record], *, dev_fraction: float, test_fraction: float,
                seed: int = SPLIT_SEED) -> list[str]:
    """A split per record: test below ``test_fraction``, then dev, then train."""
    splits = []
    for key in split_keys(records):
        position = stable_hash(seed, SPLIT_PURPOSE, key) / 2**64
        splits.append("test" if position < test_fraction
                      else "dev" if position < test_fraction + dev_fraction else "train")
    return splits


def balanced(records: list[Record], seed: int) -> list[Record]:
    """As many records of each label as the rarest label has, chosen by hash, in their order."""
    by_label: dict[object, list[Record]] = defaultdict(list)
    for record in records:
        by_label[record.label].append(record)
    if len(by_label) < 2:
        return list(records)
    size = min(len(members) for members in by_label.values())
    chosen = set()
    for members in by_label.values():
        ranked = sorted(members, key=lambda r: (stable_hash(seed, "balance", r.external_uid), r.external_uid))
        chosen.update(id(r) for r in ranked[:size])
    return [r for r in records if id(r) in chosen]


def read_static_data(format_name: str, sources: Iterable[Source], *, labels: Iterable[str] | None = None,
                     dev_fraction: float = 0.1, test_fraction: float = 0.1, split: str | None = None,
                     limit: int | None = None, balance: bool = False, seed: int = SPLIT_SEED) -> StaticData:
    """Read ``sources`` as ``format_name`` and give every record its split (module docstring).

    ``labels``: the task's labels (classification); rows with another label are
    left out as errors. Raises ``StaticDataError`` for a missing or unreadable file.
    """
    if format_name not in FORMATS:
        raise StaticDataError(f"Unknown format {format_name!r}. Known formats: {', '.join(FORMATS)}.")
    if split is not None and split not in SPLITS:
        raise StaticDataError(f"Unknown split {split!r}; expected one of {', '.join(SPLITS)}.")
    if limit is not None and limit < 1:
        raise StaticDataError("The limit must be 1 or more.")
    check_fractions(dev_fraction, test_fraction)
    sources = list(sources)
    missing = [str(s.path) for s in sources if not s.path.is_file()]
    if missing:
        raise StaticDataError(f"No such file: {', '.join(missing)}")
    known_labels = set(labels) if labels is not None else None
    data = StaticData(format_name)
    seen: set[str] = set()
    entries: list[tuple[Path, Record, str | None]] = []  # in file order
    for source in sources:
        rows = 0
        try:
            for item in read_records(format_name, source.path):
                rows += 1
                if isinstance(item, RowError):
                    data.errors.append((source.path, item))
                    continue
                if known_labels is not None and item.label not in known_labels:
                    data.errors.append((source.path, RowError(
                        item.line, f"unknown label {item.label!r} (expected one of "
                                   f"{', '.join(sorted(known_labels))})")))
                    continue
                if item.external_uid in seen:
                    data.duplicates += 1
                    continue
                seen.add(item.external_uid)
                if item.round not in (None, STATIC_ROUND):
                    data.rounds_ignored += 1
                entries.append((source.path, item, split or source.split or item.split))
        except (FormatError, UnicodeDecodeError, OSError) as exc:
            raise StaticDataError(f"Cannot read {source.path} as {format_name}: {exc}") from None
        data.rows_read[source.path] = rows

    unsplit = [record for _path, record, chosen in entries if chosen is None]
    drawn = iter(hash_splits(unsplit, dev_fraction=dev_fraction, test_fraction=test_fraction, seed=seed))
    by_split: dict[str, list[Record]] = {name: [] for name in SPLITS}
    for _path, record, chosen in entries:
        record.split = chosen or next(drawn)
        by_split[record.split].append(record)

    kept: set[int] = set()
    for name, records in by_split.items():
        chosen = balanced(records, seed) if balance and name == "train" else records
        chosen = cap_records(chosen, limit, seed, key=lambda r: str(r.label or ""))
        data.left_out[name] = len(records) - len(chosen)
        kept.update(id(r) for r in chosen)
    for path, record, _chosen in entries:
        if id(record) in kept:
            data.records.setdefault(path, []).append(record)
    return data


@dataclass
class StaticImport:
    created: int = 0
    skipped_duplicates: int = 0
    contexts_created: int = 0
    errors: list[tuple[Path, RowError]] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)  # (split, label) -> created


def import_static_data(task: Task, data: StaticData) -> StaticImport:
    """Write the records into round 0 (created closed if the task has none; never opened)."""
    ensure_static_round(task)
    result = StaticImport()
    for path, records in data.records.items():
        report = import_records(task, records, round_number=STATIC_ROUND)
        result.created += report.created
        result.skipped_duplicates += report.skipped_duplicates
        result.contexts_created += report.contexts_created
        result.errors += [(path, error) for error in report.errors]
        result.counts.update(report.counts)
    return result


def import_for_training(task: Task, spec: dict, reporter) -> StaticImport:
    """The import a training job runs first (``services.start_training(import_data=...)``).

    ``spec``: ``format``, ``sources`` (``PATH[:SPLIT]``, absolute), ``dev_fraction``,
    ``test_fraction``, ``limit`` (rows of each split), ``balance`` and ``description``.
    Known rows are skipped, so a rerun of the job imports nothing twice. No usable row
    fails the job with the reason."""
    config = task.parsed_config
    try:
        data = read_static_data(
            spec["format"], [parse_source(source) for source in spec["sources"]],
            labels=config.kind.import_labels,
            dev_fraction=spec.get("dev_fraction", 0.1), test_fraction=spec.get("test_fraction", 0.1),
            limit=spec.get("limit"), balance=spec.get("balance", False))
    except StaticDataError as exc:
        raise InvalidInput.field("import_data", f"The data to import cannot be used: {exc}") from None
    if not data.total:
        raise InvalidInput.field("import_data", f"No usable rows to import in {', '.join(spec['sources'])}.")
    imported = import_static_data(task, data)
    counts = static_training_counts(task)
    reporter.progress(0, f"round 0 <- {spec.get('description') or spec['format']}: {imported.created} rows imported "
                         f"({imported.skipped_duplicates} there already); round 0 now holds "
                         + ", ".join(f"{n} {split}" for split, n in counts.items()))
    errors = data.errors + imported.errors
    if errors:
        path, error = errors[0]
        reporter.progress(0, f"{len(errors)} row(s) skipped, e.g. {path.name} line {error.line}: {error.message}")
    return imported


# --- training ----------------------------------------------------------------------


_STEP_LINE = re.compile(r"epoch \d+/\d+ step (\d+)/(\d+) ")


def training_step(line: str) -> tuple[int, int] | None:
    """(step, total steps) of a training job's step line (``ml.train``'s progress message
    "epoch 1/3 step 40/300 loss ..."), or None for any other line."""
    match = _STEP_LINE.search(line)
    return (int(match[1]), int(match[2])) if match else None


def thinned(say: Callable[[str], None], parts: int = 4) -> Callable[[str], None]:
    """``say`` for job logs, passing a training step line only when it starts a new
    quarter (``parts``) of the steps; every other line passes."""
    shown = [-1]

    def echo(line: str) -> None:
        steps = training_step(line)
        if steps:
            step, total = steps
            part = parts * step // max(total, 1)
            if part == shown[0]:
                return
            shown[0] = part
        say(line)

    return echo


def evaluation_table(model: ModelVersion) -> list[str]:
    """The model's test scores per round, as text lines."""
    metric = primary_metric(model.task)
    other = "exact_match" if metric == "f1" else "macro_f1"
    rows = Evaluation.objects.filter(model_version=model, split="test").select_related("round").order_by(
        "round__number")
    lines = [f"  {'round':>5}  {'examples':>8}  {metric:>8}  {other:>11}  {'error rate':>10}"]

    def cell(value, width):
        return f"{value:>{width}.3f}" if isinstance(value, int | float) else f"{'-':>{width}}"

    for evaluation in rows:
        lines.append(f"  {evaluation.round.number:>5}  {evaluation.num_examples:>8}  "
                     f"{cell(evaluation.metrics.get(metric), 8)}  {cell(evaluation.metrics.get(other), 11)}  "
                     f"{cell(evaluation.model_error_rate, 10)}")
    if len(lines) == 1:
        lines.append("  (no round has test examples)")
    return lines


def dev_score(model: ModelVersion) -> tuple[str, float | None]:
    """The model's best dev score during training: accuracy, or F1 for QA."""
    if "dev_f1" in model.metrics:
        return "dev F1", model.metrics.get("dev_f1")
    return "dev accuracy", model.metrics.get("dev_accuracy")


__all__ = [
    "Source", "StaticData", "StaticDataError", "StaticImport", "balanced", "check_fractions", "dev_score",
    "evaluation_table", "hash_splits", "import_static_data", "parse_source",
    "read_static_data", "split_keys", "thinned", "training_step",
]
