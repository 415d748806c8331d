"""What each scenario adds to the common frame of :func:`arena_envs.render.render_frame`.

The renderer draws what every 2D world has (obstacles, resources, hazards, stations,
agents); a :class:`~arena_envs.render.Scene` here draws the rest for one scenario. They
sit beside the env adapters, above the scenario modules, so a scenario holds rules only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from arena_envs.crafting import Crafting
from arena_envs.render import (
    INK,
    NEUTRAL_COLOUR,
    TEAM_COLOURS,
    Canvas,
    Colour,
    LegendEntry,
    TextGrid,
    default_status,
    lighter,
)
from arena_envs.team_capture import BLUE, NEUTRAL, RED, TeamCapture
from arena_envs.world import OK, SEND_MESSAGE, WorldState

CRAFTING_COLOUR = (200, 130, 0)  # a station in use, and the craft's progress


class CraftingScene:
    """Stations being worked at, the craft's progress and the inventory."""

    def draw(self, canvas: Canvas, scenario: Crafting, s: WorldState, world: int) -> None:
        """A station in use gets an outline, the recipe's name and a bar of the craft's progress;
        the inventory is listed in the map's top-left corner."""
        for a in np.flatnonzero(s.craft_left[world] > 0):
            recipe = scenario.params.recipes[s.craft_recipe[world, a]]
            station = scenario.slots.st.start + s.craft_station[world, a]
            x, z = s.ent_x[world, station], s.ent_z[world, station]
            canvas.square(x, z, 1.5, CRAFTING_COLOUR, ring=0.35)
            canvas.bar(x, z - 2.2, 4.0, 1 - s.craft_left[world, a] / recipe.ticks, CRAFTING_COLOUR)
            canvas.label(x, z - 3.5, recipe.name)
        held = [f"{name} {n}" for name, n in zip(scenario.params.item_names, s.inventory[world, 0], strict=True) if n]
        for row, line in enumerate(["inventory:", *held] if held else []):
            canvas.write(line, 4 + 12 * row, 4)

    def status(self, scenario: Crafting, s: WorldState, world: int) -> list[tuple[str, Colour]]:
        """Tick, score and health, then the craft in progress and its ticks done of the recipe's."""
        pieces = [(default_status(scenario, s, world), INK)]
        if s.craft_left[world, 0] > 0:
            recipe = scenario.params.recipes[s.craft_recipe[world, 0]]
            done = recipe.ticks - s.craft_left[world, 0]
            pieces.append((f" · making {recipe.name} {done}/{recipe.ticks}", CRAFTING_COLOUR))
        return pieces

    def legend(self, scenario: Crafting) -> list[LegendEntry]:
        return [LegendEntry("crafting", CRAFTING_COLOUR, "ring")]

    def record(self, scenario: Crafting, s: WorldState, world: int) -> dict[str, Any]:
        """For a replay: what the agent holds, and the craft in progress (recipe, station slot, ticks done, of)."""
        p = scenario.params
        held = {name: int(n) for name, n in zip(p.item_names, s.inventory[world, 0], strict=True) if n}
        craft = None
        if s.craft_left[world, 0] > 0:
            recipe = p.recipes[s.craft_recipe[world, 0]]
            craft = [recipe.name, scenario.slots.st.start + int(s.craft_station[world, 0]),
                     int(recipe.ticks - s.craft_left[world, 0]), int(recipe.ticks)]
        return {"inventory": held, "craft": craft}


