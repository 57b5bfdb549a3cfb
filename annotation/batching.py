"""Dynamic batching: requests that arrive close together share one forward pass.

A :class:`Batcher` owns one thread, the process's model thread. Callers
``submit(key, rows)`` and get a Future for their own rows' results. The thread
takes the oldest request, then every request already waiting with the same key
(the same model or ensemble), and waits up to ``window`` seconds for more,
until ``max_rows`` rows; then it calls ``run(key, rows)`` once and hands each
request its slice of the answer. Under load, requests pile up while a pass runs
and the next pass takes them all; alone, a request waits at most ``window``.

A failing pass is retried request by request, so a bad input fails only its own
request. A request whose caller gave up (its Future cancelled) is skipped.
``call(fn)`` runs any other model work (loading a model) on the same thread, in
turn: every torch call of the process stays on one thread, one OpenMP team (see
``annotation.runtime``).

No Django here: the embedded web process and the Celery inference worker (its
``threads`` pool: each task thread submits and waits) use it alike.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class _Request:
    key: Hashable | None  # None: a plain call, never batched
    rows: Sequence[Any]
    future: Future = field(default_factory=Future)
    fn: Callable[[], Any] | None = None


@dataclass
class BatchStats:
    batches: int = 0
    requests: int = 0
    rows: int = 0
    largest: int = 0
    retried_alone: int = 0


class Batcher:
    def __init__(self, run: Callable[[Hashable, list], list], *, window: float = 0.002, max_rows: int = 32,
                 name: str = "dynabench-batcher"):
        if window < 0 or max_rows < 1:
            raise ValueError("window must be >= 0 and max_rows >= 1")
        self._run = run
        self.window = window
        self.max_rows = max_rows
        self.name = name
        self.stats = BatchStats()
        self._waiting: deque[_Request] = deque()
        lock = threading.Lock()
        self._ready = threading.Condition(lock)  # the model thread waits here for work
        self._idle = threading.Condition(lock)  # others wait here for the thread to be idle
        self._busy = False
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    # -- callers ---------------------------------------------------------------------

    def submit(self, key: Hashable, rows: Sequence[Any]) -> Future:
        """Queue ``rows`` for ``run(key, ...)``; the Future gives their results, in order."""
        return self._put(_Request(key, list(rows)))

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn()`` on the batcher's thread, in turn with the batches."""
        return self._put(_Request(None, (), fn=fn))

    def _put(self, request: _Request) -> Future:
        with self._ready:
            self._ensure_thread()
            self._waiting.append(request)
            self._ready.notify()
        return request.future

    def wait_until_idle(self, timeout: float) -> bool:
        """Block until nothing is queued or running on the thread (True), or for at most
        ``timeout`` seconds (False). Lower-priority model work (an explanation) calls it
        before each of its passes, so it gives way to the predictions."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._busy and not self._waiting, timeout)

    def _ensure_thread(self) -> None:
        # A forked child inherits the deque but not the thread: it starts its own.
        if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
            if self._pid != os.getpid():
                self._waiting.clear()
                self._busy = False
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    # -- the thread ------------------------------------------------------------------

    def _take(self) -> list[_Request]:
        """The next batch: the oldest request and those that may join it."""
        with self._ready:
            self._busy = False
            if not self._waiting:
                self._idle.notify_all()
            while not self._waiting:
                self._ready.wait()
            self._busy = True
            first = self._waiting.popleft()
            if first.key is None:
                return [first]
            batch, rows = [first], len(first.rows)
            deadline = time.monotonic() + self.window
            while rows < self.max_rows:
                joined = False
                for request in list(self._waiting):
                    if request.key == first.key and rows + len(request.rows) <= self.max_rows:
                        self._waiting.remove(request)
                        batch.append(request)
                        rows += len(request.rows)
                        joined = True
                        if rows >= self.max_rows:
                            break
                if rows >= self.max_rows:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if not joined:
                    self._ready.wait(left)
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take()
            live = [r for r in batch if r.future.set_running_or_notify_cancel()]
            if not live:
                continue
            if live[0].key is None:
                self._settle(live[0], live[0].fn)
                continue
            self._execute(live)

    @staticmethod
    def _settle(request: _Request, compute: Callable[[], Any]) -> None:
        try:
            request.future.set_result(compute())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, never lost
            request.future.set_exception(exc)

    def _checked(self, key: Hashable, rows: list) -> list:
        results = self._run(key, rows)
        if len(results) != len(rows):
            raise RuntimeError(f"the pass gave {len(results)} results for {len(rows)} rows")
        return results

    def _execute(self, batch: list[_Request]) -> None:
        key = batch[0].key
        rows = [row for request in batch for row in request.rows]
        self.stats.batches += 1
        self.stats.requests += len(batch)
        self.stats.rows += len(rows)
        self.stats.largest = max(self.stats.largest, len(rows))
        try:
            results = self._checked(key, rows)
        except BaseException as exc:  # noqa: BLE001
            if len(batch) == 1:
                batch[0].future.set_exception(exc)
                return
            # One bad input must not fail its neighbours: each request alone.
            log.info("a batch of %d requests failed (%s); retrying them one by one", len(batch), exc)
            self.stats.retried_alone += len(batch)
            for request in batch:
                self._settle(request, lambda request=request: self._checked(key, list(request.rows)))
            return
        begin = 0
        for request in batch:
            end = begin + len(request.rows)
            request.future.set_result(results[begin:end])
            begin = end
