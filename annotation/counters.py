"""Counters: the numbers the pages show, kept beside the rows and reconciled.

A page never counts examples or validations: it reads ``RoundCounts`` (one row per
round) and ``WriterCounts`` (one row per round and writer); what a row holds is written
down in those models. A crowd quality check reads a writer's record from the same rows
(``record_decided``, ``record_verified``), so it costs the writers it checks, not
their history. ``Example.save`` and ``Validation.save`` keep them: the row and
its counters change in one transaction, by ``F()`` updates, so concurrent writers never
lose each other's changes, and whichever service (or admin action) saves an example, its
numbers follow. When an example starts or stops being collected (written, retracted,
its MTurk assignment confirmed), its validations' decisions and blind answers move with
it. The bulk paths that do not call ``save`` use ``record_new`` (imports) and
``models.forget_examples`` (deletes).

A task's numbers are the sum over its rounds (``task_totals``): a few rows.

``reconcile`` recounts every counter from the rows, repairs the ones that drifted and
reports each repair: ``manage.py reconcile_counts`` and the beat run it. Each round is
recounted under a lock on its counter row, so a write that commits meanwhile is neither
lost nor counted twice. Writes that go around ``save`` (an SQL console, a queryset
``update()``, a user deleted with their validations) leave drift that only the
reconcile repairs.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from tasks.models import Round, Task

from .models import (
    DECISIONS,
    REJECTED,
    ROUND_COUNTS,
    SPLITS,
    VERIFIED,
    WRITER_COUNTS,
    Example,
    RoundCounts,
    Tally,
    Validation,
    WriterCounts,
    example_share,
)

log = logging.getLogger(__name__)


def collected_q(prefix: str = "") -> Q:
    """The rows' condition for a collected example (``prefix``: a path to the example)."""
    return Q(**{f"{prefix}source": Example.Source.ANNOTATION, f"{prefix}retracted": False,
                f"{prefix}provisional": False})


def usable_q(prefix: str = "") -> Q:
    return Q(**{f"{prefix}validation_status": VERIFIED, f"{prefix}flagged": False, f"{prefix}retracted": False})


def against_writer_q() -> Q:
    """The rows' condition for ``models.counts_against_writer``: rejected, or retracted
    while heading for rejection."""
    undecided = [Example.ValidationStatus.PENDING, Example.ValidationStatus.ESCALATED]
    return (Q(validation_status=REJECTED)
            | Q(retracted=True, validation_status__in=undecided, validations_incorrect__gt=0,
                validations_incorrect__gte=F("validations_correct")))


def in_record_q() -> Q:
    """The rows' condition for ``models.in_record``, but for the source and the
    confirmation: verified, or ``against_writer_q``."""
    return Q(validation_status=VERIFIED) | against_writer_q()


def record_new(examples: Iterable[Example]) -> None:
    """Examples stored without ``save`` (``bulk_create``), with no validations yet, join
    the counters (call it in the storing transaction)."""
    tally = Tally()
    for example in examples:
        tally.add(example.round_id, example.annotator_id, example_share(example))
    tally.apply()


def _counted_vote_filter() -> dict:
    return {"example__source": Example.Source.ANNOTATION, "counted": True, "mode": Validation.Mode.USER,
            "label__in": DECISIONS}


# --- reading them -------------------------------------------------------------------------------


def counts_of(rnd: Round) -> dict[str, int]:
    """A round's counters (zeros for a round nothing was counted in yet)."""
    row = RoundCounts.objects.filter(round=rnd).first()
    return {name: getattr(row, name) if row else 0 for name in ROUND_COUNTS}


def task_totals(task: Task, *, numbers: Iterable[int] | None = None) -> dict[str, int]:
    """The sum of the counters of ``task``'s rounds (of round ``numbers`` only, if given)."""
    rows = RoundCounts.objects.filter(round__task=task)
    if numbers is not None:
        rows = rows.filter(round__number__in=list(numbers))
    totals = rows.aggregate(**{name: Sum(name) for name in ROUND_COUNTS})
    return {name: totals[name] or 0 for name in ROUND_COUNTS}


# --- reconciling -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drift:
    """One counter the reconcile found wrong, and repaired."""

    round_id: int
    task: str
    round_number: int
    name: str
    stored: int
    actual: int
    annotator_id: int | None = None

    @property
    def drift(self) -> int:
        return self.stored - self.actual

    def __str__(self):
        whose = f" writer {self.annotator_id}" if self.annotator_id is not None else ""
        return (f"{self.task} round {self.round_number}{whose} {self.name}: stored {self.stored}, "
                f"counted {self.actual} (drift {self.drift:+d})")


