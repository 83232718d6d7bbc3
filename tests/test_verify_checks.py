"""The `command` and `python` checks and the runner, on real sandboxes (local and bwrap)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from agent.config.agent_config import AgentConfig
from agent.config.verify_config import AnswerCheck, Checks, CommandCheck, VerifyOptions
from agent.errors import FailureClass, ModelAPIError, SandboxStartError
from agent.llm.factory import open_chat_model
from agent.loop.agent_loop import converse
from agent.loop.conversation import ConversationResult, Prompt
from agent.protocols import ChatRequest, ModelReply, Sandbox, SandboxSpec, ToolConfig
from agent.protocols.turns import UserTurn
from agent.protocols.verification import Attempt
from agent.sandboxes import SandboxOptions, sandbox_factory
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.toolbox.context import ConversationContext, Resources
from agent.toolbox.registry import resolve_tools
from agent.verify.command import MAX_OUTPUT, check_command, score_line
from agent.verify.python_verifier import VerifierLoadError, check_python, load_verifier
from agent.verify.runner import not_rescorable, rescore_attempt, verify_attempt

pytestmark = pytest.mark.anyio
SECRET = "sk-verify-check-secret-0b1c"
SPEC = SandboxSpec(run_name="verify-test", prompt_key="p0")


class _NoJudge:
    """The chat model a run's checks get; none of these checks calls it."""

    async def complete(self, request: ChatRequest) -> ModelReply:
        raise ModelAPIError(FailureClass.BAD_REQUEST, "no model call is expected here")


def _attempt(final: str | None = "All done.", verify: dict[str, object] | None = None) -> Attempt:
    turns = (UserTurn("Write hello.txt"),)
    return Attempt("Write hello.txt", turns, final, "completed", 0, {}, verify or {})


@pytest.fixture(params=["local", "bwrap"])
def options(request: pytest.FixtureRequest, tmp_path: Path) -> SandboxOptions:
    if request.param == "local":
        return SandboxOptions(backend="local", root=str(tmp_path / "sandboxes"))
    return request.getfixturevalue("bwrap_options")  # type: ignore[no-any-return]


@asynccontextmanager
async def _context(options: SandboxOptions) -> AsyncIterator[ConversationContext]:
    context = ConversationContext(ToolConfig(), _NoJudge(), SPEC, sandbox_factory(options), Resources())
    try:
        yield context
    finally:
        await context.aclose()


async def test_a_command_sees_the_agents_files_and_exit_0_passes(options: SandboxOptions) -> None:
    async with _context(options) as context:
        sandbox = await context.sandbox()
        await sandbox.write_file("hello.txt", b"hello\n")  # as the agent's write_file left it
        passed = await check_command(CommandCheck("grep -qx hello hello.txt"), context.sandbox)
        failed = await check_command(CommandCheck("grep -q bye hello.txt"), context.sandbox)
    assert (passed.passed, passed.score, passed.error) == (True, 1.0, None)
    assert passed.details["exit_code"] == 0 and passed.details["timed_out"] is False
    assert (failed.passed, failed.score, failed.details["exit_code"]) == (False, 0.0, 1)


async def test_the_last_line_is_the_score_and_the_output_is_capped(options: SandboxOptions) -> None:
    async with _context(options) as context:
        partial = await check_command(CommandCheck("echo '7 of 10'; echo 0.7"), context.sandbox)
        loud = await check_command(
            CommandCheck("head -c 20000 /dev/zero | tr '\\0' x; echo; exit 3"), context.sandbox
        )
        undecodable = CommandCheck("head -c 20000 /dev/zero | tr '\\0' '\\377'")
        binary = await check_command(undecodable, context.sandbox)
    assert (partial.passed, partial.score) == (True, 0.7)
    assert (loud.passed, loud.score, loud.details["exit_code"]) == (False, 0.0, 3)
    assert len(loud.details["output"]) == MAX_OUTPUT
    kept = binary.details["output"]  # undecodable bytes, each U+FFFD: 3 bytes in UTF-8
    assert set(kept) == {"\ufffd"} and MAX_OUTPUT - 3 < len(kept.encode()) <= MAX_OUTPUT


