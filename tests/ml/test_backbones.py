"""Backbone resolution, offline mode and device selection."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import ml
from ml import ArtifactError
from ml.backbones import get_device, resolve_backbone


def test_importing_ml_forces_offline_and_does_not_import_torch():
    code = (
        "import os, sys; os.environ.pop('HF_HUB_OFFLINE', None); import ml; "
        "assert os.environ['HF_HUB_OFFLINE'] == '1', 'offline not set'; "
        "assert os.environ['TRANSFORMERS_OFFLINE'] == '1'; "
        "assert 'torch' not in sys.modules, 'torch imported eagerly'; "
        "assert 'transformers' not in sys.modules; "
        "spec = ml.TaskSpec(kind='extractive_qa'); print(spec.input_fields)"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    root = Path(ml.__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['passage', 'question']"


def test_default_backbone_ships_in_the_wheel():
    path = resolve_backbone("all-MiniLM-L6-v2")
    assert (path / "config.json").is_file()
    assert (path / "model.safetensors").is_file()
    assert (path / "tokenizer.json").is_file()


def test_a_local_directory_is_a_backbone(tmp_path):
    assert resolve_backbone(str(resolve_backbone("all-MiniLM-L6-v2"))).is_dir()
    with pytest.raises(ArtifactError, match="unknown backbone"):
        resolve_backbone("bert-base-uncased")  # a hub name: never downloaded
    with pytest.raises(ArtifactError, match="no config.json"):
        resolve_backbone(str(tmp_path))


def test_training_and_loading_never_touch_the_network(
    monkeypatch, tmp_path, sentiment_spec, sentiment_rows
):
    """With every socket connection refused, a backbone loads, trains and predicts."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    info = ml.train(
        sentiment_spec, sentiment_rows[:4], [], tmp_path / "offline", max_steps=1, batch_size=4
    )
    [result] = ml.predict(
        ml.ModelRef(str(info.path)), [{"statement": "fine"}], cache=ml.ModelCache(1)
    )
    assert result["label"] in {"negative", "positive"}


def test_device_selection(monkeypatch):
    import torch

    monkeypatch.setenv("DYNABENCH_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    monkeypatch.delenv("DYNABENCH_DEVICE")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert get_device().type == expected
    if not torch.cuda.is_available():
        monkeypatch.setenv("DYNABENCH_DEVICE", "cuda")
        with pytest.raises(ArtifactError, match="CUDA is not available"):
            get_device()


def test_torch_threads_from_the_environment(monkeypatch):
    import torch

    from ml.backbones import configure_torch_threads

    before = torch.get_num_threads()
    monkeypatch.delenv("DYNABENCH_TORCH_THREADS", raising=False)
    assert configure_torch_threads() is None and torch.get_num_threads() == before
    try:
        monkeypatch.setenv("DYNABENCH_TORCH_THREADS", "1")
        assert configure_torch_threads() == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv("DYNABENCH_TORCH_THREADS", "many")
        with pytest.raises(ArtifactError):
            configure_torch_threads()
    finally:
        torch.set_num_threads(before)


_FIRST_USE_IN_TWO_THREADS = """
import threading, traceback
import ml
from ml.artifacts import model_class_for
from ml.backbones import import_transformers, quiet_transformers

start = threading.Barrier(2)
failures = []

def run(step):
    start.wait()
    try:
        step()
    except Exception as exc:
        failures.append("".join(traceback.format_exception_only(exc)))

def load_path():  # what the model thread does first when it loads a target model
    model_class_for(ml.TaskSpec(kind="extractive_qa"))

def train_path():  # what a training job does first
    quiet_transformers()
    import_transformers().AutoTokenizer

threads = [threading.Thread(target=run, args=(step,)) for step in (load_path, train_path)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(failures[0] if failures else "ok")
"""


def test_two_threads_that_first_use_transformers_at_once_both_get_it():
    """A training worker's model thread warms up the target models while a job starts
    on the main thread: both import transformers for the first time at once. Without
    the lock in ``import_transformers`` about half such starts broke one of them
    ("cannot import name 'AutoTokenizer' from 'transformers'"); four fresh
    interpreters all pass with it."""
    root = Path(ml.__file__).resolve().parent.parent
    runs = [
        subprocess.Popen([sys.executable, "-c", _FIRST_USE_IN_TWO_THREADS], cwd=root,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    answers = [run.communicate(timeout=120) for run in runs]
    for run, (out, err) in zip(runs, answers, strict=True):
        assert run.returncode == 0, err
        assert out.strip() == "ok", out
