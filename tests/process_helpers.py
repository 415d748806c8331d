"""Real servers for tests: a free port on 127.0.0.1, and a console script run until its URL answers."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import requests


def free_port() -> int:
    with socket.socket() as probe:  # bound, then closed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serving(argv: Sequence[str], ready_url: str, timeout: float = 120) -> Iterator[subprocess.Popen]:
    """Run ``argv`` until ``ready_url`` answers 200; stop it with SIGTERM (then SIGKILL) after the block."""
    process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if requests.get(ready_url, timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{argv[0]} did not start: {process.communicate(timeout=10)[0][-2000:]}")
            time.sleep(0.2)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
