"""The replay tables' cells: numbers as the tables write them, with their intervals and,
in a pooled report, the seeds' spread. Pure functions, no Django."""

from __future__ import annotations

import html
import math

from .stats import RESAMPLES

DASH = "\u2014"

# What a cell holds in a report of several seeds, said in each table's header (``legend``).
LEGEND = "cells: the seeds' mean (pooled 95% interval) [the seeds' lowest and highest value]"


def number(value) -> float | None:
    """A finite number, or None (missing, null, text, NaN or infinite)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def pooled(report: dict) -> bool:
    """Whether ``report`` pools several seeds (its cells then carry the seeds' spread)."""
    return len(report.get("seeds") or []) > 1


def legend(label: str, report_or_pooled) -> str:
    """A table's first header cell: ``label``, and with several seeds what its cells hold."""
    several = report_or_pooled if isinstance(report_or_pooled, bool) else pooled(report_or_pooled)
    return f"{label} ({LEGEND})" if several else label


def cell(value) -> str:
    """Text for a Markdown table cell: HTML-escaped, pipes escaped, one line."""
    text = html.escape(str(value), quote=False)
    return " ".join(text.replace("|", "\\|").split())


def pct(value: float | None) -> str:
    return DASH if value is None else f"{value * 100:.1f}%"


def table(header: list[str], rows: list[list[str]], right_from: int = 1) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _seed_range(stat: dict) -> tuple[float, float] | None:
    low, high = number(stat.get("seed_min")), number(stat.get("seed_max"))
    return None if low is None or high is None else (low, high)


def ci_text(stat: dict | None) -> str:
    """ "72.6% (70.1-75.0)": an accuracy with its 95% interval, or a dash; where the stat
    has the seeds' spread (``seed_min``, ``seed_max``), "[71.7-73.3]" after it."""
    if not isinstance(stat, dict) or number(stat.get("accuracy")) is None:
        return DASH
    low, high = number(stat.get("ci_low")), number(stat.get("ci_high"))
    text = pct(stat["accuracy"]) if low is None or high is None else (
        f"{stat['accuracy'] * 100:.1f}% ({low * 100:.1f}\u2013{high * 100:.1f})")
    seeds = _seed_range(stat)
    if seeds:
        text += f" [{seeds[0] * 100:.1f}\u2013{seeds[1] * 100:.1f}]"
    return text


def signed(value: float) -> str:
    return f"{value * 100:+.1f}".replace("-", "\u2212")


def gain_text(stat: dict | None, with_p: bool = True) -> str:
    """ "+3.4 pts (-0.5, +7.2), p 0.09": a paired difference, its interval and p-value;
    where the stat has the seeds' spread, "[+1.7 to +5.0]" before the p-value."""
    if not isinstance(stat, dict) or number(stat.get("difference")) is None:
        return DASH
    text = f"{signed(stat['difference'])} pts"
    low, high = number(stat.get("ci_low")), number(stat.get("ci_high"))
    if low is not None and high is not None:
        text += f" ({signed(low)}, {signed(high)})"
    seeds = _seed_range(stat)
    if seeds:
        text += f" [{signed(seeds[0])} to {signed(seeds[1])}]"
    p = number(stat.get("p_value"))
    if with_p and p is not None:
        # The bootstrap cannot resolve a p-value below 2 / (resamples + 1): say so, not a smaller number.
        floor = 2 / (RESAMPLES + 1)
        text += f", p \u2264 {floor:.3f}" if p <= floor + 1e-9 else f", p {p:.3f}"
    return text
