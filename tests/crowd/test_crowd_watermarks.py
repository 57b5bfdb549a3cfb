"""The periodic crowd work reads what changed since its last run, never all of history:
the sync's quality check (per batch) and the bonus run (one watermark). A run's
queries do not grow with the history; a decision committed late is not lost; a
deadline passing alone settles; and the bonus run settles exactly what the old full
pass settled, at the same runs, over randomized histories."""

import random
import re
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from annotation import counters
from annotation.examples import example_signature
from annotation.models import AnnotationSession, Example, ValidatorReliability
from crowd import bonuses, sync, watermarks, workers
from crowd.models import Assignment, Batch, BonusPayment, Hit, TaskBlock, Watermark, WorkerIdentity
from tests.annotation.test_adaptive_validation import known

pytestmark = pytest.mark.django_db

LONG_AGO = timedelta(days=3)
SUBMIT_TO = "https://workersandbox.mturk.com"


# --- rows, written directly (the flows that make them are tested elsewhere) ------------


def batch_of(task, *, mode="create", threshold=None, bonus=Decimal("0.25"), per_assignment=2) -> Batch:
    batch = Batch.objects.create(
        task=task, round=task.open_round(), mode=mode, sandbox=True, title="t", description="d", hits=1,
        assignments_per_hit=100, examples_per_assignment=per_assignment, reward=Decimal("0.50"),
        bonus_per_example=bonus, quality_block_threshold=threshold, status=Batch.Status.PUBLISHED,
        auto_approval_delay_seconds=3 * 3600)
    Hit.objects.create(batch=batch, number=1, hit_id=uuid.uuid4().hex[:30].upper())
    return batch


def assignment_in(batch, worker_id, *, when, approved=True, auto_approval_at=None) -> Assignment:
    """A worker's assignment, MTurk-confirmed (and approved) at ``when``."""
    identity = workers.identity_for(worker_id, sandbox=True)
    WorkerIdentity.objects.filter(pk=identity.pk).update(verified_at=when)
    session = AnnotationSession.objects.create(user=identity.user, task=batch.task, mode=batch.mode)
    return Assignment.objects.create(
        hit=batch.hit_rows.get(), assignment_id=uuid.uuid4().hex[:30].upper(), worker=identity, session=session,
        status=Assignment.Status.APPROVED if approved else Assignment.Status.SUBMITTED, submit_to=SUBMIT_TO,
        deadline=when, finished_at=when, submitted_at=when, verified_at=when,
        decided_at=when if approved else None,
        auto_approval_at=auto_approval_at if auto_approval_at is not None else when + timedelta(hours=3))


def example_in(assignment, status=Example.ValidationStatus.PENDING, *, fooled=True, stamped=None,
               text="") -> Example:
    """An example written in the assignment; ``stamped``: its updated_at (as if decided then)."""
    session = assignment.session
    example = Example.objects.create(
        task=session.task, round=session.task.open_round(), annotator=session.user, session=session,
        inputs={"statement": text or uuid.uuid4().hex}, target={"label": "positive"}, fooled=fooled,
        validation_status=status)
    example.signature = example_signature(example)
    example.save(update_fields=["signature"])
    if stamped is not None:
        Example.objects.filter(pk=example.pk).update(updated_at=stamped)
    return example


def decide(example, status) -> None:
    """A decision, as validation's _count saves it (updated_at stamped now)."""
    example.validation_status = status
    example.save(update_fields=["validation_status", "updated_at"])


def count_queries(run) -> tuple[int, object]:
    with CaptureQueriesContext(connection) as queries:
        result = run()
    return len(queries), result


@pytest.fixture
def no_sending(monkeypatch):
    """Settlement only: the ledger rows stay pending (sending is tested elsewhere)."""
    monkeypatch.setattr(bonuses, "send", lambda payment: False)


# --- the quality check -------------------------------------------------------------------


def writers_history(batch, n, start=0):
    """``n`` confirmed writers of the batch, each with 6 examples decided long ago, all
    verified (above any threshold)."""
    then = timezone.now() - LONG_AGO
    for w in range(start, start + n):
        assignment = assignment_in(batch, f"AHISTORY{w:06d}", when=then)
        for _ in range(6):
            example_in(assignment, Example.ValidationStatus.VERIFIED, stamped=then)


