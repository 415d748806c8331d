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
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from typing import Any

import numpy as np
from gymnasium import Env
from gymnasium.spaces import Text
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from arena_envs.treasure_hunt.game_tools import HuntBackend, ToolResult, run_tool_call
from arena_envs.treasure_hunt.generator import HuntParams, TreasureHunt, generate_treasure_hunt, hunt_params

TEXT_CHARSET = "".join(chr(code) for code in range(32, 127)) + "\n"
ACTION_MAX_LENGTH = 2048
OBSERVATION_MAX_LENGTH = 16384
MAX_BODY_LENGTH = 12000
MAX_CWD_SHOWN = 200
STEP_REWARD = -0.01
SUCCESS_REWARD = 1.0

WELCOME = (
    "A treasure is hidden in this directory tree. Read start.txt and follow the clues; "
    "in the treasure's directory, call check_treasure with the key.\n"
    "Tools: pwd, cd(path), ls(path?), cat(file), check_treasure(key), give_up. "
    'Call one per turn as JSON, e.g. {"tool": "cat", "file": "start.txt"}.'
)
HUNT_OVER = "Error: the hunt is over; reset the environment to play again."
INFO_KEYS = ("turns", "optimal_path_length", "efficiency", "wrong_keys_tried", "red_herrings_entered", "success")

_CHARSET = frozenset(TEXT_CHARSET)


def _clean(text: str) -> str:
    """Make ``text`` fit the observation space: printable ASCII and newlines, bounded length."""
    if not text.isascii() or not text.replace("\n", "").isprintable():
        text = "".join(char if char in _CHARSET else "?" for char in text)
    if len(text) > MAX_BODY_LENGTH:
        text = text[:MAX_BODY_LENGTH] + "\n...(truncated)"
    return text or "(empty)"


class _HuntSource:
    """Makes the hunts of one environment slot: in memory, or each in a fresh temporary directory."""

    def __init__(self, params: HuntParams, difficulty: str, backend: str) -> None:
        self.params = params
        self.difficulty = difficulty
        self.on_disk = backend == "disk"
        self._cleanup: weakref.finalize | None = None

    def new_hunt(self, seed: int) -> TreasureHunt:
        base_path = None
        if self.on_disk:
            self.discard()
            base_path = tempfile.mkdtemp(prefix="treasure_hunt_")
            self._cleanup = weakref.finalize(self, shutil.rmtree, base_path, ignore_errors=True)
        return generate_treasure_hunt(base_path, *self.params, seed=seed, difficulty=self.difficulty)

    def discard(self) -> None:
        if self._cleanup is not None:
            self._cleanup()
            self._cleanup = None


