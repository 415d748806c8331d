"""arena-serve against clients that try to keep others out (issue 34, items 7-8): the real
server on 127.0.0.1, real sockets, attackers and bystanders on different loopback addresses
(127.0.0.2, 127.0.0.3, ...: every one of them reaches a server bound to 127.0.0.1).

Each test here failed on 0408f98: 200 half-open sockets from one address filled the global
connection cap (new clients anywhere got HTTP 503), sessions made over HTTP took the worlds
WebSocket clients needed, one address could hold every session, and a refused session was
closed with a bare code 1000.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import pytest
import requests
from process_helpers import free_port, wait_until_answered
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from arena_envs.serve import Limits, make_app
from arena_envs.serve.app import running


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def dial(url: str, address: str) -> socket.socket:
    """A TCP connection to the server at ``url`` from the loopback ``address``."""
    return socket.create_connection(("127.0.0.1", port_of(url)), timeout=10, source_address=(address, 0))


def session(url: str, address: str, **options):
    """A WebSocket session opened from ``address``."""
    return connect(ws_url(url), sock=dial(url, address), **options)


def call(ws, message: dict) -> dict:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def play(url: str, address: str, seed: int) -> None:
    """One client's visit: open a session, reset, step twice, close; fails on any refusal."""
    with session(url, address) as ws:
        answer = call(ws, {"type": "reset", "data": {"seed": seed}})
        assert answer["type"] == "observation", answer
        for tick in (1, 2):
            answer = call(ws, {"type": "step", "data": {"tool": "idle"}})
            assert answer["data"]["observation"]["observation"]["tick"] == tick, answer


def refusal(ws) -> tuple[dict, int, str]:
    """The error frame a refused session gets, and the code and reason of its close."""
    try:
        answer = call(ws, {"type": "reset", "data": {"seed": 0}})
    except ConnectionClosed:  # the close beat the send: the error frame came before it
        answer = json.loads(ws.recv(timeout=10))
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)
    return answer, closed.value.rcvd.code, closed.value.rcvd.reason


def stats(url: str) -> dict:
    return requests.get(url + "/stats", timeout=10).json()


class Slowloris:
    """Half-open sockets from one address, each dribbling a request's headers a byte at a
    time, reopened as soon as the server closes them, until stopped."""

    def __init__(self, url: str, address: str, sockets: int) -> None:
        self.url, self.address, self.wanted = url, address, sockets
        self.open: list[socket.socket] = []
        self.answers: list[bytes] = []  # the status lines of the answers got before a close
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Slowloris:
        self.thread.start()
        deadline = time.monotonic() + 20
        while len(self.open) + len(self.answers) < self.wanted and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        for sock in self.open:
            sock.close()

    def _run(self) -> None:
        while not self.stop.is_set():
            while len(self.open) < self.wanted and not self.stop.is_set():
                try:
                    sock = dial(self.url, self.address)
                    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                    sock.setblocking(False)
                    self.open.append(sock)
                except OSError:
                    break
            for sock in list(self.open):
                with contextlib.suppress(BlockingIOError):
                    try:
                        data = sock.recv(4096)
                        sock.send(b"X")
                        if not data:
                            raise ConnectionError
                    except OSError:
                        data = b""
                    if data or sock.fileno() < 0 or not self._alive(sock):
                        self.answers.append(data.split(b"\r\n", 1)[0])
                        self.open.remove(sock)
                        sock.close()
            time.sleep(0.2)

    @staticmethod
    def _alive(sock: socket.socket) -> bool:
        try:
            return sock.send(b"X") == 1
        except BlockingIOError:
            return True
        except OSError:
            return False


@contextlib.contextmanager
def arena_serve(*args: str):
    """``arena-serve foraging`` in a process of its own (its real entry point); yields its URL.
    Its log (a line per refused connection) goes to a file: a pipe nobody reads would fill
    and stop the server."""
    import subprocess
    import sys
    import tempfile

    port = free_port()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen([sys.executable, "-m", "arena_envs.serve", "foraging", "--port", str(port),
                                    "--log-level", "warning", *args], stdout=log, stderr=log)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until_answered(process, url + "/health", timeout=90)
            yield url
        finally:
            process.kill()
            process.wait(timeout=30)


# -- item 7: slowloris from one address -----------------------------------------------------

