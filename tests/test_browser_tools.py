"""The browser tools end to end in real headless Chromium on pages served on 127.0.0.1:
navigate → snapshot → click → type → press Enter → back → console → get_images, scrolling and
full snapshots, refs that went stale, one browser context per conversation, a Chromium that
died replaced, and the reason the tools are not offered without Chromium."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import signal
from pathlib import Path

import pytest

from agent.protocols import ToolConfig
from agent.toolbox.context import Resources
from agent.toolbox.registry import resolve_tools
from tests.fixtures.browser import Build, Worker
from tests.support.browser import (
    browsing,
    call,
    conversation,
    main_chromium_pids,
    serve_pages,
)
from tools.browser import TOOLSET
from tools.browser.host import chromium_path, unavailable

ALLOW_LOOPBACK = ToolConfig(allow_hosts=("127.0.0.1",))


def ref_of(snapshot: str, line_pattern: str) -> str:
    """The @ref on the snapshot line that matches `line_pattern`."""
    match = re.search(line_pattern + r".*?(@[a-z0-9]+)", snapshot)
    assert match, f"no line matching {line_pattern!r} in:\n{snapshot}"
    return match.group(1)


def test_navigate_snapshot_click_type_press_back_console_images(each_build: Build) -> None:
    async def scenario() -> None:
        async with browsing(each_build.config, each_build.worker.shared) as tools:
            with serve_pages() as (base, paths):
                page = await call(tools, "browser_navigate", url=base + "/")
                assert page["status"] == 200 and page["title"] == "Index page"
                assert 'heading "Welcome to the index"' in page["snapshot"]
                assert re.search(r'link "Next page" @e\d+', page["snapshot"])
                assert not re.search(r"paragraph @e", page["snapshot"])  # refs only where one can act

                again = await call(tools, "browser_snapshot")
                next_link = ref_of(again["snapshot"], 'link "Next page"')
                clicked = await call(tools, "browser_click", ref=next_link)
                assert clicked["url"] == base + "/next" and "The next page" in clicked["snapshot"]
                button = ref_of(clicked["snapshot"], 'button "Press me"')
                pressed = await call(tools, "browser_click", ref=button)
                assert "Clicked 1" in pressed["snapshot"]  # the page's own JS ran on the click

                back = await call(tools, "browser_back")
                assert back["url"] == base + "/" and back["title"] == "Index page"
                box = ref_of(back["snapshot"], 'textbox "Query"')
                typed = await call(tools, "browser_type", ref=box, text="blue <whales>")
                assert typed["typed"] == "blue <whales>" and "error" not in typed
                submitted = await call(tools, "browser_press", key="Enter")
                assert submitted["title"] == "Search results"
                assert "Results for: blue <whales>" in submitted["snapshot"]
                assert "/search?q=blue+%3Cwhales%3E" in paths
                # Chromium's own requests (form autofill's, refused offline) are not the page's
                assert all("blocked" not in r for r in (page, again, back, typed, submitted))

                await call(tools, "browser_back")
                console = await call(tools, "browser_console", expression="document.title + ' / ' + 6 * 7")
                texts = [m["text"] for m in console["messages"]]
                assert "hello from the index" in texts
                assert any("boom from the index" in e["message"] for e in console["errors"])
                assert console["result"] == "Index page / 42"
                # A dialog nobody can answer is dismissed (the page goes on) and noted.
                confirmed = await call(tools, "browser_console", expression="confirm('Really?')")
                assert confirmed["result"] is False
                dialogs = (await call(tools, "browser_console"))["messages"]
                assert {"type": "dialog:confirm", "text": "Really?"} in dialogs
                cleared = await call(tools, "browser_console", clear=True)
                assert cleared["messages"]  # read, then cleared
                assert (await call(tools, "browser_console"))["messages"] == []

                images = await call(tools, "browser_get_images")
                assert images["images"] == [
                    {"src": base + "/red.png", "alt": "A red square", "width": 20, "height": 20}
                ]

    each_build.worker.run(scenario())


def test_a_page_that_asks_to_stay_is_left_when_the_model_navigates_away(browser_worker: Worker) -> None:
    # Dismissed like the other dialogs, "Leave this page?" kept the model on the page for the
    # rest of its conversation: every navigate ERR_ABORTED, back timed out.
    async def scenario() -> None:
        async with browsing(ALLOW_LOOPBACK, browser_worker.shared) as tools:
            with serve_pages() as (base, _paths):
                stay = await call(tools, "browser_navigate", url=base + "/stay")
                assert stay["title"] == "Stay page"
                left = await call(tools, "browser_navigate", url=base + "/next")
                assert "error" not in left and left["title"] == "Next page", left
                back = await call(tools, "browser_back")
                assert back["title"] == "Stay page"
                assert (await call(tools, "browser_navigate", url=base + "/"))["title"] == "Index page"
                messages = (await call(tools, "browser_console"))["messages"]
                assert any(m["type"] == "dialog:beforeunload" for m in messages), messages

    browser_worker.run(scenario())


def test_scroll_full_snapshots_and_stale_refs(browser_worker: Worker) -> None:
    async def scenario() -> None:
        async with browsing(ALLOW_LOOPBACK, browser_worker.shared) as tools:
            with serve_pages() as (base, _paths):
                top = await call(tools, "browser_navigate", url=base + "/long")
                assert "Paragraph number 0" in top["snapshot"]
                assert "Paragraph number 150" not in top["snapshot"]  # below the viewport
                assert "outside_viewport" in top
                down = await call(tools, "browser_scroll", direction="down")
                assert "Paragraph number 0" not in down["snapshot"]
                assert "Paragraph number 15" in down["snapshot"]
                full = await call(tools, "browser_snapshot", full=True)
                assert "Paragraph number 199" in full["snapshot"] and "outside_viewport" not in full
                assert re.search(r'link "Link at the bottom" @e\d+', full["snapshot"])
                up = await call(tools, "browser_scroll", direction="up")
                assert "Paragraph number 0" in up["snapshot"]

                nowhere = await call(tools, "browser_click", ref="@e99999")
                assert "browser_snapshot" in nowhere["error"]  # says how to get fresh refs
                malformed = await call(tools, "browser_click", ref="the button")
                assert "not a ref" in malformed["error"]
                await call(tools, "browser_navigate", url=base + "/next")
                await call(tools, "browser_back")
                await call(tools, "browser_back")
                history_end = await call(tools, "browser_back")
                assert "no previous page" in history_end["error"]

    browser_worker.run(scenario())


def test_each_conversation_gets_its_own_context_closed_at_its_end(browser_worker: Worker) -> None:
    async def scenario() -> None:
        shared = Resources()
        first, second = conversation(ALLOW_LOOPBACK, shared), conversation(ALLOW_LOOPBACK, shared)
        with serve_pages() as (base, _paths):
            try:
                await call(first, "browser_navigate", url=base + "/next")
                await call(second, "browser_navigate", url=base + "/")
                button = ref_of((await call(first, "browser_snapshot"))["snapshot"], 'button "Press me"')
                await call(first, "browser_click", ref=button)
                await call(first, "browser_console", expression="localStorage.setItem('who', 'first')")
                seen = await call(second, "browser_console", expression="localStorage.getItem('who')")
                assert seen["result"] is None  # storage is the conversation's own
                host = await shared.get("browser", _never)
                browser = await host.browser()
                assert len(browser.contexts) == 2 and host.launches == 1  # one Chromium for both
                await first.aclose()
                assert len(browser.contexts) == 1
                assert (await call(second, "browser_snapshot"))["title"] == "Index page"
                await second.aclose()
                assert browser.contexts == []
            finally:
                await first.aclose()
                await second.aclose()
                await shared.aclose()
        assert not browser.is_connected()  # the worker's Chromium ends with the worker

    browser_worker.run(scenario())


def _never() -> None:  # the opener of a resource that must be open already
    raise AssertionError("the browser should be open already")


def test_not_offered_without_chromium_and_the_reason_says_how_to_enable() -> None:
    missing = ToolConfig(browser_executable="/nonexistent/chromium")
    resolved = resolve_tools(["browser"], config=missing)
    assert resolved.specs == () and set(resolved.unavailable) == set(TOOLSET.tool_names)
    assert all("--browser_executable=/nonexistent/chromium" in r for r in resolved.unavailable.values())
    found = chromium_path(ToolConfig())
    if found is not None:  # the flag takes a path or a name on PATH
        assert unavailable(ToolConfig(browser_executable=found)) is None


def test_the_headless_shell_is_found_before_the_full_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("chromium", "chromium-headless-shell"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert chromium_path(ToolConfig()) == str(tmp_path / "chromium-headless-shell")
    (tmp_path / "chromium-headless-shell").unlink()
    assert chromium_path(ToolConfig()) == str(tmp_path / "chromium")
    assert chromium_path(ToolConfig(browser_executable="chromium")) == str(tmp_path / "chromium")


def test_the_reason_says_how_to_install_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec  # Playwright is installed here: the test takes it away
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "playwright" else real(name, *a)
    )
    (tmp_path / "chromium").write_text("#!/bin/sh\n")
    (tmp_path / "chromium").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    playwright = 'Playwright: pip install -e ".[browser]"'
    assert unavailable(ToolConfig()) == f"the browser tools need {playwright}"
    (tmp_path / "chromium").unlink()
    assert unavailable(ToolConfig()) == (
        "the browser tools need Chromium: apt-get install chromium-headless-shell (or chromium),"
        f" or --browser_executable=PATH; and {playwright}"
    )


def test_a_named_executable_that_is_no_browser_is_not_offered_and_the_reason_says_why(tmp_path: Path) -> None:
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    refused = unavailable(ToolConfig(browser_executable="/bin/false"))  # coreutils' prints its own version
    assert refused is not None
    assert refused.startswith("--browser_executable=/bin/false: /bin/false --version exited 1")
    assert refused.endswith(": is it Chromium?")
    assert unavailable(ToolConfig(browser_executable=str(silent))) == (
        f"--browser_executable={silent}: {silent} --version exited 0, printing nothing: is it Chromium?"
    )
    resolved = resolve_tools(["browser"], config=ToolConfig(browser_executable="/bin/false"))
    assert resolved.specs == () and set(resolved.unavailable) == set(TOOLSET.tool_names)


def test_a_dead_chromium_fails_its_conversations_calls_and_the_next_one_gets_a_new_one() -> None:
    async def scenario() -> None:
        shared = Resources()
        first, second = conversation(ALLOW_LOOPBACK, shared), conversation(ALLOW_LOOPBACK, shared)
        with serve_pages() as (base, _paths):
            try:
                others = set(main_chromium_pids(os.getpid()))  # the module's worker's, if open
                await call(first, "browser_navigate", url=base + "/")
                [browser_pid] = set(main_chromium_pids(os.getpid())) - others
                os.kill(browser_pid, signal.SIGKILL)
                await asyncio.sleep(0.5)
                dead = await call(first, "browser_snapshot")
                assert "closed" in dead["error"]  # a tool result the model reads, not a crash
                await first.aclose()  # closing a context that went with Chromium is no error
                page = await call(second, "browser_navigate", url=base + "/next")
                assert page["title"] == "Next page"
                host = await shared.get("browser", _never)
                assert host.launches == 2
            finally:
                await first.aclose()
                await second.aclose()
                await shared.aclose()
        assert set(main_chromium_pids(os.getpid())) == others

    asyncio.run(scenario())


def test_a_stuck_page_script_is_an_error_within_the_deadline_not_a_hang(
    browser_worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tools.browser.actions as actions

    monkeypatch.setattr(actions, "ACTION_DEADLINE", 2.0)  # 45 s in runs

    async def scenario() -> None:
        async with browsing(ALLOW_LOOPBACK, browser_worker.shared) as tools:
            with serve_pages() as (base, _paths):
                await call(tools, "browser_navigate", url=base + "/")
                started = asyncio.get_running_loop().time()
                hung = await call(tools, "browser_console", expression="new Promise(() => {})")
                busy = await call(tools, "browser_console", expression="while (true) {}")
                took = asyncio.get_running_loop().time() - started
                assert "did not answer within 2 s" in hung["error"] and "did not answer" in busy["error"]
                assert took < 10

    browser_worker.run(scenario())
