"""The report page's style sheet and script, inlined into every report (no file beside it, no
CDN). The script is the trajectory browser: it reads the sample from the page's JSON block
and builds every element with `textContent`, never `innerHTML`, so text from a trajectory is
always text.
"""

from __future__ import annotations

STYLE = """
:root { --ink: #1d2430; --soft: #5b6576; --line: #d9dee7; --paper: #ffffff; --back: #f4f6f9; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "DejaVu Sans", sans-serif; color: var(--ink);
       background: var(--back); }
header { background: #1d2430; color: #fff; padding: 14px 24px; position: sticky; top: 0; z-index: 2; }
header h1 { margin: 0; font-size: 18px; }
header nav a { color: #b9d3ff; margin-right: 14px; text-decoration: none; }
section { padding: 8px 24px 16px; }
h2 { font-size: 16px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
table { border-collapse: collapse; background: var(--paper); margin: 8px 0; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
td { font-variant-numeric: tabular-nums; }
table.summary td:first-child { color: var(--soft); }
table.summary thead { display: none; }
.next-step { font-weight: 600; }
.note, .empty-note { color: var(--soft); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 14px; }
.card { margin: 0; background: var(--paper); border: 1px solid var(--line); border-radius: 6px;
        padding: 10px; }
.card figcaption { font-weight: 600; margin-bottom: 6px; }
svg.plot { width: 100%; height: auto; display: block; }
svg .grid { stroke: #e7eaf0; }
svg .tick { font-size: 11px; fill: var(--soft); }
svg .axis { font-size: 12px; fill: var(--ink); }
svg .legend { font-size: 11.5px; fill: var(--ink); }
svg .line { fill: none; stroke-width: 2; }
.filters { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin-bottom: 8px; }
.filters select, .filters input { font: inherit; padding: 3px 6px; }
.filters input { min-width: 260px; }
.browser { display: grid; grid-template-columns: minmax(320px, 2fr) 3fr; gap: 14px; }
.list-pane { max-height: 78vh; overflow: auto; background: var(--paper); border: 1px solid var(--line); }
#entry-list { margin: 0; width: 100%; }
#entry-list tbody tr { cursor: pointer; }
#entry-list tbody tr:hover, #entry-list tbody tr.open { background: #e8f0fc; }
.viewer { max-height: 78vh; overflow: auto; background: var(--paper); border: 1px solid var(--line);
          padding: 10px; }
.turn { border-left: 4px solid var(--line); margin: 8px 0; padding: 4px 10px; }
.turn h4 { margin: 0 0 4px; font-size: 12px; text-transform: uppercase; color: var(--soft); }
.turn.human { border-color: #2f6fb3; } .turn.gpt { border-color: #3a9c5b; }
.turn.tool { border-color: #d9822b; }
pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0;
      font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
details { margin: 4px 0; } summary { cursor: pointer; color: var(--soft); }
.call { border: 1px solid var(--line); border-radius: 4px; margin: 6px 0; }
.call-head { background: #f0f3f8; padding: 3px 8px; font-weight: 600; }
.result { border-top: 1px dashed var(--line); padding: 0 8px; }
.result.error .call-head, .result.error { background: #fdecec; }
.pill { display: inline-block; padding: 0 6px; border-radius: 9px; background: #e7eaf0; margin-right: 4px;
        font-size: 12px; }
footer { color: var(--soft); padding: 12px 24px 30px; }
"""

