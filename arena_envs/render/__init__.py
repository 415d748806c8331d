"""Drawing a world: top-down frames, text maps, the ``"human"`` window, and what a replay needs.

``render_frame(scenario, state, world, scene)`` draws one world of a batch as an
``(H, W, 3)`` uint8 image with numpy alone: obstacles (trees, rocks, bushes), resources by
type, hazards, stations by type, agents with their movement target and view range, a
status line spelled out (``tick 120 · score 78 · health 100``) and a legend strip naming
every symbol. ``text_map`` draws the same world as characters (``render_mode="ansi"``);
``Renderer`` gives every env form its three render modes. What only one scenario has
(capture zones, the station being worked at) comes from its :class:`Scene`, kept beside
the env adapters (:mod:`arena_envs.scenes`) so that scenario modules hold rules only.

    canvas.py   colours, the bitmap font, the Canvas primitives
    frame.py    the frame, its status line and legend strip; tiling; GIFs
    text.py     the character map
    window.py   render modes and the pygame window
"""

from arena_envs.render.canvas import (
    BACKGROUND,
    DEAD_COLOUR,
    FOOTER,
    HAZARD_COLOURS,
    INK,
    MAP_PIXELS,
    NEUTRAL_COLOUR,
    OBSTACLE_COLOURS,
    RESOURCE_COLOURS,
    STATION_COLOUR,
    STATION_TYPE_COLOURS,
    STATUS_HEIGHT,
    TEAM_COLOURS,
    Canvas,
    Colour,
    lighter,
    text_width,
)
from arena_envs.render.frame import (
    LegendEntry,
    Scene,
    default_status,
    legend,
    render_frame,
    save_gif,
    status_pieces,
    tile,
)
from arena_envs.render.text import TextGrid, text_map
from arena_envs.render.window import RENDER_FPS, RENDER_MODES, Renderer, Window, check_render_mode

__all__ = [
    "BACKGROUND", "DEAD_COLOUR", "FOOTER", "HAZARD_COLOURS", "INK", "MAP_PIXELS", "NEUTRAL_COLOUR",
    "OBSTACLE_COLOURS", "RENDER_FPS", "RENDER_MODES", "RESOURCE_COLOURS", "STATION_COLOUR", "STATION_TYPE_COLOURS",
    "STATUS_HEIGHT", "TEAM_COLOURS", "Canvas", "Colour", "LegendEntry", "Renderer", "Scene", "TextGrid", "Window",
    "check_render_mode", "default_status", "legend", "lighter", "render_frame", "save_gif", "status_pieces",
    "text_map", "text_width", "tile",
]
