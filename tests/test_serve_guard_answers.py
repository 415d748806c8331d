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
            sock.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
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
        assert json.loads(body[:length])["code"] == "UNAUTHORIZED"
