"""An oracle agent for TreasureHunt-v0: it follows the clue chain, reading only its observations.

It never peeks at the hunt's configuration. From the root it reads ``start.txt``, then each
clue by its full path (``./amber/cedar/moss.txt``), so it never needs to change directory
until it holds the key; then one ``cd`` into the treasure's directory and
``check_treasure``. That is ``depth + 3`` tool calls, the ``optimal_path_length``.

    >>> agent = OracleAgent()
    >>> observation, info = env.reset(seed=3)
    >>> while True:
    ...     observation, reward, terminated, truncated, info = env.step(agent.act(observation))
    ...     if terminated or truncated:
    ...         break
"""

from __future__ import annotations

import posixpath
import re

_KEY = re.compile(r"Treasure key: ([A-Za-z0-9]{16})")
_LINK = re.compile(r"(?<!\S)(\.{1,2}/\S+)")
_TURN = re.compile(r"\n?\[turn (\d+)/\d+ \| cwd [^\n]*\]$")


class OracleAgent:
    """Plays one environment (or one env of a batch). Call ``act`` with each observation."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the current hunt (``act`` also does this when it sees a fresh episode)."""
        self._reading: str | None = None  # the clue file last asked for, relative to the root
        self._key: str | None = None
        self._entered = False

    def act(self, observation: str) -> dict[str, str]:
        """The next tool call, given the observation that the previous one produced."""
        status = _TURN.search(observation)
        body = observation[: status.start()] if status else observation
        if status is not None and status.group(1) == "0":
            self.reset()

        if self._reading is None:
            self._reading = "start.txt"
            return {"tool": "cat", "file": self._reading}
        if self._key is None:
            key = _KEY.search(body)
            if key is not None:
                self._key = key.group(1)
                return {"tool": "cd", "path": "/" + posixpath.dirname(self._reading)}
            link = _LINK.search(body)
            if link is None:
                return {"tool": "give_up"}
            self._reading = posixpath.normpath(posixpath.join(posixpath.dirname(self._reading), link.group(1)))
            return {"tool": "cat", "file": f"./{self._reading}"}
        return {"tool": "check_treasure", "key": self._key}
