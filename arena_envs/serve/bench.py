"""Load benchmark: concurrent sessions against one ``arena-serve`` process, against a stock
OpenEnv server of the same scenario, in one run (``arena-bench --only serve``).

The stock server is OpenEnv used the usual way: an ``Environment`` that owns one env
instance per session (``ToolCallWrapper(gym.make(...))``, synchronous ``step``), which
OpenEnv runs in a thread per session. Both servers speak the same wire format (the same
observation model), run in their own process, and are driven by the same client: N
WebSocket sessions (in load processes of 128 sessions each), each resetting and then
stepping as fast as its answers come back. Reported per N: aggregate steps/s, the p50/p99
time from sending a step to receiving its answer, and the server process's CPU time per step
(the stock server's threads keep more than one core busy; arena-serve and the floor, one).

A third server, whose environment does no work at all (:func:`floor_app`), measures the
protocol itself: OpenEnv's app, the WebSocket and the JSON of each step. Its steps/s over
the stock server's is the most that any server on this stack could gain. A fourth is the
stock server with its envs stepped in the event loop (``stock_app(inline=True)``): what
one env per session costs without OpenEnv's threads.

    arena-bench --only serve --seconds 4
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

SESSIONS = (1, 64, 256, 1024)
# what every session sends, in turn: long walks and a look around (each answer is a full observation)
CALLS = [json.dumps({"type": "step", "data": call}) for call in (
    {"tool": "move_to", "params": {"target": [12, 0, 9]}},
    {"tool": "idle"},
    {"tool": "query_world", "params": {"radius": 15}},
    {"tool": "move_to", "params": {"target": [-12, 0, -9]}},
)]


NO_WORK = "OpenEnv server doing no work"
"""The row of :func:`floor_app`: what the protocol costs, the ceiling of any server on it."""
INLINE = "stock server, envs stepped inline"
"""The row of ``stock_app(inline=True)``: one env per session without OpenEnv's thread per session."""
KINDS = ("arena", "floor", "stock", "inline")
"""The servers of the benchmark, measured in turn for each number of sessions."""


# -- the stock server --------------------------------------------------------------------

