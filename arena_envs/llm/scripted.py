"""Scripted "models" that read a chat transcript and answer with tool calls, like an LLM would.

They see only the messages (the opening system and user messages, tool results and
observations), never the world's arrays, so they exercise the whole chat path: the
baselines of ``arena-agent --agent scripted`` and the "model" of the local test server.

    calls = policy_for(messages)(messages)        # [(tool name, arguments), ...] for the next reply
    reply = format_reply(calls, "hermes")         # written the way a Hermes-format model writes it

| scenario     | policy                                                                        |
|--------------|-------------------------------------------------------------------------------|
| TreasureHunt | the oracle: reads start.txt, follows each clue by its full path, cd, check_treasure |
| Foraging     | the scripted forager: query_world once, nearest remembered resource, around known hazards |
| Crafting     | the scripted crafter: plans down the recipes in the system message, gathers, crafts |
| TeamCapture  | heads for the nearest capture point its team does not own, says so in free text |
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from arena_envs.llm.parsers import parse_reply
from arena_envs.treasure_hunt.oracle import OracleAgent

Call = tuple[str, dict[str, Any]]
Policy = Callable[[Sequence[Mapping[str, Any]]], list[Call]]

_HERE = re.compile(r"^tick (\d+) \| (\S+) at \((-?[\d.]+), (-?[\d.]+)\)")
_SEEN = re.compile(r"(\w+) \((\w+)\) [\d.]+ away at \((-?[\d.]+), (-?[\d.]+)\)")
_POINT = re.compile(r"(Point\w+) [\d.]+ away at \((-?[\d.]+), (-?[\d.]+)\), owner (\w+)")
_TEAM = re.compile(r"You are (\S+) of the (\w+) team")

HAZARD_RADIUS, HAZARD_MARGIN, DETOUR_MARGIN = 1.5, 0.6, 1.2  # as the array forager (arena_envs.scripted)
COLLECT_REACH = 1.9  # a little inside the collection range of 2.0
HALF_SIZE = 25.0
SIDESTEP = 3.0  # how far a stuck forager steps aside


def policy_for(messages: Sequence[Mapping[str, Any]]) -> Policy:
    """The scripted policy of the scenario named by the transcript's system message."""
    system = str(messages[0].get("content") or "") if messages else ""
    for heading, policy in (("# Treasure Hunt", hunt_policy), ("# Foraging", foraging_policy),
                            ("# Crafting", crafting_policy), ("# Team Capture", team_capture_policy)):
        if system.startswith(heading):
            return policy
    raise ValueError("no scripted policy for this conversation (its system message names no known scenario)")


def turns(messages: Sequence[Mapping[str, Any]]) -> list[tuple[list[Call], list[str], str]]:
    """The transcript as ``(calls of a reply, their tool results, the observation after)``, the
    opening observation first with no calls."""
    out: list[tuple[list[Call], list[str], str]] = []
    calls: list[Call] = []
    results: list[str] = []
    for message in messages[1:]:
        role = message.get("role")
        if role == "assistant":
            calls = _calls(str(message.get("content") or ""), json.dumps(message.get("tool_calls")))
            results = []
        elif role == "tool":
            results.append(str(message.get("content") or ""))
        elif role == "user":
            out.append((calls, results, str(message.get("content") or "")))
            calls, results = [], []
    return out


@functools.lru_cache(maxsize=65536)
def _calls(content: str, tool_calls: str) -> list[Call]:
    """The calls of an assistant message, remembered: a policy replays the whole transcript every turn."""
    message = {"role": "assistant", "content": content, "tool_calls": json.loads(tool_calls)}
    return [(c.name or "", c.arguments or {}) for c in parse_reply(message).calls]


# -- Treasure Hunt ------------------------------------------------------------------------


def hunt_policy(messages: Sequence[Mapping[str, Any]]) -> list[Call]:
    """The oracle replayed over the transcript: it sees the opening observation, then each
    successful tool result in turn (errors, e.g. of calls it did not write, are skipped)."""
    oracle = OracleAgent()
    call: dict[str, Any] = {}
    for i, (_calls, results, observation) in enumerate(turns(messages)):
        for text in results if i else [observation]:
            if not text.startswith(("Error:", '{"success": false')):
                call = oracle.act(text)
    name = call.pop("tool")
    return [(name, call)]


# -- Foraging -----------------------------------------------------------------------------


