"""Property tests of ``/mcp/http``'s session table under random interleavings of real MCP clients.

One real server on 127.0.0.1 (at most :data:`CAP` MCP sessions, unused ones expiring after :data:`TTL` s) for each
of Treasure Hunt (a world per session) and Foraging (the sessions' worlds in one batch, stepped together). Each
example is a program: a few clients, each driven by fastmcp's ``Client`` from a loopback address of its own
(127.0.0.2, 127.0.0.3, ...: httpx binds the source address), play sessions one after another: open one
(``?seed=N``), call tools, read ``arena://observation``, pause for longer than the TTL, and end it by ``DELETE``
(leaving the ``async with``) or by going away without one (the client's link cut: the session then expires). The
clients run at once (``asyncio.gather``) with random sleeps between their steps. Checked after every program,
against when each client asked and was answered (one clock: the server runs on a thread of this process):

* an open is refused (503) only if :data:`CAP` sessions may have been open meanwhile, and admitted only if fewer
  than :data:`CAP` certainly were; the hub never holds more than :data:`CAP` MCP sessions at once;
* each session's answers are those of its seed's world played in-process with its own calls alone;
* then every world is freed (the server's ``/stats``), and a fresh client gets exactly :data:`CAP` sessions
  at once, one more being refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import httpx
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

import arena_envs  # noqa: F401
from arena_envs.serve import Limits, make_app
from arena_envs.serve.app import hub_of, running
from arena_envs.serve.mcp_http import PATH
from arena_envs.serve.sessions import SCENARIOS, render
from arena_envs.tools import ToolPool

CAP = 3
# seconds: a session with no request in flight for this long is closed. It must outlast the gaps in which a
# connected client has none: the MCP client opens its GET stream only after the handshake (over a second
# later, seen on a loaded 2-core machine) and reopens a dropped one a second later. At 0.3 s those gaps
# expired sessions still in use ("Session terminated" mid-play, a 500 for a call in flight).
TTL = 3.0
TICK = 0.02  # seconds: the unit of the random sleeps
ANSWER_S = 20.0  # seconds a request may wait for its answer: a request left unanswered fails, never hangs
CALLS = {  # a bad call costs a tick; give_up ends the episode
    "treasure_hunt": [("pwd", {}), ("ls", {}), ("cat", {"file": "start.txt"}), ("cd", {"path": ".."}),
                      ("cd", {"path": "nowhere"}), ("give_up", {})],
    "foraging": [("idle", {}), ("query_world", {"radius": 30.0}), ("collect", {"target_name": "Nothing7"}),
                 ("move_to", {"target_x": 4.0, "target_y": 0.0, "target_z": -3.0, "speed": 1.0}),
                 ("query_world", {"radius": 80.0, "filter_type": "resource"}), ("query_inventory", {})],
}

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
ACCEPT = {"Accept": "application/json, text/event-stream"}

step = st.tuples(st.sampled_from(["call", "call", "call", "read", "read", "pause"]),
                 st.integers(0, 5), st.integers(0, 3))  # what, which call, sleep before (ticks)
ENDINGS = ["delete", "delete", "abandon", "delete mid-call", "abandon mid-call"]  # abandon: no DELETE, link cut
session = st.tuples(st.integers(0, 3), st.lists(step, max_size=4), st.sampled_from(ENDINGS),
                    st.integers(0, 3))  # seed, steps, how it ends, sleep before opening (ticks)
programs = st.lists(st.lists(session, min_size=1, max_size=2), min_size=2, max_size=5)  # a client's sessions


@pytest.fixture(scope="module", params=list(CALLS))
def server(request):
    """A server of Treasure Hunt (a world per session) or of Foraging (the sessions' worlds in one batch,
    stepped together)."""
    limits = Limits(http_rate=10_000, http_burst=10_000, max_http_sessions=CAP, http_sessions_per_client=CAP,
                    http_session_ttl=TTL)
    app = make_app(request.param, max_sessions=2, limits=limits)
    with running(app) as base:
        yield base, app, request.param


class Link(httpx.AsyncHTTPTransport):
    """One client's network: requests leave from its own loopback address; :meth:`cut` ends it (open
    streams closed, every later request failing), as when a client goes away without a ``DELETE``."""

    def __init__(self, address: str) -> None:
        super().__init__(local_address=address)
        self.is_cut = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.is_cut:
            raise httpx.ConnectError("the client went away")
        return await super().handle_async_request(request)

    async def cut(self) -> None:
        self.is_cut = True
        await self.aclose()

    def client(self, **kwargs: Any) -> httpx.AsyncClient:  # fastmcp's httpx_client_factory
        return httpx.AsyncClient(transport=self, **kwargs)


@dataclass
class Span:
    """One session as its client saw it: when it asked, was answered, ended; what it was told."""

    seed: int
    asked: float
    opened: float | None = None  # None: refused
    last_sent: float = 0.0  # its last request sent: left without a DELETE, it expires no sooner than TTL after
    ending: float = math.inf  # DELETE about to be sent, or link cut
    ended: float = math.inf  # DELETE (or the refusal) answered; inf: when it expires is unknown
    how: str = ""  # "deleted"; "abandoned" (link cut); "unsure" (the client failed on its way out: DELETE or not)
    seen: list[tuple] = field(default_factory=list)  # ("read", text) or ("call", name, args, answer...)

    def certainly_open(self, start: float, end: float) -> bool:
        """Open on the server throughout [start, end]."""
        if self.opened is None or self.opened >= start:
            return False
        expires = self.last_sent + TTL
        return {"deleted": self.ending, "abandoned": expires, "unsure": min(self.ending, expires)}[self.how] > end

    def maybe_open(self, start: float, end: float) -> bool:
        """Open on the server at some instant of [start, end]."""
        return self.opened is not None and self.asked < end and self.ended > start


async def play(url: str, address: str, plan: tuple, calls: list[tuple], spans: list[Span]) -> None:
    seed, steps, ending, wait = plan
    await asyncio.sleep(wait * TICK)
    link = Link(address)
    mcp = Client(StreamableHttpTransport(f"{url}?seed={seed}", httpx_client_factory=link.client), timeout=ANSWER_S)
    span = Span(seed, asked=time.monotonic())
    span.last_sent = span.asked
    spans.append(span)
    call = None
    try:
        async with mcp:
            span.opened = time.monotonic()
            for what, which, pause in steps:
                await asyncio.sleep(pause * TICK)
                if what == "pause":  # longer than the TTL: the client's open stream holds the session
                    await asyncio.sleep(TTL + 1.0)
                    continue
                span.last_sent = time.monotonic()
                if what == "read":
                    span.seen.append(("read", (await mcp.read_resource("arena://observation"))[0].text))
                else:
                    name, arguments = calls[which]
                    result = await mcp.call_tool(name, arguments, raise_on_error=False)
                    data = result.structured_content or {}
                    span.seen.append(("call", name, arguments, result.content[0].text, data.get("reward"),
                                      data.get("done")))
            if ending.endswith("mid-call"):  # the session ends with a call in flight (its first: a reset)
                span.last_sent = time.monotonic()
                call = asyncio.ensure_future(mcp.call_tool(*calls[1]))
                await asyncio.sleep(TICK / 2)
            span.ending = time.monotonic()
            span.how = "abandoned" if ending.startswith("abandon") else "unsure"
            if span.how == "abandoned":
                await link.cut()
        span.how = "deleted" if span.how == "unsure" else span.how
    except Exception as error:
        if span.opened is None:  # refused: the server is full (its body's message: see fresh_clients_fill_it)
            assert isinstance(error, httpx.HTTPStatusError) and error.response.status_code == 503, error
        elif not span.how:  # a request of an open session failed
            raise
        # else the client's own failure on its way out, its link cut or a call in flight (mcp 1.30's client:
        # the call's answer reaching a stream it has closed, or a 500 for the call its DELETE cut short; then
        # it may not have sent its DELETE: measured). What the server did is checked after the program.
    finally:
        if call is not None:  # its answer, if any, is not waited for
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await call
    if span.how in ("deleted", ""):
        span.ended = time.monotonic()


async def run(url: str, program: list[list[tuple]], calls: list[tuple], hub: Any) -> tuple[list[Span], int]:
    spans: list[Span] = []
    most = 0
    stop = threading.Event()

    async def watch() -> None:  # the hub's MCP session handles, sampled at every loop turn
        nonlocal most
        while not stop.is_set():
            most = max(most, hub.stats()["handles"])
            await asyncio.sleep(0.002)

    async def client(number: int, plans: list[tuple]) -> None:
        for plan in plans:
            await play(url, f"127.0.0.{2 + number}", plan, calls, spans)

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.gather(*(client(number, plans) for number, plans in enumerate(program)))
    finally:
        stop.set()
        await watcher
    return spans, most


def check_cap(spans: list[Span]) -> None:
    for span in spans:
        answered = span.opened if span.opened is not None else span.ended
        others = [other for other in spans if other is not span]
        if span.opened is None:
            maybe = sum(other.maybe_open(span.asked, answered) for other in others)
            assert maybe >= CAP, f"refused with at most {maybe} of {CAP} sessions open"
        else:
            certain = sum(other.certainly_open(span.asked, answered) for other in others)
            assert certain < CAP, f"a session admitted while {certain} of {CAP} were open"


async def check_own_world(span: Span, scenario: str) -> None:
    """``span``'s answers are those of its seed's world with its own calls alone, played in-process by what
    the server wraps: Treasure Hunt's env, or a Foraging pool of one world rendered as the server renders."""
    if scenario == "treasure_hunt":
        env = gym.make(SCENARIOS[scenario])
        text, done = env.reset(seed=span.seed)[0], False

        async def step(name: str, arguments: dict) -> tuple:
            text, reward, terminated, truncated, _ = env.step({"tool": name, **arguments})
            return text, reward, terminated or truncated
    else:
        pool = ToolPool(SCENARIOS[scenario], size=1, render=render)
        text, done = render(await pool.acquire("alone", seed=span.seed)).text, False

        async def step(name: str, arguments: dict) -> tuple:
            answer = await pool.call({"tool": name, "params": arguments}, id="alone")
            return answer.observation.text, answer.reward, answer.terminated or answer.truncated
    for seen in span.seen:
        if seen[0] == "read":
            assert seen[1] == text, "the observation read is not the world's last"
            continue
        _, name, arguments, served, reward, served_done = seen
        if done:
            assert "the episode is over" in served and reward is None, served
            continue
        text, local_reward, done = await step(name, arguments)
        assert (served, reward, served_done) == (text, local_reward, done), f"{name} {arguments}"