class _Episode:
    """One hunt being played: the state and rules that both environments advance."""

    def __init__(self, hunt: TreasureHunt, max_steps: int, track_exploration: bool) -> None:
        self.hunt = hunt
        self.backend: HuntBackend = hunt.backend
        self.config = hunt.config
        self.golden = frozenset(["", *hunt.config["golden_path"]])
        self.optimal_path_length: int = hunt.config["optimal_path_length"]
        self.max_steps = max_steps
        self.cwd = ""
        self.turns = 0
        self.wrong_keys_tried = 0
        self.red_herrings_entered = 0
        self.success = False
        self.terminated = False
        self.truncated = False
        # For rendering: every path the agent has seen (True for directories) and the files it read.
        self.seen: dict[str, bool] | None = {"": True} if track_exploration else None
        self.read: set[str] = set()

    def first_observation(self) -> str:
        return self._observation(WELCOME)

    def step(self, action: Any) -> tuple[str, float, bool, bool]:
        if self.terminated or self.truncated:
            return self._observation(HUNT_OVER), 0.0, self.terminated, self.truncated
        self.turns += 1
        result = run_tool_call(action, self.cwd, self.backend, self.config)
        reward = STEP_REWARD
        if result.ok:
            if result.tool == "cd":
                self.cwd = result.cwd
                if result.cwd not in self.golden:
                    self.red_herrings_entered += 1
            elif result.tool == "check_treasure":
                self.success = self.terminated = True
                reward += SUCCESS_REWARD
            elif result.tool == "give_up":
                self.terminated = True
            if self.seen is not None:
                self._remember(result)
        elif result.tool == "check_treasure":
            self.wrong_keys_tried += 1
        if not self.terminated and self.turns >= self.max_steps:
            self.truncated = True
        body = result.text if result.ok else f"Error: {result.text}"
        return self._observation(body), reward, self.terminated, self.truncated

    @property
    def status(self) -> str:
        if self.success:
            return "treasure found"
        if self.terminated:
            return "gave up"
        if self.truncated:
            return "out of turns"
        return "in progress"

    @property
    def efficiency(self) -> float:
        return min(1.0, self.optimal_path_length / self.turns) if self.success else 0.0

    def info(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "optimal_path_length": self.optimal_path_length,
            "efficiency": self.efficiency,
            "wrong_keys_tried": self.wrong_keys_tried,
            "red_herrings_entered": self.red_herrings_entered,
            "success": self.success,
        }

    def _observation(self, body: str) -> str:
        cwd = f"/{self.cwd}"
        if len(cwd) > MAX_CWD_SHOWN:
            cwd = "..." + cwd[-MAX_CWD_SHOWN:]
        return f"{_clean(body)}\n[turn {self.turns}/{self.max_steps} | cwd {cwd} | {self.status}]"

    def _remember(self, result: ToolResult) -> None:
        assert self.seen is not None
        target = result.target
        if target is None:
            return
        self._see(target, is_directory=result.tool != "cat")
        if result.tool == "cat":
            self.read.add(target)
        elif result.tool == "ls" and result.text:
            for entry in result.text.split("\n"):
                name = entry.rstrip("/")
                self.seen[f"{target}/{name}" if target else name] = entry.endswith("/")

    def _see(self, path: str, is_directory: bool) -> None:
        assert self.seen is not None
        self.seen[path] = is_directory
        while path:
            path = path.rpartition("/")[0]
            self.seen[path] = True

    def render(self) -> str:
        """The explored part of the tree, the current directory marked, and the status line."""
        assert self.seen is not None
        children: dict[str, list[str]] = {}
        for path in self.seen:
            if path:
                children.setdefault(path.rpartition("/")[0], []).append(path)

        def sort_key(path: str) -> tuple[bool, str]:
            return self.seen[path], path  # files first, like ls

        lines = ["/" + ("  <- you are here" if self.cwd == "" else "")]

        def draw(directory: str, indent: str) -> None:
            entries = sorted(children.get(directory, []), key=sort_key)
            for index, path in enumerate(entries):
                last = index == len(entries) - 1
                name = path.rpartition("/")[2] + ("/" if self.seen[path] else "")
                notes = " (read)" if path in self.read else ""
                notes += "  <- you are here" if path == self.cwd else ""
                lines.append(f"{indent}{'`-- ' if last else '|-- '}{name}{notes}")
                if self.seen[path]:
                    draw(path, indent + ("    " if last else "|   "))

        draw("", "")
        lines.append(f"[turn {self.turns}/{self.max_steps} | {self.status}]")
        return "\n".join(lines)


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