class TeamCaptureScene:
    """Capture zones, their owners and the teams' scores."""

    def __init__(self, scenario: TeamCapture):
        self.view_radius = scenario.params.enemy_radius  # the ring drawn around each agent: how far it sees enemies

    def draw(self, canvas: Canvas, scenario: TeamCapture, s: WorldState, world: int) -> None:
        """Capture zones: filled and ringed in the owner's colour (grey while neutral), the
        capture in progress as a wedge of the capturing team's colour that sweeps clockwise
        from twelve o'clock to a full disc when the point flips, and each point's name."""
        p = scenario.params
        owner, capturer, progress = (s.extra[k][world] for k in ("point_owner", "point_capturer", "point_progress"))
        for x, z, name, held_by, taken_by, ticks in zip(scenario.point_x, scenario.point_z, p.point_names, owner,
                                                        capturer, progress, strict=True):
            colour = NEUTRAL_COLOUR if held_by == NEUTRAL else TEAM_COLOURS[held_by]
            canvas.disc(x, z, p.capture_radius, lighter(colour, 0.7))
            if taken_by != NEUTRAL:
                canvas.wedge(x, z, p.capture_radius, ticks / p.capture_ticks, lighter(TEAM_COLOURS[taken_by], 0.3))
            canvas.disc(x, z, p.capture_radius, colour, ring=0.5)
            canvas.label(x, z - p.capture_radius - 1.5, name.upper())

    def status(self, scenario: TeamCapture, s: WorldState, world: int) -> list[tuple[str, Colour]]:
        """Tick, then each team's score in its colour."""
        score = s.extra["score"][world]
        return [(f"tick {int(s.tick[world])} · ", INK), (f"blue {score[BLUE]:.0f}", TEAM_COLOURS[BLUE]),
                (" · ", INK), (f"red {score[RED]:.0f}", TEAM_COLOURS[RED])]

    def legend(self, scenario: TeamCapture) -> list[LegendEntry]:
        """Capture points by owner (as the text map marks their ground too), and a capture under way."""
        owners = (("neutral", NEUTRAL_COLOUR, ":"), ("blue", TEAM_COLOURS[BLUE], "b"), ("red", TEAM_COLOURS[RED], "r"))
        return [*(LegendEntry(f"{name} point", colour, "zone", char, lighter(colour, 0.7))
                  for name, colour, char in owners),
                LegendEntry("capturing", lighter(TEAM_COLOURS[BLUE], 0.3), "disc")]

    def describe(self, scenario: TeamCapture) -> dict[str, Any]:
        """For a replay: the capture points, how long a capture takes and how far a message carries."""
        p = scenario.params
        return {"points": [{"name": name, "x": float(x), "z": float(z)} for name, x, z in
                           zip(p.point_names, scenario.point_x, scenario.point_z, strict=True)],
                "capture_radius": p.capture_radius, "capture_ticks": p.capture_ticks,
                "message_range": p.message_range, "team_names": ["blue", "red"]}

    def record(self, scenario: TeamCapture, s: WorldState, world: int) -> dict[str, Any]:
        """For a replay: each point's owner, capturer and progress (-1: nobody), both scores, and the
        messages sent this tick (sender, token, the teammates it reached)."""
        e, N = s.extra, scenario.agents_per_team
        points = [[-1 if o == NEUTRAL else int(o), -1 if c == NEUTRAL else int(c), int(t)] for o, c, t in
                  zip(e["point_owner"][world], e["point_capturer"][world], e["point_progress"][world], strict=True)]
        tick: dict[str, Any] = {"points": points, "score": np.round(e["score"][world].astype(float), 1).tolist()}
        sent = np.flatnonzero((s.last_tool[world] == SEND_MESSAGE) & (s.last_code[world] == OK) & s.acted[world])
        if len(sent):
            messages = []
            for a in sent:
                team = np.arange(a - a % N, a - a % N + N)
                reached = [int(r) for r in team if r != a and e["inbox_age"][world, r, a % N] == 0]
                token = int(e["inbox_token"][world, reached[0], a % N]) if reached else None
                messages.append({"from": int(a), "token": token, "reached": reached})
            tick["messages"] = messages
        return tick

    def text(self, grid: TextGrid, scenario: TeamCapture, s: WorldState, world: int) -> None:
        """Each capture point's ground in its owner's character."""
        for x, z, held_by in zip(scenario.point_x, scenario.point_z, s.extra["point_owner"][world], strict=True):
            grid.disc(x, z, scenario.params.capture_radius, ":" if held_by == NEUTRAL else "br"[held_by])
