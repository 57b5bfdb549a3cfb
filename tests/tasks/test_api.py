import pytest
from rest_framework.authtoken.models import Token

from tasks.models import Task

pytestmark = pytest.mark.django_db

NEW_TASK = {
    "slug": "toxicity",
    "name": "Toxicity",
    "task_type": "classification",
    "goal": "Fool the toxicity model.",
    "config": {
        "context_fields": [],
        "input_fields": [{"name": "text", "label": "Text"}],
        "labels": [{"name": "toxic"}, {"name": "fine"}],
        "model_inputs": ["text"],
    },
}


def test_task_list_is_public_and_paginated(demo_tasks, anonymous, django_assert_num_queries):
    with django_assert_num_queries(3):  # count, tasks, their rounds (prefetched)
        response = anonymous.get("/api/tasks/")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 4
    assert sorted(t["slug"] for t in body["results"]) == ["hate", "nli", "qa", "sentiment"]
    assert all(t["current_round"] == 1 for t in body["results"])

    page = anonymous.get("/api/tasks/?page_size=3&page=2").json()
    assert page["count"] == 4 and len(page["results"]) == 1 and page["previous"]


@pytest.mark.parametrize("page", ["99", "abc", "0", "-1"])
def test_bad_page_numbers_are_404_not_500(demo_tasks, anonymous, page):
    response = anonymous.get(f"/api/tasks/?page={page}")
    assert response.status_code == 404
    assert "Invalid page" in response.json()["detail"]


def test_task_detail_and_unknown_slug(demo_tasks, anonymous):
    body = anonymous.get("/api/tasks/nli/").json()
    assert body["slug"] == "nli" and body["config"]["model_inputs"] == ["premise", "hypothesis"]
    response = anonymous.get("/api/tasks/no-such-task/")
    assert response.status_code == 404
    assert anonymous.get("/api/tasks/no-such-task/rounds/").status_code == 404


def test_hidden_tasks_are_404_for_visitors(demo_tasks, anonymous, client_for, researcher):
    Task.objects.filter(slug="hate").update(is_hidden=True)
    assert anonymous.get("/api/tasks/hate/").status_code == 404
    assert anonymous.get("/api/tasks/").json()["count"] == 3
    assert client_for(researcher).get("/api/tasks/hate/").status_code == 200


def test_rounds_endpoints(demo_tasks, anonymous, django_assert_num_queries):
    from tasks.models import Round

    for number in (2, 3, 4):
        Round.objects.create(task=demo_tasks["qa"], number=number)
    with django_assert_num_queries(4):  # task, count, rounds with their counts, target models
        rounds = anonymous.get("/api/tasks/qa/rounds/").json()
    assert rounds["count"] == 4
    assert rounds["results"][0]["task"] == "qa" and [r["number"] for r in rounds["results"]] == [1, 2, 3, 4]
    first = anonymous.get("/api/tasks/qa/rounds/1/").json()
    assert first["status"] == "open" and first["verified_model_error_rate"] is None
    assert first["collected"] == 0 and first["validations"] == 0
    assert anonymous.get("/api/tasks/qa/rounds/7/").status_code == 404


def test_contexts_need_a_signed_in_user(demo_tasks, anonymous, client_for, annotator, django_assert_num_queries):
    from tasks.services import add_contexts

    add_contexts(demo_tasks["nli"], [{"external_id": f"c{i}", "fields": {"premise": f"P {i}"}} for i in range(30)])
    assert anonymous.get("/api/tasks/nli/contexts/").status_code == 401
    client = client_for(annotator)
    client.get("/api/tasks/nli/contexts/?page_size=10")  # the session's first use loads it
    with django_assert_num_queries(5):  # sign-in session, user, task, count, contexts
        body = client.get("/api/tasks/nli/contexts/?page_size=10").json()
    assert body["count"] >= 30 and len(body["results"]) == 10
    assert set(body["results"][0]["fields"]) == {"premise"}


def test_anonymous_and_annotators_cannot_write(demo_tasks, anonymous, client_for, annotator):
    assert anonymous.post("/api/tasks/", NEW_TASK, format="json").status_code == 401
    assert anonymous.patch("/api/tasks/nli/", {"name": "x"}, format="json").status_code == 401
    response = client_for(annotator).post("/api/tasks/", NEW_TASK, format="json")
    assert response.status_code == 403
    assert client_for(annotator).patch("/api/tasks/nli/", {"name": "x"}, format="json").status_code == 403
    assert Task.objects.get(slug="nli").name == "Natural Language Inference"
    assert not Task.objects.filter(slug="toxicity").exists()


def test_staff_create_with_bad_config_gets_400_and_nothing_is_stored(researcher, client_for):
    bad = {**NEW_TASK, "config": {**NEW_TASK["config"], "labels": [{"name": "only-one"}]}}
    response = client_for(researcher).post("/api/tasks/", bad, format="json")
    assert response.status_code == 400
    assert "at least two labels" in " ".join(response.json()["errors"]["config"])
    assert not Task.objects.filter(slug="toxicity").exists()

    response = client_for(researcher).post("/api/tasks/", NEW_TASK, format="json")
    assert response.status_code == 201, response.json()
    assert Task.objects.get(slug="toxicity").parsed_config.label_names == ["toxic", "fine"]


