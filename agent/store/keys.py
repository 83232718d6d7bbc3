"""Which prompt a line of a run directory stands for.

A result line's key is `metadata.prompt_key`. Lines written by other tools lack it; their key
is rebuilt from the first `human` turn of `conversations`, numbering repeated texts in the
order met (batch files in numeric order, lines in file order), exactly as the dataset numbers
repeated prompts. A result line with a truthy `discarded` and no `conversations` is a
tombstone (written by later versions of the reference): it marks its prompt discarded and is
never merged; its key is rebuilt from its `prompt`. Discard and failure records carry their
key in `prompt_key`.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any


def prompt_key(prompt: str, occurrence: int) -> str:
    """The identity of one copy of a prompt: its stripped text's hash plus the copy number."""
    return copy_key(prompt_hash(prompt), occurrence)


def copy_key(digest: str, occurrence: int) -> str:
    """`prompt_key` from the prompt's hash (`prompt_hash`)."""
    return f"{digest}:{occurrence}"


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.strip().encode("utf-8")).hexdigest()[:20]


class KeyResolver:
    """Prompt keys of result lines, numbering fallback texts in the order they are met."""

    def __init__(self) -> None:
        self._copies: Counter[str] = Counter()

    def result_key(self, entry: dict[str, Any]) -> str | None:
        metadata = entry.get("metadata")
        if isinstance(metadata, dict):
            key = metadata.get("prompt_key")
            if isinstance(key, str) and key:
                return key
        if is_tombstone(entry):
            return self._from_text(entry.get("prompt"))
        return self._from_text(_first_human_text(entry.get("conversations")))

    def _from_text(self, text: Any) -> str | None:
        if not isinstance(text, str) or not text.strip():
            return None
        digest = hashlib.sha256(text.strip().encode("utf-8")).hexdigest()
        occurrence = self._copies[digest]
        self._copies[digest] += 1
        return prompt_key(text, occurrence)


def _first_human_text(conversations: Any) -> Any:
    if isinstance(conversations, list):
        for turn in conversations:
            if isinstance(turn, dict) and turn.get("from") == "human":
                return turn.get("value")
    return None


def is_tombstone(entry: dict[str, Any]) -> bool:
    return bool(entry.get("discarded")) and "conversations" not in entry


def record_key(record: dict[str, Any] | None) -> str | None:
    """The key of a discard or failure record (None when it has none)."""
    key = record.get("prompt_key") if record is not None else None
    return key if isinstance(key, str) and key else None


SAMPLE_MARK = "#"  # a sample key: the prompt id, this mark, the sample index (s >= 1)


def sample_key(prompt_id: str, sample_index: int) -> str:
    """The key of one attempt at a prompt (--samples_per_prompt): sample 0's key is the
    prompt id itself, so a run made with one sample per prompt resumes with more and runs
    only the new samples; sample s >= 1 is `prompt_id#s`."""
    return prompt_id if sample_index == 0 else f"{prompt_id}{SAMPLE_MARK}{sample_index}"


def split_key(key: str) -> tuple[str, int]:
    """(prompt id, sample index) of a key `sample_key` made (a prompt key is sample 0)."""
    prompt_id, mark, index = key.rpartition(SAMPLE_MARK)
    if mark and index.isascii() and index.isdigit() and index == str(int(index)) and int(index) > 0:
        return prompt_id, int(index)
    return key, 0
