"""A `--sandbox=local` run writes the same paths as bwrap and docker (issue 21): commands that
print their directory in every way and file tools that fail on paths show `/workspace`, never
the host directory of the sandbox (`<tmp>/agent-sandboxes/<run>/<pool>/<n>/workspace`), in
anything the run writes."""

from __future__ import annotations

import json
from pathlib import Path

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import BatchCLI, read_jsonl, write_dataset

PROMPT = "Where are you?"
COMMANDS = (
    "pwd; echo $PWD; ls -la $PWD; realpath .; readlink -f /proc/self/cwd; echo $HOME $TMPDIR",
    "mktemp; cd .. && pwd && ls -la; cd ../.. && pwd",
    "python3 -c 'import os; print(os.getcwd()); open(os.getcwd() + \"/missing.txt\")'",
    "cat /workspace/nothing-here; cd /workspace && pwd && touch made.txt && ls /workspace",
)
FILE_CALLS = (
    ("read_file", {"path": "missing.txt"}),
    ("read_file", {"path": "/etc/shadow"}),
    ("read_file", {"path": "."}),
    ("write_file", {"path": "/usr/local/x.txt", "content": "x"}),
    ("patch", {"path": "../../outside.txt", "old_string": "a", "new_string": "b"}),
    ("search_files", {"pattern": "x", "path": "/etc"}),
    ("read_file", {"path": "/workspace/made.txt"}),
)


def _turns() -> list[Turn]:
    calls = [("terminal", {"command": command}) for command in COMMANDS]
    calls += [("terminal", {"command": "ls", "workdir": "/no/such/dir"}), *FILE_CALLS]
    encoded = tuple((name, json.dumps(args)) for name, args in calls)
    think = "Let me look around."
    return [
        Turn(reasoning=think, tool_calls=encoded[:5]),
        Turn(reasoning=think, tool_calls=encoded[5:]),
        Turn(reasoning=think, content="Done."),
    ]


def test_a_local_run_never_writes_the_host_path_of_its_sandbox(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        endpoint.script(PROMPT, _turns())
        cli = BatchCLI(tmp_path, endpoint)
        dataset = write_dataset(tmp_path / "rows.jsonl", [{"prompt": PROMPT}])
        run = cli.run(
            f"--dataset_file={dataset}",
            "--run_name=paths",
            "--sandbox=local",
            "--num_workers=1",
            "--batch_size=1",
        )
    assert run.returncode == 0, run
    run_dir = cli.run_dir("paths")
    [entry] = read_jsonl(run_dir / "trajectories.jsonl")
    results = [turn["value"] for turn in entry["conversations"] if turn["from"] == "tool"]
    shown = "\n".join(results)
    assert "/workspace\\n" in shown and "made.txt" in shown  # the commands did run and print
    assert "outside the sandbox" in shown and "File not found: missing.txt" in shown
    sandboxes = str(cli.tmpdir / "agent-sandboxes")
    written = [path for path in run_dir.rglob("*") if path.is_file()]
    assert written
    for path in written:
        text = path.read_bytes().decode("utf-8", errors="replace")
        assert sandboxes not in text and "agent-sandboxes" not in text, path
    assert "agent-sandboxes" not in run.stdout + run.stderr
