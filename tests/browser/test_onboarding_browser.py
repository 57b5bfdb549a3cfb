"""The workers' side in the browser: a new worker takes a task's onboarding before the
work, and Ctrl+Enter (Cmd+Enter) submits an example or a vote, the next item loading
with the focus in its first field.

Uses Debian's chromium through Playwright (``browser_page`` in tests/browser/conftest.py);
skips with a reason where either is missing (CI installs both)."""

import pytest

from annotation.models import Example, OnboardingRecord, Validation
from tests.browser.test_axe_browser import axe_source  # noqa: F401 (a fixture)
from tests.browser.test_keyboard_browser import active, make_items, token_url, wait_for_focus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def drawn(page) -> list[int]:
    """The pool numbers of the items the page shows: the worker's try, drawn from the pool."""
    return [int(n) for n in page.eval_on_selector_all(".onboarding-form", "forms => forms.map(f => f.dataset.number)")]


def pass_onboarding(page, items):
    """Answers each onboarding item of the try right, as a worker would on the page (each
    answer's explanation shown), then goes on to the work."""
    for place, number in enumerate(drawn(page)):
        item = items[number]
        form = page.locator(f".onboarding-form[data-number='{number}']")
        form.locator(f"input[value='{item['answer'] if item['kind'] == 'judge' else item['answer']['label']}']").check()
        form.locator("button[type=submit]").click()
        page.wait_for_function("n => document.querySelectorAll('.onboarding-result')[n].textContent.length > 0",
                               arg=place)
        assert item["explanation"] in form.locator(".onboarding-result").inner_text()
    assert "You passed" in page.locator("#onboarding-outcome").inner_text()
    page.locator("#onboarding-continue").click()


def test_a_new_worker_passes_the_onboarding_then_writes(with_onboarding, live_server, live_tasks, annotator,
                                                        browser_page):
    page, errors = browser_page
    task = live_tasks["sentiment"]
    page.goto(token_url(live_server, annotator, task, "create"))
    page.wait_for_selector("#onboarding")
    assert page.locator("#example-form").count() == 0
    items = task.parsed_config.onboarding["items"]
    numbers = drawn(page)
    assert len(numbers) == task.parsed_config.onboarding["per_try"]  # a try's items, drawn from the pool
    for place, number in enumerate(numbers):
        item = items[number]
        form = page.locator(f".onboarding-form[data-number='{number}']")
        value = item["answer"] if item["kind"] == "judge" else item["answer"]["label"]
        form.locator(f"input[value='{value}']").check()
        form.locator("button[type=submit]").click()
        result = form.locator(".onboarding-result")
        result.wait_for(state="visible")
        page.wait_for_function("n => document.querySelectorAll('.onboarding-result')[n].textContent.length > 0",
                               arg=place)
        assert result.inner_text().startswith("Right.")
        assert item["explanation"] in result.inner_text()
    assert wait_for_focus(page, "#onboarding-outcome") == "#onboarding-outcome"
    assert "You passed" in page.locator("#onboarding-outcome").inner_text()
    page.locator("#onboarding-continue").click()
    page.wait_for_selector("#example-form")
    assert OnboardingRecord.objects.get(user=annotator, task=task).passed_at is not None
    assert errors == []


def test_ctrl_enter_submits_an_example_and_the_next_loads_with_the_focus_in_its_first_field(
        live_server, live_tasks, annotator, browser_page):
    page, errors = browser_page
    task = live_tasks["sentiment"]
    page.goto(token_url(live_server, annotator, task, "create"))
    page.wait_for_selector("#context-fields .field .text")
    page.focus("#input-statement")
    page.keyboard.type("Hardly the worst thing I have eaten.")
    page.locator("input[name=label][value=positive]").check()
    page.focus("#input-statement")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#result:not([hidden])")
    assert Example.objects.filter(annotator=annotator).count() == 1
    page.keyboard.press("Meta+Enter")  # Cmd+Enter: the next context, the focus in the first field
    page.wait_for_selector("#example-form:not([hidden])")
    assert wait_for_focus(page, "#input-statement") == "#input-statement"
    assert page.locator("#input-statement").input_value() == ""
    assert errors == []


def test_ctrl_enter_gives_the_blind_answer_then_the_focused_vote(live_server, live_tasks, annotator,
                                                                 second_annotator, browser_page):
    page, errors = browser_page
    task = live_tasks["sentiment"]
    items = make_items(task, second_annotator, 2)
    page.goto(token_url(live_server, annotator, task, "validate"))
    page.wait_for_selector("#blind-step:not([hidden])")
    page.focus("input[name=blind-label][value=negative]")
    page.keyboard.press("Space")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#decide-step:not([hidden])")
    assert wait_for_focus(page, "button[data-label=correct]") == "button[data-label=correct]"
    page.keyboard.press("Control+Enter")
    page.wait_for_function("() => document.getElementById('count-validated').textContent === '1'")
    page.wait_for_selector("#blind-step:not([hidden])")
    assert wait_for_focus(page, "input[name=blind-label][value=negative]") == active(page)
    assert active(page).startswith("input[name=blind-label]")
    assert Validation.objects.filter(validator=annotator, example__in=items, label="correct").count() == 1
    assert errors == []


def test_the_onboarding_and_a_hit_page_have_no_axe_violations(with_onboarding, live_server, live_tasks, annotator,
                                                              browser_page, axe_source):  # noqa: F811
    from tests.browser.test_axe_browser import violations

    page, errors = browser_page
    task = live_tasks["hate"]
    page.goto(token_url(live_server, annotator, task, "create"))
    page.wait_for_selector("#onboarding")
    assert violations(page, axe_source) == []
    number = drawn(page)[0]
    item = task.parsed_config.onboarding["items"][number]
    wrong = ({"correct": "incorrect", "incorrect": "correct"}[item["answer"]] if item["kind"] == "judge"
             else {"hateful": "not-hateful", "not-hateful": "hateful"}[item["answer"]["label"]])
    form = page.locator(f".onboarding-form[data-number='{number}']")
    form.locator(f"input[value='{wrong}']").check()
    form.locator("button[type=submit]").click()
    page.wait_for_function("() => document.querySelector('.onboarding-result').textContent.length > 0")
    assert "Not quite" in form.locator(".onboarding-result").inner_text()
    assert violations(page, axe_source) == []
    assert errors == []
