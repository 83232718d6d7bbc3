"""An example `--verifier`: passes when the agent wrote the file its prompt asked for.

    python batch_runner.py --dataset_file=tasks.jsonl --run_name=files \\
        --verifier=examples.verifier:wrote_file

A verifier is an async function `(attempt, sandbox) -> Score` (the `Verifier` Protocol in
`agent.protocols.verification`). `attempt` holds the finished conversation: the prompt, its
typed turns, the final answer (None when there was none), the outcome, the sample index, the
row's `metadata` and its `verify` object. `sandbox` is the attempt's sandbox as the agent left
it (None when the agent never opened one, or when `--rescore` re-checks a stored transcript):
`await sandbox.read_file(path)`, `await sandbox.exec(command, timeout=...)`.

This one reads its settings from the row's `verify.python` object:

    {"prompt": "Write hello in hello.txt", "verify": {"python": {"file": "hello.txt", "content": "hello\\n"}}}

A verifier that raises, returns something other than a `Score`, or runs past --verify_timeout
is recorded as `verifier_error` (neither pass nor fail) and the run goes on.
"""

from __future__ import annotations

from typing import Any

from agent.protocols.sandbox import Sandbox
from agent.protocols.verification import Attempt, Score


async def wrote_file(attempt: Attempt, sandbox: Sandbox | None) -> Score:
    """Passes when `file` (default hello.txt, in the sandbox's working directory) exists and,
    when the row gives `content`, holds exactly that."""
    settings: Any = attempt.verify.get("python")
    settings = settings if isinstance(settings, dict) else {}
    path = str(settings.get("file", "hello.txt"))
    if sandbox is None:
        return Score(False, details={"file": path, "reason": "the agent opened no sandbox"})
    try:
        data = await sandbox.read_file(path)
    except FileNotFoundError:
        return Score(False, details={"file": path, "reason": "missing"})
    expected = settings.get("content")
    if expected is not None and data.decode("utf-8", "replace") != expected:
        return Score(False, score=0.5, details={"file": path, "reason": "wrong content", "size": len(data)})
    return Score(True, details={"file": path, "size": len(data)})
