"""The rich observation objects of the tool-calling layer (``seeds/observations_api.md``).

They are built at the edge, from the arrays of one agent of one world, only when a
tool-calling user asks for them; the simulation never touches them.
"""

from __future__ import annotations

import copy
import dataclasses
import reprlib
from dataclasses import dataclass, field
from typing import Any

Vec3 = tuple[float, float, float]

MAX_NAME_CHARS = 64
"""A name a model wrote (tool, target, station, agent) is cut to this length where it is echoed."""
MAX_TEXT_CHARS = 1000
"""Longer model text (a message sent, an error message quoting the model) is cut to this length."""


def bounded_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` made safe to put in an observation: at most ``limit`` characters (longer
    text ends with how much was cut) and encodable as UTF-8 (a lone surrogate, which
    ``str.encode`` refuses, becomes U+FFFD; a proper surrogate pair becomes its character).
    Bounding bounded text changes nothing."""
    if len(text) <= limit and text.isascii():  # the usual case, at once
        return text
    suffix = ""
    if len(text) > limit:
        keep = max(limit - 32, limit // 2)  # room for the suffix, which fits in 32 characters
        suffix = f"... ({len(text) - keep} more characters)"
        text = text[:keep]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text + suffix


def quoted_name(name: Any) -> str:
    """A name from a model as it is quoted in a message: ``'Berry1'``, bounded and encodable."""
    if isinstance(name, str):
        return "'" + bounded_text(name, MAX_NAME_CHARS) + "'"
    return short_repr(name)


def short_repr(value: Any) -> str:
    """A bounded, encodable ``repr`` of any value, safe on deeply nested or circular data."""
    try:
        text = _SHORT.repr(value)
    except Exception:  # a foreign object's __repr__ may fail: its type still says enough
        text = f"<{type(value).__name__}>"
    return bounded_text(text, 2 * MAX_NAME_CHARS)


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, MAX_NAME_CHARS, MAX_NAME_CHARS


@dataclass(slots=True)
class ResourceInfo:
    name: str
    type: str
    position: Vec3
    distance: float


@dataclass(slots=True)
class HazardInfo:
    name: str
    type: str
    position: Vec3
    distance: float
    damage: float


@dataclass(slots=True)
class StationInfo:
    name: str
    type: str
    position: Vec3
    distance: float
    in_use: bool = False


@dataclass(slots=True)
class ItemInfo:
    id: str
    name: str
    quantity: int = 1


@dataclass(slots=True)
class EntityInfo:
    id: str
    type: str
    position: Vec3
    distance: float
    metadata: dict = field(default_factory=dict)


@dataclass(slots=True)
class RecipeInfo:
    name: str
    inputs: dict[str, int]
    station_type: str
    ticks: int


@dataclass(slots=True)
class ActionResult:
    """The outcome of the last tool call; ``message`` is a note on a success (a clamped target)."""

    success: bool
    error_code: str | None = None
    error_message: str | None = None
    tool: str | None = None
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "error_code": self.error_code, "error_message": self.error_message,
                "tool": self.tool, "message": self.message}


@dataclass(slots=True)
class Message:
    from_agent: str
    content: str
    tick: int


class Inventory(list):
    """A list of :class:`ItemInfo` that also answers ``inventory.get("wood", 0)``."""

    def get(self, name: str, default: int = 0) -> int:
        counts = [item.quantity for item in self if item.name.lower() == name.lower()]
        return sum(counts) if counts else default

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            return any(item.name.lower() == name.lower() for item in self)
        return list.__contains__(self, name)


@dataclass(slots=True)
class SimpleContext:
    """The beginner view of an observation."""

    position: Vec3
    nearby_resources: list[dict]
    nearby_hazards: list[dict]
    inventory: list[str]
    tick: int


@dataclass(slots=True)
class Observation:
    """Everything one agent perceives at one tick."""

    agent_id: str
    tick: int
    position: Vec3
    rotation: Vec3 | None = None
    velocity: Vec3 | None = None
    visible_entities: list[EntityInfo] = field(default_factory=list)
    nearby_resources: list[ResourceInfo] = field(default_factory=list)
    nearby_hazards: list[HazardInfo] = field(default_factory=list)
    nearby_stations: list[StationInfo] = field(default_factory=list)
    inventory: Inventory = field(default_factory=Inventory)
    health: float = 100.0
    energy: float = 100.0
    available_recipes: dict[str, RecipeInfo] = field(default_factory=dict)
    last_action_result: ActionResult | None = None
    query_result: dict | None = None
    inventory_details: dict | None = None
    messages: list[Message] = field(default_factory=list)
    custom: dict = field(default_factory=dict)

    def to_dict(self, copy: bool = True) -> dict[str, Any]:
        """Plain JSON-ready data, as ``dataclasses.asdict`` makes it (every container a fresh
        copy), except that messages use the seed's ``from`` key.

        Written out field by field: ``asdict`` walks and deep-copies every leaf generically,
        which made it ten times slower, and a server sends one of these for every step of
        every session (``tests/test_serve_sessions.py`` checks the two agree).

        ``copy=False`` shares the plain containers this observation holds (entity metadata,
        ``query_result``, ``inventory_details``, ``custom``) instead of copying them: equal
        data, for a caller that serializes it at once and drops the observation (the server:
        the copies were a third of this method's time, and pydantic copies again anyway).
        """
        copied = _copied if copy else _shared
        result = self.last_action_result
        return {
            "agent_id": self.agent_id, "tick": self.tick, "position": self.position,
            "rotation": self.rotation, "velocity": self.velocity,
            "visible_entities": [{"id": e.id, "type": e.type, "position": e.position, "distance": e.distance,
                                  "metadata": copied(e.metadata)} for e in self.visible_entities],
            "nearby_resources": [{"name": r.name, "type": r.type, "position": r.position, "distance": r.distance}
                                 for r in self.nearby_resources],
            "nearby_hazards": [{"name": h.name, "type": h.type, "position": h.position, "distance": h.distance,
                                "damage": h.damage} for h in self.nearby_hazards],
            "nearby_stations": [{"name": s.name, "type": s.type, "position": s.position, "distance": s.distance,
                                 "in_use": s.in_use} for s in self.nearby_stations],
            "inventory": [{"id": i.id, "name": i.name, "quantity": i.quantity} for i in self.inventory],
            "health": self.health, "energy": self.energy,
            "available_recipes": {key: {"name": r.name, "inputs": dict(r.inputs), "station_type": r.station_type,
                                        "ticks": r.ticks} for key, r in self.available_recipes.items()},
            "last_action_result": None if result is None else result.to_dict(),
            "query_result": copied(self.query_result), "inventory_details": copied(self.inventory_details),
            "messages": [{"from": m.from_agent, "content": m.content, "tick": m.tick} for m in self.messages],
            "custom": copied(self.custom),
        }

    def to_simple(self) -> SimpleContext:
        return SimpleContext(
            position=self.position,
            nearby_resources=[{"name": r.name, "type": r.type, "distance": r.distance}
                              for r in self.nearby_resources],
            nearby_hazards=[{"name": h.name, "type": h.type, "distance": h.distance} for h in self.nearby_hazards],
            inventory=[item.name for item in self.inventory for _ in range(item.quantity)],
            tick=self.tick,
        )

    def to_text(self) -> str:
        """A compact rendering for a prompt."""
        x, _, z = self.position
        lines = [f"tick {self.tick} | {self.agent_id} at ({x:.1f}, {z:.1f}) | health {self.health:.0f} "
                 f"| energy {self.energy:.0f}"]
        r = self.last_action_result
        if r is not None:
            outcome = ("ok" + (f" ({r.message})" if r.message else "")) if r.success else (
                f"{r.error_code}: {r.error_message}")
            lines.append(f"last action {r.tool}: {outcome}")
        lines.append(_places("resources", self.nearby_resources))
        lines.append(_places("hazards", self.nearby_hazards))
        lines.append(_places("stations", self.nearby_stations))
        lines.append(_section("inventory", [f"{i.name} x{i.quantity}" for i in self.inventory]))
        if self.query_result is not None:
            lines.append(_section("query result", [f"{e['name']} ({e['type']}) {e['distance']:.1f} away at "
                                                   f"({e['position'][0]:.1f}, {e['position'][2]:.1f})"
                                                   for e in self.query_result["entities"]]))
        lines.append(_section("messages", [f"{m.from_agent}: {m.content}" for m in self.messages]))
        # Team Capture: agents in sight and the capture points, which then replace custom's list
        status = self.custom
        if not _TEAM_ENTITY_TYPES.isdisjoint([e.type for e in self.visible_entities]):
            agents = [e for e in self.visible_entities if e.type == "agent"]
            points = [e for e in self.visible_entities if e.type == "capture_point"]
            if agents:
                lines.append(_section("agents", [f"{e.id} ({e.metadata.get('relation', e.metadata.get('team'))}) "
                                                 f"{e.distance:.1f} away at {_xz(e.position)}" for e in agents]))
            if points:
                lines.append(_section("capture points", [_point_text(e) for e in points]))
                status = {k: v for k, v in status.items() if k != "capture_points"}
        if status:
            lines.append("status: " + ", ".join([f"{k} {v}" for k, v in status.items()]))
        return "\n".join(lines)


_TEAM_ENTITY_TYPES = frozenset(("agent", "capture_point"))

_ATOMS = frozenset((str, int, float, bool, type(None)))


def _copied(value: Any) -> Any:
    """A deep copy of plain data, as ``asdict`` makes it: containers anew (a dataclass inside
    becomes its dict); scalars, and tuples of them, shared (they cannot change)."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {key: item if type(item) in _ATOMS else _copied(item) for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _ATOMS else _copied(item) for item in value]
    if kind is tuple:
        return value if all(type(item) in _ATOMS for item in value) else tuple(_copied(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return copy.deepcopy(value)


def _shared(value: Any) -> Any:
    """``to_dict(copy=False)``'s stand-in for :func:`_copied`: the value itself."""
    return value


def _point_text(point: EntityInfo) -> str:
    owner, capturing = point.metadata.get("owner"), point.metadata.get("capturing")
    text = f"{point.id} {point.distance:.1f} away at {_xz(point.position)}, owner {owner or 'nobody'}"
    if capturing:
        text += f", {capturing} capturing {point.metadata.get('progress', 0.0):.0%}"
    return text


def _xz(position) -> str:
    return f"({position[0]:.1f}, {position[2]:.1f})"


def _places(title: str, entities: list[Any]) -> str:
    """A section of named things and where they are (each formatted in line: no call per item)."""
    return _section(title, [f"{e.name} ({e.type}) {e.distance:.1f} away at ({e.position[0]:.1f}, {e.position[2]:.1f})"
                            for e in entities])


def _section(title: str, items: list[str]) -> str:
    return f"{title}: {'; '.join(items) if items else 'none'}"
