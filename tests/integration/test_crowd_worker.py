"""The crowd's beat tasks in a real Celery worker, on PostgreSQL, against the fake MTurk."""

import pytest

from annotation.models import Example
from annotation.services import validation
from crowd import tasks as crowd_tasks
from crowd.models import Assignment, BonusPayment
from tests.crowd.test_crowd_flow import do_one_assignment, make_batch

pytestmark = pytest.mark.integration


@pytest.mark.django_db(transaction=True)
def test_the_worker_syncs_and_pays_bonuses_exactly_once(celery_worker_process, worker_mturk, live_tasks, client,
                                                         researcher, settings, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "fake")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    settings.MTURK_ENDPOINT_URL = worker_mturk.endpoint_url
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
    batch = make_batch(live_tasks["sentiment"], hits=1, assignments_per_hit=1)
    assignment = do_one_assignment(client, worker_mturk, batch)  # its examples answered by the worker's models

    report = crowd_tasks.sync.apply_async().get(timeout=60)
    assert "1 approved" in report, report
    assert Assignment.objects.get(pk=assignment.pk).status == Assignment.Status.APPROVED
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    report = crowd_tasks.pay_bonuses.apply_async().get(timeout=60)
    assert "1 bonuses paid ($0.25)" in report, report
    assert crowd_tasks.pay_bonuses.apply_async().get(timeout=60).startswith("0 assignments settled, 0 bonuses paid")
    paid = [b for b in worker_mturk.bonuses if b["AssignmentId"] == assignment.assignment_id]
    assert len(paid) == 1 and BonusPayment.objects.get().status == BonusPayment.Status.PAID
    assert worker_mturk.violations == []
