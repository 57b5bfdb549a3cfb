"""The committed replay results: the replay tables of bench/RESULTS.md and each run's
report.md and report.svg are what its report.json gives (``manage.py replay_tables`` writes
them), every comparative sentence in docs/replay.md is generated from them too and no
hand-written one carries a number or a comparison, and every report keeps the interface
that scripts read."""

import json
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from replay.chart import svg_chart
from replay.findings import DOC_BEGIN as FINDINGS_BEGIN
from replay.findings import DOC_END as FINDINGS_END
from replay.findings import with_findings
from replay.report import interface_problems, markdown_tables
from replay.results import (
    DOC_BEGIN,
    DOC_END,
    load_reports,
    report_paths,
    seed_report_paths,
    with_doc_section,
)

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


# Words that compare or conclude: a hand-written sentence may not carry them (nor a number).
COMPARING = re.compile(r"\b(significant\w*|above|below|overlap\w*|clear(ly)?|forgot\w*|forgotten|beats?|better|"
                       r"worse|harder|easier|higher|lower|falls?|rises?|more than|less than|outperform\w*)\b",
                       re.IGNORECASE)


def hand_written(text: str) -> str:
    """docs/replay.md without its generated block, code blocks and inline code."""
    head, rest = text.split(FINDINGS_BEGIN, 1)
    text = head + rest.split(FINDINGS_END, 1)[1]
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return re.sub(r"`[^`]*`", "", text)


def test_the_findings_are_generated_from_the_committed_reports(reports):
    text = PROSE.read_text(encoding="utf-8")
    assert with_findings(text, reports) == text, "run: manage.py replay_tables"


def test_no_hand_written_sentence_in_the_replay_doc_carries_a_number_or_a_comparison():
    prose = hand_written(PROSE.read_text(encoding="utf-8"))
    numbers = re.findall(r"(?<![A-Za-z])\d[\d.,]*", prose)
    assert not numbers, f"numbers in docs/replay.md's hand-written prose: {numbers}"
    words = [m.group(0) for m in COMPARING.finditer(prose)]
    assert not words, f"comparisons in docs/replay.md's hand-written prose: {words}"


def test_the_hand_written_check_fails_on_a_typed_claim():
    typed = (f"Intro.\n{FINDINGS_BEGIN}\n- generated: above 52.0%\n{FINDINGS_END}\n"
             "The intervals do not overlap, and M5 is the one clear step at 59.7%.\n")
    prose = hand_written(typed)
    assert re.findall(r"(?<![A-Za-z])\d[\d.,]*", prose) == ["59.7"]
    assert {m.group(0).lower() for m in COMPARING.finditer(prose)} == {"overlap", "clear"}


def test_each_run_has_its_tables_and_chart_and_keeps_the_interface(reports):
    paths = report_paths(RESULTS)
    for folder, report in reports.items():
        path = paths[folder]
        assert interface_problems(report) == [], folder
        assert path.with_suffix(".md").read_text(encoding="utf-8") == markdown_tables(report), folder
        assert path.with_suffix(".svg").read_text(encoding="utf-8") == svg_chart(report) + "\n", folder
        # Every accuracy sits inside its interval, and every test set has its reference lines.
        for entry in report["rounds"]:
            for name, value in entry["test"].items():
                assert value["ci_low"] <= value["accuracy"] <= value["ci_high"], (folder, entry["number"], name)
                assert name in report["references"], (folder, name)


def test_a_run_of_several_seeds_has_each_seeds_report_beside_its_summary(reports):
    """Where a run pooled several seeds, each seed's own report is committed beside the
    summary, with its tables and chart, and the summary's per-seed values are theirs."""
    for path in seed_report_paths(RESULTS):
        report = json.loads(path.read_text(encoding="utf-8"))
        assert interface_problems(report) == [], path
        assert path.with_suffix(".md").read_text(encoding="utf-8") == markdown_tables(report), path
        summary = reports[path.parent.parent.name]
        (seed,) = report["seeds"]
        assert path.parent.name == f"seed-{seed}" and seed in summary["seeds"], path
        at = summary["seeds"].index(seed)
        for mine, pooled in zip(report["rounds"], summary["rounds"], strict=True):
            for name, stat in mine["test"].items():
                assert pooled["test"][name]["by_seed"][at] == pytest.approx(stat["accuracy"]), (path, name)
    for folder, path in report_paths(RESULTS).items():
        if path.name == "summary.json":
            assert len(reports[folder]["seeds"]) == len(list(path.parent.glob("seed-*/report.json"))) > 1


def test_replay_tables_check_fails_on_a_stale_doc(tmp_path, reports):
    results = tmp_path / "replay"
    for folder, report in reports.items():
        (results / folder).mkdir(parents=True)
        (results / folder / "report.json").write_text(json.dumps(report), encoding="utf-8")
    doc = tmp_path / "RESULTS.md"
    doc.write_text(f"# Title\n\n{DOC_BEGIN}\nold numbers\n{DOC_END}\n\nThe rest.\n", encoding="utf-8")
    prose = tmp_path / "replay.md"
    prose.write_text(f"# Replay\n\n{FINDINGS_BEGIN}\n- M7 beats the control, intervals do not overlap\n"
                     f"{FINDINGS_END}\n", encoding="utf-8")
    paths = {"results": str(results), "doc": str(doc), "findings": str(prose)}
    with pytest.raises(CommandError, match="Out of date"):
        call_command("replay_tables", **paths, check=True)
    call_command("replay_tables", **paths)
    call_command("replay_tables", **paths, check=True)
    assert "intervals do not overlap" not in prose.read_text(encoding="utf-8")
    assert with_findings(prose.read_text(encoding="utf-8"), reports) == prose.read_text(encoding="utf-8")
    text = doc.read_text(encoding="utf-8")
    assert "old numbers" not in text and text.startswith("# Title") and text.endswith("The rest.\n")
    assert all((results / folder / "report.md").exists() for folder in reports)
    prose.write_text("no findings here\n", encoding="utf-8")
    with pytest.raises(CommandError, match="no findings block"):
        call_command("replay_tables", **paths)
    doc.write_text("no block here\n", encoding="utf-8")
    with pytest.raises(CommandError, match="no replay block"):
        call_command("replay_tables", **paths)
    with pytest.raises(CommandError, match="not found"):
        call_command("replay_tables", **{**paths, "doc": str(tmp_path / "missing.md")})
