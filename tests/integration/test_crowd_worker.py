"""The crowd's beat tasks in a real Celery worker, on PostgreSQL, against the fake MTurk."""

import pytest

from annotation import serving, validation
from annotation.models import Example
from crowd import tasks as crowd_tasks
from crowd.models import Assignment, BonusPayment
from tests.crowd.test_crowd_flow import do_one_assignment, make_batch

pytestmark = pytest.mark.integration


def _point_at(worker_mturk, settings, monkeypatch):
    """The platform and the worker process pointed at the fake MTurk."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "fake")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    settings.MTURK_ENDPOINT_URL = worker_mturk.endpoint_url
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"


def _cheat_and_honest(task, worker_mturk, cheat_address, honest_address):
    """Two writing assignments of one batch, synced and approved by the worker process:
    a cheat's mislabelled example and an honest worker's."""
    from django.test import Client

    from tests.crowd.test_crowd_flow import OTHER_WORKER, WORKER

    batch = make_batch(task, hits=1, assignments_per_hit=2)
    cheat = do_one_assignment(Client(REMOTE_ADDR=cheat_address), worker_mturk, batch, worker=WORKER,
                              text="The film was fine, I suppose.")
    honest = do_one_assignment(Client(REMOTE_ADDR=honest_address), worker_mturk, batch, worker=OTHER_WORKER,
                               text="A warm, funny and generous film.")
    assert "2 approved" in crowd_tasks.sync.apply_async().get(timeout=60)
    return cheat, honest


@pytest.mark.django_db(transaction=True)
def test_the_worker_syncs_and_pays_bonuses_exactly_once(celery_worker_process, worker_mturk, live_tasks, client,
                                                         researcher, settings, monkeypatch):
    _point_at(worker_mturk, settings, monkeypatch)
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


def _sign_up(username, address):
    """A site account made through the sign-up page from ``address``, its e-mail address
    confirmed through the link sent (unconfirmed, its votes would never count), signed in."""
    import re

    from django.contrib.auth import get_user_model
    from django.core import mail
    from rest_framework.test import APIClient

    puppet = APIClient(REMOTE_ADDR=address)
    password = "a-long-enough-pass-123"
    response = puppet.post("/accounts/signup/", {"username": username, "email": f"{username}@example.org",
                                                 "password1": password, "password2": password})
    assert response.status_code == 302, response.content
    link = re.search(r"https?://\S+/accounts/verify/\S+", mail.outbox[-1].body).group(0)
    assert puppet.get(link).status_code == 200
    puppet.user = get_user_model().objects.get(username=username)
    return puppet


def _vote_through_the_api(voter, example, label):
    """The queue serves ``example`` to ``voter``, who answers blind and decides, over HTTP."""
    serving.assign(example, voter.user)
    answered = voter.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": example.target}, format="json")
    if answered.status_code != 201:
        return answered
    return voter.post(f"/api/examples/{example.pk}/validations/", {"label": label}, format="json")


@pytest.mark.django_db(transaction=True)
def test_sock_puppets_buy_no_bonus_and_an_honest_worker_is_paid_once(celery_worker_process, worker_mturk,
                                                                     live_tasks, researcher, settings, monkeypatch):
    """A worker and three sock-puppet accounts, against the trust rules, with the real
    worker process syncing and paying: the puppets' votes decide nothing, so nothing is
    paid and the public verified error rate does not move. An honest worker whose
    examples trusted validators verified is paid exactly once."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone
    from rest_framework.test import APIClient


    _point_at(worker_mturk, settings, monkeypatch)
    task = live_tasks["sentiment"]
    # The fixed rule (three counted votes decide): the votes below are counted one by one; the
    # adaptive rule's weights have their own tests (tests/annotation/test_adaptive_validation.py).
    task.config = {**task.config, "validator_trust": {"min_answers": 2, "min_agreement": 0.8,
                                                      "min_reference_answers": 2},
                   "validation": {"policy": "fixed"}}
    task.save()
    rnd = task.open_round()
    stats_url = f"/api/tasks/{task.slug}/rounds/{rnd.number}/stats/"
    public = APIClient()
    before = public.get(stats_url).json()

    cheat, honest = _cheat_and_honest(task, worker_mturk, "203.0.113.50", "198.51.100.80")

    # Three sock puppets: one signed up from the cheat's address, two through other
    # addresses (a VPN) and a month old, so that only the trust rule stands in the way.
    at_home = _sign_up("puppet0", "203.0.113.50")
    elsewhere = [_sign_up(f"puppet{i}", f"192.0.2.{i}") for i in (1, 2)]
    get_user_model().objects.filter(pk__in=[p.user.pk for p in elsewhere]).update(
        date_joined=timezone.now() - timedelta(days=30))
    for puppet in elsewhere:
        puppet.user.refresh_from_db()
    cheats_examples = list(Example.objects.filter(session=cheat.session))
    for example in cheats_examples:
        assert _vote_through_the_api(at_home, example, "correct").status_code == 403  # counts as the writer
        for puppet in elsewhere:
            decided = _vote_through_the_api(puppet, example, "correct")
            assert decided.status_code == 201 and decided.json()["not_counted_because"] == "untrusted"
    assert all(e.validation_status == "pending" for e in Example.objects.filter(session=cheat.session))

    # Trusted validators: accounts whose blind answers agreed with a researcher's decisions.
    trusted = [_sign_up(f"trusted{i}", f"198.18.0.{i}") for i in range(3)]
    get_user_model().objects.filter(pk__in=[t.user.pk for t in trusted]).update(
        date_joined=timezone.now() - timedelta(days=30))
    writer = get_user_model().objects.create_user("reference_writer")
    references = [Example.objects.create(
        task=task, round=rnd, context=task.contexts.first(), annotator=writer,
        inputs={"statement": f"Reference statement {i}"}, target={"label": "positive"}, fooled=False)
        for i in range(2)]
    # The writer is right on one and wrong on the other: agreeing with both beats
    # always agreeing with the writer, which the trust rule asks of a record.
    for example, answer in zip(references, ["positive", "negative"], strict=True):
        for validator in trusted:
            serving.assign(example, validator.user)
            validation.give_blind_answer(example.pk, validator.user, {"label": answer})
    for example, verdict in zip(references, ["correct", "incorrect"], strict=True):
        validation.validate_example(example.pk, researcher, label=verdict)
    for example in Example.objects.filter(session=honest.session):
        for validator in trusted:
            decided = _vote_through_the_api(validator, example, "correct" if example.fooled else "incorrect")
            assert decided.status_code == 201 and decided.json()["counted"] is True, decided.content

    report = crowd_tasks.pay_bonuses.apply_async().get(timeout=60)
    assert "1 bonuses paid ($0.25)" in report, report
    assert crowd_tasks.pay_bonuses.apply_async().get(timeout=60).startswith("0 assignments settled, 0 bonuses paid")
    paid = [b["AssignmentId"] for b in worker_mturk.bonuses if b["AssignmentId"] in
            (cheat.assignment_id, honest.assignment_id)]
    assert paid == [honest.assignment_id]
    assert not BonusPayment.objects.filter(assignment=cheat, status=BonusPayment.Status.PAID).exists()
    # The public verified error rate moved only by the honest worker's verified fooling example.
    after = public.get(stats_url).json()
    assert after["verified_fooled"] == before["verified_fooled"] + 1
    assert worker_mturk.violations == []


