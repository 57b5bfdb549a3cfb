"""A new MTurk worker's whole study, in headless Chromium against the fake MTurk: the
HIT shows the task's onboarding first; passed, the worker writes, submits with
feedback; MTurk approves, a researcher verifies the example that fooled the model, the
bonus is paid once; in their next HIT, which MTurk has not confirmed yet, the page under the
token is that HIT's own, and the worker's account has the bonus paid."""

from decimal import Decimal
from urllib.parse import parse_qs, urlencode

import pytest

from annotation import validation
from annotation.models import Example, OnboardingRecord
from crowd import bonuses, me, sync
from crowd.models import Assignment, BonusPayment
from crowd.publishing import BatchRequest, publish
from tests.browser.test_onboarding_browser import pass_onboarding

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SUBMIT_TO = "https://workersandbox.mturk.com"
WORKER = "A2JOURNEYWORKER1"
TEXT = "Not the disaster the reviews promised."


def write_pair_on_page(page, text):
    """On the work page, the same statement with each label (so one of the two fools a
    two-label model), as a worker writes them: "Write another" between the two."""
    page.wait_for_selector("#context-fields .field .text")
    for label in ("negative", "positive"):
        page.fill("#input-statement", text)
        page.locator(f"input[name=label][value={label}]").check()
        page.click("#submit-example")
        page.wait_for_selector("#result:not([hidden])")
        if label == "negative":
            page.click("#another")
            page.wait_for_selector("#example-form:not([hidden])")

def test_a_new_worker_goes_from_onboarding_to_a_paid_bonus_shown_on_their_page(
        with_onboarding, live_server, live_tasks, researcher, fake_mturk, settings, monkeypatch, browser_page):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEYID0001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "journey-secret-key-not-real")
    settings.MTURK_ENDPOINT_URL = fake_mturk.endpoint_url
    settings.MTURK_SANDBOX = True
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
    task = live_tasks["sentiment"]
    batch = publish(BatchRequest(task=task, mode="create", hits=2, assignments_per_hit=1, reward=Decimal("0.50"),
                                 bonus_per_example=Decimal("0.25"), examples_per_assignment=2,
                                 allow_below_reference=True,
                                 override_reason="The journey publishes whatever the tiny model scored."))
    first_hit, second_hit = batch.hit_rows.order_by("number")
    page, errors = browser_page
    base = live_server.url
    posted = []
    page.route(f"{SUBMIT_TO}/**", lambda route: (posted.append(route.request.post_data),
                                                 route.fulfill(content_type="text/html", body="Submitted")))

    def open_hit(hit):
        assignment_id = fake_mturk.accept(hit.hit_id, WORKER)
        page.goto(f"{base}/mturk/hit/?" + urlencode({"assignmentId": assignment_id, "hitId": hit.hit_id,
                                                       "workerId": WORKER, "turkSubmitTo": SUBMIT_TO}))
        return assignment_id

    # 1. The first HIT: the onboarding comes first, item by item, each answer explained.
    first = open_hit(first_hit)
    page.wait_for_selector("#onboarding")
    assert page.locator("#example-form").count() == 0
    pass_onboarding(page, task.parsed_config.onboarding["items"])

    # 2. The work: the same words with each label, so one of the two fools the model; then
    # feedback, and Submit posts to MTurk.
    write_pair_on_page(page, TEXT)
    assert page.locator("#hit-done").inner_text() == "2"
    page.fill("#hit-feedback", "Clear instructions; the quiz helped.")
    page.click("#hit-submit")
    page.wait_for_url(f"{SUBMIT_TO}/mturk/externalSubmit", wait_until="load")
    fake_mturk.submit(first, {"completionToken": parse_qs(posted[0])["completionToken"][0]})
    assert Assignment.objects.get(assignment_id=first).worker_feedback == "Clear instructions; the quiz helped."

    # 3. MTurk approves; a researcher verifies both examples; the bonus for the one that
    # fooled the model is paid, once.
    assert sync.sync().approved == 1
    examples = list(Example.objects.filter(session__mturk_assignment_id=first))
    assert len(examples) == 2 and sum(e.fooled for e in examples) == 1
    for example in examples:
        validation.validate_example(example.pk, researcher, label="correct")
    assert bonuses.pay_bonuses().paid == 1 and bonuses.pay_bonuses().paid == 0
    assert BonusPayment.objects.get().status == BonusPayment.Status.PAID and len(fake_mturk.bonuses) == 1

    # 4. The next HIT asks no onboarding again. MTurk shows an assignment only once it is
    # submitted, so inside it the page opened from the HIT bar (under the token) is this
    # HIT's own and says so: it shows nothing of the account, the paid bonus included
    # (anyone could open a HIT with this worker's id). The account's page has the bonus.
    second = open_hit(second_hit)
    page.wait_for_selector("#context-fields .field .text")
    assert page.locator("#onboarding").count() == 0
    with page.context.expect_page() as opened:
        page.locator("#hit-my-page button").click()
    mine = opened.value
    mine.wait_for_selector("#my-assignments")
    assert "has not confirmed this HIT as yours yet" in mine.locator("#unconfirmed").inner_text()
    assert mine.locator(f"#my-assignments tr[data-assignment='{first}']").count() == 0
    assert mine.locator(f"#my-assignments tr[data-assignment='{second}']").count() == 1
    assert "passed" in mine.locator("#my-standing").inner_text()  # admitted on the worker's pass
    account = Assignment.objects.get(assignment_id=first).worker.user
    [paid] = [row for row in me.worker_page(account)["assignments"].rows if row["assignment_id"] == first]
    assert (paid["bonus_paid"], paid["reward_status"]) == (Decimal("0.25"), "paid")
    assert OnboardingRecord.objects.get(task=task, user=account).passed_at is not None
    assert fake_mturk.violations == []
    assert errors == []
