# Long on purpose: the replay's data plan is one pipeline (read, split, remove leakage, cap), read top to bottom.
"""What a replay of real adversarial rounds feeds the platform, read from the data directory.

``build_plan(task, data_dir)`` reads the public data sets (``manage.py fetch_data``
puts them in the data directory) with the readers in ``datafiles.readers`` and
lays them out as rounds:

- ``nli``: round 0 is static, MNLI dev-matched + SNLI dev (``nli/{mnli,snli}/dev.jsonl``),
  which exist only as dev sets, so they are split here 80/10/10 into
  train/dev/test. Rounds 1-3 are ANLI R1-R3: ``anli/R{r}/dev.jsonl`` is the
  round's training data (what the replay submits against the live target) with
  10% held out as dev, and ``anli/R{r}/test.jsonl`` is its test split (ANLI's
  README: do not tune on test).
- ``hate``: round 0 is Davidson et al. 2017 (``davidson/labeled_data.csv``),
  split 80/10/10. Rounds 1-4 are DynaHate: the rows of round r in
  ``dynahate/db_dev.csv`` are its training data (10% held out as dev), those in
  ``dynahate/db_test.csv`` its test split. Rounds 5-7 are HatemojiBuild: the
  rows of round r in ``hatemoji/HatemojiBuild/{train,validation,test}.csv``.
  Two functional suites: HateCheck (``hatecheck/test_suite_cases.csv``, from
  round 0) and HatemojiCheck (``hatemoji/HatemojiCheck/test.csv``, from round 5).

Splits are deterministic: a record goes to a split by a hash of the seed and
its *group* key, never by file order or a random generator. The group key is
the record's ``external_uid``, except where records are related: NLI records
that share a premise are one group (MNLI and ANLI write several hypotheses per
premise; splitting them apart would put the test premises in training), and a
DynaHate entry and its contrastive perturbation (``matched_uid``) are one group
(see ``group_keys``).

No leakage: after the split, every training and dev list (round 0's and each
round's) loses the records that share a premise (``context`` rule) or a text
(``text`` rule: an input's text, compared case- and space-insensitively) with
any test split or functional suite, and the records whose contrastive partner
(the data set's own pair id) is a test example (``pair`` rule: the published
files put some pairs' two sides in training and test); ``plan.leakage`` counts what each rule
removed, per round and split (``leakage_filter``). Test splits are never
changed.

The static control's pool: before the caps, round 0's training split gives up
as many records as the rounds 1..R will write (train + dev), chosen by hash
(``control_pool``); M0 never trains on them, and the replay's static control
learns from them in place of the adversarial rounds (``plan.control_pool``).

Caps (``limit``, or the fast defaults) are applied after the split, so a capped
plan is a subset of the full one. A capped list keeps the records whose hash
comes first within each label (for suites: within each functionality), in
numbers proportional to the label's share, in file order.

Malformed rows never stop a plan: the reader's row errors, rows whose label is
not one of the task's labels and rows of a round the replay does not cover are
counted per file in ``plan.skipped_rows`` (a few messages in
``plan.row_errors``); exact duplicates (the same ``external_uid`` twice, e.g.
two identical SNLI lines) are dropped and counted in ``plan.duplicate_rows``.
A missing file, or a file that cannot be read in its format at all, raises
``ReplayDataError``.

Records are the readers' own objects; the plan sets ``record.split`` to the
split it chose and ``record.round`` to the round number (rounds 1 and up).

No Django here (the data folder's setting is read by ``leaderboard.static_data.default_data_dir``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from datafiles.readers import FormatError, Record, RowError, read_records
from leaderboard.sampling import cap_records, group_keys, stable_hash

TASKS = ("nli", "hate")
MODES = ("fast", "full")
FAST_LIMIT = 400  # training rows per round in fast mode
FAST_EVAL_LIMIT = 200  # dev, test and suite rows in fast mode
STATIC_SPLIT_PERCENT = {"train": 80, "dev": 10, "test": 10}
HELD_OUT_DEV_PERCENT = 10
TASK_LABELS = {
    "nli": ("entailment", "neutral", "contradiction"),
    "hate": ("hateful", "not-hateful"),
}
ROW_ERROR_SAMPLES = 5  # messages kept per file in plan.row_errors

NLI_STATIC = ("nli/mnli/dev.jsonl", "nli/snli/dev.jsonl")
NLI_ROUNDS = (1, 2, 3)
DAVIDSON = "davidson/labeled_data.csv"
DYNAHATE_TRAIN, DYNAHATE_TEST = "dynahate/db_dev.csv", "dynahate/db_test.csv"
DYNAHATE_ROUNDS = (1, 2, 3, 4)
HATEMOJI_BUILD = {
    "train": "hatemoji/HatemojiBuild/train.csv",
    "dev": "hatemoji/HatemojiBuild/validation.csv",
    "test": "hatemoji/HatemojiBuild/test.csv",
}
HATEMOJI_ROUNDS = (5, 6, 7)
HATECHECK = "hatecheck/test_suite_cases.csv"
HATEMOJICHECK = "hatemoji/HatemojiCheck/test.csv"


class ReplayDataError(Exception):
    """The data directory lacks what a replay needs, or a file cannot be read at all.

    ``missing`` lists the missing files (paths relative to the data directory).
    """

    def __init__(self, message: str, missing: Iterable[str] = ()):
        super().__init__(message)
        self.missing = list(missing)


@dataclass
class RoundData:
    """One round: 0 is the static data, 1 and up are replayed adversarial rounds."""

    number: int
    name: str  # e.g. "ANLI R1", "DynaHate R2", "HatemojiBuild R5", "static (MNLI+SNLI)"
    train: list[Record]
    dev: list[Record]
    test: list[Record]
    source_files: list[str]  # relative to the data directory

    @property
    def splits(self) -> dict[str, list[Record]]:
        return {"train": self.train, "dev": self.dev, "test": self.test}


@dataclass
class FunctionalSuite:
    """A functional test suite, evaluated on every model from round ``from_round`` on."""

    name: str  # "HateCheck", "HatemojiCheck"
    records: list[Record]
    from_round: int
    group_field: str = "functionality"  # the metadata key that names a record's functionality
    cluster_field: str = "templ_id"  # the metadata key of the template a case was written from

    def clusters(self) -> list[str]:
        """Each record's template (the bootstrap's cluster); a record without one is its own."""
        return [str(r.metadata.get(self.cluster_field) or f"case:{r.external_uid}") for r in self.records]

    @property
    def by_functionality(self) -> dict[str, list[Record]]:
        """Records grouped by ``record.metadata[group_field]`` (sorted by name)."""
        groups: dict[str, list[Record]] = defaultdict(list)
        for record in self.records:
            groups[str(record.metadata.get(self.group_field) or "unknown")].append(record)
        return dict(sorted(groups.items()))


@dataclass
class ReplayPlan:
    task: str
    rounds: list[RoundData]  # index 0: the static round 0
    suites: list[FunctionalSuite]
    mode: str = "fast"
    seed: int = 0
    caps: dict[str, int | None] = field(default_factory=dict)  # split/"suite" -> cap (None: all)
    skipped_rows: dict[str, int] = field(default_factory=dict)  # file -> rows not used
    row_errors: dict[str, list[str]] = field(default_factory=dict)  # file -> first few messages
    duplicate_rows: dict[str, int] = field(default_factory=dict)  # file -> exact duplicates dropped
    leakage: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # round -> split -> rule -> n
    control_pool: list[Record] = field(default_factory=list)  # static rows M0 never sees
    pairs: dict[str, dict[str, int]] = field(default_factory=dict)  # round -> contrastive pair counts

    @property
    def labels(self) -> tuple[str, ...]:
        return TASK_LABELS[self.task]


def required_files(task: str) -> list[str]:
    """The files (relative to the data directory) that ``build_plan(task, ...)`` reads."""
    if task == "nli":
        return [*NLI_STATIC, *(f"anli/R{r}/{part}.jsonl" for r in NLI_ROUNDS for part in ("dev", "test"))]
    if task == "hate":
        return [DAVIDSON, DYNAHATE_TRAIN, DYNAHATE_TEST, *HATEMOJI_BUILD.values(), HATECHECK,
                HATEMOJICHECK]
    raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")


def caps_for(mode: str, limit: int | None) -> dict[str, int | None]:
    """The row cap of each list: an explicit limit caps all; fast mode has defaults; full none."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive whole number, not {limit!r}")
        return {"train": limit, "dev": limit, "test": limit, "suite": limit}
    if mode == "fast":
        return {"train": FAST_LIMIT, "dev": FAST_EVAL_LIMIT, "test": FAST_EVAL_LIMIT,
                "suite": FAST_EVAL_LIMIT}
    return {"train": None, "dev": None, "test": None, "suite": None}


