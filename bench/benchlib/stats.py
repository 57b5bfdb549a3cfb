"""Numbers: percentiles, millisecond summaries of timings, cosine, timing a call."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def percentile(samples: list[float], q: float) -> float:
    """The sample at rank ``round(q * (n - 1))`` of the sorted samples (nearest rank,
    no interpolation); ``q`` in [0, 1]."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def summary_ms(
    samples: list[float],
    *,
    median_key: str = "p50_ms",
    digits: int = 2,
    maximum: bool = True,
    p99: bool = False,
) -> dict:
    """Timings in seconds summarised in milliseconds: ``n``, the median (under
    ``median_key``), ``p95_ms``, ``mean_ms``, then ``max_ms`` and ``p99_ms`` when
    asked for; rounded to ``digits``. No samples: the same keys, None."""
    keys = [median_key, "p95_ms", "mean_ms"] + ["max_ms"] * maximum + ["p99_ms"] * p99
    if not samples:
        return {"n": 0, **dict.fromkeys(keys)}
    values = {
        median_key: statistics.median(samples),
        "p95_ms": percentile(samples, 0.95),
        "mean_ms": statistics.fmean(samples),
        "max_ms": max(samples),
        "p99_ms": percentile(samples, 0.99),
    }
    return {"n": len(samples), **{key: round(values[key] * 1000, digits) for key in keys}}


def cosine(a: list[float], b: list[float]) -> float:
    """Cosine similarity of two vectors of the same length (1.0 when one is zero)."""
    num = sum(x * y for x, y in zip(a, b, strict=True))
    den = (sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5)
    return num / den if den else 1.0


def seconds(fn: Callable, *args) -> float:
    """How long one call ``fn(*args)`` took."""
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def repeat_seconds(fn: Callable[[int], object], repeats: int) -> list[float]:
    """``fn(0)``, ``fn(1)``, ... timed one by one."""
    return [seconds(fn, i) for i in range(repeats)]
