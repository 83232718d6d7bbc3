"""The run-backend seam (`agent.protocols.run_backend`) and its registry (`agent.backends`): the
batch layer drives a backend without naming one, and a backend is imported only when chosen."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from agent.backends import BACKENDS, RUN_BACKENDS, backend_factory, unavailable_reason
from agent.batch.scheduler import Scheduler
from agent.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
BATCH = sorted((REPO / "agent" / "batch").glob("*.py"))


def _imported(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("agent.")
        ):
            names.add(node.value)  # a module imported by its name
    return names


def test_the_batch_layer_never_imports_a_backend_above_it() -> None:
    assert BATCH
    offending = {
        path.name: sorted(
            name for name in _imported(ast.parse(path.read_text())) if name.startswith("agent.cluster")
        )
        for path in BATCH
    }
    assert {name: found for name, found in offending.items() if found} == {}


def test_the_batch_layer_never_asks_which_run_backend_runs() -> None:
    """No `config.backend` (the run backend) under agent/batch; `config.sandbox.backend`, the
    sandbox backend, is another thing."""
    reads = [
        f"{path.name}:{node.lineno}"
        for path in BATCH
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr == "backend"
        and not (isinstance(node.value, ast.Attribute) and node.value.attr == "sandbox")
    ]
    assert reads == []


def test_the_registry_resolves_names_and_refuses_unknown_ones() -> None:
    assert tuple(BACKENDS) == RUN_BACKENDS and "local" in RUN_BACKENDS
    assert backend_factory("local") is Scheduler
    assert unavailable_reason("local") is None
    with pytest.raises(ConfigError, match="--backend=nope: unknown backend; use one of local"):
        backend_factory("nope")


def test_the_local_backend_imports_no_other() -> None:
    """Ray takes seconds to import: a local run never imports it, nor the Ray backend."""
    code = (
        "import sys\n"
        "from agent.backends import backend_factory\n"
        "import agent.batch.run\n"
        "backend_factory('local')\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith(('ray.', 'agent.cluster'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
