"""A writer's record from the attacker's side: a worker whose examples validators are
calling incorrect retracts them before the last vote, so that they are never
"rejected". The retraction must not wash them out of the record that the batch's
quality threshold judges."""

from decimal import Decimal

import pytest

from annotation.examples import retract_example
from annotation.models import Example
from crowd import sync, workers
from crowd.models import WorkerIdentity
from tests.crowd.test_adaptive_crowd import validate_one_assignment
from tests.crowd.test_crowd_flow import WORKER, do_one_assignment, make_batch

pytestmark = pytest.mark.django_db


def test_retracting_examples_heading_for_rejection_still_counts_against_the_writer(live_tasks, crowd, client,
                                                                                   monkeypatch):
    task = live_tasks["sentiment"]  # three matching votes decide
    writing = make_batch(task)
    assignment = do_one_assignment(client, crowd, writing)
    sync.sync()  # MTurk confirms the writer: their examples enter the validation queue
    checking = make_batch(task, mode="validate", bonus_per_example=Decimal("0"))
    validate_one_assignment(client, crowd, checking, "A4CHECKERCHECK", "incorrect")
    sync.sync()  # the checker's votes count
    written = list(Example.objects.filter(session=assignment.session))
    assert [(e.validation_status, e.validations_incorrect) for e in written] == [("pending", 1), ("pending", 1)]
    writer = WorkerIdentity.objects.get(worker_id=WORKER)
    for example in written:
        retract_example(example, writer.user)  # before the second and third "incorrect"

    assert workers.decided_counts([writer.user_id], task) == {writer.user_id: (2, 0)}
    annotated = workers.with_quality(WorkerIdentity.objects.filter(pk=writer.pk), task).get()
    assert (annotated.decided, annotated.verified) == (2, 0)
    monkeypatch.setattr(workers, "QUALITY_MIN_DECIDED", 2)
    assert workers.below_threshold(WorkerIdentity.objects.filter(pk=writer.pk), 0.5, task) == [writer]


def test_a_retraction_the_votes_did_not_call_incorrect_leaves_the_record(live_tasks, crowd, client):
    """An honest writer who takes back an example nobody has faulted (a typo seen at once)
    is not judged on it."""
    task = live_tasks["sentiment"]
    assignment = do_one_assignment(client, crowd, make_batch(task))
    sync.sync()
    writer = WorkerIdentity.objects.get(worker_id=WORKER)
    for example in Example.objects.filter(session=assignment.session):
        retract_example(example, writer.user)
    assert workers.decided_counts([writer.user_id], task) == {writer.user_id: (0, 0)}
