"""The promotion confirmation in a browser, at desktop and phone width: both scores, the
majority line and the override's reason are on the page, and nothing is wider than the
screen."""

import pytest

from tests.conftest import PASSWORD
from tests.leaderboard.test_promotion_rules import score, setup  # noqa: F401  (the fixture and its data)


@pytest.mark.parametrize("width", [1280, 390])
def test_the_promotion_confirmation_fits_the_screen(live_server, setup, researcher, browser_page,  # noqa: F811
                                                    sign_in, width):
    task, static, _target, candidate = setup
    score(candidate, static, [1.0, 1.0, 1.0, 0.0], (0.55, 0.95))  # not clear of the majority line
    page, errors = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    path = f"/tasks/{task.slug}/promote/{candidate.pk}/?ensemble_size=1"
    sign_in(page, live_server.url, researcher.username, PASSWORD, path)
    text = page.inner_text("main")
    assert "0.750 [0.550, 0.950]" in text and "Majority line" in text and "not_above_majority" in text
    assert page.locator("textarea[name=reason]").is_visible()
    widest = page.evaluate("() => document.documentElement.scrollWidth")
    assert widest <= width, f"the page is {widest} px wide at {width} px"
    assert errors == []
