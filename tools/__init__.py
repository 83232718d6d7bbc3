"""Tool families, one module each. Each module exports `TOOLS: tuple[ToolSpec, ...]`."""
