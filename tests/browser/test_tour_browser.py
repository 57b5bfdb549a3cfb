"""The first ten minutes, in headless Chromium, on a freshly bootstrapped demo.

``bootstrap_demo`` as ``make run`` leaves it (the seed examples in round 0, a seed
model per task trained, evaluated and made round 1's target; tiny training here),
then each kind of user in turn, failing on any console or page error:

- a visitor reads the home page's counts and a non-empty leaderboard, and reweights it;
- an annotator writes an example, asks why, and validates someone else's;
- a researcher trains the next model from the task page, sees it evaluated, and
  promotes it (with the override where it scores below the majority-class answer);
- an MTurk worker previews a HIT, accepts it, works and submits, against the fake MTurk.
"""

from decimal import Decimal
from urllib.parse import parse_qs, urlencode

import pytest

from annotation.models import Example, Validation
from crowd.models import Assignment
from jobs.models import Job
from registry.models import ModelVersion
from tasks.models import Round

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TINY = {"max_steps": 2, "epochs": 1, "batch_size": 4}
SUBMIT_TO = "https://workersandbox.mturk.com"
WORKER = "A2TOURWORKER0001"


@pytest.fixture
def fresh_demo(demo_tasks):
    from leaderboard.demo import bootstrap_demo

    report = bootstrap_demo(train_options=TINY)
    assert len(report.models_trained) == 4
    return demo_tasks


