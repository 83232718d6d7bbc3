"""Canary tests of the promise of docs/security.md and the README's Secrets section: the API key
(and every other well-known secret variable) is never written to trajectories, logs,
run_config.json or sandboxes.

A canary key is given to the real runner (by `--api_key` and by the environment) and to the
real single-query CLI; scripted terminal commands in real local sandboxes then try to read it
(`env`, `/proc/$PPID/environ`, every `/proc/*/cmdline` and `environ`, and a walk up the process
tree to pid 1), and an endpoint quotes it in a 401 error body. Zero canary bytes may appear
anywhere under the run directory, the sandboxes' directory or the processes' stdout/stderr.

The tests run as root in CI, and root may read any /proc/<pid>/environ: what they check is that
no process of ours HAS the key in its environment or command line, not permission bits.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.common.redaction import Redactor
from agent.common.secrets import SECRET_VARIABLES, is_secret_flag, strip_secret_flags
from agent.servers.faults import EndpointFault
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import REPO, prompts_dataset, tool_then_answer

KEY = "sk-canary-" + secrets.token_hex(12)  # never in this process's own environment
TOKEN = "hf_canary" + secrets.token_hex(12)
CANARIES = (KEY.encode(), TOKEN.encode())

WALK_UP = (
    "p=$$; while [ \"$p\" -gt 1 ]; do echo \"== $p\"; tr '\\0' ' ' < /proc/$p/cmdline; echo; "
    "tr '\\0' '\\n' < /proc/$p/environ | grep -a -i -e key -e token; "
    "p=$(sed -n 's/^PPid:\\t//p' /proc/$p/status); done"
)
COMMANDS = {
    "show env": "env",
    "parent environ": "tr '\\0' '\\n' < /proc/$PPID/environ",
    "parent cmdline": "tr '\\0' ' ' < /proc/$PPID/cmdline",
    "every process": "cat /proc/*/cmdline /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -a canary",
    "walk up": WALK_UP,
}


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARIABLES}
    env.pop("TERMINAL_ENV", None)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(PYTHONPATH=str(REPO), TMPDIR=str(tmp_path / "tmp"), PYTHONUNBUFFERED="1", HF_TOKEN=TOKEN)
    env.update(extra)
    return env


def _run(tmp_path: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, timeout=240, check=False
    )


def _files(root: Path) -> Iterator[Path]:
    return (path for path in root.rglob("*") if path.is_file() and not path.is_symlink())


def canary_bytes(tmp_path: Path, done: subprocess.CompletedProcess[bytes]) -> list[str]:
    """Where a canary was found: file paths under tmp_path (run directory, sandboxes, cwd) and
    the process's streams. Dataset files the test wrote hold no canary."""
    found = [str(path) for path in _files(tmp_path) if any(c in path.read_bytes() for c in CANARIES)]
    found += [
        name
        for name, data in (("stdout", done.stdout), ("stderr", done.stderr))
        if any(c in data for c in CANARIES)
    ]
    return found


def tool_outputs(endpoint: SimulatedEndpoint) -> str:
    """Every tool result the model was shown, as one text (for the controls)."""
    texts = [
        m.get("content") or "" for r in endpoint.requests for m in r.body["messages"] if m["role"] == "tool"
    ]
    return "\n".join(str(text) for text in texts)


@pytest.mark.parametrize("source", ["flag", "env"])
def test_no_command_in_a_local_sandbox_can_read_the_key(tmp_path: Path, source: str) -> None:
    with SimulatedEndpoint() as sim:
        for prompt, command in COMMANDS.items():
            sim.script(prompt, tool_then_answer(command=command))
        prompts_dataset(tmp_path / "d.jsonl", list(COMMANDS))
        flags = ["--dataset_file=d.jsonl", "--batch_size=2", "--run_name=canary", "--verbose"]
        flags += ["--distribution=terminal_only", "--num_workers=2", "--sandbox=local"]
        flags += [f"--base_url={sim.base_url}", "--model=sim-model", f"--output_dir={tmp_path / 'data'}"]
        key_env = {"OPENAI_API_KEY": KEY}
        # its own: "every process" also reads the other case's runner, run beside it by xdist,
        # in the few ms before that runner re-executes without it (root reads any environ)
        other = "sk-canary-other-" + secrets.token_hex(8)
        if source == "flag":
            flags.append(f"--api_key={KEY}")
            key_env = {"OPENROUTER_API_KEY": other}  # a variable the flag overrides
        done = _run(tmp_path, [str(REPO / "batch_runner.py"), *flags], _env(tmp_path, **key_env))
        seen = tool_outputs(sim)
        authorizations = {r.headers.get("authorization") for r in sim.requests}
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert authorizations == {f"Bearer {KEY}"}  # the key still reaches the endpoint
    assert "batch_runner.py" in seen and "PATH=" in seen  # the commands did read the runner's /proc
    assert (tmp_path / "data" / "canary" / "trajectories.jsonl").exists()
    assert other not in seen
    assert canary_bytes(tmp_path, done) == []
    assert b"a secret this run was started with" not in done.stderr  # no wrapper holds it


