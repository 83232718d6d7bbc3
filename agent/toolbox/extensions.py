"""A run's own toolsets beside the built-in ones: the tool families of `--tools_module`
modules and one toolset per `--mcp_config` server. `install_extensions` registers them in
this process (`agent.toolbox.registry.add_toolsets`); the CLI edge calls it once the config
is built (MCP servers already listed), and every worker process before its first job, from
the same `ToolConfig`, so parent and workers share one tool map.

A `--tools_module` entry is a dotted module name (`my_tools`, `company.agent_tools`) imported
as `python -m` would find it: from the current directory, PYTHONPATH or the installed
packages; or the path of one `.py` file (`examples/my_tools.py`), loaded on its own under its
file name. The module declares `TOOLSET` (an `agent.protocols.Toolset`) or `TOOLSETS` (a list
or tuple of them) exactly as a `tools/` family does. The CLI edge resolves each entry
(`resolve_tool_modules`): a file to its absolute path, a dotted name to the directory it was
found in (`ToolConfig.tools_path`), so a worker started elsewhere (a Ray actor) imports the
same module. Every problem is a ConfigError naming the entry: one line, exit 2.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from agent.common import exit_guard
from agent.common.exit_guard import ExitCalled, exit_refused
from agent.errors import ConfigError
from agent.protocols import JSON, ToolConfig, ToolContext, Toolset, ToolSpec
from agent.toolbox.registry import ALL, TOOL_TO_TOOLSET_MAP, TOOLSETS, add_toolsets
from tools.mcp import toolsets_for
from tools.terminal import MAX_OUTPUT_CHARS, truncate_output

# What a flag's comma list and the model API accept: OpenAI's rule for function names.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _is_file(entry: str) -> bool:
    return entry.endswith(".py") or os.sep in entry


def resolve_tool_modules(entries: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the entries with files made absolute, the directories the dotted names were found in):
    what `ToolConfig.tools_modules` and `tools_path` hold, so any process imports the same."""
    modules: list[str] = []
    roots: list[str] = []
    for entry in entries:
        if _is_file(entry):
            if not Path(entry).is_file():  # said as typed, before it is made absolute
                raise ConfigError(f"--tools_module={entry}: no such file (give a .py file or a module name)")
            modules.append(str(Path(entry).absolute()))
            continue
        modules.append(entry)
        _add_to_path([os.getcwd()])
        root = _root_of(entry)
        if root not in roots:
            roots.append(root)
    return tuple(modules), tuple(roots)


def _root_of(name: str) -> str:
    """The sys.path directory `name` was imported from (imported now: its errors said here)."""
    module = _import(name)
    origin = getattr(module, "__file__", None)
    if origin is None:  # a namespace package (no file) or a built-in module: no toolsets there
        raise _not_found(name, None)
    path = Path(origin).parent  # of `name`'s file; a package's __init__ is one more level
    depth = name.count(".") + (1 if hasattr(module, "__path__") else 0)
    return str(path.parents[depth - 1] if depth else path)


def _not_found(name: str, exc: BaseException | None) -> ConfigError:
    why = f" ({exc})" if exc is not None else ""
    return ConfigError(
        f"--tools_module={name}: no module named {name!r} in the current directory, PYTHONPATH or "
        f"the installed packages{why}; give a dotted module name or the path of a .py file"
    )


def _add_to_path(directories: Iterable[str]) -> None:
    """`directories` on sys.path, after what is there (never shadowing an installed module), and
    kept: a user's module may import its siblings later, when a tool is called."""
    sys.path.extend(d for d in dict.fromkeys(directories) if d not in sys.path)


def load_tool_modules(modules: Sequence[str], path: Sequence[str] = ()) -> tuple[Toolset, ...]:
    """The toolsets the `--tools_module` modules declare, checked; `path`: directories to import
    the dotted names from (`ToolConfig.tools_path`)."""
    found: list[Toolset] = []
    if modules:
        _add_to_path(path or [os.getcwd()])
    for entry in modules:
        module = _import(entry)
        for toolset in _declared(entry, module):
            _check_unique(entry, toolset, found)
            found.append(replace(toolset, tools=tuple(_capped(spec) for spec in toolset.tools)))
    return tuple(found)


def _capped(spec: ToolSpec) -> ToolSpec:
    """`spec` with its result cut as a command's output is (50,000 characters, its start and
    end kept): a handler's 50 MB string was a 50 MB line in every shard and request after it."""
    handler = spec.handler
    if handler is None:
        return spec

    async def capped(args: Mapping[str, Any], context: ToolContext) -> JSON:
        result = await handler(args, context)
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        # the text itself: dispatch takes a string as the content, and need not dump it again
        return text if len(text) <= MAX_OUTPUT_CHARS else truncate_output(text)

    return replace(spec, handler=capped)


def _import(entry: str) -> ModuleType:
    try:
        with exit_refused():
            if _is_file(entry):
                return _import_file(entry)
            return importlib.import_module(entry)
    except ConfigError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is not None and (entry == exc.name or entry.startswith(exc.name + ".")):
            raise _not_found(entry, None) from None
        raise _raised(entry, exc) from None
    except (Exception, SystemExit, ExitCalled) as exc:  # noqa: BLE001 - the user's code may raise anything: one line
        raise _raised(entry, exc) from None


