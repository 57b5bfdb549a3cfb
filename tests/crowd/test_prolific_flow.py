"""Prolific's side of the crowd: the study page and what it refuses, the sync's
decisions on Prolific's submissions, the study stopped when done, fair pay and
currencies refused before any call, and the admin's publish form and ledger."""

import re
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from core.errors import Conflict, InvalidInput
from crowd import bonuses, prolific, sync, workers
from crowd.models import Assignment, Batch, BonusPayment, CrowdBudget
from crowd.publishing import BatchRequest, post_hits, publish
from tests.crowd.platforms import ProlificSide, api, token_of, write_pair

pytestmark = pytest.mark.django_db


@pytest.fixture
def side(prolific_crowd):
    return ProlificSide(prolific_crowd)


def test_the_study_page_is_never_framed_and_says_prolific(live_tasks, side, client):
    batch = side.publish(live_tasks["sentiment"])
    session = side.fake.start_submission(batch.hit_rows.get().hit_id, side.worker)
    page = client.get(*side.entry(batch, side.worker, session))
    assert page.status_code == 200
    assert page["X-Frame-Options"] == "DENY" and "frame-ancestors 'none'" in page["Content-Security-Policy"]
    body = page.content.decode()
    assert reverse("prolific-submit") in body and "completion code" in body
    assert batch.completion_code not in body  # shown only once the work is done


@pytest.mark.parametrize("change, status", [
    ({"PROLIFIC_PID": "not-a-prolific-id"}, 400),
    ({"SESSION_ID": "ABCDEF0123456789abcdef01"}, 400),  # capitals: not a Prolific id
    ({"STUDY_ID": "0" * 24}, 404),  # another study
    ({"PROLIFIC_PID": ""}, 400),
])
def test_links_that_are_not_prolific_links_are_refused_and_write_nothing(live_tasks, side, client, change, status):
    batch = side.publish(live_tasks["sentiment"])
    path, params = side.entry(batch, side.worker, "a" * 24)
    response = client.get(path, {**params, **change})
    assert response.status_code == status
    assert not Assignment.objects.exists()


def test_an_unknown_batch_and_an_mturk_batch_are_not_studies(live_tasks, side, crowd, client):
    assert client.get(reverse("prolific-entry", args=["0" * 32])).status_code == 404
    mturk_batch = publish(BatchRequest(task=live_tasks["sentiment"], mode="create", hits=1, assignments_per_hit=1,
                                       reward=Decimal("0.50")))
    assert client.get(reverse("prolific-entry", args=[mturk_batch.uid.hex])).status_code == 404


def test_blocked_participants_and_ended_studies_are_refused(live_tasks, side, client):
    batch = side.publish(live_tasks["sentiment"])
    side.do_work(client, batch)
    identity = Assignment.objects.get().worker
    identity.soft_blocked_at = identity.created_at
    identity.save()
    second = side.fake.start_submission(batch.hit_rows.get().hit_id, side.other)
    Batch.objects.filter(pk=batch.pk).update(status=Batch.Status.FINISHED)
    assert client.get(*side.entry(batch, side.other, second)).status_code == 410
    Batch.objects.filter(pk=batch.pk).update(status=Batch.Status.PUBLISHED)
    assert client.get(*side.entry(batch, side.worker, "b" * 24)).status_code == 403


def test_a_finished_participant_coming_back_sees_the_code_again(live_tasks, side, client):
    batch = side.publish(live_tasks["sentiment"])
    assignment = side.do_work(client, batch)
    again = client.get(*side.entry(batch, side.worker, assignment.assignment_id))
    assert again.status_code == 200 and batch.completion_code in again.content.decode()


