"""The rest of the crowd's rules, each run on both platforms (``side``:
tests/crowd/conftest.py): a validation batch, the exactly-once bonus through each
platform's own mechanism, the bonus run that reads only what changed, the quality
block and the onboarding a batch requires. Where a platform cannot do something, the
test's name says so and asserts what that platform does instead. On Prolific, the
task's participant groups (crowd.prolific_groups) are on: the ``side`` fixture sets
PROLIFIC_WORKSPACE_ID; without it, tests/crowd/test_prolific_flow.py shows our page
holding alone."""

import html
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from annotation import validation
from annotation.models import Example
from crowd import bonuses, prolific_groups, sync, workers
from crowd.models import Assignment, BonusPayment, TaskBlock, WorkerIdentity
from crowd.platforms import by_name
from tests.annotation.test_onboarding import answers
from tests.crowd.platforms import token_of, write_pair
from tests.crowd.test_crowd_onboarding import take
from tests.crowd.test_crowd_watermarks import age_everything

pytestmark = pytest.mark.django_db


def validate_all(session, researcher, label):
    for example in Example.objects.filter(session=session):
        validation.validate_example(example.pk, researcher, label=label)


def test_a_validation_batch_s_votes_count_only_once_the_platform_confirms_the_work(live_tasks, side, client,
                                                                                   annotator, token_client):
    write_pair(token_client(annotator, live_tasks["sentiment"]), "sentiment", "Written to be validated.")
    batch = side.publish(live_tasks["sentiment"], mode="validate", bonus_per_example=Decimal("0"),
                         examples_per_assignment=1)
    voted = []

    def vote(label):
        def work(worker_api):
            assert worker_api.get("/api/tasks/sentiment/contexts/next/").status_code == 403  # not a writing batch
            item = worker_api.get("/api/tasks/sentiment/validations/next/").json()
            assert worker_api.post(f"/api/examples/{item['id']}/blind-answer/", {"answer": {"label": "negative"}},
                                   format="json").status_code == 201
            assert worker_api.post(f"/api/examples/{item['id']}/validations/", {"label": label},
                                   format="json").status_code == 201
            voted.append(item["id"])
        return work

    assignment = side.do_work(client, batch, work=vote("correct"))
    forged = side.forge(client, batch, side.other, work=vote("incorrect"))  # never work on the platform
    assert voted[0] == voted[1]
    example = Example.objects.get(pk=voted[0])
    # Finished here and handed in there, but not confirmed yet: stored, counting for nothing.
    assert example.validations_correct == 0 and example.validations_incorrect == 0

    report = sync.sync()
    assert report.approved == 1 and report.rejected == 0, report
    assert side.approved_there(assignment)
    example.refresh_from_db()
    assert example.validations_correct == 1 and example.validations_incorrect == 0  # the forged vote never counts
    forged.refresh_from_db()
    assert forged.verified_at is None and forged.status == Assignment.Status.FINISHED
    assert bonuses.pay_bonuses().settled == 0 and not BonusPayment.objects.exists()
    assert side.paid_to(side.worker) == []


def test_a_settled_bonus_is_paid_once_after_a_lost_answer_through_each_platform_s_own_mechanism(
        live_tasks, side, client, researcher):
    """MTurk: SendBonus pays a UniqueRequestToken once, so boto3 sends it again with the
    same token. Prolific: the pay call pays again each time, so the row is marked sent
    before its one call, never sent again, and found paid on the participant's submission."""
    batch = side.publish(live_tasks["sentiment"])
    assignment = side.do_work(client, batch)
    assert sync.sync().approved == 1
    validate_all(assignment.session, researcher, "correct")
    side.fake.inject(side.pay_call, "drop_after_commit")  # the platform pays; its answer is lost
    for _ in range(4):
        bonuses.pay_bonuses()
        BonusPayment.objects.update(next_attempt_at=timezone.now() - timedelta(hours=2))  # every retry due now
    assert side.paid_to(side.worker) == [Decimal("0.25")]
    row = BonusPayment.objects.get()
    assert row.status == BonusPayment.Status.PAID and row.amount == Decimal("0.25")
    if side.name == "mturk":
        sent = [params for operation, params in side.fake.calls if operation == "SendBonus"]
        assert len(sent) == 2 and {params["UniqueRequestToken"] for params in sent} == {row.unique_request_token}
    else:
        assert side.fake.count("pay_bonus") == 1 and side.fake.count("setup_bonus") == 1
        assert row.sent_at and row.platform_ref and "Found paid on Prolific" in row.last_error


