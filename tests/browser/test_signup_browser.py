"""The sign-up form's errors, as drawn: red, under their field, apart from the help."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ERROR_RED = "rgb(180, 35, 24)"  # .field-error in static/css/dynabench.css


def test_sign_up_errors_look_like_errors_not_help(live_server, browser_page):
    page, errors = browser_page
    page.goto(f"{live_server.url}/accounts/signup/")
    page.fill("#id_username", "walker1")
    page.fill("#id_password1", "a-long-enough-pass-123")
    page.fill("#id_password2", "something-else-456")
    page.click("button[type=submit]")
    page.wait_for_selector("#id_password2_error")
    assert "not created" in page.locator("#signup-errors").inner_text()
    error = page.locator("#id_password2_error")
    assert error.inner_text() == "Error: The two password fields didn’t match."
    assert error.evaluate("e => getComputedStyle(e).color") == ERROR_RED
    assert page.locator("#signup-errors").evaluate("e => getComputedStyle(e).color") == ERROR_RED
    help_color = page.locator("#id_password1_helptext").evaluate("e => getComputedStyle(e).color")
    assert help_color != ERROR_RED
    field = page.locator("#id_password2")
    assert field.get_attribute("aria-invalid") == "true"
    assert "id_password2_error" in field.get_attribute("aria-describedby").split()
    assert page.locator("#id_password1").get_attribute("aria-invalid") is None
    # Drawn under its own field, above the next thing on the page.
    assert error.bounding_box()["y"] > field.bounding_box()["y"] + field.bounding_box()["height"] - 1
    assert error.bounding_box()["y"] < page.locator("button[type=submit]").bounding_box()["y"]
    assert errors == []
