"""arena-serve against hostile clients (issue 24): the real server on 127.0.0.1, real sockets.

Each test here failed on f0e847f: a stall frame held the event loop for 0.7 s, sessions
made over HTTP filled the cap, a session sending only ``state`` frames kept an open socket
on a freed world, slow sockets stayed open for ever, and SIGINT printed a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from process_helpers import free_port, wait_until_answered
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from arena_envs.serve import ArenaAction, Limits, SessionError, make_app, make_hub
from arena_envs.serve.app import running
from arena_envs.tools import ToolCallError
from arena_envs.tools.decision import parse_decision

STALL = '{"a":[' * 199 + "1," * 31000
"""The issue's stall message: 63 KB whose search for embedded JSON once cost 0.7 s (now 3 ms)."""
COSTLY = "{}" * 32_000
"""64 KB whose reading costs about 0.1 s of CPU (each ``{}`` is a JSON object the search tries as a
call): the costliest text known within the size limit, so that a reading that is not done in the
reader's process shows, on the event loop as a stall and on a thread as the server's own CPU."""


def read_cost(message: str) -> float:
    """The CPU seconds that reading ``message`` costs, measured here (the least of three)."""
    from arena_envs.serve.reading import read_calls

    tools = make_hub("foraging", max_sessions=1).tools
    costs = []
    for _ in range(3):
        start = time.process_time()
        read_calls(message, None, tools, True)
        costs.append(time.process_time() - start)
    return min(costs)


