"""The write and validate pages by keyboard alone (WCAG 2.2 AA): after each step
the focus is where the next step starts, never dropped to <body>; and at phone width the
Tab order follows the order on screen.

Uses Debian's chromium through Playwright (``browser_page`` in tests/browser/conftest.py);
skips with a reason where either is missing (CI installs both).
"""

import pytest

from annotation.models import Example, Validation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KINDS = ["sentiment", "nli", "hate", "qa"]

# What has the focus: its id, else a description that names it.
ACTIVE = """() => {
  const a = document.activeElement;
  if (!a || a === document.body) return "body";
  if (a.id) return "#" + a.id;
  if (a.dataset.label) return "button[data-label=" + a.dataset.label + "]";
  if (a.name) return a.tagName.toLowerCase() + "[name=" + a.name + "][value=" + a.value + "]";
  return a.tagName.toLowerCase() + ":" + a.textContent.trim().slice(0, 30);
}"""


def active(page):
    return page.evaluate(ACTIVE)


def wait_for_focus(page, selector):
    """Waits until ``selector`` has the focus (it may move after a fetch), then returns
    what has it; a wrong element fails the caller's assertion with its name."""
    try:
        page.wait_for_function("s => document.activeElement && document.activeElement.matches(s)", arg=selector,
                               timeout=15_000)
    except Exception:
        pass
    return active(page)


def token_url(live_server, user, task, page_name):
    from annotation.sessions import start_session
    from annotation.tokens import make_token

    return f"{live_server.url}/tasks/{task.slug}/{page_name}/?token={make_token(start_session(user, task))}"


@pytest.mark.parametrize("slug", KINDS)
def test_write_submit_why_and_write_another_by_keyboard(live_server, live_tasks, annotator, browser_page, slug):
    page, errors = browser_page
    task = live_tasks[slug]
    config = task.parsed_config
    page.goto(token_url(live_server, annotator, task, "create"))
    page.wait_for_selector("#context-fields .field .text")
    first_input = f"#input-{config.input_field_names[0]}"

    # Write: type into each field, pick the label with the arrow keys or type the answer.
    for name in config.input_field_names:
        page.focus(f"#input-{name}")
        page.keyboard.type("A keyboard user wrote this, not a mouse.")
    if slug == "qa":
        page.keyboard.press("Tab")
        assert active(page) == "#answer-text"
        page.keyboard.type(page.locator("#passage").inner_text().split()[1])
    else:
        page.keyboard.press("Tab")  # into the label group: the first radio
        first = config.label_names[0]
        assert active(page) == f"input[name=label][value={first}]"
        page.keyboard.press("Space")
    page.focus("#submit-example")
    page.keyboard.press("Enter")

    # Submitted: the focus is on the verdict, and the next Tab goes on to the actions,
    # "Write another" among them, after the verdict.
    page.wait_for_selector("#result:not([hidden])")
    assert wait_for_focus(page, "#result-verdict") == "#result-verdict"
    assert page.locator("#result-verdict").inner_text().strip() != ""
    page.keyboard.press("Tab")
    assert active(page) == "#explain"
    order = page.evaluate("""() => [...document.querySelectorAll('#result-verdict, #another')]
                                  .map(n => n.id)""")
    assert order == ["result-verdict", "another"]

    # "Why?": the button disables itself; the focus goes to the explanation it showed.
    page.keyboard.press("Enter")
    page.wait_for_selector("#explanation:not([hidden]) .heat")
    assert wait_for_focus(page, "#explanation") == "#explanation"
    assert page.locator("#explain").is_disabled()
    # The heat has a text form and a cue besides hue: towards underlined solid, against dashed,
    # and below each text its strongest words with their signed attributions.
    spans = page.evaluate("""() => [...document.querySelectorAll('#explanation .heat')].map(s => ({
        towards: s.classList.contains('towards'), against: s.classList.contains('against'),
        line: getComputedStyle(s).borderBottomStyle, value: Math.abs(parseFloat(s.title.split(' ')[1]))}))""")
    assert spans and all(s["towards"] != s["against"] for s in spans)
    assert {s["line"] for s in spans if s["towards"]} <= {"solid"}
    assert {s["line"] for s in spans if s["against"]} <= {"dashed"}
    summary = " ".join(page.locator("#explanation .heat-summary").all_inner_texts())
    assert "Most towards the answer: " in summary and "Most against it: " in summary
    for direction, sign in (("towards", "+"), ("against", "−")):
        values = [s["value"] for s in spans if s[direction]]
        if values:
            assert f"({sign}{max(values):.4f})" in summary, summary

    # Write another: back to the first field of a fresh form.
    page.focus("#another")
    page.keyboard.press("Enter")
    page.wait_for_selector("#example-form:not([hidden])")
    assert wait_for_focus(page, first_input) == first_input
    assert page.locator(first_input).input_value() == ""
    assert Example.objects.filter(task=task, annotator=annotator).count() == 1
    assert errors == []


