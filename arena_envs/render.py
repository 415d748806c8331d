"""Top-down frames of a world, drawn with numpy (no window, no display), and GIF export.

``render_frame(scenario, state, world, scene)`` draws one world of a batch as an
``(H, W, 3)`` uint8 image: obstacles (trees, rocks, bushes), resources by type, hazards,
stations by type, agents with their movement target and perception radius, and a status
line (tick, score, health). What only one scenario has (capture zones, the station being
worked at) comes from its :class:`Scene`, kept beside the env adapters
(:mod:`arena_envs.scenes`) so that scenario modules hold rules only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from arena_envs.world import HAZARD_TYPES, OBSTACLE_KINDS

Colour = tuple[int, int, int]

BACKGROUND = (226, 221, 196)
INK = (20, 20, 20)
OBSTACLE_COLOURS = {"tree": (46, 110, 52), "rock": (128, 128, 128), "bush": (96, 160, 80)}
RESOURCE_COLOURS = {"berry": (200, 30, 60), "wood": (140, 90, 40), "stone": (90, 90, 110),
                    "iron_ore": (170, 100, 80), "coal": (30, 30, 30)}
HAZARD_COLOURS = {"pit": (40, 30, 30), "fire": (240, 120, 20)}
STATION_COLOUR = (70, 70, 160)  # every station's body; its type shows in the middle
STATION_TYPE_COLOURS = {"anvil": (190, 195, 205), "furnace": (245, 110, 30), "workbench": (190, 140, 80)}
TEAM_COLOURS = ((40, 90, 220), (220, 50, 50))
NEUTRAL_COLOUR = (120, 120, 120)
STATUS_HEIGHT = 14

# A 3x5 font: five rows of three pixels each, top to bottom ("#" is ink).
FONT = {
    "0": "### #.# #.# #.# ###", "1": ".#. ##. .#. .#. ###", "2": "### ..# ### #.. ###",
    "3": "### ..# ### ..# ###", "4": "#.# #.# ### ..# ..#", "5": "### #.. ### ..# ###",
    "6": "### #.. ### #.# ###", "7": "### ..# .#. .#. .#.", "8": "### #.# ### #.# ###",
    "9": "### #.# ### ..# ###",
    "A": ".#. #.# ### #.# #.#", "B": "##. #.# ##. #.# ##.", "C": ".## #.. #.. #.. .##",
    "D": "##. #.# #.# #.# ##.", "E": "### #.. ##. #.. ###", "F": "### #.. ##. #.. #..",
    "G": ".## #.. #.# #.# .##", "H": "#.# #.# ### #.# #.#", "I": "### .#. .#. .#. ###",
    "J": "..# ..# ..# #.# .#.", "K": "#.# #.# ##. #.# #.#", "L": "#.. #.. #.. #.. ###",
    "M": "#.# ### ### #.# #.#", "N": "##. #.# #.# #.# #.#", "O": ".#. #.# #.# #.# .#.",
    "P": "##. #.# ##. #.. #..", "Q": ".#. #.# #.# ##. .##", "R": "##. #.# ##. #.# #.#",
    "S": ".## #.. .#. ..# ##.", "T": "### .#. .#. .#. .#.", "U": "#.# #.# #.# #.# ###",
    "V": "#.# #.# #.# #.# .#.", "W": "#.# #.# ### ### #.#", "X": "#.# #.# .#. #.# #.#",
    "Y": "#.# #.# .#. .#. .#.", "Z": "### ..# .#. #.. ###",
    " ": "... ... ... ... ...", ":": "... .#. ... .#. ...", ".": "... ... ... ... .#.",
    "-": "... ... ### ... ...", "_": "... ... ... ... ###", "/": "..# ..# .#. #.. #..",
    "+": "... .#. ### .#. ...", "%": "#.# ..# .#. #.. #.#", "(": ".#. #.. #.. #.. .#.",
    ")": ".#. ..# ..# ..# .#.",
}
GLYPH_SCALE = 2  # font pixels are drawn 2x2: a character is 6x10 pixels
ADVANCE = 4 * GLYPH_SCALE  # from one character to the next: its width and a gap


def _glyph(ch: str) -> np.ndarray | None:
    rows = FONT.get(ch) or FONT.get(ch.upper())
    if rows is None:
        return None
    bits = np.array([[c == "#" for c in row] for row in rows.split()], bool)
    return np.kron(bits, np.ones((GLYPH_SCALE, GLYPH_SCALE), bool))


def text_width(message: str) -> int:
    """Pixels that ``message`` takes in the built-in font."""
    return ADVANCE * len(message)


class Canvas:
    """An RGB image addressed in world coordinates (x to the right, z downwards)."""

    def __init__(self, half_size: float, pixels: int = 384):
        self.half, self.pixels = half_size, pixels
        self.scale = pixels / (2 * half_size)
        self.image = np.empty((pixels + STATUS_HEIGHT, pixels, 3), np.uint8)
        self.image[...] = BACKGROUND
        self.image[pixels:] = 250
        centres = (np.arange(pixels) + 0.5) / self.scale - half_size
        self.gx, self.gz = centres[None, :], centres[:, None]

    def disc(self, x: float, z: float, radius: float, colour, ring: float = 0.0) -> None:
        """A filled disc, or a ring ``ring`` world units thick when ring > 0."""
        radius = max(radius, 0.6 / self.scale)  # at least about a pixel
        d2 = (self.gx - x) ** 2 + (self.gz - z) ** 2
        mask = d2 <= radius**2
        if ring:
            mask &= d2 >= (radius - ring) ** 2
        self.image[: self.pixels][mask] = colour

    def square(self, x: float, z: float, half: float, colour, ring: float = 0.0) -> None:
        """A filled square, or its outline ``ring`` world units thick when ring > 0."""
        dx, dz = np.abs(self.gx - x), np.abs(self.gz - z)
        mask = (dx <= half) & (dz <= half)
        if ring:
            mask &= (dx >= half - ring) | (dz >= half - ring)
        self.image[: self.pixels][mask] = colour

    def line(self, x0: float, z0: float, x1: float, z1: float, colour) -> None:
        n = int(max(abs(x1 - x0), abs(z1 - z0)) * self.scale) + 2
        px = ((np.linspace(x0, x1, n) + self.half) * self.scale).astype(int)
        pz = ((np.linspace(z0, z1, n) + self.half) * self.scale).astype(int)
        keep = (px >= 0) & (px < self.pixels) & (pz >= 0) & (pz < self.pixels)
        self.image[pz[keep], px[keep]] = colour

    def wedge(self, x: float, z: float, radius: float, fraction: float, colour) -> None:
        """The part of a disc swept clockwise from twelve o'clock through ``fraction`` of a turn."""
        if fraction <= 0:
            return
        dx, dz = self.gx - x, self.gz - z
        angle = np.arctan2(dx, -dz) % (2 * np.pi)  # 0 straight up, growing clockwise on screen
        mask = (dx * dx + dz * dz <= radius**2) & (angle <= fraction * 2 * np.pi)
        self.image[: self.pixels][mask] = colour

    def bar(self, x: float, z: float, width: float, fraction: float, colour) -> None:
        """A horizontal progress bar centred on (x, z): ``fraction`` of it filled, the rest light."""
        half_height = 2.5 / self.scale
        left, right = x - width / 2, x + width / 2
        rows = np.abs(self.gz - z) <= half_height
        inside = rows & (self.gx >= left) & (self.gx <= right)
        filled = inside & (self.gx <= left + width * float(np.clip(fraction, 0, 1)))
        self.image[: self.pixels][inside] = (245, 245, 245)
        self.image[: self.pixels][filled] = colour

    def write(self, message: str, top: int, left: int, colour=INK) -> int:
        """Write ``message`` with its top-left corner at pixel (top, left); characters that do not
        fit are clipped, unknown ones skipped. Returns the column after the last character."""
        height, width = self.image.shape[:2]
        for ch in message:
            glyph = _glyph(ch)
            if glyph is not None:
                h, w = glyph.shape
                r0, r1, c0, c1 = max(top, 0), min(top + h, height), max(left, 0), min(left + w, width)
                if r0 < r1 and c0 < c1:
                    self.image[r0:r1, c0:c1][glyph[r0 - top:r1 - top, c0 - left:c1 - left]] = colour
            left += ADVANCE
        return left

    def label(self, x: float, z: float, message: str, colour=INK) -> None:
        """``message`` centred on the world point (x, z), on the map."""
        row, column = int((z + self.half) * self.scale), int((x + self.half) * self.scale)
        self.write(message, min(row - 5, self.pixels - 10), column - text_width(message) // 2 + 1, colour)

    def text(self, message: str, row: int = 4, column: int = 4, colour=INK) -> int:
        """Write ``message`` on the status line below the map; returns the column after it."""
        return self.write(message, self.pixels + row - 2, column, colour)


class Scene(Protocol):
    """What a scenario adds to the common frame (every member is optional)."""

    view_radius: float  # the perception ring around each agent, when not ``params.perception_radius``

    def draw(self, canvas: Canvas, scenario: Any, state: Any, world: int) -> None:
        """Draw what only this scenario has, under the agents."""

    def status(self, scenario: Any, state: Any, world: int) -> str | Sequence[tuple[str, Colour]]:
        """The status line: a string, or ``(text, colour)`` pieces written one after another."""


def default_status(scenario, state, world: int = 0) -> str:
    """Tick, the scenario's ``score`` info and the first agent's health."""
    info = scenario.info(state)
    score = float(info["score"][world]) if "score" in info else 0.0
    return f"T:{int(state.tick[world])} S:{score:.0f} H:{float(state.health[world, 0]):.0f}"


def render_frame(scenario, state, world: int = 0, scene: Scene | None = None, pixels: int = 384) -> np.ndarray:
    """One world of a batch as an (H, W, 3) uint8 image; H = pixels + the status line."""
    p, s, b = scenario.params, state, world
    canvas = Canvas(p.half_size, pixels)
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
            canvas.disc(x, z, 0.6, RESOURCE_COLOURS.get(p.resource_types[kind], (200, 0, 200)))
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
        canvas.disc(x, z, radius, colour if s.alive[b, a] else (60, 60, 60))
    status = scene.status(scenario, state, b) if hasattr(scene, "status") else default_status(scenario, state, b)
    column = 4
    for message, colour in [(status, INK)] if isinstance(status, str) else status:
        column = canvas.text(message, column=column, colour=colour)
    return canvas.image


def lighter(colour: Colour, amount: float = 0.5) -> Colour:
    """``colour`` mixed with white: ``amount`` 0 keeps it, 1 gives white."""
    return tuple(int(c + (255 - c) * amount) for c in colour)


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
