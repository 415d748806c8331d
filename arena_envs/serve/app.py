"""The arena server: OpenEnv's own app (``create_app``) over a :class:`SessionHub`, behind the :class:`Guard`.

    app = make_app("foraging", max_sessions=256)          # a FastAPI app, for any ASGI server
    serve(app, host="127.0.0.1", port=8000)               # uvicorn, with graceful shutdown

Routes are OpenEnv's (``/ws`` sessions, ``/reset``, ``/step``, ``/state``, ``/schema``,
``/metadata``, ``/health``, ``/mcp``) plus ``GET /stats`` (sessions, free worlds, steps) and
``/mcp/http`` (MCP's streamable HTTP transport, for any MCP client: :mod:`.mcp_http`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import ipaddress
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import h11
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.env_server import create_app
from openenv.core.env_server.types import ConcurrencyConfig
from uvicorn.protocols.http.h11_impl import H11Protocol

from .clients import client_key
from .guard import Guard, GuardMonitor, Limits
from .hubs import make_hub
from .mcp_http import mount_mcp
from .models import ArenaAction, ArenaObservation, ArenaState
from .sessions import SessionError, SessionHub

logger = logging.getLogger("uvicorn.error")  # uvicorn's own log, so its settings apply

MAX_FRAME_BYTES = 1024 * 1024
"""Hard cap on a WebSocket frame, enforced by the HTTP server itself (the guard's limit,
``max_message_bytes``, is the one clients meet: it answers with an error and keeps the session)."""


def make_app(scenario: str = "foraging", *, max_sessions: int = 64, limits: Limits | None = None,
             **env_kwargs: Any) -> FastAPI:
    """OpenEnv's app serving ``scenario`` to at most ``max_sessions`` concurrent sessions.

    | argument        | meaning                                                               |
    |-----------------|-----------------------------------------------------------------------|
    | ``scenario``    | ``foraging``, ``crafting``, ``treasure_hunt`` or ``team_capture``      |
    | ``max_sessions``| session cap; one more WebSocket is refused with ``CAPACITY_REACHED``  |
    | ``limits``      | :class:`Limits`: API key, message size, rates, idle timeout           |
    | ``env_kwargs``  | passed to the scenario's env (``layout="classic"``, ``difficulty=``)  |

    ``app.state.hub`` and ``app.state.guard`` hold the sessions and the guard's live state.
    """
    limits = limits or Limits()
    # worlds of their own for sessions made over OpenEnv's /mcp and for MCP sessions at /mcp/http,
    # max_http_sessions each, so that neither takes the worlds WebSocket clients need
    hub = make_hub(scenario, max_sessions, 2 * limits.max_http_sessions, **env_kwargs)
    # OpenEnv's own reaper stays off (session_timeout None): it would free a WebSocket session's
    # world under its open socket. The guard reaps (and closes the socket), see guard.py.
    # OpenEnv counts WebSocket and HTTP-made sessions together: the guard keeps each kind to
    # its own share (max_sessions, max_http_sessions), so neither can take the other's worlds.
    concurrency = ConcurrencyConfig(max_concurrent_envs=max_sessions + limits.max_http_sessions,
                                    session_timeout=None)
    app = create_app(hub.factory(), ArenaAction, ArenaObservation, env_name=hub.scenario,
                     concurrency_config=concurrency, state_cls=ArenaState)
    monitor = GuardMonitor(max_sessions)
    app.state.hub, app.state.guard, app.state.limits = hub, monitor, limits
    app.add_middleware(Guard, limits=limits, monitor=monitor)
    mount_mcp(app, hub, limits)  # /mcp/http: MCP's own transport, for any MCP client (mcp_http.py)

    @app.exception_handler(SessionError)
    async def session_error(request: Request, error: SessionError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=409)

    @app.get("/stats", tags=["Health"], summary="Sessions, worlds and steps served")
    async def stats() -> dict[str, Any]:
        return {**hub.stats(), **monitor.stats()}

    async def finish() -> None:
        monitor.stop()
        await hub.aclose()

    app.router.on_shutdown.append(finish)  # as OpenEnv registers its own hooks

    return app


SLOW_REQUEST_S = 2.0
"""A connection still waiting for a request's headers after this long is *half-open*: a
client's request follows its connection (or its previous answer) within milliseconds. Only
connections past this age count, so that a burst of new ones (256 clients opening at once
on a loaded machine) is never taken for an attack."""


class _Connections:
    """The HTTP connections of one server by client address, and its connection limits."""

    def __init__(self, limits: Limits, worlds: int) -> None:
        self.cap = limits.max_connections or 2 * worlds + 64
        self.per_client = limits.connections_per_client or (self.cap + 1) // 2
        self.half_open_per_client = limits.half_open_per_client
        self.header_timeout = limits.header_timeout
        self.ipv6_prefix = limits.ipv6_prefix
        self.by_client: dict[str, set[_GuardedH11Protocol]] = {}  # by client key (an IPv6 client: its /64)

    def add(self, connection: _GuardedH11Protocol) -> set[_GuardedH11Protocol]:
        """Count ``connection`` in; the connections of its address, itself among them."""
        mine = self.by_client.setdefault(connection.address, set())
        mine.add(connection)
        return mine

    def remove(self, connection: _GuardedH11Protocol) -> None:
        mine = self.by_client.get(connection.address)
        if mine is not None:
            mine.discard(connection)
            if not mine:
                del self.by_client[connection.address]

    def half_open(self, address: str) -> int:
        """Connections of ``address`` waiting for a request for longer than :data:`SLOW_REQUEST_S`
        (not counting those kept alive after an answer that have sent nothing since: a client's
        pool of idle connections, closed after ``keep_alive_timeout``)."""
        since = time.monotonic() - SLOW_REQUEST_S
        return sum(c.waiting_since is not None and c.waiting_since < since and not c.kept_alive
                   for c in self.by_client.get(address, ()))

    def victim(self) -> _GuardedH11Protocol | None:
        """The longest-waiting connection of the address with the most connections waiting for
        a request: the one to close when the server is full (None: no connection waits)."""
        waiting = {address: [c for c in mine if c.waiting_since is not None]
                   for address, mine in self.by_client.items()}
        address = max(waiting, key=lambda a: len(waiting[a]), default=None)
        if address is None or not waiting[address]:
            return None
        return min(waiting[address], key=lambda c: c.waiting_since)


class _GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 connection, with a deadline for each request to arrive whole and
    caps on connections, in all and per client address (uvicorn's ``limit_concurrency``
    answers 503 only to a request that arrived: a socket that never finishes its headers
    would stay open for ever, and its cap is global, so one address could fill it).

    * A request (headers and body) has ``header_timeout`` to arrive, counted from the
      connection's opening or from the end of its previous answer; a slower one gets a 408.
    * One address may hold ``connections_per_client`` HTTP connections; one more gets a 503.
      So does a new connection from an address holding ``half_open_per_client`` half-open
      ones (waiting for a request for over :data:`SLOW_REQUEST_S`).
    * Past ``max_connections`` in all, the longest-waiting connection of the address with the
      most connections waiting for a request is closed (503) to make room, unless that is the
      newcomer's own address, when the newcomer is refused: an attacker holding sockets open
      from some addresses never turns away a client on another.
    """

    def __init__(self, *args: Any, connections: _Connections, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registry = connections
        self.address = "?"  # the client as the caps count it: its IPv4 address, an IPv6 client's /64
        self.waiting_since: float | None = None  # waiting for a request since (monotonic), or None
        self.kept_alive = False  # waiting, after an answer, and nothing of the next request sent yet
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        registry = self.registry
        # the socket's own peer, never a forwarded one: a proxy's clients share its connections
        self.address = client_key(self.client[0], registry.ipv6_prefix) if self.client else "?"
        mine = registry.add(self)
        if len(mine) > registry.per_client:
            self._refuse(503, f"too many connections from {self.address} (at most {registry.per_client}; "
                         "raise --connections-per-client)")
        elif registry.half_open(self.address) >= registry.half_open_per_client:
            self._refuse(503, f"too many connections from {self.address} are slow to send a request "
                         f"(at most {registry.half_open_per_client}; raise --half-open-per-client)")
        elif len(self.connections) > registry.cap:
            victim = registry.victim()
            if victim is None or victim.address == self.address:
                self._refuse(503, f"too many connections (at most {registry.cap}; raise --max-connections)")
                return
            victim._refuse(503, "the server is full: closing the connection that waited longest for a request "
                           f"(at most {registry.cap}; raise --max-connections)")
            self._arm()
        else:
            self._arm()

    def data_received(self, data: bytes) -> None:
        self.kept_alive = False
        super().data_received(data)
        if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR):
            self._disarm()  # the request is in: its answer may take as long as it takes

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request on this connection has header_timeout to arrive
            self.kept_alive = True

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._disarm()  # the WebSocket has its own limits (the guard's session caps and reaper, pings)
        self.registry.remove(self)
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.registry.remove(self)
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self.waiting_since = time.monotonic()
        self._deadline = self.loop.call_later(self.registry.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        self.waiting_since, self.kept_alive = None, False
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete
                                                or self.conn.their_state is h11.SEND_BODY):
            self._refuse(408, f"request not received within {self.registry.header_timeout:g} s "
                         "(raise --header-timeout)")

    def _refuse(self, status: int, reason: str) -> None:
        """Answer ``status`` (when no answer has begun) and close the connection."""
        logger.warning("%s a connection from %s: %s", "refused" if status == 503 else "closed", self.address, reason)
        self._disarm()
        self.registry.remove(self)
        if self.cycle is None or self.cycle.response_complete:
            phrase = {408: b"Request Timeout", 503: b"Service Unavailable"}[status]
            body = reason.encode()
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: text/plain\r\nconnection: close\r\n"
                                 b"content-length: %d\r\n\r\n%s" % (status, phrase, len(body), body))
        self.transport.close()


