"""bench/scale.py at tiny sizes on SQLite: the databases it builds (counters that agree
with the rows), the JSON it writes, and the block bench/report.py makes of it."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bench.benchlib import report_sections

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # two databases built and migrated in subprocesses: tens of seconds
SIZES = (200, 400)
PATHS = {"home", "task page", "rounds API", "round stats API", "next validation", "leaderboard page",
         "leaderboard API", "examples API first", "examples API status", "examples API deep", "contexts API",
         "admin examples", "admin examples filter", "admin examples uid", "admin validations",
         "admin validations last"}
JOBS = {"quality check (batch)", "pay_bonuses", "tasks_due_for_refit", "reconcile_counts"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scale")
    out = folder / "scale.json"
    done = subprocess.run(
        [sys.executable, "bench/scale.py", "--sizes", ",".join(map(str, SIZES)), "--databases", "sqlite",
         "--repeats", "2", "--periodic-repeats", "1", "--work", "3", "--dir", str(folder), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "DEBUG": "true"})
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, json.loads(out.read_text()), done.stdout


def test_the_json_has_every_path_and_job_at_every_size(run):
    _, document, _ = run
    assert document["benchmark"] == "scale" and document["sizes"] == list(SIZES)
    result = document["databases"]["sqlite"]
    assert result["vendor"] == "sqlite"
    assert {row["path"] for row in result["requests"]} == PATHS
    assert {row["job"] for row in result["periodic"]} == JOBS
    for row in result["requests"] + result["periodic"]:
        assert set(row["sizes"]) == {str(n) for n in SIZES}, row
        assert {"slope", "ratio", "queries", "over_target", "met", "over_select_1"} <= set(row)
        for measured in row["sizes"].values():
            assert measured["median_ms"] > 0 and measured["queries"] >= 1 and measured["rss_mb"] > 0
    for row in result["requests"]:
        assert row["statuses"] == [200], row
        assert row["judged"] and row["met"] == (not row["over_target"])
    reconcile = next(row for row in result["periodic"] if row["job"] == "reconcile_counts")
    assert not reconcile["judged"] and reconcile["met"] is None  # linear by design: not judged
    assert all(measured["drifts"] == 0 for measured in reconcile["sizes"].values())  # the saves kept them


def test_the_build_has_the_studys_shape_and_counters_that_agree_with_the_rows(run):
    folder, document, _ = run
    for size in SIZES:
        build = document["databases"]["sqlite"]["builds"][str(size)]
        assert build["drift_after_build"] == []  # the recount after the build repaired nothing
        assert build["rows"]["examples"] == size
        assert 2.5 * size <= build["rows"]["validations"] <= 3.2 * size
        [path] = folder.glob(f"scale-sqlite-{size}-*.sqlite3")
        assert list(folder.glob(f"scale-sqlite-{size}-*.built"))  # kept for the next run
        with sqlite3.connect(path) as db:
            collected, decisions = db.execute(
                "SELECT collected, decisions FROM annotation_roundcounts").fetchone()
            rows = db.execute("SELECT COUNT(*) FROM annotation_example WHERE source = 'annotation' "
                              "AND NOT retracted AND NOT provisional").fetchone()[0]
            decided = db.execute(
                "SELECT COUNT(*) FROM annotation_validation v JOIN annotation_example e ON e.id = v.example_id "
                "WHERE v.label != '' AND e.source = 'annotation' AND NOT e.retracted AND NOT e.provisional"
            ).fetchone()[0]
            mturk = db.execute("SELECT COUNT(*) FROM annotation_example e JOIN crowd_assignment a "
                               "ON a.session_id = e.session_id").fetchone()[0]
            statuses = dict(db.execute("SELECT validation_status, COUNT(*) FROM annotation_example "
                                       "GROUP BY validation_status").fetchall())
        assert (collected, decisions) == (rows, decided)
        assert mturk >= size // 10
        assert {"verified", "rejected", "pending", "flagged"} <= set(statuses)


def test_the_table_and_the_block_flag_what_is_over_target(run):
    _, document, stdout = run
    assert "verdict" in stdout and "linear by design" in stdout
    block = report_sections.scale(document)
    assert "### sqlite" in block and "| request |" in block and "| periodic job |" in block
    for path in PATHS:
        assert f"| {path} |" in block
    over = [row for row in document["databases"]["sqlite"]["requests"] if row["over_target"]]
    assert block.count("**OVER**") >= len(over)
    assert report_sections.scale(document) == block  # the same JSON, the same text
