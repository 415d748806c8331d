"""The process side of :class:`~arena_envs.sharded.ShardedVectorEnv`: shared arrays, pipe messages, the worker loop.

A sharded batch's processes share its arrays and pass it short commands; this module is what
both sides of that use, and nothing here knows which env a worker runs:

- trees of arrays (observations and actions are arrays or nested dicts of them), and the
  ``(path, shape, dtype)`` layouts of a space's or an info's arrays;
- :class:`_Block`: arrays of shape ``(num_envs, ...)`` side by side in one shared-memory block;
- :class:`_Shard`: one slice of worlds, its native batch and its views of the blocks, carrying
  out the parent's commands (in a worker, and for slice 0 in the parent itself);
- the framing of the messages of a step on a pipe (one system call a side) and
  :func:`_receive`, which watches a pipe briefly before sleeping on it;
- :func:`_worker`, a worker process's loop, and :func:`_join_infos`, which joins the shards'
  infos along the batch axis.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import sys
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import VectorEnv

# -- trees of arrays (observations and actions are arrays or nested dicts of them) ------------------


def _leaves(tree: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    if isinstance(tree, dict):
        return [leaf for key, value in tree.items() for leaf in _leaves(value, (*path, key))]
    return [(path, tree)]


def _build(paths: Sequence[tuple], values: Sequence[Any]) -> Any:
    """The tree whose leaves at ``paths`` are ``values`` (a bare array for the path ``()``)."""
    if len(paths) == 1 and paths[0] == ():
        return values[0]
    tree: dict = {}
    for path, value in zip(paths, values, strict=True):
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree


def _space_leaves(space: spaces.Space, path: tuple = ()) -> list[tuple[tuple, tuple[int, ...], np.dtype]]:
    """(path, shape, dtype) of each array of one element of ``space``."""
    if isinstance(space, spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in _space_leaves(sub, (*path, key))]
    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return [(path, tuple(space.shape), np.dtype(space.dtype))]
    raise TypeError(f"ShardedVectorEnv cannot share {type(space).__name__} spaces (Box, Discrete, "
                    "MultiDiscrete, MultiBinary and Dict of them only)")


class _Block:
    """Arrays of shape (num_envs, ...) laid side by side in one shared-memory block."""

    ALIGN = 64

    def __init__(self, layout: Sequence[tuple[tuple, tuple[int, ...], np.dtype]], num_envs: int):
        self.layout = [(path, (num_envs, *shape), np.dtype(dtype)) for path, shape, dtype in layout]
        offsets, size = [], 0
        for _, shape, dtype in self.layout:
            offsets.append(size)
            size += -(-int(np.prod(shape)) * dtype.itemsize // self.ALIGN) * self.ALIGN
        self.offsets = offsets
        self.shm = SharedMemory(create=True, size=max(size, 1))

    def arrays(self, lo: int = 0, hi: int | None = None) -> list[np.ndarray]:
        """Views of every array, worlds ``lo:hi``."""
        return [np.ndarray(shape, dtype, buffer=self.shm.buf, offset=offset)[lo:hi]
                for (_, shape, dtype), offset in zip(self.layout, self.offsets, strict=True)]

    @property
    def paths(self) -> list[tuple]:
        return [path for path, _, _ in self.layout]

    def free(self, in_use: bool) -> None:
        """Unlink the block; unmap it too unless arrays handed out of it may still be in use
        (unmapping memory that a live array points to would crash the process that reads it:
        such a block stays mapped, in :data:`_KEPT`, until this process ends)."""
        try:
            self.shm.unlink()
        except FileNotFoundError:
            pass
        if in_use:
            _KEPT.append(self.shm)
        else:
            self.shm.close()


_KEPT: list[SharedMemory] = []  # blocks whose arrays outlived their env (see _Block.free)


def _refcounts(objects: Sequence[Any]) -> list[int]:
    """Each object's reference count: more than when it was handed out means someone kept it."""
    return [sys.getrefcount(obj) for obj in objects]


