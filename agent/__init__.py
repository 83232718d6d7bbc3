"""Agent internals: LLM client, trajectory conversion, run store, sandboxes, statistics."""
