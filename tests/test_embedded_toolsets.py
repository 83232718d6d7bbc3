"""With the embedded model, the toolsets that need what it cannot do are listed as unavailable
with a reason: vision (it reads no images) and image_gen (it makes none), so a distribution
that needs them stops before a token instead of making data whose every image call fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agent.cli.shared_config import NO_IMAGE_OUTPUT

RUNNER = str(Path(__file__).resolve().parents[1] / "batch_runner.py")


def _backends(tmp_path: Path, model: str) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, RUNNER, "--list_distributions", f"--model={model}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    section = out.split("Toolset backends with these settings:")[1].split("Sandbox backends")[0]
    rows = [line.split(None, 1) for line in section.splitlines() if line.startswith("  ")]
    return {name: rest.strip() for name, rest in rows}


def test_image_gen_is_unavailable_with_the_embedded_model_and_says_why(tmp_path: Path) -> None:
    assert _backends(tmp_path, "embedded")["image_gen"] == f"unavailable: {NO_IMAGE_OUTPUT}"
    assert _backends(tmp_path, "some/image-model")["image_gen"] == "available"


def test_a_distribution_needing_image_gen_stops_before_any_token_with_the_embedded_model(
    tmp_path: Path,
) -> None:
    (tmp_path / "d.jsonl").write_text('{"prompt": "draw a cat"}\n', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, RUNNER, "--dataset_file=d.jsonl", "--batch_size=1", "--run_name=img",
         "--model=embedded", "--distribution=image_gen"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "image_gen" in done.stderr and NO_IMAGE_OUTPUT in done.stderr
    assert not (tmp_path / "data" / "img" / "batch_0.jsonl").exists()
