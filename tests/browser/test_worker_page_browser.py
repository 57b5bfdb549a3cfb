"""The worker's page and the account pages, drawn at desktop (1280 px) and phone (390 px)
width: no page is wider than the screen (each table scrolls in its own box), and an
axe-core scan finds no WCAG 2.2 A/AA violation."""

from urllib.parse import urlencode

import pytest

from annotation.models import Example
from tests.browser.test_axe_browser import axe_source, violations  # noqa: F401  (the fixture)
from tests.browser.test_hit_browser import SUBMIT_TO, WORKER, origins, published  # noqa: F401  (fixtures)
from tests.browser.test_layout_browser import TABLES, WIDTH
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG = "An example with a rather long statement that goes on " * 3


@pytest.mark.parametrize("width", [1280, 390])
def test_the_worker_page_and_the_account_pages_fit_and_pass_axe(live_server, demo_tasks, annotator, browser_page,
                                                                sign_in, axe_source, width):  # noqa: F811
    task = demo_tasks["sentiment"]
    for i in range(25):  # more than a page: the pager shows
        Example.objects.create(task=task, round=task.open_round(), context=task.contexts.first(), annotator=annotator,
                               inputs={"statement": f"{LONG} {i}"}, target={"label": "positive"}, fooled=bool(i % 2))
    page, errors = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    base = live_server.url
    found = {}
    sign_in(page, base, annotator.username, PASSWORD, "/me/")
    page.wait_for_selector("#my-examples")
    assert page.evaluate(WIDTH) <= width
    tables = page.evaluate(TABLES)
    assert tables and all(t["boxed"] and t["scrolls"] and t["inside"] for t in tables), tables
    found["/me/"] = violations(page, axe_source)
    page.click("a[rel=next]")
    page.wait_for_selector("#my-examples tbody tr")
    assert page.locator("#my-examples tbody tr").count() == 5
    for path in ("/accounts/delete/", "/accounts/password-reset/"):
        page.goto(f"{base}{path}")
        assert page.evaluate(WIDTH) <= width, path
        found[path] = violations(page, axe_source)
    page.goto(f"{base}/accounts/delete/")
    page.fill("#id_confirm", "no")
    page.click("#delete-form button[type=submit]")
    page.wait_for_selector("#delete-error")
    found["delete: refused"] = violations(page, axe_source)
    assert {state: v for state, v in found.items() if v} == {}
    assert errors == []


def test_inside_the_hit_the_worker_opens_their_own_page_under_the_token(  # noqa: F811  (the fixtures)
        live_server, published, origins, browser_page, axe_source):  # noqa: F811
    """From MTurk's frame (another origin, no cookie): the HIT bar's button opens the
    worker's page in a new tab, with what they wrote in this HIT; at phone width it fits."""
    batch, hit, assignment_id = published
    page, errors = browser_page
    query = urlencode({"assignmentId": assignment_id, "hitId": hit.hit_id, "workerId": WORKER,
                       "turkSubmitTo": SUBMIT_TO})
    page.goto(f"{origins[0]}/projects?{urlencode({'src': f'{live_server.url}/mturk/hit/?{query}'})}")
    frame = page.frame_locator("#hit")
    frame.locator("#context-fields .field .text").first.wait_for()
    frame.locator("#input-statement").fill("My own words, for my own page.")
    frame.locator("input[name=label][value=positive]").check()
    frame.locator("#submit-example").click()
    frame.locator("#result:not([hidden])").wait_for()
    with page.context.expect_page() as opened:
        frame.locator("#hit-my-page button").click()
    mine = opened.value
    mine.set_viewport_size({"width": 390, "height": 900})
    mine.wait_for_selector("#my-examples")
    assert mine.url == f"{live_server.url}/mturk/me/" and "token" not in mine.url
    assert "My own words, for my own page." in mine.locator("#my-examples").inner_text()
    assert mine.locator(f"#my-assignments tr[data-assignment='{assignment_id}']").count() == 1
    assert mine.evaluate(WIDTH) <= 390
    assert violations(mine, axe_source) == []
    assert page.context.cookies(live_server.url) == []  # the token did it, not a cookie
    assert errors == []
