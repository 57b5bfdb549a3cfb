"""A small Open Inference Protocol (KServe v2) server for tests, serving one of the
platform's own trained models through ``ml.predict``.

MLServer, the reference server, is not on this machine's package registry, so this
follows the protocol's REST spec itself: ``GET /v2/health/ready``, ``GET
/v2/models/{name}`` (metadata: inputs and outputs), ``POST /v2/models/{name}/infer``
taking ``{"inputs": [{"name", "shape", "datatype": "BYTES", "data"}]}`` and answering
``{"model_name", "id", "outputs": [...]}``: ``probabilities`` ``FP32`` ``[n, k]`` for
classification, ``start``/``end`` ``INT64`` ``[n]`` for extractive QA. Errors are
``{"error": "..."}`` with 400 (bad request) or 404 (unknown model).
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import ml


class OIPServer:
    def __init__(self, name: str, ref: ml.ModelRef):
        self.name = name
        self.ref = ref
        self.spec = ml.verify_artifact(ref.path, ref.sha256).metadata["task"]
        self.calls = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def infer(self, body: dict) -> tuple[int, dict]:
        fields = list(self.spec["input_fields"])
        if not isinstance(body, dict) or not isinstance(body.get("inputs"), list):
            return 400, {"error": "'inputs' must be a list of tensors"}
        tensors = {t.get("name"): t for t in body["inputs"] if isinstance(t, dict)}
        if set(tensors) != set(fields):
            return 400, {"error": f"expected input tensors {fields}, got {sorted(tensors)}"}
        sizes = {len(t.get("data") or []) for t in tensors.values()}
        if len(sizes) != 1 or any(t.get("datatype") != "BYTES" or t.get("shape") != [len(t["data"])]
                                  for t in tensors.values()):
            return 400, {"error": "every input must be a BYTES tensor of shape [n] with n values"}
        rows = [{name: tensors[name]["data"][i] for name in fields} for i in range(sizes.pop())]
        try:
            predictions = ml.predict(self.ref, rows)
        except ml.InputError as exc:
            return 400, {"error": str(exc)}
        self.calls += 1
        n = len(rows)
        if self.spec["kind"] == "extractive_qa":
            outputs = [{"name": "start", "shape": [n], "datatype": "INT64", "data": [p["start"] for p in predictions]},
                       {"name": "end", "shape": [n], "datatype": "INT64", "data": [p["end"] for p in predictions]}]
        else:
            labels = self.spec["labels"]
            outputs = [{"name": "probabilities", "shape": [n, len(labels)], "datatype": "FP32",
                        "data": [p["probabilities"][label] for p in predictions for label in labels]}]
        return 200, {"model_name": self.name, "id": body.get("id") or uuid.uuid4().hex, "outputs": outputs}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                if self.path == "/v2/health/ready":
                    return self._send(200, {"ready": True})
                if self.path == f"/v2/models/{server.name}":
                    return self._send(200, {"name": server.name, "platform": "dynabench-test",
                                            "inputs": [{"name": f, "datatype": "BYTES", "shape": [-1]}
                                                       for f in server.spec["input_fields"]]})
                self._send(404, {"error": f"unknown path {self.path}"})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                if self.path != f"/v2/models/{server.name}/infer":
                    return self._send(404, {"error": f"unknown model or path {self.path}"})
                self._send(*server.infer(body))

        return Handler
