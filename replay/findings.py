# Long on purpose: the findings are one generator (families, their tests, the sentences) read as a whole.
"""The replay's findings: every sentence that compares two numbers, generated from the
reports by the command that writes the tables (``manage.py replay_tables``), so that
no sentence can say more than its numbers. Pure functions, no Django.

Each family of comparisons is one table of the report, and each is corrected for its
own number of comparisons (Holm, at ``ALPHA`` family-wise):

- **collection**: M(r-1)'s error on round r's examples, each round against the one
  before (Wilson intervals);
- **gains**: M(r) against M(r-1) on round r's test split (the report's paired test);
- **control**: M(r) against its control C(r) on every test set and suite (paired), one
  family per control (static, balanced);
- **majority**: every model (the controls' too) on every test set and suite against
  that set's majority answer (the report's paired test against the constant, where
  the report has one);
- **forgetting**: the last model against M(r) on round r's test split;
- **strategies**: two runs' last models on every set (unpaired: different runs).

Where the report holds a paired bootstrap p-value it is used, but for one at the
bootstrap's floor (two over the resamples plus one: no resample crossed zero), which
cannot survive a correction for many comparisons: there, and where the report has no
p-value, it is the normal approximation read from the 95% percentile interval (the
standard error is the interval's width over 2 x 1.96; two independent results add their
variances), and said so beside the sentences.

A difference is *told apart* when its Holm-adjusted p-value is below ``ALPHA`` and,
with several seeds, when it is also larger than the seeds' spread (the largest minus
the smallest seed's value) on each side: nothing is concluded that the seeds' spread
covers. With one seed the spread is unknown, and the findings say so. Between two runs
of one task, the models both runs trained the same way (M0, and M1: up to round 1 the
strategies are one recipe) are a replicate: their largest difference on any set is the
spread of one recipe run twice, and a difference between the strategies smaller than
that is not told apart either.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from .report import model_name, number, replace_block, rounds_of, suite_names

ALPHA = 0.05
Z95 = 1.959963984540054
# Two scores closer than this are "the same" as a constant answer (a model that
# learnt a label prior).
CONSTANT_TOLERANCE = 0.01
LISTED = 8  # comparisons not told apart are named up to this many, then counted


@dataclass
class Comparison:
    """One comparison in a family: ``what`` differs by ``difference`` (a fraction)."""

    what: str
    difference: float
    ci_low: float | None
    ci_high: float | None
    p_value: float
    spread: float | None = None  # the seeds' (or the replicate's) spread it must exceed
    adjusted: float = 1.0

    @property
    def told_apart(self) -> bool:
        if self.adjusted >= ALPHA:
            return False
        return self.spread is None or abs(self.difference) > self.spread

    def text(self) -> str:
        interval = ""
        if self.ci_low is not None and self.ci_high is not None:
            interval = f", {_points(self.ci_low)} to {_points(self.ci_high)}"
        return f"{self.what} ({_points(self.difference, signed=True)} points{interval}; Holm p {_p(self.adjusted)})"


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment: the adjusted p-values, in the given order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _adjust(family: list[Comparison]) -> list[Comparison]:
    for comparison, adjusted in zip(family, holm([c.p_value for c in family]), strict=True):
        comparison.adjusted = adjusted
    return family


def _se(stat: dict) -> float | None:
    low, high = number(stat.get("ci_low")), number(stat.get("ci_high"))
    if low is None or high is None:
        return None
    return (high - low) / (2 * Z95)


def approx_p(difference: float, se: float | None) -> float:
    """Two-sided p-value of ``difference`` against zero from its standard error."""
    if se is None:
        return 1.0
    if se == 0:
        return 0.0 if difference else 1.0
    return math.erfc(abs(difference) / se / math.sqrt(2))


def paired_p(stat: dict, resamples: int) -> float:
    """The paired test's bootstrap p-value, or at its floor the normal approximation
    from the paired interval (a smaller value the bootstrap could not resolve)."""
    p = float(stat["p_value"])
    if p > 2 / (resamples + 1) + 1e-12:
        return p
    return min(p, approx_p(float(stat["difference"]), _se(stat)))


def seed_spread(stat: dict | None) -> float | None:
    """The largest minus the smallest seed's value, or None with fewer than two seeds."""
    seeds = [v for v in ((stat or {}).get("by_seed") or []) if number(v) is not None]
    return max(seeds) - min(seeds) if len(seeds) >= 2 else None


def _wider(*spreads: float | None) -> float | None:
    known = [s for s in spreads if s is not None]
    return max(known) if known else None


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _points(value: float, signed: bool = False) -> str:
    text = f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"
    return text.replace("-", "\u2212")


