"""The runner's workers run the code of the checkout whose `batch_runner.py` was started, also
from another directory while another copy of the package is installed (this repository, in
the test environment): multiprocessing's fork server, which the workers are forked from, is not
handed the runner's sys.path on Python 3.11, so it found the installed copy first, and the
runner's parent and its workers ran different code."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import BatchCLI, prompts_dataset, read_json

REPO = Path(__file__).resolve().parent.parent
CODE = ("agent", "tools", "batch_runner.py", "run_agent.py", "model_tools.py", "toolsets.py")
# Added to the copy's package: every process that imports it notes its pid and argv[0]; and to
# its worker module: the PYTHONPATH of the process that imports it (the fork server).
NOTE = """
import os as _os, sys as _sys
with open(_os.environ["COPY_IMPORTS"], "a") as _notes:
    _notes.write(f"{_os.getpid()} {_sys.argv[0] if _sys.argv else ''}\\n")
"""
WORKER_NOTE = """
with open(os.environ["COPY_IMPORTS"] + ".env", "a") as _notes:
    _notes.write(os.environ.get("PYTHONPATH", "(none)") + "\\n")
"""


def _copy_of_the_checkout(where: Path) -> Path:
    for name in CODE:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, where / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, where / name)
    with (where / "agent" / "__init__.py").open("a") as init:
        init.write(NOTE)
    with (where / "agent" / "batch" / "worker.py").open("a") as worker:
        worker.write(WORKER_NOTE)
    return where


def test_the_workers_import_the_started_checkout_not_an_installed_copy(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    copy = _copy_of_the_checkout(tmp_path / "copy")
    elsewhere = tmp_path / "elsewhere"
    cli = BatchCLI(elsewhere, sim_endpoint)
    dataset = prompts_dataset(tmp_path / "prompts.jsonl", ["one", "two"])
    notes = tmp_path / "imports.txt"
    env = {**cli.env(), "COPY_IMPORTS": str(notes)}
    # as a user starts it (the installed package is this repository), with a PYTHONPATH of theirs
    env["PYTHONPATH"] = str(tmp_path / "users-own")
    argv = cli.argv(f"--dataset_file={dataset}", "--batch_size=5", "--run_name=copy", "--num_workers=2",
                    runner=str(copy / "batch_runner.py"))  # fmt: skip
    done = subprocess.run(argv, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert read_json(cli.run_dir("copy") / "statistics.json")["total_prompts"] == 2
    importers = [line.split(" ", 1) for line in notes.read_text().splitlines()]
    # The fork server (run as `python -c`) imported the copy; before, it imported this
    # repository's package, and so did every worker forked from it.
    assert any(argv0 == "-c" for _, argv0 in importers), importers
    # The copy's root was put on the server's PYTHONPATH for its start only: its environment,
    # which the workers inherit (and what they start), has the user's PYTHONPATH as it was.
    assert Path(f"{notes}.env").read_text().splitlines() == [str(tmp_path / "users-own")]
