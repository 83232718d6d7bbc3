"""Shared harness of the batch runner's end-to-end tests (this module holds no tests).

The runner runs as a real subprocess (`python batch_runner.py ...`, cwd = a temp dir) and talks
over HTTP to a `SimulatedEndpoint` living in the test process. `TMPDIR` points into the test's
temp dir, so the local sandboxes (`<tmp>/agent-sandboxes/<run_name>/`) are the test's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from agent.batch.jobs import Job
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support import zygote

REPO = Path(__file__).resolve().parents[2]
RUNNER = str(REPO / "batch_runner.py")
API_KEY = "sk-test-secret-7f3a9c"  # must never appear in anything the runner writes
RUN_TIMEOUT = 240.0


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:  # shown by pytest when an assertion about a run fails
        return f"exit {self.returncode}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-6000:]}"


class BatchCLI:
    """Runs `batch_runner.py` in `workdir` against `endpoint`, output under `workdir/data`."""

    started: ClassVar[list[zygote.Process]] = []  # for `kill_started` at teardown

    def __init__(self, workdir: Path, endpoint: SimulatedEndpoint | None = None) -> None:
        self.workdir = workdir
        self.endpoint = endpoint
        self.tmpdir = workdir / "tmp"
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        self.output_dir = workdir / "data"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("OPENROUTER_API_KEY", "OPENAI_API_KEY")}
        env.pop("TERMINAL_ENV", None)
        env.update(PYTHONPATH=str(REPO), TMPDIR=str(self.tmpdir), PYTHONUNBUFFERED="1")
        return env

    def argv(self, *args: str, output: bool = True, runner: str = RUNNER) -> list[str]:
        """The command line of `runner` (batch_runner.py, or a script that calls it) plus
        --base_url/--api_key for the endpoint and (with `output`) --output_dir; without it the
        runner writes to its default `data/` under `workdir`."""
        extra: list[str] = []
        if self.endpoint is not None:
            extra = [f"--base_url={self.endpoint.base_url}", f"--api_key={API_KEY}"]
        if output:
            extra.append(f"--output_dir={self.output_dir}")
        if not any(arg.startswith("--distribution=") for arg in args):
            # default needs every toolset (a run stops when one is unavailable): tests that are
            # not about toolsets run the terminal and file tools, which every machine has
            extra.append("--distribution=terminal_only")
        return [sys.executable, runner, *args, *extra]

    def run(
        self,
        *args: str,
        output: bool = True,
        timeout: float = RUN_TIMEOUT,
        runner: str = RUNNER,
        fresh: bool = False,
    ) -> Finished:
        """Run to its end; `fresh`: as a fresh interpreter, not forked (`tests.support.zygote`)."""
        argv = self.argv(*args, output=output, runner=runner)
        done = zygote.run(argv[1:], cwd=self.workdir, env=self.env(), timeout=timeout, fresh=fresh)
        return Finished(done.returncode, done.stdout, done.stderr)

    def start(self, *args: str, log_name: str = "runner", fresh: bool = False) -> zygote.Process:
        """The runner in its own session (as a terminal would start it), output to files;
        `fresh`: as a fresh interpreter, not forked (`tests.support.zygote`)."""
        out = (self.workdir / f"{log_name}.out").open("wb")
        err = (self.workdir / f"{log_name}.err").open("wb")
        with out, err:
            proc = zygote.start(
                self.argv(*args)[1:], cwd=self.workdir, env=self.env(), stdout=out, stderr=err
            )
        BatchCLI.started.append(proc)
        return proc

    def run_dir(self, run_name: str) -> Path:
        return self.output_dir / run_name

    def sandbox_root(self, run_name: str) -> Path:
        return self.tmpdir / "agent-sandboxes" / run_name


# ---------------------------------------------------------------- datasets and scripts


QUICK_AND_SLOW = ["Quick 0", "Slow 0", "Quick 1", "Slow 1"]


def interrupt_after_the_quick_prompts(tmp_path: Path, endpoint: SimulatedEndpoint, run_name: str) -> BatchCLI:
    """QUICK_AND_SLOW on 2 workers (the slow ones `sleep 30`), Ctrl-C once the quick two are
    written: the run exits 130 with the slow two in flight. Flags: `interrupted_flags(run_name)`."""
    for prompt in QUICK_AND_SLOW:
        endpoint.script(prompt, tool_then_answer(command="sleep 30" if "Slow" in prompt else "echo hi"))
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in QUICK_AND_SLOW])
    cli = BatchCLI(tmp_path, endpoint)
    proc = cli.start(*interrupted_flags(run_name))
    run_dir = cli.run_dir(run_name)
    wait_until(lambda: sum(batch_prompts(run_dir).values()) == 2, "the quick prompts written", 120)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=90) == 130
    return cli


def interrupt_a_resume(tmp_path: Path, endpoint: SimulatedEndpoint, run_name: str) -> BatchCLI:
    """A complete run of 2 quick prompts (--max_samples=2), then a --resume of all 4 of
    ["Quick 0", "Quick 1", "Quick 2", "Slow 0"] Ctrl-C'd once "Quick 2" is written (exit 130,
    "Slow 0" in flight): trajectories.jsonl holds the first 2 entries, the batch files 3."""
    prompts = ["Quick 0", "Quick 1", "Quick 2", "Slow 0"]
    for prompt in prompts:
        endpoint.script(prompt, tool_then_answer(command="sleep 30" if "Slow" in prompt else "echo hi"))
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
    cli = BatchCLI(tmp_path, endpoint)
    first = cli.run(*interrupted_flags(run_name), "--max_samples=2")
    assert first.returncode == 0, first
    proc = cli.start(*interrupted_flags(run_name), "--resume")
    run_dir = cli.run_dir(run_name)
    wait_until(lambda: sum(batch_prompts(run_dir).values()) == 3, "Quick 2 written", 120)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=90) == 130
    return cli


def interrupted_flags(run_name: str) -> tuple[str, ...]:
    return ("--dataset_file=d.jsonl", "--batch_size=2", f"--run_name={run_name}", "--num_workers=2")


def write_dataset(path: Path, rows: Iterable[dict[str, Any] | str]) -> Path:
    """One line per row: dicts as JSON, strings written as they are (for bad lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def prompts_dataset(path: Path, prompts: Sequence[str]) -> Path:
    return write_dataset(path, ({"prompt": p} for p in prompts))


def tool_then_answer(*, reasoning: bool = True, delay: float = 0.0, command: str = "echo hi") -> list[Turn]:
    """A terminal call, then a final answer; with or without reasoning on both turns."""
    think = "Let me think about this first." if reasoning else None
    call = (("terminal", json.dumps({"command": command})),)
    return [
        Turn(reasoning=think, tool_calls=call, delay=delay),
        Turn(content="All done.", reasoning=think, delay=delay),
    ]


# ---------------------------------------------------------------- reading the run directory


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def human_prompt(entry: dict[str, Any]) -> str:
    """The prompt of a trajectory entry: its first human turn."""
    return str(next(t["value"] for t in entry["conversations"] if t["from"] == "human"))


def trajectory_prompts(run_dir: Path) -> Counter[str]:
    return Counter(human_prompt(e) for e in read_jsonl(run_dir / "trajectories.jsonl"))


def batch_prompts(run_dir: Path) -> Counter[str]:
    """Prompts of every line in every batch file (duplicates included)."""
    found: Counter[str] = Counter()
    for path in sorted(run_dir.glob("batch_*.jsonl")):
        found.update(human_prompt(e) for e in read_jsonl(path))
    return found


def requested_prompts(endpoint: SimulatedEndpoint) -> Counter[str]:
    """First-call requests per prompt: how many conversations the endpoint saw start."""
    found: Counter[str] = Counter()
    for request in endpoint.requests:
        messages = request.body.get("messages") or []
        if not any(m.get("role") == "assistant" for m in messages):
            found[next(str(m["content"]) for m in messages if m.get("role") == "user")] += 1
    return found


# ---------------------------------------------------------------- processes


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text.rpartition(")")[2].split()  # state, ppid, pgrp, session, ...


def session_pids(session: int) -> list[int]:
    """Live (non-zombie) processes of a session: the runner, its workers, their sandboxes."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and fields[0] != "Z" and int(fields[3]) == session:
                found.append(int(entry.name))
    return found


def assert_nothing_left(session: int, within: float = 5.0) -> None:
    """Fail, naming their command lines, while processes of the session still run (zombies
    aside) after `within` seconds: the run's last processes (multiprocessing's resource tracker
    ends once no process of the run holds its pipe) may still be ending as the runner exits."""
    deadline = time.monotonic() + within
    while (left := session_pids(session)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == [], [cmdline(pid) or f"pid {pid}".encode() for pid in left]


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def kill_started() -> None:
    """SIGKILL the process group of every runner `start`ed (its workers share it), so a failed
    test leaves nothing running."""
    while BatchCLI.started:
        proc = BatchCLI.started.pop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def enterable_workdir(prefix: str) -> Iterator[Path]:
    """A working directory for runs with bwrap sandboxes (not pytest's tmp_path: a root runner
    starts bwrap under a uid that cannot enter a 0700 dir); afterwards the runners `start`ed are
    killed and it is removed."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    try:
        yield root
    finally:
        kill_started()
        shutil.rmtree(root)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll `condition` until it holds; fail naming `what` when it never does (a liveness bound,
    generous on purpose: this is no timing assertion)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for: {what}")
        time.sleep(0.05)


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file under `directory`."""
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def cmdline(pid: int) -> bytes:
    """A process's command line, NUL-separated (empty once it ended)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone since it was listed
        return b""


