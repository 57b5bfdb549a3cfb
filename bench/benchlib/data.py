"""Data the benchmarks read: the data folder (``manage.py fetch_data`` fills it; nothing
from it is copied into the repository), seeded subsets, and readers."""

from __future__ import annotations

import os
import random
from pathlib import Path

from datafiles.readers import RowError, read_records

from . import ROOT
from .results import log

SST2_LABELS = ["negative", "positive"]  # SST-2's label 0 and 1


def data_dir() -> Path:
    """``$DYNABENCH_DATA_DIR``, else ``var/data`` (as in dynabench/settings.py: the folder
    ``manage.py fetch_data`` fills)."""
    return Path(os.environ.get("DYNABENCH_DATA_DIR") or ROOT / "var" / "data")


class Missing(Exception):
    """A data file a benchmark needs is not there: what needs it is skipped with this reason."""


def load_records(fmt: str, path: Path, notes: dict) -> list:
    """Records from ``path`` via the project's readers (``datafiles.readers``, no
    Django); malformed rows are logged and counted in ``notes["row_errors"]``."""
    if not path.is_file():
        raise Missing(f"{path} not found")
    records, errors = [], []
    for item in read_records(fmt, path):
        (errors if isinstance(item, RowError) else records).append(item)
    if errors:
        log(f"{path.name}: skipped {len(errors)} malformed rows (first: {errors[0]})")
    notes.setdefault("row_errors", {})[str(path.relative_to(data_dir()))] = len(errors)
    return records


def rng(seed: int, purpose: str) -> random.Random:
    """A generator of its own per purpose: one subset does not move when another changes."""
    return random.Random(f"{seed}:{purpose}")


def sample(items: list, n: int | None, seed: int, purpose: str) -> list:
    """A seeded random subset of ``n`` items (all of them, shuffled, when n is None or too big)."""
    items = list(items)
    rng(seed, purpose).shuffle(items)
    return items if n is None else items[:n]


def limit(items: list, n: int | None, seed: int, purpose: str) -> list:
    """Everything (in file order) or, with an eval limit, a seeded random subset."""
    if n is None or len(items) <= n:
        return list(items)
    return sample(items, n, seed, purpose)


def read_sst2(path: Path, limit: int | None = None) -> list[tuple[str, str]]:
    """(sentence, label) from an SST-2 TSV file (header ``sentence<TAB>label``), at most
    ``limit`` of them; rows without a 0/1 label are passed over."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        next(fh)  # header: sentence<TAB>label
        for line in fh:
            sentence, _, label = line.rstrip("\n").rpartition("\t")
            sentence = sentence.strip()
            if sentence and label in ("0", "1"):
                rows.append((sentence, SST2_LABELS[int(label)]))
            if limit is not None and len(rows) >= limit:
                break
    return rows
