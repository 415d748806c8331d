"""arena-serve's connection caps and world reservations, exactly (issue 43's audit: mutants of
``serve/app.py`` that the tests let live). The real server on 127.0.0.1, clients on other loopback
addresses.

* An address is let in ``connections_per_client`` times, not one fewer (the cap at ``>=`` lived: no
  test checked that every one of them was served).
* Past ``max_connections``, when the address holding the most connections waiting is the newcomer's
  own, the newcomer is refused and its address's connections are kept (dropping that check lived).
* Sessions made over HTTP have worlds of their own at each door, beside the spare worlds for OpenEnv's
  stateless ``/reset`` (halving or removing that reservation lived: the spares absorbed it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket

import httpx
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from websockets.sync.client import connect

from arena_envs.serve import Limits, make_app
from arena_envs.serve.app import running
from arena_envs.serve.hubs import make_hub
from arena_envs.serve.mcp_http import PATH
from arena_envs.serve.sessions import HTTP_WORLDS, SessionError

HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def dial(url: str, address: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10,
                                    source_address=(address, 0))


def answer(sock: socket.socket) -> bytes:
    """One whole answer read from ``sock``: its head, and its body (as long as its Content-Length says)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)[1])
    while len(body) < length:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


def status(sock: socket.socket) -> bytes:
    """The status line of the answer to a /health request on ``sock`` (kept alive after it)."""
    sock.sendall(HEALTH)
    return answer(sock).split(b"\r\n", 1)[0]


def test_an_address_is_let_in_exactly_connections_per_client_times():
    limits = Limits(connections_per_client=5, half_open_per_client=100)
    with running(make_app("foraging", max_sessions=2, limits=limits)) as url, contextlib.ExitStack() as stack:
        held = [stack.enter_context(dial(url, "127.0.0.2")) for _ in range(5)]
        assert [status(sock) for sock in held] == [b"HTTP/1.1 200 OK"] * 5  # every one of them served
        with dial(url, "127.0.0.2") as sixth:
            refused = answer(sixth)
        assert refused.startswith(b"HTTP/1.1 503") and b"(at most 5; raise --connections-per-client)" in refused
        assert [status(sock) for sock in held] == [b"HTTP/1.1 200 OK"] * 5  # and still are


def test_a_full_server_refuses_the_newcomer_whose_own_address_holds_the_most():
    """Four connections waiting, all from one address, at --max-connections 4: a fifth from that address is
    refused and its four are kept; one from another address makes room by closing that address's
    longest-waiting connection."""
    limits = Limits(max_connections=4, connections_per_client=10, half_open_per_client=100)
    with running(make_app("foraging", max_sessions=2, limits=limits)) as url, contextlib.ExitStack() as stack:
        mine = [stack.enter_context(dial(url, "127.0.0.2")) for _ in range(4)]
        assert [status(sock) for sock in mine] == [b"HTTP/1.1 200 OK"] * 4  # waiting again, kept alive
        with dial(url, "127.0.0.2") as fifth:
            refused = answer(fifth)
        assert refused.startswith(b"HTTP/1.1 503") and b"too many connections (at most 4; raise --max-connections)" \
            in refused
        assert [status(sock) for sock in mine] == [b"HTTP/1.1 200 OK"] * 4
        with dial(url, "127.0.0.3") as other:
            assert status(other) == b"HTTP/1.1 200 OK"
        closed = answer(mine[0])  # the longest waiting of the address holding the most
        assert closed.startswith(b"HTTP/1.1 503") and b"the server is full" in closed
        assert [status(sock) for sock in mine[1:]] == [b"HTTP/1.1 200 OK"] * 3


def test_each_http_door_has_worlds_of_its_own_and_the_stateless_spares_stay_free():
    """Every door full at once (the WebSocket sessions, OpenEnv's /mcp sessions, MCP sessions at
    /mcp/http, each playing its own world): every spare world for stateless /reset is still free."""
    limits = Limits(http_rate=10_000, http_burst=10_000, max_http_sessions=2, http_sessions_per_client=2,
                    sessions_per_client=2)
    app = make_app("foraging", max_sessions=2, limits=limits)

    def reset(ws, seed: int) -> str:
        ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
        return json.loads(ws.recv(timeout=30))["type"]

    async def fill(url: str) -> dict:
        ws_url = url.replace("http://", "ws://") + "/ws"
        async with contextlib.AsyncExitStack() as stack:
            mcps = [await stack.enter_async_context(Client(StreamableHttpTransport(f"{url}{PATH}?seed={seed}"),
                                                           timeout=30)) for seed in (1, 2)]
            for mcp in mcps:
                assert not (await mcp.call_tool("idle", {})).is_error
            with contextlib.ExitStack() as sockets:
                for seed in (3, 4):  # OpenEnv's /mcp sessions, each reset through a socket attached to it
                    made = httpx.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1,
                                                          "method": "openenv/session/create"}).json()
                    held = sockets.enter_context(connect(f"{ws_url}?session_id={made['result']['session_id']}"))
                    assert reset(held, seed) == "observation"
                for seed in (5, 6):
                    assert reset(sockets.enter_context(connect(ws_url)), seed) == "observation"
                stats = httpx.get(url + "/stats").json()
                assert httpx.post(url + "/reset", json={"seed": 7}).status_code == 200  # a spare, taken and given
                return stats

    with running(app) as url:
        stats = asyncio.run(fill(url))
    assert stats["sessions"] == 6 and stats["free_worlds"] == HTTP_WORLDS, stats


@pytest.mark.parametrize("scenario", ["foraging", "treasure_hunt", "team_capture"])
def test_a_hub_out_of_worlds_refuses_the_next_session_naming_the_flag_that_adds_worlds(scenario):
    """Every world of a hub taken (the WebSocket sessions' and the stateless spares'), one more session's reset
    is refused, saying which flag gives the server more worlds; a world given back is taken again."""
    hub = make_hub(scenario, 1)

    async def fill() -> None:
        sessions = [hub.factory()() for _ in range(hub.worlds + 1)]
        try:
            for seed, session in enumerate(sessions[:-1]):
                await session.reset_async(seed=seed)
            with pytest.raises(SessionError, match=r"the server is full .*\(raise --max-sessions\)$"):
                await sessions[-1].reset_async(seed=99)
            sessions[0].close()
            await asyncio.sleep(0.05)  # its world is freed on the loop
            assert not (await sessions[-1].reset_async(seed=99)).done
        finally:
            for session in sessions:
                session.close()
            await hub.aclose()

    asyncio.run(fill())
