"""What a trivial `command` check (`true`) adds to a prompt, per sandbox backend.

    python bench/verify_command.py [--prompts 20]

For each backend (local, bwrap, docker at DOCKER_HOST, podman at PODMAN_HOST through the docker
backend; an unavailable one is listed with its reason), --prompts conversations are played
against a real sandbox, alternating:

  base      the agent's one command (`true`) in its sandbox, then the sandbox closes
  checked   the same, then the check `true` (agent.verify.command.check_command) before it closes
  opened    the agent never needed a sandbox: the check opens one, runs `true`, closes it

Printed: the median wall time added per prompt over `base` (ms), and the CPU added per prompt
(ms: this process and its waited-for children, user + system; a container engine's own CPU is
not in it). No network is used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.config.verify_config import CommandCheck
from agent.errors import FailureClass, ModelAPIError
from agent.protocols import ChatRequest, ModelReply, SandboxFactory, SandboxSpec, ToolConfig
from agent.sandboxes import SandboxOptions, sandbox_factory, unavailable_reason
from agent.toolbox.context import ConversationContext, Resources
from agent.verify.command import check_command

MODES = ("base", "checked", "opened")


class _NoModel:
    async def complete(self, request: ChatRequest) -> ModelReply:
        raise ModelAPIError(FailureClass.BAD_REQUEST, "no model call in this bench")


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def _prompt(factory: SandboxFactory, key: str, mode: str) -> tuple[float, float]:
    """(wall s, CPU s) of one prompt's sandbox work in `mode`."""
    wall, cpu = time.perf_counter(), _cpu()
    context = ConversationContext(
        ToolConfig(), _NoModel(), SandboxSpec("bench-verify", key), factory, Resources()
    )
    try:
        if mode != "opened":
            await (await context.sandbox()).exec("true", timeout=60)  # the agent's own command
        if mode != "base":
            result = await check_command(CommandCheck("true", 60), context.sandbox)
            assert result.passed, result
    finally:
        await context.aclose()
    return time.perf_counter() - wall, _cpu() - cpu


async def _measure(factory: SandboxFactory, prompts: int) -> dict[str, tuple[float, float]]:
    await _prompt(factory, "warmup", "checked")  # first connections and image checks, once
    runs: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    for index in range(prompts):
        for mode in MODES:  # interleaved: a load change on the machine hits every mode alike
            runs[mode].append(await _prompt(factory, f"{mode}-{index}", mode))
    return {
        mode: (statistics.median(w for w, _ in values), statistics.mean(c for _, c in values))
        for mode, values in runs.items()
    }


def _report(label: str, options: SandboxOptions, prompts: int) -> None:
    reason = unavailable_reason(options)
    if reason is not None:
        print(f"{label:<8} unavailable: {reason}")
        return
    result = asyncio.run(_measure(sandbox_factory(options), prompts))
    base_wall, base_cpu = result["base"]
    cells = []
    for mode in MODES:
        wall, cpu = result[mode]
        cells.append(
            f"{wall * 1000:>8.1f} {((wall - base_wall) * 1000):>+8.1f} {((cpu - base_cpu) * 1000):>+8.1f}"
        )
    print(f"{label:<8} " + "   ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=20)
    args = parser.parse_args()
    print(f"per prompt, {args.prompts} prompts per mode; wall: median ms, added wall and CPU: ms over base")
    header = "   ".join(f"{m + ' wall':>8} {'+wall':>8} {'+cpu':>8}" for m in MODES)
    print(f"{'backend':<8} {header}")
    _report("local", SandboxOptions(backend="local"), args.prompts)
    _report("bwrap", SandboxOptions(backend="bwrap"), args.prompts)
    for label, variable in (("docker", "DOCKER_HOST"), ("podman", "PODMAN_HOST")):
        url = os.environ.get(variable)
        if not url:
            print(f"{label:<8} skipped: {variable} is not set")
            continue
        os.environ["DOCKER_HOST"] = url  # the docker backend reads DOCKER_HOST
        _report(label, SandboxOptions(backend="docker"), args.prompts)


if __name__ == "__main__":
    main()
