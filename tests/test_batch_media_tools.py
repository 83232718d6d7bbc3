"""Batch runs end to end (the real `batch_runner.py` subprocess, the simulated endpoint over
HTTP): `--distribution=creative` with vision_analyze on an image served on 127.0.0.1 and
image_generate saving real PNGs under the run directory, no base64 in anything written; and
`--distribution=reasoning` with mixture_of_agents, its N+1 calls made with the right models
and counted in each entry's usage. The API key appears in nothing the runner wrote."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.common.images import PNG_SIGNATURE, sniff
from agent.servers.simulated.png import encode_png
from agent.servers.simulated.replies import first_user_text
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import API_KEY, BatchCLI, human_prompt, prompts_dataset, read_jsonl
from tests.support.cli import run_cli
from tests.support.media import BASE64_RUN, Answer, serving, sim_prompt_tokens

THINK = "I should use the tools for this."
MODELS = ("sim-model", "ref-a", "ref-b", "ref-c", "judge")


def written_text(run_dir: Path) -> str:
    """Every text file the run wrote (trajectories, batches, logs, config, statistics)."""
    files = [p for p in run_dir.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".log", ".txt")]
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files)


@pytest.fixture
def picture_site() -> Iterator[str]:
    answers = {
        "/red.png": Answer(body=encode_png(40, 30, (220, 30, 30)), headers={"Content-Type": "image/png"})
    }
    with serving(answers) as site:
        yield site.url


def test_creative_run_analyses_and_generates_images(tmp_path: Path, picture_site: str) -> None:
    prompts = [f"Make a poster, take {i}" for i in range(3)]
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts:
            calls = (
                (
                    "vision_analyze",
                    json.dumps({"image_url": f"{picture_site}/red.png", "question": "Colour?"}),
                ),
                ("image_generate", json.dumps({"prompt": f"poster for {prompt}", "aspect_ratio": "square"})),
            )
            endpoint.script(prompt, [Turn(reasoning=THINK, tool_calls=calls), Turn("Done.", reasoning=THINK)])
        cli = BatchCLI(tmp_path, endpoint)
        done = cli.run(
            f"--dataset_file={prompts_dataset(tmp_path / 'creative.jsonl', prompts)}",
            "--batch_size=2",
            "--run_name=creative",
            "--distribution=creative",
            "--seed=3",
            "--num_workers=1",
            "--allow_hosts=127.0.0.1",
            "--allow_missing_toolsets",
        )
    assert done.returncode == 0, done
    run_dir = cli.run_dir("creative")
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    assert sorted(human_prompt(e) for e in entries) == prompts
    for entry in entries:
        assert {"vision", "image_gen"} <= set(entry["toolsets_used"]), entry["toolsets_used"]
        text = json.dumps(entry)
        assert "40x30 pixels, mostly red" in text  # the served image reached the model
        key = entry["metadata"]["prompt_key"].replace(":", "-")
        image = run_dir / "images" / f"{key}-1.png"
        data = image.read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        info = sniff(data)
        assert info is not None and (info.width, info.height) == (1024, 1024)
        assert f"images/{key}-1.png" in text and f'\\"bytes\\": {len(data)}' in text
    written = written_text(run_dir)
    assert not BASE64_RUN.search(written)  # images are referenced, never inlined
    assert API_KEY not in written


def test_reasoning_run_mixes_agents_and_counts_every_call(tmp_path: Path) -> None:
    prompts = [f"Hard question number {i}" for i in range(2)]
    questions = {prompt: f"Solve carefully: {prompt}" for prompt in prompts}
    with SimulatedEndpoint(model_ids=MODELS) as endpoint:
        for prompt, question in questions.items():
            call = (("mixture_of_agents", json.dumps({"user_prompt": question})),)
            endpoint.script(prompt, [Turn(reasoning=THINK, tool_calls=call), Turn("Done.", reasoning=THINK)])
        cli = BatchCLI(tmp_path, endpoint)
        done = cli.run(
            f"--dataset_file={prompts_dataset(tmp_path / 'reasoning.jsonl', prompts)}",
            "--batch_size=5",
            "--run_name=reasoning",
            "--distribution=reasoning",
            "--seed=1",
            "--num_workers=1",
            "--moa_models=ref-a,ref-b,ref-c",
            "--moa_aggregator=judge",
            "--allow_missing_toolsets",
        )
        requests = endpoint.requests
    assert done.returncode == 0, done
    run_dir = cli.run_dir("reasoning")
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    assert sorted(human_prompt(e) for e in entries) == prompts
    for entry in entries:
        prompt = human_prompt(entry)
        assert "moa" in entry["toolsets_used"]
        assert "(answered by judge)" in json.dumps(entry)
        tool_calls = [r for r in requests if first_user_text(r.body["messages"]) == questions[prompt]]
        assert sorted(r.body["model"] for r in tool_calls) == ["judge", "ref-a", "ref-b", "ref-c"]  # N + 1
        own = [r for r in requests if first_user_text(r.body["messages"]) == prompt]
        expected = sum(sim_prompt_tokens(r.body) for r in own + tool_calls)
        assert entry["metadata"]["usage"]["prompt_tokens"] == expected  # the tool's calls included
    assert API_KEY not in written_text(run_dir)


def test_the_single_query_command_saves_images_under_the_current_directory(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    call = ("image_generate", json.dumps({"prompt": "a quiet harbour"}))
    sim_endpoint.script("draw a harbour", [Turn(tool_calls=(call,)), Turn(content="Drawn.")])
    done = run_cli(
        tmp_path,
        "--query=draw a harbour",
        "--model=sim-model",
        f"--base_url={sim_endpoint.base_url}",
        "--enabled_toolsets=image_gen",
    )
    assert (done.returncode, done.stdout) == (0, "Drawn.\n"), done.stderr
    (image,) = (tmp_path / "images").iterdir()
    info = sniff(image.read_bytes())
    assert info is not None and (info.format, info.width, info.height) == ("png", 1536, 1024)
    result = json.loads(sim_endpoint.requests[-1].body["messages"][-1]["content"])
    assert result["path"] == f"images/{image.name}"
