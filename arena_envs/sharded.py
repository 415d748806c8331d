"""``ShardedVectorEnv``: one native batch split over worker processes that step in parallel.

A native vector env steps all its worlds in the same numpy operations, on one core. To
use every core, :class:`ShardedVectorEnv` cuts a batch of ``num_envs`` worlds into
``num_workers`` contiguous slices, each stepped by a native vector env of its own: slice 0
in this process (while the others step, so no core waits), slice ``k >= 1`` in worker
process ``k``. Actions, observations, rewards, episode ends and the usual info entries
travel through shared memory (``multiprocessing.shared_memory``, seen as numpy arrays on
both sides); only commands and unusual infos (``final_obs``) go through pipes::

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
| a worker dies     | the call raises :class:`WorkerError` (a ``RuntimeError``) naming the worker and |
|                   | its exit code (no hang), and the env closes                                    |
| a worker hangs    | with ``reply_timeout=s``, a worker that has not begun to answer within ``s``   |
|                   | seconds (stopped, stuck) is killed: ``WorkerError`` too, and the env closes    |
| ``close()``       | stops every worker process within a bound (asked, then terminated, then       |
|                   | killed: a stopped one too), frees the shared memory                            |

Nothing big travels through pipes: a step sends each worker one short message (the actions
are already in shared memory) and gets one back. A native batch that can write its
observations into given arrays (:meth:`~arena_envs.envs.ArenaVectorEnv.observe_into`)
writes them straight into shared memory; the others' are copied there. With the default
``copy=True`` the caller owns the observations it gets, which no later call changes: they
come from sets of shared arrays handed out in turn, a set being written again only once
nobody holds any of its arrays (their reference counts say so), so no copy is made unless
the caller keeps every set (a view of an array counts as holding it). With ``copy=False``
they are views of one set that the next ``step`` or ``reset`` overwrites (what a trainer that
copies them into its own buffers wants). A step's rewards, episode ends and info are the
caller's whatever ``copy`` is, handed out the same way from sets of their own: every process
writes its rows there, so the step is joined without copying. Arrays still held when the
env closes stay readable.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import pickle
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from arena_envs.batch import reset_mask, world_seeds
from arena_envs.names import registered_id
from arena_envs.shard_worker import (
    _DONE,
    _IN_SHARED_MEMORY,
    _REPLY,
    _STEP,
    _Block,
    _build,
    _framed,
    _info_layout,
    _join_infos,
    _leaves,
    _receive,
    _refcounts,
    _Shard,
    _space_leaves,
    _worker,
)

__all__ = ["ShardedVectorEnv", "WorkerError", "make_native_env", "shard_bounds"]


class WorkerError(RuntimeError):
    """A worker of a :class:`ShardedVectorEnv` died, its pipe broke, or it did not answer in time;
    the env is closed (its workers stopped) when this is raised."""

def make_native_env(env_id: str, num_envs: int, autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                    **env_kwargs: Any) -> VectorEnv:
    """The native (unsharded) batch of an arena env (``team_capture_v0`` names ``arena_envs/TeamCapture-v0``)."""
    import arena_envs  # noqa: F401  (registers the envs, also in a spawned worker)

    return gym.make_vec(registered_id(env_id), num_envs=num_envs, vectorization_mode="vector_entry_point",
                        autoreset_mode=autoreset_mode, **env_kwargs)


def shard_bounds(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """The ``[lo, hi)`` worlds of each worker: contiguous slices, sizes differing by at most one."""
    cuts = [k * num_envs // num_workers for k in range(num_workers + 1)]
    return list(zip(cuts[:-1], cuts[1:], strict=True))



# -- the vector env ---------------------------------------------------------------------------------


class ShardedVectorEnv(VectorEnv):
    """A native batch of ``num_envs`` worlds split over ``num_workers`` processes (see the module doc).

    What each worker runs is given by exactly one of: ``scenario`` (a scenario name such as
    ``"foraging"``: its :class:`~arena_envs.envs.ArenaVectorEnv`), ``env_id``
    (``"arena_envs/Foraging-v0"``, ``"team_capture_v0"``, ...), both built by
    :func:`make_native_env` (the registered vector entry point, so this module needs no env class) and
    taking ``kwargs`` (``autoreset_mode``, ``render_mode``, the scenario's arguments); or
    ``make_native``, a function of the number of worlds returning a vector env, which then
    chooses its mode and arguments itself (it must pickle unless the start method is ``fork``).
    ``num_workers`` (default: the number of cores) counts the slices: this process steps the
    first, ``num_workers - 1`` worker processes the others. ``context`` is the multiprocessing
    start method (default: the platform's). ``reply_timeout`` (seconds, default None: no limit)
    bounds the wait for a worker's answer to any call: past it the worker counts as hung.
    """

    ROTATING_SETS = 2  # sets of observation arrays handed out in turn when copy=True (see _pick_set)
    # how long (s) this process watches for a worker's answer, and a worker for the next command,
    # before sleeping (see _receive); only when every process has a core of its own
    PARENT_SPIN, WORKER_SPIN = 0.02, 0.001

    def __init__(self, num_envs: int, num_workers: int | None = None, *, scenario: str | None = None,
                 env_id: str | None = None, make_native: Callable[[int], VectorEnv] | None = None,
                 copy: bool = True, context: str | None = None, reply_timeout: float | None = None, **kwargs: Any):
        if (scenario is not None) + (env_id is not None) + (make_native is not None) != 1:
            raise ValueError("give exactly one of scenario, env_id and make_native")
        if scenario is not None or env_id is not None:  # a scenario's registered vector entry point builds it
            make_native = functools.partial(make_native_env, scenario if env_id is None else env_id, **kwargs)
        elif kwargs:
            raise ValueError(f"with make_native, give it the env's arguments itself (got {sorted(kwargs)})")
        elif not callable(make_native):
            raise TypeError(f"make_native must be a function of the number of worlds, got {make_native!r}")
        num_envs = int(num_envs)
        num_workers = min(os.cpu_count() or 1, num_envs) if num_workers is None else int(num_workers)
        if num_envs < 1 or not 1 <= num_workers <= num_envs:
            raise ValueError(f"need num_envs >= 1 and 1 <= num_workers <= num_envs, got {num_envs} and {num_workers}")
        if reply_timeout is not None and not reply_timeout > 0:
            raise ValueError(f"reply_timeout must be a positive number of seconds or None, got {reply_timeout!r}")
        self.num_envs, self.num_workers, self.copy = num_envs, num_workers, copy
        self.reply_timeout = reply_timeout
        self.bounds = shard_bounds(num_envs, num_workers)
        self._spin = self.PARENT_SPIN if num_workers <= len(os.sched_getaffinity(0)) else 0.0
        self._closed, self._broken = False, None
        self._processes: dict[int, mp.process.BaseProcess] = {}  # shard -> its process (shards 1..W-1)
        self._conns: dict[int, Connection] = {}
        self._blocks: list[_Block] = []
        self._local: _Shard | None = None  # shard 0, stepped in this process
        self._sets: list[tuple[Any, list[Any], list[int], _Block]] = []  # see _handed_out
        self._results: list[tuple[list[np.ndarray], list[Any], list[int], _Block]] = []  # see _handed_out_results

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
            # a native batch that writes its observations into given arrays writes them into ours
            raw = getattr(type(prototype), "observation_layout", None)
            raw = raw(prototype) if callable(raw) else None
            self._direct = raw is not None
            first_obs, _ = prototype.reset(seed=0)
            prototype.action_space.seed(0)
            _, reward, terminated, truncated, first_info = prototype.step(prototype.action_space.sample())
        finally:
            prototype.close()
        self.autoreset_mode = self.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)

        # shared memory: observation sets (0: the working set, then the rotating ones); result sets
        # (reward, terminated, truncated and the info's arrays, 0 and rotating ones too); actions
        obs_layout = ([((key,), shape, dtype) for key, (shape, dtype) in raw.items()] if self._direct
                      else [(p, np.shape(v)[1:], np.asarray(v).dtype) for p, v in _leaves(first_obs)])
        sets = 1 + (self.ROTATING_SETS if copy else 0)
        info_layout = _info_layout(first_info) or []
        result_layout = [(("reward",), np.shape(reward)[1:], np.asarray(reward).dtype),
                         (("terminated",), np.shape(terminated)[1:], np.bool_),
                         (("truncated",), np.shape(truncated)[1:], np.bool_),
                         *((("info", *path), shape, dtype) for path, shape, dtype in info_layout)]
        try:
            obs = [_Block(obs_layout, num_envs) for _ in range(sets)]
            self._blocks += obs
            results = [_Block(result_layout, num_envs) for _ in range(1 + self.ROTATING_SETS)]
            self._blocks += results
            act = _Block(_space_leaves(self.single_action_space), num_envs)
            self._blocks.append(act)
            self._act_paths, self._act = act.paths, act.arrays()
            self._act_keys: dict[Any, int] = {}  # top-level key: how many keys its dict has (0: an array)
            for path in self._act_paths:
                if path:  # a bare array (path ()) takes the general path
                    self._act_keys[path[0]] = self._act_keys.get(path[0], 0) + (len(path) > 1)
            self._act_fits: dict[tuple, bool] = {}  # (path, dtype): whether the buffer holds it exactly
            self._info_paths = [path for path, _, _ in info_layout]

            ctx = mp.get_context(context)
            for k, (lo, hi) in enumerate(self.bounds[1:], start=1):
                parent_end, child_end = ctx.Pipe()
                process = ctx.Process(target=_worker, name=f"ShardedVectorEnv-worker-{k}", daemon=True,
                                      args=(k, make_native, lo, hi, obs, results, act, self._direct,
                                            self.WORKER_SPIN if self._spin else 0.0, child_end,
                                            parent_end if ctx.get_start_method() == "fork" else None))
                process.start()
                child_end.close()
                self._processes[k] = process
                self._conns[k] = parent_end
            # shard 0 is this process's: it steps while the workers step theirs
            lo, hi = self.bounds[0]
            self._local = _Shard(make_native(hi - lo), lo, hi, obs, results, act, self._direct)
            self._sets = [self._handed_out(block) for block in obs]
            self._results = [self._handed_out_results(block) for block in results]
            for _, objects, counts, _ in self._sets + self._results:
                counts += _refcounts(objects)
            self._last_set = self._last_results = 0
            self._gather(range(1, num_workers), (None, None))  # every worker has built its batch
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
        j = self._pick_set()
        calls = {}
        for k, (lo, hi) in enumerate(self.bounds):
            worker_options = dict(options or {})
            if mask is not None:
                if not mask[lo:hi].any():
                    calls[k] = ("reobserve", None)  # none of this shard's worlds resets
                    continue
                worker_options["reset_mask"] = mask[lo:hi]
            calls[k] = ("reset", {"seed": seeds[k], "options": worker_options or None})
        for k, (command, data) in calls.items():
            if k:
                self._send(k, command, data, j)
        local = self._run_local(*calls[0], j)
        infos = self._gather(range(1, self.num_workers), local)
        infos = [{} if calls[k][0] == "reobserve" else infos[k] for k in range(self.num_workers)]
        if mask is not None:  # shards left out report nothing: their worlds' masks are false
            infos = self._fill_missing(infos)
        return self._observations(j), _join_infos(infos, self._sizes)

    def step(self, actions):
        self._check_open()
        by_pipe, local_actions = self._write_actions(actions)
        sets = (self._pick_set(), self._pick_results())  # where the observations and the results go
        for k, (lo, hi) in enumerate(self.bounds[1:], start=1):
            if by_pipe is None:
                self._write(k, _framed(_STEP + bytes(sets)))
            else:
                self._send(k, "step", _slice(by_pipe, lo, hi), sets)
        replies = self._gather(range(1, self.num_workers), self._run_local("step", local_actions, sets))
        return (self._observations(sets[0]), *self._step_results(sets[1], replies))

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` (or read attribute ``name``) of every worker's native batch."""
        self._check_open()
        for k in range(1, self.num_workers):
            self._send(k, "call", (name, args, kwargs), None)
        local = self._run_local("call", (name, args, kwargs), None)
        results = self._gather(range(1, self.num_workers), local)
        return tuple(results[k] for k in range(self.num_workers))

    def render(self) -> np.ndarray | None:
        """The first worker's rendering (its first worlds)."""
        self._check_open()
        return self._gather([], self._run_local("call", ("render", (), {}), None))[0]

    def close_extras(self, **kwargs: Any) -> None:
        self.close_workers()

    def close_workers(self, timeout: float = 5.0) -> None:
        """Stop every worker and free the shared memory, within about ``2 * timeout`` seconds
        however many workers there are: all are asked to close and given ``timeout`` seconds
        together, then the ones left are terminated and given as long again, then killed
        (SIGKILL ends a stopped or stuck process too)."""
        for conn in self._conns.values():
            try:
                os.set_blocking(conn.fileno(), False)  # a worker that stopped reading cannot block the close
                conn.send_bytes(pickle.dumps(("close", None, None)))
            except (OSError, ValueError):
                pass
        processes = list(self._processes.values())
        for stop in (None, "terminate", "kill"):
            alive = [process for process in processes if process.is_alive()]
            if stop:
                for process in alive:
                    getattr(process, stop)()
            deadline = time.monotonic() + timeout
            for process in alive:
                process.join(None if stop == "kill" else max(deadline - time.monotonic(), 0.0))
        for conn in self._conns.values():
            conn.close()
        self._processes, self._conns = {}, {}
        if self._local is not None:
            self._local.envs.close()
            self._local = None
        self._act = []  # views must go before their memory does
        in_use = {id(block): _refcounts(objects) != counts for _, objects, counts, block in self._sets + self._results}
        self._sets = self._results = []
        for block in self._blocks:
            block.free(in_use.get(id(block), False))
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

    def _handed_out(self, block: _Block) -> tuple[Any, list[Any], list[int], _Block]:
        """A set of observation arrays: the observation the caller is handed (built once, so that
        the refcounts of its arrays tell whether the caller still holds them), those arrays,
        their refcounts when nobody else holds them (filled in by the caller), the block."""
        arrays = block.arrays()
        if self._direct:
            tree = self._local.envs.observation_views({path[0]: a for path, a in zip(block.paths, arrays, strict=True)})
        else:
            tree = _build(block.paths, arrays)
        return tree, _watched([*arrays, *(leaf for _, leaf in _leaves(tree))]), [], block

    def _handed_out_results(self, block: _Block) -> tuple[list[np.ndarray], list[Any], list[int], _Block]:
        """A set of result arrays (reward, terminated, truncated, the info's), as :meth:`_handed_out`."""
        arrays = block.arrays()
        return arrays, _watched(arrays), [], block

    def _pick_results(self) -> int:
        """The result set this step writes: a rotating one none of whose arrays anyone still holds,
        else the working set 0, copied out (whatever ``copy`` is: rewards and infos are small)."""
        r = self._last_results = _free_set(self._results, self._last_results)
        return r

    def _pick_set(self) -> int:
        """The observation set this call writes: with ``copy=False`` always the working set 0,
        whose arrays the caller gets as views; with ``copy=True`` a rotating set none of whose
        arrays anyone still holds (their refcounts are as when they were made), handed out
        as it is, so the caller owns arrays no later call writes, without a copy; or, when
        the caller holds every rotating set, set 0, copied out."""
        j = self._last_set = _free_set(self._sets, self._last_set) if self.copy else 0
        return j

    def _observations(self, j: int):
        tree = self._sets[j][0]
        if j == 0 and self.copy:
            return _copy_tree(tree)
        return dict(tree) if isinstance(tree, dict) else tree

    def _step_results(self, r: int, replies: dict[int, Any]) -> tuple[Any, ...]:
        """Reward, terminated, truncated and info of the step whose results went to set ``r``."""
        arrays = self._results[r][0]
        if all(reply is _IN_SHARED_MEMORY for reply in replies.values()):
            info = _build(self._info_paths, arrays[3:]) if self._info_paths else {}
            if r == 0:  # the caller holds every rotating set
                return *(a.copy() for a in arrays[:3]), _copy_tree(info)
            return *arrays[:3], info
        infos = [self._shard_info(k, r, replies[k]) for k in range(self.num_workers)]
        ends = (a.copy() for a in arrays[:3]) if r == 0 else arrays[:3]
        return *ends, _join_infos(infos, self._sizes)

    def _run_local(self, command: str, data: Any, j: Any) -> tuple[Any, Exception | None]:
        """Shard 0's part of a call (run while the workers run theirs): (its reply, its error)."""
        try:
            return self._local.run(command, data, j), None
        except Exception as error:  # noqa: BLE001  (raised once the workers have answered)
            return None, error

    def _send(self, k: int, command: str, data: Any, j: int | None) -> None:
        self._send_bytes(k, pickle.dumps((command, data, j)))

    def _send_bytes(self, k: int, message: bytes) -> None:
        try:
            self._conns[k].send_bytes(message)
        except (BrokenPipeError, ConnectionResetError, OSError) as error:
            self._fail(k, f"its pipe broke ({error})")

    def _write(self, k: int, framed: bytes) -> None:
        """Send worker ``k`` a short message already :func:`_framed` (one write: see _read_message)."""
        try:
            os.write(self._conns[k].fileno(), framed)
        except (BrokenPipeError, ConnectionResetError, OSError) as error:
            self._fail(k, f"its pipe broke ({error})")

    def _gather(self, workers, local: tuple[Any, Exception | None]) -> dict[int, Any]:
        """Shard 0's reply and every listed worker's; a dead worker raises RuntimeError."""
        replies, error = {0: local[0]}, local[1]
        for k in workers:
            try:  # a dead worker's pipe ends, a hung one's answer is waited for reply_timeout s: no hang
                message = _receive(self._conns[k], self._spin, len(_DONE), self.reply_timeout)
            except TimeoutError:
                self._fail(k, f"it did not answer within {self.reply_timeout:g} s", hung=True)
            except (EOFError, OSError):
                self._fail(k, "its pipe closed")
            tag = message[:1]
            if tag == _DONE:
                replies[k] = _IN_SHARED_MEMORY
            elif tag == _REPLY:
                replies[k] = pickle.loads(message[1:])
            else:
                error = error or pickle.loads(message[1:])
        if error is not None:
            raise error
        return replies

    def _shard_info(self, k: int, r: int, reply: Any) -> dict[str, Any]:
        """Shard ``k``'s info: its reply, or its rows of result set ``r``."""
        if reply is not _IN_SHARED_MEMORY:
            return reply
        lo, hi = self.bounds[k]
        return _build(self._info_paths, [a[lo:hi] for a in self._results[r][0][3:]]) if self._info_paths else {}

    def _fail(self, k: int, why: str, hung: bool = False) -> None:
        lo, hi = self.bounds[k]
        if hung:
            message = f"worker {k} (worlds {lo}..{hi - 1}) hung: {why}, and was killed"
        else:
            self._processes[k].join(1.0)  # so that its exit code is known
            message = f"worker {k} (worlds {lo}..{hi - 1}) died: {why} (exit code {self._processes[k].exitcode})"
        self._broken = message
        self.close_workers(timeout=1.0)
        raise WorkerError(f"ShardedVectorEnv {message}; the env is closed")

    def _write_actions(self, actions) -> tuple[Any, Any]:
        """Put the workers' ``actions`` in shared memory; returns (None, shard 0's actions), or
        (``actions``, shard 0's slice of them) when they must travel by pipe (anything the buffers
        cannot hold exactly: the native env then judges them itself)."""
        lo, hi = self.bounds[0]
        values = self._plain_actions(actions)
        if values is None:
            given = dict(_leaves(actions)) if isinstance(actions, (dict, np.ndarray, list, tuple)) else {}
            if set(given) == set(self._act_paths):
                values = [np.asarray(given[path]) for path in self._act_paths]
                if not all(v.shape == view.shape and np.can_cast(v.dtype, view.dtype, "safe")
                           for v, view in zip(values, self._act, strict=True)):
                    values = None
        if values is not None:
            for view, value in zip(self._act, values, strict=True):
                view[hi:] = value[hi:]
            return None, _build(self._act_paths, [value[lo:hi] for value in values])
        if not hasattr(actions, "take") and not all(np.shape(v)[:1] == (self.num_envs,) for _, v in
                                                     _leaves(actions)):
            raise ValueError(f"actions must be a batch of {self.num_envs} (arrays with that leading axis, "
                             f"shaped like {self.action_space})")
        return actions, _slice(actions, lo, hi)

    def _plain_actions(self, actions) -> list[np.ndarray] | None:
        """The arrays of ``actions`` in the order of the shared buffers, when ``actions`` is laid
        out exactly like them (dicts of arrays of their shapes, dtypes they hold exactly: the
        usual case, checked quickly), else None."""
        if type(actions) is not dict or len(actions) != len(self._act_keys):
            return None
        values = []
        for path, view in zip(self._act_paths, self._act, strict=True):
            value = actions
            for depth, key in enumerate(path):
                if type(value) is not dict or (depth and len(value) != self._act_keys[path[0]]):
                    return None
                value = value.get(key)
            if type(value) is not np.ndarray or value.shape != view.shape:
                return None
            fits = self._act_fits.get((path, value.dtype))
            if fits is None:
                fits = self._act_fits[path, value.dtype] = bool(np.can_cast(value.dtype, view.dtype, "safe"))
            if not fits:
                return None
            values.append(value)
        return values

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


def _watched(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The objects whose reference counts tell whether anyone holds ``arrays`` or a view of them:
    the arrays and their bases (a view of a view refers to the first array of the chain that
    does not view another array, not to the array it was cut from)."""
    bases = (a.base for a in arrays if isinstance(a.base, np.ndarray))
    return list({id(a): a for a in (*arrays, *bases)}.values())


def _free_set(sets: Sequence[tuple[Any, list[Any], list[int], Any]], last: int) -> int:
    """The first rotating set (sets 1, 2, ...) from ``last`` on none of whose watched objects anyone
    holds (their reference counts are as when the set was made), else the working set 0.

    ``last`` itself comes first: a caller who let go of the last step's arrays gets the same
    memory again, still in the caches, instead of 2.5 MB of cold observations a shard at B=8192
    (interleaved per-step times: B=8192 over 2 processes, p20 2504 -> 2467 us; one shard
    of 4096 alone 2259 -> 2235 us, the native batch's step being 2176)."""
    for offset in range(len(sets) - 1):
        j = 1 + (last - 1 + offset) % (len(sets) - 1)
        _, objects, counts, _ = sets[j]
        if _refcounts(objects) == counts:
            return j
    return 0


def _copy_tree(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {key: _copy_tree(value) for key, value in tree.items()}
    return tree.copy()


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
