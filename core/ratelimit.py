"""Failure counters on the shared cache: sign-in lockout and the sign-up limit.

A ``Limiter`` counts events per identity (an account name, an address) in a
fixed window: once ``limit`` events fall in the window, ``retry_after`` says how
many seconds remain. Counts go to the default cache, which is Redis in service
mode (shared by every web process) and per-process memory in embedded mode.
Counting is atomic (``cache.add`` + ``cache.incr``). If the cache is down the
limiter lets the request through and logs it: the lockout is defence in depth,
and an outage must not lock everyone out.

``client_ip`` is the client's address: ``REMOTE_ADDR``, or, behind
``NUM_PROXIES`` trusted proxies, the address they saw. A client's own
``X-Forwarded-For`` is never trusted unless ``NUM_PROXIES`` is set.

Every per-address limit (sign-in, sign-up, HIT arrivals, the API throttles of
anonymous clients) counts by ``address_key``: an IPv6 address by its /64 network,
as the same-person check does. One machine, one home line or one cloud server is
usually given a whole /64, so stepping through its addresses must not buy fresh
counts.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import time
import unicodedata
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from rest_framework import throttling
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

log = logging.getLogger(__name__)


def page_wait(request) -> int | None:
    """The API's default throttles (``anon``/``user`` rates, the same counters) applied
    to an HTML page that computes as much as an API call (the leaderboard): the seconds
    to wait, or None when the request may go on."""
    for throttle_class in api_settings.DEFAULT_THROTTLE_CLASSES:
        throttle = throttle_class()
        if not throttle.allow_request(request, None):
            return max(1, math.ceil(throttle.wait() or 1))
    return None


def client_ip(request) -> str:
    """The client's address (DRF's ``get_ident`` with ``NUM_PROXIES``)."""
    return BaseThrottle().get_ident(request) or "unknown"


def address_key(address: str) -> str:
    """What names one client in a per-address count: an IPv4 address as it is, an IPv6
    address by its /64 network, an IPv4-mapped IPv6 address as its IPv4 address. Text
    that is no address is kept as it is (it still counts, as itself)."""
    try:
        ip = ipaddress.ip_address((address or "").strip())
    except ValueError:
        return address or "unknown"
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if ip.version == 6:
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


def client_address(request) -> str:
    """The key of the client's per-address counts (``address_key`` of ``client_ip``)."""
    return address_key(client_ip(request))


class _ByAddressKey:
    """A DRF throttle that counts anonymous clients by ``address_key``."""

    def get_ident(self, request):
        return address_key(super().get_ident(request))


class AnonRateThrottle(_ByAddressKey, throttling.AnonRateThrottle):
    pass


class UserRateThrottle(_ByAddressKey, throttling.UserRateThrottle):
    pass


class ScopedRateThrottle(_ByAddressKey, throttling.ScopedRateThrottle):
    pass


@dataclass(frozen=True)
class Limiter:
    scope: str
    limit: int
    window: int  # seconds

    def _keys(self, identity: str) -> tuple[str, str]:
        digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"dynabench:limit:{self.scope}:{digest}:n", f"dynabench:limit:{self.scope}:{digest}:t"

    def retry_after(self, identity: str) -> int | None:
        """Seconds until ``identity`` may try again, or None if it may now."""
        count_key, start_key = self._keys(identity)
        try:
            values = cache.get_many([count_key, start_key])
        except Exception:
            log.warning("rate-limit cache unavailable; not limiting %s", self.scope, exc_info=True)
            return None
        if values.get(count_key, 0) < self.limit:
            return None
        now = int(time.time())
        return max(1, int(values.get(start_key, now)) + self.window - now)

    def hit(self, identity: str) -> int:
        """Count one event for ``identity``; returns the count in the current window."""
        count_key, start_key = self._keys(identity)
        try:
            cache.add(start_key, int(time.time()), self.window)
            cache.add(count_key, 0, self.window)
            try:
                return cache.incr(count_key)
            except ValueError:  # expired between add and incr
                cache.set(count_key, 1, self.window)
                return 1
        except Exception:
            log.warning("rate-limit cache unavailable; %s not counted", self.scope, exc_info=True)
            return 0

    def take(self, identity: str) -> int | None:
        """Count one event for ``identity`` and say whether it was allowed: None if it was
        within the limit, else the seconds to wait. One atomic count, not a check and
        then a count: twenty requests at once make at most ``limit`` allowed."""
        if self.hit(identity) <= self.limit:
            return None
        return self.retry_after(identity) or 1

    def give_back(self, identity: str) -> None:
        """Uncount one event ``take`` counted (a sign-in try that was no failure)."""
        count_key, _ = self._keys(identity)
        try:
            cache.decr(count_key)
        except ValueError:  # the window ended meanwhile: nothing left to give back
            pass
        except Exception:
            log.warning("rate-limit cache unavailable; %s not given back", self.scope, exc_info=True)

    def reset(self, identity: str) -> None:
        try:
            cache.delete_many(list(self._keys(identity)))
        except Exception:
            log.warning("rate-limit cache unavailable; %s not reset", self.scope, exc_info=True)


def login_by_account() -> Limiter:
    """Failures per account *and* address: a stranger who knows a username locks it out
    only for their own address, never for its owner elsewhere."""
    return Limiter("login-account-address", settings.LOGIN_FAILURES_PER_ACCOUNT, settings.LOGIN_FAILURE_WINDOW)


def login_by_address() -> Limiter:
    return Limiter("login-address", settings.LOGIN_FAILURES_PER_ADDRESS, settings.LOGIN_FAILURE_WINDOW)


def signup_by_address() -> Limiter:
    return Limiter("signup-address", settings.SIGNUPS_PER_ADDRESS, settings.SIGNUP_WINDOW)


def normalise_username(username) -> str:
    """The account a sign-in attempt is for, as Django's forms see it (NFKC: a
    full-width or mathematical-bold "ａｄｍｉｎ" is "admin") and case-insensitive, so
    look-alike spellings share one failure count."""
    return unicodedata.normalize("NFKC", str(username or "")[:150]).strip().casefold()


def _account_at(request, username) -> str:
    return f"{normalise_username(username)}\x00{client_address(request)}"


def login_attempt(request, username) -> int | None:
    """Count one sign-in try on this account from this address, and from this address on
    any account, *before* the password is checked: None when it may be checked, else the
    seconds to wait. Each count is one atomic step (``Limiter.take``), so twenty tries sent
    at once get the limit's worth of password checks, not twenty. A try that turns out no
    failure is given back (``login_succeeded``, ``login_not_checked``)."""
    waits = [login_by_account().take(_account_at(request, username)),
             login_by_address().take(client_address(request))]
    waits = [w for w in waits if w]
    return max(waits) if waits else None


def login_not_checked(request, username) -> None:
    """The try counted by ``login_attempt`` checked no password (a malformed request)."""
    login_by_account().give_back(_account_at(request, username))
    login_by_address().give_back(client_address(request))


def login_succeeded(request, username) -> None:
    """A right password: the account's count from this address starts again, and the
    try is given back to the address's count."""
    login_by_account().reset(_account_at(request, username))
    login_by_address().give_back(client_address(request))
