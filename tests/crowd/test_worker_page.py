"""A worker's own page (/me/, /api/me/, and inside a HIT under its token): what they
wrote, whether their votes counted and why not, their HITs and pay from the ledger,
their standing; and that nobody sees anyone else's."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from annotation import validation
from annotation.models import AccountEmail, Example, Validation
from annotation.serving import assign
from crowd import bonuses, me, sync
from crowd.models import WorkerIdentity
from tests.crowd.test_crowd_flow import (
    WORKER,
    api,
    arrive,
    do_one_assignment,
    make_batch,
    submit_here,
    token_of,
    write_pair,
)

pytestmark = pytest.mark.django_db


def write(task, user, n=1, *, fooled=True, text="A statement"):
    return [Example.objects.create(
        task=task, round=task.open_round(), context=task.contexts.first(), annotator=user,
        inputs={"statement": f"{text} {i}"}, target={"label": "positive"}, fooled=fooled,
        prediction={"label": "negative" if fooled else "positive"}) for i in range(n)]


def vote(example, user, label="correct"):
    assign(example, user)
    if not validation.is_researcher(user, example.task):
        validation.give_blind_answer(example.pk, user, {"label": "positive"})
    validation.validate_example(example.pk, user, label=label)
    return Validation.objects.get(example=example, validator=user)


def test_the_page_lists_my_examples_with_status_and_whether_they_fooled_the_model(demo_tasks, annotator,
                                                                                client_for, researcher):
    task = demo_tasks["sentiment"]
    verified, rejected, retracted, flagged, pending = write(task, annotator, 5)
    pending.fooled = False
    pending.save(update_fields=["fooled"])
    vote(verified, researcher, "correct")
    vote(rejected, researcher, "incorrect")
    retracted.retracted = True
    retracted.save(update_fields=["retracted"])
    flagged.flagged = True
    flagged.save(update_fields=["flagged"])
    body = client_for(annotator).get("/api/me/").json()
    status = {row["id"]: (row["status"], row["fooled_model"]) for row in body["examples"]}
    assert status == {verified.pk: ("verified", True), rejected.pk: ("rejected", True),
                      retracted.pk: ("retracted", True), flagged.pk: ("flagged", True),
                      pending.pk: ("pending", False)}
    html = client_for(annotator).get("/me/").content.decode()
    assert f'data-example="{verified.pk}"' in html and "retracted" in html
    # The writer's standing: 1 of 2 decided examples verified.
    [standing] = body["standing"]
    assert standing["task"] == "sentiment" and (standing["examples_decided"], standing["examples_verified"]) == (2, 1)
    assert standing["onboarding"] is None and standing["blocked"] is False


def test_my_votes_say_whether_they_counted_and_why_not_from_what_the_service_stored(demo_tasks, annotator,
                                                                                 django_user_model, client_for):
    task = demo_tasks["sentiment"]
    first, second, third = write(task, annotator, 3)
    newcomer = django_user_model.objects.create_user("newcomer", password="a-long-enough-pass-123")
    established = django_user_model.objects.create_user("oldtimer", password="a-long-enough-pass-123",
                                                        date_joined=timezone.now() - timedelta(days=60))
    unconfirmed = django_user_model.objects.create_user("unconfirmed", password="a-long-enough-pass-123",
                                                        date_joined=timezone.now() - timedelta(days=60))
    AccountEmail.objects.create(user=unconfirmed, email="u@example.org")
    for user, example in ((newcomer, first), (established, second), (unconfirmed, third)):
        stored = vote(example, user)
        row = client_for(user).get("/api/me/").json()["validations"][0]
        assert row["counted"] is False and row["not_counted_because"] == stored.not_counted_because
        assert row["explanation"]
    assert {v.validator.username: v.not_counted_because for v in Validation.objects.select_related("validator")} == {
        "newcomer": "new_account", "oldtimer": "untrusted", "unconfirmed": "unverified"}
    html = client_for(unconfirmed).get("/me/").content.decode()
    assert "confirm your e-mail address" in html and 'id="email-unverified"' in html
    html = client_for(established).get("/me/").content.decode()
    assert 'data-reason="untrusted"' in html and "earned trust" in html


def test_a_long_history_is_paged_and_a_page_costs_the_same_queries(demo_tasks, annotator, client_for,
                                                                   django_assert_max_num_queries):
    task = demo_tasks["sentiment"]
    write(task, annotator, 3)
    with django_assert_max_num_queries(30) as few:
        me.worker_page(annotator)
    write(task, annotator, 2 * me.PAGE_SIZE)
    with django_assert_max_num_queries(len(few.captured_queries)):
        page = me.worker_page(annotator)
    assert len(page["examples"].rows) == me.PAGE_SIZE and page["examples"].has_next
    client = client_for(annotator)
    second = client.get("/api/me/?examples_page=2").json()
    assert second["pages"]["examples"] == {"page": 2, "has_next": True, "has_previous": True}
    assert len(second["examples"]) == me.PAGE_SIZE and second["pages"]["validations"]["page"] == 1
    last = client.get("/api/me/?examples_page=3").json()
    assert len(last["examples"]) == 3 and last["pages"]["examples"]["has_next"] is False
    newest = Example.objects.filter(annotator=annotator).order_by("-id").first()
    assert client.get("/api/me/").json()["examples"][0]["id"] == newest.pk
    for bad in ("0", "-1", "x", "1.5", "9" * 30):
        response = client.get(f"/api/me/?examples_page={bad}")
        assert response.status_code == 400, bad
    assert 'rel="next"' in client.get("/me/").content.decode()


def test_nobody_sees_another_workers_page(demo_tasks, annotator, second_annotator, client_for, anonymous, client):
    task = demo_tasks["sentiment"]
    [mine] = write(task, annotator, text="Written by the first annotator")
    theirs = client_for(second_annotator)
    # Forged ids and names in the query string choose nothing: the page is the caller's.
    for query in ("", f"?user={annotator.pk}", f"?user_id={annotator.pk}", f"?username={annotator.username}",
                  f"?annotator={annotator.pk}"):
        body = theirs.get(f"/api/me/{query}").json()
        assert body["username"] == "second_annotator" and body["examples"] == []
        html = theirs.get(f"/me/{query}").content.decode()
        assert "Written by the first annotator" not in html and f'data-example="{mine.pk}"' not in html
    assert anonymous.get("/api/me/").status_code in (401, 403)
    page = client.get("/me/")
    assert page.status_code == 302 and page["Location"].startswith(reverse("login"))
    # Inside a HIT, a token that is not one is refused; no token, no page.
    assert client.post(reverse("mturk-me"), {"token": "forged"}).status_code == 403
    assert client.post(reverse("mturk-me"), {}).status_code == 403
    assert client.get(reverse("mturk-me")).status_code == 405


def test_a_worker_s_page_shows_their_confirmed_hits_and_pay_and_inside_an_unconfirmed_hit_only_that_hit(
        live_tasks, crowd, client, researcher, annotator):
    write(live_tasks["sentiment"], annotator, text="Not the worker's")
    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    assert sync.sync().approved == 1
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    assert bonuses.pay_bonuses().paid == 1
    # The worker's next HIT: MTurk shows an assignment only once it is submitted, so until
    # then its token is a provisional identity of its own: its page shows that HIT only.
    hit = batch.hit_rows.order_by("number").last()
    next_id = crowd.accept(hit.hit_id, WORKER)
    page = arrive(client, hit.hit_id, next_id)
    token = token_of(page)
    assert 'id="hit-my-page"' in page.content.decode()
    html = client.post(reverse("mturk-me"), {"token": token}).content.decode()
    assert f'data-assignment="{assignment.assignment_id}"' not in html and "$0.50 (paid)" not in html
    assert 'id="unconfirmed"' in html and "Not the worker's" not in html
    body = api(token).get("/api/me/").json()
    assert body["unconfirmed"] is True and [row["assignment_id"] for row in body["assignments"]] == [next_id]
    assert body["examples"] == [] and body["username"] != f"mturk:{WORKER}"
    write_pair(api(token), "sentiment", "The next HIT's pair.")
    completion, _ = submit_here(client, token)
    crowd.submit(next_id, {"completionToken": completion})
    assert sync.sync().approved == 1  # confirmed: the HIT's work joins the worker's account
    account = WorkerIdentity.objects.get(worker_id=WORKER).user
    mine = me.worker_page(account)
    rows = {row["assignment_id"]: row for row in mine["assignments"].rows}
    paid = rows[assignment.assignment_id]
    assert (paid["reward"], paid["bonus_paid"], paid["bonus_due"], paid["reward_status"]) == (
        Decimal("0.50"), Decimal("0.25"), Decimal("0.00"), "paid")
    assert set(rows) == {assignment.assignment_id, next_id} and mine["mturk_worker"] is True
    assert len(mine["examples"].rows) == 4 and not mine["unconfirmed"]
    client.force_login(account)  # the page as the account sees it (the template renders the ledger)
    html = client.get("/me/").content.decode()
    assert f'data-assignment="{assignment.assignment_id}"' in html and "$0.25" in html and "$0.50 (paid)" in html
    assert "Not the worker's" not in html
    client.logout()
    # Another worker's token shows that worker's arrival's page, never this one's.
    other_hit = batch.hit_rows.order_by("number").first()
    other = token_of(arrive(client, other_hit.hit_id, crowd.accept(other_hit.hit_id, "A3WORKERTWO88"),
                            "A3WORKERTWO88"))
    theirs = api(other).get("/api/me/").json()
    assert theirs["assignments"][0]["assignment_id"] != assignment.assignment_id
    assert len(theirs["assignments"]) == 1 and theirs["examples"] == []
    assert theirs["username"] == "A3WORKERTWO88, not confirmed yet"  # the id its link gave, said to be unconfirmed
    # Its own provisional user, not the worker's account (which the first sync made for them).
    assert get_user_model().objects.filter(username__startswith="mturk:A3WORKERTWO88:unconfirmed:").exists()
