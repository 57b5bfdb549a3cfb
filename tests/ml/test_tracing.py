"""Inference through checked TorchScript traces (ml.tracing)."""

from __future__ import annotations

import logging

import pytest
import torch

import ml
from ml import tracing
from ml.prediction import load_model


def _eager(holder):
    """The same loaded model without its trace (the eager path)."""
    from dataclasses import replace

    return replace(holder, inference_forward=None)


@pytest.mark.parametrize("which", ["sentiment_ref", "nli_ref", "qa_ref"])
def test_every_task_kind_loads_with_a_trace(which, request, cache):
    holder = load_model(request.getfixturevalue(which), cache=cache)
    assert isinstance(holder.inference_forward, torch.jit.ScriptModule)
    # The trace shares the eager model's weights: no second copy in memory.
    eager_params = {p.data_ptr() for p in holder.model.parameters()}
    assert {p.data_ptr() for p in holder.inference_forward.parameters()} <= eager_params


def test_traced_answers_equal_eager_answers_classification(nli_ref, nli_rows, cache):
    holder = load_model(nli_ref, cache=cache)
    inputs = [r["inputs"] for r in nli_rows]
    # Shapes the trace never saw: one row, all rows, odd batches (padding inside).
    for rows, batch_size in ((inputs[:1], 32), (inputs, 32), (inputs, 3), (inputs[::-1], 5)):
        traced = ml.inference.classify(holder, rows, batch_size=batch_size)
        eager = ml.inference.classify(_eager(holder), rows, batch_size=batch_size)
        for t, e in zip(traced, eager, strict=True):
            assert t["label"] == e["label"]
            for label, p in e["probabilities"].items():
                assert t["probabilities"][label] == pytest.approx(p, abs=1e-5)


def test_traced_answers_equal_eager_answers_qa(qa_ref, qa_rows, cache):
    holder = load_model(qa_ref, cache=cache)
    rows = [r["inputs"] for r in qa_rows]
    long_row = {"question": rows[0]["question"], "passage": " ".join([rows[0]["passage"]] * 40)}  # many windows
    for batch in (rows[:1], rows, [long_row, *rows]):
        traced = ml.inference.answer_questions(holder, batch, batch_size=4)
        eager = ml.inference.answer_questions(_eager(holder), batch, batch_size=4)
        for t, e in zip(traced, eager, strict=True):
            assert (t["answer"], t["start"], t["end"]) == (e["answer"], e["start"], e["end"])
            assert t["score"] == pytest.approx(e["score"], abs=1e-5)


def test_tracing_can_be_turned_off(sentiment_ref, cache, monkeypatch):
    monkeypatch.setenv(tracing.ENV, "0")
    holder = load_model(sentiment_ref, cache=cache)
    assert holder.inference_forward is None
    [result] = ml.predict(sentiment_ref, [{"statement": "I loved this film"}], cache=cache)
    assert result["label"] == "positive"


def test_a_model_that_cannot_be_traced_runs_eagerly(sentiment_ref, cache, monkeypatch, caplog):
    def refuse(*args, **kwargs):
        raise RuntimeError("cannot trace this one")

    monkeypatch.setattr(torch.jit, "trace", refuse)
    with caplog.at_level(logging.WARNING, logger="ml.tracing"):
        holder = load_model(sentiment_ref, cache=cache)
    assert holder.inference_forward is None
    assert "cannot trace this one" in caplog.text and "runs eagerly" in caplog.text
    [result] = ml.predict(sentiment_ref, [{"statement": "I loved this film"}], cache=cache)
    assert result["label"] == "positive"


def test_a_trace_that_disagrees_with_the_model_is_dropped(sentiment_ref, cache, monkeypatch, caplog):
    real_trace = torch.jit.trace

    class Off:
        """A trace whose logits are shifted: what a trace that took a wrong path looks like."""

        def __init__(self, traced):
            self.traced = traced

        def __call__(self, **inputs):
            out = dict(self.traced(**inputs))
            return {**out, "logits": out["logits"] + 0.5}

    monkeypatch.setattr(torch.jit, "trace", lambda *a, **k: Off(real_trace(*a, **k)))
    with caplog.at_level(logging.WARNING, logger="ml.tracing"):
        holder = load_model(sentiment_ref, cache=cache)
    assert holder.inference_forward is None
    assert "disagrees" in caplog.text


class _WrongWhen:
    """A trace that answers wrongly only when ``wrong(call_number, inputs)`` holds:
    what a trace whose optimised second run, or whose long inputs, take another path
    looks like."""

    def __init__(self, traced, wrong):
        self.traced, self.wrong, self.calls = traced, wrong, 0

    def __call__(self, **inputs):
        self.calls += 1
        out = dict(self.traced(**inputs))
        if self.wrong(self.calls, inputs):
            out["logits"] = out["logits"] + 0.5
        return out


@pytest.mark.parametrize("wrong", [
    pytest.param(lambda n, inputs: n % 2 == 0, id="only-on-its-second-run"),
    pytest.param(lambda n, inputs: inputs["input_ids"].shape[1] > 64, id="only-on-long-inputs"),
    pytest.param(lambda n, inputs: inputs["input_ids"].shape[0] == 1, id="only-on-one-example"),
])
def test_a_trace_is_checked_on_second_runs_long_inputs_and_single_examples(sentiment_ref, cache, monkeypatch,
                                                                         caplog, wrong):
    real_trace = torch.jit.trace
    monkeypatch.setattr(torch.jit, "trace", lambda *a, **k: _WrongWhen(real_trace(*a, **k), wrong))
    with caplog.at_level(logging.WARNING, logger="ml.tracing"):
        holder = load_model(sentiment_ref, cache=cache)
    assert holder.inference_forward is None
    assert "disagrees" in caplog.text


def test_models_traced_at_once_put_the_warning_filters_back(sentiment_ref, nli_ref, qa_ref):
    """Each trace silences the tracer's warnings with warnings.catch_warnings (which
    swaps the process's filters); traces at once on several threads must still leave
    the filters as they were, or every warning would stay silenced."""
    import threading
    import warnings

    from ml.prediction import ModelCache

    before = list(warnings.filters)
    loaded = {}

    def load(name, ref):
        loaded[name] = load_model(ref, cache=ModelCache())

    threads = [threading.Thread(target=load, args=item)
               for item in (("sentiment", sentiment_ref), ("nli", nli_ref), ("qa", qa_ref))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(loaded) == ["nli", "qa", "sentiment"]
    assert all(holder.inference_forward is not None for holder in loaded.values())
    assert warnings.filters == before
