"""A world's top-down frame with its status line and legend strip, tiling, and GIF export.

The frame and the text map (:mod:`arena_envs.render.text`) draw from the same
:class:`LegendEntry` list, so the legend under a frame, the legend line of a text map and
the legend of the replay page (it is recorded with each episode) always agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from arena_envs.render.canvas import (
    DEAD_COLOUR,
    HAZARD_COLOURS,
    INK,
    MAP_PIXELS,
    OBSTACLE_COLOURS,
    RESOURCE_COLOURS,
    STATION_COLOUR,
    STATION_TYPE_COLOURS,
    STATUS_HEIGHT,
    TEAM_COLOURS,
    UNKNOWN_RESOURCE_COLOUR,
    Canvas,
    Colour,
    lighter,
    text_width,
)
from arena_envs.world import HAZARD_TYPES, OBSTACLE_KINDS

LEGEND_ROW = 14  # pixels per row of the legend strip
SWATCH = 10
RESOURCE_CHARS = {"berry": "*", "wood": "w", "stone": "s", "iron_ore": "i", "coal": "c"}
OBSTACLE_CHARS = {"tree": "T", "rock": "O", "bush": "%"}
HAZARD_CHARS = {"pit": "u", "fire": "^"}
TEAM_NAMES = ("blue", "red")


@dataclass(frozen=True)
class LegendEntry:
    """One symbol of the legend: how it is drawn (``shape`` as :meth:`Canvas.swatch` draws it)
    and, when the text map shows it, its character."""

    label: str
    colour: Colour
    shape: str = "disc"
    char: str | None = None
    inner: Colour | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


class Scene(Protocol):
    """What a scenario adds to the common frame (every member is optional)."""

    view_radius: float  # the ring drawn around each agent, when not ``params.perception_radius``

    def draw(self, canvas: Canvas, scenario: Any, state: Any, world: int) -> None:
        """Draw what only this scenario has, under the agents."""

    def status(self, scenario: Any, state: Any, world: int) -> str | Sequence[tuple[str, Colour]]:
        """The status line: a string, or ``(text, colour)`` pieces written one after another."""

    def legend(self, scenario: Any) -> list[LegendEntry]:
        """The legend entries of what :meth:`draw` draws."""


def resource_colour(name: str) -> Colour:
    return RESOURCE_COLOURS.get(name, UNKNOWN_RESOURCE_COLOUR)


def spaced(name: str) -> str:
    return name.replace("_", " ")


def legend(scenario: Any, scene: Scene | None = None) -> list[LegendEntry]:
    """What a frame of ``scenario`` shows, in the order the legend strip lists it."""
    p, slots = scenario.params, scenario.slots
    teams = getattr(scenario, "team", None) is not None
    agents = ([LegendEntry(f"{name} agent", colour, "disc", name[0].upper())
               for name, colour in zip(TEAM_NAMES, TEAM_COLOURS, strict=True)] if teams
              else [LegendEntry("agent", TEAM_COLOURS[0], "disc", "@")])
    entries = [*agents, LegendEntry("sight range" if teams else "view range", lighter(TEAM_COLOURS[0], 0.6), "ring"),
               LegendEntry("move target", TEAM_COLOURS[0], "dot")]
    entries += [LegendEntry("out of play", DEAD_COLOUR, "disc", "x")] if teams else []
    entries += [LegendEntry(spaced(name), resource_colour(name), "disc", RESOURCE_CHARS.get(name, name[0]))
                for name in p.resource_types] if slots.resources else []
    entries += [LegendEntry(spaced(name), STATION_COLOUR, "square", name[0].upper(), STATION_TYPE_COLOURS.get(name))
                for name in p.station_types] if slots.stations else []
    entries += [LegendEntry(name, HAZARD_COLOURS[name], "ring" if name == "pit" else "disc", HAZARD_CHARS[name])
                for name in HAZARD_TYPES] if slots.hazards else []
    entries += [LegendEntry(name, OBSTACLE_COLOURS[name], "disc", OBSTACLE_CHARS[name])
                for name in OBSTACLE_KINDS] if getattr(p, "num_obstacles", 1) else []
    return entries + (scene.legend(scenario) if hasattr(scene, "legend") else [])


def default_status(scenario: Any, state: Any, world: int = 0) -> str:
    """Tick, the scenario's ``score`` info and the first agent's health, spelled out."""
    info = scenario.info(state)
    score = float(info["score"][world]) if "score" in info else 0.0
    return f"tick {int(state.tick[world])} · score {score:.0f} · health {float(state.health[world, 0]):.0f}"


def status_pieces(scenario: Any, state: Any, world: int, scene: Scene | None) -> list[tuple[str, Colour]]:
    """The status line as ``(text, colour)`` pieces."""
    status = scene.status(scenario, state, world) if hasattr(scene, "status") else default_status(scenario, state,
                                                                                                  world)
    return [(status, INK)] if isinstance(status, str) else list(status)


def legend_rows(entries: Sequence[LegendEntry], width: int) -> list[list[tuple[int, LegendEntry]]]:
    """The entries laid out left to right in rows of ``width`` pixels: (column, entry) pairs."""
    rows: list[list[tuple[int, LegendEntry]]] = [[]]
    column = 4
    for entry in entries:
        span = SWATCH + 4 + text_width(entry.label)
        if rows[-1] and column + span > width - 4:
            rows.append([])
            column = 4
        rows[-1].append((column, entry))
        column += span + 12
    return rows


def draw_legend(canvas: Canvas, rows: list[list[tuple[int, LegendEntry]]]) -> None:
    top = canvas.pixels + STATUS_HEIGHT + 2
    canvas.image[canvas.pixels + STATUS_HEIGHT - 1] = (215, 215, 215)  # a rule between status and legend
    for r, row in enumerate(rows):
        for column, entry in row:
            y = top + r * LEGEND_ROW
            canvas.swatch(y, column, SWATCH, entry.shape, entry.colour, entry.inner)
            canvas.write(entry.label, y, column + SWATCH + 4)


def render_frame(scenario: Any, state: Any, world: int = 0, scene: Scene | None = None,
                 pixels: int = MAP_PIXELS) -> np.ndarray:
    """One world of a batch as an (H, W, 3) uint8 image: the ``pixels`` x ``pixels`` map, the
    status line, then the legend strip."""
    p, s, b = scenario.params, state, world
    rows = legend_rows(legend(scenario, scene), pixels)
    canvas = Canvas(p.half_size, pixels, STATUS_HEIGHT + 4 + LEGEND_ROW * len(rows))
    for x, z, r, kind in zip(s.obst_x[b], s.obst_z[b], s.obst_r[b], s.obst_kind[b], strict=True):
        if r > 0:
            canvas.disc(x, z, r, OBSTACLE_COLOURS[OBSTACLE_KINDS[kind]])
    slots = scenario.slots
    for x, z, kind in zip(s.ent_x[b, slots.haz], s.ent_z[b, slots.haz], s.ent_kind[b, slots.haz], strict=True):
        name = HAZARD_TYPES[kind]
        canvas.disc(x, z, p.hazard_radius, HAZARD_COLOURS[name], ring=0.4 if name == "pit" else 0.0)
    res = slots.res
    for x, z, kind, alive in zip(s.ent_x[b, res], s.ent_z[b, res], s.ent_kind[b, res], s.ent_alive[b, res],
                                 strict=True):
        if alive:
            canvas.disc(x, z, 0.6, resource_colour(p.resource_types[kind]))
    for x, z, kind, alive in zip(s.ent_x[b, slots.st], s.ent_z[b, slots.st], s.ent_kind[b, slots.st],
                                 s.ent_alive[b, slots.st], strict=True):
        if alive:
            canvas.square(x, z, 1.0, STATION_COLOUR)
            name = p.station_types[kind] if kind < len(p.station_types) else ""
            canvas.square(x, z, 0.45, STATION_TYPE_COLOURS.get(name, (255, 255, 255)))
            canvas.label(x, z + 2.0, name)
    if hasattr(scene, "draw"):
        scene.draw(canvas, scenario, state, b)
    team = getattr(scenario, "team", None)  # (A,) team of each agent, when there are teams
    view_radius = getattr(scene, "view_radius", p.perception_radius)
    for a in range(s.x.shape[1]):
        colour = TEAM_COLOURS[int(team[a]) if team is not None else 0]
        x, z = s.x[b, a], s.z[b, a]
        canvas.disc(x, z, view_radius, lighter(colour, 0.6), ring=0.12)
        if s.moving[b, a]:
            canvas.line(x, z, s.target_x[b, a], s.target_z[b, a], colour)
            canvas.disc(s.target_x[b, a], s.target_z[b, a], 0.3, colour)
        radius = max(p.agent_radius + 0.2, 4.5 / canvas.scale)  # big enough to see on a large field
        canvas.disc(x, z, radius + 1.5 / canvas.scale, (255, 255, 255))  # an outline, to stand out on any zone
        canvas.disc(x, z, radius, colour if s.alive[b, a] else DEAD_COLOUR)
    column = 4
    for message, colour in status_pieces(scenario, state, b, scene):
        column = canvas.text(message, column=column, colour=colour)
    draw_legend(canvas, rows)
    return canvas.image


def tile(frames: Sequence[np.ndarray], columns: int | None = None) -> np.ndarray:
    """Frames side by side in a grid (for the first few worlds of a vector env)."""
    columns = columns or int(np.ceil(np.sqrt(len(frames))))
    rows = int(np.ceil(len(frames) / columns))
    h, w, _ = frames[0].shape
    grid = np.full((rows * h + (rows - 1) * 2, columns * w + (columns - 1) * 2, 3), 255, np.uint8)
    for i, frame in enumerate(frames):
        r, c = divmod(i, columns)
        grid[r * (h + 2):r * (h + 2) + h, c * (w + 2):c * (w + 2) + w] = frame
    return grid


def save_gif(frames: Sequence[np.ndarray], path: str | Path, fps: int = 10) -> Path:
    """Write frames as an animated GIF (needs Pillow)."""
    from PIL import Image

    path = Path(path)
    images = [Image.fromarray(np.asarray(f, np.uint8)) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return path
