"""`make crowd-demo`: the HIT flow against the fake MTurk, with no AWS account."""

import io
import re
import threading
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from crowd.models import Assignment, Batch
from tests.crowd.test_crowd_flow import api, submit_here, token_of, write_pair

pytestmark = pytest.mark.django_db


@pytest.fixture
def aws_untouched(monkeypatch, settings):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
                 "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    before = settings.MTURK_ENDPOINT_URL, settings.PUBLIC_BASE_URL, settings.MTURK_SANDBOX
    yield
    settings.MTURK_ENDPOINT_URL, settings.PUBLIC_BASE_URL, settings.MTURK_SANDBOX = before


def test_the_demo_publishes_on_the_fake_and_a_worker_completes_the_hit(live_tasks, client, aws_untouched):
    from crowd.management.commands import crowd_demo
    from crowd.testing.fake_mturk import FakeMTurk

    out = io.StringIO()
    started = []
    real_start = FakeMTurk.start

    def keep(self):  # the command stops its fake on the way out; keep a handle to check it
        started.append(self)
        return real_start(self)

    FakeMTurk.start = keep
    try:
        call_command("crowd_demo", "--no-serve", "--port", "8123", stdout=out)
    finally:
        FakeMTurk.start = real_start
    text = out.getvalue()
    batch = Batch.objects.get()
    assert batch.sandbox and batch.examples_per_assignment == 2 and batch.task.slug == "sentiment"
    [work] = re.findall(r"The worker's accepted assignment: (\S+)", text)
    assert work.startswith("http://127.0.0.1:8123/mturk/hit/?")
    assert re.search(r"The HIT as a worker previews it: +http://127\.0\.0\.1:8123/mturk/hit/\?"
                     r"assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=\w+", text)
    [fake] = started
    assert fake.violations == []

    # The worker's page, writing and Submit, as the printed link gives them; then the
    # command's part: MTurk (a fake restarted here, with the same state) receives the HIT.
    fake.start()
    from django.conf import settings

    settings.MTURK_ENDPOINT_URL = fake.endpoint_url
    try:
        query = parse_qs(urlsplit(work).query)
        page = client.get("/mturk/hit/", {k: v[0] for k, v in query.items()})
        token = token_of(page)
        write_pair(api(token), "sentiment", "Fine, if you like that sort of thing.")
        submit_here(client, token)
        said = []
        done = crowd_demo.play_mturk(fake, batch, query["assignmentId"][0], said.append, threading.Event(),
                                     poll=0.01)
    finally:
        fake.stop()
    assert done
    assignment = Assignment.objects.get()
    assert assignment.status == Assignment.Status.APPROVED, assignment.status
    assert said and "MTurk (the fake) received the HIT" in said[0]


def test_the_demo_says_when_the_target_is_not_ready_and_refuses_an_unknown_task(demo_tasks, aws_untouched):
    out = io.StringIO()
    call_command("crowd_demo", "--no-serve", stdout=out)
    assert "Round 1 of sentiment has no target model yet: the server below runs its training job" in out.getvalue()
    with pytest.raises(CommandError, match="No task 'nope'"):
        call_command("crowd_demo", "--no-serve", "--task", "nope", stdout=io.StringIO())


@pytest.mark.parametrize("marker", ["a study's task", "a live batch", "a live worker"])
def test_the_demo_refuses_a_database_that_is_not_the_demos(demo_tasks, aws_untouched, marker):
    """DATABASE_URL left pointing at a real study: the demo must not publish a batch and
    make a made-up worker's assignment there."""
    from crowd.models import WorkerIdentity
    from tasks.models import Task

    if marker == "a study's task":
        study = Task.objects.get(slug="sentiment")
        study.pk, study.slug, study.name = None, "my-study", "My study"
        study.save()
    elif marker == "a live batch":
        task = demo_tasks["sentiment"]
        Batch.objects.create(task=task, round=task.open_round(), mode="create", sandbox=False, title="Live",
                             hits=1, assignments_per_hit=1, reward="0.50", bonus_per_example="0.25",
                             examples_per_assignment=2)
    else:
        from django.contrib.auth import get_user_model

        WorkerIdentity.objects.create(worker_id="A1REALWORKER001", sandbox=False,
                                      user=get_user_model().objects.create_user("mturk-A1REALWORKER001"))
    batches = Batch.objects.count()
    with pytest.raises(CommandError, match="crowd_demo runs only on the demo's database") as refused:
        call_command("crowd_demo", "--no-serve", stdout=io.StringIO())
    assert "Point DATABASE_URL at a database of its own" in str(refused.value)
    assert Batch.objects.count() == batches and not Assignment.objects.exists()


