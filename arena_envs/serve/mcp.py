"""MCP tools on ``arena-serve``: each session's tools, listed and called as OpenEnv's ``MCPEnvironment`` does.

OpenEnv (RFC 003) gives an environment two doors for tools, and a served session opens both:

* a step with ``ListToolsAction`` or ``CallToolAction`` (``{"type": "list_tools"}``,
  ``{"type": "call_tool", "tool_name": ..., "arguments": {...}}`` over ``/ws``): the answer is a
  ``ListToolsObservation`` or a ``CallToolObservation`` carrying the step's reward and ``done``;
* JSON-RPC ``tools/list`` and ``tools/call`` at ``POST /mcp`` with the ``session_id`` of a session
  made by ``openenv/session/create`` (what ``openenv.core.mcp_client.MCPToolClient`` sends): OpenEnv's
  server calls the session's ``mcp_client``, here a :class:`SessionTools`.

A plain MCP client (MCP's own ``initialize`` handshake, streamable HTTP) uses ``/mcp/http`` instead
(:mod:`.mcp_http`). The tools are the schemas the session already sends at reset (the universal tools, or the hunt's);
a call is one step of the session's world, through the same batched pool as any other step.
``reset``, ``step``, ``state`` and ``close`` stay reserved: no tool may take those names, so that
only the harness, never the agent, starts and ends episodes.

    from openenv.core.mcp_client import MCPToolClient

    with MCPToolClient(base_url="http://127.0.0.1:8000").sync() as env:
        env.reset(seed=7)                                  # the harness starts the episode
        tools = env.list_tools()                           # [Tool(name="move_to", ...), ...]
        answer = env.call_tool("query_world", radius=30)   # {"text": ..., "reward": ..., "done": ...}
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.mcp_types import (
    RESERVED_TOOL_NAMES,
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)

from .models import ArenaAction, ArenaObservation

# a session is a ``sessions.ArenaSession`` (typed Any here: sessions imports this module)


def mcp_action(action: Any) -> ListToolsAction | CallToolAction | None:
    """The MCP action ``action`` is or spells (``{"type": "list_tools"}``, ``{"type": "call_tool",
    "tool_name": ..., "arguments": {...}}``), or None for any other action.

    OpenEnv's server makes ``ListToolsAction``/``CallToolAction`` of such a step only for an
    environment whose action class is an MCP one; an arena session's is :class:`ArenaAction`, which
    keeps the keys it does not know: they are read here.
    """
    if isinstance(action, ListToolsAction | CallToolAction):
        return action
    extra = action.__pydantic_extra__ if isinstance(action, ArenaAction) else None
    kind = extra.get("type") if extra else None
    if kind == "list_tools":
        return ListToolsAction()
    if kind != "call_tool":
        return None
    name, arguments = extra.get("tool_name"), extra.get("arguments", {})
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise ValueError("a call_tool action needs 'tool_name' (a string) and 'arguments' (a JSON object)")
    return CallToolAction(tool_name=name, arguments=arguments)


def as_mcp_tools(schemas: list[dict[str, Any]]) -> list[Tool]:
    """OpenEnv's MCP ``Tool`` for each OpenAI tool schema; a reserved name is refused."""
    tools = []
    for schema in schemas:
        function = schema["function"]
        if function["name"] in RESERVED_TOOL_NAMES:
            raise ValueError(f"tool {function['name']!r} has a name MCP reserves for the harness: "
                             f"{', '.join(sorted(RESERVED_TOOL_NAMES))}")
        tools.append(Tool(name=function["name"], description=function.get("description", ""),
                          input_schema=function.get("parameters") or {"type": "object", "properties": {}}))
    return tools


def tool_result(answer: ArenaObservation) -> dict[str, Any]:
    """A step's answer as an MCP tool result (the fields of FastMCP's ``CallToolResult``).

    ``content`` is the text an agent reads; ``data`` (and ``structured_content``) is the whole
    answer, reward and ``done`` included, since HTTP ``tools/call`` has no other place for them.
    ``is_error`` is the call's own failure (a tool's ``success: false``), which costs a tick as
    any bad call does.
    """
    data = {"text": answer.text, "observation": answer.observation, "reward": answer.reward, "done": answer.done,
            "terminated": answer.terminated, "truncated": answer.truncated, "info": answer.info}
    if answer.arrays is not None:  # the session was reset with arrays=true
        data["arrays"] = answer.arrays
    result = (answer.observation or {}).get("last_action_result")
    failed = isinstance(result, dict) and result.get("success") is False
    return {"content": [{"type": "text", "text": answer.text}], "structured_content": data, "data": data,
            "is_error": failed}


async def mcp_step(session: Any,
                   action: ListToolsAction | CallToolAction) -> ListToolsObservation | CallToolObservation:
    """``session``'s answer to an MCP action (see the module docstring).

    A tool that does not exist is refused without a tick (``TOOL_NOT_FOUND``; arguments that
    are not an object never get here: OpenEnv's model refuses them); a call the session cannot carry out (no
    episode yet, the episode over) is an ``EXECUTION_ERROR`` naming why.
    """
    tools = session.hub.mcp_tools
    if isinstance(action, ListToolsAction):
        return ListToolsObservation(tools=tools)
    name = action.tool_name
    if name not in {tool.name for tool in tools}:
        return _failed(name, ToolErrorType.TOOL_NOT_FOUND,
                       f"no tool {name!r}; the tools are {', '.join(tool.name for tool in tools)}")
    try:
        answer = await session.step_async(ArenaAction(tool=name, params=action.arguments))
    except Exception as err:  # a SessionError, as MCPEnvironment answers any failure: the call's own error
        return _failed(name, ToolErrorType.EXECUTION_ERROR, str(err))
    return CallToolObservation(tool_name=name, result=tool_result(answer), reward=answer.reward, done=answer.done)


def _failed(name: str, kind: ToolErrorType, message: str) -> CallToolObservation:
    return CallToolObservation(tool_name=name, error=ToolError(error_type=kind, message=message))


class ToolCallFailed(RuntimeError):
    """A ``tools/call`` over HTTP that could not be carried out: OpenEnv's server answers it as a
    JSON-RPC error with this message."""


class SessionTools:
    """A session's ``mcp_client``: what OpenEnv's server calls for ``POST /mcp`` ``tools/list`` and ``tools/call``.

    OpenEnv's ``MCPEnvironment`` keeps a FastMCP client of an in-process FastMCP server here; the
    server only calls these methods, so they step the session directly (no second protocol
    hop inside the process).
    """

    def __init__(self, session: Any) -> None:
        self.session = session

    def is_connected(self) -> bool:
        return not self.session.closed

    async def __aenter__(self) -> SessionTools:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def list_tools(self) -> list[Tool]:
        return self.session.hub.mcp_tools

    async def call_tool(self, name: str, arguments: Any = None) -> dict[str, Any]:
        if not isinstance(name, str) or not isinstance(arguments, dict | None):
            raise ToolCallFailed("invalid_args: 'name' must be a string and 'arguments' a JSON object")
        answer = await mcp_step(self.session, CallToolAction(tool_name=name, arguments=arguments or {}))
        if answer.error is not None:
            raise ToolCallFailed(f"{answer.error.error_type.value}: {answer.error.message}")
        return answer.result
