"""bench/qa_training.py: it measures the recipe ``make run`` trains its QA target with,
on the held-out articles of the reference-line bench, and its committed result says
"clears the line" only where the interval lies above the line; a small run on a
SQuAD-shaped file writes what the report reads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from leaderboard import demo
from tests.leaderboard.test_real_targets import write_squad

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "bench") not in sys.path:  # the scripts import ``benchlib`` as bench/ does
    sys.path.append(str(ROOT / "bench"))

import qa_training  # noqa: E402

COMMITTED = ROOT / "bench" / "results" / "qa-training.json"


def test_the_bench_measures_the_recipe_make_run_trains_with():
    assert qa_training.RECIPE == demo.QA_TRAINING


def test_the_committed_curve_is_read_as_the_platform_reads_it():
    document = json.loads(COMMITTED.read_text())
    reference = json.loads((ROOT / "bench" / "results" / "qa-reference.json").read_text())
    assert document["recipe"] == demo.QA_TRAINING
    assert document["data"]["test_questions"] == reference["results"]["held-out articles"]["3"]["questions"]
    line = document["reference"]["f1"]
    # the same questions, the same baseline: the reference bench's number for the platform's span bound
    bound = str(reference["max_span_words"])
    assert line == pytest.approx(reference["results"]["held-out articles"][bound]["first_answer"]["f1"])
    marks = document["marks"]
    assert [m["minutes"] for m in marks] == sorted(m["minutes"] for m in marks)
    assert [m["steps"] for m in marks] == sorted(m["steps"] for m in marks)
    for mark in marks:
        low, high = mark["f1_interval"]
        assert low <= mark["f1"] <= high
        assert mark["clears_reference"] is (low > line)
        assert mark["minus_reference"]["difference"] == pytest.approx(mark["f1"] - line)


@pytest.mark.slow
def test_a_small_run_writes_each_mark_against_the_line(tmp_path):
    write_squad(tmp_path, articles=16)  # 10 held out, 3 for dev, 3 to train on
    out = tmp_path / "curve.json"
    env = {**os.environ, "DYNABENCH_DATA_DIR": str(tmp_path), "DYNABENCH_TORCH_THREADS": "1"}
    done = subprocess.run([sys.executable, "bench/qa_training.py", "--minutes", "0.005,0.01", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["data"]["test_questions"] == 40 and document["data"]["dev_questions"] == 12
    assert document["data"]["train_questions"] == 12
    assert [m["minutes"] for m in document["marks"]] == [0.005, 0.01]
    assert document["training"]["stopped_by_time_budget"] is True
    assert all(m["steps"] >= 1 for m in document["marks"])
    assert 0 <= document["reference"]["f1"] <= 1
    assert "| minutes | steps | F1 |" in done.stdout
    work = Path(done.stderr.split("removed the models under ")[-1].split()[0])
    assert work.parent == ROOT / "var" / "bench" and not work.exists()  # its models are removed after scoring


def test_make_runs_budget_is_the_first_measured_mark_that_clears_the_line(settings):
    """DYNABENCH_QA_TRAINING_MINUTES defaults to the shortest budget whose model's
    interval lies above the sliding-window line in the committed curve: a shorter one
    would make a target promotion refuses, and a new curve that moves the mark fails here."""
    marks = json.loads(COMMITTED.read_text())["marks"]
    clearing = [mark["minutes"] for mark in marks if mark["clears_reference"]]
    assert clearing, "no measured budget makes a QA target the promotion rule accepts"
    assert settings.DYNABENCH_QA_TRAINING_MINUTES == min(clearing)
