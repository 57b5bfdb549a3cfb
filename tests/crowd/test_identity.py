"""Nobody acts as another worker, on both platforms (``side``: tests/crowd/conftest.py),
from the attacker's side: someone who knows a real worker's id opens the public HIT or
study link with it and a made-up assignment or session id.

Such an arrival is its own provisional identity (``crowd.assignments``): it sees nothing
of the worker's page or examples, cannot flag them, cannot touch their gold record or
standing, cannot get them blocked. Made-up arrivals hold places only for a while
(``CROWD_UNCONFIRMED_HOLD_SECONDS``) and cannot keep a batch open; their work moves no
context counter. A real worker's work joins their account once the platform confirms it."""

import html
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import F, Sum
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotation import trust, validation
from annotation.models import AnnotationSession, Example, OnboardingRecord, Validation
from crowd import costs, me, sync
from crowd.models import Assignment, Batch, TaskBlock, WorkerIdentity
from tasks.models import Context
from tests.annotation.test_onboarding import answers
from tests.annotation.test_trust import account, write
from tests.crowd.platforms import api, token_of, write_pair
from tests.crowd.test_crowd_onboarding import take

pytestmark = pytest.mark.django_db


def real_worker_with_history(side, client, task, researcher):
    """The worker did a batch's work for real: approved, their examples verified."""
    batch = side.publish(task)
    done = side.do_work(client, batch, text="The real worker wrote this.")
    assert sync.sync().approved == 1
    for example in Example.objects.filter(session=done.session):
        validation.validate_example(example.pk, researcher, label="correct")
    return batch, WorkerIdentity.objects.get(worker_id=side.worker).user


def test_a_made_up_assignment_under_a_real_worker_s_id_sees_nothing_of_their_account(live_tasks, side, client,
                                                                                      researcher):
    task = live_tasks["sentiment"]
    batch, account_user = real_worker_with_history(side, client, task, researcher)
    theirs = set(Example.objects.filter(annotator=account_user).values_list("pk", flat=True))
    assert len(theirs) == 2

    forged = side.forged_page(client, batch, side.worker)
    assert forged.status_code == 200
    attacker = api(token_of(forged))
    page = attacker.get("/api/me/").json()
    assert page["unconfirmed"] is True and page["username"] != account_user.get_username()
    assert page["examples"] == [] and page["validations"] == []
    assert [row["assignment_id"] for row in page["assignments"]] == [side.made_up_work_id()]
    assert all(row["examples_decided"] == 0 for row in page["standing"])
    shown = client.post(reverse("mturk-me"), {"token": token_of(forged)}).content.decode()
    assert "The real worker wrote this." not in shown and "not confirmed this" in shown
    # The worker's own page does not list the made-up assignment as theirs either.
    own = me.worker_page(account_user)
    assert [row["assignment_id"] for row in own["assignments"].rows] != [] and \
        side.made_up_work_id() not in [row["assignment_id"] for row in own["assignments"].rows]


def test_a_made_up_assignment_cannot_flag_or_retract_the_worker_s_examples(live_tasks, side, client, researcher):
    task = live_tasks["sentiment"]
    batch, account_user = real_worker_with_history(side, client, task, researcher)
    attacker = api(token_of(side.forged_page(client, batch, side.worker)))
    for example in Example.objects.filter(annotator=account_user):
        assert attacker.post(f"/api/examples/{example.pk}/flag/", {"reason": "spam"}, format="json").status_code \
            == 403
        assert attacker.post(f"/api/examples/{example.pk}/retract/").status_code == 403
    assert not Example.objects.filter(annotator=account_user, flagged=True).exists()
    assert not Example.objects.filter(annotator=account_user, retracted=True).exists()


def gold_items(task, researcher, count=6):
    writer = account("gold_writer", "198.51.100.77")
    return [validation.mark_gold(write(task, writer, text=f"Gold item {i}").pk, researcher,
                                 "incorrect" if i % 2 else "correct") for i in range(count)]


def answer_served(worker_api, slug, *, wrong_on_gold: bool):
    """Answer whatever the queue serves next: gold items wrongly or rightly."""
    item = worker_api.get(f"/api/tasks/{slug}/validations/next/").json()
    example = Example.objects.get(pk=item["id"])
    assert worker_api.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": example.target},
                           format="json").status_code == 201
    label = example.gold_verdict or "correct"
    if wrong_on_gold and example.gold_verdict:
        label = "incorrect" if example.gold_verdict == "correct" else "correct"
    assert worker_api.post(f"/api/examples/{example.pk}/validations/", {"label": label},
                           format="json").status_code == 201