def test_a_bonus_run_reads_only_the_assignments_that_changed(live_tasks, side, client, researcher, monkeypatch):
    batch = side.publish(live_tasks["sentiment"])
    first = side.do_work(client, batch)
    second = side.do_work(client, batch, worker=side.other, text="Another statement altogether.")
    assert sync.sync().approved == 2
    assert bonuses.pay_bonuses().waiting == 2  # nothing validated: both wait (the run sets the watermark)
    age_everything()  # what happened so far is history; the watermark is an hour old
    looked_at = []
    real = bonuses.settle
    monkeypatch.setattr(bonuses, "settle", lambda found, now=None: looked_at.append(found.pk) or real(found, now))

    before = side.calls()
    report = bonuses.pay_bonuses()
    assert looked_at == [] and report.settled == report.waiting == report.paid == 0, report
    assert side.calls() == before  # nothing changed: nothing read here, nothing asked of the platform

    validate_all(first.session, researcher, "correct")
    report = bonuses.pay_bonuses()
    assert looked_at == [first.pk] and report.settled == 1 and report.paid == 1, report
    assert side.paid_to(side.worker) == [Decimal("0.25")] and side.paid_to(side.other) == []
    looked_at.clear()
    bonuses.pay_bonuses(full=True)  # the full pass walks every assignment still to settle
    assert looked_at == [second.pk] and side.paid_to(side.worker) == [Decimal("0.25")]


def test_a_quality_check_judges_only_the_writers_whose_evidence_changed(live_tasks, side, client, researcher,
                                                                         monkeypatch):
    batch = side.publish(live_tasks["sentiment"], quality_block_threshold=0.5)
    first = side.do_work(client, batch)
    side.do_work(client, batch, worker=side.other, text="Another statement altogether.")
    assert sync.sync().approved == 2  # the batch's first check judges every writer once
    age_everything()  # history; the batch's quality watermark is an hour old
    judged = []
    real = workers.decided_counts
    monkeypatch.setattr(workers, "decided_counts", lambda ids, task=None: judged.extend(ids) or real(ids, task))
    assert sync.sync().task_blocked == 0 and judged == []  # nothing changed: no one read again
    validate_all(first.session, researcher, "correct")
    assert sync.sync().task_blocked == 0
    assert judged == [first.worker.user_id]  # the one writer whose examples were decided since


def test_a_writer_below_the_threshold_is_blocked_on_the_task_by_our_page_and_by_the_platform(
        live_tasks, side, client, researcher):
    """MTurk: the task's block qualification, which its HIT types require absent.
    Prolific: the task's blocked participant group, every study's blocklist of the task."""
    task = live_tasks["sentiment"]
    batch = side.publish(task, examples_per_assignment=6, quality_block_threshold=0.5)

    def three_pairs(worker_api):
        for n in range(3):
            write_pair(worker_api, "sentiment", f"Text number {n}.")

    assignment = side.do_work(client, batch, work=three_pairs)
    validate_all(assignment.session, researcher, "incorrect")
    report = sync.sync()
    assert report.approved == 1 and report.task_blocked == 1, report
    identity = WorkerIdentity.objects.get(worker_id=side.worker)
    block = TaskBlock.objects.get(worker=identity)
    assert block.task == task and block.batch == batch and "50%" in block.reason
    assert identity.soft_blocked_at is None  # on this task only

    again, elsewhere = side.publish(task), side.publish(live_tasks["nli"])
    refused = side.page(client, again, side.worker)
    assert refused.status_code == 403 and "not admitted" in refused.content.decode()
    assert side.page(client, elsewhere, side.worker).status_code == 200  # another task still takes them
    assert not side.admits(again, side.worker)  # the platform keeps them out of the task's work too ...
    assert side.admits(again, side.other) and side.admits(elsewhere, side.worker)  # ... and no one else
    if side.name == "prolific":
        group = prolific_groups.group_id(prolific_groups.BLOCKED, task)
        assert side.fake.groups[group]["participants"] == [side.worker]
        assert {"filter_id": "participant_group_blocklist", "selected_values": [group]} in \
            side.fake.studies[again.hit_rows.get().hit_id]["filters"]

    workers.task_unblock(block, researcher)  # lifted: back in, on the platform too
    assert side.admits(side.publish(task), side.worker)


