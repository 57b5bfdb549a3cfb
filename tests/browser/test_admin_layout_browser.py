"""The admin's change lists at desktop width (1280 px), in Chromium: the Jobs and Batches
lists, with rows, are no wider than the screen; every column of the results table can
be seen, none hidden under the filter panel (the table scrolls inside its own box, which
the keyboard can reach); and the batches' spending table keeps its header cells apart."""

import pytest

from jobs.models import Job
from tests.browser.test_hit_browser import origins, published  # noqa: F401  (fixtures)
from tests.browser.test_layout_browser import WIDTH
from tests.conftest import PASSWORD
from tests.leaderboard.test_board import boarded  # noqa: F401  (the fixture and its data)

pytestmark = pytest.mark.browser

# Each header cell of the results table, brought into view inside its box (as scrolling
# the box would), then whether it is the topmost thing at its centre (not under the
# filter panel, not cut off by the box) and where it ends.
HEADERS = """() => {
    const box = document.querySelector('#changelist .results');
    return [...box.querySelectorAll('thead th')].map(th => {
        th.scrollIntoView({block: 'nearest', inline: 'nearest'});
        const r = th.getBoundingClientRect();
        const top = document.elementFromPoint(r.left + Math.min(r.width / 2, 8), r.top + r.height / 2);
        return {text: th.textContent.trim(), seen: !!top && th.contains(top), right: Math.round(r.right)};
    });
}"""

BOX = """() => {
    const box = document.querySelector('#changelist .results');
    const style = getComputedStyle(box);
    return {scroll: box.scrollWidth, client: box.clientWidth, overflow: style.overflowX,
            tabindex: box.getAttribute('tabindex'), role: box.getAttribute('role'),
            label: box.getAttribute('aria-label')};
}"""


def test_the_jobs_and_batches_lists_fit_1280_px_with_every_column_in_reach(
        live_server, published, boarded, superuser, browser_page, sign_in):  # noqa: F811  (the fixtures)
    # (The batch is published before the models are scored: a writing batch is refused
    # for a target whose static-test interval does not clear the majority line.)
    assert Job.objects.exists()
    page, errors = browser_page
    page.set_viewport_size({"width": 1280, "height": 800})
    sign_in(page, live_server.url, superuser.username, PASSWORD, "/admin/jobs/job/")
    for path, column in (("/admin/jobs/job/", "Task"), ("/admin/crowd/batch/", "Task")):
        page.goto(f"{live_server.url}{path}")
        assert page.locator("#result_list tbody tr").count() >= 1, path
        assert page.evaluate(WIDTH) <= 1280, f"{path} is {page.evaluate(WIDTH)} px wide"
        box = page.evaluate(BOX)
        headers = page.evaluate(HEADERS)
        assert column in [h["text"] for h in headers], (path, headers)
        hidden = [h["text"] for h in headers if not h["seen"]]
        assert hidden == [], f"{path}: columns out of reach or under the filter panel: {hidden} ({box})"
        if box["scroll"] > box["client"]:  # the table scrolls in its box: the keyboard can reach it too
            assert box["overflow"] in ("auto", "scroll") and box["tabindex"] == "0", (path, box)
            assert box["role"] == "region" and box["label"], (path, box)
        filters = page.locator("#changelist-filter").evaluate("f => f.getBoundingClientRect().left")
        assert page.locator("#changelist .results").evaluate("b => b.getBoundingClientRect().right") <= filters, path

    # The spending table: a class of its own, and room between its header cells.
    page.goto(f"{live_server.url}/admin/crowd/batch/")
    spending = page.locator("table.spending")
    assert spending.count() == 1
    padding = spending.locator("thead th").evaluate_all(
        "cells => cells.map(c => [c.innerText, parseFloat(getComputedStyle(c).paddingLeft),"
        " parseFloat(getComputedStyle(c).paddingRight)])")
    assert len(padding) == 10 and all(left > 0 and right > 0 for _, left, right in padding), padding
    assert page.evaluate(WIDTH) <= 1280
    assert errors == []
