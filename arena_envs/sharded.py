"""``ShardedVectorEnv``: one native batch split over worker processes that step in parallel.

A native vector env steps all its worlds in the same numpy operations, on one core. To
use every core, :class:`ShardedVectorEnv` cuts a batch of ``num_envs`` worlds into
``num_workers`` contiguous slices, each stepped by a native vector env of its own: slice 0
in this process (while the others step, so no core waits), slice ``k >= 1`` in worker
process ``k``. Actions, observations, rewards and episode ends travel through shared
memory (``multiprocessing.shared_memory``, seen as numpy arrays on both sides); only the
small info dicts and the commands go through pipes::

    from arena_envs.sharded import ShardedVectorEnv

    envs = ShardedVectorEnv(8192, 2, scenario="foraging")                 # what gym.make_vec(..., num_workers=2) builds
    envs = ShardedVectorEnv(1024, 2, env_id="team_capture_v0", agents_per_team=2)
    envs = ShardedVectorEnv(1024, 2, make_native=lambda n: FlatVectorEnv(gym.make_vec(id, num_envs=n)))

It is a Gymnasium ``VectorEnv`` that behaves like the unsharded batch:

| what              | how                                                                            |
|-------------------|--------------------------------------------------------------------------------|
| spaces, metadata  | the native env's (``autoreset_mode`` included); ``scenario`` and ``agents`` too  |
| seeding           | ``reset(seed=s)``: world ``i`` gets ``s + i`` whatever ``num_workers`` is        |
| autoreset         | both modes, inside each worker: ``NEXT_STEP`` and ``SAME_STEP`` (``final_obs``, |
|                   | ``final_info``) as the native env                                              |
| ``reset_mask``    | ``reset(options={"reset_mask": m})`` resets the worlds where ``m`` is true      |
| info              | the workers' infos joined along the batch axis; an entry that only some        |
|                   | workers report is zero (``None`` for objects) where its ``_key`` mask is false  |
| a worker dies     | the call raises ``RuntimeError`` naming the worker and its exit code (no hang), |
|                   | and the env closes                                                             |
| ``close()``       | stops and joins every worker process, frees the shared memory                  |

Observations are copied out of shared memory unless ``copy=False``, in which case they are
views that the next ``step`` or ``reset`` overwrites (what a trainer that copies them into
its own buffers wants: no copy at all).
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

from arena_envs.batch import reset_mask, world_seeds

__all__ = ["ShardedVectorEnv", "make_native_env", "shard_bounds"]

def make_native_env(env_id: str, num_envs: int, autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                    **env_kwargs: Any) -> VectorEnv:
    """The native (unsharded) batch of an arena env (``team_capture_v0`` names ``arena_envs/TeamCapture-v0``)."""
    import arena_envs  # noqa: F401  (registers the envs, also in a spawned worker)
    from arena_envs.envs import registered_id

    return gym.make_vec(registered_id(env_id), num_envs=num_envs, vectorization_mode="vector_entry_point",
                        autoreset_mode=autoreset_mode, **env_kwargs)


def shard_bounds(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """The ``[lo, hi)`` worlds of each worker: contiguous slices, sizes differing by at most one."""
    cuts = [k * num_envs // num_workers for k in range(num_workers + 1)]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


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


# -- the worker ----------------------------------------------------------------------------------


def _worker(index: int, make_native: Callable[[int], VectorEnv], lo: int, hi: int, obs: _Block, out: _Block,
            act: _Block, conn: Connection, parent_end: Connection | None) -> None:
    """Run a native batch of worlds ``lo:hi`` until told to close (or the parent is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes us
    if parent_end is not None:
        parent_end.close()
    obs_views, out_views, act_views = obs.arrays(lo, hi), out.arrays(lo, hi), act.arrays(lo, hi)
    actions = _build(act.paths, act_views)
    envs = None
    try:
        envs = make_native(hi - lo)
        conn.send(("ok", None))
        while True:
            try:
                command, data = conn.recv()
            except EOFError:  # the parent died
                break
            if command == "close":
                break
            try:
                conn.send(("ok", _handle(envs, command, data, obs_views, out_views, actions)))
            except Exception as error:  # noqa: BLE001  (the parent re-raises it)
                conn.send(("error", _portable(error)))
    except Exception as error:  # noqa: BLE001  (make_native failed)
        conn.send(("error", _portable(error)))
    finally:
        if envs is not None:
            envs.close()
        conn.close()


def _handle(envs: VectorEnv, command: str, data: Any, obs_views: list[np.ndarray], out_views: list[np.ndarray],
            actions: Any) -> Any:
    """Carry out one command on a shard's batch, its arrays going to shared memory; the reply."""
    if command == "step":
        result = envs.step(actions if data is None else data)
        _write(obs_views, result[0])
        for view, value in zip(out_views, result[1:4], strict=True):
            view[...] = value
        return result[4]
    if command == "reset":
        observation, info = envs.reset(**data)
        _write(obs_views, observation)
        return info
    if command == "call":
        name, args, kwargs = data
        attribute = getattr(envs, name)
        return attribute(*args, **kwargs) if callable(attribute) else attribute
    raise ValueError(f"unknown command {command!r}")


def _write(views: list[np.ndarray], tree: Any) -> None:
    for view, (_, value) in zip(views, _leaves(tree), strict=True):
        view[...] = value


def _portable(error: Exception) -> Exception:
    """``error`` if it pickles, else a RuntimeError with its text."""
    import pickle

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


# -- the vector env ---------------------------------------------------------------------------------


class ShardedVectorEnv(VectorEnv):
    """A native batch of ``num_envs`` worlds split over ``num_workers`` processes (see the module doc).

    What each worker runs is given by exactly one of: ``scenario`` (a scenario name of
    :data:`arena_envs.envs.SCENARIOS`: an :class:`~arena_envs.envs.ArenaVectorEnv`), ``env_id``
    (``"arena_envs/Foraging-v0"``, ``"team_capture_v0"``, ...: :func:`make_native_env`), both
    taking ``kwargs`` (``autoreset_mode``, ``render_mode``, the scenario's arguments); or
    ``make_native``, a function of the number of worlds returning a vector env, which then
    chooses its mode and arguments itself (it must pickle unless the start method is ``fork``).
    ``num_workers`` (default: the number of cores) counts the slices: this process steps the
    first, ``num_workers - 1`` worker processes the others. ``context`` is the multiprocessing
    start method (default: the platform's).
    """

    def __init__(self, num_envs: int, num_workers: int | None = None, *, scenario: str | None = None,
                 env_id: str | None = None, make_native: Callable[[int], VectorEnv] | None = None,
                 copy: bool = True, context: str | None = None, **kwargs: Any):
        if (scenario is not None) + (env_id is not None) + (make_native is not None) != 1:
            raise ValueError("give exactly one of scenario, env_id and make_native")
        if scenario is not None:
            from arena_envs.envs import ArenaVectorEnv

            make_native = functools.partial(_arena_vector_env, ArenaVectorEnv, scenario, kwargs)
        elif env_id is not None:
            make_native = functools.partial(make_native_env, env_id, **kwargs)
        elif kwargs:
            raise ValueError(f"with make_native, give it the env's arguments itself (got {sorted(kwargs)})")
        elif not callable(make_native):
            raise TypeError(f"make_native must be a function of the number of worlds, got {make_native!r}")
        num_envs = int(num_envs)
        num_workers = min(os.cpu_count() or 1, num_envs) if num_workers is None else int(num_workers)
        if num_envs < 1 or not 1 <= num_workers <= num_envs:
            raise ValueError(f"need num_envs >= 1 and 1 <= num_workers <= num_envs, got {num_envs} and {num_workers}")
        self.num_envs, self.num_workers, self.copy = num_envs, num_workers, copy
        self.bounds = shard_bounds(num_envs, num_workers)
        self._closed, self._broken = False, None
        self._processes: dict[int, mp.process.BaseProcess] = {}  # shard -> its process (shards 1..W-1)
        self._conns: dict[int, Connection] = {}
        self._blocks: list[_Block] = []
        self._local: VectorEnv | None = None  # shard 0, stepped in this process
        self._pending: tuple[str, Any] | None = None  # its command, run while the workers run theirs

        # a one-world prototype in this process: spaces, metadata, and the arrays' shapes and dtypes
        prototype = make_native(1)
        try:
            self.metadata = dict(prototype.metadata)
            self.render_mode = getattr(prototype, "render_mode", None)
            self.single_observation_space = prototype.single_observation_space
            self.single_action_space = prototype.single_action_space
            self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
            self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
            native = prototype.unwrapped
            for name in ("scenario", "agents"):  # what encodings and adapters read off a native batch
                if hasattr(native, name):
                    setattr(self, name, getattr(native, name))
            first_obs, _ = prototype.reset(seed=0)
            prototype.action_space.seed(0)
            _, reward, terminated, truncated, _ = prototype.step(prototype.action_space.sample())
        finally:
            prototype.close()
        self.autoreset_mode = self.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)

        # shared memory: observations; reward, terminated, truncated; actions
        self._blocks = [
            _Block([(p, np.shape(v)[1:], np.asarray(v).dtype) for p, v in _leaves(first_obs)], num_envs),
            _Block([(("reward",), np.shape(reward)[1:], np.asarray(reward).dtype),
                    (("terminated",), np.shape(terminated)[1:], np.bool_),
                    (("truncated",), np.shape(truncated)[1:], np.bool_)], num_envs),
            _Block(_space_leaves(self.single_action_space), num_envs),
        ]
        obs, out, act = self._blocks
        self._obs_paths, self._obs = obs.paths, obs.arrays()
        self._out, self._act = out.arrays(), act.arrays()
        self._act_paths = act.paths

        ctx = mp.get_context(context)
        try:
            for k, (lo, hi) in enumerate(self.bounds[1:], start=1):
                parent_end, child_end = ctx.Pipe()
                process = ctx.Process(target=_worker, name=f"ShardedVectorEnv-worker-{k}", daemon=True,
                                      args=(k, make_native, lo, hi, obs, out, act, child_end,
                                            parent_end if ctx.get_start_method() == "fork" else None))
                process.start()
                child_end.close()
                self._processes[k] = process
                self._conns[k] = parent_end
            # shard 0 is this process's: it steps while the workers step theirs
            lo, hi = self.bounds[0]
            self._local = make_native(hi - lo)
            self._local_views = (obs.arrays(lo, hi), out.arrays(lo, hi), _build(act.paths, act.arrays(lo, hi)))
            self._gather(range(1, num_workers))  # every worker has built its batch
        except BaseException:
            self.close()
            raise

    # -- the VectorEnv API ------------------------------------------------------------------------

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        self._check_open()
        if isinstance(seed, (int, np.integer)):
            super().reset(seed=int(seed))
        seeds = self._split_seeds(seed)
        mask = self._reset_mask(options)
        calls = {}
        for k, (lo, hi) in enumerate(self.bounds):
            worker_options = dict(options or {})
            if mask is not None:
                if not mask[lo:hi].any():
                    continue  # none of this worker's worlds resets
                worker_options["reset_mask"] = mask[lo:hi]
            calls[k] = {"seed": seeds[k], "options": worker_options or None}
        for k, data in calls.items():
            self._send(k, "reset", data)
        infos = self._gather(calls)
        infos = [infos.get(k, {}) for k in range(self.num_workers)]
        if mask is not None:  # workers left out report nothing: their worlds' masks are false
            infos = self._fill_missing(infos)
        return self._observations(), _join_infos(infos, self._sizes)

    def step(self, actions):
        self._check_open()
        by_pipe = self._write_actions(actions)
        for k, (lo, hi) in enumerate(self.bounds):
            self._send(k, "step", None if by_pipe is None else _slice(by_pipe, lo, hi))
        infos = self._gather(range(self.num_workers))
        reward, terminated, truncated = (array.copy() for array in self._out)
        return (self._observations(), reward, terminated, truncated,
                _join_infos([infos[k] for k in range(self.num_workers)], self._sizes))

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` (or read attribute ``name``) of every worker's native batch."""
        self._check_open()
        for k in range(self.num_workers):
            self._send(k, "call", (name, args, kwargs))
        results = self._gather(range(self.num_workers))
        return tuple(results[k] for k in range(self.num_workers))

    def render(self) -> np.ndarray | None:
        """The first worker's rendering (its first worlds)."""
        self._check_open()
        self._send(0, "call", ("render", (), {}))
        return self._gather([0])[0]

    def close_extras(self, **kwargs: Any) -> None:
        self.close_workers()

    def close_workers(self, timeout: float = 5.0) -> None:
        """Stop every worker (asking first, then terminating) and free the shared memory."""
        for conn in self._conns.values():
            try:
                conn.send(("close", None))
            except (OSError, ValueError):
                pass
        for process in self._processes.values():
            process.join(timeout)
            if process.is_alive():
                process.terminate()
                process.join(timeout)
            if process.is_alive():
                process.kill()
                process.join()
        for conn in self._conns.values():
            conn.close()
        self._processes, self._conns, self._pending = {}, {}, None
        if self._local is not None:
            self._local.close()
            self._local = None
        self._obs = self._out = self._act = []  # views must go before their memory does
        self._local_views = ()
        for block in self._blocks:
            block.shm.close()
            block.shm.unlink()
        self._blocks = []
        self._closed = True

    def __del__(self):
        try:
            if not self._closed:
                self.close_workers(timeout=1.0)
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass

    # -- internals --------------------------------------------------------------------------------

    @property
    def _sizes(self) -> list[int]:
        return [hi - lo for lo, hi in self.bounds]

    def _check_open(self) -> None:
        if self._broken:
            raise RuntimeError(f"ShardedVectorEnv is closed: {self._broken}")
        if self._closed:
            raise RuntimeError("ShardedVectorEnv is closed")

    def _send(self, k: int, command: str, data: Any) -> None:
        if k == 0:  # run by _gather, once every worker has its command
            self._pending = (command, data)
            return
        try:
            self._conns[k].send((command, data))
        except (BrokenPipeError, ConnectionResetError, OSError) as error:
            self._fail(k, f"its pipe broke ({error})")

    def _gather(self, workers) -> dict[int, Any]:
        """Every listed shard's reply (shard 0 runs here first); a dead worker raises RuntimeError."""
        workers = list(workers)
        replies, error = {}, None
        if 0 in workers:
            (command, data), self._pending = self._pending, None
            try:
                replies[0] = _handle(self._local, command, data, *self._local_views)
            except Exception as local_error:  # noqa: BLE001  (raised once the workers have answered)
                error = local_error
        waiting = {self._conns[k]: k for k in workers if k != 0}
        sentinels = {self._processes[k].sentinel: k for k in workers if k != 0}
        while waiting:
            for ready in wait([*waiting, *(s for s, k in sentinels.items() if k in waiting.values())]):
                if ready in waiting:
                    k = waiting.pop(ready)
                    try:
                        status, data = ready.recv()
                    except (EOFError, OSError):
                        self._fail(k, "its pipe closed")
                    if status == "error":
                        error = error or data
                    replies[k] = data
                elif sentinels[ready] in waiting.values():
                    k = sentinels[ready]
                    if not self._conns[k].poll():  # died without a reply
                        self._fail(k, "it exited")
        if error is not None:
            raise error
        return replies

    def _fail(self, k: int, why: str) -> None:
        lo, hi = self.bounds[k]
        self._processes[k].join(1.0)  # so that its exit code is known
        message = f"worker {k} (worlds {lo}..{hi - 1}) died: {why} (exit code {self._processes[k].exitcode})"
        self._broken = message
        self.close_workers(timeout=1.0)
        raise RuntimeError(f"ShardedVectorEnv {message}; the env is closed")

    def _observations(self):
        arrays = [a.copy() for a in self._obs] if self.copy else self._obs
        return _build(self._obs_paths, arrays)

    def _write_actions(self, actions) -> Any:
        """Put ``actions`` in shared memory; returns them instead when they must travel by pipe
        (anything the buffers cannot hold exactly: the native env then judges them itself)."""
        given = dict(_leaves(actions)) if isinstance(actions, (dict, np.ndarray, list, tuple)) else {}
        if set(given) == set(self._act_paths):
            values = [np.asarray(given[path]) for path in self._act_paths]
            fits = all(v.shape == view.shape and np.can_cast(v.dtype, view.dtype, "safe")
                       for v, view in zip(values, self._act, strict=True))
            if fits:
                for view, value in zip(self._act, values, strict=True):
                    view[...] = value
                return None
        if not hasattr(actions, "take") and not all(np.shape(v)[:1] == (self.num_envs,) for _, v in
                                                     _leaves(actions)):
            raise ValueError(f"actions must be a batch of {self.num_envs} (arrays with that leading axis, "
                             f"shaped like {self.action_space})")
        return actions

    def _split_seeds(self, seed) -> list[Any]:
        """Each worker's seeds: ``None``, or one per world (world ``i`` of seed ``s`` gets ``s + i``)."""
        if seed is None:
            return [None] * self.num_workers
        seeds = world_seeds(seed, self.num_envs)  # checked here, before any worker resets
        return [seeds[lo:hi] for lo, hi in self.bounds]

    def _reset_mask(self, options) -> np.ndarray | None:
        return None if (options or {}).get("reset_mask") is None else reset_mask(options, self.num_envs)

    def _fill_missing(self, infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Infos for the workers that did not reset: every key of the others', masked out."""
        template = next(info for info in infos if info)
        return [info or _masked_like(template, n) for info, n in zip(infos, self._sizes, strict=True)]


def _arena_vector_env(cls: type, scenario: str, kwargs: dict[str, Any], num_envs: int) -> VectorEnv:
    return cls(num_envs, scenario, **kwargs)


def _masked_like(template: dict[str, Any], n: int) -> dict[str, Any]:
    out = {}
    for key, value in template.items():
        if isinstance(value, dict):
            out[key] = _masked_like(value, n)
        else:
            value = np.asarray(value)
            out[key] = np.full((n, *value.shape[1:]), None if value.dtype == object else 0, value.dtype)
    return out


def _slice(tree: Any, lo: int, hi: int) -> Any:
    if hasattr(tree, "take") and not isinstance(tree, np.ndarray):  # ToolActions and the like
        return tree.take(np.arange(lo, hi))
    if isinstance(tree, dict):
        return {key: _slice(value, lo, hi) for key, value in tree.items()}
    return tree[lo:hi]
