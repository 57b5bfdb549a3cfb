"""A protocol-level fake of an OpenAI-compatible chat completions server, for tests.

A real HTTP server on a free local port (``ThreadingHTTPServer`` in a thread) that
follows the public API reference's shapes: ``POST /v1/chat/completions`` takes
``{"model", "messages": [{"role", "content"}], "temperature", ...}`` and answers
``{"id", "object": "chat.completion", "created", "model", "choices": [{"index",
"message": {"role": "assistant", "content"}, "finish_reason"}], "usage":
{"prompt_tokens", "completion_tokens", "total_tokens"}}``. Errors are JSON bodies
``{"error": {"message", "type", "param", "code"}}``: 401 for a wrong key, 400 for a
malformed request, 404 for an unknown model, 429 with ``Retry-After``, 500/503.

Faults are queued per request (``fail(...)``): ``429``, ``500``, ``503``,
``timeout`` (answers only after ``slow_seconds``), ``drop`` (closes the connection
without answering), ``not_json`` (200 with an HTML body), ``no_choices``,
``redirect`` (307 to ``redirect_to``, as a proxy in front of a moved server
answers); ``ok`` (or any other word) answers normally, to place a fault later in the
queue. The answer itself comes from ``answer(user_message) -> str`` (default:
"positive"). ``report_usage=False`` leaves ``usage`` out of the answer, as some
compatible servers do (it is optional in their answers).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """A client that gave up (its timeout) while a slow answer was on its way is
        what the ``timeout`` fault is for: not an error of the server."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


class FakeOpenAI:
    def __init__(self, *, api_key: str | None = None, models: tuple[str, ...] = ("fake-chat",),
                 answer=None, slow_seconds: float = 5.0, report_usage: bool = True):
        self.api_key = api_key
        self.report_usage = report_usage
        self.redirect_to = "http://127.0.0.1:9/"
        self.models = set(models)
        self.answer = answer or (lambda text: "positive")
        self.slow_seconds = slow_seconds
        self.faults: deque[str] = deque()
        self.requests: list[dict] = []  # {"body", "headers"} of each request received
        self._lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def fail(self, *faults: str) -> None:
        """Answer the next requests with these faults, one each, in order."""
        with self._lock:
            self.faults.extend(faults)

    def start(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as a real server: no 40 ms wait on a kept-alive connection

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body, headers: dict | None = None, raw: bytes | None = None):
                data = raw if raw is not None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html" if raw is not None else "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status, message, type_, code=None, headers=None):
                self._send(status, {"error": {"message": message, "type": type_, "param": None, "code": code}},
                           headers)

            def do_POST(self):  # noqa: N802 (the stdlib's name)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                with fake._lock:
                    fault = fake.faults.popleft() if fake.faults else None
                try:
                    body = json.loads(raw or b"null")
                except ValueError:
                    body = None
                with fake._lock:
                    fake.requests.append({"body": body, "headers": dict(self.headers), "path": self.path})
                if self.path != "/v1/chat/completions":
                    return self._error(404, f"Unknown path {self.path}", "invalid_request_error")
                if fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                    given = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                    return self._error(401, f"Incorrect API key provided: {given}.", "invalid_request_error",
                                       "invalid_api_key")
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault == "timeout":
                    time.sleep(fake.slow_seconds)
                if fault == "429":
                    return self._error(429, "Rate limit reached for requests", "requests", "rate_limit_exceeded",
                                       {"Retry-After": "0"})
                if fault in ("500", "503"):
                    return self._error(int(fault), "The server had an error while processing your request.",
                                       "server_error")
                if fault == "not_json":
                    return self._send(200, None, raw=b"<html>gateway</html>")
                if fault == "redirect":
                    return self._send(307, {"error": {"message": "moved"}}, {"Location": fake.redirect_to})
                if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
                    return self._error(400, "'messages' is a required property", "invalid_request_error")
                model = body.get("model")
                if model not in fake.models:
                    return self._error(404, f"The model `{model}` does not exist", "invalid_request_error",
                                       "model_not_found")
                if fault == "no_choices":
                    return self._send(200, {"id": "x", "object": "chat.completion", "choices": []})
                prompt = "\n".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
                user = next((m["content"] for m in reversed(body["messages"]) if m.get("role") == "user"), "")
                content = fake.answer(user)
                usage = {"prompt_tokens": _tokens(prompt), "completion_tokens": _tokens(content)}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                answer = {
                    "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
                    "model": model, "system_fingerprint": "fp_fake",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "logprobs": None, "finish_reason": "stop"}]}
                if fake.report_usage:
                    answer["usage"] = usage
                self._send(200, answer)

        return Handler
