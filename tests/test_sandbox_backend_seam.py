"""A sandbox backend the batch layer has never heard of runs a whole batch (issue 22): the
batch layer asks the `SandboxBackend` Protocol, never a backend's name, which rows it can run,
what a run's start and each worker need of it.

`SeamBackend` is a third backend registered from outside `agent.sandboxes` (this module is its
module): local sandboxes opened afresh for each prompt, each holding a marker file, its own row
rule, and a record of every worker process it prepared. The runner is `batch_runner.py` behind
a main script that registers it at import, which each spawned worker process imports again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from agent import sandboxes
from agent.protocols import RowProblem, Sandbox, SandboxBackend, SandboxOptions, SandboxPool, SandboxSpec
from agent.sandboxes.local import LocalBackend
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import (
    REPO,
    BatchCLI,
    Finished,
    human_prompt,
    read_jsonl,
    write_dataset,
)

MARKER = "/workspace/.seam"
NO_IMAGES = "the seam sandbox backend runs no images"
RELATIVE_CWD = "the seam sandbox backend takes only a cwd relative to its workspace"
PREPARED = "seam-prepared-"  # + the worker's pid: a file in the run's temp dir
COMMAND = f"cat {MARKER}; pwd"


@asynccontextmanager
async def _marked(opened: AbstractAsyncContextManager[Sandbox]) -> AsyncIterator[Sandbox]:
    async with opened as sandbox:
        await sandbox.write_file(MARKER, b"opened by the seam backend\n")
        yield sandbox


class SeamBackend(LocalBackend):
    def open(self, spec: SandboxSpec, options: SandboxOptions) -> AbstractAsyncContextManager[Sandbox]:
        return _marked(super().open(spec, options))

    @property
    def pool(self) -> SandboxPool | None:
        return None  # every sandbox through `open`, so each holds the marker

    def row_problem(self, image: str | None, cwd: str | None) -> RowProblem | None:
        if image is not None:
            return RowProblem("image", NO_IMAGES)
        if cwd is not None and cwd.startswith("/"):
            return RowProblem("cwd", RELATIVE_CWD)
        return None

    def prepare_worker(self, options: SandboxOptions) -> None:
        super().prepare_worker(options)  # local's: adopt the orphans of its commands
        Path(tempfile.gettempdir(), f"{PREPARED}{os.getpid()}").touch()


BACKEND: SandboxBackend = SeamBackend()

MAIN = """
from agent.sandboxes import register

register("seam", "tests.test_sandbox_backend_seam")  # at import: spawned workers import this again

if __name__ == "__main__":
    import batch_runner  # on PYTHONPATH, as the repository

    batch_runner.run_cli()
"""


def _run_with_seam(cli: BatchCLI, main: Path, *args: str) -> Finished:
    return cli.run(*args, runner=str(main))


def _turns() -> list[Turn]:
    call = ("terminal", json.dumps({"command": COMMAND}))
    return [Turn(reasoning="Look.", tool_calls=(call,)), Turn(reasoning="Seen.", content="Done.")]


ROWS = [
    {"prompt": "Seam plain"},
    {"prompt": "Seam absolute", "cwd": "/app"},
    {"prompt": "Seam image", "docker_image": "python:3.11"},
    {"prompt": "Seam relative", "cwd": "sub"},
]


def test_a_registered_third_backend_runs_a_batch_with_its_own_row_rule(tmp_path: Path) -> None:
    main = tmp_path / "seam_runner.py"
    main.write_text(MAIN)
    with SimulatedEndpoint() as endpoint:
        for row in ROWS:
            endpoint.script(str(row["prompt"]), _turns())
        cli = BatchCLI(tmp_path, endpoint)
        dataset = write_dataset(tmp_path / "rows.jsonl", ROWS)
        run = _run_with_seam(
            cli,
            main,
            f"--dataset_file={dataset}",
            "--run_name=seam",
            "--sandbox=seam",
            "--num_workers=1",
            "--batch_size=2",
        )
    assert run.returncode == 0, run
    skipped = [line for line in run.stderr.splitlines() if line.startswith("skipped ")]
    assert skipped == [
        f"skipped {dataset}:2: cwd: {RELATIVE_CWD}",
        f"skipped {dataset}:3: docker_image: {NO_IMAGES}",
    ], run
    entries = read_jsonl(cli.run_dir("seam") / "trajectories.jsonl")
    shown = {
        human_prompt(entry): [turn["value"] for turn in entry["conversations"] if turn["from"] == "tool"]
        for entry in entries
    }
    assert sorted(shown) == ["Seam plain", "Seam relative"], run
    for prompt, where in (("Seam plain", "/workspace\\n"), ("Seam relative", "/workspace/sub\\n")):
        [result] = shown[prompt]
        assert "opened by the seam backend" in result and where in result, result
    assert len(list(cli.tmpdir.glob(f"{PREPARED}*"))) == 1, run  # the one worker, prepared once
    config = json.loads((cli.run_dir("seam") / "run_config.json").read_text())
    assert config["sandbox"]["backend"] == "seam"


def test_a_taken_name_cannot_be_registered_again() -> None:
    for name in ("local", "auto", "modal"):
        with pytest.raises(ValueError, match=f"sandbox backend name '{name}' is taken"):
            sandboxes.register(name, __name__)
    assert sandboxes.names() == sandboxes.BACKENDS  # nothing was added


def test_the_built_in_backends_answer_the_batch_layers_questions() -> None:
    local, bwrap, docker = (sandboxes.backend(name) for name in sandboxes.BACKENDS)

    def refused(image: str | None, cwd: str | None) -> list[bool]:
        return [b.row_problem(image, cwd) is not None for b in (local, bwrap, docker)]

    assert refused(None, "/app") == [False, False, False]
    assert refused("/srv/rootfs", None) == [True, False, False]  # an unpacked root filesystem
    assert refused("python:3.11", "src") == [True, True, False]  # a registry image
    options = SandboxOptions(backend="docker")
    assert docker.run_options(options, default_image_used=False).default_image is None
    assert docker.run_options(options, default_image_used=True) == options
    assert local.run_options(options, default_image_used=False) == options


_SCAN_WITHOUT_DOCKER_SDK = """
import sys
sys.modules["docker"] = None  # the optional SDK is not installed
from agent.batch.dataset import scan_dataset
scan = scan_dataset(sys.argv[1], backend="docker")
print(scan.valid, scan.error_count)
"""


def test_rows_for_a_backend_whose_dependency_is_missing_are_not_refused(tmp_path: Path) -> None:
    """Its rules cannot be asked: the run's start says in one line why the backend cannot run."""
    dataset = write_dataset(tmp_path / "rows.jsonl", [{"prompt": "p", "image": "python:3.11"}])
    done = subprocess.run(
        [sys.executable, "-c", _SCAN_WITHOUT_DOCKER_SDK, str(dataset)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert (done.returncode, done.stdout) == (0, "1 0\n"), done.stderr
