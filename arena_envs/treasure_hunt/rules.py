"""Treasure Hunt's rules over a batch of episodes, for the batch engine (``arena_envs.batch.Batch``).

``TreasureHuntRules`` is the scenario the engine drives: ``init_state(size)`` makes room for
``size`` episodes, ``reset`` starts new hunts in some of them (hunt seed: the world's seed
if it has one, else the next draw of the world's generator), ``step`` runs one tool call in
each active episode, ``observe`` gives their text observations and ``info`` their counters
as arrays over the batch. ``TreasureHuntEnv`` is a batch of one, ``TreasureHuntVectorEnv``
the batch (``env.py``).

Text in and text out: each episode is a Python object (``Episode``) holding its hunt, the
agent's directory and the counters; a tool call costs microseconds of string work, so
there is nothing for numpy to vectorize but the info arrays.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arena_envs.treasure_hunt.backends import HuntBackend
from arena_envs.treasure_hunt.generator import HuntParams, TreasureHunt, generate_treasure_hunt
from arena_envs.treasure_hunt.tools import ToolResult, run_tool_call

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


class HuntSource:
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


class Episode:
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

    def info(self) -> dict[str, Any]:
        """This episode's counters (keys :data:`INFO_KEYS`), as Python scalars."""
        return dict(zip(INFO_KEYS, self.info_row(), strict=False))  # a row of INFO_KEYS by construction

    def info_row(self) -> tuple[int, int, float, int, int, bool]:
        """The values of :data:`INFO_KEYS`: the one place they are computed, for one episode
        (:meth:`info`) and for a batch (``TreasureHuntRules.info``)."""
        efficiency = min(1.0, self.optimal_path_length / self.turns) if self.success else 0.0
        return (self.turns, self.optimal_path_length, efficiency, self.wrong_keys_tried, self.red_herrings_entered,
                self.success)

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


@dataclass
class HuntBatch:
    """The state of a batch of hunts: one episode slot and one hunt source per world."""

    sources: list[HuntSource]
    episodes: list[Episode | None]
    observations: list[str] = field(default_factory=list)

    @property
    def batch_size(self) -> int:
        return len(self.episodes)

    def episode(self, index: int) -> Episode:
        episode = self.episodes[index]
        if episode is None:
            raise RuntimeError("call reset() before using the environment")
        return episode


#: the dtype of each info key's array in a batch's info (``TreasureHuntRules.info``)
INFO_DTYPES = (np.int64, np.int64, np.float64, np.int64, np.int64, np.bool_)


class TreasureHuntRules:
    """Treasure Hunt as batch-engine rules; see ``env.py`` for spaces, rewards and episode end."""

    def __init__(
        self, params: HuntParams, difficulty: str, backend: str, max_steps: int, track_exploration: bool
    ) -> None:
        self.params = params
        self.difficulty = difficulty
        self.backend = backend
        self.max_steps = max_steps
        self.track_exploration = track_exploration

    def init_state(self, size: int) -> HuntBatch:
        return HuntBatch(
            sources=[HuntSource(self.params, self.difficulty, self.backend) for _ in range(size)],
            episodes=[None] * size,
            observations=[""] * size,
        )

    def reset(
        self,
        state: HuntBatch,
        index: np.ndarray,
        rngs: Sequence[np.random.Generator],
        seeds: Sequence[int | None],
    ) -> None:
        """New hunts in worlds ``index``: hunt seed ``seeds[k]``, or a draw of ``rngs[k]`` when it is None."""
        for world, rng, seed in zip(index, rngs, seeds, strict=True):
            hunt_seed = int(seed) if seed is not None else int(rng.integers(2**63))
            episode = Episode(state.sources[world].new_hunt(hunt_seed), self.max_steps, self.track_exploration)
            state.episodes[world] = episode
            state.observations[world] = episode.first_observation()

    def step(
        self, state: HuntBatch, actions: Sequence[Any], active: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One tool call in every active episode (``actions[i]`` for world ``i``); the others are untouched."""
        size = state.batch_size
        rewards = np.zeros(size, dtype=np.float64)
        terminations = np.zeros(size, dtype=np.bool_)
        truncations = np.zeros(size, dtype=np.bool_)
        worlds = range(size) if active is None else np.flatnonzero(active).tolist()
        observations = state.observations
        for world in worlds:
            observation, reward, terminated, truncated = state.episode(world).step(actions[world])
            observations[world] = observation
            rewards[world] = reward
            terminations[world] = terminated
            truncations[world] = truncated
        return rewards, terminations, truncations

    def observe(self, state: HuntBatch) -> tuple[str, ...]:
        return tuple(state.observations)

    def info(self, state: HuntBatch) -> dict[str, np.ndarray]:
        rows = [state.episode(world).info_row() for world in range(state.batch_size)]
        return {key: np.array(column, dtype)
                for key, column, dtype in zip(INFO_KEYS, zip(*rows, strict=True), INFO_DTYPES, strict=True)}

    def close(self, state: HuntBatch) -> None:
        """Delete the hunts written to disk."""
        for source in state.sources:
            source.discard()
