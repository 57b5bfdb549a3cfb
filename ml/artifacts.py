"""Model artifacts: a directory that can be hashed, verified and loaded safely.

Layout::

    <artifact>/
        config.json            transformers model config (includes id2label)
        model.safetensors      weights; the only weight format ever read
        tokenizer.json         fast tokenizer (+ tokenizer_config.json, ...)
        metadata.json          see ``save_artifact``

``metadata.json`` records the sha256 of every other file and an overall ``sha256``
(``artifact_sha256``): the sha256 of the metadata itself, every field but ``sha256``
(the per-file digests, the task spec, the label map, the training data...), as
canonical JSON (keys sorted, no spaces, UTF-8). The overall digest identifies the
artifact; the database stores it and passes it back as ``expected_sha256``, so a
swapped directory, a swapped file or an edited task spec is refused.

Format 1 artifacts (written before format 2) are still read: their digest is the
sha256 of the text made of one line ``"<sha256>  <relative/path>\\n"`` per file,
sorted by path (``combined_sha256``), which covers the files but not the rest of
the metadata. A format 1 directory cannot pass for a format 2 artifact: the
digests differ.

Artifacts are immutable: ``save_artifact`` refuses to overwrite unless told to, and
writes into a temporary sibling directory that is renamed into place at the end, so
readers never see half-written artifacts.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .backbones import (
    configure_torch_threads,
    get_device,
    import_transformers,
    quiet_transformers,
)
from .errors import ArtifactError
from .spec import TaskSpec

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
METADATA_FILE = "metadata.json"
REQUIRED_FILES = ("config.json", "model.safetensors")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")  # at least one of these
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ArtifactInfo:
    path: Path
    sha256: str
    metadata: dict[str, Any]


@dataclass
class LoadedModel:
    """A verified artifact in memory, ready for inference."""

    path: Path
    sha256: str
    spec: TaskSpec
    metadata: dict[str, Any]
    model: Any
    tokenizer: Any
    device: Any
    # Fast tokenizers mutate their truncation/padding state on every call and are
    # not safe to call from several threads at once; inference takes this lock
    # around tokenisation.
    tokenizer_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # A checked TorchScript trace for inference passes (``ml.tracing``); None: eager.
    inference_forward: Any = field(default=None, repr=False)


# Digests this process computed, by the file's identity and times: a file that is still the
# same inode with the same size, mtime and ctime has the same bytes (any write, rename over
# it or change of its times sets a new ctime, which no user can set), so it is not read
# again; a weights file is hundreds of MB. As git's index does, a digest is kept only when
# the file's ctime is older than the read by STABLE_AFTER: a write later in the same clock
# tick as the recorded times could not be told apart.
STABLE_AFTER = 2.0
_MEMO_MAX = 256
_digests: dict[tuple, str] = {}
_digests_lock = threading.Lock()


def _identity(found: os.stat_result) -> tuple:
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


def file_sha256(path: Path) -> str:
    """The file's sha256: read whole, unless this process read the very same file before."""
    before = os.stat(path)
    key = _identity(before)
    with _digests_lock:
        known = _digests.get(key)
    if known is not None:
        return known
    started = time.time()
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    found = digest.hexdigest()
    if _identity(os.stat(path)) == key and before.st_ctime_ns / 1e9 < started - STABLE_AFTER:
        with _digests_lock:
            if len(_digests) >= _MEMO_MAX:
                _digests.pop(next(iter(_digests)))
            _digests[key] = found
    return found


def combined_sha256(files: dict[str, str]) -> str:
    """Overall digest from ``{relative_path: sha256}`` (see module docstring)."""
    text = "".join(f"{files[name]}  {name}\n" for name in sorted(files))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def artifact_sha256(metadata: dict[str, Any]) -> str:
    """The artifact's overall digest from its metadata (see the module docstring):
    format 2 covers every field but ``sha256``; format 1, the per-file digests only."""
    if metadata.get("format_version") == 1:
        return combined_sha256(metadata["files"])
    covered = {key: value for key, value in metadata.items() if key != "sha256"}
    text = json.dumps(covered, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _artifact_files(root: Path) -> list[str]:
    """Relative POSIX paths of every file under ``root`` except metadata.json."""
    names = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in filenames:
            full = Path(dirpath) / filename
            rel = full.relative_to(root).as_posix()
            if rel != METADATA_FILE:
                names.append(rel)
    return sorted(names)


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _library_versions() -> dict[str, str]:
    import safetensors
    import tokenizers
    import torch


    transformers = import_transformers()
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
    }


