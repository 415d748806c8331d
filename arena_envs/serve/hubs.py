"""The hub for each scenario: :func:`make_hub`, above every kind of hub (:mod:`.sessions`, :mod:`.team`)."""

from __future__ import annotations

from typing import Any

from .sessions import PoolHub, SessionHub, TreasureHuntHub, scenario_name
from .team import TeamHub


def make_hub(scenario: str, max_sessions: int = 64, http_sessions: int = 0, **env_kwargs: Any) -> SessionHub:
    """The hub serving ``scenario`` (any spelling of a name of :data:`.sessions.SCENARIOS`) to
    ``max_sessions`` WebSocket sessions, with worlds of their own for ``http_sessions`` made over HTTP."""
    scenario = scenario_name(scenario)
    if scenario == "treasure_hunt":
        return TreasureHuntHub(max_sessions, http_sessions, **env_kwargs)
    if scenario == "team_capture":
        return TeamHub(max_sessions, http_sessions, **env_kwargs)
    return PoolHub(scenario, max_sessions, http_sessions=http_sessions, **env_kwargs)
