"""Training: learning, progress, model selection metadata, determinism, bad rows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ml
from ml import InputError
from ml.features import qa_features, validate_rows


def test_training_fits_its_small_training_set(sentiment_model):
    metrics = sentiment_model.metadata["metrics"]
    history = metrics["history"]
    assert [h["epoch"] for h in history] == [1, 2, 3, 4]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert metrics["dev_accuracy"] >= 0.9  # dev == train here: the loop can fit 16 rows
    assert metrics["dev_accuracy"] == max(h["dev_accuracy"] for h in history)
    best = history[metrics["best_epoch"] - 1]
    assert best["dev_accuracy"] == metrics["dev_accuracy"]
    assert metrics["steps"] == 8 and metrics["train_count"] == 16 and metrics["dev_count"] == 16
    assert metrics["dev_report"]["confusion_matrix"]


def test_saved_weights_are_the_best_epoch(sentiment_model, sentiment_rows, cache):
    """Model selection: re-scoring the saved artifact reproduces the best epoch."""
    results = ml.predict(
        ml.ModelRef(str(sentiment_model.path)), [r["inputs"] for r in sentiment_rows], cache=cache
    )
    accuracy = (
        sum(p["label"] == r["label"] for p, r in zip(results, sentiment_rows, strict=True)) / 16
    )
    assert accuracy == pytest.approx(sentiment_model.metadata["metrics"]["dev_accuracy"])


def test_progress_is_reported_and_training_is_deterministic(
    tmp_path, nli_spec, nli_rows, nli_model
):
    calls = []
    info = ml.train(
        nli_spec,
        nli_rows,
        nli_rows,
        tmp_path / "again",
        max_steps=2,
        batch_size=8,
        seed=0,
        progress=lambda pct, msg: calls.append((pct, msg)),
    )
    percents = [p for p, _ in calls]
    assert percents == sorted(percents) and percents[0] == 0.0 and percents[-1] == 100.0
    assert any("step 2/2" in m for _, m in calls) and any("dev accuracy" in m for _, m in calls)
    # Same seed and data: identical weights. The artifact digest covers the whole
    # metadata (its timestamp and timings too), so the two artifacts are still two.
    assert (
        info.metadata["files"]["model.safetensors"]
        == nli_model.metadata["files"]["model.safetensors"]
    )
    assert info.sha256 == ml.artifact_sha256(info.metadata) != nli_model.sha256


def test_raising_from_progress_aborts_without_writing(tmp_path, nli_spec, nli_rows):
    def cancel(pct, msg):
        if pct > 1:
            raise RuntimeError("job cancelled")

    with pytest.raises(RuntimeError, match="cancelled"):
        ml.train(
            nli_spec, nli_rows, [], tmp_path / "never", max_steps=2, batch_size=8, progress=cancel
        )
    assert not (tmp_path / "never").exists()
    assert os.listdir(tmp_path) == []


def test_no_dev_rows_keeps_the_last_weights(tmp_path, sentiment_spec, sentiment_rows):
    info = ml.train(
        sentiment_spec, sentiment_rows[:4], [], tmp_path / "m", max_steps=1, batch_size=4
    )
    metrics = info.metadata["metrics"]
    assert metrics["dev_accuracy"] is None and metrics["dev_count"] == 0
    assert metrics["best_epoch"] == 1


@pytest.mark.parametrize(
    "row, field, words",
    [
        ({"inputs": {"statement": "fine"}, "label": "meh"}, "label", "unknown label 'meh'"),
        ({"inputs": {"statement": "fine"}}, "label", "required"),
        ({"inputs": {"statement": "   "}, "label": "positive"}, "statement", "empty"),
        ({"inputs": {"statement": "x" * 1001}, "label": "positive"}, "statement", "limit is 1000"),
        ({"inputs": {"text": "fine"}, "label": "positive"}, "statement", "required"),
        ({"label": "positive"}, "inputs", "inputs"),
    ],
)
def test_bad_training_rows_fail_before_any_work(tmp_path, sentiment_spec, row, field, words):
    good = {"inputs": {"statement": "good"}, "label": "positive"}
    with pytest.raises(InputError) as info:
        ml.train(sentiment_spec, [good, row], [], tmp_path / "m")
    assert info.value.field == field
    assert words in info.value.message and "train row 1" in info.value.message
    assert not (tmp_path / "m").exists()


def test_bad_qa_answers(qa_spec):
    passage = "The bridge opened in 1932."
    bad = [
        {"text": "1933", "start": 21},
        {"text": "1932", "start": 3},
        {"text": "", "start": 0},
        {"text": "1999"},  # no start and not in the passage
    ]
    for answer in bad:
        row = {"inputs": {"passage": passage, "question": "When?"}, "answer": answer}
        with pytest.raises(InputError) as info:
            validate_rows(qa_spec, [row], "train")
        assert info.value.field == "answer"
    row = {"inputs": {"passage": passage, "question": "When?"}, "answer": {"text": "1932"}}
    assert validate_rows(qa_spec, [row], "train")[0]["answers"] == [("1932", 21)]


def test_qa_features_map_answers_to_tokens_or_cls(qa_spec, qa_rows, long_passage):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ml.resolve_backbone("all-MiniLM-L6-v2"))
    rows = validate_rows(qa_spec, qa_rows, "train")
    features = qa_features(tokenizer, qa_spec, rows)
    encoding_rows = [r for r in rows if r["inputs"]["passage"] == long_passage]
    assert len(features) > len(rows)  # the long passage needs several windows
    from ml.inference import encode_qa

    encoding = encode_qa(tokenizer, qa_spec, [r["inputs"] for r in rows])
    hits = {i: 0 for i in range(len(rows))}
    for i, feature in enumerate(features):
        assert len(feature["input_ids"]) <= qa_spec.max_tokens
        sample = encoding["overflow_to_sample_mapping"][i]
        text, start = rows[sample]["answers"][0]
        s, e = feature["start_positions"], feature["end_positions"]
        if s == 0:
            assert e == 0  # answer not in this window: [CLS]
            continue
        offsets = encoding["offset_mapping"][i]
        passage = rows[sample]["inputs"]["passage"]
        assert passage[offsets[s][0] : offsets[e][1]] == text
        assert offsets[s][0] == start
        hits[sample] += 1
    assert hits and all(hits.values())  # every answer is inside at least one window
    assert len(encoding_rows) == 1


def test_qa_training_reports_squad_metrics(qa_model):
    metrics = qa_model.metadata["metrics"]
    assert 0.0 <= metrics["dev_exact_match"] <= metrics["dev_f1"] <= 1.0
    assert metrics["train_features"] > metrics["train_count"]
    assert qa_model.metadata["label_map"] == {}
    assert Path(qa_model.path, "model.safetensors").is_file()


@pytest.mark.slow
def test_learns_real_sentiment_data(tmp_path):
    """640 SST-2 sentences, one epoch: clearly above chance (0.77 measured; ~20 s)."""
    data = Path(os.environ.get("DYNABENCH_DATA_DIR", Path(__file__).parents[3] / "shared" / "data"))
    train_file, dev_file = data / "sst2" / "train_full.tsv", data / "sst2" / "dev.tsv"
    if not dev_file.is_file():
        pytest.skip(f"SST-2 not found under {data} (set DYNABENCH_DATA_DIR)")

    def read(path, limit):
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:
            sentence, label = line.rsplit("\t", 1)
            rows.append(
                {
                    "inputs": {"statement": sentence.strip()},
                    "label": ["negative", "positive"][int(label)],
                }
            )
        return rows[:limit]

    spec = ml.TaskSpec(
        kind="classification", labels=["negative", "positive"], input_fields=["statement"]
    )
    info = ml.train(
        spec,
        read(train_file, 640),
        read(dev_file, 200),
        tmp_path / "sst2",
        epochs=1,
        batch_size=16,
        lr=2e-4,
    )
    assert info.metadata["metrics"]["dev_accuracy"] >= 0.7


def test_an_existing_output_directory_is_refused_before_training(tmp_path, sentiment_spec):
    (tmp_path / "taken").mkdir()
    with pytest.raises(ml.ArtifactError, match="already exists"):
        ml.train(sentiment_spec, [], [], tmp_path / "taken")


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))


def test_head_only_training_leaves_the_encoder_as_it_was(tmp_path, sentiment_spec, sentiment_rows):
    info = ml.train(sentiment_spec, sentiment_rows, [], tmp_path / "head", max_steps=2, batch_size=8,
                    freeze_encoder=True, lr=1e-2)
    backbone = _weights(ml.backbones.resolve_backbone(ml.backbones.DEFAULT_BACKBONE))
    trained = _weights(info.path)
    shared = [k for k in trained if k.startswith("bert.") and k.removeprefix("bert.") in backbone]
    assert len(shared) > 90  # every encoder tensor, unchanged
    assert all(torch_equal(trained[k], backbone[k.removeprefix("bert.")]) for k in shared)
    fresh_head = ml.train(sentiment_spec, sentiment_rows, [], tmp_path / "head2", max_steps=1, batch_size=8,
                          freeze_encoder=True, lr=1e-2)
    assert not torch_equal(_weights(fresh_head.path)["classifier.weight"], trained["classifier.weight"])
    assert info.metadata["metrics"]["hyperparameters"]["freeze_encoder"] is True


def test_training_can_start_from_a_parent_artifact(tmp_path, sentiment_spec, sentiment_rows, sentiment_model):
    """A parent's directory is a backbone: its weights, head included, are the start."""
    child = ml.train(sentiment_spec, sentiment_rows, [], tmp_path / "child", max_steps=1, batch_size=4,
                     lr=1e-12, backbone=str(sentiment_model.path))
    parent_w, child_w = _weights(sentiment_model.path), _weights(child.path)
    # A vanishing learning rate: the child is its parent, classifier head included.
    assert max(float((parent_w[k] - child_w[k]).abs().max()) for k in parent_w) < 1e-5
    # From the plain backbone, with another seed, the head starts elsewhere.
    fresh = ml.train(sentiment_spec, sentiment_rows, [], tmp_path / "fresh", max_steps=1, batch_size=4,
                     lr=1e-12, seed=1)
    assert float((_weights(fresh.path)["classifier.weight"] - parent_w["classifier.weight"]).abs().max()) > 1e-2


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


