"""The report's figures, streamed: one pass over a run's entries, discards and failures keeps
counts, per-entry numbers (turns, tokens, finish times: a few bytes each) and a bounded
stratified sample of readable conversations for the trajectory browser.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agent.protocols.store import KnownKeys
from agent.report.sample import SAMPLE_SIZE, StratifiedSample
from agent.report.turns import cut, name, readable
from agent.store.jsonl import json_int
from agent.store.key_book import KeySet, index_hint
from agent.store.statistics import has_reasoning
from agent.store.tool_counts import not_called
from agent.store.verification_stats import verdict

EXAMPLES = 3  # failure messages kept per class
REPORT_TOOLS = 30  # tools named in the tool plot and table, and per sampled entry; the rest summed
Readable = dict[str, Any]  # an entry as the trajectory browser shows it
# what `add_entry` counts of the output's entries (kept for a resume: `agent.store.output_figures`)
OUTPUT_FIELDS = (
    *("entries", "outcomes", "tools", "toolsets", "reasoning", "turns", "tokens", "times"),
    *("sample", "systems", "verdicts"),
)


def _usage_total(metadata: Mapping[str, Any]) -> int:
    usage = metadata.get("usage")
    if not isinstance(usage, dict):
        return 0
    if "total_tokens" in usage:
        return json_int(usage.get("total_tokens"))
    return json_int(usage.get("prompt_tokens")) + json_int(usage.get("completion_tokens"))


def _index(value: Any) -> int | str | None:
    """A prompt index as shown: the runner writes an int; anything else is shown cut."""
    return value if value is None or isinstance(value, int) else name(value)


def _timestamp(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(value).timestamp() if isinstance(value, str) else None
    except ValueError:
        return None


class RunDigest:
    """Accumulates what the report shows; `add_entry` for each output entry, `add_discard` and
    `add_failure` for each record of discarded.jsonl and failures.jsonl.

    Those records name a prompt that may be in the output since. `keyed`: the output's keys
    are noted as its entries are added; else they are given once known (`output_keys`, the
    merge's), so a run's fold holds no string per entry while it runs (issue 26)."""

    def __init__(self, sample_size: int = SAMPLE_SIZE, seed: int = 0, *, keyed: bool = True) -> None:
        self.entries = 0
        self.outcomes: Counter[str] = Counter()
        self.discards: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.failure_examples: dict[str, list[dict[str, Any]]] = {}
        self.failed_keys: dict[str, tuple[str, int]] = {}  # prompt key -> latest failure's class, index
        self.done_keys: set[str] = set()  # keys of the entries added (when keyed) and discarded
        self.output_keys: KnownKeys = KeySet()  # the output's, when not keyed
        self._keyed = keyed
        self.tools: dict[str, Counter[str]] = {}  # calls, success, failure, entries
        self.toolsets: Counter[str] = Counter()  # entries offered each toolset
        self.reasoning: Counter[str] = Counter()  # turns, with_reasoning, and entries per coverage
        self.discarded_reasoning: Counter[str] = Counter()  # turns, with_reasoning of discarded entries
        self.turns, self.tokens, self.times = array("l"), array("q"), array("d")
        self.sample: StratifiedSample[Readable] = StratifiedSample(sample_size, seed)
        self.systems: dict[str, int] = {}  # system prompt text -> id, for entries kept in the sample
        self.verdicts: Counter[str] = Counter()  # passed, failed, undecided of the verified entries

    def add_entry(self, entry: Mapping[str, Any], discarded: str | None = None) -> None:
        metadata = entry.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        outcome = name(metadata.get("outcome") or "unknown")
        key = metadata.get("prompt_key")
        if isinstance(key, str) and (self._keyed or discarded is not None):
            self.done_keys.add(key)
        checked = verdict(metadata)
        if checked is not None:
            self.verdicts[checked] += 1
        if discarded is None:
            self._count(entry, metadata, outcome)
        else:
            gpt = _gpt_turns(entry)
            self.discarded_reasoning["turns"] += len(gpt)
            self.discarded_reasoning["with_reasoning"] += sum(
                has_reasoning(str(t.get("value") or "")) for t in gpt
            )
        stratum = f"discarded: {discarded}" if discarded else outcome
        # made readable (every text cut) when kept: the sample never holds a whole entry; ranked
        # by its key, so the sample does not depend on the order entries are counted in
        rank = sample_rank(key, self.sample.seed) if isinstance(key, str) else None
        self.sample.offer_lazily(stratum, lambda: self._readable(entry, discarded), rank)

    def _count(self, entry: Mapping[str, Any], metadata: Mapping[str, Any], outcome: str) -> None:
        self.entries += 1
        self.outcomes[outcome] += 1
        gpt = _gpt_turns(entry)
        thought = sum(has_reasoning(str(t.get("value") or "")) for t in gpt)
        self.reasoning["turns"] += len(gpt)
        self.reasoning["with_reasoning"] += thought
        share = "none" if not thought else "all" if thought == len(gpt) else "some"
        self.reasoning[f"entries_{share}"] += 1
        self.turns.append(len(gpt))
        self.tokens.append(_usage_total(metadata))
        when = _timestamp(metadata.get("timestamp"))
        if when is not None:
            self.times.append(when)
        self._count_tools(entry)

    def _count_tools(self, entry: Mapping[str, Any]) -> None:
        stats = entry.get("tool_stats")
        for tool, counts in stats.items() if isinstance(stats, dict) else ():
            if not not_called(counts) and isinstance(counts, dict) and json_int(counts.get("count")):
                row = self.tools.setdefault(name(tool), Counter())
                row["entries"] += 1
                for field in ("count", "success", "failure"):
                    row[field] += json_int(counts.get(field))
        toolsets = entry.get("toolsets_used")
        if isinstance(toolsets, list):
            self.toolsets.update(name(t) for t in toolsets)

    def add_discard(self, record: Mapping[str, Any]) -> None:
        """A record of discarded.jsonl; read after the entries, so one whose prompt has joined
        the output since (its filter turned off, `agent.batch.recovery`) is not counted again."""
        if self._done(record.get("prompt_key"), index_hint(record.get("prompt_index"))):
            return
        reason = name(record.get("reason") or "unknown")
        self.discards[reason] += 1
        entry = record.get("entry")
        if isinstance(entry, dict):
            self.add_entry(entry, discarded=reason)

    def add_failure(self, record: Mapping[str, Any]) -> None:
        error_class = name(record.get("error_class") or "unknown")
        self.failures[error_class] += 1
        key = record.get("prompt_key")
        if isinstance(key, str):
            self.failed_keys[key] = error_class, index_hint(record.get("prompt_index"))
        examples = self.failure_examples.setdefault(error_class, [])
        if len(examples) < EXAMPLES:
            examples.append(
                {
                    "prompt_index": _index(record.get("prompt_index")),
                    "message": cut(str(record.get("message") or ""), 600),
                    "attempt": record.get("attempt"),
                }
            )

    def still_failed(self) -> Counter[str]:
        """Prompts whose latest record is a failure and that are not done since, per class."""
        return Counter(c for key, (c, index) in self.failed_keys.items() if not self._done(key, index))

    def _done(self, key: object, index: int) -> bool:
        return isinstance(key, str) and (key in self.done_keys or self.output_keys.has(key, index))

    def _system_id(self, text: str) -> int:
        return self.systems.setdefault(text, len(self.systems))

    def drawn(self) -> list[Readable]:
        """The browser's sample, each entry readable (`agent.report.turns`)."""
        return self.page_sample()[0]

    def page_sample(self) -> tuple[list[Readable], list[str]]:
        """The browser's sample and the system prompts it shows, numbered from 0 as its system
        turns say (entries dropped from the sample leave theirs out)."""
        entries = self.sample.drawn()
        # numbered in the order the sample shows them (not the order they were first met)
        used = list(dict.fromkeys(t["system"] for e in entries for t in e["turns"] if t["role"] == "system"))
        number, texts = {old: new for new, old in enumerate(used)}, {i: t for t, i in self.systems.items()}
        renumbered = [
            {
                **e,
                "turns": [
                    {**t, "system": number[t["system"]]} if t["role"] == "system" else t for t in e["turns"]
                ],
            }
            for e in entries
        ]
        return renumbered, [texts[old] for old in used]

    def _readable(self, entry: Mapping[str, Any], discarded: str | None) -> Readable:
        metadata = entry.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        stats = entry.get("tool_stats")
        conversations = entry.get("conversations")
        toolsets = entry.get("toolsets_used")
        tools = sorted(
            name(tool)
            for tool, counts in (stats.items() if isinstance(stats, dict) else ())
            if isinstance(counts, dict) and json_int(counts.get("count"))
        )
        return {
            "index": _index(entry.get("prompt_index")),
            "outcome": "discarded" if discarded else name(metadata.get("outcome") or "unknown"),
            "reason": discarded or "",
            "toolsets": [name(t) for t in toolsets] if isinstance(toolsets, list) else [],
            "tools": tools[:REPORT_TOOLS],  # the model may invent any number of names
            "tools_more": max(len(tools) - REPORT_TOOLS, 0),
            "api_calls": json_int(entry.get("api_calls")),
            "tokens": _usage_total(metadata),
            **_checked(metadata),
            "turns": readable(conversations if isinstance(conversations, list) else (), self._system_id),
        }


def sample_rank(key: str, seed: int) -> int:
    """A prompt key's place in the sample's order: a seeded hash, below 2**64."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8, salt=seed.to_bytes(16, "little"))
    return int.from_bytes(digest.digest(), "little")


def _checked(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The browser's `verdict` (passed, failed, undecided; `unverified` when no check applied)
    and `reward` (None when none) of an entry."""
    checked = verdict(metadata)
    reward = metadata.get("reward") if checked is not None else None
    if not isinstance(reward, int | float) or isinstance(reward, bool):
        reward = None
    return {"verdict": checked or "unverified", "reward": None if reward is None else round(reward, 4)}


def _gpt_turns(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The entry's assistant turns."""
    conversations = entry.get("conversations")
    turns = conversations if isinstance(conversations, list) else ()
    return [t for t in turns if isinstance(t, dict) and t.get("from") == "gpt"]
