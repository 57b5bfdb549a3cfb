"""Browser fixtures: Debian's chromium (/usr/bin/chromium) through Playwright; never a
downloaded browser. Tests skip with a reason where either is missing (CI installs both)."""

import os
import shutil

import pytest

CHROMIUM = os.environ.get("DYNABENCH_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture
def browser_page():
    """(page, errors): a headless Chromium page, and every page error, console error
    and dialog it met (a test ends with ``assert errors == []``)."""
    if not (shutil.which(CHROMIUM) or os.path.exists(CHROMIUM)):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but Chromium is missing at {CHROMIUM} (.ci/run installs Debian's chromium)")
        pytest.skip(f"browser test: Debian's chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # ORM calls beside Playwright's event loop
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        # Any console error fails the test: a CSP violation, an asset that answers 404, ...
        page.on("console", lambda msg: errors.append(f"console {msg.type}: {msg.text} at {msg.location}")
                if msg.type == "error" else None)
        page.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
        page.set_default_timeout(60_000)
        yield page, errors
        browser.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def sign_in():
    """``sign_in(page, base, username, password, next_path)`` through the sign-in page."""

    def go(page, base, username, password, next_path):
        page.goto(f"{base}/accounts/login/?next={next_path}")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}{next_path}")

    return go
