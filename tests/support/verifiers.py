"""`--verifier` functions for the verification tests (this module holds no tests)."""

from __future__ import annotations

import asyncio

from agent.protocols.sandbox import Sandbox
from agent.protocols.verification import Attempt, Score


async def raises(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    raise RuntimeError("the verifier broke")


async def junk(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    return "yes"  # type: ignore[return-value]  # on purpose: not a Score


async def out_of_range(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    return Score(True, score=1.5)


async def sleeps(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    await asyncio.sleep(60)
    return Score(True)


async def final_says_done(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    """Passes when the final answer says "done"; tells what it was given in its details."""
    final = attempt.final_response or ""
    details = {"had_sandbox": sandbox is not None, "turns": len(attempt.turns), "row": dict(attempt.verify)}
    return Score("done" in final.lower(), details=details)


def not_async(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    return Score(True)


async def one_parameter(attempt: Attempt) -> Score:  # the sandbox forgotten
    return Score(True)


async def keyword_only(attempt: Attempt, *, sandbox: Sandbox | None) -> Score:
    return Score(True)


async def with_defaults(attempt: Attempt, sandbox: Sandbox | None = None, strict: bool = False) -> Score:
    return Score(True)  # callable as (attempt, sandbox): accepted


async def exits(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    raise SystemExit(3)  # on purpose: a verifier's exit must not end its worker


async def interrupts(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    raise KeyboardInterrupt


async def base_exception(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    raise BaseException("a bare BaseException")


async def cancels_itself(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    raise asyncio.CancelledError()  # its own, not a cancel of the attempt: the run must not hang


async def swallows_the_timeout(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:  # on purpose: it catches the timeout's cancel and answers late
        return Score(True)
    return Score(True)


async def lone_surrogate(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    return Score(True, details={"note": "half a pair: \ud800"})  # no UTF-8 line can carry it


async def deep_details(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    nested: dict[str, object] = {}
    for _ in range(990):  # past any JSON reader's nesting once in the entry
        nested = {"in": nested}
    return Score(True, details=nested)


async def names_itself(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    return Score(False, details={"verifier": "someone else", "why": "mine"})
