"""What a bwrap command leaves once its call has returned: nothing of its pid namespace
(issue 20 item 5: after a fork bomb a process of the sandbox's user outlived the run)."""

from __future__ import annotations

import os

import pytest

from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.bwrap.sandbox import open_sandbox

pytestmark = [pytest.mark.bwrap, pytest.mark.anyio]
SPEC = SandboxSpec(run_name="run-c", prompt_key="prompt-0")
NAMESPACE = "readlink /proc/self/ns/pid; "
# Many processes that hold no descriptor of the command's output (the old launcher waited
# for the output's EOF, which only the processes holding it delayed).
SPREAD = "for i in $(seq 40); do sleep 900 >/dev/null 2>&1 </dev/null & done; "
BOMB = "f() { f >/dev/null 2>&1 & f >/dev/null 2>&1 & }; f; "


def _in_namespace(namespace: str) -> list[int]:
    """Host pids of the live processes in the pid namespace `namespace` (zombies have none)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.readlink(f"/proc/{name}/ns/pid") == namespace:
                with open(f"/proc/{name}/stat") as handle:
                    if handle.read().rsplit(")", 1)[1].split()[0] != "Z":
                        found.append(int(name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize(
    ("command", "timeout"),
    [
        (SPREAD + "echo spawned", 30.0),  # the command exits: its background processes die
        (BOMB + "sleep 1; echo done", 30.0),  # a fork bomb bounded by the process limit
        (BOMB + "sleep 600", 3.0),  # the same, killed at its timeout
        (SPREAD + "exec sleep 600", 3.0),
    ],
)
async def test_nothing_of_a_command_outlives_its_call(
    bwrap_options: SandboxOptions, command: str, timeout: float
) -> None:
    async with open_sandbox(SPEC, bwrap_options) as sandbox:
        for _ in range(3):  # a race shows up in some rounds only
            result = await sandbox.exec(NAMESPACE + command, timeout=timeout)
            namespace = result.output.split("\n", 1)[0]
            assert namespace.startswith("pid:["), result.output
            assert _in_namespace(namespace) == []
        assert (await sandbox.exec("echo alive", timeout=30)).output == "alive\n"