def cpu_seconds(pid: int) -> float:
    """The CPU time of process ``pid`` itself, every thread of it (not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


def call(ws, message: dict) -> dict:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=60))


def stats(url: str) -> dict:
    return requests.get(url + "/stats", timeout=10).json()


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


@contextlib.contextmanager
def arena_serve(*args: str, program: list[str] | None = None):
    """``arena-serve`` (``python -m arena_envs.serve``, or ``program``) in a process of its
    own; yields its URL and the process."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    program = program or [sys.executable, "-m", "arena_envs.serve"]
    process = subprocess.Popen([*program, *args, "--port", str(port),
                                "--log-level", "warning"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answered(process, url + "/health", timeout=90)
        yield url, process
    finally:
        if process.poll() is None:
            process.kill()
        with contextlib.suppress(ValueError):  # a test that already read the output has closed the pipes
            process.communicate(timeout=30)


# -- the event loop never waits on one frame ------------------------------------------------

def test_four_attackers_sending_the_stall_frame_leave_a_bystanders_p99_step_under_50_ms():
    """The issue's acceptance test: the p99 of a bystander's plain steps, measured over at
    least 500 steps, and for as long as the server takes to read two more costly messages,
    while four attackers send them back to back. Read on the event loop, each message would
    stall it for its whole cost (about 0.1 s: p99 over 100 ms)."""
    with arena_serve("foraging", "--max-sessions", "8") as (url, _):
        stop, answered, failures = threading.Event(), [0] * 4, []

        def attack(k: int) -> None:
            try:
                with connect(ws_url(url), max_size=None) as ws:
                    call(ws, {"type": "reset", "data": {"seed": k}})
                    while not stop.is_set():
                        answer = call(ws, {"type": "step", "data": {"message": COSTLY}})
                        assert answer["type"] in ("observation", "error"), answer
                        if answer["type"] == "observation" and answer["data"]["done"]:
                            call(ws, {"type": "reset", "data": {"seed": k}})
                        answered[k] += 1
            except Exception as err:  # noqa: BLE001 - reported by the test below
                failures.append(err)

        attackers = [threading.Thread(target=attack, args=(k,), daemon=True) for k in range(4)]
        with connect(ws_url(url)) as bystander:
            call(bystander, {"type": "reset", "data": {"seed": 99}})
            for thread in attackers:
                thread.start()
            wait_for(lambda: stats(url)["read_off_loop"] >= 2, timeout=60)  # the attack is under way
            before, latencies, deadline = stats(url)["read_off_loop"], [], time.monotonic() + 60
            try:
                while len(latencies) < 500 or stats(url)["read_off_loop"] < before + 2:
                    assert time.monotonic() < deadline, "the server read no more stall messages"
                    start = time.perf_counter()
                    answer = call(bystander, {"type": "step", "data": {"tool": "idle"}})
                    latencies.append(time.perf_counter() - start)
                    assert answer["type"] == "observation", answer
                    if answer["data"]["done"]:
                        call(bystander, {"type": "reset", "data": {"seed": 99}})
            finally:
                stop.set()
                for thread in attackers:
                    thread.join(timeout=120)
        assert not failures, failures
        latencies.sort()
        p99 = latencies[int(0.99 * len(latencies)) - 1]
        print(f"bystander p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
        assert p99 < 0.050, f"bystander p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms"


def test_costly_messages_are_read_outside_the_servers_own_process():
    """What reading costly messages costs lands in the reader's process: the server's own CPU
    time (its event loop's and every thread's) grows by a small part of it. Reading on the
    loop, or on a thread of the server (its GIL shared with the loop), fails here, whatever
    the machine's load: CPU time is counted, not waited for."""
    cost, messages = read_cost(COSTLY), 12
    assert cost > 0.02, f"the costly message costs only {cost * 1000:.0f} ms to read: it no longer tests this"
    with arena_serve("foraging", "--max-sessions", "2") as (url, process), \
            connect(ws_url(url), max_size=None) as ws:
        call(ws, {"type": "reset", "data": {"seed": 1}})
        call(ws, {"type": "step", "data": {"message": COSTLY}})  # the reader's process has started
        reads, before = stats(url)["read_off_loop"], cpu_seconds(process.pid)
        for _ in range(messages):
            answer = call(ws, {"type": "step", "data": {"message": COSTLY}})
            assert answer["type"] == "observation", answer
            if answer["data"]["done"]:
                call(ws, {"type": "reset", "data": {"seed": 1}})
        spent = cpu_seconds(process.pid) - before
        assert stats(url)["read_off_loop"] - reads == messages
    print(f"reading {messages} messages costs {messages * cost:.2f} s of CPU; the server's own process spent "
          f"{spent:.2f} s")
    assert spent < 0.25 * messages * cost, f"the server's process spent {spent:.2f} s of CPU reading " \
        f"{messages} messages that cost {messages * cost:.2f} s to read"


def test_a_message_read_off_the_loop_gets_the_answer_it_would_get_on_it():
    with running(make_app("foraging", max_sessions=2)) as url, connect(ws_url(url), max_size=None) as ws:
        call(ws, {"type": "reset", "data": {"seed": 1}})
        answer = call(ws, {"type": "step", "data": {"message": STALL}})
        result = answer["data"]["observation"]["observation"]["last_action_result"]
        with pytest.raises(ToolCallError) as expected:
            parse_decision(STALL)
        assert result["error_code"] == "INVALID_PARAMS" and result["error_message"] == expected.value.message
        assert answer["data"]["observation"]["info"]["parse"]["calls_run"] == 1
        assert stats(url)["read_off_loop"] == 1
        # a costly message holding a real call plays it, as on the loop
        padded = "Let me think. " * 400 + '{"tool": "query_world", "params": {"radius": 30}}'
        answer = call(ws, {"type": "step", "data": {"message": padded}})
        result = answer["data"]["observation"]["observation"]["last_action_result"]
        assert result["success"] and answer["data"]["observation"]["observation"]["tick"] == 2
        assert stats(url)["read_off_loop"] == 2


@pytest.mark.parametrize("scenario", ["foraging", "treasure_hunt", "team_capture"])
def test_an_action_with_too_much_text_is_refused_clearly(scenario):
    import asyncio

    from arena_envs.serve.reading import MAX_MESSAGE_CHARS

    hub = make_hub(scenario, max_sessions=1)

    async def main():
        session = hub.factory()()
        await session.reset_async(seed=0)
        huge = "x" * (MAX_MESSAGE_CHARS + 1)
        with pytest.raises(SessionError, match="over the limit"):
            await session.step_async(ArenaAction(message=huge))
        with pytest.raises(SessionError, match="over the limit"):
            await session.step_async(ArenaAction(tool="cat", file=huge))
        session.close()
        await hub.aclose()

    asyncio.run(main())


def test_a_reset_seed_over_64_bits_is_refused_clearly_over_websocket_and_http():
    with running(make_app("foraging", max_sessions=2)) as url, connect(ws_url(url)) as ws:
        for seed in (2**64, 2**200):
            answer = call(ws, {"type": "reset", "data": {"seed": seed}})
            assert answer["type"] == "error" and "Seed must be less than 2**64" in answer["data"]["message"]
        refused = requests.post(url + "/reset", json={"seed": 2**200}, timeout=10)
        assert refused.status_code == 409 and "Seed must be less than 2**64" in refused.json()["detail"]
        assert call(ws, {"type": "reset", "data": {"seed": 2**64 - 1}})["type"] == "observation"
        assert stats(url)["sessions"] == 1  # the refused resets took no world


# -- sessions made over HTTP ------------------------------------------------------------

def rpc(url: str, method: str, **params) -> requests.Response:
    return requests.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                         timeout=10)


def test_sessions_made_over_http_cannot_fill_the_cap_and_expire_unused():
    limits = Limits(http_session_ttl=1.0, sessions_per_client=4)
    with running(make_app("foraging", max_sessions=4, limits=limits)) as url:
        made = [rpc(url, "openenv/session/create") for _ in range(4)]
        assert [bool(r.ok and "result" in r.json()) for r in made] == [True, True, False, False]
        refusal = made[2].json()["error"]["message"]
        assert made[2].status_code == 429 and "per client" in refusal and "/ws" in refusal
        assert stats(url)["http_sessions"] == 2
        stack = contextlib.ExitStack()
        sockets = [stack.enter_context(connect(ws_url(url))) for _ in range(2)]  # the rest of the cap is theirs
        for ws in sockets:
            assert call(ws, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        wait_for(lambda: stats(url)["http_sessions"] == 0, timeout=5)  # unused for 1 s: closed
        assert stats(url)["expired"] == 2
        sockets += [stack.enter_context(connect(ws_url(url))) for _ in range(2)]  # their places are free again
        for k, ws in enumerate(sockets):
            frame = {"type": "step", "data": {"tool": "idle"}} if k < 2 else {"type": "reset", "data": {"seed": k}}
            assert call(ws, frame)["type"] == "observation"
        stack.close()
        closing = rpc(url, "openenv/session/close", session_id=made[0].json()["result"]["session_id"])
        assert "Unknown session_id" in closing.json()["error"]["message"]  # it was closed, not just forgotten


def test_a_socket_attached_to_an_http_session_keeps_it_and_no_other_id_can_be_attached():
    limits = Limits(http_session_ttl=1.0)
    with running(make_app("foraging", max_sessions=4, limits=limits)) as url:
        session_id = rpc(url, "openenv/session/create").json()["result"]["session_id"]
        with pytest.raises(InvalidStatus):
            connect(ws_url(url) + "?session_id=not-one-of-ours")
        with connect(ws_url(url) + f"?session_id={session_id}") as ws:
            call(ws, {"type": "reset", "data": {"seed": 3}})
            with pytest.raises(InvalidStatus):  # one socket per session
                connect(ws_url(url) + f"?session_id={session_id}")
            for _ in range(8):  # held by its socket for longer than its ttl
                assert call(ws, {"type": "step", "data": {"tool": "idle"}})["type"] == "observation"
                time.sleep(0.25)
            assert stats(url)["http_sessions"] == 1 and stats(url)["expired"] == 0
        wait_for(lambda: stats(url)["http_sessions"] == 0, timeout=5)  # let go: it expires in turn
        assert "Unknown session_id" in rpc(url, "openenv/session/close", session_id=session_id).json()["error"][
            "message"]
        wait_for(lambda: stats(url)["sessions"] == 0)


# -- liveness is what the reaper measures ---------------------------------------------------

def test_a_session_sending_only_state_frames_is_reaped_and_its_socket_closed_with_a_reason():
    app = make_app("crafting", max_sessions=2, limits=Limits(idle_timeout=1.0))
    with running(app) as url, connect(ws_url(url)) as zombie:
        call(zombie, {"type": "reset", "data": {"seed": 0}})
        deadline, received = time.monotonic() + 8, []
        with pytest.raises(ConnectionClosed) as closed:
            try:
                while time.monotonic() < deadline:  # asks, never acts
                    received.append(call(zombie, {"type": "state"}))
                    time.sleep(0.2)
            except ConnectionClosed:  # refused at a send: read what came before the close
                while True:
                    received.append(json.loads(zombie.recv(timeout=5)))
        assert received[-1]["type"] == "error" and received[-1]["data"]["code"] == "SESSION_RECLAIMED"
        assert all(answer["type"] == "state" for answer in received[:-1])
        assert closed.value.rcvd.code == 4408 and "without a reset or step" in closed.value.rcvd.reason
        wait_for(lambda: stats(url)["sessions"] == 0)
        assert stats(url)["free_worlds"] == stats(url)["worlds"]


# -- slow sockets ------------------------------------------------------------------------------

def test_slow_sockets_are_closed_and_connections_are_capped():
    """400 slowloris sockets, each dribbling a request's headers a byte at a time: those past
    the cap are refused at once, the rest are closed once the header timeout passes."""
    with arena_serve("treasure_hunt", "--max-sessions", "2", "--header-timeout", "1",
                     "--max-connections", "100") as (url, process):
        port = int(url.rsplit(":", 1)[1])
        selector, sockets, answers = selectors.DefaultSelector(), [], []
        try:
            for _ in range(400):
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ)
                sockets.append(sock)
            open_ = set(sockets)
            deadline = time.monotonic() + 8
            while open_ and time.monotonic() < deadline:
                for key, _ in selector.select(timeout=0.3):
                    with contextlib.suppress(BlockingIOError):
                        data = b""
                        with contextlib.suppress(ConnectionError):
                            while chunk := key.fileobj.recv(4096):
                                data += chunk
                        answers.append(data.split(b"\r\n", 1)[0])
                        selector.unregister(key.fileobj)
                        open_.discard(key.fileobj)
                for sock in list(open_):  # a byte more of the same header
                    with contextlib.suppress(OSError):
                        sock.send(b"X")
            assert not open_, f"{len(open_)} slow sockets still open"
            # an answer is lost when the byte sent after it races it (a reset: on a loaded machine, every 408
            # was), else it is one of these; the server's log says what it did with each
            assert set(answers) <= {b"HTTP/1.1 408 Request Timeout", b"HTTP/1.1 503 Service Unavailable", b""}
        finally:
            for sock in sockets:
                sock.close()
        assert requests.get(url + "/health", timeout=10).ok  # and the server serves on
        process.send_signal(signal.SIGTERM)
        _, log = process.communicate(timeout=60)
    refused = log.count("refused a connection")  # past the cap: refused at once, the rest timed out
    assert 300 <= refused <= 400 - 1, log[-2000:]
    assert "closed a connection from 127.0.0.1: request not received within 1 s" in log, log[-2000:]


# -- shutdown ---------------------------------------------------------------------------------

def test_sigint_after_a_clean_drain_exits_quietly():
    with arena_serve("foraging", "--max-sessions", "2") as (url, process):
        with connect(ws_url(url)) as ws:
            call(ws, {"type": "reset", "data": {"seed": 1}})
            assert call(ws, {"type": "step", "data": {"tool": "idle"}})["type"] == "observation"
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr


# -- the limits under random interleavings ---------------------------------------------------

GUARD_OPS = st.lists(st.tuples(st.sampled_from(["http create", "http close", "open", "step", "state", "close",
                                                "wait"]), st.integers(0, 3)), min_size=1, max_size=12)


@pytest.fixture(scope="module")
def limited_server():
    """A server whose limits are met in a second: 4 sessions, 2 per client over HTTP, 0.5 s to expire or idle."""
    limits = Limits(http_session_ttl=0.5, idle_timeout=0.5, http_sessions_per_client=2, max_http_sessions=3,
                    sessions_per_client=4)
    app = make_app("foraging", max_sessions=4, limits=limits)
    with running(app) as url:
        yield url, app


@settings(max_examples=int(os.environ.get("ARENA_FUZZ_EXAMPLES", "12")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(program=GUARD_OPS)
@example(program=[("http create", 0)] * 4 + [("open", 0), ("open", 1), ("open", 2)])  # the cap, from both sides
@example(program=[("open", 0), ("state", 0), ("wait", 3), ("state", 0), ("step", 0)])  # asking only: reaped
def test_random_interleavings_of_http_sessions_sockets_and_reaping_keep_the_limits(limited_server, program):
    """Sessions made over HTTP and over sockets, used, left idle and closed in any order:
    HTTP sessions never pass their limits, a refusal says why, every socket is answered or
    closed with a clear code, and once everything is closed or expired every world is free."""
    url, app = limited_server
    made: list[str] = []
    sockets: dict[int, object] = {}
    with contextlib.ExitStack() as stack:
        for op, k in program:
            if op == "http create":
                answer = rpc(url, "openenv/session/create").json()
                if "result" in answer:
                    made.append(answer["result"]["session_id"])
                else:  # refused: at the limit, for the reason it gives, or the server is full
                    message = answer["error"]["message"]
                    assert ("per client" in message or "sessions made over HTTP" in message
                            or "capacity" in message.lower()), message
            elif op == "http close" and made:
                rpc(url, "openenv/session/close", session_id=made.pop(k % len(made)))
            elif op == "open" and k not in sockets:
                ws = stack.enter_context(connect(ws_url(url)))
                try:
                    answer = call(ws, {"type": "reset", "data": {"seed": k}})
                except ConnectionClosed:  # refused at once: the refusal came before the close
                    answer = json.loads(ws.recv(timeout=5))
                if answer["type"] == "observation":
                    sockets[k] = ws
                else:
                    assert answer["data"]["code"] in ("CAPACITY_REACHED", "SESSION_ERROR"), answer
            elif op in ("step", "state") and k in sockets:
                try:
                    answer = call(sockets[k], {"type": op})
                    if op == "step":
                        answer = call(sockets[k], {"type": "step", "data": {"tool": "idle"}})
                    assert answer["type"] in (op if op == "state" else "observation", "error"), answer
                    if answer["type"] == "error":
                        assert answer["data"]["code"] in ("SESSION_RECLAIMED", "VALIDATION_ERROR",
                                                          "EXECUTION_ERROR"), answer
                except ConnectionClosed as closed:  # reaped while idle: told why
                    assert closed.rcvd is not None and closed.rcvd.code == 4408
                    del sockets[k]
            elif op == "close" and k in sockets:
                sockets.pop(k).close()
            elif op == "wait":
                time.sleep(0.2 * k)
            guard = stats(url)
            assert guard["http_sessions"] <= 3 and guard["sessions"] <= 4 + 8  # its limits, at every turn
    for session_id in made:  # whatever is left expires or was closed
        rpc(url, "openenv/session/close", session_id=session_id)
    wait_for(lambda: stats(url)["http_sessions"] == 0 and stats(url)["sessions"] == 0
             and stats(url)["connections"] == 0, timeout=10)
    assert stats(url)["free_worlds"] == stats(url)["worlds"]


# -- the soak's server round, once, short ------------------------------------------------------

@pytest.mark.parametrize("abuse", [False, True])
def test_a_soak_round_of_clients_with_and_without_abuse_loses_nothing(abuse):
    from soak import Server, rss_mb, serve_round

    server = Server()
    try:
        assert serve_round(server, clients=6, steps=20, abuse=abuse) == []
        first = rss_mb(server.process.pid)
        assert serve_round(server, clients=6, steps=20, abuse=abuse) == []
        assert server.stats()["steps"] >= 2 * 6 * 20  # every good client's every step was answered
        assert rss_mb(server.process.pid) < first + 40  # and the server did not grow by a round's worth
    finally:
        server.close()


def test_the_command_in_the_serving_limits_guide_runs():
    """docs/guide/serving-limits.md's command, run by the ``arena-serve`` console script."""
    guide = (Path(__file__).parent.parent / "docs" / "guide" / "serving-limits.md").read_text()
    command = guide.split("```console\n", 1)[1].split("\n```", 1)[0].split()
    assert command[0] == "arena-serve"
    script = str(Path(sys.executable).parent / "arena-serve")
    with arena_serve(*command[1:], program=[script]) as (url, process):
        with connect(ws_url(url)) as ws:
            assert call(ws, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        assert stats(url)["max_sessions"] == 64
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0 and "Traceback" not in stderr, stderr


def test_a_reader_process_that_died_is_replaced_at_the_next_read():
    import asyncio

    hub = make_hub("foraging", max_sessions=1)
    costly = "Thinking. " * 300 + '{"tool": "idle", "params": {}}'

    async def main():
        session = hub.factory()()
        await session.reset_async(seed=0)
        assert (await session.step_async(ArenaAction(message=costly))).observation["tick"] == 1
        first = hub.reader._process
        first.kill()
        first.wait()
        assert (await session.step_async(ArenaAction(message=costly))).observation["tick"] == 2
        assert hub.reader._process.pid != first.pid and hub.stats()["read_off_loop"] == 2
        session.close()
        await hub.aclose()
        assert hub.reader._process is None  # and its process ended with the hub

    asyncio.run(main())
