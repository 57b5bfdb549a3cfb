"""An endpoint's key, from the attacker's side: a researcher who owns one task registers
an endpoint at a server they run and names, as its key, one of the platform's own
secrets (SECRET_KEY, PROLIFIC_TOKEN, the AWS secret), hoping the health check sends
it to them as a bearer token. Keys come only from the operator's map
(ENDPOINT_SECRETS), each bound to its hosts; the API, the admin and the command refuse
any other name, a row that names one from before the map is refused when asked, and
only a superuser picks a key, moves a keyed endpoint or sets its prices."""

import io

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError

from core.errors import Forbidden, InvalidInput
from registry import endpoint_budgets, endpoints
from registry.models import Endpoint, ModelVersion
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.django_db

KEY_VALUE = "sk-operators-key-for-chat"
PLATFORM_SECRETS = ["SECRET_KEY", "PROLIFIC_TOKEN", "AWS_SECRET_ACCESS_KEY", "ADDRESS_HASH_KEY", "HOME"]


@pytest.fixture
def chat(settings, monkeypatch):
    """The researcher's server (the fake, on 127.0.0.1, reachable by name), an operator
    key bound to another host, and the platform's own secrets set, as on a server."""
    settings.ENDPOINT_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.ENDPOINT_SECRETS = {"provider": {"env": "PROVIDER_KEY", "hosts": ("api.provider.example",)},
                                 "local": {"env": "LOCAL_KEY", "hosts": ("127.0.0.1",)}}
    settings.PROLIFIC_TOKEN = "prolific-token-of-the-platform"
    monkeypatch.setenv("PROLIFIC_TOKEN", settings.PROLIFIC_TOKEN)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-of-the-platform")
    monkeypatch.setenv("PROVIDER_KEY", "sk-provider-key")
    monkeypatch.setenv("LOCAL_KEY", KEY_VALUE)
    with FakeOpenAI() as server:
        yield server


def secrets_sent(chat, settings) -> list[str]:
    """Every Authorization header the fake received that holds one of the platform's secrets."""
    values = [settings.SECRET_KEY, settings.PROLIFIC_TOKEN, "aws-secret-of-the-platform", settings.ADDRESS_HASH_KEY,
              "sk-provider-key"]
    return [r["headers"].get("Authorization", "") for r in chat.requests
            if any(v and v in r["headers"].get("Authorization", "") for v in values)]


@pytest.mark.parametrize("name", [*PLATFORM_SECRETS, "UNMAPPED_KEY"])
def test_the_api_refuses_any_key_not_in_the_map(demo_tasks, client_for, researcher, chat, settings, name):
    body = {"name": "mine", "protocol": "openai", "url": chat.url, "model": "fake-chat", "secret_env": name}
    response = client_for(researcher).post("/api/tasks/sentiment/endpoints/", body, format="json")
    assert response.status_code == 400 and "Not a key of this server" in response.json()["errors"]["secret_env"][0]
    assert "local, provider" in response.json()["errors"]["secret_env"][0]  # what may be picked
    assert not Endpoint.objects.exists() and chat.requests == []


@pytest.mark.parametrize("name", [*PLATFORM_SECRETS, "UNMAPPED_KEY"])
def test_the_admin_form_refuses_any_key_not_in_the_map(demo_tasks, client, researcher, chat, name):
    client.force_login(researcher)
    form = {"task": demo_tasks["sentiment"].pk, "name": "mine", "protocol": "openai", "url": chat.url,
            "remote_model": "fake-chat", "secret_env": name, "timeout_s": "5", "max_concurrency": "2",
            "rate_limit_per_minute": "", "usage-TOTAL_FORMS": "0", "usage-INITIAL_FORMS": "0"}
    page = client.post("/admin/registry/endpoint/add/", form)
    assert page.status_code == 200 and b"Select a valid choice" in page.content
    assert not Endpoint.objects.exists()
    picked = client.get("/admin/registry/endpoint/add/").content.decode()
    assert 'value="local"' in picked and f'value="{name}"' not in picked


@pytest.mark.parametrize("name", [*PLATFORM_SECRETS, "UNMAPPED_KEY"])
def test_the_command_refuses_any_key_not_in_the_map(demo_tasks, chat, name):
    with pytest.raises(CommandError, match="--secret-env: Not a key of this server") as caught:
        call_command("register_endpoint", "--task", "sentiment", "--name", "mine", "--protocol", "openai", "--url",
                     chat.url, "--model", "fake-chat", "--secret-env", name, stdout=io.StringIO())
    assert caught.value.returncode == 1  # manage.py exits non-zero
    assert not Endpoint.objects.exists()


