"""arena-serve counts each client once, whatever door it uses and whatever it claims to be (issue 43,
items 6-8 and 13): the real server on 127.0.0.1, clients on other loopback addresses (127.0.0.2, ...),
IPv6 clients in a network namespace of their own (real addresses of one /64 and of another).

On 9bc1767 one address held every MCP session at /mcp/http and any client could call in or DELETE
another's session; any local process took every per-client share by sending ``X-Forwarded-For``; an
IPv6 client took every share with addresses of its own /64; and a refusal did not say which flag
raises the cap it met.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import sys
import textwrap
import time

import httpx
import pytest
import requests
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from process_helpers import free_port, wait_until_answered
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from arena_envs.serve import Limits, make_app
from arena_envs.serve.app import hub_of, running
from arena_envs.serve.cli import parser
from arena_envs.serve.clients import client_key
from arena_envs.serve.mcp_http import PATH

FAST = {"http_rate": 10_000.0, "http_burst": 10_000}  # no rate limit in the way of what is tested
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def dial(url: str, address: str) -> socket.socket:
    """A TCP connection to the server at ``url`` from the loopback ``address``."""
    return socket.create_connection(("127.0.0.1", port_of(url)), timeout=10, source_address=(address, 0))


def websocket(url: str, address: str = "127.0.0.1", host: str | None = None, **options):
    """A WebSocket session opened from ``address`` (its ``Host`` header naming ``host``, if given)."""
    named = url if host is None else f"http://{host}:{port_of(url)}"
    return connect(named.replace("http://", "ws://") + "/ws", sock=dial(url, address), **options)


def call(ws, message: dict) -> dict:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def opened(ws) -> str:
    """``observation`` for a session that is let in, else its refusal's code."""
    try:
        answer = call(ws, {"type": "reset", "data": {"seed": 1}})
    except ConnectionClosed:  # refused: the error frame came before the close
        answer = json.loads(ws.recv(timeout=10))
    return answer["type"] if answer["type"] == "observation" else answer["data"]["code"]


def http(address: str) -> httpx.Client:
    """Plain HTTP requests from the loopback ``address``."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30)


def mcp_client(url: str, address: str, seed: int) -> Client:
    """fastmcp's Client, its requests (and GET stream) from ``address``."""
    def factory(**kwargs) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=address), **kwargs)

    return Client(StreamableHttpTransport(f"{url}{PATH}?seed={seed}", httpx_client_factory=factory), timeout=30)


def mcp_session(client: httpx.Client, url: str) -> dict:
    """A raw MCP session opened by ``client``: the headers that name it."""
    answer = client.post(url + PATH + "/", json=INITIALIZE, headers=ACCEPT)
    assert answer.status_code == 200, answer.text
    headers = {**ACCEPT, "Mcp-Session-Id": answer.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-06-18"}
    client.post(url + PATH + "/", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


def tool_call(name: str, **arguments) -> dict:
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


# -- item 6: /mcp/http per client, and a session its opener's --------------------------------------

def test_one_address_holds_only_its_share_of_mcp_sessions_and_another_still_gets_its_own():
    """The issue's case: one address opens MCP sessions, each holding its GET stream and a world. It gets
    its share (--http-sessions-per-client), then a 429 naming that flag; another address still opens and
    plays its sessions; the first, having ended one, opens its next at once."""
    limits = Limits(**FAST, max_http_sessions=4, http_sessions_per_client=2)
    app = make_app("treasure_hunt", max_sessions=2, limits=limits)

    async def scenario(url: str) -> None:
        async with contextlib.AsyncExitStack() as stack:
            mine = [await stack.enter_async_context(mcp_client(url, "127.0.0.2", seed)) for seed in (1, 2)]
            for mcp in mine:
                assert (await mcp.call_tool("pwd", {})).content[0].text.strip()
            async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address="127.0.0.2")) as raw:
                answer = await raw.post(f"{url}{PATH}/?seed=3", json=INITIALIZE, headers=ACCEPT)
            assert answer.status_code == 429, answer.text
            assert answer.json()["error"]["message"] == ("at most 2 MCP sessions per client address: end one of "
                                                         "yours (DELETE) first, or raise --http-sessions-per-client")
            theirs = [await stack.enter_async_context(mcp_client(url, "127.0.0.3", seed)) for seed in (4, 5)]
            for mcp in theirs:
                assert (await mcp.call_tool("pwd", {})).content[0].text.strip()
            assert hub_of(app).stats()["handles"] == 4
            await mine[0].__aexit__(None, None, None)  # DELETE: its place is free once that is answered
            async with mcp_client(url, "127.0.0.2", 6) as next_one:
                assert (await next_one.call_tool("pwd", {})).content[0].text.strip()

    with running(app) as url:
        asyncio.run(scenario(url))