def foraging_policy(messages: Sequence[Mapping[str, Any]]) -> list[Call]:
    """Nearest remembered resource first, around known hazards (the array forager, one agent)."""
    resources: dict[str, tuple[float, float]] = {}
    hazards: dict[str, tuple[float, float]] = {}
    asked = False
    x = z = 0.0
    places: list[tuple[float, float]] = []
    last_call = ""
    for calls, results, observation in turns(messages):
        last_call = calls[-1][0] if calls else last_call
        for (name, arguments), result in zip(calls, results, strict=False):
            data = _json(result)
            asked |= name == "query_world"
            for entity in (data.get("query_result") or {}).get("entities", []):
                place = (entity["position"][0], entity["position"][2])
                (resources if entity["type"] == "resource" else hazards)[entity["name"]] = place
                if entity["type"] == "station":
                    hazards.pop(entity["name"], None)
            if name == "collect" and (data.get("success") or data.get("error_code") == "NOT_FOUND"):
                resources.pop(str(arguments.get("target_name")), None)
        here = _HERE.match(observation)
        if here:
            x, z = float(here.group(3)), float(here.group(4))
            places.append((x, z))
        for line in observation.splitlines():
            table = resources if line.startswith("resources:") else hazards if line.startswith("hazards:") else None
            if table is not None:
                for name, _kind, ex, ez in _SEEN.findall(line):
                    table[name] = (float(ex), float(ez))
    if not resources:
        return [("query_world", {"radius": 50})] if not asked else [("idle", {})]
    name, (tx, tz) = min(resources.items(), key=lambda item: math.hypot(item[1][0] - x, item[1][1] - z))
    if math.hypot(tx - x, tz - z) <= COLLECT_REACH:
        return [("collect", {"target_name": name})]
    wx, wz = _detour(x, z, tx, tz, list(hazards.values()))
    if last_call == "move_to" and len(places) >= 2 and places[-1] == places[-2]:
        # stuck against an obstacle: a step sideways, to the left or right by turns
        length = max(math.hypot(wx - x, wz - z), 1e-6)
        side = 1 if len(places) % 2 else -1
        wx, wz = x - side * (wz - z) / length * SIDESTEP, z + side * (wx - x) / length * SIDESTEP
        limit = HALF_SIZE - 1.0
        wx, wz = min(max(wx, -limit), limit), min(max(wz, -limit), limit)
    return [("move_to", {"target": [round(wx, 2), 0, round(wz, 2)]})]


def _detour(x: float, z: float, tx: float, tz: float, hazards: list[tuple[float, float]]) -> tuple[float, float]:
    """The target, or a waypoint beside the first known hazard on the straight path to it."""
    sx, sz = tx - x, tz - z
    seg2 = max(sx * sx + sz * sz, 1e-6)
    first = None
    for hx, hz in hazards:
        t = min(max(((hx - x) * sx + (hz - z) * sz) / seg2, 0.0), 1.0)
        cx, cz = x + t * sx - hx, z + t * sz - hz  # from the hazard to the path's closest point
        gap = math.hypot(cx, cz)
        if gap < HAZARD_RADIUS + HAZARD_MARGIN and (first is None or t < first[0]):
            first = (t, hx, hz, cx, cz, gap)
    if first is None:
        return tx, tz
    _, hx, hz, cx, cz, gap = first
    if gap < 1e-3:  # dead centre: step out perpendicular to the path
        length = math.sqrt(seg2)
        ox, oz = -sz / length, sx / length
    else:
        ox, oz = cx / gap, cz / gap
    limit = HALF_SIZE - 1.0
    wx = min(max(hx + ox * (HAZARD_RADIUS + DETOUR_MARGIN), -limit), limit)
    wz = min(max(hz + oz * (HAZARD_RADIUS + DETOUR_MARGIN), -limit), limit)
    return wx, wz


# -- Crafting -----------------------------------------------------------------------------

_RECIPE = re.compile(r"(\w+): ([\w +]+?) @ (\w+) \((\d+) ticks\)(?:, makes (\d+))?")
_GOAL = re.compile(r"Goal: craft an? (\w+)")
_CRAFT_RANGE = re.compile(r"station \(within ([\d.]+) units\)")
_HELD = re.compile(r"(\w+) x(\d+)")


