"""TreasureHunt-v0: follow clue files through a directory tree to a treasure key, with text tools.

## Description

Each episode plays a freshly generated hunt (see ``generator.py``): ``start.txt`` at the
root names the next clue file, each clue names the next one a directory deeper along the
golden path, and the last leads to ``treasure.txt`` with a 16-character key. Red-herring
directories and misleading clue files branch off everywhere. The agent wins by calling
``check_treasure`` with the key while standing in the treasure's directory. Actions and
observations are text, so an LLM agent can play through JSON tool calls.

## Action Space

``Text(max_length=2048)`` over printable ASCII: one tool call as JSON text. A dict is
accepted as well, in the seed format ``{"tool": "cd", "path": "amber"}``, as
``{"name": "cd", "arguments": {...}}``, as an OpenAI tool call or in any other shape
``arena_envs.tools.parse_decision`` reads. The tools (declared once in ``HUNT_TOOLS``,
schemas in ``TREASURE_HUNT_TOOL_SCHEMAS``):

| Tool             | Parameters   | Effect                                              |
|------------------|--------------|-----------------------------------------------------|
| `pwd`            | -            | prints the current directory, e.g. `/amber/cedar`   |
| `cd`             | `path`       | changes directory (`/` paths start at the hunt root)|
| `ls`             | `path?`      | lists files, then directories ending in `/`         |
| `cat`            | `file`       | reads a file (at most 8192 bytes)                   |
| `check_treasure` | `key`        | claims the treasure                                 |
| `give_up`        | -            | abandons the hunt                                   |

A malformed call (bad JSON, unknown tool, missing or non-string parameter) or a refused
path costs a turn and yields an error observation; it never raises.

## Observation Space

``Text(max_length=16384)`` over printable ASCII and newline: the tool's output, or
``Error: <message>``, followed by a status line::

    Next clue: ./amber/lantern.txt
    [turn 1/50 | cwd / | in progress]

The status is ``in progress``, ``treasure found``, ``gave up`` or ``out of turns``.

## Rewards

| Event                     | Reward |
|---------------------------|--------|
| every step                | -0.01  |
| `check_treasure` succeeds | +1     |

## Starting State

The agent stands at the hunt root of a new hunt. ``reset(seed=s)`` plays the hunt of
``generate_treasure_hunt(seed=s, ...)``; a reset without a seed draws the next hunt seed
from the environment's generator.

## Episode End

1. Termination: ``check_treasure`` succeeds.
2. Termination: ``give_up``.
3. Truncation: ``max_steps`` turns have passed (50 by default).

## Info

| Key                    | Meaning                                                           |
|------------------------|-------------------------------------------------------------------|
| `turns`                | tool calls so far                                                 |
| `optimal_path_length`  | fewest tool calls that win (depth + 3)                            |
| `efficiency`           | `min(1, optimal_path_length / turns)` once won, else 0            |
| `wrong_keys_tried`     | failed `check_treasure` calls                                     |
| `red_herrings_entered` | `cd` calls that ended off the golden path                         |
| `success`              | whether the treasure was found                                    |

## Arguments

```python
>>> import gymnasium as gym
>>> import arena_envs
>>> env = gym.make("arena_envs/TreasureHunt-v0", difficulty="medium", render_mode="ansi")
>>> observation, info = env.reset(seed=7)
>>> observation, reward, terminated, truncated, info = env.step({"tool": "cat", "file": "start.txt"})

```

| Parameter          | Type      | Default    | Description                                             |
|--------------------|-----------|------------|---------------------------------------------------------|
| `difficulty`       | **str**   | `"easy"`   | preset: `easy` (4, 2, 0.2), `medium` (6, 3, 0.3), `hard` (8, 4, 0.4) |
| `backend`          | **str**   | `"memory"` | `"memory"`, or `"disk"` (each hunt in a temporary directory) |
| `max_steps`        | **int**   | `50`       | turns before truncation                                 |
| `render_mode`      | **str**   | `None`     | `None` or `"ansi"` (the tree explored so far)          |
| `depth`            | **int**   | preset     | golden-path directories below the root                  |
| `branching_factor` | **int**   | preset     | subdirectories of each golden directory                 |
| `file_density`     | **float** | preset     | probability of each of a directory's 3 decoy files      |

## Vectorized environment

``gym.make_vec("arena_envs/TreasureHunt-v0", num_envs=N)`` builds a
``TreasureHuntVectorEnv`` that plays N hunts (tuples of text in and out), for batched
LLM rollouts. It autoresets on the next step by default (``autoreset_mode="SameStep"``
gives ``final_obs``/``final_info``), accepts ``reset(options={"reset_mask": mask})``, and
env ``i`` reset with seed ``s`` plays exactly like a single env reset with seed ``s + i``.

Both are adapters over the batch engine (``arena_envs.batch.Batch``) driving
``TreasureHuntRules`` (``rules.py``): the single env is a batch of one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import Env
from gymnasium.spaces import Text
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from arena_envs.batch import Batch, check_autoreset_mode, reset_mask, world_seeds
from arena_envs.treasure_hunt.generator import TreasureHunt, hunt_params
from arena_envs.treasure_hunt.rules import (
    ACTION_MAX_LENGTH,
    HUNT_OVER,
    INFO_KEYS,
    MAX_BODY_LENGTH,
    MAX_CWD_SHOWN,
    OBSERVATION_MAX_LENGTH,
    STEP_REWARD,
    SUCCESS_REWARD,
    TEXT_CHARSET,
    WELCOME,
    HuntBatch,
    TreasureHuntRules,
)

__all__ = [
    "ACTION_MAX_LENGTH",
    "HUNT_OVER",
    "INFO_KEYS",
    "MAX_BODY_LENGTH",
    "MAX_CWD_SHOWN",
    "OBSERVATION_MAX_LENGTH",
    "STEP_REWARD",
    "SUCCESS_REWARD",
    "TEXT_CHARSET",
    "WELCOME",
    "TreasureHuntEnv",
    "TreasureHuntVectorEnv",
]


def _checked_settings(backend: str, max_steps: int, render_mode: str | None) -> None:
    if backend not in ("memory", "disk"):
        raise ValueError(f"backend must be 'memory' or 'disk', got {backend!r}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    if render_mode not in (None, "ansi"):
        raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")


def _text_spaces() -> tuple[Text, Text]:
    observation_space = Text(max_length=OBSERVATION_MAX_LENGTH, charset=TEXT_CHARSET)
    action_space = Text(max_length=ACTION_MAX_LENGTH, charset=TEXT_CHARSET)
    return observation_space, action_space


def _rules(
    difficulty: str,
    backend: str,
    max_steps: int,
    render_mode: str | None,
    depth: int | None,
    branching_factor: int | None,
    file_density: float | None,
) -> TreasureHuntRules:
    _checked_settings(backend, max_steps, render_mode)
    params = hunt_params(difficulty, depth, branching_factor, file_density)
    return TreasureHuntRules(params, difficulty, backend, max_steps, track_exploration=render_mode == "ansi")


class TreasureHuntEnv(Env[str, Any]):
    """A text treasure hunt, a batch of one; see the module docstring for spaces, rewards and arguments."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        difficulty: str = "easy",
        backend: str = "memory",
        max_steps: int = 50,
        render_mode: str | None = None,
        depth: int | None = None,
        branching_factor: int | None = None,
        file_density: float | None = None,
    ) -> None:
        rules = _rules(difficulty, backend, max_steps, render_mode, depth, branching_factor, file_density)
        self.render_mode = render_mode
        self.max_steps = max_steps
        self.observation_space, self.action_space = _text_spaces()
        self._batch: Batch[HuntBatch] = Batch(rules, 1)

    @property
    def hunt(self) -> TreasureHunt:
        """The hunt being played (its ``config`` holds the solution)."""
        return self._batch.state.episode(0).hunt

    @property
    def cwd(self) -> str:
        """The agent's directory relative to the hunt root (``""`` is the root)."""
        return self._batch.state.episode(0).cwd

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)  # checks the seed; the world's generator below is the env's np_random
        if seed is None and self._batch.rngs[0] is None:
            self._batch.rngs[0] = self.np_random
        self._batch.reset([0], [seed])
        self._np_random = self._batch.rngs[0]
        episode = self._batch.state.episode(0)
        return self._batch.state.observations[0], episode.info()

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        episode = self._batch.state.episode(0)
        rewards, terminations, truncations = self._batch.step((action,))
        info = episode.info()
        return self._batch.state.observations[0], float(rewards[0]), bool(terminations[0]), bool(truncations[0]), info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return self._batch.state.episode(0).render()

    def close(self) -> None:
        self._batch.scenario.close(self._batch.state)


