"""The server's reader process (:mod:`arena_envs.serve.reading`): what a client is told when it
dies in the middle of a read or cannot read an action, and its request loop on real pipes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from arena_envs.serve import make_app
from arena_envs.serve.app import running
from arena_envs.serve.reading import Reader, _receive, _send, _serve, read_ahead, read_calls

COSTLY = "Thinking. " * 300 + '{"tool": "idle", "params": {}}'
"""An action with enough text to be read in the reader's process (more than 2,048 characters)."""


def call(ws, message: dict) -> dict:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def reader_pids() -> list[int]:
    """This process's children running the reader (``python -m arena_envs.serve.reading``)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and b"arena_envs.serve.reading" in command:
            found.append(int(proc.name))
    return found


def test_a_reader_that_dies_in_the_middle_of_a_read_tells_the_client_to_send_again_and_is_replaced():
    with running(make_app("foraging", max_sessions=2)) as url, connect(url.replace("http", "ws") + "/ws") as ws:
        call(ws, {"type": "reset", "data": {"seed": 1}})
        assert call(ws, {"type": "step", "data": {"message": COSTLY}})["type"] == "observation"
        [pid] = reader_pids()
        os.kill(pid, signal.SIGSTOP)  # the next request waits in its pipe, unread
        try:
            ws.send(json.dumps({"type": "step", "data": {"message": COSTLY}}))
            time.sleep(0.5)
        finally:
            os.kill(pid, signal.SIGKILL)
        answer = json.loads(ws.recv(timeout=30))
        assert answer["type"] == "error", answer
        assert answer["data"]["message"] == "the server's reader process stopped; send the action again"
        again = call(ws, {"type": "step", "data": {"message": COSTLY}})
        assert again["type"] == "observation" and again["data"]["observation"]["observation"]["tick"] == 2
        assert reader_pids() != [pid] and len(reader_pids()) == 1


def test_an_action_the_reader_cannot_read_is_an_error_naming_why():
    reader = Reader()
    try:
        with pytest.raises(RuntimeError, match=r"^the action could not be read: TypeError: 'int' object is not "
                                               r"iterable$"):
            asyncio.run(reader.run(read_ahead, 5))
        assert asyncio.run(reader.run(read_ahead, [None])) == [None]  # the same process reads on
        assert reader.reads == 1
    finally:
        reader.shutdown()


def test_the_reader_loop_answers_each_request_in_order_until_its_input_closes():
    requests_read, requests_write = os.pipe()
    answers_read, answers_write = os.pipe()
    with os.fdopen(requests_read, "rb") as requests_in, os.fdopen(answers_write, "wb") as answers_out, \
            os.fdopen(requests_write, "wb") as ask, os.fdopen(answers_read, "rb") as hear:
        loop = threading.Thread(target=_serve, args=(requests_in, answers_out), daemon=True)
        loop.start()
        message = 'I will look. {"tool": "query_world", "params": {"radius": 5}}'
        _send(ask, ("read_calls", (message, None, [])))
        assert _receive(hear) == (True, read_calls(message, None, []))
        _send(ask, ("read_ahead", ([{"tool": 7}],)))
        ok, [unreadable] = _receive(hear)
        assert ok and unreadable.code == "INVALID_PARAMS" and "tool" in unreadable.message
        _send(ask, ("os.system", ("true",)))  # only the reader's own functions, by name
        assert _receive(hear) == (False, "KeyError: 'os.system'")
        _send(ask, ("read_ahead", (5,)))
        assert _receive(hear) == (False, "TypeError: 'int' object is not iterable")
        _send(ask, ("read_ahead", ([None],)))  # an error ends no loop
        assert _receive(hear) == (True, [None])
        ask.close()
        loop.join(timeout=10)
        assert not loop.is_alive()
