"""``PythonSandboxEnv``: ordinary CPython in an OS sandbox (bubblewrap), one jail per session.

The environment class of the tool-system seed's ``code_interpreter``::

    @tool(env_cls=PythonSandboxEnv, name="code_interpreter", stateful=True, pool_size=16)
    async def code_interpreter(code: str, env: PythonSandboxEnv):
        return await env.step(code)

    await code_interpreter("x = 6 * 7", id="a")
    await code_interpreter("print(x)", id="a")          # '42\\n': variables persist per id
    await code_interpreter("print(x)", id="b")          # NameError: ids never share a session
    await code_interpreter.release(id="a")              # ends a's jail; the next id gets a new one

=============  ==========================================================================
step(code)     runs ``code`` (a string) in the session; returns everything it printed on
               stdout and stderr (its child processes' too), a traceback for an error
reset()        ends the jail and starts a fresh process in a fresh jail for the next step
time limit     ``time_limit`` s per step (default 5, ``inf`` for none): the jail is killed,
               the step returns ``TimeoutError: ...`` and the session's variables are lost
memory limit   ``memory_limit`` bytes (default 256 MiB) of address space per process
               (``MemoryError``) and of memory for the whole jail: its processes, files,
               shared memory, kernel memory; past it, "out of memory" and a fresh jail
processes      at most ``max_processes`` processes and threads in the jail (default 64)
between steps  the jail gets 1 ms of CPU a second: what a step left running waits for the next
disk           ``/work`` (the working directory) and ``/tmp`` are private tmpfs of
               ``disk_limit`` bytes each (default 64 MiB)
output         at most ``max_output`` characters (default 10,000), then a truncation note
=============  ==========================================================================

The code is not restricted: any module, ``open``, ``subprocess``, ``ctypes``. The boundary
is the jail (:mod:`arena_envs.tools.sandbox_jail`): no network, nothing of the host but a
read-only interpreter, no way to see or signal this process. ``backend`` is ``"bwrap"`` (or
``None``, the same); where it cannot run, :class:`SandboxUnavailable` says what to install.
The worker inside is :mod:`arena_envs.tools.sandbox_worker`; requests and replies travel on
their own pipes as length-prefixed frames, and stdout is only ever output, so nothing printed
can pass for a reply. A reply is believed only when the kernel shows the worker waiting for
the next request; output printed between steps belongs to no step and is dropped.
"""

from __future__ import annotations

import math
import os
import platform
import select
import signal
import threading
import time
import warnings

from .resource_pool import run_in_thread
from .sandbox_jail import (
    UNSAFE,
    Jail,
    Limits,
    SandboxUnavailable,
    pick_backend,
    start_bwrap,
    start_unsafe,
)
from .sandbox_worker import frame, write_all

__all__ = ["PythonSandboxEnv", "SandboxUnavailable"]

_RLIM_INFINITY = 2**63 - 1  # at or above this, the kernel has no limit (resource.RLIM_INFINITY is -1)
_LOST = "the session was restarted, its variables are lost"
STARTUP_TIMEOUT = 60.0  # s for a jail to start (not counted in the time limit: a busy machine is slow at it)
_MOST_PROCESSES = 2**22  # the kernel's PID_MAX_LIMIT: more can never run (pids.max refuses more)
_READ = {"x86_64": 0, "aarch64": 63}.get(platform.machine())  # read(2)'s number: a waiting worker is in it
_SETTLE = 0.0002  # s between looks at a worker that replied and is not yet back in read()


