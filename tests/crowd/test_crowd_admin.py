"""The crowd in the admin: publish, watch, pay, and manage workers."""

from decimal import Decimal

import pytest
from django.contrib import admin
from django.urls import reverse

from annotation import validation
from annotation.models import Example
from core.errors import Forbidden
from crowd import sync, workers
from crowd.models import Assignment, Batch, BonusPayment, TaskBlock, WorkerIdentity
from tests.crowd.test_crowd_flow import WORKER, do_one_assignment, make_batch

pytestmark = pytest.mark.django_db

PUBLISH = {"mode": "create", "hits": "2", "assignments_per_hit": "1", "examples_per_assignment": "2",
           "reward": "0.50", "bonus_per_example": "0.25", "assignment_duration_hours": "1",
           "lifetime_hours": "24", "auto_approval_delay_hours": "24", "locales": "US",
           "min_approval_rate": "95", "min_approved_count": "100", "confirm": "on"}


@pytest.fixture
def crowd(fake_mturk, settings):
    settings.MTURK_ENDPOINT_URL = fake_mturk.endpoint_url
    settings.MTURK_MAX_ATTEMPTS = 2
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
    yield fake_mturk
    assert fake_mturk.violations == []


def test_a_researcher_publishes_a_sandbox_batch_from_the_admin(live_tasks, crowd, client, researcher):
    client.force_login(researcher)
    assert client.get(reverse("admin:crowd_batch_add")).url == reverse("admin:crowd_batch_publish")
    page = client.get(reverse("admin:crowd_batch_publish"))
    assert page.status_code == 200 and "MTurk sandbox" in page.content.decode()
    html = page.content.decode()
    # What it needs, before the first click (the fixture sets an HTTPS base URL; the fake needs no keys,
    # and the test environment may have none), and the most it may cost, before the confirmation box.
    assert "✔ an HTTPS PUBLIC_BASE_URL" in html
    assert "AWS credentials" in html
    assert html.index('id="max-total"') < html.index('name="confirm"')
    assert "Time per assignment (hours)" in html
    response = client.post(reverse("admin:crowd_batch_publish"),
                           {**PUBLISH, "task": live_tasks["sentiment"].pk})
    batch = Batch.objects.get()
    assert response.status_code == 302 and response.url == reverse("admin:crowd_batch_change", args=[batch.pk])
    assert batch.created_by == researcher and batch.status == Batch.Status.PUBLISHED and len(crowd.hits) == 2
    assert (batch.assignment_duration_seconds, batch.lifetime_seconds, batch.auto_approval_delay_seconds) == (
        3600, 86400, 86400)  # entered in hours
    detail = client.get(response.url).content.decode()
    assert "of at most $2.40" in detail and "Working: 0" in detail


def test_the_publish_form_names_what_is_missing(live_tasks, crowd, client, researcher, settings, monkeypatch):
    settings.PUBLIC_BASE_URL = "http://127.0.0.1:8000"
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client.force_login(researcher)
    html = client.get(reverse("admin:crowd_batch_publish")).content.decode()
    assert "✘ Missing: AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in html
    assert "✘ Missing: an HTTPS PUBLIC_BASE_URL: MTurk shows only HTTPS pages in its frame; PUBLIC_BASE_URL is " \
           "&#x27;http://127.0.0.1:8000&#x27;" in html


def test_a_refused_publish_says_why_in_the_form(live_tasks, crowd, client, researcher):
    client.force_login(researcher)
    crowd.balance = Decimal("1.00")
    response = client.post(reverse("admin:crowd_batch_publish"), {**PUBLISH, "task": live_tasks["sentiment"].pk})
    assert response.status_code == 200 and "holds $1.00" in response.content.decode()
    crowd.balance = Decimal("100.00")
    crowd.inject("CreateHITType", "throttle", times=2)
    response = client.post(reverse("admin:crowd_batch_publish"), {**PUBLISH, "task": live_tasks["sentiment"].pk})
    assert "throttling" in response.content.decode()
    assert Batch.objects.get().status == Batch.Status.PUBLISHING
    # The admin action goes on where it stopped.
    client.post(reverse("admin:crowd_batch_changelist"),
                {"action": "publish_remaining", "_selected_action": [Batch.objects.get().pk]})
    assert Batch.objects.get().status == Batch.Status.PUBLISHED and len(crowd.hits) == 2


