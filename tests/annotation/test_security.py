"""The rules the pages promise, enforced by the server: tried as an attacker would,
with someone else's ids and tokens, straight at the API."""

import pytest
from django.contrib.auth import get_user_model

from annotation.models import AnnotationSession, Example
from annotation.sessions import start_session
from annotation.tokens import make_token
from tasks.models import Task

pytestmark = pytest.mark.django_db


def written(task, author, **extra):
    return Example.objects.create(task=task, round=task.open_round(), context=task.contexts.first(), annotator=author,
                                  inputs={"statement": "text"}, target={"label": "positive"}, fooled=True,
                                  prediction={"label": "negative", "probabilities": {}}, **extra)


# --- the session token ------------------------------------------------------------------


def test_a_token_works_only_on_its_own_tasks_annotation_endpoints(live_tasks, annotator, token_client):
    client = token_client(annotator, live_tasks["sentiment"])
    assert client.get("/api/tasks/sentiment/contexts/next/").status_code == 200
    response = client.get("/api/tasks/nli/contexts/next/")
    assert response.status_code == 403 and "for task 'sentiment', not 'nli'" in response.json()["detail"]
    nli_example = Example.objects.create(task=live_tasks["nli"], round=live_tasks["nli"].open_round(),
                                         annotator=annotator, inputs={"hypothesis": "x"}, target={"label": "neutral"})
    assert client.post(f"/api/examples/{nli_example.pk}/retract/").status_code == 404  # another task's example
    assert not Example.objects.get(pk=nli_example.pk).retracted


@pytest.mark.parametrize("method, path, body", [
    ("post", "/api/tasks/sentiment/sessions/", None),  # mint another token
    ("patch", "/api/tasks/sentiment/", {"goal": "pwned"}),  # edit the task
    ("post", "/api/tasks/", {"slug": "x", "name": "x", "task_type": "classification", "config": {}}),
    ("get", "/api/tasks/", None),
    ("get", "/api/tasks/sentiment/contexts/", None),
    ("get", "/api/tasks/sentiment/rounds/", None),
])
def test_a_token_reaches_nothing_else(live_tasks, researcher, token_client, method, path, body):
    """Even a researcher's token cannot be used outside the annotation endpoints."""
    client = token_client(researcher, live_tasks["sentiment"])
    sessions_before = AnnotationSession.objects.count()
    response = getattr(client, method)(path, body, format="json")
    assert response.status_code == 403, response.content
    assert "only on the annotation endpoints" in response.json()["detail"]
    assert AnnotationSession.objects.count() == sessions_before
    assert Task.objects.get(slug="sentiment").goal != "pwned"


def test_unflag_refuses_a_token(live_tasks, researcher, annotator, token_client):
    example = written(live_tasks["sentiment"], annotator, flagged=True)
    response = token_client(researcher, live_tasks["sentiment"]).post(f"/api/examples/{example.pk}/unflag/")
    assert response.status_code == 403
    assert Example.objects.get(pk=example.pk).flagged


def test_signing_out_ends_the_tokens_of_that_sign_in(live_tasks, annotator, client, anonymous):
    client.force_login(annotator)
    page = client.get("/tasks/sentiment/create/").content.decode()
    token = page.split('data-token="')[1].split('"')[0]
    anonymous.credentials(HTTP_X_DYNABENCH_TOKEN=token)
    assert anonymous.get("/api/tasks/sentiment/contexts/next/").status_code == 200
    elsewhere = start_session(annotator, live_tasks["sentiment"])  # another sign-in's session: unaffected
    client.post("/accounts/logout/")
    response = anonymous.get("/api/tasks/sentiment/contexts/next/")
    assert response.status_code == 401 and "signed out" in response.json()["detail"]
    anonymous.credentials(HTTP_X_DYNABENCH_TOKEN=make_token(elsewhere))
    assert anonymous.get("/api/tasks/sentiment/contexts/next/").status_code == 200


def test_a_password_change_ends_every_token(live_tasks, annotator, anonymous):
    token = make_token(start_session(annotator, live_tasks["sentiment"]))
    anonymous.credentials(HTTP_X_DYNABENCH_TOKEN=token)
    assert anonymous.get("/api/tasks/sentiment/contexts/next/").status_code == 200
    annotator.set_password("a brand new password 99")
    annotator.save()
    response = anonymous.get("/api/tasks/sentiment/contexts/next/")
    assert response.status_code == 401 and "password changed" in response.json()["detail"]


