"""`--distributions_file`: distributions written in YAML or JSON add to or replace the built-in
ones, may name a `--tools_module` toolset, are sampled at their stated rates (a binomial check
over 600 attempts), are recorded in run_config.json so a `--resume` without the file samples
the same, are listed by `--list_distributions` with their file and backends, and every mistake
is one line naming the file, the distribution and the field (exit 2, before any token)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.errors import ConfigError
from agent.servers.simulated.server import SimulatedEndpoint
from agent.toolbox.distribution_file import load_distributions_file
from agent.toolbox.distributions import Distribution, sample_toolsets_from_distribution
from tests.support.batch import BatchCLI, read_json, read_jsonl, write_dataset
from tests.support.mcp_files import write_mcp_config

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = str(REPO / "examples" / "my_tools.py")
RATES = {"units": 30, "terminal": 65, "file": 100}  # file at 100: the fallback never draws
FILE = """
units_mix:
  description: Units with a terminal, always files
  toolsets: {units: 30, terminal: 65, file: 100}
minimal:
  description: Units only, in place of the built-in web-only one
  toolsets: {units: 100}
"""
ATTEMPTS = 600
MCP_ATTEMPTS = 500
MCP_SERVER = REPO / "tests" / "support" / "mcp_stdio_server.py"  # stdlib only: runs in any sandbox
Z_999 = 3.2905  # two-sided 99.9 % normal quantile


@pytest.fixture
def answering() -> Iterator[SimulatedEndpoint]:
    """A model that answers at once: no tool call, no sandbox; the run is about sampling."""
    with SimulatedEndpoint(policy="answer") as endpoint:
        yield endpoint


def test_a_file_distribution_samples_its_stated_rates_and_a_resume_samples_the_same(
    tmp_path: Path, answering: SimulatedEndpoint
) -> None:
    (tmp_path / "dists.yaml").write_text(FILE, encoding="utf-8")
    write_dataset(tmp_path / "d.jsonl", [{"prompt": f"prompt {i}"} for i in range(ATTEMPTS)])
    cli = BatchCLI(tmp_path, answering)
    common = ["--dataset_file=d.jsonl", "--batch_size=100", "--run_name=mix", "--num_workers=2"]
    common += [f"--tools_module={EXAMPLE}", "--distribution=units_mix", "--seed=7"]
    first = cli.run(*common, "--distributions_file=dists.yaml", f"--max_samples={ATTEMPTS // 2}")
    assert first.returncode == 0, first
    recorded = read_json(cli.run_dir("mix") / "run_config.json")["distributions"]
    assert recorded["units_mix"] == {"description": "Units with a terminal, always files", "toolsets": RATES}
    (tmp_path / "dists.yaml").unlink()  # the resume samples with what run_config.json recorded
    resumed = cli.run(*common, "--resume")
    assert resumed.returncode == 0, resumed
    (tmp_path / "dists.yaml").write_text(FILE.replace("units: 30", "units: 31"), encoding="utf-8")
    changed = cli.run(*common, "--resume", "--distributions_file=dists.yaml")  # all done: nothing drawn
    assert changed.returncode == 0, changed
    assert "--resume: dists.yaml now gives distribution units_mix other odds than the run" in changed.stderr
    no_module = cli.run(*[flag for flag in common if not flag.startswith("--tools_module")], "--resume")
    assert no_module.returncode == 2  # the run's own toolset is not registered: refused, one line
    assert no_module.stderr.splitlines()[-1].startswith(
        "error: --resume: run mix ran with toolsets of its own that this command does not register "
        "(--tools_module="
    ), no_module.stderr

    entries = read_jsonl(cli.run_dir("mix") / "trajectories.jsonl")
    assert len(entries) == ATTEMPTS
    table = {"units_mix": Distribution("", RATES)}
    for entry in entries:  # each attempt drew what its seeded key draws from the file's odds
        rng = random.Random(f"7:{entry['metadata']['prompt_key']}")
        assert entry["toolsets_used"] == sample_toolsets_from_distribution("units_mix", rng, table)
    assert_rates(entries, RATES)


def assert_rates(entries: list[dict[str, Any]], rates: dict[str, float]) -> None:
    """Each toolset drawn for its stated share of the entries, within the 99.9 % binomial interval."""
    for toolset, percent in rates.items():
        drawn = sum(toolset in entry["toolsets_used"] for entry in entries)
        p, n = percent / 100, len(entries)
        margin = Z_999 * math.sqrt(n * p * (1 - p))
        assert abs(drawn - n * p) <= margin, (toolset, drawn, n * p, margin)


def test_an_mcp_toolset_in_a_file_distribution_samples_its_stated_rate(
    tmp_path: Path, answering: SimulatedEndpoint
) -> None:
    server = {"command": "python3", "args": ["server.py"], "files": {"server.py": str(MCP_SERVER)}}
    write_mcp_config(tmp_path / "mcp.json", {"notes": server})
    rates = {"notes": 40, "units": 25, "file": 100}
    (tmp_path / "d.json").write_text(json.dumps({"mcp_mix": {"toolsets": rates}}), encoding="utf-8")
    write_dataset(tmp_path / "d.jsonl", [{"prompt": f"mcp prompt {i}"} for i in range(MCP_ATTEMPTS)])
    run = BatchCLI(tmp_path, answering).run(
        "--dataset_file=d.jsonl", "--batch_size=100", "--run_name=mcp", "--num_workers=2",
        "--mcp_config=mcp.json", f"--tools_module={EXAMPLE}", "--distributions_file=d.json",
        "--distribution=mcp_mix",
    )  # fmt: skip
    assert run.returncode == 0, run
    entries = read_jsonl(tmp_path / "data" / "mcp" / "trajectories.jsonl")
    assert len(entries) == MCP_ATTEMPTS
    assert_rates(entries, rates)
    offered_notes = sum(_offers(request.body, "note_write") for request in answering.requests)
    assert offered_notes == sum(
        "notes" in entry["toolsets_used"] for entry in entries
    )  # as the server listed them


def _offers(body: dict[str, Any], tool: str) -> bool:
    return any(t["function"]["name"] == tool for t in body.get("tools") or [])


def test_a_file_distribution_replaces_a_built_in_one_of_its_name(
    tmp_path: Path, answering: SimulatedEndpoint
) -> None:
    (tmp_path / "dists.json").write_text(
        json.dumps({"minimal": {"toolsets": {"units": 100}}}), encoding="utf-8"
    )
    write_dataset(tmp_path / "d.jsonl", [{"prompt": f"p {i}"} for i in range(4)])
    run = BatchCLI(tmp_path, answering).run(
        "--dataset_file=d.jsonl", "--batch_size=4", "--run_name=over", "--distribution=minimal",
        f"--tools_module={EXAMPLE}", "--distributions_file=dists.json",
    )  # fmt: skip
    assert run.returncode == 0, run  # the built-in minimal is web only: unavailable here
    entries = read_jsonl(tmp_path / "data" / "over" / "trajectories.jsonl")
    assert [entry["toolsets_used"] for entry in entries] == [["units"]] * 4
    offered = {tool["function"]["name"] for tool in answering.requests[0].body["tools"]}
    assert offered == {"convert_units", "measure_file"}


def test_list_distributions_shows_the_files_with_their_backends(tmp_path: Path) -> None:
    (tmp_path / "dists.yaml").write_text(FILE, encoding="utf-8")
    listed = BatchCLI(tmp_path).run(
        "--list_distributions", "--distributions_file=dists.yaml", f"--tools_module={EXAMPLE}", output=False
    )
    assert listed.returncode == 0, listed
    lines = listed.stdout.splitlines()
    at = lines.index("units_mix: Units with a terminal, always files  [dists.yaml]")
    assert [line.split() for line in lines[at + 1 : at + 4]] == [
        ["file", "100%"],
        ["terminal", "65%"],
        ["units", "30%"],
    ]
    assert (
        "minimal: Units only, in place of the built-in web-only one"
        "  [dists.yaml, in place of the built-in one]" in lines
    )
    assert "research: Web research with browsing, vision and reasoning" in lines  # the built-in ones stay
    backends = lines[lines.index("Toolset backends with these settings:") :]
    assert any(line.split()[:2] == ["units", "examples/my_tools.py"] for line in backends if line.strip())


# ---------------------------------------------------------------- mistakes: one line each

BAD_FILES = {
    "unknown_toolset": (
        "d.yaml",
        "mine:\n  toolsets: {web: 50, unitz: 20}\n",
        r"^d\.yaml: mine\.toolsets\.unitz: unknown toolset; "
        r"valid: browser, file, image_gen, moa, terminal, vision, web "
        r"\(yours need --tools_module or --mcp_config\)$",
    ),
    "over_100": (
        "d.yaml",
        "mine:\n  toolsets: {web: 150}\n",
        r"^d\.yaml: mine\.toolsets\.web: 150 is outside \[0, 100\]",
    ),
    "negative": (
        "d.yaml",
        "mine:\n  toolsets: {web: -1}\n",
        r"^d\.yaml: mine\.toolsets\.web: -1 is outside \[0, 100\]",
    ),
    "not_a_number": (
        "d.yaml",
        "mine:\n  toolsets: {web: often}\n",
        r"^d\.yaml: mine\.toolsets\.web: 'often' is not a number",
    ),
    "a_boolean": (
        "d.yaml",
        "mine:\n  toolsets: {web: yes}\n",
        r"^d\.yaml: mine\.toolsets\.web: True is not a number",
    ),
    "nan": ("d.yaml", "mine:\n  toolsets: {web: .nan}\n", r"^d\.yaml: mine\.toolsets\.web: nan is outside"),
    "empty_toolsets": (
        "d.yaml",
        "mine:\n  toolsets: {}\n",
        r"^d\.yaml: mine\.toolsets: empty; a distribution needs",
    ),
    "no_toolsets": ("d.yaml", "mine:\n  description: x\n", r"^d\.yaml: mine\.toolsets: missing"),
    "all_zero": (
        "d.yaml",
        "mine:\n  toolsets: {web: 0, file: 0}\n",
        r"^d\.yaml: mine\.toolsets: every toolset is at 0%",
    ),
    "not_a_mapping": ("d.yaml", "mine: [web, file]\n", r"^d\.yaml: mine: not a mapping"),
    "unknown_field": (
        "d.yaml",
        "mine:\n  toolset: {web: 1}\n",
        r"^d\.yaml: mine\.toolset: unknown field \(fields: description, toolsets\)",
    ),
    "description_not_text": (
        "d.yaml",
        "mine:\n  description: [a]\n  toolsets: {web: 1}\n",
        r"^d\.yaml: mine\.description: not text",
    ),
    "bad_name": (
        "d.yaml",
        "'my dist':\n  toolsets: {web: 1}\n",
        r"^d\.yaml: 'my dist': a distribution name is",
    ),
    "top_level_list": ("d.yaml", "- mine\n", r"^d\.yaml: a list; write a mapping of distribution names"),
    "empty_file": ("d.yaml", "", r"^d\.yaml: empty; write a mapping"),
    "bad_yaml": (
        "d.yaml",
        "mine:\n  toolsets: {web: 1\n  other: [\n",
        r"^d\.yaml: line \d+: not valid YAML: ",
    ),
    "bad_json": ("d.json", '{"mine": {"toolsets": {"web": 1,}}}', r"^d\.json: line 1: not valid JSON: "),
    "missing_file": (None, "", r"^--distributions_file=d\.yaml: no such file$"),
    "twice_yaml": (  # once taken silently, the last one winning
        "d.yaml",
        "mine:\n  toolsets: {web: 1}\nmine:\n  toolsets: {file: 1}\n",
        r"^d\.yaml: line 3: not valid YAML: 'mine' is given twice$",
    ),
    "twice_json": (
        "d.json",
        '{"mine": {"toolsets": {"web": 1, "web": 2}}}',
        r"^d\.json: line 1: not valid JSON: 'web' is given twice$",
    ),
    "nested_yaml": (  # 1,000 levels in 2 KB: the parser's recursion, once a traceback
        "d.yaml",
        "x: " + "[" * 1000 + "]" * 1000 + "\n",
        r"^d\.yaml: nests too deeply to be a distributions file$",
    ),
    "nested_json": ("d.json", '{"x": ' + "[" * 5000 + "]" * 5000 + "}", r"^d\.json: nests too deeply"),
    "endless": (  # once read until the OOM killer came at 24 GB
        "/dev/zero",
        None,
        r"^--distributions_file=/dev/zero: cannot be read \(over 16 MiB, too large for a configuration",
    ),
    "twice_json_lines": (  # its line, not the first
        "d.json",
        '{\n  "mine": {"toolsets": {"web": 1}},\n  "mine": {"toolsets": {"file": 1}}\n}',
        r"^d\.json: line 3: not valid JSON: 'mine' is given twice$",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_each_mistake_is_one_line_naming_file_distribution_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    name, text, expected = BAD_FILES[case]
    monkeypatch.chdir(tmp_path)
    if name is not None and text is not None:
        Path(name).write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=expected) as raised:
        load_distributions_file(name or "d.yaml")
    assert "\n" not in str(raised.value)


def test_a_bad_file_stops_a_run_before_any_token_with_exit_2(
    tmp_path: Path, answering: SimulatedEndpoint
) -> None:
    (tmp_path / "d.yaml").write_text("mine:\n  toolsets: {units: 20}\n", encoding="utf-8")
    write_dataset(tmp_path / "data.jsonl", [{"prompt": "p"}])
    cli = BatchCLI(tmp_path, answering)
    flags = ["--dataset_file=data.jsonl", "--batch_size=1", "--run_name=bad", "--distributions_file=d.yaml"]
    run = cli.run(*flags, "--distribution=mine")  # units is not registered without --tools_module
    assert run.returncode == 2, run
    assert run.stderr.splitlines() == [
        "error: d.yaml: mine.toolsets.units: unknown toolset; "
        "valid: browser, file, image_gen, moa, terminal, vision, web "
        "(yours need --tools_module or --mcp_config)"
    ]
    listed = cli.run("--list_distributions", "--distributions_file=d.yaml", output=False)
    assert (listed.returncode, listed.stderr.splitlines()[0]) == (2, run.stderr.splitlines()[0])
    assert answering.requests == []
    assert not (tmp_path / "data" / "bad").exists()
