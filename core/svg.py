"""What the platform's SVG charts draw alike, written once: the page charts
(``tasks/charts.py``) and the replay report's chart (``replay/chart.py``)
both build on it. Plain Python, no Django, no script and no external resource in what
it writes.

A chart is a list of SVG elements (strings) that the caller joins. Here: the opening
tag with its title and description for screen readers, text escaping, a panel that
places values in 0..1 on a vertical scale and items in equal slots across, its
percent gridlines, and lines broken where a value is missing.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass

GRID = "#d0d7de"  # gridlines
MUTED = "#57606a"  # axis labels
TICKS = (0, 0.25, 0.5, 0.75, 1.0)


def text(value) -> str:
    """``value`` as text escaped for XML character data and attribute values."""
    return html.escape(str(value), quote=True)


def unit(value) -> float:
    """``value`` clamped to 0..1, the range every chart's scale shows."""
    return max(0.0, min(1.0, float(value)))


def svg_open(width: int, height: int, label: str, *, sized: bool = False,
             attributes: dict[str, str] | None = None) -> str:
    """The opening ``<svg>`` tag: a ``viewBox``, the image role, labelled by the
    ``<label>-title`` and ``<label>-desc`` elements that ``title_and_desc`` writes. With
    ``sized``, an explicit width and height too (for a standalone file); ``attributes``
    (a class, a font) come last."""
    size = f' width="{width}" height="{height}"' if sized else ""
    extra = "".join(f' {name}="{text(value)}"' for name, value in (attributes or {}).items())
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}"{size} role="img" '
            f'aria-labelledby="{label}-title {label}-desc"{extra}>')


def title_and_desc(label: str, title: str, desc: str) -> list[str]:
    """The chart's title and its text description, escaped, for screen readers."""
    return [f'<title id="{label}-title">{text(title)}</title>', f'<desc id="{label}-desc">{text(desc)}</desc>']


@dataclass(frozen=True)
class Panel:
    """A plot area: ``count`` equal slots across ``width`` from ``left``, and values in
    0..1 from the bottom (``top + height``) up to ``top``."""

    left: int
    top: float
    width: float
    height: float
    count: int

    @property
    def slot(self) -> float:
        return self.width / max(self.count, 1)

    @property
    def bottom(self) -> float:
        return self.top + self.height

    def x(self, index: int) -> float:
        """The middle of slot ``index``."""
        return self.left + self.slot * index + self.slot / 2

    def y(self, value) -> float:
        """Where ``value`` (clamped to 0..1) sits on the vertical scale."""
        return self.top + self.height * (1 - unit(value))

    def length(self, value) -> float:
        """The height of a bar from the bottom up to ``value`` (clamped to 0..1)."""
        return self.height * unit(value)

    def grid(self, *, right, font_size: int, label_dy: int) -> list[str]:
        """A gridline and its percent label at 0, 25, 50, 75 and 100%. ``right`` is where
        the lines end, written as given (a number, or text already formatted)."""
        parts = []
        for tick in TICKS:
            y = self.top + self.height * (1 - tick)
            parts.append(f'<line x1="{self.left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}" />')
            parts.append(f'<text x="{self.left - 6}" y="{y + label_dy:.1f}" text-anchor="end" '
                         f'font-size="{font_size}" fill="{MUTED}">{int(tick * 100)}%</text>')
        return parts


def broken_line(points: Iterable[tuple[float, float] | None], style: str) -> list[str]:
    """Polylines through ``points`` (x, y), broken where a point is None; a single point
    between gaps draws no line. ``style`` is the polyline's attributes after its points."""
    parts, segment = [], []
    for point in [*points, None]:
        if point is not None:
            segment.append(point)
            continue
        if len(segment) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in segment)
            parts.append(f'<polyline points="{path}" {style} />')
        segment = []
    return parts
