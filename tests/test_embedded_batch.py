"""The main job end to end: `batch_runner.py --model=embedded` on 3 example prompts, through the
real embedded model (llama.cpp, temperature 0), the unchanged agent loop, real sandboxes,
trajectory conversion and filters. Under CI=true a missing runtime or weights file fails."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import model_tools
from agent.errors import ConfigError
from agent.servers.embedded.server import EmbeddedSpec, locate_weights
from tests.support.batch import SPEC_FIELDS

ROOT = Path(__file__).resolve().parent.parent


def _require_embedded() -> None:
    try:
        import xllamacpp  # noqa: F401

        locate_weights(EmbeddedSpec(model_id="embedded"))
    except (ImportError, ConfigError) as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the embedded model is required under CI=true: {exc}")
        pytest.skip(f"embedded model not installed: {exc}")


@pytest.mark.long
@pytest.mark.embedded
def test_three_example_prompts_through_the_real_embedded_model(tmp_path: Path) -> None:
    _require_embedded()
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("OPENROUTER_API_KEY", None)
    env.pop("OPENAI_API_KEY", None)
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "batch_runner.py"),
            f"--dataset_file={ROOT / 'data' / 'example_prompts.jsonl'}",
            "--batch_size=2",
            "--run_name=embedded3",
            f"--output_dir={tmp_path / 'out'}",
            "--model=embedded",
            "--distribution=terminal_only",
            "--num_workers=1",
            "--max_samples=3",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # The load is said before it starts and timed after (it was seconds of a silent 0/N bar).
    said = [line for line in result.stderr.splitlines() if "embedded model" in line]
    assert said[0].startswith("INFO loading the embedded model (bundled SmolLM2-135M, 1 thread(s)) …"), said
    assert re.fullmatch(
        r"INFO embedded model loaded in \d+\.\d s; serving it on http://127\.0\.0\.1:\d+/v1", said[1]
    )
    run_dir = tmp_path / "out" / "embedded3"
    entries = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(e["prompt_index"] for e in entries) == [0, 1, 2]
    for entry in entries:
        assert list(entry) == SPEC_FIELDS
        assert set(entry["tool_stats"]) == set(model_tools.TOOL_TO_TOOLSET_MAP)
        assert entry["metadata"]["model"] == "embedded"
        gpt_turns = [t["value"] for t in entry["conversations"] if t["from"] == "gpt"]
        assert gpt_turns and all(v.startswith("<think>\n") and v.count("<think>") == 1 for v in gpt_turns)
    # Real tool calls, executed in the sandbox: a tool turn with a result, counted in tool_stats.
    executed = sum(s["success"] for e in entries for s in e["tool_stats"].values())
    assert executed >= 1
    tool_turns = [t["value"] for e in entries for t in e["conversations"] if t["from"] == "tool"]
    assert tool_turns and all(v.startswith("<tool_response>\n") for v in tool_turns)
    # Reasoning came through as content of the think blocks, not empty ones.
    assert any(
        "<think>\n</think>" not in v
        for e in entries
        for t in e["conversations"]
        for v in [t["value"]]
        if t["from"] == "gpt"
    )
    stats = json.loads((run_dir / "statistics.json").read_text())
    reasoning = stats["reasoning_statistics"]
    assert reasoning["turns_with_reasoning"] >= 3
    # All of it forced by the output grammar, and counted so: none the model chose to write.
    assert reasoning["turns_with_forced_reasoning"] == reasoning["turns_with_reasoning"]
    assert reasoning["model_written_coverage_percent"] == 0.0
