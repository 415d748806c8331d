"""``render_mode`` for every env form: what ``render()`` returns, and the pygame window of ``"human"``.

An env keeps one :class:`Renderer` and hands it two callables, its frame and its text
map; the renderer returns the frame (``"rgb_array"``), the text (``"ansi"``) or shows the
frame in a window at ``metadata["render_fps"]`` and returns ``None`` (``"human"``, as
Gymnasium and PettingZoo expect; the env calls ``render()`` itself after each reset and step).
pygame is imported only when a window is asked for. With no display (CI, a server), set
``SDL_VIDEODRIVER=dummy`` and the window is drawn off screen.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from arena_envs.render.frame import render_frame
from arena_envs.render.text import text_map

RENDER_MODES = ["human", "rgb_array", "ansi"]  # what every 2D world supports, in every form
RENDER_FPS = 10
PYGAME_HINT = "render_mode='human' needs pygame: pip install -e '.[render]' (or pip install pygame)"


def check_render_mode(render_mode: str | None, metadata: dict[str, Any]) -> None:
    """A clear error for a mode the env does not have, or for ``"human"`` without pygame."""
    if render_mode is not None and render_mode not in metadata["render_modes"]:
        raise ValueError(f"render_mode must be None or one of {metadata['render_modes']}, got {render_mode!r}")
    if render_mode == "human" and importlib.util.find_spec("pygame") is None:
        raise ModuleNotFoundError(PYGAME_HINT)


def _pygame() -> Any:
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # no banner on import
    import pygame

    return pygame


class Window:
    """A pygame window that shows frames at ``fps``, opened on the first frame.

    Closing it with the mouse stops the drawing (later frames are dropped) but not the
    env; :meth:`close` shuts it. pygame has one display per process, so one window at a time.
    """

    def __init__(self, title: str, fps: float = RENDER_FPS):
        self.title, self.fps = title, fps
        self.screen: Any = None
        self.clock: Any = None
        self.closed_by_user = False

    @property
    def is_open(self) -> bool:
        return self.screen is not None

    def show(self, frame: np.ndarray) -> None:
        """Draw ``frame`` (H, W, 3 uint8) and wait out the rest of this frame's time."""
        if self.closed_by_user:
            return
        pygame = _pygame()
        height, width = frame.shape[:2]
        if self.screen is None or self.screen.get_size() != (width, height):
            self._open(pygame, width, height)
        for event in pygame.event.get():
            if event.type == pygame.QUIT:
                self.close()
                self.closed_by_user = True
                return
        self.screen.blit(pygame.surfarray.make_surface(np.ascontiguousarray(frame.swapaxes(0, 1))), (0, 0))
        pygame.display.flip()
        self.clock.tick(self.fps)

    def _open(self, pygame: Any, width: int, height: int) -> None:
        try:
            pygame.display.init()
            self.screen = pygame.display.set_mode((width, height))
        except pygame.error as err:
            raise RuntimeError(f"render_mode='human' could not open a window ({err}); with no display, set "
                               "SDL_VIDEODRIVER=dummy, or use render_mode='rgb_array'") from None
        pygame.display.set_caption(self.title)
        self.clock = self.clock or pygame.time.Clock()

    def close(self) -> None:
        if self.screen is not None:
            _pygame().display.quit()
            self.screen = None


class Renderer:
    """What ``render()`` does for an env's ``render_mode`` (checked against its ``metadata``)."""

    def __init__(self, render_mode: str | None, metadata: dict[str, Any], title: str = "arena_envs"):
        check_render_mode(render_mode, metadata)
        self.mode = render_mode
        self.window = Window(title, metadata.get("render_fps", RENDER_FPS)) if render_mode == "human" else None

    def render(self, frame: Callable[[], np.ndarray], text: Callable[[], str]) -> np.ndarray | str | None:
        if self.mode == "rgb_array":
            return frame()
        if self.mode == "ansi":
            return text()
        if self.window is not None:
            self.window.show(frame())
        return None

    def render_world(self, scenario: Any, state: Any, scene: Any = None, world: int = 0) -> np.ndarray | str | None:
        """:meth:`render` of world ``world`` of a batch: its frame, or its text map."""
        return self.render(lambda: render_frame(scenario, state, world, scene),
                           lambda: text_map(scenario, state, world, scene))

    def close(self) -> None:
        if self.window is not None:
            self.window.close()
