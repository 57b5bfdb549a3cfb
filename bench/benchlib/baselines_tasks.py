"""The per-task runners of ``bench/baselines.py``: what each task trains on, what it
is scored on, and how (the script's docstring says why). Each runner takes the
task's configuration, the data folder, the artifacts folder and the eval limit, and
returns the task's part of the results JSON; a missing file raises ``Missing``.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import ml  # sets the offline environment before transformers loads
from ml import metrics as M

from .data import Missing, limit, load_records, rng, sample
from .results import Progress, display_path, log, pct

TASKS = ("sentiment", "nli", "hate", "qa")
SENTIMENT_LABELS = ["negative", "positive"]
NLI_LABELS = ["entailment", "neutral", "contradiction"]
HATE_LABELS = ["hateful", "not-hateful"]
NLI_TEST_SIZE, NLI_DEV_SIZE = 2000, 500
HATE_TEST_FRACTION, HATE_DEV_FRACTION = 0.15, 0.05
QA_TEST_ARTICLES, QA_DEV_ARTICLES, QA_DEV_QUESTIONS = 10, 3, 300
QA_MAX_TOKENS = 384
MAX_CHARS = 5000  # generous: the readers' longest texts are a few hundred characters
QA_PASSAGE_MAX_CHARS = 20000  # SQuAD passages reach about 4,000 characters


def classification_rows(records: list, input_fields: list[str]) -> list[dict]:
    """Records as ``ml.train``/``ml.predict`` rows: the input fields and the label."""
    return [
        {"inputs": {name: r.fields[name] for name in input_fields}, "label": r.label}
        for r in records
    ]


# -- training and evaluation ---------------------------------------------------------


def train_model(
    task: str, spec, train_rows, dev_rows, config: dict, out_root: Path, source: str, subset: str
) -> tuple:
    """Fine-tune on ``train_rows`` into ``out_root/<task>`` (replaced): (model ref, the
    training's part of the results, the artifact's metrics). ``source`` and ``subset``
    describe the training data in the artifact's metadata."""
    training_data = {"source": source, "subset": subset, "purpose": "bench/baselines.py"}
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
        "artifact": display_path(info.path),
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


# task: (labels, input fields, what it trains on, what its held-out set is)
CLASSIFIERS = {
    "sentiment": (SENTIMENT_LABELS, ["statement"], "sst2/train_full.tsv", "SST-2 test sentences"),
    "nli": (
        NLI_LABELS,
        ["premise", "hypothesis"],
        "nli/mnli/dev.jsonl + nli/snli/dev.jsonl",
        "MNLI+SNLI held-out pairs",
    ),
    "hate": (HATE_LABELS, ["statement"], "davidson/labeled_data.csv", "Davidson held-out tweets"),
}


@dataclass
class Classifier:
    """A classification task's model, trained and scored on its held-out rows."""

    fields: list[str]
    ref: ml.ModelRef
    training: dict  # the results' "training" part
    metrics: dict  # the artifact's metrics (dev scores among them)
    train_rows: list[dict]
    dev_rows: list[dict]
    test_rows: list[dict]
    predicted: list[str]  # on test_rows
    seconds: float  # predicting test_rows
    test_scores: dict

    def predict(self, records: list, what: str) -> tuple[list[dict], list[str], float]:
        """More records through the model: (their rows, predicted labels, seconds)."""
        rows = classification_rows(records, self.fields)
        return rows, *classify(self.ref, rows, what)

    @property
    def dev(self) -> dict:
        return {
            "accuracy": self.metrics.get("dev_accuracy"),
            "macro_f1": self.metrics.get("dev_macro_f1"),
        }


def train_classifier(
    task: str, splits: tuple[list, list, list], cfg: dict, out_root: Path, subset: str
) -> Classifier:
    """Train ``task`` (``CLASSIFIERS``) on the first of ``splits`` (train, dev, test
    records), select the epoch on the second, score the third; ``subset`` says how the
    training rows were chosen."""
    labels, fields, source, test_name = CLASSIFIERS[task]
    train_rows, dev_rows, test_rows = (classification_rows(split, fields) for split in splits)
    spec = classification_spec(labels, fields)
    ref, training, m = train_model(task, spec, train_rows, dev_rows, cfg, out_root, source, subset)
    predicted, seconds = classify(ref, test_rows, test_name)
    test_scores = class_scores(test_rows, predicted, labels)
    return Classifier(
        fields, ref, training, m, train_rows, dev_rows, test_rows, predicted, seconds, test_scores
    )


