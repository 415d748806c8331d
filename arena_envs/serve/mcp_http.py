"""A plain MCP endpoint on ``arena-serve``: ``/mcp/http``, MCP's streamable HTTP transport, for any MCP client.

OpenEnv's ``POST /mcp`` (:mod:`.mcp`) answers ``tools/list`` and ``tools/call`` for a session made by
``openenv/session/create``, but not MCP's own lifecycle (``initialize``...), so a plain MCP client cannot use
it. This endpoint is the MCP SDK's server (its ``StreamableHTTPSessionManager`` speaks the protocol:
``initialize``, ``notifications/initialized``, ``tools/list``, ``tools/call``, ``Mcp-Session-Id``, ``DELETE``):

    from fastmcp import Client

    async with Client("http://127.0.0.1:8000/mcp/http?seed=5") as client:   # one MCP session, one world
        tools = await client.list_tools()                       # the schemas a reset sends
        opening = await client.read_resource("arena://observation")   # its text ("arena://answer": all of it)
        result = await client.call_tool("cat", {"file": "start.txt"})
        result.data                                             # text, observation, reward, done...

* Each MCP session plays one episode in a world of its own (an :class:`~.sessions.ArenaSession` of the
  server's hub, freed when the session ends: ``DELETE``, or ``http_session_ttl`` seconds with no request
  in flight: a client gone without a ``DELETE``, since a connected client's open GET stream holds it). The
  episode starts at the session's first call (or resource read), at the seed given in the URL (``?seed=N``;
  none: a random world; ``&arrays=true`` adds the native observation arrays to every answer). Once it is
  over, calls are refused: open a new session.
* Two resources show the last answer (the opening one before any call): ``arena://observation`` its text,
  ``arena://answer`` all of it as JSON (as a call's ``structuredContent``).
* A call is one step of the world, through the same batched pool as every other session. Its result's
  text is what an agent reads; its ``structuredContent`` (``result.data`` in fastmcp) the whole answer:
  reward, ``done``, ``terminated``, ``truncated``, ``info``. A call the game refuses (``success: false``)
  is ``isError``, and costs a tick as any bad call does.
* Bad input is a JSON-RPC error and costs nothing: an unknown tool, arguments that are not an object, a
  bad seed. A call that cannot be carried out (the episode over, the server full) is an ``isError`` result.
  Nothing one session sends reaches another's world.
* At most ``max_http_sessions`` MCP sessions are open at once (one more is answered 503; with none
  allowed, there is no endpoint).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import mcp.types as types
from fastapi import FastAPI
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import McpError
from openenv.core.env_server.mcp_types import CallToolAction

from arena_envs.tools.resource_pool import check_seed

from .guard import Limits
from .mcp import mcp_step, tool_result
from .sessions import ArenaSession, SessionError, SessionHub

PATH = "/mcp/http"
OBSERVATION, ANSWER = "arena://observation", "arena://answer"


def mount_mcp(app: FastAPI, hub: SessionHub, limits: Limits) -> StreamableHTTPSessionManager | None:
    """Serve ``hub``'s tools at :data:`PATH` of ``app`` (its lifespan runs the MCP sessions); not at all
    when ``limits`` allows no session made over HTTP."""
    if limits.max_http_sessions < 1:
        return None
    server = mcp_server(hub)
    manager = StreamableHTTPSessionManager(server, json_response=True, session_idle_timeout=limits.http_session_ttl,
                                           max_sessions=limits.max_http_sessions)
    app.mount(PATH, _Endpoint(manager))
    outer = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        async with manager.run(), outer(app) as state:
            yield state

    app.router.lifespan_context = lifespan
    return manager


class _Endpoint:
    """The ASGI app at :data:`PATH`: every request, whatever its sub-path, to the session manager."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self.manager = manager

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.manager.handle_request(scope, receive, send)


def mcp_server(hub: SessionHub) -> Server:
    """The MCP server of ``hub``'s tools: one :class:`ArenaSession` per MCP session (its lifespan)."""

    @contextlib.asynccontextmanager
    async def one_world(_: Server) -> AsyncIterator[_World]:
        world = _World(ArenaSession(hub))
        try:
            yield world
        finally:
            world.session.close()  # frees its world (after a call still in flight)

    server: Server = Server(f"arena-{hub.scenario}", lifespan=one_world)
    tools = [types.Tool(name=tool.name, description=tool.description, inputSchema=tool.input_schema)
             for tool in hub.mcp_tools]
    names = {tool.name for tool in tools}

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return tools

    @server.list_resources()
    async def list_resources() -> list[types.Resource]:
        return [types.Resource(uri=OBSERVATION, name="observation", mimeType="text/plain",
                               description="The last observation's text (the episode starts at the first read)"),
                types.Resource(uri=ANSWER, name="answer", mimeType="application/json",
                               description="The last answer: text, observation, reward, done, info")]

    @server.read_resource()
    async def read_resource(uri: Any) -> str:
        if str(uri) not in (OBSERVATION, ANSWER):
            raise _invalid(f"no resource {uri}; the resources are {OBSERVATION} and {ANSWER}")
        try:
            answer = (await _started(server)).answer
        except SessionError as error:  # the server full, the session reclaimed
            raise McpError(types.ErrorData(code=types.INTERNAL_ERROR, message=str(error))) from None
        return answer["text"] if str(uri) == OBSERVATION else json.dumps(answer)

    async def call_tool(request: types.CallToolRequest) -> types.ServerResult:
        name, arguments = request.params.name, request.params.arguments or {}
        if name not in names:
            raise _invalid(f"no tool {name!r}; the tools are {', '.join(sorted(names))}")
        try:
            world = await _started(server)
            answer = await mcp_step(world.session, CallToolAction(tool_name=name, arguments=arguments))
        except SessionError as error:  # the server full, the session reclaimed: the call's own failure
            return _failed(str(error))
        if answer.error is not None:
            return _failed(f"{answer.error.error_type.value}: {answer.error.message}")
        result = answer.result  # mcp.tool_result's fields
        world.answer = result["structured_content"]
        return types.ServerResult(types.CallToolResult(
            content=[types.TextContent(type="text", text=world.answer["text"])],
            structuredContent=result["structured_content"], isError=result["is_error"]))

    server.request_handlers[types.CallToolRequest] = call_tool
    return server


@dataclass
class _World:
    """An MCP session's world: its arena session, and its last answer (None before the episode starts)."""

    session: ArenaSession
    answer: dict[str, Any] | None = None


async def _started(server: Server) -> _World:
    """The world of the request's MCP session, its episode started at the URL's seed on first use."""
    context = server.request_context
    world: _World = context.lifespan_context
    if world.answer is None:
        query = context.request.query_params if context.request is not None else {}
        seed, arrays = query.get("seed"), query.get("arrays", "false")
        if arrays not in ("true", "false"):
            raise _invalid(f"arrays must be true or false, got {arrays!r}")
        opening = await world.session.reset_async(seed=None if seed is None else _seed(seed), arrays=arrays == "true")
        world.answer = tool_result(opening)["structured_content"]
    return world


def _seed(text: str) -> int:
    try:
        return check_seed(int(text))
    except ValueError as error:
        raise _invalid(f"bad seed {text!r} in the URL: {error}") from None


def _invalid(message: str) -> McpError:
    return McpError(types.ErrorData(code=types.INVALID_PARAMS, message=message))


def _failed(message: str) -> types.ServerResult:
    return types.ServerResult(types.CallToolResult(content=[types.TextContent(type="text", text=message)],
                                                   isError=True))
