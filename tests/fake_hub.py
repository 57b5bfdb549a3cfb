"""A fake Hugging Face Hub: the HTTP endpoints ``huggingface_hub``'s ``create_repo`` and
``upload_folder`` call, answered as the Hub answers them, on a local port.

- ``POST /api/repos/create``: makes a repository (a data set here) for a valid token;
  an existing one is 409, which ``exist_ok`` accepts.
- ``POST /api/validate-yaml``: the README's YAML header must parse to a mapping; a
  data set card's ``configs`` must list ``data_files`` (400 with the Hub's error body).
- ``POST /api/<type>s/<owner>/<name>/preupload/<revision>``: every file uploads as a
  regular blob (the Hub sends large files to LFS; a fake need not model that storage).
- ``POST /api/<type>s/<owner>/<name>/commit/<revision>``: the NDJSON commit, whose file
  lines carry base64 content; the files are kept, by repository, in ``repos``.

Every request needs ``Authorization: Bearer <token>`` with the token it was made with
(401 otherwise, as the Hub answers a bad token).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

REPO_PATH = re.compile(r"^/api/(dataset|model|space)s/([^/]+)/([^/]+)/(preupload|commit)/([^/?]+)")


class FakeHub:
    def __init__(self, token: str):
        self.token = token
        self.repos: dict[str, dict[str, bytes]] = {}  # "datasets/owner/name" -> {path: content}
        self.private: dict[str, bool] = {}
        self.commits: list[dict] = []
        self.requests: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def digests(self, repo: str) -> dict[str, str]:
        return {path: hashlib.sha256(content).hexdigest() for path, content in self.repos[repo].items()}

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self, status: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                return gzip.decompress(data) if self.headers.get("Content-Encoding") == "gzip" else data

            def do_GET(self):
                hub.requests.append(("GET", self.path))
                self._answer(404, {"error": "Not found"})

            def do_POST(self):
                hub.requests.append(("POST", self.path))
                body = self._body()
                if self.headers.get("Authorization") != f"Bearer {hub.token}":
                    self._answer(401, {"error": "Invalid credentials in Authorization header"})
                    return
                if self.path == "/api/repos/create":
                    request = json.loads(body)
                    repo = f"{request.get('type', 'model')}s/{request['organization']}/{request['name']}"
                    if repo in hub.repos:
                        self._answer(409, {"error": "You already created this repo", "url": f"{hub.url}/{repo}"})
                        return
                    hub.repos[repo], hub.private[repo] = {}, request.get("visibility") == "private"
                    self._answer(200, {"url": f"{hub.url}/{repo}", "name": f"{request['organization']}/"
                                                                           f"{request['name']}"})
                    return
                if self.path == "/api/validate-yaml":
                    self._validate(json.loads(body))
                    return
                match = REPO_PATH.match(self.path)
                if not match:
                    self._answer(404, {"error": "Not found"})
                    return
                kind, owner, name, action, _revision = match.groups()
                repo = f"{kind}s/{owner}/{name}"
                if repo not in hub.repos:
                    self._answer(404, {"error": "Repository not found"})
                    return
                if action == "preupload":
                    files = json.loads(body)["files"]
                    self._answer(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                                 for f in files], "commitOid": "0" * 40})
                    return
                lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
                header = next(line["value"] for line in lines if line["key"] == "header")
                for line in lines:
                    if line["key"] == "file":
                        value = line["value"]
                        hub.repos[repo][value["path"]] = base64.b64decode(value["content"])
                oid = hashlib.sha1(body).hexdigest()
                hub.commits.append({"repo": repo, "summary": header.get("summary"), "oid": oid})
                self._answer(200, {"commitUrl": f"{hub.url}/{repo}/commit/{oid}", "commitOid": oid,
                                   "success": True})

            def _validate(self, request: dict):
                content = request.get("content", "")
                match = re.match(r"^---\n(.*?)\n---\n", content, re.S)
                errors = []
                try:
                    header = yaml.safe_load(match.group(1)) if match else None
                except yaml.YAMLError as exc:
                    header, errors = None, [f"YAML: {exc}"]
                if not errors and not isinstance(header, dict):
                    errors.append("The README has no YAML metadata header")
                if not errors and request.get("repoType") == "dataset":
                    for config in header.get("configs", []):
                        if not isinstance(config.get("data_files"), list | str):
                            errors.append(f"configs.{config.get('config_name')}.data_files must be a list")
                if errors:
                    self._answer(400, {"errors": [{"message": e} for e in errors]})
                else:
                    self._answer(200, {"warnings": []})

        return Handler