def age_everything():
    """Whatever was stamped so far becomes old history, and every watermark an hour old."""
    then, hour_ago = timezone.now() - LONG_AGO, timezone.now() - timedelta(hours=1)
    Example.objects.update(updated_at=then)
    Assignment.objects.update(verified_at=then, decided_at=then)
    Assignment.objects.filter(worker_confirmed_at__isnull=False).update(worker_confirmed_at=then)
    ValidatorReliability.objects.update(fitted_at=then)
    Batch.objects.update(quality_checked_until=hour_ago)
    Watermark.objects.update(until=hour_ago)


def test_a_quality_check_reads_what_changed_not_the_history(demo_tasks, crowd, monkeypatch):
    task = demo_tasks["sentiment"]
    batch = batch_of(task, threshold=0.5)
    workers.block_qualification_id(True, task)  # made on MTurk once, before the counts
    judged = []
    real = workers.decided_counts
    monkeypatch.setattr(workers, "decided_counts", lambda ids, t=None: judged.extend(ids) or real(ids, t))

    def one_check():
        batch.refresh_from_db()
        return count_queries(lambda: sync.quality_blocks(batch, sync.SyncReport()))

    def measure(history, start):
        """Checks with nothing changed, then with one writer decided (below the threshold)."""
        writers_history(batch, history, start)
        age_everything()
        judged.clear()
        quiet, blocked = one_check()
        assert blocked == 0 and judged == []  # nothing changed: no one is read again
        assignment = assignment_in(batch, f"ABELOW{start:07d}", when=timezone.now())
        for n in range(6):  # 5 of 6 rejected
            example_in(assignment, Example.ValidationStatus.VERIFIED if n == 0 else Example.ValidationStatus.REJECTED)
        changed, blocked = one_check()
        assert blocked == 1 and TaskBlock.objects.filter(worker=assignment.worker, task=task).exists()
        assert judged == [assignment.worker.user_id]  # the unchanged writers of the history were not read
        return quiet, changed

    small = measure(5, 0)
    large = measure(45, 5)  # ten times the history: the same checks cost the same queries
    assert small == large and small[0] < small[1]
    # The first check after deploy (no watermark) reads everyone once: that one grows with the history.
    Batch.objects.update(quality_checked_until=None)
    judged.clear()
    one_check()
    assert len(judged) == 50


def test_a_writer_decided_before_the_watermark_and_unchanged_is_not_judged_again(demo_tasks, crowd):
    """A writer whose evidence all came before the watermark was judged by an earlier
    check and is not read again (so a block the task's researchers lifted stays
    lifted); one more decision of theirs, and they are judged again on all their rows."""
    task = demo_tasks["sentiment"]
    batch = batch_of(task, threshold=0.5)
    then = timezone.now() - LONG_AGO
    old = assignment_in(batch, "AOLDWRITER001", when=then)
    for _ in range(5):
        example_in(old, Example.ValidationStatus.REJECTED, stamped=then)
    Batch.objects.filter(pk=batch.pk).update(quality_checked_until=timezone.now() - timedelta(hours=1))
    batch.refresh_from_db()
    assert sync.quality_blocks(batch, sync.SyncReport()) == 0  # judged before the mark: not read
    # One more decision of theirs: judged again, on all their rows.
    decide(example_in(old), Example.ValidationStatus.REJECTED)
    assert sync.quality_blocks(batch, sync.SyncReport()) == 1
    assert TaskBlock.objects.get().worker == old.worker and "50%" in TaskBlock.objects.get().reason


def test_work_confirmed_after_it_was_decided_counts_at_the_next_check(demo_tasks, crowd):
    """Examples decided long ago, in an assignment MTurk confirms only now: their writer
    is judged on them (the confirmation is the change)."""
    task = demo_tasks["sentiment"]
    batch = batch_of(task, threshold=0.5)
    then = timezone.now() - LONG_AGO
    late = assignment_in(batch, "ALATECONFIRM1", when=then, approved=False)
    Assignment.objects.filter(pk=late.pk).update(verified_at=None)
    for _ in range(5):
        example_in(late, Example.ValidationStatus.REJECTED, stamped=then)
    sync.quality_blocks(batch, sync.SyncReport())
    assert not TaskBlock.objects.exists()  # unconfirmed work counts for nothing
    Assignment.objects.filter(pk=late.pk).update(verified_at=timezone.now())
    assert sync.quality_blocks(batch, sync.SyncReport()) == 1


