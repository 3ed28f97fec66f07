"""Tools a run may call: built-ins, typed Python functions as tools, and write domains (DESIGN.md §9).

Import from here: `Tool`, `tool`, `ToolRegistry`, `ToolContext`, `builtin_registry`,
`execute_wave` and its request/outcome types.
"""

from runfold.core.secrets import is_secret_name, scrub_env
from runfold.tools.builtin import BUILTIN_NAMES, BUILTIN_TOOLS, OPT_IN_NAMES, builtin_registry
from runfold.tools.context import ToolContext
from runfold.tools.execute import (
    BeforeWrite,
    DuplicateCallCache,
    ToolCallRequest,
    ToolOutcome,
    WaveCancelled,
    execute_wave,
    tool_called_payload,
)
from runfold.tools.registry import Effect, Tool, ToolRegistry, tool
from runfold.tools.results import ToolError, result_object

__all__ = [
    "BUILTIN_NAMES",
    "BUILTIN_TOOLS",
    "OPT_IN_NAMES",
    "BeforeWrite",
    "DuplicateCallCache",
    "Effect",
    "Tool",
    "ToolCallRequest",
    "ToolContext",
    "ToolError",
    "ToolOutcome",
    "ToolRegistry",
    "WaveCancelled",
    "builtin_registry",
    "execute_wave",
    "is_secret_name",
    "result_object",
    "scrub_env",
    "tool",
    "tool_called_payload",
]
