"""The report's sections as HTML: the run summary, the plots in cards, the per-tool table and
the failure classes. Every value from the run is escaped here (`html.escape`), plots come
from `agent.report.figures` already escaped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from agent.report import figures
from agent.report.digest import REPORT_TOOLS, RunDigest
from agent.store.jsonl import json_int
from agent.store.tool_counts import top_rows


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return escape("—" if value is None else str(value))


def table(headings: Sequence[str], rows: Iterable[Sequence[Any]], kind: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headings)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table class="{kind}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def card(name: str, title: str, svg: str | None, empty: str) -> str:
    """A plot with its title, or the sentence saying why there is none."""
    inner = (
        svg if svg is not None else f'<p class="empty-note" data-empty="{escape(name)}">{escape(empty)}</p>'
    )
    caption = f"<figcaption>{escape(title)}</figcaption>"
    return f'<figure class="card" id="plot-{escape(name)}">{caption}{inner}</figure>'


def _usd(value: Any) -> str:
    return f"${value:,.4f}" if isinstance(value, int | float) and not isinstance(value, bool) else "unknown"


def _whole_run(stats: Mapping[str, Any]) -> tuple[Mapping[str, Any], Any, Any]:
    """(prompts processed and split, tokens, USD) of the whole run; from this invocation's
    figures for a statistics.json written before `whole_run` existed."""
    total = stats.get("whole_run")
    if isinstance(total, Mapping):
        return total, (total.get("tokens") or {}).get("total"), total.get("cost_usd")
    run = stats.get("this_invocation") or {}
    tokens = ((stats.get("tokens") or {}).get("this_invocation") or {}).get("total")
    return run, tokens, (stats.get("cost") or {}).get("this_invocation_usd")


def _reasoning(digest: RunDigest) -> str:
    reasoning, discarded = digest.reasoning, digest.discarded_reasoning
    coverage = 100.0 * reasoning["with_reasoning"] / reasoning["turns"] if reasoning["turns"] else 0.0
    line = f"{coverage:.1f}% of {reasoning['turns']:,} assistant turns in the output"
    if discarded["turns"]:
        with_reasoning = discarded["with_reasoning"]
        line += f" (discarded entries: {discarded['turns']:,} turns, {with_reasoning:,} with reasoning)"
    return line


def _verification(stats: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The pass rates, when the run's attempts were checked."""
    section = stats.get("verification")
    if not isinstance(section, Mapping):
        return []
    attempts, rates = section.get("attempts") or {}, section.get("pass_at_k") or {}
    counts = " · ".join(f"{json_int(attempts.get(k)):,} {k}" for k in ("passed", "failed", "undecided"))
    shown = " · ".join(f"pass@{k} {100 * float(v):.1f}%" for k, v in rates.items()) or "no decided attempt"
    mean = section.get("mean_reward")
    return [
        ("Attempts checked", f"{json_int(attempts.get('verified')):,} ({counts})"),
        ("Pass rates", shown),
        ("Mean reward", f"{mean:.3f}" if isinstance(mean, int | float) else None),
    ]