def test_an_mcp_session_answers_only_the_address_that_opened_it():
    """Another client naming a session's id (seen, guessed or leaked) can neither call in it nor DELETE
    it: it is answered as for an unknown session, and the session plays on for its own client."""
    app = make_app("treasure_hunt", max_sessions=2, limits=Limits(**FAST))
    with running(app) as url, http("127.0.0.2") as owner, http("127.0.0.3") as other:
        session = mcp_session(owner, url)
        stolen = other.post(url + PATH + "/", json=tool_call("give_up"), headers=session)
        assert stolen.status_code == 404 and stolen.json()["error"]["message"] == "Session not found"
        assert other.delete(url + PATH + "/", headers=session).status_code == 404
        assert other.get(url + PATH + "/", headers=session).status_code == 404
        played = owner.post(url + PATH + "/", json=tool_call("pwd"), headers=session).json()
        assert not played["result"]["isError"] and played["result"]["structuredContent"]["info"]["turns"] == 1
        assert owner.delete(url + PATH + "/", headers=session).status_code == 200


def test_a_deleted_mcp_session_holds_its_place_until_its_world_is_closed():
    """The flaky property test's cause: the SDK forgets a session on its DELETE, before the session's server
    has wound down and closed its world. With one MCP session allowed and a world slow to close (as on a
    loaded machine), a client ending its session and another opening one at once: the hub never holds two
    MCP worlds, and the DELETE is answered once the place is free, so the newcomer is let in."""
    limits = Limits(**FAST, max_http_sessions=1, http_sessions_per_client=1)
    app = make_app("treasure_hunt", max_sessions=2, limits=limits)
    hub = hub_of(app)
    server = next(route.app for route in app.routes if getattr(route, "path", None) == PATH).manager.app
    one_world = server.lifespan

    @contextlib.asynccontextmanager
    async def slow_to_close(mcp_server):
        async with one_world(mcp_server) as world:
            yield world
            await asyncio.sleep(1.0)  # the session is over; its world not closed yet

    server.lifespan = slow_to_close

    async def scenario(url: str) -> int:
        most, stop = 0, asyncio.Event()

        async def watch() -> None:
            nonlocal most
            while not stop.is_set():
                most = max(most, hub.stats()["handles"])
                await asyncio.sleep(0.005)

        watcher = asyncio.ensure_future(watch())
        async with mcp_client(url, "127.0.0.2", 1) as first:
            await first.read_resource("arena://observation")
        async with mcp_client(url, "127.0.0.3", 2) as second:  # refused (503) if the DELETE was answered early
            assert (await second.read_resource("arena://observation"))[0].text
        stop.set()
        await watcher
        return most

    with running(app) as url:
        assert asyncio.run(scenario(url)) == 1


# -- item 7: X-Forwarded-For ---------------------------------------------------------------------

def test_x_forwarded_for_from_a_local_process_claims_nothing():
    """uvicorn believes X-Forwarded-For from 127.0.0.1 by default: there a local process named itself a new
    client for every session and every request. No proxy named: the header is ignored."""
    limits = Limits(sessions_per_client=2, http_rate=0.01, http_burst=3)
    with running(make_app("foraging", max_sessions=4, limits=limits)) as url, contextlib.ExitStack() as stack:
        codes = [opened(stack.enter_context(websocket(url, additional_headers={"X-Forwarded-For": f"10.0.0.{k}"})))
                 for k in range(3)]
        assert codes == ["observation", "observation", "TOO_MANY_SESSIONS"]
        statuses = [requests.get(url + "/health", headers={"X-Forwarded-For": f"10.1.0.{k}"}, timeout=10).status_code
                    for k in range(4)]
        assert statuses == [200, 200, 200, 429]


