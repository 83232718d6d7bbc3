"""Vision tool (`vision_analyze`): declared, not implemented.

No vision model backend exists in this runner; the spec has no handler, always reports
itself unavailable and is never offered to the model. It is declared so that the tool map is
the same on every machine.
"""

from __future__ import annotations

from agent.protocols import Toolset

_REASON = "no vision backend is implemented in this runner"

TOOLSET = Toolset.declared_only(
    "vision",
    "Image analysis",
    _REASON,
    (
        {
            "name": "vision_analyze",
            "description": "Answer a question about an image given by URL or local path.",
            "parameters": {
                "type": "object",
                "properties": {
                    "image_url": {"type": "string", "description": "Image URL or local file path."},
                    "question": {"type": "string", "description": "What to find out about the image."},
                },
                "required": ["image_url", "question"],
            },
        },
    ),
)