def build_plan(task: str, data_dir: Path, *, mode: str = "fast", limit: int | None = None,
               seed: int = 0) -> ReplayPlan:
    """The rounds and suites of ``task`` read from ``data_dir`` (see the module docstring)."""
    files = required_files(task)
    caps = caps_for(mode, limit)
    data_dir = Path(data_dir)
    missing = [name for name in files if not (data_dir / name).is_file()]
    if missing:
        where = f"{data_dir}" if data_dir.is_dir() else f"{data_dir} (which does not exist)"
        raise ReplayDataError(
            f"the {task} replay needs {len(missing)} missing file(s) under {where}: "
            + ", ".join(missing),
            missing,
        )
    plan = ReplayPlan(task=task, rounds=[], suites=[], mode=mode, seed=seed, caps=caps)
    reader = _Reader(data_dir, plan)
    if task == "nli":
        _nli(plan, reader, seed)
    else:
        _hate(plan, reader, seed)
    for data in plan.rounds:
        for split in ("train", "test"):
            if not getattr(data, split):
                raise ReplayDataError(
                    f"{data.name} has no usable {split} rows in {', '.join(data.source_files)}"
                )
    plan.leakage = leakage_filter(plan)
    plan.pairs = pair_counts(plan)
    static = plan.rounds[0]
    static.train, pool = control_pool(static.train, sum(len(d.train) + len(d.dev) for d in plan.rounds[1:]),
                                      seed)
    if not static.train:
        raise ReplayDataError(f"{static.name} has too few training rows to set aside a static control pool")
    for data in plan.rounds:
        for split, records in data.splits.items():
            capped = cap_records(records, caps[split], seed, key=lambda r: r.label or "")
            setattr(data, split, capped)
            for record in capped:
                record.split = split
                if data.number >= 1:
                    record.round = data.number
    for suite in plan.suites:
        suite.records = cap_records(suite.records, caps["suite"], seed,
                                    key=lambda r, f=suite.group_field: str(r.metadata.get(f) or ""))
    needed = sum(len(d.train) + len(d.dev) for d in plan.rounds[1:])
    plan.control_pool = pool[:needed]  # hash order: a capped pool is a prefix of the full one
    for record in plan.control_pool:
        record.split = "train"
    return plan


