"""Running a checkout's own code from a benchmark: its tree first on PYTHONPATH, its modules
compiled first (`startup.py`, `scale.py`, `throughput*.py` and the others compare trees)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def tree_first(tree: Path) -> dict[str, str]:
    """This environment with `tree` first on PYTHONPATH, then what the caller's held (packages
    installed with --target): a runner started from another directory runs `tree`'s workers
    even where its fork server would find an installed copy of the package first (a tree older
    than `agent.batch.fork_server._package_on_path`). The tree's modules are compiled first."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])),
    }
    compiled(tree, env)
    return env


_COMPILED: set[Path] = set()
PACKAGES = ("agent", "tools", "batch_runner.py", "run_agent.py", "model_tools.py", "toolsets.py")


def compiled(tree: Path, env: dict[str, str] | None = None) -> None:
    """Compile `tree`'s modules to bytecode (once per tree and bench process), where the runner
    will look for it (`env`'s PYTHONPYCACHEPREFIX, if any). A tree without cached bytecode (a
    fresh checkout under PYTHONDONTWRITEBYTECODE=1) compiles every module in every process of
    every run, as no installed copy does: compared with one that has it, it lost ~0.3 s of
    start-up a process."""
    if tree in _COMPILED:
        return
    paths = [str(tree / name) for name in PACKAGES if (tree / name).exists()]
    command = [sys.executable, "-m", "compileall", "-q", *paths]
    subprocess.run(command, env=env or dict(os.environ), check=True, stdout=subprocess.DEVNULL)
    _COMPILED.add(tree)


def tree_env(tree: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without model keys, to run `tree`'s code: its checkout first on PYTHONPATH."""
    env = {k: v for k, v in tree_first(tree).items() if not k.endswith("_API_KEY")}
    return {**env, **(extra or {})}
