"""The crowd end to end against the fake MTurk: publish, preview, arrive, write,
submit, sync, validate, bonus; and the attacks and failures around them."""

import re
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db.models import F
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from annotation import validation
from annotation.models import AnnotationSession, Example
from crowd import bonuses, costs, mturk, sync, workers
from crowd.models import Assignment, Batch, BonusPayment, Hit, TaskBlock, WorkerIdentity
from crowd.publishing import BatchRequest, publish
from crowd.testing.fake_mturk import WorkerActionError
from tests.crowd.conftest import SECRET

pytestmark = pytest.mark.django_db

WORKER = "A2WORKERONE77"
OTHER_WORKER = "A3WORKERTWO88"
SUBMIT_TO = "https://workersandbox.mturk.com"




def make_batch(task, **overrides) -> Batch:
    values = dict(task=task, mode="create", hits=2, assignments_per_hit=2, reward=Decimal("0.50"),
                  bonus_per_example=Decimal("0.25"), examples_per_assignment=2)
    values.update(overrides)
    return publish(BatchRequest(**values))


def arrive(client, hit_id, assignment_id, worker_id=WORKER, submit_to=SUBMIT_TO):
    return client.get(reverse("mturk-hit"), {"assignmentId": assignment_id, "hitId": hit_id,
                                             "workerId": worker_id, "turkSubmitTo": submit_to})


def token_of(response) -> str:
    return re.search(r'data-token="([^"]+)"', response.content.decode()).group(1)


def api(token) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_X_DYNABENCH_TOKEN=token)
    return client


def write_pair(client, slug, text):
    """The same statement with each label: exactly one of the two fools a two-label model."""
    context = client.get(f"/api/tasks/{slug}/contexts/next/").json()
    made = []
    for label in ("negative", "positive"):
        response = client.post(f"/api/tasks/{slug}/examples/", {
            "context": context["id"], "inputs": {"statement": text}, "target": {"label": label}}, format="json")
        assert response.status_code == 201, response.content
        made.append(response.json())
    return made


def submit_here(client, token):
    response = client.post(reverse("mturk-hit-submit"), {"token": token})
    assert response.status_code == 200, response.content
    body = response.content.decode()
    assert SECRET not in body  # credentials never reach the browser
    completion = re.search(r'name="completionToken" value="([^"]+)"', body).group(1)
    action = re.search(r'<form method="post" action="([^"]+)"', body).group(1)
    return completion, action


def do_one_assignment(client, crowd, batch, worker=WORKER, text="The film was fine, I suppose."):
    """A worker accepts on MTurk, opens the page, writes two examples, submits here and on MTurk."""
    hit = batch.hit_rows.order_by("number").first()
    assignment_id = crowd.accept(hit.hit_id, worker)
    page = arrive(client, hit.hit_id, assignment_id, worker)
    assert page.status_code == 200
    assert SECRET not in page.content.decode() and "AKIAEXAMPLEKEYID0001" not in page.content.decode()
    token = token_of(page)
    write_pair(api(token), batch.task.slug, text)
    completion, action = submit_here(client, token)
    assert action == f"{SUBMIT_TO}/mturk/externalSubmit"
    crowd.submit(assignment_id, {"completionToken": completion})
    return Assignment.objects.get(assignment_id=assignment_id, worker__worker_id=worker)


def test_publish_posts_one_hit_type_and_n_hits_with_tokens_qualifications_and_an_https_url(live_tasks, crowd):
    batch = make_batch(live_tasks["sentiment"], hits=3, locales=("US", "GB"), min_approval_rate=97)
    assert batch.status == Batch.Status.PUBLISHED and batch.hit_type_id
    assert batch.hit_rows.filter(hit_id__isnull=False).count() == 3
    assert crowd.count("CreateHITType") == 1 and crowd.count("CreateHITWithHITType") == 3
    creates = [params for op, params in crowd.calls if op == "CreateHITWithHITType"]
    assert sorted(p["UniqueRequestToken"] for p in creates) == sorted(
        f"dynabench-{batch.uid.hex}-{k}" for k in (1, 2, 3))
    assert all("https://dynabench.example.org/mturk/hit/" in p["Question"] for p in creates)
    [hit_type] = [params for op, params in crowd.calls if op == "CreateHITType"]
    quals = {q["QualificationTypeId"]: q for q in hit_type["QualificationRequirements"]}
    assert quals[mturk.LOCALE_QUALIFICATION]["LocaleValues"] == [{"Country": "US"}, {"Country": "GB"}]
    assert quals[mturk.APPROVAL_RATE_QUALIFICATION]["IntegerValues"] == [97]
    blocks = {q["QualificationTypeId"] for q in quals.values() if q["Comparator"] == "DoesNotExist"}
    # our own blocks: the one on every task (superusers) and the task's own (its quality thresholds)
    assert blocks == {workers.block_qualification_id(True), workers.block_qualification_id(True, batch.task)}
    assert len(blocks) == 2
    assert hit_type["Reward"] == "0.50"
    # 3 HITs x 2 assignments x (0.50 + 0.10 fee + 2 x 0.25 bonus + 0.10 fee)
    assert batch.max_cost == Decimal("7.20")


def test_publishing_again_after_an_interruption_posts_only_the_missing_hits(live_tasks, crowd):
    crowd.inject("CreateHITWithHITType", "server_error", times=3)  # all of boto3's 3 attempts, on HIT 1
    with pytest.raises(mturk.MTurkError) as raised:
        make_batch(live_tasks["sentiment"], hits=2)
    assert raised.value.kind == "unavailable"
    batch = Batch.objects.get()
    assert batch.status == Batch.Status.PUBLISHING and "Publish again" in batch.last_error
    from crowd.publishing import post_hits

    post_hits(batch)
    assert batch.status == Batch.Status.PUBLISHED
    assert len({h.hit_id for h in batch.hit_rows.all()}) == 2
    assert len(crowd.hits) == 2


def test_a_lost_create_hit_answer_is_retried_without_posting_twice(live_tasks, crowd):
    crowd.inject("CreateHITWithHITType", "drop_after_commit")
    batch = make_batch(live_tasks["sentiment"], hits=2)
    assert len(crowd.hits) == 2
    assert set(batch.hit_rows.values_list("hit_id", flat=True)) == set(crowd.hits)


