"""The pages at phone width (390 px) and desktop width (1280 x 800), in Chromium: no
page is wider than the screen (a wide table scrolls in its own box), the error-rate
chart keeps readable type, a job's log wraps, the leaderboard fits a desktop with each
number on one line, each slider's value sits with its own name, and today's target model
is above the fold of the task page."""

import pytest

from annotation.models import Example
from jobs.models import Job
from tests.conftest import PASSWORD
from tests.leaderboard.test_board import boarded  # noqa: F401  (the fixture and its data)

pytestmark = pytest.mark.browser

LONG_LINE = ("[21:00:24] saving artifact to /tmp/uxwalk/var/models/sentiment/r2-verified-20261203-205926-"
             "187041abcdef0123456789abcdef0123456789/model.safetensors")

WIDTH = "() => document.documentElement.scrollWidth"

# Each table on the page: whether it sits in a box that scrolls sideways by itself, and
# whether that box ends inside the screen.
TABLES = """() => [...document.querySelectorAll('main table')].map(t => {
    const box = t.closest('.table-scroll');
    return {table: t.className || t.id, boxed: !!box,
            scrolls: !!box && getComputedStyle(box).overflowX === 'auto',
            inside: !!box && box.getBoundingClientRect().right <= window.innerWidth};
})"""

# The chart's width on screen, and its smallest piece of text (px high).
CHART = """() => {
    const svg = document.querySelector('svg.error-chart');
    const texts = [...svg.querySelectorAll('text')].map(t => t.getBoundingClientRect().height);
    return {width: svg.getBoundingClientRect().width, smallest_text: Math.min(...texts)};
}"""

# How many lines a cell's text takes: its text's boxes, top to bottom, each box that
# starts below the line before it opening a new line (a smaller interval beside the
# number sits a little lower on the same line).
LINES = """cell => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    const boxes = [...range.getClientRects()].filter(r => r.width > 1).sort((a, b) => a.top - b.top);
    let lines = 0, bottom = -Infinity;
    for (const box of boxes) {
        if (box.top >= bottom - 1) lines += 1;
        bottom = Math.max(bottom, box.bottom);
    }
    return lines;
}"""

# Each weight slider: its value inside its own label, right of its slider on the same
# line, and further from the next label's name than from its own slider.
SLIDERS = """() => [...document.querySelectorAll('#weights-form label.weight')].map((label, i, all) => {
    const name = label.querySelector('span').getBoundingClientRect();
    const slider = label.querySelector('input[type=range]').getBoundingClientRect();
    const output = label.querySelector('output');
    const value = output.getBoundingClientRect();
    const next = all[i + 1] && all[i + 1].querySelector('span').getBoundingClientRect();
    const sameLine = (a, b) => a.top < b.bottom && b.top < a.bottom;
    return {
        name: label.querySelector('span').textContent, contained: output.closest('label') === label,
        after_slider: value.left >= slider.right && sameLine(value, name),
        own_gap: value.left - slider.right,
        next_gap: next && sameLine(value, next) ? next.left - value.right : null,
    };
})"""


@pytest.fixture
def pages(boarded, researcher):  # noqa: F811
    """The sentiment task with two evaluated models, written examples in round 1, and an
    evaluation job whose log has a line far longer than a phone is wide."""
    task, models = boarded
    context = task.contexts.first()
    for i in range(3):
        Example.objects.create(task=task, round=task.open_round(), context=context, annotator=researcher,
                               inputs={"statement": f"Written {i}."}, target={"label": "positive"}, fooled=i == 0)
    job = Job.objects.filter(task=task).order_by("pk").last()
    Job.objects.filter(pk=job.pk).update(log=f"{job.log}\n{LONG_LINE}")
    return task, job


