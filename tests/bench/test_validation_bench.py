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
RUN_FIELDS = {"policy", "spammers", "seed", "validations_per_decided", "accuracy", "to_researchers"}


def bench(*args, env=None):
    return subprocess.run([sys.executable, "bench/validation.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "DEBUG": "true", **(env or {})})


def check_interface(document):
    assert document["runs"], "no runs"
    for run in document["runs"]:
        assert RUN_FIELDS <= set(run), run
        assert run["policy"] in ("fixed", "adaptive")
        assert set(run["spammers"]) == {"always_correct", "random"}
        assert set(run["accuracy"]) == {"value", "ci_low", "ci_high"}
        assert run["accuracy"]["ci_low"] <= run["accuracy"]["value"] <= run["accuracy"]["ci_high"]
        assert 0 <= run["to_researchers"] <= 1 and run["validations_per_decided"] >= 1


def test_the_committed_results_keep_the_interface_and_meet_the_targets():
    document = json.loads(COMMITTED.read_text())
    check_interface(document)
    assert document["seeds"] >= 3 and len({r["seed"] for r in document["runs"]}) == document["seeds"]
    assert document["data"]["cases"] == 3901
    assert [t["met"] for t in document["targets"]] == [True, True, True], document["targets"]


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
    assert document["data"]["cases"] == 300 and len(document["runs"]) == 14  # 7 spammer mixes x 2 policies
    assert "| none | adaptive |" in done.stdout


def test_a_missing_data_file_is_a_clear_error(tmp_path):
    done = bench("--quick", "--out", str(tmp_path / "x.json"), env={"DYNABENCH_DATA_DIR": str(tmp_path)})
    assert done.returncode == 2 and "fetch_data hatecheck" in done.stderr
    assert not (tmp_path / "x.json").exists()