def test_require_onboarding_admits_only_those_who_passed_by_our_page_and_by_the_platform(
        with_onboarding, live_tasks, side, client):
    """MTurk: the task's onboarded qualification, which such HIT types require. Prolific:
    the task's onboarded participant group, such a study's allowlist (and an
    onboarding-only study's blocklist)."""
    task = live_tasks["sentiment"]
    work = side.publish(task, require_onboarding=True)
    assert not side.admits(work, side.worker)
    if side.name == "prolific":  # and our page refuses them, whatever the platform let through
        refused = side.page(client, work, side.worker)
        assert refused.status_code == 403 and "passed the task" in refused.content.decode()

    quiz = side.publish(task, mode="onboarding", bonus_per_example=Decimal("0"))
    side.do_work(client, quiz, work=lambda worker_api: take(worker_api, "sentiment", answers("sentiment")))
    assert sync.sync().approved == 1  # the quiz is paid, and the worker passed

    done = side.do_work(client, work, text="Passed, and now writing for real.")  # admitted there and here
    assert done.status == Assignment.Status.FINISHED
    assert not side.admits(work, side.other)  # who has not passed is still kept out
    assert not side.admits(side.publish(task, mode="onboarding", bonus_per_example=Decimal("0")), side.worker)


def refusal_text(response) -> str:
    return html.unescape(re.search(r'id="refused">([^<]*)<', response.content.decode()).group(1))


def test_refusals_tell_the_worker_how_to_hand_the_work_back_in_their_platform_s_words(live_tasks, side, client):
    own = {"mturk": "please return the HIT.", "prolific": "please return your submission on Prolific."}[side.name]
    task = live_tasks["sentiment"]
    batch = side.publish(task)
    identity = workers.identity_for(side.other, sandbox=batch.sandbox, platform=side.name)
    WorkerIdentity.objects.filter(pk=identity.pk).update(soft_blocked_at=timezone.now())
    blocked = side.page(client, batch, side.other)
    assert blocked.status_code == 403
    assert refusal_text(blocked) == f"You are not admitted to these {'HITs' if side.name == 'mturk' else 'studies'} " \
                                    f"any more; {own}"

    page = side.page(client, batch, side.worker)  # a worker who presses the button before the work is done
    submit = reverse("mturk-hit-submit" if side.name == "mturk" else "prolific-submit")
    early = client.post(submit, {"token": token_of(page)}).content.decode()
    then = "submit" if side.name == "mturk" else "finish"
    work = "HIT" if side.name == "mturk" else "study"
    body = page.content.decode()  # the page and its script use the same words
    assert f"This {work} asks for <strong>2</strong>" in body
    assert f'data-work-name="{work}" data-hand-in="{then}"' in body
    assert f"This {'HIT' if side.name == 'mturk' else 'study'} asks for 2 examples; you have done 0 so far. " \
           f"Do 2 more, then {then}." in html.unescape(early)

    task.is_hidden = True
    task.save()
    closed = side.page(client, batch, side.worker)  # the same page, the task hidden since
    assert closed.status_code == 410 and refusal_text(closed).endswith(own)
    assert side.name == "mturk" or "HIT" not in refusal_text(closed) + refusal_text(blocked)


def test_a_refusal_ends_with_the_platform_s_way_out_after_a_clause_or_a_sentence():
    mturk, prolific = by_name("mturk"), by_name("prolific")
    assert mturk.refusal("The time is up") == "The time is up; please return the HIT."
    assert prolific.refusal("Thank you for trying.") == \
        "Thank you for trying. Please return your submission on Prolific."
    assert prolific.refusal("Too many", or_else="try again later") == \
        "Too many; please return your submission on Prolific or try again later."
