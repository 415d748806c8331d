"""The code sandbox in ``arena-bench`` (``arena-bench --only sandbox``): what a jail costs.

Three ways to run a model's Python, measured in one run:

* ``bwrap``: :class:`~arena_envs.tools.sandbox.PythonSandboxEnv` on bubblewrap, a persistent
  process in a fresh jail per id;
* ``no jail``: the same worker as a plain child process (``backend="unsafe-no-isolation"``),
  to show what the jail itself adds;
* ``subprocess``: a new ``python -c CODE`` per call (no state kept between calls), what
  one would write without a sandbox class.

Rows: the cold start of an id (its first call, right after the last id's release, and
``GAP`` s after it, when the jail started at the release is ready), and
with 16 ids calling at once through a :class:`~arena_envs.tools.resource_pool.ResourcePool`,
calls/s and the p50 and p99 latency of a call.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import warnings
from collections.abc import Awaitable, Callable

import numpy as np

from .resource_pool import ResourcePool, run_in_thread
from .sandbox import PythonSandboxEnv
from .sandbox_jail import UNSAFE

IDS = 16
GAP = 0.2  # s between a release and the next id's first call (a model thinking)
CODE = "try:\n    total += sum(range(100))\nexcept NameError:\n    total = 0\nprint(total)"  # state kept, or not
Row = tuple[str, float, str]


def _sandbox(backend: str) -> Callable[[], PythonSandboxEnv]:
    def make() -> PythonSandboxEnv:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the unsafe backend's warning, once per env
            return PythonSandboxEnv(backend=backend)
    return make


def _subprocess_call(code: str) -> str:
    return subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True).stdout


def _latencies(call: Callable[[int], Awaitable[object]], seconds: float, ids: int) -> tuple[float, np.ndarray]:
    """(calls/s, latencies in s) of ``ids`` concurrent loops of ``await call(i)`` for ``seconds``."""
    latencies: list[float] = []

    async def loop(i: int, end: float) -> None:
        while time.perf_counter() < end:
            start = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - start)

    async def main() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(loop(i, start + seconds) for i in range(ids)))
        return len(latencies) / (time.perf_counter() - start)

    rate = asyncio.run(main())
    return rate, np.array(latencies)


def _cold_starts(first_call: Callable[[], object], seconds: float,
                 between: Callable[[], object] = lambda: None) -> np.ndarray:
    """Seconds each ``first_call()`` took (a new id's first call), one after another for
    ``seconds``, with ``between()`` (not timed) before each."""
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        between()
        start = time.perf_counter()
        first_call()
        times.append(time.perf_counter() - start)
    return np.array(times)


def _sandbox_cold_starts(make: Callable[[], PythonSandboxEnv], seconds: float, gap: float = 0.0) -> np.ndarray:
    """The first calls of new ids, each ``gap`` s after the last id's release (``reset``, which
    ends its jail and starts the next one)."""
    env = make()
    try:
        return _cold_starts(lambda: env.run(CODE), seconds, between=lambda: (env.reset(), time.sleep(gap)))
    finally:
        env.close()


def _pool_calls(make: Callable[[], PythonSandboxEnv], seconds: float) -> tuple[float, np.ndarray]:
    pool = ResourcePool(make, size=IDS)

    async def warm() -> None:  # every id's jail made before timing
        await asyncio.gather(*(pool.call(CODE, id=i) for i in range(IDS)))

    asyncio.run(warm())
    try:
        return _latencies(lambda i: pool.call(CODE, id=i), seconds, IDS)
    finally:
        asyncio.run(pool.aclose())


def bench_rows(seconds: float) -> list[Row]:
    rows: list[Row] = []
    third = max(seconds / 3, 0.2)
    for label, make in (("bwrap jail", _sandbox("bwrap")), ("no jail", _sandbox(UNSAFE))):
        cold = _sandbox_cold_starts(make, third)
        rows.append((f"Sandbox cold start of an id: {label}, p50", 1e6 * np.median(cold), "us"))
        cold = _sandbox_cold_starts(make, third, gap=GAP)
        rows.append((f"Sandbox cold start of an id {GAP:g} s after a release: {label}, p50", 1e6 * np.median(cold),
                     "us"))
        rate, latency = _pool_calls(make, third)
        rows += [(f"Sandbox calls, {IDS} ids: {label}", rate, "calls/s"),
                 (f"Sandbox calls, {IDS} ids: {label}, p50", 1e6 * np.percentile(latency, 50), "us"),
                 (f"Sandbox calls, {IDS} ids: {label}, p99", 1e6 * np.percentile(latency, 99), "us")]
    cold = _cold_starts(lambda: _subprocess_call(CODE), third)
    rate, latency = _latencies(lambda i: run_in_thread(_subprocess_call, CODE), third, IDS)
    rows += [("Sandbox cold start of an id: subprocess per call, p50", 1e6 * np.median(cold), "us"),
             (f"Sandbox calls, {IDS} ids: subprocess per call", rate, "calls/s"),
             (f"Sandbox calls, {IDS} ids: subprocess per call, p50", 1e6 * np.percentile(latency, 50), "us"),
             (f"Sandbox calls, {IDS} ids: subprocess per call, p99", 1e6 * np.percentile(latency, 99), "us")]
    return rows
