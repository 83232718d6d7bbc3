"""Page snapshots as the model reads them: Playwright's accessibility tree (its "ai" mode, whose
refs `aria-ref=eN` resolve to elements) rewritten so that interactive elements carry `@eN`,
unnamed layout wrappers are dropped, and — unless the whole page is asked for — only what
intersects the viewport is kept, then capped in size.

Refs are Playwright's: each snapshot renumbers the page's elements, and a ref resolves against
the latest snapshot of the current document, so every action that may change the page returns
(and so takes) a new snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

SNAPSHOT_CHARS = 8_000  # the visible part, what navigate/click/… return
FULL_SNAPSHOT_CHARS = 40_000  # full=true: the whole page, still capped
INTERACTIVE = frozenset(
    [
        "button",
        "checkbox",
        "combobox",
        "link",
        "listbox",
        "menuitem",
        "menuitemcheckbox",
        "menuitemradio",
        "option",
        "radio",
        "scrollbar",
        "searchbox",
        "slider",
        "spinbutton",
        "switch",
        "tab",
        "textbox",
        "treeitem",
    ]
)
_REF = re.compile(r" \[ref=([a-z0-9]+)\]")
_BOX = re.compile(r" \[box=(-?[\d.]+),(-?[\d.]+),([\d.]+),([\d.]+)\]")
_CURSOR = re.compile(r" \[cursor=pointer\]")
_ROLE = re.compile(r"- (?:/)?([a-zA-Z]+)")
_WRAPPER = re.compile(r"- generic(?: \[[a-z]+(?:=[^\]]*)?\])*:?")  # no name, no text
_REF_ARGUMENT = re.compile(r"@?([a-z0-9]+)")


@dataclass
class Node:
    """One line of the tree with its children."""

    text: str  # without its ref, box and cursor annotations
    indent: int
    ref: str | None = None
    box: tuple[float, float, float, float] | None = None
    children: list[Node] = field(default_factory=list)
    visible: bool = True

    def is_wrapper(self) -> bool:
        """An unnamed generic with nothing of its own to say: its children are enough."""
        return _WRAPPER.fullmatch(self.text) is not None


def ref_selector(ref: str) -> str | None:
    """The Playwright selector of a ref the model gave (`@e5` or `e5`), None if malformed."""
    match = _REF_ARGUMENT.fullmatch(ref.strip())
    return f"aria-ref={match.group(1)}" if match else None


def parse(raw: str) -> list[Node]:
    """The snapshot's lines as a forest (by indentation)."""
    roots: list[Node] = []
    stack: list[Node] = []
    for line in raw.splitlines():
        stripped = line.lstrip(" ")
        if not stripped:
            continue
        node = _node(stripped, len(line) - len(stripped))
        while stack and stack[-1].indent >= node.indent:
            stack.pop()
        (stack[-1].children if stack else roots).append(node)
        stack.append(node)
    return roots


def _node(text: str, indent: int) -> Node:
    role_match = _ROLE.match(text)
    role = role_match.group(1) if role_match else ""
    ref_match, box_match = _REF.search(text), _BOX.search(text)
    keeps_ref = ref_match is not None and (bool(_CURSOR.search(text)) or role in INTERACTIVE)
    text = _REF.sub(lambda m: f" @{m.group(1)}" if keeps_ref else "", text)  # where Playwright put it
    node = Node(_CURSOR.sub("", _BOX.sub("", text)), indent)
    node.box = tuple(float(v) for v in box_match.groups()) if box_match else None  # type: ignore[assignment]
    node.ref = ref_match.group(1) if keeps_ref and ref_match else None
    return node


def boxes_of_refs(raw: str) -> list[tuple[str, tuple[float, float, float, float]]]:
    """(ref, box) of every interactive element with a box: where to draw `annotate` labels."""
    found: list[tuple[str, tuple[float, float, float, float]]] = []

    def walk(nodes: list[Node]) -> None:
        for node in nodes:
            if node.ref and node.box and node.box[2] > 0 and node.box[3] > 0:
                found.append((node.ref, node.box))
            walk(node.children)

    walk(parse(raw))
    return found


def render(raw: str, viewport: tuple[int, int] | None, limit: int) -> tuple[str, int]:
    """The snapshot text (at most `limit` characters) and how many lines lie outside the
    viewport (0 with `viewport=None`: the whole page)."""
    roots = parse(raw)
    for root in roots:
        _mark(root, viewport, True)
    lines: list[str] = []
    hidden = 0
    for depth, node in _walk(roots, 0):
        if not node.visible:
            hidden += 1
            continue
        lines.append("  " * depth + node.text)
    return cap("\n".join(lines), limit), hidden


def _walk(nodes: list[Node], depth: int) -> Iterator[tuple[int, Node]]:
    for node in nodes:
        if node.is_wrapper():
            yield from _walk(node.children, depth)
            continue
        yield depth, node
        yield from _walk(node.children, depth + 1)


def _mark(node: Node, viewport: tuple[int, int] | None, parent_visible: bool) -> bool:
    """Mark whether a node is kept: its box intersects the viewport, or it has no box of its
    own (text, /url) and its parent's does, or a descendant is kept (the path to it stays)."""
    if viewport is None:
        own = True
    elif node.box is None:
        own = parent_visible
    else:
        x, y, width, height = node.box
        own = (
            width > 0
            and height > 0
            and x < viewport[0]
            and y < viewport[1]
            and x + width > 0
            and y + height > 0
        )
    kept_children = [_mark(child, viewport, own) for child in node.children]  # every child marked
    node.visible = own or any(kept_children)
    return node.visible


def cap(text: str, limit: int) -> str:
    """`text` cut at a line boundary to at most `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit - 120)
    kept = text[: cut if cut > 0 else limit - 120]
    return f"{kept}\n… [truncated: {len(text) - len(kept)} more characters]"
