"""The leaderboard at scale: render time and query count with many models.

    .venv/bin/python bench/leaderboard.py [--models 200] [--datasets 10] [--runs 20] [--out PATH]

In a scratch SQLite database (a temporary folder; nothing of the project's own is
touched) it makes one task with ``--datasets`` rounds and ``--models`` evaluated
models, each with a stored evaluation per round (metrics, intervals and 1,000
paired resamples, as a real evaluation stores them), then measures, in the same
run:

* bare:  reading the same evaluation rows with one ORM query (the floor);
* board: ``leaderboard.board.board`` + ``as_json`` (ranking, Dynascore, intervals);
* api, page (cold): ``GET /api/tasks/<slug>/leaderboard/`` and ``GET
  /tasks/<slug>/leaderboard/?sort=dynascore`` through Django's test client, with the
  cache emptied before each request (the first visitor after a change);
* api, page (warm): the same with the board cached (``LEADERBOARD_CACHE_SECONDS``),
  what every later visitor gets until the task's evaluations or models change.

It prints a table of medians and ratios to the bare read, the query count of each
(the target: constant in the number of models), the cached document's size, and
writes bench/results/leaderboard.json.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import tempfile
from pathlib import Path

from benchlib import RESULTS
from benchlib.djangoside import setup_scratch
from benchlib.results import fixed_table, write_json
from benchlib.stats import seconds

COLUMNS = [("measure", "<10"), ("ms", ">9.1f"), ("x bare", ">8.1f"), ("queries", ">8d")]


def populate(n_models: int, n_datasets: int):
    import numpy as np

    from jobs.models import Job
    from leaderboard.board import pack
    from leaderboard.models import Evaluation
    from registry.models import ModelVersion
    from tasks.models import Round
    from tasks.services import create_task, load_definition

    definition = load_definition("sentiment")
    task, _ = create_task({**definition, "slug": "bench-sentiment", "name": "Bench sentiment"})
    rounds = [
        Round.objects.create(task=task, number=n, status=Round.Status.CLOSED)
        for n in range(n_datasets)
    ]
    rng = np.random.default_rng(0)
    models = ModelVersion.objects.bulk_create(
        [
            ModelVersion(
                task=task, name=f"model-{i:04d}", artifact_path=f"missing/{i}", sha256=f"{i:064x}"
            )
            for i in range(n_models)
        ]
    )
    Job.objects.bulk_create(
        [
            Job(
                kind=Job.Kind.EVALUATE_MODEL,
                status=Job.Status.SUCCEEDED,
                task=task,
                params={"model_version": m.pk, "rounds": None, "split": "test"},
            )
            for m in models
        ]
    )
    evaluations = []
    for m in models:
        skill = rng.uniform(0.5, 0.9)
        for rnd in rounds:
            accuracy = float(np.clip(skill + rng.normal(0, 0.03), 0, 1))
            values = np.clip(accuracy + rng.normal(0, 0.015, 1000), 0, 1)
            evaluations.append(
                Evaluation(
                    model_version=m,
                    round=rnd,
                    split="test",
                    num_examples=1000,
                    metrics={
                        "accuracy": accuracy,
                        "macro_f1": accuracy - 0.01,
                        "ece": float(rng.uniform(0.02, 0.2)),
                        "throughput": float(rng.uniform(50, 400)),
                        "memory_mb": float(rng.uniform(80, 500)),
                        "robustness": float(rng.uniform(0.7, 1)),
                        "fairness": float(rng.uniform(0.8, 1)),
                    },
                    intervals={
                        "accuracy": [accuracy - 0.03, accuracy + 0.03],
                        "ece": [0.01, 0.2],
                        "robustness": [0.6, 1.0],
                        "fairness": [0.7, 1.0],
                    },
                    replicates={"seed": 0, "n": len(values), "examples": "same"},
                    replicate_values=pack(values),
                )
            )
    Evaluation.objects.bulk_create(evaluations, batch_size=500)
    return task


def timed(fn, runs: int):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    fn()  # warm
    times, queries = [], None
    for _ in range(runs):
        with CaptureQueriesContext(connection) as captured:
            times.append(seconds(fn) * 1000)
        queries = len(captured.captured_queries)
    return statistics.median(times), queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--datasets", type=int, default=10)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS / "leaderboard.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dynabench-bench-") as folder:
        setup_scratch(Path(folder))
        from django.core.cache import cache
        from django.test import Client

        from leaderboard.board import as_json, board, board_json
        from leaderboard.models import Evaluation

        task = populate(args.models, args.datasets)
        client = Client()

        def bare():
            list(
                Evaluation.objects.filter(model_version__task=task).values_list(
                    "metrics", "replicates", "replicate_values"
                )
            )

        api, page = (
            f"/api/tasks/{task.slug}/leaderboard/",
            f"/tasks/{task.slug}/leaderboard/?sort=dynascore",
        )

        def cold(url):
            def get():
                cache.clear()
                return client.get(url)

            return get

        measures = {
            "bare": bare,
            "board": lambda: as_json(board(task)),
            "api-cold": cold(api),
            "api-warm": lambda: client.get(api),
            "page-cold": cold(page),
            "page-warm": lambda: client.get(page),
        }
        results = {name: timed(fn, args.runs) for name, fn in measures.items()}
        status = client.get(api).status_code
        size = len(pickle.dumps(board_json(task)))
    base = results["bare"][0]
    print(
        f"leaderboard: {args.models} models x {args.datasets} datasets, {args.runs} runs (medians)"
    )
    print(fixed_table(COLUMNS, [[name, ms, ms / base, q] for name, (ms, q) in results.items()]))
    print(f"cached board: {size / 1024:.0f} KB pickled")
    document = {
        "models": args.models,
        "datasets": args.datasets,
        "runs": args.runs,
        "api_status": status,
        "cached_bytes": size,
        "load_average": os.getloadavg(),
        "results": {
            name: {"median_ms": ms, "ratio_to_bare": ms / base, "queries": q}
            for name, (ms, q) in results.items()
        },
    }
    print("wrote", write_json(args.out, document))


if __name__ == "__main__":
    main()
