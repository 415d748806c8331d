"""The guard at the edges of its limits, on the real server and real clients: a frame exactly
as long as the limit, what a draining server answers each kind of new work, and how long a
session that acted once and then only asks lives before it is reaped."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import requests
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from arena_envs.serve import Limits, make_app
from arena_envs.serve.app import running


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


def call(ws, message: dict | str) -> dict:
    ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def step_of_length(size: int) -> str:
    """A step frame exactly ``size`` characters long (its message padded)."""
    head, tail = '{"type": "step", "data": {"message": "', '"}}'
    return head + "x" * (size - len(head) - len(tail)) + tail


def test_a_frame_exactly_as_long_as_the_limit_is_taken_and_one_byte_more_is_refused():
    with running(make_app("foraging", max_sessions=2, limits=Limits(max_message_bytes=1024))) as url, \
            connect(ws_url(url)) as ws:
        call(ws, {"type": "reset", "data": {"seed": 1}})
        answer = call(ws, step_of_length(1024))
        assert answer["type"] == "observation", answer
        assert answer["data"]["observation"]["observation"]["tick"] == 1
        answer = call(ws, step_of_length(1025))
        assert answer == {"type": "error", "data": {"message": "message over 1024 bytes (raise --max-message-bytes)",
                                                    "code": "MESSAGE_TOO_LARGE"}}


def test_a_draining_server_tells_new_requests_sockets_and_frames_it_is_shutting_down():
    """While a step is still in flight at shutdown, new work of every kind is refused, each in
    its own way, and the step in flight still gets its answer."""
    app = make_app("foraging", max_sessions=4)
    hub, original = app.state.hub, app.state.hub._step

    async def slow_step(session, action):  # still running while the refusals below are made
        await asyncio.sleep(3)
        return await original(session, action)

    with running(app, drain_timeout=15) as url, connect(ws_url(url)) as busy, connect(ws_url(url)) as idle:
        call(busy, {"type": "reset", "data": {"seed": 0}})
        call(idle, {"type": "reset", "data": {"seed": 0}})
        hub._step = slow_step
        busy.send(json.dumps({"type": "step", "data": {"tool": "idle"}}))
        time.sleep(0.2)
        app.state.server.should_exit = True
        deadline = time.monotonic() + 2
        while requests.get(url + "/health", timeout=10).status_code == 200:  # until the drain starts
            assert time.monotonic() < deadline, "the server never started draining"
            time.sleep(0.02)
        refused = requests.get(url + "/health", timeout=10)
        assert refused.status_code == 503 and refused.json() == {"detail": "the server is shutting down"}
        with pytest.raises(InvalidStatus) as handshake:
            connect(ws_url(url))
        assert handshake.value.response.status_code == 503
        assert json.loads(handshake.value.response.body) == {"detail": "the server is shutting down",
                                                              "code": "SHUTTING_DOWN"}
        assert call(idle, {"type": "state"}) == {
            "type": "error", "data": {"message": "the server is shutting down; no new calls", "code": "SHUTTING_DOWN"}}
        answer = json.loads(busy.recv(timeout=15))
        assert answer["type"] == "observation" and answer["data"]["observation"]["observation"]["tick"] == 1


def test_after_one_step_answered_asking_frames_never_keep_a_session_alive():
    """The answer to a reset or step makes the session live again, and nothing else does: a
    session that reset once and then asked for its state at 0.6 of the idle timeout is reaped
    one idle timeout after the reset's answer, not after that state's answer."""
    idle_timeout = 2.0
    app = make_app("foraging", max_sessions=2, limits=Limits(idle_timeout=idle_timeout))
    with running(app) as url, connect(ws_url(url)) as ws:
        call(ws, {"type": "reset", "data": {"seed": 0}})
        answered = time.monotonic()
        time.sleep(0.6 * idle_timeout)
        assert call(ws, {"type": "state"})["type"] == "state"
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                ws.recv(timeout=10)
        reaped = time.monotonic() - answered
    assert closed.value.rcvd.code == 4408
    # the reaper looks every idle_timeout / 4: reaped by 1.25 idle timeouts (1.6 had the state kept it alive)
    assert idle_timeout < reaped < 1.5 * idle_timeout, f"reaped {reaped:.2f} s after the reset's answer"


def test_an_unused_http_session_is_closed_at_most_a_quarter_of_its_ttl_late():
    ttl = 1.0
    with running(make_app("foraging", max_sessions=2, limits=Limits(http_session_ttl=ttl))) as url, \
            connect(ws_url(url)):
        time.sleep(0.1)  # the reaper runs since the socket came: its looks are not timed on the session's birth
        made = time.monotonic()
        created = requests.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create",
                                                    "params": {}}, timeout=10)
        assert "result" in created.json()
        while requests.get(url + "/stats", timeout=10).json()["expired"] == 0:
            assert time.monotonic() - made < 10, "the unused session never expired"
            time.sleep(0.02)
        late = time.monotonic() - made - ttl
    # looked at every ttl / 4: 0.25 s late at most (a look every second would make it about 0.9 s late)
    assert 0 < late < 0.6, f"closed {late:.2f} s after its ttl"


@pytest.mark.parametrize("frame, read", [
    ('{"type":"error","data":{"code":"CAPACITY_REACHED","message":"full"}}', ("CAPACITY_REACHED", "full")),
    ('{"type":"error","data":{}}', ("ERROR", "")),
    ('{"type":"error"}', None),  # no data: not one to report, and no KeyError out of the send path
    ('{"type":"error","data":[1]}', None),
    ('{"type":"error",', None),
    ('{"type":"observation","data":{}}', None),
    (None, None),
])
def test_an_error_frame_is_read_or_left_alone_never_raised_on(frame, read):
    """The guard reads the code and message of the app's error frames, to say them when the app then
    closes the socket: a frame it cannot read is passed on as it is."""
    from arena_envs.serve.guard import _sent_error

    assert _sent_error(frame) == read