def test_the_demos_worker_takes_the_onboarding_first_through_the_service(with_onboarding, live_tasks, client,
                                                                           aws_untouched):
    """The shipped tasks ask for their onboarding: the demo's worker meets it on the page,
    passes it through the API as anyone would, then writes and submits."""
    from crowd.management.commands import crowd_demo
    from crowd.testing.fake_mturk import FakeMTurk
    from tests.annotation.test_onboarding import answers
    from tests.crowd.test_crowd_onboarding import take

    out = io.StringIO()
    started = []
    real_start = FakeMTurk.start

    def keep(self):
        started.append(self)
        return real_start(self)

    FakeMTurk.start = keep
    try:
        call_command("crowd_demo", "--no-serve", "--port", "8123", stdout=out)
    finally:
        FakeMTurk.start = real_start
    assert "asks new workers for its onboarding first" in out.getvalue()
    [work] = re.findall(r"The worker's accepted assignment: (\S+)", out.getvalue())
    [fake] = started
    fake.start()
    from django.conf import settings

    settings.MTURK_ENDPOINT_URL = fake.endpoint_url
    try:
        query = parse_qs(urlsplit(work).query)
        page = client.get("/mturk/hit/", {k: v[0] for k, v in query.items()})
        assert 'id="onboarding"' in page.content.decode()
        token = token_of(page)
        assert take(api(token), "sentiment", answers("sentiment"))["standing"]["passed"]
        write_pair(api(token), "sentiment", "Fine, if you like that sort of thing.")
        submit_here(client, token)
        done = crowd_demo.play_mturk(fake, Batch.objects.get(), query["assignmentId"][0], lambda m: None,
                                     threading.Event(), poll=0.01)
    finally:
        fake.stop()
    assert done and Assignment.objects.get().status == Assignment.Status.APPROVED
    assert fake.violations == []


def test_the_prolific_demo_publishes_a_study_and_a_participant_is_approved_and_paid_once(
        live_tasks, client, researcher, settings):
    """`make crowd-demo PLATFORM=prolific`: a study on the fake Prolific, the participant's
    link, the work, the completion code, the sync, the approval and one bonus payment."""
    from annotation import validation
    from annotation.models import Example
    from crowd.models import BonusPayment
    from crowd.testing import prolific_demo
    from crowd.testing.fake_prolific import FakeProlific

    out, started = io.StringIO(), []
    real_start = FakeProlific.start

    def keep(self):
        started.append(self)
        return real_start(self)

    FakeProlific.start = keep
    try:
        call_command("crowd_demo", "--platform", "prolific", "--no-serve", "--port", "8123", stdout=out)
    finally:
        FakeProlific.start = real_start
    text = out.getvalue()
    batch = Batch.objects.get()
    assert batch.platform == "prolific" and batch.currency == "GBP" and batch.completion_code
    [link] = re.findall(r"The participant's study link: (\S+)", text)
    assert link.startswith(f"http://127.0.0.1:8123/prolific/{batch.uid.hex}/?PROLIFIC_PID=")
    [fake] = started
    assert fake.studies[batch.hit_rows.get().hit_id]["status"] == "ACTIVE"

    fake.start()  # the command stopped it on the way out: the same state, served again
    settings.PROLIFIC_API_URL = fake.url
    try:
        query = {k: v[0] for k, v in parse_qs(urlsplit(link).query).items()}
        page = client.get(urlsplit(link).path, query)
        assert page["X-Frame-Options"] == "DENY" and "frame-ancestors 'none'" in page["Content-Security-Policy"]
        token = token_of(page)
        write_pair(api(token), "sentiment", "Fine, if you like that sort of thing.")
        done = client.post("/prolific/submit/", {"token": token}).content.decode()
        assert batch.completion_code in done and "app.prolific.com/submissions/complete?cc=" in done
        for example in Example.objects.filter(session__mturk_assignment__assignment_id=query["SESSION_ID"]):
            validation.validate_example(example.pk, researcher, label="correct")
        said = []
        assert prolific_demo.play_prolific(fake, batch, query["SESSION_ID"], said.append, threading.Event(),
                                           poll=0.01)
        assert prolific_demo.play_prolific(fake, batch, query["SESSION_ID"], said.append, threading.Event(),
                                           poll=0.01)  # once more: nothing more is paid
    finally:
        fake.stop()
    assert Assignment.objects.get().status == Assignment.Status.APPROVED
    assert BonusPayment.objects.get().status == BonusPayment.Status.PAID
    assert fake.paid_to(prolific_demo.PARTICIPANT) == [25] and fake.count("pay_bonus") == 1
    assert "received the completion code" in said[0] and "Bonus settled" in said[1]
