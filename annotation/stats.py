"""Round statistics, read from the counters (``services.counters``).

The platform's headline number, the verified model error rate (verified
model-fooling examples / examples collected), and every count beside it come from
counters that each write keeps in its own transaction and that ``manage.py
reconcile_counts`` recounts from the rows and repairs (tests drive every write path
and check that a recount finds nothing to repair). A page reads a few counter rows,
whatever the number of examples. Collected means written on the platform
(``source="annotation"``), not retracted, and not written in an MTurk assignment
that MTurk has not confirmed yet (a worker id typed into a URL moves no public
number); imported data is not collected.
"""

from __future__ import annotations

from django.db.models import F, QuerySet, Value
from django.db.models.functions import Coalesce

from tasks.models import Round

from . import counters
from .exporting import anonymise
from .models import SPLITS, WriterCounts

# The most annotators a round's statistics list (the top writers by verified fooling examples).
ANNOTATORS_SHOWN = 100

SUMMED = {"n_collected": "collected", "n_fooled": "fooled", "n_verified": "verified",
          "n_verified_fooled": "verified_fooled", "n_rejected": "rejected", "n_validations": "decisions"}
USABLE = tuple(f"usable_{split}" for split in SPLITS)


def rate(num: int, den: int) -> float | None:
    return num / den if den else None


def verified_rate(verified_fooled: int, collected: int, decided: int) -> float | None:
    """The verified model error rate: verified model-fooling examples / examples
    collected; None (shown as "–") until at least one collected example is decided
    (verified or rejected): before that a 0 would claim that no example fooled the
    model for sure, when none has been checked yet."""
    return rate(verified_fooled, collected) if decided else None


def with_counts(rounds: QuerySet) -> QuerySet:
    """``rounds`` annotated with ``n_collected``, ``n_fooled``, ``n_verified``,
    ``n_verified_fooled``, ``n_rejected``, ``n_validations`` (decisions on collected
    examples) and ``n_usable`` (usable examples of any source, every split: what models
    learn from and are tested on; for round 0, its imported static data), from their
    counter rows: one join, one row per round."""
    usable = sum((F(f"counts__{name}") for name in USABLE[1:]), F(f"counts__{USABLE[0]}"))
    return rounds.annotate(**{name: Coalesce(F(f"counts__{field}"), Value(0)) for name, field in SUMMED.items()},
                           n_usable=Coalesce(usable, Value(0)))


def summary(rnd: Round) -> dict:
    """The counts and rates of a round annotated by ``with_counts``."""
    return {
        "collected": rnd.n_collected,
        "fooled": rnd.n_fooled,
        "verified": rnd.n_verified,
        "verified_fooled": rnd.n_verified_fooled,
        "decided": rnd.n_verified + rnd.n_rejected,
        "validations": rnd.n_validations,
        "usable": rnd.n_usable,
        "model_error_rate": rate(rnd.n_fooled, rnd.n_collected),
        "verified_model_error_rate": verified_rate(rnd.n_verified_fooled, rnd.n_collected,
                                                   rnd.n_verified + rnd.n_rejected),
    }


def round_stats(rnd: Round, *, identify: bool = False) -> dict:
    """A round's counts and rates, per annotator too (the ``ANNOTATORS_SHOWN`` with the
    most verified model-fooling examples), and how often blind validators agreed with
    the writers' answers. ``identify`` (researchers' pages only) adds each annotator's
    username next to the pseudonym."""
    counts = counters.counts_of(rnd)
    writers = (WriterCounts.objects.filter(round=rnd, collected__gt=0)
               .order_by("-verified_fooled", "-fooled", "annotator_id"))
    if identify:
        writers = writers.select_related("annotator")
    shown = list(writers[:ANNOTATORS_SHOWN])
    target_models = list(rnd.target_models.order_by("pk").values_list("name", flat=True))

    def annotator_row(row: WriterCounts):
        return {
            "annotator": anonymise(row.annotator_id), "collected": row.collected,
            "fooled": row.fooled, "verified_fooled": row.verified_fooled,
            "model_error_rate": rate(row.fooled, row.collected),
            "verified_model_error_rate": rate(row.verified_fooled, row.collected),
            "blind_answers": row.blind_answers, "blind_agreement": rate(row.blind_agreeing, row.blind_answers),
            **({"username": row.annotator.get_username()} if identify else {}),
        }

    return {
        "task": rnd.task.slug,
        "round": rnd.number,
        "status": rnd.status,
        "collected": counts["collected"],
        "fooled": counts["fooled"],
        "verified": counts["verified"],
        "verified_fooled": counts["verified_fooled"],
        "validations": counts["decisions"],
        "model_error_rate": rate(counts["fooled"], counts["collected"]),
        "verified_model_error_rate": verified_rate(counts["verified_fooled"], counts["collected"],
                                                   counts["verified"] + counts["rejected"]),
        "blind_answers": counts["blind_answers"],
        "blind_agreement": rate(counts["blind_agreeing"], counts["blind_answers"]),
        "target_models": target_models,
        "annotators": [annotator_row(row) for row in shown],
        "annotators_total": len(shown) if len(shown) < ANNOTATORS_SHOWN else writers.count(),
    }
