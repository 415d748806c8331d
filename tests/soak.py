"""A long soak of the fuzz and property suites, and of a real server: ``make soak`` (``python tests/soak.py MINUTES``).

Each round runs every fuzz suite with ``EXAMPLES`` hostile examples per test, then
:func:`sandbox_round`: ``SANDBOX_IDS`` ids on a pool of ``PythonSandboxEnv`` jails, each
with state kept over its calls, some of them hostile (a fork bomb, a crash, a scribble on
the reply channel, a child left running); every answer is checked, so a lost or shifted
one fails the soak. Between rounds the process's resident memory, open descriptors and
child processes are printed, so a leak in the code under test shows as growth from round
to round (Hypothesis's own bookkeeping of a test's examples is freed when the test ends,
so within a round memory may rise and fall).

Each round also drives an ``arena-serve`` process (started once, its real entry point) with
clients that open, step and close sessions while others abuse it (stall messages read off
the loop, sessions that only ask for their state; from other loopback addresses, 200
slowloris sockets, HTTP-made sessions held by sockets, an address taking all the sessions
it may, malformed frames of every shape). Each good client has an address of its own.
After the round every session must be gone and every world free, every good client must
have got every answer (none kept out), and the server's resident memory must stay flat:
growth past ``SERVER_GROWTH_MB`` after the first round fails the soak.

The chat suite's Hypothesis strategy over whole replies runs at ``CHAT_EXAMPLES`` a round.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

SUITES = ["test_toollayer_fuzz.py", "test_treasure_hunt_fuzz.py", "test_pool_properties.py", "test_serve_frames.py"]
EXAMPLES = 500
CHAT_SUITE, CHAT_EXAMPLES = "test_llm_chat_fuzz.py", 10_000
SANDBOX_IDS, SANDBOX_POOL = 96, 8
HOSTILE = [  # what one id in four runs before its checked calls (each ends its own jail or not)
    "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "import ctypes; ctypes.string_at(0)",
    "import os\nfor fd in range(3, 32):\n    try:\n        os.write(fd, b'junk')\n    except OSError:\n        pass",
    "import subprocess; subprocess.Popen(['sleep', '1000'], start_new_session=True)",
    # issue 34: past the jail's memory (memfd), a forged reply with the real one silenced and late
    # output, a 100 MB error message, the keyring and a new user namespace, locks on shared files
    "import os\nfor _ in range(8):\n    fd = os.memfd_create('hoard')\n    for _ in range(60):\n"
    "        os.write(fd, b'x' * 2**20)",
    "import os, sys, time\nworker = sys._getframe(1)\nframe = worker.f_globals['frame']\n"
    "os.write(worker.f_locals['replies'], frame(worker.f_locals['seq']))\n"
    "def once(seq, payload=b''):\n    worker.f_globals['frame'] = frame\n    return b''\n"
    "worker.f_globals['frame'] = once\ntime.sleep(0.2)\nprint('late')",
    "raise ValueError('x' * 100_000_000)",
    "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.syscall(248, b'user', b'soak', b'x', 1, -4)\n"
    "libc.syscall(272, 0x10000000)",
    "import fcntl, json\nkept_locks = [open(json.__file__), open('/dev/null', 'w')]\n"
    "for f in kept_locks:\n    fcntl.flock(f, fcntl.LOCK_EX)",
]


def sandbox_round() -> int:
    """Run SANDBOX_IDS ids on SANDBOX_POOL sandboxes; return how many answers were wrong (and print them)."""
    from arena_envs.tools import PythonSandboxEnv, ResourcePool

    pool = ResourcePool(lambda: PythonSandboxEnv(time_limit=2, max_processes=32), size=SANDBOX_POOL, timeout=600)

    async def episode(n: int) -> int:
        if n % 4 == 0:
            await pool.call(HOSTILE[n // 4 % len(HOSTILE)], id=n)
        answers = [(await pool.call(f"total = {n}", id=n), "")]
        for k in range(3):
            answers.append((await pool.call(f"total = total * 31 + {k}\nprint(total)", id=n), f"{_total(n, k)}\n"))
        await pool.release(n)
        for got, expected in answers:
            if got != expected:
                print(f"sandbox id {n}: expected {expected!r}, got {got!r}", flush=True)
        return sum(got != expected for got, expected in answers)

    async def main() -> int:
        wrong = sum(await asyncio.gather(*(episode(n) for n in range(SANDBOX_IDS))))
        await pool.aclose()
        return wrong

    return asyncio.run(main())


def _total(n: int, k: int) -> int:
    total = n
    for j in range(k + 1):
        total = total * 31 + j
    return total


def children() -> int:
    """This process's child processes (the jails' bwrap processes among them)."""
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as fh:
        return len(fh.read().split())


SERVER_GROWTH_MB = 40.0
STALL = '{"a":[' * 199 + "1," * 31000


def rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Server:
    """``arena-serve foraging`` on a free loopback port, with limits met within a round."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "arena_envs.serve", "foraging", "--port", str(self.port), "--max-sessions", "32",
             "--sessions-per-client", "8", "--idle-timeout", "2", "--http-session-ttl", "2", "--header-timeout", "2",
             "--log-level", "error"])
        deadline = time.monotonic() + 90
        while not self._up():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("arena-serve did not start")
            time.sleep(0.2)

    def _up(self) -> bool:
        import requests

        with contextlib.suppress(requests.ConnectionError):
            return requests.get(self.url + "/health", timeout=5).ok
        return False

    def stats(self) -> dict:
        import requests

        return requests.get(self.url + "/stats", timeout=10).json()

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def serve_round(server: Server, clients: int = 12, steps: int = 40, abuse: bool = True) -> list[str]:
    """One round of good clients (each opens a session, resets, steps ``steps`` times and
    closes) beside abusive ones; the problems found (empty: none)."""
    import requests
    from websockets.sync.client import connect

    ws_url = server.url.replace("http://", "ws://") + "/ws"
    problems: list[str] = []
    done = threading.Event()

    def dial(address: str) -> socket.socket:
        return socket.create_connection(("127.0.0.1", server.port), timeout=10, source_address=(address, 0))

    def good(k: int) -> None:
        try:
            with connect(ws_url, sock=dial(f"127.0.1.{k + 1}")) as ws:  # an address of its own
                ws.send(json.dumps({"type": "reset", "data": {"seed": k}}))
                tick = json.loads(ws.recv(timeout=60))["data"]["observation"]["observation"]["tick"]
                for _ in range(steps):
                    ws.send(json.dumps({"type": "step", "data": {"tool": "idle"}}))
                    answer = json.loads(ws.recv(timeout=60))
                    if answer["type"] != "observation":
                        problems.append(f"client {k}: {answer}")
                        return
                    seen = answer["data"]["observation"]["observation"]["tick"]
                    if seen != tick + 1:  # its own world, one tick a step: nothing lost, nothing shared
                        problems.append(f"client {k}: tick {seen} after tick {tick}")
                    tick = seen
                    if answer["data"]["done"]:
                        ws.send(json.dumps({"type": "reset", "data": {"seed": k}}))
                        tick = json.loads(ws.recv(timeout=60))["data"]["observation"]["observation"]["tick"]
        except Exception as err:  # noqa: BLE001 - every failure is a finding
            problems.append(f"client {k}: {type(err).__name__}: {err}")

    def staller() -> None:
        with contextlib.suppress(Exception), connect(ws_url, max_size=None) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            ws.recv(timeout=60)
            while not done.is_set():
                ws.send(json.dumps({"type": "step", "data": {"message": STALL}}))
                ws.recv(timeout=120)

    def zombie() -> None:  # asks for its state, never acts: reaped after the idle timeout
        with contextlib.suppress(Exception), connect(ws_url) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            ws.recv(timeout=60)
            while not done.is_set():
                ws.send(json.dumps({"type": "state"}))
                ws.recv(timeout=10)
                time.sleep(0.2)

    def http_sessions() -> None:  # made and dropped: they expire
        with contextlib.suppress(Exception):
            while not done.is_set():
                requests.post(server.url + "/mcp", json={"jsonrpc": "2.0", "id": 1,
                                                         "method": "openenv/session/create", "params": {}}, timeout=10)
                time.sleep(0.5)

    def http_holder(address: str) -> None:  # HTTP-made sessions from another address, held by sockets
        create = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}})
        with contextlib.ExitStack() as stack, contextlib.suppress(Exception):
            for _ in range(2):
                link = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10, source_address=(address, 0))
                link.request("POST", "/mcp", create, {"content-type": "application/json"})
                made = json.loads(link.getresponse().read())
                link.close()
                ws = stack.enter_context(connect(f"{ws_url}?session_id={made['result']['session_id']}",
                                                 sock=dial(address)))
                ws.send(json.dumps({"type": "reset", "data": {"seed": 2}}))
                ws.recv(timeout=60)
            done.wait()

    def hog() -> None:  # takes every session its address may have, and holds them
        with contextlib.ExitStack() as stack, contextlib.suppress(Exception):
            while not done.is_set():
                ws = stack.enter_context(connect(ws_url, sock=dial("127.0.0.3")))
                ws.send(json.dumps({"type": "reset", "data": {"seed": 3}}))
                if json.loads(ws.recv(timeout=60))["type"] == "error":  # its share is full: told why
                    done.wait(60)

    def malformed() -> None:  # frames of every wrong shape: each answered, the session lives on
        frames = [{"type": ["step"]}, {"type": {"type": "step"}}, {"type": 5}, {"type": None},
                  {"type": "step", "data": {"message": "\ud800"}}, {"type": "reset", "data": [1]}, "[1, 2]", "{"]
        try:
            with connect(ws_url, sock=dial("127.0.0.8")) as ws:
                while not done.is_set():
                    for frame in frames:
                        ws.send(frame if isinstance(frame, str) else json.dumps(frame))
                        if json.loads(ws.recv(timeout=60))["type"] != "error":
                            problems.append(f"malformed frame {frame!r} was not refused")
                    ws.send(json.dumps({"type": "state"}))
                    ws.recv(timeout=60)
                    time.sleep(0.1)
        except Exception as err:  # noqa: BLE001 - its session must live on
            problems.append(f"malformed frames ended their session: {type(err).__name__}: {err}")

    def slowloris() -> None:  # 200 half-open sockets from one address (the server closes some at once)
        sockets = []
        for _ in range(200):
            with contextlib.suppress(OSError):
                sock = dial("127.0.0.2")
                sock.sendall(b"GET /health HTTP/1.1\r\n")
                sockets.append(sock)
        done.wait(30)
        for sock in sockets:
            sock.close()

    abusers = [staller, staller, zombie, http_sessions, slowloris, hog, malformed,
               *(functools.partial(http_holder, f"127.0.0.{k}") for k in (4, 5, 6, 7))] if abuse else []
    threads = [threading.Thread(target=f, daemon=True) for f in abusers]
    threads += [threading.Thread(target=good, args=(k,), daemon=True) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads[len(abusers):]:
        thread.join(timeout=300)
    done.set()
    for thread in threads[:len(abusers)]:
        thread.join(timeout=300)
    deadline = time.monotonic() + 30  # closed sessions give their worlds back; HTTP ones expire
    while True:
        stats = server.stats()
        if stats["sessions"] == 0 and stats["http_sessions"] == 0 and stats["free_worlds"] == stats["worlds"]:
            break
        if time.monotonic() > deadline:
            problems.append(f"after the round, sessions or worlds still held: {stats}")
            break
        time.sleep(0.2)
    return problems


def main(minutes: float) -> int:
    here = Path(__file__).parent
    args = ["-q", "-p", "no:cacheprovider", "-p", "no:nbmake", "--soak", str(EXAMPLES), "-o", "addopts=",
            *(str(here / suite) for suite in SUITES)]
    server, round_, baseline = Server(), 0, None
    end = time.monotonic() + 60 * minutes
    try:
        while round_ == 0 or time.monotonic() < end:  # one round at least
            round_ += 1
            code = pytest.main(args)
            chat = pytest.main([*args[:args.index("--soak") + 1], str(CHAT_EXAMPLES), "-o", "addopts=",
                                "--timeout", "0", str(here / CHAT_SUITE)])  # 10,000 examples take minutes
            code = code or chat
            wrong = sandbox_round()
            gc.collect()
            print(f"soak round {round_}: exit {int(code)}, sandbox answers wrong {wrong}, resident memory "
                  f"{rss_mb():.0f} MB, open descriptors {len(os.listdir('/proc/self/fd'))}, child processes "
                  f"{children()}", flush=True)
            if code != 0 or wrong:
                return int(code) or 1
            problems = serve_round(server, abuse=round_ % 2 == 0)  # with and without abuse, in turn
            memory = rss_mb(server.process.pid)
            baseline = memory if baseline is None else baseline
            print(f"soak round {round_}: server {server.stats()['steps']} steps in all, "
                  f"{len(problems)} problems, resident memory {memory:.0f} MB", flush=True)
            if problems:
                print("\n".join(problems[:20]), flush=True)
                return 1
            if memory > baseline + SERVER_GROWTH_MB:
                print(f"the server grew from {baseline:.0f} to {memory:.0f} MB", flush=True)
                return 1
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0))
