"""The colours, the built-in bitmap font and the :class:`Canvas` every frame is drawn on (numpy only)."""

from __future__ import annotations

import numpy as np

Colour = tuple[int, int, int]

BACKGROUND = (226, 221, 196)
FOOTER = (250, 250, 250)  # under the map: the status line and the legend strip
INK = (20, 20, 20)
OBSTACLE_COLOURS = {"tree": (46, 110, 52), "rock": (128, 128, 128), "bush": (96, 160, 80)}
RESOURCE_COLOURS = {"berry": (200, 30, 60), "wood": (140, 90, 40), "stone": (90, 90, 110),
                    "iron_ore": (170, 100, 80), "coal": (30, 30, 30)}
UNKNOWN_RESOURCE_COLOUR = (200, 0, 200)
HAZARD_COLOURS = {"pit": (40, 30, 30), "fire": (240, 120, 20)}
STATION_COLOUR = (70, 70, 160)  # every station's body; its type shows in the middle
STATION_TYPE_COLOURS = {"anvil": (190, 195, 205), "furnace": (245, 110, 30), "workbench": (190, 140, 80)}
TEAM_COLOURS = ((40, 90, 220), (220, 50, 50))
NEUTRAL_COLOUR = (120, 120, 120)
DEAD_COLOUR = (60, 60, 60)
MAP_PIXELS = 512  # the map's default width and height
STATUS_HEIGHT = 14

# A 3x5 font: five rows of three pixels each, top to bottom ("#" is ink). Lower case is drawn as upper.
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
    ")": ".#. ..# ..# ..# .#.", "·": "... ... .#. ... ...", ",": "... ... ... .#. #..",
}
GLYPH_SCALE = 2  # font pixels are drawn 2x2: a character is 6x10 pixels
ADVANCE = 4 * GLYPH_SCALE  # from one character to the next: its width and a gap
GLYPHS = {ch: np.kron(np.array([[c == "#" for c in row] for row in rows.split()], bool),
                      np.ones((GLYPH_SCALE, GLYPH_SCALE), bool)) for ch, rows in FONT.items()}


def text_width(message: str) -> int:
    """Pixels that ``message`` takes in the built-in font."""
    return ADVANCE * len(message)


def lighter(colour: Colour, amount: float = 0.5) -> Colour:
    """``colour`` mixed with white: ``amount`` 0 keeps it, 1 gives white."""
    return tuple(int(c + (255 - c) * amount) for c in colour)