def _info_layout(info: dict[str, Any]) -> list[tuple[tuple, tuple[int, ...], np.dtype]] | None:
    """(path, shape of one world, dtype) of every entry of an info of one world, or None when
    some entry cannot live in shared memory (an object array, a scalar)."""
    layout = []
    for path, value in _leaves(info):
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf" or value.shape[:1] != (1,):
            return None
        layout.append((path, value.shape[1:], value.dtype))
    return layout


# -- one shard: a native batch and its views of the shared arrays ---------------------------------


class _Shard:
    """Worlds ``lo:hi``: their native batch and its views of the shared blocks.

    Observations go to one of several sets of shared arrays (the one each call names):
    written by the native batch itself when it can (:meth:`ArenaVectorEnv.observe_into`),
    else copied there. A step's rewards, episode ends and (when it has the usual keys) info
    go to one of the sets of result arrays, the same way in every process.
    """

    def __init__(self, envs: VectorEnv, lo: int, hi: int, obs: Sequence[_Block], results: Sequence[_Block],
                 act: _Block, direct: bool):
        self.envs, self.direct = envs, direct
        self.obs_sets = [block.arrays(lo, hi) for block in obs]
        self.obs_dicts = [{path[0]: array for path, array in zip(block.paths, arrays, strict=True)}
                          for block, arrays in zip(obs, self.obs_sets, strict=True)] if direct else []
        self.result_sets = [block.arrays(lo, hi) for block in results]  # reward, terminated, truncated, info
        self.actions = _build(act.paths, act.arrays(lo, hi))
        # the info entries one step of this shard writes: (path, shape, dtype), and whether all are top-level keys
        self.info_spec = [(path, (hi - lo, *shape[1:]), dtype)
                          for path, shape, dtype in _result_info_layout(results[0])]
        self.info_flat = all(len(path) == 1 for path, _, _ in self.info_spec)
        self.last_obs: Any = None  # what the native batch last returned (when it cannot write in place)

    def observed(self, j: int, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(...)``, its observation (first of its results) landing in set ``j``."""
        if self.direct:
            self.envs.observe_into(self.obs_dicts[j])
            try:
                return call(*args, **kwargs)
            finally:
                self.envs.observe_into(None)
        result = call(*args, **kwargs)
        self.last_obs = result[0]
        _write(self.obs_sets[j], self.last_obs)
        return result

    def reobserve(self, j: int) -> None:
        """Put the current observation in set ``j`` (for a reset that leaves this shard's worlds alone)."""
        if self.direct:
            self.observed(j, lambda: (self.envs.observe(),))
        elif self.last_obs is not None:
            _write(self.obs_sets[j], self.last_obs)

    def run(self, command: str, data: Any, j: int | None) -> Any:
        """Carry out one command of the parent; the reply's data."""
        if command == "step":
            j, r = j  # the observation set, the result set
            result = self.observed(j, self.envs.step, self.actions if data is None else data)
            views = self.result_sets[r]
            for view, value in zip(views[:3], result[1:4], strict=True):
                view[...] = value
            info = result[4]
            values = _fitting(info, self.info_spec, self.info_flat) if self.info_spec else None
            if values is None:
                return info
            for view, value in zip(views[3:], values, strict=True):
                view[...] = value
            return _IN_SHARED_MEMORY
        if command == "reset":
            return self.observed(j, self.envs.reset, **data)[1]
        if command == "reobserve":
            return self.reobserve(j)
        if command == "call":
            name, args, kwargs = data
            attribute = getattr(self.envs, name)
            return attribute(*args, **kwargs) if callable(attribute) else attribute
        raise ValueError(f"unknown command {command!r}")


_IN_SHARED_MEMORY = "info in shared memory"
_STEP = b"s"  # a step whose actions are in shared memory: this byte, the observation and result sets
_DONE, _REPLY, _ERROR = b"i", b"k", b"e"  # a worker's reply: info in shared memory, pickled data, pickled error
_STEP_SIZE = 3  # bytes of a step command: no command is shorter (a pickled one is longer)


def _result_info_layout(block: _Block) -> list[tuple[tuple, tuple[int, ...], np.dtype]]:
    """The info entries of a block of results (after reward, terminated, truncated), paths as in the info."""
    return [(path[1:], shape, dtype) for path, shape, dtype in block.layout[3:]]


def _fitting(info: Any, spec: list[tuple[tuple, tuple[int, ...], np.dtype]], flat: bool) -> list[np.ndarray] | None:
    """The arrays of ``info`` in the order of ``spec`` ((path, shape, dtype) of each) when it has exactly
    those entries, shapes and dtypes, else None. A flat dict is checked without walking it as a tree
    (Foraging's 12 entries: 18 -> 11 us, once per step in every process)."""
    if flat:
        if type(info) is not dict or len(info) != len(spec):
            return None
        values = list(info.values())
        if [path[0] for path, _, _ in spec] != list(info):
            return None
    else:
        leaves = _leaves(info)
        if [path for path, _ in leaves] != [path for path, _, _ in spec]:
            return None
        values = [value for _, value in leaves]
    for value, (_, shape, dtype) in zip(values, spec, strict=True):
        if type(value) is not np.ndarray or value.shape != shape or value.dtype != dtype:
            return None
    return values


# -- the worker ----------------------------------------------------------------------------------


def _receive(conn: Connection, spin: float, expected: int, timeout: float | None = None) -> bytes:
    """The next message on ``conn``, watched for up to ``spin`` seconds before sleeping on it;
    ``TimeoutError`` when none has begun to arrive within ``timeout`` seconds (None: wait on).

    A process asleep on a pipe is woken on the core of the process that writes to it, where
    both then share one core for a while: two processes passing steps back and forth that
    way ran each step slower. Watching keeps each on its own core, yielding it to anyone
    else who is ready; the watch is short, so an idle batch sleeps. (A closed pipe reads as
    ready: a dead peer ends the watch too.)
    """
    if spin > 0 or timeout is not None:
        watch = select.poll()
        watch.register(conn.fileno(), select.POLLIN)
        ready = watch.poll(0)
        if not ready and spin > 0:
            deadline = time.perf_counter() + spin
            while not (ready := watch.poll(0)) and time.perf_counter() < deadline:
                os.sched_yield()  # whoever else is ready to run on this core goes first
        # a stopped or stuck peer keeps its end open, so only a time limit ends this wait
        if not ready and timeout is not None and not watch.poll(min(max(int(timeout * 1000), 1), 2**31 - 1)):
            raise TimeoutError(f"no answer within {timeout:g} s")
    return _read_message(conn.fileno(), expected)


# The messages of a step (the command, the worker's answer) are written and read straight on the
# pipe's file descriptor, framed as Connection.send_bytes frames every message (a 4-byte length,
# then the bytes), so both kinds mix on one pipe: one system call each side instead of
# Connection's two reads and its Python layers (send 4.6 -> 1.8 us, read of a waiting message
# 8.5 -> 5.9 us; four of them a step, on the path every step waits for: B=8192 over 2 processes,
# interleaved per-step times in two runs, p20 2346 -> 2329 and 2417 -> 2386 us, median 2575 -> 2530
# and 2684 -> 2641 us).
_LENGTH = struct.Struct("!i")


def _framed(message: bytes) -> bytes:
    """``message`` as Connection.send_bytes writes it (for messages under 16 KiB, in one write)."""
    return _LENGTH.pack(len(message)) + message


_DONE_FRAMED = _framed(_DONE)


def _read_message(fd: int, expected: int) -> bytes:
    """The next message Connection.send_bytes (or :func:`_framed`) wrote on ``fd``, read with one
    system call when it is at most ``expected`` bytes long. ``expected`` must not exceed the
    shortest message that can come (a read never takes bytes of the message after it)."""
    data = os.read(fd, _LENGTH.size + expected)
    if len(data) > _LENGTH.size and _LENGTH.unpack_from(data)[0] == len(data) - _LENGTH.size:
        return data[_LENGTH.size:]  # the whole message (a step's)
    if not data:
        raise EOFError
    data = bytearray(data)
    _read_into(fd, data, _LENGTH.size)
    (size,) = _LENGTH.unpack_from(data)
    start = _LENGTH.size
    if size == -1:  # Connection's header of a message of 2 GiB or more: an 8-byte length follows
        _read_into(fd, data, start + 8)
        (size,) = struct.unpack_from("!Q", data, start)
        start += 8
    _read_into(fd, data, start + size)
    return bytes(data[start:])


def _read_into(fd: int, data: bytearray, total: int) -> None:
    """Read from ``fd`` until ``data`` holds ``total`` bytes."""
    while len(data) < total:
        chunk = os.read(fd, total - len(data))
        if not chunk:
            raise EOFError
        data += chunk


def _worker(index: int, make_native: Callable[[int], VectorEnv], lo: int, hi: int, obs: list[_Block],
            results: list[_Block], act: _Block, direct: bool, spin: float, conn: Connection,
            parent_end: Connection | None) -> None:
    """Run a native batch of worlds ``lo:hi`` until told to close (or the parent is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes us
    if parent_end is not None:
        parent_end.close()
    envs = None
    try:
        envs = make_native(hi - lo)
        shard = _Shard(envs, lo, hi, obs, results, act, direct)
        conn.send_bytes(_REPLY + pickle.dumps(None))
        fd = conn.fileno()
        while True:
            try:
                message = _receive(conn, spin, _STEP_SIZE)
            except EOFError:  # the parent died
                break
            if message[:1] == _STEP:
                command, data, j = "step", None, (message[1], message[2])
            else:
                command, data, j = pickle.loads(message)
            if command == "close":
                break
            try:
                reply = shard.run(command, data, j)
                if reply is _IN_SHARED_MEMORY:
                    os.write(fd, _DONE_FRAMED)
                else:
                    conn.send_bytes(_REPLY + pickle.dumps(reply))
            except Exception as error:  # noqa: BLE001  (the parent re-raises it)
                conn.send_bytes(_ERROR + pickle.dumps(_portable(error)))
    except Exception as error:  # noqa: BLE001  (make_native failed)
        conn.send_bytes(_ERROR + pickle.dumps(_portable(error)))
    finally:
        if envs is not None:
            envs.close()
        conn.close()


def _write(views: list[np.ndarray], tree: Any) -> None:
    for view, (_, value) in zip(views, _leaves(tree), strict=True):
        view[...] = value


def _portable(error: Exception) -> Exception:
    """``error`` if it pickles, else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(error).__name__}: {error}")


# -- info dicts, joined along the batch axis --------------------------------------------------------


def _join_infos(infos: Sequence[dict[str, Any]], sizes: Sequence[int]) -> dict[str, Any]:
    keys = list(dict.fromkeys(key for info in infos for key in info))
    joined = {}
    for key in keys:
        parts = [info.get(key) for info in infos]
        if any(isinstance(part, dict) for part in parts):
            joined[key] = _join_infos([part if isinstance(part, dict) else {} for part in parts], sizes)
            continue
        template = np.asarray(next(part for part in parts if part is not None))
        filled = [np.asarray(part) if part is not None else
                  np.full((n, *template.shape[1:]), None if template.dtype == object else 0, template.dtype)
                  for part, n in zip(parts, sizes, strict=True)]
        joined[key] = np.concatenate(filled)
    return joined
