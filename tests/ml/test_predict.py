"""Prediction: outputs, batching, bad inputs, the bounded cache, ensembles, QA spans."""

from __future__ import annotations

import shutil
import threading

import pytest

import ml
from ml import InputError, MLError, ModelCache, ModelRef


def test_classification_output(sentiment_ref, cache):
    results = ml.predict(sentiment_ref, [{"statement": "I loved this film"}], cache=cache)
    assert len(results) == 1
    [result] = results
    assert result["label"] in {"negative", "positive"}
    assert list(result["probabilities"]) == ["negative", "positive"]
    assert sum(result["probabilities"].values()) == pytest.approx(1.0, abs=1e-6)
    assert result["label"] == max(result["probabilities"], key=result["probabilities"].get)


def test_fitted_model_gets_its_training_sentences_right(sentiment_ref, cache):
    results = ml.predict(
        sentiment_ref,
        [{"statement": "I loved this film"}, {"statement": "I hated this film"}],
        cache=cache,
    )
    assert [r["label"] for r in results] == ["positive", "negative"]


def test_batch_equals_one_by_one(nli_ref, nli_rows, cache):
    """Length-sorted, padded batches give the same answers as single examples."""
    inputs = [r["inputs"] for r in nli_rows]
    batch = ml.predict(nli_ref, inputs, batch_size=4, cache=cache)
    for row, together in zip(inputs, batch, strict=True):
        [alone] = ml.predict(nli_ref, [row], cache=cache)
        assert alone["label"] == together["label"]
        for label, p in alone["probabilities"].items():
            assert together["probabilities"][label] == pytest.approx(p, abs=1e-5)
    assert ml.predict(nli_ref, [], cache=cache) == []


@pytest.mark.parametrize(
    "inputs, field, words",
    [
        ({"statement": ""}, "statement", "empty"),
        ({"statement": " \t\n"}, "statement", "empty"),
        ({"statement": "x" * 1001}, "statement", "limit is 1000"),
        ({"text": "hello"}, "statement", "required"),
    ],
)
def test_bad_inputs_are_refused_before_tokenisation(sentiment_ref, cache, inputs, field, words):
    with pytest.raises(InputError) as info:
        ml.predict(sentiment_ref, [inputs], cache=cache)
    assert info.value.field == field and words in info.value.message


def test_a_bad_example_in_a_batch_is_named(sentiment_ref, cache):
    with pytest.raises(InputError, match="example 1: must not be empty"):
        ml.predict(sentiment_ref, [{"statement": "ok"}, {"statement": ""}], cache=cache)
    with pytest.raises(InputError, match="list of input dicts"):
        ml.predict(sentiment_ref, {"statement": "ok"}, cache=cache)


def test_max_chars_boundary(sentiment_ref, cache):
    [result] = ml.predict(sentiment_ref, [{"statement": "fine " * 200}], cache=cache)  # 1000 chars
    assert result["label"] in {"negative", "positive"}


def test_cache_is_bounded_by_count(sentiment_model, tmp_path):
    paths = []
    for name in ("a", "b", "c"):
        shutil.copytree(sentiment_model.path, tmp_path / name)
        paths.append(str(tmp_path / name))
    cache = ModelCache(max_size=2)
    first = cache.get(paths[0])
    cache.get(paths[1])
    assert cache.get(paths[0]) is first  # a hit, and now the most recently used
    assert cache.loads == 2 and cache.hits == 1
    cache.get(paths[2])  # evicts b, the least recently used
    assert len(cache) == 2
    assert cache.paths() == [paths[0], paths[2]]
    assert paths[1] not in cache
    cache.get(paths[1])
    assert cache.loads == 4 and cache.paths() == [paths[2], paths[1]]


def test_cache_size_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("DYNABENCH_MODEL_CACHE_SIZE", "7")
    assert ModelCache().max_size == 7
    monkeypatch.setenv("DYNABENCH_MODEL_CACHE_SIZE", "zero")
    with pytest.raises(MLError):
        ModelCache()
    monkeypatch.delenv("DYNABENCH_MODEL_CACHE_SIZE")
    assert ModelCache().max_size == 4


def test_concurrent_requests_load_a_model_once(sentiment_model):
    cache = ModelCache(max_size=2)
    barrier = threading.Barrier(4)
    results, errors = [], []

    def work():
        try:
            barrier.wait()
            ref = ModelRef(str(sentiment_model.path), sentiment_model.sha256)
            results.append(ml.predict(ref, [{"statement": "I loved this film"}], cache=cache)[0])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cache.loads == 1 and len(results) == 4
    assert len({r["label"] for r in results}) == 1


def test_replaced_artifact_is_reloaded_and_verified(sentiment_model, nli_model, tmp_path):
    path = tmp_path / "current"
    shutil.copytree(sentiment_model.path, path)
    cache = ModelCache(max_size=2)
    assert cache.get(str(path)).spec.input_fields == ["statement"]
    shutil.rmtree(path)
    shutil.copytree(nli_model.path, path)
    assert cache.get(str(path)).spec.input_fields == ["premise", "hypothesis"]
    assert cache.loads == 2


