"""Datasets of the `datasets` library, never the real Hub: a local `save_to_disk` directory;
`hf://datasets/org/name[:split]` streamed from a loopback TEST DOUBLE of the Hub's HTTP API
(`tests/support/hub_read_double.py`, HF_ENDPOINT); and the same read with HF_HUB_OFFLINE=1 from
a Hub cache the test fills under HF_HOME in the layout huggingface_hub writes
(`hub/datasets--org--name/refs/<branch>` holding the commit, `snapshots/<commit>/...` the
files). Each: a real batch run SIGKILLed mid-run then resumed exactly once; the Hub dataset's
commit pinned in run_config.json and read again by --resume even after the branch moved on."""

from __future__ import annotations

import io
import json
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import BatchCLI, kill_started, read_json, write_dataset
from tests.support.dataset_runs import RUN, kill_mid_run_then_resume, script_prompts
from tests.support.hub_read_double import HubReadDouble

datasets = pytest.importorskip("datasets")  # the [datasets] extra ([dev] has it)

FIRST, SECOND = "1" * 40, "2" * 40  # two commits of the cached Hub dataset


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    kill_started()


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HF_HOME, offline: the runner (a subprocess) reads only what the test cached."""
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


def parquet_of(split: str, prompts: list[str]) -> bytes:
    table = pa.Table.from_pylist([{"prompt": p, "metadata": {"split": split}} for p in prompts])
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def cache_commit(home: Path, repo_id: str, commit: str, splits: dict[str, list[str]], *refs: str) -> None:
    """Files of `repo_id` at `commit` in the Hub cache, as `huggingface-cli download` leaves
    them; each of `refs` (branches or tags) pointing at it."""
    repo = home / "hub" / f"datasets--{repo_id.replace('/', '--')}"
    data = repo / "snapshots" / commit / "data"
    data.mkdir(parents=True)
    for split, prompts in splits.items():
        (data / f"{split}-00000-of-00001.parquet").write_bytes(parquet_of(split, prompts))
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)


PROMPTS = [f"Hub task {i}" for i in range(8)] + ["Hub task 2"]  # one repeated


def test_a_datasets_directory_runs_and_resumes_exactly_once(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    train = datasets.Dataset.from_list([{"prompt": p, "source": "mine"} for p in PROMPTS])
    test = datasets.Dataset.from_list([{"prompt": "never run"}])
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / "saved"))
    script_prompts(sim_endpoint, PROMPTS)
    cli = BatchCLI(tmp_path, sim_endpoint)
    kill_mid_run_then_resume(cli, ("--dataset_file=saved", "--batch_size=2"), Counter(PROMPTS))


def test_an_hf_dataset_is_pinned_at_its_commit_and_resume_reads_that_commit(
    tmp_path: Path, hub_cache: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    cache_commit(hub_cache, "org/tasks", FIRST, {"train": PROMPTS, "test": ["Test split task"]}, "main", "v1")
    script_prompts(sim_endpoint, [*PROMPTS, "Added later", "Test split task"])
    cli = BatchCLI(tmp_path, sim_endpoint)
    flags = ("--dataset_file=hf://datasets/org/tasks", "--batch_size=2")

    def branch_moves_on() -> None:  # a new commit on main, with one more prompt, while the run is down
        cache_commit(hub_cache, "org/tasks", SECOND, {"train": [*PROMPTS, "Added later"]}, "main", "v2")

    resumed = kill_mid_run_then_resume(
        cli, flags, Counter(PROMPTS), before_resume=branch_moves_on, resume_flags=("--dataset_revision=v2",)
    )
    assert "pinned commit " + FIRST in resumed.stderr and "--dataset_revision=v2 is ignored" in resumed.stderr
    saved = read_json(cli.run_dir(RUN) / "run_config.json")
    assert saved["dataset_file"] == "hf://datasets/org/tasks"
    assert (saved["dataset"]["revision"], saved["dataset"]["commit"]) == (None, FIRST)
    # a new run on the test split at tag v1 (main no longer has that split): pinned at its commit
    split = cli.run(
        "--dataset_file=hf://datasets/org/tasks:test",
        "--dataset_revision=v1",
        "--batch_size=2",
        "--run_name=t",
    )
    assert split.returncode == 0, split
    assert read_json(cli.run_dir("t") / "run_config.json")["dataset"] == {
        "prompt_field": "prompt",
        "field_map": [],
        "revision": "v1",
        "commit": FIRST,
    }
    entries = [
        json.loads(line) for line in (cli.run_dir("t") / "trajectories.jsonl").read_text().splitlines()
    ]
    assert [e["metadata"]["split"] for e in entries] == ["test"]


def test_an_hf_dataset_streamed_from_a_hub_double_is_pinned_and_resume_reads_that_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sim_endpoint: SimulatedEndpoint
) -> None:
    with HubReadDouble() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        hub.commit(
            "org/tasks", FIRST, {"data/train-00000-of-00001.parquet": parquet_of("train", PROMPTS)}, "main"
        )
        script_prompts(sim_endpoint, [*PROMPTS, "Added later"])
        cli = BatchCLI(tmp_path, sim_endpoint)
        newer = {"data/train-00000-of-00001.parquet": parquet_of("train", [*PROMPTS, "Added later"])}
        kill_mid_run_then_resume(
            cli,
            ("--dataset_file=hf://datasets/org/tasks", "--batch_size=2"),
            Counter(PROMPTS),
            before_resume=lambda: hub.commit("org/tasks", SECOND, newer, "main"),
        )
        read = [request for request in hub.requests if "/resolve/" in request]
    saved = read_json(cli.run_dir(RUN) / "run_config.json")
    assert (saved["dataset"]["revision"], saved["dataset"]["commit"]) == (None, FIRST)
    assert read and all(f"/resolve/{FIRST}/" in request for request in read), (
        read
    )  # never main's newer commit
    assert hub.requests.count("GET /api/datasets/org/tasks") == 1  # main resolved once, at the first start


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        (
            "hf://datasets/org",
            "error: hf://datasets/org: not a Hub dataset name; write hf://datasets/org/name[/config][:split]",
        ),
        ("hf://datasets/org/missing", "error: hf://datasets/org/missing: cannot resolve revision 'main' ("),
    ],
)
def test_a_bad_hub_dataset_is_one_line_and_exit_2(
    tmp_path: Path, hub_cache: Path, dataset: str, message: str
) -> None:
    done = BatchCLI(tmp_path).run(
        f"--dataset_file={dataset}", "--batch_size=2", "--run_name=r", "--model=embedded"
    )
    assert done.returncode == 2, done
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(message), line


def test_an_unreachable_hub_is_one_line_and_exit_2(
    tmp_path: Path, hub_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once an httpx2.ConnectError traceback, exit 1 (the client's errors are not OSErrors)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", closed)
    flags = ("--dataset_file=hf://datasets/org/tasks", "--batch_size=2", "--run_name=r", "--model=embedded")
    done = BatchCLI(tmp_path).run(*flags)
    assert done.returncode == 2, done
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        "error: hf://datasets/org/tasks: cannot resolve revision 'main' (ConnectError: "
    ), line


def test_without_the_datasets_extra_a_hub_dataset_is_one_line_saying_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = tmp_path / "no-extra" / "datasets"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named datasets')\n")
    write_dataset(tmp_path / "unused.jsonl", [{"prompt": "p"}])
    cli = BatchCLI(tmp_path)
    monkeypatch.setattr(
        cli,
        "env",
        lambda: {**BatchCLI.env(cli), "PYTHONPATH": f"{shim.parent}:{BatchCLI.env(cli)['PYTHONPATH']}"},
    )
    done = cli.run(
        "--dataset_file=hf://datasets/org/tasks", "--batch_size=2", "--run_name=r", "--model=embedded"
    )
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        'error: hf://datasets/org/tasks: reading it needs the datasets extra: pip install -e ".[datasets]"'
    ]


def test_a_datasets_directory_split_is_named_after_a_colon(tmp_path: Path) -> None:
    from agent.batch.dataset import iter_rows, scan_dataset
    from agent.errors import DatasetError

    splits = {"validation": ["Check this"], "test": ["Test that", "And this"]}
    datasets.DatasetDict(
        {name: datasets.Dataset.from_list([{"prompt": p} for p in rows]) for name, rows in splits.items()}
    ).save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(DatasetError, match=r"no split 'train'; its splits: validation, test \(name one: "):
        scan_dataset(str(tmp_path / "saved"))
    assert [row.prompt for row in iter_rows(f"{tmp_path / 'saved'}:test")] == splits["test"]
    assert scan_dataset(f"{tmp_path / 'saved'}:validation").valid == 1
    datasets.Dataset.from_list([{"prompt": "One"}]).save_to_disk(str(tmp_path / "one"))
    with pytest.raises(DatasetError, match="holds one dataset, no splits: drop ':test'"):
        scan_dataset(f"{tmp_path / 'one'}:test")
