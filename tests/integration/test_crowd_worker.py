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


def _sign_up(username, address):
    """A site account made through the sign-up page from ``address``, signed in."""
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    puppet = APIClient(REMOTE_ADDR=address)
    password = "a-long-enough-pass-123"
    response = puppet.post("/accounts/signup/", {"username": username, "password1": password, "password2": password})
    assert response.status_code == 302, response.content
    puppet.user = get_user_model().objects.get(username=username)
    return puppet


def _vote_through_the_api(voter, example, label):
    """The queue serves ``example`` to ``voter``, who answers blind and decides, over HTTP."""
    validation.assign(example, voter.user)
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
    from django.test import Client
    from django.utils import timezone
    from rest_framework.test import APIClient

    from tests.crowd.test_crowd_flow import OTHER_WORKER, WORKER

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "fake")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    settings.MTURK_ENDPOINT_URL = worker_mturk.endpoint_url
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
    task = live_tasks["sentiment"]
    task.config = {**task.config, "validator_trust": {"min_answers": 2, "min_agreement": 0.8}}
    task.save()
    rnd = task.open_round()
    stats_url = f"/api/tasks/{task.slug}/rounds/{rnd.number}/stats/"
    public = APIClient()
    before = public.get(stats_url).json()

    batch = make_batch(task, hits=1, assignments_per_hit=2)
    cheat = do_one_assignment(Client(REMOTE_ADDR="203.0.113.50"), worker_mturk, batch, worker=WORKER,
                              text="The film was fine, I suppose.")
    honest = do_one_assignment(Client(REMOTE_ADDR="198.51.100.80"), worker_mturk, batch, worker=OTHER_WORKER,
                               text="A warm, funny and generous film.")
    assert "2 approved" in crowd_tasks.sync.apply_async().get(timeout=60)

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
    for example in references:
        for validator in trusted:
            validation.assign(example, validator.user)
            validation.give_blind_answer(example.pk, validator.user, {"label": "positive"})
    for example in references:
        validation.validate_example(example.pk, researcher, label="correct")
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
