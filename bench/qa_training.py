"""What a QA target reaches on this machine in a given time: MiniLM fine-tuned on SQuAD
under a time budget, scored at 10, 30 and 60 minutes of training against the
sliding-window reference line on the same held-out questions.

    .venv/bin/python bench/qa_training.py                      # 10, 30, 60 minutes (about 75 min)
    .venv/bin/python bench/qa_training.py --minutes 5,15       # other marks (the last is the budget)
    .venv/bin/python bench/qa_training.py --backbone DIR --device cuda   # a bigger model on a GPU
    .venv/bin/python bench/qa_training.py --quick              # a smoke run: seconds, into var/bench

``make run`` trains its QA target with the recipe ``leaderboard.demo.QA_TRAINING``
(its epochs, batch size, learning rate and seed; its time budget is the setting
``DYNABENCH_QA_TRAINING_MINUTES``); this bench trains with the same recipe, so its
curve is what that target reaches in each budget. One run: the learning-rate schedule
depends on the step alone, so the weights at minute t (``ml.train``'s
``snapshot_minutes``) are what a run with a budget of t minutes keeps; each mark is
scored as such (the final one after its own dev scoring, as the platform's run is).
Scoring time is not training time.

Data: SQuAD v1.1 dev split by article with ``bench/baselines.py``'s seeded split:
10 held-out articles (2,457 questions) to score on, 3 for dev (300 questions), every
question of the rest to train on. Each mark's F1 is scored against the first gold
answer (what the platform stores and what its promotion rule reads) with its 95%
bootstrap interval, and against all gold answers (SQuAD's official scoring); the
reference line is ``ml.baselines``' sliding window on the same questions, and the
difference is a paired bootstrap. "Clears the line" is the platform's rule: the
interval lies above the line.

Writes bench/results/qa-training.json (``--out``); ``bench/report.py`` renders it
into bench/RESULTS.md. Reads $DYNABENCH_DATA_DIR/squad/dev-v1.1.json; nothing from the
data folder is copied into the repository.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import torch
from benchlib import RESULTS, ROOT
from benchlib.baselines_tasks import QA_DEV_ARTICLES, QA_DEV_QUESTIONS, QA_TEST_ARTICLES, qa_inputs
from benchlib.data import data_dir, load_records, rng, sample
from benchlib.results import (
    Progress,
    command_line,
    library_versions,
    log,
    markdown_table,
    pct,
    utc_now,
    write_json,
)

import ml
from ml import baselines, scoring
from ml import metrics as M

# leaderboard.demo.QA_TRAINING without its budget (a test holds the two together; the
# bench reads no Django)
RECIPE = {"epochs": 2, "batch_size": 16, "lr": 1e-4, "seed": 0}
SPEC = {"kind": "extractive_qa", "input_fields": ["passage", "question"], "max_chars": 5000,
        "field_max_chars": {"passage": 20000}}  # the platform's QA task: its default max_tokens


def split(records: list, seed: int) -> tuple[list, list, list]:
    titles = sorted({r.context["fields"]["title"] for r in records})
    rng(seed, "qa-articles").shuffle(titles)  # bench/baselines.py's split
    test_titles = set(titles[:QA_TEST_ARTICLES])
    dev_titles = set(titles[QA_TEST_ARTICLES: QA_TEST_ARTICLES + QA_DEV_ARTICLES])
    train = [r for r in records if r.context["fields"]["title"] not in test_titles | dev_titles]
    dev = sample([r for r in records if r.context["fields"]["title"] in dev_titles], QA_DEV_QUESTIONS, seed,
                 "qa-dev")
    test = [r for r in records if r.context["fields"]["title"] in test_titles]
    return train, dev, test


def per_question(answers: list[str], test: list) -> dict:
    """Per-question F1 and exact match, against the first gold answer and against all."""
    golds = [[a["text"] for a in r.metadata["answers"]] for r in test]
    return {"first_f1": [M.f1(a, g[0]) for a, g in zip(answers, golds, strict=True)],
            "first_em": [M.exact_match(a, g[0]) for a, g in zip(answers, golds, strict=True)],
            "all_f1": [M.f1(a, g) for a, g in zip(answers, golds, strict=True)],
            "all_em": [M.exact_match(a, g) for a, g in zip(answers, golds, strict=True)]}


def summary(scores: dict, reference: dict) -> dict:
    f1 = scoring.bootstrap_ci(scores["first_f1"])
    against = scoring.paired_bootstrap(scores["first_f1"], reference["first_f1"])
    mean = {key: sum(values) / len(values) for key, values in scores.items()}
    return {"f1": f1.value, "f1_interval": [f1.low, f1.high], "exact_match": mean["first_em"],
            "f1_all_answers": mean["all_f1"], "exact_match_all_answers": mean["all_em"],
            "minus_reference": {"difference": against.difference, "interval": [against.low, against.high]},
            "clears_reference": f1.low > sum(reference["first_f1"]) / len(reference["first_f1"])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", default="10,30,60",
                        help="marks in minutes of training, comma-separated; the last is the budget")
    parser.add_argument("--backbone", default=ml.DEFAULT_BACKBONE, help="a built-in name or a local directory")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: ml's choice)")
    parser.add_argument("--eval-limit", type=int, default=None, help="score on a seeded sample of the test set")
    parser.add_argument("--quick", action="store_true", help="marks of seconds, 100 test questions, into var/bench")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.minutes, args.eval_limit = "0.1,0.25", args.eval_limit or 100
    marks = sorted(float(m) for m in args.minutes.split(","))
    out = Path(args.out) if args.out else (ROOT / "var" / "bench" / "qa-training-quick.json" if args.quick
                                           else RESULTS / "qa-training.json")

    load_before = list(os.getloadavg())  # other work on the cores slows training: a curve says so
    notes: dict = {}
    records = load_records("squad", data_dir() / "squad" / "dev-v1.1.json", notes)
    train, dev, test = split(records, RECIPE["seed"])
    if args.eval_limit:
        test = sample(test, args.eval_limit, RECIPE["seed"], "qa-test")
    train_rows = [{"inputs": qa_inputs(r), "answer": dict(r.target)} for r in train]
    dev_rows = [{"inputs": qa_inputs(r), "answers": r.metadata["answers"]} for r in dev]
    inputs = [qa_inputs(r) for r in test]

    reference_answers = [baselines.sliding_window_answer(i["passage"], i["question"])["answer"] for i in inputs]
    reference = per_question(reference_answers, test)
    reference_f1 = scoring.bootstrap_ci(reference["first_f1"])

    (ROOT / "var" / "bench").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="qa-training-", dir=ROOT / "var" / "bench"))  # removed at the end
    try:
        log(f"training on {len(train_rows)} questions for at most {marks[-1]:g} minutes; marks at "
            f"{', '.join(f'{m:g}' for m in marks)}; scoring on {len(test)} held-out questions")
        loads, say = [], Progress("qa")

        def sampled(percent: float, message: str) -> None:  # the 1-minute load at each progress line
            loads.append(os.getloadavg()[0])
            say(percent, message)

        started = time.perf_counter()
        info = ml.train(ml.TaskSpec.from_dict(SPEC), train_rows, dev_rows, work / "final", backbone=args.backbone,
                        device=args.device, max_minutes=marks[-1], snapshot_minutes=marks[:-1],
                        training_data={"purpose": "bench/qa_training.py"}, progress=sampled, **RECIPE)
        wall = time.perf_counter() - started
        metrics = info.metadata["metrics"]
        points = [(s["minutes"], Path(s["path"]), s["step"]) for s in metrics.get("snapshots", [])]
        points.append((marks[-1], info.path, metrics["steps"]))

        rows, results = [], []
        for minutes, path, steps in points:
            scored = time.perf_counter()
            answers = [p["answer"] for p in ml.predict(ml.ModelRef(str(path)), inputs, batch_size=32)]
            seconds = time.perf_counter() - scored
            found = {"minutes": minutes, "steps": steps, "examples_seen": steps * RECIPE["batch_size"],
                     **summary(per_question(answers, test), reference), "scoring_seconds": round(seconds, 1)}
            results.append(found)
            low, high = found["f1_interval"]
            log(f"{minutes:g} min: F1 {pct(found['f1'])} ({pct(low)}-{pct(high)})")
            rows.append([f"{minutes:g}", str(steps), pct(found["f1"]),
                         f"{pct(found['f1_interval'][0])}–{pct(found['f1_interval'][1])}", pct(found["exact_match"]),
                         pct(found["f1_all_answers"]), "yes" if found["clears_reference"] else "no"])
        print(markdown_table(["minutes", "steps", "F1", "95% interval", "EM", "F1 (all answers)", "clears the line"],
                             rows))
        print(f"reference line (sliding window, same questions): F1 {pct(reference_f1.value)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        log(f"removed the models under {work}")
    document = {
        "what": "a QA model fine-tuned on SQuAD under a time budget, against the sliding-window line",
        "when": utc_now(), "command": command_line(argv),
        "versions": library_versions("torch", "transformers", "numpy"),
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
                    "load_average_before": load_before,
                    "load_average_after": list(os.getloadavg()),
                    "load_during_training": {"mean": round(sum(loads) / len(loads), 2), "max": round(max(loads), 2),
                                             "samples": len(loads)}},
        "device": metrics["device"], "backbone": str(args.backbone), "recipe": RECIPE, "max_tokens": metrics[
            "hyperparameters"]["max_tokens"],
        "data": {"file": "squad/dev-v1.1.json", "train_questions": len(train_rows),
                 "train_features": metrics["train_features"], "dev_questions": len(dev_rows),
                 "test_questions": len(test),
                 "split": f"by article title, seeded as bench/baselines.py: {QA_TEST_ARTICLES} test articles, "
                          f"{QA_DEV_ARTICLES} dev ({QA_DEV_QUESTIONS} questions), the rest train"
                          + (f"; a seeded sample of {len(test)} test questions" if args.eval_limit else ""),
                 **notes},
        "reference": {"what": "ml.baselines sliding window, first gold answer", "max_span_words":
                      baselines.MAX_SPAN_WORDS, "f1": reference_f1.value,
                      "f1_interval": [reference_f1.low, reference_f1.high]},
        "training": {"wall_seconds": round(wall, 1), "train_seconds": metrics["train_seconds"],
                     "stopped_by_time_budget": metrics.get("stopped_by_time_budget"),
                     "epochs_run": metrics["epochs_run"], "history": metrics["history"]},
        "marks": results,
    }
    log(f"wrote {write_json(out, document)}")


if __name__ == "__main__":
    main()
