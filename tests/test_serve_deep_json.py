"""Deeply nested JSON at arena-serve (issue 43, item 11): the real server on 127.0.0.1.

On 9bc1767 a WebSocket frame whose ``tool_calls`` nested 300 lists deep closed its sender's session with
1011 (pydantic could not write the answer), and an /mcp/http body nested 990 deep was answered HTTP 500
with a full traceback in the log for every request: a log flood for the price of a 2 KB request.
"""

from __future__ import annotations

import json
import logging

import pytest
import requests
from websockets.sync.client import connect

from arena_envs.serve import Limits, make_app
from arena_envs.serve.app import running
from arena_envs.serve.clients import MAX_JSON_DEPTH
from arena_envs.serve.mcp_http import PATH

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
TOO_DEEP = f"JSON nested deeper than {MAX_JSON_DEPTH} levels (objects and lists): send a flatter value"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def call_with(arguments: str, id: int = 2) -> str:
    """A tools/call of ``pwd`` whose arguments hold ``arguments`` (raw JSON text)."""
    params = f'{{"name":"pwd","arguments":{{"a":{arguments}}}}}'
    return f'{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}'


@pytest.fixture(scope="module")
def server():
    with running(make_app("treasure_hunt", max_sessions=2, limits=Limits(http_rate=10_000, http_burst=10_000))) as url:
        yield url


def test_a_deeply_nested_mcp_body_is_a_clear_json_rpc_error_with_no_traceback(server, caplog):
    caplog.set_level(logging.INFO)
    url = server + PATH + "/"
    opened = requests.post(url, json=INITIALIZE, headers=ACCEPT, timeout=10)
    session = {**ACCEPT, "Mcp-Session-Id": opened.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-06-18"}
    requests.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session, timeout=10)
    for _ in range(20):  # the flood: each of these logged a whole traceback
        answer = requests.post(url, data=call_with(nested(990)), headers=session, timeout=10)
        assert answer.status_code == 400
        assert answer.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": TOO_DEEP}}
    answer = requests.post(url, data=call_with(nested(MAX_JSON_DEPTH), id=7), headers=session, timeout=10)
    assert answer.status_code == 400 and answer.json()["id"] == 7  # readable: its id is answered
    fresh = requests.post(url, data=call_with(nested(990)), headers=ACCEPT, timeout=10)  # no session yet
    assert fresh.status_code == 400 and "mcp-session-id" not in fresh.headers
    rpc = requests.post(server + "/mcp", data=nested(990), headers={"Content-Type": "application/json"}, timeout=10)
    assert rpc.status_code == 400 and rpc.json()["error"]["message"] == TOO_DEEP  # OpenEnv's JSON-RPC door too
    played = requests.post(url, data=call_with(nested(MAX_JSON_DEPTH - 3)), headers=session, timeout=10).json()
    assert played["result"]["structuredContent"]["info"]["turns"] == 1, played  # the session went on
    requests.delete(url, headers=session, timeout=10)
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not logged, [r.getMessage() for r in logged][:3]


def test_a_frame_nesting_tool_calls_300_lists_deep_gets_an_error_and_the_session_goes_on(server):
    with connect(server.replace("http://", "ws://") + "/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "observation"
        for depth in (300, 990, MAX_JSON_DEPTH - 2):  # the last within the bound: the app's own error
            ws.send(f'{{"type":"step","data":{{"message":"x","tool_calls":{nested(depth)}}}}}')
            answer = json.loads(ws.recv(timeout=30))
            assert answer["type"] == "error", answer
            if depth > MAX_JSON_DEPTH:
                assert answer["data"] == {"message": TOO_DEEP, "code": "INVALID_JSON"}
        ws.send(json.dumps({"type": "step", "data": {"tool": "pwd"}}))
        answer = json.loads(ws.recv(timeout=30))
        assert answer["type"] == "observation" and answer["data"]["observation"]["info"]["turns"] == 1
