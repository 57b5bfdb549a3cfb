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


# Every generated block: between "<!-- NAME:begin ... -->" and "<!-- NAME:end -->" (bench/RESULTS.md's
# results:* blocks, docs/replay.md's findings).
GENERATED = re.compile(r"<!-- ([\w:.-]+):begin[^>]*-->.*?<!-- \1:end -->", re.DOTALL)
NUMBER = re.compile(r"(?<![A-Za-z])\d[\d.,]*")


def hand_written(text: str) -> str:
    """``text`` without its generated blocks, code blocks and inline code."""
    text = GENERATED.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return re.sub(r"`[^`]*`", "", text)


def section(text: str, start: str, end: str = "## ") -> str:
    """From the line that starts with ``start`` to the next that starts with ``end`` or
    ``## `` (a heading of the same level), or to the end."""
    lines = text.splitlines()
    (first,) = [i for i, line in enumerate(lines) if line.startswith(start)]
    rest = [i for i in range(first + 1, len(lines)) if lines[i].startswith(("## ", end))]
    return "\n".join(lines[first:rest[0] if rest else len(lines)])


ANNOTATION = ROOT / "docs" / "annotation.md"
# The hand-written prose that stands beside generated results: docs/replay.md whole; the
# replay and validation sections of bench/RESULTS.md; docs/annotation.md's part on what
# the validation bench measured (the rest of that file documents the product: statuses,
# settings and their defaults, not results).
CHECKED = {
    "docs/replay.md": lambda: PROSE.read_text(encoding="utf-8"),
    "bench/RESULTS.md, validation": lambda: section(DOC.read_text(encoding="utf-8"),
                                                    "## Validation on real annotators"),
    "bench/RESULTS.md, replay": lambda: section(DOC.read_text(encoding="utf-8"), "## Replaying real adversarial"),
    "docs/annotation.md, the validation bench": lambda: section(ANNOTATION.read_text(encoding="utf-8"),
                                                                "**Measured on real annotators**",
                                                                "The same loop through the API"),
}


def typed_claims(text: str) -> tuple[list[str], list[str]]:
    """(numbers, comparing words) in ``text``'s hand-written prose."""
    prose = hand_written(text)
    return NUMBER.findall(prose), [m.group(0) for m in COMPARING.finditer(prose)]


def test_the_findings_are_generated_from_the_committed_reports(reports):
    text = PROSE.read_text(encoding="utf-8")
    assert with_findings(text, reports) == text, "run: manage.py replay_tables"


@pytest.mark.parametrize("where", sorted(CHECKED))
def test_no_hand_written_sentence_beside_the_results_carries_a_number_or_a_comparison(where):
    text = CHECKED[where]()
    assert text.strip(), f"{where}: nothing to check (a heading moved?)"
    numbers, words = typed_claims(text)
    assert not numbers, f"numbers in the hand-written prose of {where}: {numbers}"
    assert not words, f"comparisons in the hand-written prose of {where}: {words}"


def test_the_checked_sections_hold_their_generated_blocks():
    """The sections checked are the ones the generated results stand in (a moved heading
    would leave the check reading other prose)."""
    results = DOC.read_text(encoding="utf-8")
    validation = section(results, "## Validation on real annotators")
    assert "<!-- results:validation:begin" in validation and "<!-- results:validation-frontier:begin" in validation
    assert DOC_BEGIN in section(results, "## Replaying real adversarial")
    assert FINDINGS_BEGIN in PROSE.read_text(encoding="utf-8")


def test_the_hand_written_check_fails_on_a_typed_claim():
    typed = (f"Intro.\n{FINDINGS_BEGIN}\n- generated: above 52.0%\n{FINDINGS_END}\n"
             "The intervals do not overlap, and M5 is the one clear step at 59.7%.\n"
             "<!-- results:validation:begin (generated by bench/report.py; do not edit) -->\n"
             "adaptive 0.9 is better at 99.81%\n<!-- results:validation:end -->\n"
             "Fixed matching does worse with spammers, `fixed-2` aside.\n")
    numbers, words = typed_claims(typed)
    assert numbers == ["59.7"]
    assert {w.lower() for w in words} == {"overlap", "clear", "worse"}


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