def stock_app(scenario: str, max_sessions: int, inline: bool = False) -> Any:
    """A one-env-instance-per-session OpenEnv server of ``scenario`` (Foraging or Crafting).

    Its env is synchronous, as OpenEnv's envs usually are, so OpenEnv steps each session in
    a thread of its own. ``inline=True`` gives it ``reset_async``/``step_async`` that step
    the env in the event loop itself instead: no threads, one session at a time.
    """
    import gymnasium as gym
    from openenv.core.env_server import create_app
    from openenv.core.env_server.interfaces import Environment

    import arena_envs  # noqa: F401
    from arena_envs.tools import tool_schemas
    from arena_envs.wrappers import ToolCallWrapper

    from .models import ArenaAction, ArenaObservation, ArenaState, observation_answer
    from .sessions import SCENARIOS

    env_id = SCENARIOS[scenario]

    class StockSession(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.env = ToolCallWrapper(gym.make(env_id))
            self.tools = tool_schemas(params=self.env.unwrapped.scenario.params)
            self._state = ArenaState(scenario=scenario)

        def reset(self, seed=None, episode_id=None, **kwargs) -> ArenaObservation:
            obs, _ = self.env.reset(seed=seed)
            self._state = ArenaState(scenario=scenario, seed=seed)
            return observation_answer(obs.to_text(), obs.to_dict(), self.tools, first=True)

        def step(self, action, timeout_s=None, **kwargs) -> ArenaObservation:
            obs, reward, terminated, truncated, info = self.env.step(action.tool_call())
            self._state.step_count += 1
            return observation_answer(obs.to_text(), obs.to_dict(), self.tools, first=False, reward=reward,
                                      terminated=terminated, truncated=truncated, info=info)

        @property
        def state(self) -> ArenaState:
            return self._state

    class InlineSession(StockSession):
        async def reset_async(self, seed=None, episode_id=None, **kwargs) -> ArenaObservation:
            return self.reset(seed, episode_id, **kwargs)

        async def step_async(self, action, timeout_s=None, **kwargs) -> ArenaObservation:
            return self.step(action, timeout_s, **kwargs)

    return create_app(InlineSession if inline else StockSession, ArenaAction, ArenaObservation, env_name=scenario,
                      max_concurrent_envs=max_sessions, state_cls=ArenaState)


def floor_app(scenario: str, max_sessions: int) -> Any:
    """The protocol's own cost: an OpenEnv server whose environment does no work at all.

    Every step answers with one of a few observations recorded from a real episode (the same
    payload a real server sends), so what is left is OpenEnv's app, the WebSocket and JSON
    per step. No server of any design, on this stack, can step faster than this one.
    """
    import gymnasium as gym
    from openenv.core.env_server import create_app
    from openenv.core.env_server.interfaces import Environment

    import arena_envs  # noqa: F401
    from arena_envs.tools import tool_schemas
    from arena_envs.wrappers import ToolCallWrapper

    from .models import ArenaAction, ArenaObservation, ArenaState, observation_answer
    from .sessions import SCENARIOS

    env = ToolCallWrapper(gym.make(SCENARIOS[scenario]))
    tools = tool_schemas(params=env.unwrapped.scenario.params)
    obs, _ = env.reset(seed=0)
    first = observation_answer(obs.to_text(), obs.to_dict(), tools, first=True)
    recorded = []
    for call in CALLS:
        obs, reward, terminated, truncated, info = env.step(json.loads(call)["data"])
        recorded.append(observation_answer(obs.to_text(), obs.to_dict(), tools, first=False, reward=reward,
                                           terminated=terminated, truncated=truncated, info=info))

    class NoWork(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.steps = 0

        def reset(self, seed=None, episode_id=None, **kwargs) -> ArenaObservation:
            return first

        def step(self, action, timeout_s=None, **kwargs) -> ArenaObservation:
            return recorded[0]

        async def reset_async(self, seed=None, episode_id=None, **kwargs) -> ArenaObservation:
            return first

        async def step_async(self, action, timeout_s=None, **kwargs) -> ArenaObservation:
            self.steps += 1
            return recorded[self.steps % len(recorded)]

        @property
        def state(self) -> ArenaState:
            return ArenaState(scenario=scenario, step_count=self.steps)

    return create_app(NoWork, ArenaAction, ArenaObservation, env_name=scenario,
                      max_concurrent_envs=max_sessions, state_cls=ArenaState)


def _run_server(kind: str, scenario: str, port: int, max_sessions: int) -> None:
    """The server process of one benchmark row."""
    import uvicorn

    from .app import MAX_FRAME_BYTES, freeze_heap, make_app
    from .guard import Limits

    if kind in ("stock", "inline"):
        app = stock_app(scenario, max_sessions, inline=kind == "inline")
    elif kind == "floor":
        app = floor_app(scenario, max_sessions)
    else:  # limits well above what the load generator (one address) sends: this measures the server, not the guard
        app = make_app(scenario, max_sessions=max_sessions,
                       limits=Limits(ws_rate=1e6, ws_burst=10**6, http_rate=None, idle_timeout=None,
                                     sessions_per_client=max_sessions))
    freeze_heap()  # both servers: a server tuning, not a batching advantage
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws_max_size=MAX_FRAME_BYTES,
                ws_ping_interval=None, backlog=4096)


_WITHOUT_GRADIO = "import sys; sys.modules.setdefault('gradio', None); "
"""Start of every process the benchmark runs: OpenEnv treats gradio as not installed, which
saves each process about 2.7 s of start-up (its web UI is not served here)."""


class Server(NamedTuple):
    url: str  # its WebSocket URL
    pid: int  # its process


@contextlib.contextmanager
def server_process(kind: str, scenario: str, max_sessions: int) -> Iterator[Server]:
    """Run a server of ``kind`` (one of :data:`KINDS`) in its own process while the block runs."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "ENABLE_WEB_INTERFACE": "false"}
    code = (f"{_WITHOUT_GRADIO}from arena_envs.serve.bench import _run_server; "
            f"_run_server({kind!r}, {scenario!r}, {port}, {max_sessions})")
    process = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        import requests

        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(requests.ConnectionError):
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=5).ok:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {kind} server did not start")
            time.sleep(0.2)
        yield Server(f"ws://127.0.0.1:{port}/ws", process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


# -- the load ----------------------------------------------------------------------------

SESSIONS_PER_CLIENT = 128
"""Sessions one load-generating process drives: more processes for more sessions, so that
the client (pure-Python WebSocket framing) is not what is measured."""


async def _client_load(url: str, first_seed: int, sessions: int, seconds: float) -> None:
    """One load process: open and reset ``sessions`` sessions, say "ready", wait for "go" on
    stdin, step for ``seconds``, then print every step's latency as JSON."""
    from websockets.asyncio.client import connect

    go = asyncio.Event()
    latencies: list[float] = []
    opened = 0

    async def client(seed: int) -> None:
        nonlocal opened
        async with connect(url, max_size=2**24, ping_interval=None, open_timeout=300, compression=None) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
            await ws.recv()
            opened += 1
            if opened == sessions:
                print("ready", flush=True)
            await go.wait()
            k, stop = seed, time.perf_counter() + seconds
            while (start := time.perf_counter()) < stop:
                await ws.send(CALLS[k % len(CALLS)])
                answer = await ws.recv()
                latencies.append(time.perf_counter() - start)
                k += 1
                tail = answer[-300:]  # read like a client that only needs to know whether to reset
                if not answer.startswith('{"type":"observation"'):
                    raise RuntimeError(f"the server answered with an error: {answer[:300]}")
                if '"done":true' in tail:
                    await ws.send(json.dumps({"type": "reset", "data": {}}))
                    await ws.recv()

    async def wait_for_go() -> None:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        go.set()

    await asyncio.gather(wait_for_go(), *(client(first_seed + i) for i in range(sessions)))
    print(json.dumps(latencies), flush=True)


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) process ``pid`` has used so far, where /proc tells (Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load(server: Server, sessions: int, seconds: float) -> dict[str, float]:
    """``sessions`` sessions stepping for ``seconds`` once all have reset: steps/s, latency, and
    the server's CPU time per step (``cpu_us``: NaN where it cannot be read).

    Steps/s says what a server delivers on this machine, where the load processes share its
    two cores; CPU time per step says what each step costs the server, whatever the number of
    cores (or threads) it keeps busy."""
    url = server.url
    shares = [min(SESSIONS_PER_CLIENT, sessions - start) for start in range(0, sessions, SESSIONS_PER_CLIENT)]
    workers = []
    for k, share in enumerate(shares):
        code = (f"{_WITHOUT_GRADIO}import asyncio; from arena_envs.serve.bench import _client_load; "
                f"asyncio.run(_client_load({url!r}, {k * SESSIONS_PER_CLIENT}, {share}, {seconds}))")
        workers.append(subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True))
    try:
        for worker in workers:
            if worker.stdout.readline().strip() != "ready":
                raise RuntimeError("a load process failed to open its sessions")
        started, cpu_before = time.perf_counter(), _cpu_seconds(server.pid)
        for worker in workers:
            worker.stdin.write("go\n")
            worker.stdin.flush()
        every = np.concatenate([np.asarray(json.loads(worker.stdout.readline())) for worker in workers])
        elapsed, cpu_after = time.perf_counter() - started, _cpu_seconds(server.pid)
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    cpu = math.nan if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return {"steps_per_s": len(every) / elapsed, "p50_us": float(np.percentile(every, 50)) * 1e6,
            "p99_us": float(np.percentile(every, 99)) * 1e6, "cpu_us": cpu / len(every) * 1e6}


