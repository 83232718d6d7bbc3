"""The hot path's savings of issue 26, second round, change nothing but CPU: the SDK's HTTP
client builds the request httpx2's own would (its URL parsed and headers merged once per
distinct value), a reused slot keeps its memory limit and tells every OOM kill through the
counter it keeps open, and that counter reads what the kernel's file says now."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.host import memory_limits
from agent.sandboxes.local.oom_counter import OomCounter
from agent.sandboxes.local.sandbox import open_pool
from agent.sandboxes.local.slots import SlotPool
from tests.support.batch import enterable_workdir

URL = "http://127.0.0.1:9/v1/chat/completions"
HEADERS = [("Authorization", "Bearer k"), ("Accept", "application/json"), ("X-Stainless-Retry-Count", "0")]
LIMIT_MB = 64
HOG = "python3 -c \"b = b'x' * (200 << 20); print('allocated')\""


def _shown(request: httpx2.Request) -> tuple[object, ...]:
    return request.method, str(request.url), request.headers.raw, request.content, request.extensions


@pytest.mark.parametrize("timeout", [37.5, httpx2.Timeout(5.0, read=7.0), None])
def test_the_lean_client_builds_the_request_httpx2_builds(timeout: object) -> None:
    from agent.llm.http_client import LeanAsyncClient

    lean = LeanAsyncClient(timeout=600.0, follow_redirects=True)
    plain = httpx2.AsyncClient(timeout=600.0, follow_redirects=True)
    for body in (b'{"a":1}', b'{"b":22}'):  # the second from the memos
        ours = lean.build_request("POST", URL, headers=list(HEADERS), content=body, timeout=timeout)  # type: ignore[arg-type]
        theirs = plain.build_request("POST", URL, headers=list(HEADERS), content=body, timeout=timeout)  # type: ignore[arg-type]
        assert _shown(ours) == _shown(theirs)
    ours.headers["X-Changed"] = "1"  # a request's headers are its own: the memo's stay
    again = lean.build_request("POST", URL, headers=list(HEADERS), content=b"", timeout=1.0)
    assert "x-changed" not in again.headers


def test_the_lean_client_leaves_the_uncommon_cases_to_httpx2() -> None:
    from agent.llm.http_client import LeanAsyncClient

    lean = LeanAsyncClient(cookies={"c": "1"})
    plain = httpx2.AsyncClient(cookies={"c": "1"})
    args = {"headers": list(HEADERS), "params": {"q": "1"}}
    assert _shown(lean.build_request("GET", URL, **args)) == _shown(plain.build_request("GET", URL, **args))  # type: ignore[arg-type]
    assert lean.build_request("GET", URL).headers["cookie"] == "c=1"


def test_the_oom_counter_reads_the_file_as_it_is_now(tmp_path: Path) -> None:
    events = tmp_path / "memory.oom_control"
    events.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    counter = OomCounter(str(events))
    assert counter.kills() == 0
    with open(events, "r+") as handle:  # the same file, changed under the kept descriptor
        handle.write("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    assert counter.kills() == 3
    counter.close()
    events.unlink()
    assert counter.kills() == 0  # unreadable: none, as memory_limits.oom_kills says


@pytest.fixture
def workdir() -> Iterator[Path]:
    with enterable_workdir("hotpath-test-") as root:
        yield root


def test_a_slot_s_groups_are_made_once(workdir: Path) -> None:
    with SlotPool(str(workdir), "run", "pool", LIMIT_MB) as pool:
        slot = pool.acquire()
        assert pool.groups(slot) is pool.groups(slot)
        assert pool.oom_counter(slot) is pool.oom_counter(slot)


def test_a_reused_slot_keeps_its_limit_and_tells_each_oom_kill(workdir: Path) -> None:
    if memory_limits.hierarchy() is None:
        pytest.skip(f"no memory cgroup here: {memory_limits.why_unlimited()}")

    async def three_prompts() -> list[tuple[str, int, str]]:
        options = SandboxOptions(backend="local", memory_mb=LIMIT_MB, root=str(workdir))
        seen = []
        async with open_pool(options, "run-reuse") as factory:
            for n in range(3):
                async with factory(SandboxSpec(run_name="run-reuse", prompt_key=f"p{n}")) as sandbox:
                    hog = await sandbox.exec(HOG, timeout=120)
                    echo = await sandbox.exec("echo ok", timeout=60)
                    seen.append((sandbox.root, hog.exit_code, hog.output + echo.output))
        return seen

    seen = asyncio.run(three_prompts())
    assert len({root for root, _, _ in seen}) == 1  # one slot, reused
    for _, code, output in seen:
        assert code == 137 and memory_limits.oom_message(LIMIT_MB) in output, output
        assert output.endswith("ok\n") and output.count("memory limit") == 1, output
