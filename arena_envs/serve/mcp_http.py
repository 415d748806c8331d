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
  allowed, there is no endpoint), and ``http_sessions_per_client`` from one client (an IPv6 client: its
  /64; one more is answered 429). A session holds its place until its world is closed, not merely until
  the SDK forgets it (which, on a ``DELETE``, is before its world is closed). A session is its opening
  address's: a request naming it from any other address is answered as for an unknown session (404).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import mcp.types as types
from fastapi import FastAPI
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import McpError
from openenv.core.env_server.mcp_types import CallToolAction

from arena_envs.tools.resource_pool import check_seed

from .clients import client_key
from .guard import Limits
from .mcp import mcp_step, tool_result
from .sessions import ArenaSession, SessionError, SessionHub

PATH = "/mcp/http"
OBSERVATION, ANSWER = "arena://observation", "arena://answer"
DELETE_WAIT_S = 10.0
"""How long a ``DELETE``'s answer waits for the session's world to be closed (its call in flight to end)."""


def mount_mcp(app: FastAPI, hub: SessionHub, limits: Limits) -> StreamableHTTPSessionManager | None:
    """Serve ``hub``'s tools at :data:`PATH` of ``app`` (its lifespan runs the MCP sessions); not at all
    when ``limits`` allows no session made over HTTP."""
    if limits.max_http_sessions < 1:
        return None
    admission = _Admission(limits)
    server = mcp_server(hub, admission)
    # the SDK's own cap stays, as a backstop: ours counts every session it counts, and for longer
    manager = StreamableHTTPSessionManager(server, json_response=True, session_idle_timeout=limits.http_session_ttl,
                                           max_sessions=limits.max_http_sessions)
    app.mount(PATH, _Endpoint(manager, admission))
    outer = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        async with manager.run(), outer(app) as state:
            yield state

    app.router.lifespan_context = lifespan
    return manager


@dataclass(eq=False)
class _Slot:
    """An MCP session's place under the caps, from the request that opens it until its world is closed."""

    client: str  # as the caps count it (an IPv6 client: its /64)
    address: str  # the address that opened it: the only one that may use it
    session_id: str | None = None  # once the SDK has answered the opening request
    entered: bool = False  # its server began (its lifespan gives the place back when it ends)
    released: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # set with released


_OPENING: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar("arena_mcp_opening", default=None)
"""The slot of the request being served, seen by the session it opens: the SDK starts a session's server
from within the opening request's task, so its lifespan runs in a copy of that request's context."""


class _Admission:
    """The MCP sessions' places, by client: the caps are checked here, before the SDK admits a session."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.slots: set[_Slot] = set()
        self.by_id: dict[str, _Slot] = {}

    def refusal(self, client: str) -> tuple[int, str] | None:
        """Why ``client`` may not open an MCP session now (HTTP status, message), or None."""
        limits = self.limits
        if len(self.slots) >= limits.max_http_sessions:
            return 503, (f"the server holds its {limits.max_http_sessions} MCP sessions; try again later "
                         "(raise --max-http-sessions)")
        share = limits.http_sessions_per_client
        if sum(slot.client == client for slot in self.slots) >= share:
            return 429, (f"at most {share} MCP sessions per client address: end one of yours (DELETE) first, "
                         "or raise --http-sessions-per-client")
        return None

    def take(self, client: str, address: str) -> _Slot:
        slot = _Slot(client, address)
        self.slots.add(slot)
        return slot

    def named(self, slot: _Slot, session_id: str) -> None:
        """The SDK opened ``slot``'s session as ``session_id``."""
        slot.session_id = session_id
        if not slot.released:
            self.by_id[session_id] = slot

    def give_back(self, slot: _Slot) -> None:
        slot.released = True
        slot.closed.set()
        self.slots.discard(slot)
        if slot.session_id is not None:
            self.by_id.pop(slot.session_id, None)