def _token_capture(stats: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The token data (tokens.jsonl), when the run captured it: its API is in the section."""
    section = stats.get("tokens")
    if not isinstance(section, Mapping) or "with_drift" not in section:
        return []
    captured, drift = json_int(section.get("trajectories")), json_int(section.get("with_drift"))
    missing = json_int(section.get("missing"))
    lost = f" · {missing:,} missing" if missing else ""
    return [
        ("Token data", f"{captured:,} trajectories ({section.get('api')}){lost}"),
        ("Trajectories with token drift", f"{drift:,} of {captured:,}"),
    ]


# statistics.json's completion parts (`Completion.as_dict`): each valid attempt is in one
COMPLETION_PARTS = (
    ("in_output", "In the output"),
    ("discarded", "Discarded"),
    ("failed", "Failed in this invocation"),
    ("not_started", "Not started"),
    ("interrupted_in_flight", "Interrupted in flight"),
    ("missing_from_output", "Missing from the output"),
)


def completion_rows(stats: Mapping[str, Any], digest: RunDigest) -> list[tuple[str, Any]]:
    """The split of the valid prompts as statistics.json has it, the one source of truth: the
    files' records also count a failure of an earlier invocation (in statistics.json a prompt
    not attempted since is not started) and prompts no longer in the dataset. Those counts are
    shown only for a run directory without that section."""
    done = stats.get("completion")
    if not isinstance(done, Mapping) or "in_output" not in done:
        return [
            ("Valid prompts", stats.get("total_prompts")),
            ("In the output", digest.entries),
            ("Discarded", sum(digest.discards.values())),
            ("Failed (not done since)", sum(digest.still_failed().values())),
        ]
    rows: list[tuple[str, Any]] = [("Valid prompts", done.get("valid_prompts"))]
    if json_int(done.get("samples_per_prompt")) > 1:  # the parts count attempts
        rows.append(("Valid attempts (prompts × samples)", done.get("valid_attempts")))
    rows += [
        (label, json_int(done.get(key)))
        for key, label in COMPLETION_PARTS
        if key != "missing_from_output" or json_int(done.get(key))  # zero: a row of no news
    ]
    outside, extra = json_int(done.get("outside_dataset")), json_int(done.get("extra_samples"))
    if outside:
        rows.append(("Also in the output: entries for no row of the dataset now", outside))
    if extra:
        rows.append(("Also kept: samples beyond --samples_per_prompt", extra))
    return rows


def summary(stats: Mapping[str, Any], digest: RunDigest) -> str:
    done, limiting = stats.get("completion") or {}, stats.get("rate_limiting") or {}
    run, tokens, usd = _whole_run(stats)
    invocations = json_int(run.get("invocations")) or 1
    partial = " (partial: a worker died before reporting)" if limiting.get("partial") else ""
    rows = [
        ("Run", stats.get("run_name")),
        ("Model · distribution", f"{stats.get('model')} · {stats.get('distribution')}"),
        ("Finished at", stats.get("completed_at")),
        *completion_rows(stats, digest),
        (
            "Prompts processed (whole run)",
            f"{json_int(run.get('processed')):,} prompts in {stats.get('duration_seconds', 0)} s over "
            f"{invocations} invocation{'s' if invocations > 1 else ''} "
            f"({run.get('prompts_per_second', 0)} prompts/s)",
        ),
        ("Tokens (whole run)", json_int(tokens)),
        ("Cost (whole run)", _usd(usd)),
        (
            "Model calls · 429 · 5xx · timeouts",
            " · ".join(
                f"{json_int(limiting.get(k)):,}"
                for k in ("calls", "rate_limited", "server_errors", "timeouts")
            )
            + partial,
        ),
        ("Peak model calls in flight", limiting.get("peak_inflight")),
        ("Reasoning coverage", _reasoning(digest)),
        *_verification(stats),
        *_token_capture(stats),
    ]
    next_step = done.get("next_step")
    step = f'<p class="next-step">{escape(str(next_step))}</p>' if next_step else ""
    return table(("", ""), rows, "summary") + step


def plots(stats: Mapping[str, Any], digest: RunDigest) -> str:
    no_timeline = "no timeline in statistics.json (a run from an older version, or it ended at once)"
    cards = [
        card(
            "throughput", "Prompts per second", figures.throughput(stats, digest), "no finish times to plot"
        ),
        card("in_flight", "In flight over time", figures.in_flight(stats), no_timeline),
        card(
            "rate_limits",
            "Rate limiting: the in-flight limit, 429s and 5xx per second",
            figures.rate_limits(stats),
            "no limiter history recorded",
        ),
        card("outcomes", "Outcomes and failure classes", figures.outcomes(digest), "no prompt finished"),
        card(
            "tools",
            "Tool calls per tool (green: succeeded, red: failed)",
            figures.tools(digest),
            "no tool calls in this run",
        ),
        card("turns", "Assistant turns per entry", figures.turns(digest), "no entries"),
        card("tokens", "Tokens per entry", figures.tokens(digest), "no entries"),
        card("reasoning", "Reasoning coverage", figures.reasoning(digest), "no entries"),
    ]
    if stats.get("verification"):  # only a run whose attempts were checked
        no_reward = "no check gave a score"
        cards.append(card("rewards", "Rewards of the checked attempts", figures.rewards(stats), no_reward))
        no_decided = "no attempt was decided (every check errored)"
        cards.append(card("pass_at_k", "pass@k (unbiased estimator)", figures.pass_at_k(stats), no_decided))
    return '<div class="cards">' + "".join(cards) + "</div>"


def tools_table(digest: RunDigest) -> str:
    rows = []
    listed, other = top_rows(digest.tools, REPORT_TOOLS)
    if other["tools"]:  # one row for the rest: the page's size does not grow with invented names
        listed.append((f"{other['tools']:,} other tools", other))
    for name, row in listed:
        answered = row["success"] + row["failure"]
        rate = 100.0 * row["failure"] / answered if answered else 0.0
        rows.append((name, row["count"], row["success"], row["failure"], f"{rate:.1f}%", row["entries"]))
    if not rows:
        return '<p class="empty-note">No tool calls in the output.</p>'
    headings = ("tool", "calls", "succeeded", "failed", "error rate", "entries using it")
    toolsets = ", ".join(f"{name} {count:,}" for name, count in digest.toolsets.most_common())
    return (
        table(headings, rows, "tools")
        + f'<p class="note">Entries offered each toolset: {escape(toolsets)}</p>'
    )


def failures_table(digest: RunDigest) -> str:
    still = digest.still_failed()
    rows = []
    for error_class, records in digest.failures.most_common():
        examples = digest.failure_examples.get(error_class, [])
        text = " | ".join(f"#{e['prompt_index']} (attempt {e['attempt']}): {e['message']}" for e in examples)
        rows.append((error_class, records, still[error_class], text))
    discards = [(reason, n) for reason, n in digest.discards.most_common()]
    html = (
        table(("failure class", "records", "prompts not done since", "examples"), rows, "failures")
        if rows
        else ('<p class="empty-note">No failures recorded (failures.jsonl is empty).</p>')
    )
    if discards:
        html += table(("discard reason", "entries"), discards, "discards")
    return html
