"""The annotation pages: rendering, escaping, iframe headers, token entry."""

import pytest

from annotation.models import Example
from annotation.tokens import make_token

pytestmark = pytest.mark.django_db

XSS = '<script>alert("xss")</script><img src=x onerror=alert(2)>'


def test_validation_page_shows_an_xss_payload_escaped(live_tasks, annotator, second_annotator, client):
    task = live_tasks["nli"]
    Example.objects.create(task=task, round=task.open_round(), context=task.contexts.first(), annotator=annotator,
                           inputs={"hypothesis": XSS}, target={"label": "neutral"}, fooled=True,
                           prediction={"label": "entailment", "probabilities": {}})
    client.force_login(second_annotator)
    page = client.get("/tasks/nli/validate/").content.decode()
    assert '"target": null' in page and '"fooled": null' in page  # blind: nothing given away
    assert XSS not in page
    assert "&lt;script&gt;alert(&quot;xss&quot;)&lt;/script&gt;" in page  # the HTML part
    # ... and in the JSON island the script reads, "<" is escaped too.
    assert "\\u003Cscript\\u003E" in page


def test_create_page_renders_instructions_and_is_never_framed(live_tasks, annotator, client):
    """Only the MTurk HIT page may be framed (tests/crowd); the annotation pages may not."""
    client.force_login(annotator)
    response = client.get("/tasks/hate/create/")
    page = response.content.decode()
    assert response.status_code == 200
    assert "Content warning" in page and live_tasks["hate"].goal in page
    assert response["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert 'data-token="' in page and "js/dynabench.js" in page


def test_pages_need_a_login_or_a_valid_token(live_tasks, annotator, client):
    response = client.get("/tasks/nli/create/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    forged = client.get("/tasks/nli/create/?token=forged")
    assert forged.status_code == 403 and "not valid" in forged.content.decode()

    from annotation.sessions import start_session

    session = start_session(annotator, live_tasks["nli"])
    ok = client.get(f"/tasks/nli/create/?token={make_token(session)}")
    assert ok.status_code == 200
    other_task = client.get(f"/tasks/qa/create/?token={make_token(session)}")
    assert other_task.status_code == 403 and "another task" in other_task.content.decode()


def test_closed_round_page_says_so(live_tasks, annotator, client):
    from tasks.services import close_round

    close_round(live_tasks["sentiment"].open_round())
    client.force_login(annotator)
    assert "collection is closed" in client.get("/tasks/sentiment/create/").content.decode()


def test_signup_then_annotate(live_tasks, client):
    response = client.post("/accounts/signup/?next=/tasks/nli/create/", {
        "username": "newcomer", "password1": "a-long-enough-pass-123", "password2": "a-long-enough-pass-123",
        "next": "/tasks/nli/create/"})
    assert response.status_code == 302 and response["Location"] == "/tasks/nli/create/"
    assert client.get("/tasks/nli/create/").status_code == 200
    evil = client.post("/accounts/signup/", {"username": "x2", "password1": "a-long-enough-pass-123",
                                             "password2": "a-long-enough-pass-123", "next": "https://evil.example"})
    assert evil["Location"] == "/"


def test_a_round_without_its_target_says_what_is_under_way_and_when(demo_tasks, annotator, client_for, client):
    """The demo's models train in the background: until round 1 has its target, the
    create page and the API say which job prepares it, how far it is and what is ahead."""
    from datetime import timedelta

    from django.utils import timezone

    from jobs.engine import create_job
    from jobs.models import Job

    task = demo_tasks["sentiment"]
    body = {"context": task.contexts.first().pk, "inputs": {"statement": "Fine."}, "target": {"label": "positive"}}
    client.force_login(annotator)
    page = client.get("/tasks/sentiment/create/").content.decode()
    assert "Round 1 has no target model yet." in page
    assert "No model is being trained for it: a researcher must train one" in page
    assert 'id="example-form"' not in page

    ahead = create_job(Job.Kind.TRAIN_MODEL, task=demo_tasks["hate"], params={"name": "x"})
    job = create_job(Job.Kind.TRAIN_MODEL, task=task, params={"name": "round0-seed"})
    Job.objects.filter(pk__in=[ahead.pk, job.pk]).update(queue="training")
    page = " ".join(client.get("/tasks/sentiment/create/").content.decode().split())
    assert f"training job #{job.pk} is queued, number 2 in line" in page.lower()
    assert '<meta http-equiv="refresh" content="20">' in page

    Job.objects.filter(pk=job.pk).update(status="running", progress=25,
                                         started_at=timezone.now() - timedelta(minutes=1))
    response = client_for(annotator).post("/api/tasks/sentiment/examples/", body, format="json")
    assert response.status_code == 503
    assert f"job #{job.pk} is 25% done, about 3 minutes left" in response.json()["detail"]
    assert not Example.objects.filter(task=task).exists()


def test_the_validate_page_has_its_own_instructions_and_tells_nothing_of_other_votes(
        live_tasks, annotator, second_annotator, client):
    task = live_tasks["nli"]
    example = Example.objects.create(task=task, round=task.open_round(), context=task.contexts.first(),
                                     annotator=annotator, inputs={"hypothesis": "Someone is outside."},
                                     target={"label": "neutral"}, fooled=True, validations_correct=1,
                                     prediction={"label": "entailment", "probabilities": {}})
    client.force_login(second_annotator)
    page = " ".join(client.get("/tasks/nli/validate/").content.decode().split())
    assert "How to validate" in page and "Give your own answer first" in page
    assert task.instructions not in page  # the writer's instructions are for the create page
    assert "3 matching votes decide an example" in page
    # Other validators' votes are not told (on a gold item they would read differently).
    assert f'"id": {example.pk}' in page and "votes_so_far" not in page and "vote so far" not in page


def test_a_new_account_is_told_before_its_first_vote_when_its_votes_start_to_count(
        live_tasks, annotator, client, django_user_model, settings):
    """The page says the trust rule's wait in the setting's own words, and that one's own
    examples never come up; an established account is not told it waits."""
    from datetime import timedelta

    from django.utils import timezone

    task = live_tasks["nli"]
    Example.objects.create(task=task, round=task.open_round(), context=task.contexts.first(), annotator=annotator,
                           inputs={"hypothesis": "Mine."}, target={"label": "neutral"}, fooled=True,
                           prediction={"label": "entailment", "probabilities": {}})
    settings.VALIDATOR_MIN_ACCOUNT_AGE = 3 * 86400
    joined = timezone.now() - timedelta(hours=1)
    newcomer = django_user_model.objects.create_user("newcomer", password="a-long-enough-pass-123",
                                                     date_joined=joined)
    client.force_login(newcomer)
    page = " ".join(client.get("/tasks/nli/validate/").content.decode().split())
    assert 'id="new-account-wait"' in page
    assert "a new account's votes count only once the account is 3 days old" in page
    counts_from = timezone.localtime(joined + timedelta(days=3))
    assert f"decide nothing until {counts_from:%-d %B %Y, %H:%M} UTC" in page
    assert "Your own examples are never shown to you" in page

    settings.VALIDATOR_MIN_ACCOUNT_AGE = 90 * 60  # the words follow the setting
    page = " ".join(client.get("/tasks/nli/validate/").content.decode().split())
    assert "once the account is 90 minutes old" in page and "3 days" not in page

    client.force_login(annotator)  # a month old, and the only example is their own
    page = " ".join(client.get("/tasks/nli/validate/").content.decode().split())
    assert 'id="new-account-wait"' not in page and "decide nothing" not in page
    assert "Nothing to validate in this task right now (your own examples are never shown to you)." in page


def test_the_new_account_wait_is_not_claimed_where_it_does_not_apply(live_tasks, researcher, mturk_worker, settings):
    """A researcher decides at once, and a validation batch's worker is vouched for by
    MTurk: neither waits (``why_not_counted`` in the same order)."""
    from django.utils import timezone

    from annotation import trust
    from annotation.sessions import start_session

    task = live_tasks["nli"]
    for user in (researcher, mturk_worker):
        user.date_joined = timezone.now()
        user.save(update_fields=["date_joined"])
    assert trust.votes_count_from(task, researcher, None) is None
    session = start_session(mturk_worker, task)
    assert trust.votes_count_from(task, mturk_worker, session) is not None  # a plain session: it waits
    session.mturk_assignment_id = "3ASSIGNMENTX"
    session.mode = "validate"
    session.provisional = False
    assert trust.votes_count_from(task, mturk_worker, session) is None
    session.provisional = True
    assert trust.votes_count_from(task, mturk_worker, session) is None  # it waits for MTurk instead


@pytest.mark.parametrize("seconds, words", [(86400, "24 hours"), (2 * 86400, "2 days"), (3600, "1 hour"),
                                            (5400, "90 minutes"), (61, "61 seconds"), (1, "1 second")])
def test_the_account_age_in_words(settings, seconds, words):
    from annotation import trust

    settings.VALIDATOR_MIN_ACCOUNT_AGE = seconds
    assert trust.min_account_age_text() == words


def test_the_error_rate_chart_has_a_caption_and_its_table(demo_tasks, client):
    """The chart's text alternative: a figure caption that points to the table
    below, and that table, captioned, with each round's two error rates."""
    import re

    html = client.get("/tasks/sentiment/").content.decode()
    figure = re.search(r'<figure class="chart">(.*?)</figure>', html, re.S).group(1)
    assert "<svg" in figure and "<figcaption>" in figure and "The table below gives the same figures" in figure
    table = html[html.index('id="rounds-table"'):]
    assert table.index("<caption>") < table.index("</table>") and "the chart's figures" in table
    assert "Model error rate</th>" in table and "Verified model error rate</th>" in table
    assert html.index("<figure") < html.index('id="rounds-table"')