def test_a_slowloris_attacker_on_one_address_never_turns_away_clients_on_others():
    """The issue's case: 200 half-open sockets from one address (kept up: each one closed is
    opened again), then 40 clients on two other addresses, each opening a session: all get in.
    The attacker's own new connections are refused, with the reason."""
    with arena_serve("--max-sessions", "4") as url:
        with Slowloris(url, "127.0.0.2", 200) as attacker:
            time.sleep(2.5)  # its sockets are half-open now (over 2 s without a request)

            def visits(address: str, failures: list) -> None:
                for k in range(20):
                    try:
                        play(url, address, k)
                    except Exception as err:  # noqa: BLE001 - reported below
                        failures.append(f"{address}: {type(err).__name__}: {err}")

            failures: list[str] = []
            clients = [threading.Thread(target=visits, args=(address, failures)) for address in
                       ("127.0.0.3", "127.0.0.4")]
            for thread in clients:
                thread.start()
            for thread in clients:
                thread.join(timeout=300)
            assert not failures, failures[:5]
            refused = [line for line in attacker.answers if line]
            assert refused and set(refused) <= {b"HTTP/1.1 503 Service Unavailable", b"HTTP/1.1 408 Request Timeout"}
            with dial(url, "127.0.0.2") as more:  # the attacker's address has its share: it gets no more
                more.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                answer = more.recv(4096)
            assert answer.startswith(b"HTTP/1.1 503") and b"too many connections from 127.0.0.2" in answer, answer
        assert requests.get(url + "/health", timeout=10).ok


def test_an_address_holding_half_open_connections_gets_no_more_and_others_still_do():
    limits = Limits(half_open_per_client=4, header_timeout=30)
    with running(make_app("foraging", max_sessions=2, limits=limits)) as url:
        with Slowloris(url, "127.0.0.2", 4) as attacker:
            time.sleep(2.5)  # half-open now: over 2 s without a whole request
            with dial(url, "127.0.0.2") as more:
                more.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                answer = more.recv(4096)
            assert answer.startswith(b"HTTP/1.1 503") and b"slow to send a request" in answer, answer
            assert len(attacker.open) == 4  # the ones it holds are not closed before their header timeout
            play(url, "127.0.0.3", 0)


def test_an_address_at_its_connection_cap_gets_no_more_and_others_still_do():
    limits = Limits(connections_per_client=5, half_open_per_client=100)
    with running(make_app("foraging", max_sessions=2, limits=limits)) as url:
        held = [dial(url, "127.0.0.2") for _ in range(5)]  # open, quiet: not half-open yet
        try:
            with dial(url, "127.0.0.2") as sixth:
                sixth.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                answer = sixth.recv(4096)
            assert answer.startswith(b"HTTP/1.1 503")
            assert b"too many connections from 127.0.0.2 (at most 5; raise --connections-per-client)" in answer
            play(url, "127.0.0.3", 0)
        finally:
            for sock in held:
                sock.close()


def test_attackers_on_several_addresses_filling_the_connection_cap_never_turn_away_a_client_on_another():
    """Past the cap in all, the server closes a waiting connection of the address holding the
    most to make room: three attacking addresses together cannot keep a fourth out."""
    with arena_serve("--max-sessions", "4", "--max-connections", "60", "--sessions-per-client", "1") as url:
        attackers = [Slowloris(url, f"127.0.0.{k}", 30) for k in (2, 4, 5)]  # 90 wanted, 60 in all
        with contextlib.ExitStack() as stack:
            for attacker in attackers:
                stack.enter_context(attacker)
            for k in range(10):
                play(url, "127.0.0.3", k)
                health = requests.Session()
                health.mount("http://", _SourceAddressAdapter("127.0.0.6"))
                assert health.get(url + "/health", timeout=10).ok
        assert any(line.startswith(b"HTTP/1.1 503") for attacker in attackers for line in attacker.answers)