class TreasureHuntVectorEnv(VectorEnv):
    """``num_envs`` treasure hunts stepped together; observations and actions are tuples of text."""

    metadata = {"render_modes": ["ansi"], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int = 1,
        difficulty: str = "easy",
        backend: str = "memory",
        max_steps: int = 50,
        render_mode: str | None = None,
        depth: int | None = None,
        branching_factor: int | None = None,
        file_density: float | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    ) -> None:
        rules = _rules(difficulty, backend, max_steps, render_mode, depth, branching_factor, file_density)
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        mode = check_autoreset_mode(autoreset_mode)
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        self.autoreset_mode = mode
        self.num_envs = num_envs
        self.render_mode = render_mode
        self.max_steps = max_steps
        self.single_observation_space, self.single_action_space = _text_spaces()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._batch: Batch[HuntBatch] = Batch(rules, num_envs, mode)

    @property
    def hunts(self) -> tuple[TreasureHunt, ...]:
        """The hunts being played, one per env."""
        state = self._batch.state
        return tuple(state.episode(world).hunt for world in range(self.num_envs))

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        """Reset every env, or those where ``options["reset_mask"]`` (bool array of ``num_envs``) is True.

        ``seed`` is ``None``, an int ``s`` (env ``i`` gets ``s + i``) or one seed (or None) per env.
        """
        mask = reset_mask(options, self.num_envs)
        seeds = world_seeds(seed, self.num_envs)
        if not self._batch.begun.all() and not mask.all():
            raise ValueError("the first reset must reset every env")
        index = np.flatnonzero(mask)
        self._batch.reset(index, [seeds[world] for world in index])
        return self._batch.observe(), self._batch.info(mask)

    def step(self, actions: Any) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Run one tool call per env (a sequence of ``num_envs`` JSON strings or dicts)."""
        if not self._batch.begun.all():
            raise RuntimeError("call reset() before step()")
        if isinstance(actions, (str, bytes, dict)) or not hasattr(actions, "__len__") or len(actions) != self.num_envs:
            raise ValueError(f"actions must be a sequence of {self.num_envs} tool calls, one per env")
        return self._batch.autostep(actions)

    def render(self) -> tuple[str, ...] | None:
        if self.render_mode != "ansi":
            return None
        state = self._batch.state
        return tuple(state.episode(world).render() for world in range(self.num_envs))

    def close_extras(self, **kwargs: Any) -> None:
        self._batch.scenario.close(self._batch.state)
