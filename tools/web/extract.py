"""A fetched page or a corpus document as the model reads it: the main content as markdown
(trafilatura; links made absolute), plain text served as it is, capped at PAGE_CHARS per page
with a note saying what was cut. Blocking (lxml parsing): callers run it in a thread."""

from __future__ import annotations

from typing import Any

import lxml.html
import trafilatura
from lxml.etree import ParserError
from trafilatura.metadata import extract_metadata
from trafilatura.settings import use_config

from tools.web.fetch import MAX_BYTES, Page

PAGE_CHARS = 5_000  # per page, as the reference caps its pages
TITLE_CHARS = 300
_NOT_PAGES = ("#", "javascript:", "mailto:", "tel:", "data:")
MAX_LEFT_OUT = 40  # content links trafilatura left out, listed after the text
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/x-ndjson")
# trafilatura falls back to a bare text dump (no headings, no links) below 250 extracted
# characters: short pages are common (a corpus article). Its signal-based timeout cannot work
# in the threads extraction runs in.
_CONFIG = use_config()
_CONFIG.set("DEFAULT", "MIN_EXTRACTED_SIZE", "10")
_CONFIG.set("DEFAULT", "EXTRACTION_TIMEOUT", "0")


def page_result(page: Page) -> dict[str, Any]:
    """The tool result of one fetched page: {url, title, content, chars[, note]} or {url, error}."""
    kind = page.content_type
    unknown = kind in ("", "application/octet-stream") and b"\0" not in page.body[:4096]  # sniffed
    if kind in HTML_TYPES or (unknown and page.body.lstrip()[:1] == b"<"):
        title, text = html_to_markdown(page.body, page.url)
    elif kind.startswith("text/") or kind in TEXT_TYPES or unknown:
        title, text = "", page.body.decode(page.charset or "utf-8", errors="replace")
    elif kind == "application/pdf":
        return {
            "url": page.url,
            "error": "a PDF: web_extract converts HTML and text only; try the browser tool",
        }
    else:
        return {"url": page.url, "error": f"content type {kind or 'unknown'} is not text or HTML"}
    note = (
        f"the page is larger than {MAX_BYTES // 1024 // 1024} MiB: only its start was read"
        if page.truncated
        else None
    )
    return capped(page.url, title, text, note)


def html_to_markdown(html: bytes | str, url: str | None) -> tuple[str, str]:
    """(title, main content as markdown) of an HTML document; the whole text when trafilatura
    finds no main content."""
    tree = trafilatura.load_html(html)
    if tree is None:
        return "", html_text(html)
    if url and url.startswith(("http://", "https://")):
        tree.make_links_absolute(url, resolve_base_href=True, handle_failures="ignore")
    links = _content_links(tree)  # before extraction, which prunes the tree it is given
    metadata = extract_metadata(tree)
    title = (metadata.title if metadata is not None else None) or ""
    text = trafilatura.extract(
        tree, output_format="markdown", include_links=True, include_tables=True, config=_CONFIG
    )
    text = text or html_text(html)
    return title, text + _left_out(links, text)


def _content_links(tree: Any) -> list[tuple[str, str]]:
    """(label, href) of the links in the page's main content: its <main>, <article> or
    role=main, else its body without navigation, header, footer and asides."""
    regions = tree.xpath("//main|//*[@role='main']|//article")
    links: list[tuple[str, str]] = []
    for anchor in (regions[0] if regions else tree).iter("a"):
        if not regions and anchor.xpath("ancestor::nav|ancestor::header|ancestor::footer|ancestor::aside"):
            continue
        href, label = (anchor.get("href") or "").strip(), " ".join(anchor.text_content().split())
        if label and href and not href.lower().startswith(_NOT_PAGES):
            links.append((label[:200], href))
    return links


def _left_out(links: list[tuple[str, str]], text: str) -> str:
    """The content links `text` does not hold, as a markdown list. trafilatura drops a block
    made mostly of links as boilerplate, and a list of links is how a page says "pick one"
    (an index, a table of contents): the model needs them to go on."""
    missing = {href: label for label, href in reversed(links) if f"({href})" not in text}
    if not missing:
        return ""
    items = [f"- [{missing.pop(href)}]({href})" for _, href in links if href in missing]
    shown = items[:MAX_LEFT_OUT]
    more = f"\n- … and {len(items) - len(shown)} more" if len(items) > len(shown) else ""
    return "\n\nLinks in the page's content:\n" + "\n".join(shown) + more


def html_text(html: bytes | str) -> str:
    """The visible text of an HTML document (scripts and styles dropped), cheap: for indexing."""
    try:
        root = lxml.html.fromstring(html)
    except (ParserError, ValueError):
        return ""
    for element in root.xpath("//script|//style|//noscript|//template"):
        element.drop_tree()
    return " ".join(root.text_content().split())


def capped(url: str, title: str, text: str, note: str | None = None) -> dict[str, Any]:
    """The result of one page, its content cut at PAGE_CHARS (at a paragraph end if one is near)."""
    text = text.strip()
    title = title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…"
    result: dict[str, Any] = {"url": url, "title": title, "content": text, "chars": len(text)}
    notes = [note] if note else []
    if len(text) > PAGE_CHARS:
        end = text.rfind("\n\n", int(PAGE_CHARS * 0.8), PAGE_CHARS)
        result["content"] = text[: end if end > 0 else PAGE_CHARS].rstrip()
        notes.append(f"cut to the first {len(result['content']):,} of {len(text):,} characters")
    if notes:
        result["note"] = "; ".join(notes)
    return result