def test_a_wrapper_holding_the_key_is_said_at_the_start_of_a_local_run(tmp_path: Path) -> None:
    """`bash -c "python batch_runner.py --api_key=K; …"` keeps K in bash's command line, which a
    command under --sandbox=local can read (the runner scrubs only its own): said, with the way
    out, naming the process, never the key."""
    with SimulatedEndpoint() as sim:
        prompts_dataset(tmp_path / "d.jsonl", ["wrapped"])
        flags = ["--dataset_file=d.jsonl", "--batch_size=1", "--run_name=wrapped", "--sandbox=local"]
        flags += ["--distribution=terminal_only", f"--base_url={sim.base_url}", f"--api_key={KEY}"]
        flags += [f"--output_dir={tmp_path / 'data'}"]
        command = " ".join([sys.executable, str(REPO / "batch_runner.py"), *flags]) + "; exit $?"
        done = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=_env(tmp_path), capture_output=True, timeout=240
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    said = " ".join(done.stderr.decode().split())
    assert "a secret this run was started with is in bash (pid " in said, said[-3000:]
    assert "its cmdline and environ, which commands under --sandbox=local can read" in said  # HF_TOKEN
    assert canary_bytes(tmp_path, done) == []


def test_an_endpoint_quoting_the_key_leaves_no_trace(tmp_path: Path) -> None:
    """In a 401 error body (failures.jsonl, the log), in a reply (the shards, the merge), and in
    a tool call's arguments (the sandbox)."""
    with SimulatedEndpoint() as sim:
        sim.set_default_script([Turn(fault=EndpointFault(401, f"Incorrect API key provided: {KEY}"))])
        sim.script("echoed", [Turn(content=f"Your key is {KEY}.", reasoning="Quote it.")])
        # into a tool's arguments: the command hashes what it was given, the hash says what
        sim.script("into a tool", tool_then_answer(command=f"printf %s '{KEY}' | sha256sum"))
        prompts_dataset(tmp_path / "d.jsonl", ["denied one", "denied two", "echoed", "into a tool"])
        flags = ["--dataset_file=d.jsonl", "--batch_size=2", "--run_name=denied", "--verbose"]
        flags += ["--distribution=terminal_only", f"--output_dir={tmp_path / 'data'}"]
        flags += [f"--base_url={sim.base_url}", "--model=sim-model", f"--api_key={KEY}"]
        done = _run(tmp_path, [str(REPO / "batch_runner.py"), *flags], _env(tmp_path))
        seen = tool_outputs(sim)
    assert done.returncode == 1, done.stderr.decode()[-3000:]
    assert hashlib.sha256(b"[REDACTED]").hexdigest() in seen  # the sandbox never got the key
    assert hashlib.sha256(KEY.encode()).hexdigest() not in seen
    run_dir = tmp_path / "data" / "denied"
    failures = (run_dir / "failures.jsonl").read_text(encoding="utf-8")
    assert failures.count("Incorrect API key provided: [REDACTED]") == 2  # the error is kept, not the key
    assert b"Incorrect API key provided: [REDACTED]" in done.stderr
    assert "Your key is [REDACTED]." in (run_dir / "trajectories.jsonl").read_text(encoding="utf-8")
    assert canary_bytes(tmp_path, done) == []


@pytest.mark.parametrize("source", ["flag", "env"])
def test_the_single_query_cli_keeps_the_key_from_its_sandbox(tmp_path: Path, source: str) -> None:
    with SimulatedEndpoint() as sim:
        sim.script("walk up", tool_then_answer(command=WALK_UP))
        flags = [
            str(REPO / "run_agent.py"),
            "--query=walk up",
            "--model=sim-model",
            f"--base_url={sim.base_url}",
        ]
        flags += ["--save_trajectories", "--verbose", "--sandbox=local", "--enabled_toolsets=terminal,file"]
        env = _env(tmp_path) if source == "flag" else _env(tmp_path, OPENROUTER_API_KEY=KEY)
        done = _run(tmp_path, flags + ([f"--api_key={KEY}"] if source == "flag" else []), env)
        seen = tool_outputs(sim)
        authorizations = {r.headers.get("authorization") for r in sim.requests}
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert authorizations == {f"Bearer {KEY}"}
    assert "run_agent.py" in seen  # the walk did reach the CLI's own process
    assert (tmp_path / "trajectory_samples.jsonl").exists()
    assert canary_bytes(tmp_path, done) == []


