"""Start-up (issue 26: the first request ≤ 1 s after the process starts): the first request waits
for the workers' imports (the SDK), done once by the fork server, so `batch_runner.py` starts
the fork server before it reads its command line (`agent.backends.warm_up_early`), as soon as
the arguments plainly ask for a run on local workers: its imports then run beside the parent's
own (the flag table imports the whole configuration). A command that runs nothing (--help)
starts none, and one that stops on a flag error leaves none running.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# In the runner (not in the processes it starts): when the flag table is imported, whether
# the fork server was started then, and its pid.
SITECUSTOMIZE = """
import os, sys
if sys.argv and sys.argv[0].endswith("batch_runner.py") and "AGENT_SECRETS_FD" not in os.environ:
    def _hook(event, args, _path={path!r}, _write=os.write, _open=os.open):
        if event == "import" and args[0] == "agent.cli.flags":
            server = sys.modules.get("agent.batch.fork_server")
            pid = server.server_pid() if server is not None else None
            fd = _open(_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            _write(fd, ("%s %d\\n" % ("started" if pid else "none", pid or 0)).encode())
    sys.addaudithook(_hook)
"""


def _runner(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """`batch_runner.py argv` with the hook above; its result and what the hook noted."""
    hooks, noted = tmp_path / "hooks", tmp_path / "noted.txt"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE.replace("{path!r}", repr(str(noted))))
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENROUTER_API_KEY")}
    env.update(PYTHONPATH=f"{hooks}{os.pathsep}{REPO}", TMPDIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, str(REPO / "batch_runner.py"), *argv],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done, noted.read_text().split() if noted.exists() else []


def test_a_local_run_starts_the_fork_server_before_reading_its_command_line(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"prompt": "p"}\n')
    # stops on a flag error, read after the flag table's import
    done, noted = _runner(tmp_path, "--dataset_file=d.jsonl", "--run_name=r", "--num_workers=many")
    assert done.returncode == 2 and "--num_workers" in done.stderr, done
    assert noted[0] == "started", noted
    assert not Path(f"/proc/{noted[1]}").exists()  # stopped and reaped on the way out


@pytest.mark.parametrize(
    "argv",
    [
        ("--dataset_file=d.jsonl", "--run_name=r", "--help"),
        ("--dataset_file=d.jsonl", "--run_name=r", "--backend=ray"),
        ("--run_name=r", "--export=openai"),  # an existing run's export: nothing runs
    ],
    ids=["help", "another backend", "no dataset"],
)
def test_a_command_that_runs_nothing_here_starts_no_fork_server(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    _done, noted = _runner(tmp_path, *argv)
    assert noted[0] == "none", noted
