"""Server-side SVG charts (no JavaScript, no CDN)."""

from __future__ import annotations

from django.utils.html import escape


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
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max(len(points), 1)
    slot = plot_w / n
    bar = min(28.0, slot / 3)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
        f'aria-labelledby="chart-title chart-desc" class="error-chart">',
        '<title id="chart-title">Model error rate by round</title>',
    ]
    desc = "; ".join(
        f"round {r}: error {_pct(e)}, verified error {_pct(v)}" for r, e, v in points
    ) or "no rounds yet"
    parts.append(f'<desc id="chart-desc">{escape(desc)}</desc>')
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = top + plot_h * (1 - tick)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#d0d7de" />')
        parts.append(f'<text x="{left - 6}" y="{y + 5:.1f}" text-anchor="end" font-size="14" fill="#57606a">'
                     f'{int(tick * 100)}%</text>')
    for i, (number, error, verified) in enumerate(points):
        x0 = left + slot * i + slot / 2
        for offset, value, color in ((-bar, error, "#9ec5fe"), (0, verified, "#0b5cad")):
            if value is None:
                continue
            h = plot_h * max(0.0, min(1.0, float(value)))
            parts.append(f'<rect x="{x0 + offset:.1f}" y="{top + plot_h - h:.1f}" width="{bar:.1f}" '
                         f'height="{h:.1f}" fill="{color}"><title>{_pct(value)}</title></rect>')
        parts.append(f'<text x="{x0:.1f}" y="{top + plot_h + 18}" text-anchor="middle" font-size="15" '
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
    plot_w, plot_h = width - left - right, height - top - bottom
    slot = plot_w / max(len(points), 1)
    bar = min(36.0, slot / 2)
    desc = "; ".join(f"{name}: {_pct(value)} (95% interval {_pct(low)} to {_pct(high)})"
                     for name, value, low, high in points) or "no datasets yet"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
             f'aria-labelledby="ichart-title ichart-desc" class="interval-chart">',
             f'<title id="ichart-title">{escape(title)}</title>', f'<desc id="ichart-desc">{escape(desc)}</desc>']
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = top + plot_h * (1 - tick)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#d0d7de" />')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#57606a">'
                     f'{int(tick * 100)}%</text>')

    def y_of(value):
        return top + plot_h * (1 - max(0.0, min(1.0, float(value))))

    for i, (name, value, low, high) in enumerate(points):
        x = left + slot * i + slot / 2
        if value is not None:
            parts.append(f'<rect x="{x - bar / 2:.1f}" y="{y_of(value):.1f}" width="{bar:.1f}" '
                         f'height="{top + plot_h - y_of(value):.1f}" fill="#9ec5fe" />')
        if low is not None and high is not None:
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y_of(low):.1f}" y2="{y_of(high):.1f}" '
                         f'stroke="#0b5cad" stroke-width="2" />')
            for end in (low, high):
                parts.append(f'<line x1="{x - 6:.1f}" x2="{x + 6:.1f}" y1="{y_of(end):.1f}" y2="{y_of(end):.1f}" '
                             f'stroke="#0b5cad" stroke-width="2" />')
        parts.append(f'<text x="{x:.1f}" y="{height - 12}" text-anchor="middle" font-size="11" fill="#24292f">'
                     f'{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)
