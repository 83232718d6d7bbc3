"""`AIAgent`: one tool-using conversation against an OpenAI-compatible endpoint.

A thin facade over the loop (`agent.loop.agent_loop.converse`) with the reference's keyword
constructor and result dict. Also a single-query command line:

    python run_agent.py --query="..." --model=... --base_url=... --enabled_toolsets=terminal,file
"""

from __future__ import annotations

from agent.common.stop_signals import stop_on_signals

if __name__ == "__main__":
    stop_on_signals()  # first: Ctrl-C and SIGTERM stop the command from here on (exit 130)

from agent.common.secrets import conceal

if __name__ == "__main__":
    conceal()  # may re-execute this script: first, so the SDK's ~1 s of imports is paid once

import asyncio
import dataclasses
import logging
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from agent.config.agent_config import DEFAULT_BASE_URL, DEFAULT_MODEL, AgentConfig
from agent.config.query_config import QueryConfig
from agent.errors import FAILURE_ADVICE, ConfigError
from agent.export.samples_file import save_trajectory
from agent.export.sharegpt import to_sharegpt
from agent.llm.rate_limit import AdaptiveLimiter
from agent.loop.agent_loop import converse
from agent.loop.conversation import ConversationResult, Prompt
from agent.protocols import ChatModel, SandboxFactory, SandboxSpec
from agent.protocols.turns import to_openai_messages
from agent.sandboxes import SandboxOptions, sandbox_factory
from agent.toolbox.registry import ResolvedTools, resolve_tools

log = logging.getLogger("agent")
RETRIES = "agent.llm.client"  # its INFO lines say each failed model call that is retried


