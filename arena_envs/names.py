"""One name for each scenario, however it is spelled: what every CLI and entry point resolves.

    resolve("Foraging-v0") == resolve("arena_envs/Foraging-v0") == resolve("foraging")
    resolve("team_capture_v0").env_id == "arena_envs/TeamCapture-v0"
    resolve("Foragin-v0")   # UnknownNameError: ... did you mean 'Foraging-v0'?

A name matches a scenario when, lower-cased, without the ``arena_envs/`` namespace, the
version suffix (``-v0`` / ``_v0``) and the ``-`` and ``_`` separators, it equals the
scenario's key without separators: ``TeamCapture-v0``, ``team_capture_v0``, ``team_capture``
and ``TEAMCAPTURE`` are one scenario. Nothing here imports Gymnasium, so the package root
registers its envs from :data:`SCENARIOS` and a CLI resolves a name before it loads anything.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

NAMESPACE = "arena_envs"
VERSION = 0


@dataclass(frozen=True)
class Scenario:
    """A scenario's names: ``key`` (configs, ``arena-serve``, the core's scenario table), the
    Gymnasium ``env_id``, and ``module``, PettingZoo's module name for a multi-agent one."""

    key: str
    title: str  # "TeamCapture": the id without namespace and version
    multi_agent: bool = False
    text: bool = False  # a text env for LLM agents (no arrays to train PPO on)

    @property
    def env_id(self) -> str:
        return f"{NAMESPACE}/{self.title}-v{VERSION}"

    @property
    def short_id(self) -> str:
        """``Foraging-v0``: the id as the README's commands write it."""
        return f"{self.title}-v{VERSION}"

    @property
    def module(self) -> str | None:
        """PettingZoo's module (``team_capture_v0``) for a multi-agent scenario, else None."""
        return f"{self.key}_v{VERSION}" if self.multi_agent else None

    def spellings(self) -> list[str]:
        """Every documented spelling, the short id first (what a suggestion shows)."""
        return [self.short_id, self.env_id, self.key, *([self.module] if self.module else [])]


SCENARIOS: dict[str, Scenario] = {s.key: s for s in (
    Scenario("foraging", "Foraging"),
    Scenario("crafting", "Crafting"),
    Scenario("team_capture", "TeamCapture", multi_agent=True),
    Scenario("treasure_hunt", "TreasureHunt", text=True),
)}
"""Every scenario by key, in the order the docs list them."""


class UnknownNameError(ValueError):
    """A name that is no scenario's; the message is one line with the closest known spelling."""


def _folded(name: str) -> tuple[str, int | None]:
    """``"arena_envs/TeamCapture-v0"`` -> ``("teamcapture", 0)``: the comparable part and the version."""
    name = name.strip().lower()
    if name.startswith(NAMESPACE.lower() + "/"):
        name = name[len(NAMESPACE) + 1:]
    version = None
    if match := re.search(r"[-_]v(\d+)$", name):
        name, version = name[:match.start()], int(match.group(1))
    return re.sub(r"[-_\s]", "", name), version


_BY_FOLDED = {_folded(s.key)[0]: s for s in SCENARIOS.values()}


def find(name: str) -> Scenario | None:
    """The scenario ``name`` spells, or None."""
    if not isinstance(name, str):
        return None
    folded, version = _folded(name)
    scenario = _BY_FOLDED.get(folded)
    return scenario if scenario is not None and version in (None, VERSION) else None


def registered_id(name: str) -> str:
    """The Gymnasium id for any spelling of a scenario; another name as it is."""
    scenario = find(name)
    return scenario.env_id if scenario else name


def suggestion(name: str, candidates: list[str]) -> str | None:
    """The candidate closest to ``name`` (case-insensitive), or None when none is close."""
    lowered = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(str(name).lower(), list(lowered), n=1, cutoff=0.5)
    return lowered[close[0]] if close else None


def unknown(name: str, what: str, candidates: list[str], shown: list[str] | None = None) -> str:
    """One line for a ``what`` called ``name`` that is none of ``candidates``: the closest one
    (from ``candidates``) and the list (``shown``, default ``candidates``)."""
    guess = suggestion(name, candidates)
    hint = f"; did you mean {guess!r}?" if guess else ""
    return f"unknown {what} {name!r}{hint} (known: {', '.join(shown or candidates)})"


def resolve(name: str, among: list[str] | None = None) -> Scenario:
    """The scenario ``name`` spells (any spelling of the module docstring, any case).

    ``among`` limits the answer to these keys (a CLI that serves some scenarios only).
    Raises :class:`UnknownNameError` with a one-line "did you mean" otherwise.
    """
    keys = [key for key in SCENARIOS if among is None or key in among]  # in the docs' order
    scenario = find(name)
    if scenario is not None and scenario.key in keys:
        return scenario
    spellings = [spelling for key in keys for spelling in SCENARIOS[key].spellings()]
    shown = [SCENARIOS[key].short_id for key in keys]
    if scenario is not None:  # a real scenario this command does not take
        raise UnknownNameError(f"{scenario.short_id} is not available here (choose one of {', '.join(shown)})")
    raise UnknownNameError(unknown(name, "environment", spellings, shown))


def env_id(name: str) -> str:
    """The registered Gymnasium id for any spelling of a scenario (``foraging`` -> ``arena_envs/Foraging-v0``)."""
    return resolve(name).env_id