def _config(app: FastAPI, host: str, port: int, drain_timeout: float, log_level: str, **options: Any) -> uvicorn.Config:
    """uvicorn's settings for an app from :func:`make_app`: its frame cap, its limits on
    connections and their timeouts (see :class:`Limits`)."""
    limits: Limits = app.state.limits
    connections = _Connections(limits, app.state.hub.worlds)
    protocol = functools.partial(_GuardedH11Protocol, connections=connections)
    # no limit_concurrency: uvicorn's would answer 503 to any request while its count, global,
    # is at the cap, whoever filled it; the protocol's caps above are per address.
    # X-Forwarded-For only from the proxies named: uvicorn's default believes it from 127.0.0.1, so
    # any local process could claim to be any number of clients and take every per-client share
    proxies = limits.forwarded_allow_ips
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, ws_max_size=_frame_cap(app),
                          timeout_graceful_shutdown=drain_timeout, http=protocol,  # type: ignore[arg-type]
                          timeout_keep_alive=limits.keep_alive_timeout,
                          proxy_headers=proxies is not None, forwarded_allow_ips=proxies or "",
                          h11_max_incomplete_event_size=16 * 1024, **options)


class _DrainingServer(uvicorn.Server):
    """uvicorn, except that shutting down first lets every call in flight get its answer."""

    def __init__(self, config: uvicorn.Config, monitor: GuardMonitor, drain_timeout: float) -> None:
        super().__init__(config)
        self.monitor, self.drain_timeout = monitor, drain_timeout

    async def shutdown(self, sockets: Any = None) -> None:
        finished = await self.monitor.drain(self.drain_timeout)
        logger.info("drained: %s", "every call in flight was answered" if finished else
                    f"calls still in flight after {self.drain_timeout:g} s")
        await super().shutdown(sockets)


