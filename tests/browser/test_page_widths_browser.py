"""Every public page at phone width (390 px) and desktop width (1280 px), in Chromium: none
is wider than the screen. Each page is drawn with what makes it wide: the leaderboard
and a model's page with evaluated models, a task page with a release, the examples
browser with verified examples of a closed round, the worker's page with their own
examples, and the HIT's preview and work page from a published batch."""

from urllib.parse import urlencode

import pytest

from annotation.models import Example
from leaderboard.releases import service
from tests.browser.test_hit_browser import SUBMIT_TO, WORKER, origins, published  # noqa: F401  (fixtures)
from tests.browser.test_layout_browser import WIDTH
from tests.conftest import PASSWORD
from tests.leaderboard.release_data import populate
from tests.leaderboard.test_board import boarded  # noqa: F401  (the fixture and its data)

pytestmark = pytest.mark.browser

LONG = "An example with a rather long statement that goes on and on without a break " * 2


@pytest.fixture
def public_pages(published, boarded, demo_tasks, annotator, second_annotator, researcher,  # noqa: F811
                 other_researcher, superuser):
    """The public pages, as (name, path, selector that shows the page is drawn), for a
    visitor and then for a signed-in annotator."""
    batch, hit, assignment_id = published
    task, models = boarded
    populate(demo_tasks["nli"], [annotator, second_annotator], researcher, [other_researcher, superuser])
    service.start_release(demo_tasks["nli"], rounds=[0, 1], release_test_split=True)  # runs at once
    for i in range(3):
        Example.objects.create(task=task, round=task.open_round(), context=task.contexts.first(), annotator=annotator,
                               inputs={"statement": f"{LONG}{i}"}, target={"label": "positive"}, fooled=i == 0)
    work = urlencode({"assignmentId": assignment_id, "hitId": hit.hit_id, "workerId": WORKER,
                      "turkSubmitTo": SUBMIT_TO})
    preview = urlencode({"assignmentId": "ASSIGNMENT_ID_NOT_AVAILABLE", "hitId": hit.hit_id})
    visitor = [
        ("home", "/", "main"),
        ("task page", f"/tasks/{task.slug}/", "svg.error-chart"),
        ("leaderboard", f"/tasks/{task.slug}/leaderboard/", "#leaderboard tbody tr"),
        ("model page", f"/models/{models[0].pk}/", "main table"),
        ("release (task page)", "/tasks/nli/", "#release-v1 a[download]"),
        ("public examples", "/tasks/nli/examples/?round=1", "main"),
        ("sign-in", "/accounts/login/", "#id_username"),
        ("sign-up", "/accounts/signup/", "main form"),
        ("password reset", "/accounts/password-reset/", "main form"),
        ("HIT preview", f"/mturk/hit/?{preview}", "main"),
        ("HIT work page", f"/mturk/hit/?{work}", "#context-fields .field .text"),
    ]
    signed_in = [
        ("write", f"/tasks/{task.slug}/create/", "#context-fields .field .text"),
        ("validate", f"/tasks/{task.slug}/validate/", "main"),
        ("worker page", "/me/", "#my-examples"),
    ]
    return visitor, signed_in


def test_no_public_page_is_wider_than_the_screen(live_server, public_pages, annotator, browser_page, sign_in):
    visitor, signed_in = public_pages
    page, errors = browser_page
    base = live_server.url
    too_wide = []

    def measure(pages, width):
        for name, path, ready in pages:
            page.goto(f"{base}{path}")
            page.wait_for_selector(ready)
            page.wait_for_load_state("networkidle")
            widest = page.evaluate(WIDTH)
            if widest > width:
                too_wide.append(f"{name} ({path}) is {widest} px wide at {width} px")

    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        measure(visitor, width)
    sign_in(page, base, annotator.username, PASSWORD, "/me/")
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        measure(signed_in, width)
    assert too_wide == []
    assert errors == []
