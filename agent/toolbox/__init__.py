"""The tool registry above the `tools/` families: which tools and toolsets exist, which a prompt
is offered, how a call is checked and dispatched, and the toolset distributions."""
