"""`--tools_module`: a user's tool family in one file (examples/my_tools.py) runs like a built-in
one: offered, called with the model's arguments in the worker processes (its module imported
there too, from where the runner found it), its result the tool turn, recorded in
`toolsets_used` and `tool_stats`; on 2 local workers, on Ray, and in run_agent.py. Every way a
module can be wrong is one line naming it, exit 2, before any token."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from agent.errors import ConfigError
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.toolbox.extensions import load_tool_modules, resolve_tool_modules
from tests.fixtures.ray import RayCluster, ray_args
from tests.support.batch import BatchCLI, Finished, human_prompt, read_jsonl, write_dataset
from tests.support.cli import endpoint_flags, run_cli

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "my_tools.py"
DISTRIBUTIONS = "units_and_files:\n  description: the example's tools\n  toolsets: {units: 100, file: 100}\n"
CONVERT = {"value": 26.2, "from_unit": "mi", "to_unit": "km"}
CONVERTED = {"value": 26.2 * 1609.344 / 1000.0, "unit": "km"}
ONE_CALL = {"count": 1, "success": 1, "failure": 0}
NO_CALL = {"count": 0, "success": 0, "failure": 0}


THINK = "The task needs a tool."  # a turn without reasoning is discarded (no_reasoning)


def call(name: str, arguments: dict[str, Any]) -> Turn:
    return Turn(reasoning=THINK, tool_calls=((name, json.dumps(arguments)),))


def answer(text: str) -> Turn:
    return Turn(content=text, reasoning=THINK)


def script(endpoint: SimulatedEndpoint, prompts: list[str]) -> None:
    """`convert N`: convert_units; `measure N`: write_file a 2-line file, then measure_file it."""
    for prompt in prompts:
        if prompt.startswith("convert"):
            endpoint.script(prompt, [call("convert_units", CONVERT), answer("42.16 km")])
        else:
            write = call("write_file", {"path": "notes.txt", "content": "a\nb\n"})
            endpoint.script(prompt, [write, call("measure_file", {"path": "notes.txt"}), answer("ok")])


def tool_results(endpoint: SimulatedEndpoint) -> dict[str, list[Any]]:
    """Per prompt, the tool results the model was sent, in order."""
    out: dict[str, list[Any]] = {}
    for request in endpoint.requests:
        messages = request.body["messages"]
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
        if len(results) > len(out.get(prompt, [])):
            out[prompt] = results
    return out


def user_module(workdir: Path) -> None:
    """The example, as a user's module `unit_tools` in the directory the runner starts in."""
    shutil.copy(EXAMPLE, workdir / "unit_tools.py")
    (workdir / "dists.yaml").write_text(DISTRIBUTIONS, encoding="utf-8")


def check_run(
    cli: BatchCLI, endpoint: SimulatedEndpoint, run: Finished, run_name: str, prompts: list[str]
) -> None:
    assert run.returncode == 0, run
    entries = read_jsonl(cli.run_dir(run_name) / "trajectories.jsonl")
    assert len(entries) == len(prompts)
    results = tool_results(endpoint)
    for entry in entries:
        prompt = human_prompt(entry)
        assert entry["toolsets_used"] == ["units", "file"]
        assert entry["metadata"]["toolsets_unavailable"] == []
        stats = entry["tool_stats"]
        if prompt.startswith("convert"):
            assert results[prompt] == [CONVERTED]  # computed by the user's handler in a worker
            assert (stats["convert_units"], stats["measure_file"]) == (ONE_CALL, NO_CALL)
        else:  # the user's tool read the file the built-in write_file made in the prompt's sandbox
            assert results[prompt][1] == {"path": "notes.txt", "bytes": 4, "lines": 2}
            assert (stats["measure_file"], stats["write_file"], stats["convert_units"]) == (
                ONE_CALL, ONE_CALL, NO_CALL,
            )  # fmt: skip
    offered = {tool["function"]["name"] for tool in endpoint.requests[0].body["tools"]}
    assert {"convert_units", "measure_file", "write_file"} <= offered


