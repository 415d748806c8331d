"""A browser as the attacker (issue 43, item 10): a page on another site, or on a name of the attacker's
that resolves to 127.0.0.1 (DNS rebinding), makes the browser send requests to arena-serve and arena-view.
The real servers on 127.0.0.1; the requests carry what a browser sends (``Host``, ``Origin``,
``Sec-Fetch-Site``), which nothing but a browser's own code sets.

On 9bc1767 both servers answered any ``Host``, a WebSocket from a foreign ``Origin`` was accepted, and a
``text/plain`` JSON-RPC POST from a foreign origin (a "simple" request, sent without asking) opened an
/mcp session.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading

import pytest
import requests
from process_helpers import free_port, wait_until_answered
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from arena_envs.serve import Limits, make_app
from arena_envs.serve.app import running
from arena_envs.viewer.cli import make_server
from arena_envs.viewer.demo import record_foraging
from arena_envs.viewer.episodes import Episodes

CREATE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}})
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "page", "version": "0"}}}


@pytest.fixture(scope="module")
def server():
    app = make_app("foraging", max_sessions=2, limits=Limits(allowed_hosts=("arena.example",),
                                                             allowed_origins=("https://notebook.example",)))
    with running(app) as url:
        yield url, app


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


def test_a_rebinding_page_gets_nothing_from_arena_serve(server):
    url, _ = server
    port = url.rsplit(":", 1)[1]
    rebound = requests.get(url + "/schema", headers={"Host": f"attacker.example:{port}"}, timeout=10)
    assert rebound.status_code == 421
    assert "--allowed-hosts" in rebound.json()["detail"] and "attacker.example" in rebound.json()["detail"]
    with pytest.raises(InvalidStatus) as refused:  # the socket reaches 127.0.0.1; its Host names the attacker's name
        connect(f"ws://attacker.example:{port}/ws", sock=socket.create_connection(("127.0.0.1", int(port))))
    assert refused.value.response.status_code == 421
    assert json.loads(refused.value.response.body)["code"] == "FOREIGN_HOST"
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"arena.example:{port}", "LOCALHOST"):  # its own names
        assert requests.get(url + "/health", headers={"Host": host}, timeout=10).ok, host


def test_a_websocket_from_another_sites_page_is_refused_at_the_handshake(server):
    url, _ = server
    for origin in ("http://evil.example", "null", f"http://localhost:{url.rsplit(':', 1)[1]}"):
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url(url), origin=origin)
        body = json.loads(refused.value.response.body)
        assert refused.value.response.status_code == 403 and body["code"] == "FOREIGN_ORIGIN", origin
        assert "--allowed-origins" in body["detail"]
    for origin in (url, "https://notebook.example"):  # the server's own page, and an allowed one
        with connect(ws_url(url), origin=origin) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            assert json.loads(ws.recv(timeout=30))["type"] == "observation"


def test_a_text_plain_post_from_another_sites_page_opens_no_session(server):
    url, app = server
    before = requests.get(url + "/stats", timeout=10).json()["http_sessions"]
    page = {"Content-Type": "text/plain;charset=UTF-8", "Origin": "http://evil.example"}
    answer = requests.post(url + "/mcp", data=CREATE, headers=page, timeout=10)
    assert answer.status_code == 403 and "--allowed-origins" in answer.json()["error"]["message"]
    answer = requests.post(url + "/mcp/http/", json=INITIALIZE, timeout=10,
                           headers={"Origin": "http://evil.example", "Accept": "application/json, text/event-stream"})
    assert answer.status_code == 403 and "mcp-session-id" not in answer.headers
    plain = requests.post(url + "/mcp", data=CREATE, headers={"Content-Type": "text/plain"}, timeout=10)
    assert plain.status_code == 415  # no Origin (a page's fetch with no-referrer, say): JSON-RPC is JSON only
    assert requests.get(url + "/stats", timeout=10).json()["http_sessions"] == before
    own = requests.post(url + "/mcp", data=CREATE, headers={"Content-Type": "application/json", "Origin": url},
                        timeout=10).json()  # the server's own page may
    assert "session_id" in own["result"]
    requests.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "openenv/session/close",
                                      "params": {"session_id": own["result"]["session_id"]}}, timeout=10)


def test_arena_serve_takes_more_names_and_origins_from_its_flags():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "arena_envs.serve", "foraging", "--port", str(port),
                                "--allowed-hosts", "arena.example, other.example", "--allowed-origins",
                                "https://notebook.example", "--log-level", "warning"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answered(process, url + "/health", timeout=90)
        assert requests.get(url + "/health", headers={"Host": "other.example"}, timeout=10).ok
        assert requests.get(url + "/health", headers={"Host": "third.example"}, timeout=10).status_code == 421
        with connect(ws_url(url), origin="https://notebook.example") as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            assert json.loads(ws.recv(timeout=30))["type"] == "observation"
        with pytest.raises(InvalidStatus):
            connect(ws_url(url), origin="https://other.example")
    finally:
        process.kill()
        process.wait(timeout=30)
    with pytest.raises(ValueError, match="not an origin"):
        Limits(allowed_origins=("notebook.example",))


def test_a_server_on_the_ipv6_loopback_answers_its_own_names_only():
    """Bound to ::1: the address reached ([::1]) and localhost are its names; a rebinding name is not."""
    with running(make_app("foraging", max_sessions=2), host="::1") as url:
        port = url.rsplit(":", 1)[1]
        assert url == f"http://[::1]:{port}"
        assert requests.get(url + "/health", timeout=10).ok
        assert requests.get(url + "/health", headers={"Host": f"localhost:{port}"}, timeout=10).ok
        rebound = requests.get(url + "/health", headers={"Host": f"attacker.example:{port}"}, timeout=10)
        assert rebound.status_code == 421
        with connect(ws_url(url)) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            assert json.loads(ws.recv(timeout=30))["type"] == "observation"


# -- arena-view ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rec")
    record_foraging(folder)
    server = make_server(Episodes.load([folder]), port=0, allowed_hosts=("viewer.example",))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_port
    server.shutdown()
    server.server_close()


def get(port: int, path: str, **headers: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.putrequest("GET", path, skip_host="Host" in headers)
    for name, value in headers.items():
        connection.putheader(name, value)
    connection.endheaders()
    answer = connection.getresponse()
    return answer.status, answer.read()


def test_a_rebinding_page_gets_no_recording_from_arena_view(viewer):
    for path in ("/", "/data/index.js", "/data/episode-0.js"):
        status, body = get(viewer, path, Host=f"attacker.example:{viewer}")
        assert status == 421 and b"--allowed-hosts" in body and b"agent" not in body, path
    for host in (f"127.0.0.1:{viewer}", f"localhost:{viewer}", "viewer.example"):
        assert get(viewer, "/data/episode-0.js", Host=host)[0] == 200, host


def test_another_sites_page_cannot_include_or_fetch_a_recording(viewer):
    """A foreign page's <script src> carries no Origin, only Sec-Fetch-Site: cross-site (and would run the
    episode's script in that page); its fetch carries Origin."""
    assert get(viewer, "/data/episode-0.js", **{"Sec-Fetch-Site": "cross-site"})[0] == 403
    assert get(viewer, "/data/index.js", **{"Sec-Fetch-Site": "same-site"})[0] == 403  # another port of localhost
    assert get(viewer, "/data/index.js", Origin="http://evil.example")[0] == 403
    assert get(viewer, "/data/episode-0.js", **{"Sec-Fetch-Site": "same-origin"})[0] == 200  # its own page
    assert get(viewer, "/", **{"Sec-Fetch-Site": "none"})[0] == 200  # typed into the address bar
    assert get(viewer, "/data/index.js", Origin=f"http://127.0.0.1:{viewer}")[0] == 200


