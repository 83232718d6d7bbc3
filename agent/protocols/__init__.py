"""The project's few seams, declared once: the chat model (`model`), the sandbox (`sandbox`),
the tool (`tools`), the run store (`store`) and the run backend (`run_backend`: import it there).

Each seam takes a value and returns a value, so a test double is a short function or class.
The value types that cross the seams live beside them; import them from here.
"""

from agent.protocols.mcp import McpServer, McpTool
from agent.protocols.model import (
    IMAGE_APIS,
    ChatModel,
    ChatRequest,
    ImageModel,
    ImageReply,
    ImageRequest,
    ModelReply,
    Prices,
    Responder,
    ToolCall,
    Usage,
)
from agent.protocols.sandbox import (
    DEFAULT_IMAGE,
    ExecResult,
    RowProblem,
    Sandbox,
    SandboxBackend,
    SandboxFactory,
    SandboxOptions,
    SandboxPool,
    SandboxProcess,
    SandboxSpec,
)
from agent.protocols.store import KeyBook, RunStore, StoredKeys
from agent.protocols.tools import (
    JSON,
    WEB_BACKENDS,
    Availability,
    SandboxTool,
    ToolConfig,
    ToolContext,
    ToolHandler,
    Toolset,
    ToolSpec,
    always,
    on_sandbox,
    sees_images,
)

__all__ = [
    "DEFAULT_IMAGE",
    "IMAGE_APIS",
    "JSON",
    "WEB_BACKENDS",
    "Availability",
    "ChatModel",
    "ChatRequest",
    "ExecResult",
    "ImageModel",
    "ImageReply",
    "ImageRequest",
    "KeyBook",
    "McpServer",
    "McpTool",
    "ModelReply",
    "Prices",
    "Responder",
    "RowProblem",
    "RunStore",
    "Sandbox",
    "SandboxBackend",
    "SandboxFactory",
    "SandboxOptions",
    "SandboxPool",
    "SandboxProcess",
    "SandboxSpec",
    "SandboxTool",
    "StoredKeys",
    "ToolCall",
    "ToolConfig",
    "ToolContext",
    "ToolHandler",
    "ToolSpec",
    "Toolset",
    "Usage",
    "always",
    "on_sandbox",
    "sees_images",
]
