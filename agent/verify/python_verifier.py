"""The `python` check: the run's `--verifier=module:function` (an `agent.protocols.verification.Verifier`).

The function is loaded once per process (`load_verifier`, cached); the run's start loads it
too, so a verifier that does not import, is no async function or cannot take the two arguments
`(attempt, sandbox)` stops the run before a token is spent (`VerifierLoadError`, one line naming
the flag). The module is found on `sys.path`, and in the current directory (as `python -m` would
find it).

Each attempt's call runs under `--verify_timeout`. A verifier that raises, times out or returns
something other than a `Score` (or a score outside [0, 1]) is no fail of the agent: the
check's error is `verifier_error: ...`, and the run goes on.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
import math
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, cast

from agent.common.exit_guard import ExitCalled, exit_refused
from agent.errors import ConfigError
from agent.protocols import Sandbox
from agent.protocols.verification import Attempt, CheckError, CheckResult, Score, Verifier

MAX_ERROR = 500  # characters of a verifier's exception kept in the record
MAX_DETAILS = 16_384  # bytes of a Score's details (as UTF-8 JSON) an entry may carry
MAX_DEPTH = 32  # nesting of a Score's details: JSON readers of the entry stop near 1,000 levels


class VerifierLoadError(ConfigError):
    """`--verifier` names nothing this process can call (exit 2 at the run's start)."""


@functools.cache
def load_verifier(spec: str) -> Verifier:
    """The async function `spec` ("package.module:function") names; VerifierLoadError saying why not."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise VerifierLoadError(
            f"--verifier={spec}: give module:function (e.g. examples.verifier:wrote_file)"
        )
    if os.getcwd() not in sys.path:  # the user's own module, next to their dataset
        sys.path.append(os.getcwd())
    try:
        with exit_refused():
            module = importlib.import_module(module_name)
    except (Exception, SystemExit, KeyboardInterrupt, ExitCalled) as exc:  # noqa: BLE001 - user code failing
        # to import is the flag's error, a module that exits or raises KeyboardInterrupt too: the
        # run would otherwise end with its code (0 included) before a prompt ran.
        raise VerifierLoadError(
            f"--verifier={spec}: cannot import {module_name}: {type(exc).__name__}: {exc}"
        ) from None
    function = getattr(module, name, None)
    if function is None:
        raise VerifierLoadError(f"--verifier={spec}: {module_name} has no attribute {name!r}")
    if not inspect.iscoroutinefunction(function):
        raise VerifierLoadError(
            f"--verifier={spec}: {name} is not an async function (`async def {name}(attempt, sandbox)`)"
        )
    _check_parameters(spec, name, function)
    return cast(Verifier, function)


def _check_parameters(spec: str, name: str, function: Any) -> None:
    """A verifier that cannot take (attempt, sandbox) would make every attempt undecided."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to read (a C function): the call will say
        return
    try:
        signature.bind(None, None)
    except TypeError as exc:
        bare = [parameter.replace(annotation=parameter.empty) for parameter in signature.parameters.values()]
        shown = signature.replace(parameters=bare, return_annotation=signature.empty)
        raise VerifierLoadError(
            f"--verifier={spec}: {name}{shown} cannot be called as (attempt, sandbox): {exc}"
        ) from None


def _is_unit(score: Any) -> bool:
    number = isinstance(score, int | float) and not isinstance(score, bool)
    return number and math.isfinite(score) and 0 <= score <= 1


def _depth(value: Any) -> int:
    """How deep `value`'s containers nest (a mapping of scalars is 1), counted without recursion:
    a verifier's details may nest past the interpreter's own recursion limit."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping | list | tuple) and level <= MAX_DEPTH:
            deepest = max(deepest, level + 1)
            children = item.values() if isinstance(item, Mapping) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _invalid(value: Any) -> str | None:
    """Why a verifier's return value is no usable Score, or None (its fields too: a dataclass
    does not check the types it is given)."""
    if not isinstance(value, Score):
        return f"returned {type(value).__name__}, not agent.protocols.verification.Score"
    fields: Any = value
    if not isinstance(fields.passed, bool):
        return f"Score.passed is {type(fields.passed).__name__}, not bool"
    if fields.score is not None and not _is_unit(fields.score):
        return f"Score.score {fields.score!r} is not a number in [0, 1]"
    if not isinstance(fields.details, Mapping):
        return f"Score.details is {type(fields.details).__name__}, not a mapping"
    if _depth(fields.details) > MAX_DEPTH:
        return f"Score.details nests deeper than {MAX_DEPTH} levels"
    try:  # the details go into the entry as they are: one the entry's line cannot hold is caught here
        size = len(json.dumps(dict(fields.details), ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError (a lone surrogate) is a ValueError
        return f"Score.details cannot be written as UTF-8 JSON ({exc})"[:MAX_ERROR]
    if size > MAX_DETAILS:
        return f"Score.details is {size} bytes as JSON, over {MAX_DETAILS}"
    return None


async def check_python(spec: str, attempt: Attempt, sandbox: Sandbox | None, timeout_s: float) -> CheckResult:
    """The verifier `spec`'s record for `attempt` (loaded here once per process)."""
    started = time.monotonic()

    def failed(why: str) -> CheckResult:
        error = f"{CheckError.VERIFIER_ERROR}: {why}"[:MAX_ERROR]
        details = {"verifier": spec}
        return CheckResult("python", None, None, details, duration_s=time.monotonic() - started, error=error)

    try:
        verifier = load_verifier(spec)
        async with asyncio.timeout(timeout_s) as bound:
            value = await verifier(attempt, sandbox)
        if bound.expired():  # it caught the timeout's cancel and returned: its score came late
            raise TimeoutError
    except TimeoutError:
        return failed(f"{spec} gave no score within --verify_timeout={timeout_s:g}s")
    except VerifierLoadError as exc:
        return failed(str(exc))
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # the attempt itself is being cancelled
            raise
        return failed(f"{spec} raised {type(exc).__name__}: {exc}")
    except BaseException as exc:  # noqa: BLE001 - the user's code failing is recorded, the run goes on
        # Whatever a verifier raises is its own (SystemExit, KeyboardInterrupt, a bare BaseException
        # included; a real cancel was re-raised above): the worker must neither die nor hang of it.
        return failed(f"{spec} raised {type(exc).__name__}: {exc}")
    problem = _invalid(value)
    if problem is not None:
        return failed(f"{spec} {problem}")
    score = float(value.score) if value.score is not None else (1.0 if value.passed else 0.0)
    details = {**value.details, "verifier": spec}  # the record names the verifier, whatever it says
    return CheckResult("python", value.passed, score, details, duration_s=time.monotonic() - started)
