"""What the guard's refusals look like on the wire, to a client that reads them: a JSON-RPC error
answers its request by the request's id, every refusal is JSON with its length and its headers
(a 401 names the scheme), a refused handshake's body is exactly as long as it says."""

from __future__ import annotations

import json
import socket

import requests

from arena_envs.serve import Limits, make_app
from arena_envs.serve.app import running


def test_a_refused_json_rpc_request_is_answered_by_its_own_id_with_a_json_rpc_error():
    with running(make_app("foraging", max_sessions=2, limits=Limits(http_sessions_per_client=1))) as url:
        def create(request_id):
            return requests.post(url + "/mcp", json={"jsonrpc": "2.0", "id": request_id,
                                                     "method": "openenv/session/create", "params": {}}, timeout=30)

        assert "result" in create(1).json()
        refused = create("req-7")
        answer = refused.json()
        assert refused.status_code == 429 and refused.headers["content-type"] == "application/json"
        assert answer["jsonrpc"] == "2.0" and answer["id"] == "req-7"
        assert answer["error"]["code"] == -32000 and "per client" in answer["error"]["message"]
        assert int(refused.headers["content-length"]) == len(refused.content)


def test_a_request_without_the_key_gets_a_401_naming_the_bearer_scheme_in_json():
    with running(make_app("foraging", max_sessions=2, limits=Limits(api_key="s3cret"))) as url:
        refused = requests.get(url + "/health", timeout=30)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        assert refused.headers["content-type"] == "application/json"
        assert refused.json() == {"detail": "missing or wrong API key (send 'Authorization: Bearer KEY')"}
        assert requests.get(url + "/health", headers={"Authorization": "Bearer s3cret"}, timeout=30).ok


def test_a_refused_handshake_answers_with_a_json_body_of_the_length_it_announces():
    with running(make_app("foraging", max_sessions=2, limits=Limits(api_key="s3cret"))) as url:
        host, port = url.split("//")[1].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            raw = b""
            while b"\r\n\r\n" not in raw:
                raw += sock.recv(4096)
            head, _, body = raw.partition(b"\r\n\r\n")
            headers = dict(line.split(": ", 1) for line in head.decode().lower().split("\r\n")[1:])
            assert head.startswith(b"HTTP/1.1 401") and "chunked" not in headers.get("transfer-encoding", "")
            length = int(headers["content-length"])
            while len(body) < length:
                body += sock.recv(4096)
        assert json.loads(body[:length]) == {"detail": "missing or wrong API key (send 'Authorization: Bearer KEY')",
                                             "code": "UNAUTHORIZED"}


def test_over_the_http_rate_a_client_gets_429_saying_the_rate():
    with running(make_app("foraging", max_sessions=2, limits=Limits(http_rate=1.0, http_burst=2))) as url:
        answers = [requests.get(url + "/health", timeout=30) for _ in range(4)]
        assert [a.status_code for a in answers[:2]] == [200, 200]
        assert answers[-1].status_code == 429
        assert answers[-1].json() == {"detail": "rate limit: at most 1 requests a second per client address "
                                                "(raise --http-rate)"}


def test_a_chunked_body_over_the_size_limit_is_refused_with_413_before_the_app_sees_it():
    limits = Limits(max_message_bytes=1024)
    with running(make_app("foraging", max_sessions=2, limits=limits)) as url:
        chunks = (b"x" * 600 for _ in range(3))  # no content-length: chunked, 1,800 bytes in all
        refused = requests.post(url + "/mcp", data=chunks, timeout=30)
        assert refused.status_code == 413 and refused.json() == {  # at a JSON-RPC door: a JSON-RPC error
            "jsonrpc": "2.0", "id": None,
            "error": {"code": -32000, "message": "request body over 1024 bytes (raise --max-message-bytes)"}}


def test_an_http_session_closed_over_http_is_forgotten_at_once_and_the_guards_stats_name_their_keys():
    with running(make_app("foraging", max_sessions=2)) as url:
        def rpc(method, **params):
            return requests.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                                 timeout=30).json()

        made = rpc("openenv/session/create")["result"]["session_id"]
        assert requests.get(url + "/stats", timeout=30).json()["http_sessions"] == 1
        assert rpc("openenv/session/close", session_id=made)["result"]["closed"]
        stats = requests.get(url + "/stats", timeout=30).json()
        assert stats["http_sessions"] == 0  # forgotten when closed, not when it would have expired
        assert {"connections", "reclaimed", "http_sessions", "expired", "in_flight", "draining"} <= set(stats)
        assert stats["in_flight"] == 1 and stats["draining"] is False  # the /stats request itself


def test_a_frame_that_is_no_object_or_holds_an_uppercase_lone_surrogate_escape_is_told_why():
    from websockets.sync.client import connect

    with running(make_app("foraging", max_sessions=2)) as url, connect(url.replace("http", "ws") + "/ws") as ws:
        for text, why in (("[1, 2]", 'expected a JSON object such as {"type": "step", "data": {...}}'),
                          ('{"type": "step", "data": {"message": "\\uD800"}}', "a string holds a lone surrogate")):
            ws.send(text)
            answer = json.loads(ws.recv(timeout=30))
            assert answer["type"] == "error" and answer["data"]["code"] == "INVALID_JSON"
            assert answer["data"]["message"].startswith(why), answer
        ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "observation"  # the session lives on


def test_a_bad_cap_is_refused_when_the_limits_are_made_naming_it():
    import pytest

    for name in ("max_connections", "sessions_per_client", "connections_per_client", "half_open_per_client"):
        with pytest.raises(ValueError, match=rf"^{name} must be a positive integer or None, got 0$"):
            Limits(**{name: 0})