def save_artifact(
    model: Any,
    tokenizer: Any,
    spec: TaskSpec,
    out_dir: str | os.PathLike,
    *,
    backbone: str,
    training_data: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> ArtifactInfo:
    """Write ``model`` + ``tokenizer`` + metadata to ``out_dir`` atomically.

    ``training_data`` is the caller's summary of what the model learned from (e.g.
    ``{"rounds": [0, 1], "counts": {"train": 1200, "dev": 200}}``) and ``metrics``
    its evaluation results; both must be JSON-serialisable.

    metadata.json::

        {
          "format_version": 2,
          "created_at": "2025-01-01T12:00:00Z",
          "task": {TaskSpec.to_dict()},
          "label_map": {"entailment": 0, ...},      # {} for extractive QA
          "backbone": "all-MiniLM-L6-v2",
          "model_class": "BertForSequenceClassification",
          "training_data": {...}, "metrics": {...},
          "libraries": {"torch": "...", "transformers": "...", ...},
          "files": {"config.json": "<sha256>", "model.safetensors": "<sha256>", ...},
          "sha256": "<overall digest: artifact_sha256 of everything above>"
        }
    """
    out = Path(out_dir).absolute()
    if out.exists() and not overwrite:
        raise ArtifactError(f"artifact directory {out} already exists")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if not (tmp / "model.safetensors").is_file():
            raise ArtifactError("the model did not save as a single model.safetensors file")
        for stray in ("pytorch_model.bin", "training_args.bin"):
            (tmp / stray).unlink(missing_ok=True)
        files = {name: file_sha256(tmp / name) for name in _artifact_files(tmp)}
        metadata = {
            "format_version": FORMAT_VERSION,
            "created_at": _utc_now(),
            "task": spec.to_dict(),
            "label_map": spec.label_map if spec.is_classification else {},
            "backbone": backbone,
            "model_class": type(model).__name__,
            "training_data": training_data or {},
            "metrics": metrics or {},
            "libraries": _library_versions(),
            "files": files,
        }
        # Digested as it will be read back (JSON turns tuples into lists, keys into text).
        metadata = json.loads(json.dumps(metadata, allow_nan=False))
        metadata["sha256"] = artifact_sha256(metadata)
        text = json.dumps(metadata, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
        with open(tmp / METADATA_FILE, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        for name in [*files, METADATA_FILE]:
            with open(tmp / name, "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(tmp)
        os.chmod(tmp, 0o755)
        if out.exists():  # overwrite=True: move the old one aside, then swap
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / "artifact")
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
        _fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ArtifactInfo(path=out, sha256=metadata["sha256"], metadata=metadata)


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    root = Path(path)
    if not root.is_dir():
        raise ArtifactError(f"artifact {root} does not exist or is not a directory")
    meta_path = root / METADATA_FILE
    if not meta_path.is_file():
        raise ArtifactError(f"artifact {root}: missing {METADATA_FILE}")
    try:
        metadata = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"artifact {root}: {METADATA_FILE} is not valid JSON: {exc}") from exc
    if not isinstance(metadata, dict):
        raise ArtifactError(f"artifact {root}: {METADATA_FILE} is not a JSON object")
    version = metadata.get("format_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise ArtifactError(
            f"artifact {root}: unsupported format_version {version!r} (expected one of {READABLE_VERSIONS})"
        )
    for key in ("task", "files", "sha256", "backbone"):
        if key not in metadata:
            raise ArtifactError(f"artifact {root}: {METADATA_FILE} has no {key!r}")
    if not isinstance(metadata["files"], dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata["files"].items()
    ):
        raise ArtifactError(f"artifact {root}: {METADATA_FILE} 'files' must map paths to digests")
    return metadata


def verify_artifact(path: str | os.PathLike, expected_sha256: str | None = None) -> ArtifactInfo:
    """Recompute every digest; raise :class:`ArtifactError` on any difference.

    Checks, in order: metadata.json readable; the overall digest in metadata agrees
    with the metadata (the per-file digests and, from format 2, every other field, the
    task spec included) and with ``expected_sha256``; required files present;
    no file missing, none unlisted; every file's sha256 matches.
    """
    root = Path(path).absolute()
    metadata = read_metadata(root)
    listed: dict[str, str] = metadata["files"]
    recorded = metadata["sha256"]
    try:
        computed = artifact_sha256(metadata)
    except (TypeError, ValueError) as exc:
        raise ArtifactError(f"artifact {root}: metadata.json cannot be digested: {exc}") from exc
    if computed != recorded:
        covered = "per-file digests" if metadata["format_version"] == 1 else "contents (task spec included)"
        raise ArtifactError(
            f"artifact {root}: metadata.json is inconsistent (its {covered} do not "
            f"combine to its sha256 {recorded})"
        )
    if expected_sha256 is not None and expected_sha256.lower() != recorded:
        raise ArtifactError(
            f"artifact {root}: sha256 mismatch: expected {expected_sha256.lower()}, "
            f"artifact is {recorded}"
        )
    for name in REQUIRED_FILES:
        if name not in listed:
            raise ArtifactError(f"artifact {root}: metadata lists no {name}")
    if not any(name in listed for name in TOKENIZER_FILES):
        raise ArtifactError(f"artifact {root}: no tokenizer file ({' or '.join(TOKENIZER_FILES)})")
    present = set(_artifact_files(root))
    missing = sorted(set(listed) - present)
    if missing:
        raise ArtifactError(f"artifact {root}: missing file(s): {', '.join(missing)}")
    extra = sorted(present - set(listed))
    if extra:
        raise ArtifactError(
            f"artifact {root}: unexpected file(s) not in metadata: {', '.join(extra)}"
        )
    for name in sorted(listed):
        actual = file_sha256(root / name)
        if actual != listed[name]:
            raise ArtifactError(
                f"artifact {root}: sha256 mismatch for {name}: expected {listed[name]}, "
                f"actual {actual}"
            )
    return ArtifactInfo(path=root, sha256=recorded, metadata=metadata)


def model_class_for(spec: TaskSpec):
    transformers = import_transformers()
    return transformers.AutoModelForQuestionAnswering if spec.is_qa else transformers.AutoModelForSequenceClassification


def load_artifact(
    path: str | os.PathLike, expected_sha256: str | None = None, *, device: Any = None
) -> LoadedModel:
    """Verify, then load an artifact for inference (eval mode, on ``device``).

    Weights are read only from model.safetensors (``use_safetensors=True``); nothing
    is ever unpickled.
    """
    from .tracing import trace_for_inference

    info = verify_artifact(path, expected_sha256)
    quiet_transformers()
    configure_torch_threads()
    try:
        spec = TaskSpec.from_dict(info.metadata["task"])
    except Exception as exc:
        raise ArtifactError(f"artifact {info.path}: invalid task spec: {exc}") from exc
    device = get_device() if device is None else device
    try:
        model = model_class_for(spec).from_pretrained(
            info.path, use_safetensors=True, local_files_only=True
        )
        tokenizer = import_transformers().AutoTokenizer.from_pretrained(info.path, local_files_only=True)
    except Exception as exc:  # corrupted-but-hash-consistent files, wrong architecture
        raise ArtifactError(f"artifact {info.path}: could not be loaded: {exc}") from exc
    if not getattr(tokenizer, "is_fast", False):
        raise ArtifactError(f"artifact {info.path}: needs a fast tokenizer (tokenizer.json)")
    if spec.is_classification:
        id2label = {int(k): v for k, v in model.config.id2label.items()}
        if [id2label.get(i) for i in range(len(spec.labels))] != spec.labels:
            raise ArtifactError(
                f"artifact {info.path}: config.json labels {id2label} do not match "
                f"the task labels {spec.labels}"
            )
    model.to(device)
    model.eval()
    return LoadedModel(
        path=info.path,
        sha256=info.sha256,
        spec=spec,
        metadata=info.metadata,
        model=model,
        tokenizer=tokenizer,
        device=device,
        inference_forward=trace_for_inference(model, tokenizer, spec, device),
    )