def test_owner_can_edit_their_task_but_not_break_it(demo_tasks, client_for, annotator):
    demo_tasks["sentiment"].owners.add(annotator)
    client = client_for(annotator)
    response = client.patch("/api/tasks/sentiment/", {"goal": "New goal"}, format="json")
    assert response.status_code == 200
    response = client.patch("/api/tasks/sentiment/", {"config": {"input_fields": []}}, format="json")
    assert response.status_code == 400
    task = Task.objects.get(slug="sentiment")
    assert task.goal == "New goal" and task.parsed_config.label_names == ["negative", "positive"]
    assert client.patch("/api/tasks/nli/", {"goal": "x"}, format="json").status_code == 403


def test_token_authentication(researcher, anonymous):
    response = anonymous.post("/api/auth/token/", {"username": "researcher", "password": "wrong"})
    assert response.status_code == 401 and "Unable to sign in" in response.json()["detail"]
    assert anonymous.post("/api/auth/token/", {"username": "researcher"}).status_code == 400  # no password
    from tests.conftest import PASSWORD

    response = anonymous.post("/api/auth/token/", {"username": "researcher", "password": PASSWORD})
    assert response.status_code == 200
    token = response.json()["token"]
    assert Token.objects.get(user=researcher).key == token
    anonymous.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert anonymous.post("/api/tasks/", NEW_TASK, format="json").status_code == 201
    anonymous.credentials(HTTP_AUTHORIZATION="Token forged-token")
    assert anonymous.get("/api/tasks/").status_code == 401


def test_openapi_schema_and_docs(anonymous):
    response = anonymous.get("/api/schema/")
    assert response.status_code == 200
    text = response.content.decode()
    assert "openapi: 3" in text
    for path in ["/api/tasks/", "/api/tasks/{slug}/", "/api/tasks/{slug}/rounds/",
                 "/api/tasks/{slug}/contexts/"]:
        assert f"{path}:" in text
    docs = anonymous.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()
    assert b"cdn" not in docs.content.lower()
    page = docs.content.decode()
    # our frame around Swagger UI: the page states its language and has a main landmark
    assert '<html lang="en">' in page and '<main id="swagger-ui"' in page
    assert "<style" not in page  # the Content-Security-Policy refuses inline styles: the frame's is a file
    assert '<script src="/api/docs/?script="></script>' in page  # the view's own script, which mounts there
    script = anonymous.get("/api/docs/?script=")
    assert script.status_code == 200 and b'dom_id: "#swagger-ui"' in script.content


def test_a_taken_slug_is_a_409_and_the_slug_never_changes(demo_tasks, researcher, client_for):
    client = client_for(researcher)
    taken = {**NEW_TASK, "slug": "nli"}
    response = client.post("/api/tasks/", taken, format="json")
    assert response.status_code == 409 and "exists already" in response.json()["detail"]
    assert Task.objects.get(slug="nli").name == "Natural Language Inference"
    response = client.patch("/api/tasks/sentiment/", {"slug": "renamed", "goal": "Still here"}, format="json")
    assert response.status_code == 200 and response.json()["slug"] == "sentiment"
    assert Task.objects.filter(slug="sentiment", goal="Still here").exists()


def test_a_task_with_data_keeps_its_fields_and_labels(demo_tasks, researcher, client_for):
    """The demo tasks have contexts: renaming a field or a label would orphan them (409),
    while descriptions and validation settings may change."""
    client = client_for(researcher)
    config = Task.objects.get(slug="sentiment").config
    renamed = {**config, "labels": [{"name": "neg"}, {"name": "pos"}]}
    response = client.patch("/api/tasks/sentiment/", {"config": renamed}, format="json")
    assert response.status_code == 409 and "cannot change" in response.json()["detail"]
    softer = {**config, "num_matching_validations": 2,
              "labels": [{**label, "description": "new words"} for label in config["labels"]]}
    assert client.patch("/api/tasks/sentiment/", {"config": softer}, format="json").status_code == 200
    assert Task.objects.get(slug="sentiment").parsed_config.num_matching_validations == 2
    fresh = client.post("/api/tasks/", NEW_TASK, format="json")
    assert fresh.status_code == 201
    changed = {**NEW_TASK["config"], "labels": [{"name": "a"}, {"name": "b"}]}
    assert client.patch("/api/tasks/toxicity/", {"config": changed}, format="json").status_code == 200  # no data yet


@pytest.mark.parametrize("body, field", [
    ({"name": 7}, "name"), ({"is_hidden": 0}, "is_hidden"), ({"is_active": "true"}, "is_active"),
    ({"goal": ["x"]}, "goal"),
])
def test_values_of_the_wrong_json_type_are_refused(demo_tasks, researcher, client_for, body, field):
    response = client_for(researcher).patch("/api/tasks/sentiment/", body, format="json")
    assert response.status_code == 400 and field in response.json()["errors"]
    assert Task.objects.get(slug="sentiment").name == "Sentiment Analysis"


@pytest.mark.parametrize("query", ["page_size=0", "page_size=abc", "page_size=201", "page_size=2&page_size=3",
                                   "page_size=%C2%B2", "page_size=%D9%A3"])  # superscript two, Arabic-Indic three
def test_a_bad_page_size_is_a_400_not_ignored(demo_tasks, anonymous, query):
    response = anonymous.get(f"/api/tasks/?{query}")
    assert response.status_code == 400 and "page_size" in response.json()["errors"]