def _actual_round(rnd: Round) -> Counter:
    examples = Example.objects.filter(round=rnd)
    collected = collected_q()
    fooled = Q(fooled=True)
    aggregates = {
        "collected": Count("pk", filter=collected),
        "fooled": Count("pk", filter=collected & fooled),
        "verified": Count("pk", filter=collected & Q(validation_status=VERIFIED)),
        "verified_fooled": Count("pk", filter=collected & fooled & Q(validation_status=VERIFIED)),
        "rejected": Count("pk", filter=collected & Q(validation_status=REJECTED)),
        "rejected_fooled": Count("pk", filter=collected & fooled & Q(validation_status=REJECTED)),
    }
    for split in SPLITS:
        aggregates[f"usable_{split}"] = Count("pk", filter=usable_q() & Q(split=split))
        aggregates[f"usable_fooled_{split}"] = Count("pk", filter=usable_q() & fooled & Q(split=split))
    # Aliased apart from the field names (an aggregate named "fooled" would shadow the field).
    counted = examples.aggregate(**{f"n_{name}": aggregate for name, aggregate in aggregates.items()})
    actual = Counter({name.removeprefix("n_"): n for name, n in counted.items()})
    on_collected = Validation.objects.filter(Q(example__round=rnd) & collected_q("example__"))
    actual.update(on_collected.aggregate(
        decisions=Count("pk", filter=~Q(label="")),
        blind_answers=Count("pk", filter=Q(blind_answer__isnull=False)),
        blind_agreeing=Count("pk", filter=Q(blind_answer__isnull=False, blind_agrees=True))))
    actual["counted_votes"] = Validation.objects.filter(example__round=rnd, **_counted_vote_filter()).count()
    return actual


def _actual_writers(rnd: Round) -> dict[int, Counter]:
    writers: dict[int, Counter] = defaultdict(Counter)
    collected = (Example.objects.filter(collected_q(), round=rnd, annotator__isnull=False).order_by()
                 .values("annotator_id")
                 .annotate(n_collected=Count("pk"), n_fooled=Count("pk", filter=Q(fooled=True)),
                           n_verified=Count("pk", filter=Q(validation_status=VERIFIED)),
                           n_verified_fooled=Count("pk", filter=Q(fooled=True, validation_status=VERIFIED))))
    for row in collected:
        annotator_id = row.pop("annotator_id")
        writers[annotator_id].update({name.removeprefix("n_"): n for name, n in row.items()})
    record = (Example.objects.filter(in_record_q(), round=rnd, annotator__isnull=False,
                                     source=Example.Source.ANNOTATION, provisional=False)
              .order_by().values("annotator_id")
              .annotate(n_record_decided=Count("pk"),
                        n_record_verified=Count("pk", filter=Q(validation_status=VERIFIED))))
    for row in record:
        annotator_id = row.pop("annotator_id")
        writers[annotator_id].update({name.removeprefix("n_"): n for name, n in row.items()})
    blind = (Validation.objects.filter(collected_q("example__"), example__round=rnd,
                                       example__annotator__isnull=False, blind_answer__isnull=False)
             .order_by().values("example__annotator_id")
             .annotate(blind_answers=Count("pk"), blind_agreeing=Count("pk", filter=Q(blind_agrees=True))))
    for row in blind:
        writers[row.pop("example__annotator_id")].update(row)
    return writers


def reconcile_round(rnd: Round) -> list[Drift]:
    """Recount ``rnd``'s counters from its rows and repair those that drifted."""
    drifts = []
    with transaction.atomic():
        RoundCounts.objects.get_or_create(round=rnd)
        # The lock: a write in this round that commits meanwhile waits for it, then adds
        # its change to the repaired count (or committed before, and is in the recount).
        stored = RoundCounts.objects.select_for_update().get(round=rnd)
        actual = _actual_round(rnd)
        changed = []
        for name in ROUND_COUNTS:
            if getattr(stored, name) != actual[name]:
                drifts.append(Drift(rnd.pk, rnd.task.slug, rnd.number, name, getattr(stored, name), actual[name]))
                setattr(stored, name, actual[name])
                changed.append(name)
        stored.reconciled_at = timezone.now()
        stored.save(update_fields=[*changed, "reconciled_at"])

        writers = _actual_writers(rnd)
        rows = {row.annotator_id: row for row in WriterCounts.objects.select_for_update().filter(round=rnd)}
        for annotator_id in sorted(set(rows) | set(writers)):
            row, counted = rows.get(annotator_id), writers.get(annotator_id, Counter())
            if row is None:
                row = WriterCounts(round=rnd, annotator_id=annotator_id)
            wrong = [name for name in WRITER_COUNTS if getattr(row, name) != counted[name]]
            for name in wrong:
                drifts.append(Drift(rnd.pk, rnd.task.slug, rnd.number, name, getattr(row, name), counted[name],
                                    annotator_id))
                setattr(row, name, counted[name])
            if not any(counted.values()):
                if row.pk:
                    row.delete()
            elif wrong:
                row.save()
    for drift in drifts:
        log.warning("counter repaired: %s", drift)
    return drifts


def reconcile(task: Task | None = None) -> list[Drift]:
    """Recount every round's counters (of ``task`` only, if given); the repairs made."""
    rounds = Round.objects.select_related("task").order_by("task__slug", "number")
    if task is not None:
        rounds = rounds.filter(task=task)
    drifts = []
    for rnd in rounds:
        drifts.extend(reconcile_round(rnd))
    return drifts
