"""The `web_search` and `web_extract` handlers: each picks its backend from the run's settings
(`tools.web.backends`) and turns every failure into a result the model reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from agent.common.fetch import FetchError, FetchRefused, fetch
from agent.common.network_policy import NetworkPolicy
from agent.protocols import ToolConfig, ToolContext
from agent.sandboxes.blocking import in_thread
from tools.web.backends import CORPUS, MAX_URLS, extract_backend, search_backend, search_unavailable
from tools.web.corpus_documents import document_content
from tools.web.corpus_index import CorpusError, CorpusIndex, ensure_index
from tools.web.extract import capped
from tools.web.extractors import ExtractionFailed, Extractors, open_extractors
from tools.web.fetch import PAGE_RULES, fetch_session
from tools.web.search_apis import RESULTS, SEARCH_APIS
from tools.web.search_client import SearchFailed, api_session
from tools.web.search_client import search as api_search


async def web_search(args: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
    query = str(args["query"]).strip()
    if not query:
        return {"error": "the query is empty"}
    config = context.config
    backend = search_backend(config)
    try:
        if backend is None:
            return {"error": search_unavailable(config)}
        if backend == CORPUS:
            index = await corpus(context)
            results = await in_thread(index.search, query, RESULTS)
        else:
            session = await context.shared("web.api", api_session)
            key = config.web_keys.get(backend)
            results = await api_search(session, SEARCH_APIS[backend], query, key, config.web_api_url)
    except (SearchFailed, CorpusError) as exc:
        return {"error": str(exc)}
    return {"query": query, "results": results} | ({} if results else {"note": "no results"})


async def web_extract(args: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
    urls = [str(url).strip() for url in args["urls"]]
    if not urls:
        return {"error": "give at least one URL"}
    if len(urls) > MAX_URLS:
        return {"error": f"at most {MAX_URLS} URLs per call (got {len(urls)}): split them over several calls"}
    if extract_backend(context.config) == CORPUS:
        try:
            index = await corpus(context)
        except CorpusError as exc:
            return {"error": str(exc)}
        results = await asyncio.gather(*(in_thread(_from_corpus, index, url) for url in urls))
    else:
        policy = NetworkPolicy.from_allow_list(context.config.allow_hosts)
        session = await context.shared(_fetch_resource(context.config), lambda: fetch_session(policy))
        extractors = await context.shared("web.extractors", open_extractors)
        results = await asyncio.gather(*(_fetched(session, policy, extractors, url) for url in urls))
    return {"results": list(results)}


async def corpus(context: ToolContext) -> CorpusIndex:
    """The worker's index of the run's corpus (built or found on first use)."""
    config = context.config
    return await context.shared(f"web.corpus:{config.web_corpus}", lambda: _open_corpus(config))


@asynccontextmanager
async def _open_corpus(config: ToolConfig) -> AsyncIterator[CorpusIndex]:
    root = Path(str(config.web_corpus))
    yield CorpusIndex(root, await in_thread(ensure_index, root), config.web_corpus_url)


def _fetch_resource(config: ToolConfig) -> str:
    return "web.fetch:" + ",".join(config.allow_hosts)  # one session (and policy) per allow list


async def _fetched(
    session: aiohttp.ClientSession, policy: NetworkPolicy, extractors: Extractors, url: str
) -> dict[str, Any]:
    try:
        page = await fetch(session, policy, url, PAGE_RULES)
    except FetchRefused as refusal:
        return {"url": url, "error": str(refusal)}
    except FetchError as exc:
        return {"url": url, "error": f"{exc} (the browser tool may still open it)"}
    try:
        return await extractors.convert(page)  # in a child process, killed past its time bound
    except ExtractionFailed as exc:
        return {"url": url, "error": str(exc)}


def _from_corpus(index: CorpusIndex, url: str) -> dict[str, Any]:
    path = index.lookup(url)
    if path is None:
        return {"url": url, "error": "not in the offline corpus (web_search gives the URLs it holds)"}
    shown = index.url_of(path, None) if index.base_url else url
    try:
        title, text = document_content(index.root, path, shown)
    except OSError as exc:
        return {"url": url, "error": f"the corpus document {path} cannot be read ({exc.strerror or exc})"}
    return capped(shown, title, text)
