"""The runners the tests start are forked from a pre-started interpreter (`tests.support.zygote`):
what a script sees of its start, how it ends, and what /proc shows of it are what a fresh
`python script` gives, or the tests of the runner would test the harness instead."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support import zygote
from tests.support.batch import (
    API_KEY,
    BatchCLI,
    children_of,
    fork_server_pids,
    kill_started,
    sleepy_run,
    wait_until,
)

REPO = Path(__file__).resolve().parents[1]
Done = subprocess.CompletedProcess[str]

PROBE = """
import json, multiprocessing, os, sys, tempfile
from pathlib import Path
print("first line", end="")  # unbuffered, as PYTHONUNBUFFERED asks: in the output even if killed
sys.stdout.flush()
facts = {
    "argv": sys.argv,
    "orig_argv": sys.orig_argv[1:],
    "path": sys.path[:2],
    "cwd": os.getcwd(),
    "tmp": tempfile.gettempdir(),
    "probe_var": os.environ.get("PROBE_VAR"),
    "cmdline": Path("/proc/self/cmdline").read_bytes().rstrip(b"\\0").split(b"\\0")[1:],
    "dumpable": __import__("ctypes").CDLL(None).prctl(3, 0, 0, 0, 0),
    "umask": os.umask(0o022),
    "environ_has_var": b"PROBE_VAR=here" in Path("/proc/self/environ").read_bytes(),
    "stdout_write_through": sys.stdout.write_through,
    "stderr_line_buffering": sys.stderr.line_buffering,
    "main": __name__,
}
facts["cmdline"] = [arg.decode() for arg in facts["cmdline"]]
print(json.dumps(facts))
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENROUTER_API_KEY")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update({"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path / "tmp")}, **extra)
    return env


def _both(tmp_path: Path, argv: list[str], env: dict[str, str]) -> tuple[Done, Done]:
    return _fresh(tmp_path, argv, 60, env), _forked(tmp_path, argv, 60, env)