def _validate_what_the_queue_serves(voter, decide) -> int:
    """``voter`` takes items from the validation queue over HTTP until it is empty,
    answering blind with the writer's answer and deciding ``decide(item)``; how many."""
    done = 0
    while True:
        served = voter.get("/api/tasks/sentiment/validations/next/")
        if served.status_code == 204:
            return done
        item = served.json()
        answered = voter.post(f"/api/examples/{item['id']}/blind-answer/", {"answer": {"label": "positive"}},
                              format="json")
        assert answered.status_code == 201, answered.content
        decided = voter.post(f"/api/examples/{item['id']}/validations/", {"label": decide(item)}, format="json")
        assert decided.status_code == 201, decided.content
        done += 1


@pytest.mark.django_db(transaction=True)
def test_a_ring_of_aged_accounts_with_gold_in_the_queue_earns_no_bonus(celery_worker_process, worker_mturk,
                                                                        live_tasks, researcher, settings,
                                                                        monkeypatch):
    """Issue 35's scenario end to end: three aged accounts at three addresses, scripted to
    call everything "correct", gold items mixed into the queue. They decide no paid
    example and earn nothing; validators who pass the gold items earn trust, and the
    honest worker they verify is paid exactly once by the real worker process."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from annotation import trust
    from annotation.models import Validation

    _point_at(worker_mturk, settings, monkeypatch)
    task = live_tasks["sentiment"]
    # Gold first, a qualification round on gold items alone (min_reference_answers 0: the
    # default also asks for answers on examples others decided, tests/annotation/test_ring.py).
    task.config = {**task.config, "validator_trust": {"min_answers": 4, "min_agreement": 0.8,
                                                      "min_reference_answers": 0},
                   "validation": {"gold_rate": 1.0}}
    task.save()
    rnd = task.open_round()
    # Gold items: the writer is right on half of them (the researcher's verdicts).
    writer = get_user_model().objects.create_user("gold_writer")
    truth = {}
    for i in range(6):
        example = Example.objects.create(
            task=task, round=rnd, context=task.contexts.first(), annotator=writer,
            inputs={"statement": f"Checked statement {i}"}, target={"label": "positive"}, fooled=False)
        verdict = "correct" if i % 2 else "incorrect"
        truth[example.pk] = validation.mark_gold(example.pk, researcher, verdict).gold_verdict

    cheat, honest = _cheat_and_honest(task, worker_mturk, "203.0.113.60", "198.51.100.90")

    ring = [_sign_up(f"ring{i}", f"192.0.2.{10 + i}") for i in range(3)]
    careful = [_sign_up(f"careful{i}", f"198.18.1.{i}") for i in range(3)]
    get_user_model().objects.filter(pk__in=[a.user.pk for a in ring + careful]).update(
        date_joined=timezone.now() - timedelta(days=30))
    for account in ring + careful:
        account.user.refresh_from_db()
    for member in ring:
        assert _validate_what_the_queue_serves(member, lambda item: "correct") > 0
    cheats = list(Example.objects.filter(session=cheat.session))
    assert all(e.validation_status == "pending" for e in Example.objects.filter(session__in=[cheat.session,
                                                                                             honest.session]))
    assert not any(trust.standing(task, member.user).trusted for member in ring)
    assert Validation.objects.filter(validator__in=[m.user for m in ring], counted=True).count() == 0

    # The careful validators answer the gold items rightly, which earns them trust; then
    # the queue serves them the workers' examples, which they decide truly.
    honest_ids = set(Example.objects.filter(session=honest.session).values_list("pk", flat=True))
    for validator in careful:
        _validate_what_the_queue_serves(validator, lambda item: truth.get(item["id"]) or (
            "correct" if item["id"] in honest_ids else "incorrect"))
    for validator in careful:
        assert trust.standing(task, validator.user).trusted
    decided = Example.objects.filter(session=honest.session).exclude(validation_status="pending").count()
    assert decided == len(honest_ids)  # every one decided by trusted people, more than one
    assert all(e.validation_status != "verified" for e in cheats)

    report = crowd_tasks.pay_bonuses.apply_async().get(timeout=60)
    assert "1 bonuses paid" in report, report
    assert crowd_tasks.pay_bonuses.apply_async().get(timeout=60).startswith("0 assignments settled, 0 bonuses paid")
    paid = [b["AssignmentId"] for b in worker_mturk.bonuses if b["AssignmentId"] in
            (cheat.assignment_id, honest.assignment_id)]
    assert paid == [honest.assignment_id]
    # The careful validators rejected the cheat's mislabelled examples: settled at $0.
    assert not BonusPayment.objects.filter(assignment=cheat, amount__gt=0).exists()
    assert worker_mturk.violations == []
