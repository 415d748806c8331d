"""The tool-calling layer: decisions, the universal tools' schemas and validation, and
AgentFly-style tools, stateful tools on pools and agents.

    from arena_envs.tools import Decision, parse_decision, tool_schemas, validate_params

    decision = parse_decision(model_output)           # ToolCallError if unreadable
    params = validate_params(decision.tool, decision.params)

Stateful tools (``@tool(env_cls=..., stateful=True)``, ``await t(..., id=)``) run on
``ToolPool`` (the arena's 2D scenarios, batched) or ``ResourcePool`` (any other class);
``BaseAgent`` gathers tools defined as methods; ``PythonSandboxEnv`` is a safe example env.
"""

from .agent import BaseAgent
from .decision import Decision, parse_decision
from .errors import ErrorCode, ToolCallError
from .function_tools import BaseTool, FunctionTool, tool
from .pool import ArenaHandle, PoolStep, StatefulToolPool, ToolPool, make_pool
from .registry import (
    TOOL_NAMES,
    UNIVERSAL_TOOLS,
    Param,
    ToolRegistry,
    ToolSpec,
    tool_schemas,
    validate_params,
)
from .resource_pool import EnvHandle, PoolExhaustedError, ResourcePool
from .sandbox import PythonSandboxEnv, SandboxUnavailable

__all__ = [
    "ArenaHandle",
    "BaseAgent",
    "EnvHandle",
    "PythonSandboxEnv",
    "SandboxUnavailable",
    "ResourcePool",
    "StatefulToolPool",
    "make_pool",
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
