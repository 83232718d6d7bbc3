"""What a run exports and publishes when it ends (or on demand): the `--export` formats, where
reasoning goes in the `openai` export, and the Hugging Face Hub dataset to push to."""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.errors import ConfigError

EXPORT_FORMATS = ("parquet", "openai", "sharegpt", "rl")  # agent.export.exports.EXPORTS, by name
TOKEN_FORMATS = ("rl",)  # need the run's token ids (--capture_tokens): never exported unasked
REASONING_PLACES = ("field", "inline")  # `reasoning_content`, or `<think>…</think>` in the content
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


@dataclass(frozen=True)
class ExportOptions:
    export: tuple[str, ...] = ()  # export format names (agent.export.exports.EXPORTS)
    export_reasoning: str = "field"
    push_to_hub: str | None = None  # "org/name" of a Hub dataset repository
    hub_private: bool = True  # a new repository is private unless asked otherwise
    hub_license: str = "other"  # the card's license: only the operator knows the data's terms

    def __post_init__(self) -> None:
        unknown = [name for name in self.export if name not in EXPORT_FORMATS]
        if unknown:
            raise ConfigError(f"--export: unknown format {unknown[0]!r}; valid: {', '.join(EXPORT_FORMATS)}")
        repo = self.push_to_hub
        if repo is not None and (not _REPO_ID.match(repo) or ".." in repo):
            raise ConfigError(
                f"--push_to_hub={self.push_to_hub!r}: expected a Hub dataset id 'org/name' "
                "(letters, digits, '.', '_' or '-')"
            )
        if not re.match(r"^[a-z0-9][a-z0-9.+-]*$", self.hub_license):
            raise ConfigError(
                f"--hub_license={self.hub_license!r}: expected a Hub license id such as mit or cc-by-4.0"
            )

    @property
    def inline_reasoning(self) -> bool:
        return self.export_reasoning == "inline"

    @property
    def wanted(self) -> bool:
        """Whether anything is exported or pushed."""
        return bool(self.export) or self.push_to_hub is not None
