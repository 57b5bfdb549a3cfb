"""An axe-core scan (WCAG 2.2 A and AA rules) of the pages we write, at desktop and phone
width, in the states an annotator meets (WCAG 2.2 AA). Any violation fails.

axe-core comes from the npm registry, pinned in package.json/package-lock.json and
installed into node_modules/ by ``npm ci`` (what ``make lint`` runs); the test skips with
that reason where it is not installed. Chromium through Playwright as in conftest.py.
"""

from decimal import Decimal
from pathlib import Path
from urllib.parse import urlencode

import pytest

from crowd.publishing import BatchRequest, publish
from tests.browser.test_keyboard_browser import make_items, token_url
from tests.conftest import PASSWORD
from tests.leaderboard.test_board import LEANING, boarded  # noqa: F401  (the fixture and its data)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]


@pytest.fixture
def axe_source():
    if not AXE.exists():
        pytest.skip(f"axe test: axe-core is not installed at {AXE} "
                    "(run `npm ci` in the repository, as `make lint` does)")
    return AXE.read_text()


def violations(page, source):
    """axe's violations on the page as it is now: 'rule: target' lines, empty when clean."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        # Evaluated through the DevTools protocol: the page's CSP (script-src 'self') stays as it is.
        page.evaluate(source + "\n;undefined")
    found = page.evaluate("tags => axe.run(document, {runOnly: {type: 'tag', values: tags}})"
                          ".then(r => r.violations.map(v => v.id + ': '"
                          " + v.nodes.map(n => n.target.join(' ')).join(', ')))",
                          TAGS)
    return found


def violation_nodes(page, source):
    """axe's violations on the page as (rule, element) pairs, one per element."""
    return {(rule, target) for line in violations(page, source)
            for rule, targets in [line.split(": ", 1)] for target in targets.split(", ")}


@pytest.mark.parametrize("width", [1280, 390])
def test_the_pages_we_write_have_no_axe_violations(live_server, live_tasks, annotator, second_annotator, browser_page,
                                                   axe_source, width):
    page, errors = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    base = live_server.url
    task = live_tasks["sentiment"]
    make_items(task, second_annotator, 1)
    found = {}

    def scan(state):
        found[state] = violations(page, axe_source)

    page.goto(f"{base}/")
    scan("home")
    page.goto(f"{base}/tasks/sentiment/")
    scan("task page")
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", annotator.username)
    page.fill("#id_password", "not-the-password")
    page.click("button[type=submit]")
    page.wait_for_selector("#login-error")
    scan("sign-in with an error")

    write_and_validate(page, live_server, task, annotator, scan)

    assert {state: v for state, v in found.items() if v} == {}
    assert errors == []


def write_and_validate(page, live_server, task, writer, scan):
    """The write page (empty, with errors, answered with the explanation shown) and the
    validate page (blind, revealed, nothing left) of ``task``, scanned in each state."""
    config = task.parsed_config
    page.goto(token_url(live_server, writer, task, "create"))
    page.wait_for_selector("#context-fields .field .text")
    scan("write")
    page.click("#submit-example")
    page.wait_for_selector("#example-form [aria-invalid=true]")
    scan("write with errors")
    for name in config.input_field_names:
        page.fill(f"#input-{name}", "Words written for the accessibility scan.")
    if config.answer_context_field:
        page.fill("#answer-text", page.locator("#passage").inner_text().split()[1])
    else:
        page.locator("input[name=label]").first.check()
    page.click("#submit-example")
    page.wait_for_selector("#result:not([hidden])")
    page.click("#explain")
    page.wait_for_selector("#explanation:not([hidden]) .heat")
    scan("write: the answer and the explanation")

    page.goto(token_url(live_server, writer, task, "validate"))
    page.wait_for_selector("#blind-step:not([hidden])")
    scan("validate")
    if config.answer_context_field:
        page.fill("#blind-answer", task.contexts.first().fields[config.answer_context_field].split()[1])
    else:
        page.locator("input[name=blind-label]").first.check()
    page.click("#reveal")
    page.wait_for_selector("#decide-step:not([hidden])")
    scan("validate: the writer's answer")
    page.click("#decide-step button[data-label=correct]")
    page.wait_for_selector("#empty")
    scan("validate: nothing left")


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("slug", ["nli", "hate", "qa"])
def test_write_and_validate_of_every_other_kind_have_no_axe_violations(
        live_server, live_tasks, annotator, second_annotator, browser_page, axe_source, slug, width):
    page, errors = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    task = live_tasks[slug]
    make_items(task, second_annotator, 1)
    found = {}
    write_and_validate(page, live_server, task, annotator,
                       lambda state: found.update({state: violations(page, axe_source)}))
    assert len(found) == 6
    assert {state: v for state, v in found.items() if v} == {}
    assert errors == []