class Canvas:
    """An RGB image: a map addressed in world coordinates (x to the right, z downwards), and
    ``footer`` pixel rows under it for the status line and the legend."""

    def __init__(self, half_size: float, pixels: int = MAP_PIXELS, footer: int = STATUS_HEIGHT):
        self.half, self.pixels = half_size, pixels
        self.scale = pixels / (2 * half_size)
        self.image = np.empty((pixels + footer, pixels, 3), np.uint8)
        self.image[:pixels] = BACKGROUND
        self.image[pixels:] = FOOTER
        self.centres = (np.arange(pixels) + 0.5) / self.scale - half_size  # pixel centres in world units

    def _box(self, x: float, z: float, reach: float) -> tuple[slice, slice, np.ndarray, np.ndarray]:
        """The rows and columns a shape within ``reach`` of (x, z) can touch, and their centres
        (a shape is computed over its box only, not the whole map)."""
        def span(centre: float) -> slice:
            low = int(np.floor((centre - reach + self.half) * self.scale)) - 1
            high = int(np.ceil((centre + reach + self.half) * self.scale)) + 1
            return slice(min(max(low, 0), self.pixels), min(max(high, 0), self.pixels))

        rows, columns = span(z), span(x)
        return rows, columns, self.centres[columns][None, :], self.centres[rows][:, None]

    def disc(self, x: float, z: float, radius: float, colour: Colour, ring: float = 0.0) -> None:
        """A filled disc, or a ring ``ring`` world units thick when ring > 0."""
        radius = max(radius, 0.6 / self.scale)  # at least about a pixel
        rows, columns, gx, gz = self._box(x, z, radius)
        d2 = (gx - x) ** 2 + (gz - z) ** 2
        mask = d2 <= radius**2
        if ring:
            mask &= d2 >= (radius - ring) ** 2
        self.image[rows, columns][mask] = colour

    def square(self, x: float, z: float, half: float, colour: Colour, ring: float = 0.0) -> None:
        """A filled square, or its outline ``ring`` world units thick when ring > 0."""
        rows, columns, gx, gz = self._box(x, z, half)
        dx, dz = np.abs(gx - x), np.abs(gz - z)
        mask = (dx <= half) & (dz <= half)
        if ring:
            mask &= (dx >= half - ring) | (dz >= half - ring)
        self.image[rows, columns][mask] = colour

    def line(self, x0: float, z0: float, x1: float, z1: float, colour: Colour) -> None:
        n = int(max(abs(x1 - x0), abs(z1 - z0)) * self.scale) + 2
        px = ((np.linspace(x0, x1, n) + self.half) * self.scale).astype(int)
        pz = ((np.linspace(z0, z1, n) + self.half) * self.scale).astype(int)
        keep = (px >= 0) & (px < self.pixels) & (pz >= 0) & (pz < self.pixels)
        self.image[pz[keep], px[keep]] = colour

    def wedge(self, x: float, z: float, radius: float, fraction: float, colour: Colour) -> None:
        """The part of a disc swept clockwise from twelve o'clock through ``fraction`` of a turn."""
        if fraction <= 0:
            return
        rows, columns, gx, gz = self._box(x, z, radius)
        dx, dz = gx - x, gz - z
        angle = np.arctan2(dx, -dz) % (2 * np.pi)  # 0 straight up, growing clockwise on screen
        mask = (dx * dx + dz * dz <= radius**2) & (angle <= fraction * 2 * np.pi)
        self.image[rows, columns][mask] = colour

    def bar(self, x: float, z: float, width: float, fraction: float, colour: Colour) -> None:
        """A horizontal progress bar centred on (x, z): ``fraction`` of it filled, the rest light."""
        rows, columns, gx, gz = self._box(x, z, width / 2)
        left, right = x - width / 2, x + width / 2
        inside = (np.abs(gz - z) <= 2.5 / self.scale) & (gx >= left) & (gx <= right)
        filled = inside & (gx <= left + width * float(np.clip(fraction, 0, 1)))
        self.image[rows, columns][inside] = (245, 245, 245)
        self.image[rows, columns][filled] = colour

    def write(self, message: str, top: int, left: int, colour: Colour = INK) -> int:
        """Write ``message`` with its top-left corner at pixel (top, left); characters that do not
        fit are clipped, unknown ones skipped. Returns the column after the last character."""
        height, width = self.image.shape[:2]
        for ch in message:
            glyph = GLYPHS.get(ch, GLYPHS.get(ch.upper()))
            if glyph is not None:
                h, w = glyph.shape
                r0, r1, c0, c1 = max(top, 0), min(top + h, height), max(left, 0), min(left + w, width)
                if r0 < r1 and c0 < c1:
                    self.image[r0:r1, c0:c1][glyph[r0 - top:r1 - top, c0 - left:c1 - left]] = colour
            left += ADVANCE
        return left

    def label(self, x: float, z: float, message: str, colour: Colour = INK) -> None:
        """``message`` centred on the world point (x, z), on the map."""
        row, column = int((z + self.half) * self.scale), int((x + self.half) * self.scale)
        self.write(message, min(row - 5, self.pixels - 10), column - text_width(message) // 2 + 1, colour)

    def text(self, message: str, row: int = 4, column: int = 4, colour: Colour = INK) -> int:
        """Write ``message`` on the status line below the map; returns the column after it."""
        return self.write(message, self.pixels + row - 2, column, colour)

    def swatch(self, top: int, left: int, size: int, shape: str, colour: Colour, inner: Colour | None = None) -> None:
        """A legend symbol in a ``size`` x ``size`` pixel box: ``disc``, ``ring``, ``square``
        (with an ``inner`` square, as stations are drawn), ``zone`` (a ring around an ``inner``
        disc, as capture points are drawn) or ``dot`` (a small disc)."""
        box = self.image[top:top + size, left:left + size]
        yy, xx = np.mgrid[:box.shape[0], :box.shape[1]] + 0.5 - size / 2
        d2, half = xx * xx + yy * yy, size / 2
        masks = {"disc": d2 <= half**2, "ring": (d2 <= half**2) & (d2 >= (half - 2) ** 2),
                 "dot": d2 <= (half / 2.5) ** 2, "square": np.ones(box.shape[:2], bool),
                 "zone": d2 <= half**2}
        box[masks[shape]] = colour
        if shape == "zone" and inner is not None:
            box[d2 <= (half - 2) ** 2] = inner
        elif inner is not None:
            box[(np.abs(xx) <= half / 2) & (np.abs(yy) <= half / 2)] = inner
