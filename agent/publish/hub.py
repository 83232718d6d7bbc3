"""Pushing a run's exports to a Hugging Face Hub dataset repository, with its dataset card.

One commit holds every exported file (under `data/`) and the generated README.md, so the
repository never shows a half-pushed run. The repository is created when missing (private
unless the operator says otherwise) and left as it is when it exists. The token is the one
`huggingface_hub` would use: HF_TOKEN (or HUGGING_FACE_HUB_TOKEN) as the process started with
it (`agent.common.secrets` took it out of the environment so no sandboxed command can read
it), else the `hf auth login` token file. It goes to the Hub in a header and nowhere else;
any error text is redacted of it before it is shown. The Hub address is huggingface_hub's
(HF_ENDPOINT when set).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import CommitOperationAdd, HfApi, get_token, set_client_factory
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils._http import default_client_factory

from agent.common.redaction import Redactor
from agent.common.secrets import started_secrets
from agent.errors import AgentError, ConfigError
from agent.publish.card import DATA_DIR, card_text
from agent.store.run_config_file import read_statistics

__all__ = ["HubError", "PushReport", "hub_token", "push_run"]

_TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's own error base: huggingface_hub moved from requests (an OSError) to
    httpx and then httpx2, whose errors are not OSErrors; whichever is installed counts."""
    found: list[type[BaseException]] = [HfHubHTTPError, OSError, ValueError]
    for module in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(module).HTTPError)
        except ImportError:
            continue
    return tuple(found)


class HubError(AgentError):
    """The Hub refused or could not be reached; the run directory is untouched (exit 1)."""


@dataclass(frozen=True)
class PushReport:
    repo_url: str
    commit_url: str
    files: tuple[str, ...]  # paths in the repository


def hub_token() -> str:
    """The token for the Hub; ConfigError when there is none."""
    started = started_secrets().environ
    token = next((started[name] for name in _TOKEN_VARIABLES if started.get(name)), None) or get_token()
    if not token:
        raise ConfigError("--push_to_hub needs a Hugging Face token: set HF_TOKEN or run `hf auth login`")
    return token


def _operations(files: Mapping[str, Path], card: str) -> list[CommitOperationAdd]:
    adds = [CommitOperationAdd(f"{DATA_DIR}/{path.name}", str(path)) for path in files.values()]
    return [*adds, CommitOperationAdd("README.md", card.encode("utf-8"))]


HUB_TIMEOUT = 60.0  # seconds without progress on one request (huggingface_hub waits forever)


def _bounded_client() -> Any:
    """huggingface_hub's own client, with a timeout: a Hub that accepts and never answers is
    then one line and exit 1, not a hang."""
    client = default_client_factory()
    client.timeout = HUB_TIMEOUT
    return client


def push_run(
    run_dir: Path, repo_id: str, files: Mapping[str, Path], entries: int, *, private: bool, license_id: str
) -> PushReport:
    """Create `repo_id` (a dataset) if needed and commit the exported `files` (format → path)
    with their card in one commit."""
    token = hub_token()
    names = {name: path.name for name, path in files.items()}
    card = card_text(repo_id, read_statistics(run_dir), names, entries, license_id)
    set_client_factory(_bounded_client)
    api = HfApi(token=token)
    operations = _operations(files, card)
    try:
        repo = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        commit = api.create_commit(
            repo_id,
            operations,
            commit_message=f"Add {entries} agent trajectories from run {run_dir.name}",
            repo_type="dataset",
        )
    except _transport_errors() as exc:
        message = Redactor((token,)).redact_text(" ".join(str(exc).split()))
        raise HubError(f"--push_to_hub={repo_id}: {api.endpoint}: {message[:300]}") from None
    return PushReport(str(repo), commit.commit_url, tuple(op.path_in_repo for op in operations))
