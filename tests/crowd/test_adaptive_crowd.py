"""The crowd under adaptive validation: an example escalated to the researchers keeps
its writer's bonus waiting, the publish form forecasts the cost of a verified fooling
example, and a validation batch soft-blocks validators whose votes carry no evidence."""

from decimal import Decimal

import pytest

from annotation import validation
from annotation.models import Example, ValidatorReliability
from crowd import bonuses, costs, sync
from crowd.models import BonusPayment, TaskBlock, WorkerIdentity
from tests.annotation.test_adaptive_validation import adaptive, known
from tests.crowd.test_crowd_flow import (
    api,
    arrive,
    do_one_assignment,
    make_batch,
    submit_here,
    token_of,
)

pytestmark = pytest.mark.django_db


def test_an_escalated_example_keeps_the_bonus_waiting_until_a_researcher_decides(live_tasks, crowd, client,
                                                                                 researcher):
    task = adaptive(live_tasks["sentiment"], max_votes=2)
    batch = make_batch(task)
    assignment = do_one_assignment(client, crowd, batch)
    sync.sync()
    fooling = Example.objects.get(session=assignment.session, fooled=True)
    plain = Example.objects.get(session=assignment.session, fooled=False)
    Example.objects.filter(pk=fooling.pk).update(validation_status=Example.ValidationStatus.ESCALATED)
    validation.validate_example(plain.pk, researcher, label="correct")
    assert bonuses.pay_bonuses().waiting == 1 and not BonusPayment.objects.exists()
    validation.validate_example(fooling.pk, researcher, label="correct")
    report = bonuses.pay_bonuses()
    assert report.paid == 1 and report.amount == Decimal("0.25"), report


def test_the_publish_form_forecasts_validations_and_cost_per_verified_fooling_example(
        live_tasks, crowd, client, researcher, admin_client):
    task = live_tasks["sentiment"]
    assert costs.forecast(task, sandbox=True).validation["validations_per_example"] is None  # no history yet
    batch = make_batch(task)
    assignment = do_one_assignment(client, crowd, batch)
    sync.sync()
    examples = list(Example.objects.filter(session=assignment.session))
    for example in examples:
        validation.validate_example(example.pk, researcher, label="correct")
    bonuses.pay_bonuses()
    forecast = costs.forecast(task, sandbox=True)
    # Researchers decided both: no validator-decided history to replay; one of two fooled, and it was verified.
    assert forecast.validation["fooled_share"] == 0.5 and forecast.validation["verified_share_of_fooling"] == 1.0
    assert forecast.validation["history"] == 0 and forecast.validations_per_verified_fooling is None
    assert forecast.examples_per_verified_fooling == 2.0
    assert forecast.writing_cost == costs.batch_spend(batch).per_verified_fooling
    page = admin_client.get("/admin/crowd/batch/publish/")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'id="publish-forecast"' in text and f"${forecast.writing_cost}" in text


def test_a_validation_batch_blocks_validators_whose_votes_carry_no_evidence(live_tasks, crowd, client):
    task = live_tasks["sentiment"]
    writing = make_batch(task)
    do_one_assignment(client, crowd, writing)
    sync.sync()  # MTurk confirms the writer: their examples enter the validation queue
    checking = make_batch(task, mode="validate", bonus_per_example=Decimal("0"), quality_block_threshold=0.5)
    spammer = validate_one_assignment(client, crowd, checking, "A4SPAMMERSPAM", "correct")
    careful = validate_one_assignment(client, crowd, checking, "A5CAREFULCAREF", None)
    known(task, spammer.user, accuracy=0.5, votes=100)  # s = t = 1/2, as a fit would find a coin toss
    known(task, careful.user, accuracy=0.97, votes=100)
    assert ValidatorReliability.objects.get(validator=spammer.user).weight < 0.2
    report = sync.sync()
    assert report.task_blocked == 1, report
    [block] = TaskBlock.objects.all()
    assert block.worker == spammer and "no evidence" in block.reason
    assert not TaskBlock.objects.filter(worker=careful).exists()


def validate_one_assignment(client, crowd, batch, worker_id, label):
    """A validation assignment: accepted, opened, every served example answered blind and
    decided (``label``, or the writer's own answer's verdict when None), submitted."""
    hit = batch.hit_rows.order_by("number").first()
    assignment_id = crowd.accept(hit.hit_id, worker_id)
    page = arrive(client, hit.hit_id, assignment_id, worker_id)
    assert page.status_code == 200, page.content.decode()[-1500:]
    token = token_of(page)
    worker = api(token)
    for _ in range(batch.examples_per_assignment):
        item = worker.get(f"/api/tasks/{batch.task.slug}/validations/next/").json()
        example = Example.objects.get(pk=item["id"])
        assert worker.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "positive"}},
                           format="json").status_code == 201
        verdict = label or ("correct" if example.target["label"] == "positive" else "incorrect")
        assert worker.post(f"/api/examples/{example.pk}/validations/", {"label": verdict},
                           format="json").status_code == 201
    completion, _ = submit_here(client, token)
    crowd.submit(assignment_id, {"completionToken": completion})
    return WorkerIdentity.objects.get(worker_id=worker_id)
