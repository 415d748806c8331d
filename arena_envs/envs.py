"""Gymnasium adapters over the batch engine, and the one factory every scenario is registered through.

    ArenaEnv("foraging")              a single world: the batch of one behind ``gym.make``
    ArenaVectorEnv(4096, "crafting")  the native batch behind ``gym.make_vec``

Both are thin: seeding, partial resets, autoreset and masked stepping live in
:class:`~arena_envs.batch.Batch`, the rules in the scenario. A scenario is known here by
name (:data:`SCENARIOS`): its rules, the :class:`~arena_envs.render.Scene` that draws what
only it has, and whether several agents act in each world. ``step`` takes a structured
action or, from the tool-calling layer, an already decoded
:class:`~arena_envs.world.ToolActions`, so tool calls pass through every wrapper a user
put around the env.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from arena_envs.actions import decode_actions
from arena_envs.batch import Batch, Rules, reset_mask, row, world_seeds
from arena_envs.crafting import Crafting
from arena_envs.dense import decode as decode_dense
from arena_envs.foraging import Foraging
from arena_envs.names import find, registered_id  # noqa: F401  (registered_id: its old home)
from arena_envs.render import MAP_PIXELS, RENDER_FPS, RENDER_MODES, Renderer, Scene, render_frame, text_map, tile
from arena_envs.scenes import CraftingScene, TeamCaptureScene
from arena_envs.team_capture import make_scenario as team_capture
from arena_envs.world import ToolActions

RENDER_METADATA: dict[str, Any] = {"render_modes": RENDER_MODES, "render_fps": RENDER_FPS}


@dataclass(frozen=True)
class ScenarioEntry:
    """How to build a scenario's rules from an env's keyword arguments, and how to draw it."""

    rules: Callable[..., Any]
    scene: Callable[[Any], Scene | None] = lambda rules: None
    multi_agent: bool = False  # every array carries an agent axis: (B, A, ...)


SCENARIOS: dict[str, ScenarioEntry] = {
    "foraging": ScenarioEntry(Foraging),
    "crafting": ScenarioEntry(Crafting, lambda rules: CraftingScene()),
    "team_capture": ScenarioEntry(team_capture, TeamCaptureScene, multi_agent=True),
}


def build(scenario: str | Rules, **kwargs: Any) -> tuple[Any, Scene | None, bool]:
    """The rules, scene and multi-agent flag of ``scenario`` (a name of :data:`SCENARIOS` or rules)."""
    if not isinstance(scenario, str):
        if kwargs:
            raise TypeError(f"scenario rules were given, so these arguments have nowhere to go: {sorted(kwargs)}")
        return scenario, None, hasattr(scenario, "possible_agents")
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; known: {sorted(SCENARIOS)}")
    entry = SCENARIOS[scenario]
    rules = entry.rules(**kwargs)
    return rules, entry.scene(rules), entry.multi_agent


def name_of(scenario: str | Rules) -> str:
    return scenario if isinstance(scenario, str) else type(scenario).__name__


class ArenaEnv(gym.Env):
    """A single world of a scenario (see the scenario module's docstring for spaces and rules)."""

    metadata: dict[str, Any] = RENDER_METADATA

    def __init__(self, scenario: str | Rules = "foraging", render_mode: str | None = None, **kwargs: Any):
        self.renderer = Renderer(render_mode, self.metadata, f"arena_envs: {name_of(scenario)}")
        rules, self.scene, multi_agent = build(scenario, **kwargs)
        if multi_agent:  # gym.make("arena_envs/TeamCapture-v0") comes here
            named = find(scenario) if isinstance(scenario, str) else None
            raise ValueError(f"{named.env_id if named else scenario!r} has several agents per world, so it has no "
                             f"single-agent Gymnasium env: "
                             f"use arena_envs.team_capture_v0.parallel_env() (PettingZoo) or "
                             f"gym.make_vec('arena_envs/TeamCapture-v0', num_envs=N)")
        self.batch = Batch(rules, 1)
        self.scenario, self.state = rules, self.batch.state
        self.observation_space = rules.observation_space
        self.action_space = rules.action_space
        self.render_mode = render_mode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.batch.rngs[0] = self.np_random  # Gymnasium's generator for this env is the world's
        self.batch.reset()
        if self.render_mode == "human":
            self.render()
        return row(self.batch.observe(), 0), self._info()

    def step(self, action: Any):
        actions = action if isinstance(action, ToolActions) else decode_actions(
            action, (1,), self.action_space, self.scenario.params, single=True)
        reward, terminated, truncated = self.batch.step(actions)
        if self.render_mode == "human":
            self.render()
        return row(self.batch.observe(), 0), float(reward[0]), bool(terminated[0]), bool(truncated[0]), self._info()

    def _info(self) -> dict[str, Any]:
        return {k: v.item() for k, v in self.batch.scenario.info(self.state).items()}  # (1,) arrays: a batch of one

    def render(self) -> np.ndarray | str | None:
        """The world seen from above: an (H, W, 3) uint8 frame (``"rgb_array"``), a text map
        (``"ansi"``), or shown in a window (``"human"``, called by ``reset`` and ``step``)."""
        return self.renderer.render_world(self.scenario, self.state, self.scene)

    def close(self) -> None:
        self.renderer.close()


def set_batch_spaces(env: VectorEnv, rules: Any, multi_agent: bool) -> None:
    """A vector env's agents, batch shape and spaces from its rules (its ``num_envs`` and
    ``autoreset_mode`` set): with agents, every array has an agent axis after the batch axis."""
    env.metadata = {**env.metadata, "autoreset_mode": env.autoreset_mode}
    env.agents = list(rules.possible_agents) if multi_agent else None
    env._shape = (env.num_envs, len(env.agents)) if multi_agent else (env.num_envs,)
    one_agent = (rules.observation_space, rules.action_space)
    env.single_observation_space, env.single_action_space = (
        [batch_space(space, len(env.agents)) for space in one_agent] if multi_agent else one_agent)
    env.observation_space = batch_space(env.single_observation_space, env.num_envs)
    env.action_space = batch_space(env.single_action_space, env.num_envs)


class ArenaVectorEnv(VectorEnv):
    """The native numpy batch of a scenario: every world steps in the same array operations.

    Autoreset follows Gymnasium: ``NEXT_STEP`` (default) resets a finished world on the
    following ``step`` and returns its first observation with reward 0; ``SAME_STEP``
    resets it in the same call and puts its last observation and info in
    ``info["final_obs"]`` / ``info["final_info"]``. ``reset(options={"reset_mask": m})``
    resets only the worlds where ``m`` is true. In a multi-agent scenario every array has
    an agent axis after the batch axis (agents in the order of :attr:`agents`); info is per world.
    ``rng="counter"`` lays out worlds from the counter generator every backend shares (the
    worlds of ``device=``), instead of numpy's PCG64.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, **RENDER_METADATA}
    render_worlds = 4  # how many worlds `render` tiles

    def __init__(self, num_envs: int = 1, scenario: str | Rules = "foraging",
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                 render_mode: str | None = None, rng: str = "pcg64", **kwargs: Any):
        self.renderer = Renderer(render_mode, self.metadata, f"arena_envs: {num_envs} x {name_of(scenario)}")
        rules, self.scene, multi_agent = build(scenario, **kwargs)
        self.batch = Batch(rules, num_envs, autoreset_mode, rng=rng)
        self.scenario, self.state = rules, self.batch.state
        self.num_envs = self.batch.size
        self.autoreset_mode = self.batch.autoreset_mode
        self.render_mode = render_mode
        set_batch_spaces(self, rules, multi_agent)

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed if isinstance(seed, int) else None)
        mask = reset_mask(options, self.num_envs)
        seeds = world_seeds(seed, self.num_envs)
        index = np.flatnonzero(mask)
        self.batch.reset(index, [seeds[i] for i in index])
        if self.render_mode == "human":
            self.render()
        return self.batch.observe(), self.batch.info(mask)

    def step(self, actions: Any, active: np.ndarray | None = None):
        """One tick of every world, or of those where ``active`` (a (B,) bool mask) is true: the
        others pause (same observation, reward 0, no end; a league's learner waits in them)."""
        obs, reward, terminated, truncated, info = self.batch.autostep(self.decode(actions), active)
        if self.agents:  # every agent of a world ends with it
            terminated, truncated = (np.repeat(end[:, None], len(self.agents), 1) for end in (terminated, truncated))
        if self.render_mode == "human":
            self.render()
        return obs, reward.astype(np.float64), terminated, truncated, info

    # -- observations written in place (what a worker of ShardedVectorEnv uses) ------------

    def observation_layout(self) -> dict[str, tuple[tuple[int, ...], np.dtype]] | None:
        """The arrays (shape of one world, dtype) the scenario writes its observations into,
        or None when its ``observe`` cannot write into given arrays. See :meth:`observe_into`."""
        layout = getattr(self.scenario, "observation_layout", None)
        return None if layout is None or self.agents else layout()

    def observation_views(self, out: dict[str, np.ndarray]) -> Any:
        """The observation as views of the arrays ``out`` of :meth:`observation_layout` (any batch size)."""
        return self.scenario.observation_views(out)

    def observe(self) -> Any:
        """The observation of every world now (what the last ``reset`` or ``step`` returned)."""
        return self.batch.observe()

    def observe_into(self, out: dict[str, np.ndarray] | None) -> None:
        """From now on ``reset`` and ``step`` write observations into ``out`` (arrays of
        :meth:`observation_layout` with a leading axis of ``num_envs``) and return views of
        them, which the next call overwrites; ``None`` goes back to new arrays each call."""
        if out is not None and self.observation_layout() is None:
            raise ValueError("this scenario's observations cannot be written into given arrays")
        self.batch.obs_out = out

    def decode(self, actions: Any) -> ToolActions:
        """The batch of structured actions as the core's arrays (a ``ToolActions`` passes as it is)."""
        if isinstance(actions, ToolActions):
            return actions
        return decode_actions(actions, self._shape, self.scenario.action_space, self.scenario.params)

    def frame(self, world: int = 0, pixels: int = MAP_PIXELS) -> np.ndarray:
        """World ``world`` seen from above as an (H, W, 3) uint8 image."""
        return render_frame(self.scenario, self.state, world, self.scene, pixels)

    def text(self, world: int = 0) -> str:
        """World ``world`` as a character map with its status and legend lines."""
        return text_map(self.scenario, self.state, world, self.scene)

    def render(self) -> np.ndarray | str | None:
        """The first few worlds: tiled in one uint8 frame (``"rgb_array"``), their text maps one
        after another (``"ansi"``), or the tiled frame in a window (``"human"``)."""
        shown = range(min(self.render_worlds, self.num_envs))
        return self.renderer.render(lambda: tile([self.frame(b) for b in shown]),
                                    lambda: "\n\n".join(f"world {b}\n{self.text(b)}" for b in shown))

    def close_extras(self, **kwargs: Any) -> None:
        self.renderer.close()


class ArenaDeviceVectorEnv(VectorEnv):
    """The batch of a scenario as torch tensors on ``device`` (``"cpu"`` or ``"cuda"``): the same
    rules as :class:`ArenaVectorEnv`, in their dense form (:mod:`arena_envs.dense`), with no
    host sync in a step.

    Observations, rewards (float32), terminations, truncations and infos are tensors on the
    device; actions are a ``Dict`` of tensors on it (numpy arrays are copied there). The
    spaces are the numpy env's Gymnasium spaces. Worlds come from the counter generator, so
    ``reset(seed=s)`` lays out the worlds a numpy env built with ``rng="counter"`` does.
    ``SAME_STEP`` puts the ended worlds' last observations and infos, batched, in
    ``info["final_obs"]``/``info["final_info"]`` (rows where ``info["_final_obs"]``).
    ``compile=True`` compiles the step with torch.compile.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, **RENDER_METADATA}

    def __init__(self, num_envs: int = 1, scenario: str | Rules = "foraging", device: Any = "cpu",
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, render_mode: str | None = None,
                 compile: bool = False, **kwargs: Any):
        from arena_envs.device_batch import DeviceBatch

        kwargs.pop("rng", None)  # the device batch has the counter generator only
        rules, self.scene, multi_agent = build(scenario, **kwargs)
        self.renderer = Renderer(render_mode, self.metadata, f"arena_envs: {num_envs} x {name_of(scenario)}")
        self.batch = DeviceBatch(rules, num_envs, device, autoreset_mode, compile=compile)
        self.scenario, self.device = rules, self.batch.device
        self.num_envs, self.autoreset_mode = self.batch.size, self.batch.autoreset_mode
        self.render_mode = render_mode
        set_batch_spaces(self, rules, multi_agent)

    @property
    def state(self):
        return self.batch.state

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed if isinstance(seed, int) else None)
        given = (options or {}).get("reset_mask")
        if given is not None and not isinstance(given, np.ndarray):  # a tensor: checked on the host once
            given = np.asarray(given.detach().cpu() if hasattr(given, "detach") else given)
        mask = reset_mask({"reset_mask": given} if given is not None else None, self.num_envs)
        self.batch.reset(mask, world_seeds(seed, self.num_envs) if seed is not None else None)
        return self.batch.observe(), self.batch.info(mask)

    def step(self, actions: Any, active: Any = None):
        """One tick of every world (or of those where ``active``, a (B,) bool tensor, is true)."""
        if active is not None:
            active = self.batch.mask(active)
        obs, reward, terminated, truncated, info = self.batch.autostep(self.decode(actions), active)
        if self.agents:  # every agent of a world ends with it
            terminated, truncated = (end[:, None].expand(self._shape) for end in (terminated, truncated))
        return obs, reward, terminated, truncated, info

    def decode(self, actions: Any) -> ToolActions:
        if isinstance(actions, ToolActions):
            return actions
        return decode_dense(actions, self._shape, self.scenario.action_space, self.scenario.params,
                            self.batch.state.x)

    def host_state(self):
        """A numpy copy of the worlds (for rendering, the tool layer, or a look)."""
        from arena_envs.device_batch import state_to_numpy

        return state_to_numpy(self.batch.state)

    def render(self) -> np.ndarray | str | None:
        """As :meth:`ArenaVectorEnv.render`, from a host copy of the first few worlds."""
        state = self.host_state()
        shown = range(min(ArenaVectorEnv.render_worlds, self.num_envs))
        return self.renderer.render(
            lambda: tile([render_frame(self.scenario, state, b, self.scene, MAP_PIXELS) for b in shown]),
            lambda: "\n\n".join(f"world {b}\n{text_map(self.scenario, state, b, self.scene)}" for b in shown))

    def close_extras(self, **kwargs: Any) -> None:
        self.renderer.close()


# -- registration: one factory for every scenario ---------------------------------------------

def make_env(scenario: str = "foraging", **kwargs: Any) -> ArenaEnv:
    """``gym.make``'s entry point for every 2D scenario (``scenario`` comes from the registration)."""
    return ArenaEnv(scenario, **kwargs)


def make_vector_env(num_envs: int = 1, scenario: str = "foraging", num_workers: int = 1,
                    device: Any = None, **kwargs: Any) -> VectorEnv:
    """``gym.make_vec``'s entry point: the native batch, sharded over ``num_workers`` processes when > 1,
    or with ``device`` (``"cpu"``, ``"cuda"``) the same rules on torch tensors there."""
    kwargs.pop("max_episode_steps", None)  # make_vec forwards the spec's; the rules have their own limit
    if device is not None:
        if num_workers != 1:
            raise ValueError("device= runs every world on one device: leave num_workers at 1")
        return ArenaDeviceVectorEnv(num_envs, scenario, device, **kwargs)
    if num_workers != 1:
        from arena_envs.sharded import ShardedVectorEnv

        return ShardedVectorEnv(num_envs, num_workers, make_native=functools.partial(_native_batch, scenario, kwargs))
    return ArenaVectorEnv(num_envs, scenario, **kwargs)


def _native_batch(scenario: str | Rules, kwargs: dict[str, Any], num_envs: int) -> ArenaVectorEnv:
    """One shard's batch of a sharded ``make_vector_env`` (a module-level function: it pickles)."""
    return ArenaVectorEnv(num_envs, scenario, **kwargs)
