"""The HTTP load client: one timed keep-alive connection, connections per thread,
and the open loop (Poisson arrivals, each served on a free thread)."""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor


class Client:
    """One keep-alive connection; every request is timed end to end (send -> body read)."""

    def __init__(self, port: int, headers: dict, timeout: float = 60.0):
        self.port, self.headers, self.timeout = port, headers, timeout
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body=None) -> tuple[int, dict | None, float]:
        """(status, JSON answer or None, seconds); a connection error closes the
        connection (the next request opens a new one) and is raised."""
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", **self.headers}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        started = time.perf_counter()
        try:
            self.conn.request(method, path, body=payload, headers=headers)
            response = self.conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        elapsed = time.perf_counter() - started
        if response.getheader("Connection", "").lower() == "close":
            self.close()
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = {"raw": raw[:300].decode(errors="replace")}
        return response.status, data, elapsed

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Pool:
    """Keep-alive connections shared by whichever thread needs one (one request each):
    a thread's first request opens its connection, with the next token in turn."""

    def __init__(self, port: int, tokens: list[str], timeout: float):
        self.port, self.tokens, self.timeout = port, tokens, timeout
        self.local = threading.local()
        self.counter = 0
        self.lock = threading.Lock()

    def client(self) -> Client:
        if getattr(self.local, "client", None) is None:
            with self.lock:
                token = self.tokens[self.counter % len(self.tokens)]
                self.counter += 1
            self.local.client = Client(
                self.port, {"X-Dynabench-Token": token}, timeout=self.timeout
            )
        return self.local.client


def poisson_arrivals(
    rate: float, duration: float, seed: int, share: float = 0.0
) -> Iterator[tuple[float, bool]]:
    """Arrivals of a Poisson process at ``rate`` a second within ``duration`` seconds:
    (offset in seconds, flag), the flag true for a share ``share`` of them at random.
    The same seed gives the same arrivals."""
    rng = random.Random(seed)
    at = 0.0
    while True:
        at += rng.expovariate(rate)
        if at > duration:
            return
        yield at, rng.random() < share


def open_loop(
    arrivals: Iterable[tuple[float, bool]],
    handle: Callable[[int, bool], object],
    workers: int = 256,
) -> tuple[int, float]:
    """At each arrival's offset from now, ``handle(i, flag)`` on a free pool thread
    (up to ``workers`` at once), so a slow answer never delays the next arrival.
    Returns (arrivals, wall seconds until the last one was handled)."""
    started = time.perf_counter()
    count = 0
    with ThreadPoolExecutor(max_workers=workers) as executor:
        for offset, flag in arrivals:
            delay = started + offset - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            executor.submit(handle, count, flag)
            count += 1
    return count, time.perf_counter() - started