def test_a_field_with_an_error_carries_aria_invalid_until_it_is_fixed(live_server, live_tasks, annotator,
                                                                      browser_page):
    page, errors = browser_page
    task = live_tasks["sentiment"]
    page.goto(token_url(live_server, annotator, task, "create"))
    page.wait_for_selector("#context-fields .field .text")
    page.focus("#submit-example")
    page.keyboard.press("Enter")
    page.wait_for_selector("[id='error-inputs.statement']:has-text('Write a statement.')")
    assert page.locator("#input-statement").get_attribute("aria-invalid") == "true"
    radios = page.locator("input[name=label]")
    assert [radios.nth(i).get_attribute("aria-invalid") for i in range(radios.count())] == ["true"] * radios.count()
    # Fixed and sent again: no field is marked invalid any more.
    page.fill("#input-statement", "Fine words.")
    page.locator("input[name=label]").first.check()
    page.click("#submit-example")
    page.wait_for_selector("#result:not([hidden])")
    assert page.locator("#example-form [aria-invalid]").count() == 0
    assert errors == []


def make_items(task, writer, count):
    """``count`` examples by ``writer`` waiting for validation, newest last."""
    config = task.parsed_config
    context = task.contexts.first()
    made = []
    for n in range(count):
        if config.answer_context_field:
            passage = context.fields[config.answer_context_field]
            answer = passage.split()[n + 1]
            target = {"text": answer, "start": passage.index(answer)}
            prediction = {"answer": passage.split()[0], "start": 0, "end": len(passage.split()[0])}
        else:
            target = {"label": config.label_names[0]}
            prediction = {"label": config.label_names[-1]}
        inputs = {name: f"Item {n} for the keyboard test ({name})." for name in config.input_field_names}
        made.append(Example.objects.create(task=task, round=task.open_round(), context=context, annotator=writer,
                                           inputs=inputs, target=target, fooled=True, prediction=prediction))
    return made


@pytest.mark.parametrize("slug", KINDS)
def test_answer_reveal_vote_and_land_on_the_next_item_by_keyboard(live_server, live_tasks, annotator,
                                                                  second_annotator, browser_page, slug):
    page, errors = browser_page
    task = live_tasks[slug]
    config = task.parsed_config
    items = make_items(task, second_annotator, 2)
    page.goto(token_url(live_server, annotator, task, "validate"))
    page.wait_for_selector("#blind-step:not([hidden])")
    first_control = "#blind-answer" if slug == "qa" else f"input[name=blind-label][value={config.label_names[0]}]"

    for n in range(2):
        shown = page.locator("#item-body").inner_text()
        assert f"Item {n} for the keyboard test" in shown or f"Item {1 - n} for the keyboard test" in shown
        # Answer blind: the first control of the item.
        if n == 0:  # on arrival the focus is the page's; after a vote the page puts it here
            page.focus(first_control)
        assert active(page) == first_control
        if slug == "qa":
            passage = task.contexts.first().fields[config.answer_context_field]
            page.keyboard.type(passage.split()[1])
        else:
            page.keyboard.press("Space")
        page.keyboard.press("Tab")
        assert active(page) == "#reveal"
        # Reveal: the focus goes to the first vote, whose description is the writer's answer.
        page.keyboard.press("Enter")
        page.wait_for_selector("#decide-step:not([hidden])")
        assert wait_for_focus(page, "button[data-label=correct]") == "button[data-label=correct]"
        described = page.evaluate("""() => {
          const ids = document.activeElement.getAttribute('aria-describedby') || '';
          return ids.split(' ').map(id => document.getElementById(id)).filter(Boolean)
                    .map(n => n.textContent).join(' ');
        }""")
        assert described.startswith("The writer's answer: ")
        for label in ("correct", "incorrect", "flagged"):
            assert page.locator(f"button[data-label={label}]").get_attribute("aria-describedby") == "writer-answer"
        # Vote: the focus lands on the next item's first control, or on "nothing left".
        page.keyboard.press("Enter")
        page.wait_for_function("n => document.getElementById('count-validated').textContent === String(n)",
                               arg=n + 1)
        if n == 0:
            page.wait_for_selector("#blind-step:not([hidden])")
            assert wait_for_focus(page, first_control) == first_control
            assert page.locator("#item-body").inner_text() != shown
    assert wait_for_focus(page, "#empty") == "#empty"
    assert "Thanks, recorded." in page.locator("#validate-status").inner_text()
    assert Validation.objects.filter(validator=annotator, example__in=items, label="correct").count() == 2
    assert errors == []


