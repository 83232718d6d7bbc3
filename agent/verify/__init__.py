"""Checks of a finished attempt (`answer`, `command`, `python`, `judge`): they read the typed
turns and the attempt's sandbox and return `agent.protocols.verification` records."""
