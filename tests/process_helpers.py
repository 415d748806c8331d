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


def wait_until_answered(process: subprocess.Popen, url: str, timeout: float = 120) -> None:
    """Poll ``url`` until it answers 200; an AssertionError with the process's output if it exits first
    or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if requests.get(url, timeout=5).ok:
                return
        except requests.ConnectionError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            output = process.communicate(timeout=10)[0] if process.poll() is not None else "(still running)"
            raise AssertionError(f"{process.args[0]} did not answer {url}: {(output or '')[-2000:]}")
        time.sleep(0.2)


@contextmanager
def serving(argv: Sequence[str], ready_url: str, timeout: float = 120, cwd: str | None = None
            ) -> Iterator[subprocess.Popen]:
    """Run ``argv`` (in ``cwd``) until ``ready_url`` answers 200; stop it with SIGTERM (then SIGKILL) after."""
    process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
    try:
        wait_until_answered(process, ready_url, timeout)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
