"""Shared helpers for the team_capture_v0 tests: action batches and hand-built worlds."""

from __future__ import annotations

import numpy as np

from arena_envs import team_capture_v0

TOOLS = {"move_to": 0, "collect": 1, "craft": 2, "query_world": 3, "query_inventory": 4, "send_message": 5,
         "idle": 6}
OK, NOT_FOUND, INVALID_PARAMS = 0, 2, 4
POINTS = {"A": 0, "B": 1, "Center": 2, "D": 3, "E": 4}
POINT_XZ = ((-15.0, -15.0), (15.0, -15.0), (0.0, 0.0), (-15.0, 15.0), (15.0, 15.0))
NEUTRAL, BLUE, RED = -1, 0, 1
FAR_CORNER = (-28.0, 28.0)  # outside every capture zone


def idle_actions(shape: tuple[int, ...]) -> dict:
    """A valid batch of ``idle`` actions with every entry present; ``shape`` is (B, A) or (A,)."""
    return {
        "tool": np.full(shape, TOOLS["idle"], np.int64),
        "move_to": np.tile(np.array([0.0, 0.0, 1.0], np.float32), shape + (1,)),
        "collect": np.zeros(shape, np.int64),
        "craft": np.zeros(shape + (2,), np.int64),
        "query_world": {"radius": np.full(shape + (1,), 20.0, np.float32), "filter": np.zeros(shape, np.int64)},
        "send_message": np.zeros(shape + (2,), np.int64),
    }


def copy_action(action):
    if isinstance(action, dict):
        return {k: copy_action(v) for k, v in action.items()}
    return np.array(action, copy=True)


def agent_action(batch: dict, b: int, a: int) -> dict:
    """Agent ``a`` of world ``b``'s action of a vector batch, in the form the parallel env takes."""
    return {k: agent_action(v, b, a) if isinstance(v, dict) else np.array(v[b, a], copy=True)
            for k, v in batch.items()}


def random_actions(rng: np.random.Generator, shape: tuple[int, int], agents_per_team: int,
                   half_size: float = 30.0, vocab: int = 16) -> dict:
    """A seeded, valid, varied batch that also walks agents onto the capture points and talks a lot."""
    tool = rng.choice(7, size=shape, p=[0.3, 0.05, 0.05, 0.05, 0.05, 0.3, 0.2])
    xz = rng.uniform(-half_size, half_size, shape + (2,))
    to_point = rng.random(shape) < 0.6
    point = np.asarray(POINT_XZ)[rng.integers(0, 5, shape)] + rng.uniform(-2, 2, shape + (2,))
    xz = np.where(to_point[..., None], point, xz)
    return {
        "tool": tool.astype(np.int64),
        "move_to": np.concatenate([xz, rng.uniform(0.1, 2.0, shape + (1,))], -1).astype(np.float32),
        "collect": np.zeros(shape, np.int64),
        "craft": np.zeros(shape + (2,), np.int64),
        "query_world": {"radius": rng.uniform(1, 50, shape + (1,)).astype(np.float32),
                        "filter": rng.integers(0, 5, shape)},
        "send_message": np.stack([rng.integers(0, vocab, shape), rng.integers(0, agents_per_team + 1, shape)], -1),
    }


class TeamWorld:
    """A vector env whose agents tests place by hand; every step goes through ``VectorEnv.step``.

    Agents are indexed along the agent axis: blue ``0..N-1``, red ``N..2N-1``. All start in
    a far corner, outside every zone, standing still.
    """

    def __init__(self, num_envs: int = 1, agents_per_team: int = 2, seed: int = 0, **kwargs):
        self.envs = team_capture_v0.vector_env(num_envs=num_envs, agents_per_team=agents_per_team, **kwargs)
        self.obs, self.info = self.envs.reset(seed=seed)
        self.n, self.N, self.A = num_envs, agents_per_team, 2 * agents_per_team
        self.scenario = self.envs.scenario
        self.state = self.envs.state
        for b in range(num_envs):
            for a in range(self.A):
                self.place(b, a, *FAR_CORNER)

    def place(self, b: int, a: int, x: float, z: float) -> None:
        s = self.state
        s.x[b, a] = s.target_x[b, a] = x
        s.z[b, a] = s.target_z[b, a] = z
        s.moving[b, a] = False

    def to_point(self, b: int, a: int, point: str, dx: float = 0.0, dz: float = 0.0) -> None:
        x, z = POINT_XZ[POINTS[point]]
        self.place(b, a, x + dx, z + dz)

    def actions(self) -> dict:
        return idle_actions((self.n, self.A))

    def step(self, action: dict | None = None):
        out = self.envs.step(self.actions() if action is None else action)
        self.obs, self.info = out[0], out[4]
        return out

    def steps(self, count: int):
        for _ in range(count):
            out = self.step()
        return out

    def say(self, b: int, a: int, token: int, target: int = 0):
        """Agent ``a`` of world ``b`` sends ``token`` (target 0 = all teammates); everyone else idles."""
        action = self.actions()
        action["tool"][b, a] = TOOLS["send_message"]
        action["send_message"][b, a] = (token, target)
        return self.step(action)

    @property
    def owner(self) -> np.ndarray:
        return self.state.extra["point_owner"]

    @property
    def progress(self) -> np.ndarray:
        return self.state.extra["point_progress"]

    @property
    def score(self) -> np.ndarray:
        return self.state.extra["score"]


class SidesTeam:
    """A hand-made blue team, the reference of what is winnable against the scripted team (it is
    no trained policy and ships nowhere): agent 1 keeps the south points A and B, agent 2 the
    north ones D and E, agent 3 the Center; each walks to the nearest point of its side that its
    team does not own or that the enemy is taking, and stays put when there is none. Decisions
    are held ``every`` ticks, or with ``on_events`` until a team capture event (and ``every``
    ticks at most), as a league's learner holds them."""

    SIDES = ((POINTS["A"], POINTS["B"]), (POINTS["D"], POINTS["E"]), (POINTS["Center"],))

    def __init__(self, envs, every: int = 1, on_events: bool = False):
        from arena_envs.pretrained import HeldDecisions

        self.held = HeldDecisions(every, envs.unwrapped.scenario.params.max_ticks, on_events)

    def act(self, obs: dict) -> dict:
        points, agent = obs["points"], obs["agent"]  # (B, N, P, 7), (B, N, 7)
        B, N = agent.shape[:2]
        actions = idle_actions((B, N))
        for i in range(N):  # a few agents: the loop is over them, never over worlds
            side = np.array(self.SIDES[i % len(self.SIDES)])
            mine = points[:, i, side]  # (B, S, 7)
            wanted = (mine[..., 3] == 0) | (mine[..., 6] > 0)
            k = np.where(wanted, mine[..., 2], np.inf).argmin(1)
            go = wanted.any(1)
            target = side[k]
            actions["tool"][:, i] = np.where(go, TOOLS["move_to"], TOOLS["idle"])
            actions["move_to"][:, i, 0] = agent[:, i, 0] + points[np.arange(B), i, target, 0]
            actions["move_to"][:, i, 1] = agent[:, i, 1] + points[np.arange(B), i, target, 1]
        return self.held(obs, actions)
