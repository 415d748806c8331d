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
3. says hello (a reply to request 0), then reads requests and runs each in one
   ``__main__`` module kept from step to step, with the full language and the standard
   library; after each it answers with the request's number. A frame is ``MAGIC``, the body's length (4 bytes),
   the request's number (8 bytes), then, in a request, the code in UTF-8 (see :func:`frame`).

There is no restriction of the language here: the sandbox is the jail around this process.
When the request channel closes (the parent is gone), the process exits.
"""

from __future__ import annotations

import io
import os
import sys
import types

MAGIC = b"ASBX"
HEADER = len(MAGIC) + 4  # then the body's length, 4 bytes big-endian
SEQ = 8  # a body starts with the request's number, 8 bytes big-endian
MAX_FRAME = 64 * 2**20
MAX_MESSAGE = 2_000  # characters of an error's message shown (a traceback of real code fits)


def frame(seq: int, payload: bytes = b"") -> bytes:
    """A request (``payload`` is the code, UTF-8) or a reply (no payload) to request ``seq``."""
    return MAGIC + (SEQ + len(payload)).to_bytes(4, "big") + seq.to_bytes(SEQ, "big") + payload


def read_frame(fd: int, read=os.read) -> tuple[int, bytes] | None:
    """``(seq, payload)`` of the next frame on ``fd``, or None when the other side closed it.
    (Its tools are bound once, so code that patches ``os`` cannot break the channel.)"""
    header = _read_exactly(fd, HEADER, read)
    if header is None or header[:len(MAGIC)] != MAGIC:
        return None
    size = int.from_bytes(header[len(MAGIC):], "big")
    body = _read_exactly(fd, size, read) if SEQ <= size <= MAX_FRAME else None
    return None if body is None else (int.from_bytes(body[:SEQ], "big"), body[SEQ:])


def write_all(fd: int, data: bytes, write=os.write) -> None:
    while data:
        data = data[write(fd, data):]


def _read_exactly(fd: int, size: int, read) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = read(fd, size - len(data))
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
    """The traceback of an error in the code, its own frames only (this file's are noise), its
    message cut to MAX_MESSAGE characters: formatting a 100 MB message whole would need more
    memory than the jail has, and the step would end with no error at all."""
    import traceback  # here, not at the start: it imports re and more, a cost to every jail's start

    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename != __file__]
    head = ["Traceback (most recent call last):\n", *traceback.format_list(frames)] if frames else []
    try:
        message = str(error)
    except BaseException as broken:  # noqa: BLE001 - its __str__ is the code's: anything can happen
        message = f"<its message could not be made: {type(broken).__name__}>"
    if len(message) <= MAX_MESSAGE:
        tail = traceback.format_exception_only(type(error), error)
    else:
        kind = type(error).__qualname__
        if type(error).__module__ not in ("__main__", "builtins"):
            kind = f"{type(error).__module__}.{kind}"
        tail = [f"{kind}: {message[:MAX_MESSAGE]}\n[the message is {len(message):,} characters long, "
                f"cut to {MAX_MESSAGE:,}]\n"]
    return "".join(head + tail)


def _report(error: BaseException) -> None:
    """Write the code's error as Python would; when even that fails (no memory left, a broken
    stderr), one line that says so."""
    try:
        sys.stdout.flush()
        sys.stderr.write(_traceback(error))
    except BaseException as broken:  # noqa: BLE001
        try:
            os.write(1, f"{type(error).__name__} (its traceback could not be shown: {type(broken).__name__})\n"
                        .encode())
        except BaseException:  # noqa: BLE001 - fd 1 closed by the code: nothing left to tell
            pass


def main() -> None:
    options: dict[str, list[str]] = {}  # argparse would cost the start of every jail (it imports re)
    for flag, value in zip(sys.argv[1::2], sys.argv[2::2], strict=True):
        options.setdefault(flag.removeprefix("--"), []).append(value)
    fd_in, fd_out = int(options["in"][0]), int(options["out"][0])
    requests, replies = os.dup(fd_in), os.dup(fd_out)  # not inheritable: children never get them
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(1, 2)
    for fd in {fd_in, fd_out, devnull} - {0, 1, 2}:
        os.close(fd)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the code's stdin for its whole life
    # unbuffered, on one descriptor: print, os.write(1, ...) and children's output stay in order
    sys.stdout = sys.stderr = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                               errors="backslashreplace", write_through=True)
    sys.path.extend(options.get("site", []))
    sys.argv = [""]
    _limit(*(int(options.get(name, ["-1"])[0]) for name in ("memory", "processes", "file-size")))
    main_module = types.ModuleType("__main__")  # the code's own module: pickle, import __main__ see it
    main_module.__builtins__ = __builtins__
    sys.modules["__main__"] = main_module
    namespace, exit_now = main_module.__dict__, os._exit
    write_all(replies, frame(0))  # hello: the time limit of the first request starts now
    while True:
        request = read_frame(requests)
        if request is None:  # the parent closed the channel or died: nothing more to do
            exit_now(0)
        seq, code = request
        try:
            exec(compile(code.decode("utf-8", "surrogatepass"), "<sandbox>", "exec"), namespace)  # noqa: S102 - the jail is the boundary
        except BaseException as error:  # the code's own error (SystemExit too), reported like Python does
            _report(error)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        write_all(replies, frame(seq))


if __name__ == "__main__":
    main()