def test_assignments_approvals_and_bonuses_flow_into_the_admin(live_tasks, crowd, client, researcher):
    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    client.force_login(researcher)
    changelist = reverse("admin:crowd_batch_changelist")
    response = client.post(changelist, {"action": "sync_batches", "_selected_action": [batch.pk]}, follow=True)
    assert "1 approved" in response.content.decode()
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    response = client.post(changelist, {"action": "pay_batch_bonuses", "_selected_action": [batch.pk]}, follow=True)
    assert "1 bonuses paid ($0.25)" in response.content.decode()
    listing = client.get(changelist).content.decode()
    # $0.50 reward + $0.10 fee + $0.25 bonus + $0.05 fee, for 1 verified model-fooling example
    assert "$0.90" in listing and 'id="spending-per-task"' in listing
    ledger = client.get(reverse("admin:crowd_bonuspayment_changelist")).content.decode()
    assert "paid $0.25" in ledger and WORKER in ledger
    assignments = client.get(reverse("admin:crowd_assignment_changelist")).content.decode()
    assert assignment.assignment_id in assignments and "Approved" in assignments
    assert BonusPayment.objects.get().status == BonusPayment.Status.PAID


def test_researchers_see_only_their_own_tasks_batches(live_tasks, crowd, client, other_researcher):
    make_batch(live_tasks["sentiment"])
    client.force_login(other_researcher)
    assert "0 batches" in client.get(reverse("admin:crowd_batch_changelist")).content.decode()
    assert client.get(reverse("admin:crowd_batch_change", args=[Batch.objects.get().pk])).status_code in (302, 403)


def test_superusers_block_and_message_workers_and_see_their_quality(live_tasks, crowd, client, superuser,
                                                                     researcher):
    batch = make_batch(live_tasks["sentiment"])
    assignment = do_one_assignment(client, crowd, batch)
    sync.sync()  # quality counts MTurk-verified work only
    examples = list(Example.objects.filter(session=assignment.session))
    validation.validate_example(examples[0].pk, researcher, label="correct")
    validation.validate_example(examples[1].pk, researcher, label="incorrect")
    identity = WorkerIdentity.objects.get(worker_id=WORKER)
    client.force_login(superuser)
    url = reverse("admin:crowd_workeridentity_changelist")
    assert "50% of 2" in client.get(url).content.decode()
    form = client.post(url, {"action": "soft_block", "_selected_action": [identity.pk]})
    assert b'name="reason"' in form.content
    client.post(url, {"action": "soft_block", "_selected_action": [identity.pk], "apply": "1", "reason": "spam"})
    identity.refresh_from_db()
    assert identity.soft_blocked_at and identity.block_reason == "spam"
    assert crowd.count("AssociateQualificationWithWorker") == 1
    client.post(url, {"action": "hard_block", "_selected_action": [identity.pk], "apply": "1", "reason": "fraud"})
    assert WORKER in crowd.blocks
    client.post(url, {"action": "notify_workers", "_selected_action": [identity.pk], "apply": "1",
                      "subject": "New HITs", "message": "Round 2 is open."})
    assert len(crowd.notifications) == 1


def test_a_task_block_is_its_researchers_to_lift_and_no_one_elses(live_tasks, crowd, client, researcher,
                                                                   other_researcher):
    batch = make_batch(live_tasks["sentiment"])
    identity = workers.identity_for(WORKER, sandbox=True)
    block = workers.task_block(identity, batch.task, "Examples validated correct less often than 50%.",
                               sandbox=True, batch=batch)
    url = reverse("admin:crowd_taskblock_changelist")
    # Another researcher neither sees nor lifts it ...
    client.force_login(other_researcher)
    assert "0 task blocks" in client.get(url).content.decode()
    client.post(url, {"action": "lift_task_blocks", "_selected_action": [block.pk]})
    with pytest.raises(Forbidden):
        workers.task_unblock(block, other_researcher)
    assert TaskBlock.objects.exists() and crowd.count("DisassociateQualificationFromWorker") == 0
    # ... the task's researcher does, on MTurk too.
    client.force_login(researcher)
    assert WORKER in client.get(url).content.decode()
    response = client.post(url, {"action": "lift_task_blocks", "_selected_action": [block.pk]}, follow=True)
    assert "unblocked" in response.content.decode()
    assert not TaskBlock.objects.exists() and crowd.count("DisassociateQualificationFromWorker") == 1



@pytest.mark.parametrize("model", [Assignment, BonusPayment, TaskBlock, Batch])
def test_rows_that_money_follows_are_not_written_by_hand_even_by_a_superuser(model, rf, client, superuser):
    """Assignments, the bonus ledger and task blocks are read-only in the admin; a batch is
    added only by publishing it (its add page is the publish form) and never edited or deleted."""
    request = rf.get("/")
    request.user = superuser
    model_admin = admin.site.get_model_admin(model)
    assert model_admin.has_view_permission(request)
    assert not model_admin.has_change_permission(request) and not model_admin.has_delete_permission(request)
    client.force_login(superuser)
    response = client.get(reverse(f"admin:crowd_{model._meta.model_name}_add"))
    if model is Batch:
        assert model_admin.has_add_permission(request)
        assert response.status_code == 302 and response.url == reverse("admin:crowd_batch_publish")
    else:
        assert not model_admin.has_add_permission(request)
        assert response.status_code == 403