def test_finishing_before_the_work_is_done_shows_no_code(live_tasks, side, client):
    batch = side.publish(live_tasks["sentiment"])
    session = side.fake.start_submission(batch.hit_rows.get().hit_id, side.worker)
    token = token_of(client.get(*side.entry(batch, side.worker, session)))
    response = client.post(reverse("prolific-submit"), {"token": token})
    assert response.status_code == 409 and batch.completion_code not in response.content.decode()
    assert "Do 2 more" in response.content.decode()
    # The MTurk door refuses a Prolific session (and the reverse), and ends nothing.
    assert client.post(reverse("mturk-hit-submit"), {"token": token}).status_code == 403
    assert Assignment.objects.get().status == Assignment.Status.WORKING


def test_a_wrong_code_and_work_with_no_record_are_rejected_with_prolific_s_rules(live_tasks, side, client):
    batch = side.publish(live_tasks["sentiment"], assignments_per_hit=3)
    study = batch.hit_rows.get().hit_id
    # Worked here, but handed Prolific another code (Prolific's code list has only ours: add a second one).
    side.fake.studies[study]["completion_codes"].append({"code": "GUESSED", "code_type": "COMPLETED"})
    session = side.fake.start_submission(study, side.worker)
    token = token_of(client.get(*side.entry(batch, side.worker, session)))
    write_pair(api(token), "sentiment", "Some text here.")
    client.post(reverse("prolific-submit"), {"token": token})
    side.fake.complete(session, "GUESSED")
    stranger = side.fake.add_submission(study, "0123456789abcdef01234567", code="GUESSED")  # never on our page
    report = sync.sync()
    assert report.rejected == 2 and report.approved == 0, report
    rejected = [(body["message"], body["rejection_category"]) for name, _, path, body in side.fake.calls
                if name == "transition_submission" and body["action"] == "REJECT"]
    assert {category for _, category in rejected} == {"BAD_CODE", "NO_DATA"}
    assert all(len(message) >= 100 for message, _ in rejected)
    assert side.fake.submissions[stranger]["status"] == "REJECTED"
    assert Assignment.objects.get().status == Assignment.Status.REJECTED


def test_a_done_study_is_stopped_on_prolific(live_tasks, side, client):
    batch = side.publish(live_tasks["sentiment"], assignments_per_hit=1)
    side.do_work(client, batch)
    report = sync.sync()
    assert report.approved == 1 and report.finished_batches == 1, report
    batch.refresh_from_db()
    assert batch.status == Batch.Status.FINISHED
    assert side.fake.studies[batch.hit_rows.get().hit_id]["status"] == "COMPLETED"


@pytest.mark.parametrize("currency, reward, ok", [("GBP", "0.49", False), ("GBP", "0.50", True),
                                                  ("USD", "0.66", False), ("USD", "0.67", True)])
def test_below_prolific_s_hourly_minimum_is_refused_before_any_call(live_tasks, prolific_crowd, currency, reward,
                                                                    ok):
    side = ProlificSide(prolific_crowd, currency)
    if ok:  # 5 minutes: £0.50 is £6.00/hour, $0.67 is $8.04/hour
        assert side.publish(live_tasks["sentiment"], reward=Decimal(reward)).status == Batch.Status.PUBLISHED
        return
    with pytest.raises(InvalidInput, match="below Prolific's minimum"):
        side.publish(live_tasks["sentiment"], reward=Decimal(reward))
    assert prolific_crowd.calls == [] and not Batch.objects.exists()


def test_currencies_are_refused_where_they_do_not_belong(live_tasks, prolific_crowd, crowd):
    task = live_tasks["sentiment"]
    with pytest.raises(InvalidInput, match="MTurk pays in USD only"):
        publish(BatchRequest(task=task, mode="create", hits=1, assignments_per_hit=1, reward=Decimal("0.50"),
                             currency="GBP"))
    CrowdBudget.objects.create(task=task, amount=Decimal("100.00"), currency="USD")
    with pytest.raises(Conflict, match="budget is in USD, and this batch pays in GBP"):
        ProlificSide(prolific_crowd, "GBP").publish(task)
    with pytest.raises(InvalidInput, match="one study"):
        ProlificSide(prolific_crowd).publish(task, hits=2)
    assert prolific_crowd.calls == []