def test_a_forked_script_sees_what_a_fresh_one_sees(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    fresh, forked = _both(tmp_path, [str(script), "--flag=1", "two words"], _env(tmp_path, PROBE_VAR="here"))
    assert fresh.returncode == forked.returncode == 0, (fresh.stderr, forked.stderr)
    assert fresh.stdout.startswith("first line") and forked.stdout.startswith("first line")
    seen = [json.loads(done.stdout.removeprefix("first line")) for done in (fresh, forked)]
    assert seen[0] == seen[1]
    assert seen[1]["argv"] == [str(script), "--flag=1", "two words"]
    assert seen[1]["cmdline"] == [str(script), "--flag=1", "two words"]
    assert seen[1]["path"] == [str(tmp_path.resolve()), str(REPO)]
    assert seen[1]["tmp"] == str(tmp_path / "tmp") and seen[1]["environ_has_var"]


@pytest.mark.parametrize(
    ("body", "code", "said"),
    [
        ("import sys; sys.exit(3)", 3, ""),
        ("import sys; sys.exit('error: the one line')", 1, "error: the one line\n"),
        ("raise ValueError('boom')", 1, "ValueError: boom"),
        ("raise KeyboardInterrupt", -signal.SIGINT, "KeyboardInterrupt"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL, ""),
        ("import atexit; atexit.register(print, 'at exit'); print('end', end='')", 0, ""),
    ],
)
def test_a_forked_script_ends_as_a_fresh_one_ends(tmp_path: Path, body: str, code: int, said: str) -> None:
    script = tmp_path / "end.py"
    script.write_text(body + "\n")
    fresh, forked = _both(tmp_path, [str(script)], _env(tmp_path))
    assert fresh.returncode == forked.returncode == code
    assert fresh.stdout == forked.stdout
    assert said in fresh.stderr and said in forked.stderr


def test_a_fresh_interpreter_is_used_where_the_start_would_differ(tmp_path: Path) -> None:
    """A PYTHON variable of its own (or another PYTHONPATH) is read by the interpreter at its
    start: such a runner is started as `python script`, not forked."""
    script = tmp_path / "flags.py"
    script.write_text("import sys; print(sys.flags.dont_write_bytecode, sys.path[1])\n")
    shim = tmp_path / "shim"
    shim.mkdir()
    env = _env(tmp_path, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=f"{shim}:{REPO}")
    assert not zygote.fits(env)
    assert zygote.run([str(script)], cwd=tmp_path, env=env, timeout=60).stdout.split() == ["1", str(shim)]


def test_proc_shows_the_forked_command_line_then_nul_bytes(tmp_path: Path) -> None:
    """The one difference a reader of /proc sees: the forked process's argv is written into the
    zygote's larger area, which the kernel shows whole (without CAP_SYS_RESOURCE it cannot be
    shortened), so its command line and environment end in NUL bytes."""
    script = tmp_path / "raw.py"
    script.write_text("import sys; sys.stdout.buffer.write(open('/proc/self/cmdline', 'rb').read())\n")
    fresh, forked = (
        subprocess.run(
            [sys.executable, str(script), "a b"], cwd=tmp_path, env=_env(tmp_path), capture_output=True
        ),
        zygote.run([str(script), "a b"], cwd=tmp_path, env=_env(tmp_path), timeout=60),
    )
    expected = b"\0".join(arg.encode() for arg in (sys.executable, str(script), "a b")) + b"\0"
    assert fresh.stdout == expected
    raw = forked.stdout.encode()
    assert raw.startswith(expected) and raw[len(expected) :].strip(b"\0") == b""


def test_consecutive_runs_draw_different_hash_seeds(tmp_path: Path) -> None:
    """Fresh interpreters each draw a hash seed; forked runners alternate between two zygotes
    started with different ones, so a run and the next one (a resume) never share one."""
    script = tmp_path / "seed.py"
    script.write_text("print(hash('the same string'))\n")
    first, second = (zygote.run([str(script)], cwd=tmp_path, env=_env(tmp_path), timeout=60) for _ in "ab")
    assert first.returncode == second.returncode == 0
    assert first.stdout != second.stdout


def test_what_a_forked_run_cannot_hide_from_its_test(tmp_path: Path) -> None:
    """As `subprocess.run`: a process still holding the output after the script exited keeps
    the run from ending (a timeout here), undecodable output is an error, a directory that
    does not exist is the start's own error."""
    straggler = tmp_path / "straggler.py"
    straggler.write_text(
        "import subprocess, sys\n"
        "sleeper = subprocess.Popen(['sleep', '30'])\n"
        "open(sys.argv[1], 'w').write(str(sleeper.pid))\n"
    )
    for number, run in enumerate((_fresh, _forked)):
        pid_file = tmp_path / f"sleeper{number}"
        with pytest.raises(subprocess.TimeoutExpired):
            run(tmp_path, [str(straggler), str(pid_file)], 3)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    garbled = tmp_path / "garbled.py"
    garbled.write_text("import sys; sys.stdout.buffer.write(b'cut \\xe2\\x82')\n")
    for run in (_fresh, _forked):
        with pytest.raises(UnicodeDecodeError):
            run(tmp_path, [str(garbled)], 60)
    with pytest.raises(OSError):
        zygote.run([str(garbled)], cwd=tmp_path / "missing", env=_env(tmp_path), timeout=60)


def _fresh(tmp_path: Path, argv: list[str], timeout: float, env: dict[str, str] | None = None) -> Done:
    command = [sys.executable, *argv]
    env = _env(tmp_path) if env is None else env
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def _forked(tmp_path: Path, argv: list[str], timeout: float, env: dict[str, str] | None = None) -> Done:
    return zygote.run(argv, cwd=tmp_path, env=_env(tmp_path) if env is None else env, timeout=timeout)


def test_the_secret_re_execution_runs_as_written_and_proc_shows_no_key(tmp_path: Path) -> None:
    script = tmp_path / "concealed.py"
    script.write_text(
        "from agent.common.secrets import conceal\n"
        "import json, sys\nfrom pathlib import Path\n"
        "started = conceal()\n"
        "print(json.dumps([started.flag_key, sys.argv[1:], "
        "Path('/proc/self/cmdline').read_bytes().decode(errors='replace'), "
        "Path('/proc/self/environ').read_bytes().decode(errors='replace')]))\n"
    )
    env = _env(tmp_path, OPENAI_API_KEY="sk-env-secret")
    fresh, forked = _both(tmp_path, [str(script), f"--api_key={API_KEY}", "--other=1"], env)
    for done in (fresh, forked):
        assert done.returncode == 0, done.stderr
        key, argv, cmdline, environ = json.loads(done.stdout)
        assert key == API_KEY and argv == ["--other=1"]
        assert API_KEY not in cmdline and "sk-env-secret" not in environ


def test_a_runs_fork_server_is_its_child_shown_as_multiprocessing_starts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RUNNER_ZYGOTE", raising=False)
    with SimulatedEndpoint() as endpoint:
        cli = sleepy_run(tmp_path, endpoint, ["one", "two"], 30)
        proc = cli.start("--dataset_file=d.jsonl", "--batch_size=1", "--run_name=r", "--num_workers=2")
        try:
            assert isinstance(proc, zygote.ZygoteProcess)

            def two_workers() -> bool:
                servers = fork_server_pids(proc.pid)
                return len(servers) == 1 and len(children_of(servers[0])) == 2

            wait_until(two_workers, "two workers")
            [pid] = fork_server_pids(proc.pid)
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            assert cmdline[:2] == [sys.executable.encode(), b"-c"]
            assert cmdline[2].startswith(b"from multiprocessing.forkserver import main; main(")
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert API_KEY.encode() not in environ and b"TMPDIR=" + str(cli.tmpdir).encode() in environ
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=60) != 0
        finally:
            kill_started()
    assert BatchCLI.started == []