class _SourceAddressAdapter(requests.adapters.HTTPAdapter):
    """requests from a chosen loopback address."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs["source_address"] = (self.address, 0)
        return super().init_poolmanager(*args, **kwargs)


# -- item 8: sessions ----------------------------------------------------------------------

@pytest.mark.parametrize("max_sessions", [1, 2, 8])
def test_sessions_made_over_http_never_take_the_worlds_websocket_clients_need(max_sessions):
    """Four addresses x 2 HTTP sessions, each held by a socket that resets it (a world each):
    the WebSocket clients still get every one of the --max-sessions sessions."""
    with running(make_app("foraging", max_sessions=max_sessions)) as url, contextlib.ExitStack() as stack:
        for k in range(4):
            address = f"127.0.0.{10 + k}"
            made = requests.Session()
            made.mount("http://", _SourceAddressAdapter(address))
            for _ in range(2):
                answer = made.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create",
                                                       "params": {}}, timeout=10).json()
                held = stack.enter_context(connect(ws_url(url) + f"?session_id={answer['result']['session_id']}",
                                                   sock=dial(url, address)))
                assert call(held, {"type": "reset", "data": {"seed": k}})["type"] == "observation"
        assert stats(url)["http_sessions"] == 8
        clients = [stack.enter_context(session(url, f"127.0.0.{20 + k}")) for k in range(max_sessions)]
        for seed, ws in enumerate(clients):
            assert call(ws, {"type": "reset", "data": {"seed": seed}})["type"] == "observation"
            assert call(ws, {"type": "step", "data": {"tool": "idle"}})["type"] == "observation"
        with session(url, "127.0.0.30") as one_more:  # the WebSocket sessions are all taken: refused, saying why
            answer, code, reason = refusal(one_more)
        assert answer["data"]["code"] == "CAPACITY_REACHED" and answer["data"]["message"]
        assert code == 1013 and "CAPACITY_REACHED" in reason


def test_one_address_may_hold_only_its_share_of_the_sessions_and_is_told_why():
    limits = Limits(sessions_per_client=2)
    with running(make_app("foraging", max_sessions=4, limits=limits)) as url, contextlib.ExitStack() as stack:
        mine = [stack.enter_context(session(url, "127.0.0.2")) for _ in range(2)]
        for ws in mine:
            assert call(ws, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        with session(url, "127.0.0.2") as third:
            answer, code, reason = refusal(third)
        assert answer["type"] == "error" and answer["data"]["code"] == "TOO_MANY_SESSIONS"
        assert "at most 2 sessions per client address" in answer["data"]["message"]
        assert code == 1013 and "TOO_MANY_SESSIONS" in reason
        others = [stack.enter_context(session(url, "127.0.0.3")) for _ in range(2)]  # the rest are another's
        for ws in others:
            assert call(ws, {"type": "reset", "data": {"seed": 2}})["type"] == "observation"
        mine.pop().close()
        time.sleep(0.2)
        with session(url, "127.0.0.2") as again:  # a session closed: its place is the address's again
            assert call(again, {"type": "reset", "data": {"seed": 3}})["type"] == "observation"


def test_a_client_closing_its_only_session_may_open_the_next_at_once():
    """A socket whose client has gone no longer counts against its address's share, though
    OpenEnv may still be closing its session (made slow here, as on a loaded machine)."""
    app = make_app("foraging", max_sessions=1)
    hub = app.state.hub
    closed = hub._closed

    def slowly_closed(session):  # OpenEnv closes a session's environment in its executor thread
        time.sleep(0.5)
        closed(session)

    hub._closed = slowly_closed
    with running(app) as url:
        for k in range(3):
            play(url, "127.0.0.2", k)


def test_the_default_share_is_three_quarters_of_the_sessions():
    with running(make_app("foraging", max_sessions=4)) as url, contextlib.ExitStack() as stack:
        for _ in range(3):
            ws = stack.enter_context(session(url, "127.0.0.2"))
            assert call(ws, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        with session(url, "127.0.0.2") as fourth:
            assert refusal(fourth)[0]["data"]["code"] == "TOO_MANY_SESSIONS"
        with session(url, "127.0.0.3") as another:
            assert call(another, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"


def test_a_session_the_app_ends_after_an_error_is_closed_with_that_error_never_a_bare_1000():
    """OpenEnv ends a session it cannot make with an error frame and a plain close (1000): the
    guard's close carries the error's code and message. Here the guard's own session cap is
    lifted so that OpenEnv's is met."""
    app = make_app("foraging", max_sessions=1, limits=Limits(max_http_sessions=0))
    app.state.guard.max_sessions = None
    with running(app) as url:
        with session(url, "127.0.0.2") as first:
            assert call(first, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
            with session(url, "127.0.0.3") as second:
                answer, code, reason = refusal(second)
            assert answer["data"]["code"] == "CAPACITY_REACHED"
            assert code == 1013 and reason.startswith("CAPACITY_REACHED: ")
            with pytest.raises(ConnectionClosed) as closed:  # after an error of its own, a client's
                call(first, {"type": "step", "data": {"tool": 7}})  # close is still a plain one
                first.send(json.dumps({"type": "close"}))
                first.recv(timeout=10)
        assert closed.value.rcvd.code == 1000


def test_a_refusal_at_the_handshake_says_why_in_its_body():
    limits = Limits(api_key="s3cret")
    with running(make_app("foraging", max_sessions=2, limits=limits)) as url:
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url(url))
        response = refused.value.response
        assert response.status_code == 401 and json.loads(response.body)["code"] == "UNAUTHORIZED"
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url(url) + "?session_id=not-ours", additional_headers={"X-API-Key": "s3cret"})
        response = refused.value.response
        assert response.status_code == 403 and json.loads(response.body) == {
            "detail": "no session of that id that this client may attach to (one made over HTTP from this address, "
                      "not attached)", "code": "FORBIDDEN"}
