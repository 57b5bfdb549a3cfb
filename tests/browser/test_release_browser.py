"""The public examples and the task page's releases in a browser, at desktop and phone
width: what people wrote shows as text (its markup never runs), and nothing is wider
than the screen (sha256s and long examples wrap)."""

import pytest

from leaderboard.releases import service
from tests.leaderboard.release_data import MARKUP, populate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1280, 390])
def test_examples_and_releases_show_as_text_and_fit_the_screen(live_server, demo_tasks, annotator,
                                                              second_annotator, researcher, other_researcher,
                                                              superuser, browser_page, width):
    populate(demo_tasks["nli"], [annotator, second_annotator], researcher, [other_researcher, superuser])
    service.start_release(demo_tasks["nli"], rounds=[0, 1], release_test_split=True)  # run when it commits
    page, errors = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    for path, shows_examples in (("/tasks/nli/examples/?round=1", True), ("/tasks/nli/", False)):
        page.goto(f"{live_server.url}{path}")
        assert (MARKUP in page.inner_text("main")) is shows_examples
        assert page.locator("main script, main img").count() == 0  # the example's markup is text, not elements
        assert page.locator("#release-v1 a[download]").count() == 5
        widest = page.evaluate("() => document.documentElement.scrollWidth")
        assert widest <= width, f"{path} is {widest} px wide at {width} px"
    assert errors == []