def measure(scenario: str = "foraging", sessions: tuple[int, ...] = SESSIONS, seconds: float = 4.0,
            kinds: tuple[str, ...] = KINDS) -> dict[str, dict[int, dict[str, float]]]:
    """``{kind: {sessions: {"steps_per_s", "p50_us", "p99_us", "cpu_us"}}}`` for each server kind."""
    results: dict[str, dict[int, dict[str, float]]] = {kind: {} for kind in kinds}
    with contextlib.ExitStack() as running:
        # both servers up at once and measured in turn for each N, so that a change in the
        # machine's load over the run does not favour one of them
        servers = {kind: running.enter_context(server_process(kind, scenario, max(sessions))) for kind in kinds}
        for n in sessions:
            for kind in kinds:
                results[kind][n] = _load(servers[kind], n, seconds)
                print(f"  {kind:5s} {scenario} {n:5d} sessions: {results[kind][n]}", file=sys.stderr, flush=True)
    return results


def bench_rows(seconds: float, scenario: str = "foraging",
               sessions: tuple[int, ...] = SESSIONS) -> list[tuple[str, float, str]]:
    """``arena-bench`` rows per session count and server: steps/s, p50/p99 latency, server CPU per step."""
    try:
        import openenv  # noqa: F401
    except ImportError:
        print("serve: skipped (pip install arena-envs[serve])", file=sys.stderr)
        return []
    results = measure(scenario, sessions, max(seconds, 2.0))
    names = {"arena": "arena-serve", "floor": NO_WORK, "stock": "stock OpenEnv server", "inline": INLINE}
    rows = []
    for n in sessions:
        for kind, name in names.items():
            r = results[kind][n]
            label = f"Serve {scenario} {n} sessions: {name}"
            rows += [(label, r["steps_per_s"], "steps/s"), (f"{label} p50", r["p50_us"], "us/step"),
                     (f"{label} p99", r["p99_us"], "us/step"), (f"{label} CPU", r["cpu_us"], "CPU us/step")]
    return rows


# -- a bystander beside hostile clients ---------------------------------------------------------

STALL = '{"a":[' * 199 + "1," * 31000
"""A 63 KB message whose search for a tool call once cost 0.7 s on the server's event loop."""
ATTACKERS = 4