def _p(value: float) -> str:
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def _ci(stat: dict) -> str:
    return f"{_pct(stat['accuracy'])} ({_points(stat['ci_low'])}\u2013{_points(stat['ci_high'])})"


def _listing(items: list[str]) -> str:
    return "; ".join(items)


def _results(entry: dict) -> dict:
    return {**(entry.get("test") or {}), **(entry.get("functional") or {})}


def _valid(stat: dict | None) -> bool:
    return bool(stat) and all(number(stat.get(k)) is not None for k in ("accuracy", "ci_low", "ci_high"))


def _sets(report: dict) -> list[str]:
    names: list[str] = []
    for entry in rounds_of(report):
        for name in (entry.get("test") or {}):
            if name not in names:
                names.append(name)
    return names + [s for s in suite_names(report) if s not in names]


# --- the families -----------------------------------------------------------------


def collection_family(report: dict) -> list[Comparison]:
    rounds = [r for r in rounds_of(report) if isinstance(r.get("collection"), dict)
              and number((r["collection"]).get("model_error_rate")) is not None]
    family = []
    for before, after in zip(rounds, rounds[1:], strict=False):
        a, b = after["collection"], before["collection"]
        difference = a["model_error_rate"] - b["model_error_rate"]
        se_a, se_b = _se(a), _se(b)
        se = None if se_a is None or se_b is None else math.hypot(se_a, se_b)
        family.append(Comparison(
            f"{after.get('name')} against {before.get('name')}: {_pct(a['model_error_rate'])} against "
            f"{_pct(b['model_error_rate'])}", difference, None, None, approx_p(difference, se),
            _wider(seed_spread(a), seed_spread(b))))
    return _adjust(family)


def _resamples(report: dict) -> int:
    return int(number((report.get("statistics") or {}).get("resamples")) or 1000)


def gain_family(report: dict) -> list[Comparison]:
    family = []
    for entry in rounds_of(report):
        gain = entry.get("gain_over_previous") or {}
        if number(gain.get("difference")) is None or number(gain.get("p_value")) is None:
            continue
        own = (entry.get("test") or {}).get(gain.get("test_set")) or {}
        family.append(Comparison(
            f"{model_name(entry)} against {gain.get('previous_model')} on {gain.get('test_set')}",
            gain["difference"], number(gain.get("ci_low")), number(gain.get("ci_high")),
            paired_p(gain, _resamples(report)),
            seed_spread(own)))
    return _adjust(family)


def control_comparisons(entry: dict) -> dict[str, dict]:
    """``{control: {set: paired comparison}}`` of one round (every control, or the one)."""
    if isinstance(entry.get("vs_controls"), dict):
        return entry["vs_controls"]
    return {"static": entry["vs_control"]} if isinstance(entry.get("vs_control"), dict) else {}


def control_family(report: dict, control: str = "static") -> list[Comparison]:
    family = []
    for entry in rounds_of(report):
        results = _results(entry)
        for name, stat in (control_comparisons(entry).get(control) or {}).items():
            if number((stat or {}).get("difference")) is None or number(stat.get("p_value")) is None:
                continue
            family.append(Comparison(f"{model_name(entry)} against its control on {name}", stat["difference"],
                                     number(stat.get("ci_low")), number(stat.get("ci_high")),
                                     paired_p(stat, _resamples(report)),
                                     seed_spread(results.get(name))))
    return _adjust(family)


def control_names(report: dict) -> list[str]:
    names: list[str] = []
    for entry in rounds_of(report):
        names += [name for name in control_comparisons(entry) if name not in names]
    return names


def _models(report: dict) -> list[dict]:
    """Every model the report scored: the rounds' and, from round 1, each control's."""
    models = list(rounds_of(report))
    for control in (report.get("controls") or {}).values():
        models += [r for r in (control or {}).get("rounds") or [] if isinstance(r, dict) and r.get("number")]
    return models


def majority_family(report: dict) -> list[Comparison]:
    """Every model against each set's majority answer: the report's paired test against that
    constant (``vs_majority``) where it has one, else the normal approximation."""
    references = report.get("references") or {}
    family = []
    for entry in _models(report):
        paired_tests = entry.get("vs_majority") or {}
        for name, stat in _results(entry).items():
            majority = number(((references.get(name) or {}).get("majority") or {}).get("accuracy"))
            if majority is None or not _valid(stat):
                continue
            difference = stat["accuracy"] - majority
            test = paired_tests.get(name) or {}
            if number(test.get("p_value")) is not None and number(test.get("difference")) is not None:
                p = paired_p(test, _resamples(report))
            else:
                p = approx_p(difference, _se(stat))
            family.append(Comparison(f"{model_name(entry)} on {name}: {_ci(stat)} against {_pct(majority)}",
                                     difference, None, None, p, seed_spread(stat)))
    return _adjust(family)


