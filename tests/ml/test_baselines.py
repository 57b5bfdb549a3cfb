"""The sliding-window baseline for extractive QA (ml.baselines), on passages small
enough to work out by hand. Each expected value is derived in the comments."""

import math

import pytest

from ml import baselines

# Two sentences. Question content words: owns, red, car ("who" and "a" are stopwords);
# question bigrams: (who, owns), (owns, a), (a, red), (red, car).
# Sentence 1 shares none of them: every candidate there has overlap 0. In sentence 2
# (bob owns a red car) the candidate "Bob" leaves owns, red, car and the bigrams
# (owns, a), (a, red), (red, car) outside it: overlap 6. Every other candidate covers
# some of them: "owns" 4, "red" 3, "car" 4, "red car" 2, "Bob owns" 4, "owns a red" 1.
# ("Bob owns a" ends on a stopword: not a candidate.)
OWNER = {"passage": "Anna lives in Paris. Bob owns a red car.", "question": "Who owns a red car?"}

# One sentence: the(0) bridge(1) was(2) built(3) in(4) 1412(5) by(6) monks(7).
# Question content words: bridge, built; bigrams (the, bridge) and (bridge, built)
# ("when was", "was the" are stopwords only). The sentence holds bridge, built and
# (the, bridge). Candidates (begin and end on a content word, at most 3 words) and
# their overlap: "bridge" 1, "bridge was built" 0, "built" 2, "built in 1412" 2, and
# "1412", "1412 by monks", "monks" 3 each: those three go on to the window.
# Every word occurs once in the passage, so IC = log 2 for each.
# - "1412": S = {bridge, built, 1412}, windows of 3 words; the best holds two of S
#   (bridge was built, or built in 1412): 2 log 2.
# - "1412 by monks": S = {bridge, built, 1412, by, monks}, windows of 5; the best,
#   "built in 1412 by monks", holds four: 4 log 2.
# - "monks": S = {bridge, built, monks}: 2 log 2 (bridge was built).
BRIDGE = {"passage": "The bridge was built in 1412 by monks.", "question": "When was the bridge built?"}


def test_the_overlap_with_the_question_picks_the_sentence_and_the_span():
    found = baselines.sliding_window_answer(OWNER["passage"], OWNER["question"])
    assert found["answer"] == "Bob" and found["start"] == OWNER["passage"].index("Bob")
    assert found["overlap"] == 6
    spans = {(c.sentence, c.first, c.last) for c in baselines.candidates(OWNER["passage"], OWNER["question"])}
    assert spans == {(1, 0, 0)}  # the only candidate with the highest overlap


def test_the_sliding_window_chooses_among_equal_overlaps():
    found = baselines.candidates(BRIDGE["passage"], BRIDGE["question"])
    windows = {(c.first, c.last): (c.overlap, c.window) for c in found}
    two, four = round(2 * math.log(2), 9), round(4 * math.log(2), 9)
    assert windows == {(5, 5): (3, two), (5, 7): (3, four), (7, 7): (3, two)}
    answer = baselines.sliding_window_answer(BRIDGE["passage"], BRIDGE["question"])
    assert answer == {"answer": "1412 by monks", "start": 24, "overlap": 3, "window": four}


def test_ties_go_to_the_shorter_then_the_earlier_span():
    # With one-word spans, "1412" and "monks" tie on overlap (3) and window (2 log 2).
    answer = baselines.sliding_window_answer(BRIDGE["passage"], BRIDGE["question"], max_span_words=1)
    assert answer["answer"] == "1412" and answer["start"] == 24


def test_the_span_keeps_its_inner_punctuation_and_sentences_split_on_full_stops():
    passage = "The town had 4,300 people in 1851. It has 2,800 now."
    assert [[w.text for w in s] for s in baselines.sentences(passage)] == [
        ["the", "town", "had", "4", "300", "people", "in", "1851"], ["it", "has", "2", "800", "now"]]
    # "How many people did the town have in 1851?": content words many, people, town, 1851;
    # bigrams found in sentence 1: (the, town), (in, 1851). "4", "300" and "4,300" leave all
    # five terms outside them (overlap 5; "people" 4, "town" 3, "1851" 3). Windows (IC =
    # log 2 for every word): "4" and "300" (|S| = 5) hold at most three words of S,
    # "4,300" (|S| = 6) four: "4,300", its inner comma kept.
    answer = baselines.sliding_window_answer(passage, "How many people did the town have in 1851?")
    assert (answer["answer"], answer["overlap"], answer["window"]) == ("4,300", 5, round(4 * math.log(2), 9))


def test_scores_are_squad_exact_match_and_f1_against_the_gold_answer():
    rows = [{"inputs": OWNER, "answer": {"text": "Bob", "start": 21}},
            {"inputs": BRIDGE, "answer": {"text": "1412", "start": 24}}]
    scores = baselines.sliding_window_scores(rows)
    # "1412 by monks" against "1412": precision 1/3, recall 1, F1 0.5; not an exact match.
    assert scores == {"answers": ["Bob", "1412 by monks"], "exact_match": [1.0, 0.0], "f1": [1.0, 0.5]}


def test_a_passage_without_a_content_word_has_no_answer_and_the_bound_is_checked():
    assert baselines.sliding_window_answer("It was the.", "What was it?") == {
        "answer": "", "start": 0, "overlap": 0, "window": 0.0}
    with pytest.raises(ValueError, match="max_span_words"):
        baselines.sliding_window_answer(BRIDGE["passage"], BRIDGE["question"], max_span_words=0)


def test_the_answer_is_deterministic():
    passage = ("Tallowmere is a small market town on the eastern bank of the River Esk. It was founded in 1287 by "
               "a group of wool merchants who needed a safe place to trade.")
    answers = {baselines.sliding_window_answer(passage, "Who founded Tallowmere?")["answer"] for _ in range(5)}
    assert len(answers) == 1


def test_the_window_weighs_each_word_by_its_inverse_count_in_the_passage():
    # Question content words: kim, see; bigrams (did, kim), (kim, see). Each sentence
    # holds kim only: "saw", "saw Lee", "Lee" (and the same with Max) have overlap 1, the
    # spans over "Kim" 0. C(kim) = C(saw) = 2, so IC = log 1.5; C(lee) = C(max) = 1: log 2.
    # "saw": S = {kim, see, saw}, the whole sentence: kim + saw = 2 log 1.5;
    # "saw Lee": S has 4 words, the sentence 3: kim + saw + lee = 2 log 1.5 + log 2;
    # "Lee": kim + lee = log 1.5 + log 2. "saw Lee" and "saw Max" tie: the earlier wins.
    passage, question = "Kim saw Lee. Kim saw Max.", "Who did Kim see?"
    windows = {(c.sentence, c.first, c.last): c.window for c in baselines.candidates(passage, question)}
    low, high = math.log(1.5), math.log(2)
    assert windows == {(s, first, last): round(value, 9) for s in (0, 1) for first, last, value in
                       [(1, 1, 2 * low), (1, 2, 2 * low + high), (2, 2, low + high)]}
    assert baselines.sliding_window_answer(passage, question)["answer"] == "saw Lee"