def test_every_kind_of_user_sees_the_platform_work(live_server, fresh_demo, annotator, second_annotator,
                                                   researcher, fake_mturk, settings, browser_page, sign_in):
    from tests.conftest import PASSWORD

    page, errors = browser_page
    base = live_server.url
    task = fresh_demo["sentiment"]

    # 1. A visitor: the home page counts, a leaderboard with rows, reweighted live.
    page.goto(f"{base}/")
    assert "0 examples written, 0 fooled the model" in page.locator(".task-list").inner_text()
    for slug in ("nli", "qa", "sentiment", "hate"):
        page.goto(f"{base}/tasks/{slug}/leaderboard/")
        names = page.locator("#leaderboard tbody tr").evaluate_all("rows => rows.map(r => r.dataset.model)")
        assert "round0-seed" in names, (slug, names)
    page.locator("input[type=range][name=performance]").fill("5")
    page.wait_for_function("() => window.location.search.includes('performance=5')")
    page.goto(f"{base}/tasks/nli/")
    assert "on the static test set (177 examples; 95% interval" in page.locator("#target-h + ul").inner_text()

    # 2. An annotator writes, asks why, and validates someone else's example.
    theirs = Example.objects.create(
        task=task, round=task.open_round(), context=task.contexts.first(), annotator=second_annotator,
        inputs={"statement": "The soup was cold but the welcome was warm."}, target={"label": "positive"},
        fooled=True, prediction={"label": "negative", "probabilities": {"negative": 0.6, "positive": 0.4}})
    sign_in(page, base, annotator.username, PASSWORD, f"/tasks/{task.slug}/create/")
    page.wait_for_selector("#context-fields .field .text")
    page.fill("#input-statement", "Hardly the worst evening of my life.")
    page.locator("input[name=label][value=positive]").check()
    page.click("#submit-example")
    page.wait_for_selector("#result:not([hidden])")
    page.click("#explain")
    page.wait_for_selector("#explanation:not([hidden]) .heat")
    assert Example.objects.filter(annotator=annotator, task=task).count() == 1
    page.goto(f"{base}/tasks/{task.slug}/validate/")
    assert "3 matching votes decide an example" in page.locator("#instructions").inner_text()
    page.locator("input[name=blind-label][value=positive]").check()
    page.click("#reveal")
    page.wait_for_selector("#decide-step:not([hidden])")
    page.click("#decide-step button[data-label=correct]")
    page.wait_for_selector("text=Thanks, recorded.")
    assert Validation.objects.get(example=theirs).validator == annotator
    page.click("button:has-text('Sign out')")

    # 3. A researcher trains the next model from the task page, sees it evaluated, promotes it.
    sign_in(page, base, researcher.username, PASSWORD, f"/tasks/{task.slug}/")
    assert "(0 usable)" in page.locator("select[name=selection]").inner_text()
    page.select_option("select[name=mode]", "head")
    # Nothing new to learn from yet: the page says so first, and trains only when told to.
    assert "No new usable examples" in page.locator("#no-new-examples").inner_text()
    page.check("input[name=allow_no_new_examples]")
    with page.expect_navigation(timeout=300_000):  # jobs run inline in the request thread here
        page.click("button:has-text('Train next model')")
    job = Job.objects.get(task=task, kind=Job.Kind.TRAIN_MODEL, params__name="r2-verified")
    page.wait_for_selector("dd.status-succeeded", timeout=300_000)
    assert page.locator("h1").inner_text() == f"Train a model #{job.pk}: r2-verified"
    candidate = ModelVersion.objects.get(task=task, name="r2-verified")
    assert Job.objects.get(kind=Job.Kind.EVALUATE_MODEL, params__model_version=candidate.pk).status == "succeeded"
    page.goto(f"{base}/tasks/{task.slug}/")
    cell = page.locator("table.comparison tr:has(th:has-text('Actions')) td").nth(1)
    cell.locator("button[value=promote]").click()
    # The confirmation: both scores and the majority line; the override needs a reason.
    page.wait_for_selector("form.promote-confirm")
    assert "Majority line" in page.locator("table.promotion-checks").inner_text()
    if page.locator("input[name=allow_below_baseline]").count():
        page.check("input[name=allow_below_baseline]")
        page.fill("textarea[name=reason]", "The tour promotes whatever the tiny model scored.")
    page.click("form.promote-confirm button[type=submit]")
    page.wait_for_selector("ul.messages li")
    assert "Round 2 is open with r2-verified as its target." in page.locator("ul.messages").inner_text()
    assert list(task.open_round().target_models.all()) == [candidate]
    assert Round.objects.get(task=task, number=1).status == Round.Status.CLOSED
    page.click("button:has-text('Sign out')")

    # 4. An MTurk worker: preview, accept, work, submit (MTurk's side is the fake).
    from crowd.publishing import BatchRequest, publish

    settings.MTURK_ENDPOINT_URL = fake_mturk.endpoint_url
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
    # The tour's tiny target does not clear the majority line: the batch is published with
    # the override and its reason (crowd.publishing.check_target; its refusal is tested there).
    batch = publish(BatchRequest(task=task, mode="create", hits=1, assignments_per_hit=1, reward=Decimal("0.50"),
                                 bonus_per_example=Decimal("0.25"), examples_per_assignment=1,
                                 allow_below_reference=True,
                                 override_reason="The tour publishes whatever the tiny model scored."))
    hit = batch.hit_rows.get()
    preview = urlencode({"assignmentId": "ASSIGNMENT_ID_NOT_AVAILABLE", "hitId": hit.hit_id})
    page.goto(f"{base}/mturk/hit/?{preview}")
    assert "Write 1 examples" in page.locator("#hit-preview").inner_text()
    assert page.locator("a:has-text('Sign in')").count() == 0
    assignment_id = fake_mturk.accept(hit.hit_id, WORKER)
    posted = []
    page.route(f"{SUBMIT_TO}/**", lambda route: (posted.append(route.request.post_data),
                                                 route.fulfill(content_type="text/html", body="Submitted")))
    work = urlencode({"assignmentId": assignment_id, "hitId": hit.hit_id, "workerId": WORKER,
                      "turkSubmitTo": SUBMIT_TO})
    page.goto(f"{base}/mturk/hit/?{work}")
    page.wait_for_selector("#context-fields .field .text")
    page.click("#hit-submit")  # too early: the worker stays on the work, told what is left
    assert "Do 1 more, then submit." in page.locator("#hit-submit-error").inner_text()
    page.fill("#input-statement", "Not the disaster the reviews promised.")
    page.locator("input[name=label][value=positive]").check()
    page.click("#submit-example")
    page.wait_for_selector("#result:not([hidden])")
    assert page.locator("#hit-done").inner_text() == "1"
    page.click("#hit-submit")
    # The form posts to MTurk (the route above answers for it); while the page navigates it
    # has no body, so wait for the new address and its load before reading the page.
    page.wait_for_url(f"{SUBMIT_TO}/mturk/externalSubmit", wait_until="load")
    assert page.locator("body").inner_text() == "Submitted"
    assert posted and parse_qs(posted[0])["assignmentId"] == [assignment_id]
    assert Assignment.objects.get(assignment_id=assignment_id).status == Assignment.Status.FINISHED
    assert fake_mturk.violations == []
    assert errors == []
