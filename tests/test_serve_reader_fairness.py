"""The server's reader serves the smallest read first (issue 43, item 1): sessions flooding it
with large hostile messages do not queue another session's ordinary message behind theirs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

from websockets.sync.client import connect

from arena_envs.serve import make_app
from arena_envs.serve.app import running
from arena_envs.serve.reading import MAX_WAIT_S, Reader, read_ahead

HOSTILE = "{}" * 32_000
"""64 KB that cost about 0.1 s to read (each ``{}`` an object the search decodes): the costliest
text known within the server's limit."""
ORDINARY = "Let me look around first. " * 120 + '{"tool": "idle", "params": {}}'
"""An ordinary 3 KB assistant message: prose, then the call (read in the reader's process too)."""


def reader_pid() -> int:
    """The reader's process: this process's child running ``python -m arena_envs.serve.reading``."""
    for proc in Path("/proc").iterdir():
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (proc / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and b"arena_envs.serve.reading" in command:
            return int(proc.name)
    raise AssertionError("no reader process")


def wait_for(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def step(ws, message: str) -> None:
    ws.send(json.dumps({"type": "step", "data": {"message": message}}))


def test_an_ordinary_message_is_read_before_the_hostile_ones_queued_ahead_of_it():
    app = make_app("foraging", max_sessions=8)  # six sessions per client address
    reader: Reader = app.state.hub.reader
    with running(app) as url, contextlib.ExitStack() as stack:
        sockets = {name: stack.enter_context(connect(url.replace("http", "ws") + "/ws", max_size=None))
                   for name in ("hostile 1", "hostile 2", "hostile 3", "hostile 4", "hostile 5", "bystander")}
        for k, ws in enumerate(sockets.values()):
            ws.send(json.dumps({"type": "reset", "data": {"seed": k}}))
            assert json.loads(ws.recv(timeout=30))["type"] == "observation"
        step(sockets["hostile 1"], HOSTILE)  # starts the reader's process
        assert json.loads(sockets["hostile 1"].recv(timeout=60))["type"] == "observation"
        pid = reader_pid()
        os.kill(pid, signal.SIGSTOP)  # the next read stays in progress until SIGCONT
        try:
            step(sockets["hostile 1"], HOSTILE)  # the read in progress
            for k in range(2, 6):
                step(sockets[f"hostile {k}"], HOSTILE)
            wait_for(lambda: reader.waiting == 4)  # four of the five queued behind the read in progress
            step(sockets["bystander"], ORDINARY)
            wait_for(lambda: reader.waiting == 5)
        finally:
            os.kill(pid, signal.SIGCONT)
        answered: list[str] = []

        def answer(name: str) -> None:
            frame = json.loads(sockets[name].recv(timeout=120))
            assert frame["type"] == "observation", frame
            answered.append(name)

        listeners = [threading.Thread(target=answer, args=(name,)) for name in sockets]
        for listener in listeners:
            listener.start()
        for listener in listeners:
            listener.join(timeout=180)
    assert len(answered) == 6, answered
    # read right after the read that was in progress: answered second (the hostile reads take about
    # 0.1 s each; third allows for the listening threads waking late). Served in turn, it was sixth.
    assert answered.index("bystander") <= 2, answered


def test_a_large_read_that_waited_long_enough_goes_before_smaller_ones():
    """Smallest first, but not for ever: a read queued for MAX_WAIT_S goes before smaller ones
    that came after it, so a stream of small reads cannot starve a large one."""
    reader = Reader()

    async def order_of_answers() -> list[str]:
        answered: list[str] = []

        async def read(name: str, calls: list) -> None:
            await reader.run(read_ahead, calls)
            answered.append(name)

        await reader.run(read_ahead, [None])  # starts the reader's process
        os.kill(reader_pid(), signal.SIGSTOP)
        try:
            tasks = [asyncio.ensure_future(read("in progress", [None]))]
            await asyncio.sleep(0.2)
            tasks.append(asyncio.ensure_future(read("large", ["x" * 5000])))
            await asyncio.sleep(MAX_WAIT_S + 0.5)
            tasks += [asyncio.ensure_future(read(f"small {k}", [None])) for k in range(3)]
            while reader.waiting < 4:
                await asyncio.sleep(0.01)
        finally:
            os.kill(reader_pid(), signal.SIGCONT)
        await asyncio.gather(*tasks)
        return answered

    try:
        answered = asyncio.run(order_of_answers())
    finally:
        reader.shutdown()
    assert answered == ["in progress", "large", "small 0", "small 1", "small 2"], answered
