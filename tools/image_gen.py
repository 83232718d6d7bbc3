"""Image generation tool (`image_generate`): declared, not implemented.

No image generation backend exists in this runner; the spec has no handler, always reports
itself unavailable and is never offered to the model. It is declared so that the tool map is
the same on every machine.
"""

from __future__ import annotations

from agent.protocols import Toolset

_REASON = "no image generation backend is implemented in this runner"

TOOLSET = Toolset.declared_only(
    "image_gen",
    "Image generation",
    _REASON,
    (
        {
            "name": "image_generate",
            "description": "Generate an image from a text prompt; returns the image URL.",
            "parameters": {
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "description": "What the image should show."},
                    "aspect_ratio": {
                        "type": "string",
                        "enum": ["landscape", "square", "portrait"],
                        "description": "Image shape (default landscape).",
                    },
                },
                "required": ["prompt"],
            },
        },
    ),
)
