"""Start-up (issue 26): what each process of the real `batch_runner.py` imports, seen by an audit
hook (a sitecustomize first on PYTHONPATH, so in every process of the command) that writes each
module imported with the pid importing it. Behaviour, not timing: `--help` and a flag error
import no SDK; a plain local run's parent imports no SDK, no process imports a heavy optional
package, and the SDK is imported once for all workers (by the fork server they are forked from).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import BatchCLI, assert_nothing_left, prompts_dataset, write_dataset
from tests.test_lazy_imports import HEAVY


@pytest.fixture(autouse=True)
def fresh_runners(monkeypatch: pytest.MonkeyPatch) -> None:
    """The start itself is what these tests look at: every runner is a fresh interpreter, not
    forked from a zygote that imported its modules already (tests/support/zygote.py)."""
    monkeypatch.setenv("RUNNER_ZYGOTE", "0")


HOOK = """
import os, sys
_fd = os.open(os.environ["IMPORTS_SEEN"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
def _seen(event, args):
    if event == "import":
        os.write(_fd, ("%d %s\\n" % (os.getpid(), args[0])).encode())
sys.addaudithook(_seen)
"""
SDK = ("openai", "pydantic", "httpx", "httpx2", "aiohttp")


def _run(cli: BatchCLI, *args: str) -> tuple[subprocess.Popen[bytes], str, dict[int, set[str]]]:
    """The runner's process, its output, and the top-level packages each process imported."""
    hook = cli.workdir / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    env = cli.env()
    env.update(PYTHONPATH=f"{hook}:{env['PYTHONPATH']}", IMPORTS_SEEN=str(hook / "imports.txt"))
    with subprocess.Popen(
        cli.argv(*args), cwd=cli.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        out, err = proc.communicate(timeout=300)
    found: dict[int, set[str]] = defaultdict(set)
    for line in (hook / "imports.txt").read_text().splitlines():
        pid, module = line.split(" ", 1)
        found[int(pid)].add(module.split(".")[0])
    return proc, (out + err).decode(), found


@pytest.mark.parametrize(("args", "code"), [(("--help",), 0), (("--no_such_flag=1",), 2)])
def test_help_and_a_flag_error_are_answered_before_the_sdk_is_imported(
    tmp_path: Path, args: tuple[str, ...], code: int
) -> None:
    proc, said, imports = _run(BatchCLI(tmp_path), *args)
    assert proc.returncode == code, said
    imported = set().union(*imports.values())
    assert "fire" in imported  # the hook saw the command line's imports
    assert not imported & {*SDK, *HEAVY}


def test_a_local_run_imports_the_sdk_once_and_no_heavy_extra(tmp_path: Path) -> None:
    prompts = [f"Start-up prompt {i}" for i in range(4)]
    dataset = prompts_dataset(tmp_path / "d.jsonl", prompts)
    with SimulatedEndpoint() as endpoint:
        cli = BatchCLI(tmp_path, endpoint)
        flags = (
            f"--dataset_file={dataset}",
            "--batch_size=2",
            "--run_name=s",
            "--num_workers=2",
            "--sandbox=local",
        )
        proc, said, imports = _run(cli, *flags)
    assert proc.returncode == 0, said
    stats = json.loads((cli.output_dir / "s" / "statistics.json").read_text())
    assert stats["this_invocation"]["completed"] == len(prompts)
    assert not imports[proc.pid] & set(SDK), "the runner's own process imported the SDK"
    for pid, packages in imports.items():
        assert not packages & set(HEAVY), (pid, sorted(packages & set(HEAVY)))
        assert "regex" not in packages, pid  # only a row's regex check needs it (~15 ms)
    # the fork server imported it; the two workers forked from it did not import it again
    assert len([pid for pid, packages in imports.items() if "openai" in packages]) == 1


def test_a_run_stopped_by_its_dataset_leaves_no_process_behind(tmp_path: Path) -> None:
    """The fork server starts before the dataset is read; a run that stops there stops it too,
    at once, in the middle of its imports (else it would run on, holding our stdout)."""
    write_dataset(tmp_path / "d.jsonl", [{"no_prompt": "here"}])
    cli = BatchCLI(tmp_path)
    flags = ("--dataset_file=d.jsonl", "--batch_size=1", "--run_name=bad", "--base_url=http://127.0.0.1:9/v1")
    proc = cli.start(*flags, "--sandbox=local")
    assert proc.wait(timeout=120) == 2, (tmp_path / "runner.err").read_text()
    assert_nothing_left(proc.pid)


FORKED = """
import ctypes, gc, signal, subprocess, sys
from agent.batch.fork_server import warm_workers, worker_context

def dumpable(pipe):
    pipe.send(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE, before any code of ours

def collector(pipe):
    pipe.send(f"{gc.isenabled()} {gc.get_freeze_count()} {gc.get_count()[0]}")

def signals(pipe):
    command = "grep -E '^Sig(Blk|Ign)' /proc/self/status"  # what a command it runs starts with
    mask = subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout.split()
    pipe.send(f"{signal.getsignal(signal.SIGINT) is signal.SIG_IGN} {mask[1]} {int(mask[3], 16) & 2}")

if __name__ == "__main__":
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with warm_workers():
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == blocked  # the runner's own, as it was
        context = worker_context()
        ours, theirs = context.Pipe()
        process = context.Process(target=globals()[sys.argv[1]], args=(theirs,))
        process.start()
        print(ours.recv())
        process.join()
"""


def forked(tmp_path: Path, child: str, env: dict[str, str] | None = None) -> str:
    """What `child` (a function of FORKED) sends from a process the fork server forked."""
    script = tmp_path / "forked.py"
    script.write_text(FORKED, encoding="utf-8")
    done = subprocess.run(
        ["python", str(script), child], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_forked_worker_is_not_dumpable_before_it_unpickles_its_config(tmp_path: Path) -> None:
    """A worker's pickled config holds the API key: the fork server is non-dumpable, so a
    process it forks is from its first instruction (the flag survives fork), not only once
    `worker_entry.main` sets it."""
    assert forked(tmp_path, "dumpable") == "0"


def test_a_forked_worker_ignores_ctrl_c_and_its_commands_start_with_nothing_blocked(tmp_path: Path) -> None:
    """The runner starts the fork server with SIGINT blocked, so that a Ctrl-C during its imports
    is no KeyboardInterrupt there (a traceback); the server then ignores it and unblocks it. A
    worker ignores Ctrl-C (the runner decides how a run stops); a command it starts has no
    signal blocked (SigBlk all zeros) and SIGINT ignored, as under `nohup`: what it had before."""
    ignored, blocked, command_ignores_sigint = forked(tmp_path, "signals").split()
    assert ignored == "True"
    assert int(blocked, 16) == 0
    assert command_ignores_sigint == "2"


def test_workers_start_under_a_tmpdir_too_long_for_the_servers_socket(tmp_path: Path) -> None:
    """multiprocessing puts the fork server's socket under TMPDIR: under a long one (a test's
    or a user's) the path passes AF_UNIX's 107 bytes, and no worker could start."""
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    assert forked(tmp_path, "dumpable", env={**os.environ, "TMPDIR": str(deep)}) == "0"


def test_a_forked_worker_collects_with_the_servers_imports_frozen(tmp_path: Path) -> None:
    """The fork server imports the worker's modules without cyclic collection (the run's first
    request waits for those imports), then freezes what they made and collects again: a worker
    collects, and its first young collection does not walk the SDK's ~10^5 objects."""
    enabled, frozen, young = forked(tmp_path, "collector").split()
    assert enabled == "True"
    assert int(frozen) > 50_000  # the SDK's models, the loop, the tools
    assert int(young) < 5_000  # what the worker made since its fork, not the imports
