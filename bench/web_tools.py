"""Latency the web tools add, offline: the corpus backend over generated documents and the
extraction of a large page served on 127.0.0.1.

    python bench/web_tools.py [--documents 10000] [--queries 200] [--page_mb 1] [--pages 5]

  index build   the first search's wait: documents read, hashed and indexed into SQLite FTS5
                (later runs of the same corpus reuse the index: `reuse` is their wait)
  query         web_search through the handler (thread hop included), p50 / p95 in ms
  extract       web_extract of a --page_mb page: fetch over loopback + trafilatura to markdown,
                median over --pages calls, the bytes per second that makes, and the CPU time
                (wall times on a shared machine include waiting for a core)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from aiohttp import web

from agent.protocols import ToolConfig
from agent.toolbox.context import SandboxContext
from tools.web.corpus_index import ensure_index
from tools.web.handlers import web_extract, web_search

SYLLABLES = [
    "ka",
    "to",
    "ri",
    "men",
    "sol",
    "va",
    "dor",
    "lu",
    "ne",
    "pra",
    "gi",
    "tan",
    "ob",
    "el",
    "us",
    "fi",
]


def vocabulary(rng: random.Random, size: int = 5000) -> tuple[list[str], list[float]]:
    """Made-up words and Zipf weights (the n-th word is n times rarer than the first), so a
    query word matches a realistic share of the documents rather than all of them."""
    words = list(dict.fromkeys("".join(rng.choices(SYLLABLES, k=rng.randint(2, 4))) for _ in range(size)))
    return words, [1 / rank for rank in range(1, len(words) + 1)]


def make_corpus(root: Path, documents: int, rng: random.Random) -> None:
    words, weights = vocabulary(rng)
    for i in range(documents):
        folder = root / f"part{i // 1000:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        title = " ".join(rng.choices(words, weights, k=3)).title()
        body = " ".join(rng.choices(words, weights, k=rng.randint(80, 250)))
        folder.joinpath(f"doc{i:05d}.md").write_text(f"---\ntitle: {title} {i}\n---\n{body}\n")


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def corpus_figures(root: Path, queries: int, rng: random.Random) -> None:
    started, cpu = time.perf_counter(), time.process_time()
    ensure_index(root)
    built, built_cpu = time.perf_counter() - started, time.process_time() - cpu
    started = time.perf_counter()
    ensure_index(root)
    reuse = time.perf_counter() - started
    context = SandboxContext(None, ToolConfig(web_corpus=str(root)))  # type: ignore[arg-type]
    await web_search({"query": "warm up"}, context)
    samples = []
    words, weights = vocabulary(random.Random(7))
    for _ in range(queries):
        query = " ".join(rng.choices(words, weights, k=rng.randint(1, 4)))
        started = time.perf_counter()
        await web_search({"query": query}, context)
        samples.append((time.perf_counter() - started) * 1000)
    await context.aclose()
    print(f"index build   {built:.2f} s (CPU {built_cpu:.2f} s)   reuse {reuse:.2f} s")
    print(f"query         p50 {percentile(samples, 0.5):.1f} ms   p95 {percentile(samples, 0.95):.1f} ms")


async def extract_figures(page_mb: float, pages: int) -> None:
    paragraph = "<p>" + "The tide rises over the rocks and falls back to the sea. " * 12 + "</p>\n"
    html = "<html><head><title>Big</title></head><body><article>"
    html += paragraph * int(page_mb * 1024 * 1024 / len(paragraph)) + "</article></body></html>"

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html")

    app = web.Application()
    app.router.add_get("/big", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    context = SandboxContext(None, ToolConfig(allow_hosts=("127.0.0.1",)))  # type: ignore[arg-type]
    samples, cpu = [], []
    for _ in range(pages):
        started, cpu_started = time.perf_counter(), time.process_time()
        result = await web_extract({"urls": [f"http://127.0.0.1:{port}/big"]}, context)
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)  # server included: an upper bound
        assert "content" in result["results"][0], result
    await context.aclose()
    await runner.cleanup()
    median = statistics.median(samples)
    size = len(html) / 1e6
    print(
        f"extract       {size:.2f} MB page: median {median * 1000:.0f} ms ({size / median:.1f} MB/s), "
        f"CPU {statistics.median(cpu) * 1000:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--page_mb", type=float, default=1.0)
    parser.add_argument("--pages", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["XDG_CACHE_HOME"] = str(Path(scratch, "cache"))  # a cold index cache
        root = Path(scratch, "corpus")
        make_corpus(root, args.documents, rng)
        print(f"corpus        {args.documents} documents")
        asyncio.run(corpus_figures(root, args.queries, rng))
    asyncio.run(extract_figures(args.page_mb, args.pages))


if __name__ == "__main__":
    main()