def plan_summary(plan: ReplayPlan) -> dict:
    """Counts per round, split and label (JSON-ready), for the replay report."""

    def counts(records: list[Record]) -> dict:
        labels = Counter(r.label for r in records)
        ordered = {label: labels.get(label, 0) for label in plan.labels}
        ordered.update({str(k): v for k, v in sorted(labels.items(), key=lambda kv: str(kv[0]))
                        if k not in ordered})
        return {"count": len(records), "labels": ordered}

    return {
        "task": plan.task,
        "mode": plan.mode,
        "seed": plan.seed,
        "caps": dict(plan.caps),
        "labels": list(plan.labels),
        "rounds": [
            {"number": data.number, "name": data.name, "source_files": list(data.source_files),
             "splits": {split: counts(records) for split, records in data.splits.items()}}
            for data in plan.rounds
        ],
        "suites": [
            {"name": suite.name, "from_round": suite.from_round, **counts(suite.records),
             "functionalities": {name: len(records)
                                 for name, records in suite.by_functionality.items()},
             "cluster_field": suite.cluster_field, "clusters": len(set(suite.clusters()))}
            for suite in plan.suites
        ],
        "skipped_rows": dict(plan.skipped_rows),
        "duplicate_rows": dict(plan.duplicate_rows),
        "leakage": {"rules": dict(LEAKAGE_RULES), "removed": plan.leakage, "pairs": plan.pairs},
        "control_pool": len(plan.control_pool),
        "references": references(plan),
    }


