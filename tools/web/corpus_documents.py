"""The documents of an offline corpus: a folder of .md, .html and .txt files.

A document's title is its front matter's `title:` (Markdown, text), its `<title>` (HTML), else
its first heading or line, else its file name; its declared URL is the front matter's `url:` or
the HTML's `<link rel="canonical">`. What is indexed is the text without markup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lxml.html
import yaml
from lxml.etree import ParserError

from tools.web.extract import html_text, html_to_markdown

HTML_SUFFIXES = (".html", ".htm")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # 10x faster front matter when libyaml is there
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Document:
    path: str  # relative to the corpus folder, with /
    title: str
    url: str | None  # declared by the document itself
    text: str  # indexed: the text without markup


def read_document(root: Path, path: Path) -> Document:
    relative = path.relative_to(root).as_posix()
    raw = path.read_bytes()
    if path.suffix.lower() in HTML_SUFFIXES:
        title, url = _html_header(raw)
        return Document(relative, title or path.stem, url, html_text(raw))
    meta, body = split_front_matter(raw.decode("utf-8", errors="replace"))
    title = str(meta.get("title") or _first_heading(body, path.suffix.lower()) or path.stem)
    url = meta.get("url")
    return Document(relative, title, url if isinstance(url, str) else None, _plain(body))


def document_content(root: Path, relative: str, url: str) -> tuple[str, str]:
    """(title, content as markdown) of one document, for `web_extract` (blocking)."""
    path = root / relative
    raw = path.read_bytes()
    if path.suffix.lower() in HTML_SUFFIXES:
        title, text = html_to_markdown(raw, url)
        return title or _html_header(raw)[0] or path.stem, text
    meta, body = split_front_matter(raw.decode("utf-8", errors="replace"))
    return str(meta.get("title") or _first_heading(body, path.suffix.lower()) or path.stem), body


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, body): a leading `---` YAML block, else nothing."""
    if not text.startswith("---"):
        return {}, text
    end = text.find("\n---", 3)
    if end < 0:
        return {}, text
    try:
        meta = yaml.load(text[3:end], Loader=_LOADER)  # a safe loader
    except yaml.YAMLError:
        return {}, text
    body = text[end + 4 :].split("\n", 1)[1] if "\n" in text[end + 4 :] else ""
    return (meta if isinstance(meta, dict) else {}), body


def _first_heading(body: str, suffix: str) -> str | None:
    if suffix != ".txt":
        match = _HEADING.search(body)
        if match:
            return match.group(1)
    return next((line.strip() for line in body.splitlines() if line.strip()), None)


def _html_header(raw: bytes) -> tuple[str, str | None]:
    try:
        root = lxml.html.fromstring(raw)
    except (ParserError, ValueError):
        return "", None
    title = " ".join(root.findtext(".//title", "").split()) or " ".join(root.findtext(".//h1", "").split())
    canonical = root.xpath("//link[@rel='canonical']/@href")
    url = str(canonical[0]) if canonical and str(canonical[0]).startswith(("http://", "https://")) else None
    return title, url


def _plain(markdown: str) -> str:
    """Markdown without its most common markup, for indexing and snippets."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    text = re.sub(r"^[#>\-*+\s]+|[*_`]+", " ", text, flags=re.MULTILINE)
    return " ".join(text.split())
