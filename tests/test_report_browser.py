"""The HTML report in real headless Chromium: written at the end of a real run, it loads from
the file with no console error and no request off the file, every plot has data marks, the
trajectory browser filters by outcome, tool, toolset and text and opens a conversation turn by
turn (reasoning folded, each call with its result), and hostile text stays text. Each view is
saved as a screenshot (tmp dir; under CI also test-artifacts/report/)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.batch import API_KEY, read_json
from tests.support.report import (
    CHROMIUM,
    CHROMIUM_ARGS,
    HOSTILE_MARKUP,
    ReportRun,
    missing,
    run_batch,
    save_artifact,
)

PLOTS = {"throughput", "in_flight", "rate_limits", "outcomes", "tools", "turns", "tokens", "reasoning"}
MARKS = """() => [...document.querySelectorAll("svg.plot")].map((svg) => ({
  name: svg.dataset.plot,
  marks: [...svg.querySelectorAll(".mark")].filter((m) => {
    const box = m.getBBox();
    return box.width > 0 || box.height > 0;
  }).length,
}))"""
ROWS = """() => [...document.querySelectorAll("#entry-list tbody tr")].map(
  (tr) => [...tr.cells].map((td) => td.textContent))"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> ReportRun:
    return run_batch(tmp_path_factory.mktemp("report-run"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        missing(f"{CHROMIUM} is not installed")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@dataclass
class Opened:
    page: Any
    shots: Path
    console: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def shot(self, name: str, selector: str | None = None) -> Path:
        path = self.shots / f"{name}.png"
        if selector is None:
            self.page.screenshot(path=str(path), full_page=True)
        else:
            self.page.locator(selector).screenshot(path=str(path))
        assert path.stat().st_size > 10_000  # a rendered view, not a blank one
        save_artifact(path)
        return path


@pytest.fixture
def opened(run: ReportRun, browser: Any, tmp_path: Path) -> Iterator[Opened]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    view = Opened(page, tmp_path)
    page.on("console", lambda m: view.console.append(f"{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda error: view.console.append(f"pageerror: {error}"))
    url = run.report.as_uri()

    def route(request: Any) -> None:
        view.requests.append(request.request.url)
        if request.request.url == url:
            request.continue_()
        else:
            request.abort()

    context.route("**/*", route)
    page.goto(url)
    yield view
    assert view.console == []
    assert set(view.requests) == {url}  # nothing off the file: no CDN, no image, no fetch
    context.close()


def test_the_run_writes_the_report_and_says_where_it_is(run: ReportRun) -> None:
    assert run.result.returncode == 1, run.result  # the scripted failure
    assert f"Report: {run.report} (open it in a browser" in run.result.stderr
    assert run.report.stat().st_size > 20_000
    assert API_KEY not in run.report.read_text()


def test_a_real_run_shows_tokens_and_load_in_progress_and_records_a_timeline(run: ReportRun) -> None:
    status = [line for line in run.result.stderr.splitlines() if line.startswith("progress: ")]
    assert len(status) >= 2 and status[-1].startswith("progress: 24/24 prompts (✓ 22 ◐ 0 ✗ 1 ⌫ 1)")
    assert re.search(
        r" · [\d.]+k tokens \([\d.]+k?/s\) · in flight 0 prompts, 0 calls \(limit \d+", status[-1]
    )
    timeline = run.statistics["timeline"]
    points = [dict(zip(timeline["columns"], p, strict=True)) for p in timeline["points"]]
    assert points[-1]["finished"] == 24 and points[-1]["failed"] == 1
    assert points[-1]["tokens"] == run.statistics["tokens"]["this_invocation"]["total"]
    assert max(p["in_flight"] for p in points) > 0
    assert max(p["calls_in_flight"] for p in points) > 0  # the workers' pulses reached the parent
    assert run.statistics["rate_limiting"]["rate_limited"] > 0
    # the run's own limit, lowest and highest (two workers share it: their shares go to 0 when
    # idle, which the summary's range must not show as the limit)
    low, high = run.statistics["rate_limiting"]["run_limit"]
    maximum = read_json(run.run_dir / "run_config.json")["max_inflight"]
    assert 1 <= low <= high <= maximum
    # the limit's history is the hub's, on the run's clock: not the workers' shares summed (0
    # while idle), each on a clock of its own that starts when its worker does
    history = run.statistics["rate_limiting"]["limit_history"]
    times, limits = [t for t, _ in history], [limit for _, limit in history]
    assert history[0][1] == maximum == max(limits) and 1 <= min(limits) <= low
    assert times == sorted(times) and times[0] >= 0 and times[-1] <= run.statistics["duration_seconds"]
    assert f"in-flight limit {low:g}–{high:g}\n" in run.result.stderr, run.result.stderr
    assert run.result.stderr.rstrip().endswith(
        "Not done: 1 failed of 24 prompts. Next: rerun with --resume to run them."
    )


def test_page_loads_offline_and_every_plot_has_data_marks(opened: Opened) -> None:
    plots = {plot["name"]: plot["marks"] for plot in opened.page.evaluate(MARKS)}
    assert set(plots) == PLOTS
    assert all(count > 0 for count in plots.values()), plots
    assert opened.page.locator("[data-empty]").count() == 0
    opened.shot("overview")


def test_browser_filters_by_outcome_tool_toolset_and_text(run: ReportRun, opened: Opened) -> None:
    page = opened.page
    total = len(run.entries) + len(run.discarded)
    assert page.inner_text("#entry-count") == f"{total} of {total} sampled entries"
    page.select_option("#filter-outcome", "discarded: no_reasoning")
    assert [row[1] for row in page.evaluate(ROWS)] == ["discarded: no_reasoning"]
    page.select_option("#filter-outcome", "")
    page.select_option("#filter-toolset", "file")
    with_file = [e for e in run.entries + [d["entry"] for d in run.discarded] if "file" in e["toolsets_used"]]
    assert 0 < len(with_file) < total
    assert len(page.evaluate(ROWS)) == len(with_file)
    page.select_option("#filter-toolset", "")
    page.select_option("#filter-tool", "terminal")
    rows = page.evaluate(ROWS)
    assert rows and all("terminal" in row[3].split(", ") for row in rows)
    page.select_option("#filter-tool", "")
    page.fill("#filter-text", "ONERROR=window")  # case-insensitive, over every turn's text
    rows = page.evaluate(ROWS)
    assert [row[4] for row in rows] == ["Hostile row: print the markup"]
    opened.shot("browser-filtered", "#browser")


def test_a_trajectory_opens_turn_by_turn_and_hostile_text_stays_text(opened: Opened) -> None:
    page = opened.page
    page.fill("#filter-text", "hostile row")
    page.click("#entry-list tbody tr")
    viewer = page.locator("#viewer")
    roles = viewer.locator(".turn > h4").all_inner_texts()
    assert [r.lower() for r in roles] == ["system", "user", "assistant", "assistant"]
    think = viewer.locator(".turn.gpt details").first
    assert think.get_attribute("open") is None  # folded
    assert "I will <b>echo</b> it" in think.locator("pre").text_content()
    call = viewer.locator(".call").first
    assert call.locator(".call-head").first.inner_text() == "→ terminal"
    assert HOSTILE_MARKUP in call.locator(".result pre").text_content()  # paired with its result
    assert call.locator(".result .call-head").inner_text().startswith("← terminal · call_")
    assert HOSTILE_MARKUP + "<script>" in viewer.inner_text()
    assert page.evaluate("() => [window.__pwned, document.images.length]") == [None, 0]
    opened.shot("trajectory", "#browser")


def test_failures_and_tool_errors_are_shown(run: ReportRun, opened: Opened) -> None:
    page = opened.page
    failures = page.locator("table.failures").inner_text()
    assert "bad_request" in failures and HOSTILE_MARKUP in failures  # escaped, shown as text
    tools = {
        row[0]: row
        for row in page.evaluate(
            """() => [...document.querySelectorAll("table.tools tbody tr")].map(
             (tr) => [...tr.cells].map((td) => td.textContent))"""
        )
    }
    assert int(tools["terminal"][3]) >= 1  # the bad-timeout call failed
    page.fill("#filter-text", "tool error row")
    page.click("#entry-list tbody tr")
    assert page.locator("#viewer .result.error").count() == 1
    assert page.evaluate("() => document.images.length") == 0
