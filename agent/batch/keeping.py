"""`--keep=all|passing|best`: which verified attempts go to the output, judged again each run.

Unlike the filters of one entry (`KEPT_BY`, labels in `metadata.discard_reasons`), what --keep
discards for is judged from the data: `not_passing` from the entry's `metadata.verification`
(`passed` is not true: failed, undecided, or never verified), `not_best` from its prompt's
other samples (the highest `metadata.reward` wins, ties by fewer assistant turns, then the
lower sample index; an entry without a reward ranks below any with one). Nothing is written
as a label, so a rescore (new rewards) or another --keep moves entries both ways.

A pass reads the live entries of the shards and the --keep discards of discarded.jsonl
(small summaries, then again only the entries to move), and moves them as the other filters
do (`agent.batch.recovery`): every withdrawn entry's discard record is appended and fsynced
before any tombstone is, so a kill between the two leaves the entry in the output (and a record that the
next pass's record supersedes), never in neither; a kept-again one is appended to its shard.
`best` decides a prompt once all its samples are in; at the end of a run (`final`) it decides
among those present (the others failed), and says how many prompts it decided so.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.batch.recovery import (
    append_tombstone,
    batch_of,
    mark_recovered,
    mark_withdrawn,
    reapply_filters,
    shard_entries,
    withdrawal,
)
from agent.config.run_config import KEPT_BY_MODE, RunConfig
from agent.protocols import RunStore, StoredKeys
from agent.store.index import discard_reasons
from agent.store.jsonl import read_lines
from agent.store.key_book import EVERY_KEY
from agent.store.keys import record_key, split_key
from agent.store.layout import DISCARDED_FILE, file_size

log = logging.getLogger("agent.batch.run")

NOT_PASSING, NOT_BEST = "not_passing", "not_best"


@dataclass(frozen=True)
class Attempted:
    """What --keep judges an entry by."""

    key: str
    prompt_id: str
    sample_index: int
    passed: bool  # metadata.verification.passed is true
    rank: tuple[bool, float, int, int]  # the higher, the better (see the module's docstring)
    live: bool  # in the output (else a --keep discard)
    reason: str | None = None  # a discard's recorded reason


@dataclass
class KeepPass:
    """What one pass moved, per reason, and the prompts `best` decided with samples missing."""

    withdrawn: Counter[str] = field(default_factory=Counter)
    recovered: Counter[str] = field(default_factory=Counter)
    short: int = 0
    withdrawn_keys: set[str] = field(default_factory=set)
    not_kept: Counter[str] = field(default_factory=Counter)  # the run's entries --keep leaves out

    def added_to(self, withdrawn: Counter[str], recovered: Counter[str]) -> tuple[Counter[str], Counter[str]]:
        """Counts of earlier moves with this pass's added."""
        return withdrawn + self.withdrawn, recovered + self.recovered

    def section(self, mode: str) -> dict[str, Any]:
        """statistics.json's `keep` section (the whole run, after a final pass)."""
        return {"mode": mode, "not_kept": dict(sorted(self.not_kept.items())), "decided_short": self.short}


def prompt_of(entry: dict[str, Any], key: str) -> tuple[str, int]:
    """(prompt_id, sample_index) of an entry: its metadata's, else its key's (`split_key`)."""
    metadata = entry.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    from_key = split_key(key)
    prompt_id, sample = metadata.get("prompt_id"), metadata.get("sample_index")
    if not isinstance(prompt_id, str):
        prompt_id = from_key[0]
    if not isinstance(sample, int) or isinstance(sample, bool):
        sample = from_key[1]
    return prompt_id, sample


def attempted(entry: dict[str, Any], key: str, *, live: bool, reason: str | None = None) -> Attempted:
    metadata = entry.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    verification = metadata.get("verification")
    passed = isinstance(verification, dict) and verification.get("passed") is True
    reward = metadata.get("reward")
    scored = isinstance(reward, int | float) and not isinstance(reward, bool)
    value = float(reward) if isinstance(reward, int | float) and scored else 0.0
    turns = sum(
        1 for turn in entry.get("conversations") or () if isinstance(turn, dict) and turn.get("from") == "gpt"
    )
    prompt_id, sample = prompt_of(entry, key)
    rank = (scored, value, -turns, -sample)
    return Attempted(key, prompt_id, sample, passed, rank, live, reason)


def reapply_filters_and_keep(
    config: RunConfig, store: RunStore, stored: StoredKeys
) -> tuple[Counter[str], Counter[str]]:
    """(withdrawn, recovered) per reason when a run starts: the filters of one entry
    (`agent.batch.recovery`), then --keep on what they left, `best` deciding the prompts whose
    samples are all in."""
    withdrawn, recovered = reapply_filters(config, store, stored)
    return apply_keep(config, store, stored, final=False).added_to(withdrawn, recovered)


def apply_keep(config: RunConfig, store: RunStore, stored: StoredKeys, *, final: bool) -> KeepPass:
    """Judge every live entry and --keep discard under `config.verify.keep` and move the ones
    judged the other way; `stored` follows the moves."""
    moves = KeepPass()
    candidates = list(_live(config, stored)) if config.verify.keep != "all" else []
    judged, settled = _kept_discards(config, stored)
    verdicts = _verdicts(config, [*candidates, *judged], settled, final, moves)
    moves.not_kept.update(reason for reason in verdicts.values() if reason is not None)
    out = {a.key: reason for a, reason in verdicts.items() if a.live and reason is not None}
    back = {a.key for a, reason in verdicts.items() if not a.live and reason is None}
    relabel = {a.key: r for a, r in verdicts.items() if not a.live and r is not None and r != a.reason}
    _withdraw_all(config, store, stored, out, moves)
    _recover_all(config, store, stored, back, relabel, moves)
    return moves


