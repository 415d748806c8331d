"""The process inside the jail of :class:`~arena_envs.tools.sandbox.PythonSandboxEnv`: plain CPython.

Run as ``python -I -S sandbox_worker.py --in FD --out FD [--memory B] [--processes N]
[--file-size B] [--site DIR]...`` inside the OS sandbox; it imports nothing of arena_envs,
so it runs on any Python 3 the jail has. It

1. moves the request channel (``--in``) and the reply channel (``--out``) to private
   descriptors that child processes do not inherit, puts ``/dev/null`` on stdin and sends
   stderr to stdout, so everything the code prints, its own children's output included,
   lands on fd 1, which the parent reads as the step's output and never as a reply;
2. limits itself with rlimits (address space, processes, file size, no core dumps), which
   its children inherit;
3. reads requests ``{"seq": n, "code": "..."}`` and runs each in one ``__main__`` namespace
   kept from step to step, with the full language and the standard library; after each it
   answers ``{"seq": n}``. A frame is ``MAGIC``, a 4-byte big-endian length, then JSON.

There is no restriction of the language here: the sandbox is the jail around this process.
When the request channel closes (the parent is gone), the process exits.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import traceback

MAGIC = b"ASBX"
HEADER = len(MAGIC) + 4
MAX_FRAME = 64 * 2**20


def read_frame(fd: int) -> dict | None:
    """The next frame on ``fd`` as a dict, or None when the other side closed it."""
    header = _read_exactly(fd, HEADER)
    if header is None or header[:4] != MAGIC:
        return None
    size = int.from_bytes(header[4:], "big")
    body = _read_exactly(fd, size) if size <= MAX_FRAME else None
    return None if body is None else json.loads(body)


def write_frame(fd: int, message: dict) -> None:
    body = json.dumps(message).encode()
    data = MAGIC + len(body).to_bytes(4, "big") + body
    while data:
        data = data[os.write(fd, data):]


def _read_exactly(fd: int, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _limit(memory: int, processes: int, file_size: int) -> None:
    import resource

    for limit, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_NPROC, processes),
                         (resource.RLIMIT_FSIZE, file_size), (resource.RLIMIT_CORE, 0)):
        if value >= 0:
            resource.setrlimit(limit, (value, value))


def _traceback(error: BaseException) -> str:
    """The traceback of an error in the code, its own frames only (this file's are noise)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename != __file__]
    head = ["Traceback (most recent call last):\n", *traceback.format_list(frames)] if frames else []
    return "".join(head + traceback.format_exception_only(type(error), error))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--in", dest="fd_in", type=int, required=True)
    parser.add_argument("--out", dest="fd_out", type=int, required=True)
    parser.add_argument("--memory", type=int, default=-1)
    parser.add_argument("--processes", type=int, default=-1)
    parser.add_argument("--file-size", type=int, default=-1)
    parser.add_argument("--site", action="append", default=[])
    args = parser.parse_args()
    requests, replies = os.dup(args.fd_in), os.dup(args.fd_out)  # not inheritable: children never get them
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(1, 2)
    for fd in {args.fd_in, args.fd_out, devnull} - {0, 1, 2}:
        os.close(fd)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the code's stdin for its whole life
    # unbuffered, on one descriptor: print, os.write(1, ...) and children's output stay in order
    sys.stdout = sys.stderr = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                               errors="backslashreplace", write_through=True)
    sys.path.extend(args.site)
    sys.argv = [""]
    _limit(args.memory, args.processes, args.file_size)
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    while True:
        request = read_frame(requests)
        if request is None:  # the parent closed the channel or died: nothing more to do
            os._exit(0)
        try:
            exec(compile(request["code"], "<sandbox>", "exec"), namespace)  # noqa: S102 - the jail is the boundary
        except BaseException as error:  # the code's own error (SystemExit too), reported like Python does
            try:
                sys.stdout.flush()
                sys.stderr.write(_traceback(error))
            except BaseException:  # a broken stderr (closed by the code) must not end the session
                pass
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        write_frame(replies, {"seq": request["seq"]})


if __name__ == "__main__":
    main()
