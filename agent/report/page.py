"""The report as one self-contained HTML page: sections, inline style and script, and the
browser's sample as a JSON block. A Content-Security-Policy lets only the page's own script
run (by nonce) and forbids every fetch, so a trajectory's text can neither run script nor make
the page load anything, even if it ever escaped its escaping.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from datetime import datetime
from html import escape
from typing import Any

from agent.report import sections
from agent.report.assets import SCRIPT, STYLE
from agent.report.digest import RunDigest
from agent.store.jsonl import json_int

_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}


def embedded_json(value: Any) -> str:
    """JSON that is safe inside `<script type="application/json">`: no `<`, `>` or `&` at all
    (so no `</script>` or `<!--`), every non-ASCII character escaped."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    for char, escaped in _JSON_ESCAPES.items():
        text = text.replace(char, escaped)
    return text


def _browser(digest: RunDigest, shown: int) -> str:
    seen = sum(digest.sample.seen.values())
    checks = (  # only when the run's attempts were checked
        '<label>checks <select id="filter-verdict"><option value="">all</option></select></label>'
        if digest.verdicts
        else ""
    )
    return (
        f'<p class="note">{shown:,} of {seen:,} entries (output and discarded), sampled by outcome so '
        "rare outcomes show too; the plots and tables above count every entry.</p>"
        '<div class="filters">'
        '<label>outcome <select id="filter-outcome"><option value="">all</option></select></label>'
        '<label>tool <select id="filter-tool"><option value="">any</option></select></label>'
        '<label>toolset <select id="filter-toolset"><option value="">any</option></select></label>'
        f"{checks}"
        '<input id="filter-text" type="search" placeholder="search the text of the conversations">'
        '<span id="entry-count" class="note"></span></div>'
        '<div class="browser"><div class="list-pane"><table id="entry-list"><thead><tr>'
        "<th>index</th><th>outcome</th><th>calls</th><th>tools used</th><th>prompt</th>"
        '</tr></thead><tbody></tbody></table></div><div id="viewer" class="viewer">'
        '<p class="note">Pick an entry on the left to read it turn by turn.</p></div></div>'
    )


def render(stats: Mapping[str, Any], digest: RunDigest) -> str:
    """The whole page."""
    drawn, systems = digest.page_sample()
    sample = sorted(drawn, key=lambda e: (e["outcome"], e["reason"], json_int(e["index"])))
    nonce = secrets.token_urlsafe(18)
    policy = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src 'nonce-{nonce}'; base-uri 'none'; form-action 'none'"
    )
    name = escape(str(stats.get("run_name") or "run"))
    nav = "".join(
        f'<a href="#{key}">{label}</a>'
        for key, label in (
            ("summary", "Summary"),
            ("plots", "Plots"),
            ("tools", "Tools"),
            ("failures", "Failures"),
            ("browser", "Trajectories"),
        )
    )
    generated = escape(datetime.now().astimezone().isoformat(timespec="seconds"))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Run report — {name}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>Run report — {name}</h1><nav>{nav}</nav></header>"
        f'<section id="summary"><h2>Summary</h2>{sections.summary(stats, digest)}</section>'
        f'<section id="plots"><h2>Plots</h2>{sections.plots(stats, digest)}</section>'
        f'<section id="tools"><h2>Tools</h2>{sections.tools_table(digest)}</section>'
        f'<section id="failures"><h2>Failures and discards</h2>{sections.failures_table(digest)}</section>'
        f'<section id="browser"><h2>Trajectories</h2>{_browser(digest, len(sample))}</section>'
        f"<footer>agent-batch-runner report, generated {generated} from the run directory.</footer>"
        '<script type="application/json" id="report-data">'
        f"{embedded_json({'entries': sample, 'systems': systems})}</script>"
        f'<script nonce="{nonce}">{SCRIPT}</script></body></html>\n'
    )
