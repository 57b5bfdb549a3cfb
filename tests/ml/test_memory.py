"""Inference memory, measured in a child of a server that imported torch once."""

from __future__ import annotations

import os
import signal

import ml.memory as memory
from ml.memory import inference_memory_mb, measure

INPUTS = [{"statement": "I loved this film"}, {"statement": "a chore from start to finish"}]


def test_each_measurement_runs_in_a_child_that_finds_torch_and_the_model_code_imported(sentiment_model):
    first = measure(sentiment_model.path, INPUTS)
    server = memory._server.pid
    second = measure(sentiment_model.path, INPUTS * 16)
    # The imports are in the baseline, paid once by the measuring server, not per child.
    assert first["preloaded"] is True and second["preloaded"] is True and memory._server.pid == server
    weights_mb = (sentiment_model.path / "model.safetensors").stat().st_size / 2**20
    # The weights are loaded, so they count; a batch of 32 weighs no less than a batch of 2.
    assert weights_mb < first["memory_mb"] <= second["memory_mb"] + 5


def test_a_server_that_left_is_started_again(sentiment_model):
    assert measure(sentiment_model.path, INPUTS)["memory_mb"] > 0
    os.killpg(memory._server.pid, signal.SIGKILL)  # as the out-of-memory killer would
    memory._server.wait()
    assert measure(sentiment_model.path, INPUTS)["memory_mb"] > 0


def test_a_measurement_past_its_time_is_given_up_and_leaves_no_process(sentiment_model, caplog):
    measure(sentiment_model.path, INPUTS)  # the server is up
    server = memory._server
    assert inference_memory_mb(sentiment_model.path, INPUTS, timeout=0.001) is None
    assert "not measured: no answer in 0 s" in caplog.text
    assert server.poll() is not None and memory._server is None  # stopped with the child it waited for
    assert measure(sentiment_model.path, INPUTS)["memory_mb"] > 0


def test_a_child_that_fails_or_has_nothing_to_measure_answers_none(tmp_path, caplog):
    assert inference_memory_mb(tmp_path / "no-model-here", INPUTS) is None
    assert "not measured: ArtifactError" in caplog.text
    assert inference_memory_mb(tmp_path, []) is None