@pytest.mark.parametrize(
    ("turn", "shown"),
    [
        (Turn(fault=EndpointFault(401, f"bad key {KEY}")), b"bad key [REDACTED]"),
        (Turn(content=f"Your key is {KEY}."), b"Your key is [REDACTED]."),
    ],
    ids=["401 body", "reply"],
)
def test_the_single_query_cli_redacts_an_endpoint_quoting_the_key(
    tmp_path: Path, turn: Turn, shown: bytes
) -> None:
    with SimulatedEndpoint() as sim:
        sim.script("quoted", [turn])
        flags = [str(REPO / "run_agent.py"), "--query=quoted", "--model=sim-model"]
        flags += [
            f"--base_url={sim.base_url}",
            "--save_trajectories",
            f"--api_key={KEY}",
            "--enabled_toolsets=file",
        ]
        done = _run(tmp_path, flags, _env(tmp_path))
    assert shown in done.stdout + done.stderr
    if turn.fault is None:
        assert shown in (tmp_path / "trajectory_samples.jsonl").read_bytes()
    assert canary_bytes(tmp_path, done) == []


# ---------------------------------------------------------------- the pieces


def test_the_redactor_replaces_every_form_of_every_secret() -> None:
    quoted = 'pa"ss\\word\u00e9'  # characters JSON escapes, and one it escapes only when asked for ASCII
    redactor = Redactor([KEY, quoted, "", "abc"])  # "" and very short values are never needles
    line = json.dumps({"k": KEY, "q": quoted}, ensure_ascii=False).encode() + b"\n"
    ascii_line = json.dumps({"q": quoted}).encode()
    assert redactor.redact_bytes(line) == b'{"k": "[REDACTED]", "q": "[REDACTED]"}\n'
    assert redactor.redact_bytes(ascii_line) == b'{"q": "[REDACTED]"}'
    assert redactor.redact_text(f"error: {KEY} and {KEY}") == "error: [REDACTED] and [REDACTED]"
    assert redactor.redact_text("abc is no secret") == "abc is no secret"
    clean = b'{"conversations": []}\n'
    assert redactor.redact_bytes(clean) is clean  # the common case copies nothing


def test_the_key_flag_is_taken_out_of_the_command_line_in_every_spelling() -> None:
    argv = ["run.py", "--api_key=a", "--api-key", "b", "--model=m", "--api_key", "--api_keys=x"]
    assert strip_secret_flags(argv) == (["run.py", "--model=m", "--api_key", "--api_keys=x"], "b")
    assert is_secret_flag("--api-key=z") and not is_secret_flag("--api_keys=z")


PROBE = """
import ctypes, json, os, sys
from agent.common.secrets import conceal
started = conceal()
read = lambda name: open(f"/proc/self/{name}", "rb").read().decode("utf-8", "replace")
print(json.dumps({
    "pid": os.getpid(), "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),
    "environ": read("environ"), "cmdline": read("cmdline"), "argv": sys.argv,
    "received": [started.flag_key, started.environ.get("HF_TOKEN")],
    "handoff_left": "AGENT_SECRETS_FD" in os.environ, "fds": sorted(os.listdir("/proc/self/fd")),
}))
"""


def test_conceal_re_executes_once_without_the_secrets_and_hands_them_over(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    argv = [sys.executable, str(probe), "--api-key", KEY, "--model=m"]
    proc = subprocess.Popen(argv, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    seen = json.loads(out)
    assert seen["pid"] == proc.pid  # the same process: exec, not a child
    assert seen["dumpable"] == 0
    assert seen["received"] == [KEY, TOKEN]
    assert seen["argv"] == [str(probe), "--model=m"]
    assert KEY not in seen["cmdline"] + seen["environ"] and TOKEN not in seen["environ"]
    assert not seen["handoff_left"]  # children do not inherit the descriptor's name
    assert len(seen["fds"]) == 4  # 0, 1, 2 and the listing's own: the pipe was closed


DROPPED_THEN_CONCEAL = """
from agent.common.stop_signals import stop_on_signals
stop_on_signals()

class Stopped:
    def __del__(self) -> None:  # where Python can only drop it, as in an import's weakref callback
        raise KeyboardInterrupt

Stopped()
from agent.common.secrets import conceal
conceal()
print("went on")
"""


def test_a_stop_dropped_before_the_re_exec_still_stops_the_command(tmp_path: Path) -> None:
    """Once lost: a SIGTERM raised in an import's callback, then the re-exec, and the run went on."""
    probe = tmp_path / "probe.py"
    probe.write_text(DROPPED_THEN_CONCEAL, encoding="utf-8")
    argv = [sys.executable, str(probe), "--api_key", KEY]
    proc = subprocess.run(argv, env=_env(tmp_path), capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stdout) == (130, ""), proc.stderr
    assert proc.stderr == "interrupted (exit 130)\n"
