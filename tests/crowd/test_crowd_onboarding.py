"""Onboarding and the workers' side of a HIT, against the fake MTurk: the quiz before
the work, a pass (the task's onboarded qualification), a failure (a block on the task,
as the quality block gives it), onboarding-only batches and batches that require the
onboarding; the feedback box; the Adult Content requirement of hate-speech HITs."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from annotation.models import Example, OnboardingRecord
from crowd import mturk, sync, workers
from crowd.models import Assignment, Batch, TaskBlock
from crowd.publishing import BatchRequest, publish
from crowd.testing.fake_mturk import WorkerActionError
from tests.annotation.test_onboarding import answers, take
from tests.crowd.test_crowd_flow import (
    WORKER,
    api,
    arrive,
    make_batch,
    submit_here,
    token_of,
    write_pair,
)

pytestmark = pytest.mark.django_db


def open_hit(client, crowd, batch, worker=WORKER, number=1):
    hit = batch.hit_rows.get(number=number)
    assignment_id = crowd.accept(hit.hit_id, worker)
    page = arrive(client, hit.hit_id, assignment_id, worker)
    return hit, assignment_id, page


def test_the_hit_shows_the_onboarding_first_and_a_pass_opens_the_work(with_onboarding, live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"])
    hit, assignment_id, page = open_hit(client, crowd, batch)
    body = page.content.decode()
    assert page.status_code == 200 and 'id="onboarding"' in body and 'id="example-form"' not in body
    assert "To pass, get at least <strong>3</strong> of 4 right" in body
    # The write page's header holds the instructions: the onboarding does not repeat them.
    instructions = live_tasks["sentiment"].instructions[:40]
    assert body.count(instructions) == 1 and 'id="onboarding-read-first"' in body
    token = token_of(page)
    worker = api(token)
    refused = worker.post("/api/tasks/sentiment/examples/", {
        "context": 1, "inputs": {"statement": "Fine."}, "target": {"label": "positive"}}, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "onboarding_required"

    result = take(worker, "sentiment", answers("sentiment"))
    assert result["standing"]["passed"] and result["score"] == 4
    onboarded = workers.onboarded_qualification_id(True, batch.task)
    # MTurk has not confirmed the HIT as the worker's yet: the pass is the arrival's own until then.
    assert (onboarded, WORKER) not in crowd.qualification_scores

    again = arrive(client, hit.hit_id, assignment_id)
    assert 'id="example-form"' in again.content.decode() and 'id="onboarding"' not in again.content.decode()
    write_pair(worker, "sentiment", "The plot was thin, yet I loved every minute.")
    response = client.post(reverse("mturk-hit-submit"), {
        "token": token, "feedback": "Item 3 confused me <script>alert(1)</script>"})
    assert response.status_code == 200
    assignment = Assignment.objects.get(assignment_id=assignment_id)
    assert assignment.status == Assignment.Status.FINISHED
    assert assignment.worker_feedback == "Item 3 confused me <script>alert(1)</script>"
    completion = re.search(r'name="completionToken" value="([^"]+)"', response.content.decode()).group(1)
    crowd.submit(assignment_id, {"completionToken": completion})
    assert sync.sync().approved == 1  # confirmed: the pass joins the worker's account, and MTurk hears of it
    assert crowd.qualification_scores[(onboarded, WORKER)]["IntegerValue"] == 1
    assert OnboardingRecord.objects.get(user=assignment.worker.user, task=batch.task).passed_at is not None


def fail_in_a_quiz_hit(client, crowd, task):
    """The worker fails every try in an onboarding-only HIT and submits it (done once the quiz
    is over, passed or not); the sync confirms it, and the failure joins their account."""
    quiz = publish(BatchRequest(task=task, mode=Batch.Mode.ONBOARDING, hits=1, assignments_per_hit=3,
                                reward=Decimal("0.20")))
    hit, assignment_id, page = open_hit(client, crowd, quiz)
    token = token_of(page)
    worker = api(token)
    first = take(worker, "sentiment", answers("sentiment", wrong={0, 1}))
    assert not first["standing"]["passed"] and first["standing"]["tries_left"] == 1
    assert 'id="onboarding"' in arrive(client, hit.hit_id, assignment_id).content.decode()  # a second try
    second = take(worker, "sentiment", answers("sentiment", wrong={2, 3}))
    assert second["standing"]["blocked"]
    assert not TaskBlock.objects.exists()  # the arrival's own failure until MTurk confirms the HIT
    completion, _ = submit_here(client, token)
    crowd.submit(assignment_id, {"completionToken": completion})
    assert sync.sync().approved == 1


def test_failing_every_try_blocks_the_worker_on_the_task_politely(with_onboarding, live_tasks, crowd, client,
                                                                   researcher):
    batch = make_batch(live_tasks["sentiment"], hits=2)
    fail_in_a_quiz_hit(client, crowd, batch.task)

    block = TaskBlock.objects.get(worker__worker_id=WORKER, task=batch.task)
    assert "onboarding" in block.reason
    assert (workers.block_qualification_id(True, batch.task), WORKER) in crowd.qualification_scores
    hit = batch.hit_rows.get(number=1)
    back = arrive(client, hit.hit_id, "3OPENEDANYWAY000000000000001")  # a link opened all the same
    assert back.status_code == 403 and "Thank you for trying the onboarding" in back.content.decode()
    with pytest.raises(WorkerActionError, match="lacks"):
        crowd.accept(hit.hit_id, WORKER)
    other = batch.hit_rows.get(number=2)
    with pytest.raises(WorkerActionError, match="lacks"):  # MTurk no longer shows them the task's HITs
        crowd.accept(other.hit_id, WORKER)
    # Another task is still open to them.
    nli = make_batch(live_tasks["nli"], hits=1)
    assert crowd.accept(nli.hit_rows.get().hit_id, WORKER)

    # A researcher lifts the block: the worker may take the onboarding again.
    workers.task_unblock(block, researcher)
    assert (workers.block_qualification_id(True, batch.task), WORKER) not in crowd.qualification_scores
    new_id = crowd.accept(other.hit_id, WORKER)
    page = arrive(client, other.hit_id, new_id)
    assert page.status_code == 200 and 'id="onboarding"' in page.content.decode()
    assert take(api(token_of(page)), "sentiment", answers("sentiment"))["standing"]["passed"]


def test_a_batch_that_requires_the_onboarding_admits_only_those_who_passed_it_in_an_onboarding_batch(
        with_onboarding, live_tasks, crowd, client):
    task = live_tasks["sentiment"]
    work = make_batch(task, require_onboarding=True)
    onboarded = workers.onboarded_qualification_id(True, task)
    [hit_type] = [p for op, p in crowd.calls if op == "CreateHITType"]
    assert {"QualificationTypeId": onboarded, "Comparator": "Exists",
            "ActionsGuarded": "DiscoverPreviewAndAccept"} in hit_type["QualificationRequirements"]
    with pytest.raises(WorkerActionError, match="lacks"):
        crowd.accept(work.hit_rows.get(number=1).hit_id, WORKER)

    quiz = publish(BatchRequest(task=task, mode=Batch.Mode.ONBOARDING, hits=1, assignments_per_hit=3,
                                reward=Decimal("0.20")))
    assert quiz.examples_per_assignment == 1 and quiz.title.startswith("A short qualification quiz")
    preview = client.get(reverse("mturk-hit"), {"assignmentId": "ASSIGNMENT_ID_NOT_AVAILABLE",
                                                "hitId": quiz.hit_rows.get().hit_id}).content.decode()
    assert "Take this task's short onboarding" in preview and "paid whether you pass or not" in preview
    work_preview = client.get(reverse("mturk-hit"), {"assignmentId": "ASSIGNMENT_ID_NOT_AVAILABLE",
                                                     "hitId": work.hit_rows.get(number=1).hit_id}).content.decode()
    assert "first take its short onboarding" in work_preview
    quiz_type = [p for op, p in crowd.calls if op == "CreateHITType"][-1]
    assert {"QualificationTypeId": onboarded, "Comparator": "DoesNotExist",
            "ActionsGuarded": "DiscoverPreviewAndAccept"} in quiz_type["QualificationRequirements"]
    hit, assignment_id, page = open_hit(client, crowd, quiz)
    # An onboarding-only HIT's page has no instructions in its header: the onboarding shows them, once.
    quiz_body = page.content.decode()
    assert quiz_body.count(task.instructions[:40]) == 1 and 'id="onboarding-read-first"' not in quiz_body
    body = page.content.decode()
    assert 'id="onboarding"' in body and 'id="hit-submit"' in body and 'name="feedback"' in body
    token = token_of(page)
    early = client.post(reverse("mturk-hit-submit"), {"token": token})
    assert early.status_code == 409 and "onboarding" in early.content.decode()
    # The session is the onboarding's only: it writes nothing.
    wrote = api(token).get("/api/tasks/sentiment/contexts/next/")
    assert wrote.status_code == 403
    take(api(token), "sentiment", answers("sentiment"))
    completion, _ = submit_here(client, token)
    crowd.submit(assignment_id, {"completionToken": completion})
    sync.sync_batch(quiz)
    assert Assignment.objects.get(assignment_id=assignment_id).status == Assignment.Status.APPROVED
    # Passed: the writing batch admits them now, and the quiz no longer does.
    assert crowd.accept(work.hit_rows.get(number=1).hit_id, WORKER)
    second_quiz = publish(BatchRequest(task=task, mode=Batch.Mode.ONBOARDING, hits=1, assignments_per_hit=1,
                                       reward=Decimal("0.20")))
    with pytest.raises(WorkerActionError, match="lacks"):
        crowd.accept(second_quiz.hit_rows.get().hit_id, WORKER)


def test_a_worker_who_fails_an_onboarding_only_hit_may_still_submit_it(with_onboarding, live_tasks, crowd, client):
    task = live_tasks["sentiment"]
    quiz = publish(BatchRequest(task=task, mode=Batch.Mode.ONBOARDING, hits=1, assignments_per_hit=1,
                                reward=Decimal("0.20")))
    hit, assignment_id, page = open_hit(client, crowd, quiz)
    token = token_of(page)
    take(api(token), "sentiment", answers("sentiment", wrong={0, 1}))
    assert take(api(token), "sentiment", answers("sentiment", wrong={0, 1}))["standing"]["blocked"]
    back = arrive(client, hit.hit_id, assignment_id)
    assert back.status_code == 200 and 'id="onboarding-blocked"' in back.content.decode()
    submit_here(client, token)  # the quiz was taken: the HIT is paid, the task stays closed to them


@pytest.mark.parametrize("change, field", [
    (dict(mode=Batch.Mode.ONBOARDING), "mode"),
    (dict(require_onboarding=True), "require_onboarding"),
])
def test_onboarding_batches_need_a_task_with_onboarding(live_tasks, crowd, change, field):
    from core.errors import InvalidInput

    values = dict(task=live_tasks["sentiment"], mode="create", hits=1, assignments_per_hit=1,
                  reward=Decimal("0.50"))
    values.update(change)
    with pytest.raises(InvalidInput) as raised:
        publish(BatchRequest(**values))
    assert field in raised.value.errors and "no onboarding" in raised.value.errors[field][0]
    assert not Batch.objects.exists() and crowd.count("CreateHITType") == 0


def test_hate_speech_hits_carry_the_content_warning_and_require_adult_content(live_tasks, crowd, client):
    batch = make_batch(live_tasks["hate"], hits=1)
    assert batch.title.startswith("Content warning") and len(batch.title) <= 128
    assert batch.description.startswith("Content warning: This task shows and asks for offensive")
    [hit_type] = [p for op, p in crowd.calls if op == "CreateHITType"]
    assert hit_type["Title"] == batch.title and hit_type["Description"] == batch.description
    assert {"QualificationTypeId": mturk.ADULT_CONTENT_QUALIFICATION, "Comparator": "EqualTo",
            "IntegerValues": [1], "ActionsGuarded": "DiscoverPreviewAndAccept"} in hit_type["QualificationRequirements"]
    crowd.adult_content_declined.add("A7NOADULTCONTENT")
    with pytest.raises(WorkerActionError, match=mturk.ADULT_CONTENT_QUALIFICATION):
        crowd.accept(batch.hit_rows.get().hit_id, "A7NOADULTCONTENT")
    assert crowd.accept(batch.hit_rows.get().hit_id, WORKER)

    plain = make_batch(live_tasks["sentiment"], hits=1)
    sentiment_type = [p for op, p in crowd.calls if op == "CreateHITType"][-1]
    assert not plain.title.startswith("Content warning")
    assert mturk.ADULT_CONTENT_QUALIFICATION not in {q["QualificationTypeId"]
                                                     for q in sentiment_type["QualificationRequirements"]}


def test_long_feedback_is_refused_and_the_work_stays(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"])
    hit, assignment_id, page = open_hit(client, crowd, batch)
    token = token_of(page)
    write_pair(api(token), "sentiment", "Grim, and yet somehow delightful.")
    response = client.post(reverse("mturk-hit-submit"), {"token": token, "feedback": "x" * 2001})
    assert response.status_code == 400
    assignment = Assignment.objects.get(assignment_id=assignment_id)
    assert assignment.status == Assignment.Status.WORKING and assignment.worker_feedback == ""
    assert Example.objects.filter(session=assignment.session).count() == 2


def test_feedback_is_shown_beside_the_batch_and_exported(live_tasks, crowd, client, researcher):
    import csv
    import io

    batch = make_batch(live_tasks["sentiment"])
    hit, assignment_id, page = open_hit(client, crowd, batch)
    token = token_of(page)
    write_pair(api(token), "sentiment", "Not my thing, though I admired it.")
    client.post(reverse("mturk-hit-submit"), {"token": token, "feedback": "=HYPERLINK(\"x\") <b>unclear</b> label"})
    client.force_login(researcher)
    detail = client.get(reverse("admin:crowd_batch_change", args=[batch.pk])).content.decode()
    assert "Workers&#x27; feedback" in detail or "Workers' feedback" in detail
    assert "&lt;b&gt;unclear&lt;/b&gt; label" in detail and "<b>unclear</b>" not in detail  # escaped
    response = client.post(reverse("admin:crowd_batch_changelist"),
                           {"action": "export_assignments", "_selected_action": [batch.pk]})
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    [row] = rows
    assert row["assignment_id"] == assignment_id and row["worker_id"] == WORKER and row["status"] == "finished"
    assert row["worker_feedback"] == "'=HYPERLINK(\"x\") <b>unclear</b> label"  # no formula for a spreadsheet
    assert row["examples_written"] == "2" and row["task"] == "sentiment"


def test_the_publish_form_offers_onboarding_only_batches_and_requiring_the_onboarding(
        with_onboarding, live_tasks, crowd, client, researcher):
    client.force_login(researcher)
    page = client.get(reverse("admin:crowd_batch_publish")).content.decode()
    assert 'value="onboarding"' in page and 'name="require_onboarding"' in page
    form = {"hits": "1", "assignments_per_hit": "1", "examples_per_assignment": "2", "reward": "0.20",
            "bonus_per_example": "0", "assignment_duration_hours": "1", "lifetime_hours": "24",
            "auto_approval_delay_hours": "24", "locales": "US", "min_approval_rate": "95",
            "min_approved_count": "100", "confirm": "on", "task": live_tasks["sentiment"].pk}
    response = client.post(reverse("admin:crowd_batch_publish"), {**form, "mode": "onboarding"})
    assert response.status_code == 302, response.content.decode()[:3000]
    quiz = Batch.objects.get()
    assert quiz.mode == Batch.Mode.ONBOARDING and not quiz.require_onboarding
    response = client.post(reverse("admin:crowd_batch_publish"),
                           {**form, "mode": "create", "bonus_per_example": "0.25", "require_onboarding": "on"})
    assert response.status_code == 302
    assert Batch.objects.get(mode=Batch.Mode.CREATE).require_onboarding


def test_letting_a_blocked_mturk_worker_try_again_in_the_admin_lifts_the_task_block_on_mturk(
        with_onboarding, live_tasks, crowd, client, researcher, client_for):
    batch = make_batch(live_tasks["sentiment"], hits=2)
    fail_in_a_quiz_hit(client, crowd, batch.task)
    blocked_on_mturk = (workers.block_qualification_id(True, batch.task), WORKER)
    assert blocked_on_mturk in crowd.qualification_scores

    record = OnboardingRecord.objects.get(user__mturk_identity__worker_id=WORKER)
    client_for(researcher).post("/admin/annotation/onboardingrecord/",
                                {"action": "let_try_again", "_selected_action": [record.pk]})
    assert not TaskBlock.objects.filter(worker__worker_id=WORKER, task=batch.task).exists()
    assert blocked_on_mturk not in crowd.qualification_scores
    other = batch.hit_rows.get(number=2)
    again = arrive(client, other.hit_id, crowd.accept(other.hit_id, WORKER))
    assert again.status_code == 200 and 'id="onboarding"' in again.content.decode()


def test_a_qualification_mturk_refused_when_the_worker_passed_is_given_at_the_next_sync(
        with_onboarding, live_tasks, crowd, client, settings):
    from crowd import onboarding as crowd_onboarding
    from crowd.models import Watermark
    from crowd.tasks import sync as sync_task

    settings.MTURK_MAX_ATTEMPTS = 1  # one fault refuses one call (no retries with their waits)
    task = live_tasks["sentiment"]
    quiz = publish(BatchRequest(task=task, mode=Batch.Mode.ONBOARDING, hits=1, assignments_per_hit=3,
                                reward=Decimal("0.20")))
    hit, assignment_id, page = open_hit(client, crowd, quiz)
    onboarded = workers.onboarded_qualification_id(True, task)  # made now: the fault hits the grant only
    token = token_of(page)
    assert take(api(token), "sentiment", answers("sentiment"))["standing"]["passed"]
    completion, _ = submit_here(client, token)
    crowd.submit(assignment_id, {"completionToken": completion})
    crowd.inject("AssociateQualificationWithWorker", "server_error")
    assert sync.sync_batch(quiz).approved == 1  # confirmed: the pass joins the account; MTurk refuses the grant
    assert (onboarded, WORKER) not in crowd.qualification_scores  # refused, logged; our record holds

    crowd.inject("AssociateQualificationWithWorker", "server_error")
    failed = crowd_onboarding.resync()
    assert failed.errors and failed.given == 0 and (onboarded, WORKER) not in crowd.qualification_scores
    assert not Watermark.objects.filter(name="onboarding").exists()  # not moved: the next run tries again
    assert "onboarding: 1 qualifications given again" in sync_task()  # the beat's sync; MTurk answers now
    assert crowd.qualification_scores[(onboarded, WORKER)]["IntegerValue"] == 1
    # Once the record is older than the watermark (less its overlap), a run calls nothing.
    calls = crowd.count("AssociateQualificationWithWorker")
    Watermark.objects.filter(name="onboarding").update(until=timezone.now() + timedelta(minutes=10))
    assert crowd_onboarding.resync().given == 0 and crowd.count("AssociateQualificationWithWorker") == calls
