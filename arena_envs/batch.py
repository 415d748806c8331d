"""The batch engine: a scenario's worlds and the bookkeeping every adapter shares.

A :class:`Batch` holds a scenario (its rules), the batched state those rules work on, one
random generator per world, and which worlds wait for an autoreset. Every front end is a
thin adapter over it: the single Gymnasium env is a batch of one, the vector envs are the
batch, the PettingZoo env, the tool pools, the Treasure Hunt vector env, the SB3 adapter
and the servers read and write the same batch. So seeding, partial resets, masked
stepping and autoreset are written once, here.

Seeding rule: world ``i`` of a batch reset with seed ``s`` behaves exactly like a single
world reset with seed ``s + i`` (:func:`world_seeds`); a world reset without a seed keeps
drawing from its own generator, so each world is independent of the batch's size.

The engine knows nothing of Gymnasium's classes: it takes any object with the
:class:`Rules` methods, whatever its state and actions are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode

from arena_envs.xp import CounterGenerator

State = TypeVar("State")
GENERATORS = ("pcg64", "counter")
"""A batch's world generators: numpy's PCG64 (the default), or the counter generator of
:mod:`arena_envs.xp`, which lays out the same worlds on every backend (the device batch's)."""
Steps = tuple[np.ndarray, np.ndarray, np.ndarray]  # reward, terminated, truncated: (B,) or (B, A)


class Rules(Protocol[State]):
    """What the engine needs from a scenario: pure functions over a batched state."""

    def init_state(self, size: int) -> State: ...

    def reset(self, state: State, index: np.ndarray, rngs: Sequence[np.random.Generator],
              seeds: Sequence[int | None]) -> None: ...

    def step(self, state: State, actions: Any, active: np.ndarray | None = None) -> Steps: ...

    def observe(self, state: State) -> Any: ...

    def info(self, state: State) -> dict[str, np.ndarray]: ...


def world_seeds(seed: int | Sequence[int | None] | None, size: int) -> list[int | None]:
    """One seed per world: ``None`` for none, ``s + i`` for an int ``s``, or a sequence of ``size``."""
    if seed is None:
        return [None] * size
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return [int(seed) + i for i in range(size)]
    if isinstance(seed, (str, bytes, bool)) or not isinstance(seed, Sequence | np.ndarray):
        raise ValueError(f"seed must be None, an int or a sequence of {size} seeds, got {seed!r}")
    seeds = list(seed)
    if len(seeds) != size:
        raise ValueError(f"expected {size} seeds, got {len(seeds)}")
    return seeds


def reset_mask(options: dict[str, Any] | None, size: int) -> np.ndarray:
    """The worlds a ``reset(options={"reset_mask": m})`` call resets: all when no mask is given."""
    mask = (options or {}).get("reset_mask")
    if mask is None:
        return np.ones(size, bool)
    mask = np.asarray(mask)
    if mask.shape != (size,) or mask.dtype != np.bool_:
        raise ValueError(f"options['reset_mask'] must be a bool array of shape ({size},), "
                         f"got {mask.dtype} {mask.shape}")
    if not mask.any():
        raise ValueError("options['reset_mask'] must select at least one env")
    return mask


def check_autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    mode = AutoresetMode(mode)
    if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
        raise ValueError(f"autoreset_mode must be NEXT_STEP or SAME_STEP, got {mode}")
    return mode


def step_subset(step: Callable[[Any, Any], Steps], state: Any, actions: Any, active: np.ndarray | None) -> Steps:
    """Run ``step`` on the worlds where ``active`` is true and leave the others untouched.

    For states and actions with ``take``/``put`` (the 2D scenarios' arrays). Rewards of
    inactive worlds are 0 and their episodes do not end.
    """
    if active is None or active.all():
        return step(state, actions)
    index = np.flatnonzero(active)
    part = state.take(index)
    result = step(part, actions.take(index))
    state.put(index, part)
    out = []
    for value in result:
        full = np.zeros((state.batch_size,) + value.shape[1:], value.dtype)  # (B,) or per agent (B, A)
        full[index] = value
        out.append(full)
    return tuple(out)


def row(tree: Any, i: int) -> Any:
    """World ``i`` of (nested dicts of) batched arrays."""
    if isinstance(tree, dict):
        return {k: row(v, i) for k, v in tree.items()}
    return tree[i]


def row_copy(tree: Any, i: int) -> Any:
    """A copy of world ``i`` of (nested dicts of) batched arrays."""
    if isinstance(tree, dict):
        return {k: row_copy(v, i) for k, v in tree.items()}
    return np.array(tree[i])


class Batch(Generic[State]):
    """``size`` worlds of one scenario, their generators and their autoreset bookkeeping."""

    def __init__(self, scenario: Rules[State], size: int,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, rng: str = "pcg64"):
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"the number of worlds must be a positive integer, got {size!r}")
        self.scenario = scenario
        self.size = int(size)
        self.autoreset_mode = check_autoreset_mode(autoreset_mode)
        if rng not in GENERATORS:
            raise ValueError(f"rng must be one of {GENERATORS}, got {rng!r}")
        self.rng = rng
        self.state: State = scenario.init_state(self.size)
        self.rngs: list[np.random.Generator | None] = [None] * self.size
        self.needs_reset = np.zeros(self.size, bool)  # worlds that ended on the last autostep
        self.begun = np.zeros(self.size, bool)  # worlds reset at least once
        # where observations go: None for new arrays each time, or the arrays of the scenario's
        # ``observation_layout`` to overwrite (a scenario whose ``observe`` takes ``out``)
        self.obs_out: Any = None

    # -- worlds --------------------------------------------------------------------------

    def reset(self, index: Sequence[int] | np.ndarray | None = None,
              seeds: Sequence[int | None] | None = None) -> None:
        """Start new episodes in worlds ``index`` (default: all), world ``index[k]`` with ``seeds[k]``.

        A seeded world gets a fresh generator from its seed; one without keeps its own
        (made from entropy the first time). Every seed is checked before any world
        changes, so a bad seed leaves the whole batch as it was.
        """
        index = np.arange(self.size) if index is None else np.asarray(index, np.intp).reshape(-1)
        seeds = [None] * len(index) if seeds is None else list(seeds)
        if len(seeds) != len(index):
            raise ValueError(f"expected {len(index)} seeds, got {len(seeds)}")
        if any(isinstance(s, bool) for s in seeds):  # an int to Python, but never meant as a seed
            raise ValueError(f"seeds must be non-negative integers or None, got {seeds}")
        fresh = {int(i): self.generator(s) for i, s in zip(index, seeds, strict=True)
                 if s is not None or self.rngs[i] is None}  # raises before anything changed
        for i, rng in fresh.items():
            self.rngs[i] = rng
        self.scenario.reset(self.state, index, [self.rngs[i] for i in index], seeds)
        self.needs_reset[index] = False
        self.begun[index] = True

    def generator(self, seed: int | None) -> Any:
        """A world's generator from ``seed`` (from entropy when None): numpy's PCG64, or with
        ``rng="counter"`` the counter generator every backend shares (:mod:`arena_envs.xp`)."""
        rng = seeding.np_random(seed)[0]  # checks the seed either way
        if self.rng == "counter":
            return CounterGenerator(seed if seed is not None else int(rng.integers(0, 2**63)))
        return rng

    def step(self, actions: Any, active: np.ndarray | None = None) -> Steps:
        """One tick of the worlds where ``active`` is true (all by default); the others do not move."""
        return self.scenario.step(self.state, actions, active)

    def observe(self) -> Any:
        if self.obs_out is None:
            return self.scenario.observe(self.state)
        return self.scenario.observe(self.state, self.obs_out)

    def info(self, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The scenario's info with Gymnasium's ``_key`` masks (true where ``mask`` is, default all)."""
        info = self.scenario.info(self.state)
        present = np.ones(self.size, bool) if mask is None else mask
        return {**info, **{"_" + k: present.copy() for k in info}}

    # -- the vector env's step -----------------------------------------------------------

    def autostep(self, actions: Any, active: np.ndarray | None = None
                 ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every world (or those where ``active`` is true: the others pause, reward 0) and
        restart finished ones the Gymnasium way.

        ``NEXT_STEP``: a world that ended on the last call starts its next episode instead
        of stepping, with reward 0. ``SAME_STEP``: a world that ends now restarts at once;
        its last observation and info go to ``info["final_obs"]`` / ``info["final_info"]``.
        """
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            # Stepping the worlds that ended with the rest and then overwriting them with a
            # fresh world is cheaper than stepping a subset, and the same: reset sets every
            # array of the world.
            reward, terminated, truncated = self.step(actions, active)
            restart = np.flatnonzero(self.needs_reset if active is None else self.needs_reset & active)
            if len(restart):
                self.reset(restart)
                reward[restart] = 0
                terminated[restart] = False
                truncated[restart] = False
            obs, info = self.observe(), self.info()
        else:
            reward, terminated, truncated = self.step(actions, active)
            obs, info = self.observe(), self.info()
            ended = terminated | truncated
            done = np.flatnonzero(ended if ended.ndim == 1 else ended.any(1))
            if len(done):
                info = self._final(obs, info, done)
                self.reset(done)
                obs = self.observe()
                info.update(self.info())
        ended = terminated | truncated
        ended = ended if ended.ndim == 1 else ended.any(1)
        self.needs_reset = ended if active is None else np.where(active, ended, self.needs_reset)
        return obs, reward, terminated, truncated, info

    def _final(self, obs: Any, info: dict[str, Any], done: np.ndarray) -> dict[str, Any]:
        """The SAME_STEP entries for the worlds ``done``, as Gymnasium's SyncVectorEnv lays them out."""
        final_obs = np.full(self.size, None, dtype=object)
        take = row if self.obs_out is None else row_copy  # arrays that the next observe overwrites: copies
        for i in done:
            final_obs[i] = take(obs, i)
        mask = np.zeros(self.size, bool)
        mask[done] = True
        return {"final_obs": final_obs, "_final_obs": mask, "final_info": self.info(mask), "_final_info": mask}