# --- reference lines --------------------------------------------------------


def reference_lines(labels: Iterable[str], records: list[Record]) -> dict:
    """What answers that look at nothing score on ``records``: chance (a uniform guess
    over the task's labels, in expectation), each constant answer, and the best
    constant answer (the test set's majority class)."""
    labels = list(labels)
    counts = Counter(r.label for r in records)
    total = len(records)
    constant = {label: (counts.get(label, 0) / total if total else None) for label in labels}
    majority = max(labels, key=lambda label: (counts.get(label, 0), -labels.index(label)))
    return {"num_examples": total, "chance": 1 / len(labels), "constant": constant,
            "majority": {"label": majority, "accuracy": constant[majority]}}


def references(plan: ReplayPlan) -> dict:
    """Reference lines for every test set (by round name) and functional suite (by name)."""
    out = {data.name: reference_lines(plan.labels, data.test) for data in plan.rounds}
    for suite in plan.suites:
        out[suite.name] = {**reference_lines(plan.labels, suite.records),
                           "by_functionality": {name: reference_lines(plan.labels, records)
                                                for name, records in suite.by_functionality.items()}}
    return out


# --- leakage ----------------------------------------------------------------

LEAKAGE_RULES = {
    "context": "shares its premise or context with a test example",
    "text": "shares a text (an input's, case- and space-insensitive) with a test example",
    "pair": "is one side of a contrastive pair (the data set's own pair id) whose other side is a test example",
}


def _pair_ids(record: Record) -> set[str]:
    """The record's id and its contrastive partner's (``matched_uid``), if it has one."""
    matched = record.metadata.get("matched_uid") if isinstance(record.metadata, dict) else None
    return {record.external_uid, str(matched)} if matched else {record.external_uid}


def _normal(text) -> str:
    return " ".join(str(text).casefold().split())


def _context_text(record: Record) -> str | None:
    fields = (record.context or {}).get("fields") or {}
    text = " ".join(str(v) for v in fields.values() if v)
    return _normal(text) if text else None


def _input_texts(record: Record) -> list[str]:
    return [_normal(v) for v in record.inputs.values() if isinstance(v, str) and v.strip()]


def leakage_filter(plan: ReplayPlan) -> dict[str, dict[str, dict[str, int]]]:
    """Drop from every train and dev list the records that share a premise or a text with
    any test split or suite, or whose contrastive partner is in one (``pair``: DynaHate's
    ``acl.id.matched``, HatemojiBuild's ``matched_id``, in either direction): each such
    pair then lies wholly on the test side. Return what each rule removed, per round name
    and split (rounds and splits where nothing was removed are left out); a row counts
    under the first rule it meets, in ``LEAKAGE_RULES``' order."""
    tests = [r for data in plan.rounds for r in data.test] + [r for s in plan.suites for r in s.records]
    contexts = {c for c in map(_context_text, tests) if c}
    texts = {t for r in tests for t in _input_texts(r)}
    paired = {uid for r in tests for uid in _pair_ids(r)}  # test ids and their partners' ids
    removed: dict[str, dict[str, dict[str, int]]] = {}
    for data in plan.rounds:
        for split in ("train", "dev"):
            kept, counts = [], dict.fromkeys(LEAKAGE_RULES, 0)
            for record in getattr(data, split):
                context = _context_text(record)
                if context and context in contexts:
                    counts["context"] += 1
                elif any(t in texts for t in _input_texts(record)):
                    counts["text"] += 1
                elif _pair_ids(record) & paired:
                    counts["pair"] += 1
                else:
                    kept.append(record)
            setattr(data, split, kept)
            if any(counts.values()):
                removed.setdefault(data.name, {})[split] = counts
    return removed