def test_a_decision_committed_while_a_check_ran_is_judged_at_the_next(demo_tasks, crowd, monkeypatch):
    """A decision stamped just before a check's mark but committed after the check read
    (its transaction was still open) is not lost: the next check reads from the mark
    less the overlap."""
    task = demo_tasks["sentiment"]
    batch = batch_of(task, threshold=0.5)
    then = timezone.now() - LONG_AGO
    writer = assignment_in(batch, "ARACINGWRITER", when=then)
    for _ in range(4):
        example_in(writer, Example.ValidationStatus.REJECTED, stamped=then)
    last = example_in(writer, stamped=then)
    Batch.objects.filter(pk=batch.pk).update(quality_checked_until=timezone.now() - timedelta(hours=1))
    batch.refresh_from_db()
    real = workers.changed_since

    def read_then_commit(*args, **kwargs):
        changed = real(*args, **kwargs)
        decide(last, Example.ValidationStatus.REJECTED)  # after the read, within the run
        return changed

    monkeypatch.setattr(workers, "changed_since", read_then_commit)
    assert sync.quality_blocks(batch, sync.SyncReport()) == 0
    monkeypatch.setattr(workers, "changed_since", real)
    batch.refresh_from_db()
    mark = batch.quality_checked_until
    # Stamped before the mark: as if its transaction began before the check and committed after.
    Example.objects.filter(pk=last.pk).update(updated_at=mark - timedelta(seconds=1))
    assert sync.quality_blocks(batch, sync.SyncReport()) == 1
    assert TaskBlock.objects.get().worker == writer.worker


def test_a_check_whose_block_failed_keeps_its_watermark(demo_tasks, crowd, monkeypatch):
    task = demo_tasks["sentiment"]
    batch = batch_of(task, threshold=0.5)
    writer = assignment_in(batch, "AFAILEDBLOCK1", when=timezone.now())
    for _ in range(5):
        example_in(writer, Example.ValidationStatus.REJECTED)
    before = timezone.now() - timedelta(hours=1)
    Batch.objects.filter(pk=batch.pk).update(quality_checked_until=before)
    batch.refresh_from_db()
    from crowd import mturk

    def refuse(*args, **kwargs):
        raise mturk.MTurkError("throttled", "Rate exceeded")

    monkeypatch.setattr(workers, "task_block", refuse)
    report = sync.SyncReport()
    assert sync.quality_blocks(batch, report) == 0 and report.errors
    batch.refresh_from_db()
    assert batch.quality_checked_until == before  # the worker is judged again next time
    monkeypatch.undo()
    assert sync.quality_blocks(batch, sync.SyncReport()) == 1


def test_a_validation_batch_judges_the_validators_refitted_since(demo_tasks, crowd):
    task = demo_tasks["sentiment"]
    batch = batch_of(task, mode="validate", threshold=0.5, bonus=Decimal("0"))
    then = timezone.now() - LONG_AGO
    spammer = assignment_in(batch, "ASPAMMERSPAM1", when=then).worker
    careful = assignment_in(batch, "ACAREFULCARE1", when=then).worker
    known(task, careful.user, accuracy=0.97, votes=100)
    known(task, spammer.user, accuracy=0.97, votes=100)
    ValidatorReliability.objects.update(fitted_at=then)
    Batch.objects.filter(pk=batch.pk).update(quality_checked_until=timezone.now() - timedelta(hours=1))
    batch.refresh_from_db()
    assert sync.quality_blocks(batch, sync.SyncReport()) == 0  # no refit since the mark
    known(task, spammer.user, accuracy=0.5, votes=100)  # refitted now: a coin toss
    assert sync.quality_blocks(batch, sync.SyncReport()) == 1
    assert TaskBlock.objects.get().worker == spammer and "no evidence" in TaskBlock.objects.get().reason


