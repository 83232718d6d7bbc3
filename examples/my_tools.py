"""An example `--tools_module`: your own tool family in one file, declared as the built-in
families in `tools/` are, then offered, sampled and recorded (`toolsets_used`, `tool_stats`)
like them.

    python batch_runner.py --dataset_file=prompts.jsonl --batch_size=10 --run_name=units \\
        --tools_module=examples/my_tools.py --distribution=units_heavy \\
        --distributions_file=examples/my_distributions.yaml
    python run_agent.py --query="How many km is 26.2 miles?" \\
        --tools_module=examples.my_tools --enabled_toolsets=units

A module declares `TOOLSET` (or `TOOLSETS`, a list): the toolset's name (what distributions and
--enabled_toolsets name), a description, and its tools. A tool is a `ToolSpec`: its name, its
OpenAI function schema, and an async handler `(args, context)` whose return value (JSON-able,
or a string) is the tool message the model reads; the arguments were checked against the
schema first. Return `{"error": ...}` for a mistake the model should correct; an exception the
handler raises also reaches the model, as `{"error": "Tool 'name' failed: Kind: message"}`.
`context.sandbox()` is the conversation's sandbox (made on first use: local, bwrap or
docker, as the run's --sandbox says); `available(config)` says why a tool cannot run here
(None: it can), so a run that samples it stops before any token with your reason.
Every worker process imports this module too: keep its import cheap and free of side effects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.protocols import JSON, ToolConfig, ToolContext, Toolset, ToolSpec

# Each unit in metres (length) or kilograms (mass): a conversion stays within one kind.
_FACTORS: dict[str, tuple[str, float]] = {
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "cm": ("length", 0.01),
    "mi": ("length", 1609.344),
    "ft": ("length", 0.3048),
    "in": ("length", 0.0254),
    "kg": ("mass", 1.0),
    "g": ("mass", 0.001),
    "lb": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125),
}

CONVERT_SCHEMA: dict[str, Any] = {
    "name": "convert_units",
    "description": "Convert a length or mass between units (m, km, cm, mi, ft, in, kg, g, lb, oz).",
    "parameters": {
        "type": "object",
        "properties": {
            "value": {"type": "number", "description": "The quantity to convert."},
            "from_unit": {"type": "string", "enum": sorted(_FACTORS)},
            "to_unit": {"type": "string", "enum": sorted(_FACTORS)},
        },
        "required": ["value", "from_unit", "to_unit"],
    },
}


async def convert_units(args: Mapping[str, Any], context: ToolContext) -> JSON:
    source, target = _FACTORS.get(str(args["from_unit"])), _FACTORS.get(str(args["to_unit"]))
    if source is None or target is None:
        return {"error": f"unknown unit; known: {', '.join(sorted(_FACTORS))}"}
    if source[0] != target[0]:
        return {"error": f"cannot convert {source[0]} to {target[0]}"}
    try:
        value = float(args["value"])
    except (TypeError, ValueError):
        return {"error": f"value must be a number, not {args['value']!r}"}
    return {"value": value * source[1] / target[1], "unit": args["to_unit"]}


MEASURE_SCHEMA: dict[str, Any] = {
    "name": "measure_file",
    "description": "Size in bytes and line count of a file in the task's working directory.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "The file, relative to the workdir."}},
        "required": ["path"],
    },
}


async def measure_file(args: Mapping[str, Any], context: ToolContext) -> JSON:
    """Reads the file inside the conversation's sandbox: the files the agent wrote there."""
    sandbox = await context.sandbox()
    try:
        data = await sandbox.read_file(str(args["path"]))
    except FileNotFoundError:
        return {"error": f"no file {args['path']!r} in {sandbox.workdir}"}
    return {"path": args["path"], "bytes": len(data), "lines": data.count(b"\n")}


def backend(config: ToolConfig) -> str:
    """What --list_distributions says runs this toolset."""
    return "examples/my_tools.py (measure_file: in the prompt's sandbox)"


TOOLSET = Toolset(
    "units",
    "Unit conversion and file measurement (an example --tools_module)",
    (
        ToolSpec("convert_units", CONVERT_SCHEMA, convert_units),
        ToolSpec("measure_file", MEASURE_SCHEMA, measure_file),
    ),
    backend=backend,
)
