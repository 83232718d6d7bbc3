"""Structure figures for the code outside tests/, bench/ and data/: module and function sizes
(lines, from Python's `ast`), import cycles and upward imports between the project's modules,
`dict[str, Any]` per package (none on the conversation's path outside its edge functions) and
backend names compared outside a backend's own package.

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
    ("agent.toolbox", "agent.verify"),  # verify: checks of a finished attempt (no loop needed)
    ("agent.loop",),
    ("agent.batch", "agent.cluster"),
    ("agent.cli",),
    ("batch_runner", "run_agent", "model_tools", "toolsets"),
)


# The conversation's path from the loop to the shard line carries typed turns; OpenAI-shaped
# dicts appear only in its edge functions (rendering a request or an export, reading a foreign
# history), named by these prefixes. (agent.export.openai_messages is off the path: it converts
# one export format, ShareGPT rows, into another, OpenAI message rows, both dicts by nature.)
CONVERSATION_PATH = (
    "agent.loop",
    "agent.protocols.turns",
    "agent.export.sharegpt",
    "agent.export.analysis",
    "agent.export.tool_stats",
    "agent.export.formats",
    "agent.batch.records",
)
EDGE_PREFIXES = ("to_openai", "from_openai", "render_", "parse_", "to_sharegpt", "to_wire")
# A choice of backend is made in the backend's own package (its registry included); anywhere
# else, comparing a backend's name is knowledge leaking past the seam.
BACKEND_PACKAGES = ("agent.sandboxes", "agent.cluster", "agent.runners", "tools.web")


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


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _is_dict_str_any(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "dict"
        and isinstance(node.slice, ast.Tuple)
        and [getattr(e, "id", None) for e in node.slice.elts] == ["str", "Any"]
    )


def dict_any(tree: ast.AST) -> list[tuple[int, str]]:
    """Each `dict[str, Any]` with the name of the function holding it ("" at module level)."""
    found: list[tuple[int, str]] = []

    def walk(node: ast.AST, owner: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            owner = node.name
        if _is_dict_str_any(node):
            found.append((node.lineno, owner))  # type: ignore[attr-defined]
        for child in ast.iter_child_nodes(node):
            walk(child, owner)

    walk(tree, "")
    return found


def _names_backend(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return isinstance(name, str) and name.endswith("backend")


def _is_constant_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.Tuple | ast.Set | ast.List):
        return bool(node.elts) and all(_is_constant_name(e) for e in node.elts)
    return False


def _compares_a_name(node: ast.Compare) -> bool:
    operands = [node.left, *node.comparators]
    if not any(_names_backend(o) for o in operands):
        return False
    if all(isinstance(op, ast.In | ast.NotIn) for op in node.ops):  # `in REGISTRY` is a lookup
        return any(isinstance(o, ast.Tuple | ast.Set | ast.List) and _is_constant_name(o) for o in operands)
    return any(_is_constant_name(o) for o in operands)


def backend_compares(tree: ast.AST) -> list[int]:
    """Lines comparing something named `*backend` with a literal name (or a literal list)."""
    return sorted(
        node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare) and _compares_a_name(node)
    )


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


class Typing:
    """The untyped-value and backend-seam figures, gathered module by module."""

    def __init__(self) -> None:
        self.per_package: dict[str, int] = {}
        self.path_dicts: list[str] = []
        self.compares: list[str] = []

    def add(self, name: str, where: str, tree: ast.AST) -> None:
        found = dict_any(tree)
        package = ".".join(name.split(".")[:2]) if name.startswith(("agent.", "tools.")) else name
        self.per_package[package] = self.per_package.get(package, 0) + len(found)
        if _within(name, CONVERSATION_PATH):
            self.path_dicts += [
                f"{where}:{line} {owner or '<module>'}"
                for line, owner in found
                if not owner.lstrip("_").startswith(EDGE_PREFIXES)
            ]
        if not _within(name, BACKEND_PACKAGES):
            self.compares += [f"{where}:{line}" for line in backend_compares(tree)]

    def print(self) -> None:
        counts = ", ".join(f"{p} {n}" for p, n in sorted(self.per_package.items()) if n)
        print(f"dict[str, Any]: {sum(self.per_package.values())} ({counts})")
        for where in self.path_dicts:
            print(f"  dict[str, Any] on the conversation's path: {where}")
        print(f"dict[str, Any] on the conversation's path outside its edges: {len(self.path_dicts)}")
        for where in self.compares:
            print(f"  backend name compared outside its package: {where}")
        print(f"backend names compared outside their package: {len(self.compares)}")


def main(argv: list[str]) -> int:
    paths = sources()
    names = {module_name(p): p for p in paths}
    known = set(names)
    module_lines: list[tuple[int, str]] = []
    functions: list[tuple[int, str]] = []
    graph: dict[str, set[str]] = {}
    typed = Typing()
    for name, path in names.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        where = str(path.relative_to(ROOT))
        if text.strip():  # an empty package marker is not a module anyone reads
            module_lines.append((len(text.splitlines()), where))
        functions += function_sizes(tree, where)
        graph[name] = imports(tree, name, path.name == "__init__.py", known)
        typed.add(name, where, tree)
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
    typed.print()
    broken = bool(over or long or found_cycles or up or typed.path_dicts or typed.compares)
    broken |= statistics.median(sizes) > MODULE_MEDIAN or p90 > FUNCTION_P90
    return 1 if "--check" in argv and broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
