"""Batch runner: run the agent over a JSONL dataset of prompts and write ShareGPT trajectories.

    python batch_runner.py --dataset_file=data/prompts.jsonl --batch_size=10 --run_name=my_run \\
        --model=anthropic/claude-sonnet-4.6 --num_workers=4
    python batch_runner.py --dataset_file=data/prompts.jsonl --batch_size=10 --run_name=my_run --resume
    python batch_runner.py --list_distributions

Output goes to <output_dir>/<run_name>/: batch_N.jsonl shards, checkpoint.json, statistics.json,
trajectories.jsonl (merged), plus discarded.jsonl and failures.jsonl records.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
from typing import Any, NoReturn

import fire
from rich.console import Console
from rich.logging import RichHandler

import toolsets
from agent.batch.dataset import require_valid_rows, scan_dataset
from agent.batch.run import BatchRun
from agent.config.agent_config import (
    DEFAULT_BASE_URL,
    DEFAULT_MODEL,
    AgentConfig,
    as_int,
    as_str,
    call_settings,
    is_embedded,
    is_loopback,
    resolve_api_key,
    served_endpoint,
)
from agent.config.run_config import RunConfig, check_run_name
from agent.errors import AgentError, ConfigError
from agent.sandboxes import SandboxOptions, available_backends, resolve_backend, unavailable_reason
from model_tools import toolset_availability

console = Console(stderr=True)


def _say(line: str) -> None:
    """One operator line, never wrapped at the console width (logs and tests read it whole)."""
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def _required(value: Any, flag: str) -> Any:
    if value is None or value == "":
        raise ConfigError(f"--{flag} is required (see --help)")
    return value


def _float(value: Any, flag: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"--{flag} must be a number, got {value!r}") from None
    if number <= 0:
        raise ConfigError(f"--{flag} must be positive, got {number}")
    return number


def list_distributions_text() -> str:
    backends = available_backends()
    lines = [toolsets.format_distributions(toolset_availability()), "", "Sandbox backends on this machine:"]
    lines += [
        f"  {name:8} {'available' if why is None else 'unavailable: ' + why}"
        for name, why in backends.items()
    ]
    return "\n".join(lines)


def build_config(flags: dict[str, Any]) -> RunConfig:
    """Every flag converted and validated once; one clear ConfigError per problem."""
    base_url = as_str(flags["base_url"], "base_url") or DEFAULT_BASE_URL
    agent = AgentConfig(
        model=as_str(flags["model"], "model") or DEFAULT_MODEL,
        base_url=base_url,
        api_key=resolve_api_key(flags["api_key"], base_url),
        request_timeout=_float(flags["request_timeout"], "request_timeout") or 600.0,
        **call_settings(flags),
        log_prefix_chars=as_int(flags["log_prefix_chars"], "log_prefix_chars", minimum=0) or 0,
    )
    distribution = as_str(flags["distribution"], "distribution") or "default"
    toolsets.get_distribution(distribution)  # unknown → ConfigError listing the valid ones
    num_workers = as_int(flags["num_workers"], "num_workers", minimum=1) or 1
    sandbox = SandboxOptions(
        backend=resolve_backend(as_str(flags["sandbox"], "sandbox")),
        default_image=as_str(flags["image"], "image") or SandboxOptions.default_image,
        network=bool(flags["sandbox_network"]),
    )
    return RunConfig(
        dataset_file=str(_required(as_str(flags["dataset_file"], "dataset_file"), "dataset_file")),
        batch_size=_required(as_int(flags["batch_size"], "batch_size", minimum=1), "batch_size"),
        run_name=check_run_name(str(_required(as_str(flags["run_name"], "run_name"), "run_name"))),
        agent=agent,
        output_dir=as_str(flags["output_dir"], "output_dir") or "data",
        distribution=distribution,
        seed=as_int(flags["seed"], "seed") or 0,
        num_workers=num_workers,
        max_inflight=max(num_workers, as_int(flags["max_inflight"], "max_inflight", minimum=1) or 64),
        resume=bool(flags["resume"]),
        verbose=bool(flags["verbose"]),
        max_samples=as_int(flags["max_samples"], "max_samples", minimum=1),
        keep_no_reasoning=bool(flags["keep_no_reasoning"]),
        prompt_timeout=_float(flags["prompt_timeout"], "prompt_timeout"),
        rpm=_float(flags["rpm"], "rpm"),
        tpm=_float(flags["tpm"], "tpm"),
        sandbox=sandbox,
        embedded_threads=as_int(flags["embedded_threads"], "embedded_threads", minimum=1) or 1,
    )


def _check_ready(config: RunConfig) -> None:
    """Problems that would waste the run, found before a token is spent."""
    reason = unavailable_reason(config.sandbox)
    if reason is not None:
        raise ConfigError(f"--sandbox={config.sandbox.backend} is unavailable here: {reason}")
    needs_key = not is_embedded(config.agent.model) and not is_loopback(config.agent.base_url)
    if needs_key and not config.agent.api_key:
        raise ConfigError(
            f"no API key for {config.agent.base_url}: "
            "pass --api_key or set OPENROUTER_API_KEY / OPENAI_API_KEY"
        )
    run_dir = config.run_dir
    if not config.resume and run_dir.exists() and any(run_dir.glob("*.jsonl")):
        raise ConfigError(
            f"{run_dir} already holds results: "
            "pass --resume to continue that run, or choose another --run_name"
        )


def main(
    dataset_file: Any = None,
    batch_size: Any = None,
    run_name: Any = None,
    distribution: Any = "default",
    model: Any = DEFAULT_MODEL,
    api_key: Any = None,
    base_url: Any = DEFAULT_BASE_URL,
    max_turns: Any = 10,
    num_workers: Any = 4,
    resume: bool = False,
    verbose: bool = False,
    list_distributions: bool = False,
    ephemeral_system_prompt: Any = None,
    log_prefix_chars: Any = 100,
    providers_allowed: Any = None,
    providers_ignored: Any = None,
    providers_order: Any = None,
    provider_sort: Any = None,
    max_tokens: Any = None,
    reasoning_effort: Any = None,
    reasoning_disabled: bool = False,
    prefill_messages_file: Any = None,
    max_samples: Any = None,
    seed: Any = 0,
    sandbox: Any = None,
    image: Any = None,
    sandbox_network: bool = False,
    output_dir: Any = "data",
    max_inflight: Any = 64,
    prompt_timeout: Any = None,
    rpm: Any = None,
    tpm: Any = None,
    keep_no_reasoning: bool = False,
    api_dialect: Any = "auto",
    request_timeout: Any = 600,
    max_retries: Any = 6,
    embedded_threads: Any = 1,
) -> NoReturn:
    """Run the agent over every prompt of --dataset_file; see the README for every flag."""
    flags = dict(locals())
    if list_distributions:
        print(list_distributions_text())
        sys.exit(0)
    config = build_config(flags)
    _check_ready(config)
    scan = scan_dataset(config.dataset_file, config.max_samples, require_valid=False)
    for error in scan.errors:
        _say(f"skipped {error}")
    if scan.error_count > len(scan.errors):
        _say(f"… and {scan.error_count - len(scan.errors)} more invalid lines")
    require_valid_rows(scan)  # after every bad line was named
    agent = config.agent
    with served_endpoint(agent.model, agent.base_url, config.embedded_threads) as (url, model):
        if is_embedded(agent.model):  # served for this run; no real key is sent, not even to loopback
            agent = dataclasses.replace(agent, base_url=url, model=model, api_key="local")
        sys.exit(BatchRun(dataclasses.replace(config, agent=agent), console).run(scan))


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the run like Ctrl-C: sandboxes destroyed, checkpoint written


def _log_handler() -> logging.Handler:
    """Rich output above the live progress bar on a terminal; elsewhere plain whole lines, since
    a RichHandler wraps each record at the console width and shreds `[B<n>:P<i>]` log lines."""
    if console.is_terminal:
        return RichHandler(console=console, show_path=False)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    return handler


def run_cli() -> None:
    logging.basicConfig(level=logging.WARNING, handlers=[_log_handler()])
    signal.signal(signal.SIGTERM, _terminate)
    try:
        fire.Fire(main)
    except AgentError as exc:
        _say(f"error: {exc}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    run_cli()
