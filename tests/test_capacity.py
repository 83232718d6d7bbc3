"""Thousands of conversations need open files: the runner raises its limit at start, or stops
with one line naming the number it needs."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from agent.batch.capacity import needed_fds
from tests.support.batch import BatchCLI, prompts_dataset

RAISE_AND_REPORT = """
import resource, sys
from agent.batch.capacity import raise_fd_limit
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 8192))
print(raise_fd_limit(int(sys.argv[1])), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RAISE_AND_REPORT, "1024"], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["8192", "8192"]


def _hard_limit(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def test_a_hard_limit_too_low_for_the_conversations_exits_2_naming_the_number(tmp_path: Path) -> None:
    dataset = prompts_dataset(tmp_path / "d.jsonl", ["one"])
    cli = BatchCLI(tmp_path)
    done = subprocess.run(
        cli.argv(f"--dataset_file={dataset}", "--batch_size=1", "--run_name=fds", "--num_workers=1",
                 "--max_inflight=4096", "--base_url=http://127.0.0.1:9/v1"),
        cwd=tmp_path, env=cli.env(), capture_output=True, text=True, timeout=60, check=False,
        preexec_fn=lambda: _hard_limit(1024),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    need = needed_fds(4096)
    assert f"need {need} open files, but the hard limit is 1024" in done.stderr
    assert f"ulimit -Hn {need}" in done.stderr
    assert not cli.run_dir("fds").exists()  # refused before the run directory is made


def test_more_workers_than_the_hard_limit_allows_exits_2_naming_the_flag(tmp_path: Path) -> None:
    dataset = prompts_dataset(tmp_path / "d.jsonl", ["one"])
    cli = BatchCLI(tmp_path)
    done = subprocess.run(
        cli.argv(f"--dataset_file={dataset}", "--batch_size=1", "--run_name=fds", "--num_workers=100000",
                 "--base_url=http://127.0.0.1:9/v1"),
        cwd=tmp_path, env=cli.env(), capture_output=True, text=True, timeout=60, check=False,
        preexec_fn=lambda: _hard_limit(1024),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "error: --num_workers=100000: the runner needs" in done.stderr
    assert "Traceback" not in done.stderr
    assert not cli.run_dir("fds").exists()
