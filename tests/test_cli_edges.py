"""Both command lines at their edges, as real subprocesses: Ctrl-C whatever SIGINT disposition
was inherited, a reader that closes stdout early (`| head -1`), and the order in which problems
with the inputs are reported (the order a user fixes them)."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cli.shared_config import TEXT_ONLY
from agent.protocols import ToolConfig
from agent.sandboxes import SandboxOptions, unavailable_reason
from agent.servers.faults import EndpointFault
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.toolbox.registry import resolve_tools
from tests.support.batch import (
    BatchCLI,
    kill_started,
    prompts_dataset,
    read_jsonl,
    tool_then_answer,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[1]
RUNNER, AGENT = str(ROOT / "batch_runner.py"), str(ROOT / "run_agent.py")
PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for `cat` or `ls` cut off by `| head`


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    kill_started()


def ignoring_sigint() -> None:
    """What `nohup … &` (or a non-interactive shell's `&`) hands the command: SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_ignoring_sigint(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with (cwd / "runner.err").open("wb") as err:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err,
            preexec_fn=ignoring_sigint, start_new_session=True,
        )  # fmt: skip
    BatchCLI.started.append(proc)
    return proc


def test_ctrl_c_stops_a_batch_run_started_with_sigint_ignored(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        endpoint.set_default_script(tool_then_answer(command="sleep 60"))
        cli = BatchCLI(tmp_path, endpoint)
        prompts_dataset(tmp_path / "d.jsonl", ["one", "two"])
        argv = cli.argv("--dataset_file=d.jsonl", "--batch_size=1", "--run_name=ign", "--num_workers=1")
        proc = start_ignoring_sigint(argv, tmp_path, cli.env())
        wait_until(lambda: len(endpoint.requests) >= 1, "a model call", 120)
        os.killpg(proc.pid, signal.SIGINT)  # the runner and its workers, as a terminal sends it
        assert proc.wait(timeout=90) == 130, (tmp_path / "runner.err").read_text()[-2000:]


def test_ctrl_c_stops_a_query_started_with_sigint_ignored(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        endpoint.set_default_script([Turn(content="late", delay=120)])
        argv = [sys.executable, AGENT, "--query=hi", "--model=m", f"--base_url={endpoint.base_url}"]
        argv.append("--enabled_toolsets=terminal")
        proc = start_ignoring_sigint(argv, tmp_path, dict(os.environ, TERMINAL_ENV="local"))
        wait_until(lambda: len(endpoint.requests) >= 1, "the model call", 60)
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 130, (tmp_path / "runner.err").read_text()[-2000:]
    last = (tmp_path / "runner.err").read_text().rstrip().splitlines()[-1]
    assert last == "interrupted: the conversation was stopped before its answer (exit 130)"


def sigint_caught(pid: int) -> bool:
    """Whether the process has a handler of its own for SIGINT (its first line has run)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGINT - 1)))


def group_members(pgid: int) -> list[str]:
    """The live (not zombie) processes of process group `pgid`, as "pid state command"."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")[:100]
        except (FileNotFoundError, ProcessLookupError):  # it ended meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(f"{entry.name} {fields[0]} {command!r}")
    return found


@pytest.mark.parametrize(
    ("script", "stop", "key"),
    [(RUNNER, "ctrl-c", False), (RUNNER, "sigterm", False), (RUNNER, "ctrl-c", True),
     (RUNNER, "sigterm", True), (AGENT, "ctrl-c", True)],
    ids=["runner-ctrl-c", "runner-sigterm", "runner-ctrl-c-reexec", "runner-sigterm-reexec", "query-ctrl-c"],
)  # fmt: skip
def test_a_signal_while_the_command_starts_stops_it_with_130(
    tmp_path: Path, script: str, stop: str, key: bool
) -> None:
    """From the script's first line on (its SIGINT handler set, as /proc shows): through the
    re-exec that takes the key off the command line, the imports, the fork server's start and
    the checks, each moment sampled ends the command with 130 and one `interrupted` line: the
    signal is not lost (SIGINT came in ignored), no traceback (nor the fork server's), and no
    process of the command is left behind. Ctrl-C goes to the whole group, as a terminal sends
    it; SIGTERM to the command alone, as `kill` does."""
    prompts_dataset(tmp_path / "d.jsonl", [f"p{i}" for i in range(20)])
    flags = ["--model=m", "--base_url=http://127.0.0.1:9/v1", *(["--api_key=sk-early"] if key else [])]
    if script == RUNNER:
        flags += ["--dataset_file=d.jsonl", "--batch_size=5", "--sandbox=local"]
        flags.append("--distribution=terminal_only")
    else:
        flags += ["--query=hi", "--enabled_toolsets=terminal"]
    env = dict(os.environ, TERMINAL_ENV="local", TMPDIR=str(tmp_path))
    for n, delay in enumerate((0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8)):
        run_name = [f"--run_name=r{n}"] if script == RUNNER else []
        stop_while_starting(start_ignoring_sigint([sys.executable, script, *flags, *run_name], tmp_path, env),
                            stop, delay, tmp_path / "runner.err")  # fmt: skip


def stop_while_starting(proc: subprocess.Popen[bytes], stop: str, delay: float, err_file: Path) -> None:
    wait_until(lambda: sigint_caught(proc.pid), "the script's first line", 30)
    time.sleep(delay)
    if stop == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == 130, (delay, err_file.read_text()[-2000:])
    err = err_file.read_text()
    assert "Traceback" not in err, (delay, err[-3000:])
    last = (err.rstrip().splitlines() or [""])[-1]  # or, once the run began, its own summary
    assert (last.startswith("interrupted") and "(exit 130)" in last) or "rerun with --resume" in last, last
    wait_until(lambda: not group_members(proc.pid), f"no process left in the group (at {delay} s)", 10)


@pytest.mark.parametrize(
    "argv",
    [[RUNNER, "--help"], [RUNNER, "--list_distributions"], [AGENT, "--help"]],
    ids=["runner-help", "distributions", "agent-help"],
)
def test_a_reader_that_closed_stdout_ends_the_command_quietly(argv: list[str]) -> None:
    """`… | head -1`: the reader is gone. Made certain by closing the pipe's read end before
    the command writes (a page that fits the pipe's buffer would otherwise race `head`)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        command = [sys.executable, *argv]
        done = subprocess.run(command, stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=60, check=False)  # fmt: skip
    finally:
        os.close(write_end)
    assert done.stderr == ""  # no traceback, no "Exception ignored … BrokenPipeError"
    assert done.returncode == PIPE_CLOSED


@pytest.mark.parametrize(
    "argv",
    [[RUNNER, "--help"], [RUNNER, "--list_distributions"], [AGENT, "--help"]],
    ids=["runner-help", "distributions", "agent-help"],
)
def test_a_stdout_that_cannot_be_written_is_one_line_and_exit_2(argv: list[str]) -> None:
    """`… > /dev/full`: every write fails with ENOSPC. One line says so; no traceback."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, *argv], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60, check=False)  # fmt: skip
    assert done.stderr == "error: cannot write to standard output: No space left on device\n"
    assert done.returncode == 2


@pytest.mark.parametrize("log", ["closed", "full"])
def test_a_run_whose_log_cannot_be_written_goes_on_to_its_end(tmp_path: Path, log: str) -> None:
    """`… 2>&1 | head -1` (the reader of the log gone before the run's first line) or
    `2>/dev/full`: the run was abandoned at its first progress line, exit 1. It goes on unseen:
    every entry, its statistics and report, exit 0."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    with SimulatedEndpoint() as endpoint, open("/dev/full", "w") as full:
        cli = BatchCLI(tmp_path, endpoint)
        dataset = prompts_dataset(tmp_path / "d.jsonl", [f"logged {i}" for i in range(6)])
        argv = cli.argv(f"--dataset_file={dataset}", "--batch_size=2", "--run_name=unseen", "--num_workers=2")
        stderr = write_end if log == "closed" else full.fileno()
        try:
            done = subprocess.run(argv, cwd=tmp_path, env=cli.env(), stdout=subprocess.DEVNULL,
                                  stderr=stderr, timeout=180, check=False)  # fmt: skip
        finally:
            os.close(write_end)
    assert done.returncode == 0
    run_dir = cli.run_dir("unseen")
    assert len(read_jsonl(run_dir / "trajectories.jsonl")) == 6
    assert (run_dir / "report.html").is_file()
    assert json.loads((run_dir / "statistics.json").read_text())["completion"]["exit_code"] == 0


def test_a_dataset_file_typo_is_reported_before_the_toolsets_it_would_need(tmp_path: Path) -> None:
    """The default distribution needs web search, unconfigured here: the missing file comes
    first all the same, since a user fixes the command line's names before the machine."""
    with SimulatedEndpoint() as endpoint:
        done = BatchCLI(tmp_path, endpoint).run(
            "--dataset_file=promtps.jsonl", "--batch_size=1", "--run_name=typo", "--distribution=default"
        )
        assert endpoint.requests == []
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[0] == "error: promtps.jsonl: dataset file not found"


def test_an_error_line_shows_what_was_typed_not_an_emoji(tmp_path: Path) -> None:
    """`:smile:` once printed as an emoji (rich's emoji codes) in the error naming it."""
    with SimulatedEndpoint() as endpoint:
        done = BatchCLI(tmp_path, endpoint).run(
            "--dataset_file=:smile:.jsonl", "--batch_size=1", "--run_name=e"
        )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[0] == "error: :smile:.jsonl: dataset file not found"


RULE = (
    "needs toolsets that are unavailable here "
    "(enable them, or pass --allow_missing_toolsets to run without them):"
)


def test_both_commands_refuse_toolsets_unavailable_here_alike(tmp_path: Path) -> None:
    """No web search backend here: the batch runner's terminal_web distribution and a query
    offering the same toolsets stop with the same lines and exit 2, before any request."""
    with SimulatedEndpoint() as endpoint:
        prompts_dataset(tmp_path / "d.jsonl", ["never sent"])
        batch = BatchCLI(tmp_path, endpoint).run(
            "--dataset_file=d.jsonl", "--batch_size=1", "--run_name=web", "--distribution=terminal_web"
        )
        query = run_query(tmp_path, endpoint, "--enabled_toolsets=terminal,file,web")
        assert endpoint.requests == []
    assert (batch.returncode, query.returncode) == (2, 2)
    batch_lines, query_lines = batch.stderr.splitlines(), query.stderr.splitlines()
    assert batch_lines[0] == f"error: --distribution=terminal_web {RULE}"
    assert query_lines[0] == f"error: --enabled_toolsets=terminal,file,web {RULE}"
    assert batch_lines[1:] == query_lines[1:] and [line.split(":")[0] for line in query_lines[1:]] == [
        "  web"
    ]


def test_a_query_allowed_to_miss_toolsets_names_them_and_offers_the_rest(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        endpoint.set_default_script([Turn(content="fine")])
        done = run_query(tmp_path, endpoint, "--enabled_toolsets=terminal,web", "--allow_missing_toolsets")
        offered = sorted(tool["function"]["name"] for tool in endpoint.requests[0].body["tools"])
    assert (done.returncode, done.stdout) == (0, "fine\n"), done.stderr
    assert offered == ["process", "terminal"]
    assert done.stderr.splitlines() == ["WARNING toolsets unavailable here, not offered: web"]


def run_query(cwd: Path, endpoint: SimulatedEndpoint, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, AGENT, "--query=hi", "--model=m", f"--base_url={endpoint.base_url}", *flags]
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENROUTER_API_KEY")}
    return subprocess.run(
        argv, cwd=cwd, env=dict(env, TERMINAL_ENV="local"), capture_output=True, text=True, timeout=120
    )


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BWRAP_CHOSEN = "sandbox backend: bwrap (the default, auto: the strongest usable here)"


def run_on_a_terminal(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """(exit code, what it wrote, colours stripped) for `argv` with stdout and stderr a pty."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, env=dict(env, COLUMNS="200"), stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every writer has gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout=120), ANSI.sub("", b"".join(chunks).decode(errors="replace"))


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "file"])
def test_the_sandbox_choice_is_said_once_as_information(terminal: bool) -> None:
    """Was `WARNING  WARNING:agent.sandboxes:sandbox backend: …` on a terminal (basicConfig's
    format inside Rich's level column) and WARNING for normal information everywhere."""
    if unavailable_reason(SandboxOptions(backend="bwrap")) is not None:
        pytest.skip("bwrap is not usable here")  # CI=true machines have it: the skip is for laptops
    workdir = Path(tempfile.mkdtemp(prefix="cli-edges-"))  # 0755: a root runner's bwrap enters it
    os.chmod(workdir, 0o755)
    try:
        with SimulatedEndpoint() as endpoint:
            cli = BatchCLI(workdir, endpoint)
            prompts_dataset(workdir / "d.jsonl", ["one"])
            argv = cli.argv("--dataset_file=d.jsonl", "--batch_size=1", "--run_name=said", "--num_workers=1")
            if terminal:
                code, out = run_on_a_terminal(argv, workdir, cli.env())
            else:
                done = cli.run(
                    "--dataset_file=d.jsonl", "--batch_size=1", "--run_name=said", "--num_workers=1"
                )
                code, out = done.returncode, done.stderr
    finally:
        shutil.rmtree(workdir)
    assert code == 0, out
    said = [" ".join(line.split()) for line in out.splitlines() if "sandbox backend" in line]
    assert len(said) == 1 and "WARNING" not in said[0] and ":agent." not in said[0], said
    assert said[0].endswith(f"INFO {BWRAP_CHOSEN}") if terminal else said[0] == f"INFO {BWRAP_CHOSEN}"


def test_the_embedded_model_is_listed_without_the_image_tools(tmp_path: Path) -> None:
    """It reads text alone (its server loads no vision projector; image parts never reach it)."""
    listed = {
        model: subprocess.run(
            [sys.executable, RUNNER, "--list_distributions", f"--model={model}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        for model in ("embedded", "some/multimodal-model")
    }  # fmt: skip
    section = {model: out.split("Toolset backends with these settings:")[1] for model, out in listed.items()}
    vision = {
        model: next(x for x in out.splitlines() if x.startswith("  vision "))
        for model, out in section.items()
    }
    assert vision["embedded"] == f"  vision    unavailable: {TEXT_ONLY}"
    assert vision["some/multimodal-model"] == "  vision    available"
    tools = resolve_tools(["browser", "vision"], config=ToolConfig(images_unsupported=TEXT_ONLY))
    assert "browser_navigate" in {spec.name for spec in tools.specs}
    assert set(tools.unavailable) >= {"browser_vision", "vision_analyze"}


def test_a_trickling_endpoint_is_a_timeout_and_retried(tmp_path: Path) -> None:
    """Headers at once, then a byte a second: each attempt ends at --request_timeout, the class
    is `timeout` (retried, as every timeout is), not `invalid_response` (never retried)."""
    with SimulatedEndpoint() as endpoint:
        endpoint.set_default_script([Turn(fault=EndpointFault(kind="trickle"))])
        prompts_dataset(tmp_path / "d.jsonl", ["slow"])
        done = BatchCLI(tmp_path, endpoint).run(
            "--dataset_file=d.jsonl", "--batch_size=1", "--run_name=trickle", "--num_workers=1",
            "--request_timeout=2", "--max_retries=1",
        )  # fmt: skip
        attempts = len(endpoint.requests)
    assert done.returncode == 1, done.stderr[-2000:]
    [failure] = read_jsonl(tmp_path / "data" / "trickle" / "failures.jsonl")
    assert failure["error_class"] == "timeout" and attempts == 2, (failure, attempts)