# --- the bonus run ---------------------------------------------------------------------


def bonus_history(batch, n, start=0):
    """``n`` assignments approved long ago: settled then (their examples decided then),
    but every fifth one, which waits for its example, its deadline weeks away."""
    then = timezone.now() - LONG_AGO
    for a in range(start, start + n):
        if a % 5 == 4:
            far = timezone.now() + timedelta(weeks=3)
            waiting = assignment_in(batch, f"AWAITING{a:06d}", when=then, auto_approval_at=far)
            Assignment.objects.filter(pk=waiting.pk).update(bonus_settle_by=far)
            example_in(waiting, stamped=then)
            continue
        assignment = assignment_in(batch, f"ASETTLED{a:06d}", when=then)
        example_in(assignment, Example.ValidationStatus.VERIFIED, stamped=then)
        example_in(assignment, Example.ValidationStatus.REJECTED, stamped=then)
        BonusPayment.objects.create(assignment=assignment, reason=BonusPayment.Reason.VERIFIED_FOOLING,
                                    amount=Decimal("0.25"), example_count=1, message="m",
                                    unique_request_token=uuid.uuid4().hex, status=BonusPayment.Status.PAID,
                                    created_at=then, paid_at=then)


def small_change(batch, name):
    """One assignment approved now (settles at once, $0), and one waiting since long ago
    whose fooling example is decided now (settles)."""
    now = timezone.now()
    approved = assignment_in(batch, f"ANEW{name}", when=now)
    example_in(approved, Example.ValidationStatus.REJECTED)
    waiting = assignment_in(batch, f"AWAIT{name}", when=now - LONG_AGO,
                            auto_approval_at=now + timedelta(days=1))
    Assignment.objects.filter(pk=waiting.pk).update(bonus_settle_by=now + timedelta(days=1))
    pending = example_in(waiting, stamped=now - LONG_AGO)
    return approved, waiting, pending


def test_a_bonus_run_reads_what_changed_not_the_history(demo_tasks, no_sending, monkeypatch):
    task = demo_tasks["sentiment"]
    batch = batch_of(task)
    bonuses.pay_bonuses()  # the first run sets the watermark
    looked_at = []
    real = bonuses.settle
    monkeypatch.setattr(bonuses, "settle", lambda assignment, now=None: looked_at.append(assignment.pk)
                        or real(assignment, now))

    def measure(history, start):
        bonus_history(batch, history, start)
        age_everything()
        looked_at.clear()
        quiet, report = count_queries(bonuses.pay_bonuses)
        assert looked_at == [] and report.settled == report.waiting == 0
        approved, waiting, pending = small_change(batch, f"{start:05d}")
        changed, report = count_queries(bonuses.pay_bonuses)
        assert report.settled == 1 and report.waiting == 0 and looked_at == [approved.pk], report
        decide(pending, Example.ValidationStatus.VERIFIED)
        decided, report = count_queries(bonuses.pay_bonuses)
        assert report.settled == 1 and looked_at == [approved.pk, waiting.pk], report
        assert BonusPayment.objects.get(assignment=waiting).amount == Decimal("0.25")
        assert BonusPayment.objects.get(assignment=approved).amount == 0
        looked_at.clear()
        bonuses.pay_bonuses(full=True)  # the old pass walks every waiting assignment of the history
        assert len(looked_at) == (history + start) // 5
        return quiet, changed, decided

    small = measure(5, 0)
    large = measure(45, 5)  # ten times the history: the same runs cost the same queries
    assert small == large, (small, large)
    assert small[0] < small[1]  # a run with a change reads it


def test_settled_assignments_never_come_back(demo_tasks, no_sending, monkeypatch):
    """Whatever their examples do later, a settled assignment is never looked at again."""
    task = demo_tasks["sentiment"]
    batch = batch_of(task)
    bonus_history(batch, 3)
    bonuses.pay_bonuses()
    settled = Assignment.objects.first()
    for example in Example.objects.filter(session=settled.session):
        decide(example, Example.ValidationStatus.REJECTED)
    looked_at = []
    real = bonuses.settle
    monkeypatch.setattr(bonuses, "settle", lambda assignment, now=None: looked_at.append(assignment.pk)
                        or real(assignment, now))
    report = bonuses.pay_bonuses()
    assert looked_at == [] and report.settled == 0 and BonusPayment.objects.count() == 3
    assert bonuses.pay_bonuses(full=True).settled == 0 and looked_at == []
    assert BonusPayment.objects.filter(amount=Decimal("0.25")).count() == 3