def test_failing_gold_items_in_a_worker_s_name_touches_neither_their_gold_record_nor_their_standing(
        live_tasks, side, client, researcher):
    task = live_tasks["sentiment"]
    task.config = {**task.config, "validation": {**task.config.get("validation", {}), "gold_rate": 1.0}}
    task.save()
    gold_items(task, researcher)
    batch = side.publish(task, mode="validate", bonus_per_example=Decimal("0"), examples_per_assignment=2,
                         quality_block_threshold=0.5)
    account_user = WorkerIdentity.objects.get(pk=side.do_work(
        client, batch, work=lambda worker_api: [answer_served(worker_api, "sentiment", wrong_on_gold=False)
                                                for _ in range(2)]).worker_id).user
    before = trust.checked_record(task, account_user)

    attacker = api(token_of(side.forged_page(client, batch, side.worker)))
    for _ in range(4):  # with the worker's two right answers: 2 of 6, below the rule's 60%
        answer_served(attacker, "sentiment", wrong_on_gold=True)
    assert Validation.objects.filter(gold_agrees=False).count() == 4  # stored, as the forger's own
    assert trust.checked_record(task, account_user) == before and not trust.failed_gold(task, account_user)

    report = sync.sync()  # the worker's real assignment is verified; the quality check judges them
    assert report.approved == 1 and report.task_blocked == 0, report
    assert not TaskBlock.objects.exists()
    assert not trust.failed_gold(task, account_user)
    assert all(row["votes_count"] for row in me.standing(account_user) if row["task"] == "sentiment")


def test_failing_the_onboarding_in_a_worker_s_name_does_not_get_them_blocked(with_onboarding, live_tasks, side,
                                                                            client):
    task = live_tasks["sentiment"]
    quiz = side.publish(task, mode="onboarding", bonus_per_example=Decimal("0"), examples_per_assignment=1)
    tries = task.parsed_config.onboarding["max_tries"]
    attacker = api(token_of(side.forged_page(client, quiz, side.worker)))
    for _ in range(tries):  # every try wrong: the forger's own onboarding record is blocked
        take(attacker, "sentiment", answers("sentiment", wrong=range(10)))
    account_user = WorkerIdentity.objects.get(worker_id=side.worker).user
    assert not OnboardingRecord.objects.filter(user=account_user).exists()
    assert not TaskBlock.objects.exists()
    sync.sync()  # the made-up work is never listed: nothing joins the worker's account
    assert not TaskBlock.objects.exists() and side.admits(side.publish(task), side.worker)

    done = side.do_work(client, quiz, work=lambda worker_api: take(worker_api, "sentiment", answers("sentiment")))
    assert sync.sync().approved == 1
    assert OnboardingRecord.objects.get(user=account_user, task=task).passed_at is not None
    assert done.worker.user == account_user and not TaskBlock.objects.exists()