async def freed(base: str) -> dict[str, Any]:
    """The server's /stats once every MCP session and world is freed (abandoned ones expire)."""
    async with httpx.AsyncClient(base_url=base) as http:
        deadline = time.monotonic() + TTL + 10  # well past the expiry, on a loaded machine too
        while True:
            stats = (await http.get("/stats")).json()
            if (stats["handles"], stats["sessions"]) == (0, 0) or time.monotonic() > deadline:
                return stats
            await asyncio.sleep(0.05)


async def fresh_clients_fill_it(url: str, call: tuple) -> list[Any]:
    """CAP fresh clients at once each play a call; one more meanwhile is refused, and told why."""
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client(f"{url}?seed={seed}", timeout=ANSWER_S))
                   for seed in range(CAP)]
        answers = await asyncio.gather(*(mcp.call_tool(*call) for mcp in clients))
        with pytest.raises(httpx.HTTPStatusError, match="503"):
            async with Client(url):
                pass
        async with httpx.AsyncClient() as http:
            refused = await http.post(url + "/", json=INITIALIZE, headers=ACCEPT)
        assert refused.status_code == 503 and refused.json()["error"]["message"] == (
            f"the server holds its {CAP} MCP sessions; try again later (raise --max-http-sessions)")
    return answers


# no shrinking: it would replay real-server programs for minutes; the failing program is printed as found
@settings(max_examples=10, deadline=None, derandomize=True, database=None, phases=(Phase.explicit, Phase.generate))
@given(program=programs)
# CAP clients holding their sessions over a pause while a fourth asks (refused), then asks again after a DELETE
@example(program=[[(1, [("pause", 0, 0)], "delete", 0)], [(2, [("pause", 0, 0), ("call", 2, 0)], "delete", 0)],
                  [(1, [("call", 1, 0), ("pause", 0, 0)], "abandon", 0)],
                  [(3, [], "delete", 3), (3, [("read", 0, 0), ("call", 0, 0)], "delete", 0)]])
def test_the_session_table_under_random_interleavings(server, program):
    base, app, scenario = server
    url = base + PATH
    assert asyncio.run(freed(base))["sessions"] == 0  # none left by an example that failed
    spans, most = asyncio.run(run(url, program, CALLS[scenario], hub_of(app)))
    assert most <= CAP, f"the hub held {most} MCP sessions at once"
    check_cap(spans)
    for span in spans:
        asyncio.run(check_own_world(span, scenario))
    stats = asyncio.run(freed(base))
    assert (stats["handles"], stats["sessions"]) == (0, 0), f"sessions left after the program: {stats}"
    answers = asyncio.run(fresh_clients_fill_it(url, CALLS[scenario][0]))
    assert len(answers) == CAP and not any(answer.is_error or answer.data["done"] for answer in answers)
    assert asyncio.run(freed(base))["sessions"] == 0
