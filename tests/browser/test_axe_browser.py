"""An axe-core scan (WCAG 2.2 A and AA rules) of the pages we write, at desktop and phone
width, in the states an annotator meets (WCAG 2.2 AA). Any violation fails.

axe-core comes from the npm registry, pinned in package.json/package-lock.json and
installed into node_modules/ by ``npm ci`` (what ``make lint`` runs); the test skips with
that reason where it is not installed. Chromium through Playwright as in conftest.py.
"""

from pathlib import Path

import pytest

from tests.browser.test_keyboard_browser import make_items, token_url

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

    page.goto(token_url(live_server, annotator, task, "create"))
    page.wait_for_selector("#context-fields .field .text")
    scan("write")
    page.click("#submit-example")
    page.wait_for_selector("[id='error-inputs.statement']:has-text('Write')")
    scan("write with errors")
    page.fill("#input-statement", "Words for the scan.")
    page.locator("input[name=label]").first.check()
    page.click("#submit-example")
    page.wait_for_selector("#result:not([hidden])")
    page.click("#explain")
    page.wait_for_selector("#explanation:not([hidden]) .heat")
    scan("write: the answer and the explanation")

    page.goto(token_url(live_server, annotator, task, "validate"))
    page.wait_for_selector("#blind-step:not([hidden])")
    scan("validate")
    page.locator("input[name=blind-label]").first.check()
    page.click("#reveal")
    page.wait_for_selector("#decide-step:not([hidden])")
    scan("validate: the writer's answer")
    page.click("#decide-step button[data-label=correct]")
    page.wait_for_selector("#empty")
    scan("validate: nothing left")

    assert {state: v for state, v in found.items() if v} == {}
    assert errors == []
