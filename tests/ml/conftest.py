"""Fixtures for the ML core tests: tiny models trained once per session.

No Django here.  The models are trained for a handful of steps on short,
hand-written examples; they are only as good as the tests need (the learning test
checks that the loop fits its own small training set).
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402

import ml  # noqa: E402

POSITIVE = [
    "I loved this film",
    "what a wonderful day",
    "great acting and a moving story",
    "a delight from start to finish",
    "brilliant and funny",
    "I really enjoyed it",
    "the best meal I have had in years",
    "warm, witty and beautifully made",
]
NEGATIVE = [
    "I hated this film",
    "what a terrible day",
    "awful acting and a boring story",
    "a chore from start to finish",
    "dull and unfunny",
    "I really disliked it",
    "the worst meal I have had in years",
    "cold, clumsy and badly made",
]

NLI_ROWS = [
    ("A man is playing a guitar on stage.", "A man is performing music.", "entailment"),
    ("A man is playing a guitar on stage.", "The stage is empty.", "contradiction"),
    ("A man is playing a guitar on stage.", "The man is a famous singer.", "neutral"),
    ("Two dogs run through a field.", "Animals are outside.", "entailment"),
    ("Two dogs run through a field.", "The dogs are asleep indoors.", "contradiction"),
    ("Two dogs run through a field.", "The dogs are chasing a ball.", "neutral"),
    ("A woman reads a book in the park.", "Someone is reading.", "entailment"),
    ("A woman reads a book in the park.", "The woman is swimming.", "contradiction"),
    ("A woman reads a book in the park.", "The book is a novel.", "neutral"),
]

QA_ROWS = [
    (
        "The Eiffel Tower is in Paris. It was completed in 1889 by Gustave Eiffel's company.",
        "When was the Eiffel Tower completed?",
        "1889",
    ),
    (
        "Marie Curie won the Nobel Prize in Physics in 1903 and in Chemistry in 1911.",
        "In which year did Curie win the Chemistry prize?",
        "1911",
    ),
    (
        "The Amazon river flows through Brazil, Peru and Colombia before reaching the "
        "Atlantic Ocean.",
        "Which ocean does the Amazon reach?",
        "Atlantic Ocean",
    ),
    (
        "Mount Everest, at 8,849 metres, is the highest mountain above sea level; it lies in "
        "the Himalayas.",
        "Where is Mount Everest?",
        "the Himalayas",
    ),
]

LONG_PASSAGE = (
    " ".join(f"Filler sentence number {i} talks about nothing in particular." for i in range(20))
    + " The secret code is 4711. "
    + " ".join(f"More filler {i} here." for i in range(10))
)


def _sentiment_rows() -> list[dict]:
    rows = [{"inputs": {"statement": t}, "label": "positive"} for t in POSITIVE]
    rows += [{"inputs": {"statement": t}, "label": "negative"} for t in NEGATIVE]
    return rows


def _nli_rows() -> list[dict]:
    return [{"inputs": {"premise": p, "hypothesis": h}, "label": label} for p, h, label in NLI_ROWS]


def _qa_rows() -> list[dict]:
    rows = [
        {"inputs": {"passage": p, "question": q}, "answer": {"text": a, "start": p.index(a)}}
        for p, q, a in QA_ROWS
    ]
    rows.append(
        {
            "inputs": {"passage": LONG_PASSAGE, "question": "What is the secret code?"},
            "answer": {"text": "4711", "start": LONG_PASSAGE.index("4711")},
        }
    )
    return rows


SENTIMENT_SPEC = ml.TaskSpec(
    kind="classification", labels=["negative", "positive"], input_fields=["statement"]
)
NLI_SPEC = ml.TaskSpec(
    kind="classification",
    labels=["entailment", "neutral", "contradiction"],
    input_fields=["premise", "hypothesis"],
)
# 64 tokens forces LONG_PASSAGE into several windows.
QA_SPEC = ml.TaskSpec(kind="extractive_qa", max_tokens=64, field_max_chars={"passage": 4000})


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def sentiment_model(models_dir):
    """Single-text classifier that fits its 16 training sentences."""
    rows = _sentiment_rows()
    return ml.train(
        SENTIMENT_SPEC,
        rows,
        rows,
        models_dir / "sentiment",
        epochs=4,
        batch_size=8,
        lr=2e-4,
        seed=0,
        training_data={"rounds": [0], "source": "tests"},
    )


@pytest.fixture(scope="session")
def sentiment_model_b(models_dir):
    """A second, differently seeded sentiment model (ensemble member)."""
    rows = _sentiment_rows()
    return ml.train(
        SENTIMENT_SPEC, rows, rows, models_dir / "sentiment-b", max_steps=2, batch_size=8, seed=1
    )


@pytest.fixture(scope="session")
def nli_model(models_dir):
    rows = _nli_rows()
    return ml.train(NLI_SPEC, rows, rows, models_dir / "nli", max_steps=2, batch_size=8, seed=0)


@pytest.fixture(scope="session")
def qa_model(models_dir):
    rows = _qa_rows()
    return ml.train(QA_SPEC, rows, rows, models_dir / "qa", epochs=3, batch_size=8, lr=3e-4, seed=0)


@pytest.fixture
def cache():
    """A private model cache per test, so tests do not see each other's models."""
    return ml.ModelCache(max_size=4)


def ref_of(info) -> ml.ModelRef:
    return ml.ModelRef(str(info.path), info.sha256)


# Data and specs as fixtures (test modules cannot import conftest under
# --import-mode=importlib).
@pytest.fixture(scope="session")
def sentiment_spec():
    return SENTIMENT_SPEC


@pytest.fixture(scope="session")
def nli_spec():
    return NLI_SPEC


@pytest.fixture(scope="session")
def qa_spec():
    return QA_SPEC


@pytest.fixture
def sentiment_rows():
    return _sentiment_rows()


@pytest.fixture
def nli_rows():
    return _nli_rows()


@pytest.fixture
def qa_rows():
    return _qa_rows()


@pytest.fixture(scope="session")
def long_passage():
    return LONG_PASSAGE


@pytest.fixture(scope="session")
def sentiment_ref(sentiment_model):
    return ref_of(sentiment_model)


@pytest.fixture(scope="session")
def sentiment_b_ref(sentiment_model_b):
    return ref_of(sentiment_model_b)


@pytest.fixture(scope="session")
def nli_ref(nli_model):
    return ref_of(nli_model)


@pytest.fixture(scope="session")
def qa_ref(qa_model):
    return ref_of(qa_model)