def test_a_deadline_passing_alone_settles_the_assignment(demo_tasks, no_sending, monkeypatch):
    task = demo_tasks["sentiment"]
    batch = batch_of(task)
    start = timezone.now()
    clock = [start]
    monkeypatch.setattr(timezone, "now", lambda: clock[0])
    assignment = assignment_in(batch, "ADEADLINE0001", when=start, auto_approval_at=start + timedelta(hours=3))
    decided = example_in(assignment)
    example_in(assignment)  # never decided
    assert bonuses.pay_bonuses().waiting == 1
    assignment.refresh_from_db()
    assert assignment.bonus_settle_by == start + timedelta(hours=3)  # remembered for the run after it
    clock[0] = start + timedelta(minutes=30)
    decide(decided, Example.ValidationStatus.VERIFIED)
    clock[0] = start + timedelta(minutes=40)
    assert bonuses.pay_bonuses().waiting == 1  # one still undecided: it waits
    clock[0] = start + timedelta(hours=2)
    report = bonuses.pay_bonuses()
    assert report.settled == 0 and report.waiting == 0  # nothing changed: nothing read
    clock[0] = start + timedelta(hours=3, minutes=10)  # the deadline passed; nothing else changed
    report = bonuses.pay_bonuses()
    assert report.settled == 1, report
    ledger = BonusPayment.objects.get(assignment=assignment)
    assert ledger.amount == Decimal("0.25") and "1 undecided at the deadline" in ledger.note


def test_a_decision_committed_while_a_bonus_run_read_is_settled_by_the_next(demo_tasks, no_sending, monkeypatch):
    task = demo_tasks["sentiment"]
    batch = batch_of(task)
    then = timezone.now() - LONG_AGO
    assignment = assignment_in(batch, "ARACINGBONUS1", when=then, auto_approval_at=timezone.now() + LONG_AGO)
    pending = example_in(assignment, stamped=then)
    bonuses.pay_bonuses()  # the first run: it waits
    real = bonuses.changed_since

    def read_then_commit(since, now):
        changed = real(since, now)
        decide(pending, Example.ValidationStatus.VERIFIED)
        return changed

    monkeypatch.setattr(bonuses, "changed_since", read_then_commit)
    assert bonuses.pay_bonuses().settled == 0
    monkeypatch.setattr(bonuses, "changed_since", real)
    mark = watermarks.get(bonuses.BONUS_WATERMARK)
    Example.objects.filter(pk=pending.pk).update(updated_at=mark - timedelta(seconds=1))
    assert bonuses.pay_bonuses().settled == 1
    assert BonusPayment.objects.get().amount == Decimal("0.25")


def test_full_settles_what_the_watermark_pass_could_not_see(demo_tasks, no_sending):
    """``mturk_pay_bonuses --full`` walks every assignment still to settle: one approved
    behind the watermark's back (no stamp of its change) is settled by it only."""
    task = demo_tasks["sentiment"]
    batch = batch_of(task)
    watermarks.advance(bonuses.BONUS_WATERMARK, timezone.now())
    hidden = assignment_in(batch, "AHIDDEN000001", when=timezone.now() - LONG_AGO)
    example_in(hidden, Example.ValidationStatus.VERIFIED, stamped=timezone.now() - LONG_AGO)
    call_command("mturk_pay_bonuses")
    assert not BonusPayment.objects.exists()
    call_command("mturk_pay_bonuses", "--full")
    assert BonusPayment.objects.get().assignment == hidden


def test_a_run_for_one_batch_leaves_the_watermark_alone(demo_tasks, no_sending):
    task = demo_tasks["sentiment"]
    one, other = batch_of(task), batch_of(task)
    bonuses.pay_bonuses()
    mark = watermarks.get(bonuses.BONUS_WATERMARK)
    elsewhere = assignment_in(other, "AOTHERBATCH01", when=timezone.now())
    bonuses.pay_bonuses(one.pk)
    assert watermarks.get(bonuses.BONUS_WATERMARK) == mark
    assert not BonusPayment.objects.exists()
    assert bonuses.pay_bonuses().settled == 1 and BonusPayment.objects.get().assignment == elsewhere


