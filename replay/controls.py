"""The replay's controls: which static rows stand in for a round's adversarial ones. Pure, no Django.

- ``static``: the next fresh rows of the control pool (``plan.control_pool``), in
  its hash order, whatever their labels: the static data's own label balance
  (Davidson: about one row in twenty hateful), so the control stays close to the
  majority answer and partly measures a label prior.
- ``balanced``: as many rows, with the round's label shares (the labels of the
  rows M(r) learnt as new, ``label_shares``): for each label, the pool's next
  fresh rows of that label in hash order; where the pool runs out of a label, its
  rows are drawn again in the same order (resampling with repetition), and the
  count of repeated rows is reported. It asks whether adversarial data beats
  static data with the same label balance.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from datafiles.readers import Record

CONTROLS = ("static", "balanced")
DESCRIPTIONS = {
    "static": "the same recipe with as many fresh static examples in place of each round's adversarial ones "
              "(round 0: M0 itself)",
    "balanced": "the same recipe with as many static examples, resampled to each round's label shares, in place "
                "of its adversarial ones (round 0: M0 itself)",
}


def control_names(control) -> list[str]:
    """The controls asked for: None, one name, or several (a list, or names joined by commas)."""
    if not control:  # None, "" or [] (the command's --control left out)
        return []
    names = control.split(",") if isinstance(control, str) else list(control)
    names = [str(n).strip() for n in names]
    unknown = [n for n in names if n not in CONTROLS]
    if unknown or not names:
        raise ValueError(f"Unknown control {', '.join(unknown) or repr(control)}; use one of {', '.join(CONTROLS)}.")
    return list(dict.fromkeys(names))


def label_shares(records: Iterable[Record]) -> dict[str, float]:
    """Each label's share of ``records`` (sorted by label)."""
    counts = Counter(r.label for r in records)
    total = sum(counts.values())
    return {label: counts[label] / total for label in sorted(counts)} if total else {}


def quotas(count: int, shares: dict[str, float]) -> dict[str, int]:
    """``count`` split by ``shares`` (largest remainder; ties by label), summing to ``count``."""
    if not shares:
        return {}
    exact = {label: count * share / sum(shares.values()) for label, share in shares.items()}
    out = {label: int(value) for label, value in exact.items()}
    for label in sorted(exact, key=lambda k: (-(exact[k] - out[k]), k))[:count - sum(out.values())]:
        out[label] += 1
    return out


class BalancedSampler:
    """Draws static rows with given label shares from the control pool, fresh rows first.

    Each label keeps a cursor into the pool's rows of that label (in pool order), shared
    by every draw, so no row repeats until that label's rows are used up; after that
    they are drawn again from the start of the same order (``repeated`` counts them)."""

    def __init__(self, pool: list[Record]):
        self.by_label: dict[str, list[Record]] = {}
        for record in pool:
            self.by_label.setdefault(record.label, []).append(record)
        self.cursor: Counter = Counter()
        self.repeated = 0

    def draw(self, count: int, shares: dict[str, float]) -> list[Record]:
        """``count`` rows with ``shares`` of labels (labels the pool lacks are left out and
        their share goes to the others)."""
        usable = {label: share for label, share in shares.items() if self.by_label.get(label) and share > 0}
        rows = []
        for label, n in quotas(count, usable).items():
            members = self.by_label[label]
            for _ in range(n):
                position = self.cursor[label]
                self.repeated += position >= len(members)
                rows.append(members[position % len(members)])
                self.cursor[label] += 1
        return rows
