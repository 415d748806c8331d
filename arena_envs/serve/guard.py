"""The limits a public server needs, as one ASGI middleware in front of OpenEnv's app.

* API key (optional) on every route, HTTP and WebSocket: ``Authorization: Bearer KEY`` or
  ``X-API-Key: KEY``, compared in constant time.
* Who may come in (:mod:`.clients`): a ``Host`` that is not the address the connection reached
  (nor ``localhost`` on loopback, nor one of ``allowed_hosts``) is refused (421), and so is a
  browser's ``Origin`` that is not the server's own nor one of ``allowed_origins`` (403; a
  WebSocket at its handshake). Per-client caps count an IPv6 client by its ``/ipv6_prefix``.
* Request size: HTTP bodies and WebSocket frames above ``max_message_bytes`` are refused
  (413, or an error frame; the session goes on); so is JSON nested deeper than
  :data:`~.clients.MAX_JSON_DEPTH` (400 with a JSON-RPC error at ``/mcp`` and ``/mcp/http``,
  an error frame on a WebSocket).
* Rate: HTTP requests per client address, WebSocket frames per connection (token buckets);
  over the limit gets 429 or an error frame.
* Malformed frames (binary, not JSON, nested too deeply, not an object, a ``type`` that is
  not a string) get an error frame and never reach the app, so the session goes on.
* WebSocket sessions of their own (not attached to an HTTP-made one): at most
  ``max_sessions`` in all and ``sessions_per_client`` per client address. One more is
  accepted, told why in an error frame (``CAPACITY_REACHED``, ``TOO_MANY_SESSIONS``) and
  closed with code 1013 and the reason. Every close the server makes carries a code and a
  reason: an app that ends a session after an error frame without a code of its own closes
  with 1011 (1013 at capacity) and that error's message; a refusal at the handshake is an
  HTTP answer whose JSON body says why.
* Idle WebSocket sessions are closed (code 4408, with the reason) after ``idle_timeout``
  seconds without a ``reset`` or ``step``: liveness is what the session does, so a client
  sending only ``state`` frames is idle. OpenEnv then closes the session's environment,
  which frees its world. This reaper is the only one (OpenEnv's own is left off), so a
  session's world is never freed under a socket still open.
* Sessions made over HTTP (``POST /mcp`` ``openenv/session/create``) count against a
  limit per client address and one in total, have worlds of their own beyond
  ``max_sessions`` (so they never take the worlds WebSocket clients need), and are closed after ``http_session_ttl``
  seconds without a call naming them unless a WebSocket is attached to them
  (``/ws?session_id=...``, allowed only for a session made over HTTP by the same address;
  any other id is refused: every other WebSocket is its own session).
* Shutdown: :meth:`Guard.drain` refuses new work and waits until every frame received has
  been answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .clients import client_key, host_refusal, origin_refusal, parsed_json

IDLE_CLOSE_CODE = 4408
"""WebSocket close code of a session reclaimed for idleness (no reset or step for ``idle_timeout`` s)."""
TRY_LATER_CLOSE_CODE = 1013
"""WebSocket close code of a session refused for capacity (the server's, or the client address's share)."""
ERROR_CLOSE_CODE = 1011
"""WebSocket close code of a session the app ended after an error frame."""
LIVE_FRAMES = frozenset(("reset", "step"))
"""The frames that keep a WebSocket session alive: what it does, not what it asks."""


@dataclass
class Limits:
    """The server's limits (see the module docstring). ``None`` turns a limit off."""

    api_key: str | None = None
    max_message_bytes: int = 64 * 1024
    http_rate: float | None = 100.0  # requests per second per client address
    http_burst: int = 200
    ws_rate: float | None = 1000.0  # frames per second per connection
    ws_burst: int = 2000
    idle_timeout: float | None = 300.0  # seconds without a reset or step before a session is closed
    http_sessions_per_client: int = 2  # sessions made over HTTP (/mcp openenv/session/create) per address
    max_http_sessions: int = 16  # sessions made over HTTP, all addresses together
    http_session_ttl: float = 30.0  # seconds an HTTP-made session lives without a call naming it or a socket
    header_timeout: float = 10.0  # seconds a connection has to send a request's headers and body
    keep_alive_timeout: float = 5.0  # seconds an HTTP connection may wait, idle, for its next request
    max_connections: int | None = None  # open connections at most (None: 2 per world, plus 64)
    sessions_per_client: int | None = None  # WebSocket sessions per address (None: 3/4 of max_sessions, at least 1)
    connections_per_client: int | None = None  # HTTP connections per address (None: half of max_connections)
    half_open_per_client: int = 8  # connections per address waiting over SLOW_REQUEST_S s for a request
    ipv6_prefix: int = 64  # an IPv6 client is its /ipv6_prefix network for every per-client cap (128: each address)
    forwarded_allow_ips: str | None = None  # proxies whose X-Forwarded-For is believed (None: no proxy, ignored)
    allowed_hosts: tuple[str, ...] = ()  # Host names accepted besides the address reached ("*": any)
    allowed_origins: tuple[str, ...] = ()  # browser origins accepted besides the server's own ("*": any)

    def __post_init__(self) -> None:
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key must not be empty (leave it out to serve without a key)")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be at least 1024, got {self.max_message_bytes}")
        for name in ("http_rate", "ws_rate", "idle_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive or None, got {value}")
        for name in ("http_sessions_per_client", "max_http_sessions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        for name in ("http_session_ttl", "header_timeout", "keep_alive_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("max_connections", "sessions_per_client", "connections_per_client", "half_open_per_client"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        if self.half_open_per_client is None:
            raise ValueError("half_open_per_client must be a positive integer, got None")
        if isinstance(self.ipv6_prefix, bool) or not isinstance(self.ipv6_prefix, int) \
                or not 1 <= self.ipv6_prefix <= 128:
            raise ValueError(f"ipv6_prefix must be an integer from 1 to 128, got {self.ipv6_prefix!r}")
        if self.forwarded_allow_ips is not None:
            self.forwarded_allow_ips = _proxies(self.forwarded_allow_ips)
        self.allowed_hosts = tuple(_names(self.allowed_hosts, "allowed_hosts", lambda name: name.lower().rstrip(".")))
        self.allowed_origins = tuple(_names(self.allowed_origins, "allowed_origins", _origin))

    def client_sessions(self, max_sessions: int) -> int:
        """WebSocket sessions one client address may hold at a server of ``max_sessions``."""
        return self.sessions_per_client or max(1, max_sessions * 3 // 4)


class _Bucket:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` saved up."""

    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst, self.tokens, self.stamp = rate, burst, float(burst), time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass(eq=False)
class _Connection:
    send: Any
    bucket: _Bucket | None
    client: str = "?"
    own: bool = True  # a session of its own (not attached to one made over HTTP)
    last_active: float = field(default_factory=time.monotonic)  # the last reset or step, asked or answered
    waiting: int = 0  # frames passed to the app and not answered yet
    live: int = 0  # resets and steps among them
    closed: bool = False
    asked_close: bool = False  # the client sent a "close" frame: the app's plain close answers it
    last_error: tuple[str, str] | None = None  # (code, message) of the last error frame the app sent


@dataclass(eq=False)
class _HttpSession:
    """A session made over HTTP: who made it (the client as caps count it, and its address), when it was
    last named, whether a socket holds it."""

    client: str
    address: str
    last_active: float = field(default_factory=time.monotonic)
    attached: bool = False


def _error_frame(message: str, code: str) -> dict[str, Any]:
    text = json.dumps({"type": "error", "data": {"message": message, "code": code}})
    return {"type": "websocket.send", "text": text}


def _close(code: int, reason: str) -> dict[str, Any]:
    """A close frame with ``reason`` cut to the 123 bytes a close frame can carry."""
    return {"type": "websocket.close", "code": code,
            "reason": reason.encode()[:123].decode("utf-8", errors="ignore")}


_ERROR_PREFIX = '{"type":"error"'
"""How OpenEnv's error frames begin (pydantic's compact JSON): only those are read on the way out."""


def _sent_error(text: str | None) -> tuple[str, str] | None:
    """(code, message) of an error frame the app sends, None for any other frame."""
    if text is None or not text.startswith(_ERROR_PREFIX):
        return None
    with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):  # not an error frame we can read
        data = json.loads(text)["data"]
        return str(data.get("code") or "ERROR"), str(data.get("message") or "")
    return None


class Guard:
    """ASGI middleware applying :class:`Limits` (install with ``app.add_middleware(Guard, limits=...)``)."""

    def __init__(self, app: Any, limits: Limits, monitor: GuardMonitor | None = None) -> None:
        self.app, self.limits = app, limits
        self.monitor = monitor or GuardMonitor()
        self.monitor.limits, self.monitor.app = limits, app
        self._key = limits.api_key.encode() if limits.api_key else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def _client(self, scope: dict) -> str:
        """The client as per-client caps count it (:func:`~.clients.client_key`)."""
        return client_key(_address(scope), self.limits.ipv6_prefix)

    def _foreign(self, scope: dict) -> tuple[int, str, str] | None:
        """Why a request is refused for its ``Host`` or ``Origin`` (status, message, code), or None."""
        headers = dict(scope.get("headers") or ())
        host = headers.get(b"host")
        host = None if host is None else host.decode("latin-1")
        local = (scope.get("server") or (None, None))[0]
        refusal = host_refusal(host, local, self.limits.allowed_hosts)
        if refusal is not None:
            return 421, refusal, "FOREIGN_HOST"
        origin = headers.get(b"origin")
        refusal = origin_refusal(None if origin is None else origin.decode("latin-1"), host,
                                 self.limits.allowed_origins)
        return None if refusal is None else (403, refusal, "FOREIGN_ORIGIN")

    def _authorized(self, scope: dict) -> bool:
        if self._key is None:
            return True
        headers = dict(scope.get("headers") or ())
        given = headers.get(b"x-api-key")
        if given is None:
            scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
            given = token.strip() if scheme.lower() == b"bearer" else b""
        return hmac.compare_digest(given, self._key)

    # -- HTTP ----------------------------------------------------------------------------

    async def _http(self, scope: dict, receive: Any, send: Any) -> None:
        monitor, limits = self.monitor, self.limits
        path = scope.get("path") or ""
        rpc_door = path == "/mcp" or path.startswith("/mcp/http")  # refusals there are JSON-RPC errors
        if monitor.draining:
            return await _respond(send, 503, "the server is shutting down", rpc=rpc_door)
        foreign = self._foreign(scope)
        if foreign is not None:
            return await _respond(send, foreign[0], foreign[1], rpc=rpc_door)
        if not self._authorized(scope):
            return await _respond(send, 401, "missing or wrong API key (send 'Authorization: Bearer KEY')",
                                  {"www-authenticate": "Bearer"}, rpc=rpc_door)
        client = self._client(scope)
        if limits.http_rate is not None:
            if len(monitor.http_buckets) > 10_000:  # forget addresses not seen lately
                monitor.http_buckets.clear()
            bucket = monitor.http_buckets.get(client)
            if bucket is None:
                bucket = monitor.http_buckets[client] = _Bucket(limits.http_rate, limits.http_burst)
            if not bucket.take():
                return await _respond(send, 429, f"rate limit: at most {limits.http_rate:g} requests a second per "
                                      "client address (raise --http-rate)", rpc=rpc_door)
        headers = dict(scope.get("headers") or ())
        declared = headers.get(b"content-length")
        too_large = f"request body over {limits.max_message_bytes} bytes (raise --max-message-bytes)"
        if declared is not None and (not declared.isdigit() or int(declared) > limits.max_message_bytes):
            return await _respond(send, 413, too_large, rpc=rpc_door)
        body, more = b"", True
        while more:  # read it all (it is small) so an over-long chunked body is refused before the app runs
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > limits.max_message_bytes:
                return await _respond(send, 413, too_large, rpc=rpc_door)
        value = None
        if body.lstrip()[:1] in (b"{", b"["):  # JSON: its nesting is bounded before any parser recurses
            try:
                value, too_deep = parsed_json(body)
            except ValueError:  # not JSON: the app answers it in its own words
                value, too_deep = None, None
            if too_deep is not None:
                rpc_id = value.get("id") if isinstance(value, dict) else None
                return await _respond(send, 400, too_deep, rpc=rpc_door, rpc_id=rpc_id, code=-32600)
        if path == "/mcp" and scope.get("method") == "POST" \
                and not headers.get(b"content-type", b"").lower().startswith(b"application/json"):
            # a page's text/plain POST is a "simple" request, sent without asking: JSON-RPC here is JSON only
            return await _respond(send, 415, "send JSON-RPC as Content-Type: application/json", rpc=True)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        rpc = value if path == "/mcp" and isinstance(value, dict) else None
        if rpc is not None:
            refusal = monitor.http_session_refusal(rpc, client)
            if refusal is not None:
                return await _respond(send, 429, refusal, rpc=True, rpc_id=rpc.get("id"))
            send = monitor.http_session_watch(rpc, client, _address(scope), send)
        monitor.http_in_flight += 1
        try:
            await self.app(scope, replay, send)
        finally:
            monitor.http_in_flight -= 1

    # -- WebSocket -----------------------------------------------------------------------

    async def _websocket(self, scope: dict, receive: Any, send: Any) -> None:
        monitor, client = self.monitor, self._client(scope)
        if monitor.draining:
            return await _refuse_handshake(send, 503, "the server is shutting down", "SHUTTING_DOWN")
        foreign = self._foreign(scope)
        if foreign is not None:  # a browser's page on another site (or name) opens no session
            return await _refuse_handshake(send, *foreign)
        if not self._authorized(scope):
            return await _refuse_handshake(send, 401, "missing or wrong API key (send 'Authorization: Bearer KEY')",
                                           "UNAUTHORIZED")
        asked = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_id")
        held = None
        if asked is not None:
            # OpenEnv could attach this socket to any session by id: here only to one this
            # address made over HTTP and no socket holds
            held = monitor.http_sessions.get(asked[0]) if len(asked) == 1 else None
            if held is None or held.attached or held.address != _address(scope):
                return await _refuse_handshake(send, 403, "no session of that id that this client may attach to "
                                               "(one made over HTTP from this address, not attached)", "FORBIDDEN")
            held.attached = True
        else:
            refusal = monitor.session_refusal(client)
            if refusal is not None:  # accepted to be told why: the client reads it as an error frame
                await send({"type": "websocket.accept"})
                await send(_error_frame(*refusal))
                return await send(_close(TRY_LATER_CLOSE_CODE, f"{refusal[1]}: {refusal[0]}"))
        limits = self.limits
        bucket = _Bucket(limits.ws_rate, limits.ws_burst) if limits.ws_rate is not None else None
        connection = _Connection(send, bucket, client, own=held is None)
        monitor.connections.add(connection)
        monitor.start_reaper()

        async def guarded_receive() -> dict:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    if message["type"] == "websocket.disconnect":  # gone: its place is free (see session_refusal)
                        connection.closed = True
                    return message
                problem, kind = self._frame_problem(message, connection)
                if problem is None:
                    connection.waiting += 1
                    if kind in LIVE_FRAMES:
                        connection.live += 1
                        connection.last_active = time.monotonic()
                    elif kind == "close":
                        connection.asked_close = True
                    return message
                if not connection.closed:
                    await send(_error_frame(*problem))

        async def guarded_send(message: dict) -> None:
            if message["type"] == "websocket.send":
                connection.waiting = max(0, connection.waiting - 1)
                if connection.live:  # frames are answered in order: this answers a reset or step
                    connection.live -= 1
                    connection.last_active = time.monotonic()
                if connection.closed:  # reclaimed: the client was told and the socket is closing
                    return
                connection.last_error = _sent_error(message.get("text")) or connection.last_error
            elif message["type"] == "websocket.close":
                if connection.closed:
                    return
                connection.closed = True
                if message.get("code", 1000) == 1000 and not connection.asked_close and connection.last_error:
                    # the app ends the session after an error without saying so: say it
                    code, why = connection.last_error
                    message = _close(TRY_LATER_CLOSE_CODE if code == "CAPACITY_REACHED" else ERROR_CLOSE_CODE,
                                     f"{code}: {why}")
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        finally:
            connection.closed = True
            monitor.connections.discard(connection)
            if held is not None:  # the HTTP session lives on, for http_session_ttl from now
                held.attached, held.last_active = False, time.monotonic()

    def _frame_problem(self, message: dict, connection: _Connection) -> tuple[tuple[str, str] | None, Any]:
        """Why a frame is refused (message, code), or None to pass it to the app; and its type."""
        if self.monitor.draining:
            return ("the server is shutting down; no new calls", "SHUTTING_DOWN"), None
        if connection.bucket is not None and not connection.bucket.take():
            return (f"rate limit: at most {self.limits.ws_rate:g} messages a second per session (raise --ws-rate)",
                    "RATE_LIMITED"), None
        text = message.get("text")
        if text is None:
            return ("binary frames are not accepted: send JSON text", "INVALID_JSON"), None
        if len(text) > self.limits.max_message_bytes:
            return (f"message over {self.limits.max_message_bytes} bytes (raise --max-message-bytes)",
                    "MESSAGE_TOO_LARGE"), None
        # read here too: OpenEnv ends the session on JSON it cannot take (too deep, not an object)
        try:
            frame, too_deep = parsed_json(text)
        except ValueError as err:
            return (f"invalid JSON: {str(err)[:200]}", "INVALID_JSON"), None
        if too_deep is not None:
            return (too_deep, "INVALID_JSON"), None
        if not isinstance(frame, dict):
            return ('expected a JSON object such as {"type": "step", "data": {...}}', "INVALID_JSON"), None
        if ("\\ud" in text or "\\uD" in text) and _lone_surrogate(frame):  # OpenEnv cannot answer it
            return ("a string holds a lone surrogate (an escape \\ud800-\\udfff not in a pair): not Unicode",
                    "INVALID_JSON"), None
        kind = frame.get("type")
        if not isinstance(kind, str):  # OpenEnv would end the session on it
            return (f'"type" must be a string (reset, step, state, close or mcp), got {json.dumps(kind)[:100]}',
                    "VALIDATION_ERROR"), None
        return None, kind


class GuardMonitor:
    """The guard's live state: connections, HTTP-made sessions, buckets, draining (one per server)."""

    def __init__(self, max_sessions: int | None = None) -> None:
        self.limits = Limits()
        self.max_sessions = max_sessions  # WebSocket sessions of their own at most (None: the app's own cap)
        self.app: Any = None  # the app behind the guard, which closes expired HTTP sessions
        self.connections: set[_Connection] = set()
        self.http_sessions: dict[str, _HttpSession] = {}
        self.http_buckets: dict[str, _Bucket] = {}
        self.http_in_flight = 0
        self.draining = False
        self.reclaimed = 0
        self.expired = 0
        self._reaper: asyncio.Task | None = None

    # -- WebSocket sessions --------------------------------------------------------------

    def session_refusal(self, client: str) -> tuple[str, str] | None:
        """Why ``client`` may not open a WebSocket session of its own now: (message, code), or None."""
        if self.max_sessions is None:
            return None
        # a socket whose client has gone counts no more, though OpenEnv may still be closing its
        # session: a client closing one session and opening the next at once is not refused
        own = [connection.client for connection in self.connections if connection.own and not connection.closed]
        if len(own) >= self.max_sessions:
            return (f"the server holds its {self.max_sessions} sessions; try again later (raise --max-sessions)",
                    "CAPACITY_REACHED")
        share = self.limits.client_sessions(self.max_sessions)
        if own.count(client) >= share:
            return (f"at most {share} sessions per client address (of {self.max_sessions}): close one of yours "
                    "first, or raise --sessions-per-client", "TOO_MANY_SESSIONS")
        return None

    # -- sessions made over HTTP ---------------------------------------------------------

    def http_session_refusal(self, rpc: dict[str, Any], client: str) -> str | None:
        """Why this JSON-RPC request may not make a session (None: it may, or makes none)."""
        if rpc.get("method") != "openenv/session/create":
            return None
        limits, mine = self.limits, sum(held.client == client for held in self.http_sessions.values())
        if mine >= limits.http_sessions_per_client:
            return (f"at most {limits.http_sessions_per_client} sessions made over HTTP per client: close one "
                    f"(openenv/session/close), let it expire ({limits.http_session_ttl:g} s unused), "
                    "open a WebSocket at /ws, which is a session of its own, or raise --http-sessions-per-client")
        if len(self.http_sessions) >= limits.max_http_sessions:
            return (f"the server holds its {limits.max_http_sessions} sessions made over HTTP; "
                    "open a WebSocket at /ws, or try again later (raise --max-http-sessions)")
        return None

    def http_session_watch(self, rpc: dict[str, Any], client: str, address: str, send: Any) -> Any:
        """``send`` for the app answering ``rpc``: notes a session it names (as used now),
        makes (read from the answer) or closes."""
        method, params = rpc.get("method"), rpc.get("params")
        named = params.get("session_id") if isinstance(params, dict) else None
        if isinstance(named, str) and named in self.http_sessions:
            self.http_sessions[named].last_active = time.monotonic()
        if method not in ("openenv/session/create", "openenv/session/close"):
            return send
        chunks: list[bytes] = []

        async def watching_send(message: dict) -> None:
            if message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    result = (_rpc(b"".join(chunks)) or {}).get("result")
                    if isinstance(result, dict) and isinstance(result.get("session_id"), str):
                        if method == "openenv/session/create":
                            self.http_sessions[result["session_id"]] = _HttpSession(client, address)
                            self.start_reaper()
                        elif result.get("closed"):
                            self.http_sessions.pop(result["session_id"], None)
            await send(message)

        return watching_send

    async def _expire(self, session_id: str) -> None:
        """Close an HTTP-made session through the app's own route, as its client could."""
        self.http_sessions.pop(session_id, None)
        self.expired += 1
        request = {"jsonrpc": "2.0", "id": 0, "method": "openenv/session/close", "params": {"session_id": session_id}}
        with contextlib.suppress(Exception):  # already gone: nothing to close
            await _call_app(self.app, "/mcp", json.dumps(request).encode())

    # -- reaping -------------------------------------------------------------------------

    def start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.ensure_future(self._reap())

    async def _reap(self) -> None:
        """Close WebSocket sessions idle for longer than ``idle_timeout``, and HTTP-made ones
        unused for longer than ``http_session_ttl`` (checked often enough to be late by at
        most a quarter of either, or one second)."""
        limits = self.limits
        idle_timeout, ttl = limits.idle_timeout, limits.http_session_ttl
        while True:
            await asyncio.sleep(min(ttl / 4, 1.0, *(() if idle_timeout is None else (idle_timeout / 4,))))
            now = time.monotonic()
            for session_id, held in list(self.http_sessions.items()):
                if not held.attached and now - held.last_active > ttl:
                    await self._expire(session_id)
            if idle_timeout is None:
                continue
            for connection in list(self.connections):
                if not connection.closed and connection.waiting == 0 and now - connection.last_active > idle_timeout:
                    await self._evict(connection, f"session reclaimed after {idle_timeout:g} s without a reset or "
                                      "step (--idle-timeout)")

    async def _evict(self, connection: _Connection, reason: str) -> None:
        connection.closed = True
        self.reclaimed += 1
        try:
            await connection.send(_error_frame(reason, "SESSION_RECLAIMED"))
            await connection.send(_close(IDLE_CLOSE_CODE, reason))
        except Exception:  # the client is already gone: the app sees the disconnect itself
            pass

    async def drain(self, timeout: float = 10.0) -> bool:
        """Refuse new work, then wait up to ``timeout`` s for every call received to be
        answered. True when everything in flight finished."""
        self.draining = True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.http_in_flight == 0 and not any(c.waiting for c in self.connections):
                return True
            await asyncio.sleep(0.01)
        return False

    def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()

    def stats(self) -> dict[str, Any]:
        return {"connections": len(self.connections), "reclaimed": self.reclaimed,
                "http_sessions": len(self.http_sessions), "expired": self.expired,
                "in_flight": self.http_in_flight + sum(c.waiting for c in self.connections),
                "draining": self.draining}


def _proxies(text: str) -> str:
    """uvicorn's ``forwarded_allow_ips`` from a comma-separated list of addresses or networks ("*": any)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("forwarded_allow_ips names no proxy (leave it out when there is none)")
    for item in items:
        if item != "*":
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"forwarded_allow_ips: {item!r} is not an IP address or network") from None
    return ",".join(items)


def _names(given: Any, field: str, canonical: Any) -> list[str]:
    """The strings of ``given`` as canonical entries (blank ones left out); a bad entry is a ValueError."""
    items = [given] if isinstance(given, str) else list(given)
    if not all(isinstance(item, str) for item in items):
        raise ValueError(f"{field} must be strings, got {given!r}")
    return [canonical(item.strip()) for item in items if item.strip()]


def _origin(text: str) -> str:
    """A browser origin (``scheme://host[:port]``) as a browser sends it, or ``*``."""
    if text == "*":
        return text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") or parts.query:
        raise ValueError(f"allowed_origins: {text!r} is not an origin such as https://example.org:8443")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def _lone_surrogate(frame: dict) -> bool:
    """Whether a string in ``frame`` holds a lone surrogate (JSON can escape one; UTF-8 cannot carry it)."""
    try:
        json.dumps(frame, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    return False


def _address(scope: dict) -> str:
    """The client's own address (uvicorn's, or the one a trusted proxy forwarded)."""
    return (scope.get("client") or ("?", 0))[0]


def _rpc(body: bytes) -> dict[str, Any] | None:
    """A JSON-RPC request or answer as a dict, or None (OpenEnv answers what it cannot read)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


async def _call_app(app: Any, path: str, body: bytes) -> bytes:
    """POST ``body`` to ``path`` of the ASGI ``app``, in process; the answer's body."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "headers": [(b"content-type", b"application/json")], "client": ("guard", 0), "server": None}
    sent = False
    answer: list[bytes] = []

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # no disconnect: the app answers first
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.body":
            answer.append(message.get("body", b""))

    await app(scope, receive, send)
    return b"".join(answer)


async def _refuse_handshake(send: Any, status: int, message: str, code: str) -> None:
    """Refuse a WebSocket at its handshake with an HTTP answer whose JSON body says why
    (ASGI's ``websocket.http.response`` extension), never a bare close."""
    body = json.dumps({"detail": message, "code": code}).encode()
    await send({"type": "websocket.http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "websocket.http.response.body", "body": body})


async def _respond(send: Any, status: int, detail: str, headers: dict[str, str] | None = None, *,
                   rpc: bool = False, rpc_id: Any = None, code: int = -32000) -> None:
    """Answer with ``{"detail": ...}``, or, at a JSON-RPC endpoint (``rpc``), with a JSON-RPC error
    (``code``) answering the request ``rpc_id`` (None: one whose id is unknown)."""
    answer: dict[str, Any] = {"detail": detail}
    if rpc:
        answer = {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": detail}}
    body = json.dumps(answer).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
