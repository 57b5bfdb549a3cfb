"""The replay's data plans (replay.data) and its report (replay.report).

The fake data directories are written here, in tmp_path, with made-up rows in
the real files' formats. Only the last test reads the real data sets, from
DYNABENCH_DATA_DIR, and it skips when they are absent.
"""

import csv
import json
import math
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from leaderboard.sampling import group_keys
from leaderboard.static_data import default_data_dir
from replay.chart import svg_chart
from replay.data import (
    FAST_EVAL_LIMIT,
    FAST_LIMIT,
    ReplayDataError,
    build_plan,
    caps_for,
    plan_summary,
    required_files,
)
from replay.report import markdown_tables, metric_matrix
from replay.results import write_outputs

SVG = "{http://www.w3.org/2000/svg}"
NLI_LETTERS = "enc"


# --- writing fake data sets ---------------------------------------------------


def write_jsonl(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def make_nli_dir(base: Path, *, premises: int = 40) -> Path:
    """MNLI: three hypotheses per premise; SNLI: one; ANLI R1-R3: two per context."""
    words = ("entailment", "neutral", "contradiction")
    write_jsonl(base / "nli/mnli/dev.jsonl", [
        {"premise": f"The museum on street {p} opens at nine.", "hypothesis": f"Claim {p}-{k}.",
         "label": words[k]}
        for p in range(premises) for k in range(3)
    ])
    write_jsonl(base / "nli/snli/dev.jsonl", [
        {"premise": f"A dog number {p} runs on the beach.", "hypothesis": f"An animal {p} moves.",
         "label": words[p % 3]}
        for p in range(premises)
    ])
    for r in (1, 2, 3):
        for part, count in (("dev", 200), ("test", 30)):
            write_jsonl(base / f"anli/R{r}/{part}.jsonl", [
                {"uid": f"r{r}-{part}-{i}", "context": f"Round {r} {part} passage {i // 2}.",
                 "hypothesis": f"Hypothesis {part} {i}.", "label": NLI_LETTERS[i % 3],
                 "model_label": NLI_LETTERS[(i + 1) % 3], "emturk": False, "genre": "wiki",
                 "reason": "", "tag": ""}
                for i in range(count)
            ])
    return base


DYNAHATE_HEADER = ["acl.id", "text", "label", "type", "target", "level", "split", "round",
                   "acl.id.matched"]
BUILD_HEADER = ["entry_id", "text", "type", "target", "round.base", "round.set", "set", "split",
                "label_gold", "matched_text", "matched_id"]
EMOJICHECK_HEADER = ["case_id", "templ_id", "test_group_id", "text", "target", "functionality",
                     "set", "label_gold", "unrealistic_flags", "included_in_test_suite"]
HATECHECK_HEADER = ["", "functionality", "case_id", "test_case", "label_gold", "target_ident",
                    "direction", "focus_words", "focus_lemma", "ref_case_id", "ref_templ_id",
                    "templ_id", "case_templ"]


def dynahate_rows(split: str, per_round: int) -> list[list]:
    """Per round: 'a' entries, every other one with its contrastive 'b' perturbation."""
    rows = []
    for r in (1, 2, 3, 4):
        for i in range(per_round):
            uid = f"acl-{split}-{r}-{i}"
            label = "hate" if i % 3 else "nothate"  # 2:1 hateful
            rows.append([uid, f"statement {split} {r} {i}", label, "notgiven", "notgiven",
                         "original", split, str(r) if r == 1 else f"{r}a", ""])
            if r > 1 and i % 2 == 0:
                rows.append([f"{uid}-b", f"perturbed {split} {r} {i}",
                             "nothate" if label == "hate" else "hate", "notgiven", "notgiven",
                             "perturbation", split, f"{r}b", uid])
    return rows


def make_hate_dir(base: Path, *, davidson: int = 60) -> Path:
    write_csv(base / "davidson/labeled_data.csv",
              ["", "count", "hate_speech", "offensive_language", "neither", "class", "tweet"],
              [[i, 3, int(i % 3 == 0) * 3, int(i % 3 == 1) * 3, int(i % 3 == 2) * 3, i % 3,
                f"tweet {i} &amp; more"] for i in range(davidson)])
    write_csv(base / "dynahate/db_dev.csv", DYNAHATE_HEADER, dynahate_rows("dev", 40))
    write_csv(base / "dynahate/db_test.csv", DYNAHATE_HEADER, dynahate_rows("test", 12))
    for split, file_split, count in (("train", "train", 30), ("validation", "dev", 6),
                                     ("test", "test", 6)):
        write_csv(base / f"hatemoji/HatemojiBuild/{split}.csv", BUILD_HEADER, [
            [f"{split}-{r}-{i}", f"emoji text {split} {r} {i} \U0001F52A", "none", "[]", r,
             f"{r}a", "original", file_split, int(i % 2 == 0), "", ""]
            for r in (5, 6, 7) for i in range(count)
        ])
    functionalities = ("verb_swap", "emoji_swap", "positive_control")
    write_csv(base / "hatemoji/HatemojiCheck/test.csv", EMOJICHECK_HEADER, [
        [i, i, i, f"check {i} \U0001F44F", "women", functionalities[i % 3], "orig",
         int(i % 3 != 2), 0, 1]
        for i in range(30)
    ])
    write_csv(base / "hatecheck/test_suite_cases.csv", HATECHECK_HEADER, [
        [i, ("derog_neg_emote_h", "slur_h", "counter_quote_nh")[i % 3], i + 1, f"case {i}",
         "non-hateful" if i % 3 == 2 else "hateful", "women", "general", "", "", "", "", i, ""]
        for i in range(30)
    ])
    return base


@pytest.fixture
def nli_dir(tmp_path):
    return make_nli_dir(tmp_path / "nli-data")


@pytest.fixture
def hate_dir(tmp_path):
    return make_hate_dir(tmp_path / "hate-data")


def uids(records) -> list[str]:
    return [r.external_uid for r in records]


# --- plans --------------------------------------------------------------------


def test_nli_plan_rounds_and_sources(nli_dir):
    plan = build_plan("nli", nli_dir, mode="full")
    assert [(r.number, r.name) for r in plan.rounds] == [
        (0, "static (MNLI+SNLI)"), (1, "ANLI R1"), (2, "ANLI R2"), (3, "ANLI R3")]
    assert plan.suites == []
    assert plan.rounds[0].source_files == ["nli/mnli/dev.jsonl", "nli/snli/dev.jsonl"]
    assert plan.rounds[2].source_files == ["anli/R2/dev.jsonl", "anli/R2/test.jsonl"]
    static = plan.rounds[0]
    assert len(static.train) + len(static.dev) + len(static.test) + len(plan.control_pool) == 40 * 3 + 40
    for data in plan.rounds[1:]:
        # ANLI dev is the training data (with a held-out dev); ANLI test is the test split.
        assert len(data.train) + len(data.dev) == 200
        assert 0 < len(data.dev) < len(data.train)
        assert sorted(uids(data.test)) == sorted(f"r{data.number}-test-{i}" for i in range(30))
        assert all(r.round == data.number for r in data.train + data.dev + data.test)
        assert {r.label for r in data.train} <= {"entailment", "neutral", "contradiction"}
    assert all(r.split == split for data in plan.rounds for split, records in data.splits.items()
               for r in records)


def test_hate_plan_rounds_suites_and_splits(hate_dir):
    plan = build_plan("hate", hate_dir, mode="full")
    assert [r.name for r in plan.rounds] == [
        "static (Davidson)", "DynaHate R1", "DynaHate R2", "DynaHate R3", "DynaHate R4",
        "HatemojiBuild R5", "HatemojiBuild R6", "HatemojiBuild R7"]
    assert [r.number for r in plan.rounds] == list(range(8))
    davidson = plan.rounds[0]
    assert len(davidson.train) + len(davidson.dev) + len(davidson.test) + len(plan.control_pool) == 60
    # The control's pool comes out of round 0's training split, at most half of it.
    assert 0 < len(plan.control_pool) <= len(davidson.train)
    assert {r.label for r in davidson.train + davidson.dev + davidson.test} == {
        "hateful", "not-hateful"}
    for data in plan.rounds[1:5]:
        # db_dev rows of the round train (10% held out as dev); db_test rows test.
        everything = data.train + data.dev
        assert all(u.startswith(f"acl-dev-{data.number}-") for u in uids(everything))
        assert len(everything) == (40 if data.number == 1 else 60)
        assert all(u.startswith(f"acl-test-{data.number}-") for u in uids(data.test))
        assert all(r.round == data.number for r in everything + data.test)
    for data in plan.rounds[5:]:
        r = data.number
        assert sorted(uids(data.train)) == sorted(f"hatemoji-build-train-{r}-{i}" for i in range(30))
        assert sorted(uids(data.dev)) == sorted(f"hatemoji-build-validation-{r}-{i}" for i in range(6))
        assert sorted(uids(data.test)) == sorted(f"hatemoji-build-test-{r}-{i}" for i in range(6))
    hatecheck, hatemojicheck = plan.suites
    assert (hatecheck.name, hatecheck.from_round, len(hatecheck.records)) == ("HateCheck", 0, 30)
    assert (hatemojicheck.name, hatemojicheck.from_round) == ("HatemojiCheck", 5)
    assert {k: len(v) for k, v in hatecheck.by_functionality.items()} == {
        "counter_quote_nh": 10, "derog_neg_emote_h": 10, "slur_h": 10}
    assert set(hatemojicheck.by_functionality) == {"verb_swap", "emoji_swap", "positive_control"}


def split_uids(plan) -> list[dict[str, list[str]]]:
    return [{split: uids(records) for split, records in data.splits.items()} for data in plan.rounds]


@pytest.mark.parametrize("task", ["nli", "hate"])
def test_splits_are_deterministic_and_disjoint(task, nli_dir, hate_dir):
    base = nli_dir if task == "nli" else hate_dir
    first = build_plan(task, base, mode="full")
    assert split_uids(first) == split_uids(build_plan(task, base, mode="full"))
    for data in first.rounds:
        seen: set[str] = set()
        for split, records in data.splits.items():
            assert seen.isdisjoint(uids(records)), (data.name, split)
            seen.update(uids(records))
        # A premise (NLI) or a contrastive pair (DynaHate) never straddles two splits.
        everything = [(split, r) for split, records in data.splits.items() for r in records]
        groups: dict[str, str] = {}
        for (split, _), key in zip(everything, group_keys([r for _, r in everything]), strict=True):
            assert groups.setdefault(key, split) == split, (data.name, key)
    other_seed = build_plan(task, base, mode="full", seed=1)
    assert split_uids(other_seed)[0] != split_uids(first)[0]
    assert sorted(sum(split_uids(other_seed)[0].values(), uids(other_seed.control_pool))) == sorted(
        sum(split_uids(first)[0].values(), uids(first.control_pool)))


def test_static_split_is_roughly_80_10_10(tmp_path):
    plan = build_plan("hate", make_hate_dir(tmp_path, davidson=1000), mode="full")
    static = plan.rounds[0]
    shares = [len(records) / 1000 for records in (static.train + plan.control_pool, static.dev, static.test)]
    assert 0.75 < shares[0] < 0.85 and 0.06 < shares[1] < 0.14 and 0.06 < shares[2] < 0.14


def test_contrastive_pairs_stay_together(hate_dir):
    plan = build_plan("hate", hate_dir, mode="full")
    for data in plan.rounds[2:5]:
        where = {r.external_uid: split for split, records in data.splits.items() for r in records}
        pairs = [u for u in where if u.endswith("-b")]
        assert pairs
        assert all(where[u] == where[u[:-2]] for u in pairs)


def test_limit_caps_every_list_deterministically_and_keeps_label_balance(hate_dir):
    full = build_plan("hate", hate_dir, mode="full")
    capped = build_plan("hate", hate_dir, mode="full", limit=9)
    assert capped.caps == {"train": 9, "dev": 9, "test": 9, "suite": 9}
    assert split_uids(capped) == split_uids(build_plan("hate", hate_dir, mode="fast", limit=9))
    for small, big in zip(capped.rounds, full.rounds, strict=True):
        for split in ("train", "dev", "test"):
            kept, everything = small.splits[split], big.splits[split]
            assert len(kept) == min(9, len(everything))
            assert set(uids(kept)) <= set(uids(everything))
            assert uids(kept) == [u for u in uids(everything) if u in set(uids(kept))]  # file order
            if len(everything) > 9:
                share = Counter(r.label for r in everything)
                for label, count in Counter(r.label for r in kept).items():
                    assert abs(count - 9 * share[label] / len(everything)) <= 1
    for suite in capped.suites:
        assert len(suite.records) == 9
        # Stratified by functionality: each of the three keeps three.
        assert sorted(len(v) for v in suite.by_functionality.values()) == [3, 3, 3]


def test_fast_mode_defaults_and_full_mode(tmp_path):
    assert caps_for("fast", None) == {"train": FAST_LIMIT, "dev": FAST_EVAL_LIMIT,
                                      "test": FAST_EVAL_LIMIT, "suite": FAST_EVAL_LIMIT}
    assert caps_for("full", None) == {"train": None, "dev": None, "test": None, "suite": None}
    assert caps_for("full", 50)["train"] == 50
    base = make_hate_dir(tmp_path, davidson=1200)
    fast = build_plan("hate", base)
    full = build_plan("hate", base, mode="full")
    assert len(full.rounds[0].train) > FAST_LIMIT and len(fast.rounds[0].train) == FAST_LIMIT
    assert len(full.rounds[0].test) > 100 and len(fast.rounds[0].test) == len(full.rounds[0].test)
    assert split_uids(fast)[1:] == split_uids(full)[1:]  # the small rounds are under the caps


@pytest.mark.parametrize("task, mode, limit", [("qa", "fast", None), ("nli", "quick", None),
                                               ("nli", "fast", 0), ("nli", "fast", True)])
def test_bad_arguments(task, mode, limit, nli_dir):
    with pytest.raises(ValueError):
        build_plan(task, nli_dir, mode=mode, limit=limit)


def test_missing_files_are_named(nli_dir, hate_dir, tmp_path):
    (nli_dir / "anli/R2/test.jsonl").unlink()
    (nli_dir / "nli/snli/dev.jsonl").unlink()
    with pytest.raises(ReplayDataError) as caught:
        build_plan("nli", nli_dir)
    assert caught.value.missing == ["nli/snli/dev.jsonl", "anli/R2/test.jsonl"]
    assert "nli/snli/dev.jsonl" in str(caught.value) and "anli/R2/test.jsonl" in str(caught.value)

    (hate_dir / "hatemoji/HatemojiCheck/test.csv").unlink()
    with pytest.raises(ReplayDataError, match="hatemoji/HatemojiCheck/test.csv"):
        build_plan("hate", hate_dir)

    with pytest.raises(ReplayDataError, match="does not exist") as caught:
        build_plan("hate", tmp_path / "nowhere")
    assert caught.value.missing == required_files("hate")


def test_bad_rows_are_counted_not_fatal(nli_dir, hate_dir):
    dev = nli_dir / "anli/R1/dev.jsonl"
    dev.write_text(dev.read_text() + "{not json\n[1, 2]\n", encoding="utf-8")
    mnli = nli_dir / "nli/mnli/dev.jsonl"
    line = json.dumps({"premise": "P.", "hypothesis": "H.", "label": "-"})
    mnli.write_text(mnli.read_text() + line + "\n", encoding="utf-8")
    snli = nli_dir / "nli/snli/dev.jsonl"
    first_line = snli.read_text().splitlines()[0]
    snli.write_text(snli.read_text() + first_line + "\n", encoding="utf-8")  # an exact duplicate
    plan = build_plan("nli", nli_dir, mode="full")
    assert plan.skipped_rows == {"anli/R1/dev.jsonl": 2, "nli/mnli/dev.jsonl": 1}
    assert plan.duplicate_rows == {"nli/snli/dev.jsonl": 1}
    assert plan.row_errors["anli/R1/dev.jsonl"][0].startswith("line 201: Not valid JSON")
    assert "unknown label '-'" in plan.row_errors["nli/mnli/dev.jsonl"][0]
    assert len(plan.rounds[1].train) + len(plan.rounds[1].dev) == 200

    with open(hate_dir / "dynahate/db_dev.csv", "a", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["acl-x1", "text", "hate", "", "", "", "dev", "round two", ""])  # bad round
        writer.writerow(["acl-x2", "text", "hate", "", "", "", "dev", "9", ""])  # not replayed
        writer.writerow(["acl-x3", "text", "hate", "", "", "", "dev", "1", "", "extra"])  # too long
    with open(hate_dir / "davidson/labeled_data.csv", "a", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerow(["", 3, 0, 0, 3, 2, "no index"])
    plan = build_plan("hate", hate_dir, mode="full")
    assert plan.skipped_rows == {"dynahate/db_dev.csv": 3, "davidson/labeled_data.csv": 1}
    assert plan_summary(plan)["skipped_rows"] == plan.skipped_rows


def test_unreadable_file_is_a_replay_data_error(hate_dir):
    write_csv(hate_dir / "dynahate/db_test.csv", ["acl.id", "text"], [["a", "b"]])
    with pytest.raises(ReplayDataError, match="dynahate/db_test.csv.*missing column"):
        build_plan("hate", hate_dir)


def test_a_round_without_test_rows_is_an_error(hate_dir):
    rows = [r for r in dynahate_rows("test", 12) if not r[7].startswith("3")]
    write_csv(hate_dir / "dynahate/db_test.csv", DYNAHATE_HEADER, rows)
    with pytest.raises(ReplayDataError, match="DynaHate R3 has no usable test rows"):
        build_plan("hate", hate_dir)


def test_plan_summary_counts(hate_dir):
    plan = build_plan("hate", hate_dir, mode="full", limit=20)
    summary = plan_summary(plan)
    json.dumps(summary)
    assert summary["task"] == "hate" and summary["labels"] == ["hateful", "not-hateful"]
    assert [r["name"] for r in summary["rounds"]] == [r.name for r in plan.rounds]
    r5 = summary["rounds"][5]
    assert r5["splits"]["train"] == {"count": 20, "labels": {"hateful": 10, "not-hateful": 10}}
    assert r5["splits"]["test"] == {"count": 6, "labels": {"hateful": 3, "not-hateful": 3}}
    assert r5["source_files"] == ["hatemoji/HatemojiBuild/train.csv",
                                  "hatemoji/HatemojiBuild/validation.csv",
                                  "hatemoji/HatemojiBuild/test.csv"]
    suite = summary["suites"][0]
    assert suite["name"] == "HateCheck" and suite["count"] == 20
    assert sum(suite["functionalities"].values()) == 20


# --- report -------------------------------------------------------------------


def stat(accuracy, n=200, width=0.03):
    return {"accuracy": accuracy, "ci_low": accuracy - width, "ci_high": accuracy + width,
            "num_examples": n, "by_seed": [accuracy]}


def hand_report(first_name="static (Davidson)") -> dict:
    """A report in the schema summary.build_report writes, with round numbers to read back."""
    names = [first_name, "DynaHate R1", "HatemojiBuild R5"]
    accuracy = [[0.912, 0.55, 0.48], [0.887, 0.701, 0.52], [0.9, 0.72, 0.6649]]
    rounds = []
    for i, number in enumerate((0, 1, 5)):
        functional = {"HateCheck": {**stat(0.5 + i / 10, 30),
                                    "by_functionality": {"slur_h": stat(0.4, 10)}}}
        if number >= 5:
            functional["HatemojiCheck"] = {**stat(0.333, 30), "by_functionality": {}}
        rate = 100 * i / 400
        rounds.append({
            "number": number, "name": names[i], "model": f"hate-m{i}",
            "error_rate_at_collection": rate if i else None,
            "collection": None if i == 0 else {"submitted": 400, "fooled": 100 * i, "model_error_rate": rate,
                                               "ci_low": rate - 0.04, "ci_high": rate + 0.04,
                                               "target": f"hate-m{i - 1}"},
            "train_seconds": 12.5,
            "test": {name: stat(accuracy[i][j]) for j, name in enumerate(names)},
            "functional": functional,
        })
        if i:
            rounds[-1]["gain_over_previous"] = {"test_set": names[i], "previous_model": f"hate-m{i - 1}",
                                                "difference": 0.151, "ci_low": 0.1, "ci_high": 0.2,
                                                "p_value": 0.0009}
    references = {name: {"num_examples": 200, "chance": 0.5, "constant": {"hateful": 0.6, "not-hateful": 0.4},
                         "majority": {"label": "hateful", "accuracy": 0.6}} for name in names}
    references["HateCheck"] = {**references[names[1]], "by_functionality": {
        "slur_h": {"constant": {"hateful": 1.0, "not-hateful": 0.0}}}}
    return {"task": "hate", "mode": "fast", "strategy": "cumulative", "control": None, "seeds": [0],
            "started_at": "2025-01-01T12:00:00+00:00", "seconds": 61.25,
            "data": {"labels": ["hateful", "not-hateful"],
                     "leakage": {"rules": {"context": "premise", "text": "text", "pair": "pair"},
                                 "removed": {"DynaHate R1": {"train": {"context": 0, "text": 7}},
                                             "DynaHate R2": {"dev": {"context": 0, "text": 0, "pair": 4}}},
                                 "pairs": {"DynaHate R2": {"training": 31, "test": 9, "removed": 4}}}},
            "references": references, "rounds": rounds, "controls": {}}


def test_markdown_tables_hold_the_numbers():
    text = markdown_tables(hand_report())
    assert "# Replay of real adversarial rounds: hate (fast mode)" in text
    assert "strategy `cumulative`; static control: no; 1 seed (0)" in text
    assert "| DynaHate R1 | train | 0 | 7 | 0 |" in text  # leakage
    assert "| DynaHate R2 | dev | 0 | 0 | 4 |" in text
    assert "| DynaHate R2 | 31 | 9 | 4 |" in text  # contrastive pairs
    without = hand_report()
    del without["data"]["leakage"]["pairs"]
    assert "Contrastive pairs (" not in markdown_tables(without)
    assert "| DynaHate R1 | 200 | 50.0% | 60.0% (hateful) | 60.0% | 40.0% |" in text  # reference lines
    assert "| 1 | DynaHate R1 | hate-m0 | 400 | 100 | 25.0% (21.0\u201329.0) |" in text
    assert "| 5 | HatemojiBuild R5 | hate-m1 | 400 | 200 | 50.0% (46.0\u201354.0) |" in text
    assert "| Model | static (Davidson) | DynaHate R1 | HatemojiBuild R5 |" in text
    assert "| hate-m0 | 91.2% (88.2\u201394.2) | 55.0% (52.0\u201358.0) | 48.0% (45.0\u201351.0) |" in text
    assert "| *majority answer* | 60.0% | 60.0% | 60.0% |" in text
    assert ("| 1 | DynaHate R1 | hate-m0 | 55.0% (52.0\u201358.0) | hate-m1 | 70.1% (67.1\u201373.1) "
            "| +15.1 pts (+10.0, +20.0), p \u2264 0.002 |") in text
    assert "| hate-m0 | 50.0% (47.0\u201353.0) | \u2014 |" in text
    assert "| hate-m2 | 70.0% (67.0\u201373.0) | 33.3% (30.3\u201336.3) |" in text
    assert "control" not in text.split("## Functional tests")[1]


def test_markdown_for_nli_and_awkward_values():
    report = hand_report("static | <b>MNLI</b>")
    report["task"] = "nli"
    for entry in report["rounds"]:
        entry.pop("functional")
    report["rounds"][1]["test"]["DynaHate R1"]["accuracy"] = float("nan")
    report["rounds"][2]["collection"]["model_error_rate"] = None  # computed from the counts
    report["rounds"][2]["gain_over_previous"]["p_value"] = 0.25
    text = markdown_tables(report)
    assert "Functional" not in text
    assert "static \\| &lt;b&gt;MNLI&lt;/b&gt;" in text and "<b>" not in text
    assert "| hate-m1 | 88.7% (85.7\u201391.7) | \u2014 | 52.0% (49.0\u201355.0) |" in text
    assert "| 200 | 50.0% (46.0\u201354.0) |" in text
    assert "+15.1 pts (+10.0, +20.0), p 0.250 |" in text
    models, columns, cells = metric_matrix(report)
    assert models == ["hate-m0", "hate-m1", "hate-m2"] and len(columns) == 3
    assert cells[1][1] is None


def test_markdown_of_the_static_control():
    report = hand_report()
    report["control"] = "static"
    crounds = [dict(report["rounds"][0], control_for="hate-m0")]
    for i in (1, 2):
        entry = report["rounds"][i]
        crounds.append({"number": entry["number"], "name": entry["name"], "model": f"hate-control-c{i}",
                        "control_for": entry["model"], "training_rows": 780,
                        "test": {k: stat(v["accuracy"] - 0.1) for k, v in entry["test"].items()},
                        "functional": {k: {**stat(v["accuracy"] - 0.2, 30),
                                           "by_functionality": {"slur_h": stat(0.2, 10)}}
                                       for k, v in entry["functional"].items()}})
        entry["vs_control"] = {"DynaHate R1": {"difference": 0.1, "ci_low": 0.05, "ci_high": 0.15,
                                               "p_value": 0.001},
                               "HateCheck": {"difference": -0.02, "ci_low": -0.08, "ci_high": 0.04,
                                             "p_value": 0.5}}
    report["controls"] = {"static": {"description": "as many static examples", "rounds": crounds}}
    text = markdown_tables(report)
    assert "static control: yes" in text and "## The static control" in text
    assert "| hate-control-c1 | 78.7% (75.7\u201381.7) | 60.1% (57.1\u201363.1) | 42.0% (39.0\u201345.0) |" in text
    adversarial = text.split("## Adversarial minus static control")[1]
    assert "| hate-m1 | \u2014 | +10.0 pts (+5.0, +15.0) | \u2014 | \u22122.0 pts (\u22128.0, +4.0) | \u2014 |" \
        in adversarial
    assert "HateCheck per functionality: hate-m2 against hate-control-c2" in text
    assert "| slur_h | 10 | 100.0% | 0.0% | 40.0% (37.0\u201343.0) | 20.0% (17.0\u201323.0) |" in text


def test_svg_is_xml_with_title_desc_and_escaped_names():
    report = hand_report()
    name = 'DynaHate <script>alert("x")</script> & R1'
    report["rounds"][1]["name"] = name
    for entry in report["rounds"]:
        entry["test"] = {name if k == "DynaHate R1" else k: v for k, v in entry["test"].items()}
    svg = svg_chart(report)
    assert "<script" not in svg and "&lt;script&gt;" in svg
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    assert not list(root.iter(f"{SVG}script")) and not list(root.iter(f"{SVG}foreignObject"))
    assert "http" not in svg.replace("http://www.w3.org/2000/svg", "")  # nothing external
    title, desc = root.find(f"{SVG}title"), root.find(f"{SVG}desc")
    assert "hate (fast mode)" in title.text
    assert 'R1 (DynaHate <script>alert("x")</script> & R1) 25.0% against hate-m0' in desc.text
    assert "hate-m2: R0 90.0%, R1 72.0%, R5 66.5%" in desc.text
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    assert {"error rate", "accuracy", "test set of round", "model error rate"} <= set(texts)
    assert {"hate-m0", "hate-m1", "hate-m2", "majority answer"} <= set(texts)
    majority = ["".join(t.itertext()) for t in root.iter(f"{SVG}title")]
    assert "majority answer on static (Davidson): 60.0%" in majority
    assert len(list(root.iter(f"{SVG}rect"))) >= 2 + 2  # background, legend, two bars
    assert len(list(root.iter(f"{SVG}polyline"))) == 3


def test_svg_for_an_empty_report():
    root = ET.fromstring(svg_chart({"task": "nli", "mode": "full", "rounds": []}))
    assert "none" in root.find(f"{SVG}desc").text


def test_write_outputs(tmp_path):
    report = hand_report()
    report["seconds"] = math.inf
    paths = write_outputs(report, tmp_path / "out" / "report.json")
    assert paths == {"json": tmp_path / "out/report.json", "markdown": tmp_path / "out/report.md",
                     "svg": tmp_path / "out/report.svg"}
    written = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert written["seconds"] is None and written["rounds"] == report["rounds"]
    assert paths["json"].read_text(encoding="utf-8").startswith('{\n  "task": "hate"')
    assert paths["markdown"].read_text(encoding="utf-8") == markdown_tables(report)
    ET.fromstring(paths["svg"].read_text(encoding="utf-8"))
    with pytest.raises(ValueError):
        write_outputs(report, tmp_path / "report.svg")


# --- the real data sets -------------------------------------------------------


def test_fast_plans_from_the_real_data():
    base = default_data_dir()
    if base is None:
        pytest.skip("the real data sets are absent: DYNABENCH_DATA_DIR is unset or not a directory "
                    "(default var/data, which manage.py fetch_data fills)")
    absent = [name for task in ("nli", "hate") for name in required_files(task)
              if not (base / name).is_file()]
    if absent:
        pytest.skip(f"real data files absent under {base}: {', '.join(absent)}")
    started = time.monotonic()
    nli = build_plan("nli", base)
    hate = build_plan("hate", base)
    assert time.monotonic() - started < 20
    assert [r.number for r in nli.rounds] == [0, 1, 2, 3] and nli.suites == []
    assert [r.number for r in hate.rounds] == list(range(8))
    assert [(s.name, s.from_round) for s in hate.suites] == [("HateCheck", 0), ("HatemojiCheck", 5)]
    for plan in (nli, hate):
        for data in plan.rounds:
            assert len(data.train) == FAST_LIMIT, data.name
            assert 0 < len(data.dev) <= FAST_EVAL_LIMIT and 0 < len(data.test) <= FAST_EVAL_LIMIT
            assert {r.label for r in data.train} == set(plan.labels)
        json.dumps(plan_summary(plan))
    assert all(len(s.records) == FAST_EVAL_LIMIT for s in hate.suites)
    assert len(hate.suites[0].by_functionality) > 20