def test_the_same_artifact_written_again_is_verified_and_kept_but_a_tampered_one_is_refused(sentiment_model, tmp_path):
    path = tmp_path / "current"
    shutil.copytree(sentiment_model.path, path)
    ref = ModelRef(str(path), sentiment_model.sha256)
    cache = ModelCache(max_size=2)
    first = cache.get(ref)
    shutil.rmtree(path)
    shutil.copytree(sentiment_model.path, path)  # registered anew: new files, the same bytes
    assert cache.get(ref) is first
    assert (cache.loads, cache.reverified) == (1, 1)
    assert cache.get(ref) is first and cache.hits == 1  # its new files are the ones on record now
    shutil.rmtree(path)
    shutil.copytree(sentiment_model.path, path)
    with open(path / "model.safetensors", "r+b") as fh:  # written again, and tampered with
        fh.seek(-16, 2)
        fh.write(b"\x01" * 16)
    with pytest.raises(ml.ArtifactError, match="model.safetensors"):
        cache.get(ref)
    assert len(cache) == 0 and (cache.loads, cache.reverified) == (1, 1)


def test_wrong_sha256_in_ref_is_refused(sentiment_model, nli_model, cache):
    with pytest.raises(ml.ArtifactError, match="sha256 mismatch"):
        ml.predict(
            ModelRef(str(sentiment_model.path), nli_model.sha256), [{"statement": "x"}], cache=cache
        )
    assert len(cache) == 0


def test_ensemble_is_the_mean_of_member_probabilities(sentiment_ref, sentiment_b_ref, cache):
    inputs = [{"statement": "I loved this film"}, {"statement": "a chore, honestly"}]
    a = ml.predict(sentiment_ref, inputs, cache=cache)
    b = ml.predict(sentiment_b_ref, inputs, cache=cache)
    combined = ml.predict_ensemble([sentiment_ref, sentiment_b_ref], inputs, cache=cache)
    for ra, rb, rc in zip(a, b, combined, strict=True):
        assert rc["members"] == [ra, rb]
        for label in ("negative", "positive"):
            expected = (ra["probabilities"][label] + rb["probabilities"][label]) / 2
            assert rc["probabilities"][label] == pytest.approx(expected, abs=1e-9)
        assert rc["label"] == max(rc["probabilities"], key=rc["probabilities"].get)
    # the two members really differ, so the mean is not trivially either of them
    assert a[1]["probabilities"] != pytest.approx(b[1]["probabilities"], abs=1e-3)


def test_ensemble_refuses_mixed_tasks(sentiment_ref, nli_ref, cache):
    with pytest.raises(MLError, match="disagree"):
        ml.predict_ensemble([sentiment_ref, nli_ref], [{"statement": "x"}], cache=cache)
    with pytest.raises(MLError):
        ml.predict_ensemble([], [{"statement": "x"}], cache=cache)


def test_qa_spans_point_into_the_passage(qa_ref, qa_rows, cache):
    inputs = [r["inputs"] for r in qa_rows]
    results = ml.predict(qa_ref, inputs, cache=cache)
    for row, result in zip(inputs, results, strict=True):
        passage = row["passage"]
        assert 0 <= result["start"] < result["end"] <= len(passage)
        assert passage[result["start"] : result["end"]] == result["answer"]
        assert 0.0 < result["score"] <= 1.0


def test_qa_answers_in_a_late_window_of_a_long_passage(qa_ref, long_passage, cache):
    [result] = ml.predict(
        qa_ref, [{"passage": long_passage, "question": "What is the secret code?"}], cache=cache
    )
    assert long_passage[result["start"] : result["end"]] == result["answer"]
    assert result["answer"] == "4711"  # it was trained on this very example
    assert result["start"] > 1000  # far beyond the first 64-token window


def test_qa_offsets_survive_unicode_and_odd_spacing(qa_ref, cache):
    passage = "Café 😍 opened in  1932 \u2014 in Zürich, 中国 style.\n\nIt closed in 2001."
    [result] = ml.predict(
        qa_ref, [{"passage": passage, "question": "When did it open?"}], cache=cache
    )
    assert passage[result["start"] : result["end"]] == result["answer"]
    assert result["answer"].strip() == result["answer"] and result["answer"]


def test_qa_ensemble_takes_the_best_member(qa_ref, qa_model, tmp_path, cache):
    shutil.copytree(qa_model.path, tmp_path / "twin")
    inputs = [{"passage": "The bridge opened in 1932.", "question": "When did the bridge open?"}]
    [combined] = ml.predict_ensemble(
        [qa_ref, ModelRef(str(tmp_path / "twin"))], inputs, cache=cache
    )
    scores = [m["score"] for m in combined["members"]]
    assert combined["score"] == max(scores)
    assert combined["answer"] == combined["members"][combined["member"]]["answer"]


def test_warm_up_loads_into_the_cache(sentiment_ref, qa_ref, cache):
    ml.warm_up([sentiment_ref, qa_ref], cache=cache)
    assert len(cache) == 2 and sentiment_ref in cache and qa_ref in cache
