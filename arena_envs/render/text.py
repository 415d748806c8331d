"""``render_mode="ansi"`` for the 2D worlds: a character map with the status and a legend line.

Each cell of the map is a patch of ground twice as tall as wide (a terminal's character
cell), so a square world keeps its shape. Characters come from the same
:class:`~arena_envs.render.frame.LegendEntry` list as the frame's legend strip::

    +----------------------------------------------+
    |      T            *                          |
    |            @                   O             |
    +----------------------------------------------+
    tick 120 · score 78 · health 100
    @ agent  * berry  w wood  s stone  u pit  ^ fire  T tree  O rock  % bush
"""

from __future__ import annotations

from typing import Any

import numpy as np

from arena_envs.render.frame import (
    HAZARD_CHARS,
    OBSTACLE_CHARS,
    RESOURCE_CHARS,
    Scene,
    legend,
    status_pieces,
)
from arena_envs.world import HAZARD_TYPES, OBSTACLE_KINDS

TEXT_COLUMNS = 48


class TextGrid:
    """A world as a grid of characters: ``columns`` wide, half as many rows."""

    def __init__(self, half_size: float, columns: int = TEXT_COLUMNS):
        rows = max(columns // 2, 1)
        self.half, self.cells = half_size, np.full((rows, columns), " ", "<U1")
        self.cx = (np.arange(columns) + 0.5) * (2 * half_size / columns) - half_size  # cell centres
        self.cz = (np.arange(rows) + 0.5) * (2 * half_size / rows) - half_size

    def point(self, x: float, z: float, char: str) -> None:
        """``char`` in the cell holding (x, z) (points off the map go to its edge)."""
        rows, columns = self.cells.shape
        row = int(np.clip((z + self.half) / (2 * self.half) * rows, 0, rows - 1))
        column = int(np.clip((x + self.half) / (2 * self.half) * columns, 0, columns - 1))
        self.cells[row, column] = char

    def disc(self, x: float, z: float, radius: float, char: str) -> None:
        """``char`` in every cell whose centre lies within ``radius`` of (x, z), and in the centre's cell."""
        inside = (self.cx[None, :] - x) ** 2 + (self.cz[:, None] - z) ** 2 <= radius**2
        self.cells[inside] = char
        self.point(x, z, char)

    def lines(self) -> list[str]:
        rule = "+" + "-" * self.cells.shape[1] + "+"
        return [rule, *("|" + "".join(row) + "|" for row in self.cells), rule]


def text_map(scenario: Any, state: Any, world: int = 0, scene: Scene | None = None,
             columns: int = TEXT_COLUMNS) -> str:
    """World ``world`` of a batch as a character map, its status line and a legend line."""
    p, s, b, slots = scenario.params, state, world, scenario.slots
    grid = TextGrid(p.half_size, columns)
    for x, z, r, kind in zip(s.obst_x[b], s.obst_z[b], s.obst_r[b], s.obst_kind[b], strict=True):
        if r > 0:
            grid.disc(x, z, r, OBSTACLE_CHARS[OBSTACLE_KINDS[kind]])
    for x, z, kind in zip(s.ent_x[b, slots.haz], s.ent_z[b, slots.haz], s.ent_kind[b, slots.haz], strict=True):
        grid.disc(x, z, p.hazard_radius, HAZARD_CHARS[HAZARD_TYPES[kind]])
    if hasattr(scene, "text"):
        scene.text(grid, scenario, state, b)
    for x, z, kind, alive in zip(s.ent_x[b, slots.res], s.ent_z[b, slots.res], s.ent_kind[b, slots.res],
                                 s.ent_alive[b, slots.res], strict=True):
        if alive:
            name = p.resource_types[kind]
            grid.point(x, z, RESOURCE_CHARS.get(name, name[0]))
    for x, z, kind, alive in zip(s.ent_x[b, slots.st], s.ent_z[b, slots.st], s.ent_kind[b, slots.st],
                                 s.ent_alive[b, slots.st], strict=True):
        if alive and kind < len(p.station_types):
            grid.point(x, z, p.station_types[kind][0].upper())
    team = getattr(scenario, "team", None)
    for a in range(s.x.shape[1]):
        char = ("BR"[int(team[a])] if team is not None else "@") if s.alive[b, a] else "x"
        grid.point(s.x[b, a], s.z[b, a], char)
    status = "".join(text for text, _ in status_pieces(scenario, state, b, scene)).strip()
    key = "  ".join(f"{entry.char} {entry.label}" for entry in legend(scenario, scene) if entry.char)
    return "\n".join([*grid.lines(), status, key])
