"""A TEST DOUBLE of the Hugging Face Hub on 127.0.0.1 for reading a dataset repository: the
part of the Hub HTTP API that `huggingface_hub` and `datasets` (streaming) use to resolve a
revision, list a commit's files and read them by byte ranges. The tests never reach the Hub:
point `HF_ENDPOINT` at `HubReadDouble.url`.

Routes, as the clients call them (for dataset repositories):
- `GET /api/datasets/<org>/<name>/revision/<rev>` (or without `/revision/<rev>`: main) →
  `{id, sha, siblings}`; `rev` a branch, a tag or a commit; 404 with `X-Error-Code:
  RepositoryNotFound` / `RevisionNotFound`;
- `GET /api/datasets/<org>/<name>/tree/<rev>[/<dir>]` → the entries under `dir` (files with
  `size` and `oid`, directories);
- `POST /api/datasets/<org>/<name>/paths-info/<rev>` → `[]`;
- `HEAD` / `GET /datasets/<org>/<name>/resolve/<rev>/<path>` → the file (`Range: bytes=a-b`
  honoured, 206), with `X-Repo-Commit` and `ETag`; 404 `X-Error-Code: EntryNotFound`.
Every request is recorded (`requests`: method and path) for the tests to check which commit
was read.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha → path → bytes
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag → sha


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
        return None

    def send(self, status: int, body: bytes, headers: dict[str, str], *, head: bool = False) -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def send_json(self, body: Any, status: int = 200, error_code: str | None = None) -> None:
        headers = {"Content-Type": "application/json"} | ({"X-Error-Code": error_code} if error_code else {})
        self.send(status, json.dumps(body).encode(), headers)

    def do_GET(self) -> None:
        self.route()

    def do_HEAD(self) -> None:
        self.route(head=True)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.route()

    def route(self, *, head: bool = False) -> None:
        path = unquote(urlparse(self.path).path)
        self.server.requests.append(f"{self.command} {path}")
        for repo_id, repo in self.server.repos.items():
            if path == f"/api/datasets/{repo_id}":  # no revision named: main
                return self.revision(repo, "main")
            for prefix, handler in (
                (f"/api/datasets/{repo_id}/revision/", self.revision),
                (f"/api/datasets/{repo_id}/tree/", self.tree),
                (f"/api/datasets/{repo_id}/paths-info/", lambda *_: self.send_json([])),
                (f"/datasets/{repo_id}/resolve/", lambda r, rest: self.resolve(r, rest, head)),
            ):
                if path.startswith(prefix):
                    return handler(repo, path.removeprefix(prefix))
        self.send_json({"error": "Repository not found"}, 404, "RepositoryNotFound")

    def commit_of(self, repo: Repo, rev: str) -> str | None:
        sha = repo.refs.get(rev, rev)
        if sha not in repo.commits:
            self.send_json({"error": f"Invalid rev id: {rev}"}, 404, "RevisionNotFound")
            return None
        return sha

    def revision(self, repo: Repo, rev: str) -> None:
        if (sha := self.commit_of(repo, rev)) is not None:
            files = [{"rfilename": name} for name in repo.commits[sha]]
            self.send_json({"id": self.server.name_of(repo), "sha": sha, "siblings": files})

    def tree(self, repo: Repo, rest: str) -> None:
        rev, _, directory = rest.partition("/")
        if (sha := self.commit_of(repo, rev)) is None:
            return
        prefix = f"{directory}/" if directory else ""
        entries: dict[str, dict[str, Any]] = {}
        for name, data in repo.commits[sha].items():
            if name.startswith(prefix):
                child = name[len(prefix) :].split("/")[0]
                if "/" in name[len(prefix) :]:
                    entries[child] = {"type": "directory", "path": prefix + child, "oid": "0" * 40, "size": 0}
                else:
                    oid = hashlib.sha1(data).hexdigest()
                    entries[child] = {"type": "file", "path": name, "size": len(data), "oid": oid}
        self.send_json(list(entries.values()))

    def resolve(self, repo: Repo, rest: str, head: bool) -> None:
        rev, _, name = rest.partition("/")
        if (sha := self.commit_of(repo, rev)) is None:
            return
        data = repo.commits[sha].get(name)
        if data is None:
            return self.send(404, b"", {"X-Error-Code": "EntryNotFound"}, head=head)
        headers = {
            "X-Repo-Commit": sha,
            "ETag": f'"{hashlib.sha1(data).hexdigest()}"',
            "Accept-Ranges": "bytes",
        }
        ranged = self.headers.get("Range")
        if not ranged:
            return self.send(200, data, headers, head=head)
        first, _, last = ranged.removeprefix("bytes=").partition("-")
        start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
        headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        self.send(206, data[start : end + 1], headers, head=head)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.repos: dict[str, Repo] = {}
        self.requests: list[str] = []

    def name_of(self, repo: Repo) -> str:
        return next(name for name, known in self.repos.items() if known is repo)


class HubReadDouble:
    """`with HubReadDouble() as hub:` a started double; `hub.commit(repo_id, sha, files, *refs)`."""

    def __init__(self) -> None:
        self._server = _Server()
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def requests(self) -> list[str]:
        return self._server.requests

    def commit(self, repo_id: str, sha: str, files: dict[str, bytes], *refs: str) -> None:
        repo = self._server.repos.setdefault(repo_id, Repo())
        repo.commits[sha] = dict(files)
        repo.refs.update(dict.fromkeys(refs, sha))

    def __enter__(self) -> HubReadDouble:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