def fork_server_pids(runner: int) -> list[int]:
    """The runner's fork servers (agent.batch.fork_server; one but while a dead one is replaced)."""
    return [pid for pid in children_of(runner) if b"multiprocessing.forkserver" in cmdline(pid)]


def worker_pids(runner: int) -> list[int]:
    """The runner's worker processes: the children of its fork server, not the server itself
    nor the resource tracker."""
    return [worker for server in fork_server_pids(runner) for worker in children_of(server)]


def commands_of(worker: int) -> list[int]:
    """The worker's children running a prompt's command (the `sleep` of `sleepy_run`), not its
    own helpers: a worker starting up runs a cgroup probe (`sh -c echo $$ >.../cgroup.procs`),
    and one killed then (taken for busy under load) held no attempt to lose."""
    found = []
    for pid in children_of(worker):
        try:
            if b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def sleepy_run(tmp_path: Path, endpoint: SimulatedEndpoint, prompts: list[str], seconds: int) -> BatchCLI:
    for prompt in prompts:
        endpoint.script(prompt, tool_then_answer(command=f"sleep {seconds}"))
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
    return BatchCLI(tmp_path, endpoint)


SPEC_FIELDS = [  # a trajectory entry's top-level fields, in order
    "prompt_index",
    "conversations",
    "metadata",
    "completed",
    "partial",
    "api_calls",
    "toolsets_used",
    "tool_stats",
    "tool_error_counts",
]


def job(**fields: Any) -> Job:
    base: dict[str, Any] = {
        "index": 7,
        "key": "k7",
        "prompt": "q",
        "image": None,
        "cwd": None,
        "metadata": {"tag": "x", "model": "the row's, overridden"},
        "batch_num": 3,
        "toolsets": ("terminal",),
    }
    return Job(**{**base, **fields})