def _positive_int(name: str, value: object, least: int = 1, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an integer of at least {least:,}, got {value!r}")
    if most is not None and value > most:
        raise ValueError(f"{name} must be at most {most:,}, got {value:,}")
    return value


class PythonSandboxEnv:
    """A persistent Python session in its own OS jail (see the module docstring)."""

    def __init__(self, time_limit: float = 5.0, memory_limit: int | None = 256 * 2**20, max_output: int = 10_000,
                 max_code: int = 100_000, max_processes: int = 64, disk_limit: int = 64 * 2**20,
                 backend: str | None = None) -> None:
        if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
            raise ValueError(f"time_limit must be a positive number of seconds (inf for none), got {time_limit!r}")
        if memory_limit is not None:
            _positive_int("memory_limit (bytes; None for no limit)", memory_limit, 64 * 2**20)
        self.time_limit = float(time_limit)
        self.memory_limit = None if memory_limit is None or memory_limit >= _RLIM_INFINITY else memory_limit
        self.max_output = _positive_int("max_output", max_output)
        self.max_code = _positive_int("max_code", max_code)
        # bwrap, its init, python, threads
        self.max_processes = _positive_int("max_processes", max_processes, 8, _MOST_PROCESSES)
        self.disk_limit = _positive_int("disk_limit", disk_limit, 2**20, _RLIM_INFINITY)  # tmpfs' and rlimits' most
        self.backend = pick_backend(backend)
        if self.backend == UNSAFE:
            warnings.warn(f"PythonSandboxEnv(backend={UNSAFE!r}) runs code with your user's rights: no jail, "
                          f"no network isolation; only for code you trust", stacklevel=2)
        self._jail: Jail | None = None
        self._seq = 0
        self._lock = threading.Lock()  # one request at a time on the jail's pipes
        self._closed = False

    # -- the environment interface -----------------------------------------------------------

    async def step(self, code: str) -> str:
        """Run ``code`` in the session and return what it printed (see :meth:`run`)."""
        return await run_in_thread(self.run, code)

    def run(self, code: str) -> str:
        """Run ``code`` in the session and return its stdout and stderr (synchronous ``step``)."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a string, got {type(code).__name__}")
        if len(code) > self.max_code:
            return f"Error: the code is {len(code):,} characters long, the limit is {self.max_code:,}\n"
        with self._lock:
            if self._closed:
                raise RuntimeError("this PythonSandboxEnv is closed")
            return self._request(code)

    def reset(self) -> None:
        """End the jail and everything in it, and start a fresh process in a fresh jail for the
        next step (started now, so that it is ready by then: no code has run in it)."""
        with self._lock:
            self._kill()
            if not self._closed:
                self._start()

    def close(self) -> None:
        """End the jail; the env cannot run code any more."""
        with self._lock:
            self._closed = True
            self._kill()

    def __del__(self) -> None:
        jail = getattr(self, "_jail", None)
        if jail is not None:
            jail.kill()

    def __repr__(self) -> str:
        pid = self._jail.process.pid if self._jail is not None else None
        return f"<PythonSandboxEnv backend={self.backend!r} pid={pid}>"

    # -- the jail --------------------------------------------------------------------------------

    def _limits(self) -> Limits:
        return Limits(-1 if self.memory_limit is None else self.memory_limit, self.max_processes, self.disk_limit)

    def _start(self) -> Jail:
        if self._jail is None:
            self._jail = (start_bwrap if self.backend == "bwrap" else start_unsafe)(self._limits())
        return self._jail

    def _kill(self) -> None:
        jail, self._jail = self._jail, None
        if jail is not None:
            jail.kill()

    def _request(self, code: str) -> str:
        jail = self._start()
        output = _Output(self.max_output)
        if not jail.ready:  # its start does not count against the time limit: wait for its hello
            outcome = self._wait_reply(jail, output, 0, STARTUP_TIMEOUT)
            if outcome != "ok":
                return self._failed(jail, output, outcome, starting=True)
            jail.ready = True
        elif not _between_steps(jail):
            return self._failed(jail, output, "protocol")
        self._seq += 1
        jail.unthrottle()  # throttled since the last step (see below)
        try:
            write_all(jail.requests, frame(self._seq, code.encode("utf-8", "surrogatepass")))
        except OSError:  # the jail ended since the last step (its worker died): see why below
            pass
        outcome = self._wait_reply(jail, output, self._seq, self.time_limit)
        if jail.out_of_memory():  # a process of the jail was killed at its limit (the worker or not)
            outcome = "memory"
        if outcome == "ok":
            jail.throttle()  # until the next step, threads and processes the code left running get next to no CPU
            return output.text()
        return self._failed(jail, output, outcome)

    def _failed(self, jail: Jail, output: _Output, outcome: str, starting: bool = False) -> str:
        """End the jail after ``outcome`` and say why, after what the code (or, ``starting``,
        the sandbox program: bwrap's own errors) printed."""
        self._kill()
        if starting:
            why = {"timeout": f"within {STARTUP_TIMEOUT:g} s", "protocol": ": it wrote something else than its hello",
                   "ended": f": it {_how_it_ended(jail.process.returncode)}"}[outcome]
            note = f"Error: the sandbox did not start{' ' if outcome == 'timeout' else ''}{why}"
        elif outcome == "timeout":
            note = f"TimeoutError: the code ran for more than {self.time_limit:g} s and was stopped"
        elif outcome == "protocol":
            note = "Error: the sandbox's reply channel was written to by the code"
        elif outcome == "memory":
            note = (f"MemoryError: the jail ran out of memory (its limit is {self.memory_limit:,} bytes for all its "
                    f"processes, files and shared memory) and was stopped")
        else:
            note = f"Error: the sandbox process {_how_it_ended(jail.process.returncode)}"
        text = output.text()
        return text + ("\n" if text and not text.endswith("\n") else "") + f"{note}; {_LOST}\n"

    def _wait_reply(self, jail: Jail, output: _Output, seq: int, time_limit: float) -> str:
        """Read output until the reply to request ``seq`` (0: the worker's hello when it is
        ready): "ok", "timeout", "ended" or "protocol". The code can write a reply itself: a
        reply counts once the kernel shows the worker's main thread in ``read``, waiting for the
        next request, so that a forged one cannot end the step early (what the code prints
        until it really ends is this step's output); one more byte on the channel is "protocol"."""
        deadline = None if math.isinf(time_limit) else time.monotonic() + time_limit
        out_fd, reply = jail.process.stdout.fileno(), bytearray()
        open_fds, replied = [out_fd, jail.replies], False
        while True:
            if replied and _waits_in_read(jail.worker_pid()):
                _drain(out_fd, output)  # what the worker printed before it replied is in the pipe by now
                # its own reply is in the pipe too once it waits in read(): a byte more (after a forged
                # reply, the real one) is a reply too many, even when the forged one was read first
                extra = select.select([jail.replies], [], [], 0)[0] and os.read(jail.replies, 1 << 16)
                return "protocol" if extra else "ok"
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return "timeout"
            # after its reply, the worker is back in read() within microseconds (code that forged
            # it runs on): look again soon
            wait = left if not replied else _SETTLE if left is None else min(left, _SETTLE)
            ready = select.select(open_fds, [], [], wait)[0]
            if out_fd in ready:
                chunk = os.read(out_fd, 1 << 16)
                if chunk:
                    output.add(chunk)
                else:
                    open_fds.remove(out_fd)
            if jail.replies in ready:
                chunk = os.read(jail.replies, 1 << 16)
                if not chunk:
                    _drain(out_fd, output)
                    jail.process.wait()
                    return "ended"
                reply += chunk
                outcome = _parse(reply, seq)
                if outcome == "protocol" or (outcome == "ok" and seq == 0):  # the hello comes before any code
                    _drain(out_fd, output)
                    return outcome
                replied = outcome == "ok"


def _between_steps(jail: Jail) -> bool:
    """Whether nothing came on the reply channel since the last step's reply (a genuine worker
    only replies to a request). Output printed since, by a thread or a process the code left
    running, belongs to no step: it is dropped."""
    if select.select([jail.replies], [], [], 0)[0] and os.read(jail.replies, 1 << 16):
        return False
    _drain(jail.process.stdout.fileno(), _Output(0))
    return True


def _waits_in_read(pid: int | None) -> bool:
    """Whether process ``pid``'s main thread is blocked in ``read`` (True when the kernel cannot
    tell: an unknown architecture, a process gone, whose end the step itself then reports)."""
    if pid is None or _READ is None:
        return True
    try:
        call = open(f"/proc/{pid}/syscall").read().split()[0]  # noqa: SIM115, PTH123 - one read, hot path
    except (OSError, IndexError):
        return True
    return call == str(_READ) or call.startswith("-")  # "-1": no longer running (a zombie)


def _parse(reply: bytearray, seq: int) -> str | None:
    """"ok" for the reply to request ``seq``, "protocol" for anything that is not that (more,
    or a frame for another request), None while the frame is incomplete."""
    expected = frame(seq)
    if reply[:len(expected)] != expected[:len(reply)]:
        return "protocol"
    if len(reply) < len(expected):
        return None
    return "ok" if len(reply) == len(expected) else "protocol"


class _Output:
    """The bytes the code printed, kept up to ``limit`` characters (the rest read and dropped)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.data, self.cut = limit, bytearray(), False

    def add(self, chunk: bytes) -> None:
        room = 4 * self.limit - len(self.data)  # a character is at most 4 bytes of UTF-8
        if room > 0:
            self.data += chunk[:room]
        if len(chunk) > max(room, 0):
            self.cut = True

    def text(self) -> str:
        text = self.data.decode("utf-8", "replace")
        if self.cut or len(text) > self.limit:
            return text[:self.limit] + f"\n[output truncated to {self.limit} characters]"
        return text


def _drain(fd: int, output: _Output) -> None:
    """Whatever is in the pipe ``fd`` now, without waiting for more (and not forever, when a
    process the code left running keeps printing)."""
    for _ in range(64):
        if not select.select([fd], [], [], 0)[0]:
            return
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        output.add(chunk)


def _how_it_ended(code: int | None) -> str:
    """bwrap reports a signal as 128 + its number, Popen as its negative."""
    number = -code if code is not None and code < 0 else code - 128 if code is not None and code > 128 else None
    if number is not None:
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = " (memory or CPU limit)" if name in ("SIGKILL", "SIGXCPU") else ""
        return f"was killed by {name}{hint}"
    return f"ended (exit code {code})"