class _Endpoint:
    """The ASGI app at :data:`PATH`: the caps and each session's address checked, then the session manager."""

    def __init__(self, manager: StreamableHTTPSessionManager, admission: _Admission) -> None:
        self.manager, self.admission = manager, admission

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.manager.handle_request(scope, receive, send)
        address = (scope.get("client") or ("?", 0))[0]
        headers = dict(scope.get("headers") or ())
        session_id = headers.get(b"mcp-session-id")
        if session_id is not None:
            slot = self.admission.by_id.get(session_id.decode("latin-1"))
            if slot is not None and slot.address != address:  # answered as the SDK answers an unknown id
                return await _rpc_error(send, 404, "Session not found")
            if slot is None or scope.get("method") != "DELETE":
                return await self.manager.handle_request(scope, receive, send)
            return await self._delete(slot, scope, receive, send)
        # no session named: the SDK opens one for it (which it keeps if the request was an initialize)
        admission = self.admission
        client = client_key(address, admission.limits.ipv6_prefix)
        refusal = admission.refusal(client)
        if refusal is not None:
            return await _rpc_error(send, *refusal)
        slot = admission.take(client, address)

        async def watching_send(message: dict) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                for name, value in message.get("headers", ()):
                    if name == b"mcp-session-id":  # known before its client can name it
                        admission.named(slot, value.decode("latin-1"))
            await send(message)

        token = _OPENING.set(slot)
        try:
            await self.manager.handle_request(scope, receive, watching_send)
        finally:
            _OPENING.reset(token)
            if slot.session_id is None and not slot.entered:  # refused before its server began
                admission.give_back(slot)

    async def _delete(self, slot: _Slot, scope: Any, receive: Any, send: Any) -> None:
        """End ``slot``'s session, answering once its world is closed: the client's place is free when it
        hears the answer (it may open its next session at once), and never two worlds for one place."""
        answer: list[dict] = []

        async def holding_send(message: dict) -> None:
            answer.append(message)

        await self.manager.handle_request(scope, receive, holding_send)
        if answer and answer[0]["type"] == "http.response.start" and answer[0]["status"] < 400 and slot.entered:
            with contextlib.suppress(asyncio.TimeoutError):  # not TimeoutError itself before 3.11
                await asyncio.wait_for(slot.closed.wait(), DELETE_WAIT_S)
        for message in answer:
            await send(message)


async def _rpc_error(send: Any, status: int, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": types.INVALID_REQUEST if status == 404
                                                                 else types.INTERNAL_ERROR, "message": message}})
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body.encode()})


def mcp_server(hub: SessionHub, admission: _Admission | None = None) -> Server:
    """The MCP server of ``hub``'s tools: one :class:`ArenaSession` per MCP session (its lifespan), made at
    the session's first call; its place under ``admission``'s caps given back once its world is closed."""

    @contextlib.asynccontextmanager
    async def one_world(_: Server) -> AsyncIterator[_World]:
        slot = _OPENING.get()
        if slot is not None:
            slot.entered = True
        world = _World(hub)
        try:
            yield world
        finally:
            world.close()  # frees its world (after a call still in flight)
            if slot is not None and admission is not None:
                admission.give_back(slot)

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
            answer = await mcp_step(world.arena_session(), CallToolAction(tool_name=name, arguments=arguments))
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
    """An MCP session's world: its arena session (None before its first call), and its last answer (None
    before the episode starts)."""

    hub: SessionHub
    session: ArenaSession | None = None
    answer: dict[str, Any] | None = None

    def arena_session(self) -> ArenaSession:
        if self.session is None:
            self.session = ArenaSession(self.hub)
        return self.session

    def close(self) -> None:
        if self.session is not None:
            self.session.close()


async def _started(server: Server) -> _World:
    """The world of the request's MCP session, its episode started at the URL's seed on first use."""
    context = server.request_context
    world: _World = context.lifespan_context
    if world.answer is None:
        query = context.request.query_params if context.request is not None else {}
        seed, arrays = query.get("seed"), query.get("arrays", "false")
        if arrays not in ("true", "false"):
            raise _invalid(f"arrays must be true or false, got {arrays!r}")
        opening = await world.arena_session().reset_async(seed=None if seed is None else _seed(seed),
                                                           arrays=arrays == "true")
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