class AIAgent:
    """Runs conversations; each gets a fresh sandbox, destroyed when the conversation ends.

    Keywords other than the ones named here are `AgentConfig` fields (`max_iterations`,
    `enabled_toolsets`, `ephemeral_system_prompt`, `providers_allowed`, `max_tokens`, …);
    `config=` passes a whole `AgentConfig` instead (see `from_config`)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str = DEFAULT_MODEL,
        *,
        save_trajectories: bool = False,
        verbose_logging: bool = False,
        quiet_mode: bool = False,
        sandbox: str | SandboxOptions = "local",
        run_name: str = "adhoc",
        trajectory_dir: str = ".",
        chat_model: ChatModel | None = None,
        sandbox_factory_: SandboxFactory | None = None,
        tools_: ResolvedTools | None = None,
        limiter: AdaptiveLimiter | None = None,
        config: AgentConfig | None = None,
        **settings: Any,
    ) -> None:
        if config is not None and settings:
            raise TypeError(f"AIAgent: config= and config keywords together: {', '.join(sorted(settings))}")
        base_url = base_url or DEFAULT_BASE_URL
        self.config = config or agent_config(base_url=base_url, api_key=api_key, model=model, **settings)
        self.save_trajectories, self.trajectory_dir = save_trajectories, trajectory_dir
        self.run_name, self._chat_model, self._limiter = run_name, chat_model, limiter
        # Resolved once per agent: every conversation offers the same tools.
        enabled, disabled = self.config.enabled_toolsets or None, self.config.disabled_toolsets
        self.tools = tools_ or resolve_tools(enabled, disabled, self.config.tools)
        options = sandbox if isinstance(sandbox, SandboxOptions) else SandboxOptions(backend=sandbox)
        self._sandboxes = sandbox_factory_ or (sandbox_factory(options) if self.tools.specs else None)
        _set_log_level(verbose_logging, quiet_mode)
        for tool, reason in sorted(self.tools.unavailable.items()):
            log.debug("%stool %s not offered: %s", self.config.log_prefix, tool, reason)

    @classmethod
    def from_config(
        cls,
        config: AgentConfig,
        *,
        enabled_toolsets: Sequence[str] | None = None,
        disabled_toolsets: Sequence[str] | None = None,
        sandbox: str | SandboxOptions | None = None,
        save_trajectories: bool = False,
        verbose: bool = False,
        quiet: bool = False,
    ) -> AIAgent:
        """An agent for a whole config (the single-query CLI's); toolsets given here replace its own."""
        if enabled_toolsets is not None:
            config = dataclasses.replace(config, enabled_toolsets=tuple(enabled_toolsets))
        if disabled_toolsets is not None:
            config = dataclasses.replace(config, disabled_toolsets=tuple(disabled_toolsets))
        return cls(
            config=config,
            sandbox=sandbox or "local",
            save_trajectories=save_trajectories,
            verbose_logging=verbose,
            quiet_mode=quiet,
        )

    def run_conversation(
        self,
        user_message: str,
        task_id: str | None = None,
        *,
        image: str | None = None,
        cwd: str | None = None,
    ) -> dict[str, Any]:
        """Synchronous form of `arun_conversation` (its own event loop and HTTP client)."""
        return asyncio.run(self._run_with_own_client(user_message, task_id, image=image, cwd=cwd))

    async def _run_with_own_client(
        self, user_message: str, task_id: str | None, *, image: str | None, cwd: str | None
    ) -> dict[str, Any]:
        if self._chat_model is not None:
            return await self.arun_conversation(user_message, task_id, image=image, cwd=cwd)
        from agent.llm.factory import open_chat_model  # the SDK (~0.5 s): not for --help or a bad flag

        client = self._chat_model = open_chat_model(self.config, limiter=self._limiter)
        try:
            return await self.arun_conversation(user_message, task_id, image=image, cwd=cwd)
        finally:
            self._chat_model = None
            await client.aclose()

    async def arun_conversation(
        self,
        user_message: str,
        task_id: str | None = None,
        *,
        image: str | None = None,
        cwd: str | None = None,
    ) -> dict[str, Any]:
        """Run one conversation to an explicit outcome; the result dict says which."""
        if self._chat_model is None:
            raise ConfigError("arun_conversation needs a chat_model (or use run_conversation)")
        spec = SandboxSpec(self.run_name, task_id or uuid.uuid4().hex[:12], image=image, cwd=cwd)
        prompt = Prompt(user_message, spec, self.config.log_prefix)
        result = await converse(self.config, self._chat_model, self.tools, prompt, self._sandboxes)
        if self.save_trajectories:
            conversations = to_sharegpt(result.turns, result.tool_schemas)
            save_trajectory(conversations, self.config.model, result.completed, directory=self.trajectory_dir)
        return result_dict(result)


def result_dict(result: ConversationResult) -> dict[str, Any]:
    """The result dict `run_conversation` returns (the reference's keys and ours); `messages`
    is the history as OpenAI messages (`agent.protocols.turns.to_openai_message`)."""
    usage = result.usage.as_dict()
    return {
        "outcome": result.outcome.value,
        "completed": result.completed,
        "partial": result.partial,
        "failed": result.failed,
        "error": result.error,
        "error_class": result.error_class,
        "final_response": result.final_response,
        "messages": to_openai_messages(result.turns),
        "api_calls": result.api_calls,
        "model": result.model,
        "toolsets_used": list(result.toolsets_used),
        "tool_schemas": list(result.tool_schemas),
        "usage": usage,
        "input_tokens": usage["prompt_tokens"],
        "output_tokens": usage["completion_tokens"],
        "total_tokens": usage["total_tokens"],
    }


def agent_config(**settings: Any) -> AgentConfig:
    """An `AgentConfig` from the reference's keywords: sequences (or None) for the tuple fields."""
    tuples = {f.name for f in dataclasses.fields(AgentConfig) if isinstance(f.default, tuple)}
    converted: dict[str, Any] = {k: tuple(v or ()) if k in tuples else v for k, v in settings.items()}
    return AgentConfig(**converted)


def _set_log_level(verbose: bool, quiet: bool) -> None:
    if verbose:
        log.setLevel(logging.DEBUG)
    elif quiet:
        log.setLevel(logging.WARNING)
        logging.getLogger(RETRIES).setLevel(logging.WARNING)


# ---------------------------------------------------------------- the single-query command line


def answer(config: QueryConfig) -> int:
    """Run `config.query` once and print the answer; the exit code says how it ended."""
    from agent.cli.command_line import write_out
    from agent.config.agent_config import serving

    with serving(config.agent, config.embedded_threads) as cfg:
        agent = AIAgent.from_config(
            cfg,
            sandbox=config.sandbox,
            save_trajectories=config.save_trajectories,
            verbose=config.verbose,
            quiet=config.quiet,
        )
        result = agent.run_conversation(config.query)
    if result["failed"]:
        error_class, error = result["error_class"], result["error"]
        advice = FAILURE_ADVICE.get(error_class, "")
        print(
            f"error: the model endpoint at {cfg.base_url} failed ({error_class}): {error} ({advice})",
            file=sys.stderr,
        )
        return 1
    if not result["completed"]:
        outcome, error = result["outcome"], result["error"]
        print(f"error: the conversation ended without a final answer ({outcome}): {error}", file=sys.stderr)
        return 4
    write_out(result["final_response"])
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    """`python run_agent.py --query=...`: flags read by Fire and checked against the flag table
    (agent.cli.flags), one QueryConfig built from them, then `answer`; never returns."""
    from agent.cli.agent_cli import run_query_command  # here: a library import loads no CLI code
    from agent.cli.logs import configure_logging
    from agent.common.redaction import redact_streams

    redact_streams()  # every line printed passes the secret redactor
    configure_logging(informative=(RETRIES,))  # plain lines: stdout the answer, stderr warnings, retries
    run_query_command(answer, argv)


if __name__ == "__main__":
    main()
