"""Where a secret of the runner's start still shows to a `local` command: in the processes that
started the runner. `conceal` scrubs the runner's own command line and environment, not its
parent's: a wrapper that stays its parent (`bash -c "python batch_runner.py --api_key=…; …"`,
`timeout`, started with the key in its environment) keeps them in its `/proc/<pid>/cmdline` and
`environ`, which any process of the same user can read, a command under `--sandbox=local` too.
Said once at the run's start, with the way out; bwrap and docker show a command no other process."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from agent.common.redaction import MIN_SECRET_LENGTH  # shorter ones it does not replace either

log = logging.getLogger("agent.sandboxes")


def ancestors_holding(values: Sequence[str], pid: int | None = None) -> list[str]:
    """`name (pid N): its cmdline and environ` for each ancestor of `pid` (this process) whose
    command line or environment holds one of `values`, nearest first."""
    needles = [value.encode() for value in values if len(value) >= MIN_SECRET_LENGTH]
    found: list[str] = []
    current = os.getppid() if pid is None else _parent_of(pid)
    while needles and current is not None and current > 1:
        where = [part for part in ("cmdline", "environ") if _holds(current, part, needles)]
        if where:
            found.append(
                f"{_read(current, 'comm').decode(errors='replace').strip()} (pid {current}): "
                f"its {' and '.join(where)}"
            )
        current = _parent_of(current)
    return found


def warn_if_exposed(values: Sequence[str]) -> None:
    for holder in ancestors_holding(values):
        log.warning(
            "a secret this run was started with is in %s, which commands under --sandbox=local can "
            "read (the same user); start the runner without a wrapper that stays its parent (`exec "
            "python ...`, or `env KEY=... python ...`), or use --sandbox=bwrap or docker",
            holder,
        )


def _holds(pid: int, part: str, needles: list[bytes]) -> bool:
    data = _read(pid, part)
    return any(needle in data for needle in needles)


def _read(pid: int, part: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{part}", "rb") as file:
            return file.read()
    except OSError:  # gone, or another user's: nothing a command of ours can read either
        return b""


def _parent_of(pid: int) -> int | None:
    stat = _read(pid, "stat")
    fields = stat[stat.rfind(b")") + 2 :].split()  # the name in parentheses may hold spaces
    return int(fields[1]) if len(fields) > 1 else None
