"""The code sandbox in ``arena-bench`` (``arena-bench --only sandbox``): what a jail costs.

Four ways to run a model's Python, measured in one run:

* ``bwrap``: :class:`~arena_envs.tools.sandbox.PythonSandboxEnv` on bubblewrap, a persistent
  process in a fresh jail per id;
* ``bwrap without its memory cgroup and seccomp``: the same jail without those two (as it was
  until 0.4), to show what they cost;
* ``no jail``: the same worker as a plain child process (``backend="unsafe-no-isolation"``),
  to show what the jail itself adds;
* ``subprocess``: a new ``python -c CODE`` per call (no state kept between calls), what
  one would write without a sandbox class.

Rows: the cold start of an id (its first call, right after the last id's release, and
``GAP`` s after it, when the jail started at the release is ready), and
with 16 ids calling at once through a :class:`~arena_envs.tools.resource_pool.ResourcePool`,
calls/s and the p50 and p99 latency of a call (the pools of the three jails take turns,
so that the ratios of their rows hold on a loaded machine).
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
from .sandbox_jail import UNSAFE, Jail, start_bwrap

IDS = 16
GAP = 0.2  # s between a release and the next id's first call (a model thinking)
CODE = "try:\n    total += sum(range(100))\nexcept NameError:\n    total = 0\nprint(total)"  # state kept, or not
Row = tuple[str, float, str]
UNHARDENED = "bwrap jail without memory cgroup and seccomp"
ROUNDS = 6


def _sandbox(backend: str) -> Callable[[], PythonSandboxEnv]:
    def make() -> PythonSandboxEnv:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the unsafe backend's warning, once per env
            return PythonSandboxEnv(backend=backend)
    return make


class _UnhardenedSandbox(PythonSandboxEnv):
    """The jail without its memory cgroup and seccomp filter (here only: what they cost)."""

    def _start(self) -> Jail:
        if self._jail is None:
            self._jail = start_bwrap(self._limits(), hardened=False)
        return self._jail


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


def _pool_calls(makes: dict[str, Callable[[], PythonSandboxEnv]],
                seconds: float) -> dict[str, tuple[float, np.ndarray]]:
    """(calls/s, latencies) of ``IDS`` ids calling at once on a pool of each of ``makes``. The
    pools take turns, ``ROUNDS`` times: on a shared machine the load comes and goes, and so it
    weighs on each alike (their ratio is what the rows are for)."""
    pools = {label: ResourcePool(make, size=IDS) for label, make in makes.items()}

    async def warm(pool: ResourcePool) -> None:  # every id's jail made before timing
        await asyncio.gather(*(pool.call(CODE, id=i) for i in range(IDS)))

    calls = {label: [] for label in pools}
    elapsed = dict.fromkeys(pools, 0.0)
    try:
        for pool in pools.values():
            asyncio.run(warm(pool))
        labels = list(pools)
        for turn in range(ROUNDS):  # each goes first in turn: no pool is always the one after a pause
            for label in labels[turn % len(labels):] + labels[:turn % len(labels)]:
                pool = pools[label]
                rate, latencies = _latencies(lambda i, pool=pool: pool.call(CODE, id=i), seconds / ROUNDS, IDS)
                calls[label].append(latencies)
                elapsed[label] += len(latencies) / rate
    finally:
        for pool in pools.values():
            asyncio.run(pool.aclose())
    return {label: (sum(map(len, calls[label])) / elapsed[label], np.concatenate(calls[label])) for label in pools}


def bench_rows(seconds: float) -> list[Row]:
    rows: list[Row] = []
    part = max(seconds / 4, 0.2)
    makes = {"bwrap jail": _sandbox("bwrap"), UNHARDENED: _UnhardenedSandbox, "no jail": _sandbox(UNSAFE)}
    for label, make in makes.items():
        cold = _sandbox_cold_starts(make, part / len(makes))
        rows.append((f"Sandbox cold start of an id: {label}, p50", 1e6 * np.median(cold), "us"))
        cold = _sandbox_cold_starts(make, part / len(makes), gap=GAP)
        rows.append((f"Sandbox cold start of an id {GAP:g} s after a release: {label}, p50", 1e6 * np.median(cold),
                     "us"))
    for label, (rate, latency) in _pool_calls(makes, 2 * part).items():
        rows += [(f"Sandbox calls, {IDS} ids: {label}", rate, "calls/s"),
                 (f"Sandbox calls, {IDS} ids: {label}, p50", 1e6 * np.percentile(latency, 50), "us"),
                 (f"Sandbox calls, {IDS} ids: {label}, p99", 1e6 * np.percentile(latency, 99), "us")]
    cold = _cold_starts(lambda: _subprocess_call(CODE), part / 2)
    rate, latency = _latencies(lambda i: run_in_thread(_subprocess_call, CODE), part / 2, IDS)
    rows += [("Sandbox cold start of an id: subprocess per call, p50", 1e6 * np.median(cold), "us"),
             (f"Sandbox calls, {IDS} ids: subprocess per call", rate, "calls/s"),
             (f"Sandbox calls, {IDS} ids: subprocess per call, p50", 1e6 * np.percentile(latency, 50), "us"),
             (f"Sandbox calls, {IDS} ids: subprocess per call, p99", 1e6 * np.percentile(latency, 99), "us")]
    return rows