@pytest.mark.parametrize("width", [1280, 390])
def test_the_board_the_model_page_sign_up_and_the_hit_have_no_axe_violations(
        live_server, boarded, fake_mturk, settings, browser_page, axe_source, width):  # noqa: F811
    task, models = boarded
    settings.MTURK_ENDPOINT_URL = fake_mturk.endpoint_url
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
    batch = publish(BatchRequest(task=task, mode="create", hits=1, assignments_per_hit=1, reward=Decimal("0.50"),
                                 bonus_per_example=Decimal("0.25"), examples_per_assignment=1,
                                 # the board's tiny models are below the majority line: a batch on them
                                 # needs the override (the pages are what this test scans)
                                 allow_below_reference=True, override_reason="A scan of the pages, not a study."))
    hit = batch.hit_rows.get()
    page, errors = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    base = live_server.url
    found = {}

    def scan(state):
        found[state] = violations(page, axe_source)

    page.goto(f"{base}/tasks/{task.slug}/leaderboard/")
    page.wait_for_selector("#leaderboard tbody tr")
    scan("leaderboard")
    page.goto(f"{base}/models/{models[0].pk}/")
    scan("model page")
    page.goto(f"{base}/accounts/signup/")
    page.fill("#id_username", "axe-walker")
    page.fill("#id_password1", "a-long-enough-pass-123")
    page.fill("#id_password2", "something-else-456")
    page.click("button[type=submit]")
    page.wait_for_selector("#id_password2_error")
    scan("sign-up with errors")
    preview = {"assignmentId": "ASSIGNMENT_ID_NOT_AVAILABLE", "hitId": hit.hit_id}
    page.goto(f"{base}/mturk/hit/?{urlencode(preview)}")
    scan("HIT preview")
    worker = "A2AXEWORKER0001"
    work = {"assignmentId": fake_mturk.accept(hit.hit_id, worker), "hitId": hit.hit_id, "workerId": worker,
            "turkSubmitTo": "https://workersandbox.mturk.com"}
    page.goto(f"{base}/mturk/hit/?{urlencode(work)}")
    page.wait_for_selector("#context-fields .field .text")
    scan("HIT work page")
    page.click("#hit-submit")  # too early: the refusal is drawn on the page
    page.wait_for_selector("#hit-submit-error:not(:empty)")
    scan("HIT: submit refused")

    assert len(found) == 6
    assert {state: v for state, v in found.items() if v} == {}
    assert errors == []


# Pages we serve but do not write: Django's admin and Swagger UI (drf-spectacular). The
# rules axe still finds in them, and why we leave them; any other rule fails. (What a small
# stylesheet of ours can fix is fixed: static/css/api-docs.css and static/css/admin.css.)
KNOWN_IN_PAGES_WE_DO_NOT_WRITE = {
    # Swagger UI draws each operation as a button holding a link (nested-interactive), and
    # its path links are small (target-size): its markup, not a colour we can set.
    "API docs": {"nested-interactive", "target-size"},
}


@pytest.mark.parametrize("width", [1280, 390])
def test_the_admin_task_form_and_the_api_docs_have_no_new_axe_violations(
        live_server, live_tasks, superuser, browser_page, sign_in, axe_source, width):
    page, errors = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    base = live_server.url
    task = live_tasks["sentiment"]
    found = {}

    def scan(state):
        # axe sets a style on some elements while it measures them; on the admin's pages the
        # site's CSP refuses it and says so on the console. That refusal is axe's, not the
        # page's: dropped here, and only here (any other console error still fails).
        before = len(errors)
        found[state] = violation_nodes(page, axe_source)
        errors[before:] = [e for e in errors[before:] if "Applying inline style violates" not in e]

    sign_in(page, base, "root", PASSWORD, f"/admin/tasks/task/{task.pk}/change/")
    page.wait_for_selector("#task_form")
    scan("admin: the task form")
    page.goto(f"{base}/admin/tasks/task/")
    scan("admin: the task list")
    page.goto(f"{base}/api/docs/")
    page.wait_for_selector(".swagger-ui .opblock", timeout=60_000)
    scan("API docs")
    new = {state: sorted((rule, target) for rule, target in v
                         if rule not in KNOWN_IN_PAGES_WE_DO_NOT_WRITE.get(state, ()))
           for state, v in found.items()}
    assert {state: v for state, v in new.items() if v} == {}
    assert errors == []
