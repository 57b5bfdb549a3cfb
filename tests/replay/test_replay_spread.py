"""The seeds' spread and the training counts in the replay's reports and tables: a pooled
report carries each per-seed value's spread (``replay.spread``), its tables show the mean,
the spread and the pooled interval and say so in their header, and a run's heading gives
the training counts its report records, never a cap in their place."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from replay.cells import LEGEND
from replay.data import build_plan
from replay.report import markdown_tables
from replay.results import doc_section, load_reports, round_summary
from replay.spread import add_spreads, spread
from replay.summary import build_report

from .test_replay_data import make_hate_dir
from .test_replay_experiment import META, fake_run, fake_scores

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "replay"


@pytest.fixture(scope="module")
def reports():
    return load_reports(RESULTS)


def test_spread_is_the_seeds_lowest_highest_and_standard_deviation():
    assert spread([0.5, 0.7, 0.6]) == pytest.approx({"seed_min": 0.5, "seed_max": 0.7, "seed_sd": 0.1})
    assert spread([0.5]) == {} and spread([]) == {}


def test_a_pooled_report_has_the_spread_beside_every_per_seed_value(tmp_path):
    plan = build_plan("hate", make_hate_dir(tmp_path, davidson=600), mode="full")
    runs = [fake_run(plan, seed, control=True, control_gap=0.3) for seed in (0, 1, 2)]
    report = build_report(plan, runs, **{**META, "control": "static"})
    json.dumps(report, allow_nan=False)
    first = report["rounds"][1]
    stat = first["test"]["DynaHate R1"]
    assert (stat["seed_min"], stat["seed_max"]) == (min(stat["by_seed"]), max(stat["by_seed"]))
    assert stat["seed_sd"] == pytest.approx(float(np.std(stat["by_seed"], ddof=1)))
    assert first["collection"]["seed_min"] == 0.25 and first["collection"]["seed_max"] == 0.3
    # A paired difference's per-seed values: each seed's own per-example differences, averaged.
    n = len(plan.rounds[1].test)
    mine = [np.mean(fake_scores(n, 0.55, 100 * seed + 1)) for seed in (0, 1, 2)]
    before = [np.mean(fake_scores(n, 0.5, 100 * seed)) for seed in (0, 1, 2)]
    gain = first["gain_over_previous"]
    assert gain["by_seed"] == pytest.approx([a - b for a, b in zip(mine, before, strict=True)])
    assert gain["difference"] == pytest.approx(np.mean(gain["by_seed"]))
    assert gain["seed_min"] == pytest.approx(min(gain["by_seed"]))
    versus = first["vs_control"]["DynaHate R1"]
    control = report["controls"]["static"]["rounds"][1]["test"]["DynaHate R1"]["by_seed"]
    assert versus["by_seed"] == pytest.approx([a - b for a, b in zip(stat["by_seed"], control, strict=True)])
    majority = report["references"]["DynaHate R1"]["majority"]["accuracy"]
    assert first["vs_majority"]["DynaHate R1"]["seed_max"] == pytest.approx(max(stat["by_seed"]) - majority)
    # The tables show it and say so.
    text = markdown_tables(report)
    assert f"[{stat['seed_min'] * 100:.1f}\u2013{stat['seed_max'] * 100:.1f}]" in text and LEGEND in text
    assert "| 1 | DynaHate R1 | hate-m0 | 40 | 10\u201312 |" in text  # each seed's own fooled count
    one = build_report(plan, runs[:1], **{**META, "control": "static"})
    assert "seed_min" not in json.dumps(one) and LEGEND not in markdown_tables(one)


def test_the_committed_summaries_carry_the_spread_their_per_seed_values_give(reports):
    pooled = {name: r for name, r in reports.items() if len(r["seeds"]) > 1}
    assert pooled, "no committed run of several seeds"
    for name, report in pooled.items():
        assert add_spreads(json.loads(json.dumps(report))) == report, f"{name}: run replay.spread.add_spreads"
        gains = [e["gain_over_previous"] for e in report["rounds"][1:]]
        assert all(len(g["by_seed"]) == len(report["seeds"]) for g in gains), name


def cell_of(table_lines: list[str], row: int, column: str) -> str:
    header = [c.strip() for c in table_lines[0].strip("|").split(" | ")]
    cells = [c.strip() for c in table_lines[2 + row].strip("|").split(" | ")]
    return cells[header.index(column)]


def test_the_results_tables_show_mean_spread_and_pooled_interval(reports):
    for name, report in reports.items():
        lines = round_summary(report)
        several = len(report["seeds"]) > 1
        assert (LEGEND in lines[0]) == several, name
        for i, entry in enumerate(report["rounds"]):
            stat = entry["test"][entry["name"]]
            shown = cell_of(lines, i, "M(r)")
            assert shown.startswith(f"{stat['accuracy'] * 100:.1f}% ({stat['ci_low'] * 100:.1f}"), (name, shown)
            if several:
                assert shown.endswith(f"[{min(stat['by_seed']) * 100:.1f}\u2013{max(stat['by_seed']) * 100:.1f}]")


def trained_counts(report: dict) -> dict[int, list[int]]:
    """Read straight from each seed's run: the round's own rows M(r) trained on."""
    counts: dict[int, list[int]] = {}
    for run in report["runs"]:
        for entry in run["rounds"]:
            if entry["number"]:
                counts.setdefault(entry["number"], []).append(entry["training"]["rounds"]["train"])
    return counts


def test_each_runs_heading_gives_the_training_counts_its_report_records(reports):
    """The heading of each run in bench/RESULTS.md: its numbers are the report's training
    counts (and the plan's caps, named as caps on lists), never a cap called a training count."""
    section = doc_section(reports)
    for name, report in reports.items():
        counts = trained_counts(report)
        assert counts, name
        everything = [n for values in counts.values() for n in values]
        (heading,) = [line for line in section.splitlines()
                      if line.startswith("### ") and f"strategy `{report['strategy']}`" in line
                      and line.startswith(f"### {'NLI' if report['task'] == 'nli' else 'Hate speech'}:")]
        assert "at most" not in heading, heading
        found = re.search(r"M\(r\) trained on (\d+)(?:\u2013(\d+))? of its own round's rows", heading)
        assert found, heading
        low, high = int(found.group(1)), int(found.group(2) or found.group(1))
        assert (low, high) == (min(everything), max(everything)), (heading, counts)
        caps = report["data"]["caps"]
        assert re.findall(r"capped at (\d+)", heading) == (
            [str(caps["train"])] if caps["train"] == caps["dev"] else [str(caps["train"]), str(caps["dev"])])
        lines = round_summary(report)
        for i, entry in enumerate(report["rounds"][1:], start=1):
            values = counts[entry["number"]]
            expected = str(min(values)) if min(values) == max(values) else f"{min(values)}\u2013{max(values)}"
            assert cell_of(lines, i, "Own round's rows M(r) trained on") == expected, (name, i)