def test_a_key_is_registered_only_for_the_hosts_it_is_bound_to(demo_tasks, client_for, researcher, chat):
    body = {"name": "mine", "protocol": "openai", "url": chat.url, "model": "fake-chat", "secret_env": "provider"}
    response = client_for(researcher).post("/api/tasks/sentiment/endpoints/", body, format="json")
    assert response.status_code == 400
    assert "sent only to api.provider.example; this URL's host is 127.0.0.1" in \
        response.json()["errors"]["secret_env"][0]
    assert not Endpoint.objects.exists()


def test_a_row_from_before_the_map_is_refused_when_asked_and_nothing_is_sent(demo_tasks, client_for, researcher,
                                                                           chat, settings):
    """Rows whose secret_env names a variable (the old rule) stay, but are never asked."""
    task = demo_tasks["sentiment"]
    for name in PLATFORM_SECRETS[:3]:
        version = ModelVersion.objects.create(task=task, name=f"old-{name}", artifact_path="", sha256="")
        Endpoint.objects.create(model_version=version, protocol="openai", url=chat.url, remote_model="fake-chat",
                                secret_env=name)
        refused = client_for(researcher).post(f"/api/models/{version.pk}/health-check/")
        assert refused.status_code == 409, refused.content
        assert f"names the key '{name}', which is not in this server's key map" in refused.json()["detail"]
    assert chat.requests == [] and secrets_sent(chat, settings) == []


def test_a_mapped_key_is_not_sent_to_a_host_it_is_not_bound_to(demo_tasks, chat, settings, superuser):
    """The binding is checked when the call is made: a row moved past the service, or a
    map whose hosts changed since, sends nothing."""
    version = endpoints.register_endpoint(demo_tasks["sentiment"], name="bound", protocol="openai", url=chat.url,
                                          model="fake-chat", secret_env="local", price_per_call="0.001")
    assert endpoints.health_check(version.endpoint, demo_tasks["sentiment"].parsed_config)["probes"] == 1
    assert chat.requests[-1]["headers"]["Authorization"] == f"Bearer {KEY_VALUE}"
    settings.ENDPOINT_SECRETS = {**settings.ENDPOINT_SECRETS,
                                 "local": {"env": "LOCAL_KEY", "hosts": ("models.lab.example",)}}
    asked = len(chat.requests)
    with pytest.raises(endpoints.Conflict, match="is not sent to 127.0.0.1: it is bound to other hosts"):
        endpoints.health_check(Endpoint.objects.get(pk=version.endpoint.pk), demo_tasks["sentiment"].parsed_config)
    assert len(chat.requests) == asked


def test_only_a_superuser_picks_a_key_moves_a_keyed_endpoint_or_sets_prices(demo_tasks, chat, researcher,
                                                                           superuser):
    version = endpoints.register_endpoint(demo_tasks["sentiment"], name="mine", protocol="openai", url=chat.url,
                                          model="fake-chat", user=researcher)
    endpoint = version.endpoint
    with pytest.raises(Forbidden, match="Only a superuser chooses an endpoint's key"):
        endpoints.update_endpoint(endpoint, user=researcher, secret_env="local")
    for price in endpoint_budgets.PRICES:
        with pytest.raises(Forbidden, match="prices"):
            endpoints.update_endpoint(endpoint, user=researcher, **{price: "0"})
    endpoints.update_endpoint(endpoint, user=superuser, secret_env="local", price_per_call="0.01")
    endpoint.refresh_from_db()
    assert endpoint.secret_env == "local"
    # The researcher moves it to another server (theirs) or model: the key does not follow.
    other = chat.url.replace("http://127.0.0.1", "https://localhost")  # tests run with DEBUG off
    endpoints.update_endpoint(endpoint, user=researcher, url=other)
    endpoint.refresh_from_db()
    assert endpoint.url == other and endpoint.secret_env == "" and endpoint.healthy_at is None
    endpoints.update_endpoint(endpoint, user=superuser, url=chat.url, secret_env="local")
    endpoints.update_endpoint(endpoint, user=researcher, remote_model="a-dearer-model")
    endpoint.refresh_from_db()
    assert endpoint.secret_env == ""
    endpoints.update_endpoint(endpoint, user=superuser, secret_env="local", remote_model="fake-chat")
    endpoints.update_endpoint(endpoint, user=researcher, timeout_s=7)  # anything else keeps it
    endpoint.refresh_from_db()
    assert endpoint.secret_env == "local" and endpoint.timeout_s == 7
    with pytest.raises(InvalidInput, match="sent only to 127.0.0.1"):  # a superuser too, within the key's hosts
        endpoints.update_endpoint(endpoint, user=superuser, url="https://elsewhere.example/v1")


