"""Reading a session's action into tool calls, and doing it off the event loop when it may cost much.

Finding a call in text searches it, in time linear in its length; 64 KB of hostile text
still cost about 0.1 s (before the parsers were made linear, 60 KB cost 12 s). A server
reads such an action in :class:`Reader`'s process: neither its event loop nor, as a thread
would, its GIL waits on it (a reader thread still left a bystander's p99 step at 58 ms
under four attackers; the process, 6 ms), so the other sessions' steps go on, and its
queue serves the smallest read first, so that a flood of large ones does not hold up
another session's ordinary message. Plain calls of any size (read without searching text)
and actions with little text are read on the loop, where they cost microseconds.

This module imports only the parsers, so that the reader's process starts in a second.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import itertools
import json
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from arena_envs.llm.parsers import ParsedCall, parse_reply
from arena_envs.tools import ToolCallError
from arena_envs.tools.decision import is_plain_call, parse_decision

MAX_CALLS = 8
"""Calls of one assistant message carried out, in order, one tick each (as ``ChatEnv``'s
``max_calls``); the rest are not run and are counted in ``info["parse"]["calls_not_run"]``."""
STOPPED = "the server's reader process stopped; send the action again"
"""What a read gets when the reader's process stopped (died, or the server shut down) before answering."""
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
            calls = [_for_tool_layer(found, message) for found in parsed.calls]
            telemetry["calls_not_run"] = max(0, len(calls) - MAX_CALLS)
            calls = calls[:MAX_CALLS]
    return (read_ahead(calls) if ready else calls), telemetry


def _for_tool_layer(found: ParsedCall, message: Any) -> Any:
    """A call the parser read, as the tool layer takes it: a call it could not read (its
    arguments too deep, not JSON...) fails there with the parser's own reason, and one
    without a tool name leaves the tool layer the whole message to search and refuse."""
    if found.ok:
        return found.as_call()
    if found.name:
        return Unreadable(ToolCallError(f"the call of {found.name!r} could not be read: {found.error}",
                                        field="params", tool=found.name))
    return message


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
    pickle. Reads wait their turn in a queue that is served smallest first (reading is
    linear in the text, so the smallest is the quickest): a flood of large actions slows
    its own senders, while another session's ordinary message waits at most for the read in
    progress. A read that has waited :data:`MAX_WAIT_S` goes first, oldest first, so that a
    stream of small reads cannot hold a large one back for ever. It ends when the server
    closes its stdin, or dies; one that died is replaced at the next read.
    """

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()  # one request on the pipes at a time
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None  # waits on the pipes, off the loop
        self._queue_lock = threading.Lock()
        self._queue: list[_Request] = []  # requests waiting their turn
        self._order = itertools.count()  # arrival order: ties of size go first come, first served
        self.reads = 0  # reads done

    @property
    def waiting(self) -> int:
        """Requests queued, not yet taken up."""
        return len(self._queue)

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` (a function of this module) in the reader's process, in its
        turn (see the class docstring); RuntimeError when that process failed."""
        request = _Request(_request_size(function, args), next(self._order), time.monotonic(),
                           function.__name__, args)
        with self._queue_lock:
            self._queue.append(request)
            if self._worker is None:
                self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="arena-serve-reader")
            # each request puts one turn on the thread, and each turn serves the queue's first:
            # not always this one, which is then served by an earlier or a later turn
            self._worker.submit(self._take_turn)
        result = await asyncio.wrap_future(request.answer)
        self.reads += 1
        return result

    def _take_turn(self) -> None:
        with self._queue_lock:
            if not self._queue:  # emptied by shutdown
                return
            request = min(self._queue, key=_Request.turn)
            self._queue.remove(request)
        if not request.answer.set_running_or_notify_cancel():  # its caller has gone
            return
        try:
            request.answer.set_result(self._ask(request.name, request.args))
        except Exception as err:  # noqa: BLE001 - raised again in the caller, as if read there
            request.answer.set_exception(err)

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
                process.wait()  # a process whose pipes closed may not have ended yet: the next read needs a new one
                if self._process is process:
                    self._process = None
                raise RuntimeError(STOPPED) from None
        if not ok:
            raise RuntimeError(f"the action could not be read: {value}")
        return value

    def shutdown(self) -> None:
        """Stop the reader's process (a read in flight or waiting gets RuntimeError, its client a clear error)."""
        process, self._process = self._process, None  # not under the lock: a read in flight holds it
        if process is not None:
            with contextlib.suppress(OSError, ValueError):
                process.stdin.close()  # the reader ends at the end of its input
            try:
                process.wait(timeout=1)
            except subprocess.TimeoutExpired:  # still reading: it need not finish
                process.kill()
                process.wait()
        with self._queue_lock:
            worker, self._worker = self._worker, None
            waiting, self._queue = self._queue, []
        if worker is not None:
            worker.shutdown(wait=False, cancel_futures=True)
        for request in waiting:
            if request.answer.set_running_or_notify_cancel():
                request.answer.set_exception(RuntimeError(STOPPED))


MAX_WAIT_S = 2.0
"""A read queued this long goes before any smaller one that came later."""


@dataclasses.dataclass(slots=True)
class _Request:
    """One read waiting its turn in the :class:`Reader`'s queue."""

    size: int  # characters of text to read
    order: int
    queued_at: float  # time.monotonic()
    name: str
    args: tuple[Any, ...]
    answer: concurrent.futures.Future = dataclasses.field(default_factory=concurrent.futures.Future)

    def turn(self) -> tuple[bool, int, int]:
        """Sorts first the request to serve next: one that waited too long, then the smallest."""
        waited_too_long = time.monotonic() - self.queued_at >= MAX_WAIT_S
        return (not waited_too_long, 0 if waited_too_long else self.size, self.order)


def _request_size(function: Callable[..., Any], args: tuple[Any, ...]) -> int:
    """The text a request reads: its message (else its call) for :func:`read_calls`, its
    calls for :func:`read_ahead`."""
    if function is read_calls and len(args) >= 2:
        return text_size(args[0] if args[0] is not None else args[1])
    return sum(text_size(arg) for arg in args)


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
