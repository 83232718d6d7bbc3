"""The offline corpus's SQLite FTS5 index: built once per content version, searched with bm25.

The index lives in the cache directory (`$XDG_CACHE_HOME/agent-batch-runner/web-corpus/`,
else `~/.cache/...`), named by the folder's path and a hash of every document's path and
bytes: a changed, added or removed document makes a new index (the old one is deleted), an
unchanged corpus reuses it across runs (found by the files' sizes and times when those did not
change, so a reuse reads no document). Workers that start together build it once: the first
takes a file lock and builds into a temporary file that it renames; the others wait on the lock
and find it built. Blocking (SQLite, file reads): callers run it in a thread.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import sqlite3
import urllib.parse
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from tools.web.backends import corpus_files
from tools.web.corpus_documents import read_document

FORMAT = "1"  # bumped when the index's tables change: old indexes are then rebuilt
TITLE_WEIGHT = 10.0  # a query word in the title counts ten times one in the body (bm25)
MAX_QUERY_WORDS = 32
_WORD = re.compile(r"\w+", re.UNICODE)


class CorpusError(Exception):
    """The corpus cannot be indexed or read (a message for the operator or the model)."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base, "agent-batch-runner", "web-corpus")


def content_hash(root: Path, files: Sequence[Path]) -> str:
    digest = hashlib.sha256(FORMAT.encode())
    for path in files:
        data = path.read_bytes()
        digest.update(f"\0{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def stat_key(root: Path, files: Sequence[Path]) -> str:
    """What the files' names, sizes and modification times say, without reading them."""
    digest = hashlib.sha256(FORMAT.encode())
    for path in files:
        status = path.stat()
        digest.update(
            f"\0{path.relative_to(root).as_posix()}\0{status.st_size}\0{status.st_mtime_ns}".encode()
        )
    return digest.hexdigest()[:24]


def ensure_index(root: Path) -> Path:
    """The index file of the corpus at `root` as it is now, built if missing. The content hash
    names it; a note of the files' stat key finds it again without reading every file."""
    files = corpus_files(root)
    if not files:
        raise CorpusError(f"{root}: no .md, .html or .txt documents")
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    stem = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    note, quick = folder / f"{stem}.stat", stat_key(root, files)
    known = note.read_text().split() if note.exists() else []
    if len(known) == 2 and known[0] == quick and (folder / known[1]).exists():
        return folder / known[1]
    index = folder / f"{stem}-{content_hash(root, files)[:24]}.sqlite"
    if not index.exists():
        with (folder / f"{stem}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not index.exists():
                _build_in_place(root, files, index, stem)
    partial = note.with_name(f"{note.name}.{os.getpid()}.partial")
    partial.write_text(f"{quick} {index.name}\n")
    os.replace(partial, note)
    return index


def _build_in_place(root: Path, files: Sequence[Path], index: Path, stem: str) -> None:
    """Build into a temporary file renamed at the end; remove the corpus's older indexes."""
    partial = index.with_name(f"{index.name}.{os.getpid()}.partial")
    build(root, files, partial)
    os.replace(partial, index)
    for old in index.parent.glob(f"{stem}-*.sqlite"):
        if old != index:
            old.unlink(missing_ok=True)


def build(root: Path, files: Sequence[Path], target: Path) -> None:
    target.unlink(missing_ok=True)
    with closing(sqlite3.connect(target)) as db, db:
        db.executescript(
            "CREATE TABLE docs(id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, url TEXT, title TEXT);"
            "CREATE INDEX docs_url ON docs(url);"
            "CREATE VIRTUAL TABLE fts USING fts5(title, body, "
            "tokenize='porter unicode61 remove_diacritics 2');"
        )
        for number, path in enumerate(files, 1):
            try:
                doc = read_document(root, path)
            except OSError as exc:
                raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from None
            db.execute("INSERT INTO docs VALUES (?, ?, ?, ?)", (number, doc.path, doc.url, doc.title))
            db.execute("INSERT INTO fts(rowid, title, body) VALUES (?, ?, ?)", (number, doc.title, doc.text))


def match_expression(query: str) -> str | None:
    """The FTS5 expression of a free-text query: its words, each quoted, any of them (bm25 ranks
    documents with more of them, and rarer ones, first). None when it has no words."""
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(query)))[:MAX_QUERY_WORDS]
    return " OR ".join(f'"{word}"' for word in words) or None


class CorpusIndex:
    """Searches and lookups in one built index (a read-only connection per call)."""

    def __init__(self, root: Path, index: Path, base_url: str | None) -> None:
        self.root, self.index = root, index
        self.base_url = base_url.rstrip("/") + "/" if base_url else None

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.index}?mode=ro", uri=True)

    def search(self, query: str, limit: int) -> list[dict[str, str]]:
        expression = match_expression(query)
        if expression is None:
            return []
        sql = (
            "SELECT d.path, d.url, d.title, snippet(fts, 1, '', '', ' … ', 32) FROM fts "
            "JOIN docs d ON d.id = fts.rowid WHERE fts MATCH ? "
            f"ORDER BY bm25(fts, {TITLE_WEIGHT}, 1.0), d.path LIMIT ?"
        )
        with closing(self._connect()) as db:
            rows = db.execute(sql, (expression, limit)).fetchall()
        return [
            {"title": title, "url": self.url_of(path, url), "snippet": snippet}
            for path, url, title, snippet in rows
        ]

    def url_of(self, path: str, declared: str | None) -> str:
        """Where the model is told a document is: where it is served, else its declared URL,
        else `corpus://<path>`."""
        if self.base_url:
            return self.base_url + urllib.parse.quote(path)
        return declared or f"corpus://{urllib.parse.quote(path)}"

    def lookup(self, url: str) -> str | None:
        """The path of the document at `url` (any form `url_of` gives), None if not in the corpus."""
        candidates = [url]
        bare = url.split("#", 1)[0]
        for prefix in ("corpus://", self.base_url):
            if prefix and bare.startswith(prefix):
                path = urllib.parse.unquote(bare[len(prefix) :].split("?", 1)[0])
                candidates += [path, path.rstrip("/") + "/index.html" if path else "index.html"]
        with closing(self._connect()) as db:
            for candidate in candidates:
                row = db.execute(
                    "SELECT path FROM docs WHERE path = ? OR url = ?", (candidate, candidate)
                ).fetchone()
                if row:
                    return str(row[0])
        return None
