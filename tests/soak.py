"""A long soak of the fuzz and property suites in one process: ``make soak`` (``python tests/soak.py MINUTES``).

Each round runs every fuzz suite with ``EXAMPLES`` hostile examples per test; between rounds
the process's resident memory is printed, so a leak in the code under test shows as growth
from round to round (Hypothesis's own bookkeeping of a test's examples is freed when the
test ends, so within a round memory may rise and fall).
"""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path

import pytest

SUITES = ["test_toollayer_fuzz.py", "test_treasure_hunt_fuzz.py", "test_pool_properties.py"]
EXAMPLES = 500


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
        gc.collect()
        print(f"soak round {round_}: exit {int(code)}, resident memory {rss_mb():.0f} MB", flush=True)
        if code != 0:
            return int(code)
    return 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0))