def run_sentiment(cfg: dict, data: Path, out_root: Path, eval_limit: int | None) -> dict:
    notes: dict = {}
    seed = cfg["seed"]
    pool = load_records("sst2", data / "sst2" / "train_full.tsv", notes)
    dev = load_records("sst2", data / "sst2" / "dev.tsv", notes)
    test = load_records("sst2", data / "sst2" / "test-labeled.tsv", notes)
    train = sample(pool, cfg["train_size"], seed, "sentiment-train")
    dev = limit(dev, eval_limit, seed, "sentiment-dev")
    test = limit(test, eval_limit, seed, "sentiment-test")
    subset = f"seeded random {len(train)}"
    fit = train_classifier("sentiment", (train, dev, test), cfg, out_root, subset)
    return {
        "data": {
            "train": {
                "file": "sst2/train_full.tsv",
                "pool": len(pool),
                "size": len(fit.train_rows),
                "labels": dict(Counter(r["label"] for r in fit.train_rows)),
                "subset": "seeded random sample of GLUE SST-2 train (phrases and sentences)",
            },
            "dev": {"file": "sst2/dev.tsv", "size": len(fit.dev_rows), "use": "epoch selection"},
            "test": {
                "file": "sst2/test-labeled.tsv",
                "size": len(fit.test_rows),
                "use": "held-out score only",
            },
            **notes,
        },
        "training": fit.training,
        "dev": fit.dev,
        "test": fit.test_scores,
        "eval_seconds": round(fit.seconds, 1),
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
    records = []
    for source in ("mnli", "snli"):
        for record in load_records("nli-jsonl", data / "nli" / source / "dev.jsonl", notes):
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
    test = limit(test, eval_limit, seed, "nli-test")
    subset = f"premise-grouped split, seeded random {len(train)}"
    fit = train_classifier("nli", (train, dev, test), cfg, out_root, subset)
    test_rows, predicted, seconds = fit.test_rows, fit.predicted, fit.seconds
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
    fit.test_scores["by_source"] = by_source

    anli = {}
    for rnd in ("R1", "R2", "R3"):
        path = data / "anli" / rnd / "test.jsonl"
        try:
            found = limit(load_records("anli", path, notes), eval_limit, seed, f"anli-{rnd}")
        except Missing as exc:
            anli[rnd] = {"skipped": str(exc)}
            log(f"nli: ANLI {rnd} skipped: {exc}")
            continue
        rows, predicted_r, secs = fit.predict(found, f"ANLI {rnd} test pairs")
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
                "size": len(fit.train_rows),
                "pool": len(pool),
                "by_source": source_counts(train),
                "labels": dict(Counter(r["label"] for r in fit.train_rows)),
            },
            "dev": {
                "size": len(fit.dev_rows),
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
        "training": fit.training,
        "dev": fit.dev,
        "test": fit.test_scores,
        "anli_test": anli,
        "eval_seconds": round(seconds, 1),
    }


def run_hate(cfg: dict, data: Path, out_root: Path, eval_limit: int | None) -> dict:
    notes: dict = {}
    seed = cfg["seed"]
    records = load_records("davidson", data / "davidson" / "labeled_data.csv", notes)
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
    test = limit(test, eval_limit, seed, "hate-test")
    subset = f"balanced: {n_hateful} hateful + {n_not} not-hateful, seeded"
    fit = train_classifier("hate", (train, dev, test), cfg, out_root, subset)
    seconds = fit.seconds

    dynahate: dict = {}
    try:
        dh = limit(
            [
                r
                for r in load_records("dynahate", data / "dynahate" / "db_test.csv", notes)
                if r.split == "test"
            ],
            eval_limit,
            seed,
            "dynahate",
        )
        dh_rows, dh_pred, secs = fit.predict(dh, "DynaHate test entries")
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
            load_records("hatecheck", data / "hatecheck" / "test_suite_cases.csv", notes),
            eval_limit,
            seed,
            "hatecheck",
        )
        hc_rows, hc_pred, secs = fit.predict(hc, "HateCheck cases")
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
                "size": len(fit.train_rows),
                "labels": dict(Counter(r["label"] for r in fit.train_rows)),
                "classes": dict(Counter(r.metadata["class"] for r in train)),
                "pool": {k: len(v) for k, v in pool.items()},
                "subset": "balanced: all hateful tweets of the pool (or train_size/2) plus "
                "as many random not-hateful ones",
            },
            "dev": {
                "size": len(fit.dev_rows),
                "labels": dict(Counter(r["label"] for r in fit.dev_rows)),
                "use": "epoch selection (natural label rates)",
            },
            "test": {
                "size": len(fit.test_rows),
                "labels": dict(Counter(r["label"] for r in fit.test_rows)),
                "use": "held-out score only (natural label rates)",
            },
            "dynahate": "dynahate/db_test.csv, rows with split=test, grouped by round number",
            "hatecheck": "hatecheck/test_suite_cases.csv",
            **notes,
        },
        "training": fit.training,
        "dev": fit.dev,
        "test": fit.test_scores,
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
    records = load_records("squad", data / "squad" / "dev-v1.1.json", notes)
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
        "squad/dev-v1.1.json",
        f"article split, seeded random {len(train_rows)}",
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