def test_a_disabled_account_token_stops_working(live_tasks, annotator, anonymous):
    anonymous.credentials(HTTP_X_DYNABENCH_TOKEN=make_token(start_session(annotator, live_tasks["sentiment"])))
    get_user_model().objects.filter(pk=annotator.pk).update(is_active=False)
    assert anonymous.get("/api/tasks/sentiment/contexts/next/").status_code == 401


def test_pages_reuse_the_session_and_are_never_cached(live_tasks, annotator, client):
    client.force_login(annotator)
    first = client.get("/tasks/sentiment/create/")
    second = client.get("/tasks/sentiment/validate/")
    third = client.get("/tasks/sentiment/create/")
    assert AnnotationSession.objects.filter(user=annotator).count() == 1
    token = first.content.decode().split('data-token="')[1].split('"')[0]
    assert token in third.content.decode()
    for response in (first, second, third):
        assert "no-store" in response["Cache-Control"]
    token_page = client.get(f"/tasks/sentiment/create/?token={token}")
    assert "no-store" in token_page["Cache-Control"]


def test_someone_elses_token_link_says_whose_session_it_is(live_tasks, annotator, second_annotator, client):
    token = make_token(start_session(second_annotator, live_tasks["sentiment"]))
    client.force_login(annotator)
    page = client.get(f"/tasks/sentiment/create/?token={token}").content.decode()
    assert 'id="session-owner"' in page and "second_annotator" in page
    own = client.get("/tasks/sentiment/create/").content.decode()
    assert 'id="session-owner"' not in own


# --- flagging ------------------------------------------------------------------------------


def test_only_the_author_and_researchers_flag(live_tasks, annotator, second_annotator, researcher, client_for):
    example = written(live_tasks["sentiment"], annotator)
    response = client_for(second_annotator).post(f"/api/examples/{example.pk}/flag/", {"reason": "spite"},
                                                 format="json")
    assert response.status_code == 403 and "validation label 'flagged'" in response.json()["detail"]
    assert not Example.objects.get(pk=example.pk).flagged

    response = client_for(annotator).post(f"/api/examples/{example.pk}/flag/", {"reason": "my typo"}, format="json")
    assert response.status_code == 200 and response.json()["flagged"] is True
    # A later flag never overwrites the first reason.
    response = client_for(researcher).post(f"/api/examples/{example.pk}/flag/", {"reason": "overwrite"},
                                           format="json")
    assert response.status_code == 200 and response.json()["flag_reason"] == "my typo"
    stored = Example.objects.get(pk=example.pk)
    assert stored.flag_reason == "my typo" and stored.flagged_by == annotator
    # Unflagged and flagged again: still the first reason on record.
    assert client_for(researcher).post(f"/api/examples/{example.pk}/unflag/").status_code == 200
    response = client_for(annotator).post(f"/api/examples/{example.pk}/flag/", {"reason": "second thoughts"},
                                          format="json")
    assert response.status_code == 200 and response.json()["flagged"] is True
    assert Example.objects.get(pk=example.pk).flag_reason == "my typo"


def test_only_researchers_unflag(live_tasks, annotator, second_annotator, researcher, client_for):
    example = written(live_tasks["sentiment"], annotator, flagged=True, flag_reason="bad label")
    for user in (annotator, second_annotator):  # not even the author
        response = client_for(user).post(f"/api/examples/{example.pk}/unflag/")
        assert response.status_code == 403
        assert Example.objects.get(pk=example.pk).flagged
    response = client_for(researcher).post(f"/api/examples/{example.pk}/unflag/")
    assert response.status_code == 200 and response.json()["flagged"] is False
    assert response.json()["flag_reason"] == "bad label"


# --- someone else's examples -------------------------------------------------------------------


def test_nobody_else_explains_or_retracts_an_example(live_tasks, annotator, second_annotator, client_for):
    example = written(live_tasks["sentiment"], annotator)
    other = client_for(second_annotator)
    assert other.post(f"/api/examples/{example.pk}/retract/").status_code == 403
    assert other.post(f"/api/examples/{example.pk}/explanation/", {}, format="json").status_code == 403
    assert not Example.objects.get(pk=example.pk).retracted


