"""The batch runner with `--sandbox=docker`, end to end, against Docker (DOCKER_HOST) and
Podman's compat socket (PODMAN_HOST as the runner's DOCKER_HOST).

The runner is a real subprocess; the simulated endpoint makes the model run the terminal
commands each test chooses, and the tool results it sends back show what happened inside
the containers. The engine's event log says which containers the run created, from which
image and for which prompt. Every test ends with no container of its run on the engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent.sandboxes.docker.lifecycle import LABEL_PROMPT, LABEL_RUN
from agent.servers.simulated.server import SimulatedEndpoint
from agent.store.keys import prompt_key
from tests.fixtures.containers import DEFAULT_IMAGE, MARKED_IMAGE, Engine
from tests.fixtures.docker_run import DockerRun, run_cleanly
from tests.support.batch import (
    Finished,
    read_json,
    read_jsonl,
    requested_prompts,
    session_pids,
    trajectory_prompts,
    wait_until,
)

# Every docker-backend run removes the containers of dead runners on the engine it shares with
# the other tests, so such runs go to one xdist worker: a run of another test must not reap the
# containers a test killed on purpose before its own run does (tests/conftest.py).
ENGINE = pytest.mark.xdist_group("docker-engine")
pytestmark = [pytest.mark.docker, ENGINE]

ROW_IMAGE = "sandbox-test/python:3.11"
NO_SUCH_FILE = "No such file or directory"
INTERFACES = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
CONNECT = (
    "python3 -c 'import socket; s = socket.socket(); s.settimeout(3); "
    'print("connect", s.connect_ex(("192.0.2.1", 80)))\''
)


def tool_output(endpoint: SimulatedEndpoint, prompt: str) -> str:
    """The output of the (single) terminal call of `prompt`'s conversation."""
    for request in endpoint.requests:
        messages = request.body.get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        results = [m for m in messages if m.get("role") == "tool"]
        if users and users[0]["content"] == prompt and results:
            return str(json.loads(results[0]["content"])["output"])
    raise AssertionError(f"no tool result was sent for {prompt!r}")


