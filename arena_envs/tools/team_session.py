"""One agent of a Team Capture world, spoken to in tool calls.

:class:`TeamCaptureSession` is a :class:`~arena_envs.tools.session.ToolSession` (same
parsing, validation and tool encoding) whose observation shows what Team Capture is
about: teammates and enemies in sight and the capture points, as ``visible_entities``
(``type`` ``"agent"`` or ``"capture_point"``), the points' owners and progress and both
scores in ``custom``, and the messages teammates sent, as text.

Messages: the world (the numpy core) decides delivery, exactly as for the structured
action: next tick, to teammates within range, each delivery maybe dropped, never to the
other team. The core carries no text, so a sender's session keeps the text of its last
``send_message`` and a receiver's observation attaches it to each delivery the core
reports (an inbox entry that arrived this tick).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from arena_envs.observations import EntityInfo, Message, Observation
from arena_envs.team_capture import NEUTRAL, TEAMS
from arena_envs.world import QUERY_FILTERS, QUERY_WORLD

from .session import ToolSession, _add_obstacles, _View, _views

CAPTURE_POINT = "capture_point"
_QUERIED = {"all": ("agent", CAPTURE_POINT), "agent": ("agent",)}  # entity types query_world lists, by filter


def point_entity_name(label: str) -> str:
    """The entity name of the capture point labelled ``label``: ``A`` is ``PointA``."""
    return f"Point{label}"


class TeamCaptureSession(ToolSession):
    """Agent ``agent`` of world ``world`` of a Team Capture batch, spoken to in tool calls.

    Entities are addressed by name: agents as ``blue_agent_2``, capture points as
    ``PointA`` .. ``PointE`` (``PointCenter`` for the centre). ``send_message`` takes
    ``target_agent`` ``"all"`` or a teammate's name; an enemy's name is ``NOT_FOUND``.
    """

    def __init__(self, scenario, state, world: int = 0, agent: int = 0):
        names, n = scenario.possible_agents, scenario.agents_per_team
        team = agent // n
        super().__init__(scenario, state, world, agent, agent_id=names[agent], team=names[team * n:(team + 1) * n])
        self.team_name, self.enemy_team_name = TEAMS[team], TEAMS[1 - team]
        self.enemy_names = names[(1 - team) * n:(2 - team) * n]  # in the world's order, like self.team
        self.point_names = [point_entity_name(label) for label in scenario.params.point_names]

    @classmethod
    def observations(cls, sessions: Sequence[TeamCaptureSession], arrays: Mapping[str, np.ndarray],
                     infos: Sequence[dict[str, Any]], first: bool = False) -> list[Observation]:
        """The observations of several agents at once (see :meth:`ToolSession.observations`)."""
        if not sessions:
            return []
        views = _views(sessions)
        for table, relation in ((arrays["allies"], "ally"), (arrays["enemies"], "enemy")):
            for i, j, dx, dz, dist in _seen(table):
                session, view = sessions[i], views[i]
                name, team = ((session.team[j], session.team_name) if relation == "ally"
                              else (session.enemy_names[j], session.enemy_team_name))
                view.entities.append(EntityInfo(name, "agent", (view.x + dx, 0.0, view.z + dz), dist,
                                                {"team": team, "relation": relation}))
        points = _points(sessions, arrays["points"])
        for view, rows in zip(views, points, strict=True):
            view.entities += [EntityInfo(point["name"], CAPTURE_POINT, tuple(point["position"]), point["distance"],
                                         {key: point[key] for key in ("label", "owner", "capturing", "progress")})
                              for point in rows]
        _add_obstacles(sessions, views, arrays.get("obstacles"))
        if not first:
            _deliver(sessions, views, arrays["messages"])
        observations = []
        for session, view, info, rows, (ours, theirs) in zip(sessions, views, infos, points,
                                                             arrays["score"].tolist(), strict=True):
            if view.tool == QUERY_WORLD:
                view.queried = session._query(view)
            observations.append(session._assemble(view, info, first, team=session.team_name, score=ours,
                                                  enemy_score=theirs, capture_points=rows))
        return observations

    def _query(self, view: _View) -> list[dict[str, Any]]:
        """The ``query_world`` answer: agents in sight and capture points within the radius.

        Team Capture's perception rules hold for queries too (agents out of sight stay
        hidden); every capture point is always known.
        """
        s, b, a = self.state, self.world, self.agent
        radius = float(s.query_radius[b, a])
        kinds = _QUERIED.get(QUERY_FILTERS[int(s.query_filter[b, a])], ())
        return [{"name": entity.id, "type": entity.type, "position": list(entity.position),
                 "distance": entity.distance, **entity.metadata}
                for entity in view.entities if entity.type in kinds and entity.distance <= radius]


def _seen(table: np.ndarray) -> list[tuple[int, int, float, float, float]]:
    """(session, teammate or enemy index, dx, dz, distance) of every agent seen, from (n, N, 4) rows."""
    session, j = np.nonzero(table[..., 0])
    rows = table[session, j]
    return list(zip(session.tolist(), j.tolist(), rows[:, 1].tolist(), rows[:, 2].tolist(), rows[:, 3].tolist(),
                    strict=True))


def _points(sessions: Sequence[TeamCaptureSession], table: np.ndarray) -> list[list[dict[str, Any]]]:
    """Each session's capture points: name, label, position, distance, owner, the team
    capturing it and its progress (a fraction of ``capture_ticks``); teams by name, None for nobody."""
    s, p = sessions[0].state, sessions[0].params
    worlds = np.array([session.world for session in sessions])
    owner = s.extra["point_owner"][worlds].tolist()
    capturer = s.extra["point_capturer"][worlds].tolist()
    progress = (s.extra["point_progress"][worlds] / p.capture_ticks).round(4).tolist()
    distance = table[..., 2].tolist()
    team = {NEUTRAL: None, **dict(enumerate(TEAMS))}
    places = [[x, 0.0, z] for x, z in p.capture_points]
    return [[{"name": name, "label": label, "position": list(place), "distance": distance[i][k],
              "owner": team[owner[i][k]], "capturing": team[capturer[i][k]], "progress": progress[i][k]}
             for k, (name, label, place) in enumerate(zip(sessions[i].point_names, p.point_names, places,
                                                          strict=True))]
            for i in range(len(sessions))]


def _deliver(sessions: Sequence[TeamCaptureSession], views: list[_View], inbox: np.ndarray) -> None:
    """Attach the text of every message the world delivered this tick to its receiver's view.

    ``inbox`` is (n, N, 4) rows of sender number (0: nothing received), token, age in ticks,
    direct: a message arrived this tick where the sender is set and the age is 0.
    """
    session_of = {(session.world, session.agent): session for session in sessions}
    arrived, teammate = np.nonzero((inbox[..., 0] > 0) & (inbox[..., 2] == 0))
    for i, j in zip(arrived.tolist(), teammate.tolist(), strict=True):
        receiver = sessions[i]
        first_of_team = receiver.agent - receiver.agent % len(receiver.team)
        sender = session_of.get((receiver.world, first_of_team + j))
        if sender is not None and sender.sent_message is not None:
            sent = sender.sent_message
            views[i].messages.append(Message(sent.from_agent, sent.content, sent.tick))
