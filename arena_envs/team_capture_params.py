"""team_capture_v0's numbers: teams, capture points and :class:`TeamCaptureParams`.

Data and its checks only; the rules that use them are in :mod:`arena_envs.team_capture`.
"""

from __future__ import annotations

from dataclasses import dataclass

from arena_envs.world import WorldParams

TEAMS = ("blue", "red")
BLUE, RED = 0, 1
NEUTRAL = -1  # owner or capturer of nobody

CLASSIC_POINTS = ((-15.0, -15.0), (15.0, -15.0), (0.0, 0.0), (-15.0, 15.0), (15.0, 15.0))
POINT_NAMES = ("A", "B", "Center", "D", "E")

CANDIDATES = 16  # placement tries per obstacle pair


@dataclass(frozen=True)
class TeamCaptureParams(WorldParams):
    half_size: float = 30.0
    max_ticks: int = 1200
    item_names: tuple[str, ...] = ()
    resource_types: tuple[str, ...] = ()
    agents_per_team: int = 2
    capture_points: tuple[tuple[float, float], ...] = CLASSIC_POINTS
    point_names: tuple[str, ...] = POINT_NAMES
    capture_radius: float = 3.0
    capture_ticks: int = 50
    capture_score: float = 10.0
    hold_score: float = 1.0  # per owned point per second
    win_score: float = 100.0
    ally_radius: float = 15.0
    enemy_radius: float = 20.0
    message_range: float = 15.0
    message_drop_prob: float = 0.1
    spawn_distance: float = 25.0  # blue spawns around (-spawn_distance, 0)
    spawn_spread: float = 3.0
    num_obstacles: int = 0

    def __post_init__(self):
        def check(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(message)

        check(1 <= self.agents_per_team <= 8, f"agents_per_team must be 1 to 8, got {self.agents_per_team}")
        check(len(self.capture_points) >= 1 and all(len(p) == 2 for p in self.capture_points),
              "capture_points must be a non-empty tuple of (x, z) pairs")
        check(len(self.point_names) == len(self.capture_points),
              f"point_names needs one name per capture point ({len(self.capture_points)})")
        check(all(abs(c) <= self.half_size for p in self.capture_points for c in p),
              "capture_points must lie inside the world")
        check(self.capture_radius > 0, f"capture_radius must be > 0, got {self.capture_radius}")
        check(self.capture_ticks >= 1, f"capture_ticks must be >= 1, got {self.capture_ticks}")
        check(self.win_score > 0, f"win_score must be > 0, got {self.win_score}")
        check(self.capture_score >= 0 and self.hold_score >= 0, "capture_score and hold_score must be >= 0")
        check(self.ally_radius >= 0 and self.enemy_radius >= 0 and self.message_range >= 0,
              "ally_radius, enemy_radius and message_range must be >= 0")
        check(0.0 <= self.message_drop_prob <= 1.0,
              f"message_drop_prob must be in [0, 1], got {self.message_drop_prob}")
        check(self.message_vocab_size >= 1, f"message_vocab_size must be >= 1, got {self.message_vocab_size}")
        check(self.max_ticks >= 1, f"max_ticks must be >= 1, got {self.max_ticks}")
        check(self.num_obstacles >= 0 and self.num_obstacles % 2 == 0,
              f"num_obstacles must be an even number >= 0 (mirrored pairs), got {self.num_obstacles}")
        check(0 <= self.spawn_spread and self.spawn_distance + self.spawn_spread <= self.half_size - self.agent_radius,
              "the spawn area (spawn_distance ± spawn_spread) must lie inside the world")
        check(round(1.0 / self.dt) >= 1, f"dt must be at most 1 second, got {self.dt}")

    @property
    def num_agents(self) -> int:
        return 2 * self.agents_per_team

    @property
    def ticks_per_second(self) -> int:
        return round(1.0 / self.dt)

    @property
    def max_score(self) -> float:
        """The highest score reachable: the win score plus what one last tick can add."""
        return self.win_score + len(self.capture_points) * (self.capture_score + self.hold_score)


def agent_names(agents_per_team: int) -> list[str]:
    """``blue_agent_1..N`` then ``red_agent_1..N``: the order of the agent axis."""
    return [f"{team}_agent_{i}" for team in TEAMS for i in range(1, agents_per_team + 1)]