def short_image(name: str) -> str:
    """Podman names images fully (localhost/…, docker.io/library/…); Docker as they were given."""
    for prefix in ("localhost/", "docker.io/library/", "docker.io/"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def created_containers(engine: Engine, run_name: str, since: int) -> dict[str, list[tuple[str, str]]]:
    """prompt key -> (container id, image) of every container created for the run since `since`."""
    filters = {"type": "container", "event": "create", "label": f"{LABEL_RUN}={run_name}"}
    found: dict[str, list[tuple[str, str]]] = {}
    for event in _events(engine, since, filters):
        attributes = event["Actor"]["Attributes"]
        ident = event["Actor"]["ID"]
        found.setdefault(attributes[LABEL_PROMPT], []).append((ident, short_image(attributes["image"])))
    return found


def _events(engine: Engine, since: int, filters: dict[str, str]) -> list[dict[str, Any]]:
    """The engine's events since `since` that match `filters`, every one recorded so far.
    Podman's Docker-compatible endpoint reads its events file only until `until` comes by the
    clock (a timer stops the read): under load it returned none of a session's long file.
    Its own endpoint, not streaming, reads the file to its end."""
    if engine.name == "podman":
        api = engine.client.api  # a requests session on the engine's socket
        query = {
            "stream": "false",
            "since": str(since),
            "filters": json.dumps({k: [v] for k, v in filters.items()}),
        }
        response = api.get(f"{api.base_url}/v4.0.0/libpod/events", params=query, timeout=60)
        response.raise_for_status()
        return [json.loads(line) for line in response.text.splitlines() if line.strip()]
    stream = engine.client.events(since=since, until=int(time.time()) + 1, filters=filters, decode=True)
    with contextlib.closing(stream):
        return list(stream)


# ------------------------------------------------------------------ a normal run


def test_prompts_run_isolated_in_their_own_containers_from_their_images(docker_run: DockerRun) -> None:
    write, read, marked = "Docker: write a secret", "Docker: read it in /app", "Docker: marked, no network"
    docker_run.write(
        [
            {"prompt": write},
            {"prompt": read, "image": ROW_IMAGE, "cwd": "/app"},
            {"prompt": marked, "docker_image": MARKED_IMAGE},
        ]
    )
    docker_run.script(
        {
            write: "echo s3cret > /workspace/secret.txt && cat /workspace/secret.txt; cat /marker",
            read: "pwd; cat /workspace/secret.txt",
            marked: f"cat /marker; cat /workspace/secret.txt; {INTERFACES}; {CONNECT}",
        }
    )
    since = int(time.time()) - 1
    finished = run_cleanly(docker_run, "--max_inflight=1")  # one prompt at a time, in order
    assert finished.returncode == 0, finished
    assert trajectory_prompts(docker_run.run_dir) == Counter([write, read, marked])

    outputs = {
        prompt: tool_output(docker_run.endpoint, prompt).splitlines() for prompt in (write, read, marked)
    }
    assert outputs[write][0] == "s3cret" and NO_SUCH_FILE in outputs[write][1]
    assert outputs[read][0] == "/app"  # the row's cwd
    assert NO_SUCH_FILE in outputs[read][1]  # the earlier prompt's file is not here
    assert outputs[marked][0] == "marked"  # only the marked image has /marker
    assert NO_SUCH_FILE in outputs[marked][1]
    assert outputs[marked][2:4] == ["lo", "connect 101"]  # only loopback; ENETUNREACH

    created = created_containers(docker_run.engine, docker_run.run_name, since)
    images = {key: [image for _, image in made] for key, made in created.items()}
    assert images == {
        prompt_key(write, 0): [DEFAULT_IMAGE],
        prompt_key(read, 0): [ROW_IMAGE],
        prompt_key(marked, 0): [MARKED_IMAGE],
    }
    assert len({ident for made in created.values() for ident, _ in made}) == 3


def test_a_missing_image_fails_only_its_prompt_and_resume_retries_it(docker_run: DockerRun) -> None:
    missing_image = f"sandbox-test/no-such-image-{random.randrange(16**8):08x}:1"
    first, lost, last = "Docker: before", "Docker: needs a missing image", "Docker: after"
    docker_run.write([{"prompt": first}, {"prompt": lost, "image": missing_image}, {"prompt": last}])
    docker_run.script({first: "cat /etc/os-release", lost: "pwd", last: "ls /"})
    since = int(time.time()) - 1

    finished = run_cleanly(docker_run)
    assert finished.returncode == 1, finished
    assert trajectory_prompts(docker_run.run_dir) == Counter([first, last])
    assert requested_prompts(docker_run.endpoint) == Counter([first, last])  # no token spent on it
    [failure] = read_jsonl(docker_run.run_dir / "failures.jsonl")
    assert (failure["prompt_index"], failure["error_class"]) == (1, "sandbox")
    assert missing_image in failure["message"] and "\n" not in failure["message"]
    assert "docker load" in failure["message"]  # says how to provide it
    assert "prompt 1 failed (sandbox)" in finished.stderr
    assert prompt_key(lost, 0) not in created_containers(docker_run.engine, docker_run.run_name, since)

    repository, tag = missing_image.split(":")
    docker_run.engine.client.images.get(DEFAULT_IMAGE).tag(repository, tag=tag)
    try:
        docker_run.endpoint.clear_requests()
        resumed = run_cleanly(docker_run, "--resume")
    finally:
        docker_run.engine.client.images.remove(missing_image)
    assert resumed.returncode == 0, resumed
    assert requested_prompts(docker_run.endpoint) == Counter([lost])
    assert tool_output(docker_run.endpoint, lost) == "/workspace\n"
    assert trajectory_prompts(docker_run.run_dir) == Counter([first, lost, last])


# ------------------------------------------------------------------ interruptions


@pytest.fixture
def sleeper() -> str:
    """A `sleep` duration no other process uses, to see the sandboxed commands from the host."""
    return f"{random.randint(600, 899)}.{random.randrange(1000):03d}{os.getpid() % 1000:03d}"


def running_sleepers(marker: str) -> int:
    """Host processes running `sleep <marker>` (container processes are host processes too)."""
    count = 0
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == f"sleep\0{marker}\0".encode():
                count += 1
    return count


def start_two_sleeping_prompts(run: DockerRun, sleeper: str) -> tuple[list[str], subprocess.Popen[bytes]]:
    """Starts the runner on two prompts whose commands sleep; returns once both sleep inside
    their containers."""
    prompts = ["Docker: sleep 0", "Docker: sleep 1"]
    run.write([{"prompt": prompt} for prompt in prompts])
    run.script({prompt: f"sleep {sleeper}" for prompt in prompts})
    proc = run.cli.start(*run.flags("--max_inflight=2"))
    wait_until(lambda: running_sleepers(sleeper) == 2, "both commands to run in their containers", 120)
    assert len(run.containers()) == 2
    return prompts, proc


def resume_to_the_end(run: DockerRun, prompts: list[str]) -> Finished:
    run.script({prompt: "echo resumed" for prompt in prompts})
    run.endpoint.clear_requests()
    finished = run_cleanly(run, "--resume")
    assert finished.returncode == 0, finished
    assert requested_prompts(run.endpoint) == Counter(prompts)
    assert trajectory_prompts(run.run_dir) == Counter(prompts)
    return finished


def test_ctrl_c_removes_every_container(docker_run: DockerRun, sleeper: str) -> None:
    prompts, proc = start_two_sleeping_prompts(docker_run, sleeper)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends on Ctrl-C
    assert proc.wait(timeout=120) == 130
    wait_until(lambda: not session_pids(proc.pid), "the workers to exit")
    assert docker_run.containers() == []
    assert running_sleepers(sleeper) == 0
    assert read_jsonl(docker_run.run_dir / "failures.jsonl") == []  # interrupted is not failed
    assert read_json(docker_run.run_dir / "checkpoint.json")["completed_prompts"] == []
    resume_to_the_end(docker_run, prompts)


def test_sigkill_of_the_runner_leaves_no_container(docker_run: DockerRun, sleeper: str) -> None:
    # Its workers die with it (SIGTERM on the parent's death) and remove their containers.
    prompts, proc = start_two_sleeping_prompts(docker_run, sleeper)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait_until(lambda: not session_pids(proc.pid), "the workers of the killed runner to exit")
    assert docker_run.containers() == []
    resume_to_the_end(docker_run, prompts)


def test_containers_of_sigkilled_workers_are_reaped_by_the_next_run(
    docker_run: DockerRun, sleeper: str
) -> None:
    # kill -9 of the runner and its workers at once (the OOM killer, `kill -9 -<pgid>`): no
    # process of ours can remove the containers, so the next run must.
    prompts, proc = start_two_sleeping_prompts(docker_run, sleeper)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    # The killed workers may still be zombies (init reaps them within ~2 s): a dead owner all
    # the same, so the run started right away must remove their containers.
    stale = sorted(container.name for container in docker_run.containers())
    assert len(stale) == 2 and running_sleepers(sleeper) == 2  # left behind, still running
    finished = resume_to_the_end(docker_run, prompts)
    for name in stale:
        assert f"removed a sandbox left by a dead process: {name}" in finished.stderr, finished
    assert running_sleepers(sleeper) == 0
