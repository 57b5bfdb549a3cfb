"""Where ml.endpoints may send a request, from the attacker's side: a researcher who
registers an endpoint picks its URL, so the URL must not reach this server's own
network. Every address is checked after resolution on every connection, and the
checked address is the one connected to; a closed and an open port on a refused
address answer the same; redirects, proxies from the environment and keys sent to
other hosts are refused. The fake model server listens on 127.0.0.1: the default
policy refuses it, a policy naming 127.0.0.1 reaches it."""

import socket

import pytest

from ml import TaskSpec
from ml import endpoints as remote
from ml.endpoints.network import NetworkPolicy, refused_reason
from tests.fake_openai import FakeOpenAI

SENTIMENT = TaskSpec(kind="classification", labels=["negative", "positive"], input_fields=["statement"])
ROW = {"statement": "The film was a delight."}
HTTP_ANYWHERE = NetworkPolicy(https_only=False)  # no allowlist; plain http not refused (as with DEBUG on)
LOCAL = NetworkPolicy(allowed_hosts=("127.0.0.1",))
PUBLIC = "192.0.43.10"  # a public address (IANA's): nothing in these tests is meant to reach it


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def ask(url, network=HTTP_ANYWHERE, **kwargs):
    endpoint = remote.Endpoint(protocol="openai", url=url, model="fake-chat", network=network, timeout=0.5,
                               **kwargs)
    return remote.predict(endpoint, SENTIMENT, [ROW], budget=1.0)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address, reason", [
    ("169.254.169.254", "cloud metadata"), ("fd00:ec2::254", "cloud metadata"), ("168.63.129.16", "cloud metadata"),
    ("100.100.100.200", "cloud metadata"), ("127.0.0.1", "loopback"), ("127.9.9.9", "loopback"), ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:10.0.0.1", "private"), ("10.0.0.1", "private"),
    ("172.16.5.4", "private"), ("192.168.1.1", "private"), ("fd12:3456::1", "private"),
    ("100.64.0.1", "shared (carrier-grade NAT)"), ("169.254.1.1", "link-local"), ("fe80::1%eth0", "link-local"),
    ("224.0.0.251", "multicast"), ("ff02::1", "multicast"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("255.255.255.255", "reserved"), ("240.0.0.1", "reserved"), ("64:ff9b::7f00:1", "translated IPv4 (NAT64)"),
    ("2002:7f00:1::1", "6to4"), ("2001:db8::1", "documentation"),
])
def test_internal_addresses_are_refused(address, reason):
    assert refused_reason(address) == reason


@pytest.mark.parametrize("address", ["8.8.8.8", PUBLIC, "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_are_not(address):
    assert refused_reason(address) is None


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/", "http://[::1]:6379/", "http://10.0.0.1/", "http://127.0.0.1:{port}/",
    "http://127.0.0.2:{port}/", "http://100.64.0.1/", "http://[::ffff:127.0.0.1]:{port}/", "http://0.0.0.0:{port}/",
    "http://[fd00:ec2::254]/", "https://127.0.0.1:{port}/",
    # Other spellings of loopback: names, a bare number, short and hex forms (the resolver reads them).
    "http://localhost:{port}/", "http://2130706433:{port}/", "http://127.1:{port}/", "http://0x7f.0.0.1:{port}/",
])
def test_a_url_to_this_servers_network_is_refused_and_nothing_is_sent(fake, url):
    port = fake.server.server_address[1]
    with pytest.raises(remote.EndpointRefused, match="refused|public address"):
        ask(url.format(port=port))
    assert fake.requests == []


def test_an_open_and_a_closed_port_on_a_refused_address_answer_the_same(fake):
    answers = []
    for port in (fake.server.server_address[1], closed_port()):
        for host in ("127.0.0.1", "localhost"):
            with pytest.raises(remote.EndpointError) as caught:
                ask(f"http://{host}:{port}/")
            answers.append((host, type(caught.value), caught.value.message))
    assert answers[:2] == answers[2:]  # the open port's answers are the closed port's
    assert fake.requests == []


