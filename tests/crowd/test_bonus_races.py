"""Two bonus runs at once, on PostgreSQL's row locks: every bonus is sent once."""

import threading

import pytest
from django.db import connection

from annotation import validation
from annotation.models import Example
from crowd import bonuses, sync
from crowd.models import BonusPayment
from tests.crowd.test_crowd_flow import OTHER_WORKER, WORKER, do_one_assignment, make_batch


def pay_at_once(racers: int) -> list:
    """``racers`` bonus runs started together, each in its own thread and connection: their reports."""
    barrier = threading.Barrier(racers)
    reports, failures = [], []

    def pay():
        from django.db import connection as thread_connection

        try:
            barrier.wait()
            reports.append(bonuses.pay_bonuses())
        except Exception as exc:  # noqa: BLE001  (reported below, with the others)
            failures.append(repr(exc))
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=pay) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    return reports


@pytest.mark.django_db(transaction=True)
def test_two_pay_runs_at_once_send_each_bonus_once(live_tasks, crowd, client, researcher):
    if connection.vendor != "postgresql":
        pytest.skip("row-lock concurrency is tested on PostgreSQL (DATABASE_URL=postgres://..., as in CI)")
    batch = make_batch(live_tasks["sentiment"], hits=1, assignments_per_hit=2)
    assignments = [do_one_assignment(client, crowd, batch, worker=worker, text=text) for worker, text in
                   ((WORKER, "The film was fine, I suppose."), (OTHER_WORKER, "A warm and generous film."))]
    sync.sync()
    for assignment in assignments:
        for example in Example.objects.filter(session=assignment.session):
            validation.validate_example(example.pk, researcher, label="correct")
    reports = pay_at_once(3)
    assert sum(report.paid for report in reports) == 2
    assert crowd.count("SendBonus") == 2 and len(crowd.bonuses) == 2
    assert sorted(b["AssignmentId"] for b in crowd.bonuses) == sorted(a.assignment_id for a in assignments)
    assert BonusPayment.objects.filter(status=BonusPayment.Status.PAID).count() == 2
    assert bonuses.pay_bonuses().paid == 0 and crowd.count("SendBonus") == 2


@pytest.mark.django_db(transaction=True)
def test_two_pay_runs_at_once_pay_each_prolific_bonus_once(live_tasks, prolific_crowd, client, researcher):
    """Prolific's pay call pays again each time: three runs at once still call it once per row."""
    if connection.vendor != "postgresql":
        pytest.skip("row-lock concurrency is tested on PostgreSQL (DATABASE_URL=postgres://..., as in CI)")
    from tests.crowd.platforms import ProlificSide

    side = ProlificSide(prolific_crowd, "GBP")
    batch = side.publish(live_tasks["sentiment"])
    assignments = [side.do_work(client, batch, worker=worker, text=text) for worker, text in
                   ((side.worker, "The film was fine, I suppose."), (side.other, "A warm and generous film."))]
    sync.sync()
    for assignment in assignments:
        for example in Example.objects.filter(session=assignment.session):
            validation.validate_example(example.pk, researcher, label="correct")
    reports = pay_at_once(3)
    assert sum(report.paid for report in reports) == 2
    assert prolific_crowd.count("pay_bonus") == 2 and prolific_crowd.count("setup_bonus") == 2
    assert sorted(p["participant_id"] for p in prolific_crowd.payments) == sorted([side.worker, side.other])
    assert bonuses.pay_bonuses().paid == 0 and prolific_crowd.count("pay_bonus") == 2
