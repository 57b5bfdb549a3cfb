"""The replay report: its schema, Markdown tables and an SVG chart. Pure functions, no Django.

The driver (``manage.py replay``) builds one dict per run and hands it to
``write_outputs``. Schema::

    {
      "task": "hate",                       # "nli" | "hate"
      "mode": "fast",                       # "fast" | "full"
      "started_at": "2025-01-01T12:00:00+00:00",   # ISO 8601
      "seconds": 812.5,                     # wall time of the whole replay
      "data": {...},                        # leaderboard.replay.data.plan_summary(plan)
      "rounds": [                           # index 0: round 0 (static data)
        {
          "number": 1,
          "name": "DynaHate R1",            # the RoundData name (also its test set's name)
          "model": "hate-m1",               # the model trained at the end of this round (round 0: M0)
          "collection": {                   # null for round 0
            "submitted": 400,               # round's training examples submitted
            "fooled": 123,                  # of which fooled the live target
            "model_error_rate": 0.3075,     # fooled / submitted
            "target": "hate-m0"             # the target model they were submitted against
          },
          "train_seconds": 95.1,
          "evaluations": {                  # this round's model on every test set
            "static (Davidson)": {"accuracy": 0.91, "macro_f1": 0.74, "num_examples": 200},
            "DynaHate R1": {"accuracy": 0.66, "macro_f1": 0.65, "num_examples": 200},
            ...
          },
          "functional": {                   # hate only: suites in use from their round on
            "HateCheck": {"accuracy": 0.62, "num_examples": 200,
                          "by_functionality": {"derog_neg_emote_h": {"accuracy": 0.8,
                                                                     "num_examples": 7}, ...}},
            ...
          }
        },
        ...
      ]
    }

Accuracy, macro-F1 and error rates are fractions in [0, 1]; the tables and the
chart show them as percentages with one decimal. A value that is missing,
null or not a finite number shows as a dash and is left out of the chart.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

DASH = "\u2014"
PALETTE = ("#0b5cad", "#d1242f", "#1a7f37", "#8250df", "#bc4c00", "#0598bc", "#bf3989", "#4d2d00")
DASHES = ("", "6 3", "2 3")  # cycled once the palette runs out


# --- reading the report -----------------------------------------------------


def _number(value) -> float | None:
    """A finite number, or None (missing, null, text, NaN or infinite)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _rounds(report: dict) -> list[dict]:
    return [r for r in report.get("rounds") or [] if isinstance(r, dict)]


def model_name(round_entry: dict) -> str:
    return str(round_entry.get("model") or f"M{round_entry.get('number', '?')}")


def error_rate(collection: dict | None) -> float | None:
    """The model error rate at collection: as reported, or fooled / submitted."""
    if not isinstance(collection, dict):
        return None
    rate = _number(collection.get("model_error_rate"))
    if rate is None:
        submitted, fooled = _number(collection.get("submitted")), _number(collection.get("fooled"))
        if submitted and fooled is not None:
            rate = fooled / submitted
    return rate


def evaluated_sets(report: dict) -> list[str]:
    """Test set names: each round's (round order), then any other evaluated set (first seen)."""
    names = [str(r.get("name")) for r in _rounds(report) if r.get("name") is not None]
    for entry in _rounds(report):
        for name in entry.get("evaluations") or {}:
            if name not in names:
                names.append(name)
    return names


def suite_names(report: dict) -> list[str]:
    names: list[str] = []
    for entry in _rounds(report):
        for name in entry.get("functional") or {}:
            if name not in names:
                names.append(name)
    return names


def metric_matrix(report: dict, metric: str = "accuracy", section: str = "evaluations"
                  ) -> tuple[list[str], list[str], list[list[float | None]]]:
    """(models, columns, cells): one row per round's model, one column per test set or suite."""
    columns = evaluated_sets(report) if section == "evaluations" else suite_names(report)
    models, cells = [], []
    for entry in _rounds(report):
        results = entry.get(section) or {}
        models.append(model_name(entry))
        cells.append([_number((results.get(c) or {}).get(metric))
                      if isinstance(results.get(c), dict) else None for c in columns])
    return models, columns, cells


# --- Markdown ---------------------------------------------------------------


def _cell(value) -> str:
    """Text for a Markdown table cell: HTML-escaped, pipes escaped, one line."""
    text = html.escape(str(value), quote=False)
    return " ".join(text.replace("|", "\\|").split())


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value * 100:.1f}%"


