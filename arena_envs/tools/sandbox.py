"""``PythonSandboxEnv``: a restricted Python session with time and memory limits, safe to run anywhere.

The environment class of the tool-system seed's ``code_interpreter``::

    @tool(env_cls=PythonSandboxEnv, name="code_interpreter", stateful=True, pool_size=16)
    async def code_interpreter(code: str, env: PythonSandboxEnv):
        return await env.step(code)

    await code_interpreter("x = 6 * 7", id="a")
    await code_interpreter("print(x)", id="a")          # '42\\n': variables persist per id
    await code_interpreter("print(x)", id="b")          # NameError: ids never share a session
    await code_interpreter.release(id="a")              # clears a's session for the next id

=============  ==========================================================================
step(code)     runs ``code`` (a string) in the session; returns stdout and stderr as text
               (a traceback for an error, a ``SandboxViolation`` line for refused code)
reset()        forgets every variable: a fresh session
time limit     ``time_limit`` s per step (default 5): the process is killed and restarted,
               the step returns ``TimeoutError: ...`` and the session's variables are lost
memory limit   ``memory_limit`` bytes of address space (default 256 MiB): ``MemoryError``
output         at most ``max_output`` characters (default 10,000), then a truncation note
=============  ==========================================================================

Each session is a separate Python process (``python -I -S``, see
:mod:`arena_envs.tools.sandbox_worker`) that cannot create files or processes and runs
only code that passed an AST check: no ``import`` but of a few pure modules (``math``,
``random``, ``itertools``, ``collections``, ``json``, ``re``, ...), no ``open``, ``eval``,
``exec``, ``getattr`` or ``__import__``, no names or attributes starting with ``_`` (so no
dunder tricks), no frame or format-string attributes. It is not a container: it is meant
for model-written snippets of arithmetic and data handling, not for hostile native code.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from .resource_pool import run_in_thread

_WORKER = str(Path(__file__).with_name("sandbox_worker.py"))


class PythonSandboxEnv:
    """A restricted, persistent Python session in its own process (see the module docstring)."""

    def __init__(self, time_limit: float = 5.0, memory_limit: int = 256 * 2**20, max_output: int = 10_000,
                 max_code: int = 100_000) -> None:
        if not time_limit > 0:
            raise ValueError(f"time_limit must be positive, got {time_limit!r}")
        if memory_limit < 64 * 2**20:
            raise ValueError(f"memory_limit must be at least 64 MiB (the interpreter itself), got {memory_limit!r}")
        self.time_limit, self.memory_limit = float(time_limit), int(memory_limit)
        self.max_output, self.max_code = int(max_output), int(max_code)
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()  # one request at a time on the process's pipes
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
            return self._request({"code": code})

    def reset(self) -> None:
        """Forget every variable: the next step starts a fresh session."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                self._request({"reset": True})

    def close(self) -> None:
        """End the session's process."""
        with self._lock:
            self._closed = True
            self._kill()

    def __del__(self) -> None:
        process = getattr(self, "_process", None)
        if process is not None and process.poll() is None:
            process.kill()

    def __repr__(self) -> str:
        alive = self._process is not None and self._process.poll() is None
        return f"<PythonSandboxEnv pid={self._process.pid if alive else None}>"

    # -- the process -----------------------------------------------------------------------

    def _request(self, request: dict[str, Any]) -> str:
        if self._closed:
            raise RuntimeError("this PythonSandboxEnv is closed")
        process = self._start()
        try:
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
        except OSError:  # the process died since the last step
            self._kill()
            process = self._start()
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
        line = self._read_line(process)
        if line is None:  # timed out: nothing else stops the code
            self._kill()
            return (f"TimeoutError: the code ran for more than {self.time_limit:g} s and was stopped; "
                    f"the session was restarted, its variables are lost\n")
        if not line:
            code = process.wait()
            self._kill()
            return (f"Error: the sandbox process ended (exit code {code}), probably out of memory; "
                    f"the session was restarted, its variables are lost\n")
        return json.loads(line)["output"]

    def _start(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", _WORKER, str(self.memory_limit), str(self.max_output)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                cwd="/", env={}, close_fds=True, start_new_session=True)
        return self._process

    def _read_line(self, process: subprocess.Popen[bytes]) -> bytes | None:
        """One reply line; None when the time limit passed first, b"" when the process ended."""
        import time

        fd, data = process.stdout.fileno(), bytearray()
        deadline = time.monotonic() + self.time_limit
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            data += chunk
        return bytes(data)

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.kill()
            process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()