def test_a_blind_answer_left_out_is_marked_invalid(live_server, live_tasks, annotator, second_annotator,
                                                   browser_page):
    page, errors = browser_page
    task = live_tasks["sentiment"]
    make_items(task, second_annotator, 1)
    page.goto(token_url(live_server, annotator, task, "validate"))
    page.wait_for_selector("#blind-step:not([hidden])")
    page.focus("#reveal")
    page.keyboard.press("Enter")
    page.wait_for_selector("#validate-status:has-text('Choose your answer first.')")
    radios = page.locator("input[name=blind-label]")
    assert {radios.nth(i).get_attribute("aria-invalid") for i in range(radios.count())} == {"true"}
    assert active(page).startswith("input[name=blind-label]")
    page.keyboard.press("Space")
    assert page.locator("input[name=blind-label][aria-invalid]").count() == 0
    assert errors == []


def tab_stops(page, limit=60):
    """Tabs from the top of the page to its end: each stop's name and its box's top and left."""
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
    stops = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        stop = page.evaluate("""() => {
          const a = document.activeElement;
          if (!a || a === document.body) return null;
          const r = a.getBoundingClientRect();
          return {name: a.id || a.dataset.label || a.name || a.textContent.trim().slice(0, 30),
                  top: r.top + window.scrollY, left: r.left + window.scrollX, height: r.height};
        }""")
        if stop is None or (stops and stop == stops[0]):
            break
        stops.append(stop)
    return stops


def assert_follows_the_screen(stops):
    """Each stop is on the same line as the one before it or below it (a few pixels of
    slack for controls of different heights on one line)."""
    assert len(stops) > 3, stops
    for before, after in zip(stops, stops[1:], strict=False):
        same_line = abs(after["top"] - before["top"]) < max(before["height"], after["height"])
        assert after["top"] >= before["top"] - 4 or same_line, f"{after['name']!r} at {after['top']:.0f} px " \
            f"comes after {before['name']!r} at {before['top']:.0f} px in Tab order"


@pytest.mark.parametrize("page_name", ["create", "validate"])
def test_at_390_px_the_tab_order_follows_the_screen(live_server, live_tasks, annotator, second_annotator,
                                                    browser_page, page_name):
    page, errors = browser_page
    page.set_viewport_size({"width": 390, "height": 844})
    task = live_tasks["sentiment"]
    make_items(task, second_annotator, 1)
    page.goto(token_url(live_server, annotator, task, page_name))
    page.wait_for_selector("#context-fields .field .text" if page_name == "create" else "#blind-step:not([hidden])")
    stops = tab_stops(page)
    names = [s["name"] for s in stops]
    if page_name == "validate":
        # The item's controls come before the instructions and the link to the other work.
        assert names.index("reveal") < names.index("How to validate")
    else:
        assert names.index("input-statement") < names.index("submit-example")
    assert_follows_the_screen(stops)
    assert errors == []


def luminance(rgb):
    def channel(c):
        c = c / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b):
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


RING = """() => {
  const a = document.activeElement;
  const rgb = s => (s.match(/[\\d.]+/g) || []).slice(0, 4).map(Number);
  const style = getComputedStyle(a);
  // The ring is drawn outside the element: it sits on its parents' background.
  let node = a.parentElement, bg = [255, 255, 255];
  while (node) {
    const c = rgb(getComputedStyle(node).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0)) { bg = c.slice(0, 3); break; }
    node = node.parentElement;
  }
  const halo = style.boxShadow === "none" ? null : rgb(style.boxShadow).slice(0, 3);
  return {name: a.id || a.dataset.label || a.name || a.textContent.trim().slice(0, 30),
          visible: a.matches(":focus-visible"), outline: rgb(style.outlineColor).slice(0, 3),
          style: style.outlineStyle, width: parseFloat(style.outlineWidth), halo: halo, bg: bg};
}"""


@pytest.mark.parametrize("page_name", ["create", "validate"])
def test_the_focus_ring_contrasts_3_to_1_with_what_it_sits_on(live_server, live_tasks, annotator, second_annotator,
                                                             browser_page, page_name):
    """WCAG 2.2 SC 1.4.11: every control reached by Tab shows a ring of at least 2 px whose
    dark line meets 3:1 against the background around it, with a light halo beside it
    (3:1 against the dark line) so the ring stays visible on a dark background too."""
    page, errors = browser_page
    task = live_tasks["sentiment"]
    make_items(task, second_annotator, 1)
    page.goto(token_url(live_server, annotator, task, page_name))
    page.wait_for_selector("#context-fields .field .text" if page_name == "create" else "#blind-step:not([hidden])")
    backgrounds, seen = set(), []
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement === document.body"):
            break
        ring = page.evaluate(RING)
        if seen and ring["name"] == seen[0]:
            break
        seen.append(ring["name"])
        assert ring["visible"] and ring["style"] == "solid" and ring["width"] >= 2, ring
        assert contrast(ring["outline"], ring["bg"]) >= 3, ring
        assert ring["halo"] is not None and contrast(ring["outline"], ring["halo"]) >= 3, ring
        backgrounds.add(tuple(ring["bg"]))
    assert len(seen) > 3
    assert (246, 248, 250) in backgrounds  # the grey counters box, as well as white
    assert errors == []