def _table(header: list[str], rows: list[list[str]], right_from: int = 1) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def markdown_tables(report: dict) -> str:
    """Collection per round, the accuracy (and macro-F1) matrix, and functional tests (hate)."""
    task, mode = _cell(report.get("task", "?")), _cell(report.get("mode", "?"))
    lines = [f"# Replay of real adversarial rounds: {task} ({mode} mode)", ""]
    facts = []
    if report.get("started_at"):
        facts.append(f"started {_cell(report['started_at'])}")
    seconds = _number(report.get("seconds"))
    if seconds is not None:
        facts.append(f"took {seconds:.1f} s")
    if facts:
        lines += ["Replay " + ", ".join(facts) + ".", ""]

    lines += ["## Model error rate at collection", "",
              "Each round's training examples were submitted against the live target model "
              "(the model trained at the end of the round before); the model error rate is "
              "fooled / submitted.", ""]
    rows = []
    for entry in _rounds(report):
        collection = entry.get("collection")
        if not isinstance(collection, dict):
            continue
        submitted, fooled = _number(collection.get("submitted")), _number(collection.get("fooled"))
        rows.append([_cell(entry.get("number", "?")), _cell(entry.get("name", "")),
                     _cell(collection.get("target") or DASH),
                     DASH if submitted is None else f"{submitted:g}",
                     DASH if fooled is None else f"{fooled:g}", _pct(error_rate(collection))])
    if rows:
        lines += _table(["Round", "Data", "Target model", "Submitted", "Fooled",
                         "Model error rate"], rows, right_from=3)
    else:
        lines.append("No round collected examples.")
    lines.append("")

    for title, metric in (("Accuracy", "accuracy"), ("Macro-F1", "macro_f1")):
        models, columns, cells = metric_matrix(report, metric)
        if metric != "accuracy" and all(v is None for row in cells for v in row):
            continue
        lines += [f"## {title} on each round's test split", "",
                  "Rows: the model trained at the end of each round; columns: test sets "
                  "(round 0 is the static data).", ""]
        if columns:
            lines += _table(["Model", *map(_cell, columns)],
                            [[_cell(m), *map(_pct, row)] for m, row in zip(models, cells, strict=True)])
        else:
            lines.append("No evaluations.")
        lines.append("")

    models, suites, cells = metric_matrix(report, "accuracy", "functional")
    if suites:
        lines += ["## Functional tests: accuracy", "",
                  "A dash: the suite is not in use yet for that model's round.", ""]
        lines += _table(["Model", *map(_cell, suites)],
                        [[_cell(m), *map(_pct, row)] for m, row in zip(models, cells, strict=True)])
        lines.append("")
    return "\n".join(lines)


# --- SVG --------------------------------------------------------------------


def _round_label(entry: dict, index: int) -> str:
    number = _number(entry.get("number"))
    return f"R{number:g}" if number is not None else f"#{index}"


def _x(value) -> str:
    """Text escaped for XML character data and attribute values."""
    return html.escape(str(value), quote=True)