# --- words and numbers on the crowd's pages ------------------------------------------------


@pytest.mark.parametrize("value, shown", [(Decimal("0.5"), "$0.50"), (Decimal("50"), "$50.00"), (None, "—"),
                                          (Decimal("1E+1"), "$10.00"), (Decimal("-1.2"), "-$1.20"),
                                          (Decimal("0.005"), "$0.01"), ("0.25", "$0.25")])
def test_money_always_shows_dollars_and_cents(value, shown):
    from crowd.money import usd

    assert usd(value) == shown


def test_a_budget_is_named_by_its_task_and_amounts_show_cents(live_tasks, crowd, client, superuser, settings):
    settings.CROWD_APPROVAL_THRESHOLD = Decimal("0.5")  # as an operator may write it
    client.force_login(superuser)
    response = client.post(reverse("admin:crowd_crowdbudget_add"),
                           {"task": live_tasks["sentiment"].pk, "amount": "50", "note": ""}, follow=True)
    page = response.content.decode()
    assert "$50.00 for Sentiment Analysis (sentiment)" in page
    assert "for task " not in page
    form = client.get(reverse("admin:crowd_batch_publish")).content.decode()
    assert "may cost more than $0.50 (<code>CROWD_APPROVAL_THRESHOLD</code>)" in form
    assert "$0.5 " not in form and "$0.5<" not in form and "$50<" not in form
    response = client.post(reverse("admin:crowd_batch_publish"),
                           {**PUBLISH, "task": live_tasks["sentiment"].pk}, follow=True)
    assert "CROWD_APPROVAL_THRESHOLD ($0.50)" in response.content.decode()


def test_a_closed_batch_reads_as_closed_to_new_workers(live_tasks, crowd, client, researcher):
    batch = make_batch(live_tasks["sentiment"])
    sync.expire_batch(batch)
    client.force_login(researcher)
    listing = client.get(reverse("admin:crowd_batch_changelist")).content.decode()
    assert "Closed to new workers" in listing and "Finished (expired)" not in listing
    assert Batch.Status.FINISHED.label == "Closed to new workers"


def test_the_publish_form_shows_the_address_this_server_answers_at_when_unset(
        live_tasks, crowd, client, researcher, settings):
    settings.PUBLIC_BASE_URL = ""
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    client.force_login(researcher)
    html = client.get(reverse("admin:crowd_batch_publish"), HTTP_HOST="127.0.0.1:8080").content.decode()
    assert ("✘ Missing: an HTTPS PUBLIC_BASE_URL: PUBLIC_BASE_URL is unset; this server answered this page at "
            "&#x27;http://127.0.0.1:8080&#x27;") in html
    assert ":8000" not in html and 'id="base-url-warning"' not in html
    # Publishing still asks for the setting (commands and later approvals have no request to go by).
    response = client.post(reverse("admin:crowd_batch_publish"), {**PUBLISH, "task": live_tasks["sentiment"].pk},
                           HTTP_HOST="127.0.0.1:8080")
    assert "PUBLIC_BASE_URL is unset" in response.content.decode() and not Batch.objects.exists()


def test_the_publish_form_shows_a_set_address_as_it_is_and_warns_when_it_is_another_host(
        live_tasks, crowd, client, researcher, settings):
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
    settings.ALLOWED_HOSTS = ["127.0.0.1", "dynabench.example.org"]
    client.force_login(researcher)
    html = client.get(reverse("admin:crowd_batch_publish"), HTTP_HOST="127.0.0.1:8080").content.decode()
    assert "✔ an HTTPS PUBLIC_BASE_URL (https://dynabench.example.org)" in html
    assert 'id="base-url-warning"' in html
    assert ("PUBLIC_BASE_URL is &#x27;https://dynabench.example.org&#x27;, but this page was reached at "
            "&#x27;http://127.0.0.1:8080&#x27;") in html
    # Reached at that host (a proxy that ends TLS leaves the request on http): no warning.
    for host in ("dynabench.example.org", "dynabench.example.org:443"):
        html = client.get(reverse("admin:crowd_batch_publish"), HTTP_HOST=host).content.decode()
        assert "✔ an HTTPS PUBLIC_BASE_URL (https://dynabench.example.org)" in html
        assert 'id="base-url-warning"' not in html
    # Another port of the same host is another server.
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org:8443"
    html = client.get(reverse("admin:crowd_batch_publish"), HTTP_HOST="dynabench.example.org").content.decode()
    assert 'id="base-url-warning"' in html