def test_a_time_budget_stops_training_and_keeps_what_it_reached(tmp_path, sentiment_spec, sentiment_rows):
    """A budget far below one step's time: training stops after the first step, scores
    on dev there, and saves; an epoch cap alone would have run 3 epochs of 2 steps."""
    calls = []
    info = ml.train(sentiment_spec, sentiment_rows, sentiment_rows, tmp_path / "budget", epochs=3, batch_size=8,
                    max_minutes=1e-6, progress=lambda pct, msg: calls.append((pct, msg)))
    metrics = info.metadata["metrics"]
    assert metrics["steps"] == 1 and metrics["epochs_run"] == 1
    assert metrics["stopped_by_time_budget"] is True
    assert metrics["hyperparameters"]["max_minutes"] == 1e-6
    assert metrics["dev_accuracy"] is not None  # scored where it stopped
    assert any("the time budget is spent" in message for _, message in calls)
    percents = [p for p, _ in calls]
    assert percents == sorted(percents) and percents[-1] == 100.0


def test_a_budget_that_is_not_reached_changes_nothing(tmp_path, sentiment_spec, sentiment_rows):
    info = ml.train(sentiment_spec, sentiment_rows[:8], [], tmp_path / "roomy", max_steps=2, batch_size=4,
                    max_minutes=60)
    metrics = info.metadata["metrics"]
    assert metrics["steps"] == 2 and metrics["stopped_by_time_budget"] is False