def pair_counts(plan: ReplayPlan) -> dict[str, dict[str, int]]:
    """Per round (rounds with contrastive pairs only), after the leakage filter and before
    the caps: ``training`` pairs with both sides in its train and dev lists (they share a
    group, so the dev hold-out keeps them on one side), ``test`` pairs with both sides in
    its test split, and ``removed``: training and dev rows the ``pair`` rule took out
    because their other side is a test example."""
    out: dict[str, dict[str, int]] = {}
    for data in plan.rounds:
        counts = {}
        for part, records in (("training", data.train + data.dev), ("test", data.test)):
            ids = {r.external_uid for r in records}
            counts[part] = len({frozenset(_pair_ids(r)) for r in records
                                if len(_pair_ids(r)) == 2 and _pair_ids(r) <= ids})
        counts["removed"] = sum(split.get("pair", 0) for split in plan.leakage.get(data.name, {}).values())
        if any(counts.values()):
            out[data.name] = counts
    return out


def control_pool(records: list[Record], size: int, seed: int) -> tuple[list[Record], list[Record]]:
    """(kept, pool): ``size`` records set aside by hash of their group (a premise's
    records stay on one side), at most half of ``records``; both in file order, the
    pool in hash order."""
    size = min(size, len(records) // 2)
    keys = group_keys(records)
    order = sorted(range(len(records)), key=lambda i: (stable_hash(seed, "control-pool", keys[i]), i))
    taken: set[int] = set()
    groups_taken: set[str] = set()
    for i in order:
        if len(taken) >= size and keys[i] not in groups_taken:
            break
        taken.add(i)
        groups_taken.add(keys[i])
    pool = [records[i] for i in order if i in taken]
    return [r for i, r in enumerate(records) if i not in taken], pool


# --- the two tasks ----------------------------------------------------------


def _nli(plan: ReplayPlan, reader: _Reader, seed: int) -> None:
    static = _dedupe([r for name in NLI_STATIC for r in reader.read(name, "nli-jsonl")], plan,
                     NLI_STATIC[-1])
    plan.rounds.append(RoundData(0, "static (MNLI+SNLI)", *_three_way(static, seed),
                                 list(NLI_STATIC)))
    for number in NLI_ROUNDS:
        dev_file, test_file = f"anli/R{number}/dev.jsonl", f"anli/R{number}/test.jsonl"
        train, dev = _hold_out(reader.read(dev_file, "anli"), seed)
        plan.rounds.append(RoundData(number, f"ANLI R{number}", train, dev,
                                     reader.read(test_file, "anli"), [dev_file, test_file]))


def _hate(plan: ReplayPlan, reader: _Reader, seed: int) -> None:
    plan.rounds.append(RoundData(0, "static (Davidson)",
                                 *_three_way(reader.read(DAVIDSON, "davidson"), seed), [DAVIDSON]))
    rounds = (*DYNAHATE_ROUNDS, *HATEMOJI_ROUNDS)
    dynahate = {name: _by_round(reader, name, "dynahate", rounds)
                for name in (DYNAHATE_TRAIN, DYNAHATE_TEST)}
    for number in DYNAHATE_ROUNDS:
        train, dev = _hold_out(dynahate[DYNAHATE_TRAIN].get(number, []), seed)
        plan.rounds.append(RoundData(number, f"DynaHate R{number}", train, dev,
                                     dynahate[DYNAHATE_TEST].get(number, []),
                                     [DYNAHATE_TRAIN, DYNAHATE_TEST]))
    build = {split: _by_round(reader, name, "hatemoji", rounds)
             for split, name in HATEMOJI_BUILD.items()}
    for number in HATEMOJI_ROUNDS:
        plan.rounds.append(RoundData(
            number, f"HatemojiBuild R{number}",
            *(build[split].get(number, []) for split in ("train", "dev", "test")),
            list(HATEMOJI_BUILD.values()),
        ))
    plan.suites.append(FunctionalSuite("HateCheck", reader.read(HATECHECK, "hatecheck"), 0))
    plan.suites.append(FunctionalSuite("HatemojiCheck", reader.read(HATEMOJICHECK, "hatemoji"), 5))


def _by_round(reader: _Reader, name: str, format_name: str,
              rounds: tuple[int, ...]) -> dict[int, list[Record]]:
    """Rows of a file by round; rows of another round are counted as skipped."""
    by_round: dict[int, list[Record]] = defaultdict(list)
    for record in reader.read(name, format_name):
        if record.round not in rounds:
            reader.skip(name, record.line, f"round {record.round!r} is not one the replay covers")
            continue
        by_round[record.round].append(record)
    return by_round


# --- reading ----------------------------------------------------------------


class _Reader:
    """Reads each file once; counts its unusable rows in the plan."""

    def __init__(self, data_dir: Path, plan: ReplayPlan):
        self.data_dir = data_dir
        self.plan = plan
        self.labels = set(TASK_LABELS[plan.task])
        self.cache: dict[str, list[Record]] = {}

    def skip(self, name: str, line: int, message: str) -> None:
        self.plan.skipped_rows[name] = self.plan.skipped_rows.get(name, 0) + 1
        samples = self.plan.row_errors.setdefault(name, [])
        if len(samples) < ROW_ERROR_SAMPLES:
            samples.append(f"line {line}: {message}")

    def read(self, name: str, format_name: str) -> list[Record]:
        if name in self.cache:
            return self.cache[name]
        records: list[Record] = []
        try:
            for item in read_records(format_name, self.data_dir / name):
                if isinstance(item, RowError):
                    self.skip(name, item.line, item.message)
                elif item.label not in self.labels:
                    self.skip(name, item.line, f"unknown label {item.label!r} (expected one of "
                                               f"{', '.join(sorted(self.labels))})")
                else:
                    records.append(item)
        except (FormatError, UnicodeDecodeError, OSError) as exc:
            raise ReplayDataError(f"{name} cannot be read as {format_name}: {exc}") from exc
        self.cache[name] = _dedupe(records, self.plan, name)
        return self.cache[name]


def _dedupe(records: list[Record], plan: ReplayPlan, name: str) -> list[Record]:
    """The first record of each external_uid; the others are counted against ``name``."""
    seen: set[str] = set()
    kept = []
    for record in records:
        if record.external_uid in seen:
            plan.duplicate_rows[name] = plan.duplicate_rows.get(name, 0) + 1
            continue
        seen.add(record.external_uid)
        kept.append(record)
    return kept


# --- deterministic splits and caps ------------------------------------------


def _buckets(records: list[Record], seed: int, purpose: str) -> list[int]:
    """A percentile (0-99) per record, the same for all records of a group."""
    return [stable_hash(seed, purpose, key) % 100 for key in group_keys(records)]


def _three_way(records: list[Record], seed: int) -> tuple[list[Record], list[Record], list[Record]]:
    """Train/dev/test, 80/10/10 by the hash of each record's group."""
    train, dev, test = [], [], []
    train_end = STATIC_SPLIT_PERCENT["train"]
    dev_end = train_end + STATIC_SPLIT_PERCENT["dev"]
    for record, bucket in zip(records, _buckets(records, seed, "static-split"), strict=True):
        (train if bucket < train_end else dev if bucket < dev_end else test).append(record)
    return train, dev, test


def _hold_out(records: list[Record], seed: int) -> tuple[list[Record], list[Record]]:
    """Train and a held-out 10% dev, by the hash of each record's group."""
    train, dev = [], []
    for record, bucket in zip(records, _buckets(records, seed, "dev-holdout"), strict=True):
        (dev if bucket < HELD_OUT_DEV_PERCENT else train).append(record)
    return train, dev


