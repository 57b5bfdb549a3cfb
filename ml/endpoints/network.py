"""Where a model endpoint may be reached: checked on every connection, no Django.

Every request to an endpoint goes through a session that ``NetworkPolicy.session()``
makes (``transport.post_json`` opens one per call; a streaming call opens the same
kind, so the same checks hold for it). Each connection of such a session:

- resolves the host once, refuses it when any address it resolves to is one this
  server never connects to (``refused_reason``: loopback, private, link-local,
  shared/CGNAT, multicast, reserved, unspecified, documentation, IPv4-mapped or
  -translated forms of those, and cloud-metadata addresses), and then connects to
  that very address: the host name is kept for the ``Host`` header, TLS's SNI and the
  certificate check, and no second lookup happens between the check and the connect
  (no DNS rebinding);
- refuses plain ``http`` when the policy is ``https_only`` (production);
- takes nothing from the environment (no proxy, which would resolve the host itself;
  no ``.netrc`` credentials) and follows no redirect.

Hosts on ``allowed_hosts`` (the operator's ``ENDPOINT_ALLOWED_HOSTS``: ``host`` for any
port, ``host:port`` for one, ``[::1]:8080`` for an IPv6 literal) skip the address check
and may use plain ``http``. A refusal is an ``EndpointRefused`` raised before anything
is sent, with one message whatever the port: an open and a closed port on a refused
address cannot be told apart, since neither is ever connected to.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from .errors import EndpointRefused

DEFAULT_PORTS = {"http": 80, "https": 443}

# IPv4 networks never connected to (IANA's special-purpose address registry).
_V4_REFUSED = [(ipaddress.ip_network(net), reason) for net, reason in [
    ("0.0.0.0/8", "unspecified"), ("10.0.0.0/8", "private"), ("100.64.0.0/10", "shared (carrier-grade NAT)"),
    ("127.0.0.0/8", "loopback"), ("169.254.0.0/16", "link-local"), ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved"), ("192.0.2.0/24", "documentation"), ("192.88.99.0/24", "reserved"),
    ("192.168.0.0/16", "private"), ("198.18.0.0/15", "reserved"), ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"), ("224.0.0.0/4", "multicast"), ("240.0.0.0/4", "reserved"),
]]
# IPv6: only global unicast (2000::/3) is reached, less these special-purpose blocks
# (Teredo and the IETF's assignments, documentation, 6to4, which tunnel to any IPv4).
_V6_GLOBAL = ipaddress.ip_network("2000::/3")
_V6_REFUSED_IN_GLOBAL = [(ipaddress.ip_network(net), reason) for net, reason in [
    ("2001::/23", "reserved"), ("2001:db8::/32", "documentation"), ("2002::/16", "6to4"),
    ("3fff::/20", "documentation"),
]]
_V6_NAT64 = [ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48")]
# Cloud instance metadata services (AWS, ECS, GCP, Azure, OCI, Alibaba); most sit in a
# refused block anyway, Azure's host address does not.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "168.63.129.16", "192.0.0.192", "100.100.100.200", "fd00:ec2::254"))


def refused_reason(address: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why this server never connects to ``address`` ("loopback", "private", ...), or
    None for a public address."""
    ip = ipaddress.ip_address(str(address).split("%", 1)[0])  # an IPv6 zone id says nothing of the address
    if ip in METADATA_ADDRESSES:
        return "cloud metadata"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return refused_reason(ip.ipv4_mapped)
        if ip.is_unspecified:
            return "unspecified"
        if ip.is_loopback:
            return "loopback"
        if any(ip in net for net in _V6_NAT64):
            return "translated IPv4 (NAT64)"
        if ip.is_multicast:
            return "multicast"
        if ip.is_link_local or ip.is_site_local:
            return "link-local"
        if ip in ipaddress.ip_network("fc00::/7"):
            return "private"
        if ip not in _V6_GLOBAL:
            return "reserved"
        for net, reason in _V6_REFUSED_IN_GLOBAL:
            if ip in net:
                return reason
        return None
    for net, reason in _V4_REFUSED:
        if ip in net:
            return reason
    return None


def _normal_host(host: str) -> str:
    host = host.strip().lower().removeprefix("[").removesuffix("]")
    try:
        return str(ipaddress.ip_address(host))  # one spelling per address ("0:0::1" is "::1")
    except ValueError:
        return host


def parse_host(entry: str) -> tuple[str, int | None]:
    """An allowlist or key-binding entry: ``host``, ``host:port``, ``[v6]`` or
    ``[v6]:port`` (a bare IPv6 literal has no port)."""
    entry = entry.strip()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    else:
        host, port = entry, None
    if not host or (port is not None and not port.isdigit()):
        raise ValueError(f"{entry!r} is not a host, host:port or [IPv6]:port")
    return _normal_host(host), int(port) if port is not None else None


