"""The `--mcp_config` file: the entries Claude Desktop and Cursor write are read as they are,
`${VAR}` comes from the runner's environment, `files` are read at the start; every problem is
one line `FILE: mcpServers.NAME.FIELD: reason` and exit 2 (checked through the real command
line too), and the names offered to the model suit the OpenAI function API."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agent.errors import ConfigError
from agent.protocols import McpServer, McpTool, ToolConfig
from tests.support.cli import run_cli
from tests.support.mcp_files import write_mcp_config
from tools.mcp import toolsets_for
from tools.mcp.config import MAX_FILES_BYTES, read_config
from tools.mcp.names import function_names


def config_file(tmp_path: Path, servers: Any) -> Path:
    return write_mcp_config(tmp_path / "mcp.json", servers)


def problem(tmp_path: Path, servers: Any, environ: dict[str, str] | None = None) -> str:
    path = config_file(tmp_path, servers)
    with pytest.raises(ConfigError) as raised:
        read_config(str(path), environ or {})
    line = str(raised.value)
    assert "\n" not in line
    return line.removeprefix(f"{path}: ")


def test_the_desktop_clients_entries_are_read_as_written(tmp_path: Path) -> None:
    (tmp_path / "server.py").write_text("print('hi')\n", encoding="utf-8")
    path = config_file(
        tmp_path,
        {
            "files_server": {"command": "npx", "args": ["-y", "pkg"], "env": {"KEY": "${MY_KEY}-x"}},
            "remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
            "typed": {"type": "streamable-http", "url": "http://10.0.0.1/mcp", "call_timeout": 5},
            "shipped": {"type": "stdio", "command": "python3", "args": ["server.py"],
                        "files": {"server.py": "server.py"}, "cwd": "/tmp/s", "tool_prefix": "s_"},
            "off": {"command": "never", "disabled": True},
        },
    )  # fmt: skip
    servers = read_config(str(path), {"MY_KEY": "k1", "TOKEN": "t-secret"})
    assert [s.name for s in servers] == ["files_server", "remote", "typed", "shipped"]
    stdio, remote, typed, shipped = servers
    assert (stdio.command, stdio.args, dict(stdio.env), stdio.host) == (
        "npx",
        ("-y", "pkg"),
        {"KEY": "k1-x"},
        False,
    )
    assert (remote.transport, dict(remote.headers)) == ("http", {"Authorization": "Bearer t-secret"})
    assert (typed.call_timeout, typed.startup_timeout) == (5.0, 30.0)
    assert shipped.files == (("server.py", b"print('hi')\n"),) and shipped.tool_prefix == "s_"
    assert set(remote.secrets()) == {"Bearer t-secret"} and "t-secret" not in json.dumps(remote.public())
    assert "k1" not in repr(stdio) and "k1" not in json.dumps(ToolConfig(mcp_servers=servers).public())


@pytest.mark.parametrize(
    ("servers", "expected"),
    [
        ({"a b": {"command": "x"}}, "mcpServers.a b: a server's name is its toolset's"),
        ({"terminal": {"command": "x"}}, "mcpServers.terminal: 'terminal' is a built-in toolset's name"),
        ({"all": {"command": "x"}}, "mcpServers.all: 'all' is a built-in toolset's name"),
        ({"s": {"type": "sse", "url": "http://h/sse"}}, "mcpServers.s.type: SSE servers are not supported"),
        ({"s": {"type": "ws", "url": "http://h"}}, "mcpServers.s.type: 'ws' is not one of"),
        ({"s": {"args": []}}, "mcpServers.s.command: give either command"),
        ({"s": {"command": "x", "url": "http://h"}}, "mcpServers.s.command: give either command"),
        ({"s": {"type": "http", "command": "x"}}, "mcpServers.s.type: 'http' does not match"),
        ({"s": {"command": "x", "args": "-v"}}, 'mcpServers.s.args: expected a list, got "-v"'),
        ({"s": {"command": "x", "args": [1]}}, "mcpServers.s.args: expected a list of strings"),
        ({"s": {"command": "x", "env": {"K": 1}}}, "mcpServers.s.env.K: expected a string"),
        ({"s": {"command": "x", "env": {"K": "${NOPE}"}}}, "mcpServers.s.env.K: ${NOPE} is not set"),
        (
            {"s": {"url": "h", "headers": {"A": "${NOPE}"}}},
            "mcpServers.s.url: expected an http:// or https://",
        ),
        (
            {"s": {"url": "http://h", "headers": {"A": "${NOPE}"}}},
            "mcpServers.s.headers.A: ${NOPE} is not set",
        ),
        ({"s": {"command": "x", "call_timeout": 0}}, "mcpServers.s.call_timeout: expected seconds"),
        ({"s": {"command": "x", "startup_timeout": "9"}}, "mcpServers.s.startup_timeout: expected seconds"),
        ({"s": {"command": "x", "host": "yes"}}, "mcpServers.s.host: expected true or false"),
        ({"s": {"command": "x", "cwd": "rel"}}, "mcpServers.s.cwd: give an absolute path"),
        ({"s": {"command": "x", "url_": 1}}, "mcpServers.s.url_: not a field of a stdio server"),
        ({"s": {"url": "http://h", "env": {}}}, "mcpServers.s.env: not a field of a http server"),
        ({"s": {"command": "x", "tool_prefix": "a b"}}, "mcpServers.s.tool_prefix: letters, digits"),
        (
            {"s": {"command": "x", "files": {"../x": "y"}}},
            "mcpServers.s.files.../x: expected a relative path",
        ),
        ({"s": {"command": "x", "files": {"x": "missing"}}}, "mcpServers.s.files.x: cannot read missing"),
        ({"s": {"command": "x", "host": True, "files": {"x": "y"}}}, "mcpServers.s.files: only for a server"),
        ({"s": "python3"}, "mcpServers.s: expected an object"),
    ],
)
def test_each_problem_is_one_line_naming_the_field(tmp_path: Path, servers: Any, expected: str) -> None:
    assert problem(tmp_path, servers).startswith(expected)


def test_the_files_are_capped(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"x" * (MAX_FILES_BYTES + 1))
    line = problem(tmp_path, {"s": {"command": "x", "files": {"big.bin": "big.bin"}}})
    assert line.startswith("mcpServers.s.files.big.bin: the files add up to more than")


def test_a_file_nested_too_deep_or_without_end_is_one_line(tmp_path: Path) -> None:
    """Each once a traceback: a RecursionError in 4 KB; /dev/zero read until the OOM killer."""
    deep = tmp_path / "deep.json"
    deep.write_text('{"mcpServers": ' + "[" * 2000 + "]" * 2000 + "}", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"^{re.escape(str(deep))}: nests too deeply"):
        read_config(str(deep), {})
    with pytest.raises(ConfigError, match=r"^--mcp_config: cannot read /dev/zero: over 16 MiB, too large"):
        read_config("/dev/zero", {})


@pytest.mark.parametrize("text", ["{", '{"servers": {}}', '{"mcpServers": {}}', '{"mcpServers": []}'])
def test_a_file_that_is_not_a_config_is_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: ") as raised:
        read_config(str(path), {})
    if text == '{"mcpServers": {}}':  # an object, but an empty one: said so
        assert "mcpServers: no server in it" in str(raised.value)


def test_tool_names_fit_the_function_api_deterministically() -> None:
    listed = ["read", "read.file", "héllo", "x" * 80, "read", "ok-name_1"]
    names = function_names("", listed)
    assert names == function_names("", listed)  # the same in every process
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name) for name in names)
    assert len(set(names)) == len(names)
    assert (names[0], names[5]) == ("read", "ok-name_1")
    assert names[1].startswith("read_file_") and names[4].startswith("read_")
    assert function_names("fs_", ["read"]) == ["fs_read"]


def test_the_same_servers_give_the_same_toolsets() -> None:
    tool = McpTool("add", "add", "Add.", json.dumps({"type": "object", "properties": {}}))
    server = McpServer(name="calc_same", command="python3", tools=(tool,))
    first = toolsets_for([server])
    assert toolsets_for([McpServer(name="calc_same", command="python3", tools=(tool,))]) == first
    assert toolsets_for([server])[0] is first[0]  # add_toolsets treats it as registered already
    (toolset,) = first
    assert toolset.tool_names == ("add",) and toolset.backend is not None
    assert toolset.backend(ToolConfig()) == "mcp stdio in the sandbox: python3"


def test_a_bad_file_stops_the_command_with_one_line_and_exit_2(tmp_path: Path) -> None:
    path = config_file(tmp_path, {"notes": {"type": "sse", "url": "http://127.0.0.1:1/sse"}})
    done = run_cli(tmp_path, "--query=q", f"--mcp_config={path}", "--enabled_toolsets=notes")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {path}: mcpServers.notes.type: SSE servers are not supported: only streamable HTTP "
        "(and stdio) is"
    ]


def test_a_missing_file_is_one_line_in_the_batch_runner_too(tmp_path: Path) -> None:
    from tests.support.batch import BatchCLI

    done = BatchCLI(tmp_path).run(
        "--dataset_file=x.jsonl", "--batch_size=1", "--run_name=r", f"--mcp_config={tmp_path}/none.json"
    )
    assert done.returncode == 2, done
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: --mcp_config: cannot read") and "none.json" in line, line
