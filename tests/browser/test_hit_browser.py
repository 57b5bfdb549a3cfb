"""The HIT page as a worker meets it: inside MTurk's frame, on another origin, with
no cookie; write, submit, and the browser posts the completion token to MTurk."""

import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from crowd.assignments import completion_token
from crowd.models import Assignment
from crowd.publishing import BatchRequest, publish

pytestmark = [pytest.mark.browser]

SUBMIT_TO = "https://workersandbox.mturk.com"
WORKER = "A2BROWSERWORKER1"


class _FramingPage(BaseHTTPRequestHandler):
    """A page that frames ``?src=...``: the MTurk worker site, or a stranger's."""

    def do_GET(self):
        src = parse_qs(urlsplit(self.path).query)["src"][0]
        body = frame_html(src).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


@pytest.fixture
def origins():
    """Two framing origins on the loopback (a real server each: Chromium keeps pages on a
    public origin from framing local ones), other than the live server's ``localhost``."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _FramingPage) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield [f"http://127.0.0.1:{server.server_address[1]}" for server in servers]
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def published(live_tasks, fake_mturk, settings, origins):
    settings.MTURK_ENDPOINT_URL = fake_mturk.endpoint_url
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
    settings.MTURK_FRAME_ANCESTORS = [origins[0]]  # the MTurk worker site stands on this origin in the test
    batch = publish(BatchRequest(task=live_tasks["sentiment"], mode="create", hits=1, assignments_per_hit=1,
                                 reward=Decimal("0.50"), bonus_per_example=Decimal("0.25"),
                                 examples_per_assignment=1))
    hit = batch.hit_rows.get()
    return batch, hit, fake_mturk.accept(hit.hit_id, WORKER)


def frame_html(src: str) -> str:
    return ('<!doctype html><title>MTurk</title><link rel="icon" href="data:,">'
            f'<iframe id="hit" src="{src}" width="1000" height="900"></iframe>')


def framed_url(page) -> str:
    """Where the frame ended up: Chromium swaps a refused frame for its error page."""
    [child] = [frame for frame in page.frames if frame != page.main_frame]
    return child.url


def test_the_hit_page_works_inside_a_frame_from_another_origin_and_submits_to_mturk(
        live_server, published, origins, browser_page):
    batch, hit, assignment_id = published
    parent, stranger = origins
    page, errors = browser_page
    query = urlencode({"assignmentId": assignment_id, "hitId": hit.hit_id, "workerId": WORKER,
                       "turkSubmitTo": SUBMIT_TO})
    hit_url = f"{live_server.url}/mturk/hit/?{query}"
    posted = []
    page.route(f"{SUBMIT_TO}/**", lambda route: (posted.append((route.request.url, route.request.post_data)),
                                                 route.fulfill(content_type="text/html", body="Submitted")))

    # A page on an origin MTurk is not: the browser refuses to show the HIT in its frame.
    page.goto(f"{stranger}/projects?{urlencode({'src': hit_url})}")
    page.wait_for_timeout(1500)
    assert framed_url(page).startswith("chrome-error://")
    assert page.frame_locator("#hit").locator("#annotate").count() == 0
    assert len(errors) == 1 and "violates the following Content Security Policy directive" in errors[0] \
        and "frame-ancestors" in errors[0], errors
    errors.clear()

    page.goto(f"{parent}/projects?{urlencode({'src': hit_url})}")
    frame = page.frame_locator("#hit")
    frame.locator("#context-fields .field .text").first.wait_for()
    assert framed_url(page) == hit_url
    assert "asks for" in frame.locator(".hit-bar").inner_text()
    frame.locator("#input-statement").fill("Not bad at all, if you ignore everything.")
    frame.locator("input[name=label][value=positive]").check()
    frame.locator("#submit-example").click()
    frame.locator("#result:not([hidden])").wait_for()
    frame.locator("#hit-submit").click()
    page.wait_for_timeout(500)
    for _ in range(60):
        if posted:
            break
        page.wait_for_timeout(250)
    assert posted, "the browser never posted the HIT to MTurk"
    url, body = posted[0]
    assert url == f"{SUBMIT_TO}/mturk/externalSubmit"
    fields = parse_qs(body)
    assignment = Assignment.objects.get(assignment_id=assignment_id)
    assert fields["assignmentId"] == [assignment_id]
    assert fields["completionToken"] == [completion_token(assignment)]
    assert assignment.status == Assignment.Status.FINISHED
    assert page.context.cookies(live_server.url) == []  # no cookie was needed, none was set
    assert errors == []


def test_other_pages_refuse_to_be_framed_even_by_mturk(live_server, published, origins, browser_page):
    page, errors = browser_page
    page.goto(f"{origins[0]}/projects?{urlencode({'src': live_server.url + '/'})}")
    page.wait_for_timeout(1500)
    assert framed_url(page).startswith("chrome-error://")  # X-Frame-Options: DENY, frame-ancestors 'none'
    assert errors and all("frame-ancestors 'none'" in e or "X-Frame-Options" in e for e in errors), errors


def test_submit_sits_after_the_work_and_a_stale_refusal_clears_as_the_counter_fills(
        live_server, live_tasks, fake_mturk, settings, browser_page):
    """Submit comes after the work, in the page and on screen; a refusal follows the counter
    (its numbers change with the work) and is gone once the work asked for is done."""
    settings.MTURK_ENDPOINT_URL = fake_mturk.endpoint_url
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
    batch = publish(BatchRequest(task=live_tasks["sentiment"], mode="create", hits=1, assignments_per_hit=1,
                                 reward=Decimal("0.50"), bonus_per_example=Decimal("0.25"),
                                 examples_per_assignment=2))
    hit = batch.hit_rows.get()
    assignment_id = fake_mturk.accept(hit.hit_id, WORKER)
    page, errors = browser_page
    query = urlencode({"assignmentId": assignment_id, "hitId": hit.hit_id, "workerId": WORKER,
                       "turkSubmitTo": SUBMIT_TO})
    page.goto(f"{live_server.url}/mturk/hit/?{query}")
    page.wait_for_selector("#context-fields .field .text")

    def below(upper, lower):
        return page.locator(lower).bounding_box()["y"] >= (
            page.locator(upper).bounding_box()["y"] + page.locator(upper).bounding_box()["height"])

    assert below(".hit-bar", "#example-form") and below("#example-form", "#hit-submit")
    error = page.locator("#hit-submit-error")
    page.click("#hit-submit")  # too early: refused on the page, nothing posted
    assert "you have done 0 so far. Do 2 more" in error.inner_text()

    def write(text):
        page.fill("#input-statement", text)
        page.locator("input[name=label][value=positive]").check()
        page.click("#submit-example")
        page.wait_for_selector("#result:not([hidden])")

    write("Not the disaster the reviews promised.")
    assert page.locator("#hit-done").inner_text() == "1"
    assert "you have done 1 so far. Do 1 more" in error.inner_text()  # the numbers follow the work
    assert below("#result", "#hit-submit")
    page.click("#another")
    page.wait_for_selector("#example-form:not([hidden])")
    write("A second one, just as mild.")
    assert page.locator("#hit-done").inner_text() == "2"
    assert error.inner_text() == ""  # the requirement is met: no stale refusal
    assert below("#result", "#hit-submit")
    assert errors == []
