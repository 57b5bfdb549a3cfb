"""Dynabench ML core: plain Python + torch, no Django.

Public API::

    TaskSpec, MLError, InputError, ArtifactError
    train(spec, train_rows, dev_rows, out_dir, ...) -> ArtifactInfo
    ModelRef(path, sha256=None), ModelCache(max_size=None)
    predict(ref, rows_inputs) / predict_ensemble(refs, rows_inputs) / warm_up(refs)
    explain(ref, inputs, target=None, n_steps=10)
    save_artifact(...), verify_artifact(path, expected_sha256=None), load_artifact(...)
    resolve_backbone(name), get_device()
    ml.metrics: accuracy, macro_f1, per_class, confusion_matrix, classification_report,
                normalize_answer, exact_match, f1, squad_scores, model_fooled

Importing ``ml`` is cheap and does not import torch: the torch-backed names load on
first use (PEP 562), so Django can import ``ml`` (e.g. ``ml.TaskSpec``,
``ml.metrics``) in a web process without paying for torch, and without touching
torch before a fork.  Hugging Face libraries are forced offline here, before anything
can import them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .backbones import configure_offline

configure_offline()

from . import metrics  # noqa: E402  (after configure_offline on purpose)
from .errors import ArtifactError, InputError, MLError  # noqa: E402
from .metrics import model_fooled  # noqa: E402
from .spec import TaskSpec  # noqa: E402

_LAZY = {
    "ArtifactInfo": "artifacts",
    "LoadedModel": "artifacts",
    "save_artifact": "artifacts",
    "verify_artifact": "artifacts",
    "combined_sha256": "artifacts",
    "artifact_sha256": "artifacts",
    "load_artifact": "artifacts",
    "resolve_backbone": "backbones",
    "get_device": "backbones",
    "DEFAULT_BACKBONE": "backbones",
    "train": "training",
    "ModelRef": "prediction",
    "ModelCache": "prediction",
    "default_cache": "prediction",
    "predict": "prediction",
    "predict_ensemble": "prediction",
    "warm_up": "prediction",
    "explain": "explanation",
}

if TYPE_CHECKING:  # for type checkers and IDEs
    from .artifacts import (
        ArtifactInfo,
        LoadedModel,
        artifact_sha256,
        combined_sha256,
        load_artifact,
        save_artifact,
        verify_artifact,
    )
    from .backbones import DEFAULT_BACKBONE, get_device, resolve_backbone
    from .explanation import explain
    from .prediction import ModelCache, ModelRef, default_cache, predict, predict_ensemble, warm_up
    from .training import train


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ml' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ArtifactError",
    "ArtifactInfo",
    "DEFAULT_BACKBONE",
    "InputError",
    "LoadedModel",
    "MLError",
    "ModelCache",
    "ModelRef",
    "TaskSpec",
    "artifact_sha256",
    "combined_sha256",
    "default_cache",
    "explain",
    "get_device",
    "load_artifact",
    "metrics",
    "model_fooled",
    "predict",
    "predict_ensemble",
    "resolve_backbone",
    "save_artifact",
    "train",
    "verify_artifact",
    "warm_up",
]