def forgetting_family(report: dict) -> list[Comparison]:
    rounds = [r for r in rounds_of(report) if r.get("number")]
    if len(rounds) < 2:
        return []
    last = rounds[-1]
    family = []
    for entry in rounds[:-1]:
        name = entry.get("name")
        then, now = (entry.get("test") or {}).get(name), (last.get("test") or {}).get(name)
        if not (_valid(then) and _valid(now)):
            continue
        difference = now["accuracy"] - then["accuracy"]
        se_now, se_then = _se(now), _se(then)
        family.append(Comparison(
            f"{model_name(last)} against {model_name(entry)} on {name}: {_ci(now)} against {_ci(then)}",
            difference, None, None, approx_p(difference, math.hypot(se_now, se_then)),
            _wider(seed_spread(now), seed_spread(then))))
    return _adjust(family)


def constant_models(report: dict) -> list[str]:
    """Models whose accuracy on every test set is within ``CONSTANT_TOLERANCE`` of one
    constant answer's (the same label everywhere): they learnt a label prior."""
    references = report.get("references") or {}
    found = []
    for entry in rounds_of(report):
        tests = {name: stat for name, stat in (entry.get("test") or {}).items() if _valid(stat)}
        if not tests:
            continue
        labels = set.intersection(*(set((references.get(n) or {}).get("constant") or {}) for n in tests))
        for label in sorted(labels):
            if all(abs(stat["accuracy"] - references[n]["constant"][label]) <= CONSTANT_TOLERANCE
                   for n, stat in tests.items()):
                found.append(f"{model_name(entry)} scores within {_points(CONSTANT_TOLERANCE)} points of always "
                             f"answering \u201c{label}\u201d on every test set ({len(tests)})")
                break
    return found


def replicate_spread(a: dict, b: dict) -> tuple[float | None, str]:
    """Between two runs of one task whose models M0 and M1 follow one recipe: their
    largest difference on any set, and where."""
    widest, where = None, ""
    first = {e.get("number"): e for e in rounds_of(a)}
    for entry in rounds_of(b):
        if entry.get("number") not in (0, 1) or entry.get("number") not in first:
            continue
        mine, theirs = _results(first[entry["number"]]), _results(entry)
        for name in sorted(set(mine) & set(theirs)):
            if _valid(mine[name]) and _valid(theirs[name]):
                gap = abs(mine[name]["accuracy"] - theirs[name]["accuracy"])
                if widest is None or gap > widest:
                    widest, where = gap, f"{model_name(entry)} on {name}"
    return widest, where


def strategy_family(a: dict, b: dict, spread: float | None) -> list[Comparison]:
    last_a, last_b = rounds_of(a)[-1], rounds_of(b)[-1]
    results_a, results_b = _results(last_a), _results(last_b)
    family = []
    for name in _sets(a):
        x, y = results_a.get(name), results_b.get(name)
        if not (_valid(x) and _valid(y)):
            continue
        difference = x["accuracy"] - y["accuracy"]
        family.append(Comparison(
            f"on {name}: `{a.get('strategy')}` {_ci(x)} against `{b.get('strategy')}` {_ci(y)}",
            difference, None, None, approx_p(difference, math.hypot(_se(x), _se(y))),
            _wider(spread, seed_spread(x), seed_spread(y))))
    return _adjust(family)


# --- the sentences --------------------------------------------------------------------


def _split(family: list[Comparison]) -> tuple[list[Comparison], list[Comparison], list[Comparison]]:
    up = [c for c in family if c.told_apart and c.difference > 0]
    down = [c for c in family if c.told_apart and c.difference < 0]
    level = [c for c in family if not c.told_apart]
    return up, down, level


def _family_bullets(family: list[Comparison], up: str, down: str, level: str,
                    describe: Callable[[Comparison], str] = Comparison.text) -> list[str]:
    if not family:
        return []
    ups, downs, levels = _split(family)
    lines = []
    if ups:
        lines.append(f"  - {up} ({len(ups)} of {len(family)}): " + _listing([describe(c) for c in ups]) + ".")
    if downs:
        lines.append(f"  - {down} ({len(downs)} of {len(family)}): " + _listing([describe(c) for c in downs]) + ".")
    if levels and len(levels) <= LISTED:
        lines.append(f"  - {level} ({len(levels)} of {len(family)}): "
                     + _listing([c.what for c in levels]) + ".")
    elif levels:
        which = "all" if len(levels) == len(family) else "the other"
        lines.append(f"  - {level}: {which} {len(levels)} of {len(family)} (every row in the tables).")
    return lines


