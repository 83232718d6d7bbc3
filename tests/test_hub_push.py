"""`--push_to_hub` against a loopback test double of the Hub (`tests/support/hub_double.py`), through the
real `huggingface_hub` client in the real `batch_runner.py`: a run pushes its exports and a
dataset card in one commit, private by default; `datasets` loads every config of the pushed tree;
the token travels only in the Authorization header; a refused token, an unreachable Hub or no
token is one line and a non-zero exit with the run's files untouched."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.export.openai_messages import Conversation, to_sharegpt
from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import (
    Finished,
    prompts_dataset,
    read_jsonl,
    requested_prompts,
    tool_then_answer,
)
from tests.support.hub import TOKEN, HubCLI
from tests.support.hub_double import HubDouble

datasets = pytest.importorskip("datasets")

PROMPTS = ["Hub prompt one", "Hub prompt two", "Hub prompt three"]
RUN = ("--batch_size=2", "--distribution=terminal_only", "--model=sim/hub-model", "--num_workers=1")
FILES = ("data/openai.parquet", "data/sharegpt.parquet", "README.md")


@dataclass
class Pushed:
    hub: HubDouble
    cli: HubCLI
    run: Finished


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pushed]:
    with SimulatedEndpoint() as endpoint, HubDouble(TOKEN) as hub:
        endpoint.script(PROMPTS[0], tool_then_answer(command="env"))  # what a sandboxed command sees
        cli = HubCLI(tmp_path_factory.mktemp("hub"), endpoint, hub.url, TOKEN)
        dataset = prompts_dataset(cli.workdir / "prompts.jsonl", PROMPTS)
        push = ("--push_to_hub=my-org/trajectories", "--hub_license=cc-by-4.0")
        run = cli.run(f"--dataset_file={dataset}", "--run_name=hub", *RUN, *push)
        yield Pushed(hub, cli, run)


def card_header(card: bytes) -> dict[str, Any]:
    header = yaml.safe_load(card.decode().split("---\n")[1])
    assert isinstance(header, dict)
    return header


def every_file(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def test_a_run_pushes_its_exports_and_card_in_one_private_commit(pushed: Pushed) -> None:
    assert pushed.run.returncode == 0, pushed.run
    (repo,) = pushed.hub.state.repos.items()
    assert repo[0] == "my-org/trajectories"
    assert (repo[1]["organization"], repo[1]["type"], repo[1]["private"]) == ("my-org", "dataset", True)
    (commit,) = pushed.hub.state.commits
    assert (commit.repo_id, commit.revision) == ("my-org/trajectories", "main")
    assert commit.summary == f"Add {len(PROMPTS)} agent trajectories from run hub"
    assert sorted(commit.files) == sorted(FILES)
    export = pushed.cli.run_dir("hub") / "export" / "hub"
    for path in FILES[:2]:
        assert commit.files[path] == (export / Path(path).name).read_bytes(), path
    assert pushed.hub.state.unknown == []
    assert f"Pushed 3 files to {pushed.hub.url}/datasets/my-org/trajectories" in pushed.run.stderr


def test_the_card_has_configs_license_size_and_the_runs_figures(pushed: Pushed) -> None:
    card = pushed.hub.state.commits[0].files["README.md"]
    header = card_header(card)
    assert header["license"] == "cc-by-4.0" and header["size_categories"] == ["n<1K"]
    assert {"agent-trajectories", "tool-use"} <= set(header["tags"])
    configs = {c["config_name"]: c["data_files"] for c in header["configs"]}
    assert configs == {
        "openai": [{"split": "train", "path": "data/openai.parquet"}],
        "sharegpt": [{"split": "train", "path": "data/sharegpt.parquet"}],
    }
    stats = json.loads((pushed.cli.run_dir("hub") / "statistics.json").read_text())
    body = card.decode().split("---\n", 2)[2]
    assert "| model | `sim/hub-model` |" in body and "| toolset distribution | `terminal_only` |" in body
    terminal = stats["tool_statistics"]["terminal"]
    row = f"| `terminal` | {terminal['count']} | {terminal['success']} | {terminal['failure']} |"
    assert terminal["count"] > 0 and row in body
    assert f"| completed | {stats['outcomes']['completed']} |" in body
    assert "No failures." in body and "No discards." in body


def test_datasets_loads_every_config_of_the_pushed_tree(pushed: Pushed, tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    for path, data in pushed.hub.state.commits[0].files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(data)
    for config in ("openai", "sharegpt"):
        loaded = datasets.load_dataset(str(tree), config, split="train", cache_dir=str(tmp_path / "hf"))
        assert loaded.num_rows == len(PROMPTS), config
    openai = datasets.load_dataset(str(tree), "openai", split="train", cache_dir=str(tmp_path / "hf"))
    assert {row["messages"][0]["content"] for row in openai} == set(PROMPTS)
    entries = {e["prompt_index"]: e for e in read_jsonl(pushed.cli.run_dir("hub") / "trajectories.jsonl")}
    for row in openai:  # the Parquet rows give back the run's conversations too
        conversation = Conversation(row["messages"], json.loads(row["tools"]))
        assert to_sharegpt(conversation) == entries[row["prompt_index"]]["conversations"]


def test_the_token_goes_only_in_the_authorization_header(pushed: Pushed) -> None:
    assert set(pushed.hub.state.authorizations) == {f"Bearer {TOKEN}"}
    entries = read_jsonl(pushed.cli.run_dir("hub") / "trajectories.jsonl")
    env_turn = next(e for e in entries if e["conversations"][1]["value"] == PROMPTS[0])["conversations"][3]
    assert "PATH=" in env_turn["value"] and "HF_TOKEN" not in env_turn["value"]  # the sandbox's env
    written = every_file(pushed.cli.workdir / "data")
    assert not [name for name, data in written.items() if TOKEN.encode() in data]
    assert TOKEN not in pushed.run.stdout + pushed.run.stderr
    assert all(TOKEN.encode() not in data for data in pushed.hub.state.commits[0].files.values())


def test_an_existing_run_is_pushed_public_on_demand_and_an_existing_repo_is_reused(pushed: Pushed) -> None:
    assert pushed.cli.endpoint is not None
    asked = sum(requested_prompts(pushed.cli.endpoint).values())
    # No HF_TOKEN: the token `hf auth login` saved in HF_HOME.
    cli = HubCLI(pushed.cli.workdir, pushed.cli.endpoint, pushed.hub.url, None, hf_home="logged-in")
    cli.hf_home.mkdir()
    (cli.hf_home / "token").write_text(TOKEN)
    for _ in range(2):  # the second push finds the repository
        run = cli.run(
            "--run_name=hub", "--push_to_hub=my-org/public-set", "--nohub_private", "--export=openai"
        )
        assert run.returncode == 0, run
    assert pushed.hub.state.repos["my-org/public-set"]["private"] is False
    commits = [c for c in pushed.hub.state.commits if c.repo_id == "my-org/public-set"]
    assert len(commits) == 2 and sorted(commits[1].files) == ["README.md", "data/openai.parquet"]
    assert card_header(commits[1].files["README.md"])["license"] == "other"
    assert sum(requested_prompts(pushed.cli.endpoint).values()) == asked


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.mark.parametrize(
    ("hub_url", "token", "code", "message"),
    [
        (None, "hf_wrong_token_0123456789", 1, "error: --push_to_hub=my-org/again: http://127.0.0.1:"),
        ("closed", TOKEN, 1, "error: --push_to_hub=my-org/again: http://127.0.0.1:"),
        (
            None,
            None,
            2,
            "error: --push_to_hub needs a Hugging Face token: set HF_TOKEN or run `hf auth login`",
        ),
    ],
    ids=["refused token", "unreachable hub", "no token"],
)
def test_a_failed_push_is_one_line_and_leaves_the_run_as_it_was(
    pushed: Pushed, hub_url: str | None, token: str | None, code: int, message: str
) -> None:
    url = closed_port_url() if hub_url == "closed" else pushed.hub.url
    assert pushed.cli.endpoint is not None
    cli = HubCLI(pushed.cli.workdir, pushed.cli.endpoint, url, token)
    run_dir = cli.run_dir("hub")
    before = {name: data for name, data in every_file(run_dir).items() if not name.startswith("export/")}
    commits = len(pushed.hub.state.commits)
    run = cli.run("--run_name=hub", "--push_to_hub=my-org/again")
    assert run.returncode == code, run
    lines = run.stderr.strip().splitlines()
    assert lines[-1].startswith(message), run
    assert not [line for line in lines if line.startswith("error:")][1:]  # one error line
    assert {n: d for n, d in every_file(run_dir).items() if not n.startswith("export/")} == before
    assert len(pushed.hub.state.commits) == commits
    assert token is None or token not in run.stderr


def test_a_run_that_cannot_push_spends_nothing(pushed: Pushed, tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = HubCLI(tmp_path, endpoint, pushed.hub.url, None)
        dataset = prompts_dataset(tmp_path / "prompts.jsonl", PROMPTS)
        run = cli.run(f"--dataset_file={dataset}", "--run_name=nopush", *RUN, "--push_to_hub=my-org/x")
        assert run.returncode == 2, run
        assert "needs a Hugging Face token" in run.stderr
        assert sum(requested_prompts(endpoint).values()) == 0


def test_a_push_of_the_rl_export_alone_is_refused_before_anything_runs(
    pushed: Pushed, tmp_path: Path
) -> None:
    """Once the whole run, then "cannot export this entry: max() arg is an empty sequence", exit 2."""
    with SimulatedEndpoint() as endpoint:
        cli = HubCLI(tmp_path, endpoint, pushed.hub.url, TOKEN)
        dataset = prompts_dataset(tmp_path / "prompts.jsonl", PROMPTS)
        flags = (
            f"--dataset_file={dataset}",
            "--run_name=rl",
            *RUN,
            "--export=rl",
            "--capture_tokens=required",
        )
        run = cli.run(*flags, "--push_to_hub=my-org/x")
        assert run.returncode == 2, run
        assert run.stderr.strip().splitlines()[-1] == (
            "error: --push_to_hub pushes the text formats (sharegpt, parquet, openai), and --export=rl "
            "has none: add one (--export=rl,parquet)"
        )
        assert sum(requested_prompts(endpoint).values()) == 0
    existing = cli.run("--run_name=hub", "--export=rl", "--push_to_hub=my-org/x")
    assert existing.returncode == 2 and "--export=rl has none" in existing.stderr, existing
