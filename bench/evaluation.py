"""Evaluation speed: a model's evaluation job against a bare batched forward pass.

    .venv/bin/python bench/evaluation.py [--examples 800] [--out PATH]

In a scratch SQLite database it makes the sentiment task, imports ``--examples``
test sentences into round 0 (SST-2's validation set from $DYNABENCH_DATA_DIR when
present, else the shipped seed sentences repeated), trains a tiny model (2 steps;
speed does not depend on its quality), and measures in the same run:

* bare:      ``model(**tokenizer(batch))`` over the same texts, batch 32, no grad;
* predict:   ``ml.predict`` over them, batch 32 (what the evaluation scores with);
* evaluate:  the whole evaluation (``leaderboard.evaluation.evaluate_model``): scoring,
             intervals and resamples, throughput at batch 1, robustness and
             fairness (two more passes over the first 100 examples) and the writes.

It prints examples/s and each one's share of the bare throughput (the target for
the evaluation: at least 80%), and writes bench/results/evaluation.json.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from benchlib import RESULTS
from benchlib.data import data_dir, read_sst2
from benchlib.djangoside import setup_scratch
from benchlib.results import fixed_table, write_json
from benchlib.stats import seconds

COLUMNS = [("measure", "<9"), ("examples/s", ">11.1f"), ("of bare", ">8.0%")]


def sentences(n: int) -> list[tuple[str, str]]:
    folder = data_dir() / "sst2"
    found = []
    for path in sorted(folder.glob("*dev*.tsv")) + sorted(folder.glob("*validation*")):
        found = read_sst2(path)
        if found:
            break
    if not found:
        from leaderboard.rows import read_seed_rows

        found = [
            (r["inputs"]["statement"], r["label"]) for r in read_seed_rows("sentiment")["test"]
        ]
    return [found[i % len(found)] for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=800)
    parser.add_argument("--out", type=Path, default=RESULTS / "evaluation.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dynabench-bench-") as folder:
        setup_scratch(Path(folder))
        import torch

        import ml
        from annotation import counters
        from annotation.models import Example
        from leaderboard.evaluation import evaluate_model
        from leaderboard.rows import ml_spec, read_seed_rows
        from registry.services import register_model
        from tasks.models import Round
        from tasks.services import create_task, load_definition

        task, _ = create_task(load_definition("sentiment"))
        static = Round.objects.create(task=task, number=0, status=Round.Status.CLOSED)
        rows = sentences(args.examples)
        counters.record_new(Example.objects.bulk_create(
            [
                Example(
                    task=task,
                    round=static,
                    split="test",
                    source="import",
                    validation_status="verified",
                    external_uid=f"bench-{i}",
                    inputs={"statement": text},
                    target={"label": label},
                )
                for i, (text, label) in enumerate(rows)
            ]
        ))
        spec = ml_spec(task)
        seed = read_seed_rows("sentiment")["train"][:16]
        info = ml.train(spec, seed, [], Path(folder) / "model", max_steps=2, epochs=1, batch_size=8)
        model = register_model(task, info, name="bench")
        loaded = ml.load_artifact(info.path)
        texts = [text for text, _ in rows]

        def bare():
            with torch.inference_mode():
                for start in range(0, len(texts), 32):
                    encoded = loaded.tokenizer(
                        texts[start : start + 32],
                        padding=True,
                        truncation=True,
                        max_length=spec.max_tokens,
                        return_tensors="pt",
                    )
                    loaded.model(**encoded)

        ref = ml.ModelRef(str(info.path), info.sha256)

        def predict():
            ml.predict(ref, [{"statement": t} for t in texts], batch_size=32)

        def evaluate():
            evaluate_model(model, [static])

        bare(), predict()  # warm: models loaded, kernels ready
        timings = {}
        for name, fn in (
            ("bare", bare),
            ("predict", predict),
            ("evaluate", evaluate),
            ("bare_again", bare),
        ):
            timings[name] = seconds(fn)
    bare_s = (timings["bare"] + timings["bare_again"]) / 2
    rates = {name: args.examples / t for name, t in timings.items() if name != "bare_again"}
    rates["bare"] = args.examples / bare_s
    print(f"evaluation: {args.examples} examples (bare: mean of a run before and after)")
    print(
        fixed_table(
            COLUMNS,
            [
                [name, rates[name], rates[name] / rates["bare"]]
                for name in ("bare", "predict", "evaluate")
            ],
        )
    )
    document = {
        "examples": args.examples,
        "load_average": os.getloadavg(),
        "examples_per_second": rates,
        "share_of_bare": {k: v / rates["bare"] for k, v in rates.items()},
    }
    print("wrote", write_json(args.out, document))


if __name__ == "__main__":
    main()
