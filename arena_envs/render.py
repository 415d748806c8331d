"""Top-down frames of a world, drawn with numpy (no window, no display), and GIF export.

``render_frame(scenario, state, world)`` draws one world of a batch as an ``(H, W, 3)``
uint8 image: obstacles (trees, rocks, bushes), resources by type, hazards, stations,
agents with their movement target and perception radius, and a status line (tick,
score, health). Scenarios with more to show (capture zones) add it through an optional
``draw_extras(canvas, state, world)`` method.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from arena_envs.world import HAZARD_TYPES, OBSTACLE_KINDS

BACKGROUND = (226, 221, 196)
OBSTACLE_COLOURS = {"tree": (46, 110, 52), "rock": (128, 128, 128), "bush": (96, 160, 80)}
RESOURCE_COLOURS = {"berry": (200, 30, 60), "wood": (140, 90, 40), "stone": (90, 90, 110),
                    "iron_ore": (170, 100, 80), "coal": (30, 30, 30)}
HAZARD_COLOURS = {"pit": (40, 30, 30), "fire": (240, 120, 20)}
STATION_COLOUR = (70, 70, 160)
TEAM_COLOURS = ((40, 90, 220), (220, 50, 50))
STATUS_HEIGHT = 14

# 3x5 glyphs for the status line: rows of 3 bits, top to bottom
GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001010010010",
    "8": "111101111101111", "9": "111101111001111", ":": "000010000010000", " ": "000000000000000",
    "T": "111010010010010", "S": "111100111001111", "H": "101101111101101", ".": "000000000000010",
    "-": "000000111000000",
}


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

    def square(self, x: float, z: float, half: float, colour) -> None:
        mask = (np.abs(self.gx - x) <= half) & (np.abs(self.gz - z) <= half)
        self.image[: self.pixels][mask] = colour

    def line(self, x0: float, z0: float, x1: float, z1: float, colour) -> None:
        n = int(max(abs(x1 - x0), abs(z1 - z0)) * self.scale) + 2
        px = ((np.linspace(x0, x1, n) + self.half) * self.scale).astype(int)
        pz = ((np.linspace(z0, z1, n) + self.half) * self.scale).astype(int)
        keep = (px >= 0) & (px < self.pixels) & (pz >= 0) & (pz < self.pixels)
        self.image[pz[keep], px[keep]] = colour

    def text(self, message: str, row: int = 4, column: int = 4, colour=(20, 20, 20)) -> None:
        """Write ``message`` with the built-in 3x5 font (unknown characters are skipped)."""
        for ch in message.upper():
            glyph = GLYPHS.get(ch)
            if glyph is None:
                continue
            bits = np.array([int(b) for b in glyph], bool).reshape(5, 3)
            block = np.kron(bits, np.ones((2, 2), bool))  # 2x scale: 6x10 pixels
            top, left = self.pixels + row - 2, column
            if left + 6 > self.image.shape[1]:
                return
            self.image[top:top + 10, left:left + 6][block] = colour
            column += 8


def render_frame(scenario, state, world: int = 0, pixels: int = 384) -> np.ndarray:
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
    for x, z, alive in zip(s.ent_x[b, slots.st], s.ent_z[b, slots.st], s.ent_alive[b, slots.st], strict=True):
        if alive:
            canvas.square(x, z, 1.0, STATION_COLOUR)
    if hasattr(scenario, "draw_extras"):
        scenario.draw_extras(canvas, state, b)
    team = s.extra.get("team")
    for a in range(s.x.shape[1]):
        colour = TEAM_COLOURS[int(team[b, a]) if team is not None else 0]
        x, z = s.x[b, a], s.z[b, a]
        canvas.disc(x, z, p.perception_radius, tuple(int(c * 0.5 + 128) for c in colour), ring=0.12)
        if s.moving[b, a]:
            canvas.line(x, z, s.target_x[b, a], s.target_z[b, a], colour)
            canvas.disc(s.target_x[b, a], s.target_z[b, a], 0.3, colour)
        canvas.disc(x, z, p.agent_radius + 0.2, colour if s.alive[b, a] else (60, 60, 60))
    info = scenario.info(state)
    score = float(info["score"][b]) if "score" in info else 0.0
    canvas.text(f"T:{int(s.tick[b])} S:{score:.0f} H:{float(s.health[b, 0]):.0f}")
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
