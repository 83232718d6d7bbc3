"""The offline corpus backend: documents of every kind indexed once with SQLite FTS5 (cached
by content, rebuilt when a file changes, built once when workers start together), bm25-ranked
search results, and web_extract serving documents by their corpus, declared or served URL."""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from agent.protocols import ToolConfig
from agent.toolbox.context import SandboxContext
from tools.web.backends import corpus_files
from tools.web.corpus_index import ensure_index
from tools.web.handlers import web_extract, web_search

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "data" / "corpus"


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "agent-batch-runner" / "web-corpus"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "sea").mkdir(parents=True)
    (root / "sea" / "kelp.md").write_text(
        "---\ntitle: Kelp forests\nurl: https://shore.example/kelp\n---\n# Kelp forests\n\n"
        "Kelp forests grow in cold, clear coastal water. Sea otters eat urchins that graze kelp.\n"
    )
    (root / "sea" / "otters.html").write_text(
        "<html><head><title>Sea otters</title><link rel='canonical' href='https://shore.example/otters'>"
        "</head><body><nav>menu</nav><article><h1>Sea otters</h1>"
        "<p>Sea otters float on their backs and crack shellfish on stones. "
        "See <a href='../sea/kelp.md'>kelp</a>."
        "</p></article></body></html>"
    )
    (root / "notes.txt").write_text("Field notes\n\nOtters were seen near the harbour twice this week.\n")
    (root / "long.md").write_text("# Long\n\n" + "\n\n".join("Tides rise and fall. " * 20 for _ in range(30)))
    (root / ".hidden.md").write_text("# Hidden otters otters otters\n")
    return root


def call(tool: Any, args: dict[str, Any], config: ToolConfig) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        context = SandboxContext(None, config)  # type: ignore[arg-type]
        try:
            result: dict[str, Any] = await tool(args, context)
            return result
        finally:
            await context.aclose()

    return asyncio.run(run())


def test_search_ranks_by_bm25_with_titles_first_across_md_html_and_txt(corpus: Path) -> None:
    config = ToolConfig(web_corpus=str(corpus))
    results = call(web_search, {"query": "sea otters"}, config)["results"]
    titles = [r["title"] for r in results]
    assert titles[0] == "Sea otters"  # both words, in the title
    assert set(titles) == {"Sea otters", "Kelp forests", "Field notes"}  # .hidden.md never indexed
    kelp = next(r for r in results if r["title"] == "Kelp forests")
    assert kelp["url"] == "https://shore.example/kelp"  # declared in the front matter
    assert next(r for r in results if r["title"] == "Field notes")["url"] == "corpus://notes.txt"
    assert results[0]["url"] == "https://shore.example/otters"  # the HTML's canonical link
    assert "otters" in results[0]["snippet"].lower()
    assert call(web_search, {"query": "volcano"}, config) == {
        "query": "volcano",
        "results": [],
        "note": "no results",
    }
    assert call(web_search, {"query": "!!! ???"}, config)["results"] == []  # no words: nothing matches


def test_search_results_link_to_where_the_corpus_is_served(corpus: Path) -> None:
    config = ToolConfig(web_corpus=str(corpus), web_corpus_url="http://127.0.0.1:8000/docs")
    [first, *_] = call(web_search, {"query": "sea otters"}, config)["results"]
    assert first["url"] == "http://127.0.0.1:8000/docs/sea/otters.html"
    [page] = call(web_extract, {"urls": [first["url"]]}, config)["results"]
    assert page["title"] == "Sea otters" and "crack shellfish" in page["content"]
    assert "[kelp](http://127.0.0.1:8000/docs/sea/kelp.md)" in page["content"]  # links stay in the corpus


def test_extract_serves_documents_by_corpus_and_declared_url_without_network(corpus: Path) -> None:
    config = ToolConfig(web_corpus=str(corpus))
    kelp, notes, long, unknown = call(
        web_extract,
        {
            "urls": [
                "https://shore.example/kelp",
                "corpus://notes.txt",
                "corpus://long.md",
                "https://example.com/",
            ]
        },
        config,
    )["results"]
    assert kelp["title"] == "Kelp forests" and "Sea otters eat urchins" in kelp["content"]
    assert "title:" not in kelp["content"]  # front matter is not content
    assert notes["title"] == "Field notes" and "harbour" in notes["content"]
    assert "cut to the first" in long["note"] and len(long["content"]) <= 5000
    assert "not in the offline corpus" in unknown["error"]


