"""Model submissions: an uploaded zip becomes a verified artifact, or is refused with a
reason, and nothing is written outside the temporary area."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import stat
import struct
import zipfile
from pathlib import Path

import pytest

import ml
from ml import ArtifactError
from ml.artifacts import verify_artifact
from ml.submissions import (
    ALLOWED_FILES,
    ALLOWED_MODEL_TYPES,
    ConfigBounds,
    SubmissionLimits,
    SubmissionRejected,
    _copy_bounded,
    inspect_archive,
    parameter_count,
    unpack_submission,
)

TOKENIZER = ("tokenizer.json", "tokenizer_config.json")


# -- building archives -------------------------------------------------------------------


def make_zip(path: Path, files: dict[str, bytes | Path], folder: str = "") -> Path:
    """Zip ``files`` (name -> bytes, or a Path stored uncompressed to keep tests fast)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in files.items():
            if isinstance(content, Path):
                zf.write(content, folder + name, compress_type=zipfile.ZIP_STORED)
            else:
                zf.writestr(folder + name, content)
    return path


def with_config(files: dict, **changes) -> dict:
    """A copy of ``files`` whose config.json has ``changes`` (None deletes a key)."""
    config = json.loads(files["config.json"])
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return {**files, "config.json": json.dumps(config).encode()}


def tiny_safetensors() -> bytes:
    import torch
    from safetensors.torch import save

    return save({"w": torch.zeros(2)})


@pytest.fixture(scope="module")
def full_files(sentiment_model_b) -> dict[str, bytes | Path]:
    """A real classification submission: the tiny sentiment model's HF files."""
    root = sentiment_model_b.path
    files: dict[str, bytes | Path] = {
        name: (root / name).read_bytes() for name in ("config.json", *TOKENIZER)
    }
    files["model.safetensors"] = root / "model.safetensors"
    return files


@pytest.fixture(scope="module")
def light_files(full_files) -> dict[str, bytes | Path]:
    """The same with a tiny (valid) safetensors file: for refusals before loading."""
    return {**full_files, "model.safetensors": tiny_safetensors()}


