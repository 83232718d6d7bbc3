"""Structure figures for the code outside tests/, bench/ and data/: module and function sizes
(lines, from Python's `ast`) and import cycles between the project's modules.

    python scripts/code_metrics.py            # the figures
    python scripts/code_metrics.py --check    # exit 1 when a limit is broken (used by check.sh)
"""

from __future__ import annotations

import ast
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXCLUDED = {"tests", "bench", "data", "scripts", ".git", ".venv", "build"}
MODULE_MAX, MODULE_MEDIAN, FUNCTION_MAX, FUNCTION_P90 = 300, 120, 40, 20
# Bottom to top (ARCHITECTURE.md): a module may import its own layer and the ones below.
LAYERS = (
    ("agent", "agent.errors", "agent.protocols", "agent.common"),
    ("agent.config", "agent.sandboxes", "agent.llm", "agent.servers", "agent.export", "agent.store"),
    ("agent.report", "agent.publish"),  # read what agent.store and agent.export wrote
    ("tools",),
    ("agent.toolbox",),
    ("agent.loop",),
    ("agent.batch", "agent.cluster"),
    ("agent.cli",),
    ("batch_runner", "run_agent", "model_tools", "toolsets"),
)


def layer(module: str) -> int:
    """The layer of a module: that of the longest prefix listed in LAYERS."""
    best, depth = 0, -1
    for level, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = level, prefix.count(".")
    return best


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a module to one in a higher layer."""
    return sorted(
        f"{src} -> {dst}" for src, targets in graph.items() for dst in targets if layer(dst) > layer(src)
    )


def sources() -> list[Path]:
    return sorted(
        p
        for p in ROOT.rglob("*.py")
        if not (set(p.relative_to(ROOT).parts[:-1]) & EXCLUDED) and "egg-info" not in str(p)
    )


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def function_sizes(tree: ast.AST, where: str) -> list[tuple[int, str]]:
    return [
        (node.end_lineno - node.lineno + 1, f"{where}:{node.lineno} {node.name}")  # type: ignore[operator]
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def imports(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> set[str]:
    """Project modules imported anywhere in the module (function-level imports included)."""
    found: set[str] = set()
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            subs = [f"{base}.{alias.name}" for alias in node.names]
            targets = [s for s in subs if s in known]
            if len(targets) < len(subs):  # some names are attributes of `base` itself
                targets.append(base)
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in graph:
        if node not in index:
            visit(node)
    return out


def main(argv: list[str]) -> int:
    paths = sources()
    names = {module_name(p): p for p in paths}
    known = set(names)
    module_lines: list[tuple[int, str]] = []
    functions: list[tuple[int, str]] = []
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        where = str(path.relative_to(ROOT))
        if text.strip():  # an empty package marker is not a module anyone reads
            module_lines.append((len(text.splitlines()), where))
        functions += function_sizes(tree, where)
        graph[name] = imports(tree, name, path.name == "__init__.py", known)
    sizes = sorted(n for n, _ in module_lines)
    fsizes = sorted(n for n, _ in functions)
    p90 = fsizes[int(0.9 * (len(fsizes) - 1))]
    found_cycles = cycles(graph)
    print(f"modules: {len(sizes)}, lines median {statistics.median(sizes):g}, max {sizes[-1]}")
    print(
        f"functions: {len(fsizes)}, lines median {statistics.median(fsizes):g}, p90 {p90}, max {fsizes[-1]}"
    )
    over = sorted((m for m in module_lines if m[0] > MODULE_MAX), reverse=True)
    long = sorted((f for f in functions if f[0] > FUNCTION_MAX), reverse=True)
    for n, where in over:
        print(f"  module over {MODULE_MAX}: {where} ({n})")
    for n, where in long:
        print(f"  function over {FUNCTION_MAX}: {where} ({n})")
    for cycle in found_cycles:
        print(f"  import cycle: {' <-> '.join(cycle)}")
    print(f"import cycles: {len(found_cycles)}")
    up = upward(graph)
    for edge in up:
        print(f"  upward import: {edge}")
    print(f"upward imports: {len(up)}")
    broken = bool(over or long or found_cycles or up)
    broken |= statistics.median(sizes) > MODULE_MEDIAN or p90 > FUNCTION_P90
    return 1 if "--check" in argv and broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