def svg_chart(report: dict, *, width: int = 760, height: int = 470) -> str:
    """Bars of the model error rate at collection per round, above lines of each model's
    accuracy on each round's test split. Self-contained: no script, no external resource."""
    rounds = _rounds(report)
    labels = [_round_label(r, i) for i, r in enumerate(rounds)]
    names = [str(r.get("name", "")) for r in rounds]
    models, columns, cells = metric_matrix(report, "accuracy")
    column_of = {name: columns.index(name) for name in names if name in columns}

    left, legend_w, right = 64, 190, 16
    plot_w = width - left - legend_w - right
    top_a, height_a = 64, 120  # bars
    top_b, height_b = top_a + height_a + 70, height - (top_a + height_a + 70) - 56  # lines
    n = max(len(rounds), 1)
    slot = plot_w / n

    def xpos(i: int) -> float:
        return left + slot * i + slot / 2

    title = f"Replay of real adversarial rounds: {report.get('task', '?')} ({report.get('mode', '?')} mode)"
    desc_parts = []
    bar_desc = [f"{labels[i]} ({names[i]}) {_pct(error_rate(r.get('collection')))} against "
                f"{(r.get('collection') or {}).get('target') or DASH}"
                for i, r in enumerate(rounds) if isinstance(r.get("collection"), dict)]
    desc_parts.append("Top: model error rate at collection per round: "
                      + ("; ".join(bar_desc) or "none") + ".")
    line_desc = []
    for model, row in zip(models, cells, strict=True):
        points = [f"{labels[i]} {_pct(row[column_of[names[i]]])}"
                  for i in range(len(rounds)) if names[i] in column_of]
        line_desc.append(f"{model}: " + ", ".join(points))
    desc_parts.append("Bottom: accuracy of each model on each round's test set: "
                      + ("; ".join(line_desc) or "none") + ".")

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-labelledby="replay-title replay-desc" '
        f'font-family="sans-serif">',
        f'<title id="replay-title">{_x(title)}</title>',
        f'<desc id="replay-desc">{_x(" ".join(desc_parts))}</desc>',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff" />',
        f'<text x="{left}" y="24" font-size="15" font-weight="bold" fill="#1b1f24">{_x(title)}</text>',
    ]

    def panel(top: float, h: float, heading: str, axis: str) -> None:
        out.append(f'<text x="{left}" y="{top - 12:.1f}" font-size="13" fill="#1b1f24">'
                   f'{_x(heading)}</text>')
        for tick in (0, 0.25, 0.5, 0.75, 1.0):
            y = top + h * (1 - tick)
            out.append(f'<line x1="{left}" x2="{left + plot_w:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                       f'stroke="#d0d7de" />')
            out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
                       f'fill="#57606a">{int(tick * 100)}%</text>')
        mid = top + h / 2
        out.append(f'<text x="16" y="{mid:.1f}" transform="rotate(-90 16 {mid:.1f})" '
                   f'text-anchor="middle" font-size="11" fill="#57606a">{_x(axis)}</text>')
        for i, label in enumerate(labels):
            out.append(f'<text x="{xpos(i):.1f}" y="{top + h + 16:.1f}" text-anchor="middle" '
                       f'font-size="12" fill="#1b1f24"><title>{_x(names[i])}</title>{_x(label)}</text>')

    # Top: bars.
    panel(top_a, height_a, "Model error rate at collection (examples that fooled the target)",
          "error rate")
    bar = min(36.0, slot / 2)
    for i, entry in enumerate(rounds):
        rate = error_rate(entry.get("collection"))
        if rate is None:
            continue
        h = height_a * max(0.0, min(1.0, rate))
        target = (entry.get("collection") or {}).get("target") or DASH
        out.append(f'<rect x="{xpos(i) - bar / 2:.1f}" y="{top_a + height_a - h:.1f}" '
                   f'width="{bar:.1f}" height="{h:.1f}" fill="#9ec5fe" stroke="#0b5cad">'
                   f'<title>{_x(f"{names[i]}: {_pct(rate)} against {target}")}</title></rect>')
        out.append(f'<text x="{xpos(i):.1f}" y="{top_a + height_a - h - 4:.1f}" text-anchor="middle" '
                   f'font-size="10" fill="#1b1f24">{_pct(rate)}</text>')

    # Bottom: one line per model across the rounds' test sets.
    panel(top_b, height_b, "Accuracy on each round's test set, per model", "accuracy")
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{top_b + height_b + 36:.1f}" '
               f'text-anchor="middle" font-size="11" fill="#57606a">test set of round</text>')
    legend_x = left + plot_w + 24
    out.append(f'<rect x="{legend_x}" y="{top_a}" width="12" height="12" fill="#9ec5fe" '
               f'stroke="#0b5cad" />')
    out.append(f'<text x="{legend_x + 18}" y="{top_a + 10}" font-size="11" fill="#1b1f24">'
               f'model error rate</text>')
    out.append(f'<text x="{legend_x}" y="{top_b - 12:.1f}" font-size="11" fill="#57606a">'
               f'models (trained after round)</text>')
    for m, (model, row) in enumerate(zip(models, cells, strict=True)):
        color = PALETTE[m % len(PALETTE)]
        dash = DASHES[(m // len(PALETTE)) % len(DASHES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        points = []
        for i in range(len(rounds)):
            value = row[column_of[names[i]]] if names[i] in column_of else None
            points.append(None if value is None else
                          (xpos(i), top_b + height_b * (1 - max(0.0, min(1.0, value))), value))
        segment: list[tuple[float, float, float]] = []
        for point in [*points, None]:
            if point is not None:
                segment.append(point)
                continue
            if len(segment) > 1:
                path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _ in segment)
                out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                           f'stroke-width="2"{dash_attr} />')
            segment = []
        for i, point in enumerate(points):
            if point is None:
                continue
            px, py, value = point
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}">'
                       f'<title>{_x(f"{model} on {names[i]}: {_pct(value)}")}</title></circle>')
        y = top_b + 4 + m * 18
        out.append(f'<line x1="{legend_x}" x2="{legend_x + 14}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{color}" stroke-width="2"{dash_attr} />')
        out.append(f'<text x="{legend_x + 18}" y="{y + 4:.1f}" font-size="11" fill="#1b1f24">'
                   f'{_x(model)}</text>')
    out.append("</svg>")
    return "\n".join(out)


# --- files ------------------------------------------------------------------


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
