"""The batch engine on a device: a scenario's worlds as torch tensors, stepped with no host sync.

:class:`DeviceBatch` is :class:`arena_envs.batch.Batch` for the dense rules
(:mod:`arena_envs.dense`, a scenario's ``dense_*`` methods): the state lives on a
torch device (the CPU or CUDA), resets and both autoreset modes are masks over the whole
batch, and the random layouts come from the counter generator (:mod:`arena_envs.xp`), so
a world reset with seed ``s`` is the same world on every backend. The seeding rule is the
numpy batch's: world ``i`` of a batch reset with seed ``s`` is a single world reset with
seed ``s + i``; a world reset without a seed draws its next layout from its own key.

One step (:meth:`autostep`) is a fixed sequence of kernels: it can be compiled whole
(``compile=True``, torch.compile).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from arena_envs import dense
from arena_envs.batch import check_autoreset_mode
from arena_envs.world import WorldState
from arena_envs.xp import fold_seed, torch_device, torch_namespace, world_keys


def state_to(state: WorldState, device: Any) -> WorldState:
    """A copy of ``state`` (numpy or torch arrays) as torch tensors on ``device``."""
    import torch

    def move(a):
        if isinstance(a, np.ndarray) and a.dtype == np.uint64:  # torch has no uint64 arithmetic: same bits
            a = a.view(np.int64)
        return torch.as_tensor(a).to(device).clone()

    arrays = {f.name: move(getattr(state, f.name)) for f in dataclasses.fields(state) if f.name != "extra"}
    return WorldState(**arrays, extra={k: move(v) for k, v in state.extra.items()})


def state_to_numpy(state: WorldState) -> WorldState:
    """A numpy copy of a state on any device (what rendering and the tool layer read)."""
    def host(a):
        return a.detach().cpu().numpy().copy() if hasattr(a, "detach") else np.array(a)

    arrays = {f.name: host(getattr(state, f.name)) for f in dataclasses.fields(state) if f.name != "extra"}
    return WorldState(**arrays, extra={k: host(v) for k, v in state.extra.items()})


class DeviceBatch:
    """``size`` worlds of a scenario with ``dense_*`` rules, on a torch ``device``."""

    def __init__(self, scenario: Any, size: int, device: Any = "cpu",
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, compile: bool = False):
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"the number of worlds must be a positive integer, got {size!r}")
        for method in ("dense_reset", "dense_step", "dense_observe", "dense_info"):
            if not hasattr(scenario, method):
                raise ValueError(f"{type(scenario).__name__} has no device rules yet ({method}): "
                                 "leave device out to run it on numpy")
        import torch

        self.torch = torch
        self.xp = torch_namespace()
        self.device = torch_device(device)
        self.scenario = scenario
        self.size = int(size)
        self.autoreset_mode = check_autoreset_mode(autoreset_mode)
        self.state = state_to(scenario.init_state(self.size), self.device)
        # each world's generator: a 64-bit seed (from entropy until one is given) and its resets since
        entropy = np.random.SeedSequence().generate_state(2 * self.size, np.uint64)[: self.size]
        self.seed = torch.as_tensor(entropy.view(np.int64).copy(), device=self.device)
        self.count = torch.zeros(self.size, dtype=torch.int64, device=self.device)
        self.needs_reset = torch.zeros(self.size, dtype=torch.bool, device=self.device)
        self._step = torch.compile(self._autostep, dynamic=True) if compile else self._autostep

    def mask(self, mask: Any = None) -> Any:
        """``mask`` (B,) as a bool tensor on the device (all worlds when None)."""
        torch = self.torch
        if mask is None:
            return torch.ones(self.size, dtype=torch.bool, device=self.device)
        mask = torch.as_tensor(mask, device=self.device)
        if mask.dtype != torch.bool or tuple(mask.shape) != (self.size,):
            raise ValueError(f"a mask of the worlds must be a bool array of shape ({self.size},), "
                             f"got {mask.dtype} {tuple(mask.shape)}")
        return mask

    def reset(self, mask: Any = None, seeds: Sequence[int | None] | None = None) -> None:
        """New episodes in the worlds where ``mask`` is true (all by default), world ``i`` with
        ``seeds[i]`` when given (a sequence over the whole batch; None keeps the world's key)."""
        torch, mask = self.torch, self.mask(mask)
        if seeds is not None:
            if any(isinstance(s, bool) or (s is not None and int(s) < 0) for s in seeds):
                raise ValueError(f"seeds must be non-negative integers or None, got {list(seeds)[:8]}")
            given = torch.as_tensor([s is not None for s in seeds], device=self.device) & mask
            folded = torch.as_tensor([fold_seed(s) if s is not None else 0 for s in seeds], dtype=torch.int64,
                                     device=self.device)
            self.seed = torch.where(given, folded, self.seed)
            self.count = torch.where(given, torch.zeros_like(self.count), self.count)
        self._reset(mask)

    def _reset(self, mask: Any) -> None:
        self.scenario.dense_reset(self.state, mask, world_keys(self.xp, self.seed, self.count))
        self.count = self.count + mask.to(self.torch.int64)
        self.needs_reset = self.needs_reset & ~mask

    def observe(self) -> Any:
        return self.scenario.dense_observe(self.state)

    def info(self, mask: Any = None) -> dict[str, Any]:
        """The scenario's info with Gymnasium's ``_key`` masks (true where ``mask`` is, default all)."""
        info = self.scenario.dense_info(self.state)
        present = self.mask(mask)
        return {**info, **{"_" + k: present for k in info}}

    def autostep(self, actions: Any, active: Any = None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """:meth:`arena_envs.batch.Batch.autostep` on the device: every world steps (or those where
        ``active``), finished ones restart the Gymnasium way, all with masks."""
        return self._step(actions, active)

    def _autostep(self, actions: Any, active: Any = None):
        torch, s = self.torch, self.state
        # the dense rules replace the state's arrays (extras too), never write into them: the old ones stay
        before = {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name != "extra"}
        extra_before = dict(s.extra)
        reward, terminated, truncated = self.scenario.dense_step(s, actions)
        if active is not None:  # the others pause: same state, reward 0, no end
            for name, old in before.items():
                setattr(s, name, dense.where_worlds(active, getattr(s, name), old))
            for name, old in extra_before.items():
                s.extra[name] = dense.where_worlds(active, s.extra[name], old)
            reward = dense.where_worlds(active, reward, torch.zeros_like(reward))
            terminated, truncated = terminated & active, truncated & active
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            restart = self.needs_reset if active is None else self.needs_reset & active
            self._reset(restart)
            reward = dense.where_worlds(restart, torch.zeros_like(reward), reward)
            terminated, truncated = terminated & ~restart, truncated & ~restart
            obs, info = self.observe(), self.info()
        else:
            obs, info = self.observe(), self.info()
            ended = terminated | truncated
            self._reset(ended)
            info = {**self.info(), "final_obs": obs, "_final_obs": ended, "final_info": info, "_final_info": ended}
            obs = self.observe()
        ended = terminated | truncated
        self.needs_reset = ended if active is None else torch.where(active, ended, self.needs_reset)
        return obs, reward, terminated, truncated, info
