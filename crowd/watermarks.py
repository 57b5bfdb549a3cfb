"""Watermarks: how far a periodic crowd job has read what changed.

The sync's quality check (``crowd.sync.quality_blocks``, per batch:
``Batch.quality_checked_until``) and the bonus run (``crowd.bonuses.pay_bonuses``:
the ``Watermark`` row named ``bonuses``) read only the rows stamped since their last
run (decisions, confirmations, approvals, refits, deadlines), never all of history:
a run costs what changed since the last one.

A run takes its new watermark *before* it reads, and stores it only once its work
is done; the next run reads from that mark less ``OVERLAP``. Rows are stamped by
the application when they are saved, and committed a little later, by whichever
process saved them: a row stamped just before a mark and committed after the run
read is still seen by the next run, as long as its commit came within ``OVERLAP``
(longer than any transaction that stamps one of these times, and than the hosts'
clocks disagree). What falls in the overlap is read twice; every reader is safe
to run again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from .models import Watermark

OVERLAP = timedelta(minutes=5)


def read_from(mark: datetime | None) -> datetime | None:
    """Where a run reads from, given the last run's mark (None: from the start)."""
    return None if mark is None else mark - OVERLAP


def get(name: str) -> datetime | None:
    return Watermark.objects.filter(name=name).values_list("until", flat=True).first()


def advance(name: str, until: datetime) -> None:
    """Move the watermark forward to ``until`` (never back: a slower run that started
    earlier leaves a later run's mark alone)."""
    Watermark.objects.bulk_create([Watermark(name=name, until=until)], ignore_conflicts=True)
    Watermark.objects.filter(name=name, until__lt=until).update(until=until)


def chunks(values, size: int = 500):
    """``values`` in lists of at most ``size`` (for ``__in`` lookups)."""
    values = list(values)
    for start in range(0, len(values), size):
        yield values[start:start + size]