SCRIPT = r"""
(() => {
  "use strict";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const entries = data.entries, systems = data.systems;
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  };
  const stratum = (e) => (e.reason ? "discarded: " + e.reason : e.outcome);
  const haystacks = new Map();
  const haystack = (e) => {
    if (!haystacks.has(e)) {
      const parts = [];
      for (const t of e.turns) {
        parts.push(t.text || "", t.think || "");
        for (const c of t.calls || []) parts.push(c.name, c.args, c.result ? c.result.content : "");
        for (const r of t.results || []) parts.push(r.name, r.content);
      }
      haystacks.set(e, parts.join("\n").toLowerCase());
    }
    return haystacks.get(e);
  };
  const fill = (select, values) => {
    for (const v of [...new Set(values)].sort()) select.append(new Option(v, v));
  };
  fill($("filter-outcome"), entries.map(stratum));
  fill($("filter-tool"), entries.flatMap((e) => e.tools));
  fill($("filter-toolset"), entries.flatMap((e) => e.toolsets));
  const verdicts = $("filter-verdict");  // only in a report of checked attempts
  if (verdicts) fill(verdicts, entries.map((e) => e.verdict));
  const matches = (e) => {
    const outcome = $("filter-outcome").value, tool = $("filter-tool").value;
    const toolset = $("filter-toolset").value, query = $("filter-text").value.trim().toLowerCase();
    const verdict = verdicts ? verdicts.value : "";
    return (!outcome || stratum(e) === outcome) && (!tool || e.tools.includes(tool)) &&
      (!toolset || e.toolsets.includes(toolset)) && (!verdict || e.verdict === verdict) &&
      (!query || haystack(e).includes(query));
  };
  const firstHuman = (e) => {
    const t = e.turns.find((t) => t.role === "human");
    return t ? t.text.slice(0, 140) : "";
  };
  const list = () => {
    const body = $("entry-list").tBodies[0];
    body.replaceChildren();
    let shown = 0;
    for (const e of entries) {
      if (!matches(e)) continue;
      shown += 1;
      const row = el("tr");
      row.dataset.index = e.index;
      const tools = e.tools.join(", ") + (e.tools_more ? " … +" + e.tools_more + " more" : "");
      const cells = [e.index, stratum(e), e.api_calls, tools, firstHuman(e)];
      for (const v of cells) row.append(el("td", "", v));
      row.addEventListener("click", () => open(e, row));
      body.append(row);
    }
    $("entry-count").textContent = shown + " of " + entries.length + " sampled entries";
  };
  const block = (cls, title) => {
    const node = el("div", "turn " + cls);
    node.append(el("h4", "", title));
    return node;
  };
  const folded = (label, text) => {
    const d = el("details");
    d.append(el("summary", "", label), el("pre", "", text));
    return d;
  };
  const result = (r) => {
    const node = el("div", "result" + (r.error ? " error" : ""));
    const title = "← " + r.name + (r.error ? " (failed)" : "") + (r.id ? " · " + r.id : "");
    node.append(el("div", "call-head", title));
    node.append(el("pre", "", r.content));
    return node;
  };
  const gpt = (t) => {
    const node = block("gpt", "assistant");
    if (t.think) node.append(folded("reasoning (" + t.think.length + " characters)", t.think));
    else node.append(el("p", "note", "no reasoning"));
    if (t.text) node.append(el("pre", "", t.text));
    for (const c of t.calls) {
      const call = el("div", "call");
      call.append(el("div", "call-head", "→ " + c.name), el("pre", "", c.args));
      call.append(c.result ? result(c.result) : el("p", "note", "no result"));
      node.append(call);
    }
    return node;
  };
  const turn = (t) => {
    if (t.role === "system") {
      const node = block("system", "system");
      node.append(folded("system prompt", systems[t.system]));
      return node;
    }
    if (t.role === "gpt") return gpt(t);
    if (t.role === "tool") {
      const node = block("tool", "tool results without a matching call");
      for (const r of t.results) node.append(result(r));
      if (t.text) node.append(el("pre", "", t.text));
      return node;
    }
    const node = block(t.role === "human" ? "human" : "other", t.role === "human" ? "user" : t.role);
    node.append(el("pre", "", t.text));
    return node;
  };
  const open = (e, row) => {
    for (const r of document.querySelectorAll("#entry-list tr.open")) r.classList.remove("open");
    row.classList.add("open");
    const viewer = $("viewer");
    viewer.replaceChildren();
    const head = el("div", "entry-head");
    head.append(el("h3", "", "prompt_index " + e.index + " · " + stratum(e)));
    const pills = [e.api_calls + " model calls", e.tokens + " tokens", ...e.toolsets];
    if (e.verdict !== "unverified") {
      pills.unshift(e.verdict + (e.reward === null ? "" : " · reward " + e.reward));
    }
    for (const v of pills) head.append(el("span", "pill", v));
    viewer.append(head, ...e.turns.map(turn));
    viewer.scrollTop = 0;
  };
  for (const id of ["filter-outcome", "filter-tool", "filter-toolset", "filter-verdict"]) {
    if ($(id)) $(id).addEventListener("change", list);
  }
  $("filter-text").addEventListener("input", list);
  list();
})();
"""