def test_a_study_that_pays_in_another_currency_than_the_batch_is_never_published(live_tasks, prolific_crowd):
    CrowdBudget.objects.create(task=live_tasks["sentiment"], amount=Decimal("100.00"), currency="USD")
    prolific_crowd.workspace_currency = "GBP"  # the workspace decides, whatever the create asked for
    with pytest.raises(prolific.ProlificError, match="pays in GBP, but the batch is priced in USD") as raised:
        ProlificSide(prolific_crowd, "USD").publish(live_tasks["sentiment"])
    assert raised.value.code == "currency_mismatch"
    batch = Batch.objects.get()
    assert batch.status == Batch.Status.PUBLISHING and batch.hit_rows.get().hit_id is None
    [study] = prolific_crowd.studies.values()
    assert study["status"] == "UNPUBLISHED" and prolific_crowd.count("transition_study") == 0
    # Publishing again finds that draft by its name and refuses it again: never a second study.
    with pytest.raises(prolific.ProlificError, match="pays in GBP"):
        post_hits(batch)
    batch.refresh_from_db()
    assert batch.status == Batch.Status.PUBLISHING and "pays in GBP" in batch.last_error
    assert len(prolific_crowd.studies) == 1 and prolific_crowd.count("create_study") == 1
    assert prolific_crowd.count("transition_study") == 0


def test_the_publish_command_takes_the_platform(live_tasks, prolific_crowd, capsys):
    CrowdBudget.objects.create(task=live_tasks["sentiment"], amount=Decimal("100.00"), currency="GBP")
    with pytest.raises(CommandError, match="below Prolific's minimum"):
        call_command("mturk_publish", "--task", "sentiment", "--mode", "create", "--hits", "1", "--assignments",
                     "2", "--reward", "0.40", "--platform", "prolific", "--currency", "GBP",
                     "--estimated-minutes", "5", "--yes")
    call_command("mturk_publish", "--task", "sentiment", "--mode", "create", "--hits", "1", "--assignments", "2",
                 "--reward", "1.00", "--platform", "prolific", "--currency", "GBP", "--estimated-minutes", "5",
                 "--yes")
    captured = capsys.readouterr()
    batch = Batch.objects.get()
    assert captured.out.strip() == str(batch.pk) and "£12.00/hour" in captured.err
    assert batch.platform == "prolific" and len(prolific_crowd.studies) == 1


def test_the_admin_publish_form_shows_the_rate_and_refuses_below_the_minimum(live_tasks, prolific_crowd, client,
                                                                               superuser):
    client.force_login(superuser)
    form = {"task": live_tasks["sentiment"].pk, "mode": "create", "platform": "prolific", "currency": "GBP",
            "estimated_minutes": "10", "hits": "1", "assignments_per_hit": "2", "examples_per_assignment": "2",
            "reward": "0.80", "bonus_per_example": "0.25", "assignment_duration_hours": "1", "lifetime_hours": "24",
            "auto_approval_delay_hours": "72", "locales": "", "confirm": "on"}
    page = client.post(reverse("admin:crowd_batch_publish"), form).content.decode()
    assert re.search(r'id="implied-rate">.*£4\.80', page) and "below Prolific&#x27;s minimum" in page
    assert prolific_crowd.calls == [] and not Batch.objects.exists()