def _seeds_line(report: dict) -> str:
    seeds = report.get("seeds") or []
    if len(seeds) < 2:
        return (f"One seed ({', '.join(map(str, seeds)) or '?'}): the seeds' spread is unknown, so a difference "
                "told apart here may not survive a second seed.")
    return (f"{len(seeds)} seeds ({', '.join(map(str, seeds))}): each value is the seeds' mean, and a difference "
            "is told apart only where it exceeds the seeds' spread on each side.")


def report_findings(report: dict) -> list[str]:
    """The findings of one run, as Markdown bullets."""
    lines = [f"- {_seeds_line(report)}"]
    constants = constant_models(report)
    if constants:
        lines += ["- Models that learnt a constant answer:"] + [f"  - {c}." for c in constants]
    families = [
        ("M(r\u22121)'s error on round r's examples, each round against the one before (Wilson intervals, "
         "normal approximation)", collection_family(report),
         "Higher than the round before", "Lower than the round before", "Not told apart"),
        ("Each model against the one before, on its own round's test split (paired bootstrap)",
         gain_family(report), "Better", "Worse", "Not told apart"),
        *((f"Each model against its {control} control C(r), on every test set and suite (paired bootstrap)",
           control_family(report, control), "Better than the control", "Worse than the control",
           "Not told apart") for control in control_names(report)),
        ("Every model, the controls' too, against the majority answer of every test set and suite (the "
         "report's paired test against that constant where it has one, else the normal approximation from "
         "the model's interval)", majority_family(report), "Above the majority answer",
         "Below the majority answer", "Not told apart from the majority answer"),
        ("The last model against each earlier round's own model on that round's test split (normal "
         "approximation, two independent intervals)", forgetting_family(report),
         "Higher than that round's own model", "Lower than that round's own model (forgotten in part)",
         "Not told apart"),
    ]
    for title, family, up, down, level in families:
        if family:
            lines.append(f"- {title}:")
            lines += _family_bullets(family, up, down, level)
    return lines


def strategy_findings(a: dict, b: dict) -> list[str]:
    """Two runs of one task and mode, different strategies: their last models side by side."""
    spread, where = replicate_spread(a, b)
    lines = []
    if spread is not None:
        lines.append(f"- The models both runs trained by one recipe (M0, M1) differ by up to "
                     f"{_points(spread)} points ({where}): a strategy difference no larger than that is not "
                     f"told apart.")
    family = strategy_family(a, b, spread)
    if family:
        lines.append(f"- The last models, `{a.get('strategy')}` against `{b.get('strategy')}` (normal "
                     "approximation, two independent intervals):")
        lines += _family_bullets(family, f"`{a.get('strategy')}` higher", f"`{a.get('strategy')}` lower",
                                 "Not told apart")
    return lines


TASK_NAMES = {"hate": "Hate speech", "nli": "NLI"}


def findings_section(reports: dict[str, dict]) -> str:
    """The findings block of docs/replay.md, from the committed reports ``{folder: report}``."""
    lines: list[str] = []
    for folder, report in reports.items():
        lines += [f"#### {TASK_NAMES.get(report.get('task'), report.get('task'))}, {report.get('mode')} mode, "
                  f"strategy `{report.get('strategy')}` (`{folder}`)", ""]
        lines += report_findings(report) + [""]
    # Strategies are compared only between runs of one design: the same task, mode, row
    # caps, rounds and seeds (the same examples, and the same evidence behind each value).
    groups: dict[tuple, list[tuple[str, dict]]] = {}
    for folder, report in reports.items():
        design = (report.get("task"), report.get("mode"),
                  json.dumps((report.get("data") or {}).get("caps"), sort_keys=True),
                  len(report.get("rounds") or []), tuple(report.get("seeds") or []))
        groups.setdefault(design, []).append((folder, report))
    for (task, mode, *_), group in groups.items():
        group = sorted(group, key=lambda item: str(item[1].get("strategy")))
        for i, (folder_a, a) in enumerate(group):
            for folder_b, b in group[i + 1:]:
                if a.get("strategy") == b.get("strategy"):
                    continue
                lines += [f"#### {TASK_NAMES.get(task, task)}, {mode} mode: `{a.get('strategy')}` against "
                          f"`{b.get('strategy')}` (`{folder_a}`, `{folder_b}`)", ""]
                lines += strategy_findings(a, b) + [""]
    return "\n".join(lines).rstrip() + "\n"


DOC_BEGIN = "<!-- replay:findings:begin (generated by manage.py replay_tables; do not edit) -->"
DOC_END = "<!-- replay:findings:end -->"


def with_findings(text: str, reports: dict[str, dict]) -> str:
    """``text`` (docs/replay.md) with the block between the markers replaced by ``findings_section``."""
    return replace_block(text, DOC_BEGIN, DOC_END, findings_section(reports), "findings block")
