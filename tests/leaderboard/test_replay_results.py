"""The committed replay results: the replay tables of bench/RESULTS.md and each run's
report.md and report.svg are what its report.json gives (``manage.py replay_tables`` writes
them), the prose in docs/replay.md quotes only their numbers, and every report keeps the
interface that scripts read."""

import json
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from leaderboard.replay.chart import svg_chart
from leaderboard.replay.report import interface_problems, markdown_tables
from leaderboard.replay.results import DOC_BEGIN, DOC_END, load_reports, with_doc_section

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "replay"
DOC = ROOT / "bench" / "RESULTS.md"
PROSE = ROOT / "docs" / "replay.md"


@pytest.fixture(scope="module")
def reports():
    found = load_reports(RESULTS)
    assert found, f"no committed replay reports under {RESULTS}"
    return found


def test_the_results_md_tables_are_generated_from_the_committed_reports(reports):
    doc = DOC.read_text(encoding="utf-8")
    assert doc.count(DOC_BEGIN) == 1 and doc.count(DOC_END) == 1
    assert with_doc_section(doc, reports) == doc, "run: manage.py replay_tables"


def test_every_number_in_the_replay_prose_is_in_a_committed_report(reports):
    """The words about the replay (docs/replay.md) quote only numbers that the committed
    tables hold."""
    text = PROSE.read_text(encoding="utf-8")
    assert "### What these numbers can and cannot say" in text, f"{PROSE} has no such section"
    prose = text.split("### What these numbers can and cannot say", 1)[1].split("\n### ", 1)[0]
    tables = "\n".join((RESULTS / folder / "report.md").read_text(encoding="utf-8") for folder in reports)
    numbers = re.findall(r"\d+\.\d", prose)
    assert numbers, "the replay's prose quotes no number"
    missing = [n for n in numbers if n not in tables]
    assert not missing, f"numbers in docs/replay.md's replay prose that no committed report.md holds: {missing}"


def test_each_run_has_its_tables_and_chart_and_keeps_the_interface(reports):
    for folder, report in reports.items():
        base = RESULTS / folder
        assert interface_problems(report) == [], folder
        assert (base / "report.md").read_text(encoding="utf-8") == markdown_tables(report), folder
        assert (base / "report.svg").read_text(encoding="utf-8") == svg_chart(report) + "\n", folder
        # Every accuracy sits inside its interval, and every test set has its reference lines.
        for entry in report["rounds"]:
            for name, value in entry["test"].items():
                assert value["ci_low"] <= value["accuracy"] <= value["ci_high"], (folder, entry["number"], name)
                assert name in report["references"], (folder, name)


def test_replay_tables_check_fails_on_a_stale_doc(tmp_path, reports):
    results = tmp_path / "replay"
    for folder, report in reports.items():
        (results / folder).mkdir(parents=True)
        (results / folder / "report.json").write_text(json.dumps(report), encoding="utf-8")
    doc = tmp_path / "RESULTS.md"
    doc.write_text(f"# Title\n\n{DOC_BEGIN}\nold numbers\n{DOC_END}\n\nThe rest.\n", encoding="utf-8")
    with pytest.raises(CommandError, match="Out of date"):
        call_command("replay_tables", results=str(results), doc=str(doc), check=True)
    call_command("replay_tables", results=str(results), doc=str(doc))
    call_command("replay_tables", results=str(results), doc=str(doc), check=True)
    text = doc.read_text(encoding="utf-8")
    assert "old numbers" not in text and text.startswith("# Title") and text.endswith("The rest.\n")
    assert all((results / folder / "report.md").exists() for folder in reports)
    doc.write_text("no block here\n", encoding="utf-8")
    with pytest.raises(CommandError, match="no replay block"):
        call_command("replay_tables", results=str(results), doc=str(doc))
    with pytest.raises(CommandError, match="not found"):
        call_command("replay_tables", results=str(results), doc=str(tmp_path / "missing.md"))
