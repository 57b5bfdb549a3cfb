"""What the crowd's fakes share: a real HTTP server on 127.0.0.1 (a free port), served
from a daemon thread, with its handler reaching the fake as ``self.server.fake``.
``start()``/``stop()``, or ``with Fake() as fake:``; ``base_url`` is its address."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LocalService:
    handler: type[BaseHTTPRequestHandler]
    thread_name = "fake-service"
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def start(self):
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler)
        self._server.daemon_threads = True
        self._server.fake = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"
