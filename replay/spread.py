"""The seeds' spread in a pooled replay report. Pure functions, no Django.

A pooled report (``summary.json``: several seeds) holds each accuracy's per-seed values in
``by_seed``. ``add_spreads`` adds, beside every such value, the seeds' spread: ``seed_min``
and ``seed_max`` (the smallest and largest seed's value) and ``seed_sd`` (their sample
standard deviation). A paired difference (M(r) against M(r-1), against a control, against
the majority answer) gets its per-seed values too (``by_seed``: each seed's accuracy of the
one model minus the other's on the same examples, which is the mean of that seed's
per-example differences) and their spread. Nothing is renamed or removed: the keys are
added, so the report's interface (``replay.report``) is kept. With one seed nothing is
added: one value has no spread.
"""

from __future__ import annotations

import math

from .report import number, rounds_of

SPREAD_KEYS = ("seed_min", "seed_max", "seed_sd")


def spread(values: list[float]) -> dict:
    """{seed_min, seed_max, seed_sd} of two or more per-seed values; {} otherwise."""
    values = [float(v) for v in values if number(v) is not None]
    if len(values) < 2:
        return {}
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return {"seed_min": min(values), "seed_max": max(values), "seed_sd": sd}


def _seeds(stat) -> list[float] | None:
    values = stat.get("by_seed") if isinstance(stat, dict) else None
    if not isinstance(values, list) or any(number(v) is None for v in values):
        return None
    return [float(v) for v in values]


def _add(stat) -> None:
    """Spread beside ``stat``'s ``by_seed`` (and each functionality's)."""
    if not isinstance(stat, dict):
        return
    values = _seeds(stat)
    if values is not None:
        stat.update(spread(values))
    for group in (stat.get("by_functionality") or {}).values():
        _add(group)


def _difference(stat, mine: list[float] | None, theirs: list[float] | None) -> None:
    """Per-seed values and spread of a paired difference from the two sides' per-seed accuracies."""
    if not isinstance(stat, dict) or mine is None or theirs is None or len(mine) != len(theirs) or len(mine) < 2:
        return
    stat["by_seed"] = [a - b for a, b in zip(mine, theirs, strict=True)]
    stat.update(spread(stat["by_seed"]))


def _scores(entry: dict, name: str) -> list[float] | None:
    stat = (entry.get("test") or {}).get(name) or (entry.get("functional") or {}).get(name)
    return _seeds(stat)


def _majority(report: dict, name: str, seeds: int) -> list[float] | None:
    value = number((((report.get("references") or {}).get(name) or {}).get("majority") or {}).get("accuracy"))
    return None if value is None else [value] * seeds


def add_spreads(report: dict) -> dict:
    """``report`` with the seeds' spread beside every per-seed value (see the module's
    docstring); changed in place and returned. A report of one seed is returned as it is."""
    seeds = len(report.get("seeds") or [])
    if seeds < 2:
        return report
    rounds = rounds_of(report)
    controls = {name: {r.get("number"): r for r in (body or {}).get("rounds") or [] if isinstance(r, dict)}
                for name, body in (report.get("controls") or {}).items()}
    for entry in list(rounds) + [r for chain in controls.values() for r in chain.values()]:
        for stat in list((entry.get("test") or {}).values()) + list((entry.get("functional") or {}).values()):
            _add(stat)
        _add(entry.get("collection"))
        for name, stat in (entry.get("vs_majority") or {}).items():
            _difference(stat, _scores(entry, name), _majority(report, name, seeds))
    for i, entry in enumerate(rounds):
        gain = entry.get("gain_over_previous")
        if i and isinstance(gain, dict):
            name = gain.get("test_set", entry.get("name"))
            _difference(gain, _scores(entry, name), _scores(rounds[i - 1], name))
        pairs = list((entry.get("vs_controls") or {}).items())
        if isinstance(entry.get("vs_control"), dict) and report.get("control"):  # the first control's, again
            pairs.append((report["control"], entry["vs_control"]))
        for control_name, comparison in pairs:
            control = controls.get(control_name, {}).get(entry.get("number")) or {}
            for name, stat in (comparison or {}).items():
                _difference(stat, _scores(entry, name), _scores(control, name))
    return report
