"""Which backend serves `web_search` and `web_extract` with a run's settings, and why a tool
cannot run (the reason names the key, flag or folder that enables it).

`web_search`: `--web_backend=auto` takes the corpus when `--web_corpus` is set, else the first
search API whose key is set, in the reference's order (Firecrawl, Tavily, Exa; a self-hosted
Firecrawl needs only its URL). `web_extract` fetches pages itself (no key), or serves the corpus.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from agent.common.secrets import SEARCH_API_KEYS
from agent.protocols import ToolConfig

API_BACKENDS = tuple(SEARCH_API_KEYS)  # firecrawl, tavily, exa: the auto order
CORPUS = "corpus"
FIRECRAWL_URL_VARIABLE = "FIRECRAWL_API_URL"  # a self-hosted Firecrawl (no key needed)
MAX_URLS = 5  # per web_extract call, as in the reference
CORPUS_SUFFIXES = (".md", ".markdown", ".txt", ".html", ".htm")


def search_backend(config: ToolConfig) -> str | None:
    """The backend `web_search` uses with `config`, None when none can run."""
    if config.web_backend == CORPUS or (config.web_backend == "auto" and config.web_corpus):
        return CORPUS if config.web_corpus else None
    wanted = API_BACKENDS if config.web_backend == "auto" else (config.web_backend,)
    return next((name for name in wanted if _keyed(name, config)), None)


def needs_corpus(web_backend: str) -> bool:
    """Whether `--web_backend` names the corpus, which serves only with `--web_corpus`."""
    return web_backend == CORPUS


def extract_backend(config: ToolConfig) -> str:
    """`corpus` (served from the folder, no network) or `fetch` (pages fetched directly)."""
    return CORPUS if search_backend(config) == CORPUS else "fetch"


def _keyed(name: str, config: ToolConfig) -> bool:
    if name == "firecrawl" and config.web_api_url:
        return True  # self-hosted: FIRECRAWL_API_URL or --web_api_url, the key is optional
    return bool(config.web_keys.get(name))


def search_unavailable(config: ToolConfig) -> str | None:
    """Why `web_search` cannot run with `config` (None: it can)."""
    if search_backend(config) is not None:
        return None
    if config.web_backend == CORPUS:
        return "--web_backend=corpus needs --web_corpus=DIR (a folder of .md/.html/.txt documents)"
    if config.web_backend in SEARCH_API_KEYS:
        variable = SEARCH_API_KEYS[config.web_backend]
        extra = (
            f" (or {FIRECRAWL_URL_VARIABLE} for a self-hosted one)"
            if config.web_backend == "firecrawl"
            else ""
        )
        return f"--web_backend={config.web_backend} needs {variable}{extra}"
    keys = ", ".join(SEARCH_API_KEYS.values())
    return f"no web search backend: set one of {keys} (or {FIRECRAWL_URL_VARIABLE}), or pass --web_corpus=DIR"


def web_keys(environ: Mapping[str, str]) -> dict[str, str]:
    """Backend -> key, from the secret variables the process started with."""
    return {name: environ[variable] for name, variable in SEARCH_API_KEYS.items() if environ.get(variable)}


def corpus_files(root: Path) -> list[Path]:
    """The documents of the corpus folder `root`, sorted; hidden files and folders are skipped,
    and so is a link to a file outside the folder (as a linked folder is: rglob does not
    follow one), so web_extract serves the folder's own files only."""
    top = root.resolve()
    return sorted(
        path
        for path in root.rglob("*")
        if path.suffix.lower() in CORPUS_SUFFIXES
        and path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(root).parts)
        and path.resolve().is_relative_to(top)
    )