# --- the same settlements as the full pass, over randomized histories ------------------


def _history(seed: int, start: datetime):
    """A randomized history: assignments submitted and approved at random times, with
    fooling (and other) examples decided, flagged, retracted or never decided at random
    times, some after the deadline; auto-approval times present or missing."""
    rng = random.Random(seed)
    plan, events = [], []
    for a in range(24):
        submitted = start + timedelta(minutes=rng.randrange(0, 180))
        kind = rng.choices(["auto", "submitted", "finished", "none"], weights=[6, 2, 1, 1])[0]
        approve_at = None if rng.random() < 0.1 else submitted + timedelta(minutes=rng.randrange(1, 200))
        examples = []
        for e in range(rng.randrange(0, 5)):
            fate = rng.choices(["verified", "rejected", "escalated", "flagged", "retracted", "never"],
                               weights=[5, 2, 1, 1, 1, 2])[0]
            when = submitted + timedelta(minutes=rng.randrange(-30, 330))
            examples.append((f"a{a}e{e}", rng.random() < 0.8, fate, when, rng.random() < 0.1))
        plan.append((f"A{seed:03d}{a:05d}", rng.randrange(2), submitted, kind, approve_at, examples))
        if approve_at is not None:
            events.append((approve_at, "approve", f"A{seed:03d}{a:05d}"))
        for key, _fooled, fate, when, _bad in examples:
            if fate != "never":
                events.append((when, fate, key))
    events.sort(key=lambda event: (event[0], event[1], event[2]))
    return plan, events


def _simulate(demo_tasks, monkeypatch, plan, events, start, run):
    """Build the history, play it with a run every ten minutes (at jittered times), and
    return each assignment's ledger row and the run that settled it."""
    clock = [start - timedelta(hours=1)]
    monkeypatch.setattr(timezone, "now", lambda: clock[0])
    task = demo_tasks["sentiment"]
    batches = [batch_of(task, per_assignment=2), batch_of(task, per_assignment=3)]
    assignments, examples = {}, {}
    for name, which, submitted, kind, _approve_at, planned in plan:
        batch = batches[which]
        identity = workers.identity_for(name, sandbox=True)
        session = AnnotationSession.objects.create(user=identity.user, task=task, mode="create")
        assignments[name] = Assignment.objects.create(
            hit=batch.hit_rows.get(), assignment_id=f"X{name}", worker=identity, session=session,
            status=Assignment.Status.SUBMITTED, submit_to=SUBMIT_TO, deadline=submitted,
            finished_at=submitted if kind in ("auto", "submitted", "finished") else None,
            submitted_at=submitted if kind in ("auto", "submitted") else None,
            auto_approval_at=submitted + timedelta(hours=3) if kind == "auto" else None)
        for n, (key, fooled, _fate, _when, bad_signature) in enumerate(planned):
            example = Example.objects.create(
                task=task, round=task.open_round(), annotator=identity.user, session=session,
                inputs={"statement": key}, target={"label": "positive"}, fooled=fooled,
                created_at=submitted - timedelta(minutes=10 - n))
            example.signature = "0" * 64 if bad_signature else example_signature(example)
            example.save(update_fields=["signature"])
            examples[key] = example
    settled_at = {}
    real_settle = bonuses.settle

    def settle(assignment, now=None):
        row = real_settle(assignment, now)
        if row is not None:
            settled_at.setdefault(assignment.assignment_id, now)
        return row

    monkeypatch.setattr(bonuses, "settle", settle)
    rng = random.Random(len(events))
    tick, pending = start, list(events)
    while tick < start + timedelta(hours=12):
        while pending and pending[0][0] <= tick:
            when, what, key = pending.pop(0)
            clock[0] = when
            if what == "approve":
                assignment = assignments[key]
                assignment.status, assignment.verified_at, assignment.decided_at = \
                    Assignment.Status.APPROVED, when, when
                assignment.save(update_fields=["status", "verified_at", "decided_at"])
                WorkerIdentity.objects.filter(pk=assignment.worker_id).update(verified_at=when)
                continue
            example = examples[key]
            if what == "flagged":
                example.flagged = True
                example.save(update_fields=["flagged", "updated_at"])
            elif what == "retracted":
                example.retracted = True
                example.save(update_fields=["retracted", "updated_at"])
            else:
                decide(example, what)
        clock[0] = tick
        run()
        tick += timedelta(minutes=10, seconds=rng.randrange(-90, 90))
    keys = {example.pk: key for key, example in examples.items()}
    ledger = {row.assignment.assignment_id: (row.amount, row.example_count, sorted(keys[pk] for pk in row.example_ids),
                                             row.note, row.status)
              for row in BonusPayment.objects.select_related("assignment")}
    return ledger, settled_at


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_watermark_pass_settles_what_the_full_pass_settles_at_the_same_runs(demo_tasks, no_sending,
                                                                                 monkeypatch, seed):
    start = datetime(2031, 3, 1, 9, 0, tzinfo=UTC)
    plan, events = _history(seed, start)
    outcomes = []
    for run in (lambda: bonuses.pay_bonuses(full=True), bonuses.pay_bonuses):
        with transaction.atomic():
            outcomes.append(_simulate(demo_tasks, monkeypatch, plan, events, start, run))
            transaction.set_rollback(True)
        monkeypatch.undo()
        monkeypatch.setattr(bonuses, "send", lambda payment: False)
    (full_ledger, full_times), (ledger, times) = outcomes
    assert ledger == full_ledger
    assert times == full_times
    # The history exercised every way to settle: paid, $0, and at the deadline.
    amounts = [row[0] for row in full_ledger.values()]
    assert any(amounts) and not all(amounts)
    assert any("undecided at the deadline" in row[3] for row in full_ledger.values())
    assert len(full_ledger) >= 12