def crafting_policy(messages: Sequence[Mapping[str, Any]]) -> list[Call]:
    """Expand the goal down the recipes into what is still missing; craft what is ready at the
    nearest station of its type, else gather the nearest missing material (the array crafter's plan)."""
    system = str(messages[0].get("content") or "")
    recipes = {out: ({item: int(n) for n, item in (part.split(" ", 1) for part in inputs.split(" + "))},
                     station, int(count or 1))
               for out, inputs, station, _ticks, count in _RECIPE.findall(system)}
    goal_match, reach_match = _GOAL.search(system), _CRAFT_RANGE.search(system)
    if goal_match is None:
        raise ValueError("the system message names no crafting goal")
    goal, reach = goal_match.group(1), float(reach_match.group(1)) - 0.5 if reach_match else 2.0
    resources: dict[str, tuple[float, float, str]] = {}
    stations: dict[str, tuple[float, float, str]] = {}
    held: dict[str, int] = {}
    asked, busy = False, False
    x = z = 0.0
    for calls, results, observation in turns(messages):
        for (name, arguments), result in zip(calls, results, strict=False):
            data = _json(result)
            asked |= name == "query_world"
            for entity in (data.get("query_result") or {}).get("entities", []):
                place = (entity["position"][0], entity["position"][2])
                if entity["type"] == "resource":
                    resources[entity["name"]] = (*place, entity["resource_type"])
                elif entity["type"] == "station":
                    stations[entity["name"]] = (*place, entity["station_type"])
            if name == "collect" and (data.get("success") or data.get("error_code") == "NOT_FOUND"):
                resources.pop(str(arguments.get("target_name")), None)
        here = _HERE.match(observation)
        if here:
            x, z = float(here.group(3)), float(here.group(4))
        for line in observation.splitlines():
            if line.startswith(("resources:", "stations:")):
                table = resources if line.startswith("resources:") else stations
                for name, kind, ex, ez in _SEEN.findall(line):
                    table[name] = (float(ex), float(ez), kind)
            elif line.startswith("inventory:"):
                held = {item: int(n) for item, n in _HELD.findall(line)}
            elif line.startswith("status:"):
                busy = "crafting None" not in line and ", crafting {" in line
                making = re.search(r"crafting \{'item': '(\w+)'", line)
                if making:
                    held[making.group(1)] = held.get(making.group(1), 0) + recipes.get(making.group(1), ({}, "", 1))[2]
    if busy:
        return [("idle", {})]
    missing = _missing(goal, recipes, held)
    ready = [out for out in missing if out in recipes and all(held.get(i, 0) >= n for i, n in recipes[out][0].items())]
    for out in ready:
        kind = recipes[out][1]
        near = [(math.hypot(sx - x, sz - z), name, sx, sz) for name, (sx, sz, k) in stations.items() if k == kind]
        if near:
            distance, name, sx, sz = min(near)
            if distance <= reach:
                return [("craft", {"item_name": out, "station_name": name})]
            return [("move_to", {"target": [sx, 0, sz]})]
    wanted = [(math.hypot(rx - x, rz - z), name, rx, rz) for name, (rx, rz, kind) in resources.items()
              if missing.get(kind, 0) > 0 and kind not in recipes]
    if wanted:
        distance, name, rx, rz = min(wanted)
        if distance <= COLLECT_REACH:
            return [("collect", {"target_name": name})]
        return [("move_to", {"target": [rx, 0, rz]})]
    return [("query_world", {"radius": 50})] if not asked else [("idle", {})]


def _missing(goal: str, recipes: dict[str, tuple[dict[str, int], str, int]], held: dict[str, int]) -> dict[str, int]:
    """Units of each item one goal still needs beyond what is carried, expanded down the recipes."""
    need: dict[str, int] = {}
    left = dict(held)

    def want(item: str, count: int) -> None:
        use = min(left.get(item, 0), count)
        left[item] = left.get(item, 0) - use
        short = count - use
        if short <= 0:
            return
        need[item] = need.get(item, 0) + short
        if item in recipes:
            inputs, _station, makes = recipes[item]
            batches = -(-short // makes)
            for material, n in inputs.items():
                want(material, n * batches)

    want(goal, 1)
    return need


# -- Team Capture -------------------------------------------------------------------------


def team_capture_policy(messages: Sequence[Mapping[str, Any]]) -> list[Call]:
    """Head for the nearest point the team does not own; once there, tell the team in free text."""
    system = str(messages[0].get("content") or "")
    team_match = _TEAM.search(system)
    team = team_match.group(2) if team_match else ""
    observation = turns(messages)[-1][2] if len(messages) > 1 else ""
    here = _HERE.search(observation)
    x, z = (float(here.group(3)), float(here.group(4))) if here else (0.0, 0.0)
    points = [(name, float(px), float(pz), owner) for name, px, pz, owner in _POINT.findall(observation)]
    wanted = [p for p in points if p[3] != team] or points
    if not wanted:
        return [("idle", {})]
    name, px, pz, _ = min(wanted, key=lambda p: math.hypot(p[1] - x, p[2] - z))
    if math.hypot(px - x, pz - z) < 1.0:
        return [("send_message", {"message": f"Holding {name}, take another point", "target_agent": "all"})]
    return [("move_to", {"target": [px, 0, pz]})]


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