@pytest.fixture(scope="module")
def qa_dir(tmp_path_factory) -> Path:
    """An extractive-QA model in HF format: the backbone with a fresh span head."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from ml.backbones import quiet_transformers

    quiet_transformers()
    backbone = ml.resolve_backbone(ml.DEFAULT_BACKBONE)
    out = tmp_path_factory.mktemp("qa-submission")
    AutoModelForQuestionAnswering.from_pretrained(backbone).save_pretrained(out)
    AutoTokenizer.from_pretrained(backbone).save_pretrained(out)
    return out


def snapshot(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def refused(tmp_path: Path, archive: Path, spec: ml.TaskSpec, **kwargs) -> str:
    """Unpack ``archive``, expect a refusal; check nothing was left or written."""
    area = tmp_path / "area"
    area.mkdir(exist_ok=True)
    before = snapshot(tmp_path)
    with pytest.raises(SubmissionRejected) as info:
        unpack_submission(archive, area / "model", spec, **kwargs)
    assert snapshot(tmp_path) == before  # no temporary folder left, nothing outside it
    assert not (area / "model").exists()
    assert str(info.value) == info.value.reason
    return info.value.reason


# -- accepted submissions ------------------------------------------------------------------


def test_good_classification_submission_in_a_folder(
    tmp_path, full_files, sentiment_model_b, sentiment_spec, cache
):
    archive = tmp_path / "upload.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("my-model/", b"")
        for name, content in full_files.items():
            if isinstance(content, Path):
                zf.write(content, f"my-model/{name}", compress_type=zipfile.ZIP_STORED)
            else:
                zf.writestr(f"my-model/{name}", content)
        zf.writestr("my-model/README.md", b"# My model\n")
        zf.writestr("my-model/.DS_Store", b"\0\0\0\1Bud1")  # litter: skipped
        zf.writestr("__MACOSX/my-model/._config.json", b"\0\5\26\7")
    area = tmp_path / "area"
    info = unpack_submission(archive, area / "model", sentiment_spec)

    assert info.path == (area / "model").absolute()
    assert [p.name for p in area.iterdir()] == ["model"]  # temporary folders are gone
    meta = info.metadata
    assert meta["training_data"]["source"] == "submission"
    assert len(meta["training_data"]["archive_sha256"]) == 64
    assert meta["model_class"] == "BertForSequenceClassification"
    assert meta["task"] == sentiment_spec.to_dict()
    assert meta["backbone"] == "bert"  # no _name_or_path in a transformers 5 config
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(meta["files"])
    assert not [n for n in meta["files"] if n.endswith((".bin", ".pt", ".pkl"))]
    assert verify_artifact(info.path).sha256 == info.sha256

    loaded = ml.load_artifact(info.path, info.sha256)
    assert loaded.model.config.id2label == {0: "negative", 1: "positive"}
    assert parameter_count(info.path) == sum(p.numel() for p in loaded.model.parameters())
    assert parameter_count(info.path) == parameter_count(sentiment_model_b.path)

    rows = [{"statement": "I loved this film"}, {"statement": "what a terrible day"}]
    submitted = ml.predict(ml.ModelRef(str(info.path), info.sha256), rows, cache=cache)
    original = ml.predict(ml.ModelRef(str(sentiment_model_b.path)), rows, cache=cache)
    for mine, theirs in zip(submitted, original, strict=True):
        assert mine["label"] == theirs["label"]
        for label, p in theirs["probabilities"].items():
            assert mine["probabilities"][label] == pytest.approx(p, abs=1e-5)


def test_good_qa_submission_flat(tmp_path, qa_dir, qa_spec, cache):
    files: dict[str, bytes | Path] = {p.name: p for p in qa_dir.iterdir()}
    config = json.loads((qa_dir / "config.json").read_text())
    files["config.json"] = json.dumps({**config, "_name_or_path": "someone/minilm-qa"}).encode()
    archive = make_zip(tmp_path / "upload.zip", files)
    info = unpack_submission(archive, tmp_path / "area" / "qa", qa_spec)
    assert info.metadata["model_class"] == "BertForQuestionAnswering"
    assert info.metadata["backbone"] == "someone/minilm-qa"
    passage = "The Eiffel Tower is in Paris. It was completed in 1889."
    [answer] = ml.predict(
        ml.ModelRef(str(info.path), info.sha256),
        [{"passage": passage, "question": "When was it completed?"}],
        cache=cache,
    )
    assert passage[answer["start"] : answer["end"]] == answer["answer"]


def test_an_existing_destination_is_a_caller_error(tmp_path, light_files, sentiment_spec):
    archive = make_zip(tmp_path / "upload.zip", light_files)
    (tmp_path / "taken").mkdir()
    with pytest.raises(ArtifactError, match="already exists"):
        unpack_submission(archive, tmp_path / "taken", sentiment_spec)


# -- the archive itself ----------------------------------------------------------------------


def test_not_a_zip(tmp_path, sentiment_spec):
    archive = tmp_path / "upload.zip"
    archive.write_bytes(gzip.compress(b"config.json model.safetensors"))
    assert refused(tmp_path, archive, sentiment_spec) == (
        "the upload is not a zip archive; zip the model folder (config.json, "
        "model.safetensors and the tokenizer files) and upload the .zip file"
    )


def test_data_in_front_of_the_zip_is_refused(tmp_path, light_files, sentiment_spec):
    good = make_zip(tmp_path / "good.zip", light_files).read_bytes()
    archive = tmp_path / "upload.zip"
    archive.write_bytes(b"#!/bin/sh\necho hi\n" + good)
    assert "not a zip archive" in refused(tmp_path, archive, sentiment_spec)


def test_empty_upload_and_empty_zip(tmp_path, sentiment_spec):
    empty = tmp_path / "empty.zip"
    empty.write_bytes(b"")
    assert refused(tmp_path, empty, sentiment_spec) == "the uploaded file is empty"
    with zipfile.ZipFile(tmp_path / "nothing.zip", "w"):
        pass
    assert refused(tmp_path, tmp_path / "nothing.zip", sentiment_spec) == "the archive is empty"


def test_archive_size_limit(tmp_path, light_files, sentiment_spec):
    archive = make_zip(tmp_path / "upload.zip", light_files)
    reason = refused(
        tmp_path, archive, sentiment_spec, limits=SubmissionLimits(max_archive_bytes=1000)
    )
    assert reason.startswith("the archive is ") and reason.endswith("; the limit is 1.0 kB")


def test_too_many_files(tmp_path, sentiment_spec):
    files = {f"file{i}.txt": b"x" for i in range(51)}
    reason = refused(tmp_path, make_zip(tmp_path / "upload.zip", files), sentiment_spec)
    assert reason.startswith(
        "the archive has 51 entries; the limit is 50 (a submission needs only:"
    )


def test_encrypted_entry(tmp_path, light_files, sentiment_spec):
    archive = tmp_path / "upload.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in light_files.items():
            zf.writestr(name, content)
        zf.getinfo("config.json").flag_bits |= 0x1  # marked encrypted in the central directory
    assert refused(tmp_path, archive, sentiment_spec) == (
        "config.json: the entry is encrypted; upload an archive without a password"
    )


def test_zip64_end_records_are_read(tmp_path, light_files, sentiment_spec):
    """A zip64 end of central directory (some tools always write one) is fine."""
    archive = make_zip(tmp_path / "upload.zip", light_files)
    data = archive.read_bytes()
    end = data.rfind(b"PK\x05\x06")
    _, _, _, _, entries, cd_size, cd_offset, _ = struct.unpack_from("<4s4H2LH", data, end)
    record = struct.pack(
        "<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, cd_size, cd_offset
    )
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, end, 1)
    eocd = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    archive.write_bytes(data[:end] + record + locator + eocd)
    with zipfile.ZipFile(archive) as zf:
        assert len(zf.infolist()) == entries
    # it gets as far as loading (the tiny weights do not fit the config)
    assert "the weights do not fit the config" in refused(tmp_path, archive, sentiment_spec)


def test_multi_disk_archive(tmp_path, light_files, sentiment_spec):
    archive = make_zip(tmp_path / "upload.zip", light_files)
    data = bytearray(archive.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    data[end + 4 : end + 6] = struct.pack("<H", 1)  # "this is disk 1"
    archive.write_bytes(bytes(data))
    assert refused(tmp_path, archive, sentiment_spec) == (
        "the archive spans several disks (a split zip); upload a single .zip file"
    )


# -- paths and entry types ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, reason",
    [
        ("../evil.txt", "'..' is not allowed in a path (it would write outside the model folder)"),
        (
            "my-model/../../evil.txt",
            "'..' is not allowed in a path (it would write outside the model folder)",
        ),
        ("..\\evil.txt", "backslashes are not allowed in file names (use '/' between folders)"),
        ("C:/evil.txt", "drive letters are not allowed in file names"),
        ("my-model//config.json", "empty or '.' path components are not allowed"),
        ("./config.json", "empty or '.' path components are not allowed"),
        ("conf\x01ig.json", "control characters are not allowed in file names"),
        ("a" * 300, "the name is too long (at most 255 characters)"),
    ],
)
def test_unsafe_paths(tmp_path, light_files, sentiment_spec, name, reason):
    archive = make_zip(tmp_path / "upload.zip", {**light_files, name: b"pwned"})
    shown = name.replace("\x01", "\\x01")
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    assert refused(tmp_path, archive, sentiment_spec) == f"{shown}: {reason}"
    assert not (tmp_path / "evil.txt").exists()


def test_absolute_path(tmp_path, light_files, sentiment_spec):
    target = tmp_path / "absolute-evil.txt"
    archive = make_zip(tmp_path / "upload.zip", {**light_files, str(target): b"pwned"})
    assert refused(tmp_path, archive, sentiment_spec) == (
        f"{target}: absolute paths are not allowed; zip the files with paths relative to the "
        "model folder"
    )
    assert not target.exists()


def _special_entry(tmp_path, files, name, mode, content=b"/etc/passwd") -> Path:
    archive = tmp_path / "upload.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for other, data in files.items():
            if other != name:
                zf.writestr(other, data)
        entry = zipfile.ZipInfo(name)
        entry.create_system = 3  # Unix: external_attr carries st_mode
        entry.external_attr = mode << 16
        zf.writestr(entry, content)
    return archive


def test_symlink(tmp_path, light_files, sentiment_spec):
    archive = _special_entry(tmp_path, light_files, "tokenizer.json", stat.S_IFLNK | 0o777)
    assert refused(tmp_path, archive, sentiment_spec) == (
        "tokenizer.json: symbolic links are not allowed; put the file itself in the archive"
    )


def test_special_file(tmp_path, light_files, sentiment_spec):
    archive = _special_entry(tmp_path, light_files, "vocab.txt", stat.S_IFIFO | 0o644, b"")
    assert refused(tmp_path, archive, sentiment_spec) == (
        "vocab.txt: only regular files and folders are allowed; this entry is a named pipe"
    )


def test_duplicate_names_ignoring_case(tmp_path, light_files, sentiment_spec):
    archive = make_zip(tmp_path / "upload.zip", {**light_files, "CONFIG.json": b"{}"})
    assert refused(tmp_path, archive, sentiment_spec) == (
        "CONFIG.json: appears twice in the archive (as 'config.json' too; names are compared "
        "ignoring case)"
    )


# -- the allowlist -----------------------------------------------------------------------------

PICKLE = pickle.dumps({"weights": [1, 2, 3]})


@pytest.mark.parametrize(
    "name, reason",
    [
        (
            "pytorch_model.bin",
            "pickle-based weights are never loaded; convert to model.safetensors",
        ),
        (
            "training_args.bin",
            "pickle-based weights are never loaded; convert to model.safetensors",
        ),
        ("model.pt", "pickle-based weights are never loaded; convert to model.safetensors"),
        ("model.ckpt", "pickle-based weights are never loaded; convert to model.safetensors"),
        ("classifier.pkl", "pickle files are never loaded (unpickling can run code); remove it"),
        ("state.pickle", "pickle files are never loaded (unpickling can run code); remove it"),
        ("tf_model.h5", "TensorFlow/Keras weights are not supported; convert to model.safetensors"),
        ("flax_model.msgpack", "Flax weights are not supported; convert to model.safetensors"),
        (
            "modeling_custom.py",
            "code is never run (no remote code); submit a built-in transformers architecture "
            "and remove code files",
        ),
        (
            "model-00001-of-00002.safetensors",
            "sharded weights are not supported; save the model as one model.safetensors "
            '(save_pretrained(..., max_shard_size="2GB"))',
        ),
        ("adapter.safetensors", "the weights must be in a file named exactly model.safetensors"),
        (
            "notes.txt",
            "not an allowed file; a submission may contain only: " + ", ".join(ALLOWED_FILES),
        ),
    ],
)
def test_refused_files_are_named_with_the_reason(
    tmp_path, light_files, sentiment_spec, name, reason
):
    archive = make_zip(tmp_path / "upload.zip", {**light_files, name: PICKLE}, folder="my-model/")
    assert refused(tmp_path, archive, sentiment_spec) == f"my-model/{name}: {reason}"


def test_pickle_weights_instead_of_safetensors(tmp_path, light_files, sentiment_spec):
    files = {n: c for n, c in light_files.items() if n != "model.safetensors"}
    archive = make_zip(tmp_path / "upload.zip", {**files, "pytorch_model.bin": PICKLE})
    assert refused(tmp_path, archive, sentiment_spec) == (
        "pytorch_model.bin: pickle-based weights are never loaded; convert to model.safetensors"
    )


def test_sub_folders(tmp_path, light_files, sentiment_spec):
    files = {**light_files, "extra/config.json": b"{}"}
    archive = make_zip(tmp_path / "upload.zip", files, folder="my-model/")
    assert refused(tmp_path, archive, sentiment_spec) == (
        "my-model/extra/config.json: sub-folders are not allowed; put the model files at the "
        "top of the archive or in one top-level folder"
    )


@pytest.mark.parametrize(
    "missing, reason",
    [
        ("config.json", "the archive has no config.json"),
        ("model.safetensors", "the archive has no model.safetensors"),
        ("tokenizer.json", "the archive has no tokenizer; include tokenizer.json"),
    ],
)
def test_required_files(tmp_path, light_files, sentiment_spec, missing, reason):
    files = {n: c for n, c in light_files.items() if n != missing}
    assert refused(tmp_path, make_zip(tmp_path / "upload.zip", files), sentiment_spec).startswith(
        reason
    )


# -- zip bombs ---------------------------------------------------------------------------------

BOMB = b"{" + b" " * 3_000_000 + b"}"  # valid JSON, compresses about 1000:1


def test_zip_bomb_by_compression_ratio(tmp_path, light_files, sentiment_spec):
    archive = make_zip(tmp_path / "upload.zip", {**light_files, "config.json": BOMB})
    reason = refused(tmp_path, archive, sentiment_spec)
    assert reason.startswith("config.json: compresses ")
    assert reason.endswith("more than the 100:1 allowed; this looks like a zip bomb")


def test_total_unpacked_size(tmp_path, light_files, sentiment_spec):
    archive = make_zip(tmp_path / "upload.zip", light_files)
    reason = refused(
        tmp_path, archive, sentiment_spec, limits=SubmissionLimits(max_total_bytes=10_000)
    )
    assert reason.startswith("the files unpack to ") and reason.endswith("the limit is 10.0 kB")


def test_per_file_size_limit(tmp_path, light_files, sentiment_spec):
    archive = make_zip(tmp_path / "upload.zip", light_files)
    reason = refused(
        tmp_path, archive, sentiment_spec, limits=SubmissionLimits(max_small_file_bytes=100)
    )
    assert reason.startswith("config.json: is ") and reason.endswith(
        "; the limit for this file is 100 bytes"
    )


def _set_declared_size(archive: Path, name: str, size: int) -> None:
    """Make the local and central headers of ``name`` lie about its unpacked size."""
    with zipfile.ZipFile(archive) as zf:
        local = zf.getinfo(name).header_offset
    data = bytearray(archive.read_bytes())
    data[local + 22 : local + 26] = struct.pack("<L", size)
    end = data.rfind(b"PK\x05\x06")
    (pos,) = struct.unpack_from("<L", data, end + 16)
    while data[pos : pos + 4] == b"PK\x01\x02":
        n, m, k = struct.unpack_from("<3H", data, pos + 28)
        if data[pos + 46 : pos + 46 + n].decode() == name:
            data[pos + 24 : pos + 28] = struct.pack("<L", size)
        pos += 46 + n + m + k
    archive.write_bytes(bytes(data))


def test_zip_bomb_whose_headers_lie(tmp_path, light_files, sentiment_spec):
    """3 MB behind headers that claim 200 kB (under every limit): extraction never
    produces more than was declared, and the entry is refused as damaged."""
    archive = make_zip(tmp_path / "upload.zip", {**light_files, "config.json": BOMB})
    _set_declared_size(archive, "config.json", 200_000)
    with zipfile.ZipFile(archive) as zf:
        assert zf.getinfo("config.json").file_size == 200_000
    reason = refused(tmp_path, archive, sentiment_spec)
    assert reason.startswith("config.json: cannot be unpacked; the archive is damaged (")


def test_extraction_counts_bytes_and_stops_at_the_limit():
    """Whatever a stream claims, copying stops once it has produced more than allowed."""

    class Endless(io.RawIOBase):
        produced = 0

        def read(self, n=-1):
            self.produced += n
            return b"\0" * n

    limits = SubmissionLimits()
    for limit, compressed, words in [
        (3_000_000, 10**9, "unpacks to more than 3.0 MB"),
        (10**9, 10_000, "unpacks to more than 100 times its compressed size"),
    ]:
        source, sink = Endless(), io.BytesIO()
        with pytest.raises(SubmissionRejected, match=words):
            _copy_bounded(source, sink, "model.safetensors", limit, compressed, limits)
        assert source.produced <= max(limit, 10**6) + (1 << 20)
        assert sink.tell() <= limit


# -- content ---------------------------------------------------------------------------------


def test_weights_that_are_not_safetensors(tmp_path, light_files, sentiment_spec):
    files = {**light_files, "model.safetensors": PICKLE}
    reason = refused(tmp_path, make_zip(tmp_path / "upload.zip", files), sentiment_spec)
    assert reason.startswith("model.safetensors: is not a valid safetensors file (")
    assert reason.endswith("save the model with save_pretrained(..., safe_serialization=True)")


@pytest.mark.parametrize(
    "config, reason",
    [
        (b"{not json", "config.json: is not valid JSON ("),
        (b"[1, 2]", "config.json: must be a JSON object"),
    ],
)
def test_config_not_an_object(tmp_path, light_files, sentiment_spec, config, reason):
    files = {**light_files, "config.json": config}
    assert refused(tmp_path, make_zip(tmp_path / "upload.zip", files), sentiment_spec).startswith(
        reason
    )


ALLOWED = ", ".join(ALLOWED_MODEL_TYPES)


@pytest.mark.parametrize(
    "changes, reason",
    [
        (
            {"model_type": "gpt2"},
            f"config.json: model_type 'gpt2' is not supported; supported model types: {ALLOWED}",
        ),
        (
            {"model_type": None},
            f"config.json: model_type is missing; supported model types: {ALLOWED}",
        ),
        (
            {"auto_map": {"AutoModel": "modeling_evil.EvilModel"}},
            "config.json: auto_map refers to custom code, which is never run (no remote code); "
            "remove auto_map and use a built-in architecture",
        ),
        (
            {"quantization_config": {"quant_method": "bitsandbytes"}},
            "config.json: quantization_config is set, but quantized models are not supported; "
            "submit float32, float16 or bfloat16 weights",
        ),
        (
            {"architectures": ["BertForQuestionAnswering"]},
            "config.json: architectures is [\"BertForQuestionAnswering\"], but a 'bert' model "
            'for this classification task must be ["BertForSequenceClassification"]',
        ),
        (
            {"architectures": None},
            "config.json: architectures is missing, but a 'bert' model for this classification "
            'task must be ["BertForSequenceClassification"]',
        ),
        (
            {"id2label": {"0": "positive", "1": "negative"}},
            'config.json: id2label is {"0": "positive", "1": "negative"}; this task needs '
            'exactly {"0": "negative", "1": "positive"} (these label names, in this index order)',
        ),
        (
            {"id2label": None},
            'config.json: id2label is missing; this task needs id2label = {"0": "negative", '
            '"1": "positive"}',
        ),
        (
            {"num_labels": 3},
            "config.json: num_labels is 3 but this task has 2 labels (negative, positive)",
        ),
    ],
)
def test_bad_configs(tmp_path, light_files, sentiment_spec, changes, reason):
    files = with_config(light_files, **changes)
    assert refused(tmp_path, make_zip(tmp_path / "upload.zip", files), sentiment_spec) == reason


def test_labels_of_another_task(tmp_path, light_files, nli_spec):
    reason = refused(tmp_path, make_zip(tmp_path / "upload.zip", light_files), nli_spec)
    assert reason == (
        'config.json: id2label is {"0": "negative", "1": "positive"}; this task needs exactly '
        '{"0": "entailment", "1": "neutral", "2": "contradiction"} (these label names, in this '
        "index order)"
    )


def test_qa_model_for_a_classification_task(tmp_path, qa_dir, sentiment_spec):
    files = {p.name: p for p in qa_dir.iterdir()}
    reason = refused(tmp_path, make_zip(tmp_path / "upload.zip", files), sentiment_spec)
    assert reason == (
        "config.json: architectures is [\"BertForQuestionAnswering\"], but a 'bert' model for "
        'this classification task must be ["BertForSequenceClassification"]'
    )


def test_classification_model_for_a_qa_task(tmp_path, light_files, qa_spec):
    reason = refused(tmp_path, make_zip(tmp_path / "upload.zip", light_files), qa_spec)
    assert reason == (
        "config.json: architectures is [\"BertForSequenceClassification\"], but a 'bert' model "
        'for this extractive QA task must be ["BertForQuestionAnswering"]'
    )


def test_tokenizer_remote_code(tmp_path, light_files, sentiment_spec):
    tokenizer_config = json.loads(light_files["tokenizer_config.json"])
    tokenizer_config["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", None]}
    files = {**light_files, "tokenizer_config.json": json.dumps(tokenizer_config).encode()}
    assert refused(tmp_path, make_zip(tmp_path / "upload.zip", files), sentiment_spec) == (
        "tokenizer_config.json: auto_map refers to custom tokenizer code, which is never run "
        "(no remote code); remove auto_map and use a built-in tokenizer"
    )


def test_config_bigger_than_its_weights_is_refused_without_building_it(
    tmp_path, light_files, sentiment_spec
):
    files = with_config(light_files, num_hidden_layers=40, intermediate_size=10_000)  # within the bounds
    reason = refused(tmp_path, make_zip(tmp_path / "upload.zip", files), sentiment_spec)
    assert reason.startswith("config.json describes a model with ")
    assert reason.endswith(
        "but model.safetensors holds only 2 values; the weights do not fit the config"
    )


# -- bounded configs: sizes read from the JSON, before anything is built ------------------


def test_a_config_of_ten_thousand_layers_is_refused_before_anything_is_built(tmp_path, light_files):
    """In a fresh interpreter: the refusal comes before transformers (or torch) is even
    imported, so no skeleton of 10,000 layers is built, not even on the meta device."""
    import subprocess
    import sys

    archive = make_zip(tmp_path / "upload.zip", with_config(light_files, num_hidden_layers=10_000))
    script = (
        "import json, sys\n"
        "import ml\n"
        "from ml.submissions import SubmissionRejected, unpack_submission\n"
        "spec = ml.TaskSpec(kind='classification', labels=['negative', 'positive'], input_fields=['statement'])\n"
        "try:\n"
        "    unpack_submission(sys.argv[1], sys.argv[2], spec)\n"
        "except SubmissionRejected as exc:\n"
        "    reason = exc.reason\n"
        "print(json.dumps({'reason': reason, 'loaded': [m for m in ('torch', 'transformers') if m in sys.modules]}))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script, str(archive), str(tmp_path / "area" / "model")],
                         capture_output=True, text=True, timeout=120, cwd=root, check=True)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["reason"] == ("config.json: num_hidden_layers is 10,000, over this task's limit of 48 "
                                "(max_layers); the model was refused before anything was built")
    assert answer["loaded"] == []
    assert snapshot(tmp_path / "area") == []  # the unpacking folder is gone


@pytest.mark.parametrize("changes, reason", [
    ({"hidden_size": 100_000}, "hidden_size is 100,000, over this task's limit of 4,096 (max_hidden_size)"),
    ({"num_attention_heads": 4096}, "num_attention_heads is 4,096, over this task's limit of 64"),
    ({"vocab_size": 50_000_000}, "vocab_size is 50,000,000, over this task's limit of 300,000"),
    ({"max_position_embeddings": 10**9}, "max_position_embeddings is 1,000,000,000, over this task's limit"),
    ({"intermediate_size": 10**6}, "intermediate_size is 1,000,000, over this task's limit of 16,384"),
    ({"n_layers": 500}, "n_layers is 500, over this task's limit of 48"),
    ({"num_hidden_layers": 1e4}, "num_hidden_layers is 10000.0; it must be a whole number from 1 to 48"),
    ({"num_hidden_layers": True}, "num_hidden_layers is true; it must be a whole number from 1 to 48"),
    ({"num_hidden_layers": "6"}, "num_hidden_layers is \"6\"; it must be a whole number from 1 to 48"),
    ({"num_hidden_layers": 0}, "num_hidden_layers is 0; it must be at least 1"),
    ({"max_relative_positions": 10**7}, "max_relative_positions is 10,000,000, over this task's limit of 4,096"),
])
def test_config_sizes_over_the_bounds_are_refused(tmp_path, light_files, sentiment_spec, changes, reason):
    archive = make_zip(tmp_path / "upload.zip", with_config(light_files, **changes))
    assert refused(tmp_path, archive, sentiment_spec).startswith(f"config.json: {reason}")


def test_a_task_sets_its_own_bounds(tmp_path, light_files, sentiment_spec):
    archive = make_zip(tmp_path / "upload.zip", light_files)  # MiniLM: 6 layers, hidden size 384
    reason = refused(tmp_path, archive, sentiment_spec, bounds=ConfigBounds.from_dict({"max_layers": 4}))
    assert reason.startswith("config.json: num_hidden_layers is 6, over this task's limit of 4 (max_layers)")
    with pytest.raises(ValueError, match="unknown config bounds: max_floors"):
        ConfigBounds.from_dict({"max_floors": 3})


def test_inspecting_an_archive_reads_its_directory_only(tmp_path, light_files):
    good = make_zip(tmp_path / "good.zip", light_files, folder="my-model/")
    assert sorted(inspect_archive(good)) == sorted(light_files)
    bad = make_zip(tmp_path / "bad.zip", {**light_files, "train.py": b"print(1)"})
    before = snapshot(tmp_path)
    with pytest.raises(SubmissionRejected, match="train.py: code is never run"):
        inspect_archive(bad)
    assert snapshot(tmp_path) == before  # nothing unpacked, nothing written
    with pytest.raises(SubmissionRejected, match="the archive is"):
        inspect_archive(good, limits=SubmissionLimits(max_archive_bytes=100))


def _state(full_files) -> dict:
    from safetensors.torch import load_file

    return load_file(full_files["model.safetensors"])


def test_missing_weights(tmp_path, full_files, sentiment_spec):
    """Enough values to pass the size check, but not the classifier: it would be random."""
    import torch
    from safetensors.torch import save_file

    state = _state(full_files)
    state["stowaway"] = torch.zeros_like(state.pop("classifier.weight"))
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    files = {**full_files, "model.safetensors": tmp_path / "model.safetensors"}
    archive = make_zip(tmp_path / "upload.zip", files)
    (tmp_path / "model.safetensors").unlink()
    assert refused(tmp_path, archive, sentiment_spec) == (
        "model.safetensors: lacks weights the model needs (classifier.weight); they would be "
        "random. Save the whole fine-tuned model with save_pretrained"
    )


def test_a_model_that_cannot_run_the_task_is_refused(tmp_path, full_files, sentiment_spec):
    """Only 32 positions: loads, but fails on inputs of the task's 256 tokens."""
    from safetensors.torch import save_file

    state = _state(full_files)
    [key] = [k for k in state if k.endswith("position_embeddings.weight")]
    state[key] = state[key][:32].clone()
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    files = with_config(full_files, max_position_embeddings=32)
    files["model.safetensors"] = tmp_path / "model.safetensors"
    archive = make_zip(tmp_path / "upload.zip", files)
    (tmp_path / "model.safetensors").unlink()
    reason = refused(tmp_path, archive, sentiment_spec)
    assert reason.startswith(
        "the model failed on a test input of 256 tokens (this task's maximum length): "
    )
    assert str(tmp_path) not in reason  # temporary paths are not shown


# -- helpers -----------------------------------------------------------------------------------


def test_allowed_model_types_have_both_heads():
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES,
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    )

    for model_type in ALLOWED_MODEL_TYPES:
        assert model_type in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES
        assert model_type in MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES


def test_parameter_count(tmp_path, sentiment_model_b):
    from safetensors.torch import load_file

    state = load_file(sentiment_model_b.path / "model.safetensors")
    expected = sum(t.numel() for t in state.values())
    assert parameter_count(sentiment_model_b.path) == expected
    assert parameter_count(sentiment_model_b.path / "model.safetensors") == expected
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(PICKLE)
    with pytest.raises(ArtifactError, match="safetensors header"):
        parameter_count(bad)
    with pytest.raises(ArtifactError, match="cannot be read"):
        parameter_count(tmp_path / "missing.safetensors")
