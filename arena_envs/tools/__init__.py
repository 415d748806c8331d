"""The tool-calling layer: decisions, the universal tools' schemas and validation, and
AgentFly-style tools.

    from arena_envs.tools import Decision, parse_decision, tool_schemas, validate_params

    decision = parse_decision(model_output)           # ToolCallError if unreadable
    params = validate_params(decision.tool, decision.params)
"""

from .decision import Decision, parse_decision
from .errors import ErrorCode, ToolCallError
from .function_tools import BaseTool, FunctionTool, tool
from .pool import PoolExhaustedError, PoolStep, ToolPool
from .registry import (
    TOOL_NAMES,
    UNIVERSAL_TOOLS,
    Param,
    ToolRegistry,
    ToolSpec,
    tool_schemas,
    validate_params,
)

__all__ = [
    "TOOL_NAMES",
    "UNIVERSAL_TOOLS",
    "BaseTool",
    "Decision",
    "ErrorCode",
    "FunctionTool",
    "Param",
    "ToolCallError",
    "PoolExhaustedError",
    "PoolStep",
    "ToolPool",
    "ToolRegistry",
    "ToolSpec",
    "parse_decision",
    "tool",
    "tool_schemas",
    "validate_params",
]
