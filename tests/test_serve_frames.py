"""Every malformed WebSocket frame gets an error reply and the session lives on (issue 34, item 9):
the real server on 127.0.0.1 and a real client.

``{"type": ["step"]}`` ended its sender's session on 0408f98: the guard passed it to OpenEnv
and a list is no frame type OpenEnv can take.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from arena_envs.serve import make_app
from arena_envs.serve.app import running

FRAME_TYPES = ("reset", "step", "state", "mcp")  # "close" ends a session: it is the one frame that may
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) |
                    st.text(max_size=20) | st.just("\ud800"),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
FRAMES = st.fixed_dictionaries({"type": JSON.filter(lambda kind: kind != "close") | st.sampled_from(FRAME_TYPES)},
                               optional={"data": JSON})


def call(ws, message: dict) -> dict:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=30))


@pytest.fixture(scope="module")
def server():
    with running(make_app("foraging", max_sessions=2)) as url:
        yield url.replace("http://", "ws://") + "/ws"


@pytest.mark.parametrize("kind", [["step"], ["reset"], {"step": 1}, 5, 1.5, True, None, []])
def test_a_frame_whose_type_is_not_a_string_gets_an_error_and_the_session_goes_on(server, kind):
    with connect(server) as ws:
        assert call(ws, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        answer = call(ws, {"type": kind, "data": {"tool": "idle"}})
        assert answer["type"] == "error" and answer["data"]["code"] == "VALIDATION_ERROR", answer
        assert '"type" must be a string' in answer["data"]["message"]
        step = call(ws, {"type": "step", "data": {"tool": "idle"}})  # the same episode, one tick on
        assert step["data"]["observation"]["observation"]["tick"] == 1


@settings(max_examples=int(os.environ.get("ARENA_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(frames=st.lists(FRAMES, min_size=1, max_size=6))
@example(frames=[{"type": ["step"]}, {"type": {"type": "step"}}, {"type": "step", "data": ["idle"]}])
@example(frames=[{"type": "reset", "data": {"seed": "\ud800"}}, {"type": "mcp", "data": {"method": ["x"]}}])
def test_any_json_frame_gets_one_answer_and_the_session_lives_on(server, frames):
    """Frames of every shape (``type`` and ``data`` any JSON): each gets one answer, and the
    session still answers after them all."""
    with connect(server) as ws:
        for frame in frames:
            answer = call(ws, frame)
            assert answer["type"] in ("observation", "state", "error", "mcp"), answer
            if answer["type"] == "error":
                assert answer["data"]["code"] and answer["data"]["message"], answer
        assert call(ws, {"type": "reset", "data": {"seed": 0}})["type"] == "observation"
        assert call(ws, {"type": "step", "data": {"tool": "idle"}})["data"]["observation"]["observation"]["tick"] == 1