def _verdicts(
    config: RunConfig,
    candidates: list[Attempted],
    settled: Mapping[str, set[int]],
    final: bool,
    moves: KeepPass,
) -> dict[Attempted, str | None]:
    """Each candidate's --keep reason under the run's mode (None: kept); an undecided `best`
    prompt's candidates are left out (they stay where they are). `settled`: the samples of each
    prompt another filter discarded (in, though no candidate)."""
    mode = config.verify.keep
    if mode != "best":
        return {a: NOT_PASSING if mode == "passing" and not a.passed else None for a in candidates}
    groups: dict[str, list[Attempted]] = {}
    for candidate in candidates:
        groups.setdefault(candidate.prompt_id, []).append(candidate)
    verdicts: dict[Attempted, str | None] = {}
    for group in groups.values():
        present = len({a.sample_index for a in group} | settled.get(group[0].prompt_id, set()))
        if present < config.samples_per_prompt and not final:
            continue  # samples still to come: decided when they are in, or at the run's end
        moves.short += present < config.samples_per_prompt
        winner = max(group, key=lambda a: a.rank)
        verdicts.update({a: None if a is winner else NOT_BEST for a in group})
    return verdicts


def _live(config: RunConfig, stored: StoredKeys) -> Iterator[Attempted]:
    """The output's entries (each key's first result line, as the merge reads it)."""
    for key, entry in shard_entries(config.run_dir, stored.done):
        yield attempted(entry, key, live=True)


def _current_discards(config: RunConfig, stored: StoredKeys) -> dict[str, dict[str, Any]]:
    """Each key's last discard record, for the keys not in the output."""
    last: dict[str, dict[str, Any]] = {}
    for _line, record in read_lines(config.run_dir / DISCARDED_FILE):
        key = record_key(record)
        if record is not None and key is not None and key not in stored.done:
            last[key] = record
    return last


def _kept_discards(config: RunConfig, stored: StoredKeys) -> tuple[list[Attempted], dict[str, set[int]]]:
    """The entries --keep discarded whose other filters the run keeps (--keep judges them
    again), and the samples of each prompt discarded for good by another filter."""
    found: list[Attempted] = []
    settled: dict[str, set[int]] = {}
    for key, record in _current_discards(config, stored).items():
        reason, entry = str(record.get("reason")), record.get("entry")
        if not isinstance(entry, dict):
            continue
        if reason in KEPT_BY_MODE and all(map(config.keeps, discard_reasons(entry))):
            found.append(attempted(entry, key, live=False, reason=reason))
        else:
            prompt_id, sample = prompt_of(entry, key)
            settled.setdefault(prompt_id, set()).add(sample)
    return found, settled


def _withdraw_all(
    config: RunConfig, store: RunStore, stored: StoredKeys, out: dict[str, str], moves: KeepPass
) -> None:
    """Every discard record first, then the tombstones (see the module's docstring)."""
    if not out:
        return
    withdrawn = [
        (withdrawal(key, out[key], entry), entry) for key, entry in shard_entries(config.run_dir, out)
    ]
    for record, entry in withdrawn:
        store.append_discard({**record, "moved_from_output": True, "entry": entry})
    store.sync()  # on disk before any tombstone is: power lost between them, the entry stays in the output
    for record, entry in withdrawn:
        append_tombstone(store, record, entry, config.batch_size)
        key = record["prompt_key"]
        mark_withdrawn(stored, key)
        moves.withdrawn[record["reason"]] += 1
        moves.withdrawn_keys.add(key)
    for reason, count in sorted(moves.withdrawn.items()):
        log.warning("--keep=%s: moved %d %s entries to discarded.jsonl", config.verify.keep, count, reason)


def _recover_all(
    config: RunConfig,
    store: RunStore,
    stored: StoredKeys,
    back: set[str],
    relabel: dict[str, str],
    moves: KeepPass,
) -> None:
    """Kept-again entries back to their shards; a discard whose --keep reason changed gets a
    record with the new one (the last record of a key is its reason)."""
    if not back and not relabel:
        return
    for key, record in _current_discards(config, stored).items():
        entry = record.get("entry")
        if not isinstance(entry, dict):
            continue
        if key in back:
            store.append_result(batch_of(entry, record, config.batch_size), entry)
            mark_recovered(stored, key)
            moves.recovered[str(record.get("reason"))] += 1
        elif key in relabel:
            store.append_discard({**withdrawal(key, relabel[key], entry), "entry": entry})
    for reason, count in sorted(moves.recovered.items()):
        log.warning("--keep=%s: moved %d %s discard(s) into the output", config.verify.keep, count, reason)


def keep_at_end(config: RunConfig, store: RunStore) -> tuple[KeepPass, set[str]]:
    """--keep on the whole output before the merge, `best` deciding every prompt (a sample
    that failed never comes); the pass, and the keys the merge leaves out (tombstoned)."""
    if config.verify.keep == "all" and not file_size(config.run_dir / DISCARDED_FILE):
        # nothing for --keep to judge: only the tombstones are wanted, not a key a prompt
        return KeepPass(), set(store.scan(numbered=False, known=EVERY_KEY).tombstoned)
    index = store.scan(numbered=False)
    kept = apply_keep(config, store, index, final=True)
    if kept.short:
        log.warning(
            "--keep=best decided %d prompt(s) among fewer than %d samples (the others failed)",
            kept.short,
            config.samples_per_prompt,
        )
    return kept, set(index.tombstoned)