def test_a_researcher_cannot_set_prices_through_the_api_or_the_admin(demo_tasks, client_for, client, researcher,
                                                                     superuser, chat):
    body = {"name": "mine", "protocol": "openai", "url": chat.url, "model": "fake-chat", "price_per_call": 0}
    refused = client_for(researcher).post("/api/tasks/sentiment/endpoints/", body, format="json")
    assert refused.status_code == 403 and "Only a superuser sets an endpoint's prices" in refused.json()["detail"]
    assert not Endpoint.objects.exists()
    client.force_login(researcher)
    form = {"task": demo_tasks["sentiment"].pk, "name": "mine", "protocol": "openai", "url": chat.url,
            "remote_model": "fake-chat", "secret_env": "local", "timeout_s": "5", "max_concurrency": "2",
            "rate_limit_per_minute": "", "price_per_call": "0", "price_per_1k_prompt_tokens": "0",
            "price_per_1k_completion_tokens": "0", "usage-TOTAL_FORMS": "0", "usage-INITIAL_FORMS": "0"}
    assert client.post("/admin/registry/endpoint/add/", form).status_code == 302
    endpoint = Endpoint.objects.get()
    assert not endpoint_budgets.priced(endpoint) and endpoint.secret_env == "local"
    change = f"/admin/registry/endpoint/{endpoint.pk}/change/"
    assert b'name="price_per_call"' not in client.get(change).content
    moved = client.post(change, {**form, "url": chat.url.replace("http://127.0.0.1", "https://localhost")},
                        follow=True)
    endpoint.refresh_from_db()
    assert not endpoint_budgets.priced(endpoint) and endpoint.secret_env == ""  # prices ignored; move cleared key
    assert "The key &#x27;local&#x27; was cleared" in moved.content.decode()
    client.force_login(superuser)
    assert client.post(change, {**form, "price_per_call": "0.5"}).status_code == 302
    endpoint.refresh_from_db()
    assert str(endpoint.price_per_call) == "0.500000" and endpoint.secret_env == "local"


def test_a_keyed_endpoint_without_a_price_is_not_asked(demo_tasks, chat, researcher):
    """Its calls would count $0 against its budget, on the operator's account."""
    version = endpoints.register_endpoint(demo_tasks["sentiment"], name="free-ride", protocol="openai", url=chat.url,
                                          model="fake-chat", secret_env="local", user=researcher)
    with pytest.raises(endpoints.Conflict, match="has no price yet"):
        endpoints.health_check(version.endpoint, demo_tasks["sentiment"].parsed_config)
    assert chat.requests == []


@pytest.mark.parametrize("raw, problem", [
    ('{"x": {"env": "SECRET_KEY", "hosts": ["api.example.com"]}}', "one of the platform's own secrets"),
    ('{"x": {"env": "PROLIFIC_TOKEN", "hosts": ["api.example.com"]}}', "one of the platform's own secrets"),
    ('{"x": {"env": "AWS_SECRET_ACCESS_KEY", "hosts": ["api.example.com"]}}', "one of the platform's own secrets"),
    ('{"x": {"env": "OPENAI_API_KEY"}}', "exactly 'env' and 'hosts'"),
    ('{"x": {"env": "OPENAI_API_KEY", "hosts": []}}', "list of host names"),
    ('["OPENAI_API_KEY"]', "JSON object"),
    ("not json", "not JSON"),
])
def test_the_key_map_refuses_the_platforms_own_secrets_and_bad_shapes(raw, problem):
    from dynabench import settings as module

    with pytest.raises(ImproperlyConfigured, match=problem):
        module._endpoint_secrets(raw)
    assert module._endpoint_secrets('{"openai": {"env": "OPENAI_API_KEY", "hosts": ["api.openai.com"]}}') == {
        "openai": {"env": "OPENAI_API_KEY", "hosts": ("api.openai.com",)}}