def test_a_user_toolset_runs_like_a_built_in_on_two_local_workers(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    prompts = [f"{kind} {i}" for i in range(4) for kind in ("convert", "measure")]
    script(sim_endpoint, prompts)
    user_module(tmp_path)
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
    cli = BatchCLI(tmp_path, sim_endpoint)
    run = cli.run(
        "--dataset_file=d.jsonl", "--batch_size=4", "--run_name=mine", "--num_workers=2",
        "--tools_module=unit_tools", "--distributions_file=dists.yaml", "--distribution=units_and_files",
    )  # fmt: skip
    check_run(cli, sim_endpoint, run, "mine", prompts)
    config = json.loads((cli.run_dir("mine") / "run_config.json").read_text())
    assert config["agent"]["tools"]["tools_modules"] == ["unit_tools"]
    assert config["agent"]["tools"]["tools_path"] == [str(tmp_path)]  # where workers import it from
    # a resume that forgets --tools_module would move every entry calling its tools out of the
    # output (tool_not_offered): it stops first, one line, and touches nothing
    output = (cli.run_dir("mine") / "trajectories.jsonl").read_bytes()
    forgot = cli.run(
        "--dataset_file=d.jsonl", "--batch_size=4", "--run_name=mine", "--resume",
        "--distribution=terminal_only", output=False,
    )  # fmt: skip
    assert forgot.returncode == 2, forgot
    assert forgot.stderr.splitlines()[-1].startswith(
        "error: --resume: run mine ran with toolsets of its own that this command does not register "
        "(--tools_module=unit_tools; run_config.json)"
    ), forgot.stderr
    assert (cli.run_dir("mine") / "trajectories.jsonl").read_bytes() == output
    assert not (cli.run_dir("mine") / "discarded.jsonl").exists()
    rescored = cli.run("--rescore", "--run_name=mine", output=False)  # it merges again too
    assert rescored.returncode == 2, rescored
    assert "error: --rescore: run mine ran with toolsets of its own" in rescored.stderr, rescored.stderr
    assert (cli.run_dir("mine") / "trajectories.jsonl").read_bytes() == output


def test_a_user_toolset_runs_on_ray_actors(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint, ray_cluster: RayCluster
) -> None:
    prompts = [f"{kind} {i}" for i in range(3) for kind in ("convert", "measure")]
    script(sim_endpoint, prompts)
    user_module(tmp_path)
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
    cli = BatchCLI(tmp_path, sim_endpoint)
    run = cli.run(
        "--dataset_file=d.jsonl", "--batch_size=3", "--run_name=onray", "--tools_module=unit_tools",
        "--distributions_file=dists.yaml", "--distribution=units_and_files", *ray_args(ray_cluster),
    )  # fmt: skip
    check_run(cli, sim_endpoint, run, "onray", prompts)


def test_run_agent_offers_and_calls_a_user_tool(sim_endpoint: SimulatedEndpoint, tmp_path: Path) -> None:
    sim_endpoint.script("how far is a marathon", [call("convert_units", CONVERT), Turn(content="42.2 km")])
    done = run_cli(
        tmp_path, *endpoint_flags(sim_endpoint, "how far is a marathon"),
        f"--tools_module={EXAMPLE}", "--enabled_toolsets=units", "--save_trajectories",
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "42.2 km\n", "")
    first, second = sim_endpoint.requests
    assert sorted(t["function"]["name"] for t in first.body["tools"]) == ["convert_units", "measure_file"]
    assert json.loads(second.body["messages"][-1]["content"]) == CONVERTED
    (saved,) = read_jsonl(tmp_path / "trajectory_samples.jsonl")
    (tool_turn,) = [turn["value"] for turn in saved["conversations"] if turn["from"] == "tool"]
    assert "convert_units" in tool_turn and '\\"unit\\": \\"km\\"' in json.dumps(tool_turn)


# ---------------------------------------------------------------- errors: one line, exit 2

TOOLSET_OF = (
    "from agent.protocols import Toolset, ToolSpec\n"
    "async def run(args, context):\n    return 'ok'\n"
    "def spec(name):\n    return ToolSpec(name, {{'name': name, 'parameters': {{}}}}, run)\n"
    "TOOLSET = Toolset({toolset!r}, 'mine', ({tools}))\n"
)

BAD_MODULES = {
    "raises": (
        "raise RuntimeError('no database configured')\n",
        r"importing it raised RuntimeError: no database configured \(.*raises_.*\.py:1\)$",
    ),
    "needs_a_package": (
        "import not_installed_anywhere\n",
        r"importing it raised ModuleNotFoundError: No module named 'not_installed_anywhere' \(",
    ),
    "syntax": ("def broken(:\n", r"importing it raised SyntaxError: .*syntax_.*\.py:1\)$"),
    "exits": ("import sys\nsys.exit(3)\n", r"importing it raised SystemExit: 3 \("),
    "exits_hard": (  # os._exit skips every handler: the run ended with its code, 0, nothing run
        "import os\nos._exit(0)\n",
        r"importing it raised ExitCalled: os._exit\(0\) called \(.*exits_hard_.*\.py:2\)$",
    ),
    "declares_nothing": ("X = 1\n", r"declare one of TOOLSET \(an agent.protocols.Toolset\) or TOOLSETS"),
    "both": ("TOOLSET = TOOLSETS = None\n", r"declare one of TOOLSET"),
    "a_dict": ("TOOLSET = {'name': 'x'}\n", r"a dict where an agent.protocols.Toolset is declared$"),
    "empty_list": ("TOOLSETS = []\n", r"TOOLSETS is a list, not a non-empty list of Toolsets$"),
    "sync_handler": (
        "from agent.protocols import Toolset, ToolSpec\n"
        "def run(args, context):\n    return 'ok'\n"
        "TOOLSET = Toolset('sync', 'd', (ToolSpec('sync_tool', {'name': 'sync_tool'}, run),))\n",
        r"toolset 'sync': tool 'sync_tool': its handler must be an async function",
    ),
    "misnamed_schema": (
        TOOLSET_OF.format(toolset="misnamed", tools="spec('a'),").replace("{'name': name,", "{'name': 'b',"),
        r"tool 'a': its schema must be a dict whose 'name' is 'a'$",
    ),
    "bad_tool_name": (TOOLSET_OF.format(toolset="spaces", tools="spec('two words'),"), r"name 'two words'"),
    "bad_toolset_name": (TOOLSET_OF.format(toolset="a,b", tools="spec('ab'),"), r"toolset name 'a,b'"),
    "no_tools": (
        TOOLSET_OF.format(toolset="none", tools=""),
        r"tools must be a non-empty tuple of ToolSpecs",
    ),
    "clashes_with_terminal": (
        TOOLSET_OF.format(toolset="terminal", tools="spec('t2'),"),
        r"toolset 'terminal' is already declared: rename it$",
    ),
    "clashes_with_a_tool": (
        TOOLSET_OF.format(toolset="mine", tools="spec('web_search'),"),
        r"tool 'web_search' of toolset 'mine' is already a tool of 'web'",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_MODULES))
def test_a_bad_module_is_one_config_error_naming_it(tmp_path: Path, name: str) -> None:
    source, expected = BAD_MODULES[name]
    path = tmp_path / f"{name}_{tmp_path.name}.py".replace("-", "_")  # a name no other test imports
    path.write_text(source, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^--tools_module={re.escape(str(path))}: .*{expected}") as raised:
        load_tool_modules([str(path)])
    assert "\n" not in str(raised.value)


def test_two_modules_declaring_one_toolset_name_the_second(tmp_path: Path) -> None:
    for name in ("first_units", "second_units"):
        (tmp_path / f"{name}.py").write_text(TOOLSET_OF.format(toolset="twice", tools=f"spec('{name}'),"))
    with pytest.raises(
        ConfigError, match=r"^--tools_module=second_units: toolset 'twice' is already declared"
    ):
        load_tool_modules(["first_units", "second_units"], [str(tmp_path)])


@pytest.mark.parametrize("script_name", ["batch_runner.py", "run_agent.py"])
def test_each_command_line_says_one_line_and_exits_2(tmp_path: Path, script_name: str) -> None:
    (tmp_path / "raises.py").write_text("import json\nraise ValueError('bad token')\n", encoding="utf-8")
    flags = ["--tools_module=raises", "--query=q", "--model=sim-model", "--base_url=http://127.0.0.1:9/v1"]
    if script_name == "batch_runner.py":
        flags = ["--tools_module=raises", "--list_distributions"]
    for module, line in [
        ("raises", "error: --tools_module=raises: importing it raised ValueError: bad token ("),
        (
            "no_such_tools",
            "error: --tools_module=no_such_tools: no module named 'no_such_tools' in the current",
        ),
        ("gone.py", "error: --tools_module=gone.py: no such file"),
    ]:
        argv = [flag.replace("=raises", f"={module}") for flag in flags]
        done = _run_script(tmp_path, script_name, argv)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(line), done.stderr


def _run_script(cwd: Path, script_name: str, argv: list[str]) -> Any:
    if script_name == "run_agent.py":
        return run_cli(cwd, *argv)
    return BatchCLI(cwd).run(*argv, output=False)


def test_a_package_whose_import_raises_is_one_line_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "broken_team_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise KeyError('settings')\n", encoding="utf-8")
    (package / "tools.py").write_text("TOOLSET = None\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # a dotted name is found from the current directory
    raised = r"^--tools_module=broken_team_pkg.tools: importing it raised KeyError: 'settings' \("
    with pytest.raises(ConfigError, match=raised):
        resolve_tool_modules(["broken_team_pkg.tools"])


def run_one_call(
    tmp_path: Path, endpoint: SimulatedEndpoint, module: str, toolset: str, tool: str
) -> Finished:
    """One prompt, "go", calling `tool` of `toolset`, declared by the module `module` (written
    already), which the distribution "only" holds alone."""
    (tmp_path / "dists.yaml").write_text(
        f"only:\n  description: d\n  toolsets: {{{toolset}: 100}}\n", encoding="utf-8"
    )
    endpoint.script("go", [call(tool, {}), answer("done")])
    write_dataset(tmp_path / "d.jsonl", [{"prompt": "go"}])
    return BatchCLI(tmp_path, endpoint).run(
        "--dataset_file=d.jsonl", "--batch_size=1", "--run_name=c", "--num_workers=1",
        f"--tools_module={module}", "--distributions_file=dists.yaml", "--distribution=only",
    )  # fmt: skip


CANCELS = """
import asyncio, sys
from agent.protocols import ToolSpec, Toolset

async def cancel(args, context):
    {raises}

SCHEMA = {{"name": "cancel", "description": "d", "parameters": {{"type": "object", "properties": {{}}}}}}
TOOLSET = Toolset("cancelling", "raises what ends a task or a process", (ToolSpec("cancel", SCHEMA, cancel),))
"""


@pytest.mark.parametrize(
    ("raises", "said"),
    [("raise asyncio.CancelledError(\"the handler's own\")", "CancelledError: the handler's own"),
     ("sys.exit(3)", "SystemExit: 3"),
     ("raise KeyboardInterrupt", "KeyboardInterrupt: "),  # once the worker's end: every prompt lost
     ("raise BaseException('bare')", "BaseException: bare")],  # once a prompt in flight forever
    ids=["cancelled-error", "sys-exit", "keyboard-interrupt", "base-exception"],
)  # fmt: skip
def test_a_tool_raising_cancelled_error_is_a_tool_error_not_a_prompt_run_forever(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint, raises: str, said: str
) -> None:
    """Once taken for a stop: the prompt was cancelled, run again, and so on (46,828 requests
    in 2 minutes). And sys.exit() in a handler once ended the worker (`worker_lost`), as did a
    KeyboardInterrupt (the worker ignores SIGINT: only code raises it); a bare BaseException
    left its prompt in flight for good."""
    (tmp_path / "cancels.py").write_text(CANCELS.format(raises=raises), encoding="utf-8")
    run = run_one_call(tmp_path, sim_endpoint, "cancels", "cancelling", "cancel")
    assert run.returncode == 0, run
    assert len(sim_endpoint.requests) == 2
    assert tool_results(sim_endpoint)["go"] == [{"error": f"Tool 'cancel' failed: {said}"}]


HUGE = """
from agent.protocols import ToolSpec, Toolset

async def huge(args, context):
    return "<" + "B" * 200_000 + ">"

SCHEMA = {"name": "huge", "description": "d", "parameters": {"type": "object", "properties": {}}}
TOOLSET = Toolset("huge", "returns 200 KB", (ToolSpec("huge", SCHEMA, huge),))
"""


def test_a_huge_result_is_cut_as_a_commands_output_is(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    """Once whole: a handler's 50 MB string was a 50 MB line in the shard and in every request."""
    (tmp_path / "huge.py").write_text(HUGE, encoding="utf-8")
    run = run_one_call(tmp_path, sim_endpoint, "huge", "huge", "huge")
    assert run.returncode == 0, run
    last = sim_endpoint.requests[-1].body["messages"]
    [result] = [m["content"] for m in last if m["role"] == "tool"]
    assert result.startswith("<BBB") and result.endswith("BBB>")
    assert "[OUTPUT TRUNCATED - 150002 chars omitted out of 200002 total]" in result
    assert len(result) < 50_100


def test_a_sys_exit_that_ends_the_worker_is_said_in_its_log(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    """Out of the handler's reach (a callback it left on the loop), sys.exit() still ends the
    worker: its prompt fails as worker_lost, and the log the loss points at says why."""
    raises = "asyncio.get_running_loop().call_soon(sys.exit, 4); return 'ok'"
    (tmp_path / "cancels.py").write_text(CANCELS.format(raises=raises), encoding="utf-8")
    run = run_one_call(tmp_path, sim_endpoint, "cancels", "cancelling", "cancel")
    assert run.returncode == 1, run
    assert "worker 0: something it ran called sys.exit(4)" in run.stderr
    assert "(pid" in run.stderr and "exit code 4, running prompt(s) 0)" in run.stderr
    [failure] = read_jsonl(tmp_path / "data" / "c" / "failures.jsonl")
    assert failure["error_class"] == "worker_lost"
    assert len(sim_endpoint.requests) == 2 * 2  # --max_prompt_attempts=2: not run again and again


FRAGILE = """
from agent.protocols import ToolSpec, Toolset

async def noop(args, context):
    return "ok"

def {available}(config):
    return 1 / 0

def named(config):
    raise KeyError("no region configured")

SCHEMA = {{"name": "noop", "description": "d", "parameters": {{"type": "object", "properties": {{}}}}}}
TOOLSET = Toolset({name}, "fragile", (ToolSpec("noop", SCHEMA, noop, {available}),), backend=named)
"""


def test_a_modules_own_functions_that_raise_are_said_not_a_traceback(tmp_path: Path) -> None:
    """available() and backend() raising, and a toolset named None, once ended the command with
    a traceback and exit 1: now the toolset is unavailable with the reason, or one line, exit 2."""
    (tmp_path / "fragile.py").write_text(
        FRAGILE.format(available="nowhere", name="'fragile'"), encoding="utf-8"
    )
    listed = BatchCLI(tmp_path).run("--tools_module=fragile", "--list_distributions", output=False)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert (
        "fragile" in listed.stdout
        and "its available() raised ZeroDivisionError: division by zero" in listed.stdout
    )
    query = ["--tools_module=fragile", "--query=q", "--model=sim-model", "--base_url=http://127.0.0.1:9/v1"]
    refused = run_cli(tmp_path, *query, "--enabled_toolsets=fragile")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert "its available() raised ZeroDivisionError" in refused.stderr
    backend = FRAGILE.format(available="nowhere", name="'named'").replace(", noop, nowhere)", ", noop)")
    (tmp_path / "backend.py").write_text(backend, encoding="utf-8")
    listed = BatchCLI(tmp_path).run("--tools_module=backend", "--list_distributions", output=False)
    assert listed.returncode == 0, listed.stderr
    assert "its backend() raised KeyError: 'no region configured'" in listed.stdout, listed.stdout
    (tmp_path / "unnamed.py").write_text(FRAGILE.format(available="nowhere", name="None"), encoding="utf-8")
    unnamed = BatchCLI(tmp_path).run("--tools_module=unnamed", "--list_distributions", output=False)
    assert unnamed.returncode == 2, unnamed.stderr
    assert unnamed.stderr.strip() == "error: --tools_module=unnamed (" + str(tmp_path / "unnamed.py") + (
        "): toolset name None: use 1-64 letters, digits, _ or -"
    )