def test_examples_of_hidden_tasks_are_invisible(live_tasks, annotator, second_annotator, client_for):
    task = live_tasks["sentiment"]
    example = written(task, annotator)
    Task.objects.filter(pk=task.pk).update(is_hidden=True)
    other = client_for(second_annotator)
    for path in (f"/api/examples/{example.pk}/reveal/",):
        assert other.get(path).status_code == 404
    assert other.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "positive"}},
                      format="json").status_code == 404
    assert other.get("/api/tasks/sentiment/validations/next/").status_code == 404


def test_an_unreadable_authorization_header_is_refused_even_beside_a_valid_token(live_tasks, annotator,
                                                                                token_client):
    client = token_client(annotator, live_tasks["sentiment"])
    assert client.get("/api/tasks/sentiment/contexts/next/").status_code == 200
    for header in ("Bearer abc", "garbage", "Basic dXNlcjpwYXNz"):
        response = client.get("/api/tasks/sentiment/contexts/next/", HTTP_AUTHORIZATION=header)
        assert response.status_code == 401 and "Unsupported Authorization header" in response.json()["detail"]


def test_a_token_made_through_the_api_from_a_sign_in_ends_with_it(live_tasks, annotator, client, anonymous):
    client.force_login(annotator)
    token = client.post("/api/tasks/sentiment/sessions/").json()["token"]
    anonymous.credentials(HTTP_X_DYNABENCH_TOKEN=token)
    assert anonymous.get("/api/tasks/sentiment/contexts/next/").status_code == 200
    client.post("/accounts/logout/")
    assert anonymous.get("/api/tasks/sentiment/contexts/next/").status_code == 401


def test_flagged_examples_wait_for_the_researchers(live_tasks, annotator, second_annotator, researcher, client_for):
    """An author's flag takes an example out of the queue; nobody but a researcher decides it then."""
    example = written(live_tasks["sentiment"], annotator)
    client_for(annotator).post(f"/api/examples/{example.pk}/flag/", {"reason": "oops"}, format="json")
    other = client_for(second_annotator)
    assert other.get("/api/tasks/sentiment/validations/next/").status_code == 204
    response = other.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "positive"}},
                          format="json")
    assert response.status_code == 409 and "flagged" in response.json()["detail"]
    response = client_for(researcher).post(f"/api/examples/{example.pk}/validations/", {"label": "incorrect"},
                                           format="json")
    assert response.status_code == 201 and response.json()["example"]["validation_status"] == "rejected"


def test_an_explanation_keeps_what_was_written_to_the_metadata_meanwhile(live_tasks, annotator, researcher,
                                                                       client_for):
    from annotation.examples import explain_example, unflag_example

    task = live_tasks["sentiment"]
    model = task.open_round().target_models.get()
    example = written(task, annotator, flagged=True)
    Example.objects.filter(pk=example.pk).update(model_predictions={str(model.pk): {"label": "negative"}})
    stale = Example.objects.select_related("task", "context").get(pk=example.pk)  # read before the unflag
    unflag_example(stale, researcher)
    explain_example(stale, annotator, n_steps=5)
    metadata = Example.objects.get(pk=example.pk).metadata
    assert "explanation" in metadata and "unflagged" in metadata


def test_a_session_row_cannot_be_edited_in_the_admin(demo_tasks, annotator, superuser, client):
    """Provisional state, mode and expiry are the platform's record of what a token may do:
    not even a superuser changes them by hand (ending a session is the admin action)."""
    from datetime import timedelta

    from django.utils import timezone

    from annotation.models import AnnotationSession

    session = AnnotationSession.objects.create(user=annotator, task=demo_tasks["sentiment"], provisional=True,
                                               mode="create", expires_at=timezone.now() + timedelta(hours=1))
    client.force_login(superuser)
    url = f"/admin/annotation/annotationsession/{session.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200 and 'name="provisional"' not in page.content.decode()
    client.post(url, {"provisional": "", "mode": "any", "expires_at_0": "2099-01-01", "expires_at_1": "00:00:00",
                      "examples_written": "99", "_save": "Save"})
    session.refresh_from_db()
    assert session.provisional is True and session.mode == "create" and session.examples_written == 0
    assert session.expires_at < timezone.now() + timedelta(hours=2)