def test_the_index_is_reused_until_a_document_changes_then_rebuilt(corpus: Path, cache: Path) -> None:
    first = ensure_index(corpus)
    built = first.stat().st_mtime_ns
    assert ensure_index(corpus) == first and first.stat().st_mtime_ns == built
    (cache / next(cache.glob("*.stat")).name).unlink()  # without the note: found by content
    assert ensure_index(corpus) == first and first.stat().st_mtime_ns == built
    (corpus / "notes.txt").write_text("Field notes\n\nA whale breached offshore.\n")
    second = ensure_index(corpus)
    assert second != first and not first.exists()  # the stale index is removed
    (corpus / "new.md").write_text("# New\n")
    added = ensure_index(corpus)
    (corpus / "new.md").unlink()
    assert added != second and ensure_index(corpus) not in (added, first)
    second = ensure_index(corpus)
    assert [p.name for p in cache.glob("*.sqlite")] == [second.name]
    results = call(web_search, {"query": "whale"}, ToolConfig(web_corpus=str(corpus)))["results"]
    assert [r["title"] for r in results] == ["Field notes"]


def _build(root: str, cache: str, queue: Any) -> None:
    import os

    os.environ["XDG_CACHE_HOME"] = cache
    queue.put(str(ensure_index(Path(root))))


def test_workers_starting_together_build_the_index_once(corpus: Path, tmp_path: Path, cache: Path) -> None:
    context = multiprocessing.get_context("fork")  # fork: no re-import per worker
    queue = context.Queue()
    workers = [
        context.Process(target=_build, args=(str(corpus), str(tmp_path / "cache"), queue)) for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    paths = {queue.get(timeout=60) for _ in workers}
    for worker in workers:
        worker.join(30)
    assert len(paths) == 1
    assert [p.name for p in cache.glob("*.sqlite")] == [Path(paths.pop()).name]
    assert not list(cache.glob("*.partial"))


def test_the_shipped_corpus_answers_the_example_questions() -> None:
    config = ToolConfig(web_corpus=str(SHIPPED))
    expected = {
        "how do plants turn light into chemical energy": "Photosynthesis",
        "binary search overflow": "Binary search",
        "when did Gutenberg print with movable type": "The printing press",
        "Saturn rings ice": "Saturn — Northwind Observatory",
    }
    for query, title in expected.items():
        assert call(web_search, {"query": query}, config)["results"][0]["title"] == title, query
    assert len(corpus_files(SHIPPED)) >= 40


PLANETS = ("Mercury", "Venus", "Mars", "Jupiter", "Saturn")


def test_the_shipped_planets_page_keeps_its_list_of_planet_links() -> None:
    # trafilatura drops a block made mostly of links as boilerplate: the page's "pick one" list
    config = ToolConfig(web_corpus=str(SHIPPED))
    [page] = call(web_extract, {"urls": ["corpus://site/planets.html"]}, config)["results"]
    assert "Pick one" in page["content"]
    for planet in PLANETS:
        assert f"[{planet}](planets/{planet.lower()}.html)" in page["content"], page["content"]
    assert "[Telescopes]" not in page["content"]  # the site's navigation stays out


def test_a_link_to_a_file_outside_the_folder_is_not_a_document(corpus: Path, tmp_path: Path) -> None:
    # A linked folder was skipped (rglob does not follow one), a linked file was served.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Private notes\n")
    (corpus / "leak.md").symlink_to(outside / "secret.md")
    (corpus / "linked").symlink_to(outside, target_is_directory=True)
    (corpus / "again.md").symlink_to(corpus / "notes.txt")  # inside the folder: still its own
    names = {path.relative_to(corpus).as_posix() for path in corpus_files(corpus)}
    assert "leak.md" not in names and not any(name.startswith("linked/") for name in names)
    assert {"again.md", "notes.txt", "sea/kelp.md"} <= names
