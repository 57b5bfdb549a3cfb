"""bench/report.py: every table of bench/RESULTS.md is what the committed JSON files in
bench/results/ give; a changed number makes --check fail naming its block and the write
mode mends it; a missing marker is a clear failure. The edits happen on copies."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.benchlib import report_sections as sections
from replay.results import DOC_BEGIN, DOC_END

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "bench" / "RESULTS.md"
BLOCK = re.compile(r"^<!-- results:([^:\s]+):begin .*?^<!-- results:\1:end -->", re.MULTILINE | re.DOTALL)
BLOCKS = len(BLOCK.findall(DOC.read_text(encoding="utf-8")))  # every block RESULTS.md has, each generated


def report(*args):
    return subprocess.run([sys.executable, "bench/report.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "DEBUG": "true"})


def prose(text: str) -> str:
    """``text`` without its generated blocks (each replaced by its name)."""
    return BLOCK.sub(lambda m: f"[block {m.group(1)}]", text)


def stale_blocks(stderr: str) -> list[str]:
    found = re.search(r"stale blocks \(run bench/report\.py\): (.+)", stderr)
    return found.group(1).split(", ") if found else []


@pytest.fixture
def copy(tmp_path):
    """A copy of bench/results/ and bench/RESULTS.md, and the options that point at it."""
    results, doc = tmp_path / "results", tmp_path / "RESULTS.md"
    shutil.copytree(RESULTS, results)
    shutil.copy(DOC, doc)
    return results, doc, ["--results", str(results), "--out", str(doc)]


def test_results_md_is_what_the_committed_json_gives():
    done = report("--check")
    assert done.returncode == 0, done.stderr
    assert f"all {BLOCKS} blocks agree" in done.stderr


def test_a_changed_number_fails_the_check_naming_its_block_and_writing_mends_it(copy):
    results, doc, options = copy
    committed = DOC.read_text(encoding="utf-8")
    assert report("--check", *options).returncode == 0

    path = results / "leaderboard.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    document["results"]["page-warm"]["median_ms"] = 123.456
    path.write_text(json.dumps(document), encoding="utf-8")
    before = doc.read_text(encoding="utf-8")
    done = report("--check", *options)
    assert done.returncode == 1
    assert stale_blocks(done.stderr) == ["leaderboard"], done.stderr
    assert doc.read_text(encoding="utf-8") == before, "--check changed the file"

    done = report(*options)
    assert done.returncode == 0, done.stderr
    assert f"rewrote leaderboard (1 of {BLOCKS} blocks)" in done.stderr
    after = doc.read_text(encoding="utf-8")
    assert "| page, cached | 123.5 ms |" in after
    assert prose(after) == prose(before), "the prose outside the blocks changed"
    assert report("--check", *options).returncode == 0
    assert DOC.read_text(encoding="utf-8") == committed, "the committed RESULTS.md was touched"


def test_a_missing_marker_is_a_clear_failure_and_nothing_is_written(copy):
    results, doc, options = copy
    text = doc.read_text(encoding="utf-8").replace(sections.end_marker("evaluation") + "\n", "")
    doc.write_text(text, encoding="utf-8")
    (results / "latency.json").write_text(  # stale too: still not written
        (results / "latency.json").read_text(encoding="utf-8").replace('"median_ms": 203.067', '"median_ms": 1.0'),
        encoding="utf-8")

    done = report("--check", *options)
    assert done.returncode == 1
    assert "block evaluation: missing markers" in done.stderr and "results:evaluation:end" in done.stderr
    assert stale_blocks(done.stderr) == ["latency"]

    done = report(*options)
    assert done.returncode == 1 and "nothing written" in done.stderr
    assert "block evaluation: missing markers" in done.stderr
    assert doc.read_text(encoding="utf-8") == text


def test_markers_of_an_unknown_block_fail(copy):
    _, doc, options = copy
    doc.write_text(doc.read_text(encoding="utf-8") + f"\n{sections.begin_marker('gone')}\nold\n"
                   f"{sections.end_marker('gone')}\n", encoding="utf-8")
    done = report("--check", *options)
    assert done.returncode == 1 and "block gone: markers of an unknown block" in done.stderr


def test_a_missing_result_file_is_named(copy):
    results, _, options = copy
    (results / "evaluation.json").unlink()
    done = report("--check", *options)
    assert done.returncode == 2 and "evaluation.json not found" in done.stderr


def test_runs_side_by_side_come_one_row_each_in_the_order_they_ran_and_none_is_named(copy):
    results, _, options = copy
    runs = sorted((results / "load-threads").glob("*.json"))
    block = sections.load_runs({path.stem: json.loads(path.read_text(encoding="utf-8")) for path in runs})
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    assert len(rows) == len(runs) >= 2
    ended = [row.split(" | ")[1] for row in rows]
    assert ended == sorted(ended)
    for path in runs:
        path.unlink()
    done = report("--check", *options)
    assert done.returncode == 2 and "no files" in done.stderr and "load-threads" in done.stderr


def test_the_replay_and_validation_writers_use_the_same_markers():
    assert DOC_BEGIN == sections.begin_marker("replay") and DOC_END == sections.end_marker("replay")
    text = DOC.read_text(encoding="utf-8")
    for name in ("replay", "validation"):
        assert sections.block_problem(text, name) is None, name


def test_replace_block_keeps_what_is_outside_the_markers():
    text = f"# Title\n\n{sections.begin_marker('x')}\nold\n{sections.end_marker('x')}\n\nThe rest.\n"
    assert sections.replace_block(text, "x", "new") == text.replace("old", "new")
    with pytest.raises(ValueError, match="no block 'y'"):
        sections.replace_block(text, "y", "new")


def test_the_prose_quotes_no_measurement():
    """Numbers belong in the generated blocks: outside them, and outside code, no decimal
    number, percentage, duration, rate or ratio."""
    text = re.sub(r"```.*?```", "", prose(DOC.read_text(encoding="utf-8")), flags=re.DOTALL)
    text = re.sub(r"`[^`]*`", "", text)
    found = re.findall(r"\d+\.\d+|\d+\s*(?:%|ms\b|s\b|min\b|x\b|/s\b|times\b|points?\b)", text)
    assert not found, f"numbers in RESULTS.md's prose: {found}"


def test_a_phase_a_load_run_left_out_reads_not_run_never_fail():
    """A scale-out-only run (``--phases scale``) judges no loop it did not run."""
    block = sections.load(json.loads((RESULTS / "load-scale.json").read_text(encoding="utf-8")))
    targets = block.split("| mode | closed loop | open loop | explain mix |")[1].split("\n\n")[0]
    assert "| service | n/a | n/a | n/a |" in targets and "FAIL" not in targets
    platform = block.split("capacity (per core) |")[1]
    assert "| not run | not run | not run |" in platform
    assert "| service | 2 |" in block.split("Scale-out, the inference tier alone:")[1]


def test_explain_mix_runs_come_one_row_each_with_the_ratio_to_their_own_open_loop(copy):
    results, _, _ = copy
    runs = {path.stem: json.loads(path.read_text(encoding="utf-8"))
            for path in sorted((results / "load-explain").glob("*.json"))}
    block = sections.explain_runs(runs)
    rows = [line.split(" | ") for line in block.splitlines() if line.startswith("| `")]
    assert len(rows) == len(runs) >= 2
    assert [row[1] for row in rows] == sorted(row[1] for row in rows)  # in the order they ran
    for row in rows:
        result = runs[row[0].strip("| `")]["results"][0]
        expected = result["explain_mix"]["predict"]["p50_ms"] / result["open"]["predict"]["p50_ms"]
        assert row[10] == f"{expected:.2f}x"


def test_the_endpoint_block_reads_its_ratios_from_the_run():
    from bench.benchlib import endpoint_report

    run = {"args": {"requests": 4, "block": 2, "delay_ms": 0}, "endpoint_calls": 12, "load_average": [1.0, 1.0, 1.0],
           "summaries": {"direct": {"n": 4, "p50_ms": 2.0, "p95_ms": 3.0},
                         "client": {"n": 4, "p50_ms": 2.5, "p95_ms": 3.5},
                         "hot path": {"n": 4, "p50_ms": 30.0, "p95_ms": 40.0}}}
    block = endpoint_report.block(run)
    assert "| 4 | 30.00 | 40.00 | 15.0× | +28.00 |" in block
    assert "differs from the direct call's by +0.50 ms" in block and "takes 15.0× the direct call's median" in block
