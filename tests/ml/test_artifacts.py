"""Artifact save / verify / load: hashes, tampering, missing files, atomic writes."""

from __future__ import annotations

import json
import shutil

import pytest

import ml
from ml import ArtifactError
from ml.artifacts import artifact_sha256, combined_sha256, file_sha256, verify_artifact


@pytest.fixture
def artifact_copy(sentiment_model, tmp_path):
    """A private copy of the sentiment artifact that a test may damage."""
    target = tmp_path / "copy"
    shutil.copytree(sentiment_model.path, target)
    return target


def test_metadata_shape(sentiment_model):
    meta = json.loads((sentiment_model.path / "metadata.json").read_text())
    assert meta == sentiment_model.metadata
    assert meta["format_version"] == 2
    assert meta["created_at"].endswith("Z")
    assert meta["task"]["kind"] == "classification"
    assert meta["task"]["labels"] == ["negative", "positive"]
    assert meta["label_map"] == {"negative": 0, "positive": 1}
    assert meta["backbone"] == "all-MiniLM-L6-v2"
    assert meta["training_data"]["rounds"] == [0]
    assert meta["training_data"]["train_count"] == 16
    metrics = meta["metrics"]
    assert {"dev_accuracy", "dev_macro_f1", "train_count", "dev_count", "steps", "seconds"} <= set(
        metrics
    )
    assert set(meta["files"]) >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert "metadata.json" not in meta["files"]
    for name, digest in meta["files"].items():
        assert file_sha256(sentiment_model.path / name) == digest
    assert meta["sha256"] == artifact_sha256(meta) == sentiment_model.sha256


def test_artifact_holds_no_pickles_and_no_temp_dirs_remain(sentiment_model):
    names = {p.name for p in sentiment_model.path.iterdir()}
    assert not {n for n in names if n.endswith((".bin", ".pt", ".pkl", ".pickle"))}
    siblings = [p.name for p in sentiment_model.path.parent.iterdir()]
    assert not [n for n in siblings if ".tmp-" in n]


def test_round_trip_load(sentiment_model):
    loaded = ml.load_artifact(sentiment_model.path, sentiment_model.sha256)
    assert loaded.spec.labels == ["negative", "positive"]
    assert loaded.sha256 == sentiment_model.sha256
    assert loaded.model.training is False
    assert loaded.model.config.id2label == {0: "negative", 1: "positive"}
    info = verify_artifact(sentiment_model.path)
    assert info.sha256 == sentiment_model.sha256


def test_tampered_weights_are_refused_and_never_loaded(artifact_copy, sentiment_model, cache):
    with open(artifact_copy / "model.safetensors", "r+b") as fh:
        fh.seek(-16, 2)
        fh.write(b"\x01" * 16)
    actual = file_sha256(artifact_copy / "model.safetensors")
    expected = sentiment_model.metadata["files"]["model.safetensors"]
    with pytest.raises(ArtifactError) as info:
        verify_artifact(artifact_copy)
    message = str(info.value)
    assert "model.safetensors" in message
    assert expected in message and actual in message
    with pytest.raises(ArtifactError, match="model.safetensors"):
        cache.get(ml.ModelRef(str(artifact_copy), sentiment_model.sha256))
    with pytest.raises(ArtifactError, match="model.safetensors"):
        ml.predict(ml.ModelRef(str(artifact_copy)), [{"statement": "hi"}], cache=cache)
    assert len(cache) == 0 and cache.loads == 0


def test_tampered_tokenizer_is_refused(artifact_copy):
    path = artifact_copy / "tokenizer.json"
    path.write_text(path.read_text().replace('"[UNK]"', '"[UNX]"', 1))
    with pytest.raises(ArtifactError, match="sha256 mismatch for tokenizer.json"):
        verify_artifact(artifact_copy)


def test_missing_file_is_refused(artifact_copy, cache):
    (artifact_copy / "tokenizer.json").unlink()
    with pytest.raises(ArtifactError, match=r"missing file\(s\): tokenizer.json"):
        verify_artifact(artifact_copy)
    with pytest.raises(ArtifactError, match="missing"):
        cache.get(str(artifact_copy))
    assert len(cache) == 0


def test_missing_metadata_and_missing_directory(artifact_copy, tmp_path):
    (artifact_copy / "metadata.json").unlink()
    with pytest.raises(ArtifactError, match="missing metadata.json"):
        verify_artifact(artifact_copy)
    with pytest.raises(ArtifactError, match="does not exist"):
        verify_artifact(tmp_path / "nowhere")


def test_unlisted_file_is_refused(artifact_copy):
    (artifact_copy / "pytorch_model.bin").write_bytes(b"not a pickle, but never read anyway")
    with pytest.raises(ArtifactError, match="unexpected file.*pytorch_model.bin"):
        verify_artifact(artifact_copy)


def test_expected_sha256_mismatch(artifact_copy, sentiment_model, sentiment_model_b):
    with pytest.raises(ArtifactError, match="sha256 mismatch: expected"):
        verify_artifact(artifact_copy, sentiment_model_b.sha256)
    assert verify_artifact(artifact_copy, sentiment_model.sha256.upper()).sha256 == (
        sentiment_model.sha256
    )


def test_edited_metadata_digest_is_refused(artifact_copy):
    meta = json.loads((artifact_copy / "metadata.json").read_text())
    meta["files"]["model.safetensors"] = "0" * 64
    (artifact_copy / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="inconsistent"):
        verify_artifact(artifact_copy)
    # ...and a consistent rewrite of the metadata still fails on the file itself.
    meta["sha256"] = artifact_sha256(meta)
    (artifact_copy / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="sha256 mismatch for model.safetensors"):
        verify_artifact(artifact_copy)