def host_and_port(url: str) -> tuple[str, int]:
    """The URL's host (lower case, an IP literal in its one spelling) and port."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise EndpointRefused("The endpoint's URL has no host.")
    try:
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
    except ValueError:
        raise EndpointRefused("The endpoint's URL has a port that is not a number from 0 to 65535.") from None
    return _normal_host(parts.hostname), port


def host_listed(entries, host: str, port: int) -> bool:
    """Whether ``host``:``port`` is one of ``entries`` (a ``host`` entry covers every port)."""
    host = _normal_host(host)
    for entry in entries:
        listed, listed_port = parse_host(entry)
        if listed == host and listed_port in (None, port):
            return True
    return False


@dataclass(frozen=True)
class NetworkPolicy:
    """Where requests to endpoints may go (the default refuses every internal address
    and plain http)."""

    allowed_hosts: tuple[str, ...] = ()
    https_only: bool = True

    def __post_init__(self):
        for entry in self.allowed_hosts:
            parse_host(entry)  # a malformed entry fails here, not at the first call

    def allows(self, host: str, port: int) -> bool:
        return host_listed(self.allowed_hosts, host, port)

    def check_url(self, url: str) -> None:
        """What can be told from the URL alone, before anything is resolved or sent:
        http(s), no credentials, https where required, no refused address literal."""
        parts = urlsplit(url)
        if parts.scheme not in DEFAULT_PORTS:
            raise EndpointRefused("The endpoint's URL must be http or https.")
        if parts.username is not None or parts.password is not None:
            raise EndpointRefused("The endpoint's URL may not hold credentials (user:password@); an endpoint's key "
                                  "comes from the server's key map.")
        host, port = host_and_port(url)
        if self.allows(host, port):
            return
        try:
            reason = refused_reason(host)
        except ValueError:
            reason = None  # a name: resolved and checked when connecting
        if reason:
            raise EndpointRefused(f"The address {host} is refused: it is {reason}, and this server never connects "
                                  "to such addresses (ENDPOINT_ALLOWED_HOSTS lists the exceptions).")
        if parts.scheme == "http" and self.https_only:
            raise EndpointRefused(f"Plain http to {host} is refused on this server: use https (only hosts on "
                                  "ENDPOINT_ALLOWED_HOSTS may be reached over http).")

    def addresses(self, host: str, port: int) -> list[tuple]:
        """``host`` resolved once: ``(family, type, proto, sockaddr)`` of each address,
        every one of them allowed, or ``EndpointRefused``."""
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            found = []
        allowed = self.allows(host, port)
        if not found or (not allowed and any(refused_reason(info[4][0]) for info in found)):
            # One message for a name that does not resolve and one that resolves inward:
            # neither tells what lies behind it.
            raise EndpointRefused(f"The endpoint's host {host} does not resolve to a public address; this server "
                                  "never connects to loopback, private, link-local, shared, multicast, reserved or "
                                  "cloud-metadata addresses (ENDPOINT_ALLOWED_HOSTS lists the exceptions).")
        return [(family, kind, proto, sockaddr) for family, kind, proto, _, sockaddr in found]

    def session(self) -> requests.Session:
        """A ``requests.Session`` whose every connection is checked as above."""
        session = _Session()
        session.trust_env = False  # no proxy (it would resolve the host itself), no .netrc credentials
        adapter = _CheckedAdapter(self)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session

    def connect(self, connection: HTTPConnection) -> socket.socket:
        """A socket for urllib3's ``connection``, opened to an address checked here."""
        plain = not isinstance(connection, HTTPSConnection)
        host, port = connection.host, connection.port
        if plain and self.https_only and not self.allows(host, port):
            raise EndpointRefused(f"Plain http to {host} is refused on this server: use https (only hosts on "
                                  "ENDPOINT_ALLOWED_HOSTS may be reached over http).")
        last: Exception | None = None
        for family, kind, proto, sockaddr in self.addresses(host, port):
            sock = socket.socket(family, kind, proto)
            try:
                for option in connection.socket_options or ():
                    sock.setsockopt(*option)
                if isinstance(connection.timeout, int | float):
                    sock.settimeout(connection.timeout)
                if connection.source_address:
                    sock.bind(connection.source_address)
                sock.connect(sockaddr)  # the address just checked, not the name again
                return sock
            except TimeoutError as exc:
                sock.close()
                last = ConnectTimeoutError(connection, f"Connection to {host} timed out.")
                last.__cause__ = exc
            except OSError as exc:
                sock.close()
                last = NewConnectionError(connection, f"Failed to establish a new connection: {exc}")
        raise last


class _Session(requests.Session):
    def get_redirect_target(self, resp):
        return None  # a redirect is answered as it is, never followed, even where a caller asks to follow


@functools.lru_cache(maxsize=32)
def _pool_classes(policy: NetworkPolicy) -> dict:
    """urllib3 connection pools whose connections ``policy`` opens."""

    class CheckedHTTPConnection(HTTPConnection):
        def _new_conn(self):  # urllib3's one place where a connection's socket is made
            return policy.connect(self)

    class CheckedHTTPSConnection(HTTPSConnection):
        def _new_conn(self):
            return policy.connect(self)

    class CheckedHTTPPool(HTTPConnectionPool):
        ConnectionCls = CheckedHTTPConnection

    class CheckedHTTPSPool(HTTPSConnectionPool):
        ConnectionCls = CheckedHTTPSConnection

    return {"http": CheckedHTTPPool, "https": CheckedHTTPSPool}


class _CheckedAdapter(HTTPAdapter):
    """requests' adapter, its pools opening connections through the policy."""

    def __init__(self, policy: NetworkPolicy):
        self.policy = policy
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _pool_classes(self.policy)

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        raise EndpointRefused("Endpoints are not reached through a proxy.")
