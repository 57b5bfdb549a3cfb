"""Prediction API: model references, a per-process model cache, single/batch and
ensemble prediction.

Fork safety: nothing here touches torch at import time.  Load models after the
worker process exists (Celery ``worker_process_init`` -> :func:`warm_up`), never in
a parent that forks afterwards.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .artifacts import METADATA_FILE, LoadedModel, load_artifact, verify_artifact
from .backbones import positive_int_from_env
from .errors import ArtifactError, InputError, MLError
from .spec import TaskSpec

DEFAULT_CACHE_SIZE = 4


@dataclass(frozen=True)
class ModelRef:
    """Where a model artifact lives and, optionally, the sha256 it must have.

    The database stores both; passing the sha256 makes loading refuse a directory
    that was swapped or edited since the model was registered.
    """

    path: str
    sha256: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", os.fspath(self.path))
        if self.sha256 is not None:
            object.__setattr__(self, "sha256", self.sha256.lower())


def _as_ref(ref: ModelRef | str | os.PathLike) -> ModelRef:
    return ref if isinstance(ref, ModelRef) else ModelRef(os.fspath(ref))


def _cache_size_from_env() -> int:
    size = positive_int_from_env("DYNABENCH_MODEL_CACHE_SIZE", MLError)
    return DEFAULT_CACHE_SIZE if size is None else size


class ModelCache:
    """Thread-safe LRU cache of loaded models, bounded by count.

    Keyed by (absolute path, expected sha256).  Every load verifies the artifact's
    hashes first; a failed verification raises :class:`ArtifactError` and caches
    nothing.  If an artifact's metadata.json changes on disk (a new artifact renamed
    into the same path) the cached model is dropped and the new one loaded and
    verified; unless the files there verify to the sha256 of the model already
    loaded (the same artifact written again: registered anew, or downloaded again into a
    worker's cache), which is then kept without loading it a second time.  Concurrent
    requests for the same model load it once.
    """

    def __init__(self, max_size: int | None = None, *, device: Any = None):
        self.max_size = _cache_size_from_env() if max_size is None else int(max_size)
        if self.max_size < 1:
            raise ValueError("max_size must be at least 1")
        self.device = device
        self._entries: OrderedDict[tuple[str, str | None], tuple[Any, LoadedModel]] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[tuple[str, str | None], threading.Lock] = {}
        self.loads = 0
        self.hits = 0
        #: Models kept after their files changed on disk and verified to the same sha256.
        self.reverified = 0

    @staticmethod
    def _key(ref: ModelRef) -> tuple[str, str | None]:
        return (str(Path(ref.path).absolute()), ref.sha256)

    @staticmethod
    def _stamp(path: str) -> Any:
        """What tells a metadata.json written again from the one loaded: the change
        time too, as a copy may keep the modification time and get the freed inode."""
        try:
            st = os.stat(Path(path) / METADATA_FILE)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)

    def get(self, ref: ModelRef | str | os.PathLike) -> LoadedModel:
        ref = _as_ref(ref)
        key = self._key(ref)
        stamp = self._stamp(key[0])
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] == stamp:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry[1]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:  # another thread may have loaded it meanwhile
                entry = self._entries.get(key)
                if entry is not None and entry[0] == stamp:
                    self._entries.move_to_end(key)
                    self.hits += 1
                    return entry[1]
                previous = self._entries.pop(key, None)
            if previous is not None and _same_artifact(key[0], ref.sha256, previous[1]):
                with self._lock:
                    self.reverified += 1
                    self._entries[key] = (stamp, previous[1])
                    self._entries.move_to_end(key)
                    self._key_locks.pop(key, None)
                return previous[1]
            loaded = load_artifact(key[0], ref.sha256, device=self.device)
            with self._lock:
                self.loads += 1
                self._entries[key] = (stamp, loaded)
                self._entries.move_to_end(key)
                while len(self._entries) > self.max_size:
                    self._entries.popitem(last=False)
                self._key_locks.pop(key, None)
            return loaded

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, ref: object) -> bool:
        if not isinstance(ref, ModelRef | str | os.PathLike):
            return False
        with self._lock:
            return self._key(_as_ref(ref)) in self._entries

    def paths(self) -> list[str]:
        """Cached artifact paths, least recently used first."""
        with self._lock:
            return [key[0] for key in self._entries]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _same_artifact(path: str, expected_sha256: str | None, loaded: LoadedModel) -> bool:
    """Whether the files at ``path``, changed since ``loaded`` was loaded from there,
    verify to ``loaded``'s sha256: byte for byte the model already in memory. Files
    that fail verification raise :class:`ArtifactError`, as loading them would."""
    return verify_artifact(path, expected_sha256).sha256 == loaded.sha256


_default_cache: ModelCache | None = None
_default_cache_lock = threading.Lock()


def default_cache() -> ModelCache:
    """The per-process cache (size from ``$DYNABENCH_MODEL_CACHE_SIZE``, default 4)."""
    global _default_cache
    with _default_cache_lock:
        if _default_cache is None:
            _default_cache = ModelCache()
        return _default_cache


def load_model(ref: ModelRef | str | os.PathLike, cache: ModelCache | None = None) -> LoadedModel:
    return (cache if cache is not None else default_cache()).get(ref)


def warm_up(refs: Iterable[ModelRef | str | os.PathLike], cache: ModelCache | None = None) -> None:
    """Load (and verify) models into the cache and run one tiny forward pass each.

    Call it in the worker process (Celery ``worker_process_init``), not before a fork.
    """
    for ref in refs:
        loaded = load_model(ref, cache)
        spec = loaded.spec
        if spec.is_classification:
            predict(ref, [dict.fromkeys(spec.input_fields, "warm up")], cache=cache)
        else:
            predict(ref, [{"passage": "Warm up the model.", "question": "What?"}], cache=cache)


def _validate_all(spec: TaskSpec, rows_inputs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    if isinstance(rows_inputs, Mapping):
        raise InputError("inputs", "pass a list of input dicts (one per example)")
    clean = []
    for i, inputs in enumerate(rows_inputs):
        try:
            clean.append(spec.validate_inputs(inputs))
        except InputError as exc:
            if len(rows_inputs) == 1:
                raise
            raise InputError(exc.field, f"example {i}: {exc.message}") from exc
    return clean


def run(loaded: LoadedModel, rows_inputs: Sequence[Mapping[str, Any]], batch_size: int = 32):
    """Predict with an already loaded model (validates the inputs)."""
    from .inference import answer_questions, classify

    rows = _validate_all(loaded.spec, rows_inputs)
    if not rows:
        return []
    if loaded.spec.is_classification:
        return classify(loaded, rows, batch_size)
    return answer_questions(loaded, rows, batch_size)


def predict(
    ref: ModelRef | str | os.PathLike,
    rows_inputs: Sequence[Mapping[str, Any]],
    *,
    batch_size: int = 32,
    cache: ModelCache | None = None,
) -> list[dict[str, Any]]:
    """Predict for a list of examples (a list of one for a single example).

    Classification: ``{"label": str, "probabilities": {label: float}}``.
    Extractive QA: ``{"answer": str, "start": int, "end": int, "score": float}``
    where ``passage[start:end] == answer`` and ``score`` is the span probability
    ``softmax(start)[s] * softmax(end)[e]`` of the best span (``s <= e``, at most 30
    word pieces, inside the passage).  Raises :class:`InputError` for bad inputs and
    :class:`ArtifactError` for a bad artifact.
    """
    return run(load_model(ref, cache), rows_inputs, batch_size)


def predict_ensemble(
    refs: Sequence[ModelRef | str | os.PathLike],
    rows_inputs: Sequence[Mapping[str, Any]],
    *,
    batch_size: int = 32,
    cache: ModelCache | None = None,
) -> list[dict[str, Any]]:
    """Combine several models of the same task.

    Classification: the mean of the members' probabilities per label; the label is
    its argmax (ties go to the earlier label in the first member's label order).
    Extractive QA: the span of the member with the highest score.  Every output has
    ``"members"``: the per-member results, in ``refs`` order.
    """
    if not refs:
        raise MLError("an ensemble needs at least one model")
    members = [load_model(ref, cache) for ref in refs]
    first = members[0].spec
    for member in members[1:]:
        if member.spec.kind != first.kind or set(member.spec.labels) != set(first.labels):
            raise MLError(
                f"ensemble members disagree: {member.path} is {member.spec.kind} "
                f"{member.spec.labels}, {members[0].path} is {first.kind} {first.labels}"
            )
        if member.spec.input_fields != first.input_fields:
            raise MLError(f"ensemble members read different fields: {member.path}")
    outputs = [run(member, rows_inputs, batch_size) for member in members]
    combined = []
    for i in range(len(outputs[0])):
        per_member = [out[i] for out in outputs]
        if first.is_classification:
            mean = {
                label: sum(m["probabilities"][label] for m in per_member) / len(per_member)
                for label in first.labels
            }
            label = max(first.labels, key=lambda lab: mean[lab])
            combined.append({"label": label, "probabilities": mean, "members": per_member})
        else:
            best = max(range(len(per_member)), key=lambda j: per_member[j]["score"])
            combined.append({**per_member[best], "member": best, "members": per_member})
    return combined


__all__ = [
    "ArtifactError",
    "ModelCache",
    "ModelRef",
    "default_cache",
    "load_model",
    "predict",
    "predict_ensemble",
    "run",
    "warm_up",
]
