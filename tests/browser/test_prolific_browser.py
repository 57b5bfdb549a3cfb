"""A Prolific participant's study in headless Chromium against the fake Prolific: the
study link, the work, Finish, the completion code and the redirect to Prolific; the
sync approves the submission, and the bonus for the example that fooled the model is
paid once."""

from decimal import Decimal
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from annotation import validation
from annotation.models import Example
from crowd import bonuses, prolific, sync
from crowd.models import Assignment, BonusPayment, CrowdBudget
from crowd.publishing import BatchRequest, publish
from crowd.testing.fake_prolific import FakeProlific
from tests.browser.test_worker_journey_browser import write_pair_on_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PARTICIPANT = "5f0c1a2b3c4d5e6f7a8b9c0d"
TOKEN = "browser-test-prolific-token"


def test_a_participant_works_finishes_and_goes_back_to_prolific_with_the_code(
        live_server, live_tasks, researcher, settings, monkeypatch, browser_page):
    monkeypatch.setattr(prolific, "sleep", lambda seconds: None)
    with FakeProlific(token=TOKEN) as fake:
        settings.PROLIFIC_API_URL, settings.PROLIFIC_TOKEN = fake.url, TOKEN
        settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
        task = live_tasks["sentiment"]
        CrowdBudget.objects.create(task=task, amount=Decimal("50.00"), currency="GBP")
        batch = publish(BatchRequest(task=task, mode="create", hits=1, assignments_per_hit=1,
                                     reward=Decimal("1.00"), bonus_per_example=Decimal("0.25"),
                                     examples_per_assignment=2, platform="prolific", currency="GBP",
                                     estimated_minutes=5, allow_below_reference=True,
                                     override_reason="The browser test publishes whatever the tiny model scored."))
        study = batch.hit_rows.get().hit_id
        assert fake.studies[study]["status"] == "ACTIVE"
        assert fake.studies[study]["external_study_url"].startswith(
            f"https://dynabench.example.org/prolific/{batch.uid.hex}/?PROLIFIC_PID={{%PROLIFIC_PID%}}")
        session = fake.start_submission(study, PARTICIPANT)
        page, errors = browser_page
        landed = []
        page.route("https://app.prolific.com/**", lambda route: (
            landed.append(route.request.url), route.fulfill(content_type="text/html", body="Prolific")))

        page.goto(f"{live_server.url}/prolific/{batch.uid.hex}/?" + urlencode(
            {"PROLIFIC_PID": PARTICIPANT, "STUDY_ID": study, "SESSION_ID": session}))
        page.wait_for_selector("#context-fields .field .text")
        assert "£0.25" in page.locator(".hit-bar").inner_text()
        write_pair_on_page(page, "Not the disaster the reviews promised.")
        assert page.locator("#hit-done").inner_text() == "2"
        page.click("#hit-submit")
        page.wait_for_selector("#completion-code")
        assert page.locator("#completion-code").inner_text() == batch.completion_code
        page.click("#completion-link")
        page.wait_for_url("https://app.prolific.com/**", wait_until="load")
        code = parse_qs(urlsplit(landed[0]).query)["cc"][0]
        fake.complete(session, code)  # what Prolific does with the code it received

        assert sync.sync().approved == 1
        assert Assignment.objects.get().status == Assignment.Status.APPROVED
        for example in Example.objects.filter(session__mturk_assignment__assignment_id=session):
            validation.validate_example(example.pk, researcher, label="correct")
        assert bonuses.pay_bonuses().paid == 1 and bonuses.pay_bonuses().paid == 0
        assert BonusPayment.objects.get().status == BonusPayment.Status.PAID
        assert fake.paid_to(PARTICIPANT) == [25] and fake.payments[0]["currency"] == "GBP"
    assert errors == []
