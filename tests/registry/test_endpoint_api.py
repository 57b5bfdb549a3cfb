"""Registering models behind endpoints through the API and the admin: the service's
checks, the task's researchers only, no secret in any answer; a key from the server's
map; prices and budgets a superuser's; a health check on demand."""

from decimal import Decimal

import pytest

from registry import endpoints
from registry.models import Endpoint, ModelVersion
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(settings):
    settings.ENDPOINT_ALLOWED_HOSTS = ["127.0.0.1"]  # the fake's address, allowed by name
    settings.ENDPOINT_SECRETS = {"some-key": {"env": "SOME_KEY", "hosts": ["127.0.0.1"]}}
    with FakeOpenAI() as server:
        yield server


def test_researchers_register_an_endpoint_through_the_api(demo_tasks, client_for, researcher, annotator,
                                                          other_researcher, superuser, chat, monkeypatch):
    body = {"name": "api-llm", "protocol": "openai", "url": chat.url, "model": "fake-chat",
            "secret_env": "some-key"}
    assert client_for(annotator).post("/api/tasks/sentiment/endpoints/", body, format="json").status_code == 403
    assert client_for(other_researcher).post("/api/tasks/sentiment/endpoints/", body,
                                             format="json").status_code == 403
    owner = client_for(researcher)
    created = owner.post("/api/tasks/sentiment/endpoints/", body, format="json")
    assert created.status_code == 201, created.content
    data = created.json()
    assert data["name"] == "api-llm" and data["secret_env"] == "some-key" and data["protocol"] == "openai"
    assert data["round_budget"] is None and data["round_budget_in_effect"] == "10.00"  # ENDPOINT_DEFAULT_BUDGET
    model = ModelVersion.objects.get(pk=data["id"])
    assert model.endpoint.price_per_call is None and model.created_by == researcher
    again = owner.post("/api/tasks/sentiment/endpoints/", body, format="json")
    assert again.status_code == 409 and not ModelVersion.objects.filter(name="api-llm").exclude(pk=model.pk).exists()
    for bad, field in [({"protocol": "grpc"}, "protocol"), ({"url": "javascript:alert(1)"}, "url"),
                       ({"secret_env": "sk-live-abc"}, "secret_env"), ({"max_concurrency": "4"}, "max_concurrency"),
                       ({"model": ""}, "model"), ({"model": 7}, "model"), ({"timeout_s": 1000}, "timeout_s"),
                       ({"timeout_s": "5"}, "timeout_s"), ({"price_per_call": "0.1"}, "price_per_call"),
                       ({"price_per_call": -1}, "price_per_call")]:
        response = owner.post("/api/tasks/sentiment/endpoints/", {**body, "name": "other", **bad}, format="json")
        assert response.status_code == 400 and field in response.json()["errors"], (bad, response.content)
    assert Endpoint.objects.count() == 1
    listed = owner.get("/api/tasks/sentiment/endpoints/").json()
    assert [e["name"] for e in listed] == ["api-llm"]
    assert client_for(annotator).get("/api/tasks/sentiment/endpoints/").status_code == 403
    unpriced = owner.post(f"/api/models/{model.pk}/health-check/")  # a key, and no price: not asked
    assert unpriced.status_code == 409 and "no price yet" in unpriced.json()["detail"] and chat.requests == []
    endpoints.update_endpoint(model.endpoint, user=superuser, price_per_call="0.002")
    unset = owner.post(f"/api/models/{model.pk}/health-check/")
    assert unset.status_code == 409 and "key 'some-key'" in unset.json()["detail"]
    assert "unset" in unset.json()["detail"] and "SOME_KEY" not in unset.json()["detail"]
    monkeypatch.setenv("SOME_KEY", "sk-some-value")
    health = owner.post(f"/api/models/{model.pk}/health-check/")
    assert health.status_code == 200 and health.json()["probes"] == 1
    assert client_for(annotator).post(f"/api/models/{model.pk}/health-check/").status_code == 404
    chat.answer = lambda text: "no"
    refused = owner.post(f"/api/models/{model.pk}/health-check/")
    assert refused.status_code == 409 and "answer format" in refused.json()["detail"]


def test_the_admin_registers_through_the_service_and_only_a_superuser_sets_the_budgets(
        demo_tasks, client, researcher, superuser, chat):
    client.force_login(researcher)
    form = {"task": demo_tasks["sentiment"].pk, "name": "admin-llm", "protocol": "openai", "url": chat.url,
            "remote_model": "fake-chat", "secret_env": "some-key", "timeout_s": "5", "max_concurrency": "2",
            "rate_limit_per_minute": "", "price_per_call": "", "price_per_1k_prompt_tokens": "",
            "price_per_1k_completion_tokens": "", "usage-TOTAL_FORMS": "0", "usage-INITIAL_FORMS": "0"}
    bad = client.post("/admin/registry/endpoint/add/", {**form, "secret_env": "sk-live-123"})
    assert bad.status_code == 200 and b"Select a valid choice" in bad.content
    response = client.post("/admin/registry/endpoint/add/", form)
    assert response.status_code == 302, response.content[:2000]
    endpoint = Endpoint.objects.get(model_version__name="admin-llm")
    assert endpoint.max_concurrency == 2 and endpoint.model_version.created_by == researcher
    change = f"/admin/registry/endpoint/{endpoint.pk}/change/"
    page = client.get(change)
    assert page.status_code == 200 and b'name="round_budget"' not in page.content
    assert b'name="evaluation_budget"' not in page.content
    client.post(change, {**form, "timeout_s": "7", "round_budget": "5", "evaluation_budget": "3"})
    endpoint.refresh_from_db()
    assert endpoint.timeout_s == 7 and endpoint.round_budget is None and endpoint.evaluation_budget is None
    client.force_login(superuser)
    response = client.post(change, {**form, "timeout_s": "7", "round_budget": "5", "evaluation_budget": "3"})
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.round_budget == Decimal("5") and endpoint.evaluation_budget == Decimal("3")
