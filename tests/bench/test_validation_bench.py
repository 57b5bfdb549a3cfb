"""bench/validation.py: its interface (the JSON scripts read), the committed results
and the table in bench/RESULTS.md made from them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "bench" / "results" / "validation.json"
FRONTIER = ROOT / "bench" / "results" / "validation-frontier.json"
RUN_FIELDS = {"policy", "family", "role", "spammers", "seed", "cases", "votes_per_example", "accuracy", "wrong",
              "escalated", "decided", "correct", "escalated_examples", "validations_per_decided"}
if str(ROOT / "bench") not in sys.path:  # the scripts import ``benchlib`` as bench/ does
    sys.path.append(str(ROOT / "bench"))

from bench.benchlib import frontier_report as FR  # noqa: E402
from bench.benchlib import validation_report as VR  # noqa: E402


def bench(*args, env=None):
    return subprocess.run([sys.executable, "bench/validation.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "DEBUG": "true", **(env or {})})


def check_interface(document):
    assert document["runs"], "no runs"
    for run in document["runs"]:
        assert RUN_FIELDS <= set(run), run
        assert run["family"] in ("fixed", "lead", "adaptive")
        assert set(run["spammers"]) == {"always_correct", "random"}
        assert set(run["accuracy"]) == {"value", "ci_low", "ci_high"}
        assert run["accuracy"]["ci_low"] <= run["accuracy"]["value"] <= run["accuracy"]["ci_high"]
        # Every share is over all examples: an escalated one is a cost, never a correct answer.
        cases = run["cases"]
        assert run["accuracy"]["value"] == pytest.approx(run["correct"] / cases)
        assert run["escalated"] == pytest.approx(run["escalated_examples"] / cases)
        assert run["wrong"] == pytest.approx((run["decided"] - run["correct"]) / cases)
        assert run["accuracy"]["value"] + run["wrong"] + run["escalated"] == pytest.approx(1.0)
        assert run["votes_per_example"] >= 1


def test_the_committed_results_keep_the_interface_and_their_targets_are_what_the_runs_give():
    document = json.loads(COMMITTED.read_text())
    check_interface(document)
    assert document["seeds"] >= 3 and len({r["seed"] for r in document["runs"]}) == document["seeds"]
    assert document["data"]["cases"] == 3901
    assert document["targets"] == VR.check_targets(document["runs"], document["setup"]["roles"])


def test_the_committed_run_compares_the_task_default_with_the_simple_rules_the_frontier_names():
    """The default is the task config's; the simple rules beside it are the ones the committed
    frontier names; and on the same streams each rule's figures are the frontier's own."""
    from tasks.config import VALIDATION_DEFAULTS

    document, frontier = json.loads(COMMITTED.read_text()), json.loads(FRONTIER.read_text())
    roles = document["setup"]["roles"]
    assert roles["default"] == f"adaptive {VALIDATION_DEFAULTS['target_confidence']:g}"
    assert document["setup"]["default"]["min_votes"] == VALIDATION_DEFAULTS["min_votes"]
    rivals = FR.simple_rivals(frontier, roles["default"])
    assert {role: p["name"] for role, p in rivals.items()} == {k: v for k, v in roles.items() if k != "default"}
    assert all(p["family"] != "adaptive" for p in rivals.values())
    theirs = {(r["policy"], FR._key(r["spammers"]), r["seed"]): r for r in frontier["runs"]}
    for run in document["runs"]:
        other = theirs[(run["policy"], FR._key(run["spammers"]), run["seed"])]
        assert run["votes_per_example"] == pytest.approx(other["votes_per_example"]), run["policy"]
        assert run["accuracy"]["value"] == pytest.approx(other["accuracy"]["value"]), run["policy"]


def made_up(policy, seed, votes, right, mix=None, escalated=0.0):
    return {"policy": policy, "family": policy.split()[0].split("-")[0], "seed": seed, "cases": 100,
            "spammers": mix or {"always_correct": 0.0, "random": 0.0}, "votes_per_example": votes,
            "accuracy": {"value": right, "ci_low": right - 0.01, "ci_high": right + 0.01},
            "wrong": 1 - right - escalated, "escalated": escalated}


def test_the_targets_and_comparisons_read_every_example_and_every_seed():
    spam = {"always_correct": 0.2, "random": 0.0}
    runs = []
    for seed in (0, 1):
        runs += [made_up("adaptive 0.9", seed, 2.0, 0.99), made_up("fixed-3", seed, 3.0, 0.985 + 0.01 * seed),
                 made_up("fixed-2", seed, 2.05, 0.99 - 0.001 * seed), made_up("adaptive 0.9", seed, 2.1, 0.985, spam)]
    roles = {"default": "adaptive 0.9", "strongest": "fixed-3", "nearest_cost": "fixed-2"}
    met = {(t["against"], t["target"].split(" ")[0]): t["met"] for t in VR.check_targets(runs, roles)}
    assert met[("fixed-3", "at")] and not met[("fixed-2", "at")]  # a third fewer votes than fixed-3 only
    assert met[(None, "with")]
    document = {"runs": runs, "setup": {"roles": roles}}
    fixed3, fixed2 = VR.comparison_sentences(document)
    assert "beats it in every seed at no mix" in fixed3  # seed 1: fixed-3 is more accurate
    assert "neither beats the other in every seed at no spammers" in fixed3
    assert "adaptive 0.9 beats it in every seed at no spammers" in fixed2


def test_the_results_md_table_is_the_committed_results():
    done = bench("--doc", "check")
    assert done.returncode == 0, done.stderr


def test_a_quick_run_on_the_real_annotators(tmp_path):
    data = Path(os.environ.get("DYNABENCH_DATA_DIR", ROOT / "var" / "data"))
    if not (data / "hatecheck" / "all_annotations.csv").is_file():
        pytest.skip("needs hatecheck/all_annotations.csv in the data folder (manage.py fetch_data hatecheck)")
    out = tmp_path / "validation.json"
    done = bench("--quick", "--out", str(out))
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    check_interface(document)
    rules = len(set(document["setup"]["roles"].values()))
    assert document["data"]["cases"] == 300 and len(document["runs"]) == 7 * rules  # 7 spammer mixes
    assert "| no spammers | adaptive 0.9 |" in done.stdout


def test_a_missing_data_file_is_a_clear_error(tmp_path):
    done = bench("--quick", "--out", str(tmp_path / "x.json"), env={"DYNABENCH_DATA_DIR": str(tmp_path)})
    assert done.returncode == 2 and "fetch_data hatecheck" in done.stderr
    assert not (tmp_path / "x.json").exists()


def test_a_missing_frontier_is_a_clear_error(tmp_path):
    data = Path(os.environ.get("DYNABENCH_DATA_DIR", ROOT / "var" / "data"))
    if not (data / "hatecheck" / "all_annotations.csv").is_file():
        pytest.skip("needs hatecheck/all_annotations.csv in the data folder (manage.py fetch_data hatecheck)")
    done = bench("--quick", "--out", str(tmp_path / "x.json"), "--frontier", str(tmp_path / "none.json"))
    assert done.returncode == 2 and "validation_frontier.py" in done.stderr
    off = tmp_path / "frontier.json"
    off.write_text(json.dumps({**json.loads(FRONTIER.read_text()), "runs": []}))
    done = bench("--quick", "--out", str(tmp_path / "x.json"), "--frontier", str(off))
    assert done.returncode == 2 and "no spammer-free run of adaptive" in done.stderr
    assert not (tmp_path / "x.json").exists()
