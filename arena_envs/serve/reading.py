"""Reading a session's action into tool calls, and doing it off the event loop when it may cost much.

Finding a call in text searches it, and a hostile message can make that search cost far
more than its length (a 63 KB one once cost 0.7 s). A server reads such an action in
:class:`Reader`'s process: neither its event loop nor, as a thread would, its GIL waits on
it (a reader thread still left a bystander's p99 step at 58 ms under four attackers; the
process, 6 ms), so the other sessions' steps go on. Plain calls of any size (read without searching
text) and actions with little text are read on the loop, where they cost microseconds.

This module imports only the parsers, so that the reader's process starts in a second.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from arena_envs.llm.parsers import parse_reply
from arena_envs.tools import ToolCallError
from arena_envs.tools.decision import is_plain_call, parse_decision
from arena_envs.tools.resource_pool import Workers

MAX_CALLS = 8
"""Calls of one assistant message carried out, in order, one tick each (as ``ChatEnv``'s
``max_calls``); the rest are not run and are counted in ``info["parse"]["calls_not_run"]``."""
READ_OFF_LOOP_CHARS = 2048
"""An action holding more text than this (as JSON) is read in the :class:`Reader`'s process."""
MAX_MESSAGE_CHARS = 64 * 1024
"""An action holding more text than this is refused with a clear error (the server's frame
limit, ``Limits.max_message_bytes``, refuses bigger frames before they get here)."""


def read_calls(message: Any, call: Any, tools: list[dict[str, Any]],
               ready: bool = False) -> tuple[list[Any], dict[str, Any] | None]:
    """The tool calls of an action (its assistant ``message``, or else its plain ``call``) for
    the tool layer, in order, and the parser's telemetry for a message (None otherwise).

    A plain call object is one call. An assistant message is read by the chat parsers of
    :mod:`arena_envs.llm.parsers` (every common tool-call format); each call it holds, up to
    :data:`MAX_CALLS`, is one tick. A message with no readable call goes to the tool layer
    as it is, which answers INVALID_PARAMS saying why. ``ready``: each call already read
    by the tool layer's parser (see :func:`read_ahead`), for a reading done off the loop.
    """
    if message is None:
        calls, telemetry = [call], None
    else:
        parsed = parse_reply(message, tools=tools)
        telemetry = parsed.telemetry()
        if parsed.failure:
            telemetry["calls_not_run"] = 0
            calls = [message]
        else:
            calls = [found.as_call() if found.name else message for found in parsed.calls]
            telemetry["calls_not_run"] = max(0, len(calls) - MAX_CALLS)
            calls = calls[:MAX_CALLS]
    return (read_ahead(calls) if ready else calls), telemetry


class Unreadable:
    """A call the reader could not read: the tool layer meets the same error at once
    (``parse_decision`` reads an object through its ``to_dict``), without searching again."""

    __slots__ = ("message", "code", "field", "tool")

    def __init__(self, error: ToolCallError) -> None:
        self.message, self.code, self.field, self.tool = error.message, error.code.value, error.field, error.tool

    def to_dict(self) -> dict[str, Any]:
        raise ToolCallError(self.message, code=self.code, field=self.field, tool=self.tool)

    def __getstate__(self) -> tuple[Any, ...]:
        return self.message, self.code, self.field, self.tool

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.message, self.code, self.field, self.tool = state


def read_ahead(calls: list[Any]) -> list[Any]:
    """``calls`` as the tool layer will read them: each a Decision, or an :class:`Unreadable`
    holding its error (None, an agent carrying on, stays None)."""
    ready = []
    for call in calls:
        try:
            ready.append(None if call is None else parse_decision(call))
        except ToolCallError as err:
            ready.append(Unreadable(err))
    return ready


def text_size(payload: Any) -> int:
    """How much text reading ``payload`` may have to search: 0 for a plain call (read
    without searching), else its length as JSON (measured in C: microseconds for 64 KB)."""
    if payload is None or is_plain_call(payload):
        return 0
    if isinstance(payload, str):
        return len(payload)
    try:
        return len(json.dumps(payload, default=repr))
    except (TypeError, ValueError, RecursionError):  # odd data: let the reader say what is wrong
        return READ_OFF_LOOP_CHARS + 1


class Reader:
    """A process of its own, started at the first costly read, that reads actions for a server.

    It runs ``python -m arena_envs.serve.reading`` (a plain child process: nothing of the
    server's own script runs again in it, as ``multiprocessing`` would make it), and takes
    one request at a time on its stdin, answering on its stdout, each a length-prefixed
    pickle. Reads queue for it: a flood of costly actions slows only their own senders.
    It ends when the server closes its stdin, or dies; one that died is replaced at the next read.
    """

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()  # one request on the pipes at a time
        self._thread = Workers(1, "arena-serve-reader")  # waits on the pipes, off the event loop
        self.reads = 0  # reads done

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` (a function of this module) in the reader's process;
        RuntimeError when that process failed."""
        result = await self._thread.run(self._ask, function.__name__, args)
        self.reads += 1
        return result

    def _ask(self, name: str, args: tuple[Any, ...]) -> Any:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE)
            process = self._process
            try:
                _send(process.stdin, (name, args))
                ok, value = _receive(process.stdout)
            except (OSError, ValueError, EOFError, pickle.UnpicklingError):  # ValueError: closed by shutdown
                process.kill()
                raise RuntimeError("the server's reader process stopped; send the action again") from None
        if not ok:
            raise RuntimeError(f"the action could not be read: {value}")
        return value

    def shutdown(self) -> None:
        """Stop the reader's process (a read in flight gets RuntimeError, its client a clear error)."""
        process, self._process = self._process, None  # not under the lock: a read in flight holds it
        if process is not None:
            with contextlib.suppress(OSError, ValueError):
                process.stdin.close()  # the reader ends at the end of its input
            try:
                process.wait(timeout=1)
            except subprocess.TimeoutExpired:  # still reading: it need not finish
                process.kill()
                process.wait()
        self._thread.shutdown()


_SERVED = {"read_calls": read_calls, "read_ahead": read_ahead}
"""What the reader's process runs, by name."""


def _send(stream: Any, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("!I", len(data)) + data)
    stream.flush()


def _receive(stream: Any) -> Any:
    head = stream.read(4)
    if len(head) < 4:
        raise EOFError("the other end closed the pipe")
    size = struct.unpack("!I", head)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the other end closed the pipe")
    return pickle.loads(data)


def _serve(requests: Any, answers: Any) -> None:
    """The reader's process: answer requests until the server closes the pipe."""
    while True:
        try:
            name, args = _receive(requests)
        except EOFError:
            return
        try:
            answer = (True, _SERVED[name](*args))
        except Exception as err:  # noqa: BLE001 - the server reports it to the one client
            answer = (False, f"{type(err).__name__}: {err}")
        _send(answers, answer)


if __name__ == "__main__":
    from arena_envs.serve import reading  # the module by its name: what it sends unpickles as its classes

    # the pipe to the server is fd 1: anything printed goes to stderr instead, never into an answer
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    reading._serve(sys.stdin.buffer, answers)