def test_a_tampered_task_spec_in_the_metadata_is_refused(artifact_copy, sentiment_model, cache):
    """The attacker edits only metadata.json's task spec (longer inputs, another input
    field): the files are untouched, so a digest of the files alone would pass it."""
    meta = json.loads((artifact_copy / "metadata.json").read_text())
    meta["task"]["max_chars"] = 10_000_000
    meta["task"]["input_fields"] = ["statement", "smuggled"]
    (artifact_copy / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="inconsistent"):
        verify_artifact(artifact_copy)
    with pytest.raises(ArtifactError, match="inconsistent"):
        cache.get(ml.ModelRef(str(artifact_copy), sentiment_model.sha256))
    # Rewriting the digest to match makes another artifact, not the registered one.
    meta["sha256"] = artifact_sha256(meta)
    (artifact_copy / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="sha256 mismatch: expected"):
        verify_artifact(artifact_copy, sentiment_model.sha256)
    # So does passing it off as a format 1 artifact, whose digest covers the files only.
    meta.update(format_version=1, sha256=combined_sha256(meta["files"]))
    (artifact_copy / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="sha256 mismatch: expected"):
        verify_artifact(artifact_copy, sentiment_model.sha256)
    assert len(cache) == 0


def test_a_format_1_artifact_is_still_read(artifact_copy):
    """Artifacts written before format 2 keep loading under the digest they were registered with."""
    meta = json.loads((artifact_copy / "metadata.json").read_text())
    meta.update(format_version=1, sha256=combined_sha256(meta["files"]))
    (artifact_copy / "metadata.json").write_text(json.dumps(meta))
    assert verify_artifact(artifact_copy, meta["sha256"]).sha256 == combined_sha256(meta["files"])
    meta["format_version"] = 3
    (artifact_copy / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="unsupported format_version 3"):
        verify_artifact(artifact_copy)


def test_save_refuses_to_overwrite(sentiment_model, sentiment_spec):
    loaded = ml.load_artifact(sentiment_model.path)
    with pytest.raises(ArtifactError, match="already exists"):
        ml.save_artifact(
            loaded.model, loaded.tokenizer, sentiment_spec, sentiment_model.path, backbone="x"
        )


def test_save_overwrite_swaps_atomically(sentiment_model, sentiment_spec, tmp_path):
    loaded = ml.load_artifact(sentiment_model.path)
    target = tmp_path / "art"
    first = ml.save_artifact(loaded.model, loaded.tokenizer, sentiment_spec, target, backbone="x")
    second = ml.save_artifact(
        loaded.model,
        loaded.tokenizer,
        sentiment_spec,
        target,
        backbone="x",
        metrics={"note": "again"},
        overwrite=True,
    )
    assert first.metadata["files"] == second.metadata["files"]  # same weights and tokenizer
    assert first.sha256 != second.sha256  # other metadata (metrics): another artifact
    assert verify_artifact(target).metadata["metrics"] == {"note": "again"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]


def _counting_opens(monkeypatch):
    """Count the files ``ml.artifacts`` opens (the reads a digest costs)."""
    import builtins

    import ml.artifacts as artifacts

    opened = []

    def counting_open(path, *args, **kwargs):
        opened.append(str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(artifacts, "open", counting_open, raising=False)
    return opened


def test_a_file_hashed_before_is_not_read_again_until_it_changes(tmp_path, monkeypatch):
    import hashlib
    import os
    import time

    import ml.artifacts as artifacts

    monkeypatch.setattr(artifacts, "STABLE_AFTER", 0.0)  # a file written just now counts as settled
    path = tmp_path / "weights.bin"
    path.write_bytes(b"a" * 4096)
    time.sleep(0.05)
    opened = _counting_opens(monkeypatch)
    first = file_sha256(path)
    assert file_sha256(path) == first == hashlib.sha256(b"a" * 4096).hexdigest()
    assert len(opened) == 1  # the second digest came from the memo
    # Rewritten in place with the same size and its old modification time put back: the
    # change time moves anyway, so the file is read again and the new digest found.
    before = os.stat(path)
    time.sleep(0.05)
    with open(path, "r+b") as fh:
        fh.write(b"b")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_size == before.st_size and os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert file_sha256(path) == hashlib.sha256(b"b" + b"a" * 4095).hexdigest() != first
    assert len(opened) == 2


def test_a_file_changed_within_the_last_seconds_is_read_every_time(tmp_path, monkeypatch):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"fresh")
    opened = _counting_opens(monkeypatch)
    assert file_sha256(path) == file_sha256(path)
    assert len(opened) == 2  # too recent to trust its times: a write in the same clock tick would not show


def test_tampering_after_a_verification_is_still_refused(artifact_copy, monkeypatch):
    import os
    import time

    import ml.artifacts as artifacts

    monkeypatch.setattr(artifacts, "STABLE_AFTER", 0.0)
    time.sleep(0.05)
    verify_artifact(artifact_copy)  # every digest now known to this process
    weights = artifact_copy / "model.safetensors"
    before = os.stat(weights)
    with open(weights, "r+b") as fh:
        fh.seek(-16, 2)
        fh.write(b"\x01" * 16)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(ArtifactError, match="sha256 mismatch for model.safetensors"):
        verify_artifact(artifact_copy)
