"""Tool families, one module each. A module declares its toolset (`TOOLSET`: name, description,
tools with their schemas and handlers); `FAMILIES` lists them in the order toolsets are shown
and expanded. Adding a tool means editing its family's module only; adding a family, that
module plus one line here."""

from __future__ import annotations

from agent.protocols import Toolset
from tools import browser, files, image_gen, moa, terminal, vision, web

FAMILIES: tuple[Toolset, ...] = (
    web.TOOLSET,
    vision.TOOLSET,
    image_gen.TOOLSET,
    terminal.TOOLSET,
    files.TOOLSET,
    moa.TOOLSET,
    browser.TOOLSET,
)
