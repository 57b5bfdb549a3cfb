"""An endpoint's address, from the attacker's side: a researcher registers URLs into this
server's own network (cloud metadata, Redis on loopback, the private network) and reads
the health check's answers to map it. Addresses are refused when registered (a literal)
and when connected to (a name, checked after resolution), unless the operator allows
the host; the health check says the same for an open and a closed port and never
repeats what an endpoint answered; with DEBUG off plain http goes only to allowed hosts.
(The address rules themselves: tests/ml/test_endpoint_network.py.)"""

import io
import socket

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from registry.models import Endpoint, ModelVersion
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.django_db

INTERNAL = ["http://169.254.169.254/latest/meta-data/iam/", "http://[::1]:6379/", "http://10.0.0.1/",
            "http://127.0.0.1:{port}/", "http://100.64.0.1/", "http://[::ffff:127.0.0.1]:{port}/",
            "https://169.254.169.254/", "https://[fd00:ec2::254]/", "https://0.0.0.0:{port}/"]


@pytest.fixture
def chat():
    """A model server on loopback, which no setting here allows."""
    with FakeOpenAI() as server:
        yield server


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def register(client, name, url):
    return client.post("/api/tasks/sentiment/endpoints/", {"name": name, "protocol": "openai", "url": url,
                                                           "model": "fake-chat"}, format="json")


@pytest.mark.parametrize("url", INTERNAL)
def test_registering_an_internal_address_is_refused_by_the_api_the_admin_and_the_command(
        demo_tasks, client_for, client, researcher, chat, url):
    url = url.format(port=chat.server.server_address[1])
    refused = register(client_for(researcher), "probe", url)
    assert refused.status_code == 400 and "is refused" in refused.json()["errors"]["url"][0]
    client.force_login(researcher)
    page = client.post("/admin/registry/endpoint/add/", {
        "task": demo_tasks["sentiment"].pk, "name": "probe", "protocol": "openai", "url": url,
        "remote_model": "fake-chat", "secret_env": "", "timeout_s": "5", "max_concurrency": "2",
        "rate_limit_per_minute": "", "usage-TOTAL_FORMS": "0", "usage-INITIAL_FORMS": "0"})
    assert page.status_code == 200 and b"is refused" in page.content
    with pytest.raises(CommandError, match="--url: The address .* is refused"):
        call_command("register_endpoint", "--task", "sentiment", "--name", "probe", "--protocol", "openai",
                     "--url", url, stdout=io.StringIO())
    assert not Endpoint.objects.exists() and chat.requests == []


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_name_that_resolves_inward_is_refused_when_asked_and_ports_cannot_be_told_apart(
        demo_tasks, client_for, researcher, chat, settings, scheme):
    """``localhost`` passes registration (a name is resolved when connecting); the health
    check then refuses it before connecting, with one answer for the open port (the fake
    model server) and a closed one: nothing tells which ports listen."""
    settings.DEBUG = True  # a development checkout, where plain http is registered too
    owner = client_for(researcher)
    answers = []
    for name, port in (("open", chat.server.server_address[1]), ("closed", closed_port())):
        created = register(owner, name, f"{scheme}://localhost:{port}/")
        assert created.status_code == 201, created.content
        checked = owner.post(f"/api/models/{created.json()['id']}/health-check/")
        assert checked.status_code == 409
        answers.append(checked.json()["detail"].replace(name, "NAME"))
    assert answers[0] == answers[1] and "does not resolve to a public address" in answers[0]
    assert chat.requests == []


def test_rows_with_internal_addresses_from_before_are_refused_when_asked(demo_tasks, client_for, researcher, chat):
    """A literal address stored before these rules (or through another path) is checked
    again on every connection."""
    task = demo_tasks["sentiment"]
    owner = client_for(researcher)
    answers = []
    for port in (chat.server.server_address[1], closed_port()):
        version = ModelVersion.objects.create(task=task, name=f"old-{port}", artifact_path="", sha256="")
        Endpoint.objects.create(model_version=version, protocol="openai", url=f"http://127.0.0.1:{port}",
                                remote_model="fake-chat")
        checked = owner.post(f"/api/models/{version.pk}/health-check/")
        assert checked.status_code == 409
        answers.append(checked.json()["detail"].replace(str(port), "PORT").replace(version.name, "NAME"))
    assert answers[0] == answers[1] and chat.requests == []


def test_an_allowed_host_is_reached_and_an_endpoints_own_words_are_never_repeated(
        demo_tasks, client_for, researcher, chat, settings):
    settings.ENDPOINT_ALLOWED_HOSTS = ["127.0.0.1"]
    owner = client_for(researcher)
    created = register(owner, "allowed", chat.url)
    assert created.status_code == 201, created.content
    model = created.json()["id"]
    assert owner.post(f"/api/models/{model}/health-check/").status_code == 200
    chat.api_key = "sk-expected"  # the fake's 401 and 404 bodies carry text of their own
    refused = owner.post(f"/api/models/{model}/health-check/")
    detail = refused.json()["detail"]
    assert refused.status_code == 409 and "refused the key (HTTP 401)" in detail
    assert "Incorrect API key" not in detail and "invalid_api_key" not in detail
    chat.api_key = None
    chat.answer = lambda text: "<html>admin panel: root password is hunter2</html>"  # read, never repeated
    unreadable = owner.post(f"/api/models/{model}/health-check/").json()["detail"]
    assert "not in the task's answer format" in unreadable and "hunter2" not in unreadable


def test_with_debug_off_plain_http_goes_only_to_allowed_hosts(demo_tasks, client_for, researcher, chat, settings):
    settings.DEBUG = False
    owner = client_for(researcher)
    refused = register(owner, "plain", "http://models.example.org/v1")
    assert refused.status_code == 400 and "Plain http to models.example.org is refused" in \
        refused.json()["errors"]["url"][0]
    assert register(owner, "tls", "https://models.example.org/v1").status_code == 201
    settings.ENDPOINT_ALLOWED_HOSTS = ["models.lab.internal"]
    assert register(owner, "lab", "http://models.lab.internal:8000/v1").status_code == 201
    settings.DEBUG = True  # a development checkout: plain http to a public host is accepted
    assert register(owner, "dev", "http://models.example.org/v1").status_code == 201