def test_snapshots_save_the_weights_of_that_minute_beside_the_model(tmp_path, sentiment_spec, sentiment_rows, cache):
    info = ml.train(sentiment_spec, sentiment_rows[:8], [], tmp_path / "curve", max_steps=3, batch_size=4,
                    snapshot_minutes=[1e-6])
    snapshots = info.metadata["metrics"]["snapshots"]
    assert [(s["minutes"], s["step"]) for s in snapshots] == [(1e-6, 1)]
    path = Path(snapshots[0]["path"])
    assert path == tmp_path / "curve-at-1e-06min" and path.is_dir()
    snapshot = ml.verify_artifact(path)
    assert snapshot.metadata["metrics"]["steps"] == 1
    # It loads and predicts like any model, and holds other weights than the final one.
    assert ml.predict(ml.ModelRef(str(path)), [sentiment_rows[0]["inputs"]], cache=cache)[0]["label"]
    assert snapshot.metadata["files"]["model.safetensors"] != info.metadata["files"]["model.safetensors"]


@pytest.mark.parametrize("options", [{"max_minutes": 0}, {"max_minutes": -1}, {"snapshot_minutes": [0]}])
def test_a_budget_must_be_positive(tmp_path, sentiment_spec, sentiment_rows, options):
    with pytest.raises(ValueError, match="must be positive"):
        ml.train(sentiment_spec, sentiment_rows[:4], [], tmp_path / "no", max_steps=1, **options)
    assert not (tmp_path / "no").exists()