def _import_file(entry: str) -> ModuleType:
    path = Path(entry)
    if not path.is_file():
        raise ConfigError(f"--tools_module={entry}: no such file (give a .py file or a dotted module name)")
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None:
        if getattr(loaded, "__file__", None) == str(path.absolute()):
            return loaded
        raise ConfigError(
            f"--tools_module={entry}: a module named {name!r} is already imported "
            f"({getattr(loaded, '__file__', 'built in')}); rename your file"
        )
    spec = importlib.util.spec_from_file_location(name, path.absolute())
    if spec is None or spec.loader is None:
        raise ConfigError(f"--tools_module={entry}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before it runs, as an import does (dataclasses look it up)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _raised(entry: str, exc: BaseException) -> ConfigError:
    """`importing ENTRY raised KIND: message (file:line)`, the line the user's code raised at."""
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}:{exc.lineno})"
    else:
        # the user's line: not the guard's, which raised ExitCalled for their os._exit
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != exit_guard.__file__]
        if frames:
            where = f" ({frames[-1].filename}:{frames[-1].lineno})"
    message = str(exc).splitlines()[0] if str(exc) else ""
    return ConfigError(f"--tools_module={entry}: importing it raised {type(exc).__name__}: {message}{where}")


def _declared(entry: str, module: ModuleType) -> tuple[Toolset, ...]:
    """The module's TOOLSET or TOOLSETS, each checked as the registry and the model need it."""
    where = f"--tools_module={entry}"
    where += "" if _is_file(entry) else f" ({getattr(module, '__file__', module.__name__)})"
    if hasattr(module, "TOOLSET") == hasattr(module, "TOOLSETS"):
        raise ConfigError(
            f"{where}: declare one of TOOLSET (an agent.protocols.Toolset) or TOOLSETS (a list)"
        )
    declared: Any = module.TOOLSET if hasattr(module, "TOOLSET") else module.TOOLSETS
    toolsets = (declared,) if hasattr(module, "TOOLSET") else declared
    if not isinstance(toolsets, list | tuple) or not toolsets:
        raise ConfigError(f"{where}: TOOLSETS is {_kind(toolsets)}, not a non-empty list of Toolsets")
    for toolset in toolsets:
        _check_toolset(where, toolset)
    return tuple(toolsets)


def _kind(value: object) -> str:
    return f"a {type(value).__name__}" if value is not None else "None"


def _check_toolset(where: str, toolset: object) -> None:
    if not isinstance(toolset, Toolset):
        raise ConfigError(f"{where}: {_kind(toolset)} where an agent.protocols.Toolset is declared")
    if not isinstance(toolset.name, str) or not _NAME.match(toolset.name) or toolset.name == ALL:
        raise ConfigError(f"{where}: toolset name {toolset.name!r}: use 1-64 letters, digits, _ or -")
    if not isinstance(toolset.tools, tuple) or not toolset.tools:
        raise ConfigError(f"{where}: toolset {toolset.name!r}: tools must be a non-empty tuple of ToolSpecs")
    for spec in toolset.tools:
        why = _spec_problem(spec)
        if why is not None:
            raise ConfigError(f"{where}: toolset {toolset.name!r}: {why}")


def _spec_problem(spec: object) -> str | None:
    """Why `spec` cannot be offered and called, None when it can."""
    if not isinstance(spec, ToolSpec):
        return f"{_kind(spec)} among its tools, not an agent.protocols.ToolSpec"
    if not isinstance(spec.name, str) or not _NAME.match(spec.name):
        return f"tool name {spec.name!r}: use 1-64 letters, digits, _ or -"
    schema = spec.schema
    if not isinstance(schema, dict) or schema.get("name") != spec.name:
        return f"tool {spec.name!r}: its schema must be a dict whose 'name' is {spec.name!r}"
    if not isinstance(schema.get("parameters", {}), dict):
        return f"tool {spec.name!r}: its schema's 'parameters' must be a JSON schema object (a dict)"
    handler = spec.handler
    call = getattr(handler, "__call__", None)  # noqa: B004 - an object whose __call__ is async counts
    if handler is not None and not (
        inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)
    ):
        return f"tool {spec.name!r}: its handler must be an async function: async def handler(args, context)"
    available: Any = spec.available  # a user's module is not type-checked
    if not callable(available):
        return f"tool {spec.name!r}: available must be a function of the ToolConfig"
    return None


def _check_unique(entry: str, toolset: Toolset, found: Sequence[Toolset]) -> None:
    """Name clashes, said with the module that declares the second one."""
    if TOOLSETS.get(toolset.name) is toolset:
        return  # registered already (a second install in this process)
    taken = {t.name for t in found} | set(TOOLSETS)
    if toolset.name in taken:
        raise ConfigError(f"--tools_module={entry}: toolset {toolset.name!r} is already declared: rename it")
    owners = {**TOOL_TO_TOOLSET_MAP, **{s.name: t.name for t in found for s in t.tools}}
    for spec in toolset.tools:
        if spec.name in owners:
            raise ConfigError(
                f"--tools_module={entry}: tool {spec.name!r} of toolset {toolset.name!r} is already a tool "
                f"of {owners[spec.name]!r}; tool names must be unique"
            )


def install_extensions(config: ToolConfig) -> None:
    """Register the run's own toolsets in this process (idempotent)."""
    toolsets = load_tool_modules(config.tools_modules, config.tools_path)
    add_toolsets([*toolsets, *toolsets_for(config.mcp_servers)])
