"""`--rescore`: check a run's entries again from their transcripts, running no agent.

Each entry of the shards and of discarded.jsonl is matched to its dataset row by its prompt
id (the row's prompt key) and checked with the row's `verify` object over this invocation's
flags (`agent.verify.runner.rescore_attempt`: answer, python without a sandbox, judge). A
`command` check needs the attempt's sandbox, gone since: where this invocation asks for the
command the attempt ran, its old result is kept, marked `"rescored": false`; another or a new
command cannot run (undecided, `sandbox_error`); one no longer asked for is dropped.
`metadata.reward` and `metadata.verification` are rewritten; an entry no check applies to any
more loses both.

Every entry is matched before anything is written (a dataset that no longer matches the run
is one line and exit 2). Each file is then rewritten atomically (a temp file, fsynced,
renamed over it), shards first, discarded.jsonl last, before the store appends anything: a
kill leaves each file before or after, and since checking a transcript gives the same result
again, a second --rescore finishes. The run's --keep and merge follow (`agent.batch.run`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from agent.batch.dataset import DatasetRow, iter_rows
from agent.batch.keeping import prompt_of
from agent.batch.row_verify import job_checks
from agent.config.run_config import RunConfig
from agent.config.verify_config import Checks
from agent.errors import ConfigError
from agent.export.openai_messages import from_sharegpt
from agent.protocols import ChatModel, RunStore
from agent.protocols.model import ChatRequest, ModelReply
from agent.protocols.turns import SEPARATED, AssistantTurn, Turn, from_openai_messages
from agent.protocols.verification import METHODS, Attempt, CheckError, CheckResult, Verification
from agent.store.durable import atomic_write
from agent.store.jsonl import encode_line, read_lines
from agent.store.keys import KeyResolver, is_tombstone, record_key
from agent.store.layout import DISCARDED_FILE, batch_files
from agent.verify.runner import rescore_attempt

if TYPE_CHECKING:
    from agent.llm.client import OpenAIChatModel

log = logging.getLogger("agent.batch.run")

KILL_AFTER = "AGENT_TEST_RESCORE_KILL_AFTER"  # tests only: SIGKILL this process after that many files
CONCURRENCY = 16  # entries checked at once (a judge's calls go through the endpoint's limits)


@dataclass(frozen=True)
class Rescored:
    """What a rescore did: the attempts (keys) checked, those whose command check was kept as it
    was, and those whose command could not run (changed or new). Keys, not lines: an attempt may
    be stored twice (a batch file and discarded.jsonl)."""

    entries: frozenset[str] = frozenset()
    commands_kept: frozenset[str] = frozenset()
    commands_undecided: frozenset[str] = frozenset()

    def __or__(self, other: Rescored) -> Rescored:
        return Rescored(
            self.entries | other.entries,
            self.commands_kept | other.commands_kept,
            self.commands_undecided | other.commands_undecided,
        )


def rescore_step(config: RunConfig, store: RunStore, console: Console) -> None:
    """The rescore of a run whose lock `store` holds, its torn lines repaired first."""
    for note in store.repair():
        log.warning("%s", note)
    done = rescore_run(config)
    console.print(f"Re-scored {len(done.entries)} attempts from their transcripts; keeping and merging.")


def rescore_run(config: RunConfig) -> Rescored:
    """Check every entry of `config.run_dir` again and rewrite its files (see the module)."""
    found = iter_rows(
        config.dataset_file, config.max_samples, backend=config.sandbox.backend, options=config.dataset
    )
    rows = {row.key: row for row in found}
    files = [*batch_files(config.run_dir), config.run_dir / DISCARDED_FILE]
    for path in files:
        _match(path, rows, config.dataset_file)
    done = Rescored()
    for number, path in enumerate(files, start=1):
        done |= asyncio.run(_rescore_file(path, rows, config))
        if os.environ.get(KILL_AFTER) == str(number):  # the crash tests' kill between two files
            os.kill(os.getpid(), signal.SIGKILL)
    if done.commands_kept:
        log.warning(
            "%d attempts have a command check: it needs the attempt's sandbox and was not re-scored "
            '(its earlier result is kept, marked "rescored": false)',
            len(done.commands_kept),
        )
    if done.commands_undecided:
        log.warning(
            "%d attempts are asked for a command check other than the one they ran (or none): it "
            "needs the attempt's sandbox, gone since, so it is undecided (sandbox_error)",
            len(done.commands_undecided),
        )
    return done


Line = tuple[bytes, str | None, dict[str, Any] | None, dict[str, Any] | None]


def _entries(path: Path) -> Iterator[Line]:
    """Each line of a shard or discarded.jsonl: (the line, its key, the record, the entry to
    check); key, record and entry are None for a line with nothing to check (a tombstone)."""
    resolver = KeyResolver()
    discards = path.name == DISCARDED_FILE
    for line, record in read_lines(path):
        if record is None or (not discards and is_tombstone(record)):
            yield line, None, None, None
            continue
        key = record_key(record) if discards else resolver.result_key(record)
        entry = record.get("entry") if discards else record
        if isinstance(entry, dict) and key is not None:
            yield line, key, record, entry
        else:
            yield line, None, None, None


def _match(path: Path, rows: Mapping[str, DatasetRow], dataset: str) -> None:
    """ConfigError (exit 2) for the first entry whose prompt the dataset does not hold."""
    for _line, key, _record, entry in _entries(path):
        if entry is not None and key is not None and (found := prompt_of(entry, key)[0]) not in rows:
            raise ConfigError(
                f"--rescore: {path}: entry {key} is of prompt {found}, which {dataset} does not "
                "hold (the dataset no longer matches the run; pass the run's own as --dataset_file)"
            )


def _judge(config: RunConfig) -> OpenAIChatModel:
    """The judge's model. The SDK is imported here, not with this module: every batch run
    imports this module (agent.batch.run), and the parent of a run needs no SDK (~1 s)."""
    from agent.llm.factory import open_chat_model

    return open_chat_model(config.agent)


async def _rescore_file(path: Path, rows: Mapping[str, DatasetRow], config: RunConfig) -> Rescored:
    lines = list(_entries(path))
    if not any(entry is not None for *_rest, entry in lines):
        return Rescored()
    judge = _judge(config) if config.verify.judge_model else None
    model: ChatModel = judge or _NoModel()
    gate = asyncio.Semaphore(CONCURRENCY)
    try:
        checked = await asyncio.gather(
            *(_checked(entry, key, rows, config, model, gate) for _l, key, _r, entry in lines)
        )
    finally:
        if judge is not None:
            await judge.aclose()
    with atomic_write(path) as handle:
        for (line, _key, record, _old), (entry, _command) in zip(lines, checked, strict=True):
            if record is None or entry is None:
                handle.write(line + b"\n")  # nothing checked: the same line
            else:
                handle.write(
                    encode_line({**record, "entry": entry} if path.name == DISCARDED_FILE else entry)
                )
    keys = [(key, entry, command) for (_l, key, _r, _o), (entry, command) in zip(lines, checked, strict=True)]
    return Rescored(
        frozenset(key for key, entry, _command in keys if key is not None and entry is not None),
        frozenset(key for key, _entry, command in keys if key is not None and command == _KEPT),
        frozenset(key for key, _entry, command in keys if key is not None and command == _UNDECIDED),
    )


class _NoModel:
    """The model of a rescore without --judge_model: no check calls one (a row asking for a
    judge is refused at the start without --judge_model)."""

    async def complete(self, request: ChatRequest) -> ModelReply:
        raise ConfigError("--rescore: a judge check without --judge_model")


async def _checked(
    entry: dict[str, Any] | None,
    key: str | None,
    rows: Mapping[str, DatasetRow],
    config: RunConfig,
    model: ChatModel,
    gate: asyncio.Semaphore,
) -> tuple[dict[str, Any] | None, str | None]:
    """(the entry with its new verification, what became of its command check: `_KEPT`,
    `_UNDECIDED` or None when none is asked)."""
    if entry is None or key is None:
        return None, None
    prompt_id, sample = prompt_of(entry, key)
    row = rows[prompt_id]
    checks = job_checks(row.verify, config.verify)
    async with gate:
        fresh = await rescore_attempt(checks, attempt_of(entry, row, sample, checks), model, config.verify)
    command, state = _command_check(entry, checks)
    results = [*(fresh.checks if fresh is not None else ()), *((command,) if command is not None else ())]
    results.sort(key=lambda check: METHODS.index(check.method))
    return _with_verification(entry, Verification(tuple(results)) if results else None), state


def attempt_of(entry: Mapping[str, Any], row: DatasetRow, sample: int, checks: Checks | None) -> Attempt:
    """What a verifier is given of a stored entry: its transcript as typed turns; the final
    answer of a completed conversation (the last assistant turn's text), else None."""
    metadata = entry.get("metadata")
    outcome = str(metadata.get("outcome")) if isinstance(metadata, dict) else ""
    turns = turns_of(entry)
    last = next((turn for turn in reversed(turns) if isinstance(turn, AssistantTurn)), None)
    final = last.content if last is not None and outcome == "completed" else None
    return Attempt(
        prompt=row.prompt,
        turns=turns,
        final_response=final if isinstance(final, str) else None,
        outcome=outcome,
        sample_index=sample,
        metadata=row.metadata,
        verify=checks.row if checks is not None else {},
    )


def turns_of(entry: Mapping[str, Any]) -> tuple[Turn, ...]:
    """The typed turns of an entry's ShareGPT `conversations` (as the exports read them)."""
    conversation = from_sharegpt(entry.get("conversations") or [])
    messages = []
    for message in conversation.messages:
        if message.get("role") == "system":
            continue
        found = {k: v for k, v in message.items() if v is not None and k != "reasoning_content"}
        if message.get("role") == "assistant":
            found.update(reasoning=message.get("reasoning_content") or "", **{SEPARATED: True})
        messages.append(found)
    return from_openai_messages(messages)


_KEPT, _UNDECIDED = "kept", "undecided"
_NO_SANDBOX = (
    f"{CheckError.SANDBOX_ERROR}: --rescore cannot run a command check: the attempt's sandbox is gone"
)


def _command_check(entry: Mapping[str, Any], checks: Checks | None) -> tuple[CheckResult | None, str | None]:
    """The attempt's command check under this invocation's checks, and `_KEPT` or `_UNDECIDED`:
    none asked, none; the command the attempt ran, its earlier result; another or a new one,
    undecided (it would need the attempt's sandbox)."""
    asked = checks.command if checks is not None else None
    if asked is None:
        return None, None
    old = _old_command(entry)
    if old is not None and old.details.get("command") == asked.run:
        return old, _KEPT
    details = {"command": asked.run, "rescored": False}
    if old is not None:
        details["ran"] = old.details.get("command")
    return CheckResult("command", None, None, details, error=_NO_SANDBOX), _UNDECIDED


def _old_command(entry: Mapping[str, Any]) -> CheckResult | None:
    """The entry's recorded command check, marked as not re-scored (None when it has none)."""
    metadata = entry.get("metadata")
    verification = metadata.get("verification") if isinstance(metadata, dict) else None
    checks = verification.get("checks") if isinstance(verification, dict) else None
    for check in checks if isinstance(checks, list) else ():
        if isinstance(check, dict) and check.get("method") == "command":
            details = check.get("details")
            details = details if isinstance(details, dict) else {}
            return CheckResult(
                "command",
                check.get("passed"),
                check.get("score"),
                {**details, "rescored": False},
                duration_s=float(check.get("duration_s") or 0.0),
                error=check.get("error"),
            )
    return None


def _with_verification(entry: dict[str, Any], verification: Verification | None) -> dict[str, Any]:
    metadata = {k: v for k, v in entry["metadata"].items() if k not in ("reward", "verification")}
    if verification is not None:
        metadata.update(reward=verification.reward, verification=verification.record())
    return {**entry, "metadata": metadata}
