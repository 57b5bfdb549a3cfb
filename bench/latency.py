"""Latency of the ML core against a bare forward pass, in one process.

    .venv/bin/python bench/latency.py [--quick] [--threads N] [--out PATH]

Trains (or reuses, from var/bench/) a small SST-2-style sentiment model, then
measures on real sentences:

* bare:           ``model(**tokenizer(sentence))`` under torch.inference_mode
* ml.predict:     one example through the public API (validation, cache lookup,
                  softmax, result dicts)
* ml.explain:     layer integrated gradients, n_steps=10 and 50
* batch of 32:    examples/s, bare vs ml.predict

Prints a table with ratios to the bare pass and writes bench/results/latency.json.
Each measure is interleaved with bare passes and its ratio is taken against those,
so the ratios survive other processes loading the machine; the absolute numbers do
not (the JSON records the load average).  ``--threads N`` sets torch's intra-op
threads (DYNABENCH_TORCH_THREADS); on a busy 2-core machine 1 thread is far faster.
Sentences come from $DYNABENCH_DATA_DIR/sst2 (default var/data, which ``manage.py fetch_data``
fills); a small built-in list is used where that is absent.  Nothing from the
data folder is copied into the repository.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics

from benchlib import RESULTS, ROOT
from benchlib.data import SST2_LABELS, data_dir, read_sst2
from benchlib.results import fixed_table, log, utc_now, write_json
from benchlib.stats import cosine, repeat_seconds, seconds, summary_ms

import ml  # via benchlib: the repository first on sys.path

BUILTIN = [
    ("a gripping, beautifully acted story", "positive"),
    ("the plot is a mess and the jokes fall flat", "negative"),
    ("one of the warmest films of the year", "positive"),
    ("tedious, overlong and oddly joyless", "negative"),
    ("a small delight with a big heart", "positive"),
    ("I wanted to leave after twenty minutes", "negative"),
    ("smart, funny and surprisingly moving", "positive"),
    ("the cast seems as bored as the audience", "negative"),
    ("an irresistible crowd-pleaser", "positive"),
    ("nothing here feels fresh or alive", "negative"),
    ("a confident debut full of wit", "positive"),
    ("clumsy dialogue sinks every scene", "negative"),
]
COLUMNS = [
    ("measure", "<24"),
    ("n", ">5"),
    ("median ms", ">12.2f"),
    ("p95 ms", ">10.2f"),
    ("x bare", ">9.2f"),
]


def load_sentences(train_limit: int) -> tuple[list, list, str]:
    sst2 = data_dir() / "sst2"
    if (sst2 / "dev.tsv").is_file() and (sst2 / "train_full.tsv").is_file():
        return (
            read_sst2(sst2 / "train_full.tsv", train_limit),
            read_sst2(sst2 / "dev.tsv", 10_000),
            "sst2",
        )
    return BUILTIN, BUILTIN, "builtin"


def get_model(train_rows, dev_rows, steps: int, source: str) -> tuple[ml.ModelRef, dict]:
    """Reuse var/bench/<key> when it verifies and was trained the same way."""
    key = f"sentiment-{source}-{len(train_rows)}x{steps}"
    path = ROOT / "var" / "bench" / key
    if path.exists():
        try:
            info = ml.verify_artifact(path)
            log(f"reusing {path.relative_to(ROOT)} ({info.sha256[:12]})")
            return ml.ModelRef(str(path), info.sha256), info.metadata
        except ml.ArtifactError as exc:
            log(f"cached model unusable ({exc}); retraining")

            shutil.rmtree(path)
    spec = ml.TaskSpec(kind="classification", labels=SST2_LABELS, input_fields=["statement"])

    def rows(pairs):
        return [{"inputs": {"statement": s}, "label": label} for s, label in pairs]

    log(f"training {key} ({steps} steps) ...")
    info = ml.train(
        spec,
        rows(train_rows),
        rows(dev_rows[:200]),
        path,
        epochs=1,
        batch_size=16,
        lr=2e-4,
        max_steps=steps,
        training_data={"source": source, "purpose": "bench/latency.py"},
    )
    return ml.ModelRef(str(path), info.sha256), info.metadata


def latency_summary(samples: list[float]) -> dict:
    return summary_ms(samples, median_key="median_ms", digits=3, maximum=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument("--out", default=str(RESULTS / "latency.json"))
    parser.add_argument(
        "--threads", type=int, help="torch intra-op threads (sets DYNABENCH_TORCH_THREADS)"
    )
    args = parser.parse_args()
    if args.threads:
        os.environ["DYNABENCH_TORCH_THREADS"] = str(args.threads)
    from ml.backbones import configure_torch_threads

    configure_torch_threads()

    import torch

    quick = args.quick
    n_single = 40 if quick else 200
    n_explain10 = 8 if quick else 40
    n_explain50 = 4 if quick else 20
    n_batches = 4 if quick else 20
    steps = 20 if quick else 80

    load_start = os.getloadavg()[0]
    train_pairs, dev_pairs, source = load_sentences(train_limit=16 * steps)
    ref, metadata = get_model(train_pairs, dev_pairs, steps, source)
    sentences = [s for s, _ in dev_pairs]
    log(f"{len(sentences)} {source} sentences; torch threads {torch.get_num_threads()}")

    cache = ml.ModelCache(max_size=1)
    loaded = cache.get(ref)
    model, tokenizer, device = loaded.model, loaded.tokenizer, loaded.device

    def sentence(i):
        return sentences[i % len(sentences)]

    def bare(i):
        enc = tokenizer(sentence(i), return_tensors="pt", truncation=True, max_length=256)
        with torch.inference_mode():
            model(**{k: v.to(device) for k, v in enc.items()}).logits.softmax(-1)

    def api(i):
        ml.predict(ref, [{"statement": sentence(i)}], cache=cache)

    # warm up both paths (allocator, kernels, caches)
    repeat_seconds(bare, 10)
    repeat_seconds(api, 10)
    # interleave so that drifting machine load hits both equally
    bare_t, api_t = [], []
    for i in range(n_single):
        bare_t.append(seconds(bare, i))
        api_t.append(seconds(api, i))

    explain_runs = {}
    attributions = {10: [], 50: []}
    deltas = {10: [], 50: []}
    for n_steps, repeats in ((10, n_explain10), (50, n_explain50)):
        ml.explain(ref, {"statement": sentence(0)}, n_steps=n_steps, cache=cache)  # warm up

        def run(i, n_steps=n_steps):
            result = ml.explain(ref, {"statement": sentence(i)}, n_steps=n_steps, cache=cache)
            total = sum(abs(w["attribution"]) for w in result["words"])
            deltas[n_steps].append(abs(result["convergence_delta"]) / total if total else 0.0)
            attributions[n_steps].append([w["attribution"] for w in result["words"]])

        # interleaved with bare passes: the ratio stays fair if machine load drifts
        runs, paired_bare = [], []
        for i in range(repeats):
            paired_bare.append(seconds(bare, i))
            runs.append(seconds(run, i))
        explain_runs[n_steps] = (runs, paired_bare)
    agree = [cosine(a, b) for a, b in zip(attributions[10], attributions[50], strict=False)]

    batch_size = 32

    def batch_of(i):
        return [sentence(i * batch_size + j) for j in range(batch_size)]

    def bare_batch(i):
        enc = tokenizer(
            batch_of(i), return_tensors="pt", padding=True, truncation=True, max_length=256
        )
        with torch.inference_mode():
            model(**{k: v.to(device) for k, v in enc.items()}).logits.softmax(-1)

    def api_batch(i):
        ml.predict(ref, [{"statement": s} for s in batch_of(i)], cache=cache)

    repeat_seconds(bare_batch, 2)
    repeat_seconds(api_batch, 2)
    bare_b, api_b = [], []
    for i in range(n_batches):
        bare_b.append(seconds(bare_batch, i))
        api_b.append(seconds(api_batch, i))

    # Each measure's ratio is against the bare passes interleaved with it.
    measures = {
        "bare_forward": (bare_t, bare_t),
        "ml_predict_single": (api_t, bare_t),
        "ml_explain_n10": explain_runs[10],
        "ml_explain_n50": explain_runs[50],
    }
    rows = {}
    for name, (samples, paired_bare) in measures.items():
        row = latency_summary(samples)
        row["ratio_to_bare"] = round(statistics.median(samples) / statistics.median(paired_bare), 2)
        rows[name] = row
    throughput = {
        "batch_size": batch_size,
        "bare_examples_per_s": round(batch_size * len(bare_b) / sum(bare_b), 1),
        "ml_predict_examples_per_s": round(batch_size * len(api_b) / sum(api_b), 1),
    }
    throughput["ratio_to_bare"] = round(
        throughput["ml_predict_examples_per_s"] / throughput["bare_examples_per_s"], 2
    )
    explain_quality = {
        "relative_delta_n10_median": round(statistics.median(deltas[10]), 5),
        "relative_delta_n10_max": round(max(deltas[10]), 5),
        "relative_delta_n50_median": round(statistics.median(deltas[50]), 6),
        "relative_delta_n50_max": round(max(deltas[50]), 6),
        "cosine_n10_vs_n50_median": round(statistics.median(agree), 5),
        "cosine_n10_vs_n50_min": round(min(agree), 5),
        "note": "relative delta = |convergence_delta| / sum of |word attributions|",
    }

    result = {
        "benchmark": "latency",
        "quick": quick,
        "created_at": utc_now(),
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "device": str(device),
            "machine": platform.machine(),
            "loadavg_1min_start": round(load_start, 2),
            "loadavg_1min_end": round(os.getloadavg()[0], 2),
            "note": "other processes on a 2-core machine distort these numbers; compare ratios",
        },
        "model": {
            "sha256": ref.sha256,
            "backbone": metadata["backbone"],
            "train_steps": metadata["metrics"]["steps"],
            "dev_accuracy": metadata["metrics"]["dev_accuracy"],
            "sentences": source,
            "mean_sentence_chars": round(statistics.fmean(len(s) for s in sentences), 1),
        },
        "latency": rows,
        "batch_throughput": throughput,
        "explain_quality": explain_quality,
    }

    print(
        f"\nSentiment model ({source}, {metadata['metrics']['steps']} steps, "
        f"dev acc {metadata['metrics']['dev_accuracy']:.3f}), device {device}, "
        f"{torch.get_num_threads()} torch threads, load average {load_start:.2f} -> "
        f"{os.getloadavg()[0]:.2f}\n"
    )
    cells = [
        [name, r["n"], r["median_ms"], r["p95_ms"], r["ratio_to_bare"]] for name, r in rows.items()
    ]
    print(fixed_table(COLUMNS, cells, sep=""))
    print(
        f"\nbatch of {batch_size}: bare {throughput['bare_examples_per_s']:.1f} ex/s, "
        f"ml.predict {throughput['ml_predict_examples_per_s']:.1f} ex/s "
        f"(x{throughput['ratio_to_bare']:.2f})"
    )
    print(
        f"explain: |delta|/sum|attr| median n10 {explain_quality['relative_delta_n10_median']}, "
        f"n50 {explain_quality['relative_delta_n50_median']}; cosine(n10, n50) median "
        f"{explain_quality['cosine_n10_vs_n50_median']}, min {explain_quality['cosine_n10_vs_n50_min']}"
    )

    print(f"\nwrote {write_json(args.out, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