def test_the_ledger_lists_sent_unconfirmed_bonuses_and_a_superuser_settles_them(
        live_tasks, side, client, researcher, superuser, settings):
    from annotation import validation
    from annotation.models import Example

    batch = side.publish(live_tasks["sentiment"])
    assignment = side.do_work(client, batch)
    sync.sync()
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    side.fake.inject("pay_bonus", "server_error")
    bonuses.pay_bonuses()
    settings.PROLIFIC_UNCONFIRMED_AFTER_HOURS = 0
    ledger = reverse("admin:crowd_bonuspayment_changelist")
    client.force_login(researcher)
    listing = client.get(ledger, {"unconfirmed": "yes"}).content.decode()
    assert "sent and Prolific&#x27;s answer was lost" in listing and "Sent, answer not known" in listing
    assert "settle_not_paid" not in listing  # the actions are a superuser's
    client.force_login(superuser)
    row = BonusPayment.objects.get()
    client.post(ledger, {"action": "settle_not_paid", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.status == BonusPayment.Status.FAILED and row.settled_by == superuser and row.platform_ref == ""
    bonuses.pay_bonuses()
    assert side.paid_to(side.worker) == [Decimal("0.25")]


def test_one_address_opens_a_bounded_number_of_new_sessions(live_tasks, side, client, settings):
    settings.MTURK_ARRIVALS_PER_ADDRESS = 2
    batch = side.publish(live_tasks["sentiment"], assignments_per_hit=5)
    study = batch.hit_rows.get().hit_id
    participants = [f"{n:024x}" for n in range(1, 4)]
    answers = [client.get(*side.entry(batch, pid, side.fake.start_submission(study, pid))).status_code
               for pid in participants]
    assert answers == [200, 200, 429] and Assignment.objects.count() == 2


def test_a_lost_create_answer_leaves_one_study_which_the_next_publish_finds_and_uses(live_tasks, side):
    side.publish(live_tasks["sentiment"])  # another batch's study, listed first
    side.fake.page_size = 1  # ours is on the list's second page
    side.fake.inject("create_study", "drop_after_commit")  # Prolific makes the draft; its answer is lost
    with pytest.raises(prolific.ProlificError) as raised:
        side.publish(live_tasks["sentiment"])
    assert raised.value.kind == "connection"
    batch = Batch.objects.order_by("pk").last()
    assert batch.status == Batch.Status.PUBLISHING and batch.hit_rows.get().hit_id is None
    assert "Publish again" in batch.last_error
    [draft] = [study for study in side.fake.studies.values() if batch.uid.hex in study["internal_name"]]
    assert draft["status"] == "UNPUBLISHED"

    batch = post_hits(batch)
    assert batch.status == Batch.Status.PUBLISHED and batch.hit_rows.get().hit_id == draft["id"]
    assert len(side.fake.studies) == 2 and side.fake.count("create_study") == 2  # one per batch, never a third
    assert side.fake.studies[draft["id"]]["status"] == "ACTIVE"
    assert side.fake.count("list_studies") == 4  # before each create (one page, one page), the retry: two pages


def test_without_a_workspace_task_blocks_and_required_onboarding_hold_at_our_page_only(
        with_onboarding, live_tasks, side, client, settings):
    """No PROLIFIC_WORKSPACE_ID: no participant group of ours per task, so Prolific lets the
    participant start, and our page refuses them (a task block, an onboarding not passed)."""
    assert not settings.PROLIFIC_WORKSPACE_ID
    task = live_tasks["sentiment"]
    identity = workers.identity_for(side.worker, sandbox=False, platform="prolific")
    workers.task_block(identity, task, "Examples validated correct too rarely.")
    blocked_from = side.publish(task)
    session = side.fake.start_submission(blocked_from.hit_rows.get().hit_id, side.worker)  # Prolific lets them in
    refused = client.get(*side.entry(blocked_from, side.worker, session))
    assert refused.status_code == 403 and "not admitted to these studies" in refused.content.decode()

    needs = side.publish(task, require_onboarding=True)
    study = side.fake.studies[needs.hit_rows.get().hit_id]
    assert "filters" not in study  # no allowlist, no blocklist: open to everyone there
    session = side.fake.start_submission(study["id"], side.other)
    refused = client.get(*side.entry(needs, side.other, session))
    assert refused.status_code == 403 and "passed the task" in refused.content.decode()
    assert not side.fake.groups and side.fake.count("add_to_group") == 0