def test_at_390_px_no_page_is_wider_than_the_phone(live_server, pages, researcher, browser_page, sign_in):
    task, job = pages
    page, errors = browser_page
    page.set_viewport_size({"width": 390, "height": 800})
    sign_in(page, live_server.url, researcher.username, PASSWORD, f"/tasks/{task.slug}/")
    assert page.locator("#loop-h").is_visible()  # the researcher's section, with its tables

    # The task page: every table scrolls in its own box; the chart keeps readable type.
    assert page.evaluate(WIDTH) <= 390, f"the task page is {page.evaluate(WIDTH)} px wide"
    tables = page.evaluate(TABLES)
    assert {t["table"] for t in tables} >= {"rounds", "comparison", "annotators", "validators"}
    assert all(t["boxed"] and t["scrolls"] and t["inside"] for t in tables), tables
    rounds = page.locator("table.rounds").evaluate("t => [t.scrollWidth, t.closest('.table-scroll').clientWidth]")
    assert rounds[0] > rounds[1], "the rounds table fits a phone: this test no longer shows its box scrolling"
    chart = page.evaluate(CHART)
    assert chart["width"] >= 300 and chart["smallest_text"] >= 10, chart

    # A job's page: its log wraps.
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    assert LONG_LINE in page.inner_text("pre.log").replace("\n", "")
    assert page.evaluate(WIDTH) <= 390, f"the job page is {page.evaluate(WIDTH)} px wide"
    assert page.locator("pre.log").evaluate("pre => pre.scrollWidth <= pre.clientWidth")

    # The leaderboard: the table scrolls in its own box; the sliders stack.
    page.goto(f"{live_server.url}/tasks/{task.slug}/leaderboard/")
    assert page.evaluate(WIDTH) <= 390, f"the leaderboard is {page.evaluate(WIDTH)} px wide"
    tables = page.evaluate(TABLES)
    assert len(tables) == 1 and tables[0]["boxed"] and tables[0]["scrolls"] and tables[0]["inside"], tables
    sliders = page.evaluate(SLIDERS)
    assert sliders and all(s["contained"] and s["after_slider"] and s["next_gap"] is None for s in sliders), sliders
    assert errors == []


def test_at_1280_px_the_leaderboard_fits_and_the_target_is_above_the_fold(live_server, pages, browser_page):
    task, _job = pages
    page, errors = browser_page
    page.set_viewport_size({"width": 1280, "height": 800})

    # The task page: today's target before the fold.
    page.goto(f"{live_server.url}/tasks/{task.slug}/")
    target = page.locator("#target-h").evaluate("h => h.parentElement.getBoundingClientRect().bottom")
    assert target <= 800, f"today's target ends {target} px down"
    assert "on the static test set (8 examples; 95% interval" in page.locator("#target-h + ul").inner_text()

    page.goto(f"{live_server.url}/tasks/{task.slug}/leaderboard/")
    assert page.evaluate(WIDTH) <= 1280
    box = page.locator("#leaderboard").evaluate("t => [t.parentElement.scrollWidth, t.parentElement.clientWidth]")
    assert box[0] <= box[1], f"the leaderboard is clipped: {box[0]} px in a {box[1]} px box"
    headers = page.locator("#leaderboard thead th").all_inner_texts()
    assert "Date" in headers[-1] and "Fairness" in " ".join(headers)  # every column is there, the last in view
    last = page.locator("#leaderboard thead th").last.evaluate("th => th.getBoundingClientRect().right")
    assert last <= 1280

    # Each number on one line; its interval on hover (the cell's title) ...
    performance = page.locator("#leaderboard tbody tr:not(.baseline) td:nth-child(4)").first
    assert performance.get_attribute("title").startswith("95% interval [")
    numbers = page.locator("#leaderboard tbody td[title^='95% interval']")
    assert numbers.count() >= 10
    assert all(n == 1 for n in numbers.evaluate_all(f"cells => cells.map({LINES})"))
    # ... and beside it, still on one line, with "Show the intervals".
    assert not performance.locator(".interval").evaluate("s => s.getBoundingClientRect().width > 1")
    page.check("#show-intervals")
    assert performance.locator(".interval").evaluate("s => s.getBoundingClientRect().width > 20")
    assert all(n == 1 for n in numbers.evaluate_all(f"cells => cells.map({LINES})"))
    assert page.evaluate(WIDTH) <= 1280  # the wider table scrolls in its box

    # Each slider's value with its own name, apart from the next one.
    sliders = page.evaluate(SLIDERS)
    assert len(sliders) >= 5 and all(s["contained"] and s["after_slider"] for s in sliders), sliders
    for s in sliders:
        assert s["next_gap"] is None or s["next_gap"] > 2 * s["own_gap"], sliders
    assert errors == []