class TreasureHuntEnv(Env[str, Any]):
    """A text treasure hunt; see the module docstring for spaces, rewards and arguments."""

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
        _checked_settings(backend, max_steps, render_mode)
        params = hunt_params(difficulty, depth, branching_factor, file_density)
        self.render_mode = render_mode
        self.max_steps = max_steps
        self.observation_space, self.action_space = _text_spaces()
        self._source = _HuntSource(params, difficulty, backend)
        self._episode: _Episode | None = None

    @property
    def hunt(self) -> TreasureHunt:
        """The hunt being played (its ``config`` holds the solution)."""
        return self._require_episode().hunt

    @property
    def cwd(self) -> str:
        """The agent's directory relative to the hunt root (``""`` is the root)."""
        return self._require_episode().cwd

    def _require_episode(self) -> _Episode:
        if self._episode is None:
            raise RuntimeError("call reset() before using the environment")
        return self._episode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        hunt_seed = seed if seed is not None else int(self.np_random.integers(2**63))
        self._episode = _Episode(self._source.new_hunt(hunt_seed), self.max_steps, self.render_mode == "ansi")
        return self._episode.first_observation(), self._episode.info()

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        episode = self._require_episode()
        observation, reward, terminated, truncated = episode.step(action)
        return observation, reward, terminated, truncated, episode.info()

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return self._require_episode().render()

    def close(self) -> None:
        self._source.discard()


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
        _checked_settings(backend, max_steps, render_mode)
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        mode = AutoresetMode(autoreset_mode)
        if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"autoreset_mode must be NEXT_STEP or SAME_STEP, got {mode}")
        params = hunt_params(difficulty, depth, branching_factor, file_density)
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        self.autoreset_mode = mode
        self.num_envs = num_envs
        self.render_mode = render_mode
        self.max_steps = max_steps
        self.single_observation_space, self.single_action_space = _text_spaces()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._sources = [_HuntSource(params, difficulty, backend) for _ in range(num_envs)]
        self._rngs: list[np.random.Generator | None] = [None] * num_envs
        self._episodes: list[_Episode] = []
        self._observations: list[str] = []
        self._needs_reset = np.zeros(num_envs, dtype=np.bool_)

    @property
    def hunts(self) -> tuple[TreasureHunt, ...]:
        """The hunts being played, one per env."""
        return tuple(episode.hunt for episode in self._episodes)

    def _new_episode(self, index: int, seed: int | None) -> _Episode:
        """A new episode for env ``index``; without a seed, its hunt seed comes from the env's generator."""
        if seed is not None:
            hunt_seed = int(seed)
            self._rngs[index] = seeding.np_random(hunt_seed)[0]
        else:
            rng = self._rngs[index]
            if rng is None:
                rng = self._rngs[index] = seeding.np_random()[0]
            hunt_seed = int(rng.integers(2**63))
        return _Episode(self._sources[index].new_hunt(hunt_seed), self.max_steps, self.render_mode == "ansi")

    def _restart(self, index: int, seed: int | None) -> None:
        episode = self._episodes[index] = self._new_episode(index, seed)
        self._observations[index] = episode.first_observation()
        self._needs_reset[index] = False

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        """Reset every env, or those where ``options["reset_mask"]`` (bool array of ``num_envs``) is True.

        ``seed`` is ``None``, an int ``s`` (env ``i`` gets ``s + i``) or one seed (or None) per env.
        """
        mask = np.ones(self.num_envs, dtype=np.bool_)
        if options is not None and options.get("reset_mask") is not None:
            mask = options["reset_mask"]
            if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({self.num_envs},)")
        if not self._episodes and not mask.all():
            raise ValueError("the first reset must reset every env")
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + index for index in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed must be None, an int or {self.num_envs} seeds, got {len(seeds)}")
        if not self._episodes:
            self._episodes = [self._new_episode(index, seeds[index]) for index in range(self.num_envs)]
            self._observations = [episode.first_observation() for episode in self._episodes]
        else:
            for index in np.flatnonzero(mask):
                self._restart(int(index), seeds[index])
        return tuple(self._observations), self._infos(mask)

    def step(self, actions: Any) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Run one tool call per env (a sequence of ``num_envs`` JSON strings or dicts)."""
        if not self._episodes:
            raise RuntimeError("call reset() before step()")
        if isinstance(actions, (str, bytes, dict)) or len(actions) != self.num_envs:
            raise ValueError(f"actions must be a sequence of {self.num_envs} tool calls, one per env")
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        episodes = self._episodes
        observations = self._observations
        needs_reset = self._needs_reset
        for index in range(self.num_envs):
            if needs_reset[index]:
                self._restart(index, None)
                continue
            observation, reward, terminated, truncated = episodes[index].step(actions[index])
            observations[index] = observation
            rewards[index] = reward
            terminations[index] = terminated
            truncations[index] = truncated
        ended = terminations | truncations
        infos: dict[str, Any] = {}
        if self.autoreset_mode == AutoresetMode.SAME_STEP and ended.any():
            infos["final_obs"] = np.array([None] * self.num_envs, dtype=object)
            infos["final_info"] = self._infos(ended)
            for index in np.flatnonzero(ended):
                infos["final_obs"][index] = observations[index]
                self._restart(int(index), None)
            infos["_final_obs"] = ended.copy()
            infos["_final_info"] = ended.copy()
        else:
            self._needs_reset = ended.copy()
        infos.update(self._infos(np.ones(self.num_envs, dtype=np.bool_)))
        return tuple(observations), rewards, terminations, truncations, infos

    def _infos(self, mask: np.ndarray) -> dict[str, Any]:
        count = self.num_envs
        episodes = self._episodes
        turns = np.fromiter((episode.turns for episode in episodes), dtype=np.int64, count=count)
        success = np.fromiter((episode.success for episode in episodes), dtype=np.bool_, count=count)
        optimal = np.fromiter((episode.optimal_path_length for episode in episodes), dtype=np.int64, count=count)
        values = {
            "turns": turns,
            "optimal_path_length": optimal,
            "efficiency": np.where(success, np.minimum(1.0, optimal / np.maximum(turns, 1)), 0.0),
            "wrong_keys_tried": np.fromiter((e.wrong_keys_tried for e in episodes), dtype=np.int64, count=count),
            "red_herrings_entered": np.fromiter(
                (e.red_herrings_entered for e in episodes), dtype=np.int64, count=count
            ),
            "success": success,
        }
        infos: dict[str, Any] = {}
        for key, value in values.items():
            infos[key] = value
            infos[f"_{key}"] = mask.copy()
        return infos

    def render(self) -> tuple[str, ...] | None:
        if self.render_mode != "ansi":
            return None
        return tuple(episode.render() for episode in self._episodes)

    def close_extras(self, **kwargs: Any) -> None:
        for source in self._sources:
            source.discard()
