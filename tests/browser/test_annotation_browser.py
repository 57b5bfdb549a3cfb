"""A person in headless Chromium: open a task, write an example, see the model's
answer and the explanation heat, then validate another person's example.

Uses Debian's chromium through Playwright (``browser_page`` in tests/browser/conftest.py);
skips with a reason where either is missing (CI installs both).
"""

import pytest

from annotation.models import Example, Validation

XSS = '<script>window.__pwned = 1</script> they are "great" & kind'

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_write_explain_and_validate_in_a_browser(live_server, live_tasks, annotator, second_annotator, browser_page):
    from tests.conftest import PASSWORD

    page, errors = browser_page
    base = live_server.url
    task = live_tasks["sentiment"]
    theirs = Example.objects.create(
        task=task, round=task.open_round(), context=task.contexts.first(), annotator=second_annotator,
        inputs={"statement": XSS}, target={"label": "positive"}, fooled=True,
        prediction={"label": "negative", "probabilities": {"negative": 0.6, "positive": 0.4}},
    )

    # 1. Open the task and go to the create page.
    page.goto(f"{base}/tasks/sentiment/")
    assert page.locator("h1").inner_text() == "Sentiment Analysis"
    assert page.locator("svg.error-chart").count() == 1
    page.click("text=Write examples for round 1")
    page.wait_for_url("**/accounts/login/**")
    page.fill("#id_username", annotator.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/tasks/sentiment/create/")

    # 2. Sending nothing names every missing part at once, in plain words; nothing is stored.
    page.wait_for_selector("#context-fields .field .text")
    page.click("#submit-example")
    assert page.locator("[id='error-inputs.statement']").inner_text() == "Write a statement."
    assert page.locator("[id='error-target.label']").inner_text() == "Pick the label your example truly has."
    assert not Example.objects.filter(annotator=annotator).exists()
    # Write an example (keyboard only for the label).
    page.fill("#input-statement", "Not exactly terrible, I suppose 🙃")
    page.locator("input[name=label][value=positive]").focus()
    page.keyboard.press("Space")
    page.click("#submit-example")

    # 3. The model's answer, then the explanation heat.
    page.wait_for_selector("#result:not([hidden])")
    verdict = page.locator("#result-verdict").inner_text()
    assert verdict in ("You fooled the model!", "The model got it right. Try again?")
    assert page.locator(".probabilities li").count() == 2
    assert "Statement: Not exactly terrible, I suppose 🙃" in page.locator("#result-answer").inner_text()
    assert page.locator("#count-written").inner_text() == "1"
    page.click("#explain")
    page.wait_for_selector("#explanation:not([hidden]) .heat")
    heat_words = page.locator("#explanation .heat").all_inner_texts()
    assert "Not" in heat_words and "🙃" in "".join(heat_words)
    example = Example.objects.get(annotator=annotator)
    assert example.inputs == {"statement": "Not exactly terrible, I suppose 🙃"}
    assert example.fooled == (verdict == "You fooled the model!")

    # 4. Validate the other person's example: blind first, then confirm.
    page.goto(f"{base}/tasks/sentiment/validate/")
    body = page.locator("#item-body").inner_text()
    assert XSS in body  # shown as text ...
    assert page.evaluate("window.__pwned") is None  # ... never run
    page.locator("input[name=blind-label][value=positive]").check()
    page.click("#reveal")
    page.wait_for_selector("#decide-step:not([hidden])")
    assert "The writer's answer: positive (the same as yours)" in page.locator("#writer-answer").inner_text()
    page.click("#decide-step button[data-label=correct]")
    page.wait_for_selector("text=Thanks, recorded.")
    assert page.locator("#count-validated").inner_text() == "1"
    validation = Validation.objects.get(example=theirs)
    assert validation.validator == annotator and validation.label == "correct"
    assert errors == []


@pytest.mark.parametrize("slug", ["nli", "qa", "hate"])
def test_each_task_can_be_annotated_in_a_browser(live_server, live_tasks, mturk_worker, browser_page, client, slug):
    """The create flow for the other tasks, entered with a session token as from an MTurk HIT."""
    from annotation.sessions import start_session
    from annotation.tokens import make_token

    page, errors = browser_page
    task = live_tasks[slug]
    token = make_token(start_session(mturk_worker, task))
    page.goto(f"{live_server.url}/tasks/{slug}/create/?token={token}")  # no cookie, no login
    page.wait_for_selector("#context-fields .field .text")
    if slug == "qa":
        passage = page.locator("#passage").inner_text()
        answer = passage.split()[2]
        page.fill("#input-question", "Which word is third in the passage?")
        page.fill("#answer-text", answer)
        assert "Found in the passage" in page.locator("#answer-where").inner_text()
    else:
        field = "hypothesis" if slug == "nli" else "statement"
        label = task.parsed_config.label_names[0]
        page.fill(f"#input-{field}", "Ein Satz, ένα κείμενο, 一句话 — <i>with</i> markup & emoji 🎉")
        page.locator(f"input[name=label][value={label}]").check()
    page.click("#submit-example")
    page.wait_for_selector("#result:not([hidden])")
    assert "Model (" in page.locator("#result-answer").inner_text()
    assert page.locator("#count-written").inner_text() == "1"
    example = Example.objects.get(task=task)
    assert example.annotator == mturk_worker
    if slug != "qa":
        assert example.inputs[field] == "Ein Satz, ένα κείμενο, 一句话 — <i>with</i> markup & emoji 🎉"
    else:
        assert example.target["text"] == answer
    assert errors == []


def open_create_page(page, live_server, user, task):
    """The task's create page with a session token of ``user``'s, its context shown."""
    from annotation.sessions import start_session
    from annotation.tokens import make_token

    token = make_token(start_session(user, task))
    page.goto(f"{live_server.url}/tasks/{task.slug}/create/?token={token}")
    page.wait_for_selector("#context-fields .field .text")


def test_a_model_failure_keeps_the_annotators_text_and_says_why(live_server, live_tasks, annotator, browser_page):
    """The model is down (its artifact is gone): the page says so and keeps what was written."""
    import shutil

    import ml

    page, errors = browser_page
    task = live_tasks["sentiment"]
    model = task.open_round().target_models.get()
    open_create_page(page, live_server, annotator, task)
    ml.default_cache().clear()
    moved = model.artifact_dir.with_name(model.artifact_dir.name + "-away")
    shutil.move(model.artifact_dir, moved)
    try:
        page.fill("#input-statement", "Words I do not want to type twice.")
        page.locator("input[name=label][value=positive]").check()
        page.click("#submit-example")
        page.wait_for_selector("#error-form:has-text('could not answer')")
    finally:
        shutil.move(moved, model.artifact_dir)
    assert "could not answer" in page.locator("#error-form").inner_text()
    assert page.locator("#input-statement").input_value() == "Words I do not want to type twice."
    assert page.locator("#result").is_hidden()
    assert not Example.objects.filter(task=task).exists()
    # The 503 itself is logged by the browser as a failed resource load; nothing else may be.
    assert [e for e in errors if "status of 503" not in e] == []
    # Once the model is back, the same text goes through.
    page.click("#submit-example")
    page.wait_for_selector("#result:not([hidden])")
    assert Example.objects.get(task=task).inputs == {"statement": "Words I do not want to type twice."}


def test_a_model_still_loading_shows_warming_up_and_the_example_goes_through(live_server, live_tasks, annotator,
                                                                           browser_page, settings):
    """The page says the model is warming up (a 503 warming_up) and sends the example
    again by itself once it has loaded; the annotator types nothing twice."""
    import threading

    import ml
    from annotation import runtime

    page, errors = browser_page
    task = live_tasks["sentiment"]
    open_create_page(page, live_server, annotator, task)
    settings.INFERENCE_WARMUP_WAIT = 0.0
    gate = threading.Event()
    runtime.model_thread().call(lambda: gate.wait(60))  # the model thread is busy: a load waits behind it
    ml.default_cache().clear()
    try:
        page.fill("#input-statement", "Warm words.")
        page.locator("input[name=label][value=positive]").check()
        page.click("#submit-example")
        page.wait_for_selector("#submit-example:has-text('warming up')")
    finally:
        gate.set()
    page.wait_for_selector("#result:not([hidden])", timeout=60000)
    assert Example.objects.get(task=task).inputs == {"statement": "Warm words."}
    assert [e for e in errors if "status of 503" not in e] == []


def test_a_qa_answer_not_in_the_passage_is_told_it_must_be_a_span(live_server, live_tasks, annotator, browser_page):
    """Typed, not found: the page says so as it is typed, and on Submit shows the server's
    reason under the answer (the field's own rule), never "may not be null"; nothing is stored."""
    page, errors = browser_page
    task = live_tasks["qa"]
    open_create_page(page, live_server, annotator, task)
    page.fill("#input-question", "What colour was the sky?")
    page.fill("#answer-text", "purple elephants")
    assert "the answer must be a span of it" in page.locator("#answer-where").inner_text()
    page.click("#submit-example")
    page.wait_for_selector("#error-target:has-text('span of the passage')")
    shown = page.locator("#error-target").inner_text()
    assert shown.startswith("The answer must be a span of the passage") and "'purple elephants'" in shown
    assert "null" not in page.locator("#example-form").inner_text()
    assert page.locator("#result").is_hidden() and not Example.objects.filter(task=task).exists()
    # The 400 is logged by the browser as a failed resource load; nothing else may be.
    assert [e for e in errors if "status of 400" not in e] == []