BYSTANDER, SLOWLORIS = "127.0.0.3", "127.0.0.2"
"""The loopback addresses of the bystander and of the slowloris attacker (the server's caps are per address)."""
SLOWLORIS_SOCKETS = 200
FRESH_SESSIONS = 20


def _dial(url: str, address: str) -> socket.socket:
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30, source_address=(address, 0))


def _bystander_latencies(url: str, seconds: float) -> list[float]:
    """One session's plain step latencies (s), stepping for ``seconds``, from the bystander's address."""
    from websockets.sync.client import connect

    latencies: list[float] = []
    with connect(url, sock=_dial(url, BYSTANDER)) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        ws.recv(timeout=60)
        end = time.monotonic() + seconds
        while time.monotonic() < end or len(latencies) < 100:
            start = time.perf_counter()
            ws.send(CALLS[1])
            answer = json.loads(ws.recv(timeout=60))
            latencies.append(time.perf_counter() - start)
            if answer["data"].get("done"):
                ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
                ws.recv(timeout=60)
    return latencies


def _fresh_sessions_refused(url: str, sessions: int = FRESH_SESSIONS) -> int:
    """Of ``sessions`` new sessions opened one after another from the bystander's address, how
    many were refused (at the handshake, or without an observation for their reset)."""
    from websockets.sync.client import connect

    refused = 0
    for k in range(sessions):
        try:
            with connect(url, sock=_dial(url, BYSTANDER), open_timeout=30) as ws:
                ws.send(json.dumps({"type": "reset", "data": {"seed": k}}))
                refused += json.loads(ws.recv(timeout=60))["type"] != "observation"
        except Exception:  # noqa: BLE001 - a refusal of any kind counts
            refused += 1
    return refused


def stall_rows(seconds: float, scenario: str = "foraging") -> list[tuple[str, float, str]]:
    """``arena-bench --only serve_stall``: a bystander's p50/p99 plain step alone, then beside
    :data:`ATTACKERS` clients sending :data:`STALL` back to back (read in the server's reader
    process, off its event loop), then beside :data:`SLOWLORIS_SOCKETS` half-open sockets from
    another address (the server's per-address caps); under each attack, also how many of
    :data:`FRESH_SESSIONS` new sessions of the bystander's were refused (none should be)."""
    import threading

    from websockets.sync.client import connect

    rows: list[tuple[str, float, str]] = []
    with server_process("arena", scenario, 8) as server:
        stop = threading.Event()

        def stall(k: int) -> None:
            with contextlib.suppress(Exception), connect(server.url, max_size=None) as ws:
                ws.send(json.dumps({"type": "reset", "data": {"seed": k}}))
                ws.recv(timeout=60)
                while not stop.is_set():
                    ws.send(json.dumps({"type": "step", "data": {"message": STALL}}))
                    ws.recv(timeout=300)

        def slowloris(_: int) -> None:  # half-open sockets, one header line each, renewed when closed
            held: list[socket.socket] = []
            while not stop.is_set():
                held = [sock for sock in held if sock.fileno() >= 0]
                while len(held) < SLOWLORIS_SOCKETS and not stop.is_set():
                    try:
                        sock = _dial(server.url, SLOWLORIS)
                        sock.sendall(b"GET /health HTTP/1.1\r\n")
                    except OSError:
                        break
                    held.append(sock)
                stop.wait(0.5)
                for sock in held:  # the ones the server answered or closed: dropped, dialled again
                    try:
                        sock.setblocking(False)
                        sock.recv(1, socket.MSG_PEEK)
                    except BlockingIOError:
                        continue  # still open, still waiting for its request
                    except OSError:
                        pass
                    sock.close()
            for sock in held:
                sock.close()

        attacks = (("alone", None, 0), (f"beside {ATTACKERS} stall attackers", stall, ATTACKERS),
                   (f"beside {SLOWLORIS_SOCKETS} slowloris sockets from another address", slowloris, 1))
        for label, attack, attackers in attacks:
            stop.clear()
            threads = [threading.Thread(target=attack, args=(k,), daemon=True) for k in range(attackers)]
            for thread in threads:
                thread.start()
            if threads:
                time.sleep(max(seconds, 2.0))  # the reader process is up and busy, the sockets are open
            latencies = np.array(_bystander_latencies(server.url, max(seconds, 1.0))) * 1e6
            refused = _fresh_sessions_refused(server.url) if attack is not None else None
            stop.set()
            for thread in threads:
                thread.join(timeout=300)
            name = f"Serve {scenario} bystander {label}"
            rows += [(f"{name} p50", float(np.percentile(latencies, 50)), "us/step"),
                     (f"{name} p99", float(np.percentile(latencies, 99)), "us/step")]
            if refused is not None:
                rows.append((f"{name}: new sessions refused", float(refused), f"of {FRESH_SESSIONS}"))
    return rows
