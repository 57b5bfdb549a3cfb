"""Reference answers that need no training: the lines a trained model has to clear.

Plain Python; no Django, no torch. Deterministic: the same passage and question
always give the same answer, on any machine.

The sliding-window baseline for extractive QA
---------------------------------------------
The simple baseline of the SQuAD paper (Rajpurkar et al. 2016, "SQuAD: 100,000+
Questions for Machine Comprehension of Text", section 5): for each candidate answer,
count the unigrams and bigrams the question shares with the candidate's sentence, the
candidate itself left out; keep the candidates with the most; among those choose with
the sliding window of Richardson et al. (2013, "MCTest", their Algorithm 1), applied,
as the SQuAD paper does, to the candidate's sentence rather than the whole passage.
The paper reports 13.2% exact match and 20.2% F1 on SQuAD v1.1 dev for it (against
three gold answers a question; a platform's test set keeps one).

What this version does, step by step (``sliding_window_answer``):

1. Words are runs of letters and digits (``\\w+``), compared in lower case. The passage
   is cut into sentences after ``.``, ``!`` or ``?`` followed by white space. A
   *content word* is a word not in ``STOPWORDS`` (articles, pronouns, auxiliaries,
   prepositions, question words...).
2. Candidates: every span of 1 to ``MAX_SPAN_WORDS`` consecutive words of one
   sentence that begins and ends with a content word (the paper takes the
   constituents of a parse tree; we have no parser, so spans are bounded in length
   and trimmed of function words instead). The answer is the passage's text from the
   span's first character to its last, inner punctuation included.
3. Overlap: the number of distinct question content words, plus distinct question
   bigrams (two adjacent question words, not both stopwords), that occur in the
   candidate's sentence at positions outside the candidate (a bigram: both of its
   words outside). Only the candidates with the highest overlap go on.
4. Sliding window: ``S`` is the set of the question's content words and the
   candidate's words; a window of ``|S|`` consecutive words slides over the sentence
   (the whole sentence when it is shorter) and scores the sum of ``IC(w)`` over its
   words that are in ``S``, where ``IC(w) = log(1 + 1 / C(w))`` and ``C(w)`` is how
   often ``w`` occurs in the passage. The candidate's score is its best window.
5. Ties: the higher overlap, then the higher window score, then the shorter span,
   then the earlier one.

Left out: the paper's distance-based extension (which changed its dev numbers by
0.1 point) and any learned weights. The window score grows with the span (a longer
span adds its words to ``S``), so the answers tend to the bound's length:
``MAX_SPAN_WORDS`` (3) is about the mean answer length of SQuAD v1.1 dev (3.1 words;
median 2).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from . import metrics

NAME = "sliding-window baseline"
MAX_SPAN_WORDS = 3
# The version of the algorithm: a cache of its answers keys on it, so a change here
# is never served from an old cache.
VERSION = 1

_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+")

STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
once only or other our ours ourselves out over own s same she should so some such t than that the their theirs
them themselves then there these they this those through to too under until up very was we were what when where
which while who whom whose why will with would you your yours yourself yourselves
""".split())


@dataclass(frozen=True)
class Word:
    text: str  # lower case
    start: int  # character offsets in the passage
    end: int


def words(text: str) -> list[Word]:
    return [Word(m.group().lower(), m.start(), m.end()) for m in _WORD.finditer(text)]


def sentences(passage: str) -> list[list[Word]]:
    """The passage's words, grouped by sentence (step 1); no empty sentence."""
    ends = [m.end() for m in _SENTENCE_END.finditer(passage)]
    grouped: list[list[Word]] = []
    boundary, current = 0, []
    for word in words(passage):
        while boundary < len(ends) and ends[boundary] <= word.start:
            boundary += 1
            if current:
                grouped.append(current)
                current = []
        current.append(word)
    if current:
        grouped.append(current)
    return grouped


def _question_terms(question: str) -> tuple[set[str], set[tuple[str, str]]]:
    tokens = [w.text for w in words(question)]
    unigrams = {t for t in tokens if t not in STOPWORDS}
    bigrams = {(a, b) for a, b in zip(tokens, tokens[1:], strict=False)
               if a not in STOPWORDS or b not in STOPWORDS}
    return unigrams, bigrams