def test_x_forwarded_for_names_the_client_when_it_comes_from_a_named_proxy():
    """arena-serve behind a reverse proxy on this machine, as the serving-limits guide runs it
    (--forwarded-allow-ips 127.0.0.1 --allowed-hosts arena.example.org): each client the proxy forwards has
    its own share, the proxy's Host is answered, and a client that is not the proxy claims nothing."""
    port = free_port()
    command = [sys.executable, "-m", "arena_envs.serve", "foraging", "--forwarded-allow-ips", "127.0.0.1",
               "--allowed-hosts", "arena.example.org", "--port", str(port), "--max-sessions", "4",
               "--sessions-per-client", "1", "--log-level", "warning"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answered(process, url + "/health", timeout=90)
        with contextlib.ExitStack() as stack:
            def session(address: str, forwarded: str) -> str:
                headers = {"X-Forwarded-For": forwarded}
                ws = websocket(url, address, host="arena.example.org", additional_headers=headers)
                return opened(stack.enter_context(ws))

            assert [session("127.0.0.1", f"10.0.0.{k}") for k in (1, 2)] == ["observation", "observation"]
            assert session("127.0.0.1", "10.0.0.1") == "TOO_MANY_SESSIONS"  # that forwarded client has its one
            assert [session("127.0.0.3", f"10.0.0.{k}") for k in (3, 4)] == ["observation", "TOO_MANY_SESSIONS"]
    finally:
        process.kill()
        process.wait(timeout=30)


def test_a_bad_proxy_list_is_a_usage_error():
    with pytest.raises(ValueError, match="'example.org' is not an IP address or network"):
        Limits(forwarded_allow_ips="127.0.0.1, example.org")
    with pytest.raises(ValueError, match="names no proxy"):
        Limits(forwarded_allow_ips=" , ")
    assert Limits(forwarded_allow_ips=" 10.0.0.0/8 ,::1").forwarded_allow_ips == "10.0.0.0/8,::1"


# -- item 8: IPv6 clients by /64 -------------------------------------------------------------------

def test_an_ipv6_client_is_its_64_network_and_ipv4_is_its_address():
    same = {client_key(a) for a in ("2001:db8:0:1::1", "2001:db8:0:1:ffff:ffff:ffff:fffe", "2001:DB8:0:1::2%eth0")}
    assert same == {"2001:db8:0:1::/64"}
    assert client_key("2001:db8:0:2::1") == "2001:db8:0:2::/64"  # the next /64: another client
    assert client_key("2001:db8:0:1::1", 48) == client_key("2001:db8:0:2::1", 48) == "2001:db8::/48"
    assert client_key("2001:db8:0:1::1", 128) != client_key("2001:db8:0:1::2", 128)
    assert client_key("::ffff:203.0.113.7") == client_key("203.0.113.7") == "203.0.113.7"
    assert client_key("127.0.0.2") != client_key("127.0.0.3")
    assert client_key("?") == "?"  # not an IP address (a Unix socket's peer): as given
    with pytest.raises(ValueError, match="ipv6_prefix must be an integer from 1 to 128"):
        Limits(ipv6_prefix=129)


IPV6_CLIENTS = textwrap.dedent("""
    import contextlib, json, socket, sys
    import httpx
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect
    from arena_envs.serve import Limits, make_app
    from arena_envs.serve.app import running

    def dial(port, address):
        return socket.create_connection(("fd00::1", port), timeout=10, source_address=(address, 0))

    def session(url, port, address, stack):
        ws = stack.enter_context(connect(url.replace("http://", "ws://") + "/ws", sock=dial(port, address)))
        try:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            answer = json.loads(ws.recv(timeout=30))
        except ConnectionClosed:  # refused: the error frame came before the close
            answer = json.loads(ws.recv(timeout=10))
        return answer["type"] if answer["type"] == "observation" else answer["data"]["code"]

    def mcp(url, address):
        client = httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30)
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
        answer = client.post(url + "/mcp/http/", json=init,
                             headers={"Accept": "application/json, text/event-stream"})
        return answer.status_code, answer.json().get("error", {}).get("message", "")

    def held(port, address):
        sock = dial(port, address)
        sock.sendall(b"GET /health HTTP/1.1\\r\\nHost: [fd00::1]\\r\\n\\r\\n")
        return sock, sock.recv(4096).split(b"\\r\\n")[0].decode()

    results = {}
    for prefix in (64, 128):
        limits = Limits(ipv6_prefix=prefix, sessions_per_client=1, http_sessions_per_client=1,
                        connections_per_client=2, http_rate=10000, http_burst=10000)
        with running(make_app("foraging", max_sessions=4, limits=limits), host="fd00::1") as url:
            port = int(url.rsplit(":", 1)[1])
            clients = ("fd00::2", "fd00::3", "fd00:0:0:1::2")  # two of one /64, one of the next
            with contextlib.ExitStack() as stack:
                results[f"ws/{prefix}"] = [session(url, port, a, stack) for a in clients]
            results[f"mcp/{prefix}"] = [mcp(url, a) for a in clients]
            socks = [held(port, a) for a in ("fd00::2", "fd00::3")]  # kept alive: two connections of one /64
            third = held(port, "fd00::4")
            results[f"connections/{prefix}"] = [status for _, status in socks + [third]]
            for sock, _ in socks + [third]:
                sock.close()
    print(json.dumps(results))
""")


def test_ipv6_clients_of_one_64_share_every_per_client_cap():
    """Real IPv6 clients, in a user and network namespace of their own (its loopback given fd00::1-4 and
    fd00:0:0:1::2): addresses of one /64 share the WebSocket, MCP and connection caps, another /64 has its
    own; with --ipv6-prefix 128 each address is a client."""
    setup = ("ip link set lo up && for a in fd00::1 fd00::2 fd00::3 fd00::4 fd00:0:0:1::2; do "
             "ip -6 addr add $a/64 dev lo nodad || exit 3; done && exec \"$0\" -c \"$1\"")
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--net", "sh", "-c", setup, sys.executable,
                           IPV6_CLIENTS], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["ws/64"] == ["observation", "TOO_MANY_SESSIONS", "observation"]
    assert results["ws/128"] == ["observation", "observation", "observation"]
    refused = "at most 1 MCP sessions per client address: end one of yours (DELETE) first, or raise " \
              "--http-sessions-per-client"
    assert results["mcp/64"] == [[200, ""], [429, refused], [200, ""]]
    assert results["mcp/128"] == [[200, ""], [200, ""], [200, ""]]
    assert results["connections/64"] == ["HTTP/1.1 200 OK", "HTTP/1.1 200 OK", "HTTP/1.1 503 Service Unavailable"]
    assert results["connections/128"] == ["HTTP/1.1 200 OK"] * 3