# --- the indexes that serve the reads ------------------------------------------------------


def _plan(queryset) -> str:
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:  # tiny tables: ask whether an index can serve it
                cursor.execute("SET LOCAL enable_seqscan = off")
        return queryset.explain()


def test_the_changed_since_reads_and_the_due_payments_use_indexes(demo_tasks):
    task = demo_tasks["sentiment"]
    since = timezone.now()
    plans = {
        "example_task_updated": Example.objects.filter(task=task, updated_at__gte=since),
        "assignment_verified_at": Assignment.objects.filter(verified_at__gte=since),
        "assignment_status_decided": Assignment.objects.filter(status=Assignment.Status.APPROVED,
                                                               decided_at__gte=since),
        "assignment_bonus_settle_by": Assignment.objects.filter(bonus_settle_by__gte=since,
                                                                bonus_settle_by__lte=since),
        "bonus_due": BonusPayment.objects.filter(status__in=[BonusPayment.Status.PENDING,
                                                             BonusPayment.Status.FAILED],
                                                 next_attempt_at__lte=since),
        "reliability_task_fitted": ValidatorReliability.objects.filter(task=task, fitted_at__gte=since),
    }
    for index, queryset in plans.items():
        assert index in _plan(queryset.order_by()), (index, _plan(queryset.order_by()))


