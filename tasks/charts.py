"""Server-side SVG charts for the pages (no JavaScript, no CDN), drawn with ``core.svg``."""

from __future__ import annotations

from core.svg import Panel, svg_open, text, title_and_desc


def error_rate_chart(points: list[tuple[int, float | None, float | None]], *, width: int = 440,
                     height: int = 220) -> str:
    """Bars per round: model error rate (light) and verified model error rate (dark).

    ``points`` is ``[(round_number, model_error_rate, verified_model_error_rate)]``; a
    rate that is None (nothing collected, or nothing decided yet) draws no bar.
    Only numbers go into the SVG; it has a title and a text description for screen
    readers. Its type is set for a phone: the page shows it 342 px wide at 390 (the
    text then about 11 px) and at most 34rem on a desktop (the stylesheet's ``.chart``).
    """
    left, right, top, bottom = 44, 8, 12, 52
    panel = Panel(left, top, width - left - right, height - top - bottom, len(points))
    bar = min(28.0, panel.slot / 3)
    desc = "; ".join(
        f"round {r}: error {_pct(e)}, verified error {_pct(v)}" for r, e, v in points
    ) or "no rounds yet"
    parts = [svg_open(width, height, "chart", attributes={"class": "error-chart"}),
             *title_and_desc("chart", "Model error rate by round", desc),
             *panel.grid(right=width - right, font_size=14, label_dy=5)]
    for i, (number, error, verified) in enumerate(points):
        x0 = panel.x(i)
        for offset, value, color in ((-bar, error, "#9ec5fe"), (0, verified, "#0b5cad")):
            if value is None:
                continue
            h = panel.length(value)
            parts.append(f'<rect x="{x0 + offset:.1f}" y="{panel.bottom - h:.1f}" width="{bar:.1f}" '
                         f'height="{h:.1f}" fill="{color}"><title>{_pct(value)}</title></rect>')
        parts.append(f'<text x="{x0:.1f}" y="{panel.bottom + 18}" text-anchor="middle" font-size="15" '
                     f'fill="#1b1f24">R{int(number)}</text>')
    legend_y = height - 6
    parts.append(f'<rect x="{left}" y="{legend_y - 11}" width="12" height="12" fill="#9ec5fe" />'
                 f'<text x="{left + 17}" y="{legend_y}" font-size="14">model error rate</text>')
    parts.append(f'<rect x="{left + 150}" y="{legend_y - 11}" width="12" height="12" fill="#0b5cad" />'
                 f'<text x="{left + 167}" y="{legend_y}" font-size="14">verified model error rate</text>')
    parts.append("</svg>")
    return "".join(parts)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def interval_chart(points: list[tuple[str, float | None, float | None, float | None]], *, title: str,
                   width: int = 560, height: int = 220) -> str:
    """One bar per dataset with its 95% interval as a whisker: ``[(name, value, low, high)]``,
    values in 0..1. Only numbers and escaped names go into the SVG."""
    left, right, top, bottom = 44, 12, 14, 34
    panel = Panel(left, top, width - left - right, height - top - bottom, len(points))
    bar = min(36.0, panel.slot / 2)
    desc = "; ".join(f"{name}: {_pct(value)} (95% interval {_pct(low)} to {_pct(high)})"
                     for name, value, low, high in points) or "no datasets yet"
    parts = [svg_open(width, height, "ichart", attributes={"class": "interval-chart"}),
             *title_and_desc("ichart", title, desc),
             *panel.grid(right=width - right, font_size=11, label_dy=4)]
    for i, (name, value, low, high) in enumerate(points):
        x = panel.x(i)
        if value is not None:
            parts.append(f'<rect x="{x - bar / 2:.1f}" y="{panel.y(value):.1f}" width="{bar:.1f}" '
                         f'height="{panel.bottom - panel.y(value):.1f}" fill="#9ec5fe" />')
        if low is not None and high is not None:
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{panel.y(low):.1f}" y2="{panel.y(high):.1f}" '
                         f'stroke="#0b5cad" stroke-width="2" />')
            for end in (low, high):
                parts.append(f'<line x1="{x - 6:.1f}" x2="{x + 6:.1f}" y1="{panel.y(end):.1f}" '
                             f'y2="{panel.y(end):.1f}" stroke="#0b5cad" stroke-width="2" />')
        parts.append(f'<text x="{x:.1f}" y="{height - 12}" text-anchor="middle" font-size="11" fill="#24292f">'
                     f'{text(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)
