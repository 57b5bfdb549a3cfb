"""The leaderboard in a browser: reweight with the sliders, sort by a column, both ways."""

from tests.leaderboard.test_board import LEANING, boarded  # noqa: F401  (the fixture and its data)


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
