"""The replay's files: writing a run's report, and the committed runs' tables for
``bench/RESULTS.md`` (``manage.py replay_tables``, ``bench/report.py``). Pure, no Django."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .cells import DASH, cell, ci_text, gain_text, legend, number, pct, pooled, table
from .chart import svg_chart
from .report import (
    error_rate,
    evaluated_sets,
    markdown_tables,
    model_name,
    replace_block,
    rounds_of,
    suite_names,
)


def _json_safe(value):
    """NaN and infinities become null, so the file is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def write_outputs(report: dict, out_path: Path) -> dict[str, Path]:
    """Write the report JSON at ``out_path`` and ``<stem>.md`` and ``<stem>.svg`` next to it."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_path, "markdown": out_path.with_suffix(".md"),
             "svg": out_path.with_suffix(".svg")}
    if len(set(paths.values())) != len(paths):
        raise ValueError(f"{out_path} must not end in .md or .svg: the tables and chart go there")
    paths["json"].write_text(json.dumps(_json_safe(report), indent=2, ensure_ascii=False,
                                        allow_nan=False) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown_tables(report), encoding="utf-8")
    paths["svg"].write_text(svg_chart(report) + "\n", encoding="utf-8")
    return paths


# --- the summary in bench/RESULTS.md -----------------------------------------


def _title(report: dict) -> str:
    seeds = report.get("seeds") or []
    parts = [f"{cell(report.get('mode', '?'))} mode", f"strategy `{cell(report.get('strategy', '?'))}`",
             f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}"]
    controls = report.get("control_names") or ([report["control"]] if report.get("control") else [])
    if controls:
        parts.append(" and ".join(cell(c) for c in controls) + f" control{'s' if len(controls) > 1 else ''}")
    rounds = f"rounds 1–{len(report.get('rounds') or []) - 1}"
    details = [text for text in (_caps_text(report), _trained_text(report)) if text]
    parts.append(rounds + (f" ({'; '.join(details)})" if details else ""))
    return f"{cell(TASK_NAMES.get(report.get('task'), report.get('task', '?')))}: " + ", ".join(parts)


def _caps_text(report: dict) -> str:
    """The caps as the plan applied them: on each round's train list and on its dev list
    (a round's examples are both lists, so the cap is not the count a model trains on)."""
    caps = (report.get("data") or {}).get("caps") or {}
    train, dev = caps.get("train"), caps.get("dev")
    if not train and not dev:
        return ""
    if train == dev:
        return f"each round's train and dev lists capped at {train} rows each"
    return "each round's " + " and ".join(f"{name} list capped at {cap} rows" for name, cap in
                                          (("train", train), ("dev", dev)) if cap)


def own_rows_trained(report: dict) -> dict[int, list[int]]:
    """``{round number: [rows of that round M(r) trained on, one per seed]}`` for rounds 1..R,
    from each seed's training counts (``runs[].rounds[].training.rounds.train``: the round's
    own examples left for training after the platform's dev hold-out); {} where the report
    has none."""
    counts: dict[int, list[int]] = {}
    for run in report.get("runs") or []:
        for entry in (run or {}).get("rounds") or []:
            rows = number((((entry or {}).get("training") or {}).get("rounds") or {}).get("train"))
            if entry.get("number") and rows is not None:
                counts.setdefault(int(entry["number"]), []).append(int(rows))
    return counts


def _span(values: list[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}–{high}"


def _trained_text(report: dict) -> str:
    counts = [n for values in own_rows_trained(report).values() for n in values]
    return f"M(r) trained on {_span(counts)} of its own round's rows" if counts else ""


TASK_NAMES = {"hate": "Hate speech", "nli": "NLI"}


def round_summary(report: dict) -> list[str]:
    """One row per round: M(r-1)'s error on round r's examples, M(r) on its own round's test split
    beside the majority answer, its paired gain over M(r-1), and with a control C(r) and
    M(r) - C(r) on that split."""
    rounds = rounds_of(report)
    references = report.get("references") or {}
    controls = next(iter((report.get("controls") or {}).values()), None)
    crounds = {r.get("number"): r for r in (controls or {}).get("rounds") or [] if isinstance(r, dict)}
    trained = own_rows_trained(report)
    header = [legend("Round", report), "Test set", "M(r\u22121)'s error on round r's examples", "Majority answer",
              "M(r)", "M(r) \u2212 M(r\u22121)", "Own round's rows M(r) trained on"]
    if controls:
        header += ["Static control C(r)", "M(r) \u2212 C(r)"]
    rows = []
    for entry in rounds:
        name = entry.get("name")
        collection = entry.get("collection")
        rate = DASH if not isinstance(collection, dict) else ci_text(
            {"accuracy": error_rate(collection), "ci_low": collection.get("ci_low"),
             "ci_high": collection.get("ci_high"), "seed_min": collection.get("seed_min"),
             "seed_max": collection.get("seed_max")})
        majority = ((references.get(name) or {}).get("majority") or {}).get("accuracy")
        row = [cell(entry.get("number", "?")), cell(name), rate, pct(number(majority)),
               ci_text((entry.get("test") or {}).get(name)), gain_text(entry.get("gain_over_previous")),
               _span(trained[entry["number"]]) if trained.get(entry.get("number")) else DASH]
        if controls:
            control = crounds.get(entry.get("number")) if entry.get("number") else None
            row += [ci_text((control or {}).get("test", {}).get(name)) if control else DASH,
                    gain_text((entry.get("vs_control") or {}).get(name))]
        rows.append(row)
    return table(header, rows, right_from=2)


def suite_summary(report: dict) -> list[str]:
    """Each model on the functional suites, against the constant answers (and the control)."""
    suites = suite_names(report)
    if not suites:
        return []
    labels = list((report.get("data") or {}).get("labels") or [])
    references = report.get("references") or {}
    has_control = any(isinstance(e.get("vs_control"), dict) for e in rounds_of(report))
    header = [legend("Model", report)]
    for suite in suites:
        header += [cell(suite)] + ([f"{cell(suite)}: M(r) \u2212 C(r)"] if has_control else [])
    rows = []
    for entry in rounds_of(report):
        row = [cell(model_name(entry))]
        for suite in suites:
            row.append(ci_text((entry.get("functional") or {}).get(suite)))
            if has_control:
                row.append(gain_text((entry.get("vs_control") or {}).get(suite)))
        rows.append(row)
    for label in labels:
        row = [f"*always {cell(label)}*"]
        for suite in suites:
            row.append(pct(number(((references.get(suite) or {}).get("constant") or {}).get(label))))
            if has_control:
                row.append("")
        rows.append(row)
    return table(header, rows)


def strategy_comparison(reports: list[dict]) -> list[str]:
    """The last round's model of each strategy on every test set and suite (one task and mode)."""
    if len(reports) < 2:
        return []
    columns: list[str] = []
    for report in reports:
        for name in evaluated_sets(report) + suite_names(report):
            if name not in columns:
                columns.append(name)
    rows = []
    for report in reports:
        last = rounds_of(report)[-1] if rounds_of(report) else {}
        results = {**(last.get("test") or {}), **(last.get("functional") or {})}
        rows.append([f"`{cell(report.get('strategy', '?'))}` ({cell(model_name(last))})",
                     *(ci_text(results.get(c)) for c in columns)])
    return table([legend("Strategy (last model)", any(pooled(r) for r in reports)), *map(cell, columns)], rows)


def doc_section(reports: dict[str, dict], level: int = 3) -> str:
    """The replay tables of ``bench/RESULTS.md``, from the committed reports (``{folder: report}``),
    in folder order: for each run its rounds and suites, then each task's strategies side by side;
    headings of ``level`` (3: under the file's ``##`` section)."""
    h = "#" * level
    lines: list[str] = []
    for folder, report in reports.items():
        pooled = len(report.get("seeds") or []) > 1
        name = SUMMARY if pooled else REPORT
        beside = (f"`{Path(name).with_suffix('.md')}` beside it, each seed's own under `seed-<n>/`" if pooled
                  else f"`{Path(name).with_suffix('.md')}` beside it")
        lines += [f"{h} {_title(report)}", "",
                  f"From `bench/results/replay/{folder}/{name}` (all tables: {beside}). " + _facts(report), ""]
        lines += round_summary(report) + [""]
        suites = suite_summary(report)
        if suites:
            lines += suites + [""]
    groups: dict[tuple, list[dict]] = {}
    for report in reports.values():
        design = (report.get("task"), report.get("mode"), json.dumps((report.get("data") or {}).get("caps"),
                                                                     sort_keys=True),
                  len(report.get("rounds") or []), tuple(report.get("seeds") or []))
        groups.setdefault(design, []).append(report)
    for (task, mode, *_), group in groups.items():
        strategies = {r.get("strategy") for r in group}
        if len(strategies) > 1:
            lines += [f"{h} {cell(TASK_NAMES.get(task, task))}, {cell(mode)} mode: the strategies side by side", "",
                      "Each strategy's last model on every test set and suite.", ""]
            lines += strategy_comparison(sorted(group, key=lambda r: str(r.get("strategy")))) + [""]
    return "\n".join(lines).rstrip() + "\n"


LEAK_WORDS = {"context": "sharing a premise or context with a test example",
              "text": "sharing a text with a test example",
              "pair": "one side of a contrastive pair whose other side is a test example"}


def _facts(report: dict) -> str:
    data = report.get("data") or {}
    by_rule: dict[str, int] = {}
    for splits in ((data.get("leakage") or {}).get("removed") or {}).values():
        for counts in splits.values():
            for rule, n in counts.items():
                by_rule[rule] = by_rule.get(rule, 0) + n
    seconds = number(report.get("seconds"))
    parts = [f"{by_rule[rule]} {LEAK_WORDS.get(rule, rule)}" for rule in sorted(by_rule) if by_rule[rule]]
    facts = [f"The leakage filter removed {sum(by_rule.values())} training and dev rows"
             + (f" ({', '.join(parts)})." if parts else ".")]
    if "pair" not in ((data.get("leakage") or {}).get("rules") or {}):
        facts.append("This run predates the contrastive-pair rule: a test example's pair may be in training.")
    if data.get("control_pool"):
        facts.append(f"The static control's pool: {data['control_pool']} rows.")
    if seconds is not None:
        seeds = len(report.get("seeds") or [])
        facts.append(f"It took {seconds / 60:.0f} min on this machine's 2 CPU cores"
                     + (f" for its {seeds} seeds." if seeds > 1 else "."))
    return " ".join(facts)


# --- the committed results ----------------------------------------------------

# The block's markers in bench/RESULTS.md, as bench/benchlib/report_sections.py writes
# every block's (bench/report.py regenerates this one too, from the same reports).
DOC_BEGIN = "<!-- results:replay:begin (generated by bench/report.py; do not edit) -->"
DOC_END = "<!-- results:replay:end -->"


# A run of several seeds keeps each seed's report in a folder of its own and the pooled
# one (means, the seeds' spread, pooled intervals: what the tables read) beside them.
SUMMARY = "summary.json"
REPORT = "report.json"


def seed_folder(seed: int) -> str:
    return f"seed-{seed}"


def write_seeds(pooled: dict, per_seed: list[dict], out_path: Path) -> dict[str, Path]:
    """With one seed, ``write_outputs(pooled, out_path)``. With several, each seed's report at
    ``<folder>/seed-<n>/<name>`` and the pooled one at ``<folder>/summary.json`` (with its
    .md and .svg), where ``out_path`` is ``<folder>/<name>``; the pooled paths are returned."""
    out_path = Path(out_path)
    if len(per_seed) <= 1:
        return write_outputs(pooled, out_path)
    for report in per_seed:
        write_outputs(report, out_path.parent / seed_folder(report["seeds"][0]) / out_path.name)
    return write_outputs(pooled, out_path.parent / SUMMARY)


def report_paths(root: Path) -> dict[str, Path]:
    """``{run: path}``: each run folder's ``summary.json`` where it has one, else its
    ``report.json``. A seed's own report (``<run>/seed-<n>/report.json``) is not a run."""
    root = Path(root)
    found: dict[str, Path] = {}
    for name in (REPORT, SUMMARY):  # the summary wins
        for path in sorted(root.glob(f"*/{name}")):
            found[path.parent.name] = path
    return dict(sorted(found.items()))


def seed_report_paths(root: Path) -> list[Path]:
    """Every seed's own report under the runs of ``root``."""
    return sorted(Path(root).glob(f"*/{seed_folder('*')}/*.json"))


def load_reports(root: Path) -> dict[str, dict]:
    """``{run: report}`` for every run under ``root`` (``report_paths``), by folder name."""
    return {run: json.loads(path.read_text(encoding="utf-8")) for run, path in report_paths(root).items()}


def with_doc_section(text: str, reports: dict[str, dict]) -> str:
    """``text`` (bench/RESULTS.md) with the block between the markers replaced by ``doc_section``."""
    return replace_block(text, DOC_BEGIN, DOC_END, doc_section(reports), "replay block")