def test_six_made_up_arrivals_hold_a_two_place_batch_only_for_a_while_and_cannot_keep_it_open(
        live_tasks, side, settings):
    settings.MTURK_ARRIVALS_PER_ADDRESS = 1000  # many addresses (an IPv6 /64 holds plenty)
    task = live_tasks["sentiment"]
    batch = side.publish(task, hits=1, assignments_per_hit=2, bonus_per_example=Decimal("0"))
    submit = reverse("mturk-hit-submit" if side.name == "mturk" else "prolific-submit")
    for n in range(6):
        made_up = Client(REMOTE_ADDR=f"2001:db8::{n + 1}")
        page = side.forged_page(made_up, batch, side.made_up_worker(n), side.made_up_work_id(n))
        assert page.status_code == 200
        if n % 2:  # half of them even do the work and finish it here
            write_pair(api(token_of(page)), task.slug, f"Made-up work {n}.")
            assert made_up.post(submit, {"token": token_of(page)}).status_code == 200
    real = Client(REMOTE_ADDR="198.51.100.5")
    work_id, refused = side.start(real, batch, platform_down=True)  # Prolific cannot confirm them either
    assert refused.status_code == 409 and "not confirmed" in refused.content.decode()

    held = timedelta(seconds=settings.CROWD_UNCONFIRMED_HOLD_SECONDS)
    Assignment.objects.filter(hit__batch=batch).update(accepted_at=F("accepted_at") - held)  # the hold is over
    page = side.open(real, batch, side.worker, work_id, platform_down=True)
    assert page.status_code == 200  # the real worker gets in
    write_pair(api(token_of(page)), task.slug, "The real worker's pair.")
    mine = Assignment.objects.get(worker__worker_id=side.worker)
    side.hand_in(real, token_of(page), work_id)

    # The lifetime ends with the made-up ones still open here: they do not keep the batch open.
    Batch.objects.filter(pk=batch.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert side.forged_page(Client(REMOTE_ADDR="2001:db8::98"), batch, side.made_up_worker(8),
                            side.made_up_work_id(8)).status_code == 410  # past its lifetime: no one new
    Assignment.objects.exclude(pk=mine.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    report = sync.sync()
    assert report.approved == 1 and report.finished_batches == 1, report
    batch.refresh_from_db()
    assert batch.status == Batch.Status.FINISHED
    assert set(Assignment.objects.exclude(pk=mine.pk).values_list("status", flat=True)) == {"returned"}
    assert costs.committed(Batch.objects.filter(pk=batch.pk)) == Decimal("0.00")  # its money is released
    assert side.forged_page(Client(REMOTE_ADDR="2001:db8::99"), batch, side.made_up_worker(9),
                            side.made_up_work_id(9)).status_code == 410  # and no one new gets in


def test_a_link_prolific_says_is_not_the_participant_s_is_refused_and_holds_no_place_mturk_cannot_tell_so_early(
        live_tasks, side, client, settings):
    """Prolific shows a submission from its start: a made-up SESSION_ID (or another
    participant's) is refused at once, and a real participant is confirmed at once, so the
    places made-up arrivals hold never keep them out. MTurk shows an assignment only once
    it is submitted, so there a made-up id is a provisional arrival (the tests above)."""
    settings.MTURK_ARRIVALS_PER_ADDRESS = 1000
    batch = side.publish(live_tasks["sentiment"], hits=1, assignments_per_hit=2)
    if side.name == "mturk":
        page = side.forged_page(client, batch, side.worker)
        assert page.status_code == 200 and Assignment.objects.get().worker_confirmed_at is None
        return
    refused = client.get(*side.entry(batch, side.worker, side.made_up_work_id()))
    assert refused.status_code == 403 and "does not show this link's work as yours" in html.unescape(
        refused.content.decode())
    someone_else = side.fake.start_submission(batch.hit_rows.get().hit_id, side.other)
    assert client.get(*side.entry(batch, side.worker, someone_else)).status_code == 403  # another's submission
    assert not Assignment.objects.exists()
    for n in range(6):  # every unconfirmed place taken (Prolific could not answer for these)
        assert side.forged_page(Client(REMOTE_ADDR=f"2001:db8::{n + 1}"), batch, side.made_up_worker(n),
                                side.made_up_work_id(n)).status_code == 200
    assert side.forged_page(Client(REMOTE_ADDR="2001:db8::9"), batch, side.made_up_worker(9),
                            side.made_up_work_id(9)).status_code == 409
    _, page = side.start(client, batch)
    assert page.status_code == 200  # confirmed at once: the held places do not keep them out
    assert Assignment.objects.get(worker__worker_id=side.worker).worker_confirmed_at is not None


def context_counts(task):
    return Context.objects.filter(task=task).aggregate(used=Sum("times_used"), fooled=Sum("times_fooled"))


def test_unconfirmed_work_moves_no_context_counter_and_confirmed_work_does(live_tasks, side, client):
    task = live_tasks["sentiment"]
    batch = side.publish(task, examples_per_assignment=4)
    before = context_counts(task)
    forger = api(token_of(side.forged_page(client, batch, side.other)))
    for n in range(2):
        write_pair(forger, task.slug, f"Made-up work {n}.")  # one of each pair fools the model
    assert Example.objects.filter(session__mturk_assignment__worker__worker_id=side.other, fooled=True).count() == 2
    assert context_counts(task) == before
    sync.sync()
    assert context_counts(task) == before  # never confirmed: never counted

    side.do_work(client, batch, work=lambda worker_api: [write_pair(worker_api, task.slug, f"Real work {n}.")
                                                          for n in range(2)])
    assert sync.sync().approved == 1
    after = context_counts(task)
    assert (after["used"] - before["used"], after["fooled"] - before["fooled"]) == (4, 2)


def test_a_confirmed_assignment_s_work_joins_the_worker_s_account(live_tasks, side, client, researcher):
    task = live_tasks["sentiment"]
    _, account_user = real_worker_with_history(side, client, task, researcher)
    batch = side.publish(task)
    work_id, page = side.start(client, batch, platform_down=True)  # Prolific too cannot confirm it yet
    token = token_of(page)
    write_pair(api(token), task.slug, "Written before the platform confirmed it.")
    arrival = Assignment.objects.get(assignment_id=work_id)
    provisional = AnnotationSession.objects.get(pk=arrival.session_id).user
    assert arrival.worker_confirmed_at is None and provisional != account_user
    assert api(token).get("/api/me/").json()["unconfirmed"] is True
    written = set(Example.objects.filter(session=arrival.session).values_list("pk", flat=True))
    assert not written & {row["id"] for row in me.worker_page(account_user)["examples"].rows}

    side.hand_in(client, token, work_id)
    assert sync.sync().approved == 1
    arrival.refresh_from_db()
    assert arrival.worker_confirmed_at is not None and arrival.verified_at is not None
    assert AnnotationSession.objects.get(pk=arrival.session_id).user == account_user
    assert set(Example.objects.filter(pk__in=written).values_list("annotator", flat=True)) == {account_user.pk}
    page = me.worker_page(account_user)
    assert written <= {row["id"] for row in page["examples"].rows}
    assert work_id in [row["assignment_id"] for row in page["assignments"].rows]
    assert not type(account_user).objects.filter(pk=provisional.pk).exists()  # the provisional user is gone


def test_a_made_up_work_id_never_borrows_the_worker_s_real_submission(live_tasks, side, client):
    """Work is matched by its id under its worker's id only: a made-up id finished here under
    a participant's id is not their real submission, even with the right code (on Prolific the
    sync once matched a submission by the participant alone)."""
    batch = side.publish(live_tasks["sentiment"])
    forged = side.forged_page(client, batch, side.worker)
    token = token_of(forged)
    write_pair(api(token), "sentiment", "Done under a made-up id.")
    submit = reverse("mturk-hit-submit" if side.name == "mturk" else "prolific-submit")
    assert client.post(submit, {"token": token}).status_code == 200
    # The worker's real one, taken on the platform and handed in there, never opened here.
    hit_id = batch.hit_rows.get().hit_id
    if side.name == "mturk":
        side.fake.submit(side.fake.accept(hit_id, side.worker), {"completionToken": "copied"})
    else:
        real = side.fake.start_submission(hit_id, side.worker)
        side.fake.complete(real, batch.completion_code)  # the code the made-up arrival was shown
    report = sync.sync()
    assert report.approved == 0 and report.rejected == 1, report
    made_up = Assignment.objects.get(assignment_id=side.made_up_work_id())
    assert made_up.worker_confirmed_at is None and made_up.verified_at is None
    assert AnnotationSession.objects.get(pk=made_up.session_id).user != \
        WorkerIdentity.objects.get(worker_id=side.worker).user


def test_each_platform_confirms_work_as_its_public_reference_says(live_tasks, side, client):
    """``Platform.confirm_work`` against each fake: MTurk shows an assignment only once it is
    submitted (before that, and for a made-up id, it cannot tell); Prolific shows a submission
    from its start, and says no for an id it does not have or another participant's."""
    from crowd.platforms import for_batch

    batch = side.publish(live_tasks["sentiment"])
    hit, platform = batch.hit_rows.get(), for_batch(batch)
    work_id, page = side.start(client, batch)
    made_up = side.made_up_work_id()
    if side.name == "mturk":
        assert platform.confirm_work(batch, hit, work_id, side.worker) is None  # in progress: hidden
        assert platform.confirm_work(batch, hit, made_up, side.worker) is None
        write_pair(api(token_of(page)), "sentiment", "Done, then handed in.")
        side.hand_in(client, token_of(page), work_id)
        assert platform.confirm_work(batch, hit, work_id, side.worker) is True
        assert platform.confirm_work(batch, hit, work_id, side.other) is False
    else:
        assert platform.confirm_work(batch, hit, work_id, side.worker) is True  # ACTIVE: shown already
        assert platform.confirm_work(batch, hit, work_id, side.other) is False
        assert platform.confirm_work(batch, hit, made_up, side.worker) is False
        side.fake.inject("get_submission", "server_error")
        with pytest.raises(platform.error):
            platform.confirm_work(batch, hit, work_id, side.worker, at_once=True)  # one try, then the error