def test_with_a_tasks_history_the_reads_of_examples_take_the_narrow_index(demo_tasks):
    """A task with a history of many writers' examples, its statistics gathered: the
    examples changed since a watermark are found by (task, updated_at), and a writer's
    record comes from their counters (a row per round), not from their examples."""
    task = demo_tasks["sentiment"]
    batch = batch_of(task)
    then = timezone.now() - LONG_AGO
    sessions = [assignment_in(batch, f"AHISTORY{n:06d}", when=then).session for n in range(80)]
    writers = [session.user for session in sessions]
    examples = Example.objects.bulk_create([
        Example(task=task, round=task.open_round(), annotator=writers[n % 80], session=sessions[n % 80],
                inputs={"statement": str(n)}, target={"label": "positive"}, fooled=n % 3 == 0,
                validation_status=("verified", "rejected", "pending")[n % 3]) for n in range(4000)])
    counters.record_new(examples)
    Example.objects.update(updated_at=then)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    recent = Example.objects.filter(task=task, updated_at__gte=timezone.now() - timedelta(minutes=10),
                                    source=Example.Source.ANNOTATION).order_by().values("annotator_id")
    assert "example_task_updated" in recent.explain()
    with CaptureQueriesContext(connection) as queries:
        counts = workers.decided_counts([writers[0].pk, writers[1].pk], task)
    # 50 examples each (n = w + 80k): the statuses cycle with k, so (decided, verified)
    # is (33, 17) for the first writer and (34, 17) for the second, as the rows say.
    assert counts == {writers[0].pk: (33, 17), writers[1].pk: (34, 17)}
    rows = workers.with_quality(WorkerIdentity.objects.filter(user__in=writers[:2]), task)
    assert counts == {row.user_id: (row.decided, row.verified) for row in rows}
    assert all("annotation_example" not in query["sql"] for query in queries.captured_queries)


BIG_TABLES = ("annotation_example", "crowd_assignment", "crowd_bonuspayment", "annotation_validatorreliability")


def _full_scans(queries) -> list[str]:
    """The big tables the captured SELECTs would read whole (no index can serve them)."""
    found = []
    for query in queries:
        sql = query["sql"]
        if not sql.startswith("SELECT"):
            continue
        with transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute("EXPLAIN " + sql)
            else:
                cursor.execute("EXPLAIN QUERY PLAN " + sql)
            plan = "\n".join(str(row) for row in cursor.fetchall())
        found += [f"{table}: {sql[:300]}\n{plan}" for table in BIG_TABLES
                  if re.search(rf"(SCAN|Seq Scan on) {table}\b", plan)]
    return found


def test_runs_after_the_first_read_no_big_table_whole(demo_tasks, crowd, no_sending):
    task = demo_tasks["sentiment"]
    writing, checking = batch_of(task, threshold=0.5), batch_of(task, mode="validate", threshold=0.5,
                                                                bonus=Decimal("0"))
    writers_history(writing, 3)
    assignment_in(checking, "AVALIDATOR001", when=timezone.now())
    bonus_history(writing, 3)
    for batch in (writing, checking):
        sync.quality_blocks(batch, sync.SyncReport())
    bonuses.pay_bonuses()
    age_everything()
    approved, waiting, pending = small_change(writing, "PLAN")
    decide(pending, Example.ValidationStatus.VERIFIED)
    known(task, checking.hit_rows.get().assignments.get().worker.user, accuracy=0.5, votes=100)
    with CaptureQueriesContext(connection) as queries:
        for batch in (writing, checking):
            batch.refresh_from_db()
            sync.quality_blocks(batch, sync.SyncReport())
        assert bonuses.pay_bonuses().settled == 2
    assert TaskBlock.objects.count() == 1
    assert _full_scans(queries.captured_queries) == []


def test_a_validation_worker_who_fails_the_gold_items_is_blocked_on_the_task(demo_tasks, crowd, researcher):
    """Votes on a validation batch are judged by the gold items too: a worker who says
    "correct" to everything (no reliability estimate needed) is blocked at the next
    check; one who answers them rightly is not."""
    from annotation import serving, validation
    from tests.annotation.test_trust import account, write

    task = demo_tasks["sentiment"]
    batch = batch_of(task, mode="validate")
    writer = account("gold_writer")
    items = [validation.mark_gold(write(task, writer, text=f"Gold {i}").pk, researcher,
                                  "incorrect" if i % 2 else "correct")
             for i in range(6)]
    careless = assignment_in(batch, "ACARELESS00001", when=timezone.now())
    careful = assignment_in(batch, "ACAREFUL000001", when=timezone.now())
    for item in items:
        for assignment, label in ((careless, "correct"), (careful, item.gold_verdict)):
            serving.assign(item, assignment.worker.user)
            validation.give_blind_answer(item.pk, assignment.worker.user, item.target)
            validation.validate_example(item.pk, assignment.worker.user, label=label, session=assignment.session)
    assert sync.quality_blocks(batch, sync.SyncReport()) == 1
    block = TaskBlock.objects.get()
    assert block.worker == careless.worker and "checked items" in block.reason