def test_arena_view_takes_more_names_from_its_flag(tmp_path):
    record_foraging(tmp_path)
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "arena_envs.viewer.cli", str(tmp_path), "--port", str(port),
                                "--allowed-hosts", "viewer.example"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        wait_until_answered(process, f"http://127.0.0.1:{port}/", timeout=90)
        assert get(port, "/", Host="viewer.example")[0] == 200
        assert get(port, "/", Host="other.example")[0] == 421
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(timeout=30)


def test_an_exported_package_on_a_space_answers_the_spaces_own_name(tmp_path):
    """A Hugging Face Space reaches the exported server through its proxy, by the Space's name (SPACE_HOST):
    that name is answered, any other is not."""
    from arena_envs.serve.export import APP

    script = tmp_path / "app.py"
    script.write_text(APP.format(scenario="foraging", settings=["--max-sessions", "2"]))
    port = free_port()
    env = {**os.environ, "SPACE_HOST": "someone-arena.hf.space"}
    process = subprocess.Popen([sys.executable, str(script), "--port", str(port), "--log-level", "warning"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answered(process, url + "/health", timeout=90)
        assert requests.get(url + "/health", headers={"Host": "someone-arena.hf.space"}, timeout=10).ok
        assert requests.get(url + "/health", headers={"Host": "rebound.example"}, timeout=10).status_code == 421
    finally:
        process.kill()
        process.wait(timeout=30)
