"""A writer in headless Chromium against a model behind an endpoint (the fake OpenAI
server): an answer the platform cannot read is shown as such, as text, never as a
label or as HTML."""

import pytest

from annotation.models import Example
from tests.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ODD = '<img src=x onerror="window.__pwned=1"> maybe positive?'


def test_an_answer_that_cannot_be_read_is_shown_as_such(live_server, demo_tasks, annotator, browser_page, settings):
    from registry.endpoints import register_endpoint
    from tests.conftest import PASSWORD

    settings.ENDPOINT_ALLOWED_HOSTS = ["127.0.0.1"]  # the fake's address, allowed by name
    page, errors = browser_page
    task = demo_tasks["sentiment"]
    with FakeOpenAI(answer=lambda text: ODD) as chat:
        model = register_endpoint(task, name="odd-llm", protocol="openai", url=chat.url, model="fake-chat")
        task.open_round().target_models.add(model)
        page.goto(f"{live_server.url}/accounts/login/?next=/tasks/sentiment/create/")
        page.fill("#id_username", annotator.username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/tasks/sentiment/create/")
        page.wait_for_selector("#context-fields .field .text")
        page.fill("#input-statement", "A film.")
        page.locator("input[name=label][value=negative]").focus()
        page.keyboard.press("Space")
        page.click("#submit-example")
        page.wait_for_selector("#result:not([hidden])")
    said = page.locator("#result-answer .model-answer").inner_text()
    assert said == f"Model (odd-llm): no answer it could read (it said: {ODD})"
    assert page.locator(".probabilities li").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert Example.objects.get(annotator=annotator).prediction["unparseable"] is True
    assert errors == []