async def test_a_command_past_its_timeout_fails_and_says_so(options: SandboxOptions) -> None:
    async with _context(options) as context:
        result = await check_command(CommandCheck("sleep 30", timeout_s=0.5), context.sandbox)
    assert (result.passed, result.score, result.error) == (False, 0.0, None)
    assert result.details["timed_out"] is True and "timeout" in result.details["reason"]
    assert result.duration_s < 20


async def test_no_secret_of_the_runner_reaches_the_command(
    options: SandboxOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("MY_SERVICE_TOKEN", SECRET)
    async with _context(options) as context:
        result = await check_command(CommandCheck("env"), context.sandbox)
    assert result.passed and "PATH=" in result.details["output"]
    assert SECRET not in result.details["output"]
    assert os.environ["OPENAI_API_KEY"] == SECRET  # it was there to leak


async def test_no_sandbox_is_a_sandbox_error_not_a_fail() -> None:
    async def broken() -> Sandbox:
        raise SandboxStartError("the engine is gone")

    none = await check_command(CommandCheck("true"), None)
    failed = await check_command(CommandCheck("true"), broken)
    for result in (none, failed):
        assert (result.passed, result.score) == (None, None)
        assert result.error is not None and result.error.startswith("sandbox_error: ")
    assert "the engine is gone" in (failed.error or "")


async def test_a_real_cancel_of_the_attempt_still_cancels_the_verifier() -> None:
    task = asyncio.create_task(check_python("tests.support.verifiers:sleeps", _attempt(), None, 30))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(
    ("output", "score"), [("0.25\n\n", 0.25), ("1", 1.0), ("2", None), ("ok", None), ("", None)]
)
def test_score_lines(output: str, score: float | None) -> None:
    assert score_line(output) == score


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("raises", "verifier_error: tests.support.verifiers:raises raised RuntimeError: the verifier broke"),
        ("exits", "verifier_error: tests.support.verifiers:exits raised SystemExit: 3"),
        ("interrupts", "verifier_error: tests.support.verifiers:interrupts raised KeyboardInterrupt"),
        ("base_exception", "verifier_error: tests.support.verifiers:base_exception raised BaseException"),
        ("cancels_itself", "verifier_error: tests.support.verifiers:cancels_itself raised CancelledError"),
        ("junk", "verifier_error: tests.support.verifiers:junk returned str, not"),
        ("out_of_range", "verifier_error: tests.support.verifiers:out_of_range Score.score 1.5 is not"),
        (
            "sleeps",
            "verifier_error: tests.support.verifiers:sleeps gave no score within --verify_timeout=0.3s",
        ),
        ("swallows_the_timeout", "verifier_error: tests.support.verifiers:swallows_the_timeout gave no"),
        (
            "lone_surrogate",
            "verifier_error: tests.support.verifiers:lone_surrogate Score.details cannot be written as UTF-8",
        ),
        ("deep_details", "verifier_error: tests.support.verifiers:deep_details Score.details nests deeper"),
    ],
)
async def test_a_verifier_that_misbehaves_is_a_verifier_error(name: str, error: str) -> None:
    result = await check_python(f"tests.support.verifiers:{name}", _attempt(), None, 0.3)
    assert (result.passed, result.score) == (None, None)
    assert result.error is not None and result.error.startswith(error), result.error


async def test_a_verifier_gets_the_attempt_and_the_sandbox_the_agent_left(options: SandboxOptions) -> None:
    spec = "examples.verifier:wrote_file"
    verify = {"python": {"file": "hello.txt", "content": "hello\n"}}
    async with _context(options) as context:
        sandbox = await context.sandbox()
        missing = await check_python(spec, _attempt(verify=verify), sandbox, 5)
        await sandbox.write_file("hello.txt", b"hello\n")
        found = await check_python(spec, _attempt(verify=verify), sandbox, 5)
    assert (missing.passed, missing.score, missing.details["reason"]) == (False, 0.0, "missing")
    assert (found.passed, found.score) == (True, 1.0)
    assert found.details == {"verifier": spec, "file": "hello.txt", "size": 6}


async def test_the_record_names_the_verifier_whatever_its_details_say() -> None:
    result = await check_python("tests.support.verifiers:names_itself", _attempt(), None, 5)
    assert result.details == {"verifier": "tests.support.verifiers:names_itself", "why": "mine"}
    assert (result.passed, result.error) == (False, None)


