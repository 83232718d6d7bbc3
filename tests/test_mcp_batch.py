"""MCP toolsets in batch runs (the real `batch_runner.py` with 2 worker processes, the simulated
endpoint over HTTP): a stdio server run inside each prompt's sandbox (local, bwrap) is sampled
from a distribution, called with the model's arguments, its results recorded in the entries
(`toolsets_used`, `tool_stats`), its image saved under the run directory; the config's secrets
appear in nothing the run wrote nor in its output, and no server outlives the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import BatchCLI, human_prompt, prompts_dataset, read_jsonl
from tests.support.mcp_files import SECRET, servers_left, stdio_entry, work_fixture, write_mcp_config

THINK = "The notes server can do this."
DISTRIBUTIONS = 'notes_test: {description: "notes server only", toolsets: {notes: 100}}\n'


work = work_fixture("mcp-batch-")
# A secret that JSON escapes: the tool result is JSON text, escaped again on the entry's line.
ESCAPED_SECRET = 'quote"back\\slash-\u00e9-\t-5d1e9a7c'


def written_text(run_dir: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file() and p.suffix != ".png"
    )


@pytest.mark.parametrize("sandbox", ["local", "bwrap"])
def test_a_sampled_mcp_toolset_is_called_and_recorded(work: Path, sandbox: str) -> None:
    prompts = [f"Use the notes, take {i}" for i in range(4)]
    env = {"NOTE_KEY": SECRET, "ODD_KEY": ESCAPED_SECRET}
    config = write_mcp_config(work / "mcp.json", {"notes": stdio_entry(work, env=env)})
    distributions = work / "distributions.yaml"
    distributions.write_text(DISTRIBUTIONS, encoding="utf-8")
    with SimulatedEndpoint() as endpoint:
        for i, prompt in enumerate(prompts):
            calls = (
                ("add", json.dumps({"a": i, "b": 100})),
                ("env_value", json.dumps({"name": "NOTE_KEY"})),
                ("env_value", json.dumps({"name": "ODD_KEY"})),
                ("env_value", json.dumps({"name": "HOME"})),
                ("env_value", json.dumps({"name": "TMPDIR"})),
                ("image", "{}"),
            )
            endpoint.script(prompt, [Turn(reasoning=THINK, tool_calls=calls), Turn("Done.", reasoning=THINK)])
        cli = BatchCLI(work, endpoint)
        done = cli.run(
            f"--dataset_file={prompts_dataset(work / 'd.jsonl', prompts)}",
            "--batch_size=2",
            "--run_name=notes",
            "--distribution=notes_test",
            "--num_workers=2",
            f"--sandbox={sandbox}",
            f"--mcp_config={config}",
            f"--distributions_file={distributions}",
        )
    assert done.returncode == 0, done
    run_dir = cli.run_dir("notes")
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    assert sorted(human_prompt(e) for e in entries) == prompts
    for entry in entries:
        assert entry["toolsets_used"] == ["notes"]
        stats = entry["tool_stats"]
        assert stats["add"] == {"count": 1, "success": 1, "failure": 0}, stats["add"]
        assert stats["image"]["count"] == 1 and stats["terminal"]["count"] == 0
        index = int(human_prompt(entry).rsplit(" ", 1)[1])
        results = [t["value"] for t in entry["conversations"] if t["from"] == "tool"]
        text = json.dumps(results)
        assert f"{index + 100}" in text and text.count("[REDACTED]") == 2, results
        # the sandbox's paths, as a command sees them: never the slot's host path (local)
        shown = [
            json.loads(part.split("</tool_response>")[0]) for part in results[0].split("<tool_response>")[1:]
        ]
        home = {"local": "/home", "bwrap": "/workspace"}[sandbox]  # HOME as a command sees it
        assert [r["content"] for r in shown if r["name"] == "env_value"][2:] == [home, "/tmp"]
        assert str(work) not in text
        key = entry["metadata"]["prompt_key"].replace(":", "-")
        assert f"![image](images/{key}-mcp-1.png)" in text, text
        assert (run_dir / "images" / f"{key}-mcp-1.png").is_file()
    recorded = json.loads((run_dir / "run_config.json").read_text())
    assert "NOTE_KEY" in json.dumps(recorded)  # which variables the server gets, not their values
    written = written_text(run_dir) + done.stdout + done.stderr
    assert SECRET not in written and "5d1e9a7c" not in written.replace(SECRET, "")
    # nor does the model's endpoint get them: it reads what the trajectory records
    sent = json.dumps([request.body for request in endpoint.requests])
    assert "5d1e9a7c" not in sent and sent.count("[REDACTED]") == 2 * len(prompts)
    assert "iVBORw0KGgo" not in written_text(run_dir)  # no image as base64 in anything written
    assert servers_left(work) == []
    # --resume without --mcp_config would move every entry calling its tools out of the output
    output = (run_dir / "trajectories.jsonl").read_bytes()
    forgot = cli.run(
        f"--dataset_file={work / 'd.jsonl'}", "--batch_size=2", "--run_name=notes", "--resume",
        "--distribution=terminal_only", output=False,
    )  # fmt: skip
    assert forgot.returncode == 2 and "(--mcp_config servers notes; run_config.json)" in forgot.stderr, forgot
    assert (run_dir / "trajectories.jsonl").read_bytes() == output
