"""Explanations: word alignment with the original text, targets, convergence."""

from __future__ import annotations

import pytest

import ml
from ml import InputError
from ml.explanation import split_words


def words_of(text):
    return [text[s:e] for s, e in split_words(text)]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("I love it 😍!!", ["I", "love", "it", "😍", "!", "!"]),
        ("Don't stop... now", ["Don", "'", "t", "stop", ".", ".", ".", "now"]),
        ("Γειά σου, κόσμε!", ["Γειά", "σου", ",", "κόσμε", "!"]),
        ("我很喜欢这部电影！", ["我", "很", "喜", "欢", "这", "部", "电", "影", "！"]),
        # a ZWJ family, a heart with its variation selector, a toned thumb: one word each
        ("👨\u200d👩\u200d👧 ❤️👍🏽", ["👨\u200d👩\u200d👧", "❤️", "👍🏽"]),
        ("cafe\u0301  naïve\tok\n", ["cafe\u0301", "naïve", "ok"]),  # combining accent kept
        ("   ", []),
    ],
)
def test_split_words(text, expected):
    assert words_of(text) == expected


def check_alignment(result, inputs):
    assert result["words"], "no words"
    for word in result["words"]:
        original = inputs[word["field"]]
        assert original[word["start"] : word["end"]] == word["text"]
        assert -1.0 <= word["heat"] <= 1.0
    heats = [abs(w["heat"]) for w in result["words"]]
    assert max(heats) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "text",
    [
        "I love it 😍!!",
        "Wow... that's, like, the WORST film?! (Really.)",
        "Γειά σου κόσμε, ωραία ταινία.",
        "我很喜欢这部电影！",
        "👨\u200d👩\u200d👧 love❤️ 👍🏽 — cafe\u0301 naïve",
    ],
)
def test_words_align_with_the_original_text(sentiment_ref, cache, text):
    inputs = {"statement": text}
    result = ml.explain(sentiment_ref, inputs, cache=cache)
    check_alignment(result, inputs)
    assert [w["text"] for w in result["words"]] == words_of(text)
    assert result["n_steps"] == 10 and result["truncated"] is False
    assert result["target"] == result["prediction"]["label"]


def test_unknown_pieces_keep_their_characters(sentiment_ref, cache):
    """The emoji is [UNK] for this vocabulary, yet its word gets an attribution."""
    text = "I love it 😍!!"
    result = ml.explain(sentiment_ref, {"statement": text}, cache=cache)
    [emoji] = [w for w in result["words"] if w["text"] == "😍"]
    assert (emoji["start"], emoji["end"]) == (10, 11)
    assert emoji["attribution"] != 0.0


def test_both_segments_of_a_pair_are_explained(nli_ref, cache):
    inputs = {"premise": "A man is playing a guitar on stage.", "hypothesis": "Nobody plays 🎸."}
    result = ml.explain(nli_ref, inputs, target="contradiction", cache=cache)
    check_alignment(result, inputs)
    assert result["target"] == "contradiction"
    fields = [w["field"] for w in result["words"]]
    assert fields == ["premise"] * 9 + ["hypothesis"] * 4  # in model order
    for field in ("premise", "hypothesis"):
        assert any(w["attribution"] != 0 for w in result["words"] if w["field"] == field)


def test_target_changes_the_explanation(nli_ref, cache):
    inputs = {"premise": "Two dogs run through a field.", "hypothesis": "Animals are outside."}
    a = ml.explain(nli_ref, inputs, target="entailment", cache=cache)
    b = ml.explain(nli_ref, inputs, target="contradiction", cache=cache)
    assert [w["attribution"] for w in a["words"]] != [w["attribution"] for w in b["words"]]
    with pytest.raises(InputError) as info:
        ml.explain(nli_ref, inputs, target="maybe", cache=cache)
    assert info.value.field == "label"


def test_bad_explain_inputs(sentiment_ref, cache):
    with pytest.raises(InputError, match="empty"):
        ml.explain(sentiment_ref, {"statement": "  "}, cache=cache)
    with pytest.raises(InputError, match="limit"):
        ml.explain(sentiment_ref, {"statement": "x" * 1001}, cache=cache)
    with pytest.raises(InputError, match="n_steps"):
        ml.explain(sentiment_ref, {"statement": "ok"}, n_steps=0, cache=cache)


def test_convergence_delta_is_small(sentiment_ref, qa_ref, qa_rows, cache):
    """Completeness: sum(attributions) ~= F(input) - F(baseline).

    Measured on the test models: with n_steps=50 |delta| is below 1e-4 of the
    total absolute attribution; with n_steps=10 it is up to ~35% for the
    barely trained classifier, whose logit moves by only ~0.05 between baseline and
    input, and below 7% for the QA model (logit swing ~1).
    """
    for text in ("I loved this film", "what a terrible day", "I love it 😍!!"):
        result = ml.explain(sentiment_ref, {"statement": text}, n_steps=50, cache=cache)
        total = sum(abs(w["attribution"]) for w in result["words"])
        assert total > 0
        assert abs(result["convergence_delta"]) <= 0.01 * total
    for row in qa_rows[:3]:
        result = ml.explain(qa_ref, row["inputs"], n_steps=10, cache=cache)
        total = sum(abs(w["attribution"]) for w in result["words"])
        assert abs(result["convergence_delta"]) <= 0.15 * total


def test_qa_explains_the_predicted_span(qa_ref, qa_rows, cache):
    inputs = qa_rows[0]["inputs"]
    result = ml.explain(qa_ref, inputs, cache=cache)
    [prediction] = ml.predict(qa_ref, [inputs], cache=cache)
    assert result["target"] == result["prediction"]
    assert result["prediction"]["answer"] == prediction["answer"]
    assert result["prediction"]["start"] == prediction["start"]
    check_alignment(result, inputs)
    assert {w["field"] for w in result["words"]} == {"passage", "question"}
    assert result["passage_window"] == [0, len(inputs["passage"])]
    with pytest.raises(InputError):
        ml.explain(qa_ref, inputs, target="1889", cache=cache)


def test_qa_long_passage_explains_the_answer_window(qa_ref, long_passage, cache):
    inputs = {"passage": long_passage, "question": "What is the secret code?"}
    result = ml.explain(qa_ref, inputs, cache=cache)
    start, end = result["passage_window"]
    assert start <= result["target"]["start"] < result["target"]["end"] <= end
    assert result["truncated"] is True
    check_alignment(result, inputs)
    outside = [w for w in result["words"] if w["field"] == "passage" and w["end"] <= start]
    assert outside and all(w["attribution"] == 0.0 for w in outside)


def test_words_past_the_token_limit_are_flagged(sentiment_ref, cache):
    text = "x " * 500  # 500 word pieces, the model reads 256
    result = ml.explain(sentiment_ref, {"statement": text}, cache=cache)
    assert result["truncated"] is True
    assert len(result["words"]) == 500
    assert all(w["attribution"] == 0.0 for w in result["words"][300:])
    assert any(w["attribution"] != 0.0 for w in result["words"][:254])
