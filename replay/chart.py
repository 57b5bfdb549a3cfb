"""The replay report's chart: bars of the model error rate at collection above lines of
each model's accuracy on each round's test set, with the majority answer. Pure, no Django:
drawn with ``core.svg``, as the pages' charts are."""

from __future__ import annotations

from core.svg import Panel, broken_line, svg_open, text, title_and_desc

from .report import DASH, error_rate, metric_matrix, number, pct, rounds_of

PALETTE = ("#0b5cad", "#d1242f", "#1a7f37", "#8250df", "#bc4c00", "#0598bc", "#bf3989", "#4d2d00")
DASHES = ("", "6 3", "2 3")  # cycled once the palette runs out


def _round_label(entry: dict, index: int) -> str:
    value = number(entry.get("number"))
    return f"R{value:g}" if value is not None else f"#{index}"


def svg_chart(report: dict, *, width: int = 760, height: int = 470) -> str:
    """Bars of the model error rate at collection per round, above lines of each model's
    accuracy on each round's test split. Self-contained: no script, no external resource."""
    rounds = rounds_of(report)
    labels = [_round_label(r, i) for i, r in enumerate(rounds)]
    names = [str(r.get("name", "")) for r in rounds]
    models, columns, cells = metric_matrix(report, "accuracy")
    column_of = {name: columns.index(name) for name in names if name in columns}

    left, legend_w, right = 64, 190, 16
    plot_w = width - left - legend_w - right
    top_a, height_a = 64, 120  # bars
    top_b, height_b = top_a + height_a + 70, height - (top_a + height_a + 70) - 56  # lines
    bars = Panel(left, top_a, plot_w, height_a, len(rounds))
    lines = Panel(left, top_b, plot_w, height_b, len(rounds))
    slot, xpos = bars.slot, bars.x

    title = f"Replay of real adversarial rounds: {report.get('task', '?')} ({report.get('mode', '?')} mode)"
    desc_parts = []
    bar_desc = [f"{labels[i]} ({names[i]}) {pct(error_rate(r.get('collection')))} against "
                f"{(r.get('collection') or {}).get('target') or DASH}"
                for i, r in enumerate(rounds) if isinstance(r.get("collection"), dict)]
    desc_parts.append("Top: model error rate at collection per round: "
                      + ("; ".join(bar_desc) or "none") + ".")
    line_desc = []
    for model, row in zip(models, cells, strict=True):
        points = [f"{labels[i]} {pct(row[column_of[names[i]]])}"
                  for i in range(len(rounds)) if names[i] in column_of]
        line_desc.append(f"{model}: " + ", ".join(points))
    desc_parts.append("Bottom: accuracy of each model on each round's test set: "
                      + ("; ".join(line_desc) or "none") + ".")

    out = [
        svg_open(width, height, "replay", sized=True, attributes={"font-family": "sans-serif"}),
        *title_and_desc("replay", title, " ".join(desc_parts)),
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff" />',
        f'<text x="{left}" y="24" font-size="15" font-weight="bold" fill="#1b1f24">{text(title)}</text>',
    ]

    def panel(area: Panel, heading: str, axis: str) -> None:
        top, h = area.top, area.height
        out.append(f'<text x="{left}" y="{top - 12:.1f}" font-size="13" fill="#1b1f24">'
                   f'{text(heading)}</text>')
        out.extend(area.grid(right=f"{left + plot_w:.1f}", font_size=11, label_dy=4))
        mid = top + h / 2
        out.append(f'<text x="16" y="{mid:.1f}" transform="rotate(-90 16 {mid:.1f})" '
                   f'text-anchor="middle" font-size="11" fill="#57606a">{text(axis)}</text>')
        for i, label in enumerate(labels):
            out.append(f'<text x="{xpos(i):.1f}" y="{top + h + 16:.1f}" text-anchor="middle" '
                       f'font-size="12" fill="#1b1f24"><title>{text(names[i])}</title>{text(label)}</text>')

    # Top: bars.
    panel(bars, "Model error rate at collection (examples that fooled the target)",
          "error rate")
    bar = min(36.0, slot / 2)
    for i, entry in enumerate(rounds):
        rate = error_rate(entry.get("collection"))
        if rate is None:
            continue
        h = bars.length(rate)
        target = (entry.get("collection") or {}).get("target") or DASH
        out.append(f'<rect x="{xpos(i) - bar / 2:.1f}" y="{bars.bottom - h:.1f}" '
                   f'width="{bar:.1f}" height="{h:.1f}" fill="#9ec5fe" stroke="#0b5cad">'
                   f'<title>{text(f"{names[i]}: {pct(rate)} against {target}")}</title></rect>')
        out.append(f'<text x="{xpos(i):.1f}" y="{bars.bottom - h - 4:.1f}" text-anchor="middle" '
                   f'font-size="10" fill="#1b1f24">{pct(rate)}</text>')

    # Bottom: one line per model across the rounds' test sets.
    panel(lines, "Accuracy on each round's test set, per model", "accuracy")
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{top_b + height_b + 36:.1f}" '
               f'text-anchor="middle" font-size="11" fill="#57606a">test set of round</text>')
    legend_x = left + plot_w + 24
    out.append(f'<rect x="{legend_x}" y="{top_a}" width="12" height="12" fill="#9ec5fe" '
               f'stroke="#0b5cad" />')
    out.append(f'<text x="{legend_x + 18}" y="{top_a + 10}" font-size="11" fill="#1b1f24">'
               f'model error rate</text>')
    out.append(f'<text x="{legend_x}" y="{top_b - 12:.1f}" font-size="11" fill="#57606a">'
               f'models (trained after round)</text>')
    # The majority answer on each round's test set: a grey bar across the slot.
    references = report.get("references") or {}
    majority_drawn = False
    for i, name in enumerate(names):
        value = number(((references.get(name) or {}).get("majority") or {}).get("accuracy"))
        if value is None:
            continue
        y = lines.y(value)
        out.append(f'<line x1="{xpos(i) - slot * 0.4:.1f}" x2="{xpos(i) + slot * 0.4:.1f}" y1="{y:.1f}" '
                   f'y2="{y:.1f}" stroke="#8c959f" stroke-width="3" stroke-dasharray="4 2">'
                   f'<title>{text(f"majority answer on {name}: {pct(value)}")}</title></line>')
        majority_drawn = True
    if majority_drawn:
        y = top_b + 4 + len(models) * 18
        out.append(f'<line x1="{legend_x}" x2="{legend_x + 14}" y1="{y:.1f}" y2="{y:.1f}" stroke="#8c959f" '
                   f'stroke-width="3" stroke-dasharray="4 2" />')
        out.append(f'<text x="{legend_x + 18}" y="{y + 4:.1f}" font-size="11" fill="#1b1f24">'
                   f'majority answer</text>')
    for m, (model, row) in enumerate(zip(models, cells, strict=True)):
        color = PALETTE[m % len(PALETTE)]
        dash = DASHES[(m // len(PALETTE)) % len(DASHES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        points = []
        for i in range(len(rounds)):
            value = row[column_of[names[i]]] if names[i] in column_of else None
            points.append(None if value is None else (xpos(i), lines.y(value), value))
        out.extend(broken_line([point and point[:2] for point in points],
                               f'fill="none" stroke="{color}" stroke-width="2"{dash_attr}'))
        for i, point in enumerate(points):
            if point is None:
                continue
            px, py, value = point
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}">'
                       f'<title>{text(f"{model} on {names[i]}: {pct(value)}")}</title></circle>')
        y = top_b + 4 + m * 18
        out.append(f'<line x1="{legend_x}" x2="{legend_x + 14}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{color}" stroke-width="2"{dash_attr} />')
        out.append(f'<text x="{legend_x + 18}" y="{y + 4:.1f}" font-size="11" fill="#1b1f24">'
                   f'{text(model)}</text>')
    out.append("</svg>")
    return "\n".join(out)
