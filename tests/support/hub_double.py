"""A TEST DOUBLE of the Hugging Face Hub on 127.0.0.1: the part of the Hub HTTP API that
`huggingface_hub` uses to create a dataset repository and commit files to it (the Hub cannot be
reached from the tests). Point `HF_ENDPOINT` at `HubDouble.url`.

Routes, as huggingface_hub calls them:
- `POST /api/repos/create` `{name, organization, type, visibility}` (older clients: `private`)
  → `{url}`; 409 when it exists; recorded with `private` as a bool;
- `POST /api/validate-yaml` `{content, repoType}` → `{errors, warnings}` (the card's YAML header
  must parse);
- `POST /api/datasets/<org>/<name>/preupload/<revision>` `{files: [{path, sample, size}]}` →
  `{files: [{path, uploadMode: "regular", shouldIgnore: false}]}`: every file goes inline in the
  commit (the real Hub sends large ones to LFS/Xet storage first);
- `POST /api/datasets/<org>/<name>/commit/<revision>`, an NDJSON body of a `header` line and one
  `file` line per file (base64) → `{commitUrl, commitOid}`.
Every request needs `Authorization: Bearer <token>` (401 otherwise). What arrives is recorded:
the repositories, each commit's summary and files (decoded), and any request no route knows.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml


@dataclass
class Commit:
    repo_id: str
    revision: str
    summary: str
    files: dict[str, bytes]


@dataclass
class HubState:
    token: str
    repos: dict[str, dict[str, Any]] = field(default_factory=dict)  # repo id → create request
    commits: list[Commit] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
        return None

    def reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        state = self.server.state
        authorization = self.headers.get("Authorization") or ""
        state.authorizations.append(authorization)
        if authorization != f"Bearer {state.token}":
            self.reply(401, {"error": "Invalid credentials in Authorization header"})
            return
        path = self.path.split("?")[0]
        parts = path.strip("/").split("/")
        if path == "/api/repos/create":
            self.create(json.loads(body))
        elif path == "/api/validate-yaml":
            self.validate(json.loads(body))
        elif parts[:2] == ["api", "datasets"] and len(parts) == 6 and parts[4] == "preupload":
            files = json.loads(body)["files"]
            modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
            self.reply(200, {"files": modes})
        elif parts[:2] == ["api", "datasets"] and len(parts) == 6 and parts[4] == "commit":
            self.commit(f"{parts[2]}/{parts[3]}", parts[5], body)
        else:
            state.unknown.append(f"POST {self.path}")
            self.reply(404, {"error": "not a route of the Hub double"})

    def do_GET(self) -> None:
        self.server.state.unknown.append(f"GET {self.path}")
        self.reply(404, {"error": "not a route of the Hub double"})

    def create(self, request: dict[str, Any]) -> None:
        repo_id = f"{request.get('organization')}/{request['name']}"
        url = f"{self.server.url}/datasets/{repo_id}"
        if repo_id in self.server.state.repos:
            self.reply(409, {"error": "You already created this dataset repo", "url": url})
            return
        private = request.get("visibility", "private" if request.get("private") else "public") == "private"
        self.server.state.repos[repo_id] = {**request, "private": private}
        self.reply(200, {"url": url})

    def validate(self, request: dict[str, Any]) -> None:
        content = request["content"]
        try:
            header = yaml.safe_load(content.split("---\n")[1]) if content.startswith("---\n") else None
        except yaml.YAMLError as exc:
            self.reply(400, {"errors": [{"message": str(exc)}]})
            return
        ok = isinstance(header, dict)
        self.reply(
            200 if ok else 400, {"errors": [] if ok else [{"message": "no YAML header"}], "warnings": []}
        )

    def commit(self, repo_id: str, revision: str, body: bytes) -> None:
        if repo_id not in self.server.state.repos:
            self.reply(404, {"error": "Repository not found"})
            return
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        header = next(line["value"] for line in lines if line["key"] == "header")
        files = {
            line["value"]["path"]: base64.b64decode(line["value"]["content"])
            for line in lines
            if line["key"] == "file"
        }
        self.server.state.commits.append(Commit(repo_id, revision, header["summary"], files))
        oid = hashlib.sha1(body).hexdigest()
        self.reply(200, {"commitUrl": f"{self.server.url}/datasets/{repo_id}/commit/{oid}", "commitOid": oid})


class _Server(ThreadingHTTPServer):
    state: HubState
    url: str


class HubDouble:
    """The double, serving on a free loopback port while in a `with` block."""

    def __init__(self, token: str) -> None:
        self.state = HubState(token)
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.state = self.state
        self.url = self.server.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
