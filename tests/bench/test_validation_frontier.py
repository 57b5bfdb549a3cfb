"""bench/validation_frontier.py: the committed frontier keeps its shape, every share is
over all examples, the comparisons and the default in the JSON and in bench/RESULTS.md
are what the runs give, and the comparison rules behave on made-up runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "bench") not in sys.path:  # the scripts import ``benchlib`` and each other as bench/ does
    sys.path.append(str(ROOT / "bench"))

from validation import Sequence_, run_lead  # noqa: E402

from bench.benchlib import frontier_report as FR  # noqa: E402

COMMITTED = ROOT / "bench" / "results" / "validation-frontier.json"


def run(policy, seed, votes, accuracy, mix=None, escalated=0.0):
    return {"policy": policy, "family": policy.split()[0].split("-")[0], "seed": seed,
            "spammers": mix or {"always_correct": 0.0, "random": 0.0}, "votes_per_example": votes,
            "accuracy": {"value": accuracy}, "wrong": 1 - accuracy - escalated, "escalated": escalated}


def test_the_committed_frontier_covers_every_rule_mix_and_seed_over_all_examples():
    document = json.loads(COMMITTED.read_text())
    rules = [p["name"] for p in document["setup"]["policies"]]
    assert {"fixed-1", "fixed-2", "fixed-3", "fixed-4"} <= set(rules)
    assert sum(r.startswith("adaptive") for r in rules) >= 3 and any(r.startswith("lead") for r in rules)
    assert document["seeds"] >= 3 and document["data"]["cases"] == 3901
    assert len(document["runs"]) == len(rules) * len(document["setup"]["spammer_mixes"]) * document["seeds"]
    for r in document["runs"]:
        shares = r["accuracy"]["value"] + r["wrong"] + r["escalated"]
        assert shares == pytest.approx(1.0), r  # every example is in exactly one share
        assert r["accuracy"]["ci_low"] <= r["accuracy"]["value"] <= r["accuracy"]["ci_high"]


def test_the_stored_comparisons_and_default_are_what_the_runs_give():
    document = json.loads(COMMITTED.read_text())
    assert document["comparisons"] == FR.comparisons(document["runs"])
    assert document["default"] == FR.choose_default(document["runs"])
    text = (ROOT / "bench" / "RESULTS.md").read_text()
    assert FR.doc_block(document) in text
    assert FR.default_sentence(document) in text


def test_beating_needs_every_seed():
    runs = [run("fixed-2", 0, 2.0, 0.99), run("fixed-3", 0, 3.0, 0.98),
            run("fixed-2", 1, 2.0, 0.97), run("fixed-3", 1, 3.0, 0.98)]
    per_policy = FR.by_mix(runs)[FR._key(runs[0]["spammers"])]
    assert not FR.beats_in_every_seed(per_policy, "fixed-2", "fixed-3")  # seed 1 disagrees
    assert set(FR.frontier(per_policy)) == {"fixed-2", "fixed-3"}
    runs[2]["accuracy"]["value"] = 0.985
    per_policy = FR.by_mix(runs)[FR._key(runs[0]["spammers"])]
    assert FR.beats_in_every_seed(per_policy, "fixed-2", "fixed-3")
    assert FR.frontier(per_policy) == ["fixed-2"]
    assert not FR.beats(runs[0], runs[0])  # equal on both is no win


def test_the_default_is_the_best_worst_case_then_the_fewest_wrong_of_a_tie():
    clean, spam = {"always_correct": 0.0, "random": 0.0}, {"always_correct": 0.3, "random": 0.0}
    runs = []
    for seed in (0, 1):
        runs += [run("fixed-3", seed, 3.0, 0.99, clean), run("fixed-3", seed, 3.2, 0.98, spam),
                 run("adaptive 0.9", seed, 1.2, 0.985, clean), run("adaptive 0.9", seed, 1.5, 0.975, spam),
                 run("fixed-2", seed, 2.0, 0.989, clean), run("fixed-2", seed, 2.2, 0.90, spam)]
    chosen = FR.choose_default(runs)
    assert "fixed-2" not in chosen["on_every_frontier"]  # fixed-3 beats it with spammers
    assert chosen["highest_worst_accuracy"] == "fixed-3" and chosen["choice"] == "fixed-3"
    runs[-3]["accuracy"]["value"], runs[-3]["wrong"] = 0.985, 0.015  # seed 1: adaptive ties fixed-3
    for r in runs:
        if r["policy"] == "fixed-3":  # fixed-3 sends half its misses to researchers
            r["wrong"] = r["escalated"] = (1 - r["accuracy"]["value"]) / 2
    chosen = FR.choose_default(runs)
    # A tie goes to the fewest wrong decisions at the worst mix (fixed-3: 1%, adaptive: 2%),
    # before the fewest votes (where adaptive would win).
    assert set(chosen["tied"]) == {"fixed-3", "adaptive 0.9"} and chosen["choice"] == "fixed-3"
    for r in runs:
        if r["policy"] == "adaptive 0.9":  # now it escalates what it is unsure of
            r["wrong"], r["escalated"] = 0.005, 1 - r["accuracy"]["value"] - 0.005
    chosen = FR.choose_default(runs)
    assert set(chosen["tied"]) == {"fixed-3", "adaptive 0.9"} and chosen["choice"] == "adaptive 0.9"


def test_lead_rule_decides_on_a_lead_of_two_and_escalates_at_the_cap():
    stream = [Sequence_("a", True, [("x", True), ("y", True)]),
              Sequence_("b", False, [("x", True), ("y", False), ("z", False), ("w", False)]),
              Sequence_("c", True, [("x", True), ("y", False), ("z", True), ("w", False), ("v", True), ("u", True)])]
    out = run_lead(stream, lead=2, cap=5)
    assert (out.decided, out.correct, out.votes_on_decided) == (2, 2, 6)
    assert (out.to_researchers, out.votes_on_researchers) == (1, 5)  # the sixth vote is past the cap


def test_a_quick_run(tmp_path):
    data = Path(os.environ.get("DYNABENCH_DATA_DIR", ROOT / "var" / "data"))
    if not (data / "hatecheck" / "all_annotations.csv").is_file():
        pytest.skip("needs hatecheck/all_annotations.csv in the data folder (manage.py fetch_data hatecheck)")
    out = tmp_path / "frontier.json"
    done = subprocess.run([sys.executable, "bench/validation_frontier.py", "--quick", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "DEBUG": "true"})
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    assert document["data"]["cases"] == 300 and document["seeds"] == 2
    assert "Where the adaptive rule wins" in done.stdout


def test_the_task_configs_default_is_the_rule_the_committed_frontier_picks():
    """VALIDATION_DEFAULTS follows the frontier: the committed run's pick is the default's
    rule, measured with the default's bounds, and a task left to the default decides by it."""
    from tasks.config import VALIDATION_DEFAULTS, validate_task_config

    document = json.loads(COMMITTED.read_text())
    assert VALIDATION_DEFAULTS["policy"] == "adaptive"
    assert document["default"]["choice"] == f"adaptive {VALIDATION_DEFAULTS['target_confidence']:g}"
    assert document["setup"]["task_default"] == document["default"]["choice"]
    assert document["setup"]["adaptive_bounds"] == {"min_votes": VALIDATION_DEFAULTS["min_votes"],
                                                    "max_votes": VALIDATION_DEFAULTS["max_votes"]}
    assert VALIDATION_DEFAULTS["min_votes"] >= 2  # one account never decides alone
    config = validate_task_config("classification", {
        "context_fields": [], "input_fields": [{"name": "text", "label": "Text"}], "model_inputs": ["text"],
        "labels": [{"name": "a"}, {"name": "b"}]})
    assert config.adaptive_validation and config.validation == VALIDATION_DEFAULTS
