"""The QA reference line on real data: the sliding-window baseline (``ml.baselines``)
on SQuAD v1.1 dev, beside the trained MiniLM of ``bench/baselines.py``.

    .venv/bin/python bench/qa_reference.py [--out PATH]

Scores the baseline on the whole dev set (10,570 questions) and on the 10 held-out
articles that ``bench/baselines.py`` scores its QA model on (the same seeded article
split, seed 0), against the first gold answer (what the platform stores, and what its
leaderboard scores) and against all of them (SQuAD's official scoring, the paper's and
``baselines.py``'s). The span bound ``MAX_SPAN_WORDS`` is the one the platform uses;
the other bounds are shown for what they do, not to choose one on this data. No
training; about 3 ms a question on one core. Writes bench/results/qa-reference.json.
Reads $DYNABENCH_DATA_DIR/squad/dev-v1.1.json (default var/data, which ``manage.py
fetch_data`` fills) with plain ``json`` (no Django); nothing from the data folder is
copied into the repository.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

from benchlib import RESULTS
from benchlib.baselines_tasks import QA_TEST_ARTICLES
from benchlib.data import Missing, data_dir, rng
from benchlib.results import (
    command_line,
    library_versions,
    log,
    markdown_table,
    pct,
    utc_now,
    write_json,
)

from ml import baselines
from ml import metrics as M

BOUNDS = (1, 2, 3, 4)


@dataclass(frozen=True)
class Question:
    title: str
    passage: str
    question: str
    answers: tuple[str, ...]


def read_squad(path) -> list[Question]:
    if not path.is_file():
        raise Missing(f"{path} not found")
    data = json.loads(path.read_text(encoding="utf-8-sig"))
    return [Question(article["title"], paragraph["context"], qa["question"], tuple(a["text"] for a in qa["answers"]))
            for article in data["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]


def score(records, bound: int) -> dict:
    first = {"exact_match": 0.0, "f1": 0.0}
    every = {"exact_match": 0.0, "f1": 0.0}
    started = time.perf_counter()
    for record in records:
        answer = baselines.sliding_window_answer(record.passage, record.question, bound)["answer"]
        golds = list(record.answers)
        first["exact_match"] += M.exact_match(answer, golds[0])
        first["f1"] += M.f1(answer, golds[0])
        every["exact_match"] += M.exact_match(answer, golds)
        every["f1"] += M.f1(answer, golds)
    seconds = time.perf_counter() - started
    n = len(records)
    return {"questions": n, "first_answer": {k: v / n for k, v in first.items()},
            "all_answers": {k: v / n for k, v in every.items()}, "ms_per_question": round(1000 * seconds / n, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS / "qa-reference.json"))
    args = parser.parse_args(argv)
    records = read_squad(data_dir() / "squad" / "dev-v1.1.json")
    titles = sorted({r.title for r in records})
    rng(0, "qa-articles").shuffle(titles)  # bench/baselines.py's split (seed 0)
    held_out = set(titles[:QA_TEST_ARTICLES])
    sets = {"dev (all)": records, "held-out articles": [r for r in records if r.title in held_out]}
    results = {}
    for name, chosen in sets.items():
        for bound in BOUNDS:
            log(f"{name}: span bound {bound}, {len(chosen)} questions")
            results.setdefault(name, {})[str(bound)] = score(chosen, bound)
    rows = []
    for name, by_bound in results.items():
        for bound, found in by_bound.items():
            rows.append([name, bound + (" (used)" if int(bound) == baselines.MAX_SPAN_WORDS else ""),
                         str(found["questions"]), pct(found["first_answer"]["exact_match"]),
                         pct(found["first_answer"]["f1"]), pct(found["all_answers"]["exact_match"]),
                         pct(found["all_answers"]["f1"]), f"{found['ms_per_question']:.2f}"])
    print(markdown_table(["set", "span bound (words)", "questions", "EM (first answer)", "F1 (first answer)",
                          "EM (all answers)", "F1 (all answers)", "ms/question"], rows))
    document = {"what": "the sliding-window baseline (ml.baselines) on SQuAD v1.1 dev", "when": utc_now(),
                "command": command_line(argv), "versions": library_versions("numpy"),
                "algorithm_version": baselines.VERSION, "max_span_words": baselines.MAX_SPAN_WORDS,
                "held_out_articles": sorted(held_out), "results": results}
    log(f"wrote {write_json(args.out, document)}")


if __name__ == "__main__":
    main()
