"""The leaderboard in a browser: reweight with the sliders, sort by a column, both ways;
a refused weight keeps the board and puts its slider back."""

import pytest

from tests.leaderboard.test_board import LEANING, boarded  # noqa: F401  (the fixture and its data)

pytestmark = pytest.mark.browser


def names_in_order(page):
    return page.locator("#leaderboard tbody tr").evaluate_all("rows => rows.map(r => r.dataset.model)")


def test_a_visitor_reweights_and_sorts_the_leaderboard(live_server, boarded, browser_page):  # noqa: F811
    page, errors = browser_page
    page.goto(f"{live_server.url}/tasks/sentiment/leaderboard/")
    assert len(names_in_order(page)) == 3

    # Weight performance only: the Dynascore becomes the performance.
    for name in ("throughput", "memory", "robustness", "fairness", "calibration"):
        page.locator(f"input[type=range][name={name}]").fill("0")
    page.locator("input[type=range][name=performance]").fill("5")
    page.click("#weights-form button[type=submit]")
    page.wait_for_url("**performance=5**")
    reweighted = page.locator("#leaderboard tbody tr td:nth-child(3)").all_inner_texts()
    performance = page.locator("#leaderboard tbody tr td:nth-child(4)").all_inner_texts()
    assert page.locator("input[type=range][name=performance]").input_value() == "5"
    for score, perf in zip(reweighted[:2], performance[:2], strict=True):
        assert abs(float(score.split()[0]) - float(perf.split()[0])) < 1e-3

    # Sort by name: ascending, then descending on a second click; the arrow follows.
    page.click("#leaderboard thead th >> text=Model")
    descending = names_in_order(page)
    assert descending == sorted(descending, reverse=True)
    assert "▼" in page.locator("#leaderboard thead th[aria-sort]").inner_text()
    page.click("#leaderboard thead th >> text=Model")
    ascending = names_in_order(page)
    assert ascending == sorted(ascending) and "▲" in page.locator("#leaderboard thead th[aria-sort]").inner_text()
    # The weights survive the sorting (they are in the links).
    assert "performance%3A5" in page.url or "performance:5" in page.url
    assert errors == []


def test_the_sliders_rerank_live_without_a_click(live_server, boarded, browser_page):  # noqa: F811
    page, errors = browser_page
    page.goto(f"{live_server.url}/tasks/sentiment/leaderboard/")
    for name in ("throughput", "memory", "robustness", "calibration"):
        if page.locator(f"input[type=range][name={name}]").count():
            page.locator(f"input[type=range][name={name}]").fill("0")
    page.locator("input[type=range][name=performance]").fill("5")
    # The slider's number follows at once; the board and the address follow without a click.
    assert page.locator("input[type=range][name=performance] + output").inner_text() == "5"
    page.wait_for_function("() => window.location.search.includes('performance=5')")
    page.wait_for_function("""() => {
        const rows = [...document.querySelectorAll('#leaderboard tbody tr:not(.baseline)')];
        return rows.length > 0 && rows.every(r => {
            const score = parseFloat(r.children[2].innerText), perf = parseFloat(r.children[3].innerText);
            return Math.abs(score - perf) < 1e-3;
        });
    }""")
    assert errors == []


def test_a_refused_weight_keeps_the_board_and_puts_its_slider_back(live_server, boarded, browser_page):  # noqa: F811
    """Sent in the address or by the live rerank, a refused weight gives its message once,
    the board under the default for it, and its slider (and the number beside it) back
    at the default."""
    page, errors = browser_page
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_server.url}/tasks/sentiment/leaderboard/?performance=abc&memory=2")
    assert page.locator("#weights-error").inner_text() == (
        "weights: the weight of performance must be a number, got 'abc'. "
        "The board below uses the default weight of performance (4) instead.")
    assert len(names_in_order(page)) == 3
    performance = page.locator("input[type=range][name=performance]")
    assert performance.input_value() == "4" and page.locator("[name=performance] + output").inner_text() == "4.0"
    assert page.locator("input[type=range][name=memory]").input_value() == "2"  # valid: kept

    # Live: a slider let past 5 (as an old page or a hand-made one could send) is refused
    # the same way; the message is the new one, once; the address is the board shown.
    memory = page.locator("input[type=range][name=memory]")
    memory.evaluate("input => { input.max = '9'; input.value = '7';"
                    " input.dispatchEvent(new Event('input', {bubbles: true})); }")
    page.wait_for_function("() => document.getElementById('weights-error').textContent.includes('memory')")
    assert page.locator("#weights-error").count() == 1
    assert page.locator("#weights-error").inner_text() == (
        "weights: the weight of memory must be between 0 and 5, got 7. "
        "The board below uses the default weight of memory (1) instead.")
    assert memory.input_value() == "1" and page.locator("[name=memory] + output").inner_text() == "1"
    assert len(names_in_order(page)) == 3
    assert "memory=1" in page.url and "memory=7" not in page.url and "abc" not in page.url
    # The browser reports each 400 answer (the page, then the rerank) on its console.
    assert len(errors) == 2 and all("status of 400 (Bad Request)" in e for e in errors), errors
