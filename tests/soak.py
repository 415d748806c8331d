"""A long soak of the fuzz and property suites in one process: ``make soak`` (``python tests/soak.py MINUTES``).

Each round runs every fuzz suite with ``EXAMPLES`` hostile examples per test, then
:func:`sandbox_round`: ``SANDBOX_IDS`` ids on a pool of ``PythonSandboxEnv`` jails, each
with state kept over its calls, some of them hostile (a fork bomb, a crash, a scribble on
the reply channel, a child left running); every answer is checked, so a lost or shifted
one fails the soak. Between rounds the process's resident memory, open descriptors and
child processes are printed, so a leak in the code under test shows as growth from round
to round (Hypothesis's own bookkeeping of a test's examples is freed when the test ends,
so within a round memory may rise and fall).
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from pathlib import Path

import pytest

SUITES = ["test_toollayer_fuzz.py", "test_treasure_hunt_fuzz.py", "test_pool_properties.py"]
EXAMPLES = 500
SANDBOX_IDS, SANDBOX_POOL = 96, 8
HOSTILE = [  # what one id in four runs before its checked calls (each ends its own jail or not)
    "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "import ctypes; ctypes.string_at(0)",
    "import os\nfor fd in range(3, 32):\n    try:\n        os.write(fd, b'junk')\n    except OSError:\n        pass",
    "import subprocess; subprocess.Popen(['sleep', '1000'], start_new_session=True)",
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


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(minutes: float) -> int:
    here = Path(__file__).parent
    args = ["-q", "-p", "no:cacheprovider", "-p", "no:nbmake", "--soak", str(EXAMPLES), "-o", "addopts=",
            *(str(here / suite) for suite in SUITES)]
    end, round_ = time.monotonic() + 60 * minutes, 0
    while time.monotonic() < end:
        round_ += 1
        code = pytest.main(args)
        wrong = sandbox_round()
        gc.collect()
        print(f"soak round {round_}: exit {int(code)}, sandbox answers wrong {wrong}, resident memory "
              f"{rss_mb():.0f} MB, open descriptors {len(os.listdir('/proc/self/fd'))}, child processes "
              f"{children()}", flush=True)
        if code != 0 or wrong:
            return int(code) or 1
    return 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0))