def test_a_verifier_that_cannot_be_called_is_refused_naming_the_flag() -> None:
    for spec, why in [
        (
            "tests.support.broken_verifier:f",
            "cannot import tests.support.broken_verifier: ImportError: this verifier",
        ),
        ("tests.support.no_such_module:f", "cannot import tests.support.no_such_module: ModuleNotFoundError"),
        ("tests.support.verifiers:nope", "has no attribute 'nope'"),
        ("tests.support.verifiers:not_async", "not_async is not an async function"),
        (
            "tests.support.verifiers:one_parameter",
            "one_parameter(attempt) cannot be called as (attempt, sandbox)",
        ),
        ("tests.support.verifiers:keyword_only", "keyword_only(attempt, *, sandbox) cannot be called as"),
        ("tests.support.verifiers", "give module:function"),
        ("tests.support.exiting_verifier:f", "cannot import tests.support.exiting_verifier: SystemExit: 0"),
        (
            "tests.support.hard_exiting_verifier:f",
            "cannot import tests.support.hard_exiting_verifier: ExitCalled: os._exit(0) called",
        ),
    ]:
        with pytest.raises(VerifierLoadError) as caught:
            load_verifier(spec)
        assert str(caught.value).startswith(f"--verifier={spec}: ") and why in str(caught.value), caught.value
    assert load_verifier("tests.support.verifiers:with_defaults") is not None


async def test_the_runner_runs_every_kind_in_order_and_rescoring_leaves_the_command_out(
    options: SandboxOptions,
) -> None:
    checks = Checks(
        AnswerCheck("done", "contains"), CommandCheck("exit 1"), python=True, row={"answer": "done"}
    )
    run = VerifyOptions(verifier="tests.support.verifiers:final_says_done")
    async with _context(options) as context:
        verification = await verify_attempt(checks, _attempt(), context, _NoJudge(), run)
    assert verification is not None
    assert [c.method for c in verification.checks] == ["answer", "command", "python"]
    assert [c.passed for c in verification.checks] == [True, False, True]
    assert verification.passed is False and verification.reward == pytest.approx(2 / 3)
    assert verification.checks[2].details["had_sandbox"] is True  # the command check opened it
    rescored = await rescore_attempt(checks, _attempt(), _NoJudge(), run)
    assert rescored is not None and [c.method for c in rescored.checks] == ["answer", "python"]
    assert rescored.checks[1].details["had_sandbox"] is False
    assert not_rescorable(checks) == ("command",)
    assert await verify_attempt(Checks(), _attempt(), None, _NoJudge(), run) is None


async def test_a_verifier_gets_no_sandbox_the_agent_never_opened(options: SandboxOptions) -> None:
    checks = Checks(python=True)
    run = VerifyOptions(verifier="tests.support.verifiers:final_says_done")
    async with _context(options) as context:
        verification = await verify_attempt(checks, _attempt(), context, _NoJudge(), run)
        assert not context.sandbox_opened
    assert verification is not None and verification.checks[0].details["had_sandbox"] is False


def test_converse_runs_its_after_hook_with_the_sandbox_still_open(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    call = (("terminal", json.dumps({"command": "printf 'hi' > left.txt"})),)
    sim_endpoint.script("hook", [Turn(reasoning="r", tool_calls=call), Turn(content="done")])
    config = AgentConfig(model="sim-model", base_url=sim_endpoint.base_url, max_retries=0, max_iterations=3)
    root = tmp_path / "sandboxes"
    factory = sandbox_factory(SandboxOptions(backend="local", root=str(root)))
    seen: list[tuple[str, bytes]] = []

    async def after(result: ConversationResult, context: ConversationContext) -> None:
        assert context.sandbox_opened and any(root.rglob("left.txt"))  # not destroyed yet
        seen.append((result.outcome.value, await (await context.sandbox()).read_file("left.txt")))

    async def run() -> ConversationResult:
        model = open_chat_model(config)
        try:
            prompt = Prompt("hook", SandboxSpec("hook-run", "hook-key"))
            return await converse(config, model, resolve_tools(["terminal"]), prompt, factory, after=after)
        finally:
            await model.aclose()

    done = asyncio.run(run())
    assert done.final_response == "done" and seen == [("completed", b"hi")]
    assert not list(root.rglob("left.txt"))  # and destroyed once the hook returned
