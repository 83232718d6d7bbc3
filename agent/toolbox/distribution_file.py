"""`--distributions_file`: distributions a user writes in YAML or JSON, adding to or overriding
the built-in table (`agent.toolbox.distributions`):

    units_heavy:
      description: Unit conversion with a terminal
      toolsets: {units: 80, terminal: 50}

Each name maps to `description` (text, optional) and `toolsets` (toolset -> percent in [0, 100],
drawn independently per attempt, in the order written). A toolset may be built in, a
`--tools_module` one or an `--mcp_config` server: the file is read after those are registered.
Every problem is one ConfigError naming the file, the distribution and the field.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from agent.common.config_text import read_config_text, unreadable
from agent.config.distribution_config import Distribution
from agent.errors import ConfigError
from agent.store.run_config_file import RUN_CONFIG_FILE, RunConfigUnreadable, read_run_config
from agent.toolbox.registry import TOOLSETS

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # what --distribution=NAME can spell
_FIELDS = ("description", "toolsets")


def load_distributions_file(path: str) -> dict[str, Distribution]:
    """The file's distributions, checked (ConfigError `FILE: NAME.FIELD: reason`)."""
    try:
        text = read_config_text(path)
    except FileNotFoundError:
        raise ConfigError(f"--distributions_file={path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--distributions_file={path}: cannot be read ({unreadable(exc)})") from None
    try:
        return parse_distributions(_parse(path, text), path)
    except RecursionError:
        raise ConfigError(f"{path}: nests too deeply to be a distributions file") from None


def _parse(path: str, text: str) -> Any:
    """The file's data: JSON for a .json file, YAML (which reads JSON too) otherwise."""
    if path.endswith(".json"):
        try:
            return json.loads(text, object_pairs_hook=_unique_pairs)
        except _Twice as exc:
            raise ConfigError(f"{path}: {_line_of_twice(text)}not valid JSON: {exc}") from None
        except ValueError as exc:
            line = getattr(exc, "lineno", None)
            raise ConfigError(f"{path}: line {line}: not valid JSON: {getattr(exc, 'msg', exc)}") from None
    try:
        return yaml.load(text, Loader=_UniqueKeys)  # a SafeLoader that also checks keys
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: {where}not valid YAML: {problem}") from None


class _Twice(ValueError):
    """A key given twice in one JSON object (json keeps the last silently)."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _Twice(f"{key!r} is given twice")
        found[key] = value
    return found


def _line_of_twice(text: str) -> str:
    """`line N: ` of a JSON key given twice (json's hook knows no position; YAML, which reads
    JSON, does), or nothing where YAML reads the text otherwise."""
    try:
        yaml.load(text, Loader=_UniqueKeys)  # a SafeLoader that also checks keys
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return f"line {mark.line + 1}: " if mark is not None else ""
    return ""


class _UniqueKeys(yaml.SafeLoader):
    """`yaml.safe_load`'s loader, refusing a key given twice in one mapping (YAML keeps the last
    silently: a distribution pasted twice with other odds would run with the second)."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _value in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, str | int | float | bool):
            continue  # an unhashable key: construct_mapping says so
        if key in seen:
            twice = f"{key!r} is given twice"
            raise yaml.constructor.ConstructorError(None, None, twice, key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def parse_distributions(data: Any, where: str, known_only: bool = True) -> dict[str, Distribution]:
    """Distributions from loaded data (a file's, or what run_config.json recorded), checked;
    with `known_only`, every toolset they name must be registered in this process."""
    if not isinstance(data, dict) or not data:
        got = "empty" if not data else f"a {type(data).__name__}"
        raise ConfigError(
            f"{where}: {got}; write a mapping of distribution names to {{description, toolsets: "
            "{toolset: percent}}"
        )
    return {_name(where, k): _distribution(f"{where}: {k}", value, known_only) for k, value in data.items()}


def _name(where: str, name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}: {name!r}: a distribution name is letters, digits, '.', '_' or '-'")
    return name


def _distribution(where: str, value: object, known_only: bool) -> Distribution:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: not a mapping; give description and toolsets: {{toolset: percent}}")
    unknown = [str(key) for key in value if key not in _FIELDS]
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown field (fields: {', '.join(_FIELDS)})")
    description = value.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{where}.description: not text")
    if "toolsets" not in value:
        raise ConfigError(f"{where}.toolsets: missing; give {{toolset: percent}}")
    return Distribution(description, _odds(f"{where}.toolsets", value["toolsets"], known_only))


def _odds(where: str, toolsets: object, known_only: bool) -> dict[str, float]:
    if not isinstance(toolsets, dict) or not toolsets:
        got = "empty" if not toolsets else f"a {type(toolsets).__name__}"
        raise ConfigError(f"{where}: {got}; a distribution needs at least one {{toolset: percent}}")
    odds: dict[str, float] = {}
    for toolset, percent in toolsets.items():
        if not isinstance(toolset, str) or (known_only and toolset not in TOOLSETS):
            valid = ", ".join(sorted(TOOLSETS))
            raise ConfigError(
                f"{where}.{toolset}: unknown toolset; valid: {valid} "
                "(yours need --tools_module or --mcp_config)"
            )
        odds[toolset] = _percent(f"{where}.{toolset}", percent)
    if not any(odds.values()):
        raise ConfigError(f"{where}: every toolset is at 0%: the distribution would draw none")
    return odds


def _percent(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: {value!r} is not a number (a percent in [0, 100])")
    if math.isnan(value) or not 0 <= value <= 100:
        raise ConfigError(f"{where}: {value!r} is outside [0, 100] (a percent)")
    return value


def recorded_distributions(run_dir: Path) -> dict[str, Distribution]:
    """The file distributions a run recorded in its run_config.json (none when it has no such
    file or recorded none): a resume without --distributions_file samples with these. Their
    toolsets are checked when the run starts (`check_ready`), not here: a --rescore runs no tool."""
    try:
        saved = read_run_config(run_dir)
    except RunConfigUnreadable as exc:
        raise ConfigError(f"--resume: {exc}") from None
    recorded = saved.get("distributions") if saved is not None else None
    where = str(run_dir / RUN_CONFIG_FILE)
    return parse_distributions(recorded, where, known_only=False) if recorded else {}
