"""Entries and their token sidecar lines as a capturing worker makes them (`agent.batch.records`:
`metadata.tokens` naming a `TokenRecord` line by id), for the parent side's tests."""

from __future__ import annotations

import json
import uuid
from typing import Any

from agent.batch.events import Discarded, Finished
from agent.protocols.tokens import TokenDrift, TokenRecord, TurnTokens, floats, ids
from agent.store.keys import prompt_key


def token_record(key: str, index: int, turns: int = 2, drift: bool = False) -> TokenRecord:
    """A record of `turns` assistant turns: each turn's prompt extends the sequence by 3 ids
    (the tool result's), or, with `drift`, the second turn re-renders 2 ids of the first."""
    made, length = [], 0
    for turn in range(turns):
        offset = length - (2 if drift and turn == 1 else 0)
        prompt = list(range(100 * turn, 100 * turn + (4 if turn == 0 else 3)))
        completion = [500 + turn, 501 + turn, 502 + turn]
        made.append(TurnTokens(offset, ids(prompt), ids(completion), floats([-0.5, -0.25, -0.125])))
        length = offset + len(prompt) + len(completion)
    bent = TokenDrift(1, 5, (501, 502), (9, 9), "completion of turn 0, token 1") if drift else None
    return TokenRecord(uuid.uuid4().hex, key, index, tuple(made), bent)


def entry(
    key: str, index: int, batch: int, record: TokenRecord | None, reasons: tuple[str, ...] = ()
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"prompt_key": key, "batch_num": batch}
    if record is not None:
        drift = (
            None if record.drift is None else {"turn": record.drift.turn, "position": record.drift.position}
        )
        metadata["tokens"] = {"id": record.tokens_id, "turns": len(record.turns), "drift": drift}
    if reasons:
        metadata["discard_reasons"] = list(reasons)
    return {
        "prompt_index": index,
        "conversations": [{"from": "human", "value": key}, {"from": "gpt", "value": "done"}],
        "metadata": metadata,
        "completed": True,
    }


def key_of(n: int) -> str:
    return prompt_key(f"prompt {n}", 0)


def finished(n: int, batch_size: int, turns: int = 2, drift: bool = False) -> Finished:
    """Prompt `n`'s answer with its sidecar line, as a worker sends it."""
    key, batch = key_of(n), n // batch_size
    record = token_record(key, n, turns, drift)
    line = json.dumps(entry(key, n, batch, record)).encode() + b"\n"
    return Finished(key, batch, n, line, True, "completed", {}, tokens_line=record.line(), token_drift=drift)


def discarded(n: int, batch_size: int, reason: str = "no_reasoning") -> Discarded:
    key = key_of(n)
    record = token_record(key, n)
    made = entry(key, n, n // batch_size, record, (reason,))
    return Discarded(key, n, reason, made, {}, "2026-01-01T00:00:00", tokens_line=record.line())