def test_publish_is_refused_when_the_balance_cannot_cover_the_most_it_may_cost(live_tasks, crowd):
    crowd.balance = Decimal("5.00")
    with pytest.raises(Exception) as raised:
        make_batch(live_tasks["sentiment"], hits=3)
    assert "$5.00" in str(raised.value) and "$7.20" in str(raised.value)
    assert not Batch.objects.exists() and crowd.count("CreateHITWithHITType") == 0


def test_publish_needs_an_https_address_and_an_open_round(live_tasks, crowd, settings):
    settings.PUBLIC_BASE_URL = "http://127.0.0.1:8000"
    with pytest.raises(Exception, match="https"):
        make_batch(live_tasks["sentiment"])
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
    with pytest.raises(Exception, match="no round 9"):
        make_batch(live_tasks["sentiment"], round_number=9)
    with pytest.raises(Exception, match="only writing batches"):
        make_batch(live_tasks["sentiment"], mode="validate")
    assert not Batch.objects.exists()


def test_the_preview_shows_instructions_and_writes_nothing(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    sessions_before = AnnotationSession.objects.count()
    response = arrive(client, hit.hit_id, "ASSIGNMENT_ID_NOT_AVAILABLE", worker_id="")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Write <strong>2</strong> examples" in body and "data-token" not in body
    assert "You have 1 hour once you accept." in body  # a duration people read
    assert "Sign in" not in body and "Sign up" not in body  # inside MTurk's frame nobody signs in
    assert AnnotationSession.objects.count() == sessions_before
    assert not WorkerIdentity.objects.exists() and not Assignment.objects.exists()


@pytest.mark.parametrize("params, status", [
    ({"hitId": "3NOTOURHITNOTOURHITNOTOURHITXX"}, 404),
    ({"turkSubmitTo": "https://evil.example.com"}, 400),
    ({"turkSubmitTo": "https://www.mturk.com"}, 400),  # a sandbox batch, a live link
    ({"workerId": "<script>"}, 400),
    ({"assignmentId": "x' OR 1=1"}, 400),
])
def test_arrivals_that_are_not_real_mturk_links_are_refused_and_write_nothing(live_tasks, crowd, client, params,
                                                                              status):
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    query = {"assignmentId": "3ASSIGNMENTASSIGNMENTASSIGNM01", "hitId": hit.hit_id, "workerId": WORKER,
             "turkSubmitTo": SUBMIT_TO, **params}
    response = client.get(reverse("mturk-hit"), query)
    assert response.status_code == status
    assert "data-token" not in response.content.decode()
    assert not Assignment.objects.exists() and not WorkerIdentity.objects.exists()


def test_only_hit_pages_may_be_framed_by_mturk(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    page = arrive(client, hit.hit_id, crowd.accept(hit.hit_id, WORKER))
    assert "X-Frame-Options" not in page
    assert "frame-ancestors 'self' https://workersandbox.mturk.com https://worker.mturk.com" in \
        page["Content-Security-Policy"]
    home = client.get("/")
    assert home["X-Frame-Options"] == "DENY" and "frame-ancestors 'none'" in home["Content-Security-Policy"]


def test_a_worker_writes_submits_is_verified_approved_and_paid_once_for_verified_fooling_examples(
        live_tasks, crowd, client, researcher):
    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    assert assignment.status == Assignment.Status.FINISHED
    assert not assignment.worker.is_verified  # provisional until MTurk says so

    report = sync.sync()
    assert report.approved == 1 and report.rejected == 0, report
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.APPROVED and assignment.verified_at
    assert assignment.worker.__class__.objects.get(pk=assignment.worker_id).is_verified
    assert crowd.assignments[assignment.assignment_id].status == "Approved"

    examples = list(Example.objects.filter(session=assignment.session))
    assert len(examples) == 2 and sum(e.fooled for e in examples) == 1
    # Nothing is paid while the fooling example waits for its validation.
    assert bonuses.pay_bonuses().waiting == 1 and not BonusPayment.objects.exists()
    for example in examples:
        validation.validate_example(example.pk, researcher, label="correct")
    report = bonuses.pay_bonuses()
    assert report.paid == 1 and report.amount == Decimal("0.25"), report
    [bonus] = crowd.bonuses
    assert bonus["WorkerId"] == WORKER and bonus["BonusAmount"] == "0.25"
    assert bonus["AssignmentId"] == assignment.assignment_id
    # Running again pays nothing more.
    assert bonuses.pay_bonuses().paid == 0 and len(crowd.bonuses) == 1
    assert sync.sync().approved == 0
    ledger = BonusPayment.objects.get()
    assert ledger.status == BonusPayment.Status.PAID and ledger.example_count == 1


def test_a_key_rotation_between_submit_and_sync_rejects_no_one_and_settles_nothing_at_zero(
        live_tasks, crowd, client, researcher, settings):
    """Sign (the completion token, the examples' signatures), rotate SECRET_KEY with the
    old key in SECRET_KEY_FALLBACKS, then sync and pay: approved, and paid in full."""
    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    old = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "a-new-key-" + "x" * 50, [old]

    assert sync.sync().approved == 1
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.APPROVED
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    report = bonuses.pay_bonuses()
    assert report.paid == 1 and report.amount == Decimal("0.25"), report
    assert BonusPayment.objects.get().amount == Decimal("0.25")

    # Without the fallback the same token would not check: the rotation is what it covers.
    settings.SECRET_KEY_FALLBACKS = []
    from crowd.assignments import completion_ok, completion_token

    token = completion_token(assignment, old)
    assert not completion_ok(assignment, token)
    settings.SECRET_KEY_FALLBACKS = [old]
    assert completion_ok(assignment, token)


def test_rejected_and_unvalidated_examples_earn_no_bonus(live_tasks, crowd, client, researcher, settings):
    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    sync.sync()
    fooling = Example.objects.get(session=assignment.session, fooled=True)
    validation.validate_example(fooling.pk, researcher, label="incorrect")
    report = bonuses.pay_bonuses()
    ledger = BonusPayment.objects.get()
    assert ledger.amount == 0 and ledger.status == BonusPayment.Status.PAID and report.paid == 0
    assert crowd.bonuses == []
    assert ledger.note == "0 of 1 model-fooling example counted; 1 rejected"  # a $0 settlement says why


def test_a_forged_worker_id_earns_nothing(live_tasks, crowd, client, researcher):
    """Someone opens the HIT URL with a real worker's id and a made-up assignment: the
    work is recorded under a provisional identity, MTurk never lists it, nobody is paid."""
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    page = arrive(client, hit.hit_id, "3FORGEDFORGEDFORGEDFORGEDFORG1", worker_id=OTHER_WORKER)
    token = token_of(page)
    write_pair(api(token), "sentiment", "Forged work.")
    completion, _ = submit_here(client, token)
    for example in Example.objects.filter(annotator__mturk_identity__worker_id=OTHER_WORKER):
        validation.validate_example(example.pk, researcher, label="correct")
    sync.sync()
    bonuses.pay_bonuses()
    forged = Assignment.objects.get(worker__worker_id=OTHER_WORKER)
    assert forged.status == Assignment.Status.FINISHED and forged.verified_at is None
    assert not WorkerIdentity.objects.get(worker_id=OTHER_WORKER).is_verified
    assert crowd.bonuses == [] and not BonusPayment.objects.exists()
    assert crowd.count("ApproveAssignment") == 0


def test_a_submission_without_our_completion_token_is_rejected_with_feedback(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    assignment_id = crowd.accept(hit.hit_id, WORKER)
    token = token_of(arrive(client, hit.hit_id, assignment_id))
    write_pair(api(token), "sentiment", "Some text here.")
    submit_here(client, token)
    crowd.submit(assignment_id, {"completionToken": "0" * 64})
    stranger = crowd.accept(hit.hit_id, OTHER_WORKER)  # never opened our page
    crowd.submit(stranger, {"completionToken": "anything"})
    report = sync.sync()
    assert report.rejected == 2 and report.approved == 0
    rejected = {a.assignment_id: a for a in crowd.assignments.values() if a.status == "Rejected"}
    assert set(rejected) == {assignment_id, stranger}
    assert sync.BAD_TOKEN == Assignment.objects.get(assignment_id=assignment_id).feedback
    assert not WorkerIdentity.objects.get(worker_id=WORKER).is_verified


def test_a_submitted_assignment_cannot_write_again(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    assignment_id = crowd.accept(hit.hit_id, WORKER)
    token = token_of(arrive(client, hit.hit_id, assignment_id))
    write_pair(api(token), "sentiment", "Some text here.")
    submit_here(client, token)
    context = Example.objects.first().context_id
    again = api(token).post("/api/tasks/sentiment/examples/", {
        "context": context, "inputs": {"statement": "more"}, "target": {"label": "positive"}}, format="json")
    assert again.status_code in (401, 403) and "submitted" in again.content.decode()
    reopened = arrive(client, hit.hit_id, assignment_id)
    assert reopened.status_code == 409 and "data-token" not in reopened.content.decode()
    assert client.post(reverse("mturk-hit-submit"), {"token": token}).status_code == 403
    assert Example.objects.count() == 2


def test_submit_before_the_work_is_done_is_refused(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"], examples_per_assignment=3)
    hit = batch.hit_rows.first()
    token = token_of(arrive(client, hit.hit_id, crowd.accept(hit.hit_id, WORKER)))
    write_pair(api(token), "sentiment", "Only two.")
    response = client.post(reverse("mturk-hit-submit"), {"token": token})
    body = " ".join(response.content.decode().split())
    assert response.status_code == 409 and "asks for 3 examples; you have done 2 so far. Do 1 more" in body
    assert Assignment.objects.get().status == Assignment.Status.WORKING
    # The worker stays on the work: the write form, its token and the HIT bar, counting what is done.
    assert 'id="example-form"' in body and f'data-token="{token}"' in body
    assert '<strong id="hit-done">2</strong> of 3' in body
    assert "Sign in" not in body and "Sign up" not in body
    # A retracted example stops counting, on the page as on the server.
    api(token).post(f"/api/examples/{Example.objects.first().pk}/retract/")
    page = " ".join(arrive(client, hit.hit_id, Assignment.objects.get().assignment_id).content.decode().split())
    assert '<strong id="hit-done">1</strong> of 3' in page


def test_submit_comes_after_the_work_and_a_refusal_goes_once_the_work_is_done(live_tasks, crowd, client):
    """The HIT bar (what is asked, what is done) is above the work; Submit and its refusal
    follow the work, in the page's order; the refusal is never shown once enough is done."""
    from django.template.loader import render_to_string

    batch = make_batch(live_tasks["sentiment"], examples_per_assignment=3)
    hit = batch.hit_rows.first()
    token = token_of(arrive(client, hit.hit_id, crowd.accept(hit.hit_id, WORKER)))
    write_pair(api(token), "sentiment", "Only two.")
    body = client.post(reverse("mturk-hit-submit"), {"token": token}).content.decode()
    assert body.index('class="hit-bar"') < body.index('id="context-h"') < body.index('id="example-form"') \
        < body.index('id="result"') < body.index('id="hit-submit-error"') < body.index('id="hit-submit"')
    assert "Bonus: $0.25 for each example" in body
    refusal = re.search(r'id="hit-submit-error">([^<]*)<', body).group(1)
    assert "Do 1 more, then submit." in refusal
    # The same refusal, rendered once the work is done (a Submit racing the last example), is not shown.
    for done, shown in ((2, True), (3, False), (4, False)):
        html = render_to_string("crowd/_hit_submit.html", {"batch": batch, "done": done, "token": token,
                                                            "submit_error": refusal})
        assert (refusal in html) is shown, done
    validating = make_batch(live_tasks["sentiment"], mode="validate", bonus_per_example=Decimal("0"),
                            examples_per_assignment=1)
    hit = validating.hit_rows.first()
    page = arrive(client, hit.hit_id, crowd.accept(hit.hit_id, OTHER_WORKER)).content.decode()
    assert page.index('class="hit-bar"') < page.index('id="item"') < page.index('id="hit-submit-form"')


def test_the_assignment_token_works_only_for_its_task_and_its_kind_of_work(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    token = token_of(arrive(client, hit.hit_id, crowd.accept(hit.hit_id, WORKER)))
    worker_api = api(token)
    assert worker_api.get("/api/tasks/sentiment/contexts/next/").status_code == 200
    assert worker_api.get("/api/tasks/nli/contexts/next/").status_code == 403
    assert worker_api.get("/api/tasks/sentiment/validations/next/").status_code == 403  # a writing HIT
    assert worker_api.post("/api/tasks/sentiment/sessions/").status_code == 403
    assert worker_api.get("/api/tasks/").status_code == 403
    assert client.get(f"/tasks/sentiment/validate/?token={token}").status_code == 403


def test_mturk_workers_cannot_sign_in_with_a_password_or_reach_the_admin(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    arrive(client, hit.hit_id, crowd.accept(hit.hit_id, WORKER))
    user = WorkerIdentity.objects.get(worker_id=WORKER).user
    assert not user.has_usable_password()
    user.set_password("a password someone set")
    user.save()
    assert not client.login(username=user.username, password="a password someone set")
    response = APIClient().post("/api/auth/token/", {"username": user.username,
                                                    "password": "a password someone set"}, format="json")
    assert response.status_code == 401
    client.force_login(user)
    assert client.get("/admin/").status_code == 302  # to the admin's sign-in: not staff


def test_a_returned_assignment_is_detected_and_its_id_may_go_to_another_worker(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"], assignment_duration_seconds=60)
    hit = batch.hit_rows.first()
    assignment_id = crowd.accept(hit.hit_id, WORKER)
    first_token = token_of(arrive(client, hit.hit_id, assignment_id))
    crowd.return_assignment(assignment_id)
    # MTurk hands the same id to the next worker: a separate row, a separate session.
    crowd.accept(hit.hit_id, OTHER_WORKER, assignment_id=assignment_id)
    second = arrive(client, hit.hit_id, assignment_id, OTHER_WORKER)
    assert second.status_code == 200 and token_of(second) != first_token
    assert Assignment.objects.filter(assignment_id=assignment_id).count() == 2
    # The first worker's row stays until MTurk lists the id under the other worker.
    write_pair(api(token_of(second)), "sentiment", "Second worker writes.")
    completion, _ = submit_here(client, token_of(second))
    crowd.submit(assignment_id, {"completionToken": completion})
    report = sync.sync()
    assert report.returned == 1 and report.approved == 1
    first = Assignment.objects.get(assignment_id=assignment_id, worker__worker_id=WORKER)
    assert first.status == Assignment.Status.RETURNED
    assert api(first_token).get("/api/tasks/sentiment/contexts/next/").status_code in (401, 403)


def test_an_abandoned_assignment_is_marked_returned_at_its_deadline(live_tasks, crowd, client):
    from datetime import timedelta

    from django.utils import timezone

    batch = make_batch(live_tasks["sentiment"], assignment_duration_seconds=60)
    hit = batch.hit_rows.first()
    token = token_of(arrive(client, hit.hit_id, crowd.accept(hit.hit_id, WORKER)))
    Assignment.objects.update(deadline=timezone.now() - timedelta(seconds=1))
    assert sync.sync().returned == 1
    assert Assignment.objects.get().status == Assignment.Status.RETURNED
    assert api(token).get("/api/tasks/sentiment/contexts/next/").status_code in (401, 403)


def test_a_lost_send_bonus_answer_still_pays_exactly_once(live_tasks, crowd, client, researcher):
    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    sync.sync()
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    crowd.inject("SendBonus", "drop_after_commit")  # MTurk pays, the answer is lost, boto3 retries
    report = bonuses.pay_bonuses()
    assert report.paid == 1, report
    assert len(crowd.bonuses) == 1 and crowd.count("SendBonus") == 2
    assert BonusPayment.objects.get().status == BonusPayment.Status.PAID


def test_an_unanswered_bonus_is_reconciled_before_any_retry(live_tasks, crowd, client, researcher, settings):
    settings.MTURK_MAX_ATTEMPTS = 1  # no boto3 retry: the lost answer reaches our code
    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    sync.sync()
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    crowd.inject("SendBonus", "drop_after_commit")
    report = bonuses.pay_bonuses()
    assert report.paid == 0 and len(report.errors) == 1
    ledger = BonusPayment.objects.get()
    assert ledger.status == BonusPayment.Status.PENDING and "may or may not" in ledger.last_error
    BonusPayment.objects.update(next_attempt_at=ledger.created_at)  # due again
    bonuses.pay_bonuses()
    ledger.refresh_from_db()
    assert ledger.status == BonusPayment.Status.PAID
    assert len(crowd.bonuses) == 1 and crowd.count("SendBonus") == 1 and crowd.count("ListBonusPayments") == 1


def paid_example_ready(live_tasks, crowd, client, researcher):
    """An approved assignment with one verified fooling example, its ledger row settled."""
    assignment = do_one_assignment(client, crowd, make_batch(live_tasks["sentiment"]))
    sync.sync()
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    return bonuses.settle(Assignment.objects.get(pk=assignment.pk))


def test_already_processed_is_no_proof_of_payment(live_tasks, crowd, client, researcher):
    """MTurk answers "already been processed" but lists no payment: the row is not paid."""
    from django.utils import timezone

    ledger = paid_example_ready(live_tasks, crowd, client, researcher)
    crowd.inject("SendBonus", "duplicate")
    report = bonuses.pay_bonuses()
    assert report.paid == 0 and len(report.errors) == 1
    ledger.refresh_from_db()
    assert ledger.status == BonusPayment.Status.FAILED and ledger.paid_at is None
    assert "lists no such payment: not paid" in ledger.last_error
    assert ledger.next_attempt_at > timezone.now() + bonuses.TOKEN_LIFETIME - timedelta(minutes=1)
    assert crowd.bonuses == [] and crowd.count("ListBonusPayments") == 1


def test_a_run_that_lost_its_lease_mid_call_marks_nothing(live_tasks, crowd, client, researcher, monkeypatch):
    """The call outlives the lease: another run claims the row meanwhile. The late run's
    "paid" is not written; the run that holds the row finds the payment on MTurk."""
    ledger = paid_example_ready(live_tasks, crowd, client, researcher)
    real_send = mturk.send_bonus

    def slow_send(**kwargs):  # the lease runs out while MTurk answers: another run claims the row
        BonusPayment.objects.filter(pk=ledger.pk).update(attempts=F("attempts") + 1)
        return real_send(**kwargs)

    monkeypatch.setattr(mturk, "send_bonus", slow_send)
    assert bonuses.send(ledger) is False
    ledger.refresh_from_db()
    assert ledger.status == BonusPayment.Status.PENDING and ledger.paid_at is None  # not this run's to write
    monkeypatch.setattr(mturk, "send_bonus", real_send)
    BonusPayment.objects.filter(pk=ledger.pk).update(next_attempt_at=ledger.created_at)  # the holder's turn
    assert bonuses.pay_bonuses().paid == 1
    assert len(crowd.bonuses) == 1 and crowd.count("SendBonus") == 1  # reconciled, never sent twice


def test_a_sync_that_outlived_its_lock_leaves_the_next_runs_lock_alone(live_tasks, crowd, monkeypatch):
    batch = make_batch(live_tasks["sentiment"])
    real_list = mturk.list_assignments

    def slow_list(*args, **kwargs):  # MTurk answers after the lock expired and another sync took it
        Batch.objects.filter(pk=batch.pk).update(sync_holder="another-run",
                                                 sync_held_until=timezone.now() + timedelta(minutes=5))
        return real_list(*args, **kwargs)

    monkeypatch.setattr(mturk, "list_assignments", slow_list)
    monkeypatch.setattr(sync, "SYNC_LOCK_SECONDS", 0)  # renew (and so notice) at every step
    stopped = sync.sync_batch(batch)
    assert "outlived its lock" in " ".join(stopped.errors)  # it stopped instead of deciding on
    batch.refresh_from_db()
    assert batch.sync_holder == "another-run"  # still held by the run that holds it
    monkeypatch.setattr(mturk, "list_assignments", real_list)
    monkeypatch.setattr(sync, "SYNC_LOCK_SECONDS", 900)
    assert "another sync is running" in " ".join(sync.sync_batch(batch).errors)
    Batch.objects.filter(pk=batch.pk).update(sync_held_until=timezone.now() - timedelta(seconds=1))  # it expired
    assert not sync.sync_batch(batch).errors
    batch.refresh_from_db()
    assert batch.sync_holder == "" and batch.sync_held_until is None  # a run releases its own


def test_a_long_sync_renews_its_lock_so_a_second_run_cannot_start(live_tasks, crowd, monkeypatch):
    batch = make_batch(live_tasks["sentiment"], hits=3)
    monkeypatch.setattr(sync, "SYNC_LOCK_SECONDS", 0.6)
    real_list, second = mturk.list_assignments, []

    def slow_list(hit_id, **kwargs):  # each HIT's listing takes longer than the lock lasts unrenewed
        time.sleep(0.35)
        if len(second) < 3:
            second.append(sync.sync_batch(Batch.objects.get(pk=batch.pk)))
        return real_list(hit_id, **kwargs)

    monkeypatch.setattr(mturk, "list_assignments", slow_list)
    first = sync.sync_batch(batch)
    assert not first.errors
    assert len(second) == 3 and all("another sync is running" in " ".join(r.errors) for r in second)


def test_two_syncs_never_decide_one_assignment_twice(live_tasks, crowd, client, monkeypatch):
    """The other run decides the assignment while this one waits on MTurk: this run's
    write finds the status changed and counts and ends nothing."""
    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    real_approve = mturk.approve

    def approve_while_another_run_rejects(assignment_id, feedback, **kwargs):
        Assignment.objects.filter(pk=assignment.pk).update(status=Assignment.Status.REJECTED,
                                                           feedback="the other run's decision")
        return real_approve(assignment_id, feedback, **kwargs)

    monkeypatch.setattr(mturk, "approve", approve_while_another_run_rejects)
    report = sync.sync_batch(batch)
    assignment.refresh_from_db()
    assert report.approved == 0
    assert assignment.status == Assignment.Status.REJECTED and assignment.feedback == "the other run's decision"


def test_a_bonus_mturk_keeps_refusing_ends_for_good_and_tells_the_admins(live_tasks, crowd, client, researcher,
                                                                          settings, mailoutbox):
    settings.BONUS_MAX_ATTEMPTS, settings.ADMINS = 3, [("Ops", "ops@example.org")]
    ledger = paid_example_ready(live_tasks, crowd, client, researcher)
    crowd.assignments[ledger.assignment.assignment_id].status = "Submitted"  # MTurk refuses: not approved there
    for attempt in range(1, 4):
        report = bonuses.pay_bonuses()
        assert report.paid == 0 and len(report.errors) == 1
        ledger.refresh_from_db()
        assert ledger.attempts == attempt
        BonusPayment.objects.filter(pk=ledger.pk).update(next_attempt_at=ledger.created_at)  # due again at once
    ledger.refresh_from_db()
    assert ledger.status == BonusPayment.Status.GAVE_UP and "refused this bonus 3 times" in ledger.last_error
    assert len(mailoutbox) == 1 and ledger.assignment.worker.worker_id in mailoutbox[0].subject
    assert bonuses.pay_bonuses().errors == [] and crowd.count("SendBonus") == 3  # no fourth try, ever
    assert crowd.bonuses == []


def test_the_lease_outlives_both_calls_with_every_retry(settings):
    for attempts in (1, 4, 10):
        settings.MTURK_MAX_ATTEMPTS = attempts
        assert bonuses.lease() > 2 * timedelta(seconds=mturk.longest_call_seconds())
    assert mturk.longest_call_seconds() >= 10 * (mturk.CONNECT_TIMEOUT + mturk.READ_TIMEOUT)


def test_too_little_money_for_a_bonus_fails_clearly_and_pays_after_a_top_up(live_tasks, crowd, client, researcher):
    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    sync.sync()
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    crowd.balance = Decimal("0.10")
    report = bonuses.pay_bonuses()
    assert report.paid == 0 and "too little money" in report.errors[0]
    ledger = BonusPayment.objects.get()
    assert ledger.status == BonusPayment.Status.FAILED and ledger.next_attempt_at > ledger.created_at
    assert bonuses.pay_bonuses().paid == 0  # not due yet: no crash loop
    crowd.balance = Decimal("100.00")
    BonusPayment.objects.update(next_attempt_at=ledger.created_at)
    assert bonuses.pay_bonuses().paid == 1 and len(crowd.bonuses) == 1


def test_throttling_is_retried_by_boto3_and_reported_when_it_persists(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    crowd.inject("ListAssignmentsForHIT", "throttle", times=1)
    assert sync.sync().approved == 1  # one throttle: boto3's retry gets through
    crowd.inject("ListAssignmentsForHIT", "throttle", times=50)
    report = sync.sync()
    assert report.errors and "throttling" in report.errors[0]
    batch.refresh_from_db()
    assert "throttling" in batch.last_error
    assert Assignment.objects.get(pk=assignment.pk).status == Assignment.Status.APPROVED


def test_a_validation_batch_counts_decisions_and_pays_no_bonus(live_tasks, crowd, client, annotator, token_client):
    # Someone else wrote the examples to validate.
    writer = token_client(annotator, live_tasks["sentiment"])
    write_pair(writer, "sentiment", "Written to be validated.")
    batch = make_batch(live_tasks["sentiment"], mode="validate", bonus_per_example=Decimal("0"),
                       examples_per_assignment=1)
    hit = batch.hit_rows.first()
    assignment_id = crowd.accept(hit.hit_id, WORKER)
    page = arrive(client, hit.hit_id, assignment_id)
    assert page.status_code == 200 and 'data-page="validate"' in page.content.decode()
    validator = api(token_of(page))
    assert validator.get("/api/tasks/sentiment/contexts/next/").status_code == 403  # not a writing HIT
    item = validator.get("/api/tasks/sentiment/validations/next/").json()
    assert validator.post(f"/api/examples/{item['id']}/blind-answer/", {"answer": {"label": "negative"}},
                          format="json").status_code == 201
    assert validator.post(f"/api/examples/{item['id']}/validations/", {"label": "correct"},
                          format="json").status_code == 201
    # Provisional: stored, but it counts only once MTurk confirms the assignment.
    assert Example.objects.get(pk=item["id"]).validations_correct == 0
    completion, _ = submit_here(client, token_of(page))
    crowd.submit(assignment_id, {"completionToken": completion})
    assert sync.sync().approved == 1
    assert Example.objects.get(pk=item["id"]).validations_correct == 1
    assert bonuses.pay_bonuses().settled == 0


def test_finished_batches_are_expired_on_mturk(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"], hits=1, assignments_per_hit=1)
    do_one_assignment(client, crowd, batch)
    report = sync.sync()
    assert report.finished_batches == 1
    batch.refresh_from_db()
    assert batch.status == Batch.Status.FINISHED and batch.finished_at
    assert crowd.count("UpdateExpirationForHIT") == 1
    assert Hit.objects.get().expired_at is not None
    page = arrive(client, Hit.objects.get().hit_id, "3LATEARRIVALLATEARRIVALLATEAR1")
    assert page.status_code == 410  # an ended batch takes no one


def test_the_commands_publish_sync_and_pay(live_tasks, crowd, client, researcher, capsys):
    call_command("mturk_publish", "--task", "sentiment", "--mode", "create", "--hits", "1", "--assignments", "1",
                 "--reward", "0.50", "--bonus", "0.25", "--examples-per-assignment", "2", "--yes")
    batch_id = int(capsys.readouterr().out.strip())
    batch = Batch.objects.get(pk=batch_id)
    assignment = do_one_assignment(client, crowd, batch)
    call_command("mturk_sync", "--batch", str(batch_id))
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    call_command("mturk_pay_bonuses")
    call_command("mturk_pay_bonuses")
    assert len(crowd.bonuses) == 1
    # The beat tasks run the same services (safe to run again).
    from crowd import tasks as crowd_tasks

    # The finished batch is still watched (MTurk may hold late submissions), and nothing new is decided.
    assert crowd_tasks.sync.delay().get().startswith("1 submissions seen, 0 approved, 0 rejected")
    assert crowd_tasks.pay_bonuses.delay().get().startswith("0 assignments settled, 0 bonuses paid")


def test_workers_below_the_batch_quality_threshold_are_blocked_on_its_task_only(live_tasks, crowd, client,
                                                                                researcher):
    """A researcher's threshold keeps a worker out of their own task's HITs, and no
    other task's: a block on every task stays with superusers."""
    other_task = make_batch(live_tasks["nli"])  # another researcher's task, in principle
    batch = make_batch(live_tasks["sentiment"], examples_per_assignment=6, quality_block_threshold=0.5)
    hit = batch.hit_rows.first()
    assignment_id = crowd.accept(hit.hit_id, WORKER)
    token = token_of(arrive(client, hit.hit_id, assignment_id))
    for n in range(3):
        write_pair(api(token), "sentiment", f"Text number {n}.")
    for example in Example.objects.all():
        validation.validate_example(example.pk, researcher, label="incorrect")
    completion, _ = submit_here(client, token)
    crowd.submit(assignment_id, {"completionToken": completion})
    report = sync.sync()
    assert report.task_blocked == 1
    identity = WorkerIdentity.objects.get(worker_id=WORKER)
    assert identity.soft_blocked_at is None  # not on every task
    block = TaskBlock.objects.get(worker=identity)
    assert block.task == batch.task and block.batch == batch and "50%" in block.reason
    # Judged on the task's examples only: the worker has none decided on nli.
    assert workers.below_threshold(WorkerIdentity.objects.all(), 0.5, task=live_tasks["nli"]) == []
    [given] = [params for op, params in crowd.calls if op == "AssociateQualificationWithWorker"]
    assert given["QualificationTypeId"] == workers.block_qualification_id(True, batch.task)
    assert given["QualificationTypeId"] != workers.block_qualification_id(True)
    # Our page refuses the worker on the task too, not only MTurk ...
    other_hit = batch.hit_rows.exclude(pk=hit.pk).first()
    assert arrive(client, other_hit.hit_id, "3BLOCKEDBLOCKEDBLOCKEDBLOCKED1").status_code == 403
    # ... and MTurk hides the task's HITs from them, but another task's HITs still admit them.
    with pytest.raises(WorkerActionError, match="lacks"):
        crowd.accept(other_hit.hit_id, WORKER)
    nli_hit = other_task.hit_rows.first()
    assert arrive(client, nli_hit.hit_id, crowd.accept(nli_hit.hit_id, WORKER)).status_code == 200


def test_a_crash_after_mturk_paid_is_reconciled_and_a_held_row_is_left_to_its_holder(live_tasks, crowd, client,
                                                                                   researcher):
    from datetime import timedelta

    from django.utils import timezone

    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    sync.sync()
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    ledger = bonuses.settle(Assignment.objects.get(pk=assignment.pk))
    # Another run holds the row (its lease is not over): this run sends nothing.
    BonusPayment.objects.update(next_attempt_at=timezone.now() + timedelta(minutes=5))
    assert bonuses.send(ledger) is False and crowd.count("SendBonus") == 0
    # That run sent the bonus, then died before writing it down (attempt 1, still pending).
    mturk.send_bonus(worker_id=WORKER, assignment_id=assignment.assignment_id, amount=ledger.amount,
                     reason=ledger.message, unique_request_token=ledger.unique_request_token)
    BonusPayment.objects.update(attempts=1, next_attempt_at=timezone.now() - timedelta(seconds=1))
    assert bonuses.pay_bonuses().paid == 1
    assert len(crowd.bonuses) == 1 and crowd.count("SendBonus") == 1  # found by ListBonusPayments, not resent
    assert BonusPayment.objects.get().status == BonusPayment.Status.PAID


def test_unconfirmed_hit_work_stays_out_of_the_queue_and_the_public_numbers(live_tasks, crowd, client,
                                                                              client_for, second_annotator):
    """A worker id typed into a URL writes examples in a provisional session: until MTurk
    confirms the assignment they are neither served to validators nor counted in public."""
    from annotation.stats import round_stats

    task = live_tasks["sentiment"]
    assignment = do_one_assignment(client, crowd, make_batch(task))
    assert assignment.session.provisional
    validator = client_for(second_annotator)
    assert validator.get("/api/tasks/sentiment/validations/next/").status_code == 204
    public = client.get(f"/api/tasks/sentiment/rounds/{task.open_round().number}/stats/").json()
    assert public["collected"] == 0 and public["fooled"] == 0
    assert round_stats(task.open_round())["annotators"] == []

    assert sync.sync().approved == 1  # MTurk confirms: the work counts from now on
    public = client.get(f"/api/tasks/sentiment/rounds/{task.open_round().number}/stats/").json()
    assert public["collected"] == 2 and public["fooled"] == 1
    item = validator.get("/api/tasks/sentiment/validations/next/").json()
    assert Example.objects.get(pk=item["id"]).session_id == assignment.session_id


def test_made_up_validators_decide_nothing_and_earn_no_one_a_bonus(live_tasks, crowd, client, settings):
    """Made-up worker ids on a validate HIT (its id is public in the preview) 'verify' a
    mislabelled example: their decisions are stored but never count, so it stays
    undecided and its writer is paid nothing for it."""
    create = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, create)
    sync.sync()
    fooling = Example.objects.get(session=assignment.session, fooled=True)
    check = make_batch(live_tasks["sentiment"], mode="validate", bonus_per_example=Decimal("0"))
    hit_id = check.hit_rows.first().hit_id
    for n in range(3):
        page = arrive(client, hit_id, f"3SYBILSYBILSYBILSYBILSYBIL{n:04d}", worker_id=f"AFAKESYBIL{n:04d}")
        sybil = api(token_of(page))
        assert sybil.get("/api/tasks/sentiment/validations/next/").json()["id"] == fooling.pk  # the queue's head
        assert sybil.post(f"/api/examples/{fooling.pk}/blind-answer/", {"answer": fooling.target},
                          format="json").status_code == 201
        assert sybil.post(f"/api/examples/{fooling.pk}/validations/", {"label": "correct"},
                          format="json").status_code == 201
    fooling.refresh_from_db()
    assert fooling.validation_status == Example.ValidationStatus.PENDING and fooling.validations_correct == 0
    assert bonuses.pay_bonuses().paid == 0 and crowd.bonuses == []


def allow_examples_per_assignment(task, count):
    """The task config's cap on examples per assignment (by default twice the HIT's own)."""
    task.config = {**task.config, "crowd_limits": {"examples_per_assignment": count}}
    task.save()


def test_the_bonus_is_capped_at_the_examples_the_hit_asked_for(live_tasks, crowd, client, researcher):
    allow_examples_per_assignment(live_tasks["sentiment"], 8)
    batch = make_batch(live_tasks["sentiment"], hits=1, assignments_per_hit=1, examples_per_assignment=2)
    hit = batch.hit_rows.first()
    assignment_id = crowd.accept(hit.hit_id, WORKER)
    token = token_of(arrive(client, hit.hit_id, assignment_id))
    for n in range(4):
        write_pair(api(token), "sentiment", f"Statement number {n}.")
    completion, _ = submit_here(client, token)
    crowd.submit(assignment_id, {"completionToken": completion})
    sync.sync()
    for example in Example.objects.all():
        validation.validate_example(example.pk, researcher, label="correct")
    bonuses.pay_bonuses()
    [bonus] = crowd.bonuses
    assert bonus["BonusAmount"] == "0.50"  # 2 x $0.25, though 4 examples fooled the model
    assert BonusPayment.objects.get().example_count == 2
    assert costs.batch_spend(batch).total <= batch.max_cost


def test_junk_under_a_real_workers_id_does_not_spoil_their_quality(live_tasks, crowd, client, researcher):
    allow_examples_per_assignment(live_tasks["sentiment"], 6)
    batch = make_batch(live_tasks["sentiment"], quality_block_threshold=0.5)
    hit = batch.hit_rows.first()
    # Someone uses the real worker's id with a made-up assignment and writes junk ...
    token = token_of(arrive(client, hit.hit_id, "3FORGEDFORGEDFORGEDFORGEDFORG2"))
    for n in range(3):
        write_pair(api(token), "sentiment", f"Junk {n}.")
    for example in Example.objects.all():
        validation.validate_example(example.pk, researcher, label="incorrect")
    # ... while the real worker does one real assignment.
    do_one_assignment(client, crowd, batch, text="Real work.")
    report = sync.sync()
    assert report.task_blocked == 0 and WorkerIdentity.objects.get(worker_id=WORKER).soft_blocked_at is None
    assert not TaskBlock.objects.exists() and crowd.count("AssociateQualificationWithWorker") == 0


def test_a_signup_named_like_a_worker_cannot_lock_the_worker_out(live_tasks, crowd, client, django_user_model):
    django_user_model.objects.create_user(username=f"mturk-{WORKER.lower()}", password="x" * 20)
    django_user_model.objects.create_user(username=f"mturk_{WORKER}", password="x" * 20)
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    assert arrive(client, hit.hit_id, crowd.accept(hit.hit_id, WORKER)).status_code == 200
    assert WorkerIdentity.objects.get(worker_id=WORKER).user.username == f"mturk:{WORKER}"
    signup = client.post("/accounts/signup/", {"username": f"mturk:{OTHER_WORKER}", "password1": "q8!Zr2#long-pass",
                                               "password2": "q8!Zr2#long-pass"})
    assert signup.status_code == 200 and not django_user_model.objects.filter(
        username=f"mturk:{OTHER_WORKER}").exists()  # ':' is refused at sign-up


def test_a_finished_batch_is_still_synced_so_a_direct_submission_is_rejected(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"], hits=1, assignments_per_hit=2)
    do_one_assignment(client, crowd, batch)
    hit = batch.hit_rows.get()
    stranger = crowd.accept(hit.hit_id, OTHER_WORKER)  # never opens our page
    sync.expire_batch(batch)
    crowd.submit(stranger, {"completionToken": "junk"})
    report = sync.sync()
    assert report.rejected == 1 and report.approved == 1
    assert crowd.assignments[stranger].status == "Rejected"


def test_expiring_a_batch_lets_workers_finish_what_they_took(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    assignment_id = crowd.accept(hit.hit_id, WORKER)
    first = arrive(client, hit.hit_id, assignment_id)
    sync.expire_batch(batch)
    again = arrive(client, hit.hit_id, assignment_id)
    assert again.status_code == 200 and token_of(again) == token_of(first)
    assert arrive(client, hit.hit_id, "3NEWCOMERNEWCOMERNEWCOMERNEW01", OTHER_WORKER).status_code == 410


def test_finished_work_survives_an_mturk_outage(live_tasks, crowd, client):
    from datetime import timedelta

    from django.utils import timezone

    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    Assignment.objects.filter(pk=assignment.pk).update(deadline=timezone.now() - timedelta(hours=3))
    crowd.inject("ListAssignmentsForHIT", "server_error", times=3)  # all 3 attempts of the one listing
    assert sync.sync().errors
    assert Assignment.objects.get(pk=assignment.pk).status == Assignment.Status.FINISHED
    assert sync.sync().approved == 1  # MTurk answers again: the finished work is approved
    assert Assignment.objects.get(pk=assignment.pk).status == Assignment.Status.APPROVED


def test_publishing_refuses_a_hidden_task_bad_locales_and_a_short_auto_approval(live_tasks, crowd):
    task = live_tasks["sentiment"]
    with pytest.raises(Exception, match="auto_approval_delay_seconds"):
        make_batch(task, auto_approval_delay_seconds=60)
    with pytest.raises(Exception, match="locales"):
        make_batch(task, locales=("us",))
    task.is_hidden = True
    task.save()
    with pytest.raises(Exception, match="not public"):
        make_batch(task)
    assert not Batch.objects.exists()


def test_reward_and_bonus_are_bounded_by_settings(live_tasks, crowd, settings):
    """$99,999.99 fitted the columns: a typo or a hostile researcher could offer it."""
    from core.errors import InvalidInput

    task = live_tasks["sentiment"]
    settings.CROWD_MAX_REWARD, settings.CROWD_MAX_BONUS_PER_EXAMPLE = Decimal("1.00"), Decimal("0.50")
    with pytest.raises(InvalidInput) as too_much:
        make_batch(task, reward=Decimal("1.01"))
    assert "from 0.01 to 1.00 (CROWD_MAX_REWARD)" in str(too_much.value)
    with pytest.raises(InvalidInput, match="bonus"):
        make_batch(task, bonus_per_example=Decimal("0.51"))
    assert not Batch.objects.exists() and crowd.hits == {}  # refused before any MTurk call
    assert make_batch(task, reward=Decimal("1.00"), bonus_per_example=Decimal("0.50")).pk


def test_one_address_opens_a_bounded_number_of_new_assignments(live_tasks, crowd, client, settings):
    settings.MTURK_ARRIVALS_PER_ADDRESS = 2
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    for n in range(2):
        assert arrive(client, hit.hit_id, f"3MANYMANYMANYMANYMANYMANYMA{n:03d}", f"AMANY{n:08d}").status_code == 200
    refused = arrive(client, hit.hit_id, "3MANYMANYMANYMANYMANYMANYMA999", "AMANY99999999")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert arrive(client, hit.hit_id, "3MANYMANYMANYMANYMANYMANYMA000", "AMANY00000000").status_code == 200  # a return
    assert Assignment.objects.count() == 2


@pytest.mark.parametrize("closing", ["hidden", "inactive", "no open round"])
def test_a_hidden_or_closed_task_refuses_hit_arrivals(live_tasks, crowd, client, closing):
    task = live_tasks["sentiment"]
    hit = make_batch(task).hit_rows.first()
    assert arrive(client, hit.hit_id, "3OPENOPENOPENOPENOPENOPENOPEN1").status_code == 200
    if closing == "hidden":
        task.is_hidden = True
    elif closing == "inactive":
        task.is_active = False
    else:
        from tasks.services import close_round

        close_round(task.open_round())
    task.save()
    for assignment_id in ("3OPENOPENOPENOPENOPENOPENOPEN2", "3OPENOPENOPENOPENOPENOPENOPEN1"):  # new, and a return
        refused = arrive(client, hit.hit_id, assignment_id)
        assert refused.status_code == 410, refused.content
        assert "please return the HIT" in refused.content.decode()
    assert Assignment.objects.count() == 1


def test_ids_with_a_trailing_newline_are_refused(live_tasks, crowd, client):
    batch = make_batch(live_tasks["sentiment"])
    hit = batch.hit_rows.first()
    assert arrive(client, hit.hit_id, "3ASSIGNMENTASSIGNMENTASSIGNM01", f"{WORKER}\n").status_code == 400
    assert arrive(client, hit.hit_id, "3ASSIGNMENTASSIGNMENTASSIGNM01\n").status_code == 400
    assert not WorkerIdentity.objects.exists()