def freeze_heap() -> None:
    """Exempt everything alive now (the imported modules, the app, the worlds) from Python's
    cyclic garbage collector, for a server process about to start serving.

    OpenEnv's imports (FastAPI, pydantic, gradio) leave a heap of hundreds of thousands of
    objects that every full collection walks again; a step makes enough short-lived objects
    to trigger collections often. Freezing it made 256 sessions run 25% more steps/s
    (3.5k to 4.3k). Only the process's own server calls this: in a process that goes on
    to do other work, frozen objects that become garbage would never be collected.
    """
    gc.collect()
    gc.freeze()


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, *, drain_timeout: float = 10.0,
          log_level: str = "info") -> None:
    """Run ``app`` (from :func:`make_app`) until SIGINT/SIGTERM, then shut down gracefully."""
    freeze_heap()
    limits: Limits = app.state.limits
    if not _is_loopback(host) and limits.api_key is None:
        logger.warning("serving on %s without an API key: anyone who can reach it can use it", host)
    config = _config(app, host, port, drain_timeout, log_level, ws_ping_interval=20.0, ws_ping_timeout=20.0)
    server = _DrainingServer(config, app.state.guard, drain_timeout)
    try:
        asyncio.run(server.serve())
    except KeyboardInterrupt:
        # uvicorn re-raises the SIGINT it caught once the server has drained and stopped,
        # as a process stopped by it should: here that is a clean exit, not a traceback
        pass


@contextlib.contextmanager
def running(app: FastAPI, host: str = "127.0.0.1", port: int = 0, *, drain_timeout: float = 10.0,
            log_level: str = "warning") -> Iterator[str]:
    """Run ``app`` on a background thread (a real server on a real socket) while the block
    runs, and yield its base URL (``port=0`` picks a free port); shut it down gracefully after.

        with running(make_app("foraging")) as url:
            with GenericEnvClient(base_url=url).sync() as env: ...
    """
    config = _config(app, host, port, drain_timeout, log_level)
    server = app.state.server = _DrainingServer(config, app.state.guard, drain_timeout)
    thread = threading.Thread(target=server.run, name="arena-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()
    address = f"[{bound[0]}]" if ":" in bound[0] else bound[0]  # an IPv6 address in a URL is bracketed
    try:
        yield f"http://{address}:{bound[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=drain_timeout + 10)


def _frame_cap(app: FastAPI) -> int:
    """The HTTP server's own frame limit: well above the guard's, which answers politely."""
    return max(MAX_FRAME_BYTES, 2 * app.state.limits.max_message_bytes)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def hub_of(app: FastAPI) -> SessionHub:
    """The :class:`SessionHub` behind an app from :func:`make_app`."""
    return app.state.hub