# -- item 13: every refusal names the flag that raises its cap ----------------------------------------

def refusals() -> dict[str, str]:
    """Each cap met on a real server, by the flag that should raise it: the message its client got."""
    got: dict[str, str] = {}
    limits = Limits(http_rate=10_000, http_burst=10_000, sessions_per_client=1, http_sessions_per_client=1,
                    max_http_sessions=2, max_message_bytes=1024, ws_rate=1.0, ws_burst=3)
    with running(make_app("foraging", max_sessions=2, limits=limits)) as url, contextlib.ExitStack() as stack:
        first = stack.enter_context(websocket(url, "127.0.0.2"))
        assert opened(first) == "observation"
        with websocket(url, "127.0.0.2") as second:
            got["--sessions-per-client"] = refusal_frame(second, "TOO_MANY_SESSIONS")
        assert opened(stack.enter_context(websocket(url, "127.0.0.3"))) == "observation"
        with websocket(url, "127.0.0.4") as third:
            got["--max-sessions"] = refusal_frame(third, "CAPACITY_REACHED")
        first.send("x" * 2000)
        got["--max-message-bytes"] = json.loads(first.recv(timeout=10))["data"]["message"]
        for _ in range(5):
            first.send(json.dumps({"type": "state"}))
        frames = [json.loads(first.recv(timeout=10)) for _ in range(5)]
        got["--ws-rate"] = next(f["data"]["message"] for f in frames if f.get("data", {}).get("code") == "RATE_LIMITED")
        create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
        with http("127.0.0.5") as five, http("127.0.0.6") as six, http("127.0.0.7") as seven:
            assert "result" in five.post(url + "/mcp", json=create).json()
            got["--http-sessions-per-client"] = five.post(url + "/mcp", json=create).json()["error"]["message"]
            assert "result" in six.post(url + "/mcp", json=create).json()
            got["--max-http-sessions"] = seven.post(url + "/mcp", json=create).json()["error"]["message"]
            mcp_session(five, url)
            got["--http-sessions-per-client (MCP)"] = five.post(url + PATH + "/", json=INITIALIZE,
                                                                headers=ACCEPT).json()["error"]["message"]
            mcp_session(six, url)
            got["--max-http-sessions (MCP)"] = seven.post(url + PATH + "/", json=INITIALIZE,
                                                          headers=ACCEPT).json()["error"]["message"]
            got["--max-message-bytes (HTTP)"] = seven.post(url + "/reset", content=b"x" * 2000).json()["detail"]
            got["--allowed-hosts"] = seven.get(url + "/health", headers={"Host": "rebound.example"}).text
            got["--allowed-origins"] = seven.get(url + "/health", headers={"Origin": "http://evil.example"}).text
    with running(make_app("foraging", max_sessions=2, limits=Limits(http_rate=1.0, http_burst=1))) as url:
        with http("127.0.0.2") as client:
            client.get(url + "/health")
            got["--http-rate"] = client.get(url + "/health").json()["detail"]
    limits = Limits(idle_timeout=0.5, max_connections=4, connections_per_client=3, half_open_per_client=1,
                    header_timeout=4.0)
    with running(make_app("foraging", max_sessions=2, limits=limits)) as url:
        with websocket(url, "127.0.0.2") as idle:
            assert opened(idle) == "observation"
            got["--idle-timeout"] = json.loads(idle.recv(timeout=10))["data"]["message"]
        with dial(url, "127.0.0.3") as slow:
            got["--header-timeout"] = slow.recv(4096).decode()
        with contextlib.ExitStack() as held:
            for _ in range(3):
                held.enter_context(dial(url, "127.0.0.3"))
            with dial(url, "127.0.0.3") as fourth:
                got["--connections-per-client"] = fourth.recv(4096).decode()
        with dial(url, "127.0.0.4"):
            time.sleep(2.5)  # half-open now (over 2 s without a request), and 1.5 s before its header timeout
            with dial(url, "127.0.0.4") as more:
                got["--half-open-per-client"] = more.recv(4096).decode()
        with contextlib.ExitStack() as held:
            for address in ("127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.7"):
                held.enter_context(dial(url, address))
            time.sleep(0.2)
            with dial(url, "127.0.0.7") as fifth:  # its own address holds the most waiting: the newcomer is refused
                got["--max-connections"] = fifth.recv(4096).decode()
    return got


def refusal_frame(ws, code: str) -> str:
    try:
        answer = call(ws, {"type": "reset", "data": {"seed": 0}})
    except ConnectionClosed:
        answer = json.loads(ws.recv(timeout=10))
    assert answer["data"]["code"] == code, answer
    return answer["data"]["message"]


def test_every_refusal_names_the_flag_that_raises_its_cap():
    """The issue's case (a trainer's 49th session told "at most 48 sessions per client address" and not
    how to raise it), for every cap: each refusal's message names the arena-serve flag that raises it,
    and that flag exists."""
    got = refusals()
    flags = {option for action in parser()._actions for option in action.option_strings}
    for expected, message in got.items():
        named = re.findall(r"--[a-z0-9-]+", message)
        assert named and named[-1] == expected.split(" ")[0], (expected, message)
        assert named[-1] in flags, named
    assert len(got) == 17
