"""The development servers answer a kept-alive connection at once.

A response goes out in two writes, headers then body. With Nagle's algorithm on the
server's socket, the body of every response after the first on a kept-alive
connection waits for the client's delayed ACK (about 40 ms on Linux): the Django
development server (``make run``, the tests' live server) and the fake MTurk set
TCP_NODELAY on the connections they accept."""

import http.client
import socket
from urllib.parse import urlsplit

import pytest


def accepted_sockets(server, monkeypatch) -> list:
    """The sockets ``server`` (a socketserver) accepts from now on."""
    accepted = []
    original = server.finish_request

    def recording(request, client_address):
        accepted.append(request)
        return original(request, client_address)

    monkeypatch.setattr(server, "finish_request", recording)
    return accepted


def nodelay(sock) -> bool:
    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


@pytest.mark.django_db(transaction=True)
def test_the_development_server_turns_nagle_off_on_kept_alive_connections(live_server, monkeypatch):
    accepted = accepted_sockets(live_server.thread.httpd, monkeypatch)
    url = urlsplit(live_server.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        for _ in range(2):  # the second request rides the same connection
            connection.request("GET", "/api/tasks/")
            response = connection.getresponse()
            response.read()
            assert response.status == 200 and response.getheader("Connection", "").lower() != "close"
        assert len(accepted) == 1 and nodelay(accepted[0])
    finally:
        connection.close()


def test_the_fake_mturk_turns_nagle_off_too(fake_mturk, monkeypatch):
    import boto3

    accepted = accepted_sockets(fake_mturk._server, monkeypatch)
    client = boto3.client("mturk", endpoint_url=fake_mturk.endpoint_url, region_name="us-east-1")
    for _ in range(2):
        assert "AvailableBalance" in client.get_account_balance()
    assert len(accepted) == 1 and nodelay(accepted[0])