def test_the_checked_address_is_the_one_connected_to(fake, monkeypatch):
    """DNS rebinding: the name resolves to a public address when it is checked and to
    loopback a moment later. The connection goes to the address that was checked (and
    fails: it is not a model server), never to a second answer; a later connection
    resolves again and is checked again."""
    port = fake.server.server_address[1]
    real = socket.getaddrinfo
    answers = []

    def rebinding(host, *args, **kwargs):
        if host != "rebind.example":
            return real(host, *args, **kwargs)
        address = PUBLIC if not answers else "127.0.0.1"
        answers.append(address)
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    connected = []
    real_connect = socket.socket.connect

    def connect(sock, address):
        connected.append(address[0])
        if address[0] == PUBLIC:
            raise ConnectionRefusedError("not reachable from the tests")  # a public host we do not contact
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    with pytest.raises(remote.EndpointError):
        ask(f"http://rebind.example:{port}/")
    assert connected[:1] == [PUBLIC] and "127.0.0.1" not in connected
    assert answers[0] == PUBLIC and len(answers) >= 2  # each connection resolved once, and checked
    assert fake.requests == []


def test_a_streaming_request_goes_through_the_same_checks(fake):
    port = fake.server.server_address[1]
    with HTTP_ANYWHERE.session() as session, pytest.raises(remote.EndpointRefused):
        session.post(f"http://localhost:{port}/v1/chat/completions", json={}, stream=True, timeout=1)
    with LOCAL.session() as session:  # allowed by name, it is reached
        response = session.post(f"{fake.url}/v1/chat/completions", json={"model": "fake-chat", "messages": [
            {"role": "user", "content": "x"}]}, stream=True, timeout=5)
        assert response.status_code == 200 and b"positive" in b"".join(response.iter_content())
    assert len(fake.requests) == 1


def test_a_redirect_is_never_followed(fake):
    fake.redirect_to = "http://169.254.169.254/latest/meta-data/"
    fake.fail("redirect")
    with pytest.raises(remote.EndpointRejected, match="redirect"):
        ask(fake.url, network=LOCAL)
    assert len(fake.requests) == 1
    fake.fail("redirect")
    with LOCAL.session() as session:  # even where a caller asks to follow one
        answer = session.post(f"{fake.url}/v1/chat/completions", json={}, timeout=5, allow_redirects=True)
    assert answer.status_code == 307 and answer.history == [] and len(fake.requests) == 2


def test_plain_http_is_refused_where_https_is_required_except_for_allowed_hosts(fake):
    with pytest.raises(remote.EndpointRefused, match="Plain http"):
        ask(f"http://{PUBLIC}/", network=NetworkPolicy())
    assert ask(fake.url, network=LOCAL)[0]["label"] == "positive"  # 127.0.0.1 is allowed by name
    with pytest.raises(remote.EndpointRefused, match="loopback"):
        ask(fake.url, network=NetworkPolicy(allowed_hosts=("127.0.0.1:1",)))  # another port of it is not


def test_a_proxy_in_the_environment_is_not_used(fake, monkeypatch):
    """A proxy resolves the host itself, past every check: the environment's is ignored."""
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, fake.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    real_connect = socket.socket.connect

    def connect(sock, address):
        if address[0] == PUBLIC:
            raise ConnectionRefusedError("not reachable from the tests")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    with pytest.raises(remote.EndpointUnavailable, match="could not be reached"):
        ask(f"http://{PUBLIC}/")
    assert fake.requests == []  # the proxy (the fake) was never asked


def test_a_key_goes_only_to_the_hosts_it_is_bound_to(fake):
    with pytest.raises(remote.EndpointRefused, match="bound to other hosts"):
        ask(fake.url, network=LOCAL, secret="sk-bound-elsewhere", secret_hosts=("api.example.com",))
    with pytest.raises(remote.EndpointRefused, match="bound to other hosts"):
        ask(fake.url, network=LOCAL, secret="sk-no-hosts")  # bound to none: sent nowhere
    assert fake.requests == []
    ask(fake.url, network=LOCAL, secret="sk-bound-here", secret_hosts=("127.0.0.1",))
    assert fake.requests[-1]["headers"]["Authorization"] == "Bearer sk-bound-here"


def test_an_allowed_name_keeps_its_name_for_the_host_header(fake):
    """The connection goes to the address resolved (each in turn: localhost may answer
    ::1 first, where nothing listens), the request still names the host."""
    port = fake.server.server_address[1]
    assert ask(f"http://localhost:{port}", network=NetworkPolicy(allowed_hosts=("localhost",)))[0]["label"]
    assert fake.requests[-1]["headers"]["Host"] == f"localhost:{port}"