@dataclass(frozen=True)
class Candidate:
    sentence: int
    first: int  # word positions in the sentence, inclusive
    last: int
    overlap: int
    window: float


def _window_score(sentence: list[Word], chosen: set[str], weight: Mapping[str, float]) -> float:
    """Step 4: the best sum of ``IC`` over a window of ``len(chosen)`` words."""
    values = [weight[w.text] if w.text in chosen else 0.0 for w in sentence]
    size = min(len(chosen), len(values))
    if size == 0:
        return 0.0
    total = best = sum(values[:size])
    for k in range(size, len(values)):
        total += values[k] - values[k - size]
        best = max(best, total)
    return round(best, 9)  # equal windows compare equal, whatever the order of the additions


def candidates(passage: str, question: str, max_span_words: int = MAX_SPAN_WORDS) -> list[Candidate]:
    """Every candidate with the highest overlap, with its window score (steps 2 to 4)."""
    if max_span_words < 1:
        raise ValueError(f"max_span_words must be at least 1, got {max_span_words}")
    grouped = sentences(passage)
    unigrams, bigrams = _question_terms(question)
    counts = Counter(w.text for sentence in grouped for w in sentence)
    weight = {text: math.log(1.0 + 1.0 / count) for text, count in counts.items()}
    spans = []  # (sentence index, first, last, overlap)
    for index, sentence in enumerate(grouped):
        texts = [w.text for w in sentence]
        # Where each question term occurs in the sentence: (term, first position, last position).
        found = [(t, k, k) for k, t in enumerate(texts) if t in unigrams]
        found += [(pair, k, k + 1) for k, pair in enumerate(zip(texts, texts[1:], strict=False)) if pair in bigrams]
        for first, text in enumerate(texts):
            if text in STOPWORDS:
                continue
            for last in range(first, min(first + max_span_words, len(texts))):
                if texts[last] in STOPWORDS:
                    continue
                overlap = len({term for term, a, b in found if b < first or a > last})
                spans.append((index, first, last, overlap))
    if not spans:
        return []
    top = max(span[3] for span in spans)
    out = []
    for index, first, last, overlap in spans:
        if overlap != top:
            continue
        sentence = grouped[index]
        chosen = unigrams | {w.text for w in sentence[first:last + 1]}
        out.append(Candidate(index, first, last, overlap, _window_score(sentence, chosen, weight)))
    return out


def sliding_window_answer(passage: str, question: str, max_span_words: int = MAX_SPAN_WORDS) -> dict:
    """The baseline's answer: ``{"answer", "start", "overlap", "window"}`` (``answer``
    is the passage's text, ``start`` its character offset). A passage without a content
    word has no candidate: the answer is empty."""
    found = candidates(passage, question, max_span_words)
    if not found:
        return {"answer": "", "start": 0, "overlap": 0, "window": 0.0}
    best = min(found, key=lambda c: (-c.overlap, -c.window, c.last - c.first, c.sentence, c.first))
    sentence = sentences(passage)[best.sentence]
    start, end = sentence[best.first].start, sentence[best.last].end
    return {"answer": passage[start:end], "start": start, "overlap": best.overlap, "window": best.window}


def sliding_window_scores(rows: Iterable[Mapping], max_span_words: int = MAX_SPAN_WORDS) -> dict:
    """The baseline on ``ml`` QA rows (``{"inputs": {"passage", "question"}, "answer":
    {"text"}}``, the gold answer a text or a list of texts): its answers and, per
    example, SQuAD exact match and F1 (``ml.metrics``), the same numbers a model's
    evaluation gives. Returns {"answers", "exact_match", "f1"} (lists, in row order)."""
    answers, exact, f1 = [], [], []
    for row in rows:
        inputs = row["inputs"]
        answer = sliding_window_answer(inputs["passage"], inputs["question"], max_span_words)["answer"]
        gold = row["answer"]["text"]
        answers.append(answer)
        exact.append(metrics.exact_match(answer, gold))
        f1.append(round(metrics.f1(answer, gold), 6))
    return {"answers": answers, "exact_match": exact, "f1": f1}


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
